// Elementwise ops, activations, softmax, normalization and embedding: every dispatch path against
// float64 JS references; every backward against central finite differences of those references.
import t from 'tap';
import { forEachIsa } from '../../src/native/cpu.ts';
import { Tensor, ShapeError } from '../../src/native/tensor.ts';
import * as ops from '../../src/native/ops.ts';
import { rng, randTensor, randArray, close, fd, f64, sampleIdx, erf, erfc, SHAPES_ROWS, SIZES, dot, toBf16, fromBf16 } from './ops-helpers.ts';

const T = (shape: number[], a: ArrayLike<number>) => new Tensor('f32', shape, Float32Array.from(a));

t.test('add / mul / scale / axpy / bias on every path', async (t) => {
  await forEachIsa((isa) => {
    const r = rng(1);
    for (const n of SIZES) {
      const a = randTensor(r, [n]), b = randTensor(r, [n]);
      const e = (f: (x: number, y: number) => number) => Array.from(a.data, (x, i) => Math.fround(f(x, b.data[i])));
      close(t, ops.add(a, b).data, e((x, y) => x + y), { atol: 0, rtol: 0 }, `${isa} add n=${n}`);
      close(t, ops.mul(a, b).data, e((x, y) => x * y), { atol: 0, rtol: 0 }, `${isa} mul n=${n}`);
      close(t, ops.scale(a, 0.37).data, Array.from(a.data, (x) => Math.fround(Math.fround(0.37) * x)), { atol: 0, rtol: 1e-7 }, `${isa} scale n=${n}`);
      const y = b.clone();
      ops.axpy(-1.5, a, y);
      close(t, y.data, e((x, z) => z - 1.5 * x), { atol: 1e-7, rtol: 1e-6 }, `${isa} axpy n=${n}`);
      const dy = randTensor(r, [n]);
      const da0 = randTensor(r, [n]);
      const { da, db } = ops.mulBackward(a, b, dy, { da: da0.clone() });
      close(t, da.data, Array.from(dy.data, (g, i) => da0.data[i] + g * b.data[i]), { atol: 1e-6, rtol: 1e-6 }, `${isa} mulBackward da accumulates n=${n}`);
      close(t, db.data, Array.from(dy.data, (g, i) => g * a.data[i]), { atol: 1e-7, rtol: 1e-6 }, `${isa} mulBackward db n=${n}`);
    }
    for (const [R, D] of SHAPES_ROWS) {
      const x = randTensor(r, [R, D]), b = randTensor(r, [D]);
      const y = ops.addBias(x.clone(), b);
      close(t, y.data, Array.from(x.data, (v, i) => Math.fround(v + b.data[i % D])), { atol: 0, rtol: 0 }, `${isa} addBias ${R}x${D}`);
      const db0 = randTensor(r, [D]);
      const db = ops.biasBackward(x, db0.clone());
      const e = Array.from(db0.data);
      for (let i = 0; i < R * D; i++) e[i % D] += x.data[i];
      close(t, db.data, e, { atol: 1e-5, rtol: 1e-5 }, `${isa} biasBackward ${R}x${D}`);
    }
  });
});

t.test('loraBRows: the bits of r axpys per row, f32 and bf16 b, every path', async (t) => {
  // M past one 8-row tile and its remainder, N with and without a vector tail, r 1 / 8 / 16
  const bits = (x: Float32Array) => Buffer.from(x.buffer, x.byteOffset, x.byteLength);
  await forEachIsa((isa) => {
    const r0 = rng(5);
    for (const [M, N, r] of [[1, 1, 1], [2, 7, 8], [3, 16, 16], [8, 33, 16], [11, 100, 8], [17, 5, 3]]) {
      const a = randArray(r0, M * r), b = randArray(r0, r * N), y0 = randArray(r0, M * N);
      const b16 = toBf16(b), bw = fromBf16(b16);
      // the reference: r axpys per row (the op this one replaces), in order of k
      const want = Float32Array.from(y0);
      for (let m = 0; m < M; m++)
        for (let k = 0; k < r; k++) {
          const row = new Tensor('f32', [N], want.subarray(m * N, (m + 1) * N));
          ops.axpy(a[m * r + k], new Tensor('f32', [N], b.subarray(k * N, (k + 1) * N)), row);
        }
      const got = ops.loraBRows(M, N, r, a, b, Float32Array.from(y0));
      t.ok(bits(got).equals(bits(want)), `${isa} ${M}x${N} r=${r} f32: the axpys' bits`);
      const g16 = ops.loraBRows(M, N, r, a, b16, Float32Array.from(y0));
      t.ok(bits(g16).equals(bits(ops.loraBRows(M, N, r, a, bw, Float32Array.from(y0)))),
        `${isa} ${M}x${N} r=${r} bf16: the bits of its widened values`);
    }
  });
  t.throws(() => ops.loraBRows(2, 3, 4, new Float32Array(7), new Float32Array(12), new Float32Array(6)), /a/);
});

