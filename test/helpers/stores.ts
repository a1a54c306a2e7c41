// The store implementations the same tests run against: LMDB (always) and PostgreSQL (when its
// server binaries are installed; one throwaway cluster per test file, a fresh database per store).
// `eachStore(t, 'name', fn)` runs `fn` as a subtest per implementation with a `fresh()` that makes
// an empty store's options (a temp data dir, and for PostgreSQL a new database URL), and skips the
// PostgreSQL variant with the reason when the binaries are absent.
import type { Test } from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { postgresMissing, startPostgres, type TestPostgres } from './postgres.ts';

export interface StoreTarget { dataDir: string; databaseUrl: string | null }
export type StoreKind = 'lmdb' | 'postgres';

let cluster: Promise<TestPostgres> | null = null;
let closing = false;

export function eachStore(
  t: Test, name: string, fn: (t: Test, fresh: () => Promise<StoreTarget>, kind: StoreKind) => Promise<void>,
): void {
  for (const kind of ['lmdb', 'postgres'] as const) {
    const missing = kind === 'postgres' ? postgresMissing() : null;
    if (missing) {
      t.test(`${name} (${kind})`, { skip: `PostgreSQL variant: ${missing}` }, async () => {});
      continue;
    }
    if (kind === 'postgres' && !closing) {
      // `t` is the file's top-level test: the cluster lives until the file ends
      closing = true;
      t.teardown(async () => { if (cluster) await (await cluster).close(); });
    }
    t.test(`${name} (${kind})`, async (t) => {
      if (kind === 'postgres') cluster ??= startPostgres();
      const fresh = async (): Promise<StoreTarget> => {
        const dataDir = mkdtempSync(join(tmpdir(), 'loom-store-'));
        t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
        return { dataDir, databaseUrl: kind === 'postgres' ? await (await cluster!).createDb() : null };
      };
      await fn(t, fresh, kind);
    });
  }
}
