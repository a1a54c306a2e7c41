// Attention (tiled online softmax) against a naive float64 softmax(QKᵀ·scale + bias)·V, on every
// dispatch path: causal with q_offset, key padding masks (incl. fully masked rows), GQA, additive
// bias (full and broadcast), decode (Tq = 1), tile boundaries; gradients incl. dbias by finite
// differences of the float64 reference.
import t from 'tap';
import { forEachIsa } from '../../src/native/cpu.ts';
import { Tensor } from '../../src/native/tensor.ts';
import * as ops from '../../src/native/ops.ts';
import { rng, randTensor, close, fd, f64, sampleIdx, dot } from './ops-helpers.ts';

interface Case {
  name: string;
  B: number;
  Tq: number;
  Tk: number;
  Hq: number;
  Hkv: number;
  Dh: number;
  causal?: boolean;
  qOffset?: number;
  mask?: (b: number, j: number) => number;
  bias?: 'full' | 'broadcast' | 'head';
  grad?: boolean;
}

interface Ref {
  out: Float64Array;
  lse: Float64Array;
}

function naive(c: Case, q: ArrayLike<number>, k: ArrayLike<number>, v: ArrayLike<number>, bias: ArrayLike<number> | null,
  biasShape: number[] | null, mask: Uint8Array | null): Ref {
  const { B, Tq, Tk, Hq, Hkv, Dh } = c;
  const scale = 1 / Math.sqrt(Dh);
  const qOff = c.qOffset ?? Tk - Tq;
  const out = new Float64Array(B * Tq * Hq * Dh), lse = new Float64Array(B * Hq * Tq);
  for (let b = 0; b < B; b++)
    for (let h = 0; h < Hq; h++) {
      const g = Math.floor(h / (Hq / Hkv));
      for (let i = 0; i < Tq; i++) {
        const s: number[] = [];
        for (let j = 0; j < Tk; j++) {
          let ok = !mask || mask[b * Tk + j] !== 0;
          if (c.causal && j > i + qOff) ok = false;
          if (!ok) { s.push(-Infinity); continue; }
          let d = 0;
          for (let e = 0; e < Dh; e++) d += q[((b * Tq + i) * Hq + h) * Dh + e] * k[((b * Tk + j) * Hkv + g) * Dh + e];
          let x = d * scale;
          if (bias && biasShape) {
            const bb = biasShape[0] === 1 ? 0 : b, bh = biasShape[1] === 1 ? 0 : h;
            x += bias[((bb * biasShape[1] + bh) * Tq + i) * Tk + j];
          }
          s.push(x);
        }
        const m = Math.max(...s);
        const o = ((b * Tq + i) * Hq + h) * Dh;
        if (m === -Infinity) { lse[(b * Hq + h) * Tq + i] = -Infinity; continue; }
        const p = s.map((x) => Math.exp(x - m));
        const sum = p.reduce((a, x) => a + x, 0);
        lse[(b * Hq + h) * Tq + i] = m + Math.log(sum);
        for (let j = 0; j < Tk; j++) {
          if (p[j] === 0) continue;
          for (let e = 0; e < Dh; e++) out[o + e] += (p[j] / sum) * v[((b * Tk + j) * Hkv + g) * Dh + e];
        }
      }
    }
  return { out, lse };
}

const cases: Case[] = [
  { name: 'plain', B: 2, Tq: 5, Tk: 5, Hq: 2, Hkv: 2, Dh: 8, grad: true },
  { name: 'causal GQA odd Dh', B: 1, Tq: 37, Tk: 37, Hq: 4, Hkv: 2, Dh: 13, causal: true, grad: true },
  { name: 'causal q_offset across key tiles', B: 1, Tq: 3, Tk: 150, Hq: 3, Hkv: 1, Dh: 16, causal: true, grad: true },
  { name: 'decode Tq=1 long Tk', B: 2, Tq: 1, Tk: 300, Hq: 4, Hkv: 2, Dh: 64 },
  { name: 'decode Tq=1 Tk=1', B: 1, Tq: 1, Tk: 1, Hq: 1, Hkv: 1, Dh: 5, grad: true },
  { name: 'query tiles + causal', B: 1, Tq: 20, Tk: 20, Hq: 2, Hkv: 1, Dh: 9, causal: true },
  { name: 'negative q_offset: first rows see nothing', B: 1, Tq: 6, Tk: 6, Hq: 1, Hkv: 1, Dh: 4, causal: true, qOffset: -2, grad: true },
  { name: 'padding mask, one batch fully masked', B: 3, Tq: 4, Tk: 7, Hq: 2, Hkv: 1, Dh: 6, mask: (b, j) => (b === 1 ? 0 : b === 2 ? (j < 3 ? 1 : 0) : 1), grad: true },
  { name: 'full bias + mask (DeBERTa)', B: 2, Tq: 6, Tk: 6, Hq: 2, Hkv: 2, Dh: 8, bias: 'full', mask: (b, j) => (b === 1 && j === 5 ? 0 : 1), grad: true },
  { name: 'broadcast bias over batch and heads', B: 2, Tq: 4, Tk: 5, Hq: 4, Hkv: 2, Dh: 4, bias: 'broadcast', grad: true },
  { name: 'bias per head, shared over batch', B: 2, Tq: 3, Tk: 4, Hq: 2, Hkv: 2, Dh: 4, bias: 'head', grad: true },
];

