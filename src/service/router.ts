// The router model `service/auto`: picks a concrete model per request by a documented,
// configurable policy, and is the model id free accounts may call (a direct model id needs a paid
// credit balance: 402 direct_model_requires_credits, enforced by billing).
//
// Policy (defaults in DEFAULT_ROUTER_POLICY; override with a JSON file, see loadRouterPolicy):
//   1. A request with a `schema` is an encoder task: `encoder` if configured, else the cheapest
//      available encoder of the catalog.
//   2. Otherwise a decoder: the candidates are `decoders` (in that order) if configured, else
//      every decoder of the catalog; a candidate must be available (on disk, or pullable when
//      `allow_pull`), support tools when the request has tools, and have a context window of at
//      least prompt + max_tokens (+ `context_headroom` as a fraction). The prompt length is
//      estimated from its characters (`chars_per_token`), before any tokenizer is loaded.
//   3. Among those, `prefer`:
//        'cost'    lowest estimated price (prompt x input price + max_tokens x output price),
//                  then the smaller context window, then listing order;
//        'context' the largest context window;
//        'order'   the first in listing order.
//   4. No candidate fits: 422 context_length_exceeded when some decoder exists but none is long
//      enough, 503 no_model_available when there is none at all.
// The answer names the chosen model and why; responses report it as `x_service.routed_model`.
import { readFileSync } from 'node:fs';
import { Ajv, type ValidateFunction } from 'ajv';
import type { CatalogEntry } from './catalog.ts';
import { DependencyUnavailableError, ServiceError } from './errors.ts';

export const ROUTER_MODEL_ID = 'service/auto';

export function isRouterModel(id: string): boolean {
  return id === ROUTER_MODEL_ID;
}

export interface RouterCandidate {
  id: string;
  kind: 'encoder' | 'decoder';
  /** tokens; unknown = assumed 2048 */
  context_length?: number;
  /** credits per 1M input / output tokens (the catalog's pricing) */
  price_input_per_1m?: number;
  price_output_per_1m?: number;
  supports_tools?: boolean;
  /** on disk and loadable now (or loaded) */
  local: boolean;
  /** can be pulled on demand */
  pullable?: boolean;
}

export interface RouterPolicy {
  encoder: string | null;
  decoders: string[] | null;
  prefer: 'cost' | 'context' | 'order';
  context_headroom: number;
  chars_per_token: number;
  /** route to catalog models that are not on disk yet (they answer 425 while they are pulled) */
  allow_pull: boolean;
}

export const DEFAULT_ROUTER_POLICY: RouterPolicy = {
  encoder: null,
  decoders: null,
  prefer: 'cost',
  context_headroom: 0,
  chars_per_token: 3.5,
  allow_pull: false,
};

export interface RouteInput {
  /** the request carries a `schema` (encoder task) */
  has_schema: boolean;
  /** characters of the prompt (all message text) */
  prompt_chars: number;
  max_tokens: number;
  needs_tools: boolean;
}

export interface RouteDecision {
  model: string;
  kind: 'encoder' | 'decoder';
  reason: string;
}

const DEFAULT_CONTEXT = 2048;

export function routeRequest(input: RouteInput, candidates: RouterCandidate[], policy: RouterPolicy = DEFAULT_ROUTER_POLICY): RouteDecision {
  const usable = (c: RouterCandidate) => c.local || (policy.allow_pull && !!c.pullable);
  if (input.has_schema) {
    if (policy.encoder) return { model: policy.encoder, kind: 'encoder', reason: 'schema given: configured encoder' };
    const enc = candidates.filter((c) => c.kind === 'encoder' && usable(c));
    if (!enc.length) throw new DependencyUnavailableError('service/auto: no encoder model is available for a schema request');
    const best = [...enc].sort((a, b) => (a.price_input_per_1m ?? 0) - (b.price_input_per_1m ?? 0))[0]!;
    return { model: best.id, kind: 'encoder', reason: 'schema given: cheapest available encoder' };
  }
  let decs = candidates.filter((c) => c.kind === 'decoder');
  if (policy.decoders) {
    const byId = new Map(decs.map((c) => [c.id, c]));
    decs = policy.decoders.map((id) => byId.get(id) ?? { id, kind: 'decoder' as const, local: true });
  }
  decs = decs.filter(usable);
  if (input.needs_tools) {
    const withTools = decs.filter((c) => c.supports_tools);
    if (withTools.length) decs = withTools; // otherwise the tools go through the fallback prompt
  }
  if (!decs.length) throw new DependencyUnavailableError('service/auto: no decoder model is available');
  const promptTokens = Math.ceil(input.prompt_chars / policy.chars_per_token);
  const need = Math.ceil((promptTokens + input.max_tokens) * (1 + policy.context_headroom));
  const fits = decs.filter((c) => (c.context_length ?? DEFAULT_CONTEXT) >= need);
  if (!fits.length) {
    const longest = Math.max(...decs.map((c) => c.context_length ?? DEFAULT_CONTEXT));
    throw new ServiceError(422, `service/auto: the request needs about ${need} tokens of context (prompt + max_tokens); the longest available model has ${longest}`, {
      code: 'context_length_exceeded',
      param: 'messages',
    });
  }
  const order = new Map(decs.map((c, i) => [c.id, i]));
  const cost = (c: RouterCandidate) => promptTokens * (c.price_input_per_1m ?? 0) + input.max_tokens * (c.price_output_per_1m ?? 0);
  const ctx = (c: RouterCandidate) => c.context_length ?? DEFAULT_CONTEXT;
  let best: RouterCandidate;
  if (policy.prefer === 'order') best = fits[0]!;
  else if (policy.prefer === 'context') best = [...fits].sort((a, b) => ctx(b) - ctx(a) || order.get(a.id)! - order.get(b.id)!)[0]!;
  else best = [...fits].sort((a, b) => cost(a) - cost(b) || ctx(a) - ctx(b) || order.get(a.id)! - order.get(b.id)!)[0]!;
  return { model: best.id, kind: 'decoder', reason: `prefer=${policy.prefer}; needs ~${need} tokens of context` };
}

