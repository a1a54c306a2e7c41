// Request-rate limits as the spec's table: edge per IP, default per IP, per-endpoint overrides that
// replace the IP default and scope to the team; 429 body and headers.
import t from 'tap';
import { DEFAULT_RATE_LIMITS } from '../../src/service/config.ts';
import { call, makeUser, startServer } from './helpers.ts';

t.test('the default table is the spec table', async (t) => {
  t.same(DEFAULT_RATE_LIMITS.edge, { points: 100_000, duration_s: 60 });
  t.same(DEFAULT_RATE_LIMITS.default, [{ points: 20_000, duration_s: 60 }, { points: 1_000_000, duration_s: 3600 }]);
  const ep = Object.fromEntries(DEFAULT_RATE_LIMITS.endpoints.map((e) => [`${e.method} ${e.pattern}`, e.points]));
  t.same(ep, {
    'POST /inference': 5000, 'POST /v1/chat/completions': 5000, 'POST /v1/completions': 5000, 'POST /v1/responses': 5000, 'POST /v1/messages': 5000,
    'POST /gliner-2/*': 15_000, 'POST /generate': 120, 'POST /generate/*': 120, 'POST /felix/training-jobs': 20,
  });
});

t.test('limits, scopes and the 429 shape', async (t) => {
  const ts = await startServer({ config: { rateLimits: {
    edge: { points: 40, duration_s: 60 },
    default: [{ points: 6, duration_s: 60 }, { points: 1000, duration_s: 3600 }],
    endpoints: [{ method: 'POST', pattern: '/inference', group: 'inference', points: 3, duration_s: 60 }],
  } } });
  t.teardown(() => ts.close());
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
  const ts = await startServer({ config: { rateLimits: { edge: { points: 3, duration_s: 60 }, default: [{ points: 100, duration_s: 60 }], endpoints: [] } } });
  t.teardown(() => ts.close());
  const statuses = [];
  for (let i = 0; i < 4; i++) statuses.push((await call(ts.url, 'GET', '/list-api-keys', { key: 'loom_sk_bogus' })).status);
  t.same(statuses, [401, 401, 401, 429], 'even unauthenticated calls are counted and refused');
  const r = await call(ts.url, 'GET', '/list-api-keys', { key: 'loom_sk_bogus' });
  t.equal(r.status, 429);
  t.equal(r.body.code, 'edge_rate_limit');
  t.equal(r.body.scope, 'ip');
});

t.test('GET /health is exempt from the edge and per-IP limits (probes behind a proxy share one IP)', async (t) => {
  const ts = await startServer({ config: { rateLimits: { edge: { points: 3, duration_s: 60 }, default: [{ points: 2, duration_s: 60 }], endpoints: [] } } });
  t.teardown(() => ts.close());
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
