// Route registration over uWebSockets.js. Each route is a thin adapter: this module does the
// common work in one order for every request —
//   edge rate limit (per IP) → key-in-query rejection → path/query params (400 wrong type, 422 range)
//   → IP default limit (routes without an override) → authentication (key / session, CSRF)
//   → per-endpoint limit (team → key → user → IP) → body (413 size, 400 JSON, 422 ajv)
//   → handler → JSON reply — and maps every thrown error through server/errors.ts.
import type { HttpRequest, HttpResponse, TemplatedApp } from '@trufflesuite/uws-js-unofficial';
import { performance } from 'node:perf_hooks';
import { Ajv, type ValidateFunction } from 'ajv';
import addFormatsMod from 'ajv-formats';
import type { Logger } from 'pino';
import type { Services } from '../src/service/index.ts';
import type { Principal } from '../src/service/auth.ts';
import { wantsMessagesErrors } from '../src/service/compat/errors.ts';
import { BadRequestError, DependencyUnavailableError, ForbiddenError, UnauthorizedError, ValidationError, type ValidationIssue } from '../src/service/errors.ts';
import { badJsonValue, MAX_JSON_DEPTH } from '../src/service/json-input.mjs';
import { PEER_HEADER } from './guard.ts';

export { MAX_JSON_DEPTH };
import { errorResponse, type ErrorStyle } from './errors.ts';
import { createAccessLog, type AccessFields, type AccessLog } from './log.ts';
import { Exchange, hasName, readBody, type ResponseStream } from './http.ts';

const addFormats = ((addFormatsMod as unknown as { default?: typeof addFormatsMod }).default ?? addFormatsMod) as unknown as (a: Ajv) => void;
export const ajv = new Ajv({ allErrors: true, strict: false, coerceTypes: false });
addFormats(ajv);

export type Method = 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE';
export type AuthMode = 'key' | 'session' | 'any' | 'none';

export interface QueryParam {
  type: 'string' | 'number' | 'integer' | 'boolean' | 'datetime';
  min?: number;
  max?: number;
  enum?: string[];
  default?: unknown;
}

export interface Ctx<B = any, Q = any, P = any> {
  services: Services;
  principal: Principal;
  body: B;
  query: Q;
  params: P;
  /** lower-cased request headers */
  headers: Record<string, string>;
  ip: string;
  /** aborted when the client disconnects */
  signal: AbortSignal;
  /** the request path (without the query string) */
  url: string;
  log: Logger;
  /** add a header to the response */
  setHeader(name: string, value: string): void;
  setCookie(cookie: string): void;
  /** switch to a streamed response (SSE); the handler then returns nothing */
  stream(status: number, headers: Record<string, string>): ResponseStream;
}

/** A non-200 or header-carrying result. Handlers may also return a plain value (200 JSON). */
export class Reply {
  constructor(readonly status: number, readonly body?: unknown, readonly headers: Record<string, string> = {}) {}
}
export const reply = (status: number, body?: unknown, headers?: Record<string, string>) => new Reply(status, body, headers);

