// Llama-family forward against the reference goldens (../shared/goldens, README §1): logits of the
// four tiny random decoders under both config layouts, greedy continuations through the scheduler
// (KV cache), the left-padded batch case, and bf16 weights with fp32 compute.
import t from 'tap';
import { join } from 'node:path';
import { loadDecoderConfig } from '../../src/formats/hf-config.ts';
import { SafetensorsCheckpoint, SafetensorsFile } from '../../src/formats/safetensors.ts';
import { buildNativeDecoder, type TensorSource } from '../../src/models/decoder/loader.ts';
import { loadDecoder } from '../../src/runtime/generate.ts';
import { forwardAll, goldens, maxAbs, readCases } from './helpers.ts';

const TOL = 1e-4;

for (const name of ['llama-tiny', 'qwen2-tiny', 'mistral-tiny', 'llama3-rope-tiny']) {
  const dir = join(goldens, name);
  const cases = readCases(dir);
  const expected = new SafetensorsFile(join(dir, 'expected.safetensors'));

  for (const layout of ['config.json', 'config.transformers5.json']) {
    t.test(`${name} logits (${layout})`, async (t) => {
      const cfg = loadDecoderConfig(join(dir, layout));
      const model = await buildNativeDecoder(cfg, SafetensorsCheckpoint.open(dir) as unknown as TensorSource);
      for (const p of cases.prompts) {
        const [got] = await forwardAll(model, cfg, [p.input_ids]);
        const d = maxAbs(got, expected.float32(p.logits_key));
        t.ok(d <= TOL, `${p.name}: max abs ${d.toExponential(2)} <= ${TOL}`);
      }
    });
  }

  t.test(`${name} left-padded batch in one step (positions count real tokens only)`, async (t) => {
    const cfg = loadDecoderConfig(dir);
    const model = await buildNativeDecoder(cfg, SafetensorsCheckpoint.open(dir) as unknown as TensorSource);
    const b = cases.batch;
    const seqs: number[][] = b.input_ids.map((row: number[], i: number) => row.filter((_, j) => b.attention_mask[i][j] === 1));
    const got = await forwardAll(model, cfg, seqs);
    const ref = expected.float32(b.logits_key);
    const [B, Tm, V] = [b.input_ids.length, b.input_ids[0].length, cfg.vocabSize];
    let worst = 0;
    for (let i = 0; i < B; i++) {
      const pad = Tm - seqs[i].length;
      const r = ref.subarray((i * Tm + pad) * V, (i + 1) * Tm * V);
      worst = Math.max(worst, maxAbs(got[i], r));
    }
    t.ok(worst <= TOL, `batch logits max abs ${worst.toExponential(2)}`);
  });

  t.test(`${name} greedy continuations (16 steps, KV cache, concurrent requests)`, async (t) => {
    const m = await loadDecoder(dir, { kv: { memory: '8MiB' } });
    const runs = cases.prompts.map((p: { input_ids: number[] }) =>
      m.generate({ prompt_ids: p.input_ids, max_tokens: 16, temperature: 0, stop_at_eos: false }).result);
    const res = await Promise.all(runs);
    cases.prompts.forEach((p: { name: string; greedy: { new_ids: number[] } }, i: number) => {
      t.same(res[i].tokenIds, p.greedy.new_ids, `${p.name}`);
      t.equal(res[i].finish_reason, 'length');
      t.equal(res[i].usage.completion_tokens, 16);
    });
  });
}

t.test('llama-tiny bf16 weights, fp32 compute', async (t) => {
  const dir = join(goldens, 'llama-tiny');
  const cases = readCases(dir);
  const expected = new SafetensorsFile(join(dir, 'expected.safetensors'));
  const cfg = loadDecoderConfig(dir);
  const src = SafetensorsCheckpoint.open(join(dir, cases.bf16.weights)) as unknown as TensorSource;
  for (const dtype of ['bf16', 'f32'] as const) {
    const model = await buildNativeDecoder(cfg, src, { dtype });
    t.equal(model.weightDtype, dtype === 'bf16' ? 'BF16' : 'F32');
    for (const p of cases.bf16.bf16_weights_fp32_compute.prompts) {
      const [got] = await forwardAll(model, cfg, [p.input_ids]);
      const d = maxAbs(got, expected.float32(p.logits_key));
      t.ok(d <= TOL, `${dtype} kept, ${p.name}: max abs ${d.toExponential(2)}`);
    }
  }
  const auto = await buildNativeDecoder(cfg, src);
  t.equal(auto.weightDtype, 'BF16', 'auto keeps bf16 checkpoints in bf16');
});

