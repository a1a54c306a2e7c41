// Public decoder API (importable without the server):
//
//   const model = await loadDecoder('/models/SmolLM2-135M-Instruct', { dtype: 'bf16' });
//   for await (const ev of model.generate({ messages: [{ role: 'user', content: 'Hi' }], max_tokens: 64 })) {
//     if (ev.type === 'delta') process.stdout.write(ev.text);
//     else console.log(ev.finish_reason, ev.usage);
//   }
//
// generate(request) returns a GenerationStream: an async iterable of events
//   { type: 'delta', text, tokenIds, logprobs? }      one per sampled token (text may be '' while the
//                                                     detokenizer or a stop string holds bytes back);
//                                                     the first also has prompt_usage (the prompt's
//                                                     usage once processed, completion_tokens 0)
//   { type: 'final', finish_reason, text, tokenIds, usage }   exactly once, last
// with usage = { prompt_tokens, completion_tokens, cache_read_tokens, cache_write_tokens }.
// `stream.result` is a Promise of the final event (for non-streaming callers); `stream.cancel()`
// is the same as aborting `signal`. Errors (bad parameters, overloaded queue, abort) reject the
// iteration with the typed errors exported here: OverloadedError (status 529), AbortError,
// RequestTooLargeError (400), SamplingError, AdapterError, JsonSchemaError / ConstraintUnsatisfiableError
// (response_format the schema compiler rejects, or that the vocabulary cannot spell; raised before
// anything runs). An AbortError of a submitted request carries `usage` (what was processed and
// generated before the abort) and `text` (emitted so far), so callers can bill cancelled work.
// The final record's `stop_sequence` names the stop string that ended the generation (else null).
// `tools` (with messages) is passed to the chat template.
//
// Request fields: messages (chat template applied, add_generation_prompt) or prompt (raw text) or
// prompt_ids; max_tokens; temperature, top_p, top_k, min_p, seed; stop (string | string[]);
// repetition_penalty, frequency_penalty, presence_penalty; logprobs, top_logprobs;
// response_format { type: 'json_schema', json_schema: { schema } } | { type: 'json_object' };
// cache { mode: 'automatic' | 'explicit' | 'none', breakpoints?: [{ tokens, ttl? }] } (with messages,
// cache_control markers in the content become breakpoints); adapter (a name loaded with
// loadAdapter); signal (AbortSignal).
//
// finish_reason: 'stop' (EOS, stop string, or a completed JSON value) or 'length' (max_tokens or the
// context end).
import { existsSync, statSync } from 'node:fs';
import { loadDecoderConfig, loadGenerationConfig, type DecoderConfig, type GenerationConfig } from '../formats/hf-config.ts';
import { SafetensorsCheckpoint } from '../formats/safetensors.ts';
import { buildNativeDecoder, type LoadOptions, type TensorSource } from '../models/decoder/loader.ts';
import { openGgufDecoder } from '../models/decoder/gguf-source.ts';
import type { NativeDecoder } from '../models/decoder/native-model.ts';
import { Tokenizer } from '../tokenize/tokenizer.ts';
import { encodeChatAsync, type ChatMessage } from '../tokenize/chat-template.ts';
import { compileJsonSchema, ConstraintUnsatisfiableError, JsonSchemaError, type JsonConstraint } from './json-constraint.ts';
import { AdapterError, AdapterRegistry, type AdapterInfo } from './adapters.ts';
import { resolveModel } from './hub.ts';
import { KvCacheManager, type KvCacheOptions, type KvDtype, type KvDtypeOption } from './kv-cache.ts';
import { parseTtl, PrefixCache, type CacheBreakpoint, type CacheMode } from './prefix-cache.ts';
import { Sampler, SamplingError, type SamplingParams } from './sampling.ts';
import { AbortError, OverloadedError, RequestTooLargeError, Scheduler, type SchedulerOptions, type SeqStats } from './scheduler.ts';
import { StopMatcher } from './stop.ts';

export { AbortError, AdapterError, ConstraintUnsatisfiableError, JsonSchemaError, OverloadedError, RequestTooLargeError, SamplingError };

