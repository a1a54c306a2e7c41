// Restart safety of the adaptive trigger: corrections are posted to a server (a child process)
// whose policy retrains after 3; it is killed (SIGKILL) after the 3rd correction committed and
// before the policy was checked. Restarted, nothing is lost and the trigger fires once; killed
// again right after the run was created and restarted, there is still one run and one job.
import t from 'tap';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServices } from '../../src/service/index.ts';
import { newId, nowIso } from '../../src/service/ids.ts';
import type { InferenceRecord, TrainingJobRecord } from '../../src/store/index.ts';
import { call } from './helpers.ts';
import { poll } from './customization-helpers.ts';
import { FakeRuntime } from './fake-runtime.ts';
import { startChild } from './child-server.ts';

const dataDir = mkdtempSync(join(tmpdir(), 'loom-adaptive-crash-'));
t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));

// the store as a deployed project leaves it: a complete encoder job (a freshly initialized tiny
// GLiNER2 as its weights), deployed, with the policy on, and three inferences of the project
const TEXTS = ['Alice met Bob in Paris', 'Carol called David', 'Emma wrote to Frank'];
const seed = await (async () => {
  const s = await createServices({ runtime: new FakeRuntime(), config: { dataDir, workerThreads: 1 } });
  const { user, team } = await s.auth.createUser({ email: 'adaptive@example.com', password: 'correct horse battery' });
  const key = (await s.auth.createKeyForUser(user.id, 'k')).secret_key;
  const p = { kind: 'key' as const, team_id: team.id, user_id: user.id, key_id: null, team, session: null };
  const project = await s.projects.create(p, 'restart');
  const now = nowIso();
  const ENCODER_DIR = join(dataDir, 'seeded-encoder');
  writeFileSync(join(dataDir, 'texts.jsonl'), TEXTS.map((text) => JSON.stringify({ text })).join('\n'));
  await s.jobPool.run({
    op: 'init_encoder',
    dir: ENCODER_DIR,
    preset: 'tiny',
    texts_from: [join(dataDir, 'texts.jsonl')],
  }).result;
  const job: TrainingJobRecord = {
    id: newId(),
    team_id: team.id,
    status: 'complete',
    base_model: 'loom/gliner2-init-tiny',
    model_name: 'seeded',
    task_type: 'encoder',
    output_dir: ENCODER_DIR,
    training_type: 'full',
    project_id: null,
    created_at: now,
    updated_at: now,
    weights_dir: ENCODER_DIR,
    datasets: [],
    base: {
      task_type: 'encoder',
      requested: 'loom/gliner2-init-tiny',
      source: 'fresh',
      catalog_id: 'loom/gliner2-init-tiny',
      dir: ENCODER_DIR,
      init_adapter: null,
    },
    configuration: { nr_epochs: 1, learning_rate: 1e-4, encoder_learning_rate: 1e-5, batch_size: 4, seed: 1 },
  };
  const depId = newId();
  const infs = TEXTS.map((text): InferenceRecord => ({
    id: newId(),
    team_id: team.id,
    key_id: null,
    project_id: project.id,
    model_id: job.id,
    routed_model: job.id,
    training_job_id: job.id,
    endpoint: '/projects/:id/inference',
    type: 'encoder',
    task: 'ner',
    stored_content: true,
    input: { text },
    schema: ['person'],
    params: {},
    output: { entities: { person: [] } },
    usage: { prompt_tokens: 5, cache_read_tokens: 0, cache_write_tokens: 0, completion_tokens: 0, total_tokens: 5 },
    cost: 0,
    latency_ms: 5,
    llmaj_score: null,
    status: 'success',
    error: null,
    created_at: now,
  }));
  await s.store.tx(async (t) => {
    t.trainingJobs.put(job);
    t.deployments.put({
      deployment_id: depId,
      project_id: project.id,
      team_id: team.id,
      training_job_id: job.id,
      status: 'active',
      error: null,
      created_at: now,
      activated_at: now,
      replaced_at: null,
    });
    t.projects.put({ ...(await t.projects.get(project.id))!, active_deployment_id: depId });
    for (const r of infs) t.inferences.put(r);
  });
  await s.adaptive.setPolicy(p, project.id, { enabled: true, min_new_corrections: 3 });
  await s.close();
  return { key, projectId: project.id, inferenceIds: infs.map((r) => r.id), jobId: job.id };
})();
const { key, projectId } = seed;
const status = (url: string) => call(url, 'GET', `/projects/${projectId}/adaptive`, { key });

t.test('killed after the 3rd correction, before the trigger: restart fires it once', async (t) => {
  const first = await startChild(dataDir, 'adaptive-before-trigger');
  const names = [
    ['Alice', 'Bob'],
    ['Carol', 'David'],
    ['Emma', 'Frank'],
  ];
  for (const [i, id] of seed.inferenceIds.entries()) {
    const fb = await call(first.url, 'POST', `/inferences/${id}/feedback`, {
      key,
      body: { verdict: 'incorrect', corrected_output: { entities: { person: names[i] } } },
    });
    t.equal(fb.status, 200, `correction ${i + 1} acknowledged`);
    if (i < 2) t.same((await status(first.url)).body.runs, [], 'below min_new_corrections: no run');
  }
  await first.exited;

  const second = await startChild(dataDir);
  for (const id of seed.inferenceIds) {
    const fb = await call(second.url, 'GET', `/inferences/${id}/feedback`, { key });
    t.match(
      fb.body,
      { inference_id: id, human_verdict: 'incorrect', corrected_output: { entities: { person: Array } } },
      'the correction survived',
    );
  }
  const fired = await poll(
    () => status(second.url),
    (r) => r.body.runs.length > 0,
    10_000,
    50,
  );
  t.equal(fired.body.runs.length, 1, 'the policy fired after the restart');
  t.match(fired.body.runs[0], { trigger: 'policy', new_corrections: 3, from_training_job_id: seed.jobId });
  // killed again right away: the run (and the marks on its corrections) are already committed
  second.kill();
  await second.exited;

  const third = await startChild(dataDir);
  t.teardown(() => third.kill());
  const st = await poll(
    () => status(third.url),
    (r) => r.body.runs[0]?.training_job_id || !['preparing'].includes(r.body.runs[0]?.status),
    30_000,
    100,
  );
  await new Promise((r) => setTimeout(r, 1500)); // three policy ticks
  const after = (await status(third.url)).body;
  t.equal(after.runs.length, 1, 'still one run: the trigger fired once');
  t.not(after.runs[0].status, 'failed', after.runs[0].error ?? '');
  t.equal(after.new_corrections, 0, 'its corrections are consumed');
  const jobs = (await call(third.url, 'GET', '/felix/training-jobs', { key })).body.training_jobs.filter(
    (j: { adaptive?: unknown }) => j.adaptive,
  );
  t.equal(jobs.length, 1, 'one retraining job');
  t.equal(jobs[0].id, st.body.runs[0].training_job_id);
  t.match(jobs[0].adaptive, { run_id: after.runs[0].id, trigger: 'policy' });
  const rec = (await call(third.url, 'GET', `/inferences/${seed.inferenceIds[0]}`, { key })).body;
  t.equal(rec.correction.training_job_id, jobs[0].id, 'the inference shows the job that consumed its correction');
});
