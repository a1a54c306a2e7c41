// Quantizers to ggml's block types as llama.cpp's `llama-quantize` writes them without an importance matrix:
// Q4_K and Q5_0 / Q6_K (the _ref row quantizers of ggml-quants.c: an error-minimising scale / min search per
// sub-block, then 6- or 8-bit sub-block scales under one f16 super-block scale) and the type choice of the
// Q4_K_M / Q6_K / Q8_0 file types (llama-quant.cpp's llama_tensor_get_type). Arithmetic is float32 throughout
// (every step rounded with Math.fround), in llama.cpp's order, so the blocks match its quantizer's up to
// the fused multiply-adds a C compiler may form. Block layouts: native/formats/gguf_dequant.cc. The converter
// writes Q4_K through the native port of quantizeQ4_K (addon.quantizeQ4K, native/formats/gguf_quantize.cc: about
// 6x faster, the same bytes; test/formats/gguf-quantize.test.ts compares them); this one is its reference.
import { f16ToF32, f32ToF16 } from './f16.ts';
import { GgufError } from './gguf.ts';

const QK_K = 256;
const fr = Math.fround;
/** x stored as f16 and read back (what a block's scale field holds). */
const viaF16 = (x: number): number => f16ToF32(f32ToF16(x));
/** ggml's nearest_int: round half to even through the 1.5·2^23 trick (|v| < 2^22). */
function nearestInt(v: number): number {
  return fr(fr(v) + 12582912) - 12582912;
}
const clamp = (v: number, lo: number, hi: number) => (v < lo ? lo : v > hi ? hi : v);

/**
 * make_qkx2_quants: levels L (0..nmax) and (scale, min) minimising Σ w·(scale·L + min - x)² over nstep+1
 * candidate inverse scales (rmin + rdelta·is + nmax)/(max - min), each refined by weighted least squares.
 * Returns the scale and -min (≥ 0).
 */
function makeQkx2(x: Float32Array, w: Float32Array, nmax: number, L: Uint8Array, rmin: number, rdelta: number,
  nstep: number): { scale: number; negMin: number } {
  const n = x.length;
  let min = x[0], max = x[0], sumW = w[0], sumX = fr(sumW * x[0]);
  for (let i = 1; i < n; i++) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sumW = fr(sumW + w[i]);
    sumX = fr(sumX + fr(w[i] * x[i]));
  }
  if (min > 0) min = 0;
  if (max === min) {
    L.fill(0);
    return { scale: 0, negMin: -min };
  }
  let iscale = fr(nmax / fr(max - min));
  let scale = fr(1 / iscale);
  let bestError = 0;
  for (let i = 0; i < n; i++) {
    L[i] = clamp(nearestInt(fr(iscale * fr(x[i] - min))), 0, nmax);
    const diff = fr(fr(fr(scale * L[i]) + min) - x[i]);
    bestError = fr(bestError + fr(w[i] * fr(diff * diff)));
  }
  const aux = new Uint8Array(n);
  for (let is = 0; is <= nstep; is++) {
    iscale = fr(fr(fr(rmin + fr(rdelta * is)) + nmax) / fr(max - min));
    let sumL = 0, sumL2 = 0, sumXL = 0;
    for (let i = 0; i < n; i++) {
      const l = clamp(nearestInt(fr(iscale * fr(x[i] - min))), 0, nmax);
      aux[i] = l;
      sumL = fr(sumL + fr(w[i] * l));
      sumL2 = fr(sumL2 + fr(fr(w[i] * l) * l));
      sumXL = fr(sumXL + fr(fr(w[i] * l) * x[i]));
    }
    const D = fr(fr(sumW * sumL2) - fr(sumL * sumL));
    if (D > 0) {
      let thisScale = fr(fr(fr(sumW * sumXL) - fr(sumX * sumL)) / D);
      let thisMin = fr(fr(fr(sumL2 * sumX) - fr(sumL * sumXL)) / D);
      if (thisMin > 0) {
        thisMin = 0;
        thisScale = fr(sumXL / sumL2);
      }
      let err = 0;
      for (let i = 0; i < n; i++) {
        const diff = fr(fr(fr(thisScale * aux[i]) + thisMin) - x[i]);
        err = fr(err + fr(w[i] * fr(diff * diff)));
      }
      if (err < bestError) {
        L.set(aux);
        bestError = err;
        scale = thisScale;
        min = thisMin;
      }
    }
  }
  return { scale, negMin: -min };
}

