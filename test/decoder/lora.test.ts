// LoRA at inference: the lora-grad golden's logits with the PEFT adapter applied (§5), several
// adapters (and none) over one base in the same batch, and load/unload at run time.
import t from 'tap';
import { join } from 'node:path';
import { SafetensorsFile } from '../../src/formats/safetensors.ts';
import { AdapterError, adapterDtype, readPeftAdapter } from '../../src/runtime/adapters.ts';
import { loadDecoder } from '../../src/runtime/generate.ts';
import { forwardAll, goldens, maxAbs, readCases } from './helpers.ts';
import { fromBf16, toBf16 } from '../native/ops-helpers.ts';

const dir = join(goldens, 'lora-grad');
const cases = readCases(dir);
const expected = new SafetensorsFile(join(dir, 'expected.safetensors'));
const ids: number[] = cases.sequence.input_ids;
const model = await loadDecoder(join(dir, cases.base_model.dir), { kv: { memory: '4MiB' } });

t.test('adapter logits match PEFT; base logits unchanged; mixed batch', async (t) => {
  const info = model.loadAdapter('tuned', join(dir, cases.adapter.dir));
  t.equal(info.scale, cases.adapter.scaling);
  const [withA, without, again] = await forwardAll(model.native, model.config, [ids, ids, ids], [info.id, -1, info.id]);
  const dA = maxAbs(withA, expected.float32(cases.expected.logits_key));
  const d0 = maxAbs(without, expected.float32(cases.expected.logits_without_adapter_key));
  t.ok(dA <= 1e-4, `with adapter: max abs ${dA.toExponential(2)}`);
  t.ok(d0 <= 1e-4, `without adapter (same batch): max abs ${d0.toExponential(2)}`);
  t.same(Array.from(again), Array.from(withA), 'second sequence with the adapter agrees');
});

t.test('sequences sharing an adapter side by side (a decode-sized and a prefill-sized run) match PEFT', async (t) => {
  const info = model.loadAdapter('tuned', join(dir, cases.adapter.dir));
  const V = model.config.vocabSize;
  const wantA = expected.float32(cases.expected.logits_key);
  const want0 = expected.float32(cases.expected.logits_without_adapter_key);
  // causal: a prefix's logits are the golden's first rows
  const check = (got: Float32Array[], seqs: number[][], adapters: number[], what: string) => {
    seqs.forEach((s, i) => {
      const ref = (adapters[i] >= 0 ? wantA : want0).subarray(0, s.length * V);
      const d = maxAbs(got[i], ref);
      const kind = adapters[i] >= 0 ? 'adapter' : 'base';
      t.ok(d <= 1e-4, `${what}, sequence ${i} (${kind}): max abs ${d.toExponential(2)}`);
    });
  };
  const small = [ids.slice(0, 4), ids.slice(0, 4), ids.slice(0, 4), ids.slice(0, 6)];
  const smallA = [info.id, info.id, info.id, -1];
  check(await forwardAll(model.native, model.config, small, smallA), small, smallA, 'a 12-row run');
  const large = [ids.slice(0, 5), ids, ids.slice(0, 7), ids];
  const largeA = [-1, info.id, info.id, info.id];
  check(await forwardAll(model.native, model.config, large, largeA), large, largeA, 'a 29-row run');
});

t.test('two adapters and the base in concurrent generate() calls', async (t) => {
  model.loadAdapter('tuned', join(dir, cases.adapter.dir));
  model.loadAdapter('tuned2', join(dir, cases.adapter.dir));
  const [a, b, c] = await Promise.all([
    model.generate({ prompt_ids: ids, max_tokens: 8, temperature: 0, stop_at_eos: false, adapter: 'tuned' }).result,
    model.generate({ prompt_ids: ids, max_tokens: 8, temperature: 0, stop_at_eos: false }).result,
    model.generate({ prompt_ids: ids, max_tokens: 8, temperature: 0, stop_at_eos: false, adapter: 'tuned2' }).result,
  ]);
  t.same(a.tokenIds, c.tokenIds, 'same adapter weights give the same tokens');
  t.notSame(a.tokenIds, b.tokenIds, 'adapter changes the continuation');
  // greedy first token equals the argmax of the golden's adapter logits at the last position
  const ref = expected.float32(cases.expected.logits_key);
  const V = model.config.vocabSize;
  const last = ref.subarray((ids.length - 1) * V, ids.length * V);
  let arg = 0;
  for (let i = 1; i < V; i++) if (last[i] > last[arg]) arg = i;
  t.equal(a.tokenIds[0], arg);
});

