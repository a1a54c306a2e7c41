// The PostgreSQL store (LOOM_DATABASE_URL=postgres://...): the same tables and keys as the LMDB
// store, one table per resource (key, value json), so every repository runs unchanged on it and
// several Loom processes (on several machines) share one store.
//
// Schema: the numbered SQL files in migrations/ (NNN_name.sql), each applied once in its own
// transaction and recorded in schema_migrations; a session advisory lock around the whole run makes
// processes that start together migrate once (the others wait, then find nothing to do).
//
// Transactions are SERIALIZABLE: a transaction's reads go to PostgreSQL on its own connection, its
// writes are buffered (TxKv) and sent with COMMIT in one round trip. PostgreSQL's serializable
// snapshot isolation then refuses (40001, or 40P01 for a deadlock) a commit that would contradict
// some serial order, also for reads of rows that did not exist (a unique name taken meanwhile), and
// the whole `fn` runs again (bounded, with jittered backoff). Why serializable rather than READ
// COMMITTED + SELECT ... FOR UPDATE: the repositories read through a generic key-value interface
// and cannot know which reads guard a write (the account row for credits, but also the name index
// for uniqueness, a job's status for its state changes); serializable protects all of them without
// each call site taking the right locks.
//
// Group commit: the `tx` calls of one process are committed in batches, one PostgreSQL transaction
// per batch: while a batch commits, the calls that arrive queue, and the next batch takes all of them
// (up to MAX_BATCH). In a batch each call's `fn` runs in call order on its own handle over the
// batch's, seeing the writes of the calls before it (the serial order); a call whose `fn` throws is
// left out (its writes dropped, its error its own), the rest commit together, and each call is
// answered after the COMMIT. A serialization failure runs the whole batch again; another error
// from the database runs each call alone so that only the one at fault fails. Why batches rather
// than one transaction per call from the pool: every billed call of a team reads and writes its
// account row, so concurrent transactions of one busy team conflict; measured on a 2-core test VM
// (npm run bench -- billed --quick --postgres), four concurrent transactions per process gave up
// after 30 attempts (503) where batching serves every call, and a commit's fsync (the cost that
// bounded one call per transaction at 8-12 calls/s) is now paid once per batch.
//
// Between processes: a batch takes the session advisory lock WRITE_LOCK before BEGIN (so before its
// snapshot), shared on its first attempt: batches of several processes run and commit side by side,
// and SERIALIZABLE refuses the one that conflicts. Its rerun takes the lock alone: it waits for the
// batches in progress, holds off new ones, and so cannot lose again; a busy team's batches then
// follow one another instead of failing each other. Credits stay exact across processes.
//
// A database that cannot be reached (refused, reset, shut down, timed out) is the spec's 503
// (DependencyUnavailableError) for that request, never a crash; the pool reconnects by itself.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { DependencyUnavailableError } from '../../service/errors.ts';
import {
  AUTH_GENERATION, type Db, type DbName, DELETED, keyFits, type KvEntry, type KvRange, type KvRead,
  SCHEMA_VERSION, type TxOptions, TxKv, type Writes,
} from '../db.ts';

const MIGRATIONS_DIR = join(import.meta.dirname, 'migrations');
/** pg_advisory_lock key of the migration run (any fixed 64-bit number: "loom" in ASCII) */
const MIGRATION_LOCK = 0x6c6f6f6d;
/** pg_advisory_lock key that write batches of every process take in turn ("loomw") */
const WRITE_LOCK = 0x6c6f6f6d77;
/** runs of `fn` before a transaction that keeps conflicting with other processes gives up (503) */
const MAX_ATTEMPTS = 30;
/** SQLSTATEs after which the whole transaction runs again */
const RETRY_CODES = new Set(['40001', '40P01']);
/** SQLSTATE lock_not_available: the write lock was not granted within LOCK_TIMEOUT_MS */
const LOCK_TIMEOUT = '55P03';
/** how long a batch waits for the write lock (a process holding it hangs) before it answers 503 */
const LOCK_TIMEOUT_MS = 10_000;
/** store transactions (`tx` calls) one PostgreSQL transaction commits together at most */
const MAX_BATCH = 64;

