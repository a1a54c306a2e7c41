// The storage interface every repository is written against, and what both implementations share.
// A store is a set of named tables of string keys → JSON records, plus `idx`, which holds every
// secondary index as string keys (`<index>|<part>|...|<id>`), and `meta` (schema version, counters).
// Two implementations: LMDB (lmdb.ts, the embedded default) and PostgreSQL (postgres/, chosen by
// LOOM_DATABASE_URL). Reads outside a transaction see committed data. `tx(fn)` runs `fn` with a
// transaction handle: its reads see its own writes, its writes commit together when `fn` resolves or
// not at all when it throws; an acknowledged commit is durable. `fn` may run more than once when a
// concurrent writer (another process) changed what it read: it must do nothing but store reads and
// writes (and pure computation).

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
  // inference nodes' registrations and heartbeats (src/service/nodes)
  'inference_nodes',
  // which process runs an in-flight job (src/store/leases.ts)
  'leases',
] as const;
export type DbName = (typeof DB_NAMES)[number];

export interface KvEntry { key: string; value: any }
/** keys in [gte, lt) (string order of their UTF-8 bytes), ascending or, with `reverse`, descending */
export interface KvRange { gte?: string; lt?: string; reverse?: boolean; limit?: number }

export interface KvRead {
  /** the record, or undefined */
  get(table: DbName, key: string): Promise<any>;
  /** the records of `keys` that exist, in the order of `keys` */
  getMany(table: DbName, keys: string[]): Promise<any[]>;
  range(table: DbName, r?: KvRange): Promise<KvEntry[]>;
}

/** reads and, inside a transaction, writes (buffered until the commit) */
export interface Kv extends KvRead {
  readonly inTx: boolean;
  put(table: DbName, key: string, value: unknown): void;
  remove(table: DbName, key: string): void;
}

export interface TxOptions {
  /**
   * false: the commit may be acknowledged before it is on disk (PostgreSQL's synchronous_commit off
   * for this transaction; LMDB ignores it). For writes whose loss in a database crash costs nothing
   * (a credit hold that only lives while its call runs); still atomic, isolated and seen by every
   * later transaction at once, and on disk before any later durable commit is acknowledged.
   */
  durable?: boolean;
}

export interface Db {
  kind: 'lmdb' | 'postgres';
  /** committed reads (outside any transaction) */
  read: KvRead;
  /** run `fn` inside one transaction (see the top of this file) */
  tx<T>(fn: (h: Kv) => Promise<T> | T, opts?: TxOptions): Promise<T>;
  /** the auth generation (see below): synchronous where reading it costs nothing (LMDB) */
  authGeneration(): number | Promise<number>;
  /** calls `fn` after each transaction of this process commits (a cache of store reads drops itself there) */
  onCommit(fn: () => void): void;
  /** resolves once every transaction this process started has committed or failed */
  settled(): Promise<void>;
  /** a cheap round trip to the storage: throws when it is unreachable */
  ping(): Promise<void>;
  close(): Promise<void>;
}

/**
 * LMDB's largest key, in bytes (strings are stored as UTF-8). No record or index entry can have a
 * longer key, so a lookup with one finds nothing: `get` / `remove` and `scanIndex` answer "not
 * found" for it instead of the RangeError lmdb raises (a caller's 5,000-byte model id or dataset
 * name is a 404, never a 500). Both implementations apply the same bound, so they answer alike.
 */
export const MAX_KEY_BYTES = 1978;
export const keyFits = (key: unknown): boolean =>
  typeof key !== 'string' || key.length * 3 <= MAX_KEY_BYTES || Buffer.byteLength(key) <= MAX_KEY_BYTES;

// Parts are URI-encoded and joined with '|' (printable: lmdb's ordered-binary key codec reads
// strings holding control characters back as arrays).
const SEP = '|';
export const KEY_END = '\uffff';

/** Index key from its parts. Numbers (timestamps) are zero-padded so they sort as strings. */
export function ikey(...parts: (string | number)[]): string {
  return parts.map((p) => (typeof p === 'number' ? String(Math.max(0, Math.floor(p))).padStart(15, '0') : encodeURIComponent(p))).join(SEP);
}

/** Ids (last part) of the index entries under `prefix`, newest (largest key) first by default. */
export async function scanIndex(
  h: KvRead, prefix: (string | number)[],
  opts: { reverse?: boolean; from?: (string | number)[]; to?: (string | number)[] } = {},
): Promise<string[]> {
  const p = ikey(...prefix) + SEP;
  const lo = opts.from ? ikey(...prefix, ...opts.from) : p;
  const hi = opts.to ? ikey(...prefix, ...opts.to) : p + KEY_END;
  if (!keyFits(lo) || !keyFits(hi)) return []; // every entry ends in an id: none can lie past a bound this long
  const out: string[] = [];
  for (const { key } of await h.range('idx', { gte: lo, lt: hi, reverse: opts.reverse ?? true })) {
    if (!key.startsWith(p)) continue;
    out.push(decodeURIComponent(key.slice(key.lastIndexOf(SEP) + 1)));
  }
  return out;
}

/** the records of a table named by an index scan */
export async function scanRecords<T>(
  h: KvRead, table: DbName, prefix: (string | number)[], opts?: Parameters<typeof scanIndex>[2],
): Promise<T[]> {
  return h.getMany(table, await scanIndex(h, prefix, opts)) as Promise<T[]>;
}

/** inside a transaction: removes record `id` of `table` and its one index entry (`keyOf`), if it exists */
export async function removeIndexed<T>(h: Kv, table: DbName, id: string, keyOf: (r: T) => string): Promise<void> {
  const r = (await h.get(table, id)) as T | undefined;
  if (!r) return;
  h.remove('idx', keyOf(r));
  h.remove(table, id);
}