// float64 references
const geluErf = (x: number) => 0.5 * x * erfc(-x / Math.SQRT2);
const geluTanh = (x: number) => 0.5 * x * (1 + Math.tanh(Math.sqrt(2 / Math.PI) * (x + 0.044715 * x * x * x)));
const silu = (x: number) => x / (1 + Math.exp(-x));

t.test('activations match float64 references and finite differences on every path', async (t) => {
  // wide range incl. large |x| where erf/exp saturate
  const r = rng(2);
  const sizes = [1, 5, 8, 16, 17, 33, 4099];
  await forEachIsa((isa) => {
    for (const n of sizes) {
      const x = randTensor(r, [n], 6);
      if (n > 4) x.data.set([0, -10, 10, -30, 30].slice(0, Math.min(5, n)));
      const up = randTensor(r, [n], 2);
      const dy = randTensor(r, [n]);
      const tol = { atol: 1e-6, rtol: 2e-6 };
      close(t, ops.gelu(x).data, Array.from(x.data, geluErf), tol, `${isa} gelu(erf) n=${n}`);
      close(t, ops.gelu(x, { approx: true }).data, Array.from(x.data, geluTanh), tol, `${isa} gelu(tanh) n=${n}`);
      close(t, ops.silu(x).data, Array.from(x.data, silu), tol, `${isa} silu n=${n}`);
      close(t, ops.swiglu(x, up).data, Array.from(x.data, (v, i) => silu(v) * up.data[i]), tol, `${isa} swiglu n=${n}`);
      // backward vs central differences of the float64 forward
      const h = 1e-6;
      const d = (f: (v: number) => number) => Array.from(x.data, (v, i) => ((f(v + h) - f(v - h)) / (2 * h)) * dy.data[i]);
      const gtol = { atol: 2e-6, rtol: 1e-5 };
      close(t, ops.geluBackward(x, dy).data, d(geluErf), gtol, `${isa} geluBackward(erf) n=${n}`);
      close(t, ops.geluBackward(x, dy, { approx: true }).data, d(geluTanh), gtol, `${isa} geluBackward(tanh) n=${n}`);
      close(t, ops.siluBackward(x, dy).data, d(silu), gtol, `${isa} siluBackward n=${n}`);
      const { dgate, dup } = ops.swigluBackward(x, up, dy);
      close(t, dgate.data, d(silu).map((g, i) => g * up.data[i]), gtol, `${isa} swigluBackward dgate n=${n}`);
      close(t, dup.data, Array.from(x.data, (v, i) => silu(v) * dy.data[i]), gtol, `${isa} swigluBackward dup n=${n}`);
    }
  });
  t.ok(Math.abs(erf(0.5) - 0.5204998778130465) < 1e-15, 'reference erf is accurate');
});

function softmaxRef(x: ArrayLike<number>, R: number, D: number): number[] {
  const y: number[] = [];
  for (let r = 0; r < R; r++) {
    const row = Array.from({ length: D }, (_, d) => x[r * D + d]);
    const m = Math.max(...row);
    const e = row.map((v) => Math.exp(v - m));
    const s = e.reduce((a, b) => a + b, 0);
    y.push(...e.map((v) => v / s));
  }
  return y;
}

