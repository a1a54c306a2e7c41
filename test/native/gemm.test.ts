// GEMM kernels against a straightforward JS reference (double accumulation), on every ISA the
// CPU supports. Tolerance: the worst-case fp32 summation bound (K + 4)·2⁻²³·Σ|x·w| per element.
import t, { type Test } from 'tap';
import { forEachIsa, getThreads, setThreads } from '../../src/native/cpu.ts';
import {
  linear,
  linearSync,
  sgemm,
  sgemmSync,
  sgemmBf16Sync,
  sgemmBatchedSync,
  PackedWeight,
  type LinearArgs,
} from '../../src/native/gemm.ts';

let seed = 12345;
function rnd(): number {
  seed = (Math.imul(seed, 1103515245) + 12345) >>> 0;
  return (seed >>> 8) / (1 << 24) - 0.5;
}
function randArray(n: number): Float32Array {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = rnd() * 2;
  return a;
}
const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
function toBf16(v: number): number {
  f32[0] = v;
  const u = u32[0];
  return ((u + 0x7fff + ((u >>> 16) & 1)) >>> 16) & 0xffff;
}
function fromBf16(h: number): number {
  u32[0] = h << 16;
  return f32[0];
}
function toF16(v: number): number {
  // normal-range values only (|v| < 2): round to nearest even on the 10-bit mantissa
  f32[0] = v;
  const u = u32[0];
  const sign = (u >>> 16) & 0x8000;
  const e = ((u >>> 23) & 0xff) - 127 + 15;
  if (e <= 0) return sign;
  let r = (e << 10) | ((u >>> 13) & 0x3ff);
  const rem = u & 0x1fff;
  if (rem > 0x1000 || (rem === 0x1000 && r & 1)) r++;
  return sign | r;
}
function fromF16(h: number): number {
  const e = (h >>> 10) & 0x1f, m = h & 0x3ff, s = h & 0x8000 ? -1 : 1;
  if (e === 0) return s * m * 2 ** -24;
  return s * (1 + m / 1024) * 2 ** (e - 15);
}

const EPS = 2 ** -23;

/** Compares got (M, N, stride ldy) with reference values and magnitudes. */
function check(
  t: Test,
  label: string,
  M: number,
  N: number,
  K: number,
  got: Float32Array,
  ldy: number,
  ref: Float64Array,
  mag: Float64Array,
): void {
  let bad = 0;
  let first = '';
  for (let i = 0; i < M; i++)
    for (let j = 0; j < N; j++) {
      const g = got[i * ldy + j], r = ref[i * N + j];
      const tol = (K + 4) * EPS * mag[i * N + j] + 1e-6;
      if (!(Math.abs(g - r) <= tol)) {
        if (!bad) first = `(${i},${j}) got ${g} want ${r} tol ${tol}`;
        bad++;
      }
    }
  t.equal(bad, 0, bad ? `${label}: ${bad} mismatches, first ${first}` : label);
}

/** Reference for y = beta*y0 + x·Wᵀ + bias with W given as a getter. */
function refLinear(
  M: number,
  N: number,
  K: number,
  x: Float32Array,
  ldx: number,
  wAt: (n: number, k: number) => number,
  bias: Float32Array | null,
  y0: Float32Array | null,
  ldy: number,
  beta: number,
  roundX = false,
): { ref: Float64Array; mag: Float64Array } {
  const ref = new Float64Array(M * N), mag = new Float64Array(M * N);
  const wd = new Float64Array(N * K);
  for (let n = 0; n < N; n++) for (let k = 0; k < K; k++) wd[n * K + k] = wAt(n, k);
  for (let i = 0; i < M; i++) {
    const xr = new Float64Array(K);
    for (let k = 0; k < K; k++) xr[k] = roundX ? fromBf16(toBf16(x[i * ldx + k])) : x[i * ldx + k];
    for (let n = 0; n < N; n++) {
      let s = 0, a = 0;
      for (let k = 0; k < K; k++) {
        const p = xr[k] * wd[n * K + k];
        s += p;
        a += Math.abs(p);
      }
      if (bias) {
        s += bias[n];
        a += Math.abs(bias[n]);
      }
      if (beta !== 0 && y0) {
        s += beta * y0[i * ldy + n];
        a += Math.abs(beta * y0[i * ldy + n]);
      }
      ref[i * N + n] = s;
      mag[i * N + n] = a;
    }
  }
  return { ref, mag };
}