export interface RouteDef {
  method: Method;
  /** uWS pattern: `/projects/:id`, `/gliner-2/*` */
  path: string;
  auth: AuthMode;
  /** error body family for this route; the `messages-version` header always selects 'messages' */
  errors?: ErrorStyle;
  /** ajv JSON schema of the body (422 with `errors` on failure) */
  body?: object;
  query?: Record<string, QueryParam>;
  /** path params: 'uuid' (400 when malformed) or 'string' */
  params?: Record<string, 'uuid' | 'string'>;
  /** body size limit for this route (413), default config.maxBodyBytes */
  maxBodyBytes?: number | ((cfg: Services['config']) => number);
  /** the handler gets the raw body bytes (a Buffer) instead of parsed JSON (file uploads) */
  rawBody?: boolean;
  /** false: exempt from the edge and per-IP rate limits (GET /health: probes behind a proxy share one IP) */
  rateLimit?: false;
  /** metrics/log label, default the pattern */
  name?: string;
  handler(ctx: Ctx): Promise<unknown> | unknown;
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const KEY_QUERY_NAMES = new Set(['api_key', 'apikey', 'api-key', 'key', 'x-api-key', 'x_api_key', 'token', 'access_token', 'secret_key']);

/**
 * The request path must be valid percent-encoded UTF-8: a bad escape (`%ZZ`) or bytes that are not
 * UTF-8 (`%ED%A0%80`, a lone surrogate) are a 400 for every route, wildcard routes included, so
 * every later decodeURIComponent of a segment of it cannot throw.
 */
function checkPathEncoding(url: string): void {
  if (!url.includes('%')) return;
  try { decodeURIComponent(url); } catch {
    throw new BadRequestError('The request path is not valid percent-encoded UTF-8', 'path');
  }
}

function parseQuery(raw: string, spec: Record<string, QueryParam> | undefined): Record<string, unknown> {
  const sp = raw === '' ? null : new URLSearchParams(raw);
  const out: Record<string, unknown> = {};
  const issues: ValidationIssue[] = [];
  for (const name in spec) {
    const s = spec[name]!;
    const v = sp === null ? null : sp.get(name);
    if (v === null || v === '') { if (s.default !== undefined) out[name] = s.default; continue; }
    let val: unknown;
    switch (s.type) {
      case 'string': val = v; break;
      case 'boolean':
        if (v !== 'true' && v !== 'false') throw new BadRequestError(`Query parameter ${name} must be true or false`, name);
        val = v === 'true'; break;
      case 'integer': case 'number': {
        const n = Number(v);
        if (!/^-?\d+(\.\d+)?([eE][+-]?\d+)?$/.test(v.trim()) || !Number.isFinite(n) || (s.type === 'integer' && !Number.isInteger(n))) {
          throw new BadRequestError(`Query parameter ${name} must be ${s.type === 'integer' ? 'an integer' : 'a number'}`, name);
        }
        val = n; break;
      }
      case 'datetime': {
        const t = Date.parse(v);
        if (!/^\d{4}-\d{2}-\d{2}/.test(v) || !Number.isFinite(t)) throw new BadRequestError(`Query parameter ${name} must be an ISO 8601 date-time`, name);
        val = t; break;
      }
    }
    if (typeof val === 'number' && s.type !== 'datetime') {
      if (s.min !== undefined && val < s.min) issues.push({ path: `/${name}`, message: `must be >= ${s.min}`, keyword: 'minimum' });
      if (s.max !== undefined && val > s.max) issues.push({ path: `/${name}`, message: `must be <= ${s.max}`, keyword: 'maximum' });
    }
    if (s.enum && !s.enum.includes(String(val))) issues.push({ path: `/${name}`, message: `must be one of ${s.enum.join(', ')}`, keyword: 'enum' });
    out[name] = val;
  }
  if (issues.length) throw new ValidationError('Invalid query parameters', issues);
  return out;
}

const issuesOf = (v: ValidateFunction): ValidationIssue[] => (v.errors ?? []).map((e) => ({
  path: e.instancePath + (e.keyword === 'required' ? `/${(e.params as { missingProperty: string }).missingProperty}` : e.keyword === 'additionalProperties' ? `/${(e.params as { additionalProperty: string }).additionalProperty}` : ''),
  message: e.message ?? 'invalid', keyword: e.keyword,
}));

function describe(issues: ValidationIssue[]): string {
  const first = issues[0];
  return first ? `Invalid request: ${first.path || 'body'} ${first.message}` : 'Invalid request';
}

export interface AppState {
  draining: boolean;
  inflight: number;
  idle: Array<() => void>;
  /** uWS is reached only through server/guard.ts's proxy, which sends each client's address (X-Loom-Peer) */
  proxied?: boolean;
  /** the native guard's number for the connection being read (server/guard.ts's guardConnection) */
  connection?: (() => number) | null;
}

/** What every request of one route shares: compiled once at registration. */
interface RouteRuntime {
  route: RouteDef;
  services: Services;
  log: Logger;
  accessLog: AccessLog;
  /** this route's constant access-log fields */
  logFields: AccessFields;
  state: AppState;
  /** the body's ajv validator: compiled on the route's first request with a body (`validatorOf`), not at start */
  validate: ValidateFunction | null | undefined;
  schemaId: string;
  paramNames: string[];
  label: string;
  /** this route's request metrics */
  observe: (status: number, seconds: number) => void;
  limit: number;
  hasBody: boolean;
  /** false: exempt from the edge and per-IP limits */
  limited: boolean;
  /** the endpoint group of a fixed path, found once; undefined: depends on the request's path */
  fixedGroup: string | null | undefined;
}

// the client's address by the native guard's connection number (never reused): uWS gives it as a new
// ArrayBuffer per call, which cost 3-7 us of server CPU per request under load (README, "HTTP pipeline")
const peers = new Map<number, string>();
const MAX_PEERS = 16_384;
/** the TCP peer's address as text, read from uWS once per connection where the native guard numbers them */
function peerAddress(res: HttpResponse, connection: (() => number) | null | undefined): string {
  const id = connection ? connection() : 0;
  if (id !== 0) {
    const known = peers.get(id);
    if (known !== undefined) return known;
  }
  const text = Buffer.from(res.getRemoteAddressAsText()).toString();
  if (id !== 0) {
    if (peers.size >= MAX_PEERS) peers.clear(); // connections closed long ago: read again when needed
    peers.set(id, text);
  }
  return text;
}

/** params / query of a route that declares none (frozen: shared by every request) */
const NO_PARAMS = Object.freeze({}) as Record<string, any>;

const isThenable = <T>(v: T | PromiseLike<T>): v is PromiseLike<T> =>
  typeof v === 'object' && v !== null && typeof (v as { then?: unknown }).then === 'function';

/**
 * One request through the pipeline (see the top of this file for the order). A request without a
 * body runs synchronously inside uWS's handler call up to the handler; when the handler returns a
 * plain value (or throws) it is answered there and then, with no promise, no microtask and no abort
 * handler; only a pending handler (or a body to read) makes the exchange asynchronous.
 */
class Run implements Ctx {
  readonly t0 = performance.now();
  readonly ex: Exchange;
  /** the live uWS request: valid only during uWS's handler call (null once the exchange is detached) */
  private req: HttpRequest | null;
  /** every request header, copied from `req` when a handler reads `headers` or the exchange detaches */
  private headerCopy: Record<string, string> | null = null;
  readonly url: string;
  readonly rawQuery: string;
  readonly rawParams: string[];
  /** the client's address, read from uWS when first needed (always before the exchange goes async) */
  private ipValue: string | null = null;
  private styleValue: ErrorStyle | null = null;
  /** null for routes without authentication (auth: 'none') */
  principal: Principal = null as unknown as Principal;
  params: Record<string, string> = NO_PARAMS;
  query: Record<string, unknown> = NO_PARAMS;
  body: any = undefined;

