// GGUF v3 (llama.cpp's model format) reader and writer, plus the HF ↔ llama.cpp mapping for Llama-family
// decoders. Layout: "GGUF" magic, version (u32), tensor count (u64), metadata count (u64), metadata
// key/values, tensor infos (name, n_dims, ne[] fastest-varying first, ggml type, offset), padding to
// `general.alignment` (default 32), then tensor data (each tensor at an aligned offset from the data start).
// Files are memory-mapped (addon.mmapFile), tensor bytes are views into the mapping.
//
// Tensor types: the reader knows the size of every ggml type, so any file opens. dequantize() turns F32, F16,
// BF16 and the block-quantized types Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K (what
// llama.cpp / Ollama files such as Q4_K_M = Q4_K + Q6_K hold) into float32, the block types in the native core
// (native/formats/gguf_dequant.cc, bit-exact with llama.cpp's gguf-py: test/formats/gguf-quants.test.ts). The
// IQ*, TQ*, MXFP4 ... types fail with a GgufError naming the tensor, its type and the supported list. The
// writer quantizes only to Q8_0 (quantizeQ8_0).
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
//
// Tokenizer: the writer stores tokenizer.ggml.* metadata so llama.cpp can load the file, and so can Loom without
// a tokenizer.json beside it (src/formats/gguf-tokenizer.ts rebuilds one from this metadata). Byte-level BPE is
// model "gpt2" with merges and the pre-tokenizer llama.cpp must use ("qwen2", "llama-bpe", "smollm", "gpt-2"),
// recognised from tokenizer.json's pre_tokenizer; SentencePiece-style BPE is model "llama" with scores that follow
// the merge order (see ggufTokenizerMetadata) and, for Loom, the merges themselves. Also stored: bos/eos/pad/unk
// ids, add_bos_token / add_eos_token as the post-processor does, the chat template(s), and loom.eos_token_ids
// (every eos id of config.json, generation_config.json and tokenizer_config.json).
// Checked with llama.cpp (node-llama-cpp 3.21.1) on the byte-level Qwen2.5 / SmolLM2 / Llama 3 fixtures: same ids. What
// GGUF metadata cannot express, so llama.cpp differs from tokenizer.json there: Qwen2's NFC normalizer (llama.cpp
// tokenizes NFD text as is), and Metaspace prepend_scheme "first" (Mistral v0.3): llama.cpp's SPM path adds a
// "▁" at the start and after every special token even when the text already starts with a space (Loom's
// rebuilt tokenizer does the same; it does apply NFC for "qwen2").
import { readFileSync, writeFileSync, openSync, writeSync, closeSync, existsSync } from 'node:fs';
import { join } from 'node:path';
import { addon } from '../native/addon.ts';
import { SafetensorsCheckpoint, type StDType } from './safetensors.ts';
import { loadDecoderConfig, parseDecoderConfig, type DecoderConfig } from './hf-config.ts';
import { Tokenizer } from '../tokenize/tokenizer.ts';
import { f32ToF16 } from './f16.ts';
import { ggufQuantType, quantizeQ5_0, quantizeQ6_K, type QuantFileType } from './gguf-quantize.ts';

export class GgufError extends Error {
  override name = 'GgufError';
}

export enum GgufType { UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6, BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12 }

/**
 * ggml tensor type ids (ggml.h's enum ggml_type, as GGUF stores them). The reader knows the block layout of
 * every one of them, so any file opens; `dequantize` handles F32, F16, BF16 and the block types in
 * DEQUANTIZABLE_TYPES (natively), the others (IQ*, TQ*, MXFP4, ...) fail with a GgufError naming the tensor.
 */
export enum GgmlType {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9, Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23,
  I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30, TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39, NVFP4 = 40, Q1_0 = 41,
}