// (M, N, K): odd sizes, M=1 (decode), K not a multiple of the vector width, blocks larger than
// the cache blocking (K beyond one or two KC blocks: 256 / 512 on AVX-512, 576 / 1152 on AVX2; M > 144,
// N > 4096), N with partial panels.
const SHAPES: [number, number, number][] = [
  [1, 1, 1],
  [1, 37, 19],
  [1, 300, 517],
  [2, 33, 64],
  [3, 17, 9],
  [5, 64, 100],
  [7, 129, 31],
  [16, 48, 576],
  [17, 95, 263],
  [33, 40, 17],
  [150, 70, 300],
  [20, 33, 600], // several K blocks in the bf16-pair path too
  [14, 40, 1300], // several AVX2 K blocks (KC 576), in the bf16-pair path too
  [20, 4100, 9], // N beyond one NC block
];

t.test('linear f32: shapes, bias, beta, strides on every ISA', async (t) => {
  await forEachIsa(async (isa) => {
    for (const [M, N, K] of SHAPES) {
      for (const variant of [0, 1]) {
        const pad = variant ? 3 : 0;
        const ldx = K + pad, ldw = K + 2 * pad, ldy = N + pad;
        const x = randArray(M * ldx), w = randArray(N * ldw);
        const bias = variant ? randArray(N) : null;
        const beta = variant ? 1 : 0;
        const y = randArray(M * ldy);
        if (!beta) y.fill(NaN); // beta 0: old contents must be ignored
        const y0 = y.slice();
        const { ref, mag } = refLinear(M, N, K, x, ldx, (n, k) => w[n * ldw + k], bias, y0, ldy, beta);
        linearSync({ M, N, K, x, w, bias, y, beta, ldx, ldw, ldy });
        check(t, `${isa} f32 ${M}x${N}x${K} ${variant ? 'bias beta=1 strided' : 'dense'}`, M, N, K, y, ldy, ref, mag);
        if (pad) {
          // padding columns of y untouched
          let touched = 0;
          for (let i = 0; i < M; i++) for (let j = N; j < ldy; j++) if (!Object.is(y[i * ldy + j], y0[i * ldy + j])) touched++;
          t.equal(touched, 0, `${isa} ${M}x${N}x${K}: y padding untouched`);
        }
      }
    }
  });
});

t.test('linear with bf16 and f16 weights, and bf16 compute', async (t) => {
  await forEachIsa(async (isa) => {
    for (const [M, N, K] of SHAPES) {
      const x = randArray(M * K), bias = randArray(N);
      const wf = randArray(N * K);
      const wb = new Uint16Array(N * K).map((_, i) => toBf16(wf[i]));
      const wh = new Uint16Array(N * K).map((_, i) => toF16(wf[i]));
      const rb = refLinear(M, N, K, x, K, (n, k) => fromBf16(wb[n * K + k]), bias, null, N, 0);
      check(t, `${isa} bf16 ${M}x${N}x${K}`, M, N, K, linearSync({ M, N, K, x, w: wb, bias }), N, rb.ref, rb.mag);
      const rh = refLinear(M, N, K, x, K, (n, k) => fromF16(wh[n * K + k]), bias, null, N, 0);
      check(t, `${isa} f16 ${M}x${N}x${K}`, M, N, K, linearSync({ M, N, K, x, w: wh, wtype: 'f16', bias }), N, rh.ref, rh.mag);
      const rbb = refLinear(M, N, K, x, K, (n, k) => fromBf16(wb[n * K + k]), bias, null, N, 0, true);
      const ybb = linearSync({ M, N, K, x, w: wb, bias, compute: 'bf16' });
      check(t, `${isa} bf16 compute ${M}x${N}x${K}`, M, N, K, ybb, N, rbb.ref, rbb.mag);
    }
  });
});

