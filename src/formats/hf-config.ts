// Hugging Face `config.json` / `generation_config.json` for Llama-family decoders, normalized into one
// shape the decoder runtime consumes. Accepts the transformers 4.x key layout (`rope_theta`,
// `rope_scaling`, `torch_dtype`) and the 5.x one (`rope_parameters: {rope_type, rope_theta, ...}`, `dtype`).
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';

export type DecoderModelType = 'llama' | 'qwen2' | 'mistral';

export interface RopeScaling {
  /** 'none': plain RoPE; 'llama3': Llama 3.1 frequency smoothing; 'linear': positions divided by factor. */
  type: 'none' | 'llama3' | 'linear';
  factor: number;
  lowFreqFactor: number;
  highFreqFactor: number;
  originalMaxPosition: number;
}

export interface DecoderConfig {
  modelType: DecoderModelType;
  vocabSize: number;
  hiddenSize: number;
  intermediateSize: number;
  numLayers: number;
  numHeads: number;
  numKvHeads: number;
  headDim: number;
  rmsNormEps: number;
  ropeTheta: number;
  ropeScaling: RopeScaling;
  maxPositionEmbeddings: number;
  tieWordEmbeddings: boolean;
  /** q/k/v projections carry a bias (Qwen2: always; Llama: `attention_bias`). o_proj never does here. */
  attentionBias: boolean;
  /** Sliding-window attention size in tokens, or null for full attention. */
  slidingWindow: number | null;
  bosTokenId: number | null;
  eosTokenIds: number[];
  padTokenId: number | null;
  /** 'float32' | 'float16' | 'bfloat16' as stored in the config (informational). */
  torchDtype: string;
}

export class ConfigError extends Error {
  override name = 'ConfigError';
}

const SUPPORTED: Record<string, DecoderModelType> = { llama: 'llama', qwen2: 'qwen2', mistral: 'mistral' };

function readJson(path: string): Record<string, unknown> {
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (e) {
    throw new ConfigError(`${path}: cannot read (${(e as Error).message})`);
  }
  try {
    const v = JSON.parse(text);
    if (!v || typeof v !== 'object' || Array.isArray(v)) throw new Error('not a JSON object');
    return v as Record<string, unknown>;
  } catch (e) {
    throw new ConfigError(`${path}: invalid JSON (${(e as Error).message})`);
  }
}

function idList(v: unknown): number[] {
  if (v === null || v === undefined) return [];
  if (typeof v === 'number') return [v];
  if (Array.isArray(v)) return v.filter((x): x is number => typeof x === 'number');
  return [];
}

function optNum(v: unknown): number | null {
  return typeof v === 'number' && Number.isFinite(v) ? v : null;
}

