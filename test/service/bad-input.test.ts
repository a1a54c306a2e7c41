// Bad input gets a 4xx in the spec's shape, never a 500 (issue 13, defect 5): ids longer than any
// store key, lone surrogates, numbers JSON.parse turns into Infinity, malformed percent-encoding in
// the path, and 422 bodies that always carry `errors`.
import t from 'tap';
import { call, makeUser, startServer } from './helpers.ts';
import { badJsonValue } from '../../src/service/json-input.mjs';

// workerParseBytes 512: the padded bodies below go through the Piscina worker, the short ones do not
const ts = await startServer({ config: { workerParseBytes: 512 } });
t.teardown(() => ts.close());
const u = await makeUser(ts, { credits: 100 });
const long = 'a'.repeat(5000);
const pad = 'x'.repeat(1024); // pushes a body past workerParseBytes
const FINITE = 'must be a finite number (it overflows a double)';

t.test('ids longer than any store key are "not found", not 500', async (t) => {
  const cases: Array<[string, string, unknown?]> = [
    ['POST', '/inference', { model_id: long, text: 'Alice', schema: ['person'] }],
    ['POST', '/v1/chat/completions', { model: long, messages: [{ role: 'user', content: 'hi' }] }],
    ['POST', '/v1/messages', { model: long, max_tokens: 5, messages: [{ role: 'user', content: 'hi' }] }],
    ['POST', '/felix/training-jobs', { base_model: long, datasets: [{ name: 'x' }] }],
    ['POST', '/felix/training-jobs', { base_model: 'test/encoder', datasets: [{ name: long }] }],
    ['GET', `/felix/datasets/${long}`],
    ['GET', `/v1/models/${long}`],
    ['GET', `/felix/datasets/${long}/1/preview`],
  ];
  for (const [method, path, body] of cases) {
    const r = await call(ts.url, method, path, { key: u.key, body });
    t.equal(r.status, 404, `${method} ${path.slice(0, 30)} → 404 (${r.text.slice(0, 80)})`);
  }
  const q = await call(ts.url, 'GET', `/inferences?model_id=${long}`, { key: u.key });
  t.equal(q.status, 200, 'a history filter by an impossible id matches nothing');
  t.equal(q.body.total, 0);
});

t.test('a project name the name index cannot hold is a 422 naming /name', async (t) => {
  const r = await call(ts.url, 'POST', '/projects', { key: u.key, body: { name: '😀'.repeat(200) } });
  t.equal(r.status, 422);
  t.equal(r.body.errors[0].path, '/name');
  const ok = await call(ts.url, 'POST', '/projects', { key: u.key, body: { name: '中'.repeat(200) } });
  t.equal(ok.status, 200, '200 CJK characters still fit');
});

t.test('lone surrogates anywhere in a body are a 422 naming the path (main thread and worker)', async (t) => {
  for (const raw of ['{"name":"\\ud800"}', `{"name":"ok\\udfff","pad":"${pad}"}`]) {
    const r = await call(ts.url, 'POST', '/projects', { key: u.key, raw });
    t.equal(r.status, 422, raw.slice(0, 30));
    t.same(r.body.errors, [{ path: '/name', message: 'must not contain a lone UTF-16 surrogate', keyword: 'unicode' }]);
  }
  const key = await call(ts.url, 'POST', '/projects', { key: u.key, raw: '{"name":"p","a":[{"\\ud800x":1}]}' });
  t.equal(key.status, 422);
  t.equal(key.body.errors[0].path, '/a/0/\ud800x');
  const pair = await call(ts.url, 'POST', '/projects', { key: u.key, raw: '{"name":"emoji \\ud83d\\ude00"}' });
  t.equal(pair.status, 200, 'a well-formed surrogate pair is an ordinary character');
  t.equal(pair.body.name, 'emoji 😀');
});

