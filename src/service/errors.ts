// Domain errors of the services. Framework-free: each carries the HTTP status it maps to, a
// message, and the extra members its wire family needs (spec section 7). The ONE place that turns
// them into response bodies is server/errors.ts (native/management routes) and
// src/service/compat/errors.ts (OpenAI-style / messages-style bodies); both read
// `status`, `message`, `code`, `param` and `headers` from these objects.

export interface ValidationIssue {
  /** JSON pointer of the offending value ('' = the whole body), e.g. '/threshold' */
  path: string;
  message: string;
  /** ajv keyword or a service rule name */
  keyword?: string;
}

export class ServiceError extends Error {
  readonly status: number;
  readonly code: string | null;
  readonly param: string | null;
  /** extra response headers (Retry-After, X-RateLimit-*) */
  readonly headers: Record<string, string>;
  constructor(status: number, message: string, opts: { code?: string | null; param?: string | null; headers?: Record<string, string> } = {}) {
    super(message);
    this.name = new.target.name;
    this.status = status;
    this.code = opts.code ?? null;
    this.param = opts.param ?? null;
    this.headers = opts.headers ?? {};
  }
}

/** 400: invalid JSON, wrong-typed query or path parameter, key in the query string. */
export class BadRequestError extends ServiceError {
  constructor(message: string, param: string | null = null) { super(400, message, { param, code: 'bad_request' }); }
}
/** 401: missing/invalid/revoked/expired key, blocked account, no session. */
export class UnauthorizedError extends ServiceError {
  constructor(message = 'Missing or invalid API key') { super(401, message, { code: 'unauthorized' }); }
}
/** 403 that is not a billing denial (key creation with an API key, CSRF). */
export class ForbiddenError extends ServiceError {
  constructor(message: string) { super(403, message, { code: 'forbidden' }); }
}
export class NotFoundError extends ServiceError {
  constructor(message: string) { super(404, message, { code: 'not_found' }); }
}
/** 409: exists but cannot be served now (training-only model, deployment provisioning, state conflicts). */
export class ConflictError extends ServiceError {
  constructor(message: string) { super(409, message, { code: 'conflict' }); }
}
export class PayloadTooLargeError extends ServiceError {
  constructor(limitBytes: number) { super(413, `Request body exceeds the limit of ${limitBytes} bytes`, { code: 'payload_too_large' }); }
}
/** 422 with the list of issues (`errors` in the body). */
export class ValidationError extends ServiceError {
  readonly errors: ValidationIssue[];
  constructor(message: string, errors: ValidationIssue[] = []) {
    super(422, message, { code: 'validation_error', param: errors[0]?.path ? errors[0].path.replace(/^\//, '').replace(/\//g, '.') : null });
    this.errors = errors;
  }
}
/** 425: an on-demand model is pulling or loading; honour Retry-After. */
export class WarmingError extends ServiceError {
  readonly retryAfterS: number;
  constructor(message: string, retryAfterS: number) {
    super(425, message, { code: 'model_warming', headers: { 'Retry-After': String(Math.max(1, Math.ceil(retryAfterS))) } });
    this.retryAfterS = retryAfterS;
  }
}
/** 451: model blocked in the account's region. */
export class RegionBlockedError extends ServiceError {
  constructor(message: string) { super(451, message, { code: 'region_blocked' }); }
}
/** 503: a dependency the request needs is down (runtime, model source, billing verification). */
export class DependencyUnavailableError extends ServiceError {
  constructor(message: string, retryAfterS?: number) {
    super(503, message, { code: 'dependency_unavailable', headers: retryAfterS ? { 'Retry-After': String(Math.ceil(retryAfterS)) } : {} });
  }
}
/**
 * A runtime's "overloaded" (status 529: the decoder's queue is full, or every inference node holding the model is at
 * capacity) as every endpoint but /v1/messages answers it (spec 7: 529 is /v1/messages only): 503 with Retry-After.
 * Any other error is returned as it is.
 */
export function overloadedAsUnavailable(err: unknown): unknown {
  const e = err as { status?: number; message?: string } | null;
  if (e?.status !== 529) return err;
  return new DependencyUnavailableError(`The model is overloaded: ${e.message ?? 'queue full'}; retry shortly`, 1);
}

/** 529: the scheduler's queue is full (messages-style overloaded_error). */
export class OverloadedError extends ServiceError {
  constructor(message = 'Overloaded') { super(529, message, { code: 'overloaded' }); }
}

export type BillingCode = 'out_of_credits' | 'direct_model_requires_credits' | 'credit_ceiling_reached' | 'card_required';

/** 402/403 billing denial: body `code`, `message`, `resolution_url`. Never clears by waiting. */
export class BillingError extends ServiceError {
  readonly resolutionUrl: string;
  constructor(code: BillingCode, message: string, resolutionUrl: string) {
    super(code === 'out_of_credits' || code === 'direct_model_requires_credits' ? 402 : 403, message, { code });
    this.resolutionUrl = resolutionUrl;
  }
}

export type RateLimitScope = 'ip' | 'team' | 'key' | 'user';

/** 429: body `detail`, `code`, `scope`; headers Retry-After, X-RateLimit-Scope, X-RateLimit-Code (+ Limit/Remaining/Reset). */
export class RateLimitError extends ServiceError {
  readonly scope: RateLimitScope;
  readonly retryAfterS: number;
  constructor(code: string, scope: RateLimitScope, retryAfterS: number, limit: number, windowS: number) {
    const retry = String(Math.max(1, Math.ceil(retryAfterS)));
    super(429, `Rate limit exceeded: ${limit} requests per ${windowS} seconds (${scope} scope); retry after ${retry} s`, {
      code,
      headers: {
        'Retry-After': retry,
        'X-RateLimit-Scope': scope,
        'X-RateLimit-Code': code,
        'X-RateLimit-Limit': String(limit),
        'X-RateLimit-Remaining': '0',
        'X-RateLimit-Reset': retry,
      },
    });
    this.scope = scope;
    this.retryAfterS = retryAfterS;
  }
}