/** Normalizes a parsed config.json object (exported for GGUF and tests). `where` names it in errors. */
export function parseDecoderConfig(raw: Record<string, unknown>, where = 'config.json'): DecoderConfig {
  const mt = String(raw.model_type ?? '');
  const modelType = SUPPORTED[mt];
  if (!modelType) {
    const arch = Array.isArray(raw.architectures) ? ` (${(raw.architectures as string[]).join(', ')})` : '';
    throw new ConfigError(`${where}: unsupported model_type "${mt}"${arch}; supported decoders: ${Object.keys(SUPPORTED).join(', ')}`);
  }
  const need = (k: string): number => {
    const v = raw[k];
    if (typeof v !== 'number' || !Number.isInteger(v) || v <= 0) throw new ConfigError(`${where}: "${k}" must be a positive integer (got ${JSON.stringify(v)})`);
    return v;
  };
  const hiddenSize = need('hidden_size');
  const numHeads = need('num_attention_heads');
  const numLayers = need('num_hidden_layers');
  const intermediateSize = need('intermediate_size');
  const vocabSize = need('vocab_size');
  const numKvHeads = raw.num_key_value_heads == null ? numHeads : need('num_key_value_heads');
  const headDim = raw.head_dim == null ? hiddenSize / numHeads : need('head_dim');
  if (!Number.isInteger(headDim)) throw new ConfigError(`${where}: hidden_size ${hiddenSize} is not divisible by num_attention_heads ${numHeads}`);
  if (numHeads % numKvHeads !== 0) throw new ConfigError(`${where}: num_attention_heads ${numHeads} is not a multiple of num_key_value_heads ${numKvHeads}`);
  if (headDim % 2 !== 0) throw new ConfigError(`${where}: head_dim ${headDim} must be even for RoPE`);
  const act = raw.hidden_act ?? raw.hidden_activation ?? 'silu';
  if (act !== 'silu' && act !== 'swish') throw new ConfigError(`${where}: hidden_act "${String(act)}" is not supported (only silu)`);
  if (raw.mlp_bias === true) throw new ConfigError(`${where}: mlp_bias=true is not supported`);

  // RoPE: 5.x puts everything in rope_parameters; 4.x has rope_theta + rope_scaling.
  const rp = (raw.rope_parameters && typeof raw.rope_parameters === 'object' ? raw.rope_parameters : null) as Record<string, unknown> | null;
  const rs = (raw.rope_scaling && typeof raw.rope_scaling === 'object' ? raw.rope_scaling : null) as Record<string, unknown> | null;
  const ropeTheta = optNum(rp?.rope_theta) ?? optNum(raw.rope_theta) ?? 10000;
  const scaling = rs ?? rp;
  const maxPositionEmbeddings = optNum(raw.max_position_embeddings) ?? 2048;
  let ropeScaling: RopeScaling = { type: 'none', factor: 1, lowFreqFactor: 1, highFreqFactor: 1, originalMaxPosition: maxPositionEmbeddings };
  if (scaling) {
    const kind = String(scaling.rope_type ?? scaling.type ?? 'default');
    const factor = optNum(scaling.factor) ?? 1;
    if (kind === 'default') {
      // plain RoPE
    } else if (kind === 'llama3') {
      ropeScaling = {
        type: 'llama3',
        factor,
        lowFreqFactor: optNum(scaling.low_freq_factor) ?? 1,
        highFreqFactor: optNum(scaling.high_freq_factor) ?? 4,
        originalMaxPosition: optNum(scaling.original_max_position_embeddings) ?? 8192,
      };
    } else if (kind === 'linear') {
      ropeScaling = { type: 'linear', factor, lowFreqFactor: 1, highFreqFactor: 1, originalMaxPosition: maxPositionEmbeddings };
    } else {
      throw new ConfigError(`${where}: rope scaling type "${kind}" is not supported (supported: default, llama3, linear)`);
    }
  }

  // Sliding window: mistral uses `sliding_window` (null = full); qwen2 only when use_sliding_window is true.
  let slidingWindow: number | null = null;
  if (modelType === 'mistral') slidingWindow = optNum(raw.sliding_window);
  else if (modelType === 'qwen2' && raw.use_sliding_window === true) slidingWindow = optNum(raw.sliding_window);
  if (slidingWindow !== null && slidingWindow >= maxPositionEmbeddings) slidingWindow = null;

  const attentionBias = modelType === 'qwen2' ? true : raw.attention_bias === true;
  return {
    modelType,
    vocabSize,
    hiddenSize,
    intermediateSize,
    numLayers,
    numHeads,
    numKvHeads,
    headDim,
    rmsNormEps: optNum(raw.rms_norm_eps) ?? 1e-6,
    ropeTheta,
    ropeScaling,
    maxPositionEmbeddings,
    // LlamaConfig / Qwen2Config / MistralConfig default tie_word_embeddings to false
    tieWordEmbeddings: raw.tie_word_embeddings === undefined ? false : raw.tie_word_embeddings === true,
    attentionBias,
    slidingWindow,
    bosTokenId: optNum(raw.bos_token_id),
    eosTokenIds: idList(raw.eos_token_id),
    padTokenId: optNum(raw.pad_token_id),
    torchDtype: String(raw.torch_dtype ?? raw.dtype ?? 'float32'),
  };
}

/** Reads `dir/config.json` (or a path to a config file) and normalizes it. */
export function loadDecoderConfig(dir: string): DecoderConfig {
  const path = dir.endsWith('.json') ? dir : join(dir, 'config.json');
  if (!existsSync(path)) throw new ConfigError(`${path}: not found (a decoder checkpoint needs config.json)`);
  return parseDecoderConfig(readJson(path), path);
}

export interface GenerationConfig {
  temperature: number;
  topP: number;
  topK: number;
  minP: number;
  repetitionPenalty: number;
  doSample: boolean;
  eosTokenIds: number[];
  bosTokenId: number | null;
  padTokenId: number | null;
  /** null: no limit from the model (the caller's max_tokens / context length decide). */
  maxNewTokens: number | null;
}

/**
 * `generation_config.json` with defaults (transformers' GenerationConfig defaults: temperature 1, top_p 1,
 * top_k 50 only when sampling — here 0 = disabled unless the file sets it). A missing file gives the
 * defaults with eos/bos from config.json when present. `do_sample: false` in the file is reported as
 * doSample=false (callers may map it to greedy when the request does not set a temperature).
 */
export function loadGenerationConfig(dir: string): GenerationConfig {
  const path = join(dir, 'generation_config.json');
  const raw = existsSync(path) ? readJson(path) : {};
  const cfgPath = join(dir, 'config.json');
  const cfg = existsSync(cfgPath) ? readJson(cfgPath) : {};
  const eos = idList(raw.eos_token_id);
  return {
    temperature: optNum(raw.temperature) ?? 1,
    topP: optNum(raw.top_p) ?? 1,
    topK: optNum(raw.top_k) ?? 0,
    minP: optNum(raw.min_p) ?? 0,
    repetitionPenalty: optNum(raw.repetition_penalty) ?? 1,
    doSample: raw.do_sample === true,
    eosTokenIds: eos.length ? eos : idList(cfg.eos_token_id),
    bosTokenId: optNum(raw.bos_token_id) ?? optNum(cfg.bos_token_id),
    padTokenId: optNum(raw.pad_token_id) ?? optNum(cfg.pad_token_id),
    maxNewTokens: optNum(raw.max_new_tokens),
  };
}
