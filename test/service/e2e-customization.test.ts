// The customization workflow end to end through HTTP, on the production runtime seam
// (runtime-local) and the real trainer: upload a small NER dataset → train a fresh tiny GLiNER2
// encoder (full fine-tuning, a few epochs) → watch progress, logs, checkpoints → download the
// weights → evaluate against the fresh-initialized baseline → deploy to a project → project
// inference (and inference by model id) returns entities → a checkpoint is the base of a new job.
import t from 'tap';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { createLocalRuntime } from '../../src/service/runtime-local.ts';
import { call, makeUser, startServer } from './helpers.ts';
import { poll, uploadDataset } from './customization-helpers.ts';

const modelsDir = mkdtempSync(join(tmpdir(), 'loom-models-'));
// the base decoder of the LoRA test (the encoder is trained from a fresh initialization)
symlinkSync(join(import.meta.dirname, '../../../shared/models/tinystories-656k'), join(modelsDir, 'tinystories-656k'));
const ts = await startServer({ runtime: createLocalRuntime({ modelsDir }) });
t.teardown(async () => { await ts.close(); rmSync(modelsDir, { recursive: true, force: true }); });
const u = await makeUser(ts, { credits: 100 });

const PEOPLE = ['Alice', 'Bob', 'Carol', 'David', 'Emma', 'Frank', 'Grace', 'Henry', 'Irene', 'Jack', 'Karen', 'Liam'];
const CITIES = ['Paris', 'Berlin', 'Madrid', 'Rome', 'Vienna', 'Lisbon', 'Prague', 'Dublin', 'Oslo', 'Athens'];
const TEMPLATES = ['{p} lives in {c} .', '{p} moved to {c} last year .', 'In {c} , {p} opened a bakery .', 'Yesterday {p} flew to {c} .', '{p} was born in {c} .'];
function record(i: number, shift: number): string {
  const p = PEOPLE[i % PEOPLE.length], c = CITIES[(i * 7 + shift) % CITIES.length];
  const text = TEMPLATES[i % TEMPLATES.length].replace('{p}', p).replace('{c}', c);
  const ents = [{ start: text.indexOf(p), end: text.indexOf(p) + p.length, label: 'person', text: p }, { start: text.indexOf(c), end: text.indexOf(c) + c.length, label: 'city', text: c }];
  return JSON.stringify({ text, entities: ents.sort((a, b) => a.start - b.start) });
}
const TRAIN = Array.from({ length: 60 }, (_, i) => record(i, 3)).join('\n') + '\n';
const HELD_OUT = Array.from({ length: 20 }, (_, i) => record(i + 5, 1)).join('\n') + '\n';

