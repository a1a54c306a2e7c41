// Minimal GGUF v3 writer for the decode benchmark: writes a random-weight checkpoint (bench/decode/models.ts)
// as a llama.cpp model file (F16, F32 matrices, or the Q8_0 / Q6_K / Q4_K_M file types with each tensor's type
// and blocks from Loom's quantizers, src/formats/gguf-quantize.ts; F32 norms/biases) with a synthetic
// SentencePiece-style vocabulary (<unk>, <s>, </s>, 256 byte tokens, fillers) so llama.cpp accepts it.
// Speed-only: the rotary layout permutation that HF→GGUF converters apply to Llama q/k is skipped (weights are random).
// When src/formats/gguf.ts (the project's GGUF reader/writer) offers a writer this file can go.
import { closeSync, existsSync, openSync, renameSync, writeSync } from 'node:fs';
import { SafetensorsCheckpoint, toFloat32 } from '../../src/formats/safetensors.ts';
import { quantizeQ8_0 } from '../../src/formats/gguf-quantize.ts';
import { ggufQuantType, quantizeQ4_K, quantizeQ5_0, quantizeQ6_K } from '../../src/formats/gguf-quantize.ts';

/** ggml type id, values per block and bytes per block of the tensor types written here. */
const TYPES = {
  F32: [0, 1, 4], F16: [1, 1, 2], Q5_0: [6, 32, 22], Q8_0: [8, 32, 34], Q4_K: [12, 256, 144], Q6_K: [14, 256, 210],
} as const;
/** llama.cpp's general.file_type ids (enum llama_ftype). */
const FILE_TYPE = { F32: 0, F16: 1, Q8_0: 7, Q4_K_M: 15, Q6_K: 18 } as const;
export type BenchGgufType = keyof typeof FILE_TYPE;

const T_U32 = 4, T_I32 = 5, T_F32 = 6, T_STR = 8, T_ARR = 9;

class Buf {
  parts: Buffer[] = [];
  len = 0;
  push(b: Buffer): void { this.parts.push(b); this.len += b.length; }
  u32(v: number): void { const b = Buffer.alloc(4); b.writeUInt32LE(v); this.push(b); }
  i32(v: number): void { const b = Buffer.alloc(4); b.writeInt32LE(v); this.push(b); }
  u64(v: number): void { const b = Buffer.alloc(8); b.writeBigUInt64LE(BigInt(v)); this.push(b); }
  f32(v: number): void { const b = Buffer.alloc(4); b.writeFloatLE(v); this.push(b); }
  str(s: string): void { const b = Buffer.from(s, 'utf8'); this.u64(b.length); this.push(b); }
}

function f32ToF16(src: Float32Array): Uint16Array {
  const out = new Uint16Array(src.length);
  const f = new Float32Array(1);
  const u = new Uint32Array(f.buffer);
  for (let i = 0; i < src.length; i++) {
    f[0] = src[i];
    const x = u[0];
    const sign = (x >>> 16) & 0x8000;
    let e = ((x >>> 23) & 0xff) - 127 + 15;
    let m = x & 0x7fffff;
    if (e >= 31) { out[i] = sign | 0x7c00; continue; }
    if (e <= 0) {
      if (e < -10) { out[i] = sign; continue; }
      m = (m | 0x800000) >>> (1 - e);
      out[i] = sign | ((m + 0x1000) >>> 13);
      continue;
    }
    const r = m + 0xfff + ((m >>> 13) & 1);
    if (r & 0x800000) { m = 0; e++; } else m = r;
    out[i] = e >= 31 ? sign | 0x7c00 : sign | (e << 10) | (m >>> 13);
  }
  return out;
}