t.test('softmax / log-softmax and backward on every path', async (t) => {
  const r = rng(3);
  await forEachIsa((isa) => {
    for (const [R, D] of SHAPES_ROWS) {
      const x = randTensor(r, [R, D], 8);
      const ref = softmaxRef(x.data, R, D);
      const y = ops.softmax(x);
      close(t, y.data, ref, { atol: 1e-7, rtol: 2e-6 }, `${isa} softmax ${R}x${D}`);
      close(t, ops.logSoftmax(x).data, ref.map(Math.log), { atol: 2e-6, rtol: 2e-6 }, `${isa} logSoftmax ${R}x${D}`);
      const dy = randTensor(r, [R, D]);
      // dL/dx for L = Σ dy · softmax(x), by finite differences on the float64 reference
      const xs = f64(x.data);
      const L = (v: Float64Array) => dot(softmaxRef(v, R, D), dy.data);
      const idx = sampleIdx(r, R * D, 12);
      const g = fd(L, xs, idx, 1e-6);
      const dx = ops.softmaxBackward(y, dy);
      close(t, idx.map((i) => dx.data[i]), g, { atol: 1e-5, rtol: 1e-4 }, `${isa} softmaxBackward ${R}x${D}`);
    }
    const big = T([1, 3], [1000, -1000, 1000]);
    close(t, ops.softmax(big).data, [0.5, 0, 0.5], { atol: 0, rtol: 0 }, `${isa} softmax is max-subtracted`);
  });
});

function layerNormRef(x: ArrayLike<number>, w: ArrayLike<number> | null, b: ArrayLike<number> | null, R: number, D: number, eps: number) {
  const y: number[] = [];
  for (let r = 0; r < R; r++) {
    let m = 0;
    for (let d = 0; d < D; d++) m += x[r * D + d];
    m /= D;
    let v = 0;
    for (let d = 0; d < D; d++) v += (x[r * D + d] - m) ** 2;
    const rs = 1 / Math.sqrt(v / D + eps);
    for (let d = 0; d < D; d++) y.push((x[r * D + d] - m) * rs * (w ? w[d] : 1) + (b ? b[d] : 0));
  }
  return y;
}
function rmsNormRef(x: ArrayLike<number>, w: ArrayLike<number> | null, R: number, D: number, eps: number) {
  const y: number[] = [];
  for (let r = 0; r < R; r++) {
    let s = 0;
    for (let d = 0; d < D; d++) s += x[r * D + d] ** 2;
    const rs = 1 / Math.sqrt(s / D + eps);
    for (let d = 0; d < D; d++) y.push(x[r * D + d] * rs * (w ? w[d] : 1));
  }
  return y;
}

