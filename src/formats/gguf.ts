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
// IQ*, TQ*, MXFP4 ... types fail with a GgufError naming the tensor, its type and the supported list.
//
// Beside it: gguf-writer.ts (writeGguf), gguf-hf.ts (the HF ↔ llama.cpp mapping: tensor names, Q/K rows, RoPE
// factors, the config, loadGgufCheckpoint and convertHfToGguf), gguf-quantize.ts (the block quantizers, Q8_0 among
// them) and gguf-tokenizer.ts (tokenizer.json ↔ tokenizer.ggml.* metadata).
import { addon } from '../native/addon.ts';


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

/** Bytes of a tensor of `type` and shape `ne` (fastest-varying first); a GgufError for an unknown type or a row that
 * is not whole blocks. */
export function tensorBytes(type: GgmlType, ne: number[], where: string): number {
  const lay = TYPE_LAYOUT[type];
  if (!lay) throw new GgufError(`${where}: unknown ggml type ${type}`);
  const n = ne.reduce((a, b) => a * b, 1);
  if (ne[0] % lay[0] !== 0) throw new GgufError(`${where}: row length ${ne[0]} is not a multiple of the block size ${lay[0]}`);
  return (n / lay[0]) * lay[1];
}


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
