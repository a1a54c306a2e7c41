// The embedded store: one LMDB environment under <dataDir>/store, one named database per table.
// lmdb-js runs a write transaction's callback synchronously, and a Loom transaction is an async
// function, so a transaction here is optimistic:
//   - transactions of this process run one at a time (an in-process lock, in call order);
//   - `fn` reads committed data through the writes of this process's earlier transactions that are
//     queued but not yet flushed (`pending`), and its own writes (TxKv's buffer); each point read is
//     remembered;
//   - its buffered writes are queued as one lmdb write transaction, and the lock passes to the next
//     transaction at once, so commits of many transactions share one fsync (lmdb-js batches them);
//   - inside that write transaction every remembered read is compared with the value there: another
//     process (`loom admin`) may have committed in between. A difference writes nothing and runs
//     `fn` again (bounded), so a concurrent grant and debit never lose one another.
// The returned promise resolves once the commit is durable (fsync), as before.
import { existsSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { open, type Database } from 'lmdb';
import { DependencyUnavailableError } from '../service/errors.ts';
import {
  AUTH_GENERATION, compareKeys, type Db, DB_NAMES, type DbName, DELETED, keyFits, type KvEntry, type KvRange,
  type KvRead, makeMutex, TxKv, type Writes,
} from './db.ts';

/** runs of `fn` before a transaction that keeps meeting other processes' writes gives up (503) */
const MAX_ATTEMPTS = 20;

/** The LMDB environment's folder under a data directory. */
export function storePath(dataDir: string): string {
  return join(dataDir, 'store');
}

/** Does `dataDir` hold a store already (opening one creates it)? */
export function storeExists(dataDir: string): boolean {
  return existsSync(join(storePath(dataDir), 'data.mdb'));
}

function rangeOf(d: Database<any, string>, r: KvRange = {}): KvEntry[] {
  if ((r.gte !== undefined && !keyFits(r.gte)) || (r.lt !== undefined && !keyFits(r.lt))) return [];
  const out: KvEntry[] = [];
  // lmdb's reverse range starts at `start` inclusive (skip a key equal to `lt`) ...
  const opts = r.reverse ? { start: r.lt, end: r.gte, reverse: true } : { start: r.gte, end: r.lt };
  for (const e of d.getRange(opts) as Iterable<KvEntry>) {
    if (r.reverse && e.key === r.lt) continue;
    out.push({ key: e.key, value: e.value });
    if (r.limit !== undefined && out.length >= r.limit) return out;
  }
  // ... and ends before `end` (exclusive): a key equal to `gte` comes last
  if (r.reverse && r.gte !== undefined) {
    const v = d.get(r.gte);
    if (v !== undefined) out.push({ key: r.gte, value: v });
  }
  return out;
}

/** same record: both absent, or equal as JSON (records are plain JSON values) */
function same(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (a === undefined || b === undefined || a === null || b === null) return false;
  return JSON.stringify(a) === JSON.stringify(b);
}

export async function openLmdb(dataDir: string): Promise<Db> {
  const path = storePath(dataDir);
  mkdirSync(path, { recursive: true });
  const fresh = !existsSync(join(path, 'data.mdb'));
  const root = open({ path, maxDbs: 32, mapSize: 2 ** 34, noSync: false, overlappingSync: false });
  const dbs = {} as Record<DbName, Database<any, string>>;
  const openAll = () => { for (const name of DB_NAMES) dbs[name] = root.openDB<any, string>({ name }); };
  // a new store creates its sub-databases in one write transaction: one commit and fsync instead of one
  // each (~150 ms of fsyncs on a new store); an existing store opens them without taking the write lock
  if (fresh) root.transactionSync(openAll);
  else openAll();

  const read: KvRead = {
    async get(t, k) { return keyFits(k) ? dbs[t].get(k) : undefined; },
    async getMany(t, keys) {
      const out: any[] = [];
      for (const k of keys) {
        const v = keyFits(k) ? dbs[t].get(k) : undefined;
        if (v !== undefined) out.push(v);
      }
      return out;
    },
    async range(t, r) { return rangeOf(dbs[t], r); },
  };

  // writes of this process's transactions queued for commit, newest per key; removed once committed
  const pending = new Map<DbName, Map<string, { value: unknown; seq: number }>>();
  const pendingValue = (t: DbName, k: string): { v: unknown } | undefined => {
    const p = pending.get(t)?.get(k);
    return p ? { v: p.value === DELETED ? undefined : p.value } : undefined;
  };
  let seq = 0;
  const inFlight = new Set<Promise<unknown>>();
  const mutex = makeMutex();

  /** one attempt's reader: committed data through `pending`, point reads remembered */
  function attemptReader(reads: Array<[DbName, string, unknown]>): KvRead {
    const get = (t: DbName, k: string) => {
      const p = pendingValue(t, k);
      const v = p ? p.v : keyFits(k) ? dbs[t].get(k) : undefined;
      reads.push([t, k, v]);
      return v;
    };
    return {
      async get(t, k) { return get(t, k); },
      async getMany(t, keys) { return keys.map((k) => get(t, k)).filter((v) => v !== undefined); },
      async range(t, r = {}) {
        const base = rangeOf(dbs[t], { ...r, limit: undefined });
        const p = pending.get(t);
        if (!p || p.size === 0) return r.limit === undefined ? base : base.slice(0, r.limit);
        const merged = new Map<string, unknown>(base.map((e) => [e.key, e.value]));
        for (const [k, { value }] of p) {
          if ((r.gte === undefined || k >= r.gte) && (r.lt === undefined || k < r.lt)) merged.set(k, value);
        }
        const keys = [...merged.keys()].filter((k) => merged.get(k) !== DELETED).sort(compareKeys);
        if (r.reverse) keys.reverse();
        const out = keys.map((key) => ({ key, value: merged.get(key) }));
        return r.limit === undefined ? out : out.slice(0, r.limit);
      },
    };
  }

  /** inside lmdb's write transaction: check the reads, apply the writes; false on a conflict */
  function commitSync(reads: Array<[DbName, string, unknown]>, writes: Writes): boolean {
    for (const [t, k, v] of reads) if (!same(keyFits(k) ? dbs[t].get(k) : undefined, v)) return false;
    for (const [t, m] of writes) {
      for (const [k, v] of m) {
        if (v === DELETED) dbs[t].remove(k);
        else dbs[t].put(k, v);
      }
    }
    return true;
  }

  async function tx<T>(fn: (h: TxKv) => Promise<T> | T): Promise<T> {
    for (let attempt = 1; ; attempt++) {
      const release = await mutex.lock();
      let committed: Promise<boolean>;
      let result: T;
      const mySeq = ++seq;
      let writes: Writes;
      try {
        const reads: Array<[DbName, string, unknown]> = [];
        const h = new TxKv(attemptReader(reads));
        try { result = await fn(h); } finally { h.sealed = true; }
        writes = h.writes;
        const nothing = [...writes.values()].every((m) => m.size === 0);
        if (nothing) return result; // read only: nothing to commit
        // the child transaction makes a throwing write (a key past LMDB's bound) roll back the rest
        committed = root.transaction(() => root.childTransaction(() => commitSync(reads, writes))) as unknown as Promise<boolean>;
        for (const [t, m] of writes) {
          let p = pending.get(t);
          if (!p) pending.set(t, (p = new Map()));
          for (const [k, value] of m) p.set(k, { value, seq: mySeq });
        }
      } finally {
        release();
      }
      const done = committed.finally(() => {
        for (const [t, m] of writes) {
          const p = pending.get(t)!;
          for (const k of m.keys()) if (p.get(k)?.seq === mySeq) p.delete(k);
        }
      });
      inFlight.add(done);
      try {
        if (await done) return result;
      } finally {
        inFlight.delete(done);
      }
      if (attempt >= MAX_ATTEMPTS) {
        throw new DependencyUnavailableError('The store is busy with concurrent writes; retry the request', 1);
      }
    }
  }

  let closed = false;
  return {
    kind: 'lmdb',
    read,
    tx,
    authGeneration: () => (dbs.meta.get(AUTH_GENERATION) as number | undefined) ?? 0,
    onCommit(fn) { (root as unknown as { on(event: 'aftercommit', cb: () => void): void }).on('aftercommit', fn); },
    async settled() { await Promise.allSettled([...inFlight]); await root.committed; },
    async ping() { dbs.meta.get('schema_version'); },
    async close() {
      if (closed) return;
      closed = true;
      await Promise.allSettled([...inFlight]);
      await root.committed;
      await root.close();
    },
  };
}
