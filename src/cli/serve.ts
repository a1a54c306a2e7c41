// `loom serve [--role api|inference|worker|all]`: the service (server/main.ts, which `npm start` runs),
// with LOOM_ROLE set from --role. Roles are documented in docs/deploy.md; the default is all of them.
import { parseRoles } from '../service/config.ts';

export async function main(argv: string[]): Promise<number> {
  let role: string | undefined;
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--help' || a === '-h') {
      console.log('usage: loom serve [--role all|api|inference|worker[,...]]\n'
        + '  environment as for `npm start` (README, "Running the service"; docs/deploy.md)');
      return 0;
    }
    if (a === '--role') role = argv[++i];
    else if (a.startsWith('--role=')) role = a.slice('--role='.length);
    else {
      console.error(`loom serve: unknown option ${a}`);
      return 2;
    }
  }
  if (role !== undefined) {
    try {
      parseRoles(role);
    } catch (err) {
      console.error(`loom serve: ${(err as Error).message}`);
      return 2;
    }
    process.env.LOOM_ROLE = role;
  }
  await import('../../server/main.ts');
  // the server runs until a signal; server/main.ts exits the process then
  return new Promise<number>(() => {});
}
