// Datasets through HTTP: the three-step upload (presigned URL served by Loom: signature, single
// use, size limit, expiry), processing in the worker pool (converting → validating → ready |
// failed with the line and the problem), JSONL and CSV, versions newest first, `latest`, preview,
// download, list, delete (409 while a job uses it), and every error status with its body shape.
import t from 'tap';
import { call, makeUser, startServer } from './helpers.ts';
import { nerLine, poll, uploadDataset } from './customization-helpers.ts';

// trainingConcurrency 0: jobs stay queued, so a dataset stays "in use"
const ts = await startServer({ config: { maxUploadBytes: 4096, trainingConcurrency: 0 } });
t.teardown(() => ts.close());
const u = await makeUser(ts, { credits: 10 });
const other = await makeUser(ts, { credits: 10 });

const NER = [
  nerLine('Alice lives in Paris', [['Alice', 'person'], ['Paris', 'city']]),
  nerLine('Bob works for Acme in Berlin', [['Bob', 'person'], ['Acme', 'company'], ['Berlin', 'city']]),
  '',
  nerLine('Nothing here', []),
].join('\n');

t.test('upload url: shape, 422 cases, 401', async (t) => {
  const r = await call(ts.url, 'POST', '/felix/datasets/upload/url', { key: u.key, body: { dataset_name: 'shape', dataset_type: 'ner', filename: 'a.jsonl' } });
  t.equal(r.status, 200);
  t.match(r.body, { success: true, method: 'PUT', max_bytes: 4096, dataset_name: 'shape', dataset_type: 'ner', version_number: '1', status: 'initialized' });
  t.match(r.body.upload_url, new RegExp(`^${ts.url}/felix/datasets/upload/${r.body.upload_id}\\?expires=\\d+&signature=`));
  t.ok(Date.parse(r.body.expires_at) > Date.now());
  const v = await call(ts.url, 'GET', '/felix/datasets/shape/1', { key: u.key });
  t.match(v.body, { success: true, status: 'initialized', size: 0, version_number: '1', dataset_name: 'shape' });

  const missing = await call(ts.url, 'POST', '/felix/datasets/upload/url', { key: u.key, body: { dataset_name: 'x', filename: 'a.jsonl' } });
  t.equal(missing.status, 422);
  t.type(missing.body.detail, 'string');
  t.ok(Array.isArray(missing.body.errors));
  t.equal((await call(ts.url, 'POST', '/felix/datasets/upload/url', { key: u.key, body: { dataset_name: 'x', dataset_type: 'images', filename: 'a.jsonl' } })).status, 422);
  t.equal((await call(ts.url, 'POST', '/felix/datasets/upload/url', { key: u.key, body: { dataset_name: 'x', dataset_type: 'ner', filename: 'a.parquet' } })).status, 422);
  t.equal((await call(ts.url, 'POST', '/felix/datasets/upload/url', { key: u.key, body: { dataset_name: 'bad name!', dataset_type: 'ner', filename: 'a.jsonl' } })).status, 422);
  t.equal((await call(ts.url, 'POST', '/felix/datasets/upload/url', { key: u.key, body: { dataset_name: 'shape', dataset_type: 'decoder', filename: 'a.jsonl' } })).status, 422, 'a version of another type');
  const noKey = await call(ts.url, 'POST', '/felix/datasets/upload/url', { body: { dataset_name: 'x', dataset_type: 'ner', filename: 'a.jsonl' } });
  t.equal(noKey.status, 401);
  t.type(noKey.body.detail, 'string');
  t.equal((await call(ts.url, 'POST', '/felix/datasets/upload/url', { key: u.key, raw: '{nope' })).status, 400);
});

