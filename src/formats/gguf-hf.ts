// The HF ↔ llama.cpp mapping for Llama-family decoders: tensor names, Q/K rows, Llama 3 RoPE factors, the config
// from GGUF metadata, a GGUF file opened as an HF-named checkpoint (loadGgufCheckpoint), and an HF folder written as
// a GGUF file llama.cpp loads (convertHfToGguf).
//
// Q/K rows: llama.cpp's converter permutes the rows of q_proj / k_proj (and their biases) for arch "llama"
// (HF rotate-half RoPE → llama.cpp's interleaved RoPE): within each head of size hd, GGUF row 2i + a holds HF
// row a·hd/2 + i. hfToGguf applies it, ggufToHf undoes it, so HF → GGUF → HF gives identical tensors (and
// identical logits). Arch "qwen2" uses NEOX RoPE in llama.cpp and is not permuted.
//
// Llama 3 RoPE scaling: llama.cpp reads it as the tensor `rope_freqs.weight` (F32, head_dim/2): per rotary
// pair, the divisor of the default frequency theta^(-2i/Dh) (1 for high frequencies, `factor` for low ones,
// the smooth interpolation between). The converter writes it (plus the exact HF parameters under the private
// key loom.rope_scaling); the reader recovers the llama3 parameters from the tensor (checking that they
// reproduce it), so files from llama.cpp's own converter load with the same frequencies.
import { SafetensorsCheckpoint, type StDType } from './safetensors.ts';
import { loadDecoderConfig, parseDecoderConfig, type DecoderConfig } from './hf-config.ts';
import { addon } from '../native/addon.ts';
import { f32ToF16 } from './f16.ts';
import { GgmlType, GgufError, GgufFile, gv, type GgufTensorInfo, type GgufValue } from './gguf.ts';
import { writeGguf, type GgufTensorToWrite } from './gguf-writer.ts';
import { ggufQuantType, quantizeQ5_0, quantizeQ6_K, quantizeQ8_0, type QuantFileType } from './gguf-quantize.ts';
import { ggufTokenizerMetadata } from './gguf-tokenizer.ts';

const LAYER_MAP: [string, string][] = [
  ['input_layernorm.weight', 'attn_norm.weight'],
  ['self_attn.q_proj.weight', 'attn_q.weight'],
  ['self_attn.q_proj.bias', 'attn_q.bias'],
  ['self_attn.k_proj.weight', 'attn_k.weight'],
  ['self_attn.k_proj.bias', 'attn_k.bias'],
  ['self_attn.v_proj.weight', 'attn_v.weight'],
  ['self_attn.v_proj.bias', 'attn_v.bias'],
  ['self_attn.o_proj.weight', 'attn_output.weight'],
  ['post_attention_layernorm.weight', 'ffn_norm.weight'],
  ['mlp.gate_proj.weight', 'ffn_gate.weight'],
  ['mlp.up_proj.weight', 'ffn_up.weight'],
  ['mlp.down_proj.weight', 'ffn_down.weight'],
];
const TOP_MAP: [string, string][] = [
  ['model.embed_tokens.weight', 'token_embd.weight'],
  ['model.norm.weight', 'output_norm.weight'],
  ['lm_head.weight', 'output.weight'],
];

/** HF tensor name → llama.cpp name (undefined when unmapped). */
export function hfToGgufName(hf: string): string | undefined {
  for (const [h, g] of TOP_MAP) if (hf === h) return g;
  const m = /^model\.layers\.(\d+)\.(.+)$/.exec(hf);
  if (m) for (const [h, g] of LAYER_MAP) if (m[2] === h) return `blk.${m[1]}.${g}`;
  return undefined;
}

/** llama.cpp tensor name → HF name (undefined when unmapped, e.g. rope_freqs.weight). */
export function ggufToHfName(g: string): string | undefined {
  for (const [h, gg] of TOP_MAP) if (g === gg) return h;
  const m = /^blk\.(\d+)\.(.+)$/.exec(g);
  if (m) for (const [h, gg] of LAYER_MAP) if (m[2] === gg) return `model.layers.${m[1]}.${h}`;
  return undefined;
}