function refSgemm(
  ta: boolean,
  tb: boolean,
  M: number,
  N: number,
  K: number,
  alpha: number,
  A: Float32Array,
  lda: number,
  B: Float32Array,
  ldb: number,
  beta: number,
  C0: Float32Array,
  ldc: number,
): { ref: Float64Array; mag: Float64Array } {
  const ref = new Float64Array(M * N), mag = new Float64Array(M * N);
  for (let i = 0; i < M; i++)
    for (let j = 0; j < N; j++) {
      let s = 0, a = 0;
      for (let k = 0; k < K; k++) {
        const p = (ta ? A[k * lda + i] : A[i * lda + k]) * (tb ? B[j * ldb + k] : B[k * ldb + j]);
        s += p;
        a += Math.abs(p);
      }
      s *= alpha;
      a *= Math.abs(alpha);
      if (beta !== 0) {
        s += beta * C0[i * ldc + j];
        a += Math.abs(beta * C0[i * ldc + j]);
      }
      ref[i * N + j] = s;
      mag[i * N + j] = a;
    }
  return { ref, mag };
}

/** random A and B for sgemm in layout (ta, tb), each padded by (M + N) % 3 past its row length, and C's stride */
function sgemmOperands(ta: boolean, tb: boolean, M: number, N: number, K: number) {
  const pad = (M + N) % 3;
  const lda = (ta ? M : K) + pad, ldb = (tb ? K : N) + pad, ldc = N + pad;
  return { lda, ldb, ldc, A: randArray((ta ? K : M) * lda), B: randArray((tb ? N : K) * ldb) };
}

t.test('sgemm: every transpose combination, alpha, beta, strides', async (t) => {
  const shapes: [number, number, number][] = [[1, 1, 1], [1, 29, 40], [13, 1, 7], [6, 16, 8], [19, 37, 61], [70, 45, 300], [150, 33, 20],
    [24, 35, 700]];
  await forEachIsa(async (isa) => {
    for (const [M, N, K] of shapes)
      for (const ta of [false, true])
        for (const tb of [false, true]) {
          const { lda, ldb, ldc, A, B } = sgemmOperands(ta, tb, M, N, K);
          for (const [alpha, beta] of [[1, 0], [0.5, 1], [-2, 0.25]]) {
            const C = randArray(M * ldc);
            if (beta === 0) C.fill(NaN);
            const C0 = C.slice();
            const { ref, mag } = refSgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C0, ldc);
            sgemmSync({ ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc });
            check(t, `${isa} sgemm ta=${+ta} tb=${+tb} ${M}x${N}x${K} a=${alpha} b=${beta}`, M, N, K, C, ldc, ref, mag);
          }
        }
  });
});

