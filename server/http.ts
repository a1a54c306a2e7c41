// uWebSockets.js response plumbing: status lines, corked JSON replies, a body reader with a size
// limit, and ResponseStream (chunked / SSE writes with onWritable back-pressure and onAborted
// cancellation) for the streaming endpoints.
import { STATUS_CODES } from 'node:http';
import type { HttpResponse } from '@trufflesuite/uws-js-unofficial';
import { PayloadTooLargeError } from '../src/service/errors.ts';
import { RATE_HEADER_NAMES, rateHeaderValues, type RateVerdict } from '../src/service/ratelimit.ts';

const STATUS_LINES = new Map<number, string>();
/** `200 OK`; computed once per status */
export function statusLine(code: number): string {
  let line = STATUS_LINES.get(code);
  if (line === undefined) {
    line = `${code} ${STATUS_CODES[code] ?? (code === 425 ? 'Too Early' : code === 529 ? 'Overloaded' : 'Unknown')}`;
    STATUS_LINES.set(code, line);
  }
  return line;
}

const JSON_HEADERS: Record<string, string> = { 'Content-Type': 'application/json' };

/**
 * The value for one writeHeader(X-RateLimit-Limit, value) call that writes the four X-RateLimit-*
 * lines and then `more` (the response's own headers): uWS writes `name: value\r\n` as given, so the
 * bytes are those of one call per line. Each writeHeader call crosses into C++ and converts its
 * strings (about 0.2 us each hot, several times that on a loaded CPU; 0.3 vs 1.0 us for five lines
 * in a uWS handler); a reply has five or more. The bytes are exactly those of separate calls
 * (uWS checks no value either way): a header value must hold no CR or LF, as before.
 */
function rateLines(rate: RateVerdict, more: Record<string, string> | null): string {
  let s = `${rate.limit}\r\nX-RateLimit-Remaining: ${rate.remaining}\r\nX-RateLimit-Reset: ${rate.resetS}`
    + `\r\nX-RateLimit-Scope: ${rate.scope}`;
  if (more !== null) for (const k in more) s += `\r\n${k}: ${more[k]}`;
  return s;
}

/** `h` has a header `name`, whatever its case (names of another length are not lower-cased to compare) */
export function hasName(h: Record<string, string>, name: string): boolean {
  for (const k in h) if (k.length === name.length && (k === name || k.toLowerCase() === name.toLowerCase())) return true;
  return false;
}

/** `h` has an X-RateLimit-* header, whatever its case */
function hasRateName(h: Record<string, string>): boolean {
  for (const k in h) {
    if (k.length > 12 && (k.charCodeAt(0) | 32) === 120 && k.toLowerCase().startsWith('x-ratelimit-')) return true;
  }
  return false;
}

/**
 * One in-flight exchange: wraps the uWS response, tracks abort, owns the AbortController. uWS needs
 * an abort handler only on a response that outlives the request handler's call: `armAbort()`
 * registers it when the exchange goes asynchronous (a request answered synchronously needs none).
 */
export class Exchange {
  aborted = false;
  done = false;
  /** created on first use of `signal` (most requests never read it) */
  private controller: AbortController | null = null;
  // allocated on first use: a plain JSON exchange needs none of them
  private writableWaiters: Array<() => void> | null = null;
  private abortHandlers: Array<() => void> | null = null;
  /** headers every response of this exchange carries (set by the handler) */
  extraHeaders: Record<string, string> | null = null;
  /** the binding rate limit: its X-RateLimit-* headers go on every response of this exchange */
  rate: RateVerdict | null = null;
  private armed = false;
  /** Set-Cookie values */
  cookies: string[] | null = null;
  status = 0;
  /**
   * uWS corks the socket while the route handler's synchronous part runs, so a reply written there
   * needs no cork call (nor its closure); the router clears this when that part ends
   */
  corked = true;

  constructor(readonly res: HttpResponse) {}

  /** from now on a client disconnect aborts the exchange (call before the request handler returns) */
  armAbort(): void {
    if (this.armed) return;
    this.armed = true;
    this.res.onAborted(() => {
      this.aborted = true;
      this.controller?.abort(new Error('client disconnected'));
      if (this.writableWaiters) for (const w of this.writableWaiters.splice(0)) w();
      if (this.abortHandlers) for (const h of this.abortHandlers.splice(0)) h();
    });
  }

  /** add headers every response of this exchange carries */
  addHeaders(h: Record<string, string>): void {
    const extra = this.extraHeaders;
    if (extra === null) { this.extraHeaders = { ...h }; return; }
    for (const k in h) {
      // one value per header name, whatever its case: the last one added wins
      const lower = k.toLowerCase();
      for (const e in extra) if (e !== k && e.toLowerCase() === lower) delete extra[e];
      extra[k] = h[k]!;
    }
  }

  /** aborted when the client disconnects */
  get signal(): AbortSignal {
    if (!this.controller) {
      this.controller = new AbortController();
      if (this.aborted) this.controller.abort(new Error('client disconnected'));
    }
    return this.controller.signal;
  }
  onAbort(fn: () => void): void { if (this.aborted) fn(); else (this.abortHandlers ??= []).push(fn); }
  addCookie(cookie: string): void { (this.cookies ??= []).push(cookie); }