/**
 * Row permutation between HF and llama.cpp for Q/K of arch "llama". rows = nHeads·hd; each row has
 * `rowBytes` bytes (any dtype, including quantized rows). toGguf: GGUF row h·hd + 2i + a ← HF row h·hd + a·hd/2 + i.
 */
export function permuteRows(data: Uint8Array, nHeads: number, rowBytes: number, toGguf: boolean): Uint8Array {
  const rows = data.byteLength / rowBytes;
  const hd = rows / nHeads;
  if (!Number.isInteger(hd) || hd % 2) throw new GgufError(`cannot permute ${rows} rows over ${nHeads} heads`);
  const out = new Uint8Array(data.byteLength);
  for (let h = 0; h < nHeads; h++)
    for (let i = 0; i < hd / 2; i++)
      for (let a = 0; a < 2; a++) {
        const g = h * hd + 2 * i + a, f = h * hd + a * (hd / 2) + i;
        const [dst, src] = toGguf ? [g, f] : [f, g];
        out.set(data.subarray(src * rowBytes, (src + 1) * rowBytes), dst * rowBytes);
      }
  return out;
}

// ---- Llama 3 RoPE frequency factors ---------------------------------------------------------------------
export interface Llama3RopeParams {
  factor: number;
  lowFreqFactor: number;
  highFreqFactor: number;
  originalMaxPosition: number;
}

/** Default RoPE frequency of pair i: theta^(-2i/Dh) (double). */
function ropeBaseFreq(i: number, headDim: number, theta: number): number {
  return 1 / Math.pow(theta, (2 * i) / headDim);
}

/** The llama3-scaled frequency (transformers' _compute_llama3_parameters; native rope_inv_freq). */
function llama3Freq(f: number, r: Llama3RopeParams): number {
  const lowWl = r.originalMaxPosition / r.lowFreqFactor, highWl = r.originalMaxPosition / r.highFreqFactor;
  const wl = (2 * Math.PI) / f;
  if (wl > lowWl) return f / r.factor;
  if (wl >= highWl) {
    const smooth = (r.originalMaxPosition / wl - r.lowFreqFactor) / (r.highFreqFactor - r.lowFreqFactor);
    return ((1 - smooth) * f) / r.factor + smooth * f;
  }
  return f;
}

/**
 * llama.cpp's `rope_freqs.weight` for llama3 scaling: factor_i = default_freq_i / scaled_freq_i (Dh/2 values),
 * so llama.cpp's theta_i = pos · default_freq_i / factor_i equals Loom's pos · inv_freq_i.
 */
export function llama3RopeFactors(headDim: number, theta: number, r: Llama3RopeParams): Float32Array {
  const out = new Float32Array(headDim / 2);
  for (let i = 0; i < out.length; i++) {
    const f = ropeBaseFreq(i, headDim, theta);
    out[i] = f / llama3Freq(f, r);
  }
  return out;
}

/**
 * Recovers llama3 parameters from `rope_freqs.weight` factors. Only the ratios L/low_freq_factor and
 * L/high_freq_factor matter to the rule, so low_freq_factor is set to 1 unless `hint` (e.g. the
 * loom.rope_scaling key) reproduces the factors. Throws when no llama3 parameters reproduce them.
 */
