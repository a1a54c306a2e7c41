// Quantized linear kernels (native/kernels/quant*.cc) against the dequantized f32 product, for every kept ggml
// type on every ISA the CPU supports (the AVX-512 VNNI path through `npm run test:avx512-emu` on CPUs without
// it). Random blocks (random quant bytes, random f16 / f32 scales); the reference dequantizes them (the
// gguf-py-exact dequantizer, test/formats/gguf-quants.test.ts) and multiplies in double. For M <= quantSmallM
// the activations are quantized per 32 values to int8 (d = amax/127, q = round(x/d)), so the error is bounded
// by Σ_k |w_k|·d_b(k)/2 (+ f32 summation); for larger M (the prefill path: dequantized panels through the f32
// GEMM) only the f32 summation bound holds. Q8_0, Q5_0, Q4_K, Q5_K and Q6_K run twice: as the file lays them out
// and as weight_pack keeps them (quant_pack: groups of 4 rows interleaved, with their own kernels and dequantizer).
import t from 'tap';
import { addon } from '../../src/native/addon.ts';
import { forEachIsa } from '../../src/native/cpu.ts';
import { dequantize, GgmlType } from '../../src/formats/gguf.ts';
import { KEPT_TYPES as TYPES, LAYOUT, randomBlocks, rng, type KeptType as QType } from './random-blocks.ts';

const rnd = rng(4242);

/** N rows of K values as random blocks of `type` (row magnitudes spread over 2 decades) and their f32 values. */
function randomWeights(type: QType, N: number, K: number): { blocks: Uint8Array; w: Float32Array } {
  const per = LAYOUT[type].values === 256 ? 64 : 16;
  const blocks = randomBlocks(type, N, K, rnd, () => 10 ** (rnd() * 2) / per);
  const w = dequantize({ name: 'w', type: GgmlType[type], ne: [K, N], shape: [N, K], offset: 0, bytes: blocks });
  return { blocks, w };
}

const PACKED = new Set<QType>(['Q8_0', 'Q5_0', 'Q4_K', 'Q5_K', 'Q6_K']);  // the types quant_pack re-lays

function check(type: QType, M: number, N: number, K: number, packed = false): { worst: number; maxErr: number } {
  const { blocks, w } = randomWeights(type, N, K);
  const x = new Float32Array(M * K);
  for (let i = 0; i < x.length; i++) x[i] = rnd() * 4 * (i % 97 === 0 ? 8 : 1);  // a few outliers per block
  const y = addon.quantLinear(type, blocks, N, K, x, M, packed) as Float32Array;
  // more rows than quantSmallM: the dequantized panels, or the int8 path 32 rows at a time (AVX2, AVX-512 VNNI; packed)
  const int8 = M <= (addon.quantSmallM as number) || (addon.quantPrefillInt8(type, packed) as boolean);
  let worst = 0, maxErr = 0;
  for (let m = 0; m < M; m++) {
    const d = new Float64Array(K / 32);
    for (let b = 0; b < K / 32; b++) {
      let a = 0;
      for (let i = 0; i < 32; i++) a = Math.max(a, Math.abs(x[m * K + b * 32 + i]));
      d[b] = a / 127;
    }
    for (let n = 0; n < N; n++) {
      let ref = 0, mag = 0, qb = 0;
      for (let k = 0; k < K; k++) {
        const wv = w[n * K + k], xv = x[m * K + k];
        ref += wv * xv;
        mag += Math.abs(wv * xv);
        qb += Math.abs(wv) * d[k >> 5] / 2;
      }
      // f32 summation: per-block partial sums, offsets (Q4_0's -8, Q5_0's -16) and minimums subtracted in f32
      const bound = (int8 ? qb * (1 + 1e-5) : 0) + (K + 64) * 2 ** -23 * 4 * (mag + qb);
      const err = Math.abs(y[m * N + n] - ref);
      worst = Math.max(worst, err / bound);
      maxErr = Math.max(maxErr, err / (mag || 1));
    }
  }
  return { worst, maxErr };
}

