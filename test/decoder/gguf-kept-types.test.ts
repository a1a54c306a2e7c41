// Every block type the native decoder keeps quantized (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, Q8_K), and a
// Q4_K_M-style mix whose fused q;k;v and gate;up parts have different types, end to end through the GGUF loader:
// a small random Llama (D 256, 2 layers, untied output) written with every matrix in the type. Each model's
// resident weight bytes stay within 10% of the file's tensor bytes, and its logits (a 40-token prefill: the
// dequantized-panel path, or int8 chunks of 32 rows for the packed types on AVX2 and VNNI; then 4 single-token decode
// steps and a 6-token chunk: the int8 path) match the same file loaded with every weight dequantized to f32, within
// what int8 activations allow.
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { GgmlType, gv } from '../../src/formats/gguf.ts';
import { writeGguf, type GgufTensorToWrite } from '../../src/formats/gguf-writer.ts';
import { loadGgufCheckpoint } from '../../src/formats/gguf-hf.ts';
import { ggufTensorSource } from '../../src/models/decoder/gguf-source.ts';
import { buildNativeDecoder } from '../../src/models/decoder/loader.ts';
import { KEPT_TYPES, randomBlocks, rng, type KeptType } from '../native/random-blocks.ts';
import { randomIds, runChunks } from './helpers.ts';
import { addon } from '../../src/native/addon.ts';

const tmp = mkdtempSync(join(tmpdir(), 'loom-kept-'));
t.teardown(() => rmSync(tmp, { recursive: true, force: true }));

const D = 256, F = 512, H = 4, HKV = 2, DH = 64, LAYERS = 2, V = 320;
// typical |quant level × sub-block scale| per type, so every weight is about ±0.05
const LEVEL: Record<KeptType, number> = {
  Q4_0: 8, Q4_1: 15, Q5_0: 16, Q5_1: 31, Q8_0: 128, Q4_K: 63 * 15, Q5_K: 63 * 31, Q6_K: 128 * 32, Q8_K: 16,
};

/** Writes the model with the matrix types `typeOf(gguf name)`; returns the path. */
function writeModel(file: string, typeOf: (name: string) => KeptType): string {
  const rnd = rng(777);
  const tensors: Record<string, GgufTensorToWrite> = {};
  const mat = (name: string, rows: number, cols: number) => {
    const type = typeOf(name);
    const data = randomBlocks(type, rows, cols, rnd, () => 0.05 / LEVEL[type]);
    tensors[name] = { type: GgmlType[type], shape: [rows, cols], data };
  };
  const norm = (name: string) => {
    const f = new Float32Array(D).map(() => 1 + rnd() * 0.2);
    tensors[name] = { type: GgmlType.F32, shape: [D], data: new Uint8Array(f.buffer) };
  };
  mat('token_embd.weight', V, D);
  for (let i = 0; i < LAYERS; i++) {
    norm(`blk.${i}.attn_norm.weight`);
    mat(`blk.${i}.attn_q.weight`, H * DH, D);
    mat(`blk.${i}.attn_k.weight`, HKV * DH, D);
    mat(`blk.${i}.attn_v.weight`, HKV * DH, D);
    mat(`blk.${i}.attn_output.weight`, D, H * DH);
    norm(`blk.${i}.ffn_norm.weight`);
    mat(`blk.${i}.ffn_gate.weight`, F, D);
    mat(`blk.${i}.ffn_up.weight`, F, D);
    mat(`blk.${i}.ffn_down.weight`, D, F);
  }
  norm('output_norm.weight');
  mat('output.weight', V, D);
  const path = join(tmp, file);
  writeGguf(path, {
    metadata: {
      'general.architecture': 'llama', 'general.alignment': gv.u32(32), 'llama.context_length': gv.u32(256),
      'llama.embedding_length': gv.u32(D), 'llama.block_count': gv.u32(LAYERS), 'llama.feed_forward_length': gv.u32(F),
      'llama.attention.head_count': gv.u32(H), 'llama.attention.head_count_kv': gv.u32(HKV),
      'llama.rope.freq_base': gv.f32(10000), 'llama.rope.dimension_count': gv.u32(DH),
      'llama.attention.layer_norm_rms_epsilon': gv.f32(1e-5), 'llama.vocab_size': gv.u32(V),
    },
    tensors,
  });
  return path;
}