t.test('presigned PUT: signature, single use, size limit (413), process before PUT (409)', async (t) => {
  const r = await call(ts.url, 'POST', '/felix/datasets/upload/url', { key: u.key, body: { dataset_name: 'put', dataset_type: 'ner', filename: 'a.jsonl' } });
  const url = new URL(r.body.upload_url);
  const early = await call(ts.url, 'POST', '/felix/datasets/upload/process', { key: u.key, body: { dataset_name: 'put', upload_id: r.body.upload_id } });
  t.equal(early.status, 409);
  t.match(early.body.detail, /PUT the file/);

  const unsigned = await fetch(`${url.origin}${url.pathname}`, { method: 'PUT', body: NER });
  t.equal(unsigned.status, 403);
  t.type((await unsigned.json()).detail, 'string');
  const tampered = new URL(url);
  tampered.searchParams.set('expires', String(Number(url.searchParams.get('expires')) + 3600));
  t.equal((await fetch(tampered, { method: 'PUT', body: NER })).status, 403, 'a longer expiry breaks the signature');
  const tooBig = await fetch(url, { method: 'PUT', body: 'x'.repeat(5000) });
  t.equal(tooBig.status, 413);
  t.match(await tooBig.json(), { detail: /4096/ });

  const ok = await fetch(url, { method: 'PUT', body: NER });
  t.equal(ok.status, 200);
  t.match(await ok.json(), { success: true, upload_id: r.body.upload_id, bytes: Buffer.byteLength(NER) });
  t.equal((await call(ts.url, 'GET', '/felix/datasets/put/1', { key: u.key })).body.status, 'uploading');
  const again = await fetch(url, { method: 'PUT', body: NER });
  t.equal(again.status, 409, 'single use');
  t.match(await again.json(), { detail: /already been used/ });

  const other404 = await call(ts.url, 'POST', '/felix/datasets/upload/process', { key: other.key, body: { dataset_name: 'put', upload_id: r.body.upload_id } });
  t.equal(other404.status, 404, "another team cannot see the dataset");
  const pr = await call(ts.url, 'POST', '/felix/datasets/upload/process', { key: u.key, body: { dataset_name: 'put', upload_id: r.body.upload_id } });
  t.equal(pr.status, 200);
  t.match(pr.body, { success: true, dataset_name: 'put', version_number: '1', status: 'converting' });
  const done = await poll(() => call(ts.url, 'GET', '/felix/datasets/put/latest', { key: u.key }), (x) => x.body.status === 'ready' || x.body.status === 'failed');
  t.match(done.body, { status: 'ready', size: 3, labels: { person: 2, city: 2, company: 1 }, processing_error: null, format: 'jsonl' });
  t.equal((await call(ts.url, 'POST', '/felix/datasets/upload/process', { key: u.key, body: { dataset_name: 'put', upload_id: r.body.upload_id } })).status, 409, 'already processed');
});

t.test('an expired URL is refused (403)', async (t) => {
  const s2 = await startServer({ config: { signedUrlTtlS: 1 } });
  t.teardown(() => s2.close());
  const u2 = await makeUser(s2);
  const r = await call(s2.url, 'POST', '/felix/datasets/upload/url', { key: u2.key, body: { dataset_name: 'exp', dataset_type: 'ner', filename: 'a.jsonl' } });
  await new Promise((res) => setTimeout(res, 2100));
  const put = await fetch(r.body.upload_url, { method: 'PUT', body: NER });
  t.equal(put.status, 403);
  t.match(await put.json(), { detail: /expired/ });
});

