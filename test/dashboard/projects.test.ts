// The Projects page and the judge in Chromium, on the production runtime (a tiny GLiNER2 serves, a
// seeded tiny Qwen2 judges): the team's and a project's LLM judge configured from the page (a 422
// shown as the API's message); the adaptive policy saved from the page (an out-of-range value shown
// as the API's message), "Retrain now" refused with the API's reason, a run's scores and decision
// and a rejected deployment with its reason; an inference judged from its page (the verdict the API
// stored) and found again by the verdict filter.
import t from 'tap';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLocalRuntime } from '../../src/service/runtime-local.ts';
import { newId } from '../../src/service/ids.ts';
import { ENCODER_DIR } from '../compat/tiny-runtime.ts';
import { writeTinyQwen2 } from '../compat/tiny-checkpoint.ts';
import { call, makeUser, startServer } from '../service/helpers.ts';
import { clickText, fill, openBrowser, signIn, waitForText } from './browser.ts';

const modelsDir = mkdtempSync(join(tmpdir(), 'loom-dash-judge-'));
symlinkSync(ENCODER_DIR, join(modelsDir, 'gliner2-tiny'));
writeTinyQwen2(join(modelsDir, 'tiny-judge'), 7);
const ts = await startServer({ runtime: createLocalRuntime({ modelsDir }), config: { modelsDir } });
const u = await makeUser(ts, { credits: 1000 });
const b = await openBrowser();
t.teardown(async () => {
  await b.close();
  await ts.close();
  rmSync(modelsDir, { recursive: true, force: true });
});
const { page } = b;
const api = (method: string, path: string, body?: unknown) => call(ts.url, method, path, { key: u.key, body });
const RUBRIC = 'Pass when the entities are right; fail otherwise.';
const project = (await api('POST', '/projects', { name: 'support-tickets' })).body;

t.before(() => signIn(page, ts.url, u.email, u.password));

t.test('the team and project judges are configured from the page', async (t) => {
  await page.goto(`${ts.url}/dashboard/#/projects`);
  await waitForText(page, '[data-testid=team-judge]', 'No judge configured here.');
  await fill(page, '[data-testid=team-judge] input[name=judge-model]', 'tiny-judge');
  await fill(page, '[data-testid=team-judge] textarea[name=judge-rubric]', RUBRIC);
  await fill(page, '[data-testid=team-judge] input[name=judge-sample-rate]', '2');
  await clickText(page, '[data-testid=team-judge] button', 'Save judge');
  t.match(await waitForText(page, '[data-testid=team-judge] [role=alert]', 'sample_rate'), /\(HTTP 422\)/);
  t.equal((await api('GET', '/judge')).status, 404, 'nothing stored');
  await fill(page, '[data-testid=team-judge] input[name=judge-sample-rate]', '0');
  await clickText(page, '[data-testid=team-judge] button', 'Save judge');
  await waitForText(page, '[data-testid=team-judge]', 'Configured, updated');
  t.match((await api('GET', '/judge')).body, { model: 'tiny-judge', rubric: RUBRIC, sample_rate: 0, score_scale: 10 });

  await page.goto(`${ts.url}/dashboard/#/projects/${project.id}`);
  await waitForText(page, '[data-testid=project-judge]', 'No judge configured here.');
  await fill(page, '[data-testid=project-judge] input[name=judge-model]', 'gliner2-tiny');
  await fill(page, '[data-testid=project-judge] textarea[name=judge-rubric]', RUBRIC);
  await clickText(page, '[data-testid=project-judge] button', 'Save judge');
  t.match(await waitForText(page, '[data-testid=project-judge] [role=alert]', 'HTTP 422'), /model/);
  t.equal((await api('GET', `/projects/${project.id}/judge`)).status, 404);
  t.same(b.errors.filter((e) => !/status of 4\d\d/.test(e)), []);
});

