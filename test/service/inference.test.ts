// POST /inference (encoder and decoder forms), GET /base-models, and every model-resolution status:
// 404 unknown, 409 training-only, 425 warming (Retry-After), 451 region, 503 runtime down, 422, 400.
import t from 'tap';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { tmpdir } from 'node:os';
import { call, makeUser, startServer } from './helpers.ts';
import { FakeRuntime } from './fake-runtime.ts';

const catalogFile = join(tmpdir(), `loom-catalog-${process.pid}.json`);
writeFileSync(catalogFile, JSON.stringify({ models: [
  { id: 'test/encoder', blocked_regions: ['kp'], pricing: { input: 1000, output: 0 } },
  { id: 'test/decoder', pricing: { input: 1000, output: 3000 } },
] }));
const rt = new FakeRuntime();
const ts = await startServer({ runtime: rt, config: { catalogFile } });
t.teardown(() => ts.close());
const u = await makeUser(ts, { credits: 50 });

t.test('encoder form: single text, batch, threshold, confidence and spans; stored as an inference record', async (t) => {
  const r = await call(ts.url, 'POST', '/inference', { key: u.key, body: { model_id: 'test/encoder', text: 'Alice met Bob in Paris', schema: ['person', 'city'] } });
  t.equal(r.status, 200);
  t.equal(r.body.type, 'encoder');
  // confidence and spans by default (README, the library, the reference service)
  const ent = (text: string, start: number) => ({ text, confidence: 0.9, start, end: start + text.length });
  t.same(r.body.result, { entities: { person: [ent('Alice', 0), ent('Bob', 10)], city: [ent('Paris', 17)] } });
  t.equal(r.body.model_id, 'test/encoder');
  t.type(r.body.latency_ms, 'number');
  t.same(r.body.usage, { prompt_tokens: 7, cache_read_tokens: 0, cache_write_tokens: 0, completion_tokens: 0, total_tokens: 7 });
  t.equal(r.body.cost, 0.007, '7 tokens at 1000 credits per 1M');
  const rec = await call(ts.url, 'GET', `/inferences/${r.body.inference_id}`, { key: u.key });
  t.equal(rec.status, 200);
  t.same(rec.body.input, { text: 'Alice met Bob in Paris' });
  t.same(rec.body.schema, ['person', 'city']);
  t.same(rec.body.output, r.body.result);
  t.equal(rec.body.task, 'ner');

  const b = await call(ts.url, 'POST', '/inference', { key: u.key, body: { model_id: 'test/encoder', text: ['Alice', 'Berlin'], schema: { entities: ['person', 'city'] }, include_confidence: true, include_spans: true, threshold: 0.3 } });
  t.equal(b.status, 200);
  t.ok(Array.isArray(b.body.result));
  t.same(b.body.result[1], { entities: { person: [], city: [{ text: 'Berlin', confidence: 0.9, start: 0, end: 6 }] } });
  const hi = await call(ts.url, 'POST', '/inference', { key: u.key, body: { model_id: 'test/encoder', text: 'Alice', schema: ['person'], threshold: 0.95 } });
  t.same(hi.body.result, { entities: { person: [] } }, 'a higher threshold returns fewer entities');
});

t.test('decoder form: messages → generation with token usage', async (t) => {
  const r = await call(ts.url, 'POST', '/inference', { key: u.key, body: { model_id: 'test/decoder', task: 'generate', messages: [{ role: 'user', content: [{ type: 'text', text: 'one two three', cache_control: { type: 'ephemeral' } }] }], max_tokens: 2 } });
  t.equal(r.status, 200);
  t.equal(r.body.type, 'decoder');
  t.same(r.body.result, { content: 'one two', finish_reason: 'length' });
  t.same(r.body.usage, { prompt_tokens: 3, cache_read_tokens: 0, cache_write_tokens: 0, completion_tokens: 2, total_tokens: 5 });
  t.equal(r.body.cost, 0.009);
});

