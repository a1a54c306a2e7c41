// Routing to inference nodes, in one process (src/service/nodes/): node servers over a runtime whose
// generations wait until the test releases them, registered in a temp LMDB store. Capacity (a full node
// is skipped; a node whose registration is stale answers 529 and the next is tried; all full is the
// runtime's 529, which every endpoint but /v1/messages answers as 503), errors crossing the wire as the
// services know them, a wrong secret, the prefix hashing's stability; and the registry on both stores.
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openStore } from '../../src/store/index.ts';
import { overloadedAsUnavailable } from '../../src/service/errors.ts';
import { startNodeServer, type NodeServer } from '../../src/service/nodes/node-server.ts';
import { createNodeDirectory, startHeartbeat } from '../../src/service/nodes/registry.ts';
import { eachStore } from '../helpers/stores.ts';
import { cachedPrefix, createRemoteRuntime, prefixNode } from '../../src/service/nodes/runtime-remote.ts';
import type { GenerateEvent, GenerateParams, ModelRef, ModelRuntime } from '../../src/service/runtime.ts';

const SECRET = 'routing-test-secret-0123456789';
const usage = { prompt_tokens: 3, cache_read_tokens: 0, cache_write_tokens: 0, completion_tokens: 0 };

/** generations start, then wait for release(); extract throws the error its text names */
class GateRuntime implements ModelRuntime {
  waiting: Array<() => void> = [];
  async listLocal() { return [{ id: 'm', kind: 'decoder' as const, dir: '/models/m' }]; }
  status() { return { state: 'ready' as const }; }
  async warm() {}
  async extract(_ref: ModelRef, texts: string[]) {
    if (texts[0] === 'range') throw new RangeError('max_tokens is past the context');
    if (texts[0] === 'schema') throw Object.assign(new Error('bad field spec'), { name: 'SchemaError' });
    if (texts[0] === 'limit') {
      throw Object.assign(new Error('too many labels'), { name: 'InputLimitError', path: '/schema', limit: 'labels' });
    }
    return { results: [{ echo: texts[0] }], input_tokens: texts[0].length };
  }
  async *generate(_ref: ModelRef, p: GenerateParams): AsyncIterable<GenerateEvent> {
    yield { type: 'start', usage };
    await new Promise<void>((r) => this.waiting.push(r));
    yield { type: 'delta', text: 'hi' };
    yield { type: 'done', finish_reason: 'stop', text: 'hi', usage: { ...usage, completion_tokens: 1 } };
    void p;
  }
  async embed() { return { embeddings: [[1]], input_tokens: 1, dimensions: 1 }; }
  stats() { return { loaded: [], warming: [], queue_depth: 0 }; }
  async close() {}
  release() { for (const r of this.waiting.splice(0)) r(); }
}

const dataDir = mkdtempSync(join(tmpdir(), 'loom-routing-'));
const store = await openStore(dataDir);
const gate = new GateRuntime();
const servers: NodeServer[] = [];
const beats: Array<{ stop(): Promise<void> }> = [];
for (const id of ['a', 'b']) {
  const server = await startNodeServer({ runtime: gate, secret: SECRET, host: '127.0.0.1', port: 0, maxQueue: 1 });
  servers.push(server);
  // one beat a minute: the records keep saying depth 0, as a stale registration would
  beats.push(await startHeartbeat(store, {
    intervalMs: 60_000,
    record: async () => ({
      id, url: server.url, models: await gate.listLocal(), loaded: [], warming: [], queue_depth: 0, max_queue: 1,
      started_at: new Date().toISOString(),
    }),
  }));
}
t.teardown(async () => {
  gate.release();
  for (const b of beats) await b.stop();
  for (const s of servers) await s.close(100);
  await store.close();
  rmSync(dataDir, { recursive: true, force: true });
});

const ref: ModelRef = { id: 'm', kind: 'decoder' };
const params: GenerateParams = { messages: [{ role: 'user', content: 'hello' }] };
const first = async (it: AsyncIterator<GenerateEvent>) => (await it.next()).value as GenerateEvent;

t.test('a full node is skipped, a stale one answers 529 and the next is tried, all full is 529', async (t) => {
  const rt = await createRemoteRuntime({ store, secret: SECRET });
  const other = await createRemoteRuntime({ store, secret: SECRET });
  t.teardown(async () => { await rt.close(); await other.close(); });
  t.equal(rt.status(ref).state, 'ready');
  const g1 = rt.generate(ref, params)[Symbol.asyncIterator]();
  t.match(await first(g1), { type: 'start' });
  const g2 = rt.generate(ref, params)[Symbol.asyncIterator]();
  t.match(await first(g2), { type: 'start' });
  t.same(servers.map((s) => s.counters.generate), [1, 1], 'the second call went to the other node');
  // this process knows both are full: refused without a request
  const err = await rt.generate(ref, params)[Symbol.asyncIterator]().next().catch((e) => e);
  t.match(err, { status: 529, name: 'OverloadedError' });
  t.same(servers.map((s) => s.counters.generate), [1, 1]);
  // another process still sees depth 0: each node answers 529 and it gives up with the same error
  const err2 = await other.generate(ref, params)[Symbol.asyncIterator]().next().catch((e) => e);
  t.match(err2, { status: 529, message: /at capacity/ });
  t.match(overloadedAsUnavailable(err2), { status: 503, headers: { 'Retry-After': '1' } }, '503 outside /v1/messages');
  gate.release();
  const rest = async (g: AsyncIterator<GenerateEvent>) => {
    const out: GenerateEvent[] = [];
    for (let r = await g.next(); !r.done; r = await g.next()) out.push(r.value);
    return out;
  };
  const tail = [{ type: 'delta', text: 'hi' }, { type: 'done', finish_reason: 'stop' }];
  for (const g of [g1, g2]) t.match(await rest(g), tail);
  t.same(servers.map((s) => s.inflight()), [0, 0]);
});

