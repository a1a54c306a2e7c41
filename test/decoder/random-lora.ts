// A random PEFT LoRA adapter (adapter_config.json + adapter_model.safetensors) for a Llama-family base config:
// rank r on every module the decoder graph adapts, seeded, large enough to change greedy continuations. Used by
// the many-adapters tests and `npm run bench -- lora`.
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { writeSafetensors, type TensorToWrite } from '../../src/formats/safetensors.ts';

export interface LoraBaseShape {
  hidden_size: number; intermediate_size: number; num_hidden_layers: number;
  num_attention_heads: number; num_key_value_heads?: number; head_dim?: number;
}

/** Loom's decoder training default (src/training/decoder-trainer.ts) and every module the graph adapts. */
export const ATTENTION_MODULES = ['q_proj', 'k_proj', 'v_proj', 'o_proj'];
export const ALL_MODULES = [...ATTENTION_MODULES, 'gate_proj', 'up_proj', 'down_proj'];

/**
 * Writes the adapter into `dir` (created) and returns `dir`. `std`: spread of the A and B entries; `targets`:
 * module names (default: all seven).
 */
export function writeRandomLora(
  dir: string, base: LoraBaseShape, o: { r?: number; seed?: number; std?: number; targets?: string[] } = {},
): string {
  const r = o.r ?? 8, std = o.std ?? 0.1;
  mkdirSync(dir, { recursive: true });
  const D = base.hidden_size, F = base.intermediate_size;
  const Dh = base.head_dim ?? D / base.num_attention_heads;
  const Nq = base.num_attention_heads * Dh, Nkv = (base.num_key_value_heads ?? base.num_attention_heads) * Dh;
  const all: Record<string, [number, number]> = {
    'self_attn.q_proj': [D, Nq], 'self_attn.k_proj': [D, Nkv], 'self_attn.v_proj': [D, Nkv],
    'self_attn.o_proj': [Nq, D],
    'mlp.gate_proj': [D, F], 'mlp.up_proj': [D, F], 'mlp.down_proj': [F, D],
  };
  const targets = o.targets ?? ALL_MODULES;
  const shapes = Object.fromEntries(Object.entries(all).filter(([k]) => targets.includes(k.split('.')[1])));
  let s = (o.seed ?? 1) >>> 0 || 1;
  // uniform with standard deviation `std`
  const rand = () => {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    return (s / 4294967296 - 0.5) * 2 * std * Math.sqrt(3);
  };
  const t = (rows: number, cols: number): TensorToWrite => {
    const data = new Float32Array(rows * cols);
    for (let i = 0; i < data.length; i++) data[i] = rand();
    return { dtype: 'F32', shape: [rows, cols], data };
  };
  const tensors: Record<string, TensorToWrite> = {};
  for (let l = 0; l < base.num_hidden_layers; l++) {
    for (const [m, [inp, out]] of Object.entries(shapes)) {
      const p = `base_model.model.model.layers.${l}.${m}`;
      tensors[`${p}.lora_A.weight`] = t(r, inp);
      tensors[`${p}.lora_B.weight`] = t(out, r);
    }
  }
  writeSafetensors(join(dir, 'adapter_model.safetensors'), tensors);
  const target = Object.keys(shapes).map((k) => k.split('.')[1]);
  writeFileSync(join(dir, 'adapter_config.json'), JSON.stringify({
    peft_type: 'LORA', r, lora_alpha: 2 * r, target_modules: target, lora_dropout: 0, bias: 'none',
    task_type: 'CAUSAL_LM',
  }));
  return dir;
}