const QK_K = 256;
/** (block size in elements, bytes per block), as gguf-py's GGML_QUANT_SIZES. */
const TYPE_LAYOUT: Partial<Record<GgmlType, [number, number]>> = {
  [GgmlType.F32]: [1, 4], [GgmlType.F16]: [1, 2], [GgmlType.BF16]: [1, 2], [GgmlType.F64]: [1, 8],
  [GgmlType.I8]: [1, 1], [GgmlType.I16]: [1, 2], [GgmlType.I32]: [1, 4], [GgmlType.I64]: [1, 8],
  [GgmlType.Q4_0]: [32, 18], [GgmlType.Q4_1]: [32, 20], [GgmlType.Q5_0]: [32, 22], [GgmlType.Q5_1]: [32, 24], [GgmlType.Q8_0]: [32, 34], [GgmlType.Q8_1]: [32, 40],
  [GgmlType.Q2_K]: [QK_K, 84], [GgmlType.Q3_K]: [QK_K, 110], [GgmlType.Q4_K]: [QK_K, 144], [GgmlType.Q5_K]: [QK_K, 176], [GgmlType.Q6_K]: [QK_K, 210], [GgmlType.Q8_K]: [QK_K, 292],
  [GgmlType.IQ2_XXS]: [QK_K, 66], [GgmlType.IQ2_XS]: [QK_K, 74], [GgmlType.IQ3_XXS]: [QK_K, 98], [GgmlType.IQ1_S]: [QK_K, 50], [GgmlType.IQ4_NL]: [32, 18],
  [GgmlType.IQ3_S]: [QK_K, 110], [GgmlType.IQ2_S]: [QK_K, 82], [GgmlType.IQ4_XS]: [QK_K, 136], [GgmlType.IQ1_M]: [QK_K, 56],
  [GgmlType.TQ1_0]: [QK_K, 54], [GgmlType.TQ2_0]: [QK_K, 66], [GgmlType.MXFP4]: [32, 17], [GgmlType.NVFP4]: [64, 36], [GgmlType.Q1_0]: [128, 18],
};

/** Block types `dequantize` expands natively (native/formats/gguf_dequant.cc), bit-exact with llama.cpp's gguf-py. */
export const DEQUANTIZABLE_TYPES: readonly GgmlType[] = [
  GgmlType.Q4_0, GgmlType.Q4_1, GgmlType.Q5_0, GgmlType.Q5_1, GgmlType.Q8_0,
  GgmlType.Q2_K, GgmlType.Q3_K, GgmlType.Q4_K, GgmlType.Q5_K, GgmlType.Q6_K, GgmlType.Q8_K,
];
const NATIVE_DEQUANT = new Set<GgmlType>(DEQUANTIZABLE_TYPES);

/** Whether `dequantize` can expand a tensor of this type to float32. */
export function canDequantize(type: GgmlType): boolean {
  return type === GgmlType.F32 || type === GgmlType.F16 || type === GgmlType.BF16 || NATIVE_DEQUANT.has(type);
}

/** "Q4_K", or "type 99" for an id ggml does not define. */
export function ggmlTypeName(type: number): string {
  return GgmlType[type] ?? `type ${type}`;
}

/** The error for a tensor whose type has no dequantizer: names it, its type and what is supported. */
export function unsupportedTypeError(tensor: string, type: GgmlType): GgufError {
  const ok = ['F32', 'F16', 'BF16', ...DEQUANTIZABLE_TYPES.map(ggmlTypeName)].join(', ');
  return new GgufError(`tensor ${tensor}: ggml type ${ggmlTypeName(type)} is not supported (supported: ${ok})`);
}

/** A typed metadata value (the writer needs the exact GGUF type; the reader returns these too). */
export type GgufValue =
  | { type: GgufType.STRING; value: string }
  | { type: GgufType.BOOL; value: boolean }
  | { type: Exclude<GgufType, GgufType.STRING | GgufType.BOOL | GgufType.ARRAY>; value: number }
  | { type: GgufType.ARRAY; itemType: GgufType; value: (string | number | boolean)[] };

export const gv = {
  str: (value: string): GgufValue => ({ type: GgufType.STRING, value }),
  u32: (value: number): GgufValue => ({ type: GgufType.UINT32, value }),
  i32: (value: number): GgufValue => ({ type: GgufType.INT32, value }),
  f32: (value: number): GgufValue => ({ type: GgufType.FLOAT32, value }),
  bool: (value: boolean): GgufValue => ({ type: GgufType.BOOL, value }),
  arr: (itemType: GgufType, value: (string | number | boolean)[]): GgufValue => ({ type: GgufType.ARRAY, itemType, value }),
};

