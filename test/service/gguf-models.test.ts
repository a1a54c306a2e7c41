// GGUF files served by the production ModelRuntime: a `*.gguf` file in LOOM_MODELS_DIR is a model named after
// the file, a folder holding one `*.gguf` (and no config.json) a model named after the folder. Both are listed
// in the catalog and answer on the inference endpoints with what the decoder runtime gives for the same file;
// /health reports each loaded model's weight and KV memory (the Q8_0 file's blocks stay quantized).
import t from 'tap';
import { mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { convertHfToGguf } from '../../src/formats/gguf-hf.ts';
import { loadDecoder } from '../../src/runtime/generate.ts';
import { createLocalRuntime } from '../../src/service/runtime-local.ts';
import { call, makeUser, startServer } from './helpers.ts';

const src = join(import.meta.dirname, '../../../shared/models/tinystories-656k');
const modelsDir = mkdtempSync(join(tmpdir(), 'loom-gguf-models-'));
t.teardown(() => rmSync(modelsDir, { recursive: true, force: true }));
const q8File = join(modelsDir, 'stories-q8_0.gguf');
convertHfToGguf(src, q8File, { outType: 'Q8_0' });
mkdirSync(join(modelsDir, 'stories-f16'));
convertHfToGguf(src, join(modelsDir, 'stories-f16', 'model-f16.gguf'), { outType: 'F16' });

writeFileSync(join(modelsDir, 'broken.gguf'), 'not a gguf file at all');  // skipped, never a crash
const runtime = createLocalRuntime({ modelsDir, maxLoaded: 2 });
const ts = await startServer({ runtime, config: { modelsDir } });
t.teardown(() => ts.close());
const u = await makeUser(ts, { credits: 1000 });

t.test('the catalog lists a GGUF file and a folder holding one as decoders', async (t) => {
  const r = await call(ts.url, 'GET', '/base-models?supports_inference=true', { key: u.key });
  t.equal(r.status, 200, r.text);
  const byId = Object.fromEntries(r.body.models.map((m: { id: string }) => [m.id, m]));
  t.match(byId['stories-q8_0'], { task_type: 'decoder', local: true, context_length: 512 });
  t.match(byId['stories-f16'], { task_type: 'decoder', local: true, context_length: 512 });
  t.match(byId['stories-q8_0'], { supports_training: false, supports_rl: false }, 'served, not trained (yet)');
  t.notOk(byId.broken, 'a file that is not a GGUF decoder is not listed');
  const v1 = await call(ts.url, 'GET', '/v1/models', { key: u.key });
  t.ok(v1.body.data.some((m: { id: string }) => m.id === 'stories-q8_0'), '/v1/models lists it too');
});

t.test('a GGUF model answers by name: completions equal the runtime on the file', async (t) => {
  const prompt = 'Once upon a time, there was a little dog';
  const direct = await (await loadDecoder(q8File)).generate({ prompt, max_tokens: 16, temperature: 0 }).result;
  const body = { model: 'stories-q8_0', prompt, max_tokens: 16, temperature: 0 };
  const r = await call(ts.url, 'POST', '/v1/completions', { key: u.key, body });
  t.equal(r.status, 200, r.text);
  t.ok(direct.text.length > 0, `greedy text ${JSON.stringify(direct.text)}`);
  t.equal(r.body.choices?.[0]?.text, direct.text, 'the service gives the runtime\'s greedy text');
  const messages = [{ role: 'user', content: 'Tell me a story.' }];
  const chat = { model: 'stories-f16', messages, max_tokens: 8, temperature: 0 };
  const c = await call(ts.url, 'POST', '/v1/chat/completions', { key: u.key, body: chat });
  t.equal(c.status, 200, c.text);
  t.ok(c.body.choices[0].message.content.length > 0, 'the folder model answers');
  const missing = await call(ts.url, 'POST', '/v1/completions', { key: u.key, body: { ...body, model: 'stories-q4' } });
  t.equal(missing.status, 404, missing.text);
});

t.test('/health reports the loaded models\' weight and KV memory', async (t) => {
  const h = await call(ts.url, 'GET', '/health', {});
  t.equal(h.status, 200, h.text);
  const q = h.body.models_memory.find((m: { id: string }) => m.id === 'stories-q8_0');
  t.ok(q, 'the Q8_0 model is loaded');
  const fileBytes = statSync(q8File).size;
  t.ok(q.weight_bytes > 0 && q.weight_bytes <= fileBytes, `weights ${q.weight_bytes} B, file ${fileBytes} B`);
  t.ok(q.kv_bytes > 0, `kv ${q.kv_bytes} B`);
});
