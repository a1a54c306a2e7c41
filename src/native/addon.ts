// Loads the native addon (build/Release/loom.node, or LOOM_ADDON) once per process / worker.
import { createRequire } from 'node:module';
import { existsSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const require = createRequire(import.meta.url);
const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..');

/** The raw addon: a bag of functions registered by native/napi/*.cc. Use the typed wrappers. */
// eslint-disable-next-line @typescript-eslint/no-explicit-any
export type Addon = Record<string, any>;

function load(): Addon {
  const candidates = [process.env.LOOM_ADDON && resolve(process.env.LOOM_ADDON), join(root, 'build', 'Release', 'loom.node')].filter(Boolean) as string[];
  for (const p of candidates) {
    if (existsSync(p)) return require(p) as Addon;
  }
  throw new Error(
    `loom: native addon not found (looked in ${candidates.join(', ')}). Run \`npm install\` or \`npm run build:native\`.`,
  );
}

export const addon: Addon = load();
