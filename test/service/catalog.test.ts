// The catalog lists only what loads: model folders on disk are offered when the loader accepts
// their config (one table of supported decoder architectures, src/formats/hf-config.ts), and every
// training base the training service accepts is listed by GET /base-models.
import t from 'tap';
import { mkdirSync, mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLocalRuntime, detectKind } from '../../src/service/runtime-local.ts';
import { FRESH_ENCODERS } from '../../src/service/training-jobs.ts';
import { call, makeUser, startServer } from './helpers.ts';

const shared = join(import.meta.dirname, '../../../shared');
const decDir = join(shared, 'models/tinystories-656k');
const encDir = join(shared, 'goldens/gliner2-tiny-span');
const modelsDir = mkdtempSync(join(tmpdir(), 'loom-catalog-'));
symlinkSync(decDir, join(modelsDir, 'tinystories-656k'));
symlinkSync(encDir, join(modelsDir, 'gliner2-tiny'));
// folders of architectures the decoder loader refuses: the same files, another model_type
const cfg = JSON.parse(readFileSync(join(decDir, 'config.json'), 'utf8'));
const refused: Record<string, object> = {
  phi3: { ...cfg, model_type: 'phi3', architectures: ['Phi3ForCausalLM'] },
  gemma: { ...cfg, model_type: 'gemma', architectures: ['GemmaForCausalLM'] },
  gemma2: { ...cfg, model_type: 'gemma2', architectures: ['Gemma2ForCausalLM'] },
  // an unknown type with a causal-LM architecture name
  'some-causal-lm': { ...cfg, model_type: 'falcon', architectures: ['FalconForCausalLM'] },
};
for (const [name, c] of Object.entries(refused)) {
  mkdirSync(join(modelsDir, name));
  writeFileSync(join(modelsDir, name, 'config.json'), JSON.stringify(c));
  symlinkSync(join(decDir, 'model.safetensors'), join(modelsDir, name, 'model.safetensors'));
  for (const f of ['tokenizer.json', 'tokenizer_config.json']) {
    try { symlinkSync(join(decDir, f), join(modelsDir, name, f)); } catch { /* absent in the fixture */ }
  }
}
const ts = await startServer({ runtime: createLocalRuntime({ modelsDir, maxLoaded: 2 }), config: { modelsDir } });
t.teardown(async () => { await ts.close(); rmSync(modelsDir, { recursive: true, force: true }); });
const u = await makeUser(ts, { credits: 100 });

t.test('refused architectures are not offered; everything on disk that is listed loads and answers', async (t) => {
  for (const name of Object.keys(refused)) {
    t.equal(detectKind(join(modelsDir, name)), null, `${name}: not a model we serve`);
  }
  const r = await call(ts.url, 'GET', '/base-models', { key: u.key });
  t.equal(r.status, 200);
  const local = r.body.models.filter((m: { local: boolean }) => m.local).map((m: { id: string }) => m.id).sort();
  t.same(local, ['gliner2-tiny', 'tinystories-656k'], 'only the loadable folders are listed');
  const v1 = await call(ts.url, 'GET', '/v1/models?limit=1000', { key: u.key });
  const v1ids = v1.body.data.map((m: { id: string }) => m.id);
  for (const name of Object.keys(refused)) t.notOk(v1ids.includes(name), `/v1/models omits ${name}`);
  for (const m of r.body.models.filter((x: { local: boolean }) => x.local)) {
    const body = m.task_type === 'decoder'
      ? { model_id: m.id, messages: [{ role: 'user', content: 'Once upon a time' }], max_tokens: 4 }
      : { model_id: m.id, text: 'Alice lives in Paris.', schema: ['person'] };
    const res = await call(ts.url, 'POST', '/inference', { key: u.key, body });
    t.equal(res.status, 200, `${m.id} (listed) loads and answers: ${res.status}`);
  }
});

t.test('every fresh training base is listed, training-only', async (t) => {
  const r = await call(ts.url, 'GET', '/base-models?supports_inference=false', { key: u.key });
  const ids = r.body.models.map((m: { id: string }) => m.id);
  for (const id of Object.keys(FRESH_ENCODERS)) {
    t.ok(ids.includes(id), `${id} is listed`);
    const m = r.body.models.find((x: { id: string }) => x.id === id);
    t.match(m, { task_type: 'encoder', supports_inference: false, supports_training: true });
    const body = { model_id: id, text: 'x', schema: ['a'] };
    const inf = await call(ts.url, 'POST', '/inference', { key: u.key, body });
    t.equal(inf.status, 409, `${id}: training-only (409 for inference)`);
  }
  t.ok(ids.includes('loom/gliner2-init-tiny'), 'the tiny fresh encoder too');
});