t.test('processing errors name the line and the problem', async (t) => {
  const badJson = await uploadDataset(ts.url, u.key, 'bad-json', 'ner', 'a.jsonl', `${nerLine('Alice', [['Alice', 'person']])}\n\n{"text": "x", "entities": [}\n`);
  t.match(badJson.body, { status: 'failed', processing_error: /^line 3: invalid JSON/ });
  const badSpan = await uploadDataset(ts.url, u.key, 'bad-span', 'ner', 'a.jsonl', `${nerLine('Alice', [['Alice', 'person']])}\n{"text": "Bob", "entities": [{"start": 0, "end": 9, "label": "person"}]}\n`);
  t.match(badSpan.body, { status: 'failed', processing_error: /^line 2: entities\[0\] span \[0, 9\)/ });
  const wrongKind = await uploadDataset(ts.url, u.key, 'wrong-kind', 'ner', 'a.jsonl', `${nerLine('Alice', [['Alice', 'person']])}\n{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n`);
  t.match(wrongKind.body, { status: 'failed', processing_error: 'line 2: a chat record is not valid in an ner dataset (expected ner, relations, gliner2)' });
  const noAssistant = await uploadDataset(ts.url, u.key, 'chat-bad', 'decoder', 'a.jsonl', '{"messages": [{"role": "user", "content": "hi"}]}\n');
  t.match(noAssistant.body, { status: 'failed', processing_error: /^line 1: "messages" has no assistant message/ });
  const csvBad = await uploadDataset(ts.url, u.key, 'csv-bad', 'classification', 'a.csv', 'text,label\n"good movie",positive\n"bad movie",\n');
  t.match(csvBad.body, { status: 'failed', processing_error: /^line 3: "label" must be a non-empty string/ });
  const oneClass = await uploadDataset(ts.url, u.key, 'one-class', 'classification', 'a.jsonl', '{"text": "a", "label": "x"}\n{"text": "b", "label": "x"}\n');
  t.match(oneClass.body, { status: 'failed', processing_error: /at least two classes/ });
  const notUtf8 = await uploadDataset(ts.url, u.key, 'bin', 'custom', 'a.jsonl', Buffer.from([0xff, 0xfe, 0x00, 0x80]));
  t.match(notUtf8.body, { status: 'failed', processing_error: /UTF-8/ });
});

t.test('CSV and chat uploads; versions newest first; preview and download', async (t) => {
  const csv = await uploadDataset(ts.url, u.key, 'reviews', 'classification', 'reviews.csv', 'text,label\n"a fine, good movie",positive\nterrible,negative\nfine,positive\n');
  t.match(csv.body, { status: 'ready', size: 3, format: 'csv', labels: { positive: 2, negative: 1 }, version_number: '1' });
  const v2 = await uploadDataset(ts.url, u.key, 'reviews', 'classification', 'more.jsonl', '{"text": "great", "label": "positive"}\n{"text": "awful", "label": "negative"}\n');
  t.match(v2.body, { status: 'ready', size: 2, version_number: '2' });
  const list = await call(ts.url, 'GET', '/felix/datasets/reviews', { key: u.key });
  t.equal(list.status, 200);
  t.match(list.body, { success: true, count: 2 });
  t.same(list.body.versions.map((v: { version_number: string }) => v.version_number), ['2', '1'], 'newest first');
  for (const v of list.body.versions) for (const k of ['id', 'dataset_name', 'version_number', 'size', 'status', 'created_at']) t.ok(k in v, `version has ${k}`);
  t.equal((await call(ts.url, 'GET', '/felix/datasets/reviews/latest', { key: u.key })).body.version_number, '2');
  t.equal((await call(ts.url, 'GET', `/felix/datasets/reviews/${list.body.versions[1].id}`, { key: u.key })).body.version_number, '1', 'by version id');
  t.equal((await call(ts.url, 'GET', '/felix/datasets/reviews/9', { key: u.key })).status, 404);

  const prev = await call(ts.url, 'GET', '/felix/datasets/reviews/1/preview?limit=2', { key: u.key });
  t.same(prev.body.records, [{ text: 'a fine, good movie', label: 'positive' }, { text: 'terrible', label: 'negative' }]);
  t.match(prev.body, { total: 3, count: 2, offset: 0 });
  t.equal((await call(ts.url, 'GET', '/felix/datasets/reviews/1/preview?limit=0', { key: u.key })).status, 422);
  const dl = await call(ts.url, 'GET', '/felix/datasets/reviews/latest/download', { key: u.key });
  t.equal(dl.status, 200);
  t.match(dl.headers.get('content-type'), /application\/x-ndjson/);
  t.equal(dl.text, '{"text":"great","label":"positive"}\n{"text":"awful","label":"negative"}\n');

  const chat = await uploadDataset(ts.url, u.key, 'chats', 'decoder', 'c.jsonl', '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}\n{"prompt": "2+2?", "chosen": "4", "rejected": "5"}\n');
  t.match(chat.body, { status: 'ready', size: 2, kinds: { chat: 1, dpo: 1 } });
  const gl = await uploadDataset(ts.url, u.key, 'gl2', 'ner', 'g.jsonl', '{"input": "Alice met Bob", "output": {"entities": {"person": ["Alice", "Bob"]}}}\n');
  t.match(gl.body, { status: 'ready', size: 1, kinds: { gliner2: 1 }, labels: { person: 1 } });
});

