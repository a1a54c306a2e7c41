// The adaptive loop end to end through HTTP for a decoder (tinystories-656k, LoRA): a LoRA job
// trained to tell cat stories is deployed; questions about a dog get cat stories; reviewers post
// the corrected replies; the retraining continues from the deployed adapter on them (+ replay),
// the held-out token-overlap F1 improves and the new adapter is promoted. Corrections with junk
// replies are then trained on and not promoted.
import t, { type Test } from 'tap';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLocalRuntime } from '../../src/service/runtime-local.ts';
import { call, makeUser, startServer } from './helpers.ts';
import { adaptiveRunDone, poll, uploadDataset } from './customization-helpers.ts';

const modelsDir = mkdtempSync(join(tmpdir(), 'loom-models-'));
symlinkSync(join(import.meta.dirname, '../../../shared/models/tinystories-656k'), join(modelsDir, 'tinystories-656k'));
const ts = await startServer({ runtime: createLocalRuntime({ modelsDir }) });
t.teardown(async () => {
  await ts.close();
  rmSync(modelsDir, { recursive: true, force: true });
});
const u = await makeUser(ts, { credits: 100 });
const api = (method: string, path: string, body?: unknown) => call(ts.url, method, path, { key: u.key, body });

const CAT = 'Once upon a time there was a little cat.';
const DOG = 'The dog ran to the park.';
const chat = (q: string, a: string) =>
  JSON.stringify({
    messages: [
      { role: 'user', content: q },
      { role: 'assistant', content: a },
    ],
  });
const STORIES = Array.from({ length: 12 }, (_, i) => chat(`Tell me story ${i}`, CAT)).join('\n');
const DOG_EVAL = Array.from({ length: 6 }, (_, i) => chat(`What did the dog do ${i + 50}?`, DOG)).join('\n');


let projectId = '';
let firstJob = '';

t.test('setup: a cat-story adapter, deployed', async (t) => {
  t.equal((await uploadDataset(ts.url, u.key, 'stories', 'decoder', 'stories.jsonl', STORIES)).body.status, 'ready');
  t.equal((await uploadDataset(ts.url, u.key, 'dog-eval', 'decoder', 'dog-eval.jsonl', DOG_EVAL)).body.status, 'ready');
  const job = await api('POST', '/felix/training-jobs', {
    base_model: 'tinystories-656k',
    datasets: [{ name: 'stories' }],
    model_name: 'cats',
    nr_epochs: 2,
    batch_size: 4,
    lora_r: 4,
    learning_rate: 1e-3,
    seed: 1,
  });
  t.equal(job.status, 200);
  firstJob = job.body.id;
  const done = await poll(
    () => api('GET', `/felix/training-jobs/${firstJob}`),
    (r) => ['complete', 'failed'].includes(r.body.status),
    90_000,
    200,
  );
  t.equal(done.body.status, 'complete', done.body.error ?? '');
  projectId = (await api('POST', '/projects', { name: 'pet stories' })).body.id;
  t.equal((await api('POST', `/projects/${projectId}/deployments`, { training_job_id: firstJob })).status, 200);
  await ts.services.projects.settle();
  const p = await api('PATCH', `/projects/${projectId}`, {
    adaptive: { eval_dataset: 'dog-eval', min_gain: 0.05, nr_epochs: 20, learning_rate: 1e-2 },
  });
  t.equal(p.status, 200);
});

async function correct(t: Test, from: number, n: number, reply: string) {
  const ids: string[] = [];
  for (let i = from; i < from + n; i++) {
    const inf = await api('POST', `/projects/${projectId}/inference`, {
      text: `What did the dog do ${i}?`,
      task: 'generate',
      max_tokens: 12,
      temperature: 0,
    });
    t.equal(inf.status, 200);
    if (i === from) t.comment(`deployed model answers: ${JSON.stringify(inf.body.result)}`);
    const fb = await api('POST', `/inferences/${inf.body.inference_id}/feedback`, {
      verdict: 'incorrect',
      corrected_output: { content: reply },
    });
    t.equal(fb.status, 200, fb.text);
    ids.push(inf.body.inference_id);
  }
  return ids;
}

t.test('corrected replies retrain the adapter, which is promoted', async (t) => {
  const inf = await api('POST', `/projects/${projectId}/inference`, {
    text: 'What did the dog do 1?',
    task: 'generate',
    max_tokens: 12,
    temperature: 0,
  });
  const bad = await api('POST', `/inferences/${inf.body.inference_id}/feedback`, {
    verdict: 'incorrect',
    corrected_output: { content: '' },
  });
  t.equal(bad.status, 422);
  t.equal(bad.body.errors[0].path, '/corrected_output/content');
  const ids = await correct(t, 0, 12, DOG);
  const run = await api('POST', `/projects/${projectId}/retrain`);
  t.equal(run.status, 200, run.text);
  const done = await adaptiveRunDone(ts.url, u.key, projectId, run.body.id, 90_000);
  t.equal(done.status, 'promoted', JSON.stringify(done));
  t.comment(`held-out reply F1: deployed ${done.scores.deployed}, retrained ${done.scores.candidate}`);
  // the retrained adapter answers the held-out dog questions with the corrected reply (F1 1.0 in every run since
  // SFT tokenizes the prompt apart from the reply; before, 0.09-0.72 and promotion was a coin flip)
  t.ok(done.scores.candidate >= 0.9, `held-out F1 ${done.scores.candidate}`);
  t.ok(done.scores.gain >= 0.05);
  const job = (await api('GET', `/felix/training-jobs/${done.training_job_id}`)).body;
  t.match(job, {
    status: 'deployed',
    task_type: 'decoder',
    training_type: 'lora',
    base_model: firstJob,
    adaptive: { decision: 'promote' },
  });
  const preview = (await api('GET', '/felix/datasets/corrections-pet-stories/1/preview')).body;
  t.match(preview.records[0], {
    messages: [
      { role: 'user', content: /What did the dog do/ },
      { role: 'assistant', content: DOG },
    ],
  });
  t.match((await api('GET', `/inferences/${ids[0]}`)).body.correction, { training_job_id: done.training_job_id });
  const after = await api('POST', `/projects/${projectId}/inference`, {
    text: 'What did the dog do 77?',
    task: 'generate',
    max_tokens: 12,
    temperature: 0,
  });
  t.equal(after.body.routed_model, done.training_job_id);
  t.comment(`the promoted adapter answers: ${after.body.result.content}`);
});

t.test('junk replies are trained on and not promoted', async (t) => {
  // no replay: the candidate learns the junk alone (with replay it could also keep learning the dog reply
  // from the earlier corrections and beat a deployed model that had not fully learned it yet)
  t.equal((await api('PATCH', `/projects/${projectId}`, { adaptive: { replay_fraction: 0 } })).status, 200);
  await correct(t, 100, 8, 'zq xv zq xv zq xv');
  const run = await api('POST', `/projects/${projectId}/retrain`);
  t.equal(run.status, 200, run.text);
  const done = await adaptiveRunDone(ts.url, u.key, projectId, run.body.id, 90_000);
  t.equal(done.status, 'rejected', JSON.stringify(done));
  t.comment(`held-out reply F1: deployed ${done.scores.deployed}, retrained on junk ${done.scores.candidate}`);
  const hist = (await api('GET', `/projects/${projectId}/deployments`)).body.deployments;
  t.match(hist[0], { status: 'rejected', adaptive: { decision: 'reject' } });
  t.equal(hist[1].status, 'active');
});