export interface GgufTensorInfo {
  name: string;
  type: GgmlType;
  /** ggml order: ne[0] is the fastest-varying (columns). */
  ne: number[];
  /** Row-major (HF/PyTorch) shape: ne reversed. */
  shape: number[];
  /** Offset from the data start. */
  offset: number;
  bytes: Uint8Array;
}

const td = new TextDecoder();

export class GgufFile {
  readonly path: string;
  readonly version: number;
  readonly metadata = new Map<string, GgufValue>();
  readonly tensors = new Map<string, GgufTensorInfo>();
  readonly alignment: number;
  readonly dataOffset: number;
  private readonly buf: ArrayBuffer;

  constructor(path: string) {
    this.path = path;
    this.buf = addon.mmapFile(path) as ArrayBuffer;
    const dv = new DataView(this.buf);
    const size = this.buf.byteLength;
    let p = 0;
    const need = (n: number): void => {
      if (p + n > size) throw new GgufError(`${path}: truncated at byte ${p} (file is ${size} bytes)`);
    };
    const u32 = (): number => { need(4); const v = dv.getUint32(p, true); p += 4; return v; };
    const u64 = (): number => {
      need(8);
      const v = dv.getBigUint64(p, true); p += 8;
      if (v > BigInt(Number.MAX_SAFE_INTEGER)) throw new GgufError(`${path}: 64-bit value too large at byte ${p - 8}`);
      return Number(v);
    };
    const str = (): string => { const n = u64(); need(n); const s = td.decode(new Uint8Array(this.buf, p, n)); p += n; return s; };
    const scalar = (t: GgufType): string | number | boolean => {
      switch (t) {
        case GgufType.UINT8: need(1); return dv.getUint8(p++);
        case GgufType.INT8: need(1); return dv.getInt8(p++);
        case GgufType.UINT16: { need(2); const v = dv.getUint16(p, true); p += 2; return v; }
        case GgufType.INT16: { need(2); const v = dv.getInt16(p, true); p += 2; return v; }
        case GgufType.UINT32: return u32();
        case GgufType.INT32: { need(4); const v = dv.getInt32(p, true); p += 4; return v; }
        case GgufType.FLOAT32: { need(4); const v = dv.getFloat32(p, true); p += 4; return v; }
        case GgufType.BOOL: need(1); return dv.getUint8(p++) !== 0;
        case GgufType.STRING: return str();
        case GgufType.UINT64: return u64();
        case GgufType.INT64: { need(8); const v = Number(dv.getBigInt64(p, true)); p += 8; return v; }
        case GgufType.FLOAT64: { need(8); const v = dv.getFloat64(p, true); p += 8; return v; }
        default: throw new GgufError(`${path}: unknown metadata value type ${t} at byte ${p}`);
      }
    };
    need(4);
    if (dv.getUint32(0, true) !== 0x46554747) throw new GgufError(`${path}: not a GGUF file (bad magic)`);
    p = 4;
    this.version = u32();
    if (this.version !== 2 && this.version !== 3) throw new GgufError(`${path}: GGUF version ${this.version} is not supported (2, 3)`);
    const nT = u64(), nKV = u64();
    for (let i = 0; i < nKV; i++) {
      const key = str();
      const t = u32() as GgufType;
      if (t === GgufType.ARRAY) {
        const it = u32() as GgufType;
        const n = u64();
        const vals: (string | number | boolean)[] = new Array(n);
        for (let j = 0; j < n; j++) vals[j] = scalar(it);
        this.metadata.set(key, { type: GgufType.ARRAY, itemType: it, value: vals });
      } else this.metadata.set(key, { type: t, value: scalar(t) } as GgufValue);
    }
    const infos: Omit<GgufTensorInfo, 'bytes'>[] = [];
    for (let i = 0; i < nT; i++) {
      const name = str();
      const nd = u32();
      if (nd > 4) throw new GgufError(`${path}: tensor ${name} has ${nd} dims`);
      const ne: number[] = [];
      for (let d = 0; d < nd; d++) ne.push(u64());
      const type = u32() as GgmlType;
      const offset = u64();
      infos.push({ name, type, ne, shape: [...ne].reverse(), offset });
    }
    const al = this.meta('general.alignment');
    this.alignment = typeof al === 'number' && al > 0 ? al : 32;
    this.dataOffset = Math.ceil(p / this.alignment) * this.alignment;
    for (const info of infos) {
      const nbytes = tensorBytes(info.type, info.ne, `${path}: tensor ${info.name}`);
      const start = this.dataOffset + info.offset;
      if (start + nbytes > size) throw new GgufError(`${path}: tensor ${info.name} data [${start}, ${start + nbytes}) exceeds the file (${size} bytes)`);
      this.tensors.set(info.name, { ...info, bytes: new Uint8Array(this.buf, start, nbytes) });
    }
  }