/**
 * make_qx_quants with rmse_type 1 (weights x²): signed levels L + nmax for a symmetric scale, the inverse scale
 * searched over -(nmax + 0.1·is)/max, is = -9..9, by weighted least squares. Returns the scale.
 */
function makeQx(x: Float32Array, nmax: number, L: Int8Array): number {
  const n = x.length;
  let max = 0, amax = 0;
  for (let i = 0; i < n; i++) {
    const ax = Math.abs(x[i]);
    if (ax > amax) { amax = ax; max = x[i]; }
  }
  if (amax < 1e-15) { // GROUP_MAX_EPS
    L.fill(0);
    return 0;
  }
  const fit = (iscale: number, store: boolean) => {
    let sumlx = 0, suml2 = 0;
    for (let i = 0; i < n; i++) {
      const l = clamp(nearestInt(fr(iscale * x[i])), -nmax, nmax - 1);
      if (store) L[i] = l + nmax;
      const w = fr(x[i] * x[i]);
      sumlx = fr(sumlx + fr(fr(w * x[i]) * l));
      suml2 = fr(suml2 + fr(fr(w * l) * l));
    }
    return { sumlx, suml2 };
  };
  let iscale = fr(-nmax / max);
  let { sumlx, suml2 } = fit(iscale, true);
  let scale = suml2 ? fr(sumlx / suml2) : 0;
  let best = fr(scale * sumlx);
  for (let is = -9; is <= 9; is++) {
    if (is === 0) continue;
    iscale = fr(fr(-fr(nmax + fr(0.1 * is))) / max);
    ({ sumlx, suml2 } = fit(iscale, false));
    if (suml2 > 0 && fr(sumlx * sumlx) > fr(best * suml2)) {
      fit(iscale, true);
      scale = fr(sumlx / suml2);
      best = fr(scale * sumlx);
    }
  }
  return scale;
}

/** Q4_K (144 bytes / 256 values), as quantize_row_q4_K_ref. */
export function quantizeQ4_K(x: Float32Array): Uint8Array {
  if (x.length % QK_K) throw new RangeError(`Q4_K needs a multiple of ${QK_K} values (got ${x.length})`);
  const nb = x.length / QK_K, out = new Uint8Array(nb * 144), dv = new DataView(out.buffer);
  const L = new Uint8Array(QK_K), w = new Float32Array(32), scales = new Float32Array(8), mins = new Float32Array(8);
  for (let b = 0; b < nb; b++) {
    const xb = x.subarray(b * QK_K, (b + 1) * QK_K), o = b * 144;
    let maxScale = 0, maxMin = 0;
    for (let j = 0; j < 8; j++) {
      const xs = xb.subarray(32 * j, 32 * j + 32);
      let sumX2 = 0;
      for (let l = 0; l < 32; l++) sumX2 = fr(sumX2 + fr(xs[l] * xs[l]));
      const avX = fr(Math.sqrt(fr(sumX2 / 32)));
      for (let l = 0; l < 32; l++) w[l] = fr(avX + Math.abs(xs[l]));
      const r = makeQkx2(xs, w, 15, L.subarray(32 * j, 32 * j + 32), -1, fr(0.1), 20);
      scales[j] = r.scale;
      mins[j] = r.negMin;
      if (r.scale > maxScale) maxScale = r.scale;
      if (r.negMin > maxMin) maxMin = r.negMin;
    }
    const invScale = maxScale > 0 ? fr(63 / maxScale) : 0, invMin = maxMin > 0 ? fr(63 / maxMin) : 0;
    const sc = out.subarray(o + 4, o + 16);
    for (let j = 0; j < 8; j++) {
      const ls = Math.min(63, nearestInt(fr(invScale * scales[j])) & 255);
      const lm = Math.min(63, nearestInt(fr(invMin * mins[j])) & 255);
      if (j < 4) {
        sc[j] = ls;
        sc[j + 4] = lm;
      } else {
        sc[j + 4] = (ls & 0xf) | ((lm & 0xf) << 4);
        sc[j - 4] |= (ls >> 4) << 6;
        sc[j] |= (lm >> 4) << 6;
      }
    }
    dv.setUint16(o, f32ToF16(fr(maxScale / 63)), true);
    dv.setUint16(o + 2, f32ToF16(fr(maxMin / 63)), true);
    const d = viaF16(fr(maxScale / 63)), dmin = viaF16(fr(maxMin / 63));
    for (let j = 0; j < 8; j++) {
      const [s, m] = scaleMinK4(j, sc);
      const dj = fr(d * s);
      if (!dj) continue;
      const dm = fr(dmin * m);
      for (let l = 0; l < 32; l++) L[32 * j + l] = clamp(nearestInt(fr(fr(xb[32 * j + l] + dm) / dj)), 0, 15);
    }
    for (let c = 0; c < 4; c++)
      for (let l = 0; l < 32; l++) out[o + 16 + 32 * c + l] = L[64 * c + l] | (L[64 * c + 32 + l] << 4);
  }
  return out;
}

