// `npm run bench -- scale [--quick] [--json] [--seconds S] [--connections C] [--only lmdb|postgres] [--model tiny]`:
// billed POST /inference with 1 and 2 API processes (child processes, test/service/child-server.ts) on
// LMDB (one data dir, in-process rate limits) and on PostgreSQL + Redis (a throwaway local cluster and
// redis-server, test/helpers), the load from autocannon (one per process, C connections in all). The encoder is the
// test runtime double's (test/service/fake-runtime.ts), so the figures are the service's and the
// store's cost per billed call (auth, credit hold, debit + usage + inference record), not a model's.
// Two kinds of rows: `load` (C connections: throughput) and `latency` (1 connection, one process: the
// added latency of the PostgreSQL path against LMDB, unqueued). Bounded: about 1.5 minutes with --quick.
// `--model tiny`: the servers are `server/main.ts` itself (as `npm start` runs it, configured by LOOM_* variables)
// serving the real tiny GLiNER2 of ../shared/goldens through the local runtime, so each row adds a model's cost.
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer as createNetServer } from 'node:net';
import { createServices } from '../src/service/index.ts';
import { cannon } from './cannon.ts';
import { type ChildServer, startChild } from '../test/service/child-server.ts';
import { FakeRuntime } from '../test/service/fake-runtime.ts';
import { postgresMissing, startPostgres, type TestPostgres } from '../test/helpers/postgres.ts';
import { REDIS_SKIP, type RedisServer, startRedis } from '../test/helpers/redis.ts';
import { ENCODER_ID, makeDataDir } from '../test/reliability/helpers.ts';

const OPEN_LIMITS = {
  edge: { points: 1e9, duration_s: 60 }, default: [{ points: 1e9, duration_s: 60 }], endpoints: [],
};
const bodyFor = (model: string) =>
  JSON.stringify({ model_id: model, text: 'Alice met Bob in Paris', schema: ['person', 'city'] });
let BODY = bodyFor('test/encoder');

const freePort = () => new Promise<number>((resolve, reject) => {
  const srv = createNetServer().listen(0, '127.0.0.1', () => {
    const { port } = srv.address() as { port: number };
    srv.close(() => resolve(port));
  }).on('error', reject);
});

/** `server/main.ts` in a child process, configured the way an operator does (LOOM_* variables) */
async function startReal(dataDir: string, config: { databaseUrl?: string; redisUrl?: string }): Promise<ChildServer> {
  const port = await freePort();
  const env: NodeJS.ProcessEnv = {
    ...process.env, LOOM_DATA_DIR: dataDir, LOOM_PORT: String(port), LOOM_LOG_LEVEL: 'silent',
    LOOM_RATE_LIMITS: JSON.stringify(OPEN_LIMITS), LOOM_DATABASE_POOL: '10',
    ...(config.databaseUrl ? { LOOM_DATABASE_URL: config.databaseUrl } : {}),
    ...(config.redisUrl ? { LOOM_REDIS_URL: config.redisUrl } : {}),
  };
  const root = join(import.meta.dirname, '..');
  const child = spawn(process.execPath, ['--import', 'tsx', join(root, 'server/main.ts')], { env, stdio: 'ignore' });
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  const url = `http://127.0.0.1:${port}`;
  for (let i = 0; ; i++) {
    if (child.exitCode !== null) throw new Error('server exited before listening');
    if (await fetch(`${url}/health`).then((r) => r.ok, () => false)) break;
    if (i > 600) throw new Error('server did not start in 60 s');
    await new Promise((r) => setTimeout(r, 100));
  }
  return { url, key: null, exited, kill: () => child.kill('SIGKILL') };
}

interface Row {
  store: 'lmdb' | 'postgres+redis'; processes: number; kind: 'load' | 'latency'; connections: number;
  rps: number; p50_ms: number; p99_ms: number; non2xx: number; errors: number;
}

const arg = (argv: string[], name: string, dflt: number) => {
  const i = argv.indexOf(name);
  return i >= 0 ? Number(argv[i + 1]) : dflt;
};

/** autocannon against one server's POST /inference */
const load = (url: string, key: string, connections: number, seconds: number) => cannon({
  url: `${url}/inference`, connections, seconds, method: 'POST', body: BODY,
  headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
});

/** C connections spread over the servers, for `seconds`; a short warm-up first */
async function measure(servers: ChildServer[], key: string, connections: number, seconds: number) {
  const per = Math.max(1, Math.round(connections / servers.length));
  await Promise.all(servers.map((s) => load(s.url, key, per, 2)));
  const rs = await Promise.all(servers.map((s) => load(s.url, key, per, seconds)));
  const total = rs.reduce((n, r) => n + r.total, 0);
  return {
    rps: Math.round(rs.reduce((n, r) => n + r.rps, 0)),
    // the processes' percentiles weighted by their requests (p50), the worst (p99)
    p50_ms: Math.round(rs.reduce((n, r) => n + r.p50 * r.total, 0) / Math.max(1, total) * 10) / 10,
    p99_ms: Math.max(...rs.map((r) => r.p99)),
    non2xx: rs.reduce((n, r) => n + r.non2xx, 0),
    errors: rs.reduce((n, r) => n + r.errors, 0),
  };
}

/** a team with a key and plenty of paid credit in the store the servers will open */
async function seed(dataDir: string, databaseUrl: string | null): Promise<string> {
  const s = await createServices({ runtime: new FakeRuntime(), config: { dataDir, databaseUrl, workerThreads: 1 } });
  try {
    const { user, team } = await s.auth.createUser({ email: 'scale@example.com', password: 'correct horse battery' });
    await s.billing.grant(team.id, 1e6);
    return (await s.auth.createKeyForUser(user.id, 'bench')).secret_key;
  } finally {
    await s.close();
  }
}

