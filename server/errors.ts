// THE one place that turns an error into an HTTP response body (spec section 7). Every route, and
// every failure before a route runs (413, 400, 401, 429), goes through `errorResponse`.
//   native/management routes: `detail` (422 adds `errors`); billing denials `code`/`message`/
//     `resolution_url`; 429 `detail`/`code`/`scope` + Retry-After/X-RateLimit-* headers;
//     unhandled 500 `error`/`message` (the cause is logged, never sent).
//   OpenAI-style routes (/v1/chat/completions, /v1/completions, /v1/responses, /v1/embeddings,
//     /v1/models) and any request with the `messages-version` header: the compat envelopes.
import { compatErrorResponse } from '../src/service/compat/errors.ts';
import { BillingError, RateLimitError, ServiceError, ValidationError, type ValidationIssue } from '../src/service/errors.ts';

export type ErrorStyle = 'native' | 'openai' | 'messages';

export interface ErrorResponse { status: number; headers: Record<string, string>; body: Record<string, unknown> }

export function errorResponse(err: unknown, style: ErrorStyle): ErrorResponse {
  if (style !== 'native') {
    if (err instanceof ServiceError || (err as { status?: unknown })?.status) return compatErrorResponse(style, err);
    return compatErrorResponse(style, { status: 500 });
  }
  if (!(err instanceof ServiceError)) {
    return { status: 500, headers: {}, body: { error: 'internal_error', message: 'An unexpected error occurred; it has been logged' } };
  }
  const headers = { ...err.headers };
  if (err instanceof BillingError) return { status: err.status, headers, body: { code: err.code, message: err.message, resolution_url: err.resolutionUrl } };
  if (err instanceof RateLimitError) return { status: 429, headers, body: { detail: err.message, code: err.code, scope: err.scope } };
  if (err instanceof ValidationError) return { status: 422, headers, body: { detail: err.message, errors: err.errors } };
  // every 422 carries `errors` (spec 7): a service's own 422 (the router's context-length check, a
  // compat validation read without the messages header) becomes one issue at its `param`
  if (err.status === 422) return { status: 422, headers, body: { detail: err.message, errors: [issueOf(err)] } };
  return { status: err.status, headers, body: { detail: err.message } };
}

const issueOf = (err: ServiceError): ValidationIssue => ({
  path: err.param ? `/${err.param.replace(/\./g, '/')}` : '', message: err.message, keyword: err.code ?? 'invalid',
});