  constructor(readonly rt: RouteRuntime, res: HttpResponse, req: HttpRequest) {
    // everything from `req` must be read synchronously, before the first await
    const { route } = rt;
    this.req = req;
    const ex = (this.ex = new Exchange(res));
    this.url = req.getUrl();
    this.rawQuery = req.getQuery() ?? '';
    this.rawParams = rt.paramNames.length ? rt.paramNames.map((_, i) => req.getParameter(i) ?? '') : rt.paramNames;
    rt.state.inflight++;
    if (rt.hasBody) {
      // the body reader must be attached synchronously too
      this.detach();
      const length = this.header('content-length');
      const bodyP = readBody(ex, rt.limit, length !== undefined ? Number(length) : null);
      bodyP.catch(() => {});
      this.withBody(bodyP).then((out) => this.reply(out)).catch((err) => this.fail(err)).finally(() => this.finish());
      return;
    }
    try {
      // a shared (Redis) rate limit or an asynchronous store read makes the front asynchronous: the
      // request's headers, address and style are read from the live request before the first await
      const front = this.front();
      if (isThenable(front)) {
        this.detach();
        front.then(() => route.handler(this)).then((o) => this.reply(o)).catch((err) => this.fail(err))
          .finally(() => this.finish());
        return;
      }
      const out = route.handler(this);
      if (isThenable(out)) {
        this.detach();
        Promise.resolve(out).then((o) => this.reply(o)).catch((err) => this.fail(err)).finally(() => this.finish());
        return;
      }
      this.reply(out);
    } catch (err) {
      this.fail(err);
    }
    ex.corked = false;
    this.finish();
  }

