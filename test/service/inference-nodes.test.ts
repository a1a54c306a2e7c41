// Inference nodes (src/service/nodes/): two `loom serve --role inference` child processes and one API
// process (this one, its runtime the remote one) on one LMDB store, with the tiny encoder and decoder.
// Billed calls and streams run on the nodes; a repeated cached prefix lands on one node; a node killed
// with SIGKILL expires and the other serves; a node stopped cleanly deregisters at once; no node → 503;
// the node's port refuses a customer's key.
import t from 'tap';
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer } from '../../server/index.ts';
import { createLogger } from '../../server/log.ts';
import { createServices } from '../../src/service/index.ts';
import { normalizeSchema } from '../../src/service/inference.ts';
import { createLocalRuntime } from '../../src/service/runtime-local.ts';
import { createRemoteRuntime } from '../../src/service/nodes/runtime-remote.ts';
import { NODE_PATHS } from '../../src/service/nodes/protocol.ts';
import { openStore } from '../../src/store/index.ts';
import { DECODER_DIR, ENCODER_DIR } from '../compat/tiny-runtime.ts';
import { call, makeUser, type TestServer } from './helpers.ts';

const SECRET = 'node-secret-for-the-tests-0123456789';
const BEAT_MS = 500;
const root = join(import.meta.dirname, '../..');
const dataDir = mkdtempSync(join(tmpdir(), 'loom-nodes-'));
const modelsDir = mkdtempSync(join(tmpdir(), 'loom-nodes-models-'));
symlinkSync(ENCODER_DIR, join(modelsDir, 'gliner2-tiny'));
symlinkSync(DECODER_DIR, join(modelsDir, 'tinystories-656k'));

interface Node { id: string; url: string; child: ChildProcess; exited: Promise<number | null> }

/** `loom serve --role inference` as its own process (node itself, so that SIGKILL hits the process) */
async function startNode(id: string): Promise<Node> {
  const child = spawn(process.execPath, ['--import', 'tsx', 'src/cli/index.ts', 'serve', '--role', 'inference'], {
    cwd: root,
    stdio: ['ignore', 'pipe', 'inherit'],
    env: {
      ...process.env, LOOM_DATA_DIR: dataDir, LOOM_MODELS_DIR: modelsDir, LOOM_PORT: '0', LOOM_NODE_ID: id,
      LOOM_NODE_SECRET: SECRET, LOOM_NODE_HEARTBEAT_MS: String(BEAT_MS), LOOM_THREADS: '1', LOOM_LOG_LEVEL: 'warn',
    },
  });
  const exited = new Promise<number | null>((r) => child.on('exit', (code) => r(code)));
  const url = await new Promise<string>((resolve, reject) => {
    let buf = '';
    child.stdout!.on('data', (c) => {
      buf += c;
      const m = /listening on (http:\/\/\S+)/.exec(buf);
      if (m) resolve(m[1]);
    });
    child.on('exit', () => reject(new Error(`node ${id} exited before listening: ${buf}`)));
  });
  return { id, url, child, exited };
}

const nodes = await Promise.all([startNode('node-a'), startNode('node-b')]);
const [a, b] = nodes;
t.teardown(() => { for (const n of nodes) n.child.kill('SIGKILL'); });

// the API process: no 'inference' role, so its runtime routes to the nodes
const store = await openStore(dataDir);
const runtime = await createRemoteRuntime({ store, secret: SECRET, refreshMs: 100 });
const services = await createServices({
  runtime, store, config: { dataDir, modelsDir, workerThreads: 1, roles: new Set(['api']) },
});
const server = await createServer({ services, log: createLogger({ level: 'silent' }) });
const ts: TestServer = { server, url: server.url, runtime, dataDir, services, close: async () => {} };
t.teardown(async () => {
  await server.close({ timeoutMs: 2000 });
  rmSync(dataDir, { recursive: true, force: true });
  rmSync(modelsDir, { recursive: true, force: true });
});
const u = await makeUser(ts, { credits: 1000 });

const nodeStatus = async (n: Node) => {
  const r = await fetch(n.url + NODE_PATHS.status, { headers: { Authorization: `Bearer ${SECRET}` } });
  return (await r.json()) as { inflight: number; counters: Record<string, number>; stats: { loaded: string[] } };
};
const account = async () => (await call(ts.url, 'GET', '/account', { key: u.key })).body.credits;
const until = async (what: string, ok: () => Promise<boolean> | boolean, ms = 5000) => {
  const end = Date.now() + ms;
  while (!(await ok())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 25));
  }
};
const health = async () => (await call(ts.url, 'GET', '/health')).body;

const text = 'Barack Obama was born in Hawaii and served as president of the United States.';
const schema = { entities: ['person', 'location'] };
const encoderCall = { model_id: 'gliner2-tiny', text, schema };

