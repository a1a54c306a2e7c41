// The compatibility endpoints as one service: a request body in, a reply out. It owns what the
// routes used to do themselves: the billed call's life cycle (inference.begin, then call.finish or
// call.fail exactly once), billing a cancelled stream for what the model processed, the mapping of
// runtime errors to the endpoint's statuses, the cache mode a model's caching family implies, and
// the catalog and training-job reads behind /v1/models and /v1/embeddings.
//
//   generate(principal, endpoint, body, {signal}) → {stream: false, body}
//                                                  | {stream: true, frames}
// Streaming: the first generation event is awaited BEFORE this returns, so a full scheduler queue
// (529 on /v1/messages, 503 elsewhere), a parameter the runtime rejects or a missing model still
// throw (and get a proper status) before any header is sent. `frames` then yields the wire text
// (SSE events) one piece at a time; a consumer that stops reading (the client went away) ends the
// generator, which cancels the generation, drains it for its usage and bills what was processed.
// An aborted `signal` (client disconnect) does the same; the reply is then never written.
import type { Store } from '../../store/index.ts';
import type { Principal } from '../auth.ts';
import type { Catalog, CatalogEntry } from '../catalog.ts';
import { DependencyUnavailableError, overloadedAsUnavailable, ServiceError } from '../errors.ts';
import type { Call, InferenceService } from '../inference.ts';
import { ROUTER_MODEL_ID } from '../router.ts';
import type { ModelKind, ModelRuntime } from '../runtime.ts';
import {
  type BuildContext,
  ChatStreamEncoder,
  chatCompletion,
  CompletionStreamEncoder,
  messageObject,
  MessagesStreamEncoder,
  newContext,
  responseObject,
  responsesEcho,
  ResponsesStreamEncoder,
  textCompletion,
} from './build.ts';
import { checkDimensions, embeddingsResponse } from './embeddings.ts';
import { CompatError, compatErrorResponse, messagesErrorType } from './errors.ts';
import { type CatalogModelLike, fullListingJson, listModels, MAX_MODELS_LIMIT, modelEntry, type ModelsQuery as ModelsPage } from './models.ts';
import {
  normalizeChatCompletions,
  normalizeCompletions,
  normalizeCountTokens,
  normalizeEmbeddings,
  normalizeMessages,
  normalizeResponses,
} from './normalize.ts';
import { generateParams, promptChars, runCompat, toEncoderSchema, type RunEvent } from './run.ts';
import { forcedToolSchema } from './tools.ts';
import type { ChoiceResult, CompatRequest, Usage } from './types.ts';

export type CompatEndpoint = CompatRequest['endpoint'];

export const COMPAT_PATHS: Record<CompatEndpoint, string> = {
  chat: '/v1/chat/completions',
  completions: '/v1/completions',
  responses: '/v1/responses',
  messages: '/v1/messages',
};

const NORMALIZE: Record<CompatEndpoint, (body: unknown) => CompatRequest> = {
  chat: normalizeChatCompletions,
  completions: normalizeCompletions,
  responses: normalizeResponses,
  messages: normalizeMessages,
};

export type CompatReply =
  | { stream: false; body: unknown }
  | { stream: true; frames: AsyncGenerator<string, void, undefined> };

const toolsOn = (req: CompatRequest) => !!req.tools?.length && req.tool_choice !== 'none';
/** the call forces a tool call: the tool's parameters become the output's JSON schema */
const forcesTool = (req: CompatRequest) => toolsOn(req) && !!forcedToolSchema(req.tools!, req.tool_choice);

/**
 * A runtime error → the endpoint's error: the scheduler's queue-full error is 529 on /v1/messages
 * only, elsewhere a 503 with Retry-After; constrained-decoding errors name what the caller sent
 * (`tool_choice` when it forces a tool, else `response_format`); the encoder's schema checks and
 * the runtime's parameter checks are 422s.
 */
