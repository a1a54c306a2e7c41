// The one internal request every compatibility endpoint normalizes into, and the pieces of a
// finished generation the response builders consume. Nothing here knows about HTTP.

export type CompatEndpoint = 'chat' | 'completions' | 'responses' | 'messages';

/** `cache_control` marker: everything up to and including the marked block is the cached prefix. */
export interface CacheControl {
  type: 'ephemeral';
  /** '5m' (default) or '1h'; other `<n>s|m|h` values are accepted and clamped by the cache. */
  ttl?: string;
}

export interface TextBlock {
  type: 'text';
  text: string;
  /** present only where the endpoint honours markers, and only on the first 4 markers */
  cache_control?: CacheControl;
}

export interface ToolCall {
  id: string;
  name: string;
  /** JSON text of the arguments object */
  arguments: string;
}

export interface ChatMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: TextBlock[];
  tool_calls?: ToolCall[];
  /** role 'tool': the call this message answers */
  tool_call_id?: string;
  name?: string;
}

export interface ToolDef {
  name: string;
  description?: string;
  /** JSON schema of the arguments object */
  parameters: Record<string, unknown>;
  cache_control?: CacheControl;
}

export type ToolChoice = 'auto' | 'none' | 'required' | { name: string };

export type ResponseFormat =
  | { type: 'text' }
  | { type: 'json_object' }
  | { type: 'json_schema'; name?: string; schema: Record<string, unknown>; strict?: boolean };

export interface SamplingParams {
  max_tokens?: number;
  temperature?: number;
  top_p?: number;
  top_k?: number;
  seed?: number;
  stop: string[];
  presence_penalty?: number;
  frequency_penalty?: number;
  repetition_penalty?: number;
  logprobs: boolean;
  top_logprobs?: number;
  response_format?: ResponseFormat;
}

/** An encoder task routed through a generation endpoint by the `schema` extension. */
export interface ExtractTask {
  text: string;
  schema: unknown;
  threshold?: number;
}

export interface CompatRequest {
  endpoint: CompatEndpoint;
  model: string;
  /** 'extract' when a top-level `schema` was given: the encoder answers, result as JSON text */
  task: 'generate' | 'extract';
  stream: boolean;
  /** chat/completions: stream_options.include_usage */
  include_usage: boolean;
  /** number of choices (chat/completions); 1 elsewhere */
  n: number;
  /** chat-style endpoints; absent for /v1/completions */
  messages?: ChatMessage[];
  /** /v1/completions */
  prompt?: string;
  /** /v1/completions echo */
  echo?: boolean;
  /** /v1/completions suffix is not supported by decoder-only models and is rejected */
  tools?: ToolDef[];
  tool_choice?: ToolChoice;
  parallel_tool_calls?: boolean;
  params: SamplingParams;
  extract?: ExtractTask;
  /** number of cache markers applied (<= 4) and how many were dropped beyond the limit */
  cache_markers: { applied: number; dropped: number };
  user?: string;
  /** /v1/responses: echoed back on the response object */
  instructions?: string | null;
  metadata?: Record<string, string>;
}

/** Token usage as the runtime reports it (spec section 2: the four are disjoint). */
export interface Usage {
  /** non-cached input */
  prompt_tokens: number;
  completion_tokens: number;
  cache_read_tokens: number;
  cache_write_tokens: number;
}

export type FinishReason = 'stop' | 'length' | 'tool_calls' | 'content_filter' | 'cancelled';

export interface TokenLogprob {
  token: string;
  logprob: number;
  bytes?: number[];
  top_logprobs?: Array<{ token: string; logprob: number; bytes?: number[] }>;
}

/** One finished choice, as the response builders take it. */
export interface ChoiceResult {
  index: number;
  text: string;
  finish_reason: FinishReason;
  /** the stop sequence that ended generation, when one did */
  stop_sequence?: string | null;
  tool_calls?: ToolCall[];
  logprobs?: TokenLogprob[];
}

export interface ServiceExtension {
  inference_id: string;
  routed_model: string;
}
