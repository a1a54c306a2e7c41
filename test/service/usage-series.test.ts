// Usage over time per key and per model (GET /usage) and the rate-limit table (GET /rate-limits).
import t from 'tap';
import { usageSeries } from '../../src/service/usage/series.ts';
import type { UsageRecord } from '../../src/store/types.ts';
import { call, makeUser, startServer } from './helpers.ts';

const rec = (created_at: string, key_id: string | null, model_id: string, tokens: number, cost_micro: number) =>
  ({ id: created_at + key_id, team_id: 't', key_id, user_id: null, model_id, endpoint: '/inference',
    inference_id: null, cost_micro, created_at, usage: { total_tokens: tokens } } as unknown as UsageRecord);

t.test('buckets by UTC day and hour, per key and per model', async (t) => {
  const rs = [
    rec('2026-11-01T23:59:59.000Z', 'k1', 'm/a', 10, 1000),
    rec('2026-11-02T00:00:00.000Z', 'k1', 'm/a', 5, 500),
    rec('2026-11-02T00:30:00.000Z', 'k2', 'm/b', 7, 3000),
    rec('2026-11-02T01:00:00.000Z', null, 'm/a', 1, 100),
    rec('2026-11-03T00:00:00.000Z', 'k1', 'm/a', 99, 99), // == until: left out
  ];
  const since = Date.parse('2026-11-01T00:00:00Z');
  const until = Date.parse('2026-11-03T00:00:00Z');
  const byKey = usageSeries(rs, { group_by: 'key', interval: 'day', since, until }, (g) => `name ${g}`);
  t.same(byKey.buckets, [
    { start: '2026-11-01T00:00:00.000Z', group: 'k1', requests: 1, tokens: 10, cost: 0.001 },
    { start: '2026-11-02T00:00:00.000Z', group: 'k1', requests: 1, tokens: 5, cost: 0.0005 },
    { start: '2026-11-02T00:00:00.000Z', group: 'k2', requests: 1, tokens: 7, cost: 0.003 },
    { start: '2026-11-02T00:00:00.000Z', group: 'session', requests: 1, tokens: 1, cost: 0.0001 },
  ]);
  t.same(byKey.groups.map((g) => [g.id, g.name, g.requests, g.tokens, g.cost]), [
    ['k2', 'name k2', 1, 7, 0.003],
    ['k1', 'name k1', 2, 15, 0.0015],
    ['session', 'name session', 1, 1, 0.0001],
  ], 'most costly first');
  const byModelHour = usageSeries(rs, { group_by: 'model', interval: 'hour', since, until }, (g) => g);
  t.same(byModelHour.buckets.map((b) => [b.start.slice(5, 13), b.group, b.tokens]), [
    ['11-01T23', 'm/a', 10],
    ['11-02T00', 'm/a', 5],
    ['11-02T00', 'm/b', 7],
    ['11-02T01', 'm/a', 1],
  ]);
  t.throws(() => usageSeries(rs, { group_by: 'key', interval: 'hour', since, until: since + 400 * 3_600_000 }, String),
    /at most 366 hour buckets/);
});

t.test('GET /usage and GET /rate-limits through the API', async (t) => {
  const ts = await startServer({ config: { rateLimits: {
    edge: { points: 1000, duration_s: 60 },
    default: [{ points: 500, duration_s: 60 }],
    endpoints: [{ method: 'POST', pattern: '/inference', group: 'inference', points: 10, duration_s: 60 }],
  } } });
  t.teardown(() => ts.close());
  const a = await makeUser(ts, { credits: 10 });
  const b = await makeUser(ts, { credits: 10, team_id: a.team_id });
  const body = { model_id: 'test/encoder', text: 'Alice met Bob in Paris', schema: ['person'] };
  for (const key of [a.key, a.key, b.key]) {
    t.equal((await call(ts.url, 'POST', '/inference', { key, body })).status, 200);
  }

  const u = await call(ts.url, 'GET', '/usage?group_by=key&interval=day', { key: a.key });
  t.equal(u.status, 200);
  const keys = (await call(ts.url, 'GET', '/list-api-keys', { key: a.key })).body.keys;
  const acct = (await call(ts.url, 'GET', '/account', { key: a.key })).body;
  for (const k of keys) {
    const g = u.body.groups.find((x: any) => x.id === k.id);
    t.ok(g, `key ${k.name} has a series`);
    t.equal(g.tokens, k.usage_tokens, 'tokens as the key list totals');
    t.ok(Math.abs(g.cost - k.usage_cost) < 1e-9, 'cost as the key list totals');
    t.match(g.name, new RegExp(`…${k.api_key_last_digits}`));
  }
  t.same(u.body.groups.map((g: any) => g.requests).sort(), [1, 2]);
  const total = u.body.buckets.reduce((s: number, x: any) => s + x.cost, 0);
  t.ok(Math.abs(total - acct.credits.total_spent) < 1e-9, 'the series sums to what was debited');
  const m = await call(ts.url, 'GET', '/usage?group_by=model&interval=hour', { key: a.key });
  t.same(m.body.groups.map((g: any) => [g.id, g.requests]), [['test/encoder', 3]]);

  const bad = await call(ts.url, 'GET', '/usage?interval=week', { key: a.key });
  t.equal(bad.status, 422);
  t.match(JSON.stringify(bad.body.errors), /interval.*must be one of hour, day/);
  const rev = await call(ts.url, 'GET', '/usage?since=2026-11-02T00:00:00Z&until=2026-11-01T00:00:00Z', { key: a.key });
  t.equal(rev.status, 422);
  t.match(rev.body.detail, /until must be after since/);
  t.equal((await call(ts.url, 'GET', '/usage')).status, 401);

  const r1 = await call(ts.url, 'GET', '/rate-limits', { key: b.key });
  t.equal(r1.status, 200);
  const inf = r1.body.limits.find((l: any) => l.family === 'inference');
  t.same(inf, { family: 'inference', endpoints: ['POST /inference'], scope: 'team', limit: 10, window_s: 60,
    remaining: 7, reset_s: inf.reset_s });
  t.ok(inf.reset_s >= 1 && inf.reset_s <= 60);
  const r2 = await call(ts.url, 'GET', '/rate-limits', { key: a.key });
  t.equal(r2.body.limits.find((l: any) => l.family === 'inference').remaining, 7, 'reading the table counts nothing');
  const def = r2.body.limits.find((l: any) => l.family === 'default');
  t.equal(def.limit, 500);
  t.equal(def.remaining, Number(r2.headers.get('x-ratelimit-remaining')), 'the IP default as the headers say');
  t.equal(r2.body.limits[0].family, 'edge');
});