t.test('sgemm_bf16: B in bf16 (dx = dy·W of bf16 weights) matches the product with B widened', async (t) => {
  const shapes: [number, number, number][] = [
    [1, 1, 1], [1, 29, 40], [13, 1, 7], [6, 16, 8], [19, 37, 61], [70, 45, 300], [150, 33, 20], [200, 40, 1301],
  ];
  await forEachIsa(async (isa) => {
    for (const [M, N, K] of shapes) {
      const pad = (M + N) % 3;
      const lda = K + pad, ldb = N + pad, ldc = N + pad;
      const A = randArray(M * lda);
      const Bb = Uint16Array.from(randArray(K * ldb), toBf16);
      const Bw = Float32Array.from(Bb, fromBf16);
      for (const [alpha, beta] of [[1, 0], [0.5, 1], [-2, 0.25]]) {
        const C = randArray(M * ldc);
        if (beta === 0) C.fill(NaN);
        const C0 = C.slice();
        const { ref, mag } = refSgemm(false, false, M, N, K, alpha, A, lda, Bw, ldb, beta, C0, ldc);
        const C2 = C.slice();
        sgemmBf16Sync({ M, N, K, alpha, A, lda, B: Bb, ldb, beta, C, ldc });
        check(t, `${isa} sgemm_bf16 ${M}x${N}x${K} a=${alpha} b=${beta}`, M, N, K, C, ldc, ref, mag);
        // bf16 compute (frozen bf16 weights trained with precision bf16): A rounded too
        const Ar = Float32Array.from(A, (v) => fromBf16(toBf16(v)));
        const r2 = refSgemm(false, false, M, N, K, alpha, Ar, lda, Bw, ldb, beta, C0, ldc);
        sgemmBf16Sync({ M, N, K, alpha, A, lda, B: Bb, ldb, beta, C: C2, ldc, compute: 'bf16' });
        check(t, `${isa} sgemm_bf16 bf16 compute ${M}x${N}x${K} a=${alpha} b=${beta}`, M, N, K, C2, ldc, r2.ref, r2.mag);
      }
    }
  });
});

t.test('sgemm bf16 compute: every layout against the fp32 product of the bf16-rounded operands', async (t) => {
  // odd K (a half-empty last pair), K past two bf16 K blocks (512 on AVX-512, 1152 on AVX2), M past one row block
  // (192 / 144) with a thin tail, N with partial panels; alpha, beta, strides as sgemm.
  const shapes: [number, number, number][] = [[1, 1, 1], [3, 17, 9], [13, 40, 33], [37, 70, 64], [200, 35, 1301],
    [24, 70, 517]];
  const round = (a: Float32Array) => Float32Array.from(a, (v) => fromBf16(toBf16(v)));
  await forEachIsa(async (isa) => {
    for (const [M, N, K] of shapes)
      for (const ta of [false, true])
        for (const tb of [false, true]) {
          const { lda, ldb, ldc, A, B } = sgemmOperands(ta, tb, M, N, K);
          const [alpha, beta] = ta === tb ? [1, 0] : [-0.5, 1];
          const C = randArray(M * ldc);
          if (beta === 0) C.fill(NaN);
          const { ref, mag } = refSgemm(ta, tb, M, N, K, alpha, round(A), lda, round(B), ldb, beta, C.slice(), ldc);
          sgemmSync({ ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, compute: 'bf16' });
          check(t, `${isa} bf16 compute ta=${+ta} tb=${+tb} ${M}x${N}x${K} a=${alpha} b=${beta}`, M, N, K, C, ldc, ref, mag);
        }
  });
  t.throws(() => sgemmSync({ M: 1, N: 1, K: 1, A: new Float32Array(1), B: new Float32Array(1), compute: 'x' as 'f32' }),
    /unknown compute 'x'/);
});