export async function run(argv: string[]): Promise<void> {
  const quick = argv.includes('--quick');
  const json = argv.includes('--json');
  const seconds = arg(argv, '--seconds', quick ? 5 : 10);
  const connections = arg(argv, '--connections', 16);
  const model = argv.includes('--model') ? argv[argv.indexOf('--model') + 1] : null;
  if (model !== null && model !== 'tiny') {
    throw new Error(`--model: only 'tiny' (the tiny GLiNER2 of ../shared/goldens)`);
  }
  if (model) BODY = bodyFor(ENCODER_ID);
  const skipPg = postgresMissing() ?? REDIS_SKIP;
  const rows: Row[] = [];
  const tmp = mkdtempSync(join(tmpdir(), 'loom-scale-'));
  let pgs: TestPostgres | null = null;
  const stops: Array<() => unknown> = [];
  let n = 0;
  try {
    const only = argv.includes('--only') ? argv[argv.indexOf('--only') + 1] : null;
    const setups: Array<{ store: Row['store']; dataDir: () => string; config: () => Promise<object> }> = [];
    if (only !== 'postgres') {
      const config = async () => ({ rateLimits: OPEN_LIMITS });
      const dataDir = () => (model ? makeDataDir('loom-scale-') : join(tmp, `lmdb${++n}`));
      setups.push({ store: 'lmdb', dataDir, config });
    }
    let redis: RedisServer | null = null;
    if (only === 'lmdb') {
      // LMDB rows only
    } else if (!skipPg) {
      setups.push({
        store: 'postgres+redis', dataDir: () => (model ? makeDataDir('loom-scale-') : join(tmp, `pg${++n}`)),
        config: async () => {
          pgs ??= await startPostgres();
          redis ??= await startRedis({ teardown: (fn) => { stops.push(fn); } });
          return { rateLimits: OPEN_LIMITS, databaseUrl: await pgs.createDb(), redisUrl: redis.url };
        },
      });
    } else {
      console.error(`postgres+redis rows skipped: ${skipPg}`);
    }
    for (const s of setups) {
      for (const processes of [1, 2]) {
        // a fresh store per row: every row starts from the same empty ledger
        const config = { ...(await s.config()), databasePoolSize: 10 };
        const dataDir = s.dataDir();
        const key = await seed(dataDir, (config as { databaseUrl?: string }).databaseUrl ?? null);
        const servers: ChildServer[] = [];
        try {
          // on LMDB both processes share one data dir (one machine); on PostgreSQL each has its own
          for (let i = 0; i < processes; i++) {
            // (--model tiny: the real server; on PostgreSQL its data dir holds only the models folder)
            servers.push(model ? await startReal(dataDir, config as { databaseUrl?: string; redisUrl?: string })
              : await startChild(s.store === 'lmdb' ? dataDir : `${dataDir}-${i}`, '', config));
          }
          const kinds: Array<[Row['kind'], number]> = processes === 1 ? [['latency', 1], ['load', connections]]
            : [['load', connections]];
          for (const [kind, c] of kinds) {
            const r = await measure(servers, key, c, seconds);
            const row: Row = { store: s.store, processes, kind, connections: c, ...r };
            rows.push(row);
            if (json) console.log(JSON.stringify(row));
            else console.error(`  ${s.store} x${processes} ${kind}: ${r.rps} req/s, p50/p99 ${r.p50_ms}/${r.p99_ms}`);
          }
        } finally {
          for (const sv of servers) sv.kill();
          await Promise.all(servers.map((sv) => sv.exited));
          if (model) rmSync(dataDir, { recursive: true, force: true });
        }
      }
    }
  } finally {
    for (const f of stops) await f();
    await (pgs as TestPostgres | null)?.close();
    rmSync(tmp, { recursive: true, force: true });
  }
  if (json) return;
  const load = loadavg().map((x) => x.toFixed(1)).join(' ');
  const cpu = `${cpus()[0]?.model} x${cpus().length}`;
  const what = model ? `the tiny GLiNER2 (${ENCODER_ID}) through server/main.ts` : 'test encoder double';
  console.log(`\nbilled POST /inference (${what}), ${seconds} s per row, CPU ${cpu}`
    + `, load average ${load} (servers, PostgreSQL, Redis and autocannon share the machine)`);
  console.log('| store | API processes | load | req/s | p50 ms | p99 ms | non-2xx | errors |');
  console.log('|---|---|---|---|---|---|---|---|');
  for (const r of rows) {
    const conns = r.kind === 'latency' ? '1 connection' : `${r.connections} connections`;
    console.log(`| ${r.store} | ${r.processes} | ${conns}`
      + ` | ${r.rps} | ${r.p50_ms} | ${r.p99_ms} | ${r.non2xx} | ${r.errors} |`);
  }
  const lat = (store: Row['store']) => rows.find((r) => r.store === store && r.kind === 'latency');
  const [l, p] = [lat('lmdb'), lat('postgres+redis')];
  if (l && p) {
    const d50 = (p.p50_ms - l.p50_ms).toFixed(1);
    console.log(`\nadded latency of the PostgreSQL + Redis path (1 connection): p50 +${d50} ms,`
      + ` p99 +${(p.p99_ms - l.p99_ms).toFixed(1)} ms`);
  }
}
