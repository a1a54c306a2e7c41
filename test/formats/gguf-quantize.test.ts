// Loom's llama-quantize-style quantizers (src/formats/gguf-quantize.ts): Q4_K and Q6_K blocks that the
// gguf-py-exact dequantizer reads back close to the input, with the error llama.cpp's scale / min search gives
// (below the plain max-abs / min-max choice of test/formats/ggml-quantize.ts on the same data), Q5_0 as
// quantize_row_q5_0_ref, and the Q4_K_M tensor types as llama-quantize picks them.
import t from 'tap';
import { dequantize, GgmlType } from '../../src/formats/gguf.ts';
import { ggufQuantType, quantizeQ4_K, quantizeQ5_0, quantizeQ6_K } from '../../src/formats/gguf-quantize.ts';
import { quantizeQ4K, quantizeQ6K } from './ggml-quantize.ts';
import { addon } from '../../src/native/addon.ts';

let seed = 99;
const rnd = () => {
  seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
  return (seed >>> 8) / (1 << 24) - 0.5;
};
/** Gaussian-ish weights (sum of 4 uniforms) with a few outliers, in rows of K. */
function weights(n: number): Float32Array {
  return Float32Array.from({ length: n }, (_, i) => (rnd() + rnd() + rnd() + rnd()) * 0.05 * (i % 61 === 0 ? 6 : 1));
}
const back = (type: GgmlType, blocks: Uint8Array, n: number) =>
  dequantize({ name: 'w', type, ne: [n], shape: [n], offset: 0, bytes: blocks });
function rmse(a: Float32Array, b: Float32Array): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += (a[i] - b[i]) ** 2;
  return Math.sqrt(s / a.length);
}
function rms(a: Float32Array): number {
  let s = 0;
  for (const v of a) s += v * v;
  return Math.sqrt(s / a.length);
}

t.test('Q4_K: layout read back by the dequantizer, error below the plain min-max choice', async (t) => {
  const x = weights(256 * 64);
  const q = quantizeQ4_K(x);
  t.equal(q.length, 64 * 144);
  const e = rmse(back(GgmlType.Q4_K, q, x.length), x), plain = rmse(back(GgmlType.Q4_K, quantizeQ4K(x), x.length), x);
  t.ok(e < 0.12 * rms(x), `relative RMSE ${(e / rms(x)).toFixed(4)} (4-bit levels)`);
  t.ok(e < plain, `weighted search ${e.toExponential(3)} < plain ${plain.toExponential(3)}`);
  // all-zero and constant blocks
  const z = back(GgmlType.Q4_K, quantizeQ4_K(new Float32Array(256)), 256);
  t.ok(z.every((v) => v === 0), 'zeros stay zeros');
});

t.test('Q4_K: the native quantizer (what convertHfToGguf calls) writes the reference\'s bytes', async (t) => {
  // Gaussian-ish rows with outliers, all-positive and all-negative sub-blocks, zeros, constants, tiny and large
  // magnitudes, exact halves (round-half-to-even cases)
  const n = 256 * 48;
  const x = weights(n);
  for (let i = 0; i < 256; i++) x[256 + i] = Math.abs(x[256 + i]);
  for (let i = 0; i < 256; i++) x[512 + i] = -Math.abs(x[512 + i]);
  x.fill(0, 768, 1024);
  x.fill(0.25, 1024, 1280);
  for (let i = 1280; i < 1536; i++) x[i] *= 1e-6;
  for (let i = 1536; i < 1792; i++) x[i] *= 1e4;
  for (let i = 1792; i < 2048; i++) x[i] = ((i % 31) - 15) * 0.5;
  const ref = quantizeQ4_K(x), nat = addon.quantizeQ4K(x) as Uint8Array;
  t.equal(nat.length, ref.length);
  let diff = 0;
  for (let i = 0; i < ref.length; i++) if (ref[i] !== nat[i]) diff++;
  t.equal(diff, 0, `${diff} of ${ref.length} bytes differ`);
  t.throws(() => addon.quantizeQ4K(new Float32Array(100)), /multiple of 256/);
});

