// Decoder LoRA backward against ../shared/goldens/lora-grad (PEFT + PyTorch reference): loss, logits
// and every LoRA gradient tensor.
import t from 'tap';
import { join } from 'node:path';
import { loadDecoderConfig } from '../../src/formats/hf-config.ts';
import { SafetensorsCheckpoint, SafetensorsFile, toFloat32 } from '../../src/formats/safetensors.ts';
import { DecoderTrainGraph } from '../../src/training/native.ts';
import { readPeftAdapter } from '../../src/runtime/adapters.ts';
import { forEachIsa } from '../../src/native/cpu.ts';

const golden = join(import.meta.dirname, '../../../shared/goldens/lora-grad');
const base = join(golden, '../llama-tiny');
const cases = JSON.parse((await import('node:fs')).readFileSync(join(golden, 'cases.json'), 'utf8'));

const maxAbs = (a: Float32Array, b: Float32Array) => {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
};

t.test('LoRA gradients match the PyTorch/PEFT reference', async (t) => {
  const config = loadDecoderConfig(base);
  const ckpt = SafetensorsCheckpoint.open(base);
  const tensors: Record<string, Float32Array> = {};
  for (const n of ckpt.names()) tensors[n] = toFloat32(ckpt.get(n));
  const ad = readPeftAdapter(join(golden, 'adapter'), config);
  const loras = ad.modules.map((m) => ({ layer: m.layer, module: m.module, r: m.r, scale: m.scale, dropout: 0, A: m.A, B: m.B }));
  const expected = new SafetensorsFile(join(golden, 'expected.safetensors'));
  const ids: number[] = cases.sequence.input_ids;
  const lab: number[] = cases.sequence.labels;
  const T = ids.length;
  const labels = Int32Array.from({ length: T }, (_, i) => (i + 1 < T ? lab[i + 1] : -100));
  await forEachIsa(async (isa) => {
    const g = DecoderTrainGraph.create(config, tensors, loras);
    const res = await g.step({ tokens: Int32Array.from(ids), positions: Int32Array.from({ length: T }, (_, i) => i), labels, seqOff: Int32Array.from([0, T]) }, { wantLogits: true });
    t.ok(Math.abs(res.loss - cases.expected.loss) <= 1e-5, `${isa}: loss ${res.loss} vs ${cases.expected.loss}`);
    t.equal(res.counted, 7);
    const logits = toFloat32(expected.tensors.get('logits')!);
    t.ok(maxAbs(res.logits!, logits) <= 1e-4, `${isa}: logits max abs diff ${maxAbs(res.logits!, logits)}`);
    for (const gr of cases.expected.gradients as { adapter_key: string; grad_key: string }[]) {
      const ref = toFloat32(expected.tensors.get(gr.grad_key)!);
      const got = g.grad(gr.adapter_key);
      let mref = 0;
      for (const v of ref) mref = Math.max(mref, Math.abs(v));
      const d = maxAbs(got, ref);
      t.ok(d <= 1e-4 * mref, `${isa}: ${gr.adapter_key} max abs diff ${d.toExponential(2)} (max |ref| ${mref.toExponential(2)})`);
    }
    // Base weights are frozen: only the 8 LoRA tensors are trainable.
    t.equal(g.params().filter((p) => p.trainable).length, 8);
  });
});

// precision bf16: the frozen base's products (every layer and lm_head; fp32 or bf16 base weights) in bf16 compute,
// LoRA's rank-r products in fp32. The same sequence's loss and LoRA gradients against fp32 compute on the same base.
t.test('precision bf16: LoRA gradients close to fp32 compute, fp32 and bf16 base weights', async (t) => {
  const { baseTensors } = await import('../../src/training/decoder-trainer.ts');
  const config = loadDecoderConfig(base);
  const ad = readPeftAdapter(join(golden, 'adapter'), config);
  const loras = ad.modules.map((m) => ({ layer: m.layer, module: m.module, r: m.r, scale: m.scale, dropout: 0, A: m.A, B: m.B }));
  const ids: number[] = cases.sequence.input_ids;
  const lab: number[] = cases.sequence.labels;
  const T = ids.length;
  const batch = {
    tokens: Int32Array.from(ids), positions: Int32Array.from({ length: T }, (_, i) => i),
    labels: Int32Array.from({ length: T }, (_, i) => (i + 1 < T ? lab[i + 1] : -100)), seqOff: Int32Array.from([0, T]),
  };
  const keys = (cases.expected.gradients as { adapter_key: string }[]).map((g) => g.adapter_key);
  for (const dtype of ['f32', 'bf16'] as const) {
    const tensors = baseTensors(base, config, dtype);
    const run = async (precision: 'fp32' | 'bf16') => {
      const g = DecoderTrainGraph.create(config, tensors, loras, precision);
      const res = await g.step(batch);
      return { loss: res.loss, grads: keys.map((k) => g.grad(k)) };
    };
    const f = await run('fp32'), b = await run('bf16');
    let d = 0, n = 0;
    for (let i = 0; i < keys.length; i++)
      for (let k = 0; k < f.grads[i].length; k++) (d += (b.grads[i][k] - f.grads[i][k]) ** 2), (n += f.grads[i][k] ** 2);
    const rel = Math.sqrt(d / n);
    t.comment(`${dtype} base: loss ${b.loss} (bf16) vs ${f.loss} (fp32); LoRA gradients ${rel.toExponential(2)} relative L2`);
    t.ok(Math.abs(b.loss - f.loss) <= 5e-3 * Math.abs(f.loss), `${dtype} base: loss within 0.5%`);
    t.ok(d > 0 && rel <= 0.02, `${dtype} base: LoRA gradients within 2% (L2) of fp32 compute`);
  }
});
