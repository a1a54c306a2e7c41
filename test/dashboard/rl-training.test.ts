// A GRPO job from the training form in Chromium, on the production runtime and the real trainer
// (tinystories-656k, a LoRA adapter, a few steps): the rl_config fields of the chosen algorithm with
// their defaults, a missing reward_type shown as the API's 422, and the job page's reward curve
// growing from the live log stream.
import t from 'tap';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLocalRuntime } from '../../src/service/runtime-local.ts';
import { call, makeUser, startServer } from '../service/helpers.ts';
import { uploadDataset } from '../service/customization-helpers.ts';
import { clickText, fill, openBrowser, signIn, waitForText } from './browser.ts';

const modelsDir = mkdtempSync(join(tmpdir(), 'loom-dash-rl-'));
symlinkSync(join(import.meta.dirname, '../../../shared/models/tinystories-656k'), join(modelsDir, 'tinystories-656k'));
const ts = await startServer({ runtime: createLocalRuntime({ modelsDir }), config: { modelsDir } });
const u = await makeUser(ts, { credits: 100 });
const b = await openBrowser();
t.teardown(async () => {
  await b.close();
  await ts.close();
  rmSync(modelsDir, { recursive: true, force: true });
});
const { page } = b;
const rows = ['happy', 'small', 'big', 'red', 'old', 'tiny'].map((a) =>
  JSON.stringify({ prompt: `Once upon a time there was a ${a}`, answer: 'cat' }),
);
const up = await uploadDataset(ts.url, u.key, 'cats', 'decoder', 'cats.jsonl', rows.join('\n') + '\n');
if (up.body.status !== 'ready') throw new Error(`dataset: ${up.status} ${up.text}`);

t.before(() => signIn(page, ts.url, u.email, u.password));

t.test('a GRPO job from the form: rl_config fields, the 422, the reward curve', async (t) => {
  await page.goto(`${ts.url}/dashboard/#/training`);
  await page.waitForSelector('input[name=dataset][value=cats]');
  t.equal(await page.$('[data-testid=rl-config]'), null, 'no rl_config for sft');
  await page.select('select[name=training_algorithm]', 'dpo');
  const dpo = await page.$$eval('[data-testid=rl-config] [name^=rl_]', (els) => els.map((e) => e.getAttribute('name')));
  t.same(dpo, ['rl_max_steps', 'rl_logging_steps', 'rl_dpo_beta', 'rl_loss_type'], 'the dpo keys');
  t.equal(await page.$eval('input[name=rl_dpo_beta]', (e) => e.getAttribute('placeholder')), 'default 0.1');
  await page.select('select[name=training_algorithm]', 'grpo');
  t.equal(await page.$('input[name=rl_dpo_beta]'), null, 'no dpo keys for grpo');
  t.equal(await page.$eval('input[name=rl_group_size]', (e) => e.getAttribute('placeholder')), 'default 8');
  t.equal(await page.$eval('input[name=rl_kl_beta]', (e) => e.getAttribute('placeholder')), 'default 0.04');

  await fill(page, 'input[name=base_model]', 'tinystories-656k');
  await page.click('input[name=dataset][value=cats]');
  await fill(page, 'input[name=batch_size]', '2');
  await fill(page, 'input[name=validation_data_percentage]', '0');
  await fill(page, 'input[name=seed]', '1');
  await fill(page, 'input[name=rl_max_steps]', '4');
  await fill(page, 'input[name=rl_logging_steps]', '1');
  await fill(page, 'input[name=rl_group_size]', '2');
  await fill(page, 'input[name=rl_max_completion_length]', '6');
  await clickText(page, 'button', 'Start training');
  t.match(await waitForText(page, '[role=alert]', 'reward_type'), /HTTP 422/, 'grpo needs a reward_type');

  await page.select('select[name=rl_reward_type]', 'contains_substring');
  await clickText(page, 'button', 'Start training');
  await page.waitForFunction(() => /^#\/training\/[0-9a-f-]{36}$/.test(location.hash));
  const id = await page.evaluate(() => location.hash.split('/')[2]);
  const job = (await call(ts.url, 'GET', `/felix/training-jobs/${id}`, { key: u.key })).body;
  t.match(job, {
    training_algorithm: 'grpo',
    configuration: {
      rl_config: { reward_type: 'contains_substring', group_size: 2, max_steps: 4, logging_steps: 1, kl_beta: 0.04 },
    },
  });

  await page.waitForFunction(
    () => Number(document.querySelector('[data-testid=reward-chart]')?.getAttribute('data-points') ?? 0) >= 2,
    { timeout: 60_000, polling: 100 },
  );
  t.match(await page.$eval('[data-testid=reward-chart]', (e) => e.textContent), /reward mean/);
  await waitForText(page, '.card-head .status', 'complete', 60_000);
  const logs = (await call(ts.url, 'GET', `/felix/training-jobs/${id}/logs`, { key: u.key })).body.logs;
  const steps = logs.filter((l: { message: string }) => /reward mean/.test(l.message)).length;
  await page.waitForFunction(
    (n: number) => Number(document.querySelector('[data-testid=reward-chart]')?.getAttribute('data-points')) === n,
    { timeout: 10_000, polling: 100 },
    steps,
  );
  t.ok(steps >= 2, `a reward point per logged step (${steps})`);
  t.same(b.errors.filter((e) => !/status of 422/.test(e)), []);
});