export interface PostgresOptions {
  /** connections of this process (default 10) */
  poolSize?: number;
  /** store transactions committed together at most (default MAX_BATCH) */
  maxBatch?: number;
}

/** a `tx` call waiting for (or in) a batch */
interface Pending {
  fn: (h: TxKv) => unknown;
  durable: boolean;
  resolve: (v: unknown) => void;
  reject: (err: unknown) => void;
}

/** the numbered migration files, in order */
export function migrationFiles(): Array<{ version: number; name: string; sql: string }> {
  return readdirSync(MIGRATIONS_DIR)
    .filter((f) => /^\d{3}_[\w-]+\.sql$/.test(f))
    .sort()
    .map((f) => ({ version: Number(f.slice(0, 3)), name: f, sql: readFileSync(join(MIGRATIONS_DIR, f), 'utf8') }));
}

/** connection failures: the database is down or unreachable (as opposed to a bad query) */
function unavailable(err: unknown): boolean {
  const e = err as { code?: string; message?: string };
  const code = e?.code ?? '';
  if (/^(08|57P0[1-3]|53300)/.test(code)) return true; // connection exception, shutdown, too many connections
  if (/^E(CONNREFUSED|CONNRESET|PIPE|TIMEDOUT|HOSTUNREACH|NETUNREACH|AI_AGAIN)$|^ENOTFOUND$/.test(code)) return true;
  return /Connection terminated|connection timeout|Client has encountered a connection error|timeout exceeded when trying to connect/i
    .test(e?.message ?? '');
}

function asServiceError(err: unknown): unknown {
  return unavailable(err) ? new DependencyUnavailableError('The database is unavailable; retry shortly', 1) : err;
}

/** reads over one connection (a transaction's) or the pool (committed reads) */
function reader(q: pg.Pool | pg.PoolClient, failed?: (err: unknown) => void): KvRead {
  const run = async (text: string, values: unknown[]) => {
    try {
      return await q.query({ text, values });
    } catch (err) {
      failed?.(err);
      throw asServiceError(err);
    }
  };
  return {
    async get(t, key) {
      if (!keyFits(key)) return undefined;
      const r = await run(`SELECT value FROM ${t} WHERE key = $1`, [key]);
      return r.rows.length ? r.rows[0].value : undefined;
    },
    async getMany(t, keys) {
      const ks = keys.filter(keyFits);
      if (ks.length === 0) return [];
      const r = await run(`SELECT key, value FROM ${t} WHERE key = ANY($1::text[])`, [ks]);
      const byKey = new Map<string, unknown>(r.rows.map((x: KvEntry) => [x.key, x.value]));
      return ks.filter((k) => byKey.has(k)).map((k) => byKey.get(k));
    },
    async range(t: DbName, r: KvRange = {}) {
      if ((r.gte !== undefined && !keyFits(r.gte)) || (r.lt !== undefined && !keyFits(r.lt))) return [];
      const where: string[] = [];
      const values: unknown[] = [];
      if (r.gte !== undefined) { values.push(r.gte); where.push(`key >= $${values.length}`); }
      if (r.lt !== undefined) { values.push(r.lt); where.push(`key < $${values.length}`); }
      let text = `SELECT key, value FROM ${t}${where.length ? ` WHERE ${where.join(' AND ')}` : ''} ORDER BY key${r.reverse ? ' DESC' : ''}`;
      if (r.limit !== undefined) { values.push(r.limit); text += ` LIMIT $${values.length}`; }
      return (await run(text, values)).rows as KvEntry[];
    },
  };
}

/** the buffered writes as SQL statements (literals escaped by the client), to send with COMMIT */
function writeStatements(c: pg.PoolClient, writes: Writes): string[] {
  const out: string[] = [];
  for (const [t, m] of writes) {
    const puts: string[] = [];
    const dels: string[] = [];
    for (const [k, v] of m) {
      if (v === DELETED) dels.push(c.escapeLiteral(k));
      else puts.push(`(${c.escapeLiteral(k)}, ${c.escapeLiteral(JSON.stringify(v))}::json)`);
    }
    if (dels.length) out.push(`DELETE FROM ${t} WHERE key IN (${dels.join(', ')})`);
    if (puts.length) {
      out.push(`INSERT INTO ${t} (key, value) VALUES ${puts.join(', ')} ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`);
    }
  }
  return out;
}

