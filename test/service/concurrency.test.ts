// Many simultaneous billed requests: credits debited, usage records, inference records, key
// counters and rate-limit counts must add up exactly.
import t from 'tap';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { call, makeUser, startServer } from './helpers.ts';
import { eachStore } from '../helpers/stores.ts';

const N = 120;
const LIMIT = 100;
const catalogFile = join(tmpdir(), `loom-catalog-conc-${process.pid}.json`);
writeFileSync(catalogFile, JSON.stringify({ models: [{ id: 'test/encoder', pricing: { input: 3333, output: 0 } }] }));
const rateLimits = { edge: { points: 100_000, duration_s: 60 }, default: [{ points: 20_000, duration_s: 60 }], endpoints: [{ method: 'POST', pattern: '/inference', group: 'inference', points: LIMIT, duration_s: 60 }] };

// on both store implementations (test/helpers/stores.ts)
eachStore(t, `${N} concurrent billed requests against a limit of ${LIMIT}`, async (t, fresh) => {
  const ts = await startServer({ config: { catalogFile, rateLimits, databaseUrl: (await fresh()).databaseUrl } });
  t.teardown(() => ts.close());
  const u = await makeUser(ts, { credits: 10 });
  const texts = Array.from({ length: N }, (_, i) => Array.from({ length: 1 + (i % 7) }, () => 'Alice').join(' '));
  const res = await Promise.all(texts.map((text) => call(ts.url, 'POST', '/inference', { key: u.key, body: { model_id: 'test/encoder', text, schema: ['person'] } })));
  const ok = res.filter((r) => r.status === 200);
  const limited = res.filter((r) => r.status === 429);
  t.equal(ok.length, LIMIT, 'exactly the limit was served');
  t.equal(limited.length, N - LIMIT, 'the rest were rate limited');
  t.same(ok.map((r) => Number(r.headers.get('x-ratelimit-remaining'))).sort((a, b) => a - b), Array.from({ length: LIMIT }, (_, i) => i), 'every remaining count handed out once');

  const costMicro = ok.reduce((n, r) => n + Math.round(r.body.cost * 1e6), 0);
  const tokens = ok.reduce((n, r) => n + r.body.usage.total_tokens, 0);
  const usage = (await ts.services.store.usage.listByTeam(u.team_id));
  t.equal(usage.length, LIMIT, 'one usage record per served call');
  t.equal(usage.reduce((n, r) => n + r.cost_micro, 0), costMicro, 'usage records add up to the responses');
  t.same(new Set(usage.map((r) => r.inference_id)), new Set(ok.map((r) => r.body.inference_id)));
  const acct = (await ts.services.billing.view(u.team_id));
  t.equal(Math.round(acct.credits.total_spent * 1e6), costMicro);
  t.equal(Math.round((100 + 10 - acct.credits.available) * 1e6), costMicro, 'free allowance + granted credits − spent = available');
  const hist = await call(ts.url, 'GET', '/inferences?limit=1000', { key: u.key });
  t.equal(hist.body.total, LIMIT, 'one inference record per served call');
  const keys = await call(ts.url, 'GET', '/list-api-keys', { key: u.key });
  const k = keys.body.keys[0];
  t.equal(k.request_count, N + 2, 'every authenticated request counted: N inference calls, GET /inferences and this list');
  t.equal(k.usage_tokens, tokens);
  t.equal(Math.round(k.usage_cost * 1e6), costMicro);
});
