// The compatibility endpoints: OpenAI-style /v1/chat/completions, /v1/completions, /v1/responses,
// /v1/models, /v1/embeddings and the messages-style /v1/messages. Thin adapters: parsing and
// response shapes live in src/service/compat/, the call life cycle (model resolution, router,
// billing with the caching family's multipliers, the inference record) in the inference service.
//
// Streaming: the first generation event is awaited BEFORE the 200 and the SSE headers go out, so
// a full scheduler queue (529 on /v1/messages, 503 on the OpenAI-style routes), a bad parameter
// the runtime rejects, or a missing model still get a proper status and error body. After that,
// every write awaits uWS back-pressure (onWritable) and a client disconnect aborts the signal,
// which cancels the generation and frees its KV blocks at once.
import type { Services } from '../../src/service/index.ts';
import type { Principal } from '../../src/service/auth.ts';
import type { Call } from '../../src/service/inference.ts';
import type { ModelKind } from '../../src/service/runtime.ts';
import { DependencyUnavailableError, ServiceError } from '../../src/service/errors.ts';
import { createRoutePolicy, loadRouterPolicy, ROUTER_MODEL_ID } from '../../src/service/router.ts';
import {
  normalizeChatCompletions,
  normalizeCompletions,
  normalizeEmbeddings,
  normalizeMessages,
  normalizeResponses,
} from '../../src/service/compat/normalize.ts';
import { CompatError, compatErrorResponse, messagesErrorType } from '../../src/service/compat/errors.ts';
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
} from '../../src/service/compat/build.ts';
import { fullListingJson, listModels, MAX_MODELS_LIMIT, modelEntry, type CatalogModelLike } from '../../src/service/compat/models.ts';
import { checkDimensions, embeddingsResponse } from '../../src/service/compat/embeddings.ts';
import { promptChars, runCompat, toEncoderSchema, type RunEvent } from '../../src/service/compat/run.ts';
import type { ChoiceResult, CompatRequest, Usage } from '../../src/service/compat/types.ts';
import { SSE_HEADERS, type ResponseStream } from '../http.ts';
import { reply, type Ctx, type RouteDef } from '../router.ts';

// The router policy (LOOM_ROUTER_POLICY) is installed into each Services instance once, on its
// first compat or /gliner-2 request. TODO(service core): install it in createServices so that
// POST /inference routes `service/auto` by the same policy from the first request on.
const policyInstalled = new WeakSet<object>();
export function ensureRouterPolicy(services: Services): void {
  if (policyInstalled.has(services)) return;
  policyInstalled.add(services);
  services.inference.setRoutePolicy(createRoutePolicy(loadRouterPolicy()));
}

type Endpoint = CompatRequest['endpoint'];
const PATHS: Record<Endpoint, string> = {
  chat: '/v1/chat/completions',
  completions: '/v1/completions',
  responses: '/v1/responses',
  messages: '/v1/messages',
};

/** The scheduler's queue-full error is 529 on /v1/messages only; elsewhere a 503 with Retry-After. */
function mapRuntimeError(err: unknown, endpoint: Endpoint | 'embeddings'): unknown {
  const e = err as { status?: number; name?: string; message?: string };
  if (e?.status === 529 && endpoint !== 'messages') return new DependencyUnavailableError(`The model is overloaded: ${e.message ?? 'queue full'}; retry shortly`, 1);
  if (e?.status === 529 && !(err instanceof ServiceError)) return new ServiceError(529, e.message || 'Overloaded', { code: 'overloaded', headers: { 'Retry-After': '1' } });
  // response_format the constrained decoder rejects (unsupported keyword) or the vocabulary cannot spell
  if (e?.name === 'JsonSchemaError' || e?.name === 'ConstraintUnsatisfiableError') {
    const code = (err as { code?: string }).code ?? 'invalid_value';
    return new CompatError(422, `response_format: ${e.message}`, { param: 'response_format', code });
  }
  // the encoder's schema checks (the `schema` extension): field specs, validators' patterns
  if (e?.name === 'SchemaError') return new CompatError(422, `schema: ${e.message}`, { param: 'schema', code: 'invalid_value' });
  // parameter errors raised by the runtime (bad sampling values, max_tokens beyond the context)
  if (err instanceof RangeError) return new CompatError(422, e.message ?? 'invalid parameter', { code: 'invalid_value' });
  return err;
}