t.test('the nodes register with their models; the API lists them', async (t) => {
  const h = await health();
  t.same(h.inference_nodes.map((n: { id: string }) => n.id).sort(), ['node-a', 'node-b']);
  const rec = await store.inferenceNodes.get('node-a');
  t.equal(rec?.url, a.url);
  t.same(rec?.models.map((m) => m.id).sort(), ['gliner2-tiny', 'tinystories-656k']);
  t.ok(rec!.expires_at > Date.now() && rec!.expires_at <= Date.now() + 3 * BEAT_MS + 50, 'expires after 3 beats');
  const listed = await call(ts.url, 'GET', '/v1/models', { key: u.key });
  const ids = listed.body.data.map((m: { id: string }) => m.id);
  t.ok(ids.includes('gliner2-tiny') && ids.includes('tinystories-656k'), 'the catalog lists what the nodes hold');
});

t.test('a billed POST /inference runs on a node and is billed and recorded as a local call', async (t) => {
  const before = await account();
  const r = await call(ts.url, 'POST', '/inference', { key: u.key, body: encoderCall });
  t.equal(r.status, 200, r.text);
  // the same model run locally, in this process: the same result and the same tokens
  const local = createLocalRuntime({ modelsDir });
  const want = await local.extract({ id: 'gliner2-tiny', kind: 'encoder' }, [text], normalizeSchema(schema),
    { threshold: 0.5, include_confidence: true, include_spans: true });
  await local.close();
  t.same(r.body.result, want.results[0]);
  t.equal(r.body.usage.prompt_tokens, want.input_tokens);
  t.ok(r.body.cost > 0);
  const after = await account();
  const spent = Math.round((after.total_spent - before.total_spent) * 1e6);
  t.equal(spent, Math.round(r.body.cost * 1e6), 'debited its cost');
  const rec = await call(ts.url, 'GET', `/inferences/${r.body.inference_id}`, { key: u.key });
  t.equal(rec.status, 200);
  t.equal(rec.body.status, 'success');
  t.equal(rec.body.model_id, 'gliner2-tiny');
  const served = (await Promise.all(nodes.map(nodeStatus))).map((s) => s.counters.extract);
  t.same(served.sort(), [0, 1], 'one node ran it');
  t.same(runtime.stats().loaded, ['gliner2-tiny'], 'loaded on the node (the API process loads nothing)');
});

const chatBody = (content: unknown, extra: object = {}) => ({
  model: 'tinystories-656k', max_tokens: 8, temperature: 0, messages: [...(content as unknown[])], ...extra,
});

t.test('a streamed /v1/chat/completions streams through a node', async (t) => {
  const before = await account();
  const r = await fetch(ts.url + '/v1/chat/completions', {
    method: 'POST', headers: { 'X-API-Key': u.key, 'Content-Type': 'application/json' },
    body: JSON.stringify(chatBody([{ role: 'user', content: 'Once upon a time' }], { stream: true, max_tokens: 12 })),
  });
  t.equal(r.status, 200);
  t.match(r.headers.get('content-type'), /text\/event-stream/);
  const body = await r.text();
  const events = body.split('\n\n').filter(Boolean).map((e) => e.replace(/^data: /, ''));
  t.equal(events.at(-1), '[DONE]');
  const chunks = events.slice(0, -1).map((e) => JSON.parse(e));
  const content = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
  t.ok(chunks.length >= 3 && content.length > 0, `streamed ${chunks.length} chunks: ${JSON.stringify(content)}`);
  t.equal(chunks.at(-1).choices[0].finish_reason, 'length');
  await until('the stream billed', async () => (await account()).total_spent > before.total_spent);
});

t.test('the same cached prefix lands on the same node', async (t) => {
  const generated = async () => (await Promise.all(nodes.map(nodeStatus))).map((s) => s.counters.generate);
  const ask = async (prefix: string, question: string) => {
    const r = await call(ts.url, 'POST', '/v1/chat/completions', {
      key: u.key,
      body: chatBody([
        { role: 'system', content: [{ type: 'text', text: prefix, cache_control: { type: 'ephemeral' } }] },
        { role: 'user', content: question },
      ], { max_tokens: 2 }),
    });
    t.equal(r.status, 200, r.text);
    return r.body.usage as { prompt_tokens: number; cache_read_tokens: number };
  };
  // over the tiny decoder's smallest cacheable prefix (a quarter of its 512-token context)
  const prefix = 'You are a storyteller. Tell short stories about a cat named Tom who lives by the sea. '.repeat(7);
  const start = await generated();
  const usage = [];
  for (const q of ['One day', 'Tom saw a boat', 'The sea was', 'At night']) usage.push(await ask(prefix, q));
  const after = await generated();
  const gained = after.map((n, i) => n - start[i]);
  t.same([...gained].sort(), [0, 4], `all four on one node (${gained})`);
  t.ok(usage.slice(1).every((x) => x.cache_read_tokens >= 128), `the repeats read the prefix from that node's cache: ${
    usage.map((x) => x.cache_read_tokens)}`);
  // other prefixes spread over both nodes
  const animals = ['dog', 'bird', 'fox', 'owl'];
  for (let i = 0; i < 8; i++) await ask(`Story number ${i}: a ${animals[i % 4]} in the woods.`, 'Go');
  const spread = (await generated()).map((n, i) => n - after[i]);
  t.ok(spread.every((n) => n > 0), `different prefixes use both nodes (${spread})`);
});

