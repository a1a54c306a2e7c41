// A prompt shared by several completions (DPO's chosen and rejected, a GRPO group) is packed once
// (packScored, DecoderBatch.seqParent) and no completion's last token is packed (it scores nothing): the
// log-probabilities and LoRA gradients of packScored, shared and unshared, equal those of every token packed sequence
// by sequence (an independent packing written here), for fp32 and bf16 base weights, with fewer rows computed; a bad
// parent list is refused.
import t from 'tap';
import { join } from 'node:path';
import { loadDecoderConfig } from '../../src/formats/hf-config.ts';
import { SafetensorsCheckpoint, toFloat32 } from '../../src/formats/safetensors.ts';
import { DecoderTrainGraph, type DecoderBatch } from '../../src/training/native.ts';
import { initLoras } from '../../src/training/decoder-trainer.ts';
import { packScored, type ScoredSequence } from '../../src/training/algorithms/prompt.ts';

const base = join(import.meta.dirname, '../../../shared/goldens/llama-tiny');
const config = loadDecoderConfig(base);
const ckpt = SafetensorsCheckpoint.open(base);
const f32: Record<string, Float32Array> = {};
for (const n of ckpt.names()) f32[n] = toFloat32(ckpt.get(n));
const bf16: Record<string, Float32Array | Uint16Array> = {};
for (const [n, w] of Object.entries(f32)) {
  const u = new Uint32Array(w.buffer, w.byteOffset, w.length);
  bf16[n] = n.endsWith('norm.weight') ? w : Uint16Array.from(u, (x) => (x + 0x7fff + ((x >>> 16) & 1)) >>> 16);
}
const V = config.vocabSize;
let seed = 3;
const ids = (n: number) => Array.from({ length: n }, () => ((seed = (seed * 1103515245 + 12345) >>> 0) % (V - 3)) + 3);
const p1 = ids(7),
  p2 = ids(5);
const seqs: ScoredSequence[] = [
  { prompt: p1, completion: ids(4) },
  { prompt: p1, completion: ids(6) },
  { prompt: p1, completion: [] },
  { prompt: p2, completion: ids(3) },
  { prompt: p1, completion: ids(2) },
  { prompt: p1, completion: ids(5) },
];
const targets = ['q_proj', 'k_proj', 'v_proj', 'o_proj', 'gate_proj', 'up_proj', 'down_proj'];

// every token of every sequence, one sequence after another (the packing TRL computes): the reference
function packEvery(xs: ScoredSequence[]) {
  const ids = xs.flatMap((x) => [...x.prompt, ...x.completion]);
  const labels = new Int32Array(ids.length).fill(-100);
  const rows: number[][] = [];
  const seqOff = [0];
  let r = 0;
  for (const x of xs) {
    const n = x.prompt.length + x.completion.length;
    rows.push(x.completion.map((_, k) => r + x.prompt.length - 1 + k));
    for (const row of rows.at(-1)!) labels[row] = ids[row + 1];
    r += n;
    seqOff.push(r);
  }
  const positions = Int32Array.from(xs.flatMap((x) => [...x.prompt, ...x.completion].map((_, t) => t)));
  const batch: DecoderBatch = { tokens: Int32Array.from(ids), positions, labels, seqOff: Int32Array.from(seqOff) };
  return { batch, rows, tokens: ids.length };
}

async function run(tensors: Record<string, Float32Array | Uint16Array>, share: boolean | 'every') {
  // B initialised non-zero so every LoRA tensor gets a gradient
  const loras = initLoras(config, targets, 4, 8, 0, 1).map((l) => ({
    ...l,
    B: Float32Array.from({ length: l.B.length }, (_, i) => 0.05 * Math.sin(i + 1)),
  }));
  const g = DecoderTrainGraph.create(config, tensors, loras);
  const { batch, rows, tokens } = share === 'every' ? packEvery(seqs) : packScored(seqs, share);
  const { logp } = await g.forward(batch, { dropout: false });
  const dlogp = new Float32Array(batch.tokens.length);
  rows.forEach((rs, i) => rs.forEach((r, k) => (dlogp[r] = Math.sin(1 + i * 7 + k))));
  await g.backward(dlogp);
  const grads: Record<string, Float32Array> = {};
  for (const p of g.params().filter((p) => p.trainable)) grads[p.name] = g.grad(p.name);
  return { R: batch.tokens.length, tokens, batch, logps: rows.map((rs) => rs.map((r) => logp[r])), grads };
}

for (const [name, tensors] of [
  ['fp32', f32],
  ['bf16', bf16],
] as const) {
  t.test(`${name} weights: shared prompts give the log-probs and LoRA gradients of every token packed`, async (t) => {
    const a = await run(tensors, 'every');
    const withCompletion = seqs.filter((x) => x.completion.length).length;
    t.equal(a.R, a.tokens);
    for (const share of [false, true]) {
      const b = await run(tensors, share);
      t.equal(b.tokens, a.tokens, 'the tokens a step trains on do not depend on the packing');
      if (share) {
        t.ok(b.R < a.R - withCompletion, `shared: rows ${b.R} < ${a.R - withCompletion}`);
        t.same(b.batch.seqParent && Array.from(b.batch.seqParent), [-1, 0, 0, 0, -1, -1, 5, 5]);
      } else {
        t.equal(b.R, a.R - withCompletion, "unshared: every token but each completion's last");
      }
      t.same(
        b.logps.map((l) => l.length),
        a.logps.map((l) => l.length),
        'same completion tokens scored',
      );
      const dl = Math.max(...a.logps.flatMap((l, i) => l.map((x, k) => Math.abs(x - b.logps[i][k]))));
      t.ok(dl <= 1e-5, `share ${share}: log-prob max abs diff ${dl.toExponential(2)}`);
      let n = 0;
      for (const [k, ga] of Object.entries(a.grads)) {
        const gb = b.grads[k];
        const m = ga.reduce((s, x) => Math.max(s, Math.abs(x)), 0);
        const d = ga.reduce((s, x, i) => Math.max(s, Math.abs(x - gb[i])), 0);
        if (!(m > 0 && d <= 1e-4 * m))
          t.fail(`${k}: max abs diff ${d.toExponential(2)} (max |g| ${m.toExponential(2)})`);
        n++;
      }
      t.ok(n >= targets.length * config.numLayers, `share ${share}: ${n} LoRA gradients match within 1e-4 relative`);
    }
  });
}

t.test('a parent that is not an earlier sequence without a parent is refused', async (t) => {
  const g = DecoderTrainGraph.create(config, f32, initLoras(config, ['q_proj'], 4, 8, 0, 1));
  const { batch } = packScored(seqs, true);
  for (const bad of [[-1, 2, 0, 0, -1, -1, 5, 5], [-1, 0, 1, 0, -1, -1, 5, 5], [-1, 0, 0]])
    await t.rejects(g.forward({ ...batch, seqParent: Int32Array.from(bad) }), /parent/);
});
