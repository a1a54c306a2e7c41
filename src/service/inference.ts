// Native inference (POST /inference, POST /projects/:id/inference) and the generic call life cycle
// other endpoints reuse: `begin` resolves the model (404/409/425/451/503) and holds an upper bound
// of the call's cost against the balance (402/403, see billing.ts); `call.finish` writes the
// inference record, the usage record and the debit in ONE transaction and releases the hold;
// `call.fail` records a failed call (billed only for the work it did) and releases the hold.
import { performance } from 'node:perf_hooks';
import type { InferenceRecord, Store, TokenUsage, TrainingJobRecord, Tx } from '../store/index.ts';
import type { ServiceConfig } from './config.ts';
import type { Principal } from './auth.ts';
import {
  type BillingService, type CachingFamily, type Pricing, completeUsage, costMicro, holdMicro, MICRO,
} from './billing.ts';
import type { Catalog, CatalogEntry } from './catalog.ts';
import { ROUTER_MODEL_ID } from './router.ts';
import {
  ConflictError, DependencyUnavailableError, NotFoundError, overloadedAsUnavailable, RegionBlockedError, ValidationError,
  WarmingError,
} from './errors.ts';
import { newId, nowIso } from './ids.ts';
import { type EncoderSchema, type GenerateMessage, type ModelKind, type ModelRef, type ModelRuntime, generateAll, jobModelRef } from './runtime.ts';
import type { Metrics } from './metrics.ts';
import { checkSchemaLimits } from '../models/encoder/schema.ts';

/** Chooses the model behind `service/auto` (createServices installs src/service/router.ts's policy). */
export type RoutePolicy = (kind: ModelKind, hints: { schema?: unknown; messages?: unknown[]; prompt_chars?: number }, catalog: CatalogEntry[]) => string | null;

/** Default policy: the first local model of the kind that supports inference, else the cheapest on-demand one. */
export const defaultRoutePolicy: RoutePolicy = (kind, _hints, entries) => {
  const ok = entries.filter((e) => e.task_type === kind && e.supports_inference);
  const local = ok.filter((e) => e.local);
  const pick = (l: CatalogEntry[]) => l.sort((a, b) => a.pricing.input - b.pricing.input || a.id.localeCompare(b.id))[0];
  return (pick(local) ?? pick(ok.filter((e) => e.supports_on_demand_inference)))?.id ?? null;
};

export interface ResolvedModel {
  ref: ModelRef;
  /** what the caller asked for */
  model_id: string;
  /** what answers (router target or the asked id) */
  routed_model: string;
  training_job_id: string | null;
  pricing: Pricing;
  caching_family: CachingFamily;
  via_router: boolean;
  /** tokens of context (prompt + output) of a decoder, when known */
  context_length: number | null;
}

export interface FinishInput {
  task: string;
  input: InferenceRecord['input'];
  schema?: unknown;
  params?: Record<string, unknown>;
  output: unknown;
  usage: Partial<TokenUsage>;
  /** false: keep the record's metadata only (store: false) */
  store?: boolean;
}

export interface Call {
  model: ResolvedModel;
  inference_id: string;
  started_at: number;
  finish(f: FinishInput): Promise<{ inference_id: string; usage: TokenUsage; cost: number; latency_ms: number }>;
  /** a failed or cancelled call; `usage` (what the model processed before it stopped, e.g. a client disconnect) is billed */
  fail(f: Omit<FinishInput, 'output' | 'usage'> & { output?: unknown }, err: unknown, usage?: Partial<TokenUsage>): Promise<void>;
}

export interface EncoderRequest {
  model_id: string;
  text: string | string[];
  schema?: unknown;
  threshold?: number;
  include_confidence?: boolean;
  include_spans?: boolean;
  store?: boolean;
  project_id?: string;
  task?: string;
}

export interface DecoderRequest {
  model_id: string;
  task?: 'generate';
  messages: GenerateMessage[];
  max_tokens?: number;
  temperature?: number;
  top_p?: number;
  top_k?: number;
  seed?: number;
  stop?: string | string[];
  store?: boolean;
  project_id?: string;
}

