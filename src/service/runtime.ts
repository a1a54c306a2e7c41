// The seam between the services and the model runtimes. Services depend only on this interface;
// src/service/runtime-local.ts implements it over the native encoder (src/models/encoder) and
// decoder (src/runtime/generate.ts, src/runtime/hub.ts) modules. Tests may pass their own
// implementation to createServices.

export type ModelKind = 'encoder' | 'decoder';

/** What to run: a base model id, or a trained model (job output) on top of a base model. */
export interface ModelRef {
  /** catalog id (base model) or training job id */
  id: string;
  kind: ModelKind;
  /** trained models: directory with the full weights or the adapter */
  dir?: string;
  /** trained LoRA adapters: the base model id they apply to */
  base_model?: string;
  /** 'adapter' when `dir` holds a PEFT adapter, 'full' for a complete checkpoint */
  weights?: 'adapter' | 'full';
  /** trained adapters: the base model's directory when it is not a model of the models dir */
  base_dir?: string;
}

/**
 * How a training job's model is served. A finished job stores its `model_ref` (the training
 * service decides: encoders are served from full weights, LoRA included (merged); decoders apply
 * their PEFT adapter on the base); older records fall back to the training type.
 */
export function jobModelRef(job: { id: string; task_type: ModelKind; output_dir: string | null; base_model: string; training_type: string; model_ref?: unknown }): ModelRef {
  if (job.model_ref && typeof job.model_ref === 'object') return { ...(job.model_ref as ModelRef), id: job.id };
  return { id: job.id, kind: job.task_type, dir: job.output_dir ?? undefined, base_model: job.base_model, weights: job.training_type === 'lora' ? 'adapter' : 'full' };
}

export type ModelStatus =
  | { state: 'ready' }
  /** pulling or loading; `progress` 0..1 when known */
  | { state: 'warming'; retry_after_s: number; progress?: number }
  /** not on disk but can be pulled on demand (warm() starts the pull) */
  | { state: 'pullable' }
  | { state: 'not_found' }
  /** the runtime or the model source is down (503) */
  | { state: 'unavailable'; reason: string };

export interface ModelMemory {
  id: string;
  weight_bytes: number;
  kv_bytes: number;
  /** decoder bases: the LoRA adapters (job ids) loaded into it, their bytes, and how many calls hold each now */
  adapter_bytes?: number;
  adapters?: { id: string; bytes: number; in_use: number }[];
  /** decoders: batched forward steps run so far (sequences running together share each step) */
  steps?: number;
}

/** A live inference node as an API process routing to it sees it (src/service/nodes/runtime-remote.ts). */
export interface NodeStats { id: string; queue_depth: number; max_queue: number; loaded: string[] }

export interface LocalModel {
  id: string;
  kind: ModelKind;
  dir: string;
  /** config.json model_type / architecture, for display */
  architecture?: string;
  context_length?: number;
  size_bytes?: number;
}

/** Encoder schema, normalized: the four GLiNER2 task families. */
export interface EncoderSchema {
  entities?: Array<{ name: string; description?: string }>;
  classifications?: Array<{ task: string; labels: string[]; multi_label?: boolean; cls_threshold?: number }>;
  structures?: Record<string, unknown>;
  relations?: Array<string | { name: string; description?: string; [k: string]: unknown }>;
}

export interface ExtractOptions {
  threshold: number;
  include_confidence: boolean;
  include_spans: boolean;
  signal?: AbortSignal;
}

export interface ExtractOutput {
  /** one result object per input text (GLiNER2 JSON result format) */
  results: Record<string, unknown>[];
  /** tokens the encoder consumed, over all texts */
  input_tokens: number;
}

export interface GenerateMessage {
  role: 'system' | 'user' | 'assistant' | 'developer' | 'tool';
  content: string | Array<{ type: 'text'; text: string; cache_control?: { type: 'ephemeral'; ttl?: string } }>;
}