  /** A metadata value (scalars and arrays unwrapped), or undefined. */
  meta(key: string): string | number | boolean | (string | number | boolean)[] | undefined {
    return this.metadata.get(key)?.value;
  }

  get(name: string): GgufTensorInfo {
    const t = this.tensors.get(name);
    if (!t) throw new GgufError(`${this.path}: tensor ${name} not found`);
    return t;
  }

  /** Dequantizes / widens a tensor to float32 (F32, F16, BF16 and DEQUANTIZABLE_TYPES). */
  float32(name: string): Float32Array {
    return dequantize(this.get(name));
  }

  /** Metadata as a plain object (arrays included; large ones like the vocabulary too). */
  metadataObject(): Record<string, unknown> {
    const o: Record<string, unknown> = {};
    for (const [k, v] of this.metadata) o[k] = v.value;
    return o;
  }
}

function tensorBytes(type: GgmlType, ne: number[], where: string): number {
  const lay = TYPE_LAYOUT[type];
  if (!lay) throw new GgufError(`${where}: unknown ggml type ${type}`);
  const n = ne.reduce((a, b) => a * b, 1);
  if (ne[0] % lay[0] !== 0) throw new GgufError(`${where}: row length ${ne[0]} is not a multiple of the block size ${lay[0]}`);
  return (n / lay[0]) * lay[1];
}

// ---- f16 helpers ----------------------------------------------------------------------------------------
export { f32ToF16 } from './f16.ts';

/**
 * A tensor as float32. F32 is a view of the file when aligned (no copy); F16 / BF16 are widened; block types
 * (Q4_0 ... Q6_K, see DEQUANTIZABLE_TYPES) are dequantized by the native core across its thread pool, on the
 * calling thread (a 4096 × 11008 Q4_K matrix, 45 M values: ~15 ms, bench/dequant.ts). Loading paths use
 * dequantizeAsync, which keeps the event loop free. Other types throw a GgufError naming the tensor.
 */
export function dequantize(t: GgufTensorInfo): Float32Array {
  const n = t.ne.reduce((a, b) => a * b, 1);
  const { bytes } = t;
  switch (t.type) {
    case GgmlType.F32:
      return bytes.byteOffset % 4 === 0 ? new Float32Array(bytes.buffer, bytes.byteOffset, n) : new Float32Array(bytes.slice().buffer);
    case GgmlType.F16: {
      const src = bytes.byteOffset % 2 === 0 ? new Uint16Array(bytes.buffer, bytes.byteOffset, n) : new Uint16Array(bytes.slice().buffer);
      const out = new Float32Array(n);
      addon.convertF16ToF32(src, out);
      return out;
    }
    case GgmlType.BF16: {
      const src = bytes.byteOffset % 2 === 0 ? new Uint16Array(bytes.buffer, bytes.byteOffset, n) : new Uint16Array(bytes.slice().buffer);
      const out = new Float32Array(n);
      addon.convertBf16ToF32(src, out);
      return out;
    }
    default: {
      if (!NATIVE_DEQUANT.has(t.type)) throw unsupportedTypeError(t.name, t.type);
      const out = new Float32Array(n);
      addon.ggmlDequantize(t.type, bytes, out);
      return out;
    }
  }
}

/**
 * dequantize without blocking the event loop: block types run on libuv's pool (then the native thread pool),
 * which also allocates the result (an embedding matrix can be GBs of f32: its zero-fill and page faults would
 * otherwise stall the main thread).
 */
