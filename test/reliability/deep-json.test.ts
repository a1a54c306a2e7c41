// Found by the reliability fuzz (not in issue 13's list): a JSON body nested a few thousand levels
// deep passed JSON.parse and the schema, the model ran, and storing the inference record overflowed
// msgpackr's stack: 500 ("Maximum call stack size exceeded") on /inference, /gliner-2/extract-json
// and /gliner-2/extract-relations. Bodies now nest at most MAX_JSON_DEPTH levels: a 422 naming the
// limit, before anything runs or is billed, on the inline and the worker-thread parse paths alike.
import t from 'tap';
import { MAX_JSON_DEPTH } from '../../server/router.ts';
import { call, makeUser, startServer } from '../service/helpers.ts';
import { errorBodyProblem } from './helpers.ts';

const ts = await startServer();
t.teardown(() => ts.close());
const u = await makeUser(ts, { credits: 100 });
const nest = (d: number) => '{"a":'.repeat(d) + '1' + '}'.repeat(d);

t.test('a body nested deeper than the limit is a 422 naming it, and nothing runs', async (t) => {
  const cases: Array<[string, string, 'native' | 'openai']> = [
    [
      '/inference',
      `{"model_id":"test/encoder","text":"Alice","schema":{"structures":{"p":{"x":${nest(5000)}}}}}`,
      'native',
    ],
    [
      '/gliner-2/extract-json',
      `{"model_id":"test/encoder","text":"Alice","structures":{"person":{"x":${nest(5000)}}}}`,
      'native',
    ],
    ['/gliner-2/extract-relations', `{"model_id":"test/encoder","text":"Alice","relations":[${nest(5000)}]}`, 'native'],
    [
      '/v1/chat/completions',
      `{"model":"test/decoder","messages":[{"role":"user","content":"Hi"}],"x":${nest(5000)}}`,
      'openai',
    ],
    [
      '/inference',
      `{"model_id":"test/encoder","text":"Alice","schema":{"structures":{"p":{"x":${nest(MAX_JSON_DEPTH)}}}}}`,
      'native',
    ],
    // above 1 MiB the body is parsed in the worker pool
    [
      '/inference',
      `{"model_id":"test/encoder","text":"${'Alice '.repeat(200_000)}",` +
        `"schema":{"structures":{"p":{"x":${nest(5000)}}}}}`,
      'native',
    ],
  ];
  const before = (await ts.services.billing.usageOf(u.team_id)).length;
  for (const [path, raw, family] of cases) {
    const r = await call(ts.url, 'POST', path, { key: u.key, raw });
    t.equal(r.status, 422, `${path} (${raw.length} bytes): 422 (${r.text.slice(0, 160)})`);
    t.equal(errorBodyProblem(family, r.status, r.body, r.headers), null, 'documented body');
    t.match(JSON.stringify(r.body), new RegExp(`deeper than ${MAX_JSON_DEPTH}`), 'names the limit');
  }
  t.equal((await ts.services.billing.usageOf(u.team_id)).length, before, 'nothing was billed');
});

t.test('bodies within the limit are served as before', async (t) => {
  const r = await call(ts.url, 'POST', '/inference', {
    key: u.key,
    raw: `{"model_id":"test/encoder","text":"Alice","schema":{"structures":{"p":{"x":${nest(MAX_JSON_DEPTH - 6)}}}}}`,
  });
  t.equal(r.status, 200, r.text.slice(0, 200));
  const m = await call(ts.url, 'POST', '/v1/chat/completions', {
    key: u.key,
    body: {
      model: 'test/decoder',
      messages: [{ role: 'user', content: [{ type: 'text', text: 'Hi' }] }],
      max_tokens: 4,
    },
  });
  t.equal(m.status, 200, m.text.slice(0, 200));
});