t.test('layerNorm / rmsNorm forward and backward (dx, dw, db by finite differences) on every path', async (t) => {
  const r = rng(4);
  await forEachIsa((isa) => {
    for (const [R, D] of SHAPES_ROWS) {
      if (D < 2) continue;
      const eps = 1e-5;
      const x = randTensor(r, [R, D], 3);
      for (let i = 0; i < x.numel; i++) x.data[i] += 0.5;  // non-zero mean
      const w = randTensor(r, [D]), b = randTensor(r, [D]);
      const dy = randTensor(r, [R, D]);
      const idx = sampleIdx(r, R * D, 10), idw = sampleIdx(r, D, 6);
      // LayerNorm
      const ln = ops.layerNorm(x, w, b, eps);
      close(t, ln.y.data, layerNormRef(x.data, w.data, b.data, R, D, eps), { atol: 3e-6, rtol: 3e-6 }, `${isa} layerNorm ${R}x${D}`);
      const noAffine = ops.layerNorm(x, null, null, eps);
      close(t, noAffine.y.data, layerNormRef(x.data, null, null, R, D, eps), { atol: 3e-6, rtol: 3e-6 }, `${isa} layerNorm no affine ${R}x${D}`);
      const gl = ops.layerNormBackward(x, w, ln.mean, ln.rstd, dy);
      const xs = f64(x.data), ws = f64(w.data), bs = f64(b.data);
      const Lx = (v: Float64Array) => dot(layerNormRef(v, ws, bs, R, D, eps), dy.data);
      const Lw = (v: Float64Array) => dot(layerNormRef(xs, v, bs, R, D, eps), dy.data);
      const Lb = (v: Float64Array) => dot(layerNormRef(xs, ws, v, R, D, eps), dy.data);
      const gt = { atol: 2e-4, rtol: 1e-3 };
      close(t, idx.map((i) => gl.dx.data[i]), fd(Lx, xs, idx, 1e-5), gt, `${isa} layerNormBackward dx ${R}x${D}`);
      close(t, idw.map((i) => gl.dw.data[i]), fd(Lw, ws, idw, 1e-5), gt, `${isa} layerNormBackward dw ${R}x${D}`);
      close(t, idw.map((i) => gl.db.data[i]), fd(Lb, bs, idw, 1e-5), gt, `${isa} layerNormBackward db ${R}x${D}`);
      // RMSNorm
      const rn = ops.rmsNorm(x, w, eps);
      close(t, rn.y.data, rmsNormRef(x.data, w.data, R, D, eps), { atol: 2e-6, rtol: 2e-6 }, `${isa} rmsNorm ${R}x${D}`);
      const gr = ops.rmsNormBackward(x, w, rn.rstd, dy);
      const Rx = (v: Float64Array) => dot(rmsNormRef(v, ws, R, D, eps), dy.data);
      const Rw = (v: Float64Array) => dot(rmsNormRef(xs, v, R, D, eps), dy.data);
      close(t, idx.map((i) => gr.dx.data[i]), fd(Rx, xs, idx, 1e-5), gt, `${isa} rmsNormBackward dx ${R}x${D}`);
      close(t, idw.map((i) => gr.dw.data[i]), fd(Rw, ws, idw, 1e-5), gt, `${isa} rmsNormBackward dw ${R}x${D}`);
      // dw accumulates into a given tensor
      const dw0 = randTensor(r, [D]);
      const acc = ops.rmsNormBackward(x, w, rn.rstd, dy, { dw: dw0.clone() });
      close(t, acc.dw.data, Array.from(gr.dw.data, (g, i) => g + dw0.data[i]), { atol: 1e-5, rtol: 1e-5 }, `${isa} rmsNormBackward dw accumulates`);
    }
  });
});

t.test('embedding gather (f32, bf16) and scatter-add with repeated ids', async (t) => {
  const r = rng(5);
  await forEachIsa((isa) => {
    for (const [V, D, Tn] of [[10, 7, 1], [50, 64, 33], [3, 17, 9]]) {
      const table = randTensor(r, [V, D]);
      const ids = Tensor.i32([Tn], Array.from({ length: Tn }, () => Math.floor(r() * V)));
      const out = ops.embedding(ids, table);
      const e: number[] = [];
      for (const id of ids.data) e.push(...table.data.subarray(id * D, (id + 1) * D));
      close(t, out.data, e, { atol: 0, rtol: 0 }, `${isa} embedding f32 V=${V} D=${D} T=${Tn}`);
      // bf16 table: exact widening of the stored bits
      const bits = new Uint16Array(V * D);
      const f = new Float32Array(1), u = new Uint32Array(f.buffer);
      for (let i = 0; i < V * D; i++) { f[0] = table.data[i]; bits[i] = u[0] >>> 16; }
      const outb = ops.embedding(ids, new Tensor('bf16', [V, D], bits));
      const eb = e.map((_, i) => { u[0] = bits[ids.data[Math.floor(i / D)] * D + (i % D)] << 16; return f[0]; });
      close(t, outb.data, eb, { atol: 0, rtol: 0 }, `${isa} embedding bf16`);
      const dout = randTensor(r, [Tn, D]);
      const dtable = ops.embeddingBackward(ids, dout, new Tensor('f32', [V, D]));
      const ed = new Float64Array(V * D);
      ids.data.forEach((id, ti) => { for (let d = 0; d < D; d++) ed[id * D + d] += dout.data[ti * D + d]; });
      close(t, dtable.data, ed, { atol: 1e-6, rtol: 1e-6 }, `${isa} embeddingBackward`);
    }
  });
});