  /** the request's headers (lower-cased names; the first of repeated ones), copied once */
  get headers(): Record<string, string> {
    let h = this.headerCopy;
    if (h === null) {
      const copy: Record<string, string> = {};
      this.req!.forEach((k, v) => { if (copy[k] === undefined) copy[k] = v; });
      h = this.headerCopy = copy;
    }
    return h;
  }

  /** one request header (lower-case name; the first of repeated ones), undefined when absent or empty */
  header(name: string): string | undefined {
    const v = this.headerCopy !== null ? this.headerCopy[name] : this.req!.getHeader(name);
    return v === '' ? undefined : v;
  }

  /** the error body family: the messages-style one when the client sent its version header */
  get style(): ErrorStyle {
    this.styleValue ??= wantsMessagesErrors((n) => this.header(n)) ? 'messages' : this.rt.route.errors ?? 'native';
    return this.styleValue;
  }

  get ip(): string {
    if (this.ipValue === null) {
      const { rt } = this;
      // behind the proxy guard the TCP peer is the proxy, which sends the client's address in
      // X-Loom-Peer (trusted only then; the proxy drops the header from clients)
      const peer = rt.state.proxied ? this.header(PEER_HEADER) ?? '' : peerAddress(this.ex.res, rt.state.connection);
      this.ipValue = (rt.services.config.trustProxy && this.header('x-forwarded-for')?.split(',')[0]?.trim()) || peer;
    }
    return this.ipValue;
  }

  /**
   * the exchange outlives uWS's handler call: read what only the live request can give (every
   * header, the address, the error style), watch for aborts
   */
  detach(): void {
    if (this.req === null) return;
    void this.headers;
    void this.ip;
    void this.style;
    this.req = null;
    this.ex.corked = false;
    this.ex.armAbort();
  }

  // the Ctx a handler gets is the Run itself: getters, so that the functions a handler may destructure
  // (setHeader, setCookie, stream) are created only when it reads them (tsx's keepNames also wraps
  // every named closure in an Object.defineProperty call, per request)
  get services(): Services { return this.rt.services; }
  get log(): Logger { return this.rt.log; }
  get signal(): AbortSignal { return this.ex.signal; }
  get setHeader(): (name: string, value: string) => void { return (n, v) => { this.ex.addHeaders({ [n]: v }); }; }
  get setCookie(): (cookie: string) => void { return (c) => { this.ex.addCookie(c); }; }
  get stream(): (status: number, headers: Record<string, string>) => ResponseStream {
    return (status, h) => this.ex.stream(status, h);
  }

  /**
   * the pipeline up to the body: limits, key-in-query, path and query params, authentication.
   * Synchronous with the in-memory rate limiter and a cached key (LMDB); a promise with the Redis
   * limiter or a store read (each step awaited where it stands, so checks and refusals keep their order).
   */
  front(): void | Promise<void> {
    const { rt } = this;
    if (rt.state.draining) throw new DependencyUnavailableError('Server is shutting down', 1);
    // the edge limit's headers only on refusal: the binding limit is reported below
    if (rt.limited) {
      const edge = rt.services.rateLimiter.edge(this.ip);
      if (isThenable(edge)) return edge.then(() => this.afterEdge());
    }
    return this.afterEdge();
  }

  /** key-in-query, path and query params, the IP default limit, then `authenticated` */
  afterEdge(): void | Promise<void> {
    const { rt, ex, url, rawQuery } = this;
    const { route, services } = rt;
    if (rawQuery !== '') {
      for (const [k, v] of new URLSearchParams(rawQuery)) {
        if (KEY_QUERY_NAMES.has(k.toLowerCase()) || v.startsWith('loom_sk_')) throw new BadRequestError('API keys must not be passed as query parameters; send the X-API-Key header', k);
      }
    }
    checkPathEncoding(url);
    const params: Record<string, string> = rt.paramNames.length ? {} : NO_PARAMS;
    for (let i = 0; i < rt.paramNames.length; i++) {
      const n = rt.paramNames[i];
      const raw = this.rawParams[i];
      const v = raw.includes('%') ? decodeURIComponent(raw) : raw;
      if (route.params?.[n] === 'uuid' && !UUID.test(v)) throw new BadRequestError(`Path parameter ${n} must be a UUID`, n);
      params[n] = v;
    }
    this.params = params;
    this.query = route.query ? parseQuery(rawQuery, route.query) : NO_PARAMS;
    const group = rt.fixedGroup !== undefined ? rt.fixedGroup : services.rateLimiter.endpointGroup(route.method, url);
    if (!group && rt.limited) {
      const rate = services.rateLimiter.ipDefault(this.ip);
      if (isThenable(rate)) return rate.then((r) => { ex.rate = r; return this.authenticated(group); });
      ex.rate = rate;
    }
    return this.authenticated(group);
  }

