// The overdraft bound at 1,000-way concurrency: an account with credits for a few dozen calls gets
// 1,000 simultaneous billed calls to the real tiny encoder. However they interleave, the balance
// never goes below minus one call's cost, every served call is billed exactly once (usage records =
// 200 answers = amount debited), and the refused ones get the documented 402 body.
import t from 'tap';
import { createLocalRuntime } from '../../src/service/runtime-local.ts';
import { DEFAULT_PLANS } from '../../src/service/config.ts';
import { call, makeUser, startServer } from '../service/helpers.ts';
import { ENCODER_ID, errorBodyProblem, makeDataDir, OPEN_RATE_LIMITS, removeDir, writeCatalog } from './helpers.ts';

const N = Number(process.env.LOOM_OVERDRAFT_N ?? 1000);
const modelsHome = makeDataDir('loom-rel-od-');
const catalogFile = writeCatalog(modelsHome, { input: 33_000, output: 0 }); // 0.033 credits a token
const ts = await startServer({
  runtime: createLocalRuntime({ modelsDir: `${modelsHome}/models` }),
  // no free allowance: the account holds exactly what the test grants
  config: {
    modelsDir: `${modelsHome}/models`,
    catalogFile,
    rateLimits: OPEN_RATE_LIMITS,
    plans: { ...DEFAULT_PLANS, free: { ...DEFAULT_PLANS.free, credits: 0 } },
  },
});
t.teardown(async () => {
  await ts.close();
  removeDir(modelsHome);
});

const body = {
  model_id: ENCODER_ID,
  text: 'Alice lives in Paris and works for Acme.',
  schema: ['person', 'city', 'company'],
};

t.test(`${N} concurrent billed calls on an account good for a few dozen`, async (t) => {
  const probe = await makeUser(ts, { credits: 100 });
  const one = await call(ts.url, 'POST', '/inference', { key: probe.key, body });
  t.equal(one.status, 200, one.text);
  const cost = one.body.cost as number;
  t.ok(cost > 0.1, `one call costs ${cost} credits`);

  const credits = Math.round(cost * 30.5 * 1e6) / 1e6; // 30 calls and a half
  const u = await makeUser(ts, { credits });
  t.equal((await ts.services.billing.view(u.team_id)).credits.available, credits);
  const res = await Promise.all(
    Array.from({ length: N }, () => call(ts.url, 'POST', '/inference', { key: u.key, body })),
  );
  const ok = res.filter((r) => r.status === 200);
  const denied = res.filter((r) => r.status === 402);
  t.equal(
    ok.length + denied.length,
    N,
    `every call is served or refused with 402 (${ok.length} served, ${denied.length} refused, others: ${JSON.stringify(
      res
        .filter((r) => r.status !== 200 && r.status !== 402)
        .slice(0, 3)
        .map((r) => r.text),
    )})`,
  );
  for (const r of denied.slice(0, 20))
    t.equal(errorBodyProblem('native', r.status, r.body, r.headers), null, 'documented 402 body');
  // a direct (not routed) call on the free plan: out_of_credits while the paid balance is held by
  // calls in flight, direct_model_requires_credits once it is spent (the spec's two 402 codes)
  t.ok(
    denied.every((r) => r.body?.code === 'out_of_credits' || r.body?.code === 'direct_model_requires_credits'),
    'refusals say out_of_credits or direct_model_requires_credits',
  );

  const acct = (await ts.services.billing.view(u.team_id));
  t.ok(
    acct.credits.available >= -cost - 1e-9,
    `balance ${acct.credits.available} stays at or above minus one call's cost (${-cost}) at ${N}-way concurrency`,
  );
  t.ok(ok.length <= 32, `served ${ok.length} calls on credits for 30.5`);
  // the ledger is exact
  const usage = (await ts.services.billing.usageOf(u.team_id));
  t.equal(usage.length, ok.length, 'one usage record per served call');
  const spentMicro = usage.reduce((n, r) => n + r.cost_micro, 0);
  t.equal(Math.round(acct.credits.total_spent * 1e6), spentMicro, 'amount debited = sum of the usage records');
  t.equal(Math.round((credits - acct.credits.available) * 1e6), spentMicro, 'granted − spent = available');
  t.equal(
    ok.reduce((n, r) => n + Math.round(r.body.cost * 1e6), 0),
    spentMicro,
    'the answers report what was debited',
  );
});