t.test('list, 404s, delete (200 empty body; 409 while a job uses it)', async (t) => {
  const r = await uploadDataset(ts.url, u.key, 'todelete', 'ner', 'a.jsonl', NER);
  t.equal(r.body.status, 'ready');
  const list = await call(ts.url, 'GET', '/felix/datasets', { key: u.key });
  t.equal(list.status, 200);
  t.equal(list.body.success, true);
  t.equal(list.body.count, list.body.datasets.length);
  const entry = list.body.datasets.find((d: { dataset_name: string }) => d.dataset_name === 'todelete');
  t.match(entry, { dataset_name: 'todelete', status: 'ready', version_number: '1' });
  t.type(entry.created_at, 'string');
  t.equal((await call(ts.url, 'GET', '/felix/datasets', { key: other.key })).body.count, 0, 'per team');
  t.equal((await call(ts.url, 'GET', '/felix/datasets/nope', { key: u.key })).status, 404);
  t.match((await call(ts.url, 'GET', '/felix/datasets/nope', { key: u.key })).body, { detail: /not found/ });

  // a queued job (trainingConcurrency 0) uses the dataset
  const job = await call(ts.url, 'POST', '/felix/training-jobs', { key: u.key, body: { base_model: 'test/encoder', datasets: [{ name: 'todelete' }], model_name: 'm' } });
  t.equal(job.status, 200);
  const busy = await call(ts.url, 'DELETE', '/felix/datasets/todelete', { key: u.key });
  t.equal(busy.status, 409);
  t.match(busy.body.detail, /in use by training job/);
  t.equal((await call(ts.url, 'POST', `/felix/training-jobs/${job.body.id}/stop`, { key: u.key })).status, 200);
  const del = await call(ts.url, 'DELETE', '/felix/datasets/todelete', { key: u.key });
  t.equal(del.status, 200);
  t.equal(del.text, '');
  t.equal((await call(ts.url, 'GET', '/felix/datasets/todelete', { key: u.key })).status, 404);
  t.equal((await call(ts.url, 'DELETE', '/felix/datasets/todelete', { key: u.key })).status, 404);
  const again = await uploadDataset(ts.url, u.key, 'todelete', 'ner', 'a.jsonl', NER);
  t.match(again.body, { status: 'ready', version_number: '1' }, 'the name starts over');
});

t.test('restart: a version cut off while processing is processed again', async (t) => {
  const { mkdtempSync, rmSync } = await import('node:fs');
  const { tmpdir } = await import('node:os');
  const { join } = await import('node:path');
  const { createServices } = await import('../../src/service/index.ts');
  const { FakeRuntime } = await import('./fake-runtime.ts');
  const dataDir = mkdtempSync(join(tmpdir(), 'loom-ds-restart-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const open = () => createServices({ runtime: new FakeRuntime(), config: { dataDir, workerThreads: 1 } });
  let s = await open();
  const { team } = await s.auth.createUser({ email: 'ds@example.com', password: 'correct horse battery' });
  const p = { team_id: team.id } as never;
  const up = await s.datasets.createUpload(p, { dataset_name: 'cut', dataset_type: 'ner', filename: 'c.jsonl' }, 'http://x');
  await s.datasets.receiveUpload(up.upload_id, Buffer.from(NER));
  // the process died right after the status moved to converting
  await s.store.tx(async (t) => { const v = (await t.datasets.getVersion(up.version_id))!; t.datasets.putVersion({ ...v, status: 'converting' }); });
  await s.close();
  s = await open();
  t.teardown(() => s.close());
  await s.datasets.settle(60_000); // (returns when processed; the worker pool's first task is slow on a loaded machine)
  t.match((await s.store.datasets.getVersion(up.version_id)), { status: 'ready', size: 3 });
});
