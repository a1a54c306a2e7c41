// RoPE (incl. llama3 frequency scaling), cross-entropy with ignored labels, AdamW vs PyTorch's
// update rule, L2 norm and the LoRA linear with its gradients, on every dispatch path.
import t from 'tap';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { forEachIsa } from '../../src/native/cpu.ts';
import { Tensor } from '../../src/native/tensor.ts';
import * as ops from '../../src/native/ops.ts';
import { rng, randTensor, close, fd, f64, sampleIdx, dot, toBf16, fromBf16 } from './ops-helpers.ts';

const shared = join(import.meta.dirname, '../../../shared');
const fr = Math.fround;

// transformers' _compute_default_rope_parameters + _compute_llama3_parameters, in float64
function llama3InvFreq(dim: number, base: number, factor: number, low: number, high: number, orig: number): number[] {
  const inv = Array.from({ length: dim / 2 }, (_, i) => 1 / base ** ((2 * i) / dim));
  const lowWl = orig / low, highWl = orig / high;
  return inv.map((f) => {
    const wl = (2 * Math.PI) / f;
    const scaled = wl > lowWl ? f / factor : f;
    const smooth = (orig / wl - low) / (high - low);
    const medium = !(wl < highWl) && !(wl > lowWl);
    return medium ? ((1 - smooth) * scaled) / factor + smooth * scaled : scaled;
  });
}

t.test('rope_inv_freq: default, linear and llama3 (the llama3-rope-tiny golden config)', async (t) => {
  const cfg = JSON.parse(readFileSync(join(shared, 'goldens/llama3-rope-tiny/config.json'), 'utf8'));
  const rs = cfg.rope_scaling;
  t.equal(rs.rope_type ?? rs.type, 'llama3');
  const Dh = cfg.head_dim ?? cfg.hidden_size / cfg.num_attention_heads;
  const scaling: ops.RopeScaling = {
    type: 'llama3', factor: rs.factor, lowFreqFactor: rs.low_freq_factor, highFreqFactor: rs.high_freq_factor,
    originalMaxPositionEmbeddings: rs.original_max_position_embeddings,
  };
  t.same([Dh, cfg.rope_theta, rs.factor, rs.low_freq_factor, rs.high_freq_factor, rs.original_max_position_embeddings], [16, 500000, 8, 1, 4, 64]);
  const got = ops.ropeInvFreq(Dh, cfg.rope_theta, scaling);
  const want = llama3InvFreq(Dh, cfg.rope_theta, 8, 1, 4, 64);
  close(t, got.data, want, { atol: 0, rtol: 2e-7 }, 'llama3 inv_freq matches the transformers formula');
  const plain = llama3InvFreq(Dh, cfg.rope_theta, 1, 1, 4, 1e30).map((_, i) => 1 / cfg.rope_theta ** ((2 * i) / Dh));
  const ratio = want.map((w, i) => plain[i] / w);
  t.equal(ratio.filter((x) => Math.abs(x - 1) < 1e-12).length, 1, 'one high-frequency pair unchanged');
  t.equal(ratio.filter((x) => Math.abs(x - 8) < 1e-9).length, 6, 'six low-frequency pairs divided by 8');
  t.equal(ratio.filter((x) => x > 1 + 1e-9 && x < 8 - 1e-9).length, 1, 'one pair in the smoothed band');
  close(t, ops.ropeInvFreq(64, 10000).data, Array.from({ length: 32 }, (_, i) => 1 / 10000 ** ((2 * i) / 64)), { atol: 0, rtol: 2e-7 }, 'default inv_freq');
  close(t, ops.ropeInvFreq(8, 10000, { type: 'linear', factor: 4 }).data, Array.from({ length: 4 }, (_, i) => 1 / 10000 ** ((2 * i) / 8) / 4), { atol: 0, rtol: 2e-7 }, 'linear scaling');
  t.throws(() => ops.ropeInvFreq(7, 10000), /even/);
});

function ropeRef(x: ArrayLike<number>, T: number, ld: number, off: number, H: number, Dh: number, pos: ArrayLike<number>, inv: ArrayLike<number>, sign = 1): Float64Array {
  const y = Float64Array.from(x);
  const half = Dh / 2;
  for (let t = 0; t < T; t++)
    for (let h = 0; h < H; h++)
      for (let i = 0; i < half; i++) {
        const ang = fr(pos[t] * inv[i]);  // fp32 product as in transformers
        const c = Math.cos(ang), s = sign * Math.sin(ang);
        const o = t * ld + off + h * Dh;
        const a = x[o + i], b = x[o + i + half];
        y[o + i] = a * c - b * s;
        y[o + i + half] = b * c + a * s;
      }
  return y;
}

