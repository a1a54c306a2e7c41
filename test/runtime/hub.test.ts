import t from 'tap';
import { createServer, type Server } from 'node:http';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { HubError, pullModel, resolveModel } from '../../src/runtime/hub.ts';

const big = Buffer.from(Uint8Array.from({ length: 300_000 }, (_, i) => (i * 7 + (i >> 9)) & 0xff));
const files: Record<string, Buffer> = {
  'config.json': Buffer.from(JSON.stringify({ model_type: 'llama' })),
  'model.safetensors': big,
  'tokenizer.json': Buffer.from('{}'),
};
const sha = (b: Buffer): string => createHash('sha256').update(b).digest('hex');
const COMMIT = 'abc123';

interface Behaviour { cutAfter?: number; corrupt?: boolean; requests: string[]; ranges: string[] }

function serve(b: Behaviour): Promise<{ server: Server; url: string }> {
  const server = createServer((req, res) => {
    b.requests.push(req.url!);
    if (req.headers.authorization !== 'Bearer tok') { res.writeHead(401).end(); return; }
    if (req.url!.startsWith('/api/models/org/tiny/revision/main')) {
      res.setHeader('content-type', 'application/json');
      res.end(JSON.stringify({
        sha: COMMIT,
        siblings: Object.entries(files).map(([f, d]) => ({ rfilename: f, size: d.length, ...(f.endsWith('.safetensors') ? { lfs: { sha256: sha(d), size: d.length } } : {}) })),
      }));
      return;
    }
    const m = /^\/org\/tiny\/resolve\/abc123\/(.+)$/.exec(req.url!);
    if (!m || !files[m[1]]) { res.writeHead(404).end(); return; }
    let data = files[m[1]];
    if (b.corrupt && m[1] === 'model.safetensors') { data = Buffer.from(data); data[1000] ^= 1; }
    let start = 0;
    const range = req.headers.range;
    if (range) {
      b.ranges.push(range);
      start = Number(/bytes=(\d+)-/.exec(range)![1]);
      res.writeHead(206, { 'content-length': data.length - start, 'content-range': `bytes ${start}-${data.length - 1}/${data.length}`, etag: `"${sha(data)}"` });
    } else res.writeHead(200, { 'content-length': data.length, etag: `"${sha(data)}"` });
    const body = data.subarray(start);
    if (b.cutAfter !== undefined && m[1] === 'model.safetensors' && !range) {
      res.write(body.subarray(0, b.cutAfter), () => res.destroy());
      b.cutAfter = undefined;
      return;
    }
    res.end(body);
  });
  return new Promise((r) => server.listen(0, '127.0.0.1', () => r({ server, url: `http://127.0.0.1:${(server.address() as { port: number }).port}` })));
}

t.test('pull: listing, download, progress, resume after an interrupted transfer', async (t) => {
  const b: Behaviour = { cutAfter: 120_000, requests: [], ranges: [] };
  const { server, url } = await serve(b);
  t.teardown(() => server.close());
  const cacheDir = mkdtempSync(join(tmpdir(), 'loom-hub-'));
  const opts = { endpoint: url, token: 'tok', cacheDir };
  await t.rejects(pullModel('org/tiny', opts), /interrupted/);
  const partial = join(cacheDir, 'models--org--tiny', 'blobs', `${sha(big)}.incomplete`);
  t.ok(existsSync(partial), 'partial download kept');
  t.ok(statSync(partial).size > 0 && statSync(partial).size < big.length, `partial size ${statSync(partial).size}`);
  const progress: number[] = [];
  const dir = await pullModel('org/tiny', { ...opts, onProgress: (p) => progress.push(p.bytes) });
  t.equal(b.ranges.length, 1, `resumed with a Range request (${JSON.stringify(b.ranges)})`);
  t.same(readFileSync(join(dir, 'model.safetensors')), big);
  t.equal(readFileSync(join(dir, 'config.json'), 'utf8'), files['config.json'].toString());
  t.equal(dir, join(cacheDir, 'models--org--tiny', 'snapshots', COMMIT));
  t.equal(readFileSync(join(cacheDir, 'models--org--tiny', 'refs', 'main'), 'utf8'), COMMIT);
  t.ok(progress.length > 2 && progress[progress.length - 1] === Object.values(files).reduce((a, d) => a + d.length, 0), 'progress reaches the total');
  // a second pull downloads nothing
  const before = b.requests.length;
  await pullModel('org/tiny', opts);
  t.equal(b.requests.length - before, 1, 'only the listing is fetched again');
  // resolveModel finds it through HF_HOME-style cache
  process.env.HF_HUB_CACHE = cacheDir;
  t.same(resolveModel('org/tiny'), { status: 'local', dir });
  delete process.env.HF_HUB_CACHE;
});

