// A tiny random-weight Qwen2 checkpoint built at test time around the byte-level Qwen2.5 fixture
// tokenizer (test/fixtures/tokenizers/qwen2.5: real tokenizer.json format, chat template with
// `tools`). 2 layers, hidden 32: the text is noise, but everything the model's vocabulary and chat
// template decide (constrained JSON, tool rendering, stop strings, usage) is real.
import { copyFileSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { writeSafetensors, type TensorToWrite } from '../../src/formats/safetensors.ts';

const FIXTURE = join(import.meta.dirname, '../fixtures/tokenizers/qwen2.5');

/** Writes config.json, model.safetensors and the tokenizer files into `dir` (created). */
export function writeTinyQwen2(dir: string, seed = 1): string {
  mkdirSync(dir, { recursive: true });
  for (const f of ['tokenizer.json', 'tokenizer_config.json', 'generation_config.json']) copyFileSync(join(FIXTURE, f), join(dir, f));
  const H = 32, L = 2, NH = 4, NKV = 2, HD = H / NH, I = 64, V = 1536; // V covers the fixture's 1522 ids
  const config = {
    architectures: ['Qwen2ForCausalLM'], model_type: 'qwen2', hidden_size: H, intermediate_size: I, num_hidden_layers: L,
    num_attention_heads: NH, num_key_value_heads: NKV, vocab_size: V, max_position_embeddings: 1024, rms_norm_eps: 1e-6,
    rope_theta: 10000, tie_word_embeddings: true, hidden_act: 'silu', torch_dtype: 'float32', bos_token_id: 1500, eos_token_id: 1502,
  };
  writeFileSync(join(dir, 'config.json'), JSON.stringify(config, null, 2));
  let s = seed >>> 0 || 1;
  const rand = () => { s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0; return s / 4294967296 - 0.5; };
  const t = (shape: number[], scale = 0.2): TensorToWrite => {
    const n = shape.reduce((a, b) => a * b, 1);
    const data = new Float32Array(n);
    for (let i = 0; i < n; i++) data[i] = rand() * scale;
    return { dtype: 'F32', shape, data };
  };
  const ones = (n: number): TensorToWrite => ({ dtype: 'F32', shape: [n], data: new Float32Array(n).fill(1) });
  const tensors: Record<string, TensorToWrite> = { 'model.embed_tokens.weight': t([V, H], 1), 'model.norm.weight': ones(H) };
  for (let l = 0; l < L; l++) {
    const p = `model.layers.${l}.`;
    Object.assign(tensors, {
      [p + 'input_layernorm.weight']: ones(H),
      [p + 'post_attention_layernorm.weight']: ones(H),
      [p + 'self_attn.q_proj.weight']: t([NH * HD, H]), [p + 'self_attn.q_proj.bias']: t([NH * HD], 0.02),
      [p + 'self_attn.k_proj.weight']: t([NKV * HD, H]), [p + 'self_attn.k_proj.bias']: t([NKV * HD], 0.02),
      [p + 'self_attn.v_proj.weight']: t([NKV * HD, H]), [p + 'self_attn.v_proj.bias']: t([NKV * HD], 0.02),
      [p + 'self_attn.o_proj.weight']: t([H, NH * HD]),
      [p + 'mlp.gate_proj.weight']: t([I, H]), [p + 'mlp.up_proj.weight']: t([I, H]), [p + 'mlp.down_proj.weight']: t([H, I]),
    });
  }
  writeSafetensors(join(dir, 'model.safetensors'), tensors);
  return dir;
}