function scaleMinK4(j: number, s: Uint8Array): [number, number] {
  if (j < 4) return [s[j] & 63, s[j + 4] & 63];
  return [(s[j + 4] & 0xf) | ((s[j - 4] >> 6) << 4), (s[j + 4] >> 4) | ((s[j] >> 6) << 4)];
}

/** Q6_K (210 bytes / 256 values), as quantize_row_q6_K_ref. */
export function quantizeQ6_K(x: Float32Array): Uint8Array {
  if (x.length % QK_K) throw new RangeError(`Q6_K needs a multiple of ${QK_K} values (got ${x.length})`);
  const nb = x.length / QK_K, out = new Uint8Array(nb * 210), dv = new DataView(out.buffer);
  const L = new Int8Array(QK_K), Lq = new Uint8Array(QK_K), scales = new Float32Array(16);
  for (let b = 0; b < nb; b++) {
    const xb = x.subarray(b * QK_K, (b + 1) * QK_K), o = b * 210;
    let maxScale = 0, maxAbs = 0;
    for (let g = 0; g < 16; g++) {
      const s = makeQx(xb.subarray(16 * g, 16 * g + 16), 32, L.subarray(16 * g, 16 * g + 16));
      scales[g] = s;
      if (Math.abs(s) > maxAbs) { maxAbs = Math.abs(s); maxScale = s; }
    }
    if (maxAbs < 1e-15) continue;  // an all-zero block: zero bytes, d = 0
    const iscale = fr(-128 / maxScale);
    dv.setUint16(o + 208, f32ToF16(fr(1 / iscale)), true);
    const d = viaF16(fr(1 / iscale));
    for (let g = 0; g < 16; g++) dv.setInt8(o + 192 + g, Math.min(127, nearestInt(fr(iscale * scales[g]))));
    for (let g = 0; g < 16; g++) {
      const dg = fr(d * dv.getInt8(o + 192 + g));
      if (!dg) continue;  // keeps make_qx_quants' levels for this group
      for (let l = 0; l < 16; l++) L[16 * g + l] = clamp(nearestInt(fr(xb[16 * g + l] / dg)), -32, 31) + 32;
    }
    for (let i = 0; i < QK_K; i++) Lq[i] = L[i] & 0xff;
    for (let h = 0; h < 2; h++) {
      const ql = o + 64 * h, qh = o + 128 + 32 * h, j = 128 * h;
      for (let l = 0; l < 32; l++) {
        out[ql + l] = (Lq[j + l] & 0xf) | ((Lq[j + l + 64] & 0xf) << 4);
        out[ql + l + 32] = (Lq[j + l + 32] & 0xf) | ((Lq[j + l + 96] & 0xf) << 4);
        out[qh + l] = (Lq[j + l] >> 4) | ((Lq[j + l + 32] >> 4) << 2) | ((Lq[j + l + 64] >> 4) << 4) |
          ((Lq[j + l + 96] >> 4) << 6);
      }
    }
  }
  return out;
}