  private writeHead(status: number, headers: Record<string, string>): void {
    this.status = status;
    const res = this.res;
    // uWS writes `200 OK` itself when no status was written: one call fewer for most replies
    if (status !== 200) res.writeStatus(statusLine(status));
    const extra = this.extraHeaders;
    const rate = this.rate;
    // one value per header name; the response's own headers override the exchange's
    const own = headers === JSON_HEADERS ? null : headers;
    let ownWritten = false;
    if (rate !== null && (own === null || !hasRateName(own)) && (extra === null || !hasRateName(extra))) {
      // nothing overrides them (the usual case): the four lines, and the response's own headers when no
      // exchange header must come between, in one writeHeader call, which costs several times the bytes it
      // writes (see rateLines)
      ownWritten = extra === null;
      res.writeHeader(RATE_HEADER_NAMES[0], rateLines(rate, ownWritten ? headers : null));
    } else if (rate !== null) {
      const values = rateHeaderValues(rate);
      for (let i = 0; i < RATE_HEADER_NAMES.length; i++) {
        const name = RATE_HEADER_NAMES[i]!;
        if ((own !== null && hasName(own, name)) || (extra !== null && hasName(extra, name))) continue;
        res.writeHeader(name, values[i]!);
      }
    }
    if (extra !== null) for (const k in extra) if (own === null || !hasName(own, k)) res.writeHeader(k, extra[k]!);
    if (!ownWritten) for (const k in headers) res.writeHeader(k, headers[k]!);
    if (this.cookies) for (const c of this.cookies) res.writeHeader('Set-Cookie', c);
  }

  /** a complete response; no-op after abort or a previous end */
  send(status: number, body: string | Uint8Array | null, headers: Record<string, string> = {}, closeConnection = false): void {
    if (this.aborted || this.done) return;
    this.done = true;
    if (this.corked) this.end(status, body, headers, closeConnection);
    else this.res.cork(() => this.end(status, body, headers, closeConnection));
  }

  private end(status: number, body: string | Uint8Array | null, headers: Record<string, string>, close: boolean): void {
    this.writeHead(status, headers);
    if (body === null) this.res.endWithoutBody(0, close);
    else this.res.end(body, close);
  }

  json(status: number, value: unknown, headers?: Record<string, string>, closeConnection = false): void {
    if (status === 204) return this.send(status, null, headers, closeConnection);
    this.send(status, JSON.stringify(value), headers ? { 'Content-Type': 'application/json', ...headers } : JSON_HEADERS, closeConnection);
  }

  /** start a streamed response (chunked transfer) */
  stream(status: number, headers: Record<string, string>): ResponseStream {
    const s = new ResponseStream(this);
    if (!this.aborted && !this.done) this.res.cork(() => this.writeHead(status, headers));
    return s;
  }

  /** resolves when uWS has drained its buffer (or the client went away) */
  waitWritable(): Promise<void> {
    return new Promise((resolve) => {
      if (this.aborted) return resolve();
      const waiters = (this.writableWaiters ??= []);
      const first = waiters.length === 0;
      waiters.push(resolve);
      if (first) {
        this.res.onWritable(() => {
          for (const w of waiters.splice(0)) w();
          return true;
        });
      }
    });
  }
}

/**
 * A streamed response. `write` resolves once the chunk is accepted; when uWS reports
 * back-pressure it waits for onWritable before resolving, so a slow reader never makes the
 * server buffer more than one chunk. After a client disconnect, writes resolve immediately and
 * `signal` is aborted (cancel the generation with it).
 */
export class ResponseStream {
  constructor(private readonly ex: Exchange) {}
  get signal(): AbortSignal { return this.ex.signal; }
  get closed(): boolean { return this.ex.aborted || this.ex.done; }
  onAbort(fn: () => void): void { this.ex.onAbort(fn); }

  async write(chunk: string | Uint8Array): Promise<void> {
    if (this.closed) return;
    let ok = true;
    this.ex.res.cork(() => { ok = this.ex.res.write(chunk); });
    if (!ok) await this.ex.waitWritable();
  }

  /** one server-sent event: `event:` line when named, `data: <json>` and a blank line */
  sse(data: unknown, event?: string): Promise<void> {
    const payload = typeof data === 'string' ? data : JSON.stringify(data);
    return this.write(`${event ? `event: ${event}\n` : ''}data: ${payload}\n\n`);
  }

  end(chunk?: string | Uint8Array): void {
    if (this.closed) return;
    this.ex.done = true;
    this.ex.res.cork(() => this.ex.res.end(chunk ?? ''));
  }
}

export const SSE_HEADERS = { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache', 'X-Accel-Buffering': 'no' };

/** Read the request body up to `limit` bytes; rejects with 413 past it (the reader stops at once). */
export function readBody(ex: Exchange, limit: number, declaredLength: number | null): Promise<Uint8Array> {
  return new Promise((resolve, reject) => {
    if (declaredLength !== null && declaredLength > limit) return reject(new PayloadTooLargeError(limit));
    ex.armAbort();
    const parts: Buffer[] = [];
    let size = 0;
    let failed = false;
    ex.onAbort(() => { if (!failed) { failed = true; reject(new Error('client disconnected')); } });
    ex.res.onData((ab, isLast) => {
      if (failed) return;
      size += ab.byteLength;
      if (size > limit) { failed = true; return reject(new PayloadTooLargeError(limit)); }
      parts.push(Buffer.from(ab.slice(0))); // uWS reuses the ArrayBuffer: copy
      if (isLast) resolve(parts.length === 1 ? parts[0] : Buffer.concat(parts));
    });
  });
}