export function mapRuntimeError(err: unknown, endpoint: CompatEndpoint | 'embeddings', req?: CompatRequest): unknown {
  const e = err as { status?: number; name?: string; message?: string; code?: string };
  if (e?.status === 529 && endpoint !== 'messages') return overloadedAsUnavailable(err);
  if (e?.status === 529 && !(err instanceof ServiceError)) {
    return new ServiceError(529, e.message || 'Overloaded', { code: 'overloaded', headers: { 'Retry-After': '1' } });
  }
  // an output schema the constrained decoder rejects (unsupported keyword) or the vocabulary cannot spell
  if (e?.name === 'JsonSchemaError' || e?.name === 'ConstraintUnsatisfiableError') {
    const code = e.code ?? 'invalid_value';
    if (req && forcesTool(req)) {
      const tc = req.tool_choice;
      const what = typeof tc === 'object' ? `the tool '${tc.name}'` : 'a tool';
      const msg = `tool_choice: this model cannot produce a call to ${what} `
        + `(its parameters as constrained JSON): ${e.message}`;
      return new CompatError(422, msg, { param: 'tool_choice', code });
    }
    return new CompatError(422, `response_format: ${e.message}`, { param: 'response_format', code });
  }
  // the encoder's schema checks (the `schema` extension): field specs, validators' patterns
  if (e?.name === 'SchemaError') {
    return new CompatError(422, `schema: ${e.message}`, { param: 'schema', code: 'invalid_value' });
  }
  // parameter errors raised by the runtime (bad sampling values, max_tokens beyond the context)
  if (err instanceof RangeError) {
    return new CompatError(422, e.message ?? 'invalid parameter', { code: 'invalid_value' });
  }
  return err;
}

function recordInput(req: CompatRequest) {
  return req.prompt !== undefined ? { prompt: req.prompt } : { messages: req.messages };
}

function recordParams(req: CompatRequest): Record<string, unknown> {
  const out: Record<string, unknown> = {
    endpoint: req.endpoint, stream: req.stream, n: req.n, cache_markers: req.cache_markers.applied,
  };
  for (const [k, v] of Object.entries(req.params)) {
    if (v !== undefined && !(Array.isArray(v) && !v.length) && v !== false) out[k] = v;
  }
  if (req.tools) out.tools = req.tools.map((t) => t.name);
  if (req.user) out.user = req.user;
  return out;
}

function recordOutput(choices: ChoiceResult[]) {
  return {
    choices: choices.map((c) => ({
      text: c.text,
      finish_reason: c.finish_reason,
      ...(c.tool_calls?.length ? { tool_calls: c.tool_calls } : {}),
    })),
  };
}

/** Runtime parameters the call adds: the cache mode of the model's caching family (spec "Prompt caching"). */
function runtimeExtras(call: Call, req: CompatRequest): Record<string, unknown> {
  // explicit-marker models cache only when markers are present
  if (call.model.caching_family === 'explicit' && req.cache_markers.applied === 0) return { cache: { mode: 'none' } };
  if (call.model.caching_family === 'none') return { cache: { mode: 'none' } };
  return {};
}

function buildBody(bctx: BuildContext, req: CompatRequest, choices: ChoiceResult[], usage: Usage) {
  switch (req.endpoint) {
    case 'chat': return chatCompletion(bctx, choices, usage);
    case 'completions': return textCompletion(bctx, choices, usage, req.echo ? req.prompt : undefined);
    case 'responses': return responseObject(bctx, responsesEcho(req), choices[0]!, usage);
    case 'messages': return messageObject(bctx, choices[0]!, usage);
  }
}

/** One endpoint's stream encoder behind one interface. */
interface FrameEncoder {
  /** the opening frames; `usage`: the input usage known when the first event arrived */
  start(usage: Usage | undefined): string;
  text(ev: Extract<RunEvent, { type: 'text' }>): string;
  choice(c: ChoiceResult): string;
  end(usage: Usage, choices: ChoiceResult[]): string;
  error(err: unknown): string;
}

function frameEncoder(bctx: BuildContext, req: CompatRequest): FrameEncoder {
  const openaiBody = (err: unknown) => compatErrorResponse('openai', err).body;
  switch (req.endpoint) {
    case 'chat':
    case 'completions': {
      const e = req.endpoint === 'chat'
        ? new ChatStreamEncoder(bctx, req.n, req.include_usage)
        : new CompletionStreamEncoder(bctx, req.n, req.include_usage, req.echo ? req.prompt : undefined);
      return {
        start: () => e.start(),
        text: (ev) => e.text(ev.index, ev.text, ev.logprobs),
        choice: (c) => e.finishChoice(c),
        end: (u) => e.end(u),
        error: (x) => e.error(openaiBody(x)),
      };
    }
    case 'responses': {
      const e = new ResponsesStreamEncoder(bctx, responsesEcho(req));
      return {
        start: () => e.start(),
        text: (ev) => e.textDelta(ev.index, ev.text, ev.logprobs),
        choice: () => '',
        end: (u, choices) => e.finish(choices[0]!, u),
        error: (x) => {
          const r = compatErrorResponse('openai', x);
          const err = r.body.error as { message: string; code: string | null };
          return e.error(r.status, err.message, err.code);
        },
      };
    }
    case 'messages': {
      const e = new MessagesStreamEncoder(bctx);
      return {
        // the reference API reports the input tokens in message_start
        start: (u) => e.start(u),
        text: (ev) => e.textDelta(ev.index, ev.text),
        choice: () => '',
        end: (u, choices) => e.finish(choices[0]!, u),
        error: (x) => {
          const r = compatErrorResponse('messages', x);
          return e.error(messagesErrorType(r.status), (r.body.error as { message: string }).message);
        },
      };
    }
  }
}