/** Q5_0 (22 bytes / 32 values), as quantize_row_q5_0_ref: d = max / -16 (max the value of largest |x|). */
export function quantizeQ5_0(x: Float32Array): Uint8Array {
  if (x.length % 32) throw new RangeError(`Q5_0 needs a multiple of 32 values (got ${x.length})`);
  const nb = x.length / 32, out = new Uint8Array(nb * 22), dv = new DataView(out.buffer);
  for (let b = 0; b < nb; b++) {
    const xb = x.subarray(32 * b, 32 * b + 32), o = 22 * b;
    let amax = 0, max = 0;
    for (let j = 0; j < 32; j++) if (amax < Math.abs(xb[j])) { amax = Math.abs(xb[j]); max = xb[j]; }
    const d = fr(max / -16), id = d ? fr(1 / d) : 0;
    dv.setUint16(o, f32ToF16(d), true);
    let qh = 0;
    for (let j = 0; j < 16; j++) {
      // (int8_t)(x·id + 16.5f): truncation toward zero, then at most 31
      const q0 = Math.min(31, Math.trunc(fr(fr(xb[j] * id) + 16.5)));
      const q1 = Math.min(31, Math.trunc(fr(fr(xb[j + 16] * id) + 16.5)));
      out[o + 6 + j] = (q0 & 0xf) | ((q1 & 0xf) << 4);
      qh |= ((q0 & 0x10) >> 4) << j;
      qh |= ((q1 & 0x10) >> 4) << (j + 16);
    }
    dv.setUint32(o + 2, qh >>> 0, true);
  }
  return out;
}

/** The file types convertHfToGguf writes besides the plain ones; names as llama-quantize's. */
export type QuantFileType = 'Q8_0' | 'Q6_K' | 'Q4_K_M';

function useMoreBits(i: number, n: number): boolean {
  return i < Math.floor(n / 8) || i >= Math.floor((7 * n) / 8) || (i - Math.floor(n / 8)) % 3 === 2;
}

/**
 * The tensor type llama-quantize picks for a 2-D weight of a `ftype` file (llama_tensor_get_type, dense
 * decoders): the default type of the file type; Q6_K for output.weight (token_embd.weight when there is no
 * output.weight); in Q4_K_M, Q6_K for attn_v and ffn_down of the layers use_more_bits picks (the first and last
 * eighth, every third between). Rows that are not a multiple of 256 fall back (Q4_K → Q5_0, Q6_K → Q8_0;
 * output.weight to Q8_0), rows not a multiple of 32 to F16.
 */
export function ggufQuantType(ftype: QuantFileType, name: string, cols: number, nLayers: number,
  hasOutput: boolean): 'F16' | 'Q8_0' | 'Q6_K' | 'Q4_K' | 'Q5_0' {
  let t: 'F16' | 'Q8_0' | 'Q6_K' | 'Q4_K' | 'Q5_0' = ftype === 'Q8_0' ? 'Q8_0' : ftype === 'Q6_K' ? 'Q6_K' : 'Q4_K';
  const layer = /^blk\.(\d+)\./.exec(name);
  if (name === 'output.weight' || (!hasOutput && name === 'token_embd.weight')) {
    if (cols % QK_K !== 0) t = 'Q8_0';
    else if (t !== 'Q8_0') t = 'Q6_K';
  } else if (ftype === 'Q4_K_M' && layer && /\.(attn_v|ffn_down)\.weight$/.test(name)) {
    if (useMoreBits(Number(layer[1]), nLayers)) t = 'Q6_K';
  }
  if ((t === 'Q4_K' || t === 'Q6_K') && cols % QK_K !== 0) t = t === 'Q4_K' ? 'Q5_0' : 'Q8_0';
  if (cols % 32 !== 0) t = 'F16';
  return t;
}

/** Quantizes float32 rows to Q8_0 blocks (as llama.cpp's reference quantize_row_q8_0). */
export function quantizeQ8_0(x: Float32Array): Uint8Array {
  if (x.length % 32) throw new GgufError(`Q8_0 needs a multiple of 32 values (got ${x.length})`);
  const nb = x.length / 32;
  const out = new Uint8Array(nb * 34);
  const dv = new DataView(out.buffer);
  for (let b = 0; b < nb; b++) {
    let amax = 0;
    for (let i = 0; i < 32; i++) amax = Math.max(amax, Math.abs(x[b * 32 + i]));
    const d = amax / 127, id = d ? 1 / d : 0;
    dv.setUint16(b * 34, f32ToF16(d), true);
    for (let i = 0; i < 32; i++) dv.setInt8(b * 34 + 2 + i, Math.round(x[b * 32 + i] * id));
  }
  return out;
}
