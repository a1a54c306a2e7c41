// End to end with the real runtimes: the tiny GLiNER2 checkpoint (encoder) and TinyStories-656K
// (decoder) in a temp LOOM_MODELS_DIR, served through HTTP by the production ModelRuntime. The
// service's answers must equal the runtimes' own answers for the same inputs.
import t from 'tap';
import { mkdtempSync, mkdirSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadEncoder } from '../../src/models/encoder/index.ts';
import { loadDecoder } from '../../src/runtime/generate.ts';
import { createLocalRuntime } from '../../src/service/runtime-local.ts';
import { call, makeUser, startServer } from './helpers.ts';

const shared = join(import.meta.dirname, '../../../shared');
const encDir = join(shared, 'goldens/gliner2-tiny-span');
const decDir = join(shared, 'models/tinystories-656k');
const modelsDir = mkdtempSync(join(tmpdir(), 'loom-models-'));
mkdirSync(join(modelsDir, 'tiny'));
symlinkSync(encDir, join(modelsDir, 'tiny/gliner2'));
symlinkSync(decDir, join(modelsDir, 'tinystories-656k'));
t.teardown(() => rmSync(modelsDir, { recursive: true, force: true }));

const runtime = createLocalRuntime({ modelsDir, maxLoaded: 1 });
const ts = await startServer({ runtime, config: { modelsDir } });
t.teardown(() => ts.close());
const u = await makeUser(ts, { credits: 1000 });

t.test('the catalog lists the models on disk with their kind', async (t) => {
  const r = await call(ts.url, 'GET', '/base-models?supports_inference=true', { key: u.key });
  const byId = Object.fromEntries(r.body.models.map((m: { id: string }) => [m.id, m]));
  t.match(byId['tiny/gliner2'], { task_type: 'encoder', local: true, supports_inference: true });
  t.match(byId['tinystories-656k'], { task_type: 'decoder', local: true, context_length: 512 });
});

t.test('encoder: POST /inference equals the runtime called directly', async (t) => {
  const text = 'Barack Obama met Angela Merkel in Berlin on Tuesday, a spokesman for the European Commission said.';
  const schema = ['person', 'organization', 'location'];
  const r = await call(ts.url, 'POST', '/inference', { key: u.key, body: { model_id: 'tiny/gliner2', text, schema, threshold: 0.3, include_confidence: true, include_spans: true } });
  t.equal(r.status, 200, r.text);
  const direct = await (await loadEncoder(encDir)).extract(text, schema, { threshold: 0.3, include_confidence: true, include_spans: true });
  t.same(r.body.result, JSON.parse(JSON.stringify(direct)));
  t.ok(r.body.usage.prompt_tokens > 10, `token usage from the tokenizer (${r.body.usage.prompt_tokens})`);
  const batch = await call(ts.url, 'POST', '/inference', { key: u.key, body: { model_id: 'tiny/gliner2', text: [text, 'Angela Merkel'], schema } });
  t.equal(batch.body.result.length, 2);
  // structure fields with regex validators, through the service: filtered values; a bad pattern is a 422
  const vs = { structures: { meeting: [{ name: 'day', dtype: 'list', validators: [{ pattern: '[a-z]+day' }] }] } };
  const v = await call(ts.url, 'POST', '/inference', { key: u.key, body: { model_id: 'tiny/gliner2', text, schema: vs, threshold: 0 } });
  t.equal(v.status, 200, v.text);
  for (const inst of v.body.result.structures.meeting) for (const d of inst.day ?? []) t.match(d.text, /^[a-z]+day$/i);
  const bad = await call(ts.url, 'POST', '/inference', { key: u.key, body: { model_id: 'tiny/gliner2', text, schema: { structures: { m: [{ name: 'x', validators: [{ pattern: '(a)\\1' }] }] } } } });
  t.equal(bad.status, 422, bad.text);
  t.match(bad.text, /backreferences or lookaround/);
});

t.test('decoder: greedy generation equals the runtime; the model cap unloads the encoder', async (t) => {
  const messages = [{ role: 'user' as const, content: 'Once upon a time' }];
  const r = await call(ts.url, 'POST', '/inference', { key: u.key, body: { model_id: 'tinystories-656k', messages, max_tokens: 12, temperature: 0 } });
  t.equal(r.status, 200, r.text);
  const dec = await loadDecoder(decDir);
  let final: { text: string; usage: { prompt_tokens: number; completion_tokens: number } } | null = null;
  for await (const ev of dec.generate({ messages, max_tokens: 12, temperature: 0 })) if (ev.type === 'final') final = ev;
  t.equal(r.body.result.content, final!.text);
  t.equal(r.body.usage.completion_tokens, final!.usage.completion_tokens);
  t.equal(r.body.usage.prompt_tokens + r.body.usage.cache_read_tokens + r.body.usage.cache_write_tokens, final!.usage.prompt_tokens, 'same prompt length');
  const u1 = r.body.usage;
  t.equal(u1.total_tokens, u1.prompt_tokens + u1.cache_read_tokens + u1.cache_write_tokens + u1.completion_tokens, 'disjoint usage');
  // the same prompt again is served from the prefix cache and billed at the family's read rate
  const again = await call(ts.url, 'POST', '/inference', { key: u.key, body: { model_id: 'tinystories-656k', messages, max_tokens: 12, temperature: 0 } });
  t.ok(again.body.usage.cache_read_tokens > 0, `cache read ${again.body.usage.cache_read_tokens}`);
  t.equal(again.body.usage.prompt_tokens + again.body.usage.cache_read_tokens + again.body.usage.cache_write_tokens, final!.usage.prompt_tokens);
  t.ok(again.body.cost < r.body.cost, 'cache reads cost less');
  t.same(runtime.stats().loaded, ['tinystories-656k'], 'at most maxLoaded models stay loaded');
});
