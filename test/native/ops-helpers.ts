// Shared helpers for the ops tests: a seeded RNG, float64 references, closeness checks and
// central finite differences.
import { Tensor } from '../../src/native/tensor.ts';

/** mulberry32: deterministic uniform numbers in [0, 1). */
export function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** Uniform values in [-scale, scale). */
export function randArray(r: () => number, n: number, scale = 1): Float32Array {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) a[i] = (2 * r() - 1) * scale;
  return a;
}

/** fp32 values rounded to bf16 (nearest even; NaN payloads not handled): the bits, and those bits widened back. */
export function toBf16(a: Float32Array): Uint16Array {
  const u = new Uint32Array(a.buffer, a.byteOffset, a.length);
  return Uint16Array.from(u, (x) => (x + 0x7fff + ((x >>> 16) & 1)) >>> 16);
}
export function fromBf16(b: Uint16Array): Float32Array {
  return new Float32Array(Uint32Array.from(b, (x) => x << 16).buffer);
}

export function randTensor(r: () => number, shape: number[], scale = 1): Tensor<'f32'> {
  return new Tensor('f32', shape, randArray(r, shape.reduce((a, b) => a * b, 1), scale));
}

export function randInt(r: () => number, lo: number, hi: number): number {
  return lo + Math.floor(r() * (hi - lo));
}

export interface Tol {
  atol?: number;
  rtol?: number;
}

/** First index where |a - e| > atol + rtol |e| (NaN mismatch counts), or -1. */
export function firstMismatch(a: ArrayLike<number>, e: ArrayLike<number>, tol: Tol): number {
  const atol = tol.atol ?? 1e-6, rtol = tol.rtol ?? 1e-5;
  if (a.length !== e.length) return 0;
  for (let i = 0; i < a.length; i++) {
    const x = a[i], y = e[i];
    if (Number.isNaN(x) !== Number.isNaN(y)) return i;
    if (x === y) continue;  // incl. equal infinities
    if (!(Math.abs(x - y) <= atol + rtol * Math.abs(y))) return i;
  }
  return -1;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function close(t: any, actual: ArrayLike<number>, expected: ArrayLike<number>, tol: Tol, msg: string): boolean {
  if (actual.length !== expected.length) {
    t.fail(`${msg}: length ${actual.length} vs expected ${expected.length}`);
    return false;
  }
  const i = firstMismatch(actual, expected, tol);
  if (i >= 0) {
    t.fail(`${msg}: at [${i}] got ${actual[i]}, expected ${expected[i]} (atol ${tol.atol ?? 1e-6}, rtol ${tol.rtol ?? 1e-5})`);
    return false;
  }
  t.pass(msg);
  return true;
}

/**
 * Central finite differences of a float64 scalar function at the given indices of x
 * (x is restored afterwards).
 */
export function fd(f: (x: Float64Array) => number, x: Float64Array, idx: number[], h = 1e-5): number[] {
  return idx.map((i) => {
    const v = x[i];
    x[i] = v + h;
    const fp = f(x);
    x[i] = v - h;
    const fm = f(x);
    x[i] = v;
    return (fp - fm) / (2 * h);
  });
}

/** Up to n distinct random indices in [0, len). */
export function sampleIdx(r: () => number, len: number, n: number): number[] {
  if (len <= n) return Array.from({ length: len }, (_, i) => i);
  const s = new Set<number>();
  while (s.size < n) s.add(Math.floor(r() * len));
  return [...s];
}

export function f64(a: ArrayLike<number>): Float64Array {
  return Float64Array.from(a as ArrayLike<number>);
}

export function dot(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) s += a[i] * b[i];
  return s;
}

/** erf to ~1e-15 (series for |x| < 3, continued fraction for erfc beyond). */
export function erf(x: number): number {
  const ax = Math.abs(x);
  if (ax < 3) {
    let term = ax, sum = ax;
    for (let n = 1; n < 200; n++) {
      term *= (-ax * ax) / n;
      const add = term / (2 * n + 1);
      sum += add;
      if (Math.abs(add) < 1e-17 * Math.abs(sum)) break;
    }
    const r = (2 / Math.sqrt(Math.PI)) * sum;
    return x < 0 ? -r : r;
  }
  return x < 0 ? erfc(ax) - 1 : 1 - erfc(ax);
}

/** erfc for x >= 0 accurate in relative terms (continued fraction, Lentz). */
export function erfc(x: number): number {
  if (x < 0) return 2 - erfc(-x);
  if (x < 3) return 1 - erf(x);
  // erfc(x) = exp(-x²)/√π · 1/(x + 1/2/(x + 1/(x + 3/2/(x + ...))))
  let f = x, C = x, D = 0;
  for (let n = 1; n < 300; n++) {
    const a = n / 2;
    D = x + a * D;
    D = 1 / D;
    C = x + a / C;
    const delta = C * D;
    f *= delta;
    if (Math.abs(delta - 1) < 1e-16) break;
  }
  return Math.exp(-x * x) / Math.sqrt(Math.PI) / f;
}

export const SHAPES_ROWS: [number, number][] = [[1, 1], [1, 7], [3, 8], [5, 17], [2, 64], [4, 100], [7, 33], [1, 1000], [65, 31]];
export const SIZES: number[] = [1, 3, 8, 15, 16, 17, 31, 33, 100, 1023, 40000];
