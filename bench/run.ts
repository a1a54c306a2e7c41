// Benchmark harness: `npm run bench -- <name> [args]` runs bench/<name>.ts, which exports
// `run(argv: string[])`. `npm run bench` alone lists the benchmarks. Common flags (each bench
// reads its own): --quick (short development run), --json (one JSON object per line).
import { readdirSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const here = import.meta.dirname;
const names = readdirSync(here)
  .filter((f) => f.endsWith('.ts') && f !== 'run.ts' && !f.endsWith('.d.ts'))
  .map((f) => f.slice(0, -3));

const [name, ...argv] = process.argv.slice(2);
if (!name || name === '--help' || name === '-h') {
  console.log(`usage: npm run bench -- <name> [--quick] [--json] [...]\n`);
  console.log(`benchmarks: ${names.join(', ')}`);
  process.exit(name ? 0 : 1);
}
if (!names.includes(name)) {
  console.error(`unknown benchmark '${name}'; available: ${names.join(', ')}`);
  process.exit(1);
}
const mod = (await import(pathToFileURL(join(here, `${name}.ts`)).href)) as { run?: (argv: string[]) => unknown };
if (typeof mod.run !== 'function') {
  console.error(`bench/${name}.ts does not export run(argv)`);
  process.exit(1);
}
await mod.run(argv);