t.test('a client that goes away cancels the generation on the node, billed for what ran', async (t) => {
  const before = await account();
  const ac = new AbortController();
  const r = await fetch(ts.url + '/v1/chat/completions', {
    method: 'POST', headers: { 'X-API-Key': u.key, 'Content-Type': 'application/json' }, signal: ac.signal,
    body: JSON.stringify(chatBody([{ role: 'user', content: 'Once' }], { stream: true, max_tokens: 400 })),
  });
  const reader = r.body!.getReader();
  await reader.read();
  ac.abort();
  await until('the node cancelled it', async () => {
    const s = await Promise.all(nodes.map(nodeStatus));
    return s.reduce((n, x) => n + x.counters.cancelled, 0) === 1 && s.every((x) => x.inflight === 0);
  });
  await until('the cancelled call billed', async () => (await account()).total_spent > before.total_spent);
});

t.test('the node port refuses customer keys and anything without the node secret', async (t) => {
  const ref = { id: 'tinystories-656k', kind: 'decoder' };
  const body = JSON.stringify({ ref, params: { prompt: 'x', max_tokens: 1 } });
  const tries: Record<string, string>[] = [{ 'X-API-Key': u.key }, { Authorization: `Bearer ${u.key}` }, {}];
  for (const headers of tries) {
    const r = await fetch(a.url + NODE_PATHS.generate, { method: 'POST', headers, body });
    t.equal(r.status, 401, JSON.stringify(Object.keys(headers)));
    t.match((await r.json()).detail, /node secret/);
  }
  const pub = await call(a.url, 'POST', '/inference', { key: u.key, body: encoderCall });
  t.equal(pub.status, 401, 'the public API is not served on a node');
  t.equal((await fetch(a.url + NODE_PATHS.status, { headers: { Authorization: `Bearer ${SECRET}` } })).status, 200);
});

t.test('a node killed with SIGKILL: the other serves, and its registration expires', async (t) => {
  const holder = (await Promise.all(nodes.map(nodeStatus))).findIndex((s) => s.counters.extract > 0);
  const [dead, alive] = holder === 0 ? [a, b] : [b, a];
  dead.child.kill('SIGKILL');
  await dead.exited;
  // right away (its record still looks live): the call is refused by the dead node and retried on the other
  const r = await call(ts.url, 'POST', '/inference', { key: u.key, body: encoderCall });
  t.equal(r.status, 200, r.text);
  const expired = async () => (await store.inferenceNodes.get(dead.id))!.expires_at < Date.now();
  await until('the heartbeat to expire', expired);
  t.ok(await store.inferenceNodes.get(dead.id), 'expired, not removed (nobody deregistered it)');
  await until('the API to drop it', async () => (await health()).inference_nodes.length === 1);
  t.same((await health()).inference_nodes.map((n: { id: string }) => n.id), [alive.id]);
  const servedBefore = (await nodeStatus(alive)).counters.extract;
  for (let i = 0; i < 3; i++) {
    const x = await call(ts.url, 'POST', '/inference', { key: u.key, body: encoderCall });
    t.equal(x.status, 200);
  }
  t.equal((await nodeStatus(alive)).counters.extract, servedBefore + 3, 'the live node served every call');
});

t.test('a node stopped cleanly deregisters; with no node the API answers 503', async (t) => {
  const last = nodes.find((n) => n.child.exitCode === null && n.child.signalCode === null)!;
  last.child.kill('SIGTERM');
  t.equal(await last.exited, 0);
  t.equal(await store.inferenceNodes.get(last.id), undefined, 'its record is gone at once');
  await until('the API to see no node', async () => (await health()).inference_nodes.length === 0);
  await new Promise((r) => setTimeout(r, 1100)); // the catalog's next scan sees no node either
  const r = await call(ts.url, 'POST', '/inference', { key: u.key, body: encoderCall });
  t.equal(r.status, 503);
  t.match(r.body, { detail: /no inference node is live/ });
  t.ok(Number(r.headers.get('retry-after')) >= 1, 'Retry-After');
  const c = await call(ts.url, 'POST', '/v1/chat/completions', {
    key: u.key, body: chatBody([{ role: 'user', content: 'Hi' }]),
  });
  t.equal(c.status, 503);
  t.match(c.body, { error: { message: /no inference node is live/ } });
  t.ok(Number(c.headers.get('retry-after')) >= 1);
});