export function llama3ParamsFromFactors(factors: ArrayLike<number>, headDim: number, theta: number, hint?: Llama3RopeParams): Llama3RopeParams | null {
  const n = factors.length;
  if (n !== headDim / 2) throw new GgufError(`rope_freqs.weight has ${n} values, expected head_dim/2 = ${headDim / 2}`);
  const fs = Array.from(factors);
  if (fs.some((x) => !Number.isFinite(x) || x <= 0)) throw new GgufError('rope_freqs.weight has non-positive or non-finite values');
  const fits = (r: Llama3RopeParams): boolean => {
    // as the native core holds them: float32 factors, integer original_max_position
    const re = llama3RopeFactors(headDim, theta, { factor: Math.fround(r.factor), lowFreqFactor: Math.fround(r.lowFreqFactor), highFreqFactor: Math.fround(r.highFreqFactor), originalMaxPosition: Math.round(r.originalMaxPosition) });
    if (!Number.isInteger(r.originalMaxPosition)) return false;
    return fs.every((x, i) => Math.abs(re[i] - x) <= 1e-5 * Math.max(1, x));
  };
  if (hint && fits(hint)) return hint;
  const factor = Math.max(...fs);
  if (Math.abs(factor - 1) < 1e-6) return null; // all ones: plain RoPE
  const wl = fs.map((_, i) => (2 * Math.PI) / ropeBaseFreq(i, headDim, theta)); // increasing with i
  const tol = 1e-5;
  const ones = fs.map((x, i) => (Math.abs(x - 1) <= tol ? i : -1)).filter((i) => i >= 0);
  const lows = fs.map((x, i) => (Math.abs(x - factor) <= tol * factor ? i : -1)).filter((i) => i >= 0);
  const band = fs.map((_, i) => i).filter((i) => !ones.includes(i) && !lows.includes(i));
  // smooth s of a band pair: 1/f = (1 - s)/factor + s; and s = (L/wl - lff)/(hff - lff), linear in 1/wl
  const sOf = (i: number): number => (1 / fs[i] - 1 / factor) / (1 - 1 / factor);
  const maxOnes = ones.length ? wl[ones[ones.length - 1]] : wl[0] / 2;
  const minLows = lows.length ? wl[lows[0]] : wl[n - 1] * 2;
  // the wavelength thresholds: low = L/lff, high = L/hff; s = (1/wl - 1/low) / (1/high - 1/low)
  let lowWl: number, highWl: number;
  if (band.length >= 2) {
    // least squares s = a·(1/wl) + b  ⇒  1/low = -b/a, 1/high = (1 - b)/a
    const xs = band.map((i) => 1 / wl[i]), ys = band.map(sOf);
    const mx = xs.reduce((p, q) => p + q, 0) / xs.length, my = ys.reduce((p, q) => p + q, 0) / ys.length;
    let sxy = 0, sxx = 0;
    xs.forEach((x, k) => { sxy += (x - mx) * (ys[k] - my); sxx += (x - mx) * (x - mx); });
    const a = sxy / sxx, b = my - a * mx;
    lowWl = a / -b;
    highWl = a / (1 - b);
  } else if (band.length === 1) {
    const wb = wl[band[0]], sb = sOf(band[0]);
    lowWl = Math.sqrt(wb * minLows); // between the band pair and the first low pair
    highWl = 1 / (1 / lowWl + (1 / wb - 1 / lowWl) / sb);
  } else {
    lowWl = Math.sqrt(maxOnes * minLows);
    highWl = Math.sqrt(maxOnes * lowWl);
  }
  // Loom's native config holds original_max_position as an integer (as HF configs do): L = round(low), lff = L/low
  const L = Math.max(1, Math.round(lowWl));
  const r: Llama3RopeParams = { factor, lowFreqFactor: L / lowWl, highFreqFactor: L / highWl, originalMaxPosition: L };
  for (const k of ['factor', 'lowFreqFactor', 'highFreqFactor'] as const) {
    const nice = Math.round(r[k] * 1000) / 1000; // 3.9999999 → 4 when that still reproduces the factors
    if (Math.abs(nice - r[k]) < 1e-5 * Math.abs(nice)) r[k] = nice;
  }
  if (!fits(r)) throw new GgufError('rope_freqs.weight does not follow the llama3 RoPE scaling rule (not supported)');
  return r;
}

function metaNum(meta: Record<string, unknown>, key: string): number | undefined {
  const v = meta[key];
  return typeof v === 'number' ? v : undefined;
}