t.test('attention forward and backward vs naive reference on every path', async (t) => {
  await forEachIsa(async (isa) => {
    let seed = 100;
    for (const c of cases) {
      const r = rng(seed++);
      const { B, Tq, Tk, Hq, Hkv, Dh } = c;
      const q = randTensor(r, [B, Tq, Hq, Dh], 1.5), k = randTensor(r, [B, Tk, Hkv, Dh], 1.5), v = randTensor(r, [B, Tk, Hkv, Dh]);
      let mask: Uint8Array | null = null;
      if (c.mask) {
        mask = new Uint8Array(B * Tk);
        for (let b = 0; b < B; b++) for (let j = 0; j < Tk; j++) mask[b * Tk + j] = c.mask(b, j);
      }
      const biasShape = c.bias === 'full' ? [B, Hq, Tq, Tk] : c.bias === 'broadcast' ? [1, 1, Tq, Tk] : c.bias === 'head' ? [1, Hq, Tq, Tk] : null;
      const bias = biasShape ? randTensor(r, biasShape, 2) : null;
      const opts: ops.AttentionOptions = { causal: c.causal, qOffset: c.qOffset, keyMask: mask, bias };
      const fwd = ops.attention(q, k, v, opts);
      const ref = naive(c, q.data, k.data, v.data, bias?.data ?? null, biasShape, mask);
      close(t, fwd.out.data, ref.out, { atol: 2e-6, rtol: 1e-5 }, `${isa} ${c.name}: out`);
      close(t, fwd.lse.data, ref.lse, { atol: 2e-6, rtol: 1e-6 }, `${isa} ${c.name}: lse`);
      const fa = await ops.attentionAsync(q, k, v, opts);
      t.same(Array.from(fa.out.data), Array.from(fwd.out.data), `${isa} ${c.name}: async forward equals sync`);
      if (!c.grad) continue;
      const dout = randTensor(r, [B, Tq, Hq, Dh]);
      const g = ops.attentionBackward(q, k, v, fwd, dout, opts);
      const ga = await ops.attentionBackwardAsync(q, k, v, fwd, dout, opts);
      t.same(Array.from(ga.dq.data), Array.from(g.dq.data), `${isa} ${c.name}: async backward equals sync`);
      const qs = f64(q.data), ks = f64(k.data), vs = f64(v.data), bs = bias ? f64(bias.data) : null;
      const L = (qq: Float64Array, kk: Float64Array, vv: Float64Array, bb: Float64Array | null) =>
        dot(naive(c, qq, kk, vv, bb, biasShape, mask).out, dout.data);
      const tol = { atol: 5e-5, rtol: 1e-3 };
      const iq = sampleIdx(r, q.numel, 16), ik = sampleIdx(r, k.numel, 16), iv = sampleIdx(r, v.numel, 16);
      close(t, iq.map((i) => g.dq.data[i]), fd((x) => L(x, ks, vs, bs), qs, iq), tol, `${isa} ${c.name}: dq`);
      close(t, ik.map((i) => g.dk.data[i]), fd((x) => L(qs, x, vs, bs), ks, ik), tol, `${isa} ${c.name}: dk`);
      close(t, iv.map((i) => g.dv.data[i]), fd((x) => L(qs, ks, x, bs), vs, iv), tol, `${isa} ${c.name}: dv`);
      if (bias && bs && g.dbias) {
        const ib = sampleIdx(r, bias.numel, 16);
        close(t, ib.map((i) => g.dbias!.data[i]), fd((x) => L(qs, ks, vs, x), bs, ib), tol, `${isa} ${c.name}: dbias`);
      }
      if (c.mask && B > 1 && c.name.includes('fully masked')) {
        const rowOk = Array.from(fwd.out.data.subarray(Tq * Hq * Dh, 2 * Tq * Hq * Dh)).every((x) => x === 0);
        t.ok(rowOk, `${isa} fully masked rows produce zeros`);
        t.ok(Array.from(g.dq.data.subarray(Tq * Hq * Dh, 2 * Tq * Hq * Dh)).every((x) => x === 0), `${isa} fully masked rows get zero dq`);
      }
    }
  });
});

t.test('attention validates shapes', async (t) => {
  const r = rng(9);
  const q = randTensor(r, [1, 4, 3, 8]), k = randTensor(r, [1, 4, 2, 8]);
  t.throws(() => ops.attention(q, k, k), /Hq \(3\) must be a multiple of Hkv \(2\)/);
  const k2 = randTensor(r, [1, 4, 1, 7]);
  t.throws(() => ops.attention(q, k2, k2), /attention: k \[1, 4, 1, 7\] has Dh = 7, but q \[1, 4, 3, 8\] has Dh = 8/);
  const k3 = randTensor(r, [1, 5, 1, 8]);
  t.throws(() => ops.attention(q, k3, k3, { keyMask: new Uint8Array(4) }), /keyMask has 4 elements, expected B × Tk = 5/);
  t.throws(() => ops.attention(q, k3, k3, { bias: randTensor(r, [1, 2, 4, 5]) }), /bias has head dim 2, expected 1 or 3/);
  t.throws(() => ops.attention(q, k3, randTensor(r, [1, 6, 1, 8])), /v \[1, 6, 1, 8\] has Tk = 6, but k \[1, 5, 1, 8\] has Tk = 5/);
  // rank-3 inputs mean B = 1
  const q3 = new Tensor('f32', [4, 3, 8], q.data), k33 = new Tensor('f32', [5, 1, 8], k3.data);
  const a = ops.attention(q3, k33, k33), b = ops.attention(q, k3, k3);
  t.same(Array.from(a.out.data), Array.from(b.out.data), 'rank-3 (Tq, H, Dh) inputs work as B = 1');
});