t.test('rope forward / backward on every path (packed and fused-QKV rows)', async (t) => {
  const r = rng(11);
  await forEachIsa((isa) => {
    for (const [T, H, Dh] of [[1, 1, 2], [5, 3, 16], [7, 2, 64], [3, 4, 10], [33, 9, 64]]) {
      const inv = ops.ropeInvFreq(Dh, 10000);
      const pos = Tensor.i32([T], Array.from({ length: T }, (_, i) => i * 37 + 5));
      const x = randTensor(r, [T, H, Dh]);
      const y = ops.rope(x.clone(), pos, inv);
      close(t, y.data, ropeRef(x.data, T, H * Dh, 0, H, Dh, pos.data, inv.data), { atol: 2e-6, rtol: 1e-5 }, `${isa} rope T=${T} H=${H} Dh=${Dh}`);
      const dy = randTensor(r, [T, H, Dh]);
      const dx = ops.ropeBackward(dy.clone(), pos, inv);
      const xs = f64(x.data);
      const idx = sampleIdx(r, x.numel, 10);
      const g = fd((v) => dot(ropeRef(v, T, H * Dh, 0, H, Dh, pos.data, inv.data), dy.data), xs, idx, 1e-4);
      close(t, idx.map((i) => dx.data[i]), g, { atol: 1e-5, rtol: 1e-4 }, `${isa} ropeBackward (finite differences)`);
    }
    // fused QKV rows (T, (Hq + 2 Hkv) Dh): rotate only the k block
    const T = 4, Hq = 4, Hkv = 2, Dh = 16, W = (Hq + 2 * Hkv) * Dh;
    const inv = ops.ropeInvFreq(Dh, 500000, { type: 'llama3', factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalMaxPositionEmbeddings: 64 });
    const pos = Tensor.i32([T], [0, 1, 100, 1000]);
    const x = randTensor(r, [T, W]);
    const y = ops.rope(x.clone(), pos, inv, { offset: Hq * Dh, heads: Hkv });
    close(t, y.data, ropeRef(x.data, T, W, Hq * Dh, Hkv, Dh, pos.data, inv.data), { atol: 2e-6, rtol: 1e-5 }, `${isa} rope on a strided block leaves the rest untouched`);
  });
  const x = randTensor(r, [2, 3, 8]);
  t.throws(() => ops.rope(x, Tensor.i32([3], [0, 1, 2]), ops.ropeInvFreq(8, 1e4)), /rope: pos \[3\] has T = 3, but x \[2, 3, 8\] has T = 2|pos has shape \[3\], expected \[2\]/);
  t.throws(() => ops.rope(x, Tensor.i32([2], [0, 1]), ops.ropeInvFreq(4, 1e4)), /rope: x has shape \[2, 3, 8\], expected \[T, H, 4\]/);
});

function ceRef(logits: ArrayLike<number>, labels: ArrayLike<number>, T: number, V: number): number {
  let s = 0, n = 0;
  for (let t = 0; t < T; t++) {
    if (labels[t] < 0) continue;
    let m = -Infinity;
    for (let j = 0; j < V; j++) m = Math.max(m, logits[t * V + j]);
    let z = 0;
    for (let j = 0; j < V; j++) z += Math.exp(logits[t * V + j] - m);
    s += m + Math.log(z) - logits[t * V + labels[t]];
    n++;
  }
  return n ? s / n : 0;
}

t.test('cross-entropy with ignored labels (-100), gradient by finite differences', async (t) => {
  const r = rng(12);
  await forEachIsa(async (isa) => {
    for (const [T, V] of [[1, 1], [1, 5], [6, 17], [9, 1000], [3, 33]]) {
      const logits = randTensor(r, [T, V], 5);
      const labels = Tensor.i32([T], Array.from({ length: T }, (_, i) => (i % 3 === 1 ? -100 : Math.floor(r() * V))));
      const res = ops.crossEntropy(logits, labels, { grad: true });
      const want = ceRef(logits.data, labels.data, T, V);
      t.ok(Math.abs(res.loss - want) <= 2e-6 * Math.max(1, Math.abs(want)), `${isa} loss T=${T} V=${V}: ${res.loss} vs ${want}`);
      const idx = sampleIdx(r, T * V, 16);
      const g = fd((x) => ceRef(x, labels.data, T, V), f64(logits.data), idx, 1e-5);
      close(t, idx.map((i) => res.dlogits!.data[i]), g, { atol: 1e-6, rtol: 1e-4 }, `${isa} dlogits T=${T} V=${V}`);
      labels.data.forEach((l, ti) => {
        if (l < 0 && res.losses.data[ti] !== 0) t.fail('ignored row has a loss');
        if (l < 0 && res.dlogits!.data.subarray(ti * V, (ti + 1) * V).some((x) => x !== 0)) t.fail('ignored row has a gradient');
      });
      const a = await ops.crossEntropyAsync(logits, labels);
      t.equal(a.loss, res.loss, `${isa} async loss equals sync`);
    }
    const none = ops.crossEntropy(randTensor(r, [2, 4]), Tensor.i32([2], [-100, -1]), { grad: true });
    t.equal(none.loss, 0, `${isa} all labels ignored: loss 0`);
    t.ok(none.dlogits!.data.every((x) => x === 0), `${isa} all labels ignored: zero gradient`);
  });
  t.throws(() => ops.crossEntropy(randTensor(r, [2, 4]), Tensor.i32([2], [0, 4])), /labels\[1\] = 4 is out of range \[0, 4\)/);
});

