// The Models page in Chromium: the catalog with each model's state on this server; pulling a model
// shows its progress until the runtime reports it ready. Also the API under it (GET /models/state,
// POST /models/pull) with its errors.
import t from 'tap';
import { call, makeUser, startServer } from '../service/helpers.ts';
import type { FakeRuntime } from '../service/fake-runtime.ts';
import { openBrowser, signIn, waitForText } from './browser.ts';

const ts = await startServer();
const u = await makeUser(ts);
const b = await openBrowser();
t.teardown(async () => {
  await b.close();
  await ts.close();
});
const { page } = b;
const rt = ts.runtime as FakeRuntime;
const MODEL = 'fastino/gliner2-large-v1';

t.test('the API: state, pull, errors', async (t) => {
  t.same((await call(ts.url, 'GET', `/models/state?model_id=${encodeURIComponent(MODEL)}`, { key: u.key })).body, {
    model_id: MODEL,
    state: 'pullable',
  });
  t.equal((await call(ts.url, 'GET', '/models/state?model_id=nope/nope', { key: u.key })).status, 404);
  t.equal((await call(ts.url, 'POST', '/models/pull', { key: u.key, body: {} })).status, 422);
  t.equal((await call(ts.url, 'POST', '/models/pull', { body: { model_id: MODEL } })).status, 401);
  t.equal(
    (await call(ts.url, 'GET', '/models/state?model_id=test/encoder', { key: u.key })).body.state,
    'ready',
    'a model on disk',
  );
});

t.test('pull a model from the page and watch its progress', async (t) => {
  await signIn(page, ts.url, u.email, u.password);
  await page.goto(`${ts.url}/dashboard/#/models`);
  const cell = `[data-testid=model-state][data-model="${MODEL}"]`;
  await waitForText(page, cell, 'pullable');
  await page.click(`${cell} button`);
  t.match(await waitForText(page, cell, '50%'), /warming/, 'the progress the runtime reports');
  t.same(rt.warmCalls.filter((id) => id === MODEL).length, 1, 'the pull started the runtime once');
  rt.setReady(MODEL);
  await waitForText(page, cell, 'ready', 5000);
  t.notOk(await page.$(`${cell} button`), 'no Pull button on a ready model');
  t.same(b.errors, []);
});
