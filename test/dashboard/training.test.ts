// Datasets and training in Chromium, on the production runtime and the real trainer: upload a small
// NER dataset through the page (the three-step presigned flow) and see it become ready, preview it;
// start a tiny training job from the form and watch the loss chart grow from the live log stream
// until the job completes with metrics.
import t from 'tap';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLocalRuntime } from '../../src/service/runtime-local.ts';
import { call, makeUser, startServer } from '../service/helpers.ts';
import { clickText, fill, openBrowser, signIn, waitForText } from './browser.ts';

const dir = mkdtempSync(join(tmpdir(), 'loom-dash-train-'));
const ts = await startServer({ runtime: createLocalRuntime({ modelsDir: join(dir, 'models') }) });
const u = await makeUser(ts, { credits: 100 });
const b = await openBrowser();
t.teardown(async () => {
  await b.close();
  await ts.close();
  rmSync(dir, { recursive: true, force: true });
});
const { page } = b;

const PEOPLE = ['Alice', 'Bob', 'Carol', 'David', 'Emma', 'Frank', 'Grace', 'Henry'];
const CITIES = ['Paris', 'Berlin', 'Madrid', 'Rome', 'Vienna', 'Lisbon'];
const lines = Array.from({ length: 48 }, (_, i) => {
  const p = PEOPLE[i % PEOPLE.length],
    c = CITIES[(i * 5) % CITIES.length];
  const text = `${p} lives in ${c} .`;
  return JSON.stringify({
    text,
    entities: [
      { start: 0, end: p.length, label: 'person', text: p },
      { start: text.indexOf(c), end: text.indexOf(c) + c.length, label: 'city', text: c },
    ],
  });
});
const file = join(dir, 'people.jsonl');
writeFileSync(file, lines.join('\n') + '\n');

t.before(() => signIn(page, ts.url, u.email, u.password));

t.test('upload a dataset and see it become ready', async (t) => {
  await page.goto(`${ts.url}/dashboard/#/datasets`);
  await fill(page, 'input[name=dataset_name]', 'people');
  const input = await page.waitForSelector('input[type=file]');
  await input!.uploadFile(file);
  await clickText(page, '[data-testid=upload] button', 'Upload');
  await waitForText(page, '[data-testid=versions-table] [data-testid=version-status]', 'ready', 60_000);
  t.match(
    await page.$eval('[data-testid=versions-table]', (e) => e.textContent),
    /48/,
    'the version counts the examples',
  );
  await clickText(page, 'button', 'Preview');
  t.match(await waitForText(page, '[data-testid=preview-table]', 'Alice lives in'), /"label":"person"/);
  const api = await call(ts.url, 'GET', '/felix/datasets/people', { key: u.key });
  t.equal(api.body.versions[0].status, 'ready', 'the API agrees');
  const download = await page.$eval('a.button[href$="/download"]', async (a) => {
    const r = await fetch((a as HTMLAnchorElement).href);
    return { status: r.status, text: await r.text() };
  });
  t.equal(download.status, 200, 'the download link works with the session');
  t.equal(download.text.trim().split('\n').length, 48, 'and returns every example');
});

t.test('a bad file: the version fails and the page shows the processing error', async (t) => {
  const bad = join(dir, 'bad.jsonl');
  writeFileSync(bad, '{"text": "abc", "entities": [{"start": 0, "end": 9, "label": "x"}]}\n');
  await page.goto(`${ts.url}/dashboard/#/datasets`);
  await fill(page, 'input[name=dataset_name]', 'broken');
  await (await page.waitForSelector('input[type=file]'))!.uploadFile(bad);
  await clickText(page, '[data-testid=upload] button', 'Upload');
  await waitForText(page, '[data-testid=versions-table] [data-testid=version-status]', 'failed', 60_000);
  const api = await call(ts.url, 'GET', '/felix/datasets/broken', { key: u.key });
  t.ok(api.body.versions[0].processing_error, 'the API has a processing_error');
  t.match(
    await page.$eval('[data-testid=versions-table]', (e) => e.textContent),
    api.body.versions[0].processing_error,
    'the page shows it',
  );
});