function recordInput(req: CompatRequest) {
  return req.prompt !== undefined ? { prompt: req.prompt } : { messages: req.messages };
}
function recordParams(req: CompatRequest): Record<string, unknown> {
  const p = req.params;
  const out: Record<string, unknown> = { endpoint: req.endpoint, stream: req.stream, n: req.n, cache_markers: req.cache_markers.applied };
  for (const [k, v] of Object.entries(p)) if (v !== undefined && !(Array.isArray(v) && !v.length) && v !== false) out[k] = v;
  if (req.tools) out.tools = req.tools.map((t) => t.name);
  if (req.user) out.user = req.user;
  return out;
}
function recordOutput(choices: ChoiceResult[]) {
  return {
    choices: choices.map((c) => ({ text: c.text, finish_reason: c.finish_reason, ...(c.tool_calls?.length ? { tool_calls: c.tool_calls } : {}) })),
  };
}

async function beginCall(ctx: Ctx, req: CompatRequest): Promise<Call> {
  ensureRouterPolicy(ctx.services);
  const kind: ModelKind = req.task === 'extract' ? 'encoder' : 'decoder';
  const hints = {
    schema: req.extract?.schema,
    prompt_chars: promptChars(req),
    max_tokens: req.params.max_tokens,
    needs_tools: !!req.tools?.length && req.tool_choice !== 'none',
  };
  return ctx.services.inference.begin(ctx.principal as Principal, { endpoint: PATHS[req.endpoint], model_id: req.model, kind, hints });
}

/** Runtime parameters the call adds: cache mode from the model's caching family. */
function runtimeExtras(call: Call, req: CompatRequest): Record<string, unknown> {
  // explicit-marker models cache only when markers are present (spec "Prompt caching")
  if (call.model.caching_family === 'explicit' && req.cache_markers.applied === 0) return { cache: { mode: 'none' } };
  if (call.model.caching_family === 'none') return { cache: { mode: 'none' } };
  return {};
}

function buildBody(endpoint: Endpoint, bctx: BuildContext, req: CompatRequest, choices: ChoiceResult[], usage: Usage) {
  switch (endpoint) {
    case 'chat': return chatCompletion(bctx, choices, usage);
    case 'completions': return textCompletion(bctx, choices, usage, req.echo ? req.prompt : undefined);
    case 'responses': return responseObject(bctx, responsesEcho(req), choices[0]!, usage);
    case 'messages': return messageObject(bctx, choices[0]!, usage);
  }
}

interface Encoder {
  start(): string;
  text(ev: Extract<RunEvent, { type: 'text' }>): string;
  choice(c: ChoiceResult): string;
  end(usage: Usage, choices: ChoiceResult[]): string;
  error(err: unknown): string;
}

