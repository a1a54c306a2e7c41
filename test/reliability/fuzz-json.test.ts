// Property-based fuzzing of every route in the route table (fast-check, seeded): hostile bodies
// (wrong types, overflowing numbers, lone surrogates, deep nesting, long strings and words, unknown
// keys, arrays for objects, invalid JSON and UTF-8), hostile path parameters and query strings,
// against a real server process with the tiny GLiNER2 and TinyStories models. Zero 5xx, zero
// crashes, every request answered within the bound, every error body in its documented shape
// (spec section 7: native `detail` / 422 `errors`, the OpenAI-style envelope under /v1, the
// messages-style body with the `messages-version` header). Seed and count: LOOM_FUZZ_SEED,
// LOOM_FUZZ_RUNS (cases per route); `npm run bench -- reliability` runs many more.
import t from 'tap';
import { type JsonCase, jsonCases, routeTable, runJsonCases, summarize } from './fuzz.ts';
import { DECODER_ID, ENCODER_ID } from './helpers.ts';
import { login, makeDataDir, removeDir, seedUsers, ServerProcess } from './helpers.ts';

const SEED = Number(process.env.LOOM_FUZZ_SEED ?? 1313);
const PER_ROUTE = Number(process.env.LOOM_FUZZ_RUNS ?? 30);

const dataDir = makeDataDir();
const [user] = await seedUsers(dataDir, [{ credits: 1000 }]);
const srv = await new ServerProcess(dataDir).start();
t.teardown(async () => {
  await srv.stop();
  removeDir(dataDir);
});
const sess = await login(srv.url, user);

t.test(`every route, ${PER_ROUTE} hostile requests each (seed ${SEED})`, async (t) => {
  const routes = routeTable();
  t.ok(routes.length >= 60, `the route table has ${routes.length} routes`);
  const cases = jsonCases(SEED, PER_ROUTE);
  const stats = await runJsonCases(srv, sess, cases, { boundMs: 20_000, concurrency: 3 });
  t.comment(`sent ${stats.sent}, statuses ${JSON.stringify(stats.byStatus)}, slowest ${stats.maxMs} ms`);
  t.equal(stats.crashes, 0, 'the process never died');
  if (stats.findings.length) t.comment(`findings:${summarize(stats.findings)}`);
  t.equal(stats.findings.length, 0, 'no 5xx, no hang, documented error bodies (findings above)');
  const h = await fetch(srv.url + '/health');
  t.equal(h.status, 200, 'still healthy afterwards');
});

t.test(
  'the hostile inputs named in issue 13 (a long word, huge schemas, overflowing numbers, bad encodings)',
  async (t) => {
    const post = (path: string, body: unknown, messagesHeader = false): JsonCase => ({
      method: 'POST',
      path,
      route: `POST ${path}`,
      body: typeof body === 'string' ? body : JSON.stringify(body),
      messagesHeader,
      auth: 'key',
    });
    const get = (path: string): JsonCase => ({
      method: 'GET',
      path,
      route: `GET ${path}`,
      messagesHeader: false,
      auth: 'key',
    });
    const cases: JsonCase[] = [
      post('/inference', { model_id: 'service/auto', text: 'A'.repeat(50_000), schema: ['person'] }),
      post('/inference', { model_id: 'service/auto', text: 'A'.repeat(100_000), schema: ['person'] }),
      post('/inference', { model_id: ENCODER_ID, text: 'Alice lives in Paris.', schema: ['word '.repeat(200_000)] }),
      post('/inference', {
        model_id: ENCODER_ID,
        text: 'Alice lives in Paris.',
        schema: Array.from({ length: 20_000 }, (_, i) => `label${i}`),
      }),
      post('/gliner-2/extract-entities', { model_id: ENCODER_ID, text: 'B'.repeat(60_000), entities: ['person'] }),
      post('/v1/embeddings', { model: ENCODER_ID, input: 'C'.repeat(60_000) }),
      post(
        '/inference',
        `{"model_id":"${DECODER_ID}","messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"seed":1e400}`,
      ),
      post(
        '/v1/chat/completions',
        `{"model":"${DECODER_ID}","messages":[{"role":"user","content":"Hi"}],"max_tokens":4,"top_k":1e400}`,
      ),
      post('/inference', { model_id: 'm'.repeat(4093), text: 'x', schema: ['person'] }),
      post('/v1/chat/completions', { model: 'm'.repeat(5000), messages: [{ role: 'user', content: 'Hi' }] }),
      post('/felix/training-jobs', { base_model: 'b'.repeat(4100), datasets: [{ name: 'd' }], model_name: 'm' }),
      post('/felix/training-jobs', {
        base_model: 'loom/gliner2-init-tiny',
        datasets: [{ name: 'd'.repeat(4100) }],
        model_name: 'm',
      }),
      post('/projects', { name: '\ud800' }),
      post('/v1/messages', '[]'),
      post('/v1/messages', '[]', true),
      get('/felix/datasets/%ZZ'),
      get('/v1/models/%ZZ'),
      get(`/felix/datasets/${'n'.repeat(5000)}`),
    ];
    const stats = await runJsonCases(srv, sess, cases, { boundMs: 30_000, concurrency: 1 });
    t.comment(`statuses ${JSON.stringify(stats.byStatus)}, slowest ${stats.maxMs} ms`);
    t.equal(stats.crashes, 0, 'the process never died');
    if (stats.findings.length) t.comment(`findings:${summarize(stats.findings)}`);
    t.equal(stats.findings.length, 0, 'each answered in time with a documented 4xx or a 200 (findings above)');
    t.equal((await fetch(srv.url + '/health')).status, 200, 'still healthy afterwards');
  },
);