export interface GenerateParams {
  messages?: GenerateMessage[];
  /** raw prompt (no chat template), e.g. /v1/completions */
  prompt?: string;
  max_tokens?: number;
  temperature?: number;
  top_p?: number;
  top_k?: number;
  seed?: number;
  stop?: string[];
  signal?: AbortSignal;
  /** extra runtime options (response_format, logprobs, tools...), passed through */
  [extra: string]: unknown;
}

export interface GenerateUsage {
  prompt_tokens: number;
  cache_read_tokens: number;
  cache_write_tokens: number;
  completion_tokens: number;
}

export interface GenerateLogprob {
  token: string;
  logprob: number;
  bytes?: number[];
  top_logprobs?: { token: string; logprob: number; bytes?: number[] }[];
}

/**
 * A generation's events: an optional `start` once the prompt is processed (its input usage, with
 * completion_tokens 0; the messages-style stream reports it in `message_start`), deltas, then
 * exactly one `done`. finish_reason is 'stop' | 'length' |
 * 'cancelled' (the signal was aborted after the model started: usage is what was processed and
 * generated up to then, so it can be billed); `stop_sequence` names the stop string that ended it.
 */
export type GenerateEvent =
  | { type: 'start'; usage: GenerateUsage }
  | { type: 'delta'; text: string; logprobs?: GenerateLogprob[] }
  | { type: 'done'; finish_reason: string; usage: GenerateUsage; text: string; stop_sequence?: string | null };

export interface EmbedOutput { embeddings: number[][]; input_tokens: number; dimensions: number }

export interface ModelRuntime {
  /** models present on disk (the catalog merges them with the curated list) */
  listLocal(): Promise<LocalModel[]>;
  /** cheap, synchronous status of a model */
  status(ref: ModelRef): ModelStatus;
  /** start pulling/loading (idempotent); resolves when the model is ready */
  warm(ref: ModelRef): Promise<void>;
  /** encoder extraction over one or more texts */
  extract(ref: ModelRef, texts: string[], schema: EncoderSchema, opts: ExtractOptions): Promise<ExtractOutput>;
  /** decoder generation: a stream of deltas ending with exactly one `done` event */
  generate(ref: ModelRef, params: GenerateParams): AsyncIterable<GenerateEvent>;
  /** does the decoder's chat template render a `tools` variable itself? (absent: no) */
  templateSupportsTools?(ref: ModelRef): Promise<boolean>;
  /**
   * Tokens of a prompt exactly as `generate` would see it (decoder: chat template and tools
   * applied, or the raw `prompt`; encoder: `prompt` as one text). Absent: counting is unavailable.
   */
  countTokens?(ref: ModelRef, params: GenerateParams): Promise<number>;
  /**
   * Forget a trained model whose job was deleted or undeployed: its adapter (or full weights) is unloaded now, or
   * once the calls running on it are done. A later call loads it again. Absent: nothing is kept per job.
   */
  unload?(ref: ModelRef): void;
  /** mean-pooled embeddings */
  embed(ref: ModelRef, texts: string[], opts?: { dimensions?: number }): Promise<EmbedOutput>;
  /** queue depth and loaded models, for /metrics and /health */
  /** `memory`: per loaded model (a base: LoRA jobs run on their base), its resident weight bytes (as kept:
   * block-quantized GGUF weights count their blocks), its KV cache bytes (0 for encoders) and its adapters. */
  stats(): { loaded: string[]; warming: string[]; queue_depth: number; memory?: ModelMemory[]; nodes?: NodeStats[] };
  close(): Promise<void>;
}

/** Run a generation to completion (non-streaming callers). */
export async function generateAll(rt: ModelRuntime, ref: ModelRef, params: GenerateParams): Promise<Extract<GenerateEvent, { type: 'done' }>> {
  for await (const ev of rt.generate(ref, params)) if (ev.type === 'done') return ev;
  throw new Error('runtime ended a generation without a done event');
}
