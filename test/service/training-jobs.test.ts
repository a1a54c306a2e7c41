// Training jobs through HTTP, with the queue held (trainingConcurrency 0) so states are observed
// exactly: every 422 rule of the spec, 404s, the 20/min rate limit, GET shapes, list filters and
// bounds, logs, checkpoints, download before completion (409), stop (requested/running →
// cancelled), delete, trained models, and the restart rules (running → re-queued with a log
// line, or failed after repeated restarts). Training itself runs in e2e-customization.test.ts.
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServices } from '../../src/service/index.ts';
import { call, makeUser, startServer, type TestUser } from './helpers.ts';
import { nerLine, poll, uploadDataset } from './customization-helpers.ts';
import { FakeRuntime } from './fake-runtime.ts';

const ts = await startServer({ config: { trainingConcurrency: 0 } });
t.teardown(() => ts.close());

const NER = [nerLine('Alice lives in Paris', [['Alice', 'person'], ['Paris', 'city']]), nerLine('Bob met Alice', [['Bob', 'person'], ['Alice', 'person']])].join('\n');
const CHAT = '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n';

async function userWithData(): Promise<TestUser> {
  const u = await makeUser(ts, { credits: 10 });
  t.equal((await uploadDataset(ts.url, u.key, 'ner', 'ner', 'a.jsonl', NER)).body.status, 'ready');
  t.equal((await uploadDataset(ts.url, u.key, 'chat', 'decoder', 'c.jsonl', CHAT)).body.status, 'ready');
  return u;
}
const post = (u: TestUser, body: unknown) => call(ts.url, 'POST', '/felix/training-jobs', { key: u.key, body });

