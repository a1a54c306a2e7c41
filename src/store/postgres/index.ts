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
// each call site taking the right locks. Within one process, transactions run one at a time (as on
// LMDB), so retries happen only between processes: credits stay exact across processes.
//
// A database that cannot be reached (refused, reset, shut down, timed out) is the spec's 503
// (DependencyUnavailableError) for that request, never a crash; the pool reconnects by itself.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { DependencyUnavailableError } from '../../service/errors.ts';
import {
  AUTH_GENERATION, type Db, type DbName, DELETED, keyFits, type KvEntry, type KvRange, type KvRead, makeMutex,
  SCHEMA_VERSION, TxKv, type Writes,
} from '../db.ts';

const MIGRATIONS_DIR = join(import.meta.dirname, 'migrations');
/** pg_advisory_lock key of the migration run (any fixed 64-bit number: "loom" in ASCII) */
const MIGRATION_LOCK = 0x6c6f6f6d;
/** runs of `fn` before a transaction that keeps conflicting with other processes gives up (503) */
const MAX_ATTEMPTS = 30;
/** SQLSTATEs after which the whole transaction runs again */
const RETRY_CODES = new Set(['40001', '40P01']);

export interface PostgresOptions {
  /** connections of this process (default 10) */
  poolSize?: number;
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
function reader(q: pg.Pool | pg.PoolClient): KvRead {
  const run = async (text: string, values: unknown[]) => {
    try {
      return await q.query({ text, values });
    } catch (err) {
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

async function migrate(pool: pg.Pool): Promise<void> {
  const c = await pool.connect();
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
    c.release();
  }
}

export async function openPostgres(url: string, opts: PostgresOptions = {}): Promise<Db> {
  const pool = new pg.Pool({
    connectionString: url, max: opts.poolSize ?? 10, connectionTimeoutMillis: 5000, idleTimeoutMillis: 30_000,
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
  const mutex = makeMutex();
  const inFlight = new Set<Promise<unknown>>();
  const commitListeners: (() => void)[] = [];

  /** one attempt: BEGIN, fn, writes + COMMIT in one round trip; { retry } on a serialization failure */
  async function attempt<T>(fn: (h: TxKv) => Promise<T> | T): Promise<{ ok: true; value: T } | { ok: false; err: unknown }> {
    let c: pg.PoolClient;
    try {
      c = await pool.connect();
    } catch (err) {
      throw asServiceError(err);
    }
    let broken = false;
    try {
      await c.query('BEGIN ISOLATION LEVEL SERIALIZABLE');
      const h = new TxKv(reader(c));
      let value: T;
      try { value = await fn(h); } finally { h.sealed = true; }
      const stmts = writeStatements(c, h.writes);
      await c.query(stmts.length ? `${stmts.join(';\n')};\nCOMMIT` : 'COMMIT');
      for (const l of commitListeners) l();
      return { ok: true, value };
    } catch (err) {
      broken = unavailable(err) || err instanceof DependencyUnavailableError;
      if (!broken) await c.query('ROLLBACK').catch(() => { broken = true; });
      const code = (err as { code?: string })?.code;
      if (code && RETRY_CODES.has(code)) return { ok: false, err };
      throw asServiceError(err);
    } finally {
      c.release(broken);
    }
  }

  async function tx<T>(fn: (h: TxKv) => Promise<T> | T): Promise<T> {
    const run = (async () => {
      for (let n = 1; ; n++) {
        const release = await mutex.lock();
        let out: Awaited<ReturnType<typeof attempt<T>>>;
        try {
          out = await attempt(fn);
        } finally {
          release();
        }
        if (out.ok) return out.value;
        if (n >= MAX_ATTEMPTS) {
          throw new DependencyUnavailableError('The store is busy with concurrent writes; retry the request', 1);
        }
        // another process won the race: back off a little (jittered, growing) and run fn again
        await new Promise((r) => setTimeout(r, Math.random() * Math.min(50, 2 * n)));
      }
    })();
    inFlight.add(run);
    try {
      return await run;
    } finally {
      inFlight.delete(run);
    }
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