t.test('upload → train → evaluate → deploy → project inference', async (t) => {
  t.equal((await uploadDataset(ts.url, u.key, 'people', 'ner', 'people.jsonl', TRAIN)).body.status, 'ready');
  t.equal((await uploadDataset(ts.url, u.key, 'people-eval', 'ner', 'people-eval.jsonl', HELD_OUT)).body.status, 'ready');

  const created = await call(ts.url, 'POST', '/felix/training-jobs', {
    key: u.key,
    // the tiny preset's default learning rates (recipe.ts FRESH_SETTINGS), as the README example runs
    body: { base_model: 'loom/gliner2-init-tiny', datasets: [{ name: 'people' }], model_name: 'people-ner', training_type: 'full', nr_epochs: 8, batch_size: 8, seed: 1 },
  });
  t.equal(created.status, 200);
  t.same(created.body, { id: created.body.id, status: 'requested' });
  const id = created.body.id;

  let sawRunning = false;
  const done = await poll(() => call(ts.url, 'GET', `/felix/training-jobs/${id}`, { key: u.key }), (r) => {
    if (r.body.status === 'running') {
      sawRunning = true;
      t.ok(r.body.progress_percent >= 0 && r.body.progress_percent <= 100);
    }
    return ['complete', 'failed', 'cancelled'].includes(r.body.status);
  }, 150_000, 200);
  if (done.body.status !== 'complete') {
    const logs = await call(ts.url, 'GET', `/felix/training-jobs/${id}/logs`, { key: u.key });
    t.fail(`job ended ${done.body.status}: ${done.body.error}\n${logs.body.logs.map((l: { message: string }) => l.message).join('\n')}`);
    return;
  }
  t.ok(sawRunning, 'the job was observed running');
  t.match(done.body, { status: 'complete', progress_percent: 100, current_epoch: 8, task_type: 'encoder', training_type: 'full', metrics: { f1: Number, precision: Number, recall: Number } });
  t.ok(done.body.total_steps > 0 && done.body.current_step === done.body.total_steps);
  t.ok(done.body.tokens_per_s > 0);

  const logs = await call(ts.url, 'GET', `/felix/training-jobs/${id}/logs`, { key: u.key });
  const messages = logs.body.logs.map((l: { message: string }) => l.message).join('\n');
  t.match(messages, /training started/);
  t.match(messages, /fresh tiny encoder/);
  t.match(messages, /training complete: validation F1/);
  for (const l of logs.body.logs) t.same(Object.keys(l).sort(), ['level', 'message', 'seq', 'timestamp']);

  const cks = (await call(ts.url, 'GET', `/felix/training-jobs/${id}/checkpoints`, { key: u.key })).body;
  t.ok(cks.count >= 8, 'a checkpoint per epoch');
  t.equal(cks.checkpoints.filter((c: { is_final: boolean }) => c.is_final).length, 1);
  t.equal(cks.checkpoints.filter((c: { is_best: boolean }) => c.is_best).length, 1);
  t.same(Object.keys(cks.checkpoints[0]).sort(), ['created_at', 'epoch', 'id', 'is_best', 'is_final', 'step', 'train_loss', 'val_loss']);

  // weights: a signed URL to a .tar.gz of the safetensors checkpoint
  const dl = await call(ts.url, 'GET', `/felix/training-jobs/${id}/download`, { key: u.key });
  t.equal(dl.status, 200);
  t.match(dl.body, { success: true, format: 'safetensors', filename: 'people-ner.tar.gz' });
  const archive = await fetch(dl.body.download_url);
  t.equal(archive.status, 200);
  const tar = gunzipSync(Buffer.from(await archive.arrayBuffer())).toString('latin1');
  t.match(tar, /people-ner\/model\.safetensors/);
  t.match(tar, /people-ner\/tokenizer\.json/);
  const forged = new URL(dl.body.download_url);
  const sig = forged.searchParams.get('signature')!;
  forged.searchParams.set('signature', (sig[0] === 'x' ? 'y' : 'x') + sig.slice(1)); // never the real one
  t.equal((await fetch(forged)).status, 403);

  const trained = (await call(ts.url, 'GET', '/felix/trained-models', { key: u.key })).body;
  t.match(trained.models, [{ id, model_name: 'people-ner', status: 'complete' }]);

  // evaluations: the trained model against the fresh-initialized baseline, on held-out data
  const baselines = (await call(ts.url, 'GET', '/felix/baseline-models', { key: u.key })).body;
  t.ok(baselines.models.some((m: { id: string }) => m.id === 'baseline/gliner2-init-tiny'));
  const ev = await call(ts.url, 'POST', '/felix/evaluations', { key: u.key, body: { base_model: id, dataset_name: 'people-eval' } });
  t.equal(ev.status, 200);
  t.match(ev.body, { success: true, count: 1, evaluations: [{ status: 'queued' }] });
  const evBase = await call(ts.url, 'POST', '/felix/evaluations', { key: u.key, body: { base_model: 'baseline/gliner2-init-tiny', dataset_name: 'people-eval' } });
  const evDone = await poll(() => call(ts.url, 'GET', `/felix/evaluations/${ev.body.evaluations[0].id}`, { key: u.key }), (r) => ['complete', 'failed'].includes(r.body.status), 60_000, 100);
  const baseDone = await poll(() => call(ts.url, 'GET', `/felix/evaluations/${evBase.body.evaluations[0].id}`, { key: u.key }), (r) => ['complete', 'failed'].includes(r.body.status), 60_000, 100);
  t.match(evDone.body, { status: 'complete', sample_count: 20, f1_score: Number, precision_score: Number, recall_score: Number, per_label: { person: { f1: Number }, city: { f1: Number } } });
  t.type(evDone.body.completed_at, 'string');
  t.match(baseDone.body, { status: 'complete', sample_count: 20 });
  // the same architecture, untrained: training must clear it by a wide margin
  t.ok(evDone.body.f1_score > baseDone.body.f1_score + 0.2, `trained F1 ${evDone.body.f1_score} > fresh baseline F1 ${baseDone.body.f1_score} + 0.2`);
  t.comment(`held-out F1: trained ${evDone.body.f1_score} (P ${evDone.body.precision_score}, R ${evDone.body.recall_score}) vs untrained ${baseDone.body.f1_score}`);

  // deploy and serve
  const project = (await call(ts.url, 'POST', '/projects', { key: u.key, body: { name: 'people' } })).body;
  const dep = await call(ts.url, 'POST', `/projects/${project.id}/deployments`, { key: u.key, body: { training_job_id: id } });
  t.equal(dep.status, 200);
  await ts.services.projects.settle();
  const active = await poll(() => call(ts.url, 'GET', `/projects/${project.id}/deployments`, { key: u.key }), (r) => r.body.deployments[0]?.status !== 'deploying', 30_000);
  t.equal(active.body.deployments[0].status, 'active');
  t.equal((await call(ts.url, 'GET', `/felix/training-jobs/${id}`, { key: u.key })).body.status, 'deployed');
  const inf = await call(ts.url, 'POST', `/projects/${project.id}/inference`, { key: u.key, body: { text: 'Grace moved to Oslo last year .', schema: { entities: ['person', 'city'] } } });
  t.equal(inf.status, 200);
  t.equal(inf.body.type, 'encoder');
  const found = Object.values(inf.body.result.entities as Record<string, unknown[]>).flat();
  t.ok(found.length > 0, `project inference returns entities: ${JSON.stringify(inf.body.result)}`);
  const byId = await call(ts.url, 'POST', '/inference', { key: u.key, body: { model_id: id, text: 'Emma was born in Rome .', schema: ['person', 'city'] } });
  t.equal(byId.status, 200);
  t.equal(byId.body.model_id, id);
  t.equal((await call(ts.url, 'DELETE', `/felix/training-jobs/${id}`, { key: u.key })).status, 409, 'a deployed job cannot be deleted');

  // a checkpoint as the base of a new job
  const best = cks.checkpoints.find((c: { is_best: boolean }) => c.is_best);
  const cont = await call(ts.url, 'POST', '/felix/training-jobs', { key: u.key, body: { base_model: best.id, datasets: [{ name: 'people' }], training_type: 'full', max_steps: 2, nr_epochs: 1 } });
  t.equal(cont.status, 200);
  const contDone = await poll(() => call(ts.url, 'GET', `/felix/training-jobs/${cont.body.id}`, { key: u.key }), (r) => ['complete', 'failed', 'cancelled'].includes(r.body.status), 60_000, 200);
  t.match(contDone.body, { status: 'complete', base_model: best.id, current_step: 2 });
});