t.test('sgemm bf16 compute rounds to nearest even: exact ties of both parities, NaN, every layout', async (t) => {
  // Values 1 + j·2⁻⁷ + 2⁻⁸ (± a nudge of 2⁻²⁰) lie on or next to the midpoint of two bf16 values (ulp 2⁻⁷ at 1):
  // ties go to the even neighbour. Products of bf16 values in [1, 2) carry 16 bits, a sum of K = 5 of them fits
  // fp32's 24, so C must equal the reference exactly. M and N leave partial row panels and column panels; K is odd
  // (a half-empty pair), and both operands take every layout (the row and the two-row converters).
  const M = 14, N = 37, K = 5;
  const val = () => {
    const j = Math.floor((rnd() + 0.5) * 127), nudge = [0, 0, 2 ** -20, -(2 ** -20)][Math.floor((rnd() + 0.5) * 4)];
    return (rnd() < 0 ? -1 : 1) * (1 + j * 2 ** -7 + 2 ** -8 + nudge);
  };
  const round = (v: number) => fromBf16(toBf16(v));
  t.equal(round(1 + 2 ** -8), 1, 'the reference rounds a tie down to an even neighbour');
  t.equal(round(1 + 3 * 2 ** -8), 1 + 2 ** -6, 'and up to an even one');
  await forEachIsa(async (isa) => {
    for (const ta of [false, true])
      for (const tb of [false, true]) {
        const lda = ta ? M : K, ldb = tb ? K : N;
        const A = Float32Array.from({ length: M * K }, val), B = Float32Array.from({ length: K * N }, val);
        A[ta ? 2 * lda + 3 : 3 * lda + 2] = NaN;  // row 3 of C is NaN throughout
        const C = new Float32Array(M * N);
        sgemmSync({ ta, tb, M, N, K, A, lda, B, ldb, C, compute: 'bf16' });
        let bad = 0;
        let first = '';
        for (let i = 0; i < M; i++)
          for (let j = 0; j < N; j++) {
            let s = 0;
            for (let k = 0; k < K; k++)
              s += round(ta ? A[k * lda + i] : A[i * lda + k]) * round(tb ? B[j * ldb + k] : B[k * ldb + j]);
            const g = C[i * N + j];
            if (!(i === 3 ? Number.isNaN(g) : g === s)) {
              if (!bad) first = `(${i},${j}) got ${g} want ${i === 3 ? NaN : s}`;
              bad++;
            }
          }
        const label = `${isa} ta=${+ta} tb=${+tb}`;
        t.equal(bad, 0, bad ? `${label}: ${bad} mismatches, first ${first}` : label);
      }
  });
});

t.test('sgemm_batched: strided batches (attention-style), all transposes', async (t) => {
  await forEachIsa(async (isa) => {
    for (const [batch, M, N, K] of [[1, 5, 7, 9], [6, 17, 17, 16], [3, 1, 40, 33]])
      for (const ta of [false, true])
        for (const tb of [false, true]) {
          const sA = M * K + 5, sB = K * N + 3, sC = M * N + 2;
          const A = randArray(batch * sA), B = randArray(batch * sB), C = randArray(batch * sC);
          const C0 = C.slice();
          sgemmBatchedSync({ ta, tb, batch, M, N, K, alpha: 1.5, A, strideA: sA, B, strideB: sB, beta: 1, C, strideC: sC });
          for (let b = 0; b < batch; b++) {
            const { ref, mag } = refSgemm(
              ta, tb, M, N, K, 1.5,
              A.subarray(b * sA), ta ? M : K, B.subarray(b * sB), tb ? K : N, 1, C0.subarray(b * sC), N,
            );
            check(t, `${isa} batched b=${b}/${batch} ta=${+ta} tb=${+tb} ${M}x${N}x${K}`, M, N, K, C.subarray(b * sC), N, ref, mag);
          }
        }
  });
});

t.test('packed weights (f32, bf16, f16) match the unpacked product', async (t) => {
  await forEachIsa(async (isa) => {
    for (const [N, K] of [[1, 1], [37, 19], [70, 300], [129, 64], [33, 517]]) {
      const wf = randArray(N * K + 7);
      const wb = new Uint16Array(N * K).map((_, i) => toBf16(wf[i]));
      const wh = new Uint16Array(N * K).map((_, i) => toF16(wf[i]));
      const packs: [string, PackedWeight, (n: number, k: number) => number][] = [
        ['f32', PackedWeight.pack(wf, N, K), (n, k) => wf[n * K + k]],
        ['bf16', PackedWeight.pack(wb, N, K), (n, k) => fromBf16(wb[n * K + k])],
        ['f16', PackedWeight.pack(wh, N, K, { wtype: 'f16' }), (n, k) => fromF16(wh[n * K + k])],
      ];
      for (const [name, p, at] of packs) {
        t.equal(p.rows, N);
        t.equal(p.cols, K);
        t.ok(p.bytes >= N * K * (name === 'bf16' ? 2 : 4), `${name} packed size`);
        for (const M of [1, 2, 5, 20, 150]) {
          const x = randArray(M * K), bias = randArray(N);
          const y = randArray(M * N);
          const y0 = y.slice();
          const beta = M % 2;
          const { ref, mag } = refLinear(M, N, K, x, K, at, bias, y0, N, beta);
          p.linearSync({ M, x, bias, y, beta });
          check(t, `${isa} packed ${name} ${M}x${N}x${K} beta=${beta}`, M, N, K, y, N, ref, mag);
        }
        p.free();
        t.throws(() => p.linearSync({ M: 1, x: new Float32Array(K) }), /freed/);
      }
    }
  });
});