// PyTorch torch.optim.AdamW (single-tensor, foreach=False), float32 arithmetic
function adamwRef(p: Float32Array, g: Float32Array, m: Float32Array, v: Float32Array, lr: number, b1: number, b2: number, eps: number, wd: number, step: number) {
  const bc1 = 1 - b1 ** step, bc2 = 1 - b2 ** step;
  const stepSize = fr(lr / bc1), bc2s = fr(Math.sqrt(bc2));
  for (let i = 0; i < p.length; i++) {
    p[i] = fr(p[i] * fr(1 - lr * wd));
    m[i] = fr(m[i] + fr(fr(1 - b1) * fr(g[i] - m[i])));  // lerp_
    v[i] = fr(fr(v[i] * b2) + fr(fr(1 - b2) * fr(g[i] * g[i])));
    const denom = fr(fr(fr(Math.sqrt(v[i])) / bc2s) + eps);
    p[i] = fr(p[i] - fr(stepSize * fr(m[i] / denom)));
  }
}

t.test('AdamW matches PyTorch semantics over several steps; l2Norm', async (t) => {
  const r = rng(13);
  await forEachIsa((isa) => {
    for (const n of [1, 7, 16, 33, 50001]) {
      const p = randTensor(r, [n]), m = new Tensor('f32', [n]), v = new Tensor('f32', [n]);
      const pr = p.data.slice(), mr = new Float32Array(n), vr = new Float32Array(n);
      for (let step = 1; step <= 4; step++) {
        const g = randTensor(r, [n], 0.1 * step);
        ops.adamwStep(p, g, m, v, { lr: 1e-2, beta1: 0.9, beta2: 0.999, eps: 1e-8, weightDecay: 0.1, step });
        adamwRef(pr, g.data, mr, vr, 1e-2, 0.9, 0.999, 1e-8, 0.1, step);
      }
      close(t, p.data, pr, { atol: 1e-7, rtol: 1e-6 }, `${isa} adamw params n=${n}`);
      close(t, m.data, mr, { atol: 1e-8, rtol: 1e-6 }, `${isa} adamw m n=${n}`);
      close(t, v.data, vr, { atol: 1e-10, rtol: 1e-6 }, `${isa} adamw v n=${n}`);
      const want = Math.sqrt(p.data.reduce((a, x) => a + x * x, 0));
      t.ok(Math.abs(ops.l2Norm(p) - want) <= 1e-6 * want, `${isa} l2Norm n=${n}`);
    }
  });
  // gradScale (clipping folded into the step): the bits of a step on g scaled beforehand, g left as it was
  await forEachIsa((isa) => {
    for (const n of [5, 16, 50001]) {
      const p = randTensor(r, [n]), g = randTensor(r, [n]), m = randTensor(r, [n], 0.01);
      const v = new Tensor('f32', [n], Float32Array.from(randTensor(r, [n], 0.01).data, (x) => x * x));
      const [p2, m2, v2] = [p, m, v].map((x) => new Tensor('f32', [n], x.data.slice()));
      const g0 = g.data.slice(), c = Math.fround(0.3141);
      const gs = new Tensor('f32', [n], Float32Array.from(g.data, (x) => Math.fround(x * c)));
      ops.adamwStep(p, g, m, v, { lr: 1e-2, weightDecay: 0.1, step: 3, gradScale: c });
      ops.adamwStep(p2, gs, m2, v2, { lr: 1e-2, weightDecay: 0.1, step: 3 });
      const same = (a: Tensor, b: Tensor) => Buffer.from(a.data.buffer).equals(Buffer.from(b.data.buffer));
      t.ok(same(p, p2) && same(m, m2) && same(v, v2), `${isa} adamw gradScale n=${n}: the bits of a pre-scaled g`);
      t.same(g.data, g0, `${isa} gradScale leaves g as it was`);
    }
  });
  const p = randTensor(r, [3]);
  t.throws(() => ops.adamwStep(p, p, p, randTensor(r, [4]), { lr: 1, step: 1 }), /v has shape \[4\] but p has \[3\]/);
  t.throws(() => ops.adamwStep(p, p, p, p, { lr: 1, step: 0 }), /step must be an integer >= 1/);
});

