// Test-only quantizers to Q4_K and Q6_K (Loom's writer only quantizes to Q8_0), for building quantized GGUF
// models in tests. They produce valid ggml blocks with a plain scale choice per sub-block (max-abs /
// min-max), not llama.cpp's error-minimising search, so their error is somewhat above llama.cpp's for the
// same type. Layouts: native/formats/gguf_dequant.cc (and ggml-common.h).
import { f32ToF16 } from '../../src/formats/f16.ts';

const QK_K = 256;
const f16buf = new Uint16Array(1);
/** The float32 value of x rounded to f16 (what a block's d field will hold). */
function roundF16(x: number): number {
  f16buf[0] = f32ToF16(x);
  const h = f16buf[0], e = (h >> 10) & 0x1f, m = h & 0x3ff, s = h & 0x8000 ? -1 : 1;
  return e === 0 ? s * m * 2 ** -24 : s * (1 + m / 1024) * 2 ** (e - 15);
}
const clamp = (v: number, lo: number, hi: number) => Math.min(hi, Math.max(lo, v));

/** Q4_K: per 32 values a 6-bit scale and 6-bit min (times the f16 d / dmin of the 256-value block); q in 0..15. */
export function quantizeQ4K(x: Float32Array): Uint8Array {
  if (x.length % QK_K) throw new Error(`Q4_K needs a multiple of ${QK_K} values`);
  const nb = x.length / QK_K;
  const out = new Uint8Array(nb * 144);
  const dv = new DataView(out.buffer);
  for (let b = 0; b < nb; b++) {
    const xb = x.subarray(b * QK_K, (b + 1) * QK_K), o = b * 144;
    const scale = new Float64Array(8), negMin = new Float64Array(8);
    for (let j = 0; j < 8; j++) {
      let lo = 0, hi = -Infinity;
      for (let l = 0; l < 32; l++) { lo = Math.min(lo, xb[32 * j + l]); hi = Math.max(hi, xb[32 * j + l]); }
      scale[j] = (hi - lo) / 15;
      negMin[j] = -lo;
    }
    const d = roundF16(Math.max(...scale) / 63), dmin = roundF16(Math.max(...negMin) / 63);
    const sc = new Array<number>(8), mn = new Array<number>(8);
    for (let j = 0; j < 8; j++) {
      sc[j] = d ? clamp(Math.round(scale[j] / d), 0, 63) : 0;
      mn[j] = dmin ? clamp(Math.round(negMin[j] / dmin), 0, 63) : 0;
    }
    dv.setUint16(o, f32ToF16(d), true);
    dv.setUint16(o + 2, f32ToF16(dmin), true);
    for (let j = 0; j < 4; j++) {
      out[o + 4 + j] = (sc[j] & 63) | ((sc[j + 4] >> 4) << 6);
      out[o + 8 + j] = (mn[j] & 63) | ((mn[j + 4] >> 4) << 6);
      out[o + 12 + j] = (sc[j + 4] & 15) | ((mn[j + 4] & 15) << 4);
    }
    for (let j = 0; j < 8; j++) {
      const s = d * sc[j], m = dmin * mn[j];
      for (let l = 0; l < 32; l++) {
        const q = s ? clamp(Math.round((xb[32 * j + l] + m) / s), 0, 15) : 0;
        out[o + 16 + 32 * (j >> 1) + l] |= q << (4 * (j & 1));
      }
    }
  }
  return out;
}

/** Q6_K: per 16 values an int8 scale (times the block's f16 d); q in -32..31. */
export function quantizeQ6K(x: Float32Array): Uint8Array {
  if (x.length % QK_K) throw new Error(`Q6_K needs a multiple of ${QK_K} values`);
  const nb = x.length / QK_K;
  const out = new Uint8Array(nb * 210);
  const dv = new DataView(out.buffer);
  for (let b = 0; b < nb; b++) {
    const xb = x.subarray(b * QK_K, (b + 1) * QK_K), o = b * 210;
    const scale = new Float64Array(16);
    for (let j = 0; j < 16; j++) {
      let amax = 0;
      for (let l = 0; l < 16; l++) amax = Math.max(amax, Math.abs(xb[16 * j + l]));
      scale[j] = amax / 31;
    }
    const d = roundF16(Math.max(...scale) / 127);
    dv.setUint16(o + 208, f32ToF16(d), true);
    for (let j = 0; j < 16; j++) dv.setInt8(o + 192 + j, d ? clamp(Math.round(scale[j] / d), -128, 127) : 0);
    for (let i = 0; i < QK_K; i++) {
      const s = d * dv.getInt8(o + 192 + (i >> 4));
      const q = (s ? clamp(Math.round(xb[i] / s), -32, 31) : 0) + 32;
      const h = i >> 7, r = i & 127;
      out[o + 64 * h + (r & 63)] |= (q & 15) << (4 * (r >> 6));
      out[o + 128 + 32 * h + (r & 31)] |= (q >> 4) << (2 * (r >> 5));
    }
  }
  return out;
}