/** The model is known (pullable with `loom pull`) but not downloaded; the service answers 425 while it warms. */
export class ModelNotOnDiskError extends Error {
  override name = 'ModelNotOnDiskError';
  readonly code = 'model_not_on_disk';
  constructor(readonly id: string, readonly repo: string) {
    super(`model ${id} is not on disk; pull it with \`loom pull ${repo}\``);
  }
}

export type { ChatMessage };

export interface GenerateRequest extends SamplingParams {
  messages?: ChatMessage[];
  prompt?: string;
  prompt_ids?: number[];
  max_tokens?: number;
  stop?: string | string[];
  response_format?: { type: 'json_schema'; json_schema: { schema: unknown; name?: string } } | { type: 'json_object' } | { type: 'text' };
  cache?: { mode?: CacheMode; breakpoints?: { tokens: number; ttl?: string | number }[] };
  adapter?: string;
  signal?: AbortSignal;
  /** Also stop at the model's EOS ids (default true). */
  stop_at_eos?: boolean;
  /** Tool definitions for the chat template's `tools` variable (templates that reference it render them). */
  tools?: unknown[];
}

export interface TokenLogprob {
  token: string;
  id: number;
  logprob: number;
  bytes: number[];
  top_logprobs?: { token: string; id: number; logprob: number; bytes: number[] }[];
}

export interface GenerateDelta {
  type: 'delta';
  text: string;
  tokenIds: number[];
  logprobs?: TokenLogprob[];
  /** on the first delta only: the processed prompt's usage (completion_tokens 0), cache reads/writes included */
  prompt_usage?: Usage;
}

export interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  cache_read_tokens: number;
  cache_write_tokens: number;
}

export interface GenerateFinal {
  type: 'final';
  finish_reason: 'stop' | 'length';
  /** The stop string that ended the generation (finish_reason 'stop' by a stop string), else null. */
  stop_sequence: string | null;
  text: string;
  tokenIds: number[];
  usage: Usage;
}

export type GenerateEvent = GenerateDelta | GenerateFinal;

export interface ModelInfo {
  id: string;
  modelType: string;
  contextLength: number;
  vocabSize: number;
  hiddenSize: number;
  weightDtype: 'F32' | 'BF16';
  weightBytes: number;
  kvCacheBytes: number;
  kvBlockSize: number;
  kvBlocks: number;
  /** Storage dtype of the KV cache ('bf16' holds twice the tokens of 'f32' in the same budget). */
  kvDtype: KvDtype;
  /** Token slots in the KV cache (kvBlocks × kvBlockSize), shared by all running sequences. */
  kvCapacityTokens: number;
  /** Default prompt-caching family for this model and the minimum cacheable prefix (explicit). */
  caching: { mode: 'automatic' | 'explicit'; minTokens: number };
  hasChatTemplate: boolean;
}

export interface DecoderOptions extends LoadOptions, SchedulerOptions {
  kv?: KvCacheOptions;
  /**
   * KV-cache storage dtype: 'f32', 'bf16' (half the bytes per token; K/V rounded to bf16, fp32 math)
   * or 'auto' (bf16 when the weights are kept in bf16, else f32). Default LOOM_KV_DTYPE, else 'auto'.
   */
  kvDtype?: KvDtypeOption;
  /** Default caching family ('automatic'). */
  caching?: 'automatic' | 'explicit';
  /** Minimum cacheable prefix for explicit breakpoints (default: 1024, at most a quarter of the context). */
  minCacheTokens?: number;
  id?: string;
  /** GGUF files: folder holding the model's tokenizer.json (default: the file's folder when it has one, else the
   *  vocabulary embedded in the GGUF). */
  tokenizerDir?: string;
}

/** ttl of each cache_control marker in order of appearance (undefined = default 5 minutes). */
function markerTtls(messages: ChatMessage[]): (string | undefined)[] {
  const out: (string | undefined)[] = [];
  for (const m of messages) {
    if (Array.isArray(m.content)) for (const b of m.content) if (b && b.cache_control) out.push(b.cache_control.ttl);
    if (m.cache_control) out.push(m.cache_control.ttl);
  }
  return out;
}