  /** the caller, then `admitted` */
  authenticated(group: string | null): void | Promise<void> {
    const principal = authenticate(this.rt.route, this, this.rt.services);
    if (isThenable(principal)) return principal.then((p) => this.admitted(p, group));
    return this.admitted(principal, group);
  }

  /** the rest of `front` once the caller is known: its endpoint rate limit (scoped by the principal) */
  private admitted(principal: Principal | null, group: string | null): void | Promise<void> {
    this.principal = principal as Principal;
    if (group) {
      const p = principal;
      const subject = { ip: this.ip, team_id: p?.team_id, key_id: p?.key_id, user_id: p?.user_id };
      const rate = this.rt.services.rateLimiter.endpoint(group, subject);
      if (isThenable(rate)) return rate.then((r) => { this.ex.rate = r; });
      this.ex.rate = rate;
    }
  }

  async withBody(bodyP: Promise<Uint8Array>): Promise<unknown> {
    const { rt } = this;
    const { route, services } = rt;
    await this.front();
    let body: unknown = undefined;
    const raw = await bodyP;
    const validate = validatorOf(rt);
    if (route.rawBody) body = Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength);
    else if (validate && raw.byteLength > services.config.workerParseBytes) {
      const r = await services.workers.parseValidate(raw, rt.schemaId, route.body!);
      if (!r.ok) {
        if (r.kind === 'json') throw new BadRequestError(`Malformed JSON body: ${r.message}`);
        throw new ValidationError(describe(r.errors ?? []), r.errors ?? []);
      }
      body = r.value;
    } else {
      const text = raw.byteLength ? Buffer.from(raw).toString('utf8') : '';
      if (text.trim() === '') body = route.body ? {} : undefined;
      else {
        try { body = JSON.parse(text); } catch (e) {
          throw new BadRequestError(`Malformed JSON body: ${(e as Error).message}`);
        }
        const bad = badJsonValue(body);
        if (bad) throw new ValidationError(describe([bad]), [bad]);
      }
      if (validate && !validate(body)) {
        const issues = issuesOf(validate);
        throw new ValidationError(describe(issues), issues);
      }
    }
    this.body = body;
    return route.handler(this);
  }

  reply(out: unknown): void {
    const ex = this.ex;
    if (ex.done || ex.aborted) return;
    if (out instanceof Reply) {
      const raw = typeof out.body === 'string' || out.body instanceof Uint8Array;
      if (raw && hasName(out.headers, 'content-type')) ex.send(out.status, out.body, out.headers);
      else ex.json(out.status, out.body ?? null, out.headers);
    }
    else if (out !== undefined) ex.json(200, out);
    else if (ex.status === 0) ex.json(204, null);
  }

  fail(err: unknown): void {
    const r = errorResponse(err, this.style);
    if (r.status === 500) this.rt.log.error({ route: this.rt.label, err: err instanceof Error ? { message: err.message, stack: err.stack } : String(err) }, 'unhandled error');
    // a request whose body we refused (413) is not read to the end: close the connection
    this.ex.json(r.status, r.body, r.headers, r.status === 413);
  }

  finish(): void {
    const { ex, rt } = this;
    if (!ex.done && !ex.aborted && ex.status !== 0) {
      // a stream the handler left open
      ex.done = true;
      ex.res.cork(() => ex.res.end());
    }
    rt.state.inflight--;
    const ms = performance.now() - this.t0;
    const status = ex.status || 499;
    rt.observe(status, ms / 1000);
    rt.accessLog.line(rt.logFields, status, Math.round(ms * 100), this.principal?.team_id, this.principal?.key_id);
    if (rt.state.inflight === 0 && rt.state.idle.length) for (const f of rt.state.idle.splice(0)) f();
  }
}

