// CLI dispatcher: `loom <command> [args]` runs src/cli/<command>.ts, whose `main(argv)` returns an
// exit code. Add a command by adding a file; nothing here needs to change.
import { existsSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const here = fileURLToPath(new URL('.', import.meta.url));
const commands = () => readdirSync(here).filter((f) => f.endsWith('.ts') && f !== 'index.ts' && !f.startsWith('_')).map((f) => f.slice(0, -3)).sort();

export async function run(argv: string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  if (!cmd || cmd === 'help' || cmd === '--help' || cmd === '-h') {
    console.log(`usage: loom <command> [options]\n\ncommands: ${commands().join(', ')}\nrun \`loom <command> --help\` for a command's options`);
    return cmd ? 0 : 1;
  }
  if (!/^[a-z][a-z0-9-]*$/.test(cmd) || !existsSync(new URL(`./${cmd}.ts`, import.meta.url))) {
    console.error(`loom: unknown command ${cmd} (commands: ${commands().join(', ')})`);
    return 2;
  }
  const mod = (await import(new URL(`./${cmd}.ts`, import.meta.url).href)) as { main(argv: string[]): Promise<number | void> };
  return (await mod.main(rest)) ?? 0;
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  run(process.argv.slice(2)).then((code) => process.exit(code), (err) => {
    console.error(`loom: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  });
}
