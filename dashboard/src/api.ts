// The dashboard's one door to the server: the same JSON API the SDKs call, authenticated by the
// HttpOnly session cookie (sent by the browser) and, on every state change, the X-CSRF-Token header.
// The CSRF token lives in this module's memory only (never localStorage, never a URL); a reload gets
// it again from GET /auth/session.

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly body: unknown,
  ) {
    super(message);
  }
}

let csrf: string | null = null;
let onSignedOut: ((why: string) => void) | null = null;

export function setCsrf(token: string | null): void {
  csrf = token;
}
/** called when the API answers 401 to a session call: the session expired or was signed out elsewhere */
export function onSessionLost(fn: (why: string) => void): void {
  onSignedOut = fn;
}

/** the API's own words for an error, whatever the body family (spec section 7) */
export function errorMessage(body: unknown, status: number): string {
  const b = body as Record<string, any> | null;
  if (b && typeof b === 'object') {
    if (typeof b.detail === 'string') return b.detail;
    if (typeof b.message === 'string') return b.message;
    if (b.error && typeof b.error.message === 'string') return b.error.message;
  }
  if (typeof body === 'string' && body) return body;
  return `HTTP ${status}`;
}

export interface CallOptions {
  body?: unknown;
  query?: Record<string, unknown>;
  key?: string;
  signal?: AbortSignal;
}

export function withQuery(path: string, query?: Record<string, unknown>): string {
  if (!query) return path;
  const sp = new URLSearchParams();
  for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null && v !== '') sp.set(k, String(v));
  const s = sp.toString();
  return s ? `${path}?${s}` : path;
}

/** headers of a call: the CSRF token for state changes, or an API key (the playground's) */
export function authHeaders(method: string, key?: string): Record<string, string> {
  const h: Record<string, string> = {};
  if (key) h['X-API-Key'] = key;
  else if (method !== 'GET' && csrf) h['X-CSRF-Token'] = csrf;
  return h;
}

export async function api<T = any>(method: string, path: string, opts: CallOptions = {}): Promise<T> {
  const headers = authHeaders(method, opts.key);
  if (opts.body !== undefined) headers['Content-Type'] = 'application/json';
  let r: Response;
  try {
    r = await fetch(withQuery(path, opts.query), {
      method,
      headers,
      credentials: 'same-origin',
      signal: opts.signal,
      body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
    });
  } catch (e) {
    if ((e as Error).name === 'AbortError') throw e;
    throw new ApiError(0, `The server cannot be reached (${(e as Error).message})`, null);
  }
  const text = await r.text();
  let body: unknown = text;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    /* not JSON: keep the text */
  }
  if (!r.ok) {
    const msg = errorMessage(body, r.status);
    if (r.status === 401 && !opts.key && !path.startsWith('/auth/')) onSignedOut?.(msg);
    throw new ApiError(r.status, msg, body);
  }
  return body as T;
}

/** reads a server-sent-event response (POST streaming or GET logs) event by event */
export async function* sse(res: Response, signal?: AbortSignal): AsyncGenerator<{ event: string; data: string }> {
  if (!res.body) return;
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  try {
    for (;;) {
      if (signal?.aborted) return;
      const { value, done } = await reader.read();
      if (done) return;
      buf += value;
      let i: number;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const raw = buf.slice(0, i);
        buf = buf.slice(i + 2);
        let event = 'message';
        const data: string[] = [];
        for (const line of raw.split('\n')) {
          if (line.startsWith('event:')) event = line.slice(6).trim();
          else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
        }
        if (data.length) yield { event, data: data.join('\n') };
      }
    }
  } finally {
    reader.releaseLock();
  }
}