/**
 * GGUF metadata → an HF config.json object (feed it to parseDecoderConfig). Supports arch llama / qwen2 / mistral.
 * `ropeFreqs`: the file's rope_freqs.weight (llama3 scaling), when present.
 */
export function ggufToHfConfig(meta: Record<string, unknown>, ropeFreqs?: ArrayLike<number>): Record<string, unknown> {
  const arch = String(meta['general.architecture'] ?? '');
  if (!['llama', 'qwen2', 'mistral'].includes(arch)) throw new GgufError(`GGUF architecture "${arch}" is not supported (llama, qwen2, mistral)`);
  const k = (s: string): number | undefined => metaNum(meta, `${arch}.${s}`);
  const hidden = k('embedding_length'), heads = k('attention.head_count');
  if (!hidden || !heads) throw new GgufError(`GGUF metadata lacks ${arch}.embedding_length / ${arch}.attention.head_count`);
  const tokens = meta['tokenizer.ggml.tokens'] as unknown[] | undefined;
  const cfg: Record<string, unknown> = {
    model_type: arch,
    hidden_size: hidden,
    intermediate_size: k('feed_forward_length'),
    num_hidden_layers: k('block_count'),
    num_attention_heads: heads,
    num_key_value_heads: k('attention.head_count_kv') ?? heads,
    head_dim: k('attention.key_length') ?? k('rope.dimension_count') ?? hidden / heads,
    rms_norm_eps: k('attention.layer_norm_rms_epsilon') ?? 1e-6,
    rope_theta: k('rope.freq_base') ?? 10000,
    max_position_embeddings: k('context_length') ?? 2048,
    vocab_size: k('vocab_size') ?? tokens?.length,
    bos_token_id: metaNum(meta, 'tokenizer.ggml.bos_token_id') ?? null,
    eos_token_id: metaNum(meta, 'tokenizer.ggml.eos_token_id') ?? null,
    pad_token_id: metaNum(meta, 'tokenizer.ggml.padding_token_id') ?? null,
    torch_dtype: 'float32',
  };
  const scType = meta[`${arch}.rope.scaling.type`];
  if (scType === 'linear') cfg.rope_scaling = { rope_type: 'linear', factor: k('rope.scaling.factor') ?? 1 };
  let loomRs: Record<string, unknown> | undefined;
  if (meta['loom.rope_scaling'] && typeof meta['loom.rope_scaling'] === 'string') {
    try {
      loomRs = JSON.parse(meta['loom.rope_scaling'] as string);
    } catch {
      throw new GgufError('loom.rope_scaling is not valid JSON');
    }
    cfg.rope_scaling = loomRs;
  }
  if (ropeFreqs) {
    const headDim = cfg.head_dim as number, theta = cfg.rope_theta as number;
    const hint = loomRs?.rope_type === 'llama3'
      ? { factor: Number(loomRs.factor), lowFreqFactor: Number(loomRs.low_freq_factor), highFreqFactor: Number(loomRs.high_freq_factor), originalMaxPosition: Number(loomRs.original_max_position_embeddings) }
      : undefined;
    const r = llama3ParamsFromFactors(ropeFreqs, headDim, theta, hint);
    if (r === null) delete cfg.rope_scaling;
    else if (r !== hint)
      cfg.rope_scaling = { rope_type: 'llama3', factor: r.factor, low_freq_factor: r.lowFreqFactor, high_freq_factor: r.highFreqFactor, original_max_position_embeddings: r.originalMaxPosition };
  }
  const sw = k('attention.sliding_window');
  if (sw) cfg.sliding_window = sw;
  if (arch === 'qwen2') cfg.use_sliding_window = false;
  return cfg;
}

export interface GgufCheckpoint {
  config: DecoderConfig;
  file: GgufFile;
  /** HF name → tensor (Q/K rows un-permuted; bytes may be a copy for permuted tensors). */
  tensors: Map<string, GgufTensorInfo>;
  /** tie_word_embeddings: true when there is no output.weight */
  tied: boolean;
}