function loraRef(x: ArrayLike<number>, w: ArrayLike<number>, A: ArrayLike<number>, B: ArrayLike<number>, s: number, M: number, N: number, K: number, r: number): Float64Array {
  const y = new Float64Array(M * N);
  for (let i = 0; i < M; i++) {
    const xa = new Float64Array(r);
    for (let a = 0; a < r; a++) for (let k = 0; k < K; k++) xa[a] += x[i * K + k] * A[a * K + k];
    for (let n = 0; n < N; n++) {
      let acc = 0;
      for (let k = 0; k < K; k++) acc += x[i * K + k] * w[n * K + k];
      for (let a = 0; a < r; a++) acc += s * xa[a] * B[n * r + a];
      y[i * N + n] = acc;
    }
  }
  return y;
}


t.test('LoRA linear: forward and gradients of A, B, x by finite differences (f32 and bf16 W)', async (t) => {
  const r = rng(14);
  await forEachIsa(async (isa) => {
    for (const [M, N, K, rank] of [[1, 8, 16, 2], [5, 13, 7, 4], [17, 33, 40, 8]]) {
      for (const wtype of ['f32', 'bf16'] as const) {
        const x = randTensor(r, [M, K]), A = randTensor(r, [rank, K], 0.5), B = randTensor(r, [N, rank], 0.5);
        const wf = randTensor(r, [N, K], 0.5);
        const w = wtype === 'f32' ? wf : new Tensor('bf16', [N, K], toBf16(wf.data));
        const wv = wtype === 'f32' ? wf.data : fromBf16(w.data as Uint16Array);
        const s = 2;
        const l: ops.LoraWeights = { w, A, B, scale: s };
        const { y, xa } = ops.lora(x, l);
        close(t, y.data, loraRef(x.data, wv, A.data, B.data, s, M, N, K, rank), { atol: 1e-5, rtol: 1e-5 }, `${isa} lora ${wtype} y M=${M} N=${N} K=${K} r=${rank}`);
        const dy = randTensor(r, [M, N]);
        const dA0 = randTensor(r, [rank, K]);
        const g = ops.loraBackward(x, l, xa, dy, { dA: dA0.clone() });
        const xs = f64(x.data), As = f64(A.data), Bs = f64(B.data);
        const L = (xx: Float64Array, aa: Float64Array, bb: Float64Array) => dot(loraRef(xx, wv, aa, bb, s, M, N, K, rank), dy.data);
        const tol = { atol: 1e-4, rtol: 1e-4 };
        const iA = sampleIdx(r, A.numel, 12), iB = sampleIdx(r, B.numel, 12), ix = sampleIdx(r, x.numel, 12);
        close(t, iA.map((i) => g.dA.data[i] - dA0.data[i]), fd((a) => L(xs, a, Bs), As, iA), tol, `${isa} lora ${wtype} dA (accumulated)`);
        close(t, iB.map((i) => g.dB.data[i]), fd((b) => L(xs, As, b), Bs, iB), tol, `${isa} lora ${wtype} dB`);
        close(t, ix.map((i) => g.dx.data[i]), fd((xx) => L(xx, As, Bs), xs, ix), tol, `${isa} lora ${wtype} dx`);
        const ya = await ops.loraAsync(x, l);
        t.same(Array.from(ya.y.data), Array.from(y.data), `${isa} lora async equals sync`);
        const ga = await ops.loraBackwardAsync(x, l, xa, dy);
        close(t, ga.dB.data, g.dB.data, { atol: 0, rtol: 0 }, `${isa} lora backward async equals sync`);
      }
    }
  });
  const x = randTensor(r, [2, 8]);
  t.throws(() => ops.lora(x, { w: randTensor(r, [4, 8]), A: randTensor(r, [2, 7]), B: randTensor(r, [4, 2]), scale: 1 }), /lora: A \[2, 7\] has K = 7, but x \[2, 8\] has K = 8/);
  t.throws(() => ops.lora(x, { w: randTensor(r, [4, 8]), A: randTensor(r, [2, 8]), B: randTensor(r, [4, 3]), scale: 1 }), /B \[4, 3\] has r = 3, but A \[2, 8\] has r = 2/);
});
