// Credit holds: concurrent billed calls cannot overdraw an account by more than one call's cost.
// Each call holds an upper bound of its cost before it runs and settles after; calls that do not
// fit wait for the team's calls in flight, and are refused (402/403, the billing body) only when
// the balance itself is spent. The ledger stays exact: balance == initial - sum(usage costs).
import t from 'tap';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { openStore } from '../../src/store/index.ts';
import { call, makeUser, startServer } from './helpers.ts';
import { startChild } from './child-server.ts';
import type { FakeRuntime } from './fake-runtime.ts';

const catalogFile = join(tmpdir(), `loom-catalog-holds-${process.pid}.json`);
// encoder: 3333 micro-credits a token; 'Alice Bob' with one label is 3 tokens = 0.009999 credits
// decoder: 1000 in / 2000 out a token, no context length known (its hold bounds 32,768 output tokens)
writeFileSync(catalogFile, JSON.stringify({ models: [
  { id: 'test/encoder', pricing: { input: 3333, output: 0 } },
  { id: 'test/decoder', pricing: { input: 1000, output: 2000 } },
] }));
const plans = {
  free: { id: 'free', kind: 'free' as const, credits: 3, overage_ceiling: 0, requires_card: false },
  pro: { id: 'pro', kind: 'paid' as const, credits: 1, overage_ceiling: 1, requires_card: true },
};
const rateLimits = {
  edge: { points: 1_000_000, duration_s: 60 }, default: [{ points: 1_000_000, duration_s: 60 }],
  endpoints: [{ method: 'POST', pattern: '/inference', group: 'inference', points: 1_000_000, duration_s: 60 }],
};
const ts = await startServer({ config: { catalogFile, plans, rateLimits } });
t.teardown(() => ts.close());
const CALL_MICRO = 9_999;
const body = { model_id: 'service/auto', text: 'Alice Bob', schema: ['person'] };

const inferN = (n: number, key: string, b: unknown = body) =>
  Promise.all(Array.from({ length: n }, () => call(ts.url, 'POST', '/inference', { key, body: b })));

async function ledger(teamId: string) {
  const usage = (await ts.services.store.usage.listByTeam(teamId));
  return { count: usage.length, micro: usage.reduce((n, r) => n + r.cost_micro, 0) };
}

t.test('1,000 concurrent calls on credit for about 300: overdraft below one call, the rest get 402', async (t) => {
  const u = await makeUser(ts); // free plan: 3 credits = 300.03 calls
  const res = await inferN(1000, u.key);
  const ok = res.filter((r) => r.status === 200);
  const denied = res.filter((r) => r.status === 402);
  t.equal(ok.length + denied.length, 1000, 'every call is served or refused with 402');
  t.equal(ok.length, 301, 'the calls the balance pays for, plus the one that crosses zero');
  for (const r of denied) {
    t.same(Object.keys(r.body).sort(), ['code', 'message', 'resolution_url']);
    t.equal(r.body.code, 'out_of_credits');
    t.equal(r.headers.get('retry-after'), null, 'a billing denial, not a rate limit');
  }
  const acct = (await ts.services.billing.view(u.team_id));
  t.ok(acct.credits.available * 1e6 >= -CALL_MICRO, `final balance ${acct.credits.available} >= -(one call's cost)`);
  t.ok(acct.credits.available <= 0, 'the balance is spent before anyone is refused');
  const l = (await ledger(u.team_id));
  t.equal(l.count, ok.length, 'one usage record per served call');
  t.equal(l.micro, ok.reduce((n, r) => n + Math.round(r.body.cost * 1e6), 0), 'usage records add up to the responses');
  t.equal(Math.round((3 - acct.credits.available) * 1e6), l.micro, 'balance == initial - sum(usage costs)');
  const hist = await call(ts.url, 'GET', '/inferences?limit=1000', { key: u.key });
  t.equal(hist.body.total, ok.length, 'one inference record per served call');
  t.equal(ts.services.billing.heldMicro(u.team_id), 0, 'no hold outlives its call');
});

t.test('paid plan: concurrent calls stop at the overage ceiling plus at most one call, then 403', async (t) => {
  const u = await makeUser(ts, { plan: 'pro', card: true }); // 1 included + 1 overage credit
  const res = await inferN(400, u.key);
  const ok = res.filter((r) => r.status === 200);
  const refused = res.filter((r) => r.status === 403);
  t.equal(ok.length + refused.length, 400);
  t.equal(ok.length, 201, '1 included credit (100.01 calls) + 1 overage credit, the last call crossing the ceiling');
  t.ok(refused.every((r) => r.body.code === 'credit_ceiling_reached' && typeof r.body.resolution_url === 'string'));
  const acct = (await ts.services.billing.view(u.team_id));
  const over = acct.credits.overage_used;
  t.ok(over * 1e6 <= 1e6 + CALL_MICRO, `overage ${over} <= ceiling + one call`);
  t.equal(Math.round(acct.credits.total_spent * 1e6), (await ledger(u.team_id)).micro, 'spent == sum(usage costs)');
  t.equal(ts.services.billing.heldMicro(u.team_id), 0);
});