const policySchema = {
  type: 'object',
  additionalProperties: false,
  properties: {
    encoder: { type: ['string', 'null'] },
    decoders: { anyOf: [{ type: 'null' }, { type: 'array', items: { type: 'string' }, minItems: 1 }] },
    prefer: { enum: ['cost', 'context', 'order'] },
    context_headroom: { type: 'number', minimum: 0, maximum: 4 },
    chars_per_token: { type: 'number', exclusiveMinimum: 0 },
    allow_pull: { type: 'boolean' },
  },
};
// compiled on first use: an Ajv instance and its first schema cost ~0.3 s of every start that never reads a policy
let validatePolicy: ValidateFunction | undefined;

/** A policy from a plain object (unknown keys or bad values are an error, not silently ignored). */
export function parseRouterPolicy(obj: unknown): RouterPolicy {
  validatePolicy ??= new Ajv({ allErrors: true }).compile(policySchema);
  if (!validatePolicy(obj)) {
    const e = validatePolicy.errors?.[0];
    throw new Error(`invalid router policy: ${e?.instancePath || '(root)'} ${e?.message}`);
  }
  return { ...DEFAULT_ROUTER_POLICY, ...(obj as Partial<RouterPolicy>) };
}

/** The policy from `LOOM_ROUTER_POLICY` (a JSON file path) when set, else the defaults. */
export function loadRouterPolicy(file: string | undefined = process.env.LOOM_ROUTER_POLICY): RouterPolicy {
  if (!file) return DEFAULT_ROUTER_POLICY;
  return parseRouterPolicy(JSON.parse(readFileSync(file, 'utf8')));
}

/** Router candidates from catalog entries (inference-capable models only). */
export function candidatesFromCatalog(entries: CatalogEntry[], toolModels: Set<string> = new Set()): RouterCandidate[] {
  return entries
    .filter((e) => e.supports_inference)
    .map((e) => ({
      id: e.id,
      kind: e.task_type,
      context_length: e.context_length ?? undefined,
      price_input_per_1m: e.pricing.input,
      price_output_per_1m: e.pricing.output,
      supports_tools: toolModels.has(e.id),
      local: e.local,
      pullable: e.supports_on_demand_inference,
    }));
}

/**
 * The policy as the inference service's route hook (`inference.setRoutePolicy`): hints carry the
 * request's `schema`, `messages` or `prompt_chars`, and optionally `max_tokens` and `needs_tools`.
 * Errors (422 context_length_exceeded) propagate to the caller; "nothing available" returns null
 * (the service answers 503).
 */
export function createRoutePolicy(policy: RouterPolicy = DEFAULT_ROUTER_POLICY) {
  return (kind: 'encoder' | 'decoder', hints: { schema?: unknown; messages?: unknown[]; prompt_chars?: number; [k: string]: unknown }, entries: CatalogEntry[]): string | null => {
    const h = hints as { schema?: unknown; messages?: unknown[]; prompt_chars?: number; max_tokens?: number; needs_tools?: boolean };
    let chars = h.prompt_chars;
    if (chars === undefined) {
      chars = 0;
      for (const m of h.messages ?? []) {
        const c = (m as { content?: unknown }).content;
        if (typeof c === 'string') chars += c.length;
        else if (Array.isArray(c)) for (const b of c) chars += typeof (b as { text?: unknown }).text === 'string' ? (b as { text: string }).text.length : 0;
      }
    }
    try {
      return routeRequest(
        { has_schema: kind === 'encoder', prompt_chars: chars, max_tokens: h.max_tokens ?? 256, needs_tools: !!h.needs_tools },
        candidatesFromCatalog(entries),
        policy,
      ).model;
    } catch (e) {
      if (e instanceof DependencyUnavailableError) return null;
      throw e;
    }
  };
}
