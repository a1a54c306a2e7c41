// The Usage page in Chromium: cost and tokens per key and per model over time (GET /usage) drawn as
// charts with one series per key (model) that made calls, the per-key totals as the API reports
// them, and the rate-limit table (GET /rate-limits) with what the team's inference calls used.
import t from 'tap';
import { call, makeUser, startServer } from '../service/helpers.ts';
import type { FakeRuntime } from '../service/fake-runtime.ts';
import { openBrowser, signIn, waitForText } from './browser.ts';

const ts = await startServer();
const u = await makeUser(ts, { credits: 100 });
const b = await openBrowser();
t.teardown(async () => {
  await b.close();
  await ts.close();
});
const { page } = b;
const MODEL = 'fastino/gliner2-base-v1';
(ts.runtime as FakeRuntime).setReady(MODEL);
const second = await ts.services.auth.createKeyForUser(u.user_id, 'batch-jobs');
const body = { model_id: MODEL, text: 'Alice met Bob in Paris', schema: ['person', 'city'] };
for (const key of [u.key, second.secret_key, second.secret_key]) {
  const r = await call(ts.url, 'POST', '/inference', { key, body });
  if (r.status !== 200) throw new Error(`inference failed: ${r.status} ${r.text}`);
}
t.before(() => signIn(page, ts.url, u.email, u.password));

t.test('cost and tokens per key over time, and the rate limits in force', async (t) => {
  await page.goto(`${ts.url}/dashboard/#/usage`);
  await waitForText(page, '[data-testid=key-usage]', 'batch-jobs');
  const api = (await call(ts.url, 'GET', '/usage?group_by=key', { key: u.key })).body;
  const rows = await page.$$eval('[data-testid=key-usage] tbody tr', (trs) =>
    trs.map((tr) => [...tr.querySelectorAll('td')].map((td) => td.textContent)),
  );
  t.same(
    rows.map((r) => [r[0], r[1], r[2]]),
    api.groups.map((g: any) => [g.name, String(g.requests), String(g.tokens)]),
    'one row per key, as the API reports it',
  );
  t.match(rows.find((r) => r[0]!.startsWith('batch-jobs'))![1], '2');
  for (const id of ['key-cost-chart', 'key-tokens-chart']) {
    const legend = await page.$$eval(`[data-testid=${id}] .u-legend .u-series .u-label`, (els) =>
      els.map((e) => e.textContent),
    );
    t.same(legend.slice(1).sort(), api.groups.map((g: any) => g.name).sort(), `${id}: a series per key`);
    t.ok(Number(await page.$eval(`[data-testid=${id}]`, (e) => e.getAttribute('data-points'))) >= 30, 'a day axis');
  }

  const models = await page.$$eval('[data-testid=cost-chart] .u-legend .u-series .u-label', (els) =>
    els.map((e) => e.textContent),
  );
  t.same(models.slice(1), [MODEL], 'the per-model chart from GET /usage?group_by=model');

  const inference = await page.$eval('[data-testid=rate-limits] tr[data-family=inference]', (tr) =>
    [...tr.querySelectorAll('td')].map((td) => td.textContent),
  );
  t.same(inference.slice(0, 6), ['inference', 'POST /inference', 'team', '5,000', '60 s', '4,997']);
  const families = await page.$$eval('[data-testid=rate-limits] tbody tr', (trs) =>
    trs.map((tr) => tr.getAttribute('data-family')),
  );
  t.same(families, ['edge', 'default', 'default', 'inference', 'compat', 'gliner2', 'generate', 'training']);
  t.same(b.errors, []);
});