/** A stream of generation events; also a Promise of the final record via `.result`. */
export class GenerationStream implements AsyncIterable<GenerateEvent> {
  private readonly queue: GenerateEvent[] = [];
  private waiter: (() => void) | null = null;
  private error: Error | null = null;
  private ended = false;
  readonly result: Promise<GenerateFinal>;
  private resolveResult!: (f: GenerateFinal) => void;
  private rejectResult!: (e: Error) => void;
  readonly controller = new AbortController();

  constructor() {
    this.result = new Promise((res, rej) => {
      this.resolveResult = res;
      this.rejectResult = rej;
    });
    this.result.catch(() => {}); // observed through iteration too
  }

  push(ev: GenerateEvent): void {
    if (this.ended) return;
    this.queue.push(ev);
    if (ev.type === 'final') {
      this.ended = true;
      this.resolveResult(ev);
    }
    this.wake();
  }

  fail(e: Error): void {
    if (this.ended) return;
    this.ended = true;
    this.error = e;
    this.rejectResult(e);
    this.wake();
  }

  cancel(): void {
    this.controller.abort();
  }

  private wake(): void {
    const w = this.waiter;
    this.waiter = null;
    w?.();
  }

  async *[Symbol.asyncIterator](): AsyncIterator<GenerateEvent> {
    try {
      for (;;) {
        if (this.queue.length) {
          const ev = this.queue.shift()!;
          yield ev;
          if (ev.type === 'final') return;
          continue;
        }
        if (this.error) throw this.error;
        if (this.ended) return;
        await new Promise<void>((r) => (this.waiter = r));
      }
    } finally {
      // a consumer that stops iterating early cancels the request
      if (!this.ended) this.cancel();
    }
  }
}

export class DecoderModel {
  readonly config: DecoderConfig;
  readonly generation: GenerationConfig;
  readonly tokenizer: Tokenizer;
  readonly native: NativeDecoder;
  readonly kv: KvCacheManager;
  readonly prefix: PrefixCache;
  readonly scheduler: Scheduler;
  readonly adapters: AdapterRegistry;
  readonly info: ModelInfo;
  private readonly eos: Set<number>;

  constructor(id: string, config: DecoderConfig, generation: GenerationConfig, tokenizer: Tokenizer, native: NativeDecoder, opts: DecoderOptions) {
    this.config = config;
    this.generation = generation;
    this.tokenizer = tokenizer;
    this.native = native;
    this.kv = new KvCacheManager(config, { ...opts.kv, dtype: opts.kvDtype ?? opts.kv?.dtype, weightDtype: native.weightDtype });
    const minTokens = opts.minCacheTokens ?? Math.max(1, Math.min(1024, Math.floor(config.maxPositionEmbeddings / 4)));
    this.prefix = new PrefixCache(this.kv, { minTokens });
    this.scheduler = new Scheduler(native, this.kv, this.prefix, opts);
    this.adapters = new AdapterRegistry(native, config);
    this.eos = new Set([...config.eosTokenIds, ...generation.eosTokenIds, ...tokenizer.eosIds]);
    this.info = {
      id,
      modelType: config.modelType,
      contextLength: config.maxPositionEmbeddings,
      vocabSize: config.vocabSize,
      hiddenSize: config.hiddenSize,
      weightDtype: native.weightDtype,
      weightBytes: native.weightBytes,
      kvCacheBytes: this.kv.bytes,
      kvBlockSize: this.kv.blockSize,
      kvBlocks: this.kv.numBlocks,
      kvDtype: this.kv.dtype,
      kvCapacityTokens: this.kv.capacityTokens,
      caching: { mode: opts.caching ?? 'automatic', minTokens },
      hasChatTemplate: !!tokenizer.chatTemplate,
    };
  }