t.test('pull: sha256 mismatch is detected and the blob discarded; auth errors are clear', async (t) => {
  const b: Behaviour = { corrupt: true, requests: [], ranges: [] };
  const { server, url } = await serve(b);
  t.teardown(() => server.close());
  const cacheDir = mkdtempSync(join(tmpdir(), 'loom-hub-'));
  await t.rejects(pullModel('org/tiny', { endpoint: url, token: 'tok', cacheDir }), /sha256 mismatch/);
  t.notOk(existsSync(join(cacheDir, 'models--org--tiny', 'blobs', sha(big))));
  t.notOk(existsSync(join(cacheDir, 'models--org--tiny', 'blobs', `${sha(big)}.incomplete`)));
  await t.rejects(pullModel('org/tiny', { endpoint: url, token: 'wrong', cacheDir }), /access denied/);
  await t.rejects(pullModel('org/missing', { endpoint: url, token: 'tok', cacheDir }), HubError);
  await t.rejects(pullModel('not a repo', { endpoint: url, token: 'tok', cacheDir }), /not a Hub repository/);
  const ac = new AbortController();
  ac.abort();
  await t.rejects(pullModel('org/tiny', { endpoint: url, token: 'tok', cacheDir, signal: ac.signal }), /abort/);
});

t.test('resolveModel: models dir, curated pullable list, unknown', async (t) => {
  const md = mkdtempSync(join(tmpdir(), 'loom-models-'));
  mkdirSync(join(md, 'acme', 'story'), { recursive: true });
  writeFileSync(join(md, 'acme', 'story', 'config.json'), '{}');
  mkdirSync(join(md, 'other--thing'), { recursive: true });
  writeFileSync(join(md, 'other--thing', 'config.json'), '{}');
  process.env.LOOM_MODELS_DIR = md;
  process.env.HF_HUB_CACHE = join(md, 'no-cache');
  t.teardown(() => { delete process.env.LOOM_MODELS_DIR; delete process.env.HF_HUB_CACHE; });
  t.same(resolveModel('acme/story'), { status: 'local', dir: join(md, 'acme', 'story') });
  t.same(resolveModel('other/thing'), { status: 'local', dir: join(md, 'other--thing') });
  t.same(resolveModel('Qwen/Qwen2.5-0.5B-Instruct'), { status: 'pullable', repo: 'Qwen/Qwen2.5-0.5B-Instruct' });
  t.same(resolveModel('huggingfacetb/smollm2-135m-instruct'), { status: 'pullable', repo: 'HuggingFaceTB/SmolLM2-135M-Instruct' });
  t.same(resolveModel('fastino/gliner2-base-v1'), { status: 'pullable', repo: 'fastino/gliner2-base-v1' });
  t.same(resolveModel('nobody/nothing'), { status: 'unknown' });
  t.same(resolveModel(''), { status: 'unknown' });
});

t.test('loom pull CLI downloads with HF_ENDPOINT / HF_TOKEN', async (t) => {
  const { spawn } = await import('node:child_process');
  const b: Behaviour = { requests: [], ranges: [] };
  const { server, url } = await serve(b);
  t.teardown(() => server.close());
  const home = mkdtempSync(join(tmpdir(), 'loom-hfhome-'));
  const bin = join(import.meta.dirname, '..', '..', 'bin', 'loom.mjs');
  const out = await new Promise<{ code: number | null; text: string }>((resolveP) => {
    const p = spawn(process.execPath, [bin, 'pull', 'org/tiny'], { env: { ...process.env, HF_ENDPOINT: url, HF_TOKEN: 'tok', HF_HOME: home, HF_HUB_CACHE: '' } });
    let text = '';
    p.stdout.on('data', (d) => (text += d));
    p.stderr.on('data', (d) => (text += d));
    p.on('close', (code) => resolveP({ code, text }));
  });
  t.equal(out.code, 0, out.text);
  t.match(out.text, /org\/tiny → .*snapshots\/abc123/);
  t.ok(existsSync(join(home, 'hub', 'models--org--tiny', 'snapshots', COMMIT, 'model.safetensors')));
});
