// Random ggml blocks of every type the native decoder keeps quantized, for kernel and loader tests: random quant
// bytes, the f16 / f32 scale fields set to `scale`·(0.5..1.5) so values stay in a sane range. Layouts:
// native/formats/gguf_dequant.cc.
import { f32ToF16 } from '../../src/formats/f16.ts';

export const KEPT_TYPES = ['Q4_0', 'Q4_1', 'Q5_0', 'Q5_1', 'Q8_0', 'Q4_K', 'Q5_K', 'Q6_K', 'Q8_K'] as const;
export type KeptType = (typeof KEPT_TYPES)[number];
/** values and bytes per block; offsets of the f16 scale fields (and of Q8_K's f32 one) */
export const LAYOUT: Record<KeptType, { values: number; bytes: number; f16: number[]; f32?: number }> = {
  Q4_0: { values: 32, bytes: 18, f16: [0] }, Q4_1: { values: 32, bytes: 20, f16: [0, 2] },
  Q5_0: { values: 32, bytes: 22, f16: [0] }, Q5_1: { values: 32, bytes: 24, f16: [0, 2] },
  Q8_0: { values: 32, bytes: 34, f16: [0] }, Q4_K: { values: 256, bytes: 144, f16: [0, 2] },
  Q5_K: { values: 256, bytes: 176, f16: [0, 2] }, Q6_K: { values: 256, bytes: 210, f16: [208] },
  Q8_K: { values: 256, bytes: 292, f16: [], f32: 0 },
};

/** A seeded uniform generator in [-0.5, 0.5). */
export function rng(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (Math.imul(s, 1103515245) + 12345) >>> 0;
    return (s >>> 8) / (1 << 24) - 0.5;
  };
}

/** N rows of K values as random blocks of `type`; row n's scales are scale(n)·(0.5..1.5). */
export function randomBlocks(type: KeptType, N: number, K: number, rnd: () => number,
  scale: (n: number) => number): Uint8Array {
  const L = LAYOUT[type], nb = K / L.values;
  const blocks = new Uint8Array(N * nb * L.bytes);
  for (let i = 0; i < blocks.length; i++) blocks[i] = Math.floor((rnd() + 0.5) * 256) & 255;
  const dv = new DataView(blocks.buffer);
  for (let n = 0; n < N; n++) {
    const s = scale(n);
    for (let b = 0; b < nb; b++) {
      const o = (n * nb + b) * L.bytes;
      for (const f of L.f16) dv.setUint16(o + f, f32ToF16(s * (1 + rnd())), true);
      if (L.f32 !== undefined) dv.setFloat32(o + L.f32, (s * (1 + rnd())) / 8, true);
    }
  }
  return blocks;
}