let id = '';
t.test('start a tiny training job and see the loss chart grow', async (t) => {
  await page.goto(`${ts.url}/dashboard/#/training`);
  await page.waitForSelector('input[name=dataset][value=people]');
  await fill(page, 'input[name=base_model]', 'loom/gliner2-init-tiny');
  await fill(page, 'input[name=model_name]', 'people-ner');
  await page.click('input[name=dataset][value=people]');
  await page.select('select[name=training_type]', 'full');
  await fill(page, 'input[name=nr_epochs]', '10');
  await fill(page, 'input[name=batch_size]', '8');
  await fill(page, 'input[name=eval_steps]', '3');
  await fill(page, 'input[name=seed]', '1');
  await clickText(page, 'button', 'Start training');
  await page.waitForFunction(() => /^#\/training\/[0-9a-f-]{36}$/.test(location.hash));
  id = await page.evaluate(() => location.hash.split('/')[2]);

  const points = async (min: number) => {
    await page.waitForFunction(
      (n: number) => Number(document.querySelector('[data-testid=loss-chart]')?.getAttribute('data-points') ?? 0) >= n,
      { timeout: 60_000, polling: 100 },
      min,
    );
    return page.$eval('[data-testid=loss-chart]', (e) => Number(e.getAttribute('data-points')));
  };
  // every point count the chart shows while the job runs, sampled in the page
  await page.evaluate(() => {
    const seen: number[] = [];
    (window as unknown as { __seen: number[] }).__seen = seen;
    setInterval(() => {
      const n = Number(document.querySelector('[data-testid=loss-chart]')?.getAttribute('data-points') ?? 0);
      if (n !== seen[seen.length - 1]) seen.push(n);
    }, 20);
  });
  await points(1);
  t.ok(await page.$('[data-testid=loss-chart] canvas'), 'uPlot drew it');
  t.match(await page.$eval('[data-testid=loss-chart]', (e) => e.textContent), /train_loss/);
  t.match(await page.$eval('[data-testid=loss-chart]', (e) => e.textContent), /val_loss/);

  await waitForText(page, '.card-head .status', 'complete', 60_000);
  const seen = await page.evaluate(() => (window as unknown as { __seen: number[] }).__seen.filter((n) => n > 0));
  t.ok(
    seen.length >= 2 && seen.every((n, i) => i === 0 || n > seen[i - 1]),
    `the chart grew while the job ran: ${seen.join(' → ')}`,
  );
  t.match(await waitForText(page, '[data-testid=job-metrics]', 'F1'), /F1 \d/);
  const job = await call(ts.url, 'GET', `/felix/training-jobs/${id}`, { key: u.key });
  t.equal(job.body.status, 'complete');
  const logs = await call(ts.url, 'GET', `/felix/training-jobs/${id}/logs`, { key: u.key });
  const withLoss = logs.body.logs.filter((l: { message: string }) => /train_loss/.test(l.message)).length;
  t.equal(
    await points(withLoss),
    withLoss,
    'one chart point per logged evaluation, once the stream has delivered them all',
  );
  t.same(b.errors, []);
});

t.test('deploy the trained model to a project and evaluate it, from the pages', async (t) => {
  const project = await call(ts.url, 'POST', '/projects', { key: u.key, body: { name: 'people-app' } });
  await page.goto(`${ts.url}/dashboard/#/training/${id}`);
  await page.reload(); // the page was already open on this job: load the new project list
  await page.waitForFunction(() =>
    [...document.querySelectorAll('option')].some((o) => o.textContent === 'people-app'),
  );
  await page.select('.card select', project.body.id);
  await clickText(page, 'button', 'Deploy');
  await waitForText(page, '.card', /Deployment [0-9a-f-]{36}/);
  const deps = await call(ts.url, 'GET', `/projects/${project.body.id}/deployments`, { key: u.key });
  t.equal(deps.body.deployments[0].training_job_id, id, 'the API has the deployment');
  await page.goto(`${ts.url}/dashboard/#/projects/${project.body.id}`);
  t.match(
    await waitForText(page, 'pre', 'curl'),
    new RegExp(`/projects/${project.body.id}/inference`),
    'a ready-to-copy curl',
  );

  await page.goto(`${ts.url}/dashboard/#/training/${id}`);
  await clickText(page, 'button', 'Prepare download');
  const weights = await page.waitForSelector('a.button[download]');
  const got = await weights!.evaluate(async (a) => {
    const r = await fetch((a as HTMLAnchorElement).href);
    return { status: r.status, type: r.headers.get('content-type'), bytes: (await r.arrayBuffer()).byteLength };
  });
  t.equal(got.status, 200, 'the weights download link works');
  t.equal(got.type, 'application/gzip');
  t.ok(got.bytes > 1000, `a real archive (${got.bytes} bytes)`);

  await page.goto(`${ts.url}/dashboard/#/evaluations`);
  await page.waitForFunction(() => [...document.querySelectorAll('option')].some((o) => o.textContent === 'people'));
  await fill(page, 'input[list=eval-models]', id);
  await page.select('form select', 'people');
  await clickText(page, 'button', 'Evaluate');
  await waitForText(page, 'table', 'complete', 60_000);
  const evals = await call(ts.url, 'GET', '/felix/evaluations', { key: u.key });
  const f1 = evals.body.evaluations[0].f1_score;
  t.ok(typeof f1 === 'number', 'the API has the F1');
  t.match(await page.$eval('table', (e) => e.textContent), String(Number(f1.toFixed(3))), 'the page shows the same F1');
  await page.$$eval('table a', (els) => (els[0] as HTMLElement).click());
  t.match(await waitForText(page, '[data-testid=per-label]', 'person'), /city/, 'per-label precision / recall / F1');
});