/**
 * A route's body validator, compiled once on first use: compiling every route's schema at start cost
 * ~0.35 CPU-s per process (26 schemas), paid by every server start and restart, most of whose routes
 * may never take a body; a route's first request pays its own ~15 ms instead.
 */
function validatorOf(rt: RouteRuntime): ValidateFunction | null {
  if (rt.validate === undefined) rt.validate = rt.route.body ? ajv.compile(rt.route.body) : null;
  return rt.validate;
}

/** mounts `routes` on `app`; returns the access log (flush it when the server closes) */
export function registerRoutes(app: TemplatedApp, routes: RouteDef[], services: Services, log: Logger, state: AppState): AccessLog {
  const cfg = services.config;
  const accessLog = createAccessLog(log);
  let schemaSeq = 0;
  for (const route of routes) {
    // a fixed path has one endpoint group, found once; a pattern's depends on the request's path
    const fixedPath = !route.path.includes(':') && !route.path.includes('*');
    const rt: RouteRuntime = {
      route, services, log, accessLog, logFields: accessLog.routeFields(route.method, route.name ?? route.path), state,
      validate: undefined,
      schemaId: `r${schemaSeq++}`,
      paramNames: [...route.path.matchAll(/:([A-Za-z_]+)/g)].map((m) => m[1]),
      label: route.name ?? route.path,
      observe: services.metrics.requestObserver(route.name ?? route.path, route.method),
      limit: (typeof route.maxBodyBytes === 'function' ? route.maxBodyBytes(cfg) : route.maxBodyBytes) ?? cfg.maxBodyBytes,
      hasBody: route.method !== 'GET',
      limited: route.rateLimit !== false,
      fixedGroup: fixedPath ? services.rateLimiter.endpointGroup(route.method, route.path) : undefined,
    };
    const m = route.method.toLowerCase() as 'get' | 'post' | 'put' | 'patch' | 'del';
    app[m === ('delete' as string) ? 'del' : m](route.path, (res: HttpResponse, req: HttpRequest) => { new Run(rt, res, req); });
  }
  return accessLog;
}

/** where the pipeline reads a request header (the live uWS request, or its copy once detached) */
interface Headers { header(name: string): string | undefined }

function bearer(h: Headers): string | null {
  const k = h.header('x-api-key');
  if (k) return k.trim();
  const a = h.header('authorization');
  if (a && /^bearer\s+/i.test(a)) return a.replace(/^bearer\s+/i, '').trim();
  return null;
}

function sessionToken(h: Headers): string | null {
  const c = h.header('cookie');
  if (!c) return null;
  for (const part of c.split(';')) {
    const [k, ...v] = part.trim().split('=');
    if (k === SESSION_COOKIE) return v.join('=');
  }
  return null;
}

export const SESSION_COOKIE = 'loom_session';

/** the caller: synchronous for a cached API key (see AuthService.authenticateKey), else a promise */
function authenticate(route: RouteDef, h: Headers, services: Services): Principal | null | Promise<Principal | null> {
  if (route.auth === 'none') return null;
  const key = bearer(h);
  if (key || route.auth === 'key') {
    if (route.auth !== 'session') return services.auth.authenticateKey(key);
    const refuse = () => {
      throw new ForbiddenError('This endpoint requires a dashboard session; API-key-authenticated calls cannot create API keys');
    };
    const p = services.auth.authenticateKey(key); // 401 for a bad key, else:
    return isThenable(p) ? p.then(refuse) : refuse();
  }
  return sessionPrincipal(route, h, services);
}

async function sessionPrincipal(route: RouteDef, h: Headers, services: Services): Promise<Principal | null> {
  if (route.auth === 'session') {
    const p = await services.auth.fromSession(sessionToken(h));
    if (!p) throw new UnauthorizedError('Dashboard session required: log in with POST /auth/login');
    // CSRF guards state changes; a safe method (GET /auth/session, which returns the token) needs none
    if (route.method !== 'GET') services.auth.checkCsrf(p, h.header('x-csrf-token') ?? null);
    return p;
  }
  // 'any': a dashboard session works too (CSRF on state changes)
  const p = await services.auth.fromSession(sessionToken(h));
  if (!p) throw new UnauthorizedError('Missing API key: send it in the X-API-Key header');
  if (route.method !== 'GET') services.auth.checkCsrf(p, h.header('x-csrf-token') ?? null);
  return p;
}
