// LOOM_ARTIFACTS_DIR (config.artifactsDir): datasets (with their uploads), training jobs (checkpoints,
// weights) and evaluations live in a folder apart from the data dir (a mount every node reads), and
// are served from there; with nothing set they stay under the data dir.
import t from 'tap';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { artifactDir, configFromEnv, defaultConfig } from '../../src/service/config.ts';
import { createLocalRuntime } from '../../src/service/runtime-local.ts';
import { call, makeUser, startServer } from './helpers.ts';
import { nerLine, poll, trainingJobEnded, uploadDataset } from './customization-helpers.ts';

t.test('the artifact folders: under the data dir by default, under LOOM_ARTIFACTS_DIR when set', async (t) => {
  const plain = configFromEnv({ LOOM_DATA_DIR: '/srv/loom' });
  t.same(['datasets', 'jobs', 'evaluations', 'models'].map((k) => artifactDir(plain, k as 'jobs')),
    ['/srv/loom/datasets', '/srv/loom/jobs', '/srv/loom/evaluations', '/srv/loom/models']);
  const shared = configFromEnv({ LOOM_DATA_DIR: '/srv/loom', LOOM_ARTIFACTS_DIR: '/mnt/shared/loom' });
  t.equal(shared.dataDir, '/srv/loom', 'the store stays in the data dir');
  t.equal(artifactDir(shared, 'datasets'), '/mnt/shared/loom/datasets');
  t.equal(artifactDir(shared, 'jobs'), '/mnt/shared/loom/jobs');
  t.equal(shared.modelsDir, '/mnt/shared/loom/models', 'models follow the artifacts');
  const both = configFromEnv({ LOOM_ARTIFACTS_DIR: '/a', LOOM_MODELS_DIR: '/m' });
  t.equal(both.modelsDir, '/m', 'LOOM_MODELS_DIR still wins');
  t.equal(defaultConfig({ dataDir: '/d' }).artifactsDir, '/d');
});

t.test('a dataset and a training job land under the artifacts dir and are served from it', async (t) => {
  const artifactsDir = mkdtempSync(join(tmpdir(), 'loom-art-'));
  t.teardown(() => rmSync(artifactsDir, { recursive: true, force: true }));
  const runtime = createLocalRuntime({ modelsDir: join(artifactsDir, 'models') });
  const ts = await startServer({ runtime, config: { artifactsDir } });
  t.teardown(() => ts.close());
  const u = await makeUser(ts, { credits: 100 });

  const lines = Array.from({ length: 24 }, (_, i) => {
    const [who, where] = [['Alice', 'Bob', 'Carol', 'David'][i % 4], ['Paris', 'Rome', 'Oslo'][i % 3]];
    return nerLine(`${who} visited ${where} today .`, [[who, 'person'], [where, 'city']]);
  }).join('\n') + '\n';
  const ds = await uploadDataset(ts.url, u.key, 'visits', 'ner', 'visits.jsonl', lines);
  t.equal(ds.body.status, 'ready');
  const teamDir = join(artifactsDir, 'datasets', u.team_id);
  t.ok(existsSync(teamDir), 'the dataset is under <artifacts>/datasets/<team>');
  t.notOk(existsSync(join(ts.dataDir, 'datasets')), 'nothing under the data dir');
  const dl = await call(ts.url, 'GET', '/felix/datasets/visits/1/download', { key: u.key });
  t.equal(dl.status, 200);
  t.equal(dl.text.trim().split('\n').length, 24, 'served back from the artifacts dir');

  const body = {
    base_model: 'loom/gliner2-init-tiny', datasets: [{ name: 'visits' }], training_type: 'full',
    nr_epochs: 2, batch_size: 8, seed: 1,
  };
  const created = await call(ts.url, 'POST', '/felix/training-jobs', { key: u.key, body });
  t.equal(created.status, 200);
  const id = created.body.id;
  const done = await trainingJobEnded(ts.url, u.key, id, 90_000);
  t.equal(done.body.status, 'complete', done.body.error ?? 'complete');
  const jobDir = join(artifactsDir, 'jobs', id);
  const cks = (await call(ts.url, 'GET', `/felix/training-jobs/${id}/checkpoints`, { key: u.key })).body;
  t.equal(cks.count, 2, 'a checkpoint per epoch');
  // (awaited: the store may answer with promises)
  const records = await ts.services.store.trainingArtifacts.listCheckpoints(id);
  t.equal(records.length, 2);
  for (const c of records) {
    t.ok(c.dir.startsWith(jobDir + '/') && existsSync(join(c.dir, 'model.safetensors')),
      `checkpoint ${c.dir.slice(artifactsDir.length)} is under <artifacts>/jobs/<id>`);
  }
  t.notOk(existsSync(join(ts.dataDir, 'jobs')), 'no job folder under the data dir');

  // the weights: downloaded and served for inference from the artifacts dir
  const link = await call(ts.url, 'GET', `/felix/training-jobs/${id}/download`, { key: u.key });
  t.equal(link.status, 200);
  const tar = gunzipSync(Buffer.from(await (await fetch(link.body.download_url)).arrayBuffer())).toString('latin1');
  t.match(tar, /model\.safetensors/);
  const infBody = { model_id: id, text: 'Carol visited Rome today .', schema: ['person', 'city'] };
  const inf = await call(ts.url, 'POST', '/inference', { key: u.key, body: infBody });
  t.equal(inf.status, 200, JSON.stringify(inf.body));
  t.equal(inf.body.model_id, id);
  // a checkpoint (on the shared folder) as the base of a new job
  const best = cks.checkpoints.find((c: { is_best: boolean }) => c.is_best);
  const contBody = { ...body, base_model: best.id, nr_epochs: 1, max_steps: 1 };
  const cont = await call(ts.url, 'POST', '/felix/training-jobs', { key: u.key, body: contBody });
  t.equal(cont.status, 200);
  const contDone = await poll(() => call(ts.url, 'GET', `/felix/training-jobs/${cont.body.id}`, { key: u.key }),
    (r) => ['complete', 'failed', 'cancelled'].includes(r.body.status), 60_000, 200);
  t.equal(contDone.body.status, 'complete', contDone.body.error ?? 'complete');
  t.ok(existsSync(join(artifactsDir, 'jobs', cont.body.id)), 'its folder too');
  const datasetDir = join(teamDir, readdirSync(teamDir)[0]!);
  const versionDir = join(datasetDir, readdirSync(datasetDir)[0]!);
  t.ok(readFileSync(join(versionDir, 'data.jsonl'), 'utf8').includes('Carol'), 'the stored data file');
});