async function check(t: { ok: (cond: boolean, msg: string) => unknown }, label: string, path: string): Promise<void> {
  const ck = loadGgufCheckpoint(path);
  // AVX2 and AVX-512 VNNI: the packed types' prompt chunks take the int8 path too, 32 rows at a time (loom/quant.h)
  const int8Prefill = [...ck.file.tensors.values()].some((x) => x.name !== 'token_embd.weight' &&
    (KEPT_TYPES as readonly string[]).includes(GgmlType[x.type]) && addon.quantPrefillInt8(GgmlType[x.type], true));
  const kept = await buildNativeDecoder(ck.config, ggufTensorSource(ck.tensors, ck.tied), { dtype: 'f32' });
  const deq = ggufTensorSource(ck.tensors, ck.tied);
  delete deq.raw;  // every weight dequantized at load
  const ref = await buildNativeDecoder(ck.config, deq, { dtype: 'f32' });
  let tensorBytes = 0;
  for (const x of ck.file.tensors.values()) tensorBytes += x.bytes.byteLength;
  const w = kept.weightBytes;
  t.ok(Math.abs(w - tensorBytes) <= 0.1 * tensorBytes,
    `${label}: resident weights ${w} B vs file tensors ${tensorBytes} B`);
  t.ok(ref.weightBytes > 2.5 * w, `${label}: the dequantized model takes ${ref.weightBytes} B`);
  // a prompt chunk longer than the int8 path's rows (the dequantized-panel GEMM, or int8 chunks of 32 rows), 4 decode
  // steps (one row: vec_dot4), then a chunk of 6 (the small-batch gemm4 kernels, x quantized once for q;k;v, gate;up)
  const P = (addon.quantSmallM as number) + 8;
  const ids = randomIds(P + 10, V, 5);
  const chunks = [P, 1, 1, 1, 1, 6];
  const a = await runChunks(kept, ck.config, ids, chunks);
  const b = await runChunks(ref, ck.config, ids, chunks);
  let worstPrefill = 0, worstDecode = 0, scale = 0;
  for (let i = 0; i < b.length; i++) scale = Math.max(scale, Math.abs(b[i]));
  for (let i = 0; i < a.length; i++) {
    const e = Math.abs(a[i] - b[i]) / scale;
    if (i < P * V) worstPrefill = Math.max(worstPrefill, e);
    else worstDecode = Math.max(worstDecode, e);
  }
  t.ok(Number.isFinite(scale) && scale > 0, `${label}: finite logits (max |logit| ${scale.toFixed(3)})`);
  // prefill: the same dequantized values through an f32 GEMM (summation order only), or int8 activations as decode
  t.ok(worstPrefill < (int8Prefill ? 0.03 : 1e-4),
    `${label}: prefill logits match the dequantized model (${worstPrefill.toExponential(1)} of max)`);
  if (int8Prefill) t.ok(worstPrefill > 1e-6, `${label}: the prompt took the int8 path (${worstPrefill.toExponential(1)})`);
  // decode: int8 activations (a relative error of ~0.4% per value, 5 matrices deep)
  t.ok(worstDecode < 0.03,
    `${label}: decode logits match the dequantized model (${worstDecode.toExponential(1)} of max)`);
  t.ok(worstDecode > 1e-6, `${label}: the decode steps took the int8 path (${worstDecode.toExponential(1)})`);
}

t.test('every kept block type: resident bytes and logits against the dequantized model', async (t) => {
  for (const type of KEPT_TYPES) await check(t, type, writeModel(`${type}.gguf`, () => type));
});

t.test('a Q4_K_M-style mix (q, k Q4_K; v, down Q6_K; up Q5_K; embedding Q8_0) keeps every part', async (t) => {
  const typeOf = (n: string): KeptType => (/attn_v|ffn_down|output\./.test(n) ? 'Q6_K' : /ffn_up/.test(n) ? 'Q5_K'
    : /token_embd/.test(n) ? 'Q8_0' : 'Q4_K');
  await check(t, 'mix', writeModel('mix.gguf', typeOf));
});
