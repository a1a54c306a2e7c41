// The LMDB environment: one file set under <dataDir>/store, one named database per resource, one
// `idx` database holding every secondary index as string keys (`<index>|<part>|...|<id>`), and
// `meta` with the schema version. Opening an older store runs the migrations in order.
// Writes go through `tx()` (an lmdb write transaction: all puts inside commit together or not at all);
// commits are durable (fsync) so a killed process never loses an acknowledged write.
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { open, type Database, type RootDatabase } from 'lmdb';

export const SCHEMA_VERSION = 2;

export const DB_NAMES = [
  'meta', 'idx', 'users', 'teams', 'sessions', 'keys', 'accounts', 'usage', 'inferences', 'feedback',
  // LLM-as-judge configurations and queue (store/judges.ts)
  'judges',
  'examples', 'projects', 'deployments', 'training_jobs',
  // customization (datasets, uploads, training logs/checkpoints, evaluations, generation jobs)
  'datasets', 'dataset_versions', 'uploads', 'training_logs', 'checkpoints', 'evaluations', 'generation_jobs',
  // adaptive inference: retraining runs (src/service/adaptive)
  'adaptive_runs',
] as const;
export type DbName = (typeof DB_NAMES)[number];

export interface Db {
  root: RootDatabase;
  dbs: Record<DbName, Database<any, string>>;
  /** run `fn` inside one write transaction; its reads see its own writes; a throw rolls it all back */
  tx<T>(fn: () => T): Promise<T>;
}

/**
 * LMDB's largest key, in bytes (strings are stored as UTF-8). No record or index entry can have a
 * longer key, so a lookup with one finds nothing: the repos' `get` / `remove` and `scanIndex`
 * answer "not found" for it instead of the RangeError lmdb raises (a caller's 5,000-byte model id
 * or dataset name is a 404, never a 500). One bound, checked here before any LMDB call.
 */
export const MAX_KEY_BYTES = 1978;
export const keyFits = (key: unknown): boolean =>
  typeof key !== 'string' || key.length * 3 <= MAX_KEY_BYTES || Buffer.byteLength(key) <= MAX_KEY_BYTES;

function guardKeys(d: Database<any, string>): Database<any, string> {
  const get = d.get;
  const remove = d.remove;
  d.get = function (this: Database<any, string>, key: string, ...rest: unknown[]) {
    return keyFits(key) ? (get as (...a: unknown[]) => unknown).call(this, key, ...rest) : undefined;
  } as typeof d.get;
  d.remove = function (this: Database<any, string>, key: string, ...rest: unknown[]) {
    return keyFits(key) ? (remove as (...a: unknown[]) => unknown).call(this, key, ...rest) : Promise.resolve(false);
  } as typeof d.remove;
  return d;
}

// Parts are URI-encoded and joined with '|' (printable: lmdb's ordered-binary key codec reads
// strings holding control characters back as arrays).
const SEP = '|';
const END = '\uffff';

/** Index key from its parts. Numbers (timestamps) are zero-padded so they sort as strings. */
export function ikey(...parts: (string | number)[]): string {
  return parts.map((p) => (typeof p === 'number' ? String(Math.max(0, Math.floor(p))).padStart(15, '0') : encodeURIComponent(p))).join(SEP);
}

/** Ids (last part) of the index entries under `prefix`, newest (largest key) first by default. */
export function* scanIndex(db: Db, prefix: (string | number)[], opts: { reverse?: boolean; from?: (string | number)[]; to?: (string | number)[] } = {}): Generator<string> {
  const p = ikey(...prefix) + SEP;
  const lo = opts.from ? ikey(...prefix, ...opts.from) : p;
  const hi = opts.to ? ikey(...prefix, ...opts.to) : p + END;
  if (!keyFits(lo) || !keyFits(hi)) return; // every entry ends in an id: none can lie past a bound this long
  const reverse = opts.reverse ?? true;
  const range = reverse ? { start: hi, end: lo, reverse: true } : { start: lo, end: hi };
  for (const key of db.dbs.idx.getKeys(range) as Iterable<string>) {
    if (!key.startsWith(p)) continue;
    yield decodeURIComponent(key.slice(key.lastIndexOf(SEP) + 1));
  }
}

/**
 * A counter in `meta` that every write of an API key or team record increments, in the same
 * transaction, whichever process writes (the server, `loom admin`): a cache of authenticated keys
 * stays valid while it is unchanged, so revoking a key or blocking a team applies on the very next
 * request, also from another process. Usage counters (keys.bump) do not count: they change nothing
 * authentication reads.
 */
const AUTH_GENERATION = 'auth_generation';
export const authGeneration = (db: Db): number => (db.dbs.meta.get(AUTH_GENERATION) as number | undefined) ?? 0;
/** inside a transaction */
export function bumpAuthGeneration(db: Db): void {
  db.dbs.meta.put(AUTH_GENERATION, authGeneration(db) + 1);
}

export interface Migration {
  /** version this migration produces */
  to: number;
  description: string;
  run(db: Db): void; // runs inside one write transaction
}

/** The LMDB environment's folder under a data directory. */
export function storePath(dataDir: string): string {
  return join(dataDir, 'store');
}

/** Does `dataDir` hold a store already (opening one creates it)? */
export function storeExists(dataDir: string): boolean {
  return existsSync(join(storePath(dataDir), 'data.mdb'));
}

export function openDb(dataDir: string, migrations: Migration[]): Promise<Db> {
  const path = storePath(dataDir);
  mkdirSync(path, { recursive: true });
  const root = open({ path, maxDbs: 32, mapSize: 2 ** 34, noSync: false, overlappingSync: false });
  const dbs = {} as Db['dbs'];
  for (const name of DB_NAMES) dbs[name] = guardKeys(root.openDB<any, string>({ name }));
  // the child transaction makes a throwing callback roll back its writes (a plain batched
  // transaction would commit the writes made before the throw)
  const db: Db = { root, dbs, tx: <T>(fn: () => T) => root.transaction(() => root.childTransaction(fn as () => any)) as Promise<T> };
  return migrate(db, migrations).then(() => db);
}

async function migrate(db: Db, migrations: Migration[]): Promise<void> {
  const found = db.dbs.meta.get('schema_version') as number | undefined;
  if (found === undefined) {
    // a fresh store: nothing to migrate
    await db.tx(() => db.dbs.meta.put('schema_version', SCHEMA_VERSION));
    return;
  }
  if (found > SCHEMA_VERSION) {
    throw new Error(`store schema version ${found} is newer than this Loom (${SCHEMA_VERSION}); upgrade Loom`);
  }
  for (const m of migrations.sort((a, b) => a.to - b.to)) {
    if (m.to <= found) continue;
    await db.tx(() => {
      m.run(db);
      db.dbs.meta.put('schema_version', m.to);
    });
  }
  if ((db.dbs.meta.get('schema_version') as number) !== SCHEMA_VERSION) {
    await db.tx(() => db.dbs.meta.put('schema_version', SCHEMA_VERSION));
  }
}

/**
 * Calls `fn` after each write transaction of this process commits (lmdb's `aftercommit`): a cache of
 * store reads drops itself here, so this process's writes are seen by the very next read of it.
 */
export function onCommit(db: Db, fn: () => void): void {
  (db.root as unknown as { on(event: 'aftercommit', cb: () => void): void }).on('aftercommit', fn);
}
