// CUDA availability is reported sensibly everywhere; where a GPU is present and the addon was
// built with CUDA (`npm run build:cuda`), the GPU ops are checked against straightforward
// references on the CPU.
import t from 'tap';
import { cudaInfo, cudaLinear, cudaRmsnorm, cudaSoftmax, cudaAttention, cudaCrossEntropy } from '../../src/native/cuda.ts';

function rand(n: number, seed: number): Float32Array {
  const a = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    a[i] = (s / 2 ** 32) * 2 - 1;
  }
  return a;
}

function maxErr(a: Float32Array, b: Float64Array | Float32Array): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]) / (1 + Math.abs(b[i])));
  return m;
}

const info = cudaInfo();

t.test('cudaInfo reports availability with a reason', async (t) => {
  t.type(info.available, 'boolean');
  t.type(info.reason, 'string');
  t.ok(Array.isArray(info.devices));
  if (info.available) {
    t.equal(info.reason, '');
    t.ok(info.devices.length >= 1, 'a device is listed');
    t.match(info.devices[0].computeCapability, /^\d+\.\d+$/);
    t.ok(['cublaslt', 'cublas', 'kernel'].includes(info.gemmBackend));
  } else {
    t.ok(info.reason.length > 0, `unavailable: ${info.reason}`);
    t.equal(info.devices.length, 0);
    if (!info.built) t.match(info.reason, /without CUDA/);
    else t.match(info.reason, /driver|device|capability|LOOM_CUDA_DEVICE|cudaGetDeviceCount/);
  }
});

t.test('GPU ops reject clearly when CUDA is unavailable', { skip: info.available && 'CUDA available' }, async (t) => {
  await t.rejects(cudaLinear(new Float32Array(4), new Float32Array(4), null, 2, 2, 2), /CUDA unavailable/);
  await t.rejects(cudaSoftmax(new Float32Array(4), 2, 2), /CUDA unavailable/);
});

t.test('GPU ops match CPU references', { skip: !info.available && `CUDA unavailable: ${info.reason}` }, async (t) => {
  // linear, M = 1 and an odd shape, with bias
  for (const [M, N, K] of [[1, 33, 64], [7, 19, 45]]) {
    const x = rand(M * K, 1), w = rand(N * K, 2), b = rand(N, 3);
    const ref = new Float64Array(M * N);
    for (let i = 0; i < M; i++)
      for (let j = 0; j < N; j++) {
        let s = b[j];
        for (let k = 0; k < K; k++) s += x[i * K + k] * w[j * K + k];
        ref[i * N + j] = s;
      }
    const y = await cudaLinear(x, w, b, M, N, K);
    t.ok(maxErr(y, ref) < 1e-4, `linear ${M}x${N}x${K}`);
  }
  // rmsnorm
  {
    const R = 5, D = 77, x = rand(R * D, 4), w = rand(D, 5), ref = new Float64Array(R * D);
    for (let r = 0; r < R; r++) {
      let ss = 0;
      for (let i = 0; i < D; i++) ss += x[r * D + i] ** 2;
      const rs = 1 / Math.sqrt(ss / D + 1e-6);
      for (let i = 0; i < D; i++) ref[r * D + i] = x[r * D + i] * rs * w[i];
    }
    t.ok(maxErr(await cudaRmsnorm(x, w, R, D, 1e-6), ref) < 1e-4, 'rmsnorm');
  }
  // softmax
  {
    const R = 3, D = 1001, x = rand(R * D, 6), ref = new Float64Array(R * D);
    for (let r = 0; r < R; r++) {
      let m = -Infinity, s = 0;
      for (let i = 0; i < D; i++) m = Math.max(m, x[r * D + i]);
      for (let i = 0; i < D; i++) s += Math.exp(x[r * D + i] - m);
      for (let i = 0; i < D; i++) ref[r * D + i] = Math.exp(x[r * D + i] - m) / s;
    }
    t.ok(maxErr(await cudaSoftmax(x, R, D), ref) < 1e-5, 'softmax');
  }
  // causal GQA attention
  {
    const B = 1, Tq = 9, Tk = 9, Hq = 4, Hkv = 2, Dh = 64, G = Hq / Hkv, sc = 1 / Math.sqrt(Dh);
    const q = rand(B * Tq * Hq * Dh, 7), k = rand(B * Tk * Hkv * Dh, 8), v = rand(B * Tk * Hkv * Dh, 9);
    const ref = new Float64Array(q.length);
    for (let h = 0; h < Hq; h++)
      for (let i = 0; i < Tq; i++) {
        const s: number[] = [];
        for (let j = 0; j <= i; j++) {
          let d = 0;
          for (let c = 0; c < Dh; c++) d += q[(i * Hq + h) * Dh + c] * k[(j * Hkv + Math.floor(h / G)) * Dh + c];
          s.push(d * sc);
        }
        const m = Math.max(...s), z = s.reduce((a, x) => a + Math.exp(x - m), 0);
        for (let j = 0; j <= i; j++)
          for (let c = 0; c < Dh; c++)
            ref[(i * Hq + h) * Dh + c] += (Math.exp(s[j] - m) / z) * v[(j * Hkv + Math.floor(h / G)) * Dh + c];
      }
    t.ok(maxErr(await cudaAttention(q, k, v, { B, Tq, Tk, Hq, Hkv, Dh, causal: true }), ref) < 1e-4, 'attention');
  }
  // cross-entropy with an ignored label
  {
    const T = 4, V = 50, logits = rand(T * V, 10), labels = Int32Array.from([3, -100, 49, 0]);
    let total = 0, n = 0;
    for (let r = 0; r < T; r++) {
      if (labels[r] < 0) continue;
      let m = -Infinity, s = 0;
      for (let i = 0; i < V; i++) m = Math.max(m, logits[r * V + i]);
      for (let i = 0; i < V; i++) s += Math.exp(logits[r * V + i] - m);
      total += m + Math.log(s) - logits[r * V + labels[r]];
      n++;
    }
    const { loss, dlogits } = await cudaCrossEntropy(logits, labels, T, V);
    t.ok(Math.abs(loss - total / n) < 1e-4, 'cross-entropy loss');
    t.equal(dlogits.slice(V, 2 * V).reduce((a, x) => a + Math.abs(x), 0), 0, 'ignored row has zero gradient');
  }
});
