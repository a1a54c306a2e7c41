// safetensors reader/writer (https://github.com/huggingface/safetensors): 8-byte little-endian
// header length, a JSON header {name: {dtype, shape, data_offsets:[begin,end]}, __metadata__},
// then the raw little-endian tensor bytes. Files are memory-mapped, never copied.
import { existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { addon } from '../native/addon.ts';

export type StDType = 'F64' | 'F32' | 'F16' | 'BF16' | 'I64' | 'I32' | 'I16' | 'I8' | 'U8' | 'BOOL';

const DTYPE_BYTES: Record<StDType, number> = { F64: 8, F32: 4, F16: 2, BF16: 2, I64: 8, I32: 4, I16: 2, I8: 1, U8: 1, BOOL: 1 };

export interface TensorInfo {
  name: string;
  dtype: StDType;
  shape: number[];
  /** The raw bytes (a view into the mapped file). */
  bytes: Uint8Array;
}

export class SafetensorsError extends Error {}

export class SafetensorsFile {
  readonly path: string;
  readonly metadata: Record<string, string>;
  readonly tensors: Map<string, TensorInfo>;
  private readonly buffer: ArrayBuffer;

  constructor(path: string) {
    this.path = path;
    this.buffer = addon.mmapFile(path) as ArrayBuffer;
    const size = this.buffer.byteLength;
    if (size < 8) throw new SafetensorsError(`${path}: file too small to be safetensors (${size} bytes)`);
    const headerLen = Number(new DataView(this.buffer).getBigUint64(0, true));
    if (headerLen > size - 8 || headerLen > 100 * 1024 * 1024)
      throw new SafetensorsError(`${path}: header length ${headerLen} exceeds the file (${size} bytes)`);
    let header: Record<string, unknown>;
    try {
      header = JSON.parse(new TextDecoder().decode(new Uint8Array(this.buffer, 8, headerLen)));
    } catch (e) {
      throw new SafetensorsError(`${path}: header is not valid JSON (${(e as Error).message})`);
    }
    const dataStart = 8 + headerLen;
    this.metadata = (header.__metadata__ as Record<string, string>) ?? {};
    this.tensors = new Map();
    for (const [name, raw] of Object.entries(header)) {
      if (name === '__metadata__') continue;
      const t = raw as { dtype: StDType; shape: number[]; data_offsets: [number, number] };
      const eb = DTYPE_BYTES[t.dtype];
      if (!eb) throw new SafetensorsError(`${path}: tensor ${name} has unsupported dtype ${t.dtype}`);
      const [b, e] = t.data_offsets;
      const n = t.shape.reduce((a, c) => a * c, 1);
      if (e - b !== n * eb || dataStart + e > size || b < 0)
        throw new SafetensorsError(`${path}: tensor ${name} offsets [${b}, ${e}] do not match shape ${JSON.stringify(t.shape)} ${t.dtype}`);
      this.tensors.set(name, { name, dtype: t.dtype, shape: t.shape, bytes: new Uint8Array(this.buffer, dataStart + b, e - b) });
    }
  }

  has(name: string): boolean {
    return this.tensors.has(name);
  }

  get(name: string): TensorInfo {
    const t = this.tensors.get(name);
    if (!t) throw new SafetensorsError(`${this.path}: tensor ${name} not found`);
    return t;
  }

  /** The tensor as float32 (F32 viewed without copy when aligned; F16/BF16/F64 converted). */
  float32(name: string): Float32Array {
    return toFloat32(this.get(name));
  }
}

/** Widens a tensor to float32. F32 data is viewed in place when 4-byte aligned. */
export function toFloat32(t: TensorInfo): Float32Array {
  const n = t.shape.reduce((a, c) => a * c, 1);
  const { bytes } = t;
  switch (t.dtype) {
    case 'F32':
      if (bytes.byteOffset % 4 === 0) return new Float32Array(bytes.buffer, bytes.byteOffset, n);
      return new Float32Array(bytes.slice().buffer);
    case 'BF16': {
      const src = bytes.byteOffset % 2 === 0 ? new Uint16Array(bytes.buffer, bytes.byteOffset, n) : new Uint16Array(bytes.slice().buffer);
      const out = new Float32Array(n);
      addon.convertBf16ToF32(src, out);
      return out;
    }
    case 'F16': {
      const src = bytes.byteOffset % 2 === 0 ? new Uint16Array(bytes.buffer, bytes.byteOffset, n) : new Uint16Array(bytes.slice().buffer);
      const out = new Float32Array(n);
      addon.convertF16ToF32(src, out);
      return out;
    }
    case 'F64': {
      const src = new Float64Array(bytes.slice().buffer);
      return Float32Array.from(src);
    }
    default:
      throw new SafetensorsError(`tensor ${t.name}: ${t.dtype} is not a float type`);
  }
}

/** Integer tensor (I64/I32) as a plain number array. */
export function toIntArray(t: TensorInfo): number[] {
  const n = t.shape.reduce((a, c) => a * c, 1);
  const copy = t.bytes.slice().buffer;
  if (t.dtype === 'I64') return Array.from(new BigInt64Array(copy, 0, n), Number);
  if (t.dtype === 'I32') return Array.from(new Int32Array(copy, 0, n));
  throw new SafetensorsError(`tensor ${t.name}: ${t.dtype} is not an integer type`);
}

/**
 * A checkpoint's tensors across one file or a sharded set (`model.safetensors.index.json`).
 */
export class SafetensorsCheckpoint {
  readonly files: SafetensorsFile[];
  private readonly byName = new Map<string, SafetensorsFile>();

  constructor(files: SafetensorsFile[]) {
    this.files = files;
    for (const f of files) for (const name of f.tensors.keys()) this.byName.set(name, f);
  }

  /** Opens `dir/model.safetensors`, or the shards listed by `dir/model.safetensors.index.json`. */
  static open(dirOrFile: string): SafetensorsCheckpoint {
    if (dirOrFile.endsWith('.safetensors')) return new SafetensorsCheckpoint([new SafetensorsFile(dirOrFile)]);
    const index = join(dirOrFile, 'model.safetensors.index.json');
    if (existsSync(index)) {
      const map = JSON.parse(readFileSync(index, 'utf8')).weight_map as Record<string, string>;
      const shards = [...new Set(Object.values(map))].sort();
      return new SafetensorsCheckpoint(shards.map((s) => new SafetensorsFile(join(dirOrFile, s))));
    }
    const single = join(dirOrFile, 'model.safetensors');
    if (existsSync(single)) return new SafetensorsCheckpoint([new SafetensorsFile(single)]);
    throw new SafetensorsError(`${dirOrFile}: no model.safetensors or model.safetensors.index.json`);
  }

  names(): string[] {
    return [...this.byName.keys()];
  }

  has(name: string): boolean {
    return this.byName.has(name);
  }

  get(name: string): TensorInfo {
    const f = this.byName.get(name);
    if (!f) throw new SafetensorsError(`tensor ${name} not found in ${this.files.map((x) => x.path).join(', ')}`);
    return f.get(name);
  }

  float32(name: string): Float32Array {
    return toFloat32(this.get(name));
  }
}

export interface TensorToWrite {
  dtype: StDType;
  shape: number[];
  data: ArrayBufferView;
}

/** Serializes tensors (sorted by name, 8-byte aligned header as the reference writer does). */
export function serializeSafetensors(tensors: Record<string, TensorToWrite>, metadata?: Record<string, string>): Buffer {
  const names = Object.keys(tensors).sort();
  const header: Record<string, unknown> = {};
  if (metadata) header.__metadata__ = metadata;
  let off = 0;
  for (const name of names) {
    const t = tensors[name];
    const n = t.shape.reduce((a, c) => a * c, 1);
    const len = n * DTYPE_BYTES[t.dtype];
    if (t.data.byteLength !== len)
      throw new SafetensorsError(`tensor ${name}: ${t.data.byteLength} bytes for shape ${JSON.stringify(t.shape)} ${t.dtype} (needs ${len})`);
    header[name] = { dtype: t.dtype, shape: t.shape, data_offsets: [off, off + len] };
    off += len;
  }
  let json = JSON.stringify(header);
  while ((8 + Buffer.byteLength(json)) % 8 !== 0) json += ' ';
  const hbytes = Buffer.from(json, 'utf8');
  const out = Buffer.alloc(8 + hbytes.length + off);
  out.writeBigUInt64LE(BigInt(hbytes.length), 0);
  hbytes.copy(out, 8);
  let p = 8 + hbytes.length;
  for (const name of names) {
    const d = tensors[name].data;
    const src = new Uint8Array(d.buffer, d.byteOffset, d.byteLength);
    out.set(src, p);
    p += src.length;
  }
  return out;
}

export function writeSafetensors(path: string, tensors: Record<string, TensorToWrite>, metadata?: Record<string, string>): void {
  writeFileSync(path, serializeSafetensors(tensors, metadata));
}
