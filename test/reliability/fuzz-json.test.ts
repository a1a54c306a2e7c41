// Property-based fuzzing of every route in the route table (fast-check, seeded): hostile bodies
// (wrong types, overflowing numbers, lone surrogates, deep nesting, long strings and words, unknown
// keys, arrays for objects, invalid JSON and UTF-8), hostile path parameters and query strings,
// against a real server process with the tiny GLiNER2 and TinyStories models. Zero 5xx, zero
// crashes, every request answered within the bound, every error body in its documented shape
// (spec section 7: native `detail` / 422 `errors`, the OpenAI-style envelope under /v1, the
// messages-style body with the `messages-version` header). Seed and count: LOOM_FUZZ_SEED,
// LOOM_FUZZ_RUNS (cases per route); `npm run bench -- reliability` runs many more.
import t from 'tap';
import { jsonCases, routeTable, runJsonCases, summarize } from './fuzz.ts';
import { login, makeDataDir, removeDir, seedUsers, ServerProcess } from './helpers.ts';

const SEED = Number(process.env.LOOM_FUZZ_SEED ?? 1313);
const PER_ROUTE = Number(process.env.LOOM_FUZZ_RUNS ?? 30);

const dataDir = makeDataDir();
const [user] = await seedUsers(dataDir, [{ credits: 1000 }]);
const srv = await new ServerProcess(dataDir).start();
t.teardown(async () => { await srv.stop(); removeDir(dataDir); });
const sess = await login(srv.url, user);

t.test(`every route, ${PER_ROUTE} hostile requests each (seed ${SEED})`, async (t) => {
  const routes = routeTable();
  t.ok(routes.length >= 60, `the route table has ${routes.length} routes`);
  const cases = jsonCases(SEED, PER_ROUTE);
  const stats = await runJsonCases(srv, sess, cases, { boundMs: 20_000, concurrency: 3 });
  t.comment(`sent ${stats.sent}, statuses ${JSON.stringify(stats.byStatus)}, slowest ${stats.maxMs} ms`);
  t.equal(stats.crashes, 0, 'the process never died');
  const shown = summarize(stats.findings);
  t.equal(stats.findings.length, 0, `no 5xx, no hang, documented error bodies${shown ? `:\n${shown}` : ''}`);
  const h = await fetch(srv.url + '/health');
  t.equal(h.status, 200, 'still healthy afterwards');
});