t.test('numbers past the double range are a 422 naming the path, on every endpoint family', async (t) => {
  const chat = (extra: string) => `{"model":"test/decoder","messages":[{"role":"user","content":"hi"}],${extra}}`;
  const seed = await call(ts.url, 'POST', '/v1/chat/completions', { key: u.key, raw: chat('"seed":1e400') });
  t.equal(seed.status, 422);
  t.equal(seed.body.error.param, 'seed', 'OpenAI-style envelope names the param');
  const topK = await call(ts.url, 'POST', '/v1/chat/completions', {
    key: u.key, raw: chat(`"top_k":-1e400,"user":"${pad}"`),
  });
  t.equal(topK.status, 422, 'worker path too');
  t.equal(topK.body.error.param, 'top_k');
  const raw = '{"model_id":"test/encoder","text":"Alice","schema":["person"],"threshold":1e999}';
  const inf = await call(ts.url, 'POST', '/inference', { key: u.key, raw });
  t.equal(inf.status, 422);
  t.same(inf.body.errors, [{ path: '/threshold', message: FINITE, keyword: 'finite' }]);
  const msg = await call(ts.url, 'POST', '/v1/messages', {
    key: u.key, headers: { 'anthropic-version': '2023-06-01' },
    raw: '{"model":"test/decoder","max_tokens":1e400,"messages":[{"role":"user","content":"hi"}]}',
  });
  t.equal(msg.status, 422);
  t.equal(msg.body.type, 'error', 'messages-style envelope');
});

t.test('malformed percent-encoding in the path is a 400', async (t) => {
  for (const path of ['/felix/datasets/%ZZ', '/felix/datasets/%ED%A0%80', '/felix/datasets/abc%', '/v1/models/%ZZ']) {
    const r = await call(ts.url, 'GET', path, { key: u.key });
    t.equal(r.status, 400, path);
  }
  const native = await call(ts.url, 'GET', '/felix/datasets/%ZZ', { key: u.key });
  t.same(Object.keys(native.body), ['detail']);
  const ok = await call(ts.url, 'GET', '/felix/datasets/my%2Ddata', { key: u.key });
  t.equal(ok.status, 404, 'a valid escape still decodes (no such dataset)');
  t.match(ok.body.detail, /my-data/);
});

t.test('every native 422 carries an errors array', async (t) => {
  const arr = await call(ts.url, 'POST', '/v1/messages', { key: u.key, raw: '[]' });
  t.equal(arr.status, 422);
  t.ok(Array.isArray(arr.body.errors) && arr.body.errors.length === 1, JSON.stringify(arr.body));
  t.equal(typeof arr.body.detail, 'string');
  // service/auto's router: nothing has context for this prompt (the native family, no messages header)
  const huge = await call(ts.url, 'POST', '/v1/messages', {
    key: u.key,
    body: { model: 'service/auto', max_tokens: 16, messages: [{ role: 'user', content: 'word '.repeat(12_000) }] },
  });
  t.equal(huge.status, 422, huge.text.slice(0, 200));
  t.match(huge.body.detail, /needs about \d+ tokens/);
  t.same(huge.body.errors, [{ path: '/messages', message: huge.body.detail, keyword: 'context_length_exceeded' }]);
});

t.test('badJsonValue: first offending value by JSON pointer; deep nesting does not overflow', async (t) => {
  t.equal(badJsonValue({ a: [1, 'x', { b: null }] }), null);
  t.same(badJsonValue({ a: [1, { 'x/y~': Infinity }] }), { path: '/a/1/x~1y~0', message: FINITE, keyword: 'finite' });
  t.equal(badJsonValue(-Infinity)?.path, '');
  const deep = JSON.parse('['.repeat(100_000) + '"\\ud800"' + ']'.repeat(100_000));
  t.equal(badJsonValue(deep, Infinity)?.keyword, 'unicode');
  t.same(badJsonValue(deep), { path: '/0'.repeat(64), message: 'must not nest deeper than 64 levels', keyword: 'maxDepth' });
  t.equal(badJsonValue(JSON.parse('['.repeat(64) + ']'.repeat(64))), null, '64 levels are accepted');
});

t.test('a path with no route answers 404 in the error shape of its API family', async (t) => {
  const native = await call(ts.url, 'GET', '/no-such-route', { key: u.key });
  t.equal(native.status, 404);
  t.match(native.body, { detail: /No route for GET \/no-such-route/ });
  const openai = await call(ts.url, 'GET', '/v1/no-such-route', { key: u.key });
  t.equal(openai.status, 404);
  t.match(openai.body, { error: { message: /No route/, type: String } });
  const messages = await call(ts.url, 'GET', '/v1/no-such-route', { key: u.key, headers: { 'messages-version': '2023-06-01' } });
  t.equal(messages.status, 404);
  t.match(messages.body, { type: 'error', error: { type: String, message: /No route/ } });
});