function encoderFor(endpoint: Endpoint, bctx: BuildContext, req: CompatRequest, style: 'openai' | 'messages'): Encoder {
  const errBody = (err: unknown) => compatErrorResponse(style, err).body;
  switch (endpoint) {
    case 'chat': {
      const e = new ChatStreamEncoder(bctx, req.n, req.include_usage);
      return { start: () => e.start(), text: (ev) => e.text(ev.index, ev.text, ev.logprobs), choice: (c) => e.finishChoice(c), end: (u) => e.end(u), error: (x) => e.error(errBody(x)) };
    }
    case 'completions': {
      const e = new CompletionStreamEncoder(bctx, req.n, req.include_usage, req.echo ? req.prompt : undefined);
      return { start: () => e.start(), text: (ev) => e.text(ev.index, ev.text, ev.logprobs), choice: (c) => e.finishChoice(c), end: (u) => e.end(u), error: (x) => e.error(errBody(x)) };
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
        start: () => e.start(),
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

async function handleGeneration(ctx: Ctx, endpoint: Endpoint, normalize: (b: unknown) => CompatRequest): Promise<unknown> {
  const req = normalize(ctx.body);
  if (req.extract) toEncoderSchema(req.extract.schema); // a bad `schema` is a 422 before anything is billed or stored
  const call = await beginCall(ctx, req);
  const base = { task: req.task === 'extract' ? 'extraction' : 'generate', input: recordInput(req), schema: req.extract?.schema, params: recordParams(req) };
  const bctx = newContext(endpoint, call.model.routed_model, { inference_id: call.inference_id, routed_model: call.model.routed_model });
  const ac = new AbortController();
  const onAbort = () => ac.abort(ctx.signal.reason);
  if (ctx.signal.aborted) onAbort();
  else ctx.signal.addEventListener('abort', onAbort, { once: true });
  // tools go through the model's chat template when it renders them, else a system message describes them
  const toolsOn = !!req.tools?.length && req.tool_choice !== 'none';
  const rt = ctx.services.runtime;
  const templateSupportsTools = toolsOn && rt.templateSupportsTools ? await rt.templateSupportsTools(call.model.ref).catch(() => false) : false;
  const events = runCompat(rt, call.model.ref, req, {
    signal: ac.signal,
    toolIdPrefix: endpoint === 'messages' ? 'toolu_' : 'call_',
    templateSupportsTools,
    extraParams: runtimeExtras(call, req),
  })[Symbol.asyncIterator]();
  const choices: ChoiceResult[] = [];
  let usage: Usage | null = null;
  let stream: ResponseStream | null = null;
  try {
    if (!req.stream) {
      for (let r = await events.next(); !r.done; r = await events.next()) {
        const ev = r.value;
        if (ev.type === 'choice') choices[ev.result.index] = ev.result;
        else if (ev.type === 'done') usage = ev.usage;
      }
      if (ctx.signal.aborted) {
        await call.fail({ ...base, output: recordOutput(choices.filter(Boolean)) }, new Error('client disconnected'), usage ?? undefined);
        return undefined;
      }
      const fin = await call.finish({ ...base, output: recordOutput(choices), usage: usage! });
      return buildBody(endpoint, bctx, req, choices, fin.usage as Usage);
    }
    // streaming: the first event decides between an error status and a 200 stream
    const first = await events.next();
    const style: 'openai' | 'messages' = endpoint === 'messages' ? 'messages' : 'openai';
    const enc = encoderFor(endpoint, bctx, req, style);
    stream = ctx.stream(200, SSE_HEADERS);
    await stream.write(enc.start());
    for (let r = first; !r.done; r = await events.next()) {
      const ev = r.value;
      if (ev.type === 'done') { usage = ev.usage; continue; }
      // the client went away: keep draining (the aborted generation ends at once) for its usage
      if (stream.closed || ctx.signal.aborted) {
        ac.abort();
        if (ev.type === 'choice') choices[ev.result.index] = ev.result;
        continue;
      }
      if (ev.type === 'text') {
        const s = enc.text(ev);
        if (s) await stream.write(s);
      } else if (ev.type === 'choice') {
        choices[ev.result.index] = ev.result;
        const s = enc.choice(ev.result);
        if (s) await stream.write(s);
      }
    }
    if (ctx.signal.aborted || stream.closed || !usage) {
      // the client went away: the generation is cancelled; what it processed is billed, the record keeps the reason
      ac.abort();
      await events.return?.(undefined);
      await call.fail({ ...base, output: recordOutput(choices.filter(Boolean)) }, new Error('client disconnected'), usage ?? undefined);
      return undefined;
    }
    const fin = await call.finish({ ...base, output: recordOutput(choices), usage });
    await stream.write(enc.end(fin.usage as Usage, choices));
    stream.end();
    return undefined;
  } catch (err) {
    ac.abort();
    await events.return?.(undefined).catch(() => {});
    await call.fail(base, ctx.signal.aborted ? new Error('client disconnected') : err).catch(() => {});
    if (ctx.signal.aborted) return undefined;
    const mapped = mapRuntimeError(err, endpoint);
    if (!stream) throw mapped;
    // headers are out: report the failure inside the stream, then close it
    if (!stream.closed) {
      const style: 'openai' | 'messages' = endpoint === 'messages' ? 'messages' : 'openai';
      await stream.write(encoderFor(endpoint, bctx, req, style).error(mapped));
      stream.end();
    }
    return undefined;
  } finally {
    ctx.signal.removeEventListener('abort', onAbort);
  }
}

async function handleEmbeddings(ctx: Ctx): Promise<unknown> {
  const req = normalizeEmbeddings(ctx.body);
  ensureRouterPolicy(ctx.services);
  const { services } = ctx;
  // the model kind: a catalog entry's task type, a trained model's, or an encoder via the router
  let kind: ModelKind = 'encoder';
  if (req.model !== ROUTER_MODEL_ID) {
    const entry = await services.catalog.get(req.model);
    const job = entry ? null : services.store.trainingJobs.get(req.model);
    kind = (entry?.task_type ?? job?.task_type ?? 'encoder') as ModelKind;
  }
  const call = await services.inference.begin(ctx.principal as Principal, { endpoint: '/v1/embeddings', model_id: req.model, kind, hints: { prompt_chars: req.input.reduce((n, s) => n + s.length, 0) } });
  const base = { task: 'embed', input: { text: req.input }, params: { encoding_format: req.encoding_format, ...(req.dimensions ? { dimensions: req.dimensions } : {}) } };
  let out;
  try {
    out = await services.runtime.embed(call.model.ref, req.input);
    checkDimensions(req.dimensions, out.dimensions);
  } catch (err) {
    await call.fail(base, err).catch(() => {});
    throw mapRuntimeError(err, 'embeddings');
  }
  const fin = await call.finish({ ...base, output: { count: out.embeddings.length, dimensions: req.dimensions ?? out.dimensions }, usage: { prompt_tokens: out.input_tokens } });
  return embeddingsResponse(call.model.routed_model, out.embeddings, {
    encoding_format: req.encoding_format,
    dimensions: req.dimensions,
    input_tokens: out.input_tokens,
    x_service: { inference_id: fin.inference_id, routed_model: call.model.routed_model },
  });
}

// one array per catalog snapshot (catalog.list() returns the same array until the catalog changes)
const catalogSnapshots = new WeakMap<object, CatalogModelLike[]>();
async function catalogModels(services: Services): Promise<CatalogModelLike[]> {
  const entries = await services.catalog.list();
  let models = catalogSnapshots.get(entries);
  if (models === undefined) {
    const router = { id: ROUTER_MODEL_ID, name: 'Router (service/auto)', task_type: 'router', description: 'Picks a model per request; free accounts call models through it', supports_inference: true, supports_on_demand_inference: true, owned_by: 'loom' };
    models = [router, ...entries.map((e) => ({ ...e, display_name: e.name, owned_by: e.provider }))];
    catalogSnapshots.set(entries, models);
  }
  return models;
}

export function compatRoutes(): RouteDef[] {
  const gen = (endpoint: Endpoint, normalize: (b: unknown) => CompatRequest): RouteDef => ({
    method: 'POST',
    path: PATHS[endpoint],
    auth: 'key',
    errors: endpoint === 'messages' ? 'native' : 'openai',
    handler: (ctx) => handleGeneration(ctx, endpoint, normalize),
  });
  return [
    gen('chat', normalizeChatCompletions),
    gen('completions', normalizeCompletions),
    gen('responses', normalizeResponses),
    gen('messages', normalizeMessages),
    {
      method: 'POST', path: '/v1/embeddings', auth: 'key', errors: 'openai',
      handler: handleEmbeddings,
    },
    {
      method: 'GET', path: '/v1/models', auth: 'key', errors: 'openai',
      query: { limit: { type: 'integer', min: 1 }, before_id: { type: 'string' }, after_id: { type: 'string' } },
      async handler({ services, query }) {
        if (query.before_id !== undefined && query.after_id !== undefined) {
          throw new CompatError(422, "Use at most one of 'before_id' and 'after_id'.", { param: 'before_id', code: 'invalid_value' });
        }
        const limit = query.limit === undefined ? undefined : Math.min(query.limit as number, MAX_MODELS_LIMIT);
        if (limit === undefined && query.before_id === undefined && query.after_id === undefined) {
          return reply(200, fullListingJson(await catalogModels(services)), { 'Content-Type': 'application/json' });
        }
        return listModels(await catalogModels(services), { limit, before_id: query.before_id, after_id: query.after_id });
      },
    },
    {
      // model ids contain '/', sent percent-encoded by the SDKs
      method: 'GET', path: '/v1/models/*', auth: 'key', errors: 'openai', name: '/v1/models/:id',
      async handler(ctx) {
        const id = decodeURIComponent(ctx.url.slice('/v1/models/'.length));
        const m = (await catalogModels(ctx.services)).find((e) => e.id === id);
        if (!m) throw new CompatError(404, `The model '${id}' does not exist.`, { param: 'model', code: 'model_not_found' });
        return modelEntry(m);
      },
    },
  ];
}
