// `npm run screenshots`: regenerates docs/screenshots/*.png, the dashboard pages shown in the README.
// It starts a server on a temporary store with the tiny models of ../shared on the production runtime,
// fills it through the public API as a user would (keys, inferences, a judge and a judgement, a dataset,
// a tiny training job, a project with its deployment and adaptive policy), and photographs each page
// in Debian's Chromium (as the browser tests do).
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer } from '../server/index.ts';
import { createLogger } from '../server/log.ts';
import { createServices } from '../src/service/index.ts';
import { createLocalRuntime } from '../src/service/runtime-local.ts';
import { openBrowser, signIn, waitForText } from '../test/dashboard/browser.ts';
import { writeTinyQwen2 } from '../test/compat/tiny-checkpoint.ts';

const ROOT = join(import.meta.dirname, '..');
const OUT = join(ROOT, 'docs', 'screenshots');
const SHARED = join(ROOT, '..', 'shared');
const tmp = mkdtempSync(join(tmpdir(), 'loom-shots-'));
const modelsDir = join(tmp, 'models');
mkdirSync(modelsDir);
symlinkSync(join(SHARED, 'goldens', 'gliner2-tiny-span'), join(modelsDir, 'gliner2-tiny'));
symlinkSync(join(SHARED, 'models', 'tinystories-656k'), join(modelsDir, 'tinystories-656k'));
// the judge: a seeded tiny Qwen2 (random weights; its byte-level vocabulary can write the verdict's JSON)
writeTinyQwen2(join(modelsDir, 'tiny-judge'), 7);

const services = await createServices({
  runtime: createLocalRuntime({ modelsDir }),
  config: { dataDir: join(tmp, 'data'), modelsDir, workerThreads: 1 },
});
const server = await createServer({ services, log: createLogger({ level: 'silent' }) });
const url = server.url;
const b = await openBrowser({ width: 1280, height: 820 });
const { page } = b;

async function shot(name: string, fullPage = false): Promise<void> {
  await new Promise((r) => setTimeout(r, 300)); // charts and fonts settle
  await page.screenshot({ path: join(OUT, `${name}.png`), fullPage });
  console.log(`docs/screenshots/${name}.png`);
}

