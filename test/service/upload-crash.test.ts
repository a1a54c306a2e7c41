// Dataset uploads survive a kill -9 at the PUT: the server (a child process) SIGKILLs itself just
// before or just after the upload's commit; restarted on the same data dir, the upload is never
// stuck: the PUT is taken again (or was complete), processing reaches `ready`, and the file is
// whole. An upload URL that expires without a file fails its version with the reason.
import t from 'tap';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServices } from '../../src/service/index.ts';
import { call, makeUser, startServer } from './helpers.ts';
import { FakeRuntime } from './fake-runtime.ts';
import { startChild } from './child-server.ts';

const LINES = Array.from({ length: 2000 }, (_, i) => {
  return JSON.stringify({ text: `Alice met Bob in Paris ${i}`, entities: [{ start: 0, end: 5, label: 'person' }] });
});
const FILE = LINES.join('\n') + '\n';

async function waitStatus(url: string, key: string, name: string, want: string[]): Promise<any> {
  for (let i = 0; i < 200; i++) {
    const v = await call(url, 'GET', `/felix/datasets/${name}/1`, { key });
    if (want.includes(v.body?.status)) return v.body;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`dataset ${name} never reached ${want.join('/')}`);
}

for (const point of ['upload-before-commit', 'upload-after-commit']) {
  t.test(`kill -9 at ${point}: after a restart the upload completes`, async (t) => {
    const dataDir = mkdtempSync(join(tmpdir(), 'loom-crash-'));
    t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
    const first = await startChild(dataDir, point);
    const key = first.key!;
    const req = { dataset_name: 'people', dataset_type: 'ner', filename: 'people.jsonl' };
    const up = await call(first.url, 'POST', '/felix/datasets/upload/url', { key, body: req });
    t.equal(up.status, 200);
    const put = await fetch(up.body.upload_url, { method: 'PUT', body: FILE })
      .then((r) => r.status, () => 'connection lost');
    t.equal(put, 'connection lost', 'the server died during the PUT');
    await first.exited;

    const second = await startChild(dataDir);
    t.teardown(() => second.kill());
    const after = (await call(second.url, 'GET', '/felix/datasets/people/1', { key })).body;
    t.ok(['initialized', 'uploading'].includes(after.status), `found ${after.status}`);
    // the client retries its PUT: taken again, or refused because the first one was complete
    const signed = new URL(up.body.upload_url);
    const again = await fetch(second.url + signed.pathname + signed.search, { method: 'PUT', body: FILE });
    if (after.status === 'initialized') t.equal(again.status, 200, 'an upload cut off before its commit takes the PUT');
    else t.equal(again.status, 409, 'a committed upload is single use');
    const procBody = { dataset_name: 'people', upload_id: up.body.upload_id };
    const proc = await call(second.url, 'POST', '/felix/datasets/upload/process', { key, body: procBody });
    t.equal(proc.status, 200, 'processing starts');
    const done = await waitStatus(second.url, key, 'people', ['ready', 'failed']);
    t.equal(done.status, 'ready', done.processing_error ?? 'ready');
    t.equal(done.size, LINES.length, 'every line of the file made it');
    t.equal(done.bytes, Buffer.byteLength(FILE));
    const files = readdirSync(join(dataDir, 'datasets'), { recursive: true }) as string[];
    t.same(files.filter((f) => f.endsWith('.tmp')), [], 'no half-written temporary is left');
  });
}

t.test('an upload URL that expires without a file fails its version, with the reason', async (t) => {
  const ts = await startServer({ config: { signedUrlTtlS: 1 } });
  t.teardown(() => ts.close());
  const u = await makeUser(ts);
  const req = { dataset_name: 'late', dataset_type: 'ner', filename: 'late.jsonl' };
  const up = await call(ts.url, 'POST', '/felix/datasets/upload/url', { key: u.key, body: req });
  t.equal(up.body.status, 'initialized');
  await new Promise((r) => setTimeout(r, 2600));
  const v = await call(ts.url, 'GET', '/felix/datasets/late/1', { key: u.key });
  t.equal(v.body.status, 'failed');
  t.match(v.body.processing_error, /expired before a complete file was received/);
});

t.test('a generated version cut off while its file was written fails at start-up', async (t) => {
  const dataDir = mkdtempSync(join(tmpdir(), 'loom-gen-crash-'));
  t.teardown(() => rmSync(dataDir, { recursive: true, force: true }));
  const open = () => createServices({ runtime: new FakeRuntime(), config: { dataDir, workerThreads: 1 } });
  let s = await open();
  const { team } = await s.auth.createUser({ email: 'g@example.com', password: 'correct horse battery' });
  // what createVersionFromRecords leaves when killed before its raw file is in place
  const now = new Date().toISOString();
  await s.store.tx(async (t) => {
    t.datasets.put({
      id: 'ds-1', team_id: team.id, dataset_name: 'gen', dataset_type: 'ner', next_version: 2, latest_version_id: 'v-1',
      created_at: now, updated_at: now,
    });
    t.datasets.putVersion({
      id: 'v-1', team_id: team.id, dataset_id: 'ds-1', dataset_name: 'gen', dataset_type: 'ner', version_number: '1',
      size: 0, status: 'uploading', processing_error: null, source: 'generate', filename: 'generated.jsonl', format: null,
      bytes: 0, kinds: {}, labels: {}, created_at: now, updated_at: now, ready_at: null,
    });
  });
  await s.close();
  s = await open();
  t.teardown(() => s.close());
  await new Promise((r) => setTimeout(r, 200));
  const v = (await s.store.datasets.getVersion('v-1'));
  t.match(v, { status: 'failed', processing_error: /restarted while the generated examples/ }, 'not left uploading');
});