t.test('decoder LoRA: chat data → PEFT adapter → download → deployed and served with the adapter', async (t) => {
  const chats = Array.from({ length: 12 }, (_, i) => JSON.stringify({ messages: [{ role: 'user', content: `Tell me story ${i}` }, { role: 'assistant', content: 'Once upon a time there was a little cat.' }] })).join('\n');
  t.equal((await uploadDataset(ts.url, u.key, 'stories', 'decoder', 'stories.jsonl', chats)).body.status, 'ready');
  const full = await call(ts.url, 'POST', '/felix/training-jobs', { key: u.key, body: { base_model: 'tinystories-656k', datasets: [{ name: 'stories' }], training_type: 'full' } });
  t.equal(full.status, 422, 'decoders are LoRA-only');
  const job = await call(ts.url, 'POST', '/felix/training-jobs', { key: u.key, body: { base_model: 'tinystories-656k', datasets: [{ name: 'stories' }], model_name: 'cat-stories', nr_epochs: 2, max_steps: 3, batch_size: 4, lora_r: 4, learning_rate: 1e-3 } });
  t.equal(job.status, 200);
  const id = job.body.id;
  const done = await poll(() => call(ts.url, 'GET', `/felix/training-jobs/${id}`, { key: u.key }), (r) => ['complete', 'failed', 'cancelled'].includes(r.body.status), 120_000, 200);
  if (done.body.status !== 'complete') {
    const logs = await call(ts.url, 'GET', `/felix/training-jobs/${id}/logs`, { key: u.key });
    t.fail(`job ended ${done.body.status}: ${done.body.error}\n${logs.body.logs.map((l: { message: string }) => l.message).join('\n')}`);
    return;
  }
  t.match(done.body, { status: 'complete', task_type: 'decoder', training_type: 'lora', current_step: 3, configuration: { lora_r: 4 }, metrics: { f1: Number } });
  const dl = (await call(ts.url, 'GET', `/felix/training-jobs/${id}/download`, { key: u.key })).body;
  t.equal(dl.format, 'peft_lora');
  const tar = gunzipSync(Buffer.from(await (await fetch(dl.download_url)).arrayBuffer())).toString('latin1');
  t.match(tar, /cat-stories\/adapter_config\.json/);
  t.match(tar, /cat-stories\/adapter_model\.safetensors/);
  t.notMatch(tar, /cat-stories\/model\.safetensors/, 'an adapter, not a full model');

  const ck = (await call(ts.url, 'GET', `/felix/training-jobs/${id}/checkpoints`, { key: u.key })).body.checkpoints[0];
  // a checkpoint of a LoRA job continues its adapter (same rank; another rank is a 422)
  const clash = await call(ts.url, 'POST', '/felix/training-jobs', { key: u.key, body: { base_model: ck.id, datasets: [{ name: 'stories' }], lora_r: 8 } });
  t.equal(clash.status, 422);
  t.match(clash.body, { detail: /lora_r 8 differs from the adapter's rank 4/, errors: [{ path: '/lora_r' }] });
  const cont = await call(ts.url, 'POST', '/felix/training-jobs', { key: u.key, body: { base_model: ck.id, datasets: [{ name: 'stories' }], max_steps: 1 } });
  t.equal(cont.status, 200);
  const contDone = await poll(() => call(ts.url, 'GET', `/felix/training-jobs/${cont.body.id}`, { key: u.key }), (r) => ['complete', 'failed', 'cancelled'].includes(r.body.status), 60_000, 200);
  t.match(contDone.body, { status: 'complete', base_model: ck.id, current_step: 1, configuration: { lora_r: 4 } });

  const project = (await call(ts.url, 'POST', '/projects', { key: u.key, body: { name: 'stories' } })).body;
  t.equal((await call(ts.url, 'POST', `/projects/${project.id}/deployments`, { key: u.key, body: { training_job_id: id } })).status, 200);
  await ts.services.projects.settle();
  const gen = await call(ts.url, 'POST', `/projects/${project.id}/inference`, { key: u.key, body: { text: 'Tell me story 3', task: 'generate', max_tokens: 8, temperature: 0 } });
  t.equal(gen.status, 200);
  t.match(gen.body, { type: 'decoder', model_id: id, result: { content: String } });
  const chat = await call(ts.url, 'POST', '/v1/chat/completions', { key: u.key, body: { model: id, messages: [{ role: 'user', content: 'Tell me story 1' }], max_tokens: 8, temperature: 0 } });
  t.equal(chat.status, 200, 'served by model id through the compat API too');
});
