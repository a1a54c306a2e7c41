// Shared helpers for the decoder tests: fixture paths, a direct native forward over a fresh KV
// cache (whole sequences, or one sequence fed in chunks), random token ids, and max-abs comparison.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { NativeKvCache, type KvDtype, type NativeDecoder } from '../../src/models/decoder/native-model.ts';
import type { DecoderConfig } from '../../src/formats/hf-config.ts';

export const shared = join(import.meta.dirname, '../../../shared');
export const goldens = join(shared, 'goldens');

// eslint-disable-next-line @typescript-eslint/no-explicit-any
export function readCases(dir: string): any {
  return JSON.parse(readFileSync(join(dir, 'cases.json'), 'utf8'));
}

export function maxAbs(a: Float32Array, b: Float32Array, n = Math.min(a.length, b.length)): number {
  let m = 0;
  for (let i = 0; i < n; i++) {
    const d = Math.abs(a[i] - b[i]);
    if (!(d <= m)) m = Number.isNaN(d) ? Infinity : d;
  }
  return m;
}

/**
 * One native step over several whole sequences (each from position 0) in a fresh cache (f32 unless
 * kvDtype says bf16); returns the logits of every row, per sequence. adapters: per sequence id or -1.
 */
export async function forwardAll(model: NativeDecoder, cfg: DecoderConfig, seqs: number[][], adapters?: number[], kvDtype: KvDtype = 'f32'): Promise<Float32Array[]> {
  const bs = 16;
  const blocksPer = seqs.map((s) => Math.ceil(s.length / bs));
  const kv = new NativeKvCache(cfg, blocksPer.reduce((a, b) => a + b, 0), bs, kvDtype);
  const T = seqs.reduce((a, s) => a + s.length, 0);
  const tokens = Int32Array.from(seqs.flat());
  const positions = Int32Array.from(seqs.flatMap((s) => s.map((_, i) => i)));
  const tables: number[] = [];
  const offs = [0];
  let next = 0;
  for (const n of blocksPer) {
    for (let i = 0; i < n; i++) tables.push(next++);
    offs.push(tables.length);
  }
  const V = cfg.vocabSize;
  const out = new Float32Array(T * V);
  await model.step(kv, {
    tokens, positions, seqLens: Int32Array.from(seqs.map((s) => s.length)), tables: Int32Array.from(tables),
    tableOffsets: Int32Array.from(offs), adapters: adapters ? Int32Array.from(adapters) : undefined,
    outRows: Int32Array.from({ length: T }, (_, i) => i),
  }, out);
  const res: Float32Array[] = [];
  let row = 0;
  for (const s of seqs) {
    res.push(out.slice(row * V, (row + s.length) * V));
    row += s.length;
  }
  return res;
}

/** Deterministic pseudo-random token ids in [3, V) (an LCG; ids 0..2 are special in the fixtures). */
export function randomIds(n: number, V: number, seed: number): number[] {
  let s = seed >>> 0;
  return Array.from({ length: n }, () => {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    return 3 + (s % (V - 3));
  });
}

/**
 * Feeds `ids` as one sequence in steps of the given sizes over a fresh cache of `dtype` whose blocks
 * (of `blockSize` slots) are out of order; logits of every row.
 */
export async function runChunks(model: NativeDecoder, cfg: DecoderConfig, ids: number[], chunks: number[], dtype: KvDtype = 'f32', blockSize = 16): Promise<Float32Array> {
  const nb = Math.ceil(ids.length / blockSize);
  const kv = new NativeKvCache(cfg, nb + 3, blockSize, dtype);
  const table = Int32Array.from({ length: nb }, (_, i) => (i * 5 + 2) % (nb + 3));
  const V = cfg.vocabSize;
  const out = new Float32Array(ids.length * V);
  let pos = 0;
  for (const n of chunks) {
    const step = new Float32Array(n * V);
    await model.step(kv, {
      tokens: Int32Array.from(ids.slice(pos, pos + n)),
      positions: Int32Array.from({ length: n }, (_, i) => pos + i),
      seqLens: Int32Array.of(n), tables: table, tableOffsets: Int32Array.of(0, nb),
      outRows: Int32Array.from({ length: n }, (_, i) => i),
    }, step);
    out.set(step, pos * V);
    pos += n;
  }
  return out;
}
