// Billing denials point somewhere that exists: each denial's `resolution_url` is a page of this
// server (GET /account: plan, credits, card on file) that answers the caller with what to fix.
import t from 'tap';
import { call, makeUser, startServer } from './helpers.ts';

const plans = {
  free: { id: 'free', kind: 'free' as const, credits: 0, overage_ceiling: 0, requires_card: false },
  pro: { id: 'pro', kind: 'paid' as const, credits: 0, overage_ceiling: 0, requires_card: true },
};
const ts = await startServer({ config: { plans } });
t.teardown(() => ts.close());
// publicUrl stays the default (127.0.0.1:8080); the test server listens on another port, so the link's path is followed
const follow = async (url: string, key: string) => call(ts.url, 'GET', new URL(url).pathname, { key });

t.test('every billing denial links to a page that exists and shows what to resolve', async (t) => {
  const free = await makeUser(ts);
  const pro = await makeUser(ts, { plan: 'pro' });
  const body = (model_id: string) => ({ model_id, text: 'Alice', schema: ['person'] });
  const cases = [
    // direct model on the free plan: needs paid credits
    { user: free, body: body('test/encoder'), status: 402, code: 'direct_model_requires_credits' },
    // the free plan without allowance, through the router
    { user: free, body: body('service/auto'), status: 402, code: 'out_of_credits' },
    // a paid plan without a card
    { user: pro, body: body('test/encoder'), status: 403, code: 'card_required' },
  ];
  for (const c of cases) {
    const r = await call(ts.url, 'POST', '/inference', { key: c.user.key, body: c.body });
    t.equal(r.status, c.status, `${c.code}: ${c.status}`);
    t.equal(r.body.code, c.code);
    t.notMatch(r.body.resolution_url, /\/billing\//, 'not the /billing/ pages, which do not exist');
    const page = await follow(r.body.resolution_url, c.user.key);
    t.equal(page.status, 200, `${c.code}: ${r.body.resolution_url} answers 200`);
    t.match(page.body, { plan: String, credits: { available: Number, paid_balance: Number }, card_on_file: Boolean });
  }
  // and the same link in the OpenAI-style envelope of the /v1 routes
  const chat = { model: 'test/decoder', messages: [{ role: 'user', content: 'hi' }] };
  const v1 = await call(ts.url, 'POST', '/v1/chat/completions', { key: free.key, body: chat });
  t.equal(v1.status, 402);
  t.equal((await follow(v1.body.error.resolution_url, free.key)).status, 200, '/v1 envelope: the link answers 200');
});
