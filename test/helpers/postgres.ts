// A throwaway PostgreSQL cluster for tests: `startPostgres()` runs initdb + pg_ctl (as the
// `postgres` user when running as root: the server refuses root) in a temp folder, listening on
// 127.0.0.1 on a free port; `createDb()` makes a fresh database per test; `stop()` / `start()`
// take it down and up again (outage tests); `close()` stops it and removes the folder.
// `postgresMissing()` says why PostgreSQL tests must be skipped (no server binaries), else null.
import { execFileSync } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';

function binDir(): string | null {
  const env = process.env.LOOM_PG_BIN;
  if (env && existsSync(join(env, 'initdb'))) return env;
  const base = '/usr/lib/postgresql';
  if (!existsSync(base)) return null;
  const versions = readdirSync(base).filter((v) => existsSync(join(base, v, 'bin', 'initdb'))).sort((a, b) => Number(b) - Number(a));
  return versions.length ? join(base, versions[0], 'bin') : null;
}

export function postgresMissing(): string | null {
  return binDir() ? null : 'PostgreSQL server binaries (initdb, pg_ctl) not found under /usr/lib/postgresql: apt-get install postgresql';
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
    s.on('error', reject);
  });
}

export interface TestPostgres {
  /** URL of database `db` */
  url(db: string): string;
  /** a new, empty database; its URL */
  createDb(): Promise<string>;
  stop(): void;
  start(): void;
  close(): Promise<void>;
}

export async function startPostgres(): Promise<TestPostgres> {
  const bin = binDir();
  if (!bin) throw new Error(postgresMissing()!);
  const root = mkdtempSync(join(tmpdir(), 'loom-pg-'));
  const asRoot = process.getuid?.() === 0;
  const run = (cmd: string, args: string[]) => {
    const file = join(bin, cmd);
    return asRoot
      ? execFileSync('runuser', ['-u', 'postgres', '--', file, ...args], { stdio: 'pipe' })
      : execFileSync(file, args, { stdio: 'pipe' });
  };
  if (asRoot) chownSync(root, Number(execFileSync('id', ['-u', 'postgres']).toString()), Number(execFileSync('id', ['-g', 'postgres']).toString()));
  const data = join(root, 'data');
  run('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '-E', 'UTF8', '--locale=C.UTF-8', '--no-sync']);
  const port = await freePort();
  // fsync stays on (commit durability is what the store promises); small shared buffers for tests
  const opts = `-p ${port} -h 127.0.0.1 -k ${root} -c shared_buffers=16MB -c max_connections=100`;
  const start = () => { run('pg_ctl', ['-D', data, '-o', opts, '-l', join(root, 'log'), '-w', '-t', '30', 'start']); };
  const stop = () => { run('pg_ctl', ['-D', data, '-m', 'fast', '-w', '-t', '30', 'stop']); };
  start();
  let n = 0;
  const url = (db: string) => `postgres://postgres@127.0.0.1:${port}/${db}`;
  return {
    url,
    async createDb() {
      const name = `loom_t${process.pid}_${++n}`;
      const c = new pg.Client({ connectionString: url('postgres') });
      await c.connect();
      try { await c.query(`CREATE DATABASE ${name}`); } finally { await c.end(); }
      return url(name);
    },
    stop,
    start,
    async close() {
      try { stop(); } catch { /* already stopped */ }
      rmSync(root, { recursive: true, force: true });
    },
  };
}