/** Normalizes the encoder `schema` forms of the spec into the runtime's EncoderSchema. */
export function normalizeSchema(schema: unknown): EncoderSchema {
  if (schema === undefined || schema === null) return {};
  if (Array.isArray(schema)) return { entities: schema.map((s) => ({ name: String(s) })) };
  const s = schema as Record<string, unknown>;
  const out: EncoderSchema = {};
  if (s.entities !== undefined) {
    const e = s.entities;
    if (Array.isArray(e)) out.entities = e.map((x) => (typeof x === 'string' ? { name: x } : { name: (x as { name: string }).name, description: (x as { description?: string }).description }));
    else out.entities = Object.entries(e as Record<string, string>).map(([name, description]) => ({ name, description: typeof description === 'string' ? description : undefined }));
  }
  if (s.classifications !== undefined) out.classifications = s.classifications as EncoderSchema['classifications'];
  if (s.structures !== undefined) out.structures = s.structures as Record<string, unknown>;
  if (s.relations !== undefined) out.relations = s.relations as EncoderSchema['relations'];
  return out;
}

/** The history `task` of an encoder request: ner | classification | structure | relations | extraction. */
export function encoderTask(s: EncoderSchema): string {
  const kinds = [s.entities?.length ? 'ner' : null, s.classifications?.length ? 'classification' : null, s.structures && Object.keys(s.structures).length ? 'structure' : null, s.relations?.length ? 'relations' : null].filter(Boolean) as string[];
  return kinds.length === 1 ? kinds[0] : 'extraction';
}

/** An input over the encoder's request limits (ENCODER_LIMITS) → 422 naming the path and the limit. */
function limitError(err: unknown): ValidationError | null {
  const e = err as { name?: string; message: string; path?: string; limit?: string } | null;
  if (e?.name !== 'InputLimitError') return null;
  return new ValidationError(e.message, [{ path: e.path ?? '', message: e.message, keyword: e.limit }]);
}

/** Tokens a model adds around the caller's input (special tokens, chat template, per message). */
const TEMPLATE_TOKENS = 64;
const MESSAGE_TOKENS = 8;
/** Output bound of a decoder call with neither max_tokens nor a known context length. */
const OUTPUT_FALLBACK_TOKENS = 32_768;

/** What bounds a call's usage before it runs: the caller's input size and max_tokens. */
export interface UsageBound {
  /** UTF-16 length of the input (texts, messages, prompt); default: the route hints' */
  chars?: number;
  max_tokens?: number;
  /** generations run (each billed its prompt and up to max_tokens); default the route hints' `n`, else 1 */
  n?: number;
}

/**
 * Upper bound of a call's tokens, held as credit while it runs: a token covers at least one UTF-8
 * byte of the input and a UTF-16 unit is at most 3 bytes; a schema counts with its JSON; a decoder
 * writes at most max_tokens, and prompt and output each fit its context when that is known.
 */
export function usageBound(
  model: ResolvedModel, kind: ModelKind,
  hints: { schema?: unknown; messages?: unknown[]; prompt_chars?: number; max_tokens?: number; n?: number },
  bound: UsageBound = {},
): { input: number; output: number } {
  const messages = hints.messages ?? [];
  const schemaChars = hints.schema === undefined ? 0 : JSON.stringify(hints.schema)?.length ?? 0;
  const chars = (bound.chars ?? hints.prompt_chars ?? JSON.stringify(messages).length) + schemaChars;
  let input = 3 * chars + TEMPLATE_TOKENS + MESSAGE_TOKENS * messages.length;
  if (kind === 'encoder') return { input, output: 0 };
  const ctx = model.context_length;
  let output = bound.max_tokens ?? hints.max_tokens ?? ctx ?? OUTPUT_FALLBACK_TOKENS;
  if (ctx) { input = Math.min(input, ctx); output = Math.min(output, ctx); }
  // n completions are n generations, each billed its prompt and its output
  const n = Math.max(1, bound.n ?? hints.n ?? 1);
  return { input: input * n, output: output * n };
}

/**
 * Observers of stored inference records (the LLM judge's sampling, src/service/judge/): `inTx` runs
 * inside the transaction that writes a successful call's record (its writes commit with it; a throw
 * there is logged and never affects the inference), `after` once that transaction committed.
 */
export interface StoredHooks {
  inTx?(t: Tx, rec: InferenceRecord): void | Promise<void>;
  after?(rec: InferenceRecord): void;
}

