// GGUF v3 writer (the layout: gguf.ts): metadata key/values typed from plain JS values (or gv's typed ones),
// tensor infos, then each tensor's bytes at an aligned offset, streamed to the file. Tensor bytes are written as
// given (gguf-quantize.ts makes block-quantized ones; gguf-hf.ts's convertHfToGguf a whole decoder).
import { openSync, writeSync, closeSync } from 'node:fs';
import { GgmlType, GgufError, GgufType, tensorBytes, type GgufValue } from './gguf.ts';

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