t.test('a weight packed under one ISA still works under another', async (t) => {
  const N = 45, K = 70, M = 3;
  const w = randArray(N * K), x = randArray(M * K);
  const { ref, mag } = refLinear(M, N, K, x, K, (n, k) => w[n * K + k], null, null, N, 0);
  const packed: PackedWeight[] = [];
  await forEachIsa(() => {
    packed.push(PackedWeight.pack(w, N, K));
  });
  await forEachIsa(async (isa) => {
    for (const p of packed) check(t, `${isa} uses a foreign packing`, M, N, K, p.linearSync({ M, x }), N, ref, mag);
  });
  for (const p of packed) p.free();
});

t.test('1 and 2 threads give the same results; async calls resolve', async (t) => {
  const prev = getThreads();
  const M = 67, N = 131, K = 90;
  const x = randArray(M * K), w = randArray(N * K), bias = randArray(N);
  const { ref, mag } = refLinear(M, N, K, x, K, (n, k) => w[n * K + k], bias, null, N, 0);
  try {
    for (const th of [1, 2]) {
      setThreads(th);
      await forEachIsa(async (isa) => {
        check(t, `${isa} ${th} threads linear async`, M, N, K, await linear({ M, N, K, x, w, bias }), N, ref, mag);
        const p = PackedWeight.pack(w, N, K);
        check(t, `${isa} ${th} threads packed async`, M, N, K, await p.linear({ M, x, bias }), N, ref, mag);
        check(t, `${isa} ${th} threads packed M=1`, 1, N, K, await p.linear({ M: 1, x, bias }), N, ref, mag);
        p.free();
        const r2 = refSgemm(false, true, M, N, K, 1, x, K, w, K, 0, new Float32Array(0), N);
        check(t, `${isa} ${th} threads sgemm async`, M, N, K, await sgemm({ tb: true, M, N, K, A: x, B: w }), N, r2.ref, r2.mag);
      });
    }
  } finally {
    setThreads(prev);
  }
});