  private readonly schemas = new Map<string, JsonConstraint>();
  /** Compiled JSON-schema constraints, cached per schema (compiling walks the vocabulary). */
  private compiledSchema(schema: unknown): JsonConstraint {
    if (!schema || typeof schema !== 'object') throw new TypeError('response_format.json_schema.schema must be an object');
    const key = JSON.stringify(schema);
    let c = this.schemas.get(key);
    if (!c) {
      c = compileJsonSchema(schema, this.tokenizer);
      if (this.schemas.size >= 64) this.schemas.delete(this.schemas.keys().next().value as string);
      this.schemas.set(key, c);
    }
    return c;
  }

  loadAdapter(name: string, dir: string): AdapterInfo {
    return this.adapters.load(name, dir);
  }

  unloadAdapter(name: string): boolean {
    return this.adapters.unload(name);
  }

  /** Tokenizes a request's prompt; returns ids and explicit cache breakpoints (token counts). */
  async preparePrompt(req: GenerateRequest): Promise<{ ids: number[]; breakpoints: CacheBreakpoint[] }> {
    const bps: CacheBreakpoint[] = (req.cache?.breakpoints ?? []).map((b) => ({ tokens: b.tokens, ttlMs: parseTtl(b.ttl) }));
    if (req.prompt_ids) {
      for (const t of req.prompt_ids) if (!Number.isInteger(t) || t < 0 || t >= this.config.vocabSize) throw new RangeError(`prompt_ids: token id ${t} is out of range`);
      return { ids: [...req.prompt_ids], breakpoints: bps };
    }
    if (typeof req.prompt === 'string') return { ids: await this.tokenizer.encodeAsync(req.prompt), breakpoints: bps };
    if (Array.isArray(req.messages)) {
      const tools = Array.isArray(req.tools) && req.tools.length ? req.tools : undefined;
      const r = await encodeChatAsync(this.tokenizer, req.messages, { addGenerationPrompt: true, tools });
      const ttls = markerTtls(req.messages);
      r.breakpointTokens.forEach((n, i) => bps.push({ tokens: n, ttlMs: parseTtl(ttls[i]) }));
      return { ids: r.ids, breakpoints: bps };
    }
    throw new TypeError('generate: one of messages, prompt or prompt_ids is required');
  }

  /** Starts a generation; see the top of this file for the event shapes. */
  generate(req: GenerateRequest): GenerationStream {
    const stream = new GenerationStream();
    this.start(req, stream).catch((e) => stream.fail(e as Error));
    return stream;
  }

