// Credits and plans through HTTP: usage records + atomic debits, cache multipliers per caching
// family, and each billing denial with its exact body (code, message, resolution_url).
import t from 'tap';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { costMicro, completeUsage } from '../../src/service/billing.ts';
import { call, makeUser, startServer } from './helpers.ts';

const catalogFile = join(tmpdir(), `loom-catalog-billing-${process.pid}.json`);
// 1 token of input = 0.25 credits, so allowances run out in a few calls
writeFileSync(catalogFile, JSON.stringify({ models: [{ id: 'test/encoder', pricing: { input: 250_000, output: 0 } }, { id: 'test/decoder', pricing: { input: 250_000, output: 500_000 } }] }));
const plans = {
  free: { id: 'free', kind: 'free' as const, credits: 2, overage_ceiling: 0, requires_card: false },
  pro: { id: 'pro', kind: 'paid' as const, credits: 1, overage_ceiling: 1, requires_card: true },
};
const ts = await startServer({ config: { catalogFile, plans } });
t.teardown(() => ts.close());
const enc = (text = 'Alice') => ({ model_id: 'test/encoder', text, schema: ['person'] });
const auto = (text = 'Alice') => ({ model_id: 'service/auto', text, schema: ['person'] });

t.test('cost: credits per 1M tokens with cache read/write multipliers per caching family', async (t) => {
  const p = { input: 10, output: 20 };
  const u = completeUsage({ prompt_tokens: 1000, cache_read_tokens: 1000, cache_write_tokens: 1000, completion_tokens: 1000 });
  t.equal(u.total_tokens, 4000);
  t.equal(costMicro(p, 'explicit', u), 10_000 + 1_000 + 12_500 + 20_000, 'messages-style: read 0.1x, write 1.25x');
  t.equal(costMicro(p, 'automatic_half', u), 10_000 + 5_000 + 10_000 + 20_000, 'read 0.5x, write 1x');
  t.equal(costMicro(p, 'automatic_tenth', u), 10_000 + 1_000 + 10_000 + 20_000, 'read 0.1x, write 1x');
});

t.test('free plan: router calls draw the one-time allowance, direct calls need paid credits, then 402 out_of_credits', async (t) => {
  const u = await makeUser(ts);
  const direct = await call(ts.url, 'POST', '/inference', { key: u.key, body: enc() });
  t.equal(direct.status, 402);
  t.same(direct.body, { code: 'direct_model_requires_credits', message: direct.body.message, resolution_url: 'http://127.0.0.1:8080/account' });
  t.type(direct.body.message, 'string');
  const ok = await call(ts.url, 'POST', '/inference', { key: u.key, body: auto('Alice Bob Carol Dan') }); // 5 tokens = 1.25 credits
  t.equal(ok.status, 200);
  t.equal(ok.body.routed_model, 'test/encoder');
  t.equal(ok.body.cost, 1.25);
  const second = await call(ts.url, 'POST', '/inference', { key: u.key, body: auto('Alice Bob Carol Dan') }); // 0.75 left: absorbed
  t.equal(second.status, 200, 'the last call with a positive balance is served');
  const acct = await call(ts.url, 'GET', '/account', { key: u.key });
  t.equal(acct.body.credits.free_allowance, 0);
  t.equal(acct.body.credits.paid_balance, -0.5, 'the shortfall of the last call is owed, not lost');
  t.equal(acct.body.credits.total_spent, 2.5);
  const out = await call(ts.url, 'POST', '/inference', { key: u.key, body: auto() });
  t.equal(out.status, 402);
  t.same(Object.keys(out.body).sort(), ['code', 'message', 'resolution_url']);
  t.equal(out.body.code, 'out_of_credits');
  // usage records add up to what was spent
  const usage = (await ts.services.store.usage.listByTeam(u.team_id));
  t.equal(usage.length, 2);
  t.equal(usage.reduce((n, r) => n + r.cost_micro, 0), 2_500_000);
  // granting credits unblocks direct calls
  await ts.services.billing.grant(u.team_id, 10);
  const paid = await call(ts.url, 'POST', '/inference', { key: u.key, body: enc() });
  t.equal(paid.status, 200);
  t.equal((await call(ts.url, 'GET', '/account', { key: u.key })).body.credits.paid_balance, 9.5 - 0.5);
});

t.test('paid plan: card required, included credits, overage up to the ceiling then 403 credit_ceiling_reached', async (t) => {
  const u = await makeUser(ts, { plan: 'pro' });
  const card = await call(ts.url, 'POST', '/inference', { key: u.key, body: enc() });
  t.equal(card.status, 403);
  t.same(card.body, { code: 'card_required', message: card.body.message, resolution_url: 'http://127.0.0.1:8080/account' });
  await ts.services.billing.setPlan(u.team_id, 'pro', { card_on_file: true });
  // included 1 credit + overage ceiling 1 credit; each call costs 0.5 (2 tokens)
  const statuses: number[] = [];
  for (let i = 0; i < 5; i++) statuses.push((await call(ts.url, 'POST', '/inference', { key: u.key, body: enc('Alice') })).status);
  t.same(statuses, [200, 200, 200, 200, 403]);
  const last = await call(ts.url, 'POST', '/inference', { key: u.key, body: enc('Alice') });
  t.equal(last.body.code, 'credit_ceiling_reached');
  t.equal(last.body.resolution_url, 'http://127.0.0.1:8080/account');
  const acct = await call(ts.url, 'GET', '/account', { key: u.key });
  t.match(acct.body.credits, { included: 0, overage_used: 1, overage_ceiling: 1 });
  const usage = (await ts.services.store.usage.listByTeam(u.team_id));
  t.same(usage.map((r) => r.drawn).reverse(), [
    { free_micro: 0, included_micro: 500_000, paid_micro: 0, overage_micro: 0 },
    { free_micro: 0, included_micro: 500_000, paid_micro: 0, overage_micro: 0 },
    { free_micro: 0, included_micro: 0, paid_micro: 0, overage_micro: 500_000 },
    { free_micro: 0, included_micro: 0, paid_micro: 0, overage_micro: 500_000 },
  ]);
  // overage disabled → out_of_credits instead
  await ts.services.billing.setPlan(u.team_id, 'pro', { overage_enabled: false });
  t.equal((await call(ts.url, 'POST', '/inference', { key: u.key, body: enc() })).body.code, 'out_of_credits');
});

t.test('billing denials are not rate limits: no Retry-After, and the same answer on retry', async (t) => {
  const u = await makeUser(ts);
  const a = await call(ts.url, 'POST', '/inference', { key: u.key, body: enc() });
  const b = await call(ts.url, 'POST', '/inference', { key: u.key, body: enc() });
  t.equal(a.status, 402);
  t.equal(b.status, 402);
  t.equal(a.headers.get('retry-after'), null);
});

t.test('key usage counters follow billed calls', async (t) => {
  const u = await makeUser(ts, { credits: 100 });
  await call(ts.url, 'POST', '/inference', { key: u.key, body: enc('Alice Bob') }); // 3 tokens
  await call(ts.url, 'POST', '/inference', { key: u.key, body: { model_id: 'test/decoder', messages: [{ role: 'user', content: 'a b' }] } }); // 2 + 2
  const list = await call(ts.url, 'GET', '/list-api-keys', { key: u.key });
  const k = list.body.keys[0];
  t.equal(k.usage_tokens, 7);
  t.equal(k.usage_cost, 0.75 + 0.5 + 1);
  t.equal(k.request_count, 3);
});