t.test('bf16 adapters: the bits of f32 adapters holding the bf16-rounded A and B, at half the bytes', async (t) => {
  const a = readPeftAdapter(join(dir, cases.adapter.dir), model.config);
  const round = (x: Float32Array) => fromBf16(toBf16(x));  // to bf16, nearest even, and back
  model.native.loadAdapter(901, a.modules, 'bf16');
  model.native.loadAdapter(902, a.modules.map((m) => ({ ...m, A: round(m.A), B: round(m.B) })), 'f32');
  model.native.loadAdapter(903, a.modules, 'f32');
  // a decode-sized run (4 rows) and a prefill-sized one (the whole sequence) of each
  const short = ids.slice(0, 4);
  const [b16s, refs, b16, ref, f32] = await forwardAll(model.native, model.config, [short, short, ids, ids, ids],
    [901, 902, 901, 902, 903]);
  const bits = (x: Float32Array) => Buffer.from(x.buffer, x.byteOffset, x.byteLength);
  t.ok(bits(b16s).equals(bits(refs)), '4 rows: the same bits');
  t.ok(bits(b16).equals(bits(ref)), `${ids.length} rows: the same bits`);
  // against PEFT's: off by the rounding of A and B (2⁻⁹ relative each) times what the adapter adds to the logits
  const want = expected.float32(cases.expected.logits_key);
  const d = maxAbs(b16, want), d32 = maxAbs(f32, want);
  const delta = maxAbs(want, expected.float32(cases.expected.logits_without_adapter_key));
  t.ok(d > d32 && d <= 4 * 2 ** -9 * delta, `PEFT's logits: max abs ${d.toExponential(2)} (f32 ${d32.toExponential(2)}; `
    + `the adapter moves them by up to ${delta.toFixed(2)})`);
  for (const id of [901, 902, 903]) model.native.unloadAdapter(id);
  // the registry's choice: the base's weight type unless LOOM_LORA_DTYPE says
  t.equal(adapterDtype('BF16', undefined), 'bf16');
  t.equal(adapterDtype('F32', undefined), 'f32');
  t.equal(adapterDtype('BF16', 'f32'), 'f32');
  t.equal(adapterDtype('F32', 'auto'), 'f32');
  t.throws(() => adapterDtype('F32', 'fp8'), /LOOM_LORA_DTYPE must be f32, bf16 or auto/);
  const info = model.loadAdapter('sized', join(dir, cases.adapter.dir));
  const n = a.modules.reduce((s, m) => s + m.A.length + m.B.length, 0);
  t.equal(info.bytes, n * (info.dtype === 'bf16' ? 2 : 4), `bytes counted for ${info.dtype}`);
  model.unloadAdapter('sized');
});

t.test('unload at run time', async (t) => {
  t.ok(model.unloadAdapter('tuned2'));
  t.notOk(model.unloadAdapter('tuned2'), 'second unload reports false');
  await t.rejects(model.generate({ prompt_ids: ids, max_tokens: 2, adapter: 'tuned2' }).result, AdapterError);
  const r = await model.generate({ prompt_ids: ids, max_tokens: 2, temperature: 0, adapter: 'tuned', stop_at_eos: false }).result;
  t.equal(r.tokenIds.length, 2);
  t.throws(() => model.loadAdapter('bad', join(dir, 'nope')), AdapterError);
});
