// Two API server processes (child processes, test/service/child-server.ts) on one PostgreSQL store
// and one Redis, as docs/deploy.md section 2 runs them: credits stay exact after 1,000 concurrent
// billed calls spread over both (balance = what the team had − the sum of its usage records), and
// 200 concurrent calls on credit for 20.5 overdraw by less than one call's cost; a rate limit of N per
// window allows exactly N across both; a key revoked through one process is refused by the other on
// its next request. The billed endpoint is POST /inference on the test runtime double's encoder
// (test/service/fake-runtime.ts): the figure under test is the store and the billing, not a model.
// Needs PostgreSQL's server binaries and redis-server (.ci/run installs both); skipped without.
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { RateLimitConfig } from '../../src/service/config.ts';
import { createServices } from '../../src/service/index.ts';
import { postgresMissing, startPostgres } from '../helpers/postgres.ts';
import { REDIS_SKIP, startRedis } from '../helpers/redis.ts';
import { type ChildServer, startChild } from './child-server.ts';
import { FakeRuntime } from './fake-runtime.ts';
import { call } from './helpers.ts';

const skip = postgresMissing() ?? REDIS_SKIP;
const CALLS = 1000;
const N = 10;

t.test('two API processes on one PostgreSQL + Redis', { skip: skip || false }, async (t) => {
  const pgs = await startPostgres();
  t.teardown(() => pgs.close());
  const redis = await startRedis(t);
  const databaseUrl = await pgs.createDb();
  const tmp = mkdtempSync(join(tmpdir(), 'loom-multi-'));
  t.teardown(() => rmSync(tmp, { recursive: true, force: true }));

  // an admin handle on the same store (as `loom admin` would be): the team, its keys, its account
  const admin = await createServices({
    runtime: new FakeRuntime(), config: { dataDir: join(tmp, 'admin'), databaseUrl, databasePoolSize: 2 },
  });
  t.teardown(() => admin.close());
  const { user, team } = await admin.auth.createUser({ email: 'multi@example.com', password: 'correct horse battery' });
  const key = (await admin.auth.createKeyForUser(user.id, 'main')).secret_key;
  const other = await admin.auth.createKeyForUser(user.id, 'to revoke');
  await admin.billing.grant(team.id, 1);

  const limits: RateLimitConfig = {
    edge: { points: 1e9, duration_s: 60 },
    default: [{ points: 1e9, duration_s: 60 }],
    endpoints: [{ method: 'GET', pattern: '/list-api-keys', group: 'keys', points: N, duration_s: 60 }],
  };
  // a call that finds the credit held by calls in progress waits for them at most 2 s (not the default
  // minute): the refusals come quickly, and the test stays short on a loaded machine
  const config = { databaseUrl, databasePoolSize: 4, redisUrl: redis.url, rateLimits: limits, creditHoldWaitMs: 2000 };
  const servers: ChildServer[] = [];
  t.teardown(() => { for (const s of servers) s.kill(); });
  for (const name of ['a', 'b']) servers.push(await startChild(join(tmp, name), '', config));
  const [a, b] = servers;
  t.not(a.url, b.url, 'two processes, two ports');

  const body = { model_id: 'test/encoder', text: 'Alice met Bob in Paris', schema: ['person', 'city'] };
  /** `n` calls at once, alternating between the processes; the ledger and account they leave */
  const burst = async (n: number) => {
    const before = new Set((await admin.store.usage.listByTeam(team.id)).map((u) => u.id));
    const acc0 = (await admin.store.accounts.get(team.id))!;
    const res = await Promise.all(Array.from({ length: n }, (_, i) =>
      call(servers[i % 2].url, 'POST', '/inference', { key, body })));
    const acc = (await admin.store.accounts.get(team.id))!;
    const ledger = (await admin.store.usage.listByTeam(team.id)).filter((u) => !before.has(u.id));
    const served = res.filter((r) => r.status === 200).length;
    const servedBy = [0, 1].map((p) => res.filter((r, i) => r.status === 200 && i % 2 === p).length);
    return { res, acc0, acc, ledger, served, servedBy, sum: ledger.reduce((x, u) => x + u.cost_micro, 0) };
  };
  const setBalance = (micro: number) => admin.store.tx(async (x) => {
    const acc = (await x.accounts.get(team.id))!;
    x.accounts.put({ ...acc, free_allowance_micro: 0, paid_balance_micro: micro });
  });

  t.test(`credits are exact after ${CALLS} concurrent billed calls over both processes`, async (t) => {
    const first = await call(a.url, 'POST', '/inference', { key, body });
    t.equal(first.status, 200, 'one call to learn its cost');
    const cost = Math.round(first.body.cost * 1e6);
    t.ok(cost > 0, `a call costs ${cost} micro-credits`);
    await setBalance(10 * 1e6); // enough for every call's hold at once
    const b1 = await burst(CALLS);
    t.same(b1.res.map((r) => r.status).filter((s) => s !== 200), [], 'every call served');
    t.ok(b1.servedBy[0] === CALLS / 2 && b1.servedBy[1] === CALLS / 2, `each process served half: ${b1.servedBy}`);
    t.equal(b1.ledger.length, CALLS, 'one usage record per call');
    t.equal(b1.sum, CALLS * cost, 'the usage records add up to the calls');
    t.equal(b1.acc.total_spent_micro - b1.acc0.total_spent_micro, b1.sum, 'total spent moved by exactly the usage');
    t.equal(b1.acc.paid_balance_micro, 10 * 1e6 - b1.sum, 'balance = what the team had − the sum of its usage');
    t.equal((await admin.billing.view(team.id)).credits.held, 0, 'no credit hold outlives its call, in either process');
  });

  const overdraw = 'credit for 20.5 calls: 200 concurrent calls over both processes overdraw by less than one call';
  t.test(overdraw, async (t) => {
    const cost = Math.round((await call(a.url, 'POST', '/inference', { key, body })).body.cost * 1e6);
    const room = Math.round(20.5 * cost);
    await setBalance(room);
    const b2 = await burst(200);
    const statuses = [...new Set(b2.res.map((r) => r.status))].sort();
    t.same(statuses, [200, 402], `every call served or refused for credit (${b2.served} served)`);
    // the spec's two 402 codes: out_of_credits while holds use up the balance; once the settled balance is at or
    // below zero, a model called directly on the free plan answers direct_model_requires_credits (which one a late
    // call meets depends on how far the settling got)
    const codes = new Set(b2.res.filter((r) => r.status === 402).map((r) => r.body.code as string));
    t.ok([...codes].every((c) => c === 'out_of_credits' || c === 'direct_model_requires_credits'),
      `the spec's 402 codes only: ${[...codes]}`);
    t.equal(b2.ledger.length, b2.served, 'one usage record per served call');
    t.equal(b2.sum, b2.served * cost, 'the usage records add up to the served calls');
    t.equal(b2.acc.paid_balance_micro, room - b2.sum, 'balance = what the team had − the sum of its usage');
    t.ok(b2.acc.paid_balance_micro > -cost, `balance ${b2.acc.paid_balance_micro}: no overdraft past one call's cost`);
    t.ok(b2.served <= 21, `${b2.served} served: never more than the credit pays for, plus one call that overdraws`);
    t.equal((await admin.billing.view(team.id)).credits.held, 0, 'no credit hold outlives its call');
  });

  t.test(`a rate limit of ${N} per window allows exactly ${N} across both processes`, async (t) => {
    const res = await Promise.all(Array.from({ length: 3 * N }, (_, i) =>
      call(servers[i % 2].url, 'GET', '/list-api-keys', { key })));
    t.equal(res.filter((r) => r.status === 200).length, N, `exactly ${N} served`);
    t.equal(res.filter((r) => r.status === 429).length, 2 * N, 'the rest refused (429)');
    t.match(res.find((r) => r.status === 429)?.body, { code: 'endpoint_rate_limit', scope: 'team' });
  });

  t.test('a key revoked through one process is refused by the other on its next request', async (t) => {
    const body = { model_id: 'test/encoder', text: 'Alice', schema: ['person'] };
    await admin.billing.grant(team.id, 1);
    t.equal((await call(b.url, 'GET', '/account', { key: other.secret_key })).status, 200, 'B knows the key (cached)');
    const del = await call(a.url, 'DELETE', '/delete-api-key', { key, body: { key_id: other.id } });
    t.equal(del.status, 200, 'revoked through A');
    const r = await call(b.url, 'POST', '/inference', { key: other.secret_key, body });
    t.equal(r.status, 401, 'B refuses it on its next request');
    t.match(r.body.detail, /revoked/);
    t.equal((await call(b.url, 'POST', '/inference', { key, body })).status, 200, 'the team\'s other key still works');
  });
});
