// LoRA adapters at inference (PEFT format: adapter_config.json + adapter_model.safetensors).
// Each adapter is loaded into the native model under a numeric id; sequences in one batch can use
// different adapters (or none). y = x·Wᵀ + s·(x·Aᵀ)·Bᵀ with s = lora_alpha / r (or / √r with
// use_rslora). Loading and unloading happen at run time; a sequence running with an adapter
// keeps it alive natively until its step completes.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { DecoderConfig } from '../formats/hf-config.ts';
import { SafetensorsFile, toFloat32 } from '../formats/safetensors.ts';
import { LORA_MODULES, type LoraModuleName, type NativeDecoder, type NativeLoraModule } from '../models/decoder/native-model.ts';

export class AdapterError extends Error {
  override name = 'AdapterError';
}

export interface AdapterInfo {
  name: string;
  id: number;
  dir: string;
  r: number;
  alpha: number;
  scale: number;
  targetModules: string[];
  /** how its A and B are kept natively (adapterDtype) */
  dtype: 'f32' | 'bf16';
  /** resident bytes of its A and B matrices */
  bytes: number;
}

/**
 * The storage type of a served adapter's A and B: LOOM_LORA_DTYPE (`f32` | `bf16`), else the base's own (bf16 for a
 * bf16 or block-quantized base, as vLLM keeps adapters in the model's dtype; f32 for an f32 base). The math is fp32
 * either way; bf16 halves what a decode step reads of each adapter (16 adapters of rank 16 on every module of a
 * 31M-parameter base are as large as the base in f32).
 */
export function adapterDtype(baseWeights: 'F32' | 'BF16', env: string | undefined = process.env.LOOM_LORA_DTYPE): 'f32' | 'bf16' {
  if (env === 'f32' || env === 'bf16') return env;
  if (env !== undefined && env !== '' && env !== 'auto')
    throw new AdapterError(`LOOM_LORA_DTYPE must be f32, bf16 or auto, got '${env}'`);
  return baseWeights === 'BF16' ? 'bf16' : 'f32';
}

/** Resident bytes of an adapter's A and B kept as `dtype`. */
export function adapterBytes(modules: readonly NativeLoraModule[], dtype: 'f32' | 'bf16'): number {
  return modules.reduce((n, m) => n + (m.A.length + m.B.length) * (dtype === 'bf16' ? 2 : 4), 0);
}

const KEY = /(?:^|\.)layers\.(\d+)\.(?:self_attn|mlp)\.(q_proj|k_proj|v_proj|o_proj|gate_proj|up_proj|down_proj)\.lora_([AB])(?:\.default)?\.weight$/;

/** Reads a PEFT adapter directory into native LoRA modules (validated against the base config). */
export function readPeftAdapter(dir: string, config: DecoderConfig): { modules: NativeLoraModule[]; r: number; alpha: number; scale: number; targetModules: string[] } {
  const cfgPath = join(dir, 'adapter_config.json');
  if (!existsSync(cfgPath)) throw new AdapterError(`${dir}: adapter_config.json not found`);
  const cfg = JSON.parse(readFileSync(cfgPath, 'utf8')) as Record<string, unknown>;
  if (cfg.peft_type !== undefined && cfg.peft_type !== 'LORA') throw new AdapterError(`${dir}: peft_type ${String(cfg.peft_type)} is not supported (LORA only)`);
  const r = Number(cfg.r);
  const alpha = Number(cfg.lora_alpha ?? r);
  if (!Number.isInteger(r) || r <= 0) throw new AdapterError(`${dir}: adapter_config.json r must be a positive integer`);
  const scale = cfg.use_rslora === true ? alpha / Math.sqrt(r) : alpha / r;
  const rankPattern = (cfg.rank_pattern ?? {}) as Record<string, number>;
  const alphaPattern = (cfg.alpha_pattern ?? {}) as Record<string, number>;
  if (Object.keys(rankPattern).length || Object.keys(alphaPattern).length)
    throw new AdapterError(`${dir}: rank_pattern / alpha_pattern are not supported`);
  const stPath = join(dir, 'adapter_model.safetensors');
  if (!existsSync(stPath)) throw new AdapterError(`${dir}: adapter_model.safetensors not found`);
  const st = new SafetensorsFile(stPath);
  const pairs = new Map<string, { layer: number; module: LoraModuleName; A?: Float32Array; B?: Float32Array; shapeA?: number[]; shapeB?: number[] }>();
  for (const [name, t] of st.tensors) {
    const m = KEY.exec(name);
    if (!m) {
      if (name.includes('lora_')) throw new AdapterError(`${dir}: unsupported adapter tensor ${name}`);
      continue;
    }
    const layer = Number(m[1]);
    const module = m[2] as LoraModuleName;
    const k = `${layer}.${module}`;
    const p = pairs.get(k) ?? { layer, module };
    if (m[3] === 'A') { p.A = toFloat32(t); p.shapeA = t.shape; } else { p.B = toFloat32(t); p.shapeB = t.shape; }
    pairs.set(k, p);
  }
  const modules: NativeLoraModule[] = [];
  for (const p of pairs.values()) {
    if (!p.A || !p.B) throw new AdapterError(`${dir}: layer ${p.layer} ${p.module} lacks lora_A or lora_B`);
    if (p.layer >= config.numLayers) throw new AdapterError(`${dir}: layer ${p.layer} is beyond the base model's ${config.numLayers} layers`);
    const rr = p.shapeA![0];
    if (p.shapeB![1] !== rr) throw new AdapterError(`${dir}: layer ${p.layer} ${p.module}: lora_A rank ${rr} and lora_B ${p.shapeB} disagree`);
    modules.push({ layer: p.layer, module: LORA_MODULES.indexOf(p.module), r: rr, scale, A: Float32Array.from(p.A), B: Float32Array.from(p.B) });
  }
  if (!modules.length) throw new AdapterError(`${dir}: no LoRA tensors found`);
  const targetModules = Array.isArray(cfg.target_modules) ? (cfg.target_modules as string[]) : [...new Set(modules.map((m) => LORA_MODULES[m.module]))];
  return { modules, r, alpha, scale, targetModules };
}

export class AdapterRegistry {
  private readonly byName = new Map<string, AdapterInfo>();
  private nextId = 1;
  constructor(
    private readonly model: NativeDecoder,
    private readonly config: DecoderConfig,
  ) {}

  /** Loads (or replaces) adapter `name` from a PEFT directory. */
  load(name: string, dir: string): AdapterInfo {
    if (!name) throw new AdapterError('adapter name must be non-empty');
    const a = readPeftAdapter(dir, this.config);
    const id = this.nextId++;
    const dtype = adapterDtype(this.model.weightDtype);
    this.model.loadAdapter(id, a.modules, dtype); // validates shapes natively
    const old = this.byName.get(name);
    const bytes = adapterBytes(a.modules, dtype);
    const info: AdapterInfo = {
      name, id, dir, r: a.r, alpha: a.alpha, scale: a.scale, targetModules: a.targetModules, dtype, bytes,
    };
    this.byName.set(name, info);
    if (old) this.model.unloadAdapter(old.id);
    return info;
  }

  unload(name: string): boolean {
    const a = this.byName.get(name);
    if (!a) return false;
    this.byName.delete(name);
    this.model.unloadAdapter(a.id);
    return true;
  }

  get(name: string): AdapterInfo | undefined {
    return this.byName.get(name);
  }

  list(): AdapterInfo[] {
    return [...this.byName.values()];
  }
}
