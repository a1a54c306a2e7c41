// Artifacts on S3-compatible object storage (LOOM_S3_*, src/service/artifacts/s3.ts) against s3rver, an S3
// server in Node on loopback: the three-step upload with a URL presigned by the bucket (the file is PUT
// straight to it), `process` finding the object there (none → 409, too large → 413), a training job whose
// checkpoints and weights land in the bucket and are served by other instances with an empty local
// folder on the same store, upload URLs that expire, and an unreachable store answering 503.
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, request } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { HeadObjectCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import S3rver from 's3rver';
import { artifactKey, createArtifactStore } from '../../src/service/artifacts/index.ts';
import { configFromEnv, type S3Config } from '../../src/service/config.ts';
import { createLocalRuntime } from '../../src/service/runtime-local.ts';
import { call, makeUser, startServer, type TestServer } from './helpers.ts';
import { nerLine, poll, trainingJobEnded, uploadDataset } from './customization-helpers.ts';

// the SDK's standard credential chain reads these (s3rver's fixed key pair)
process.env.AWS_ACCESS_KEY_ID = 'S3RVER';
process.env.AWS_SECRET_ACCESS_KEY = 'S3RVER';

/** s3rver on a loopback port with an empty bucket `loom`, in `dir` */
async function startS3(dir: string): Promise<{ endpoint: string; close(): Promise<void> }> {
  const configureBuckets = [{ name: 'loom', configs: [] }];
  const s3rver = new S3rver({ port: 0, address: '127.0.0.1', directory: dir, silent: true, configureBuckets });
  const { port } = await s3rver.run();
  return { endpoint: `http://127.0.0.1:${port}`, close: () => s3rver.close() };
}
/** step 1 and step 3 of the upload */
const uploadUrl = (url: string, key: string, name: string, type = 'ner', filename = 'd.jsonl') =>
  call(url, 'POST', '/felix/datasets/upload/url', { key, body: { dataset_name: name, dataset_type: type, filename } });
const processUpload = (url: string, key: string, name: string, uploadId?: string) =>
  call(url, 'POST', '/felix/datasets/upload/process', { key, body: { dataset_name: name, upload_id: uploadId } });

t.test('a stored path maps to its key, and to this node\'s path, whatever folder wrote it', async (t) => {
  const root = '/var/cache/loom';
  t.equal(artifactKey(root, `${root}/jobs/j1/output/final`), 'jobs/j1/output/final', 'under this node\'s folder');
  t.equal(artifactKey(root, '/mnt/other/jobs/j1/output/final'), 'jobs/j1/output/final', 'written by another node');
  t.equal(artifactKey(root, '/srv/jobs/x/datasets/t/d/v/raw'), 'datasets/t/d/v/raw', 'the last artifact folder wins');
  t.equal(artifactKey(root, '/var/cache/loom/models/smollm2'), null, 'models are not artifacts');
  t.equal(artifactKey(root, '/opt/models/gliner2'), null);
  const cfg: S3Config = { bucket: 'b', endpoint: 'http://127.0.0.1:1', region: 'us-east-1', prefix: '',
    forcePathStyle: true };
  const s3 = await createArtifactStore({ artifactsDir: root, s3: cfg });
  t.equal(s3.kind, 's3');
  t.equal(s3.localPath('/mnt/other/jobs/j1/output/final'), '/var/cache/loom/jobs/j1/output/final');
  t.equal(s3.localPath('/opt/models/gliner2'), '/opt/models/gliner2', 'a base model path is left alone');
  s3.close();
  const local = await createArtifactStore({ artifactsDir: root, s3: null });
  t.equal(local.kind, 'local', 'no bucket: the folder');
  t.equal(local.localPath('/mnt/other/jobs/j1'), '/mnt/other/jobs/j1', 'a shared folder: the path as written');
  t.equal(await local.presignPut('/var/cache/loom/datasets/t/d/v/raw', 60), null, 'Loom signs its own URLs');
});

t.test('LOOM_S3_* configure the store', async (t) => {
  t.equal(configFromEnv({}).s3, null, 'no bucket: the artifacts folder is the store');
  const endpoint = 'http://minio:9000';
  const env = { LOOM_S3_BUCKET: 'b', LOOM_S3_ENDPOINT: endpoint, LOOM_S3_PREFIX: 'loom', LOOM_S3_REGION: 'eu-west-1' };
  const c = configFromEnv(env);
  t.same(c.s3, { bucket: 'b', endpoint, region: 'eu-west-1', prefix: 'loom/', forcePathStyle: true });
  const aws = configFromEnv({ LOOM_S3_BUCKET: 'b', AWS_REGION: 'us-west-2' }).s3!;
  t.same([aws.endpoint, aws.region, aws.prefix, aws.forcePathStyle], [null, 'us-west-2', '', false], 'AWS S3');
  const hosted = configFromEnv({ LOOM_S3_BUCKET: 'b', LOOM_S3_ENDPOINT: 'http://x', LOOM_S3_FORCE_PATH_STYLE: '0' });
  t.equal(hosted.s3!.forcePathStyle, false);
});

t.test('datasets, checkpoints and weights in the bucket; nodes with an empty folder serve them', async (t) => {
  const tmp = mkdtempSync(join(tmpdir(), 'loom-s3-'));
  t.teardown(() => rmSync(tmp, { recursive: true, force: true }));
  const server = await startS3(join(tmp, 's3rver'));
  let s3up = true;
  t.teardown(async () => { if (s3up) await server.close(); });
  const { endpoint } = server;
  const s3: S3Config = { bucket: 'loom', endpoint, region: 'us-east-1', prefix: 'inst/', forcePathStyle: true };
  const bucket = new S3Client({ endpoint, region: 'us-east-1', forcePathStyle: true });
  t.teardown(() => bucket.destroy());
  const keys = async (prefix: string) => {
    const page = await bucket.send(new ListObjectsV2Command({ Bucket: 'loom', Prefix: `inst/${prefix}` }));
    return (page.Contents ?? []).map((o) => o.Key!.slice('inst/'.length));
  };
  const exists = (key: string) =>
    bucket.send(new HeadObjectCommand({ Bucket: 'loom', Key: `inst/${key}` })).then(() => true, () => false);

  // node A: the store in dataDir, its artifacts cache in artA
  const dataDir = join(tmp, 'data');
  const node = (artifactsDir: string, signedUrlTtlS = 600) => startServer({
    runtime: createLocalRuntime({ modelsDir: join(artifactsDir, 'models') }),
    config: { dataDir, artifactsDir, s3, maxUploadBytes: 4096, signedUrlTtlS },
  });
  let a: TestServer | null = await node(join(tmp, 'artA'));
  t.teardown(async () => { await a?.close(); });
  const u = await makeUser(a, { credits: 100 });

  // step 1: the URL is the bucket's own presigned PUT, with the configured lifetime
  const lines = Array.from({ length: 24 }, (_, i) => {
    const [who, where] = [['Alice', 'Bob', 'Carol', 'David'][i % 4]!, ['Paris', 'Rome', 'Oslo'][i % 3]!];
    return nerLine(`${who} visited ${where} today .`, [[who, 'person'], [where, 'city']]);
  }).join('\n') + '\n';
  const first = await uploadUrl(a.url, u.key, 'probe');
  t.equal(first.status, 200);
  const url = new URL(first.body.upload_url);
  t.equal(url.origin, endpoint, 'the upload goes to the object store, not to Loom');
  t.match(url.pathname, new RegExp(`^/loom/inst/datasets/${u.team_id}/`));
  t.equal(url.searchParams.get('X-Amz-Expires'), '600', 'LOOM_SIGNED_URL_TTL_S');
  t.ok(url.searchParams.get('X-Amz-Signature'), 'SigV4-presigned');
  t.ok(Math.abs(Date.parse(first.body.expires_at) - Date.now() - 600_000) < 10_000, 'expires_at matches');

  // no object yet → 409 "no file uploaded"; the version waits
  const early = await processUpload(a.url, u.key, 'probe', first.body.upload_id);
  t.equal(early.status, 409);
  t.match(early.body.detail, /No file was uploaded/);
  // too large (limit 4096) → 413, the object is deleted, the URL takes another PUT
  t.equal((await fetch(first.body.upload_url, { method: 'PUT', body: 'x'.repeat(5000) })).status, 200);
  const big = await processUpload(a.url, u.key, 'probe', first.body.upload_id);
  t.equal(big.status, 413);
  t.match(big.body.detail, /4096 bytes/);
  t.notOk(await exists(`${url.pathname.slice('/loom/inst/'.length)}`), 'the oversized object was deleted');
  t.equal((await call(a.url, 'GET', '/felix/datasets/probe/1', { key: u.key })).body.status, 'initialized');

  // the three steps, the file PUT straight to the bucket: ready, rows listed
  const ds = await uploadDataset(a.url, u.key, 'visits', 'ner', 'visits.jsonl', lines);
  t.equal(ds.body.status, 'ready', ds.body.processing_error ?? '');
  t.equal(ds.body.size, 24);
  const rows = await call(a.url, 'GET', '/felix/datasets/visits/1/preview?limit=3', { key: u.key });
  t.equal(rows.status, 200);
  t.same(rows.body.records.map((r: { text: string }) => r.text),
    ['Alice visited Paris today .', 'Bob visited Rome today .', 'Carol visited Oslo today .']);
  const dsKeys = await keys(`datasets/${u.team_id}/`);
  t.ok(dsKeys.some((k) => k.endsWith('/raw')), 'the upload in the bucket');
  t.ok(dsKeys.some((k) => k.endsWith('/data.jsonl')), 'the processed version in the bucket');

  // a short training job: its checkpoints and final weights land in the bucket
  const body = {
    base_model: 'loom/gliner2-init-tiny', datasets: [{ name: 'visits' }], training_type: 'full',
    nr_epochs: 2, batch_size: 8, seed: 1,
  };
  const created = await call(a.url, 'POST', '/felix/training-jobs', { key: u.key, body });
  t.equal(created.status, 200, created.text);
  const id = created.body.id;
  const done = await trainingJobEnded(a.url, u.key, id, 120_000);
  t.equal(done.body.status, 'complete', done.body.error ?? 'complete');
  const jobKeys = await keys(`jobs/${id}/`);
  t.ok(jobKeys.includes(`jobs/${id}/output/final/model.safetensors`), 'final weights in the bucket');
  t.ok(jobKeys.includes(`jobs/${id}/output/final/.loom-manifest.json`), 'with their manifest');
  const cks = (await call(a.url, 'GET', `/felix/training-jobs/${id}/checkpoints`, { key: u.key })).body;
  t.equal(cks.count, 2, 'a checkpoint per epoch');
  const folders = jobKeys.filter((k) => k.endsWith('/.loom-manifest.json'));
  t.ok(folders.length >= 2, `checkpoint folders in the bucket: ${folders.join(', ')}`);
  await a.close();
  a = null;

  // node B: the same store, an empty local folder
  const artB = join(tmp, 'artB');
  const b = await node(artB);
  let bOpen = true;
  t.teardown(async () => { if (bOpen) await b.close(); });
  t.equal((await call(b.url, 'GET', `/felix/training-jobs/${id}/checkpoints`, { key: u.key })).body.count, 2);
  // served for inference: 425 while the weights are fetched into B's cache, then 200
  const infBody = { model_id: id, text: 'Carol visited Rome today .', schema: ['person', 'city'] };
  const cold = await call(b.url, 'POST', '/inference', { key: u.key, body: infBody });
  t.equal(cold.status, 425, 'warming while the weights are fetched');
  t.ok(Number(cold.headers.get('retry-after')) >= 1, 'with Retry-After');
  const infer = () => call(b.url, 'POST', '/inference', { key: u.key, body: infBody });
  const inf = await poll(infer, (r) => r.status !== 425, 30_000, 100);
  t.equal(inf.status, 200, inf.text);
  t.equal(inf.body.model_id, id);
  t.ok(existsSync(join(artB, 'jobs', id, 'output', 'final', 'model.safetensors')), 'fetched into the local cache');
  // an evaluation on B: the job's weights and the dataset, from the bucket
  const evBody = { base_model: id, dataset_name: 'visits' };
  const ev = await call(b.url, 'POST', '/felix/evaluations', { key: u.key, body: evBody });
  t.equal(ev.status, 200, ev.text);
  const evDone = await poll(() => call(b.url, 'GET', `/felix/evaluations/${ev.body.evaluations[0].id}`, { key: u.key }),
    (r) => ['complete', 'failed'].includes(r.body.status), 60_000, 100);
  t.match(evDone.body, { status: 'complete', sample_count: 24 }, evDone.body.error ?? '');
  // the weights: a GET presigned by the bucket (the archive built once, kept there)
  const link = await call(b.url, 'GET', `/felix/training-jobs/${id}/download`, { key: u.key });
  t.equal(link.status, 200, link.text);
  t.equal(new URL(link.body.download_url).origin, endpoint, 'downloaded from the object store');
  const tgz = await fetch(link.body.download_url);
  t.equal(tgz.status, 200);
  t.match(tgz.headers.get('content-disposition') ?? '', /\.tar\.gz"/);
  const tar = gunzipSync(Buffer.from(await tgz.arrayBuffer())).toString('latin1');
  t.match(tar, /model\.safetensors/);
  t.ok(await exists(`jobs/${id}/weights.tar.gz`), 'the archive is kept in the bucket');
  // the dataset's rows (fetched into B's cache by the evaluation)
  const rowsB = await call(b.url, 'GET', '/felix/datasets/visits/1/preview?limit=2&offset=22', { key: u.key });
  t.equal(rowsB.status, 200);
  t.equal(rowsB.body.count, 2);

  await b.close();
  bOpen = false;

  // node C, empty too: a deployment fetches the weights before it warms; a checkpoint is the base of a new job
  const artC = join(tmp, 'artC');
  const c = await node(artC, 3);
  t.teardown(() => c.close());
  const project = (await call(c.url, 'POST', '/projects', { key: u.key, body: { name: 'visits' } })).body;
  const pr = `/projects/${project.id}`;
  const dep = await call(c.url, 'POST', `${pr}/deployments`, { key: u.key, body: { training_job_id: id } });
  t.equal(dep.status, 200, dep.text);
  await c.services.projects.settle();
  const deployments = (await call(c.url, 'GET', `${pr}/deployments`, { key: u.key })).body.deployments;
  t.equal(deployments[0].status, 'active', deployments[0].error ?? '');
  const viaProject = { text: 'Alice visited Oslo today .', schema: { entities: ['person', 'city'] } };
  t.equal((await call(c.url, 'POST', `${pr}/inference`, { key: u.key, body: viaProject })).status, 200);
  const best = cks.checkpoints.find((x: { is_best: boolean }) => x.is_best) ?? cks.checkpoints[0];
  const nextBody = { ...body, base_model: best.id };
  const next = await call(c.url, 'POST', '/felix/training-jobs', { key: u.key, body: nextBody });
  t.equal(next.status, 200, next.text);
  const ckDir = (await c.services.store.trainingArtifacts.getCheckpoint(best.id))!.dir;
  t.notOk(ckDir.startsWith(artC), 'the record holds A\'s path');
  t.ok(existsSync(c.services.artifacts.localPath(ckDir)), 'the checkpoint fetched into C\'s cache');
  await call(c.url, 'POST', `/felix/training-jobs/${next.body.id}/stop`, { key: u.key });

  // C's upload URLs live 3 s (the signature's date has whole seconds, so a 1-s URL can live 0-1 s): one whose
  // file reached the bucket in time is kept for processing, none fails
  const mk = (name: string) => uploadUrl(c.url, u.key, name, 'classification', 'd.csv');
  // the PUT right after its URL is made (two calls in between can outlast the TTL on a loaded machine)
  const sent = await mk('sent');
  t.equal((await fetch(sent.body.upload_url, { method: 'PUT', body: 'text,label\ngood,pos\nbad,neg\n' })).status, 200);
  await mk('unsent');
  const status = (name: string) => call(c.url, 'GET', `/felix/datasets/${name}/1`, { key: u.key });
  const failed = await poll(() => status('unsent'), (r) => r.body.status !== 'initialized', 60_000, 100);
  t.equal(failed.body.status, 'failed');
  t.match(failed.body.processing_error, /expired/);
  const kept = await poll(() => status('sent'), (r) => r.body.status !== 'initialized', 60_000, 100);
  t.equal(kept.body.status, 'uploading', 'the file reached the bucket in time');
  t.equal((await processUpload(c.url, u.key, 'sent')).status, 200);
  const ready = await poll(() => status('sent'), (r) => ['ready', 'failed'].includes(r.body.status), 60_000, 100);
  t.match(ready.body, { status: 'ready', size: 2 }, ready.body.processing_error ?? '');
  // deleting a dataset removes its objects
  const sentKey = (await keys(`datasets/${u.team_id}/`)).find((k) => k.endsWith('/data.jsonl') && !dsKeys.includes(k))!;
  t.ok(sentKey, 'the new version is in the bucket');
  t.equal((await call(c.url, 'DELETE', '/felix/datasets/sent', { key: u.key })).status, 200);
  t.notOk(await exists(sentKey), 'and gone with the dataset');
  t.ok(await exists(dsKeys.find((k) => k.endsWith('/data.jsonl'))!), 'other datasets stay');

  // the store goes away: 503 in the spec's shape, never a crash
  await server.close();
  s3up = false;
  const down = await uploadUrl(c.url, u.key, 'late');
  t.equal(down.status, 503);
  t.match(down.body.detail, /Object storage unavailable/);
  const proc = await processUpload(c.url, u.key, 'probe', first.body.upload_id);
  t.equal(proc.status, 503);
  const dl = await call(c.url, 'GET', `/felix/training-jobs/${id}/download`, { key: u.key });
  t.equal(dl.status, 503, 'the weight download too');
  t.equal((await call(c.url, 'GET', '/felix/datasets', { key: u.key })).status, 200, 'the server still serves');
});

t.test('an upload the store cuts off is sent again on a fresh stream; a refusal is not', async (t) => {
  const tmp = mkdtempSync(join(tmpdir(), 'loom-s3-retry-'));
  t.teardown(() => rmSync(tmp, { recursive: true, force: true }));
  const server = await startS3(join(tmp, 's3rver'));
  t.teardown(() => server.close());
  const target = new URL(server.endpoint);
  // a proxy in front of s3rver: the first PUT of each object is cut off after part of its body; PUTs of *.denied
  // are answered 403
  const cut = new Set<string>();
  const puts: string[] = [];
  const proxy = createServer((req, res) => {
    const path = req.url!.split('?')[0]!;
    if (req.method === 'PUT') puts.push(path);
    if (req.method === 'PUT' && path.endsWith('.denied')) {
      req.resume();
      res.writeHead(403, { 'content-type': 'application/xml' });
      res.end('<?xml version="1.0"?><Error><Code>AccessDenied</Code><Message>denied</Message></Error>');
      return;
    }
    if (req.method === 'PUT' && !path.endsWith('.loom-manifest.json') && !cut.has(path)) {
      cut.add(path);
      req.once('data', () => req.socket.destroy());
      return;
    }
    const to = { host: target.hostname, port: target.port, method: req.method, path: req.url, headers: req.headers };
    const up = request(to, (r) => { res.writeHead(r.statusCode!, r.headers); r.pipe(res); });
    up.on('error', () => res.destroy());
    req.pipe(up);
  });
  await new Promise<void>((ok) => proxy.listen(0, '127.0.0.1', ok));
  t.teardown(() => new Promise<void>((ok) => proxy.close(() => ok())));
  const endpoint = `http://127.0.0.1:${(proxy.address() as AddressInfo).port}`;
  const s3: S3Config = { bucket: 'loom', endpoint, region: 'us-east-1', prefix: '', forcePathStyle: true };

  const rootA = join(tmp, 'a');
  const dir = join(rootA, 'jobs', 'j1', 'output', 'checkpoint-5');
  mkdirSync(dir, { recursive: true });
  const weights = randomBytes(1 << 20);
  writeFileSync(join(dir, 'model.safetensors'), weights);
  writeFileSync(join(dir, 'config.json'), '{"step":5}');
  const a = await createArtifactStore({ artifactsDir: rootA, s3 });
  t.teardown(() => a.close());
  await a.putDir(dir);
  t.equal(cut.size, 2, 'each file\'s first upload was cut off');
  t.equal(puts.length, 5, 'two files twice, then the manifest');

  const b = await createArtifactStore({ artifactsDir: join(tmp, 'b'), s3 });
  t.teardown(() => b.close());
  const got = await b.getDir(dir);
  t.not(got, dir, 'fetched into the other node\'s folder');
  t.ok(readFileSync(join(got, 'model.safetensors')).equals(weights), 'the weights arrive whole');
  t.equal(readFileSync(join(got, 'config.json'), 'utf8'), '{"step":5}');

  const denied = join(rootA, 'jobs', 'j1', 'output', 'model.denied');
  writeFileSync(denied, 'x');
  puts.length = 0;
  await t.rejects(a.putFile(denied), { name: 'DependencyUnavailableError' }, 'a refusal is a 503');
  t.equal(puts.length, 1, 'and is not tried again');

  // a file removed before its upload opens it (a job's folder deleted while its weights are published): the upload
  // fails with the file's error, at once, never as an uncaught stream error that ends the process
  const gone = join(rootA, 'jobs', 'j1', 'output', 'gone.bin');
  writeFileSync(gone, 'x');
  const started = Date.now();
  const put = a.putFile(gone);
  rmSync(gone);
  await t.rejects(put, { code: 'ENOENT' }, 'the file\'s own error');
  t.ok(Date.now() - started < 5000, `in ${Date.now() - started} ms`);
});
