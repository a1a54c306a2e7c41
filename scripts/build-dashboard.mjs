#!/usr/bin/env node
// Builds the dashboard (dashboard/ → dashboard/dist) with Vite. Run by `npm install` after the native
// addon, and by `npm run build:dashboard`. Without the dev dependencies (npm install --omit=dev) it
// says so and exits 0: the server then answers /dashboard/ with a 503 naming this command.
import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');
const require = createRequire(import.meta.url);
let vite;
try {
  vite = await import(require.resolve('vite', { paths: [root] }));
} catch {
  console.warn(
    'loom: vite is not installed (dev dependencies omitted?): the dashboard is not built; ' +
      'run `npm install` then `npm run build:dashboard`',
  );
  process.exit(0);
}
const t0 = Date.now();
await vite.build({ configFile: join(root, 'dashboard', 'vite.config.ts'), logLevel: 'warn' });
if (!existsSync(join(root, 'dashboard', 'dist', 'index.html'))) {
  console.error('loom: the dashboard build wrote no index.html');
  process.exit(1);
}
console.log(`loom: dashboard built into dashboard/dist in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