t.test('store: false keeps the record without its content', async (t) => {
  const r = await call(ts.url, 'POST', '/inference', { key: u.key, body: { model_id: 'test/encoder', text: 'secret Alice', schema: ['person'], store: false } });
  const rec = await call(ts.url, 'GET', `/inferences/${r.body.inference_id}`, { key: u.key });
  t.equal(rec.status, 200);
  t.equal(rec.body.input, null);
  t.equal(rec.body.output, null);
  t.equal(rec.body.stored_content, false);
});

t.test('422 validation with detail and errors; 400 malformed JSON', async (t) => {
  const cases: Array<[unknown, string]> = [
    [{ text: 'x', schema: ['a'] }, '/model_id'],
    [{ model_id: 'test/encoder', text: 'x', schema: ['a'], threshold: 1.5 }, '/threshold'],
    [{ model_id: 'test/encoder', text: 'x', schema: ['a'], threshold: 'high' }, '/threshold'],
    [{ model_id: 'test/encoder', schema: ['a'] }, '/text'],
    [{ model_id: 'test/decoder', messages: [{ role: 'user' }] }, '/messages/0/content'],
    [{ model_id: 'test/decoder', messages: [{ role: 'user', content: 'x' }], max_tokens: 0 }, '/max_tokens'],
  ];
  for (const [body, path] of cases) {
    const r = await call(ts.url, 'POST', '/inference', { key: u.key, body });
    t.equal(r.status, 422, JSON.stringify(body));
    t.same(Object.keys(r.body).sort(), ['detail', 'errors']);
    t.ok(r.body.errors.some((e: { path: string }) => e.path === path), `${path} named in ${JSON.stringify(r.body.errors)}`);
  }
  const empty = await call(ts.url, 'POST', '/inference', { key: u.key, body: { model_id: 'test/encoder', text: 'x' } });
  t.equal(empty.status, 422, 'no schema');
  const wrongKind = await call(ts.url, 'POST', '/inference', { key: u.key, body: { model_id: 'test/decoder', text: 'x', schema: ['a'] } });
  t.equal(wrongKind.status, 422, 'encoder request to a decoder');
  const bad = await call(ts.url, 'POST', '/inference', { key: u.key, raw: '{"model_id": "test/encoder",' });
  t.equal(bad.status, 400);
  t.match(bad.body.detail, /Malformed JSON/);
});

t.test('404 unknown model, 409 training-only base, 451 blocked region', async (t) => {
  const nf = await call(ts.url, 'POST', '/inference', { key: u.key, body: { model_id: 'nobody/nothing', text: 'x', schema: ['a'] } });
  t.equal(nf.status, 404);
  t.same(nf.body, { detail: 'Model nobody/nothing not found' });
  const to = await call(ts.url, 'POST', '/inference', { key: u.key, body: { model_id: 'loom/gliner2-init-small', text: 'x', schema: ['a'] } });
  t.equal(to.status, 409);
  t.match(to.body.detail, /training-only/);
  const kp = await makeUser(ts, { credits: 5, region: 'KP' });
  const r = await call(ts.url, 'POST', '/inference', { key: kp.key, body: { model_id: 'test/encoder', text: 'x', schema: ['a'] } });
  t.equal(r.status, 451);
  t.same(Object.keys(r.body), ['detail']);
  const other = await call(ts.url, 'POST', '/inference', { key: kp.key, body: { model_id: 'test/decoder', messages: [{ role: 'user', content: 'hi' }] } });
  t.equal(other.status, 200, 'other models still served in that region');
});