t.test('POST: 200 {id, status: requested}; every 422 rule; 404s', async (t) => {
  const u = await userWithData();
  const ok = await post(u, { base_model: 'test/encoder', datasets: [{ name: 'ner' }], model_name: 'my-ner', nr_epochs: 2, learning_rate: 0.001 });
  t.equal(ok.status, 200);
  t.same(Object.keys(ok.body).sort(), ['id', 'status']);
  t.equal(ok.body.status, 'requested');
  t.match(ok.body.id, /^[0-9a-f-]{36}$/);

  const noBase = await post(u, { datasets: [{ name: 'ner' }] });
  t.equal(noBase.status, 422);
  t.match(noBase.body, { detail: /base_model/, errors: [{ path: '/base_model' }] });
  const noData = await post(u, { base_model: 'test/encoder' });
  t.equal(noData.status, 422);
  t.equal((await post(u, { base_model: 'test/encoder', datasets: [] })).status, 422);
  t.equal((await post(u, { base_model: 'test/encoder', datasets: [{ name: 'ner' }], nr_epochs: 0 })).status, 422);
  t.equal((await post(u, { base_model: 'test/encoder', datasets: [{ name: 'ner' }], training_type: 'qlora' })).status, 422);

  // dataset not ready: a version that was never uploaded
  await call(ts.url, 'POST', '/felix/datasets/upload/url', { key: u.key, body: { dataset_name: 'pending', dataset_type: 'ner', filename: 'p.jsonl' } });
  const notReady = await post(u, { base_model: 'test/encoder', datasets: [{ name: 'pending' }] });
  t.equal(notReady.status, 422);
  t.match(notReady.body, { detail: /pending .*initialized; it must be ready/, errors: [{ path: '/datasets/0/name', keyword: 'dataset_not_ready' }] });
  const missing = await post(u, { base_model: 'test/encoder', datasets: [{ name: 'nope' }] });
  t.equal(missing.status, 404);
  t.match(missing.body, { detail: /Dataset nope not found/ });
  const noModel = await post(u, { base_model: 'no/such-model', datasets: [{ name: 'ner' }] });
  t.equal(noModel.status, 404);
  t.match(noModel.body.detail, /Model no\/such-model not found/);

  const full = await post(u, { base_model: 'test/decoder', datasets: [{ name: 'chat' }], training_type: 'full' });
  t.equal(full.status, 422);
  t.match(full.body, { detail: /LoRA-only/, errors: [{ path: '/training_type' }] });
  const rlSft = await post(u, { base_model: 'test/decoder', datasets: [{ name: 'chat' }], rl_config: { beta: 0.1 } });
  t.equal(rlSft.status, 422);
  t.match(rlSft.body, { detail: /rl_config must be omitted for sft/, errors: [{ path: '/rl_config' }] });
  const grpoNoCfg = await post(u, { base_model: 'test/decoder', datasets: [{ name: 'chat' }], training_algorithm: 'grpo' });
  t.equal(grpoNoCfg.status, 422);
  t.match(grpoNoCfg.body.detail, /grpo needs rl_config/);
  const grpoNoReward = await post(u, { base_model: 'test/decoder', datasets: [{ name: 'chat' }], training_algorithm: 'grpo', rl_config: {} });
  t.match(grpoNoReward.body.detail, /reward_type/);
  // rl on an encoder: refused naming why (the rest of rl_config validation: test/service/rl-jobs.test.ts)
  const grpo = await post(u, { base_model: 'test/encoder', datasets: [{ name: 'ner' }], training_algorithm: 'grpo', rl_config: { reward_type: 'exact_match' } });
  t.equal(grpo.status, 422);
  t.match(grpo.body, { detail: /grpo is not supported for test\/encoder: it is an encoder/, errors: [{ path: '/training_algorithm', keyword: 'rl_not_supported' }] });
  const dpoChat = await post(u, { base_model: 'test/decoder', datasets: [{ name: 'chat' }], training_algorithm: 'dpo', rl_config: {} });
  t.equal(dpoChat.status, 422, 'dpo needs {prompt, chosen, rejected} rows');
  t.match(dpoChat.body, { detail: /row 1 is a chat record/, errors: [{ path: '/datasets/0/name', keyword: 'dataset_type' }] });
  const mismatch = await post(u, { base_model: 'test/encoder', datasets: [{ name: 'chat' }] });
  t.equal(mismatch.status, 422);
  t.match(mismatch.body.detail, /encoder cannot train/);
  const mismatch2 = await post(u, { base_model: 'test/decoder', datasets: [{ name: 'ner' }] });
  t.equal(mismatch2.status, 422);
  t.equal((await post(u, { base_model: 'test/encoder', datasets: [{ name: 'ner' }], project_id: '00000000-0000-4000-8000-000000000000' })).status, 404, 'unknown project');
  const dec = await post(u, { base_model: 'test/decoder', datasets: [{ name: 'chat' }] });
  t.equal(dec.status, 200, 'decoder LoRA sft is accepted');
  t.equal((await call(ts.url, 'POST', '/felix/training-jobs', { body: { base_model: 'test/encoder', datasets: [{ name: 'ner' }] } })).status, 401);
});

t.test('rate limit: 20 per minute per user, then 429 with Retry-After', async (t) => {
  const u = await userWithData();
  for (let i = 0; i < 20; i++) t.equal((await post(u, { base_model: 'test/encoder', datasets: [{ name: 'ner' }] })).status, 200);
  const r = await post(u, { base_model: 'test/encoder', datasets: [{ name: 'ner' }] });
  t.equal(r.status, 429);
  t.match(r.body, { detail: /Rate limit/, code: 'endpoint_rate_limit', scope: 'team' });
  t.ok(Number(r.headers.get('retry-after')) >= 1);
  t.equal(r.headers.get('x-ratelimit-scope'), 'team');
  t.equal((await call(ts.url, 'GET', '/felix/training-jobs?limit=1', { key: u.key })).status, 200, 'reads are not limited by it');
});