/** Opens a GGUF decoder as HF-named tensors + a DecoderConfig. */
export function loadGgufCheckpoint(path: string): GgufCheckpoint {
  const file = new GgufFile(path);
  const meta = file.metadataObject();
  const raw = ggufToHfConfig(meta, file.tensors.has('rope_freqs.weight') ? file.float32('rope_freqs.weight') : undefined);
  const tied = !file.tensors.has('output.weight');
  raw.tie_word_embeddings = tied;
  raw.attention_bias = file.tensors.has('blk.0.attn_q.bias');
  const config = parseDecoderConfig(raw, path);
  const permute = String(meta['general.architecture']) === 'llama';
  const tensors = new Map<string, GgufTensorInfo>();
  for (const [g, t] of file.tensors) {
    const hf = ggufToHfName(g);
    if (!hf) continue;
    let info = t;
    const isQ = /attn_q\.(weight|bias)$/.test(g), isK = /attn_k\.(weight|bias)$/.test(g);
    if (permute && (isQ || isK)) info = { ...t, bytes: permuteRows(t.bytes, isQ ? config.numHeads : config.numKvHeads, t.bytes.byteLength / t.shape[0], false) };
    tensors.set(hf, { ...info, name: hf });
  }
  return { config, file, tensors, tied };
}

const ST_TO_GGML: Partial<Record<StDType, GgmlType>> = { F32: GgmlType.F32, F16: GgmlType.F16, BF16: GgmlType.BF16 };

/**
 * Converts an HF checkpoint folder (config.json, *.safetensors, tokenizer.json) to a GGUF file llama.cpp loads.
 * `outType`: tensor type for 2-D weights (norms stay F32): 'F32' | 'F16' | 'BF16', or a llama-quantize file type
 * 'Q8_0' | 'Q6_K' | 'Q4_K_M' (each tensor's type as llama.cpp picks it: ggufQuantType in gguf-quantize.ts; default:
 * keep the stored type). Tokenizer metadata (ggufTokenizerMetadata): SentencePiece-style vocabularies (▁, byte fallback)
 * as tokenizer.ggml.model "llama" with merge-order scores and the merges; byte-level BPE as "gpt2" with merges.
 */