/**
 * A checked-out connection has no listener of the pool's: a connection the server ends between two of
 * its queries (a restart, `pg_terminate_backend`: 57P01) emits 'error' on it, which would take the
 * process down. This listener keeps it to the caller, whose next query fails, until `release`.
 */
function guardCheckout(c: pg.PoolClient, onError: (err: unknown) => void = () => {}): () => void {
  c.on('error', onError);
  return () => { c.removeListener('error', onError); };
}

async function migrate(pool: pg.Pool): Promise<void> {
  const c = await pool.connect();
  const unguard = guardCheckout(c);
  try {
    await c.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK]);
    try {
      await c.query(`CREATE TABLE IF NOT EXISTS schema_migrations (
        version integer PRIMARY KEY, name text NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())`);
      const done = new Set((await c.query('SELECT version FROM schema_migrations')).rows.map((r) => Number(r.version)));
      for (const m of migrationFiles()) {
        if (done.has(m.version)) continue;
        await c.query('BEGIN');
        try {
          await c.query(m.sql);
          await c.query('INSERT INTO schema_migrations (version, name) VALUES ($1, $2)', [m.version, m.name]);
          await c.query('COMMIT');
        } catch (err) {
          await c.query('ROLLBACK').catch(() => {});
          throw new Error(`PostgreSQL migration ${m.name} failed: ${(err as Error).message}`);
        }
      }
    } finally {
      await c.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK]).catch(() => {});
    }
    const v = (await c.query(`SELECT value FROM meta WHERE key = 'schema_version'`)).rows[0]?.value as number | undefined;
    if (v !== undefined && v > SCHEMA_VERSION) {
      throw new Error(`store schema version ${v} is newer than this Loom (${SCHEMA_VERSION}); upgrade Loom`);
    }
  } finally {
    unguard();
    c.release();
  }
}