t.test('Q6_K: layout read back by the dequantizer, error below the plain max-abs choice', async (t) => {
  const x = weights(256 * 64);
  const q = quantizeQ6_K(x);
  t.equal(q.length, 64 * 210);
  const e = rmse(back(GgmlType.Q6_K, q, x.length), x), plain = rmse(back(GgmlType.Q6_K, quantizeQ6K(x), x.length), x);
  t.ok(e < 0.03 * rms(x), `relative RMSE ${(e / rms(x)).toFixed(4)} (6-bit levels)`);
  t.ok(e < plain, `search ${e.toExponential(3)} < plain ${plain.toExponential(3)}`);
  const z = back(GgmlType.Q6_K, quantizeQ6_K(new Float32Array(256)), 256);
  t.ok(z.every((v) => v === 0), 'zeros stay zeros');
});

t.test('Q5_0: d = max/-16 per 32 values, levels 0..31', async (t) => {
  const x = weights(32 * 64);
  const y = back(GgmlType.Q5_0, quantizeQ5_0(x), x.length);
  let bad = 0;
  for (let b = 0; b < 64; b++) {
    let amax = 0;
    for (let i = 0; i < 32; i++) amax = Math.max(amax, Math.abs(x[32 * b + i]));
    const level = amax / 16;
    for (let i = 0; i < 32; i++) {
      // levels -16..15 with -16 at the block's largest |x|: values past 15 levels on the other side clip
      const err = Math.abs(y[32 * b + i] - x[32 * b + i]);
      const allowed = Math.abs(x[32 * b + i]) <= 15 * level ? level / 2 : Math.abs(x[32 * b + i]) - 15 * level;
      if (err > allowed + level * 0.01) bad++;  // + the f16 rounding of d
    }
  }
  t.equal(bad, 0, 'every value within half a level (or clipped at 15 levels)');
});

t.test('Q4_K_M tensor types as llama-quantize picks them', async (t) => {
  // 24 layers: use_more_bits = the first 3, the last 3, and every third from layer 5
  const more = Array.from({ length: 24 }, (_, i) => i)
    .filter((i) => ggufQuantType('Q4_K_M', `blk.${i}.attn_v.weight`, 1024, 24, true) === 'Q6_K');
  t.same(more, [0, 1, 2, 5, 8, 11, 14, 17, 20, 21, 22, 23]);
  t.equal(ggufQuantType('Q4_K_M', 'blk.5.ffn_down.weight', 2816, 24, true), 'Q6_K');
  t.equal(ggufQuantType('Q4_K_M', 'blk.6.ffn_down.weight', 2816, 24, true), 'Q4_K');
  t.equal(ggufQuantType('Q4_K_M', 'blk.0.attn_q.weight', 1024, 24, true), 'Q4_K');
  t.equal(ggufQuantType('Q4_K_M', 'output.weight', 1024, 24, true), 'Q6_K');
  t.equal(ggufQuantType('Q4_K_M', 'token_embd.weight', 1024, 24, true), 'Q4_K', 'embedding with an output matrix');
  t.equal(ggufQuantType('Q4_K_M', 'token_embd.weight', 1024, 24, false), 'Q6_K', 'tied embedding: the output rule');
  // rows that are not a multiple of 256 (Qwen2.5-0.5B's 896): Q4_K → Q5_0, Q6_K → Q8_0, output → Q8_0
  t.equal(ggufQuantType('Q4_K_M', 'blk.3.attn_q.weight', 896, 24, false), 'Q5_0');
  t.equal(ggufQuantType('Q4_K_M', 'blk.0.attn_v.weight', 896, 24, false), 'Q8_0');
  t.equal(ggufQuantType('Q4_K_M', 'token_embd.weight', 896, 24, false), 'Q8_0');
  t.equal(ggufQuantType('Q4_K_M', 'blk.0.attn_q.weight', 100, 24, false), 'F16');
  t.equal(ggufQuantType('Q8_0', 'output.weight', 1024, 24, true), 'Q8_0');
  t.equal(ggufQuantType('Q6_K', 'blk.0.ffn_up.weight', 1024, 24, true), 'Q6_K');
});