export interface CompatDeps { inference: InferenceService; runtime: ModelRuntime; catalog: Catalog; store: Store }

export function createCompatService(deps: CompatDeps) {
  const { inference, runtime, catalog, store } = deps;

  function begin(p: Principal, req: CompatRequest): Promise<Call> {
    const kind: ModelKind = req.task === 'extract' ? 'encoder' : 'decoder';
    const hints = {
      schema: req.extract?.schema,
      prompt_chars: promptChars(req),
      max_tokens: req.params.max_tokens,
      n: req.n, // sizes the credit hold (n completions)
      needs_tools: toolsOn(req),
    };
    return inference.begin(p, { endpoint: COMPAT_PATHS[req.endpoint], model_id: req.model, kind, hints });
  }

  /** tools go through the model's chat template when it renders them, else a system message describes them */
  async function templateSupportsTools(call: Call, req: CompatRequest): Promise<boolean> {
    if (!toolsOn(req) || !runtime.templateSupportsTools) return false;
    return runtime.templateSupportsTools(call.model.ref).catch(() => false);
  }

  /** A chat/completions/responses/messages call, streaming or not (see the top of this file). */
  async function generate(
    p: Principal, endpoint: CompatEndpoint, body: unknown, opts: { signal: AbortSignal },
  ): Promise<CompatReply> {
    const req = NORMALIZE[endpoint](body);
    if (req.extract) toEncoderSchema(req.extract.schema); // a bad `schema` is a 422 before anything is billed or stored
    const call = await begin(p, req);
    const base = {
      task: req.task === 'extract' ? 'extraction' : 'generate',
      input: recordInput(req),
      schema: req.extract?.schema,
      params: recordParams(req),
    };
    const routed = call.model.routed_model;
    const bctx = newContext(endpoint, routed, { inference_id: call.inference_id, routed_model: routed });
    const { signal } = opts;
    const ac = new AbortController();
    const onAbort = () => ac.abort(signal.reason);
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
    const detach = () => signal.removeEventListener('abort', onAbort);
    const disconnected = () => new Error('client disconnected');

    const events = runCompat(runtime, call.model.ref, req, {
      signal: ac.signal,
      toolIdPrefix: endpoint === 'messages' ? 'toolu_' : 'call_',
      templateSupportsTools: await templateSupportsTools(call, req),
      extraParams: runtimeExtras(call, req),
    })[Symbol.asyncIterator]();
    const choices: ChoiceResult[] = [];
    let usage: Usage | null = null;
    /** the call failed or was cancelled: record it (billing what the model processed) */
    const failCall = (err: unknown, used?: Usage) =>
      call.fail({ ...base, output: recordOutput(choices.filter(Boolean)) }, err, used);

    let first: IteratorResult<RunEvent>;
    try {
      if (!req.stream) {
        for (let r = await events.next(); !r.done; r = await events.next()) {
          const ev = r.value;
          if (ev.type === 'choice') choices[ev.result.index] = ev.result;
          else if (ev.type === 'done') usage = ev.usage;
        }
        if (signal.aborted) {
          await failCall(disconnected(), usage ?? undefined);
          return { stream: false, body: undefined };
        }
        const fin = await call.finish({ ...base, output: recordOutput(choices), usage: usage! });
        return { stream: false, body: buildBody(bctx, req, choices, fin.usage as Usage) };
      }
      // streaming: the first event decides between an error status and a 200 stream
      first = await events.next();
    } catch (err) {
      ac.abort();
      await events.return?.(undefined).catch(() => {});
      await call.fail(base, signal.aborted ? disconnected() : err).catch(() => {});
      detach();
      if (signal.aborted) return { stream: false, body: undefined };
      throw mapRuntimeError(err, endpoint, req);
    } finally {
      if (!req.stream) detach();
    }

    async function* frames(): AsyncGenerator<string, void, undefined> {
      const enc = frameEncoder(bctx, req);
      let settled = false;
      try {
        const head = first.done ? undefined : first.value;
        yield enc.start(head?.type === 'start' ? head.usage : undefined);
        for (let r = first; !r.done; r = await events.next()) {
          const ev = r.value;
          if (ev.type === 'done') usage = ev.usage;
          else if (ev.type === 'choice') {
            choices[ev.result.index] = ev.result;
            // the client went away: keep draining (the aborted generation ends at once) for its usage
            if (signal.aborted) ac.abort();
            else {
              const s = enc.choice(ev.result);
              if (s) yield s;
            }
          } else if (ev.type === 'text') {
            if (signal.aborted) ac.abort();
            else {
              const s = enc.text(ev);
              if (s) yield s;
            }
          }
        }
        if (signal.aborted || !usage) {
          // the generation was cancelled: what it processed is billed, the record keeps the reason
          settled = true;
          ac.abort();
          await failCall(disconnected(), usage ?? undefined);
          return;
        }
        settled = true;
        const fin = await call.finish({ ...base, output: recordOutput(choices), usage });
        yield enc.end(fin.usage as Usage, choices);
      } catch (err) {
        settled = true;
        ac.abort();
        await events.return?.(undefined).catch(() => {});
        await call.fail(base, signal.aborted ? disconnected() : err).catch(() => {});
        // headers are out: report the failure inside the stream (the consumer then closes it)
        if (!signal.aborted) yield enc.error(mapRuntimeError(err, endpoint, req));
      } finally {
        if (!settled) {
          // the consumer stopped reading (the client went away): cancel, drain for the usage, bill it
          ac.abort();
          try {
            for (let r = await events.next(); !r.done; r = await events.next()) {
              if (r.value.type === 'done') usage = r.value.usage;
              else if (r.value.type === 'choice') choices[r.value.result.index] = r.value.result;
            }
          } catch { /* the cancelled generation's own error: nothing more to bill */ }
          await failCall(disconnected(), usage ?? undefined).catch(() => {});
        }
        detach();
      }
    }
    return { stream: true, frames: frames() };
  }

  /** POST /v1/messages/count_tokens: the prompt's tokens exactly as a messages call would render it. */
  async function countTokens(p: Principal, body: unknown): Promise<{ input_tokens: number }> {
    const req = normalizeCountTokens(body);
    const kind: ModelKind = req.task === 'extract' ? 'encoder' : 'decoder';
    if (kind === 'encoder') toEncoderSchema(req.extract!.schema);
    const hints = { schema: req.extract?.schema, prompt_chars: promptChars(req) };
    const model = await inference.resolve(p, req.model, kind, hints);
    if (!runtime.countTokens) throw new DependencyUnavailableError('This model runtime cannot count tokens');
    if (kind === 'encoder') {
      return { input_tokens: await runtime.countTokens(model.ref, { prompt: req.extract!.text }) };
    }
    const tools = toolsOn(req) && runtime.templateSupportsTools
      ? await runtime.templateSupportsTools(model.ref).catch(() => false)
      : false;
    try {
      const params = generateParams(req, 0, { templateSupportsTools: tools });
      return { input_tokens: await runtime.countTokens(model.ref, params) };
    } catch (err) {
      throw mapRuntimeError(err, 'messages', req);
    }
  }

  async function embeddings(p: Principal, body: unknown) {
    const req = normalizeEmbeddings(body);
    // the model kind: a catalog entry's task type, a trained model's, or an encoder via the router
    let kind: ModelKind = 'encoder';
    if (req.model !== ROUTER_MODEL_ID) {
      const entry = await catalog.get(req.model);
      const job = entry ? null : await store.trainingJobs.get(req.model);
      kind = (entry?.task_type ?? job?.task_type ?? 'encoder') as ModelKind;
    }
    const hints = { prompt_chars: req.input.reduce((n, s) => n + s.length, 0) };
    const call = await inference.begin(p, { endpoint: '/v1/embeddings', model_id: req.model, kind, hints });
    const params = { encoding_format: req.encoding_format, ...(req.dimensions ? { dimensions: req.dimensions } : {}) };
    const base = { task: 'embed', input: { text: req.input }, params };
    let out;
    try {
      out = await runtime.embed(call.model.ref, req.input);
      checkDimensions(req.dimensions, out.dimensions);
    } catch (err) {
      await call.fail(base, err).catch(() => {});
      throw mapRuntimeError(err, 'embeddings');
    }
    const output = { count: out.embeddings.length, dimensions: req.dimensions ?? out.dimensions };
    const fin = await call.finish({ ...base, output, usage: { prompt_tokens: out.input_tokens } });
    return embeddingsResponse(call.model.routed_model, out.embeddings, {
      encoding_format: req.encoding_format,
      dimensions: req.dimensions,
      input_tokens: out.input_tokens,
      x_service: { inference_id: fin.inference_id, routed_model: call.model.routed_model },
    });
  }

  // one array per catalog snapshot (catalog.list() returns the same array until the catalog changes)
  const catalogSnapshots = new WeakMap<object, CatalogModelLike[]>();
  const NO_MODELS: CatalogModelLike[] = [];

  function modelsOf(entries: CatalogEntry[]): CatalogModelLike[] {
    let models = catalogSnapshots.get(entries);
    if (models === undefined) {
      const router = {
        id: ROUTER_MODEL_ID,
        name: 'Router (service/auto)',
        task_type: 'router',
        description: 'Picks a model per request; free accounts call models through it',
        supports_inference: true,
        supports_on_demand_inference: true,
        owned_by: 'loom',
      };
      models = [router, ...entries.map((e) => ({ ...e, display_name: e.name, owned_by: e.provider }))];
      catalogSnapshots.set(entries, models);
    }
    return models;
  }
  async function catalogModels(): Promise<CatalogModelLike[]> {
    return modelsOf(await catalog.list());
  }

  function modelsBody(all: CatalogModelLike[], q: ModelsPage): Buffer | string {
    if (q.limit === undefined && q.before_id === undefined && q.after_id === undefined) return fullListingJson(all);
    const limit = q.limit === undefined ? undefined : Math.min(q.limit, MAX_MODELS_LIMIT);
    return JSON.stringify(listModels(all, { limit, before_id: q.before_id, after_id: q.after_id }));
  }

  /**
   * GET /v1/models: the router and the catalog, paged by id, as its JSON body. The whole listing
   * (no paging) is serialized once per catalog snapshot: building and serializing every entry on
   * each call cost several times the rest of an authenticated request. Synchronous while the
   * catalog's snapshot is fresh (the request is then answered within the server's handler call);
   * a promise when the catalog must rescan its folders first (at most once a second).
   */
  function models(p: Principal, q: ModelsPage): Buffer | string | Promise<Buffer | string> {
    if (q.before_id !== undefined && q.after_id !== undefined) {
      const msg = "Use at most one of 'before_id' and 'after_id'.";
      throw new CompatError(422, msg, { param: 'before_id', code: 'invalid_value' });
    }
    // the caller's team's fine-tuned models follow the catalog (the shared listing stays cached when it has none)
    const tuned = catalog.fineTuned(p.team_id);
    if (tuned instanceof Promise) return tuned.then((t) => modelsFor(t, q));
    return modelsFor(tuned, q);
  }

  function modelsFor(tuned: CatalogEntry[], q: ModelsPage): Buffer | string | Promise<Buffer | string> {
    const own = tuned.length ? tuned.map((e) => ({ ...e, display_name: e.name, owned_by: e.provider })) : NO_MODELS;
    const fresh = catalog.fresh();
    // no closure on the synchronous path: tsx's keepNames wraps each named one in a defineProperty
    // call, per request (10% of an authenticated GET /v1/models in process)
    if (fresh !== null) return modelsListing(modelsOf(fresh), own, q);
    return catalogModels().then((all) => modelsListing(all, own, q));
  }

  function modelsListing(all: CatalogModelLike[], own: CatalogModelLike[], q: ModelsPage): Buffer | string {
    if (own.length === 0) return modelsBody(all, q);
    const limit = q.limit === undefined ? undefined : Math.min(q.limit, MAX_MODELS_LIMIT);
    return JSON.stringify(listModels([...all, ...own], { ...q, limit }));
  }

  /** GET /v1/models/:id (the catalog's, or one of the caller's team's fine-tuned models) */
  async function model(p: Principal, id: string) {
    const own = (await catalog.fineTuned(p.team_id)).find((e) => e.id === id);
    if (own) return modelEntry({ ...own, display_name: own.name, owned_by: own.provider });
    const m = (await catalogModels()).find((e) => e.id === id);
    if (!m) {
      throw new CompatError(404, `The model '${id}' does not exist.`, { param: 'model', code: 'model_not_found' });
    }
    return modelEntry(m);
  }

  return { generate, countTokens, embeddings, models, model };
}
export type CompatService = ReturnType<typeof createCompatService>;