t.test('llama-tiny bf16 weights: greedy through the scheduler', async (t) => {
  const dir = join(goldens, 'llama-tiny');
  const cases = readCases(dir);
  // loadDecoder reads model.safetensors; build a DecoderModel over the bf16 file instead
  const { DecoderModel } = await import('../../src/runtime/generate.ts');
  const { loadGenerationConfig } = await import('../../src/formats/hf-config.ts');
  const { Tokenizer } = await import('../../src/tokenize/tokenizer.ts');
  const cfg = loadDecoderConfig(dir);
  const native = await buildNativeDecoder(cfg, SafetensorsCheckpoint.open(join(dir, cases.bf16.weights)) as unknown as TensorSource, { dtype: 'bf16' });
  const m = new DecoderModel('bf16', cfg, loadGenerationConfig(dir), await Tokenizer.fromDir(dir), native, { kv: { memory: '4MiB' } });
  for (const p of cases.bf16.bf16_weights_fp32_compute.prompts) {
    const r = await m.generate({ prompt_ids: p.input_ids, max_tokens: 16, temperature: 0, stop_at_eos: false }).result;
    t.same(r.tokenIds, p.greedy.new_ids, p.name);
  }
});

t.test('sliding window (Mistral): positions inside the window are unchanged, later ones differ', async (t) => {
  const dir = join(goldens, 'mistral-tiny');
  const cases = readCases(dir);
  const base = loadDecoderConfig(dir);
  const ids: number[] = cases.prompts[3].input_ids;
  const full = await buildNativeDecoder(base, SafetensorsCheckpoint.open(dir) as unknown as TensorSource);
  const win = await buildNativeDecoder({ ...base, slidingWindow: 8 }, SafetensorsCheckpoint.open(dir) as unknown as TensorSource);
  const [a] = await forwardAll(full, base, [ids]);
  const [b] = await forwardAll(win, base, [ids]);
  const V = base.vocabSize;
  t.equal(maxAbs(a.subarray(0, 8 * V), b.subarray(0, 8 * V)), 0, 'first 8 positions identical');
  t.ok(maxAbs(a.subarray(8 * V), b.subarray(8 * V)) > 1e-3, 'later positions see fewer keys');
  const big = await buildNativeDecoder({ ...base, slidingWindow: 4096 }, SafetensorsCheckpoint.open(dir) as unknown as TensorSource);
  const [c] = await forwardAll(big, base, [ids]);
  t.equal(maxAbs(a, c), 0, 'a window longer than the sequence changes nothing');
});

t.test('weights given as row blocks are joined natively; wrong sizes are refused', async (t) => {
  const dir = join(goldens, 'llama-tiny');
  const cfg = loadDecoderConfig(dir);
  const ck = SafetensorsCheckpoint.open(dir);
  const model = await buildNativeDecoder(cfg, ck as unknown as TensorSource); // q;k;v and gate;up go as parts
  const { NativeDecoder } = await import('../../src/models/decoder/native-model.ts');
  const bad = new NativeDecoder(cfg, 'F32');
  const D = cfg.hiddenSize, Nq = cfg.numHeads * cfg.headDim, Nkv = cfg.numKvHeads * cfg.headDim;
  const q = ck.get('model.layers.0.self_attn.q_proj.weight').bytes, k = ck.get('model.layers.0.self_attn.k_proj.weight').bytes;
  await t.rejects(bad.loadWeights([{ name: 'layers.0.qkv', dtype: 'F32', data: [q, k], rows: Nq + 2 * Nkv, cols: D }]), /bytes for/, 'a missing block is a size error');
  t.ok(model.weightBytes > 0);
});
