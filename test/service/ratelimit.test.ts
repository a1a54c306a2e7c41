// Request-rate limits as the spec's table: edge per IP, default per IP, per-endpoint overrides that
// replace the IP default and scope to the team; 429 body and headers. Every behaviour test runs
// twice: against the in-memory limiter and against the Redis one (LOOM_REDIS_URL, a throwaway
// redis-server per test; skipped where redis-server is not installed).
import { Redis } from 'ioredis';
import t from 'tap';
import { DEFAULT_RATE_LIMITS, type RateLimitConfig } from '../../src/service/config.ts';
import { REDIS_SKIP, startRedis } from '../helpers/redis.ts';
import { call, makeUser, startServer as startPlain } from './helpers.ts';

t.test('the default table is the spec table', async (t) => {
  t.same(DEFAULT_RATE_LIMITS.edge, { points: 100_000, duration_s: 60 });
  t.same(DEFAULT_RATE_LIMITS.default, [{ points: 20_000, duration_s: 60 }, { points: 1_000_000, duration_s: 3600 }]);
  const ep = Object.fromEntries(DEFAULT_RATE_LIMITS.endpoints.map((e) => [`${e.method} ${e.pattern}`, e.points]));
  t.same(ep, {
    'POST /inference': 5000, 'POST /v1/chat/completions': 5000, 'POST /v1/completions': 5000, 'POST /v1/responses': 5000, 'POST /v1/messages': 5000,
    'POST /gliner-2/*': 15_000, 'POST /generate': 120, 'POST /generate/*': 120, 'POST /felix/training-jobs': 20,
  });
});

