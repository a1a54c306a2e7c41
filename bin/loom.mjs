#!/usr/bin/env node
// `loom <command> [...]`: runs src/cli/index.ts under tsx, which dispatches to src/cli/<command>.ts.
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const tsx = fileURLToPath(new URL('../node_modules/.bin/tsx', import.meta.url));
const entry = fileURLToPath(new URL('../src/cli/index.ts', import.meta.url));
const r = spawnSync(tsx, [entry, ...process.argv.slice(2)], { stdio: 'inherit' });
process.exit(r.status ?? 1);
