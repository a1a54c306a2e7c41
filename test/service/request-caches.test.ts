// What the request pipeline keeps between requests answers as a fresh read would: the auth generation
// is read at most once a millisecond and again after a commit (src/service/read-cache.ts), a team's
// fine-tuned catalog entries are kept until this process commits (src/service/catalog.ts), headers
// are read from the live uWS request (the first of repeated ones), and the access log's duration
// text is JSON's.
import t from 'tap';
import { cachedRead, READ_KEPT_MS } from '../../src/service/read-cache.ts';
import { Writable } from 'node:stream';
import fc from 'fast-check';
import { createAccessLog, createLogger, hundredthsJson } from '../../server/log.ts';
import { call, makeUser, startServer } from './helpers.ts';

const ts = await startServer();
t.teardown(() => ts.close());
const store = ts.services.store;

t.test('a cached read is kept for a millisecond and read again after a commit of this process', async (t) => {
  let reads = 0;
  // a clock the test moves (three calls back to back took over a millisecond on a loaded CI machine)
  let now = 1000;
  const value = cachedRead(store, () => ++reads, () => now);
  const firsts = [value(), value()];
  now += READ_KEPT_MS * 0.9;
  firsts.push(value());
  t.same(firsts, [1, 1, 1], 'kept within the millisecond');
  now += READ_KEPT_MS * 0.2;
  t.equal(value(), 2, 'read again once older');
  const before = value();
  await store.tx((tx) => tx.meta.put('request-caches-test', 1));
  t.ok(value() > before, 'read again after a commit');
});

t.test('a revoked key is refused on the very next request, also right after one that filled the caches', async (t) => {
  const u = await makeUser(ts);
  t.equal((await call(ts.url, 'GET', '/v1/models', { key: u.key })).status, 200);
  const rec = (await store.keys.get(u.key_id))!;
  await store.tx((tx) => tx.keys.put({ ...rec, revoked_at: new Date().toISOString() }));
  const r = await call(ts.url, 'GET', '/v1/models', { key: u.key });
  t.equal(r.status, 401);
  t.match(r.body.error.message, /revoked/);
});

t.test('a job that completes is listed by GET /v1/models on the next request, for its team only', async (t) => {
  const a = await makeUser(ts);
  const b = await makeUser(ts);
  const ids = async (key: string) =>
    ((await call(ts.url, 'GET', '/v1/models', { key })).body.data as Array<{ id: string }>).map((m) => m.id);
  const id = crypto.randomUUID();
  t.notOk((await ids(a.key)).includes(id));
  const now = new Date().toISOString();
  const job = {
    id, team_id: a.team_id, status: 'complete', base_model: 'base', model_name: 'tuned', task_type: 'decoder',
    training_type: 'lora', training_algorithm: 'sft', project_id: null, created_at: now, updated_at: now,
    completed_at: now, datasets: [], configuration: {}, restarts: 0,
  };
  await store.tx((tx) => tx.trainingJobs.put(job as never));
  t.ok((await ids(a.key)).includes(id), 'listed at once (no wait for the cache)');
  t.notOk((await ids(b.key)).includes(id), 'not for another team');
  await store.tx((tx) => tx.trainingJobs.remove(id));
  t.notOk((await ids(a.key)).includes(id), 'gone at once when deleted');
});

t.test('headers: the first of a repeated X-API-Key counts; handlers still see every header', async (t) => {
  const u = await makeUser(ts);
  const raw = (first: string, second: string) => new Promise<string>((resolve, reject) => {
    const url = new URL(ts.url);
    import('node:net').then(({ connect }) => {
      const s = connect(Number(url.port), url.hostname);
      let out = '';
      s.on('data', (d) => { out += d; });
      s.on('error', reject);
      s.on('close', () => resolve(out));
      const keys = `X-API-Key: ${first}\r\nX-API-Key: ${second}\r\n`;
      s.write(`GET /v1/models HTTP/1.1\r\nHost: x\r\n${keys}Connection: close\r\n\r\n`);
    }, reject);
  });
  t.match(await raw(u.key, 'loom_sk_nope'), /^HTTP\/1\.1 200/);
  t.match(await raw('loom_sk_nope', u.key), /^HTTP\/1\.1 401/);
  // a handler reading ctx.headers after an await (the session route reads the cookie)
  const s = await call(ts.url, 'GET', '/auth/session', { headers: { Cookie: u.cookie } });
  t.equal(s.status, 200);
  t.equal(s.body.user_id, u.user_id);
});

t.test("the access log's duration is the text JSON.stringify writes for hundredths / 100", async (t) => {
  for (let h = 0; h < 200_000; h++) {
    if (hundredthsJson(h) !== JSON.stringify(h / 100)) t.fail(`${h}: ${hundredthsJson(h)}`);
  }
  t.equal(hundredthsJson(174), '1.74');
  t.equal(hundredthsJson(170), '1.7');
  t.equal(hundredthsJson(5), '0.05');
  t.equal(hundredthsJson(200), '2');
});

t.test('access lines written as bytes parse to the fields JSON would write, batch after batch', async (t) => {
  const out: string[] = [];
  const log = createLogger({ level: 'info', destination: new Writable({ write(c, _e, cb) { out.push(String(c)); cb(); } }) });
  const access = createAccessLog(log);
  const routes = ['/v1/models', '/felix/training-jobs/:id', '/münchen/*'].map((r) => ({ r, f: access.routeFields('GET', r) }));
  const want: object[] = [];
  fc.assert(fc.property(
    fc.constantFrom(...routes), fc.integer({ min: 100, max: 599 }), fc.nat({ max: 10_000_000 }),
    fc.option(fc.uuid()), fc.option(fc.uuid()),
    ({ r, f }, status, ms100, team, key) => {
      access.line(f, status, ms100, team, key);
      want.push({ level: 30, service: 'loom', method: 'GET', route: r, status, ms: JSON.parse(JSON.stringify(ms100 / 100)),
        ...(team ? { team_id: team } : {}), ...(key ? { key_id: key } : {}), msg: 'request' });
    },
  ), { seed: 5, numRuns: 3000 }); // about 500 KB of lines: several full batches
  access.flush();
  await new Promise((r) => setImmediate(r));
  const lines = out.join('').split('\n').filter((l) => l !== '').map((l) => JSON.parse(l));
  t.equal(lines.length, want.length);
  t.same(lines.map(({ time: _, ...rest }) => rest), want);
  t.ok(lines.every((l) => Math.abs(l.time - Date.now()) < 60_000), 'times are now');
});