t.test('adaptive retraining: the policy, Retrain now, runs and a rejected deployment', async (t) => {
  await page.goto(`${ts.url}/dashboard/#/projects/${project.id}`);
  await waitForText(page, '[data-testid=new-corrections]', '0 new corrections waiting.');
  t.equal(await page.$eval('input[name=min_new_corrections]', (e) => (e as HTMLInputElement).value), '10', 'defaults');
  await page.click('input[name=enabled]');
  await fill(page, 'input[name=min_gain]', '5');
  await clickText(page, 'button', 'Save policy');
  t.match(await waitForText(page, '[data-testid=adaptive] [role=alert]', 'min_gain'), /422/);
  t.equal((await api('GET', `/projects/${project.id}/adaptive`)).body.policy.enabled, false, 'nothing stored');
  await fill(page, 'input[name=min_gain]', '0.05');
  await fill(page, 'input[name=min_new_corrections]', '3');
  await clickText(page, 'button', 'Save policy');
  await waitForText(page, '[data-testid=policy-saved]', 'Policy saved');
  const pol = (await api('GET', `/projects/${project.id}/adaptive`)).body.policy;
  t.match(pol, { enabled: true, min_gain: 0.05, min_new_corrections: 3, schedule_minutes: null });

  await page.click('[data-testid=retrain]');
  const refused = await waitForText(page, '[data-testid=adaptive] [role=alert]', 'Cannot retrain');
  t.match(refused, /Cannot retrain: .*\(HTTP 409\)/);

  // a finished run and its rejected candidate, as the adaptive service writes them (a real run trains
  // for a minute: test/service/adaptive-encoder.test.ts); the page shows what the API returns
  const now = new Date().toISOString();
  const run = newId();
  const reason = 'F1 gain 0.0100 below min_gain 0.05';
  await ts.services.store.tx(async (t) => {
    t.adaptiveRuns.put({
      id: run, team_id: u.team_id, project_id: project.id, trigger: 'manual', status: 'rejected',
      from_deployment_id: newId(), from_job_id: newId(), train_example_ids: ['a', 'b', 'c'],
      holdout_example_ids: ['d'], corrections_version: null, train_dataset: null, holdout_dataset: null,
      training_job_id: null, evaluation_ids: null, scores: { candidate: 0.61, deployed: 0.6, gain: 0.01, metric: 'f1' },
      decision: 'reject', reason, deployment_id: null, error: null, created_at: now, updated_at: now,
    });
    t.deployments.put({
      deployment_id: newId(), project_id: project.id, team_id: u.team_id, training_job_id: newId(),
      status: 'rejected', error: null, created_at: now, activated_at: null, replaced_at: null,
      adaptive: { run_id: run, decision: 'reject', candidate_f1: 0.61, deployed_f1: 0.6, gain: 0.01, reason },
    } as any);
  });
  await page.reload();
  const runRow = await waitForText(page, '[data-testid=adaptive-runs] tbody tr', 'reject');
  t.match(runRow, /manual\s+rejected\s+3 \/ 1/);
  t.match(runRow, /0\.61\s+0\.6\s+0\.01\s+reject/);
  t.match(runRow, reason);
  const dep = await waitForText(page, '[data-testid=deployments] tbody tr', 'rejected');
  t.match(dep, /reject: F1 0\.61 vs 0\.6/);
  t.match(dep, reason);
});

t.test('an inference judged from its page, then found by the verdict filter', async (t) => {
  const r = await api('POST', '/inference', {
    model_id: 'gliner2-tiny', text: 'Ada Lovelace moved to London.', schema: ['person', 'city'],
  });
  t.equal(r.status, 200, r.text);
  const id = r.body.inference_id;
  await page.goto(`${ts.url}/dashboard/#/inferences/${id}`);
  await clickText(page, 'button', 'Judge');
  const shown = await waitForText(page, '[data-testid=judge]', 'LLM judge (tiny-judge)', 60_000);
  const rec = (await api('GET', `/inferences/${id}`)).body;
  t.ok(rec.llmaj_judged_at, 'the API stored the judgement');
  t.match(shown, `LLM judge (tiny-judge): ${rec.llmaj_verdict ?? ''}`);
  if (rec.llmaj_score != null) t.match(shown, `score ${Number(rec.llmaj_score.toFixed(3))}`);

  await page.goto(`${ts.url}/dashboard/#/inferences`);
  await page.waitForSelector('[data-testid=inferences-table]');
  const verdict = rec.llmaj_verdict ?? 'none';
  const other = verdict === 'pass' ? 'fail' : 'pass';
  await page.select('select[name=llmaj_verdict]', other);
  await clickText(page, 'button', 'Apply');
  await waitForText(page, '.card', 'No inferences match.');
  await page.select('select[name=llmaj_verdict]', verdict);
  await clickText(page, 'button', 'Apply');
  await waitForText(page, '[data-testid=inferences-table]', 'Ada Lovelace');
});
