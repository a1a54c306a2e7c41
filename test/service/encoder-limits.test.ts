// Issue 13 defect 1 through the HTTP API and the production runtime seam (runtime-local.ts with the
// tiny GLiNER2 on disk): the inputs that crashed the process (one word of 50,000-100,000
// characters, a schema label of 200,000 words) are served or refused with a 4xx naming the limit,
// never a 500, and an ordinary call afterwards returns what it returned before.
import t from 'tap';
import { ENCODER_LIMITS } from '../../src/models/encoder/limits.ts';
import { makeUser, call } from './helpers.ts';
import { startLocalEncoderServer } from './local-encoder-server.ts';

const ts = await startLocalEncoderServer();
t.teardown(() => ts.close());
const u = await makeUser(ts, { credits: 1000 });
const TEXT = 'Tim Cook announced the new iPhone at the Apple campus in Cupertino.';
const ORDINARY = { model_id: 'service/auto', text: TEXT, schema: ['person', 'company'], threshold: 0.3 };
const ALICE = { model_id: 'service/auto', text: 'Alice' };
const infer = (body: Record<string, unknown>) => call(ts.url, 'POST', '/inference', { key: u.key, body });

t.test('the process survives the inputs that crashed it; an ordinary call is unchanged', async (t) => {
  const first = await infer(ORDINARY);
  t.equal(first.status, 200, first.text.slice(0, 200));

  // one word of 30,000 characters (30,000 tokens of the tiny vocabulary): windowed, served
  const word = await infer({ model_id: 'service/auto', text: 'A'.repeat(30_000), schema: ['person'] });
  t.equal(word.status, 200, word.text.slice(0, 200));
  t.same(Object.keys(word.body.result.entities), ['person']);

  // one word of 50,000 and 100,000 characters: over the per-request work bound, a 422 naming it
  for (const n of [50_000, 100_000]) {
    const huge = await infer({ model_id: 'service/auto', text: 'A'.repeat(n), schema: ['person'] });
    t.equal(huge.status, 422, huge.text.slice(0, 300));
    t.match(huge.body.detail, /requestTokens/);
    t.match(huge.body.detail, String(ENCODER_LIMITS.requestTokens));
    t.match(huge.body.errors, [{ path: '/text', keyword: 'requestTokens' }]);
  }

  // a schema label of 200,000 words
  const label = await infer({ ...ALICE, schema: [Array(200_000).fill('word').join(' ')] });
  t.equal(label.status, 422, label.text.slice(0, 300));
  t.match(label.body.errors, [{ path: '/schema/0', keyword: 'nameChars' }]);
  t.match(label.body.detail, /nameChars/);

  const many = await infer({ ...ALICE, schema: { entities: Array.from({ length: 5000 }, (_, i) => `l${i}`) } });
  t.equal(many.status, 422);
  t.match(many.body.errors, [{ path: '/schema/entities', keyword: 'labels' }]);

  // the compat `schema` extension refuses it as a 4xx too
  const compat = await call(ts.url, 'POST', '/v1/chat/completions', {
    key: u.key,
    body: { model: 'service/auto', messages: [{ role: 'user', content: 'Alice' }], schema: ['x'.repeat(300)] },
  });
  t.equal(compat.status, 422, compat.text.slice(0, 300));
  t.match(compat.body.error.message, /nameChars/);

  const again = await infer(ORDINARY);
  t.equal(again.status, 200);
  t.same(again.body.result, first.body.result, 'same result as before the oversized calls');
  t.equal((await call(ts.url, 'GET', '/health')).status, 200);
});
