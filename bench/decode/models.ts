// Random-weight checkpoints with the real SmolLM2-135M and Qwen2.5-0.5B configurations, written in
// Hugging Face layout (config.json + model.safetensors) under bench/.cache/decode/. Speed does not
// depend on the weights, so these stand in for the real files.
import { closeSync, copyFileSync, existsSync, mkdirSync, openSync, renameSync, writeFileSync, writeSync } from 'node:fs';
import { join } from 'node:path';

export const CACHE = join(import.meta.dirname, '..', '.cache', 'decode');

export const CONFIGS: Record<string, Record<string, unknown>> = {
  'smollm2-135m': {
    architectures: ['LlamaForCausalLM'], model_type: 'llama', hidden_size: 576, intermediate_size: 1536,
    num_hidden_layers: 30, num_attention_heads: 9, num_key_value_heads: 3, head_dim: 64, vocab_size: 49152,
    max_position_embeddings: 8192, rms_norm_eps: 1e-5, rope_theta: 100000, rope_scaling: null,
    tie_word_embeddings: true, attention_bias: false, hidden_act: 'silu', bos_token_id: 1, eos_token_id: 2, torch_dtype: 'bfloat16',
  },
  'qwen2.5-0.5b': {
    architectures: ['Qwen2ForCausalLM'], model_type: 'qwen2', hidden_size: 896, intermediate_size: 4864,
    num_hidden_layers: 24, num_attention_heads: 14, num_key_value_heads: 2, vocab_size: 151936,
    max_position_embeddings: 32768, rms_norm_eps: 1e-6, rope_theta: 1000000, rope_scaling: null, use_sliding_window: false,
    sliding_window: 32768, tie_word_embeddings: true, hidden_act: 'silu', bos_token_id: 151643, eos_token_id: 151645, torch_dtype: 'bfloat16',
  },
  // not a released model: a Llama whose rows are all multiples of 256, so that its Q4_K_M / Q6_K files hold Q4_K
  // and Q6_K weights throughout, as the 7B+ files people run do (SmolLM2's and Qwen2.5-0.5B's 576 / 896-wide rows
  // fall back to Q5_0 / Q8_0); only with --models llama-1024
  'llama-1024': {
    architectures: ['LlamaForCausalLM'], model_type: 'llama', hidden_size: 1024, intermediate_size: 2816,
    num_hidden_layers: 8, num_attention_heads: 16, num_key_value_heads: 4, head_dim: 64, vocab_size: 32000,
    max_position_embeddings: 8192, rms_norm_eps: 1e-5, rope_theta: 10000, rope_scaling: null,
    tie_word_embeddings: true, attention_bias: false, hidden_act: 'silu', bos_token_id: 1, eos_token_id: 2,
    torch_dtype: 'bfloat16',
  },
};

/** The models `npm run bench -- decode` runs without --models. */
export const DEFAULT_MODELS = ['smollm2-135m', 'qwen2.5-0.5b'];

/** Tensor list (HF names and shapes) of a Llama-family config. */
export function tensorShapes(c: Record<string, number | boolean | unknown>): [string, number[]][] {
  const D = c.hidden_size as number, F = c.intermediate_size as number, L = c.num_hidden_layers as number;
  const Hq = c.num_attention_heads as number, Hkv = c.num_key_value_heads as number;
  const Dh = (c.head_dim as number) ?? D / Hq, V = c.vocab_size as number;
  const out: [string, number[]][] = [['model.embed_tokens.weight', [V, D]], ['model.norm.weight', [D]]];
  if (!c.tie_word_embeddings) out.push(['lm_head.weight', [V, D]]);
  for (let i = 0; i < L; i++) {
    const p = `model.layers.${i}.`;
    out.push([p + 'input_layernorm.weight', [D]], [p + 'post_attention_layernorm.weight', [D]],
      [p + 'self_attn.q_proj.weight', [Hq * Dh, D]], [p + 'self_attn.k_proj.weight', [Hkv * Dh, D]],
      [p + 'self_attn.v_proj.weight', [Hkv * Dh, D]], [p + 'self_attn.o_proj.weight', [D, Hq * Dh]],
      [p + 'mlp.gate_proj.weight', [F, D]], [p + 'mlp.up_proj.weight', [F, D]], [p + 'mlp.down_proj.weight', [D, F]]);
    if (c.model_type === 'qwen2') out.push([p + 'self_attn.q_proj.bias', [Hq * Dh]], [p + 'self_attn.k_proj.bias', [Hkv * Dh]], [p + 'self_attn.v_proj.bias', [Hkv * Dh]]);
  }
  return out;
}

/** Writes (once) a random bf16 checkpoint; returns its directory. */
/**
 * A random checkpoint's folder with the SmolLM2 tokenizer files copied in (the fixture's): what the
 * trainers' data path and the RL benches need besides the weights.
 */
export function withSmolTokenizer(dir: string): string {
  const tokDir = join(import.meta.dirname, '../../test/fixtures/tokenizers/smollm2');
  for (const f of ['tokenizer.json', 'tokenizer_config.json'])
    if (!existsSync(join(dir, f)) && existsSync(join(tokDir, f))) copyFileSync(join(tokDir, f), join(dir, f));
  return dir;
}

export function ensureRandomCheckpoint(name: string): string {
  const dir = join(CACHE, name);
  const file = join(dir, 'model.safetensors');
  if (existsSync(file)) return dir;
  mkdirSync(dir, { recursive: true });
  const cfg = CONFIGS[name];
  writeFileSync(join(dir, 'config.json'), JSON.stringify(cfg, null, 2));
  const shapes = tensorShapes(cfg).sort((a, b) => (a[0] < b[0] ? -1 : 1));
  const header: Record<string, unknown> = { __metadata__: { format: 'pt', note: 'random weights for benchmarking' } };
  let off = 0;
  for (const [n, s] of shapes) {
    const len = s.reduce((a, b) => a * b, 1) * 2;
    header[n] = { dtype: 'BF16', shape: s, data_offsets: [off, off + len] };
    off += len;
  }
  let json = JSON.stringify(header);
  while ((8 + json.length) % 8) json += ' ';
  const fd = openSync(file + '.tmp', 'w');
  const head = Buffer.alloc(8);
  head.writeBigUInt64LE(BigInt(json.length));
  writeSync(fd, head);
  writeSync(fd, Buffer.from(json));
  let seed = 12345;
  for (const [n, s] of shapes) {
    const count = s.reduce((a, b) => a * b, 1);
    const u16 = new Uint16Array(count);
    const isNorm = n.endsWith('layernorm.weight') || n === 'model.norm.weight';
    const f = new Float32Array(1);
    const u = new Uint32Array(f.buffer);
    for (let i = 0; i < count; i++) {
      // xorshift → roughly uniform in [-0.04, 0.04] (norm weights around 1)
      seed ^= seed << 13; seed ^= seed >>> 17; seed ^= seed << 5;
      const r = ((seed >>> 0) / 4294967296 - 0.5) * 0.08;
      f[0] = isNorm ? 1 + r : r;
      u16[i] = u[0] >>> 16;
    }
    writeSync(fd, new Uint8Array(u16.buffer));
  }
  closeSync(fd);
  // rename last so an interrupted run never leaves a truncated file behind
  renameSync(file + '.tmp', file);
  return dir;
}