for (const limiter of ['memory', 'redis'] as const) {
  /** a server whose limiter is `limiter` (with its own redis-server for 'redis') */
  const startServer = async (t: { teardown(fn: () => unknown): void }, rateLimits: RateLimitConfig) => {
    const redisUrl = limiter === 'redis' ? (await startRedis(t)).url : null;
    const ts = await startPlain({ config: { rateLimits, redisUrl } });
    t.teardown(() => ts.close());
    return Object.assign(ts, { redisUrl });
  };
  t.test(`${limiter} limiter`, { skip: limiter === 'redis' && REDIS_SKIP }, async (t) => {
    t.test('limits, scopes and the 429 shape', async (t) => {
      const ts = await startServer(t, {
        edge: { points: 40, duration_s: 60 },
        default: [{ points: 6, duration_s: 60 }, { points: 1000, duration_s: 3600 }],
        endpoints: [{ method: 'POST', pattern: '/inference', group: 'inference', points: 3, duration_s: 60 }],
      });
      // two users of one team and one of another; each makeUser makes 2 requests (login, create key) on the IP default
      const a = await makeUser(ts, { credits: 10 });
      const b = await makeUser(ts, { credits: 10, team_id: a.team_id });
      const body = { model_id: 'test/encoder', text: 'Alice', schema: ['person'] };
      const r1 = await call(ts.url, 'POST', '/inference', { key: a.key, body });
      t.equal(r1.status, 200);
      t.equal(r1.headers.get('x-ratelimit-limit'), '3');
      t.equal(r1.headers.get('x-ratelimit-remaining'), '2');
      t.equal(r1.headers.get('x-ratelimit-scope'), 'team');
      t.equal((await call(ts.url, 'POST', '/inference', { key: b.key, body })).status, 200, 'same team, other key');
      t.equal((await call(ts.url, 'POST', '/inference', { key: a.key, body })).status, 200);
      const over = await call(ts.url, 'POST', '/inference', { key: b.key, body });
      t.equal(over.status, 429, 'the team shares one budget');
      t.same(Object.keys(over.body).sort(), ['code', 'detail', 'scope']);
      t.equal(over.body.code, 'endpoint_rate_limit');
      t.equal(over.body.scope, 'team');
      t.ok(Number(over.headers.get('retry-after')) >= 1 && Number(over.headers.get('retry-after')) <= 60);
      t.equal(over.headers.get('x-ratelimit-scope'), 'team');
      t.equal(over.headers.get('x-ratelimit-code'), 'endpoint_rate_limit');

      // the endpoint override replaced the IP default: 4 of the 6 IP points were used by makeUser
      const l1 = await call(ts.url, 'GET', '/list-api-keys', { key: a.key });
      t.equal(l1.status, 200);
      t.equal(l1.headers.get('x-ratelimit-remaining'), '1', 'inference calls did not count on the IP default');
      t.equal(l1.headers.get('x-ratelimit-scope'), 'ip');
      t.equal((await call(ts.url, 'GET', '/list-api-keys', { key: a.key })).status, 200);
      const ipOver = await call(ts.url, 'GET', '/list-api-keys', { key: a.key });
      t.equal(ipOver.status, 429);
      t.same(ipOver.body, { detail: ipOver.body.detail, code: 'ip_rate_limit', scope: 'ip' });
      t.equal(ipOver.headers.get('x-ratelimit-code'), 'ip_rate_limit');

      // a different team still has its own endpoint budget (but the IP default is exhausted for everything else)
      const c = await ts.services.auth.createUser({ email: 'rl-c@example.com', password: 'password-123' });
      await ts.services.billing.grant(c.team.id, 10);
      const ck = await ts.services.auth.createKeyForUser(c.user.id, 'c');
      const cr = await call(ts.url, 'POST', '/inference', { key: ck.secret_key, body });
      t.equal(cr.status, 200);
      t.equal(cr.headers.get('x-ratelimit-remaining'), '2');
    });

    t.test('edge limit per IP on every request, before authentication', async (t) => {
      const ts = await startServer(t, {
        edge: { points: 3, duration_s: 60 }, default: [{ points: 100, duration_s: 60 }], endpoints: [],
      });
      const statuses = [];
      for (let i = 0; i < 4; i++) {
        statuses.push((await call(ts.url, 'GET', '/list-api-keys', { key: 'loom_sk_bogus' })).status);
      }
      t.same(statuses, [401, 401, 401, 429], 'even unauthenticated calls are counted and refused');
      const r = await call(ts.url, 'GET', '/list-api-keys', { key: 'loom_sk_bogus' });
      t.equal(r.status, 429);
      t.equal(r.body.code, 'edge_rate_limit');
      t.equal(r.body.scope, 'ip');
    });

    t.test('GET /health is exempt from the edge and per-IP limits (probes behind a proxy share one IP)', async (t) => {
      const ts = await startServer(t, {
        edge: { points: 3, duration_s: 60 }, default: [{ points: 2, duration_s: 60 }], endpoints: [],
      });
      const statuses = [];
      for (let i = 0; i < 20; i++) statuses.push((await call(ts.url, 'GET', '/health')).status);
      t.same(statuses, Array(20).fill(200));
      const h = await call(ts.url, 'GET', '/health');
      t.equal(h.headers.get('x-ratelimit-limit'), null, 'no rate-limit headers: nothing was counted');
      // the probes used none of the budget: the other routes still get their 2 (IP default) of 3 (edge)
      const others = [];
      for (let i = 0; i < 4; i++) others.push((await call(ts.url, 'GET', '/metrics')).status);
      t.same(others, [200, 200, 429, 429]);
      t.equal((await call(ts.url, 'GET', '/health')).status, 200, 'and /health still answers after the IP is limited');
    });

    t.test('concurrent requests: exactly the limit is served, each remaining count handed out once', async (t) => {
      const ts = await startServer(t, {
        edge: { points: 1000, duration_s: 60 }, default: [{ points: 1000, duration_s: 60 }],
        endpoints: [{ method: 'POST', pattern: '/inference', group: 'inference', points: 20, duration_s: 60 }],
      });
      const u = await makeUser(ts, { credits: 10 });
      const body = { model_id: 'test/encoder', text: 'Alice', schema: ['person'] };
      const res = await Promise.all(
        Array.from({ length: 50 }, () => call(ts.url, 'POST', '/inference', { key: u.key, body })));
      const ok = res.filter((r) => r.status === 200);
      t.equal(ok.length, 20);
      t.equal(res.filter((r) => r.status === 429).length, 30);
      t.same(ok.map((r) => Number(r.headers.get('x-ratelimit-remaining'))).sort((x, y) => x - y),
        Array.from({ length: 20 }, (_, i) => i));
      if (ts.redisUrl) {
        // the count lives in Redis (no local fallback was used): one key per team window, all 50 counted
        const redis = new Redis(ts.redisUrl);
        t.teardown(() => redis.disconnect());
        t.equal(await redis.get(`loom:rl:ep:inference:team:${u.team_id}`), '50');
        const ttl = await redis.pttl(`loom:rl:ep:inference:team:${u.team_id}`);
        t.ok(ttl > 50_000 && ttl <= 60_000, `the window expires with its 60 s (pttl ${ttl})`);
      }
    });

    t.test('GET /rate-limits reads the windows without counting', async (t) => {
      const ts = await startServer(t, {
        edge: { points: 1000, duration_s: 60 },
        default: [{ points: 500, duration_s: 60 }, { points: 900, duration_s: 3600 }],
        endpoints: [{ method: 'POST', pattern: '/inference', group: 'inference', points: 10, duration_s: 60 }],
      });
      const u = await makeUser(ts, { credits: 10 });
      const body = { model_id: 'test/encoder', text: 'Alice', schema: ['person'] };
      for (let i = 0; i < 3; i++) t.equal((await call(ts.url, 'POST', '/inference', { key: u.key, body })).status, 200);
      const r = await call(ts.url, 'GET', '/rate-limits', { key: u.key });
      t.equal(r.status, 200);
      t.same(r.body.limits.map((l: any) => [l.family, l.scope, l.limit, l.window_s]), [
        ['edge', 'ip', 1000, 60], ['default', 'ip', 500, 60], ['default', 'ip', 900, 3600],
        ['inference', 'team', 10, 60],
      ]);
      const inf = r.body.limits[3];
      t.equal(inf.remaining, 7);
      t.ok(inf.reset_s >= 59 && inf.reset_s <= 60, `reset_s ${inf.reset_s}`);
      // 2 (makeUser) + this GET on the IP default, as its headers say
      t.equal(r.body.limits[1].remaining, Number(r.headers.get('x-ratelimit-remaining')));
      t.equal(r.body.limits[1].remaining, 497);
      const again = await call(ts.url, 'GET', '/rate-limits', { key: u.key });
      t.equal(again.body.limits[3].remaining, 7, 'reading the table counted nothing');
      const email = `rl-t-${limiter}@example.com`;
      const other = await ts.services.auth.createUser({ email, password: 'password-123' });
      const ok = await ts.services.auth.createKeyForUser(other.user.id, 'o');
      const fresh = await call(ts.url, 'GET', '/rate-limits', { key: ok.secret_key });
      const row = fresh.body.limits[3];
      t.same([row.remaining, row.reset_s], [10, null], 'another team: no window open');
    });
  });
}