  private async start(req: GenerateRequest, stream: GenerationStream): Promise<void> {
    const V = this.config.vocabSize;
    const sampler = new Sampler(req, V); // validates sampling parameters
    const { ids, breakpoints } = await this.preparePrompt(req);
    sampler.setPrompt(ids);
    const maxTokens = req.max_tokens ?? this.generation.maxNewTokens ?? this.config.maxPositionEmbeddings - ids.length;
    if (!Number.isInteger(maxTokens) || maxTokens < 1) throw new RangeError(`max_tokens must be a positive integer (got ${maxTokens})`);
    let adapterId = -1;
    if (req.adapter) {
      const a = this.adapters.get(req.adapter);
      if (!a) throw new AdapterError(`adapter "${req.adapter}" is not loaded`);
      adapterId = a.id;
    }
    const rf = req.response_format;
    const constraint = rf && rf.type !== 'text' ? this.compiledSchema(rf.type === 'json_schema' ? rf.json_schema.schema : { type: 'object' }).start() : null;
    const stops = req.stop === undefined ? [] : Array.isArray(req.stop) ? req.stop : [req.stop];
    const stopper = new StopMatcher(stops);
    const detok = this.tokenizer.createStreamDecoder();
    const stopAtEos = req.stop_at_eos !== false;
    const history: number[] = [];
    let text = '';
    let finish: 'stop' | 'length' = 'length';
    let stopSequence: string | null = null;
    const wantLogprobs = req.logprobs === true;

    const signal = req.signal ? AbortSignal.any([req.signal, stream.controller.signal]) : stream.controller.signal;
    const mode: CacheMode = req.cache?.mode ?? (breakpoints.length ? 'explicit' : this.info.caching.mode === 'automatic' ? 'automatic' : 'none');
    const tokenStr = (id: number) => this.tokenizer.idToToken(id) ?? '';
    let promptUsage: Usage | undefined;
    const emitText = (s: string, tokenIds: number[], lp?: TokenLogprob[]): void => {
      if (!s && !tokenIds.length) return;
      text += s;
      const pu = promptUsage ? { prompt_usage: promptUsage } : {};
      promptUsage = undefined;
      stream.push({ type: 'delta', text: s, tokenIds, ...(lp ? { logprobs: lp } : {}), ...pu });
    };

    this.scheduler.submit({
      prompt: ids,
      maxTokens,
      adapter: adapterId,
      cache: { mode, breakpoints },
      signal,
      handler: {
        next: (logits, prompt, argmax) => {
          if (prompt) {
            promptUsage = {
              prompt_tokens: prompt.promptTokens, completion_tokens: 0,
              cache_read_tokens: prompt.cacheReadTokens, cache_write_tokens: prompt.cacheWriteTokens,
            };
          }
          const r = sampler.sample(logits, history, constraint ? constraint.allowed() : null, argmax);
          const tok = r.token;
          history.push(tok);
          if ((stopAtEos || constraint) && this.eos.has(tok)) {
            finish = 'stop';
            return null;
          }
          let lp: TokenLogprob[] | undefined;
          if (wantLogprobs) {
            lp = [{
              token: tokenStr(tok), id: tok, logprob: r.logprob, bytes: [...this.tokenizer.tokenBytes(tok)],
              top_logprobs: (r.top ?? []).map((t) => ({ token: tokenStr(t.token), id: t.token, logprob: t.logprob, bytes: [...this.tokenizer.tokenBytes(t.token)] })),
            }];
          }
          let delta = detok.push(tok);
          if (constraint) constraint.advance(tok);
          const finalPiece = constraint?.done === true;
          if (finalPiece) delta += detok.flush();
          const s = stopper.push(delta);
          emitText(s.emit, [tok], lp);
          if (s.stopped || finalPiece) {
            finish = 'stop';
            if (s.stopped) stopSequence = s.match ?? null;
            return null;
          }
          return tok;
        },
        done: (st: SeqStats) => {
          if (finish === 'length') {
            const rest = stopper.push(detok.flush());
            if (rest.emit) emitText(rest.emit, []);
            const tail = stopper.flush();
            if (tail) emitText(tail, []);
          }
          stream.push({
            type: 'final',
            finish_reason: finish,
            stop_sequence: stopSequence,
            text,
            tokenIds: history,
            usage: { prompt_tokens: st.promptTokens, completion_tokens: history.length, cache_read_tokens: st.cacheReadTokens, cache_write_tokens: st.cacheWriteTokens },
          });
        },
        fail: (e) => {
          // an aborted request still reports what it processed (for billing): usage and the text so far
          if (e instanceof AbortError) {
            const st = (e as AbortError & { stats?: SeqStats }).stats;
            Object.assign(e, {
              text,
              usage: {
                prompt_tokens: st ? st.promptTokens : 0,
                completion_tokens: history.length,
                cache_read_tokens: st?.cacheReadTokens ?? 0,
                cache_write_tokens: st?.cacheWriteTokens ?? 0,
              } satisfies Usage,
            });
          }
          stream.fail(e);
        },
      },
    });
  }

  /** Ends every queued and running request (AbortError), drops cached prefixes and releases the native weights and KV
   * cache now (a step in flight keeps them until it ends): an unloaded model's memory does not wait for a garbage
   * collection, which V8, unaware of it, may not run for a long time. The model is unusable after. */
  close(): void {
    this.scheduler.close();
    this.prefix.clear();
    this.kv.native.free();
    this.native.free();
  }

  /** Mean-pooled final hidden states (after the final norm), one vector per text. */
  async embed(texts: string[]): Promise<Float32Array[]> {
    const out: Float32Array[] = [];
    for (const t of texts) out.push(await this.embedIds(await this.tokenizer.encodeAsync(t)));
    return out;
  }

