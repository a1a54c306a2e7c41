// Errors of the compatibility endpoints and their two wire shapes (spec section 7):
//   OpenAI-style  {error: {message, type, param, code}}   on /v1/chat/completions, /v1/completions,
//                                                          /v1/responses, /v1/embeddings, /v1/models
//   messages-style {type: "error", error: {type, message}} on /v1/messages when the request carries
//                                                          the `messages-version` header (or the
//                                                          SDK's `anthropic-version` spelling of it)
// Framework-free: routes call `compatErrorResponse(style, err)` and write {status, headers, body}.
import { ServiceError } from '../errors.ts';

export type ErrorStyle = 'openai' | 'messages';

/**
 * An error raised by the compatibility layer. It is a ServiceError, so the native error family
 * (`detail`) renders it too (e.g. /v1/messages without the version header).
 */
export class CompatError extends ServiceError {
  /** overrides the status-derived error type */
  readonly type: string | null;
  constructor(
    status: number,
    message: string,
    opts: { param?: string | null; code?: string | null; type?: string; headers?: Record<string, string> } = {},
  ) {
    super(status, message, { param: opts.param ?? null, code: opts.code ?? null, headers: opts.headers ?? {} });
    this.name = 'CompatError';
    this.type = opts.type ?? null;
  }
}

/** 422: a field of the request has the wrong type, is missing, or is out of range. */
export function invalidParam(param: string, message: string, code = 'invalid_value'): CompatError {
  return new CompatError(422, message, { param, code });
}

// OpenAI's `type` values by status (the public API's vocabulary, plus the spec's extra statuses).
const OPENAI_TYPES: Record<number, string> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  402: 'insufficient_quota',
  403: 'permission_error',
  404: 'not_found_error',
  409: 'conflict_error',
  413: 'invalid_request_error',
  422: 'invalid_request_error',
  425: 'model_warming',
  429: 'rate_limit_error',
  451: 'permission_error',
  500: 'server_error',
  503: 'service_unavailable',
  529: 'overloaded_error',
};

// messages-style `error.type` values by status.
const MESSAGES_TYPES: Record<number, string> = {
  400: 'invalid_request_error',
  401: 'authentication_error',
  402: 'billing_error',
  403: 'permission_error',
  404: 'not_found_error',
  409: 'invalid_request_error',
  413: 'request_too_large',
  422: 'invalid_request_error',
  425: 'overloaded_error',
  429: 'rate_limit_error',
  451: 'permission_error',
  500: 'api_error',
  503: 'api_error',
  529: 'overloaded_error',
};

export function openaiErrorType(status: number): string {
  return OPENAI_TYPES[status] ?? (status >= 500 ? 'server_error' : 'invalid_request_error');
}
export function messagesErrorType(status: number): string {
  return MESSAGES_TYPES[status] ?? (status >= 500 ? 'api_error' : 'invalid_request_error');
}

export interface ErrorResponse {
  status: number;
  headers: Record<string, string>;
  body: Record<string, unknown>;
}

/**
 * The wire form of an error for a compatibility route. `err` may be a CompatError or any object
 * carrying `status`, `message` and optionally `code`/`param`/`headers` (the service core's domain
 * errors have that shape); anything else is an unhandled 500 whose message is not leaked.
 */
export function compatErrorResponse(style: ErrorStyle, err: unknown): ErrorResponse {
  const e = err as { status?: unknown; statusCode?: unknown; message?: unknown; code?: unknown; param?: unknown; headers?: unknown; type?: unknown; resolutionUrl?: unknown };
  const rawStatus = typeof e?.status === 'number' ? e.status : typeof e?.statusCode === 'number' ? e.statusCode : 500;
  const status = rawStatus >= 400 && rawStatus <= 599 ? rawStatus : 500;
  // a deliberate error (CompatError, the services' ServiceError) carries a numeric status; anything
  // else is unhandled and its message (possibly internal detail) is not sent
  const known = typeof e?.status === 'number';
  const message = known && typeof e?.message === 'string' ? e.message : 'The server had an error while processing your request.';
  const code = typeof e?.code === 'string' ? e.code : null;
  const param = typeof e?.param === 'string' ? e.param : null;
  const headers = e && typeof e.headers === 'object' && e.headers !== null ? { ...(e.headers as Record<string, string>) } : {};
  const explicitType = err instanceof CompatError && err.type ? err.type : null;
  if (style === 'messages') {
    const error: Record<string, unknown> = { type: explicitType ?? messagesErrorType(status), message };
    if (typeof e?.resolutionUrl === 'string') error.resolution_url = e.resolutionUrl;
    return { status, headers, body: { type: 'error', error } };
  }
  const error: Record<string, unknown> = { message, type: explicitType ?? openaiErrorType(status), param, code: code ?? (status === 529 ? 'overloaded' : null) };
  // billing denials keep their resolution link (spec section 7) inside the envelope
  if (typeof e?.resolutionUrl === 'string') error.resolution_url = e.resolutionUrl;
  return { status, headers, body: { error } };
}

/** Whether a /v1/messages request asked for messages-style error bodies. */
export function wantsMessagesErrors(getHeader: (name: string) => string | undefined): boolean {
  return !!(getHeader('messages-version') || getHeader('anthropic-version'));
}