export async function openPostgres(url: string, opts: PostgresOptions = {}): Promise<Db> {
  const pool = new pg.Pool({
    connectionString: url, max: opts.poolSize ?? 10, connectionTimeoutMillis: 5000, idleTimeoutMillis: 30_000,
    options: `-c lock_timeout=${LOCK_TIMEOUT_MS}`,
  });
  // an idle connection dropped by the server (restart, outage) must not take the process down;
  // the next checkout connects again
  pool.on('error', () => {});
  try {
    await migrate(pool);
  } catch (err) {
    await pool.end().catch(() => {});
    throw err;
  }
  const read = reader(pool);
  const maxBatch = Math.max(1, opts.maxBatch ?? MAX_BATCH);
  const queue: Pending[] = [];
  let running = false;
  const inFlight = new Set<Promise<unknown>>();
  const commitListeners: (() => void)[] = [];

  /**
   * One attempt at a batch: BEGIN; each member's `fn` in call order on its own handle over the
   * batch's (it sees the writes of the members before it; a member that throws an error of its
   * own is left out, its writes dropped); then every kept write + COMMIT in one round trip.
   * Settles the members itself on success; returns the error that ended the attempt otherwise.
   */
  async function attempt(batch: Pending[], alone: boolean): Promise<{ ok: true } | { ok: false; err: unknown }> {
    let c: pg.PoolClient;
    try {
      c = await pool.connect();
    } catch (err) {
      return { ok: false, err: asServiceError(err) };
    }
    let broken = false;
    let dbError: unknown = null; // the first failed query: the PostgreSQL transaction is aborted from then on
    const unguard = guardCheckout(c, () => { broken = true; });
    try {
      // the write lock before the transaction's snapshot, shared by first attempts, alone for a rerun
      // after a conflict (see the top of this file)
      const lock = alone ? 'pg_advisory_lock' : 'pg_advisory_lock_shared';
      await c.query(`SELECT ${lock}($1)`, [WRITE_LOCK]);
      const fast = batch.every((p) => !p.durable) ? '; SET LOCAL synchronous_commit TO OFF' : '';
      await c.query(`BEGIN ISOLATION LEVEL SERIALIZABLE${fast}`);
      const base = new TxKv(reader(c, (err) => { dbError ??= err; }));
      const done: Array<{ p: Pending; value: unknown }> = [];
      const refused: Array<{ p: Pending; err: unknown }> = [];
      for (const p of batch) {
        const h = new TxKv(base);
        try {
          const value = await p.fn(h);
          h.sealed = true;
          if (dbError) throw dbError;
          for (const [t, m] of h.writes) {
            for (const [k, v] of m) { if (v === DELETED) base.remove(t, k); else base.put(t, k, v); }
          }
          done.push({ p, value });
        } catch (err) {
          h.sealed = true;
          if (dbError) throw dbError;
          refused.push({ p, err });
        }
      }
      base.sealed = true;
      const stmts = writeStatements(c, base.writes);
      const unlock = `SELECT ${alone ? 'pg_advisory_unlock' : 'pg_advisory_unlock_shared'}(${WRITE_LOCK})`;
      await c.query(stmts.length ? `${stmts.join(';\n')};\nCOMMIT;\n${unlock}` : `COMMIT; ${unlock}`);
      for (const l of commitListeners) l();
      for (const { p, value } of done) p.resolve(value);
      for (const { p, err } of refused) p.reject(err);
      return { ok: true };
    } catch (err) {
      broken = unavailable(err) || err instanceof DependencyUnavailableError;
      // the write lock is the session's: release it with the transaction (or drop the connection)
      if (!broken) await c.query('ROLLBACK; SELECT pg_advisory_unlock_all()').catch(() => { broken = true; });
      return { ok: false, err };
    } finally {
      unguard();
      c.release(broken);
    }
  }

  /** a batch until it commits: again after a serialization failure (backing off), alone per member after another error
   */
  async function runBatch(batch: Pending[]): Promise<void> {
    for (let n = 1; ; n++) {
      const out = await attempt(batch, n > 1);
      if (out.ok) return;
      const code = (out.err as { code?: string })?.code;
      if (!(code && RETRY_CODES.has(code))) {
        // the database refused the batch: one member may be at fault (a write it cannot store);
        // alone, each member gets its own answer. An outage fails them all (503).
        const outage = unavailable(out.err) || out.err instanceof DependencyUnavailableError;
        if (code === LOCK_TIMEOUT) {
          const msg = 'The store is busy (its write lock timed out); retry the request';
          const busy = new DependencyUnavailableError(msg, 1);
          for (const p of batch) p.reject(busy);
          return;
        }
        if (batch.length > 1 && !outage) {
          for (const p of batch) await runBatch([p]);
          return;
        }
        for (const p of batch) p.reject(asServiceError(out.err));
        return;
      }
      if (n >= MAX_ATTEMPTS) {
        const busy = new DependencyUnavailableError('The store is busy with concurrent writes; retry the request', 1);
        for (const p of batch) p.reject(busy);
        return;
      }
      // another process won the race:
      // back off a little (jittered, growing) and run the batch again
      await new Promise((r) => setTimeout(r, Math.random() * Math.min(50, 2 * n)));
    }
  }

  /** starts the next batch, of everything queued meanwhile, when the one before has ended (group commit) */
  function pump(): void {
    if (running || queue.length === 0) return;
    running = true;
    void runBatch(queue.splice(0, maxBatch)).finally(() => { running = false; pump(); });
  }

  function tx<T>(fn: (h: TxKv) => Promise<T> | T, o: TxOptions = {}): Promise<T> {
    const run = new Promise<T>((resolve, reject) => {
      queue.push({ fn, durable: o.durable !== false, resolve: resolve as (v: unknown) => void, reject });
      pump();
    });
    inFlight.add(run);
    const forget = () => { inFlight.delete(run); };
    run.then(forget, forget);
    return run;
  }

  let closed = false;
  return {
    kind: 'postgres',
    read,
    tx,
    async authGeneration() { return ((await read.get('meta', AUTH_GENERATION)) as number | undefined) ?? 0; },
    onCommit(fn) { commitListeners.push(fn); },
    async settled() { await Promise.allSettled([...inFlight]); },
    async ping() {
      try { await pool.query('SELECT 1'); } catch (err) { throw asServiceError(err); }
    },
    async close() {
      if (closed) return;
      closed = true;
      await Promise.allSettled([...inFlight]);
      await pool.end();
    },
  };
}