async function json(method: string, path: string, body?: unknown, key?: string): Promise<any> {
  const headers: Record<string, string> = { 'Content-Type': 'application/json' };
  if (key) headers['X-API-Key'] = key;
  else {
    const cookie = (await page.cookies()).find((c) => c.name === 'loom_session')!;
    headers.Cookie = `loom_session=${cookie.value}`;
    const s = await (await fetch(`${url}/auth/session`, { headers: { Cookie: headers.Cookie } })).json();
    headers['X-CSRF-Token'] = s.csrf_token;
  }
  const r = await fetch(url + path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  const text = await r.text();
  if (!r.ok) throw new Error(`${method} ${path}: ${r.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

const until = async (fn: () => Promise<boolean>, ms = 120_000) => {
  const end = Date.now() + ms;
  while (!(await fn())) {
    if (Date.now() > end) throw new Error('timed out');
    await new Promise((r) => setTimeout(r, 300));
  }
};

try {
  mkdirSync(OUT, { recursive: true });
  const EMAIL = 'ada@example.com';
  const PASSWORD = 'correct horse battery';
  await page.goto(`${url}/dashboard/`);
  await waitForText(page, 'button[type=submit]', 'Create the first user');
  await shot('first-user');
  const { team } = await services.auth.createUser({ email: EMAIL, password: PASSWORD, team_name: 'Acme research' });
  await services.billing.grant(team.id, 500);
  await signIn(page, url, EMAIL, PASSWORD);

  // API keys: one created from the page, its secret on screen
  await page.goto(`${url}/dashboard/#/keys`);
  await page.type('input[name=key-name]', 'production service');
  await page.click('form button[type=submit]');
  await page.waitForSelector('[data-testid=secret-value]');
  const key = await page.$eval('[data-testid=secret-value]', (e) => e.textContent!);
  const notebook = (await json('POST', '/create-api-key', { name: 'notebook' })).secret_key as string;

  // inferences on the tiny encoder
  const texts = [
    'Alice Martin joined Acme Corp in Paris last spring .',
    'Bob flew from Berlin to Madrid on Tuesday .',
    'Dr. Chen presented the results at MIT in Boston .',
    'Carol opened a bakery in Lisbon .',
    'The board of Globex met in Vienna .',
  ];
  const ids: string[] = [];
  for (const text of texts) {
    await until(async () => {
      const r = await fetch(`${url}/inference`, {
        method: 'POST',
        headers: { 'X-API-Key': key, 'Content-Type': 'application/json' },
        body: JSON.stringify({
          model_id: 'gliner2-tiny',
          text,
          schema: ['person', 'organization', 'city'],
          threshold: 0.05,
        }),
      });
      if (r.status === 200) ids.push((await r.json()).inference_id);
      return r.status === 200;
    });
  }
  // two calls from the other key, for the per-key usage chart
  for (const text of texts.slice(0, 2)) {
    await fetch(`${url}/inference`, {
      method: 'POST',
      headers: { 'X-API-Key': notebook, 'Content-Type': 'application/json' },
      body: JSON.stringify({ model_id: 'gliner2-tiny', text, schema: ['person', 'city'] }),
    });
  }
  // the team's LLM judge (the tiny Qwen2) judges the first inference
  await json('PUT', '/judge', {
    model: 'tiny-judge',
    rubric: 'Pass when every person, organization and city of the text is found with the right label.',
    score_scale: 10,
  });
  await json('POST', `/inferences/${ids[0]}/judge`);
  // the key list with the usage of those calls, and a new key's secret on screen
  await page.goto(`${url}/dashboard/#/keys`);
  await page.waitForSelector('[data-testid=keys-table]');
  await page.type('input[name=key-name]', 'staging');
  await page.click('form button[type=submit]');
  await page.waitForSelector('[data-testid=secret-value]');
  await shot('api-keys');
  await page.goto(`${url}/dashboard/#/inferences`);
  await page.waitForSelector('[data-testid=inferences-table]');
  await shot('inferences');
  await page.goto(`${url}/dashboard/#/inferences/${ids[0]}`);
  await page.waitForSelector('[data-testid=review]');
  await shot('inference-review');

  // a dataset and a tiny training job
  const PEOPLE = ['Alice', 'Bob', 'Carol', 'David', 'Emma', 'Frank', 'Grace', 'Henry'];
  const CITIES = ['Paris', 'Berlin', 'Madrid', 'Rome', 'Vienna', 'Lisbon'];
  const file = join(tmp, 'people.jsonl');
  writeFileSync(
    file,
    Array.from({ length: 64 }, (_, i) => {
      const p = PEOPLE[i % 8],
        c = CITIES[(i * 5) % 6];
      const text = `${p} lives in ${c} .`;
      return JSON.stringify({
        text,
        entities: [
          { start: 0, end: p.length, label: 'person', text: p },
          { start: text.indexOf(c), end: text.indexOf(c) + c.length, label: 'city', text: c },
        ],
      });
    }).join('\n') + '\n',
  );
  await page.goto(`${url}/dashboard/#/datasets`);
  await page.type('input[name=dataset_name]', 'people');
  await (await page.$('input[type=file]'))!.uploadFile(file);
  await page.click('[data-testid=upload] button[type=submit]');
  await waitForText(page, '[data-testid=version-status]', 'ready', 30_000);
  await page.$$eval('button', (els) => (els.find((e) => e.textContent === 'Preview') as HTMLButtonElement).click());
  await page.waitForSelector('[data-testid=preview-table]');
  await shot('dataset', true);

  const job = await json('POST', '/felix/training-jobs', {
    base_model: 'loom/gliner2-init-tiny',
    datasets: [{ name: 'people' }],
    model_name: 'people-ner',
    training_type: 'full',
    nr_epochs: 8,
    batch_size: 8,
    eval_steps: 3,
    seed: 1,
  });
  await page.goto(`${url}/dashboard/#/training/${job.id}`);
  await waitForText(page, '.card-head .status', 'complete', 120_000);
  await page.waitForSelector('[data-testid=loss-chart] canvas');
  await shot('training-job');
  await page.goto(`${url}/dashboard/#/training`);
  await page.waitForSelector('[data-testid=jobs-table]');
  await shot('training-jobs');

  const project = await json('POST', '/projects', { name: 'support-tickets' });
  await json('POST', `/projects/${project.id}/deployments`, { training_job_id: job.id });
  await page.goto(`${url}/dashboard/#/projects/${project.id}`);
  await json('PATCH', `/projects/${project.id}`, { adaptive: { enabled: true, min_new_corrections: 20 } });
  await page.goto(`${url}/dashboard/#/projects/${project.id}`);
  await waitForText(page, 'table', 'active', 30_000);
  await page.waitForSelector('[data-testid=adaptive-form]');
  await shot('project', true);

  // playground: the encoder form with highlighted spans
  await page.goto(`${url}/dashboard/#/playground`);
  await page.type('input[type=password]', key);
  await page.type('input[list=pg-models]', job.id);
  await page.type('textarea', 'Grace moved to Rome , and Henry stayed in Paris .');
  await page.type('input[placeholder="person, organization, city"]', 'person, city');
  await page.$$eval('button', (els) => (els.find((e) => e.textContent === 'Run') as HTMLButtonElement).click());
  await page.waitForSelector('[data-testid=span-text]', { timeout: 60_000 });
  await shot('playground', true);

  await page.goto(`${url}/dashboard/#/usage`);
  await page.waitForSelector('[data-testid=billing]');
  await page.waitForSelector('[data-testid=cost-chart] canvas');
  await page.waitForSelector('[data-testid=key-cost-chart] canvas');
  await page.waitForSelector('[data-testid=rate-limits]');
  await shot('usage', true);
  await page.goto(`${url}/dashboard/#/models`);
  await page.waitForSelector('[data-testid=models-table]');
  await shot('models');
} finally {
  await b.close();
  await server.close({ timeoutMs: 2000 });
  rmSync(tmp, { recursive: true, force: true });
}