t.test('node errors reach the services as the local runtime raises them', async (t) => {
  const rt = await createRemoteRuntime({ store, secret: SECRET });
  t.teardown(() => rt.close());
  const opts = { threshold: 0.5, include_confidence: true, include_spans: true };
  const ok = await rt.extract({ id: 'm', kind: 'encoder' }, ['x'], {}, opts);
  t.same(ok, { results: [{ echo: 'x' }], input_tokens: 1 });
  const range = await rt.extract(ref, ['range'], {}, opts).catch((e) => e);
  t.ok(range instanceof RangeError, 'a RangeError (the compat layer answers 422)');
  const schemaErr = await rt.extract(ref, ['schema'], {}, opts).catch((e) => e);
  t.match(schemaErr, { name: 'SchemaError', message: 'bad field spec' });
  t.match(await rt.extract(ref, ['limit'], {}, opts).catch((e) => e),
    { name: 'InputLimitError', path: '/schema', limit: 'labels' });
});

t.test('a wrong node secret is a 503 naming it, and the node refuses it', async (t) => {
  const rt = await createRemoteRuntime({ store, secret: 'not-the-secret-0123456789' });
  t.teardown(() => rt.close());
  const err = await rt.embed(ref, ['x']).catch((e) => e);
  t.match(err, { status: 503, message: /LOOM_NODE_SECRET/ });
});

t.test('no live node: the status is unavailable (503)', async (t) => {
  const empty = await openStore(mkdtempSync(join(tmpdir(), 'loom-routing-empty-')));
  const rt = await createRemoteRuntime({ store: empty, secret: SECRET });
  t.teardown(async () => { await rt.close(); await empty.close(); });
  t.match(rt.status(ref), { state: 'unavailable', reason: /no inference node/ });
  t.match(await rt.embed(ref, ['x']).catch((e) => e), { status: 503, headers: { 'Retry-After': '5' } });
});

t.test('the cached prefix: up to the first marker; rendezvous hashing moves only a leaving node\'s keys', async (t) => {
  const cc = { type: 'ephemeral' as const };
  t.equal(cachedPrefix({ messages: [{ role: 'user', content: 'no marker' }] }), null);
  const a = cachedPrefix({ messages: [
    { role: 'system', content: [{ type: 'text', text: 'S', cache_control: cc }] },
    { role: 'user', content: [{ type: 'text', text: 'turn 1', cache_control: cc }] },
  ] });
  const b = cachedPrefix({ messages: [
    { role: 'system', content: [{ type: 'text', text: 'S', cache_control: cc }] },
    { role: 'user', content: 'another question' },
  ] });
  t.ok(a && a === b, 'the same first marked prefix, whatever follows');
  t.equal(cachedPrefix({ messages: [{ role: 'system', content: [{ type: 'text', text: 'S', cache_control: cc }] }],
    cache: { mode: 'none' } }), null, 'a call that does not cache has no affinity');
  const nodes = ['n1', 'n2', 'n3', 'n4'].map((id) => ({ id }));
  const keys = Array.from({ length: 400 }, (_, i) => `prefix ${i}`);
  const before = keys.map((k) => prefixNode(k, nodes)!.id);
  const counts = nodes.map((n) => before.filter((x) => x === n.id).length);
  t.ok(counts.every((c) => c > 60), `spread over the nodes: ${counts}`);
  const after = keys.map((k) => prefixNode(k, nodes.filter((n) => n.id !== 'n3'))!.id);
  t.ok(keys.every((_, i) => before[i] === 'n3' || after[i] === before[i]), 'only n3\'s prefixes moved');
});

eachStore(t, 'the registry: beats, expiry, deregistration', async (t, fresh) => {
  const target = await fresh();
  const s = await openStore(target.dataDir, { databaseUrl: target.databaseUrl });
  t.teardown(() => s.close());
  const hb = await startHeartbeat(s, {
    intervalMs: 100,
    record: async () => ({
      id: 'x', url: 'http://127.0.0.1:9', models: [], loaded: ['m'], warming: [], queue_depth: 2, max_queue: 4,
      started_at: new Date().toISOString(),
    }),
  });
  const dir = await createNodeDirectory(s, { refreshMs: 50 });
  t.teardown(() => dir.close());
  t.same(dir.live().map((n) => n.id), ['x'], 'registered before startHeartbeat resolves');
  const r1 = (await s.inferenceNodes.get('x'))!;
  t.equal(r1.expires_at - r1.beat_at, 300, 'expires three beats after its last');
  await new Promise((r) => setTimeout(r, 350));
  const r2 = (await s.inferenceNodes.get('x'))!;
  t.ok(r2.beat > r1.beat && r2.expires_at > r1.expires_at, `beats go on (${r1.beat} -> ${r2.beat})`);
  await hb.stop();
  t.equal(await s.inferenceNodes.get('x'), undefined, 'stop() deregisters');
  // a node that died: its last record stays, past its expiry
  await s.tx((tx) => { tx.inferenceNodes.put({ ...r2, expires_at: Date.now() - 1 }); });
  await dir.refresh(0);
  t.same(dir.live(), [], 'an expired record is not live');
  t.equal(dir.all().length, 1);
});