export async function dequantizeAsync(t: GgufTensorInfo): Promise<Float32Array> {
  if (!NATIVE_DEQUANT.has(t.type)) return dequantize(t);
  return (await addon.ggmlDequantizeAsync(t.type, t.bytes, t.ne.reduce((a, b) => a * b, 1))) as Float32Array;
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

// ---- writer ---------------------------------------------------------------------------------------------
export interface GgufTensorToWrite {
  type: GgmlType;
  /** Row-major shape (HF order); written as ne = shape reversed. */
  shape: number[];
  data: Uint8Array;
}

/** Plain JS values are typed as: string → STRING, boolean → BOOL, integer → UINT32 (INT32 if negative), other number → FLOAT32, arrays likewise. */
function typed(v: GgufValue | string | number | boolean | (string | number | boolean)[]): GgufValue {
  if (typeof v === 'object' && v !== null && !Array.isArray(v) && 'type' in v) return v;
  const scalarType = (x: string | number | boolean): GgufType =>
    typeof x === 'string' ? GgufType.STRING : typeof x === 'boolean' ? GgufType.BOOL : Number.isInteger(x) ? (x < 0 ? GgufType.INT32 : GgufType.UINT32) : GgufType.FLOAT32;
  if (Array.isArray(v)) {
    let it = v.length ? scalarType(v[0]) : GgufType.INT32;
    if (v.some((x) => typeof x === 'number' && !Number.isInteger(x))) it = GgufType.FLOAT32;
    else if (it === GgufType.UINT32 && v.some((x) => (x as number) < 0)) it = GgufType.INT32;
    return { type: GgufType.ARRAY, itemType: it, value: v };
  }
  return { type: scalarType(v), value: v } as GgufValue;
}

class ByteWriter {
  private chunks: Buffer[] = [];
  private cur = Buffer.alloc(1 << 16);
  private pos = 0;
  length = 0;
  private ensure(n: number): void {
    if (this.pos + n > this.cur.length) {
      this.chunks.push(this.cur.subarray(0, this.pos));
      this.cur = Buffer.alloc(Math.max(1 << 16, n));
      this.pos = 0;
    }
  }
  u8(v: number): void { this.ensure(1); this.cur.writeUInt8(v, this.pos); this.pos += 1; this.length += 1; }
  i8(v: number): void { this.ensure(1); this.cur.writeInt8(v, this.pos); this.pos += 1; this.length += 1; }
  u16(v: number): void { this.ensure(2); this.cur.writeUInt16LE(v, this.pos); this.pos += 2; this.length += 2; }
  i16(v: number): void { this.ensure(2); this.cur.writeInt16LE(v, this.pos); this.pos += 2; this.length += 2; }
  u32(v: number): void { this.ensure(4); this.cur.writeUInt32LE(v >>> 0, this.pos); this.pos += 4; this.length += 4; }
  i32(v: number): void { this.ensure(4); this.cur.writeInt32LE(v, this.pos); this.pos += 4; this.length += 4; }
  f32(v: number): void { this.ensure(4); this.cur.writeFloatLE(v, this.pos); this.pos += 4; this.length += 4; }
  f64(v: number): void { this.ensure(8); this.cur.writeDoubleLE(v, this.pos); this.pos += 8; this.length += 8; }
  u64(v: number): void { this.ensure(8); this.cur.writeBigUInt64LE(BigInt(v), this.pos); this.pos += 8; this.length += 8; }
  i64(v: number): void { this.ensure(8); this.cur.writeBigInt64LE(BigInt(v), this.pos); this.pos += 8; this.length += 8; }
  str(s: string): void { const b = Buffer.from(s, 'utf8'); this.u64(b.length); this.ensure(b.length); b.copy(this.cur, this.pos); this.pos += b.length; this.length += b.length; }
  pad(al: number): void { while (this.length % al) this.u8(0); }
  done(): Buffer { this.chunks.push(this.cur.subarray(0, this.pos)); return Buffer.concat(this.chunks); }
}

function writeScalar(w: ByteWriter, t: GgufType, v: string | number | boolean): void {
  switch (t) {
    case GgufType.UINT8: w.u8(v as number); break;
    case GgufType.INT8: w.i8(v as number); break;
    case GgufType.UINT16: w.u16(v as number); break;
    case GgufType.INT16: w.i16(v as number); break;
    case GgufType.UINT32: w.u32(v as number); break;
    case GgufType.INT32: w.i32(v as number); break;
    case GgufType.FLOAT32: w.f32(v as number); break;
    case GgufType.BOOL: w.u8(v ? 1 : 0); break;
    case GgufType.STRING: w.str(v as string); break;
    case GgufType.UINT64: w.u64(v as number); break;
    case GgufType.INT64: w.i64(v as number); break;
    case GgufType.FLOAT64: w.f64(v as number); break;
    default: throw new GgufError(`cannot write metadata type ${t}`);
  }
}

/** Writes a GGUF v3 file. Tensors are written in the given order, each aligned to `general.alignment` (32). */
export function writeGguf(
  path: string,
  spec: { metadata: Record<string, GgufValue | string | number | boolean | (string | number | boolean)[]>; tensors: Record<string, GgufTensorToWrite> },
): void {
  const alignment = 32;
  const meta = { ...spec.metadata };
  const w = new ByteWriter();
  w.u32(0x46554747);
  w.u32(3);
  const names = Object.keys(spec.tensors);
  w.u64(names.length);
  w.u64(Object.keys(meta).length);
  for (const [k, raw] of Object.entries(meta)) {
    const v = typed(raw);
    w.str(k);
    w.u32(v.type);
    if (v.type === GgufType.ARRAY) {
      w.u32(v.itemType);
      w.u64(v.value.length);
      for (const x of v.value) writeScalar(w, v.itemType, x);
    } else writeScalar(w, v.type, v.value);
  }
  let off = 0;
  const offsets: number[] = [];
  for (const name of names) {
    const t = spec.tensors[name];
    const ne = [...t.shape].reverse();
    const nbytes = tensorBytes(t.type, ne, `tensor ${name}`);
    if (t.data.byteLength !== nbytes) throw new GgufError(`tensor ${name}: ${t.data.byteLength} bytes, shape ${JSON.stringify(t.shape)} ${GgmlType[t.type]} needs ${nbytes}`);
    w.str(name);
    w.u32(ne.length);
    for (const d of ne) w.u64(d);
    w.u32(t.type);
    w.u64(off);
    offsets.push(off);
    off += Math.ceil(nbytes / alignment) * alignment;
  }
  w.pad(alignment);
  const header = w.done();
  const fd = openSync(path, 'w');
  try {
    writeSync(fd, header);
    const zeros = Buffer.alloc(alignment);
    names.forEach((name) => {
      const d = spec.tensors[name].data;
      writeSync(fd, d);
      const padN = (alignment - (d.byteLength % alignment)) % alignment;
      if (padN) writeSync(fd, zeros, 0, padN);
    });
  } finally {
    closeSync(fd);
  }
}

// ---- HF ↔ llama.cpp -------------------------------------------------------------------------------------
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

/** The Split regexes of Qwen2's and Llama 3's tokenizer.json pre_tokenizer (single digits vs groups of up to 3). */
export const QWEN2_PRE_RE = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;
export const LLAMA3_PRE_RE = String.raw`(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+`;

/**
 * llama.cpp's `tokenizer.ggml.pre` for a byte-level tokenizer.json, from its pre_tokenizer: Split with the
 * Qwen2 regex → "qwen2"; with the Llama 3 regex (\p{N}{1,3}) → "llama-bpe" (llama.cpp then also ignores
 * merges for whole-word vocabulary hits); Digits(individual) + ByteLevel(GPT-2 regex) → "smollm"; ByteLevel
 * alone → "gpt-2"; anything else "default" (llama.cpp's generic regex: tokenization may differ).
 */
export function ggufPreTokenizerName(tj: { pre_tokenizer?: unknown }): string {
  const steps: Record<string, unknown>[] = [];
  const walk = (p: unknown): void => {
    if (!p || typeof p !== 'object') return;
    const o = p as Record<string, unknown>;
    if (o.type === 'Sequence') for (const q of (o.pretokenizers as unknown[]) ?? []) walk(q);
    else steps.push(o);
  };
  walk(tj.pre_tokenizer);
  const types = steps.map((x) => String(x.type)).join(',');
  const regex = (x: Record<string, unknown>): string | undefined => ((x.pattern as { Regex?: string } | undefined)?.Regex);
  if (types === 'Split,ByteLevel' && steps[1].use_regex === false) {
    if (regex(steps[0]) === QWEN2_PRE_RE) return 'qwen2';
    if (regex(steps[0]) === LLAMA3_PRE_RE) return 'llama-bpe';
  }
  if (types === 'Digits,ByteLevel' && steps[0].individual_digits === true && steps[1].use_regex !== false) return 'smollm';
  if (types === 'ByteLevel' && steps[0].use_regex !== false) return 'gpt-2';
  return 'default';
}

/** What the tokenizer metadata needs of the model config (DecoderConfig fits). */
export type TokenizerMetadataConfig = Pick<DecoderConfig, 'vocabSize' | 'bosTokenId' | 'eosTokenIds' | 'padTokenId'>;

/**
 * The `tokenizer.*` metadata for an HF folder's tokenizer.json (+ tokenizer_config.json, generation_config.json);
 * {} when the folder has no BPE tokenizer.json. `cfg`: the model's config (the vocabulary is padded to its
 * vocab_size with unused [PADn] tokens, as llama.cpp's converter does).
 */
export function ggufTokenizerMetadata(dir: string, cfg: TokenizerMetadataConfig): Record<string, GgufValue> {
  const p = join(dir, 'tokenizer.json');
  if (!existsSync(p)) return {};
  const tj = JSON.parse(readFileSync(p, 'utf8'));
  const vocab = tj.model?.vocab as Record<string, number>;
  if (!vocab || Array.isArray(vocab)) return {};
  const tok = Tokenizer.fromDirSync(dir);
  const added = (tj.added_tokens ?? []) as { id: number; content: string; special: boolean }[];
  const n = Math.max(cfg.vocabSize, ...Object.values(vocab).map((x) => x + 1), ...added.map((a) => a.id + 1));
  const tokens: string[] = new Array(n);
  const types: number[] = new Array(n).fill(1);
  for (const [t, id] of Object.entries(vocab)) tokens[id] = t;
  for (const a of added) { tokens[a.id] = a.content; types[a.id] = a.special ? 3 : 4; }
  for (let i = 0; i < n; i++) if (tokens[i] === undefined) { tokens[i] = `[PAD${i}]`; types[i] = 5; }
  const merges = ((tj.model.merges ?? []) as (string | string[])[]).map((m) => (Array.isArray(m) ? m : [m.slice(0, m.indexOf(' ', 1)), m.slice(m.indexOf(' ', 1) + 1)]));
  const byteLevel = JSON.stringify(tj.pre_tokenizer ?? '').includes('ByteLevel') || JSON.stringify(tj.decoder ?? '').includes('ByteLevel');
  const md: Record<string, GgufValue> = {};
  if (byteLevel) {
    md['tokenizer.ggml.model'] = gv.str('gpt2');
    md['tokenizer.ggml.pre'] = gv.str(ggufPreTokenizerName(tj));
    md['tokenizer.ggml.merges'] = gv.arr(GgufType.STRING, merges.map((m) => m.join(' ')));
  } else {
    md['tokenizer.ggml.model'] = gv.str('llama');
    md['tokenizer.ggml.pre'] = gv.str('default');
    for (let i = 0; i < n; i++) if (/^<0x[0-9A-F]{2}>$/.test(tokens[i])) types[i] = 6;
    // llama.cpp's SentencePiece tokenizer merges the adjacent pair whose concatenation has the highest score. A
    // piece's score is minus the rank of the first merge producing it, so llama.cpp follows the merge order of
    // tokenizer.json; pieces no merge produces score below every merge.
    const firstRank = new Map<string, number>();
    merges.forEach(([a, b], r) => { if (!firstRank.has(a + b)) firstRank.set(a + b, r); });
    md['tokenizer.ggml.scores'] = gv.arr(GgufType.FLOAT32, tokens.map((t, i) => -(firstRank.get(t) ?? merges.length + i)));
    // the merges themselves too (llama.cpp ignores them for "llama"; Loom's reader uses them, so tokenize is exact),
    // unless a piece has a space and "left right" would be ambiguous: the reader then derives them from the scores
    if (!merges.some(([a, b]) => a.includes(' ') || b.includes(' '))) md['tokenizer.ggml.merges'] = gv.arr(GgufType.STRING, merges.map((m) => m.join(' ')));
    md['tokenizer.ggml.add_space_prefix'] = gv.bool(addsSpacePrefix(tj));
  }
  md['tokenizer.ggml.tokens'] = gv.arr(GgufType.STRING, tokens);
  md['tokenizer.ggml.token_type'] = gv.arr(GgufType.INT32, types);
  // Special ids as Loom encodes and renders chats: BOS is what the post-processor adds (else tokenizer_config's
  // bos_token, else config.json's); EOS is tokenizer_config's eos_token (what chat templates see, and what
  // llama.cpp's converter writes), else config.json's first. Every eos id of the folder goes to loom.eos_token_ids.
  const { before, after } = tok.postProcessorTokens();
  const bos = before.length === 1 ? before[0] : tok.bosId ?? cfg.bosTokenId ?? undefined;
  const eosTok = tok.eosToken !== undefined ? tok.tokenToId(tok.eosToken) : undefined;
  const eos = eosTok ?? cfg.eosTokenIds[0];
  const pad = cfg.padTokenId ?? tok.padId;
  if (bos !== undefined) md['tokenizer.ggml.bos_token_id'] = gv.u32(bos);
  if (eos !== undefined) md['tokenizer.ggml.eos_token_id'] = gv.u32(eos);
  if (pad !== undefined) md['tokenizer.ggml.padding_token_id'] = gv.u32(pad);
  const unk = tj.model.unk_token ? vocab[tj.model.unk_token] : undefined;
  if (unk !== undefined) md['tokenizer.ggml.unknown_token_id'] = gv.u32(unk);
  const allEos = [...new Set([...cfg.eosTokenIds, ...tok.eosIds, ...(eos !== undefined ? [eos] : [])])];
  if (allEos.length) md['loom.eos_token_ids'] = gv.arr(GgufType.UINT32, allEos);
  // add_bos / add_eos as Loom encodes (tokenizer.json's post-processor): llama.cpp's defaults differ per
  // tokenizer, so both are always written.
  md['tokenizer.ggml.add_bos_token'] = gv.bool(bos !== undefined && before.length === 1 && before[0] === bos);
  md['tokenizer.ggml.add_eos_token'] = gv.bool(eos !== undefined && after.length === 1 && after[0] === eos);
  // chat templates: the one Loom uses (tokenizer_config.json, chat_template.jinja or .json), plus named ones of
  // tokenizer_config's list form as llama.cpp's converter writes them (tokenizer.chat_template.NAME)
  if (tok.chatTemplate !== undefined) md['tokenizer.chat_template'] = gv.str(tok.chatTemplate);
  const tc = join(dir, 'tokenizer_config.json');
  const list = existsSync(tc) ? (JSON.parse(readFileSync(tc, 'utf8')) as { chat_template?: unknown }).chat_template : undefined;
  if (Array.isArray(list)) {
    const names: string[] = [];
    for (const x of list as { name?: unknown; template?: unknown }[]) {
      const name = String(x?.name ?? '').replace(/[^A-Za-z0-9]/g, '_');
      if (!name || name === 'default' || typeof x.template !== 'string') continue;
      names.push(name);
      md[`tokenizer.chat_template.${name}`] = gv.str(x.template);
    }
    if (names.length) md['tokenizer.chat_templates'] = gv.arr(GgufType.STRING, names);
  }
  return md;
}

/** Whether a SentencePiece-style tokenizer.json puts "▁" before the text (normalizer Prepend, or Metaspace prepending). */
function addsSpacePrefix(tj: { normalizer?: unknown; pre_tokenizer?: unknown }): boolean {
  let found = false;
  const walk = (x: unknown): void => {
    if (Array.isArray(x)) return x.forEach(walk);
    if (!x || typeof x !== 'object') return;
    const o = x as Record<string, unknown>;
    if (o.type === 'Prepend' && o.prepend === '\u2581') found = true;
    if (o.type === 'Metaspace' && (o.prepend_scheme !== undefined ? o.prepend_scheme !== 'never' : o.add_prefix_space !== false)) found = true;
    Object.values(o).forEach(walk);
  };
  walk(tj.normalizer);
  walk(tj.pre_tokenizer);
  return found;
}