export function createInferenceService(deps: { store: Store; config: ServiceConfig; billing: BillingService; catalog: Catalog; runtime: ModelRuntime; metrics?: Metrics; log?: { warn(o: object, m: string): void } }) {
  const { store, billing, catalog, runtime, config } = deps;
  let routePolicy: RoutePolicy = defaultRoutePolicy;
  let hooks: StoredHooks = {};
  const observe = async (t: Tx, rec: InferenceRecord) => {
    try {
      await hooks.inTx?.(t, rec);
    } catch (err) {
      deps.log?.warn({ inference: rec.id, err: String(err) }, 'stored-inference hook failed');
    }
  };

  function checkRuntime(ref: ModelRef, entry: CatalogEntry | null): void {
    const st = runtime.status(ref);
    switch (st.state) {
      case 'ready': return;
      case 'warming': throw new WarmingError(`Model ${ref.id} is warming up${st.progress !== undefined ? ` (${Math.round(st.progress * 100)}%)` : ''}; retry later`, st.retry_after_s);
      case 'pullable':
        if (entry && !entry.supports_on_demand_inference) throw new NotFoundError(`Model ${ref.id} is not available on this server`);
        runtime.warm(ref).catch((err) => deps.log?.warn({ model: ref.id, err: String(err) }, 'model warm-up failed'));
        throw new WarmingError(`Model ${ref.id} is being pulled and loaded on demand; retry later`, config.warmingRetryAfterS);
      case 'not_found': throw new NotFoundError(`Model ${ref.id} not found`);
      case 'unavailable': throw new DependencyUnavailableError(`Model runtime unavailable: ${st.reason}`, config.warmingRetryAfterS);
    }
  }

  async function resolveJob(p: Principal, job: TrainingJobRecord, kind: ModelKind): Promise<ResolvedModel> {
    if (job.status !== 'complete' && job.status !== 'deployed') throw new ConflictError(`Training job ${job.id} is ${job.status}; only complete jobs can serve inference`);
    if (job.task_type !== kind) throw new ValidationError(`Model ${job.id} is a ${job.task_type} model`, [{ path: kind === 'decoder' ? '/messages' : '/text', message: `model ${job.id} is a ${job.task_type}` }]);
    const base = await catalog.get(job.base_model);
    if (base && p.team.region && base.blocked_regions.includes(p.team.region)) throw new RegionBlockedError(`Model ${job.base_model} is not available in region ${p.team.region}`);
    const ref: ModelRef = jobModelRef(job);
    checkRuntime(ref, null);
    return {
      ref, model_id: job.id, routed_model: job.id, training_job_id: job.id, via_router: false,
      pricing: base?.pricing ?? { input: 1, output: 2 }, caching_family: base?.caching_family ?? 'none',
      context_length: base?.context_length ?? null,
    };
  }

  async function resolve(p: Principal, modelId: string, kind: ModelKind, hints: Parameters<RoutePolicy>[1]): Promise<ResolvedModel> {
    const viaRouter = modelId === ROUTER_MODEL_ID;
    let target = modelId;
    if (viaRouter) {
      const routed = routePolicy(kind, hints, await catalog.list({ supports_inference: true }));
      if (!routed) throw new DependencyUnavailableError(`No ${kind} model is available to the router`);
      target = routed;
    } else {
      const job = await store.trainingJobs.get(modelId);
      if (job && job.team_id === p.team_id) return resolveJob(p, job, kind);
    }
    const entry = await catalog.get(target);
    if (!entry) throw new NotFoundError(`Model ${target} not found`);
    if (p.team.region && entry.blocked_regions.includes(p.team.region)) throw new RegionBlockedError(`Model ${target} is not available in region ${p.team.region}`);
    if (!entry.supports_inference) throw new ConflictError(`Model ${target} is a training-only base model; train from it and call the trained model`);
    if (entry.task_type !== kind) {
      throw new ValidationError(`Model ${target} is a ${entry.task_type} model`, [{ path: kind === 'decoder' ? '/messages' : '/text', message: entry.task_type === 'decoder' ? 'decoder models take `messages`' : 'encoder models take `text` and `schema`' }]);
    }
    const ref: ModelRef = { id: target, kind };
    checkRuntime(ref, entry);
    return {
      ref, model_id: modelId, routed_model: target, training_job_id: null, pricing: entry.pricing,
      caching_family: entry.caching_family, via_router: viaRouter, context_length: entry.context_length,
    };
  }

  /** Resolve + hold credit: the start of every billed call. `bound` sizes the hold (else the hints). */
  async function begin(p: Principal, opts: {
    endpoint: string; model_id: string; kind: ModelKind; project_id?: string | null;
    hints?: Parameters<RoutePolicy>[1]; bound?: UsageBound;
  }): Promise<Call> {
    const started = performance.now();
    const model = await resolve(p, opts.model_id, opts.kind, opts.hints ?? {});
    const est = usageBound(model, opts.kind, opts.hints ?? {}, opts.bound);
    const estimate_micro = holdMicro(model.pricing, model.caching_family, est.input, est.output);
    const hold = await billing.reserve(p, { viaRouter: model.via_router, estimate_micro });
    const inference_id = newId();
    const project_id = opts.project_id ?? null;
    const record = (f: Omit<FinishInput, 'output' | 'usage'> & { output: unknown; usage: TokenUsage; cost: number; latency_ms: number; status: 'success' | 'error'; error: string | null }): InferenceRecord => {
      const keep = f.store !== false;
      return {
        id: inference_id, team_id: p.team_id, key_id: p.key_id, project_id, model_id: model.model_id, routed_model: model.routed_model,
        training_job_id: model.training_job_id, endpoint: opts.endpoint, type: opts.kind, task: f.task, stored_content: keep,
        input: keep ? f.input : null, schema: keep ? (f.schema ?? null) : null, params: f.params ?? {}, output: keep ? f.output : null,
        usage: f.usage, cost: f.cost, latency_ms: f.latency_ms, llmaj_score: null, status: f.status, error: f.error, created_at: nowIso(),
      };
    };
    /** the debit, the usage record and `rec` in one transaction; then the hold is released */
    const debit = async (usage: TokenUsage, rec: InferenceRecord, observed = false) => {
      const alsoWrite = async (t: Tx) => {
        t.inferences.put(rec);
        if (observed) await observe(t, rec);
      };
      await billing.charge({
        principal: p, model_id: model.routed_model, endpoint: opts.endpoint, inference_id, usage,
        pricing: model.pricing, caching_family: model.caching_family, alsoWrite, hold,
      });
      deps.metrics?.recordUsage(model.routed_model, usage);
    };
    deps.metrics?.inflight.inc();
    let done = false;
    const settle = () => { if (!done) { done = true; deps.metrics?.inflight.dec(); } };
    return {
      model, inference_id, started_at: started,
      async finish(f) {
        settle();
        const usage = completeUsage(f.usage);
        const latency_ms = Math.round((performance.now() - started) * 1000) / 1000;
        const cost_micro = costMicro(model.pricing, model.caching_family, usage);
        const rec = record({ ...f, usage, cost: cost_micro / MICRO, latency_ms, status: 'success', error: null });
        await debit(usage, rec, true);
        hooks.after?.(rec);
        return { inference_id, usage, cost: cost_micro / MICRO, latency_ms };
      },
      async fail(f, err, used) {
        settle();
        const latency_ms = Math.round((performance.now() - started) * 1000) / 1000;
        const error = err instanceof Error ? err.message : String(err);
        const usage = completeUsage(used ?? {});
        if (usage.total_tokens > 0) {
          // work done before the failure (a cancelled generation) is billed; the record keeps the reason
          const cost_micro = costMicro(model.pricing, model.caching_family, usage);
          const rec = record({ ...f, output: f.output ?? null, usage, cost: cost_micro / MICRO, latency_ms, status: 'error', error });
          await debit(usage, rec);
          return;
        }
        hold.release(); // nothing to debit
        const rec = record({ ...f, output: null, usage: completeUsage({}), cost: 0, latency_ms, status: 'error', error });
        await store.tx((t) => t.inferences.put(rec));
      },
    };
  }

  async function runEncoder(p: Principal, req: EncoderRequest, ctx: { endpoint: string; project_id?: string | null; signal?: AbortSignal }) {
    const schema = normalizeSchema(req.schema);
    if (!schema.entities?.length && !schema.classifications?.length && !schema.relations?.length && !(schema.structures && Object.keys(schema.structures).length)) {
      throw new ValidationError('schema must name at least one entity, classification, structure or relation', [{ path: '/schema', message: 'must not be empty' }]);
    }
    const texts = Array.isArray(req.text) ? req.text : [req.text];
    try {
      checkSchemaLimits(req.schema); // the caller's schema, before the model is resolved or any native call
    } catch (err) {
      throw limitError(err) ?? err;
    }
    const call = await begin(p, {
      endpoint: ctx.endpoint, model_id: req.model_id, kind: 'encoder',
      project_id: ctx.project_id ?? req.project_id ?? null,
      hints: { schema: req.schema }, bound: { chars: texts.reduce((n, t) => n + String(t).length, 0) },
    });
    const task = req.task ?? encoderTask(schema);
    const params = { threshold: req.threshold ?? 0.5, include_confidence: req.include_confidence ?? true, include_spans: req.include_spans ?? true };
    const base = { task, input: { text: req.text }, schema: req.schema, params, store: req.store };
    let out;
    try {
      out = await runtime.extract(call.model.ref, texts, schema, { ...params, signal: ctx.signal });
    } catch (err) {
      await call.fail(base, err);
      // the encoder's own schema checks (field specs, validators' patterns, thresholds): the caller's input
      if ((err as Error)?.name === 'SchemaError') throw new ValidationError(`schema: ${(err as Error).message}`, [{ path: '/schema', message: (err as Error).message }]);
      throw limitError(err) ?? overloadedAsUnavailable(err);
    }
    const result = Array.isArray(req.text) ? out.results : out.results[0];
    const fin = await call.finish({ ...base, output: result, usage: { prompt_tokens: out.input_tokens } });
    return { type: 'encoder' as const, inference_id: fin.inference_id, model_id: req.model_id, routed_model: call.model.routed_model, result, latency_ms: fin.latency_ms, usage: fin.usage, cost: fin.cost };
  }

  async function runDecoder(p: Principal, req: DecoderRequest, ctx: { endpoint: string; project_id?: string | null; signal?: AbortSignal }) {
    const call = await begin(p, {
      endpoint: ctx.endpoint, model_id: req.model_id, kind: 'decoder',
      project_id: ctx.project_id ?? req.project_id ?? null,
      hints: { messages: req.messages }, bound: { max_tokens: req.max_tokens },
    });
    const stop = req.stop === undefined ? undefined : Array.isArray(req.stop) ? req.stop : [req.stop];
    const params = { max_tokens: req.max_tokens, temperature: req.temperature, top_p: req.top_p, top_k: req.top_k, seed: req.seed, stop };
    const base = { task: 'generate', input: { messages: req.messages }, params: Object.fromEntries(Object.entries(params).filter(([, v]) => v !== undefined)), store: req.store };
    let done;
    try {
      done = await generateAll(runtime, call.model.ref, { messages: req.messages, ...params, signal: ctx.signal });
    } catch (err) {
      await call.fail(base, err);
      throw overloadedAsUnavailable(err);
    }
    if (done.finish_reason === 'cancelled') {
      // aborted by the caller: bill what was processed, keep the reason, answer nobody
      const err = new Error('request cancelled');
      await call.fail({ ...base, output: { content: done.text, finish_reason: 'cancelled' } }, err, done.usage);
      throw err;
    }
    const result = { content: done.text, finish_reason: done.finish_reason };
    const fin = await call.finish({ ...base, output: result, usage: done.usage });
    return { type: 'decoder' as const, inference_id: fin.inference_id, model_id: req.model_id, routed_model: call.model.routed_model, result, latency_ms: fin.latency_ms, usage: fin.usage, cost: fin.cost };
  }

  return {
    begin,
    resolve,
    runEncoder,
    runDecoder,
    /** POST /inference: a decoder request when the body has `messages` */
    run(p: Principal, body: Record<string, unknown>, ctx: { endpoint: string; signal?: AbortSignal }) {
      return body.messages !== undefined ? runDecoder(p, body as unknown as DecoderRequest, ctx) : runEncoder(p, body as unknown as EncoderRequest, ctx);
    },
    setRoutePolicy(policy: RoutePolicy) { routePolicy = policy; },
    setStoredHooks(h: StoredHooks) { hooks = h; },
  };
}
export type InferenceService = ReturnType<typeof createInferenceService>;