export function writeGgufFromCheckpoint(dir: string, cfg: Record<string, unknown>, path: string,
  dtype: BenchGgufType): string {
  if (existsSync(path)) return path;
  const ck = SafetensorsCheckpoint.open(dir);
  const arch = cfg.model_type === 'qwen2' ? 'qwen2' : 'llama';
  const L = cfg.num_hidden_layers as number;
  const D = cfg.hidden_size as number, Hq = cfg.num_attention_heads as number;
  const Dh = (cfg.head_dim as number) ?? D / Hq;
  const V = cfg.vocab_size as number;
  const names: [string, string][] = [['token_embd.weight', 'model.embed_tokens.weight'], ['output_norm.weight', 'model.norm.weight']];
  if (!cfg.tie_word_embeddings) names.push(['output.weight', 'lm_head.weight']);
  const map: Record<string, string> = {
    attn_norm: 'input_layernorm', ffn_norm: 'post_attention_layernorm', attn_q: 'self_attn.q_proj', attn_k: 'self_attn.k_proj',
    attn_v: 'self_attn.v_proj', attn_output: 'self_attn.o_proj', ffn_gate: 'mlp.gate_proj', ffn_up: 'mlp.up_proj', ffn_down: 'mlp.down_proj',
  };
  for (let i = 0; i < L; i++) {
    for (const [g, h] of Object.entries(map)) names.push([`blk.${i}.${g}.weight`, `model.layers.${i}.${h}.weight`]);
    if (arch === 'qwen2') for (const g of ['attn_q', 'attn_k', 'attn_v']) names.push([`blk.${i}.${g}.bias`, `model.layers.${i}.${map[g]}.bias`]);
  }
  const kv = new Buf();
  let nkv = 0;
  const kvU32 = (k: string, v: number) => { kv.str(k); kv.u32(T_U32); kv.u32(v); nkv++; };
  const kvF32 = (k: string, v: number) => { kv.str(k); kv.u32(T_F32); kv.f32(v); nkv++; };
  const kvStr = (k: string, v: string) => { kv.str(k); kv.u32(T_STR); kv.str(v); nkv++; };
  kvStr('general.architecture', arch);
  kvStr('general.name', `loom-bench-${arch}`);
  kvU32('general.alignment', 32);
  kvU32(`${arch}.context_length`, cfg.max_position_embeddings as number);
  kvU32(`${arch}.embedding_length`, D);
  kvU32(`${arch}.block_count`, L);
  kvU32(`${arch}.feed_forward_length`, cfg.intermediate_size as number);
  kvU32(`${arch}.attention.head_count`, Hq);
  kvU32(`${arch}.attention.head_count_kv`, cfg.num_key_value_heads as number);
  kvU32(`${arch}.rope.dimension_count`, Dh);
  kvF32(`${arch}.rope.freq_base`, cfg.rope_theta as number);
  kvF32(`${arch}.attention.layer_norm_rms_epsilon`, cfg.rms_norm_eps as number);
  kvU32('general.file_type', FILE_TYPE[dtype]);
  // vocabulary
  kvStr('tokenizer.ggml.model', 'llama');
  const toks: string[] = ['<unk>', '<s>', '</s>'];
  for (let b = 0; b < 256; b++) toks.push(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
  while (toks.length < V) toks.push(`\u2581t${toks.length}`);
  kv.str('tokenizer.ggml.tokens'); kv.u32(T_ARR); kv.u32(T_STR); kv.u64(V); for (const s of toks) kv.str(s); nkv++;
  kv.str('tokenizer.ggml.scores'); kv.u32(T_ARR); kv.u32(T_F32); kv.u64(V); for (let i = 0; i < V; i++) kv.f32(-i); nkv++;
  kv.str('tokenizer.ggml.token_type'); kv.u32(T_ARR); kv.u32(T_I32); kv.u64(V);
  for (let i = 0; i < V; i++) kv.i32(i === 0 ? 2 : i < 3 ? 3 : i < 259 ? 6 : 1);
  nkv++;
  kvU32('tokenizer.ggml.bos_token_id', 1);
  kvU32('tokenizer.ggml.eos_token_id', 2);

  const infos = new Buf();
  const datas: { name: string; src: string; type: keyof typeof TYPES }[] = [];
  let off = 0;
  const sizes: number[] = [];
  const quant = dtype === 'Q8_0' || dtype === 'Q6_K' || dtype === 'Q4_K_M';
  for (const [g, h] of names) {
    const t = ck.get(h);
    const mat = t.shape.length === 2;
    const n = t.shape.reduce((a, b) => a * b, 1);
    const type = !mat ? 'F32' : quant ? ggufQuantType(dtype, g, t.shape[1], L, !cfg.tie_word_embeddings) : dtype;
    const [id, per, bpb] = TYPES[type];
    const bytes = (n / per) * bpb;
    infos.str(g);
    infos.u32(t.shape.length);
    for (const d of [...t.shape].reverse()) infos.u64(d);
    infos.u32(id);
    infos.u64(off);
    datas.push({ name: g, src: h, type });
    sizes.push(bytes);
    off += Math.ceil(bytes / 32) * 32;
  }
  const head = new Buf();
  head.push(Buffer.from('GGUF', 'latin1'));
  head.u32(3);
  head.u64(names.length);
  head.u64(nkv);
  const fd = openSync(path + '.tmp', 'w');
  let pos = 0;
  const w = (b: Uint8Array) => { writeSync(fd, b); pos += b.length; };
  for (const p of [...head.parts, ...kv.parts, ...infos.parts]) w(p);
  w(new Uint8Array((32 - (pos % 32)) % 32));
  datas.forEach((d, i) => {
    const f = toFloat32(ck.get(d.src));
    const x = Float32Array.from(f);
    const arr = d.type === 'F32' ? x : d.type === 'F16' ? f32ToF16(f) : d.type === 'Q8_0' ? quantizeQ8_0(x)
      : d.type === 'Q4_K' ? quantizeQ4_K(x) : d.type === 'Q6_K' ? quantizeQ6_K(x) : quantizeQ5_0(x);
    const u8 = new Uint8Array(arr.buffer, arr.byteOffset, arr.byteLength);
    w(u8);
    w(new Uint8Array(Math.ceil(sizes[i] / 32) * 32 - sizes[i]));
  });
  closeSync(fd);
  renameSync(path + '.tmp', path);
  return path;
}
