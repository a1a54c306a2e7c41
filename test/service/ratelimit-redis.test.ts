// Rate limits shared through Redis (LOOM_REDIS_URL): two server processes on one data dir and one
// Redis let exactly N requests of a limit of N through between them; a Redis outage fails open
// (served, counted in the process, one warning, no hang) and the shared counts resume once Redis
// is back. The limiter's own semantics run against both limiters in ratelimit.test.ts.
import { Writable } from 'node:stream';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Redis } from 'ioredis';
import t from 'tap';
import { createServer } from '../../server/index.ts';
import { createLogger } from '../../server/log.ts';
import { DEFAULT_RATE_LIMITS, type RateLimitConfig } from '../../src/service/config.ts';
import { createServices } from '../../src/service/index.ts';
import {
  COMMAND_TIMEOUT_MS, CONNECT_TIMEOUT_MS, createRedisRateLimiter, type RedisRateLimiter,
} from '../../src/service/ratelimit-redis.ts';
import { freePort, REDIS_SKIP, RedisServer, startRedis } from '../helpers/redis.ts';
import { ServerProcess, sleep } from '../reliability/helpers.ts';
import { FakeRuntime } from './fake-runtime.ts';
import { call } from './helpers.ts';

t.test('LOOM_REDIS_URL that is not a redis URL: a clear error at start, the password not repeated', async (t) => {
  for (const url of ['localhost:6379', 'http://127.0.0.1:6379', 'redis://', ':pw@host']) {
    t.throws(() => createRedisRateLimiter(DEFAULT_RATE_LIMITS, { url }),
      /LOOM_REDIS_URL must be a redis:\/\/ or rediss:\/\/ URL/, url);
  }
  let msg = '';
  try {
    createRedisRateLimiter(DEFAULT_RATE_LIMITS, { url: 'http://u:hunter2@h' });
  } catch (e) { msg = (e as Error).message; }
  t.ok(msg && !msg.includes('hunter2'), `the password is not in the message: ${msg}`);
  const dataDir = mkdtempSync(join(tmpdir(), 'loom-rlu-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const err = await createServices({ runtime: new FakeRuntime(), config: { dataDir, redisUrl: 'redis-host:6379' } })
    .then(() => null, (e: Error) => e);
  t.match(err?.message, /LOOM_REDIS_URL must be/, 'createServices refuses to start');
  t.notOk(existsSync(join(dataDir, 'store')), 'before opening anything');
});

t.test('Redis down at start: the server starts, says so once, and joins Redis when it comes up', { skip: REDIS_SKIP },
  async (t) => {
    const redis = new RedisServer(await freePort());
    t.teardown(() => redis.stop());
    const lines: Array<{ level: number; msg: string }> = [];
    const log = { info: (_: object, msg = '') => lines.push({ level: 30, msg }),
      warn: (_: object, msg = '') => lines.push({ level: 40, msg }), error: () => {} };
    const limiter = createRedisRateLimiter(DEFAULT_RATE_LIMITS, { url: redis.url, log });
    t.teardown(() => limiter.close());
    const t0 = Date.now();
    await limiter.ready();
    t.ok(Date.now() - t0 < CONNECT_TIMEOUT_MS + 500, 'ready() gives up after the connect timeout');
    t.ok(limiter.degraded);
    t.same(lines.map((l) => [l.level, l.msg.split(':')[0]]), [[40, 'Redis unreachable']], 'one warning at start');
    t.equal((await limiter.edge('10.1.1.1'), lines.length), 1, 'checks are counted locally, no second warning');
    await redis.start();
    const t1 = Date.now();
    while (limiter.degraded && Date.now() - t1 < 10_000) await sleep(50);
    t.notOk(limiter.degraded, 'connected once Redis is up');
    t.match(lines.at(-1)?.msg, /Redis is back/);
    const v = await limiter.ipDefault('10.1.1.1');
    t.equal(v?.remaining, 19_999, 'counted in Redis (a new window)');
  });

const across = 'two server processes on one Redis: a limit of N allows exactly N across both';
t.test(across, { skip: REDIS_SKIP }, async (t) => {
  const N = 12;
  const redis = await startRedis(t);
  const dataDir = mkdtempSync(join(tmpdir(), 'loom-rl2-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  // a team with an API key in the shared store before either process opens it
  const seed = await createServices({ runtime: new FakeRuntime(), config: { dataDir, workerThreads: 1 } });
  const { user, team } = await seed.auth.createUser({ email: 'rl2@example.com', password: 'correct horse battery' });
  const key = (await seed.auth.createKeyForUser(user.id, 'k')).secret_key;
  await seed.close();
  // an endpoint group on a cheap authenticated route, scoped by team like POST /inference's
  const limits: RateLimitConfig = {
    edge: { points: 10_000, duration_s: 60 },
    default: [{ points: 6, duration_s: 60 }],
    endpoints: [{ method: 'GET', pattern: '/list-api-keys', group: 'keys', points: N, duration_s: 60 }],
  };
  const env = { LOOM_REDIS_URL: redis.url, LOOM_RATE_LIMITS: JSON.stringify(limits) };
  const servers = [new ServerProcess(dataDir, env), new ServerProcess(dataDir, env)];
  t.teardown(() => Promise.all(servers.map((s) => s.stop(5000))));
  await Promise.all(servers.map((s) => s.start()));
  t.not(servers[0].url, servers[1].url, 'two processes, two ports');

  const res = await Promise.all(Array.from({ length: 3 * N }, (_, i) =>
    call(servers[i % 2].url, 'GET', '/list-api-keys', { key })));
  const ok = res.filter((r) => r.status === 200);
  t.equal(ok.length, N, `exactly ${N} served over both processes`);
  t.equal(res.filter((r) => r.status === 429).length, 2 * N, 'the rest refused');
  t.same(ok.map((r) => Number(r.headers.get('x-ratelimit-remaining'))).sort((a, b) => a - b),
    Array.from({ length: N }, (_, i) => i), 'each remaining count handed out once, across processes');
  const over = res.find((r) => r.status === 429)!;
  t.same(over.body, { detail: over.body.detail, code: 'endpoint_rate_limit', scope: 'team' });
  t.equal(over.headers.get('x-ratelimit-scope'), 'team');
  const client = new Redis(redis.url);
  t.teardown(() => client.disconnect());
  t.equal(await client.get(`loom:rl:ep:keys:team:${team.id}`), String(3 * N), 'one shared count in Redis');

  // in turn: the IP default (6) counts both processes' unauthenticated calls (401) in one window
  const turns = [];
  for (const i of [0, 0, 0, 1, 1, 1, 0, 1]) turns.push((await call(servers[i].url, 'GET', '/account')).status);
  t.same(turns, [401, 401, 401, 401, 401, 401, 429, 429], 'three on one process, three on the other, then both refuse');
  for (const s of servers) t.notMatch(s.output, /Redis unreachable/, 'no process fell back to local counts');
});

const outage = 'a Redis outage fails open: served and counted locally, no hang, shared again once it is back';
t.test(outage, { skip: REDIS_SKIP }, async (t) => {
  const redis = await startRedis(t);
  const lines: Array<{ level: number; msg: string }> = [];
  const sink = new Writable({ write(chunk, _enc, cb) {
    for (const l of String(chunk).split('\n')) if (l.trim()) lines.push(JSON.parse(l));
    cb();
  } });
  const log = createLogger({ level: 'info', destination: sink });
  const dataDir = mkdtempSync(join(tmpdir(), 'loom-rlo-'));
  const limits: RateLimitConfig = {
    ...DEFAULT_RATE_LIMITS, edge: { points: 1000, duration_s: 60 }, default: [{ points: 4, duration_s: 60 }],
  };
  const services = await createServices({
    runtime: new FakeRuntime(), log, config: { dataDir, workerThreads: 1, rateLimits: limits, redisUrl: redis.url },
  });
  const server = await createServer({ services, log });
  t.teardown(async () => {
    await server.close({ timeoutMs: 2000 });
    rmSync(dataDir, { recursive: true, force: true });
  });
  const limiter = services.rateLimiter as RedisRateLimiter;
  const client = new Redis(redis.url, { lazyConnect: true, enableOfflineQueue: false, maxRetriesPerRequest: 0 });
  client.on('error', () => {});
  t.teardown(() => client.disconnect());
  const get = async () => {
    const t0 = performance.now();
    const r = await call(server.url, 'GET', '/metrics');
    return { status: r.status, remaining: r.headers.get('x-ratelimit-remaining'), ms: performance.now() - t0 };
  };
  const sharedCount = async () => {
    await client.connect().catch(() => {});
    const keys = await client.keys('loom:rl:default0:*');
    return keys.length === 1 ? client.get(keys[0]) : `${keys.length} keys`;
  };

  t.same([(await get()).remaining, (await get()).remaining], ['3', '2'], 'counted in Redis');
  t.equal(await sharedCount(), '2');
  client.disconnect();

  await redis.stop();
  const during = [];
  for (let i = 0; i < 6; i++) during.push(await get());
  t.same(during.map((r) => r.status), [200, 200, 200, 200, 429, 429],
    'Redis down: served, and the limit still holds, counted in this process (a fresh window)');
  t.same(during.slice(0, 4).map((r) => r.remaining), ['3', '2', '1', '0']);
  const slowest = Math.max(...during.map((r) => r.ms)).toFixed(0);
  t.ok(during.every((r) => r.ms < 1500), `no request waited on Redis (slowest ${slowest} ms)`);
  t.ok(limiter.degraded, 'the limiter reports the outage');
  const warnings = lines.filter((l) => /Redis unreachable/.test(l.msg));
  t.equal(warnings.length, 1, 'one warning per outage');
  t.equal(warnings[0]?.level, 40, 'logged as a warning');

  await redis.start();
  const t0 = Date.now();
  while (limiter.degraded && Date.now() - t0 < 10_000) await sleep(50);
  t.notOk(limiter.degraded, `reconnected in ${Date.now() - t0} ms`);
  t.ok(lines.some((l) => /Redis is back/.test(l.msg)), 'recovery logged');
  const after = await get();
  t.same([after.status, after.remaining], [200, '3'], 'counted in the (restarted, empty) Redis again');
  t.equal(await sharedCount(), '1');

  // a Redis that keeps its connections but answers nothing: the first check waits out the command
  // timeout and drops the connection; the next ones go to the local counts at once
  const warned = lines.filter((l) => /Redis unreachable/.test(l.msg)).length;
  redis.pause();
  t.teardown(() => redis.resume());
  const stalled = [];
  for (let i = 0; i < 4; i++) stalled.push(await get());
  t.same(stalled.map((r) => r.status), [429, 429, 429, 429],
    'a stalled Redis: answered from the local counts (whose window the outage above used up)');
  const ms = stalled.map((r) => r.ms.toFixed(0)).join(', ');
  t.ok(stalled[0].ms >= COMMAND_TIMEOUT_MS && stalled[0].ms < COMMAND_TIMEOUT_MS + 1000,
    `one command timeout (${ms} ms)`);
  t.ok(stalled.slice(1).every((r) => r.ms < COMMAND_TIMEOUT_MS), `then no more waiting (${ms} ms)`);
  t.equal(lines.filter((l) => /Redis unreachable/.test(l.msg)).length, warned + 1, 'one warning for this outage');
  redis.resume();
  const t1 = Date.now();
  while (limiter.degraded && Date.now() - t1 < 10_000) await sleep(50);
  t.notOk(limiter.degraded, `thawed: reconnected in ${Date.now() - t1} ms`);
  t.same((await get()).remaining, '2', 'counted in Redis again (the same window as before the stall)');
  t.equal(await sharedCount(), '2');
});