  /**
   * Mean-pooled final hidden states of one token sequence. The sequence needs KV blocks for its
   * whole length while it runs: when the cache is busy with generation it waits for blocks (steps
   * keep running and free them), up to `opts.waitMs` (default 60 s), then fails with OverloadedError.
   */
  async embedIds(ids: readonly number[], opts: { waitMs?: number; signal?: AbortSignal } = {}): Promise<Float32Array> {
    if (!ids.length) throw new RangeError('embed: empty input');
    if (ids.length > this.config.maxPositionEmbeddings) throw new RequestTooLargeError(`input has ${ids.length} tokens; the model's context is ${this.config.maxPositionEmbeddings}`);
    const need = this.kv.blocksFor(ids.length);
    if (need > this.kv.numBlocks) throw new RequestTooLargeError(`input of ${ids.length} tokens does not fit the KV cache (${this.kv.numBlocks * this.kv.blockSize} tokens; raise LOOM_KV_MEMORY)`);
    const deadline = Date.now() + (opts.waitMs ?? 60_000);
    for (;;) {
      const v = await this.scheduler.runExclusive(async () => {
        const blocks = this.kv.allocate(need);
        return blocks ? this.embedWithBlocks(ids, blocks) : null;
      });
      if (v) return v;
      if (opts.signal?.aborted) throw new AbortError('request aborted');
      if (Date.now() >= deadline) throw new OverloadedError('KV cache is full; retry later');
      await this.scheduler.progress();
    }
  }

  private async embedWithBlocks(ids: readonly number[], blocks: number[]): Promise<Float32Array> {
    const D = this.config.hiddenSize;
    try {
      const sum = new Float64Array(D);
      const chunk = this.scheduler.maxStepTokens;
      const buf = new Float32Array(Math.min(chunk, ids.length) * D);
      for (let s = 0; s < ids.length; s += chunk) {
        const n = Math.min(chunk, ids.length - s);
        const pos = Int32Array.from({ length: n }, (_, i) => s + i);
        await this.native.step(this.kv.native, {
          tokens: Int32Array.from(ids.slice(s, s + n)), positions: pos, seqLens: Int32Array.of(n),
          tables: Int32Array.from(blocks), tableOffsets: Int32Array.of(0, blocks.length),
          outRows: Int32Array.from({ length: n }, (_, i) => i), hidden: true,
        }, buf);
        for (let i = 0; i < n * D; i++) sum[i % D] += buf[i];
      }
      const v = new Float32Array(D);
      for (let i = 0; i < D; i++) v[i] = sum[i] / ids.length;
      return v;
    } finally {
      this.kv.releaseAll(blocks);
    }
  }
}

/**
 * Loads a decoder from a Hugging Face checkpoint directory (config.json, tokenizer.json,
 * *.safetensors) or a GGUF file.
 */
export async function loadDecoder(dirOrGguf: string, opts: DecoderOptions = {}): Promise<DecoderModel> {
  if (!existsSync(dirOrGguf)) {
    // a model id: LOOM_MODELS_DIR, the Hugging Face cache, or known-but-not-downloaded
    const r = resolveModel(dirOrGguf);
    if (r.status === 'local') return loadDecoder(r.dir, { id: dirOrGguf, ...opts });
    if (r.status === 'pullable') throw new ModelNotOnDiskError(dirOrGguf, r.repo);
    throw new Error(`${dirOrGguf}: not found (no such path and not a known model id)`);
  }
  if (dirOrGguf.endsWith('.gguf') && statSync(dirOrGguf).isFile()) {
    const r = await openGgufDecoder(dirOrGguf, { tokenizerDir: opts.tokenizerDir });
    const native = await buildNativeDecoder(r.config, r.source, opts);
    return new DecoderModel(opts.id ?? dirOrGguf, r.config, r.generation, r.tokenizer, native, opts);
  }
  const config = loadDecoderConfig(dirOrGguf);
  const generation = loadGenerationConfig(dirOrGguf);
  const tokenizer = await Tokenizer.fromDir(dirOrGguf);
  const source = SafetensorsCheckpoint.open(dirOrGguf);
  const native = await buildNativeDecoder(config, source as unknown as TensorSource, opts);
  return new DecoderModel(opts.id ?? dirOrGguf, config, generation, tokenizer, native, opts);
}