t.test('a tall product split over 2 or 3 threads gives the bits of 1 thread', async (t) => {
  // the training shapes' path (B packed once and shared, row blocks handed out): N past one NC block with
  // bf16 weights and a bias; K past two AVX2 K blocks with A transposed (dW = dyᵀ·x), alpha and beta
  const prev = getThreads();
  try {
    await forEachIsa(async (isa) => {
      for (const [M, N, K] of [[150, 4100, 9], [97, 70, 1300]] as const) {
        const x = randArray(M * K), bias = randArray(N);
        const wb = Uint16Array.from(randArray(N * K), toBf16);
        const At = randArray(K * M), B = randArray(K * N), C0 = randArray(M * N);
        // bf16 compute (a training step's three products): y = x·Wᵀ (tb), dx = dy·W, dW = dyᵀ·x (ta)
        const Wt = randArray(N * K);
        const runs = [1, 2, 3].map((th) => {
          setThreads(th);
          const C = C0.slice();
          sgemmSync({ ta: true, M, N, K, alpha: 0.5, A: At, B, beta: 0.25, C });
          const bf = [false, true].map((ta) => [false, true].map((tb) => {
            const Cb = C0.slice();
            sgemmSync({ ta, tb, M, N, K, alpha: 0.5, A: ta ? At : x, B: tb ? Wt : B, beta: 0.25, C: Cb, compute: 'bf16' });
            return Cb;
          })).flat();
          return { y: linearSync({ M, N, K, x, w: wb, bias }), C, bf };
        });
        const r = refLinear(M, N, K, x, K, (n, k) => fromBf16(wb[n * K + k]), bias, null, N, 0);
        check(t, `${isa} ${M}x${N}x${K} bf16 linear, 1 thread`, M, N, K, runs[0].y, N, r.ref, r.mag);
        const r2 = refSgemm(true, false, M, N, K, 0.5, At, M, B, N, 0.25, C0, N);
        check(t, `${isa} ${M}x${N}x${K} sgemm ta, 1 thread`, M, N, K, runs[0].C, N, r2.ref, r2.mag);
        // byte comparison: t.same walks 600k elements one by one (minutes over the three ISAs)
        const bits = (a: Float32Array) => Buffer.from(a.buffer, a.byteOffset, a.byteLength);
        for (const i of [1, 2]) {
          t.ok(bits(runs[i].y).equals(bits(runs[0].y)), `${isa} ${M}x${N}x${K} linear: ${i + 1} threads = 1 thread`);
          t.ok(bits(runs[i].C).equals(bits(runs[0].C)), `${isa} ${M}x${N}x${K} sgemm ta: ${i + 1} threads = 1 thread`);
          for (let j = 0; j < 4; j++)
            t.ok(bits(runs[i].bf[j]).equals(bits(runs[0].bf[j])),
              `${isa} ${M}x${N}x${K} bf16 compute ta=${j >> 1} tb=${j & 1}: ${i + 1} threads = 1 thread`);
        }
      }
    });
  } finally {
    setThreads(prev);
  }
});

t.test('bad shapes and types get clear errors', async (t) => {
  const x = new Float32Array(6), w = new Float32Array(6);
  const base: LinearArgs = { M: 2, N: 2, K: 3, x, w };
  t.throws(() => linearSync({ ...base, x: new Float32Array(5) }), /x \(2x3, stride 3\) needs 6 elements, has 5/);
  t.throws(() => linearSync({ ...base, bias: new Float32Array(1) }), /bias has 1 elements, needs 2/);
  t.throws(() => linearSync({ ...base, ldx: 2 }), /row stride 2 is smaller/);
  t.throws(() => linearSync({ ...base, M: -1 }), /M must be a non-negative integer/);
  t.throws(() => linearSync({ ...base, w: new Uint16Array(6), wtype: 'f32' }), TypeError);
  t.throws(() => linearSync({ ...base, compute: 'bf16' }), /needs bf16 weights/);
  t.throws(() => sgemmSync({ ta: true, M: 2, N: 2, K: 3, A: new Float32Array(5), B: w }), /A \(stored K x M\)/);
  // the native layer checks too (called directly, bypassing the wrapper)
  const { addon } = await import('../../src/native/addon.ts');
  t.throws(() => addon.gemmLinear('f32', 2, 2, 3, x, 3, w, 3, null, new Float32Array(3), 2, 0, false), /y has 3 elements, needs 4/);
  t.throws(() => addon.gemmLinear('q4', 2, 2, 3, x, 3, w, 3, null, new Float32Array(4), 2, 0, false), /unknown wtype/);
  t.throws(() => addon.gemmLinearPacked(1, x, 3, {}, null, new Float32Array(4), 2, 0, false), /packed weight handle/);
  // empty products
  t.same(Array.from(linearSync({ M: 1, N: 2, K: 0, x: new Float32Array(0), w: new Float32Array(0), bias: new Float32Array([1, 2]) })), [1, 2]);
  t.equal(linearSync({ M: 0, N: 2, K: 3, x: new Float32Array(0), w }).length, 0);
});