/** every record of a table, in key order */
export async function allRecords<T>(h: KvRead, table: DbName): Promise<T[]> {
  return (await h.range(table)).map((e) => e.value as T);
}

/**
 * A value in `meta` that every write of an API key or team record replaces, in the same
 * transaction, whichever process writes (the server, `loom admin`, another server on the same
 * PostgreSQL): a cache of authenticated keys stays valid while it is unchanged, so revoking a key or
 * blocking a team applies on the very next request, also from another process. A fresh random
 * number rather than a count, so a write needs no read. Usage counters (keys.bump) do not change it:
 * they change nothing authentication reads.
 */
export const AUTH_GENERATION = 'auth_generation';
/** inside a transaction */
export function bumpAuthGeneration(h: Kv): void {
  h.put('meta', AUTH_GENERATION, Math.floor(Math.random() * 2 ** 52));
}

export interface Migration {
  /** version this migration produces */
  to: number;
  description: string;
  /** runs inside one transaction */
  run(h: Kv): Promise<void>;
}

/** The in-process write lock: transactions of one store run one at a time, in call order. */
export function makeMutex() {
  let tail: Promise<void> = Promise.resolve();
  return {
    lock(): Promise<() => void> {
      let release!: () => void;
      const next = new Promise<void>((r) => { release = r; });
      const prev = tail;
      tail = prev.then(() => next);
      return prev.then(() => release);
    },
  };
}

/** a deleted key in a write buffer */
export const DELETED: unique symbol = Symbol('deleted');
export type Writes = Map<DbName, Map<string, unknown>>;

/**
 * A transaction's handle over a reader: writes go to a buffer that later reads see (its own writes);
 * the implementation commits `writes` at the end.
 */
export class TxKv implements Kv {
  readonly inTx = true;
  readonly writes: Writes = new Map();
  /** set when the transaction ended: a later write is a bug (a missing await), never silently lost */
  sealed = false;
  constructor(private readonly base: KvRead) {}

  private buf(table: DbName): Map<string, unknown> {
    let m = this.writes.get(table);
    if (!m) this.writes.set(table, (m = new Map()));
    return m;
  }
  put(table: DbName, key: string, value: unknown): void {
    if (this.sealed) throw new Error(`store: write of ${table}/${key} after its transaction ended (a missing await?)`);
    if (value === undefined) throw new Error(`store: undefined value for ${table}/${key}`);
    this.buf(table).set(key, value);
  }
  remove(table: DbName, key: string): void {
    if (this.sealed) throw new Error(`store: removal of ${table}/${key} after its transaction ended (a missing await?)`);
    if (keyFits(key)) this.buf(table).set(key, DELETED);
  }
  async get(table: DbName, key: string): Promise<any> {
    const w = this.writes.get(table);
    if (w?.has(key)) { const v = w.get(key); return v === DELETED ? undefined : v; }
    return this.base.get(table, key);
  }
  async getMany(table: DbName, keys: string[]): Promise<any[]> {
    const w = this.writes.get(table);
    if (!w) return this.base.getMany(table, keys);
    const rest = keys.filter((k) => !w.has(k));
    const found = new Map<string, unknown>();
    if (rest.length) {
      const got = await Promise.all(rest.map((k) => this.base.get(table, k)));
      rest.forEach((k, i) => { if (got[i] !== undefined) found.set(k, got[i]); });
    }
    const out: any[] = [];
    for (const k of keys) {
      const v = w.has(k) ? w.get(k) : found.get(k);
      if (v !== undefined && v !== DELETED) out.push(v);
    }
    return out;
  }
  async range(table: DbName, r: KvRange = {}): Promise<KvEntry[]> {
    const w = this.writes.get(table);
    if (!w || w.size === 0) return this.base.range(table, r);
    const inRange = (k: string) => (r.gte === undefined || k >= r.gte) && (r.lt === undefined || k < r.lt);
    const mine = [...w].filter(([k]) => inRange(k));
    if (mine.length === 0) return this.base.range(table, r);
    const limit = r.limit === undefined ? undefined : r.limit + mine.length;
    const merged = new Map<string, unknown>();
    for (const e of await this.base.range(table, { ...r, limit })) merged.set(e.key, e.value);
    for (const [k, v] of mine) merged.set(k, v);
    const keys = [...merged.keys()].filter((k) => merged.get(k) !== DELETED).sort(compareKeys);
    if (r.reverse) keys.reverse();
    const out = keys.map((key) => ({ key, value: merged.get(key) }));
    return r.limit === undefined ? out : out.slice(0, r.limit);
  }
}

/** the stores' key order: UTF-8 bytes (JS string order differs only past U+FFFF, which keys do not hold) */
export const compareKeys = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0);

/** committed reads have no writes: the handle the store's own repositories read through */
export function readOnly(read: KvRead): Kv {
  return {
    inTx: false,
    get: (t, k) => read.get(t, k),
    getMany: (t, k) => read.getMany(t, k),
    range: (t, r) => read.range(t, r),
    put: (t, k) => { throw new Error(`store: write of ${t}/${k} outside a transaction (use store.tx(async (t) => ...))`); },
    remove: (t, k) => { throw new Error(`store: removal of ${t}/${k} outside a transaction (use store.tx(async (t) => ...))`); },
  };
}

/**
 * Calls `fn` after each write transaction of this process commits (lmdb's `aftercommit`; after COMMIT on PostgreSQL): a cache of
 * store reads drops itself here, so this process's writes are seen by the very next read of it.
 */
export function onCommit(db: Db, fn: () => void): void {
  db.onCommit(fn);
}
