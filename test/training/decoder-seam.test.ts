// The decoder training seam (native/train/llama_train.h): forward keeping activations and returning
// per-token log-probabilities, backward from the loss's gradient w.r.t. them. Checked against the
// PyTorch/PEFT lora-grad golden (SFT expressed as −mean logp), the adapter-off forward against a graph
// without LoRA, and a weighted log-prob objective against finite differences.
import t from 'tap';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadDecoderConfig } from '../../src/formats/hf-config.ts';
import { SafetensorsCheckpoint, SafetensorsFile, toFloat32 } from '../../src/formats/safetensors.ts';
import { DecoderTrainGraph } from '../../src/training/native.ts';
import { readPeftAdapter } from '../../src/runtime/adapters.ts';

const golden = join(import.meta.dirname, '../../../shared/goldens/lora-grad');
const base = join(golden, '../llama-tiny');
const cases = JSON.parse(readFileSync(join(golden, 'cases.json'), 'utf8'));
const config = loadDecoderConfig(base);
const ckpt = SafetensorsCheckpoint.open(base);
const tensors: Record<string, Float32Array> = {};
for (const n of ckpt.names()) tensors[n] = toFloat32(ckpt.get(n));
const ad = readPeftAdapter(join(golden, 'adapter'), config);
const loras = ad.modules.map((m) => ({
  layer: m.layer,
  module: m.module,
  r: m.r,
  scale: m.scale,
  dropout: 0,
  A: m.A,
  B: m.B,
}));
const ids: number[] = cases.sequence.input_ids;
const lab: number[] = cases.sequence.labels;
const T = ids.length;
const batch = {
  tokens: Int32Array.from(ids),
  positions: Int32Array.from({ length: T }, (_, i) => i),
  labels: Int32Array.from({ length: T }, (_, i) => (i + 1 < T ? lab[i + 1] : -100)),
  seqOff: Int32Array.from([0, T]),
};
const maxAbs = (a: Float32Array, b: Float32Array) => a.reduce((m, x, i) => Math.max(m, Math.abs(x - b[i])), 0);

t.test('SFT as −mean logp through forward/backward matches the golden', async (t) => {
  const g = DecoderTrainGraph.create(config, tensors, loras);
  const { logp } = await g.forward(batch);
  const n = batch.labels.filter((l) => l >= 0).length;
  const loss = -logp.reduce((s, x) => s + x, 0) / n;
  t.ok(Math.abs(loss - cases.expected.loss) <= 1e-5, `loss ${loss} vs ${cases.expected.loss}`);
  t.equal(logp[T - 1], 0, 'rows without a label have logp 0');
  await g.backward(Float32Array.from(batch.labels, (l) => (l >= 0 ? -1 / n : 0)));
  const expected = new SafetensorsFile(join(golden, 'expected.safetensors'));
  for (const gr of cases.expected.gradients as { adapter_key: string; grad_key: string }[]) {
    const ref = toFloat32(expected.tensors.get(gr.grad_key)!);
    const mref = ref.reduce((m, x) => Math.max(m, Math.abs(x)), 0);
    const d = maxAbs(g.grad(gr.adapter_key), ref);
    t.ok(d <= 1e-4 * mref, `${gr.adapter_key} max abs diff ${d.toExponential(2)} (max |ref| ${mref.toExponential(2)})`);
  }
  await t.rejects(g.backward(new Float32Array(T)), /backward without a forward/, 'a backward consumes its forward');
});

t.test('lora: false is the base model alone and keeps pending activations', async (t) => {
  const g = DecoderTrainGraph.create(config, tensors, loras);
  const plain = DecoderTrainGraph.create(config, tensors, []);
  const withAd = await g.forward(batch);
  const off = await g.forward(batch, { lora: false, keep: false });
  const ref = await plain.forward(batch, { keep: false });
  t.ok(maxAbs(off.logp, ref.logp) < 1e-6, 'adapter off = no adapter');
  t.ok(maxAbs(withAd.logp, off.logp) > 1e-3, 'the adapter changes the log-probs');
  await g.backward(new Float32Array(T).fill(0.1)); // the kept forward is still there
});

t.test('backward of Σ w·logp matches finite differences', async (t) => {
  const w = Float32Array.from({ length: T }, (_, i) => Math.sin(i + 1));
  const g = DecoderTrainGraph.create(config, tensors, loras);
  await g.forward(batch);
  await g.backward(w);
  const obj = async () => (await g.forward(batch, { keep: false })).logp.reduce((s, x, i) => s + w[i] * x, 0);
  const name = g.params().filter((p) => p.trainable)[1].name;
  const grad = g.grad(name);
  const v = g.get(name);
  const eps = 1e-2;
  for (const i of [0, 3, 17]) {
    const orig = v[i];
    v[i] = orig + eps;
    g.set(name, v);
    const up = await obj();
    v[i] = orig - eps;
    g.set(name, v);
    const dn = await obj();
    v[i] = orig;
    g.set(name, v);
    const fd = (up - dn) / (2 * eps);
    t.ok(
      Math.abs(fd - grad[i]) <= 2e-3 * Math.max(1, Math.abs(fd)),
      `${name}[${i}]: analytic ${grad[i].toExponential(3)} vs fd ${fd.toExponential(3)}`,
    );
  }
});

t.test('buffers reused across calls: a second batch gives what a fresh graph gives', async (t) => {
  // The graph keeps its activation and gradient buffers between calls (llama::Work, Acts): a smaller batch
  // after a larger one reads stale memory wherever a buffer is not written in full before it is read (the
  // head's dx of rows without a label, attention rows). Batch 2: two sequences, half the rows unlabelled.
  const h = Math.floor(T / 2);
  const small = {
    tokens: batch.tokens.slice(0, T - 2),
    positions: Int32Array.from({ length: T - 2 }, (_, i) => (i < h ? i : i - h)),
    labels: Int32Array.from({ length: T - 2 }, (_, i) => (i % 2 === 0 && i + 1 < T - 2 ? batch.tokens[i + 1] : -100)),
    seqOff: Int32Array.from([0, h, T - 2]),
  };
  const dl = Float32Array.from(small.labels, (l, i) => (l >= 0 ? Math.cos(i) : 0));
  const used = DecoderTrainGraph.create(config, tensors, loras);
  const fresh = DecoderTrainGraph.create(config, tensors, loras);
  await used.forward(batch);
  await used.forward(batch, { lora: false, keep: false });
  await used.backward(Float32Array.from(batch.labels, (l) => (l >= 0 ? 1 : 0)));
  used.zeroGrad();
  const a = await used.forward(small);
  const aRef = await used.forward(small, { lora: false, keep: false });
  await used.backward(dl);
  const b = await fresh.forward(small);
  const bRef = await fresh.forward(small, { lora: false, keep: false });
  await fresh.backward(dl);
  t.equal(maxAbs(a.logp, b.logp), 0, 'policy log-probs');
  t.equal(maxAbs(aRef.logp, bRef.logp), 0, 'reference log-probs');
  for (const p of used.params().filter((p) => p.trainable))
    t.equal(maxAbs(used.grad(p.name), fresh.grad(p.name)), 0, p.name);
});