t.test('quantized linear matches the dequantized product within the activation-quantization bound', async (t) => {
  await forEachIsa((isa) => {
    for (const type of TYPES) {
      const big = LAYOUT[type].values === 256;
      // M = 1 (decode; 352 values are 11 blocks of 32: AVX-512's one-row kernels take blocks in pairs, and a last
      // one alone), small batches up to quantSmallM (8- and 4-row tiles of W, odd rows of x and single-row
      // tails: N = 45 is 5 tiles of 8, one of 4 and one row; on AVX-512 packed Q8_0 from 6 rows of x the rows in
      // lanes: 6 and 16, one vector of rows, over several 64-column chunks), larger M (dequantized panels)
      const small = addon.quantSmallM as number;
      for (const [M, N, K] of [[1, 37, 512], [1, 45, big ? 768 : 352], [3, 64, 256], [6, 42, 1024], [8, 19, big ? 768 : 352], [12, 70, 512],
        [16, 134, 256], [17, 45, 512], [small, 13, 256], [small + 3, 21, 512], [small + 3, 134, big ? 256 : 64]])
        for (const packed of PACKED.has(type) ? [false, true] : [false]) {
          const { worst, maxErr } = check(type, M, N, K, packed);
          const name = `${isa} ${type}${packed ? ' packed' : ''} ${M}x${N}x${K}`;
          t.ok(worst <= 1, `${name}: error / bound ${worst.toFixed(3)} <= 1`);
          // the int8 path really quantizes the activations (a float path would be ~1e-7 of the magnitude)
          const what = `${name}: activations quantized (${maxErr.toExponential(1)})`;
          if (M <= (addon.quantSmallM as number) || addon.quantPrefillInt8(type, packed)) t.ok(maxErr > 1e-5, what);
        }
    }
  });
});

t.test('an output far larger than the L2 (the logits of a decode step: written by streaming stores)', async (t) => {
  // 32 rows of x against 33,028 rows of W: 4.2 MB of y, over the 4 MB from which the rows of y stream; an odd
  // N in the file layout (a last span not a multiple of 4 columns), 2 threads' guided spans
  await forEachIsa((isa) => {
    for (const [type, packed, N] of [['Q8_0', true, 33028], ['Q6_K', true, 33028], ['Q8_0', false, 33027]] as const) {
      const { worst, maxErr } = check(type, addon.quantSmallM as number, N, type === 'Q6_K' ? 256 : 64, packed);
      const name = `${isa} ${type}${packed ? ' packed' : ''} 32x${N}`;
      t.ok(worst <= 1 && maxErr > 1e-5, `${name}: error / bound ${worst.toFixed(3)}`);
    }
  });
});

t.test('every ISA gives the same int8 result up to f32 summation order', async (t) => {
  for (const type of TYPES) {
    const { blocks } = randomWeights(type, 16, 1024);
    const x = new Float32Array(32 * 1024).map(() => rnd());
    // per (M, layout): every ISA's whole (M, 16) output; 8 and 32 rows take AVX-512's rows-in-lanes kernels for
    // the packed types, whose second 16-row vector only M = 32 reaches
    const runs = new Map<string, Float32Array[]>();
    await forEachIsa(() => {
      for (const M of [1, 2, 8, 32])
        for (const packed of PACKED.has(type) ? [false, true] : [false]) {
          const y = addon.quantLinear(type, blocks, 16, 1024, x.subarray(0, M * 1024), M, packed) as Float32Array;
          const key = `${M}${packed ? ' packed' : ''}`;
          runs.set(key, [...(runs.get(key) ?? []), y]);
        }
    });
    const ref = runs.get('1')![0];
    let worst = 0;
    const far = (a: number, b: number) => Math.abs(a - b) / (1 + Math.abs(b));
    for (const outs of runs.values())
      for (const o of outs) {
        for (let i = 0; i < o.length; i++) worst = Math.max(worst, far(o[i], outs[0][i]));  // across ISAs, all rows
        for (let i = 0; i < 16; i++) worst = Math.max(worst, far(o[i], ref[i]));  // row 0 across M and layouts
      }
    const n = [...runs.values()].reduce((a, o) => a + o.length, 0);
    t.ok(worst <= 1e-4, `${type}: ${n} runs (ISA × M × layout) agree in every row (worst ${worst.toExponential(1)})`);
  }
});