t.test('425 with Retry-After while an on-demand model is pulled, 200 once ready', async (t) => {
  const body = { model_id: 'fastino/gliner2-base-v1', text: 'Alice', schema: ['person'] };
  const r = await call(ts.url, 'POST', '/inference', { key: u.key, body });
  t.equal(r.status, 425);
  t.equal(r.headers.get('retry-after'), '5');
  t.match(r.body.detail, /pulled|warming/);
  t.ok(rt.warmCalls.includes('fastino/gliner2-base-v1'), 'the pull was started');
  const again = await call(ts.url, 'POST', '/inference', { key: u.key, body });
  t.equal(again.status, 425);
  t.equal(again.headers.get('retry-after'), '3', 'the runtime-reported wait');
  rt.setReady('fastino/gliner2-base-v1');
  const ok = await call(ts.url, 'POST', '/inference', { key: u.key, body });
  t.equal(ok.status, 200);
});

t.test('503 when the runtime is down; 500 shape for an unexpected runtime failure (recorded as error)', async (t) => {
  rt.states.set('test/encoder', { state: 'unavailable', reason: 'native addon failed to load' });
  const r = await call(ts.url, 'POST', '/inference', { key: u.key, body: { model_id: 'test/encoder', text: 'x', schema: ['a'] } });
  t.equal(r.status, 503);
  t.match(r.body.detail, /native addon/);
  rt.states.delete('test/encoder');
  rt.failNext = new Error('kernel exploded at 0xdeadbeef');
  const f = await call(ts.url, 'POST', '/inference', { key: u.key, body: { model_id: 'test/encoder', text: 'Alice', schema: ['person'] } });
  t.equal(f.status, 500);
  t.same(Object.keys(f.body).sort(), ['error', 'message']);
  t.notOk(f.text.includes('deadbeef'), 'internals are not leaked');
  const hist = await call(ts.url, 'GET', '/inferences?limit=1', { key: u.key });
  t.equal(hist.body.inferences[0].status, 'error');
});

t.test('GET /base-models with filters: curated, on-disk and catalog-file entries', async (t) => {
  const all = await call(ts.url, 'GET', '/base-models', { key: u.key });
  t.equal(all.status, 200);
  const ids = all.body.models.map((m: { id: string }) => m.id);
  for (const id of ['fastino/gliner2-base-v1', 'fastino/gliner2-large-v1', 'fastino/gliner2-multi-v1', 'HuggingFaceTB/SmolLM2-135M-Instruct', 'HuggingFaceTB/SmolLM2-360M-Instruct', 'Qwen/Qwen2.5-0.5B-Instruct', 'Qwen/Qwen2.5-1.5B-Instruct', 'meta-llama/Llama-3.2-1B-Instruct', 'test/encoder', 'test/decoder']) t.ok(ids.includes(id), id);
  t.equal(all.body.count, all.body.models.length);
  const enc = all.body.models.find((m: { id: string }) => m.id === 'test/encoder');
  t.match(enc, { supports_inference: true, supports_on_demand_inference: true, task_type: 'encoder', caching_family: 'none', local: true, blocked_regions: ['KP'], pricing: { input: 1000, output: 0 } });
  const llama = all.body.models.find((m: { id: string }) => m.id === 'meta-llama/Llama-3.2-1B-Instruct');
  t.equal(llama.caching_family, 'explicit');
  const dec = await call(ts.url, 'GET', '/base-models?task_type=decoder&supports_inference=true', { key: u.key });
  t.ok(dec.body.models.length > 0 && dec.body.models.every((m: { task_type: string; supports_inference: boolean }) => m.task_type === 'decoder' && m.supports_inference));
  const trainOnly = await call(ts.url, 'GET', '/base-models?supports_inference=false', { key: u.key });
  t.same(trainOnly.body.models.map((m: { id: string }) => m.id), ['loom/gliner2-init-small', 'loom/gliner2-init-tiny']);
  t.equal((await call(ts.url, 'GET', '/base-models?supports_inference=yes', { key: u.key })).status, 400);
  t.equal((await call(ts.url, 'GET', '/base-models?task_type=vision', { key: u.key })).status, 422);
});