t.test('GET one / list: shapes, filters, bounds; logs; checkpoints; download 409; stop; delete; trained models', async (t) => {
  const u = await userWithData();
  const a = (await post(u, { base_model: 'test/encoder', datasets: [{ name: 'ner' }], model_name: 'a', training_type: 'full', seed: 7 })).body;
  const b = (await post(u, { base_model: 'test/decoder', datasets: [{ name: 'chat' }], model_name: 'b', lora_r: 4 })).body;
  const one = await call(ts.url, 'GET', `/felix/training-jobs/${a.id}`, { key: u.key });
  t.equal(one.status, 200);
  t.match(one.body, {
    id: a.id, status: 'requested', model_name: 'a', base_model: 'test/encoder', task_type: 'encoder', training_type: 'full', training_algorithm: 'sft',
    datasets: [{ name: 'ner', version: '1', size: 2 }], progress_percent: 0, current_epoch: 0,
    configuration: { nr_epochs: 3, seed: 7, validation_data_percentage: 10, batch_size: 8 },
  });
  t.notOk('metrics' in one.body, 'no metrics before complete');
  t.notOk('lora_r' in one.body.configuration, 'full training has no LoRA settings');
  const bj = (await call(ts.url, 'GET', `/felix/training-jobs/${b.id}`, { key: u.key })).body;
  t.match(bj, { task_type: 'decoder', training_type: 'lora', configuration: { lora_r: 4, lora_alpha: 16, nr_epochs: 1 } });

  t.equal((await call(ts.url, 'GET', '/felix/training-jobs/00000000-0000-4000-8000-000000000000', { key: u.key })).status, 404);
  const bad = await call(ts.url, 'GET', '/felix/training-jobs/not-a-uuid', { key: u.key });
  t.equal(bad.status, 400);
  t.type(bad.body.detail, 'string');
  const other = await makeUser(ts);
  t.equal((await call(ts.url, 'GET', `/felix/training-jobs/${a.id}`, { key: other.key })).status, 404, 'other teams do not see it');

  const list = await call(ts.url, 'GET', '/felix/training-jobs', { key: u.key });
  t.equal(list.status, 200);
  t.match(list.body, { count: 2, total: 2, limit: 200, offset: 0 });
  t.same(list.body.training_jobs.map((j: { id: string }) => j.id), [b.id, a.id], 'newest first');
  t.same((await call(ts.url, 'GET', '/felix/training-jobs?limit=1&offset=1', { key: u.key })).body.training_jobs.map((j: { id: string }) => j.id), [a.id]);
  t.equal((await call(ts.url, 'GET', '/felix/training-jobs?status=complete', { key: u.key })).body.count, 0);
  t.equal((await call(ts.url, 'GET', '/felix/training-jobs?limit=0', { key: u.key })).status, 422);
  t.equal((await call(ts.url, 'GET', '/felix/training-jobs?limit=201', { key: u.key })).status, 422);
  t.equal((await call(ts.url, 'GET', '/felix/training-jobs?limit=abc', { key: u.key })).status, 400);
  t.equal((await call(ts.url, 'GET', '/felix/training-jobs?status=done', { key: u.key })).status, 422);

  const logs = await call(ts.url, 'GET', `/felix/training-jobs/${a.id}/logs`, { key: u.key });
  t.equal(logs.status, 200);
  t.match(logs.body, { success: true, count: 1, logs: [{ level: 'info', message: /job created/ }] });
  t.type(logs.body.logs[0].timestamp, 'string');
  t.match(await call(ts.url, 'GET', `/felix/training-jobs/${a.id}/checkpoints`, { key: u.key }), { status: 200, body: { success: true, count: 0, checkpoints: [] } });
  const dl = await call(ts.url, 'GET', `/felix/training-jobs/${a.id}/download`, { key: u.key });
  t.equal(dl.status, 409);
  t.match(dl.body.detail, /requested; weights can be downloaded once it is complete/);

  const stop = await call(ts.url, 'POST', `/felix/training-jobs/${a.id}/stop`, { key: u.key });
  t.equal(stop.status, 200);
  t.match(stop.body, { success: true, id: a.id, status: 'cancelled' });
  t.equal((await call(ts.url, 'GET', `/felix/training-jobs/${a.id}`, { key: u.key })).body.status, 'cancelled');
  const again = await call(ts.url, 'POST', `/felix/training-jobs/${a.id}/stop`, { key: u.key });
  t.equal(again.status, 409);
  t.match(again.body.detail, /cancelled; only a running/);
  t.equal((await call(ts.url, 'GET', '/felix/training-jobs?status=cancelled', { key: u.key })).body.count, 1);
  const sse = await call(ts.url, 'GET', `/felix/training-jobs/${a.id}/logs?stream=true`, { key: u.key });
  t.match(sse.headers.get('content-type'), /text\/event-stream/);
  t.match(sse.text, /^event: log\ndata: \{"seq":0,.*"message":"job created; queued[^"]*"\}\n\n/);
  t.match(sse.text, /event: end\ndata: \{"status":"cancelled"\}\n\n$/);
  t.match(await call(ts.url, 'GET', '/felix/trained-models', { key: u.key }), { status: 200, body: { success: true, count: 0, models: [] } });

  const del = await call(ts.url, 'DELETE', `/felix/training-jobs/${a.id}`, { key: u.key });
  t.equal(del.status, 200);
  t.same(Object.keys(del.body).sort(), ['message', 'success']);
  t.equal(del.body.success, true);
  t.equal((await call(ts.url, 'GET', `/felix/training-jobs/${a.id}`, { key: u.key })).status, 404);
  t.equal((await call(ts.url, 'GET', `/felix/training-jobs/${a.id}/logs`, { key: u.key })).status, 404);
  t.equal((await call(ts.url, 'DELETE', `/felix/training-jobs/${a.id}`, { key: u.key })).status, 404);
  t.equal((await ts.services.store.trainingArtifacts.listLogs(a.id)).length, 0, 'logs removed');
});

t.test('restart: running jobs are re-queued with a log line; after repeated restarts they fail', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'loom-restart-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const open = () => createServices({ runtime: new FakeRuntime(), config: { dataDir, workerThreads: 1, trainingConcurrency: 0 } });
  let s = await open();
  const { team } = await s.auth.createUser({ email: 'r@example.com', password: 'correct horse battery' });
  const now = new Date().toISOString();
  const base = { team_id: team.id, base_model: 'test/encoder', model_name: 'm', task_type: 'encoder' as const, output_dir: null, training_type: 'full', project_id: null, created_at: now, updated_at: now, datasets: [], configuration: {}, current_epoch: 1, current_step: 5 };
  await s.store.tx(async (t) => {
    t.trainingJobs.put({ ...base, id: 'job-running', status: 'running', restarts: 0 });
    t.trainingJobs.put({ ...base, id: 'job-tired', status: 'running', restarts: 2 });
    t.trainingJobs.put({ ...base, id: 'job-queued', status: 'requested', restarts: 0 });
  });
  await s.close();
  s = await open();
  t.teardown(() => s.close());
  await new Promise((r) => setTimeout(r, 300));
  t.equal((await s.store.trainingJobs.get('job-running'))!.status, 'requested');
  const restarted = /stopped while it was running \(epoch 1, step 5\): the server restarted or its worker .*; the job is queued again/;
  t.match((await s.store.trainingArtifacts.listLogs('job-running')).map((l) => l.message).join('\n'), restarted);
  const tired = (await s.store.trainingJobs.get('job-tired'))!;
  t.equal(tired.status, 'failed');
  t.match(tired.error, /stopped during training 3 times/);
  t.match((await s.store.trainingArtifacts.listLogs('job-tired'))[0], { level: 'error' });
  t.equal((await s.store.trainingJobs.get('job-queued'))!.status, 'requested');
  t.equal((await s.store.trainingArtifacts.listLogs('job-queued')).length, 0, 'a queued job is left as it is');
});

