// Checkpoint records across kill -9: one record per (job, step), written after its folder is
// complete, and none pointing at a folder that no longer exists. A real (tiny) training job is
// killed twice mid-run with the server (a child process) and finishes after the second restart;
// records left by a dead process (duplicates, missing folders) are reconciled at start-up.
import t from 'tap';
import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServices } from '../../src/service/index.ts';
import { openStore } from '../../src/store/index.ts';
import { call } from './helpers.ts';
import { nerLine, poll, uploadDataset } from './customization-helpers.ts';
import { startChild } from './child-server.ts';
import { FakeRuntime } from './fake-runtime.ts';

const EPOCHS = 5;

t.test(`a job killed twice mid-run lists ${EPOCHS} checkpoints for ${EPOCHS} epochs, each on disk`, async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'loom-ck-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  let srv = await startChild(dataDir);
  t.teardown(() => srv.kill());
  const key = srv.key!;
  const lines = Array.from({ length: 24 }, (_, i) => {
    const [who, where] = [`Person${i % 7}`, `City${i % 5}`];
    return nerLine(`${who} visited ${where} today .`, [[who, 'person'], [where, 'city']]);
  }).join('\n');
  t.equal((await uploadDataset(srv.url, key, 'visits', 'ner', 'v.jsonl', lines)).body.status, 'ready');
  // 24 examples, 10% validation, batch 4: 5 steps an epoch, a checkpoint at the end of each
  const body = {
    base_model: 'loom/gliner2-init-tiny', datasets: [{ name: 'visits' }], training_type: 'full',
    nr_epochs: EPOCHS, batch_size: 4,
  };
  const job = (await call(srv.url, 'POST', '/felix/training-jobs', { key, body })).body;
  t.equal(job.status, 'requested');
  type Ck = { id: string; epoch: number; step: number; is_final: boolean; created_at: string };
  const listCks = () => call(srv.url, 'GET', `/felix/training-jobs/${job.id}/checkpoints`, { key });
  const getJob = () => call(srv.url, 'GET', `/felix/training-jobs/${job.id}`, { key });

  for (let kill = 1; kill <= 2; kill++) {
    // wait for two checkpoints of this run, then kill -9 the server
    const since = new Date().toISOString();
    const fresh = (r: { body: { checkpoints: Ck[] } }) =>
      r.body.checkpoints.filter((c) => c.created_at >= since).length;
    const seen = await poll(listCks, (r) => fresh(r) >= 2, 120_000, 100);
    t.ok(fresh(seen) >= 2, `run ${kill}: two checkpoints before the kill`);
    srv.kill();
    await srv.exited;
    srv = await startChild(dataDir);
  }
  const done = await poll(getJob, (r) => r.body.status === 'complete' || r.body.status === 'failed', 180_000, 200);
  t.equal(done.body.status, 'complete', done.body.error ?? 'complete');
  const cks = (await listCks()).body.checkpoints as Ck[];
  t.equal(cks.length, EPOCHS, 'one checkpoint per epoch, no duplicates from the killed runs');
  t.same(cks.map((c) => c.epoch), Array.from({ length: EPOCHS }, (_, i) => i + 1));
  t.equal(new Set(cks.map((c) => c.step)).size, EPOCHS, 'one record per step');
  t.equal(cks.filter((c) => c.is_final).length, 1);
  const logRes = await call(srv.url, 'GET', `/felix/training-jobs/${job.id}/logs`, { key });
  const logs: Array<{ message: string }> = logRes.body.logs;
  t.match(logs.map((l) => l.message).join('\n'), /checkpoint\(s\) of the interrupted run were discarded/);

  srv.kill();
  await srv.exited;
  const store = await openStore(dataDir);
  t.teardown(() => store.close());
  for (const c of (await store.trainingArtifacts.listCheckpoints(job.id))) {
    t.ok(existsSync(join(c.dir, 'config.json')), `checkpoint at step ${c.step} has its folder (${c.dir})`);
  }
  const out = join(dataDir, 'jobs', job.id, 'output');
  t.ok(existsSync(out));
  t.same(readdirSync(out).filter((f) => f.endsWith('.partial')), [], 'no half-written checkpoint folder');
});

t.test('start-up drops records whose folder is gone and duplicates of a (job, step)', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'loom-ck-rec-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const config = { dataDir, workerThreads: 1, trainingConcurrency: 0 };
  const open = () => createServices({ runtime: new FakeRuntime(), config });
  let s = await open();
  const { team } = await s.auth.createUser({ email: 'ck@example.com', password: 'correct horse battery' });
  const now = Date.now();
  const at = (ms: number) => new Date(now + ms).toISOString();
  const folder = (name: string) => {
    const d = join(dataDir, 'ck', name);
    mkdirSync(d, { recursive: true });
    return d;
  };
  const ck = (id: string, step: number, dir: string, ms: number) => ({
    id, job_id: 'job-1', team_id: team.id, epoch: step, step, train_loss: 1, val_loss: 1,
    is_best: false, is_final: false, dir, created_at: at(ms),
  });
  await s.store.tx(async (t) => {
    t.trainingJobs.put({
      id: 'job-1', team_id: team.id, base_model: 'test/encoder', model_name: 'm', task_type: 'encoder',
      output_dir: null, training_type: 'full', project_id: null, created_at: at(0), updated_at: at(0),
      datasets: [], configuration: {}, status: 'cancelled', restarts: 0,
    } as never);
    t.trainingArtifacts.putCheckpoint(ck('a-old', 1, folder('s1'), 1)); // duplicate of step 1 (older)
    t.trainingArtifacts.putCheckpoint(ck('a-new', 1, folder('s1'), 5));
    t.trainingArtifacts.putCheckpoint(ck('b', 2, folder('s2'), 6));
    t.trainingArtifacts.putCheckpoint(ck('gone', 3, join(dataDir, 'ck', 'missing'), 7)); // folder deleted
  });
  await s.close();
  s = await open();
  t.teardown(() => s.close());
  await new Promise((r) => setTimeout(r, 300));
  t.same((await s.store.trainingArtifacts.listCheckpoints('job-1')).map((c) => c.id), ['a-new', 'b']);
});