t.test('holds larger than the balance make calls wait for each other, not fail', async (t) => {
  // each decoder call holds ~65 credits (32,768 output tokens) on a 3-credit account but costs 0.008
  const u = await makeUser(ts);
  const dec = { model_id: 'service/auto', messages: [{ role: 'user', content: 'one two three four' }] };
  const res = await inferN(20, u.key, dec);
  t.same(res.map((r) => r.status), Array(20).fill(200), 'every call the balance pays for is served');
  const acct = (await ts.services.billing.view(u.team_id));
  t.equal(Math.round((3 - acct.credits.available) * 1e6), (await ledger(u.team_id)).micro);
  t.equal((await ledger(u.team_id)).count, 20);
});

t.test('a failed call releases its hold and is not billed', async (t) => {
  const u = await makeUser(ts);
  const rt = ts.runtime as FakeRuntime;
  rt.failNext = new Error('boom');
  const bad = await call(ts.url, 'POST', '/inference', { key: u.key, body });
  t.equal(bad.status, 500);
  t.equal(ts.services.billing.heldMicro(u.team_id), 0, 'the hold is gone');
  t.equal((await ledger(u.team_id)).count, 0, 'nothing billed');
  t.equal((await ts.services.billing.view(u.team_id)).credits.available, 3);
  t.equal((await call(ts.url, 'POST', '/inference', { key: u.key, body })).status, 200);
});

t.test('a call that must wait gives up after creditHoldWaitMs with the billing denial', async (t) => {
  const slow = await startServer({ config: { catalogFile, plans, rateLimits, creditHoldWaitMs: 200 } });
  t.teardown(() => slow.close());
  const u = await makeUser(slow);
  const rt = slow.runtime as FakeRuntime;
  // the first call's extraction never returns while the second waits for its hold
  let release!: () => void;
  const gate = new Promise<void>((r) => { release = r; });
  const extract = rt.extract.bind(rt);
  rt.extract = async (...a: Parameters<FakeRuntime['extract']>) => { await gate; return extract(...a); };
  // 3 credits, a hold of ~3.4 credits (a text of 340 characters): the second call does not fit
  const big = { ...body, text: 'Alice '.repeat(56) };
  const first = call(slow.url, 'POST', '/inference', { key: u.key, body: big });
  await new Promise((r) => setTimeout(r, 50));
  const held = (await call(slow.url, 'GET', '/account', { key: u.key })).body.credits;
  t.match(held, { available: 3, held: 1102 * 3333 / 1e6 }, 'GET /account shows the hold of the call in flight');
  const t0 = Date.now();
  const second = await call(slow.url, 'POST', '/inference', { key: u.key, body: big });
  t.equal(second.status, 402);
  t.equal(second.body.code, 'out_of_credits');
  t.ok(Date.now() - t0 >= 150, 'it waited for the call in flight');
  release();
  t.equal((await first).status, 200);
  t.equal(slow.services.billing.heldMicro(u.team_id), 0);
  t.equal((await call(slow.url, 'GET', '/account', { key: u.key })).body.credits.held, 0);
});

t.test('kill -9 during 1,000 concurrent calls: every answered call is in the ledger, no credit stays held', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'loom-holds-crash-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const config = { catalogFile, plans, rateLimits };
  const first = await startChild(dataDir, '', config);
  const key = first.key!;
  const fire = (url: string, n: number, onAnswer?: (done: number) => void) => {
    let done = 0;
    return Promise.all(Array.from({ length: n }, () => call(url, 'POST', '/inference', { key, body }).then(
      (r) => { onAnswer?.(++done); return r; },
      () => null, // the server died with this call in flight
    )));
  };
  // the server dies once 100 calls have been answered
  const before = (await fire(first.url, 1000, (n) => { if (n === 100) first.kill(); })).filter((r) => r !== null);
  await first.exited;
  const answered = before.filter((r) => r.status === 200);
  t.ok(answered.length >= 100, `${answered.length} calls served before the kill`);
  t.ok(before.length < 1000, `${1000 - before.length} calls cut off by the kill`);
  let store = await openStore(dataDir);
  const teamId = (await store.users.byEmail('crash@example.com'))!.team_id;
  const recorded = new Set((await store.usage.listByTeam(teamId)).map((u) => u.inference_id));
  t.ok(answered.every((r) => recorded.has(r.body.inference_id)), 'every answered call has its usage record');
  await store.close();

  // restarted: no hold of the dead process is left; the balance runs out exactly as without a kill
  const second = await startChild(dataDir, '', config);
  t.teardown(() => second.kill());
  const after = (await fire(second.url, 1000)).filter((r) => r !== null);
  t.equal(after.length, 1000);
  t.ok(after.every((r) => r.status === 200 || r.body.code === 'out_of_credits'));
  second.kill();
  await second.exited;
  store = await openStore(dataDir);
  t.teardown(() => store.close());
  const usage = (await store.usage.listByTeam(teamId));
  const spent = usage.reduce((n, u) => n + u.cost_micro, 0);
  const a = (await store.accounts.get(teamId))!;
  const balance = a.free_allowance_micro + a.included_micro + a.paid_balance_micro;
  t.equal(balance, 3_000_000 - spent, 'balance == initial - sum(usage costs)');
  t.equal(a.total_spent_micro, spent);
  t.ok(balance >= -CALL_MICRO && balance <= 0, `balance ${balance / 1e6}: spent, overdrawn by less than one call`);
  t.equal(usage.length, 301, 'the same 301 calls as without a crash');
});