t.test('shape errors are clear and nothing is written out of bounds', async (t) => {
  const r = rng(6);
  const x = randTensor(r, [3, 8]);
  t.throws(() => ops.rmsNorm(x, randTensor(r, [7])), { name: 'ShapeError', message: /rmsNorm: w \[7\] has D = 7, but x \[3, 8\] has D = 8/ });
  t.throws(() => ops.add(x, randTensor(r, [3, 7])), /add: b has shape \[3, 7\] but a has \[3, 8\]/);
  t.throws(() => ops.embedding(Tensor.i32([2], [0, 10]), randTensor(r, [10, 4])), /ids\[1\] = 10 is out of range \[0, 10\)/);
  t.throws(() => ops.embedding(Tensor.i32([1], [-1]), randTensor(r, [10, 4])), /out of range/);
  t.throws(() => ops.gelu(new Tensor('i32', [2]) as never), /gelu: x must have dtype f32, got i32/);
  t.throws(() => new Tensor('f32', [2, 3], new Float32Array(5)), ShapeError);
  t.throws(() => ops.layerNormBackward(x, null, randTensor(r, [2]), randTensor(r, [3]), x), /mean has shape \[2\], expected \[3\]/);
  // the raw binding checks lengths too
  const { addon } = await import('../../src/native/addon.ts');
  t.throws(() => addon.ops.rmsnormFwd(3, 8, new Float32Array(23), null, 1e-5, new Float32Array(24), null), /x has 23 elements, needs 24/);
  t.throws(() => addon.ops.addFwd(new Float32Array(3), new Float32Array(2), new Float32Array(3)), RangeError);
  void randArray;
});

t.test('argmax (greedy sampling) on every path: the first largest as a scan with > finds it', async (t) => {
  const scan = (x: Float32Array): number => {
    let best = -1, mx = -Infinity;
    for (let i = 0; i < x.length; i++) if (x[i] > mx) { mx = x[i]; best = i; }
    return best;
  };
  await forEachIsa((isa) => {
    const r = rng(7);
    const cases: [string, Float32Array][] = [];
    for (const n of [0, 1, 5, 15, 16, 17, 255, 256, 257, 1000, 49152, 151936])
      cases.push([`random n=${n}`, randArray(r, n)]);
    for (const n of [3, 40, 300, 5000]) {
      const ties = Float32Array.from({ length: n }, () => Math.floor(r() * 4));  // many equal maxima
      cases.push([`ties n=${n}`, ties]);
      const nan = randArray(r, n);
      for (let i = 0; i < n; i += 3) nan[i] = NaN;
      nan[0] = NaN;
      cases.push([`NaN n=${n}`, nan]);
      cases.push([`all -inf n=${n}`, new Float32Array(n).fill(-Infinity)]);
      cases.push([`all NaN n=${n}`, new Float32Array(n).fill(NaN)]);
      const one = new Float32Array(n).fill(-Infinity);
      one[n - 1] = -1e30;
      cases.push([`last above -inf n=${n}`, one]);
      const inf = randArray(r, n);
      inf[Math.floor(n / 2)] = Infinity;
      inf[n - 1] = Infinity;
      cases.push([`+inf n=${n}`, inf]);
      const zeros = new Float32Array(n).fill(-1);
      zeros[n - 1] = 0;
      zeros[Math.floor(n / 3)] = -0;
      cases.push([`-0 before 0 n=${n}`, zeros]);
    }
    // the maximum in every position of a chunk boundary's neighbourhood, with a tie further on
    for (const at of [0, 15, 16, 255, 256, 257, 511, 512]) {
      const x = randArray(r, 700);
      x[at] = 5;
      x[at + 100] = 5;
      cases.push([`max at ${at}`, x]);
    }
    for (const [name, x] of cases) t.equal(ops.argmaxF32(x), scan(x), `${isa} ${name}`);
    const x = randArray(r, 1000);
    t.equal(ops.argmaxF32(x.subarray(100, 600)), scan(x.subarray(100, 600)), `${isa} a view`);
  });
});
