// The internal protocol between API processes (runtime-remote.ts) and inference nodes (node-server.ts):
// JSON over HTTP on the node's own port, every request authenticated by the shared node secret
// (LOOM_NODE_SECRET) as `Authorization: Bearer <secret>`; nothing else (a customer's API key, a
// session) opens it. One POST per ModelRuntime method; `generate` answers NDJSON, one GenerateEvent
// per line, after the first event is known (an error before it is the reply's status and JSON body,
// so the API can try another node on a 529). Errors cross as their name, message and the members the
// services read (status, code, path, limit) and are rebuilt on the API side (errorFromWire), so the
// compat and inference services map a remote error exactly as a local one.
import { createHash, timingSafeEqual } from 'node:crypto';

export const NODE_PATHS = {
  generate: '/internal/v1/generate',
  cancel: '/internal/v1/cancel',
  extract: '/internal/v1/extract',
  embed: '/internal/v1/embed',
  countTokens: '/internal/v1/count-tokens',
  templateTools: '/internal/v1/template-tools',
  warm: '/internal/v1/warm',
  unload: '/internal/v1/unload',
  status: '/internal/v1/status',
} as const;

/** An error as it crosses the wire. */
export interface WireError {
  name: string;
  message: string;
  status?: number;
  code?: string;
  path?: string;
  limit?: string;
}

/** A `generate` stream line: a runtime event, or the error that ended the generation. */
export type WireLine = { type: 'start' | 'delta' | 'done'; [k: string]: unknown } | { type: 'error'; error: WireError };

export function errorToWire(err: unknown): WireError {
  const e = (err ?? {}) as Partial<WireError> & { message?: string };
  const out: WireError = { name: typeof e.name === 'string' ? e.name : 'Error', message: String(e.message ?? err) };
  if (typeof e.status === 'number') out.status = e.status;
  if (typeof e.code === 'string') out.code = e.code;
  if (typeof e.path === 'string') out.path = e.path;
  if (typeof e.limit === 'string') out.limit = e.limit;
  return out;
}

/** The error the node raised, rebuilt: a RangeError stays one (the services test `instanceof`). */
export function errorFromWire(w: WireError): Error {
  const err = w.name === 'RangeError' ? new RangeError(w.message) : new Error(w.message);
  if (w.name !== 'RangeError') Object.defineProperty(err, 'name', { value: w.name, enumerable: false, writable: true });
  const extra: Record<string, unknown> = {};
  for (const k of ['status', 'code', 'path', 'limit'] as const) if (w[k] !== undefined) extra[k] = w[k];
  return Object.assign(err, extra);
}

const digest = (s: string) => createHash('sha256').update(s).digest();

/** A checker of `Authorization: Bearer <secret>` in constant time (over digests, so lengths leak nothing). */
export function secretChecker(secret: string): (authorization: string | undefined) => boolean {
  const want = digest(secret);
  return (authorization) => {
    if (!authorization || !authorization.startsWith('Bearer ')) return false;
    return timingSafeEqual(digest(authorization.slice(7)), want);
  };
}

/** The shortest node secret accepted (a shared secret is the only thing guarding the node's port). */
export const MIN_SECRET_LENGTH = 16;