t.test('a stacked weight of parts of different types is one product: bias, beta, every row and column', async (t) => {
  // linear_quant_acts_parts, as a fused q/k/v or gate/up weight runs: x quantized once, the parts in one region, each
  // writing its columns; against each part alone (quantLinear) plus the bias and beta·y, on every ISA
  const K = 512;
  const spec: [QType, number, boolean][] = [['Q8_0', 20, true], ['Q6_K', 13, true], ['Q4_0', 7, false],
    ['Q4_K', 9, true], ['Q5_0', 0, true]];
  const parts = spec.map(([type, N, packed]) => [type, randomWeights(type, N, K).blocks, N, packed] as const);
  const Nt = spec.reduce((a, p) => a + p[1], 0);
  const x = new Float32Array(32 * K).map(() => rnd() * 2);
  const bias = new Float32Array(Nt).map(() => rnd());
  const y0 = new Float32Array(32 * Nt).map(() => rnd());
  await forEachIsa((isa) => {
    for (const M of [1, 7, 8, 32]) {
      const xs = x.subarray(0, M * K), y0s = y0.subarray(0, M * Nt);
      const y = addon.quantLinearParts(parts, K, xs, M, bias, y0s, 0.5) as Float32Array;
      let worst = 0;
      let n0 = 0;
      for (const [type, blocks, N, packed] of parts) {
        const alone = N > 0 ? addon.quantLinear(type, blocks, N, K, xs, M, packed) as Float32Array
          : new Float32Array(0);
        for (let m = 0; m < M; m++)
          for (let n = 0; n < N; n++) {
            const want = 0.5 * y0s[m * Nt + n0 + n] + alone[m * N + n] + bias[n0 + n];
            worst = Math.max(worst, Math.abs(y[m * Nt + n0 + n] - want) / (1 + Math.abs(want)));
          }
        n0 += N;
      }
      const what = `${isa} M = ${M}: ${parts.length} parts (${Nt} columns) as each alone`;
      t.ok(worst <= 1e-5, `${what} (worst ${worst.toExponential(1)})`);
    }
  });
});

t.test('bad shapes are clear errors', async (t) => {
  const { blocks } = randomWeights('Q8_0', 4, 64);
  t.throws(() => addon.quantLinear('Q8_0', blocks, 4, 48, new Float32Array(48), 1), /multiple of the block size/);
  t.throws(() => addon.quantLinear('Q8_0', blocks, 5, 64, new Float32Array(64), 1), /byte length/);
  t.throws(() => addon.quantLinear('Q3_K', blocks, 4, 64, new Float32Array(64), 1), /unsupported/);
});

t.test('activation quantization: q = round(x/d) to nearest even, d = amax/127, exactly on every path', async (t) => {
  // Q8_0 weights of the identity (row j: 1 at column j, block scale 1) give y[m][j] = d·q of x[m][j] exactly on
  // every kernel (one nonzero integer product, scaled by d·1), so y shows the quantized activations themselves
  const K = 32 * 20;  // 20 blocks: 16 at a time and a tail of 4 in the AVX-512 quantizer
  const blocks = new Uint8Array(K * (K / 32) * 34);
  const dv = new DataView(blocks.buffer);
  for (let j = 0; j < K; j++) {
    const row = j * (K / 32) * 34;
    for (let b = 0; b < K / 32; b++) dv.setUint16(row + b * 34, 0x3c00, true);  // f16 1.0
    blocks[row + Math.floor(j / 32) * 34 + 2 + (j % 32)] = 1;
  }
  const f = Math.fround;
  const roundEven = (v: number) => (Math.abs(v % 1) === 0.5 ? 2 * Math.round(v / 2) : Math.round(v));
  await forEachIsa((isa) => {
    for (const M of [1, 5, 8, 32]) {
      const x = new Float32Array(M * K);
      for (let i = 0; i < x.length; i++) x[i] = (rnd() * 2 - 1) * (i % 61 === 0 ? 9 : 1);
      for (let i = 0; i < x.length; i += 97) x[i] = 0.5 * Math.round(x[i] * 4);  // ties at x/d = k + 0.5 now and then
      for (let i = 64; i < 96; i++) x[i % x.length] = 0;  // an all-zero block (d = 0)
      const want = new Float32Array(M * K);
      for (let m = 0; m < M; m++)
        for (let b = 0; b < K / 32; b++) {
          let amax = 0;
          for (let i = 0; i < 32; i++) amax = Math.max(amax, Math.abs(x[m * K + 32 * b + i]));
          const d = f(amax / 127), id = amax > 0 ? f(127 / amax) : 0;
          for (let i = 0; i < 32; i++) want[m * K + 32 * b + i] = f(d * roundEven(f(x[m * K + 32 * b + i] * id)));
        }
      for (const packed of [false, true]) {
        const y = addon.quantLinear('Q8_0', blocks, K, K, x, M, packed) as Float32Array;
        let bad = 0;
        for (let i = 0; i < y.length; i++) if (y[i] !== want[i]) bad++;
        t.equal(bad, 0, `${isa} M=${M}${packed ? ' packed' : ''}: d·q of every value`);
      }
    }
  });
});