export function convertHfToGguf(dir: string, outPath: string, opts: { outType?: 'F32' | 'F16' | 'BF16' | QuantFileType; name?: string } = {}): void {
  const cfg = loadDecoderConfig(dir);
  const ck = SafetensorsCheckpoint.open(dir);
  const arch = cfg.modelType === 'qwen2' ? 'qwen2' : 'llama';
  const md: Record<string, GgufValue | string | number | boolean | (string | number | boolean)[]> = {
    'general.architecture': arch,
    'general.name': opts.name ?? dir.split('/').filter(Boolean).pop() ?? 'model',
    'general.alignment': gv.u32(32),
    [`${arch}.context_length`]: gv.u32(cfg.maxPositionEmbeddings),
    [`${arch}.embedding_length`]: gv.u32(cfg.hiddenSize),
    [`${arch}.block_count`]: gv.u32(cfg.numLayers),
    [`${arch}.feed_forward_length`]: gv.u32(cfg.intermediateSize),
    [`${arch}.attention.head_count`]: gv.u32(cfg.numHeads),
    [`${arch}.attention.head_count_kv`]: gv.u32(cfg.numKvHeads),
    [`${arch}.rope.freq_base`]: gv.f32(cfg.ropeTheta),
    [`${arch}.rope.dimension_count`]: gv.u32(cfg.headDim),
    [`${arch}.attention.key_length`]: gv.u32(cfg.headDim),
    [`${arch}.attention.value_length`]: gv.u32(cfg.headDim),
    [`${arch}.attention.layer_norm_rms_epsilon`]: gv.f32(cfg.rmsNormEps),
    [`${arch}.vocab_size`]: gv.u32(cfg.vocabSize),
  };
  if (cfg.ropeScaling.type === 'linear') {
    md[`${arch}.rope.scaling.type`] = 'linear';
    md[`${arch}.rope.scaling.factor`] = gv.f32(cfg.ropeScaling.factor);
  }
  if (cfg.ropeScaling.type === 'llama3') {
    const r = cfg.ropeScaling;
    md['loom.rope_scaling'] = JSON.stringify({ rope_type: 'llama3', factor: r.factor, low_freq_factor: r.lowFreqFactor, high_freq_factor: r.highFreqFactor, original_max_position_embeddings: r.originalMaxPosition });
  }
  Object.assign(md, ggufTokenizerMetadata(dir, cfg));

  const tensors: Record<string, GgufTensorToWrite> = {};
  if (cfg.ropeScaling.type === 'llama3') {
    const f = llama3RopeFactors(cfg.headDim, cfg.ropeTheta, cfg.ropeScaling);
    tensors['rope_freqs.weight'] = { type: GgmlType.F32, shape: [f.length], data: new Uint8Array(f.buffer) };
  }
  const names = ck.names();
  const tied = cfg.tieWordEmbeddings;
  const emb = ck.has('model.embed_tokens.weight') ? 'model.embed_tokens.weight' : 'lm_head.weight';
  const order = ['model.embed_tokens.weight', ...names.filter((n) => n !== 'model.embed_tokens.weight' && !(tied && n === 'lm_head.weight'))];
  for (const hf of order) {
    const src = hf === 'model.embed_tokens.weight' ? emb : hf;
    if (!ck.has(src)) continue;
    const g = hfToGgufName(hf);
    if (!g) continue;
    const t = ck.get(src);
    const is2d = t.shape.length === 2;
    const out = opts.outType;
    const quantFile = out === 'Q8_0' || out === 'Q6_K' || out === 'Q4_K_M';
    let want: string = !is2d ? 'F32' : quantFile ? ggufQuantType(out, g, t.shape[1], cfg.numLayers, !tied) : (out ?? t.dtype);
    let type: GgmlType;
    let data: Uint8Array;
    if (want === t.dtype && ST_TO_GGML[t.dtype as StDType] !== undefined) {
      type = ST_TO_GGML[t.dtype as StDType]!;
      data = t.bytes;
    } else {
      const f = ck.float32(src);
      if (want === 'F32') { type = GgmlType.F32; data = new Uint8Array(f.buffer.slice(f.byteOffset, f.byteOffset + f.byteLength)); }
      else if (want === 'F16') {
        type = GgmlType.F16;
        const h = new Uint16Array(f.length);
        for (let i = 0; i < f.length; i++) h[i] = f32ToF16(f[i]);
        data = new Uint8Array(h.buffer);
      } else if (want === 'BF16') {
        type = GgmlType.BF16;
        const h = new Uint16Array(f.length);
        addon.convertF32ToBf16(f, h);
        data = new Uint8Array(h.buffer);
      } else if (want === 'Q8_0') { type = GgmlType.Q8_0; data = quantizeQ8_0(f); }
      else if (want === 'Q4_K') { type = GgmlType.Q4_K; data = addon.quantizeQ4K(f) as Uint8Array; }  // native port
      else if (want === 'Q6_K') { type = GgmlType.Q6_K; data = quantizeQ6_K(f); }
      else if (want === 'Q5_0') { type = GgmlType.Q5_0; data = quantizeQ5_0(f); }
      else throw new GgufError(`tensor ${src}: cannot write ${t.dtype} as ${want}`);
    }
    const isQ = /q_proj\.(weight|bias)$/.test(hf), isK = /k_proj\.(weight|bias)$/.test(hf);
    if (arch === 'llama' && (isQ || isK)) data = permuteRows(data, isQ ? cfg.numHeads : cfg.numKvHeads, data.byteLength / t.shape[0], true);
    tensors[g] = { type, shape: t.shape, data };
  }
  writeGguf(outPath, { metadata: md, tensors });
}