t.test('real runs: one job at a time (the next waits queued); stop keeps the last checkpoint', async (t) => {
  const { createLocalRuntime } = await import('../../src/service/runtime-local.ts');
  const modelsDir = mkdtempSync(join(tmpdir(), 'loom-tj-models-'));
  const s = await startServer({ runtime: createLocalRuntime({ modelsDir }), config: { trainingConcurrency: 1 } });
  t.teardown(async () => { await s.close(); rmSync(modelsDir, { recursive: true, force: true }); });
  const v = await makeUser(s);
  const lines = Array.from({ length: 40 }, (_, i) => nerLine(`Person${i % 7} visited City${i % 5} today .`, [[`Person${i % 7}`, 'person'], [`City${i % 5}`, 'city']])).join('\n');
  t.equal((await uploadDataset(s.url, v.key, 'visits', 'ner', 'v.jsonl', lines)).body.status, 'ready');
  const body = { base_model: 'loom/gliner2-init-tiny', datasets: [{ name: 'visits' }], training_type: 'full', nr_epochs: 200, batch_size: 4, eval_steps: 2 };
  const a = (await call(s.url, 'POST', '/felix/training-jobs', { key: v.key, body })).body;
  const b = (await call(s.url, 'POST', '/felix/training-jobs', { key: v.key, body })).body;
  const ck = await poll(() => call(s.url, 'GET', `/felix/training-jobs/${a.id}/checkpoints`, { key: v.key }), (r) => r.body.count >= 1, 60_000, 100);
  t.ok(ck.body.count >= 1, 'a checkpoint was written');
  t.equal((await call(s.url, 'GET', `/felix/training-jobs/${a.id}`, { key: v.key })).body.status, 'running');
  const queued = await call(s.url, 'GET', `/felix/training-jobs/${b.id}`, { key: v.key });
  t.equal(queued.body.status, 'requested', 'the second job waits for the first');
  t.match((await call(s.url, 'GET', `/felix/training-jobs/${b.id}/logs`, { key: v.key })).body.logs[0].message, /queued behind 1 job/);

  const stop = await call(s.url, 'POST', `/felix/training-jobs/${a.id}/stop`, { key: v.key });
  t.match(stop.body, { success: true, status: 'cancelled' });
  // the stopped job ends gracefully: a final checkpoint, still cancelled; then the queue moves on
  const started = await poll(() => call(s.url, 'GET', `/felix/training-jobs/${b.id}`, { key: v.key }), (r) => r.body.status !== 'requested', 60_000, 100);
  t.equal(started.body.status, 'running', 'the next job starts once the first has stopped');
  const after = await call(s.url, 'GET', `/felix/training-jobs/${a.id}`, { key: v.key });
  t.equal(after.body.status, 'cancelled');
  t.notOk('metrics' in after.body);
  const cks = (await call(s.url, 'GET', `/felix/training-jobs/${a.id}/checkpoints`, { key: v.key })).body.checkpoints;
  t.equal(cks.filter((c: { is_final: boolean }) => c.is_final).length, 1, 'the last checkpoint is kept as final');
  const aLogs = (await call(s.url, 'GET', `/felix/training-jobs/${a.id}/logs`, { key: v.key })).body.logs
    .map((l: { message: string }) => l.message).join('\n');
  t.match(aLogs, /training stopped; the last checkpoint is kept/);
  t.match(aLogs, /precision (fp32|bf16) \(auto/, 'the log says which compute precision the job got and why');
  t.equal((await call(s.url, 'GET', `/felix/training-jobs/${a.id}/download`, { key: v.key })).status, 409, 'no download for a cancelled job');
  // a kept checkpoint can seed a new job
  const final = cks.find((c: { is_final: boolean }) => c.is_final);
  t.equal((await call(s.url, 'POST', '/felix/training-jobs', { key: v.key, body: { base_model: final.id, datasets: [{ name: 'visits' }], training_type: 'full', max_steps: 1 } })).status, 200);
  await call(s.url, 'POST', `/felix/training-jobs/${b.id}/stop`, { key: v.key });
  // deleting a running job removes it at once (its worker is told to stop)
  const del = await call(s.url, 'DELETE', `/felix/training-jobs/${b.id}`, { key: v.key });
  t.equal(del.status, 200);
  await s.services.trainingJobs.idle(60_000);
});
