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
import { badJsonValue } from '../src/service/json-input.mjs';
import { errorResponse, type ErrorStyle } from './errors.ts';
import { Exchange, readBody, type ResponseStream } from './http.ts';

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
  const sp = new URLSearchParams(raw);
  const out: Record<string, unknown> = {};
  const issues: ValidationIssue[] = [];
  for (const [name, s] of Object.entries(spec ?? {})) {
    const v = sp.get(name);
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

export interface AppState { draining: boolean; inflight: number; idle: Array<() => void> }

export function registerRoutes(app: TemplatedApp, routes: RouteDef[], services: Services, log: Logger, state: AppState): void {
  const cfg = services.config;
  let schemaSeq = 0;
  for (const route of routes) {
    const validate = route.body ? ajv.compile(route.body) : null;
    const schemaId = `r${schemaSeq++}`;
    const paramNames = [...route.path.matchAll(/:([A-Za-z_]+)/g)].map((m) => m[1]);
    const label = route.name ?? route.path;
    const limit = (typeof route.maxBodyBytes === 'function' ? route.maxBodyBytes(cfg) : route.maxBodyBytes) ?? cfg.maxBodyBytes;
    const hasBody = route.method !== 'GET';
    const handler = (res: HttpResponse, req: HttpRequest) => {
      // everything from `req` must be read synchronously, before the first await
      const t0 = performance.now();
      const ex = new Exchange(res);
      const headers: Record<string, string> = {};
      req.forEach((k, v) => { headers[k] = v; });
      const url = req.getUrl();
      const rawQuery = req.getQuery() ?? '';
      const rawParams = paramNames.map((_, i) => req.getParameter(i) ?? '');
      const peer = Buffer.from(res.getRemoteAddressAsText()).toString();
      const ip = (cfg.trustProxy && headers['x-forwarded-for']?.split(',')[0]?.trim()) || peer;
      const style: ErrorStyle = wantsMessagesErrors((n) => headers[n]) ? 'messages' : route.errors ?? 'native';
      const declared = headers['content-length'] !== undefined ? Number(headers['content-length']) : null;
      // the body reader must be attached synchronously too
      const bodyP = hasBody ? readBody(ex, limit, declared) : null;
      bodyP?.catch(() => {});
      state.inflight++;
      let principal: Principal | null = null;
      const finish = () => {
        state.inflight--;
        services.metrics.observeRequest(label, route.method, ex.status || 499, (performance.now() - t0) / 1000);
        log.info({ method: route.method, route: label, status: ex.status || 499, ms: Math.round((performance.now() - t0) * 100) / 100, team_id: principal?.team_id, key_id: principal?.key_id ?? undefined }, 'request');
        if (state.inflight === 0) for (const f of state.idle.splice(0)) f();
      };
      const fail = (err: unknown) => {
        const r = errorResponse(err, style);
        if (r.status === 500) log.error({ route: label, err: err instanceof Error ? { message: err.message, stack: err.stack } : String(err) }, 'unhandled error');
        // a request whose body we refused (413) is not read to the end: close the connection
        ex.json(r.status, r.body, r.headers, r.status === 413);
      };
      (async () => {
        if (state.draining) throw new DependencyUnavailableError('Server is shutting down', 1);
        // the edge limit's headers only on refusal: the binding limit is reported below
        if (route.rateLimit !== false) await services.rateLimiter.edge(ip);
        const sp = new URLSearchParams(rawQuery);
        for (const [k, v] of sp) {
          if (KEY_QUERY_NAMES.has(k.toLowerCase()) || v.startsWith('loom_sk_')) throw new BadRequestError('API keys must not be passed as query parameters; send the X-API-Key header', k);
        }
        const params: Record<string, string> = {};
        checkPathEncoding(url);
        paramNames.forEach((n, i) => {
          const v = rawParams[i].includes('%') ? decodeURIComponent(rawParams[i]) : rawParams[i];
          if (route.params?.[n] === 'uuid' && !UUID.test(v)) throw new BadRequestError(`Path parameter ${n} must be a UUID`, n);
          params[n] = v;
        });
        const query = parseQuery(rawQuery, route.query);
        const group = services.rateLimiter.endpointGroup(route.method, url);
        if (!group && route.rateLimit !== false) Object.assign(ex.extraHeaders, await services.rateLimiter.ipDefault(ip));
        principal = authenticate(route, headers, services);
        if (group) Object.assign(ex.extraHeaders, await services.rateLimiter.endpoint(group, { ip, team_id: principal?.team_id, key_id: principal?.key_id, user_id: principal?.user_id }));
        let body: unknown = undefined;
        if (bodyP) {
          const raw = await bodyP;
          if (route.rawBody) body = Buffer.from(raw.buffer, raw.byteOffset, raw.byteLength);
          else if (validate && raw.byteLength > cfg.workerParseBytes) {
            const r = await services.workers.parseValidate(raw, schemaId, route.body!);
            if (!r.ok) {
              if (r.kind === 'json') throw new BadRequestError(`Malformed JSON body: ${r.message}`);
              throw new ValidationError(describe(r.errors ?? []), r.errors ?? []);
            }
            body = r.value;
          } else {
            const text = raw.byteLength ? Buffer.from(raw).toString('utf8') : '';
            if (text.trim() === '') body = route.body ? {} : undefined;
            else {
              try { body = JSON.parse(text); } catch (e) { throw new BadRequestError(`Malformed JSON body: ${(e as Error).message}`); }
              const bad = badJsonValue(body);
              if (bad) throw new ValidationError(describe([bad]), [bad]);
            }
            if (validate && !validate(body)) {
              const issues = issuesOf(validate);
              throw new ValidationError(describe(issues), issues);
            }
          }
        }
        const ctx: Ctx = {
          services, principal: principal as Principal, body, query, params, headers, ip, signal: ex.signal, url, log,
          setHeader: (n, v) => { ex.extraHeaders[n] = v; },
          setCookie: (c) => { ex.cookies.push(c); },
          stream: (status, h) => ex.stream(status, h),
        };
        const out = await route.handler(ctx);
        if (ex.done || ex.aborted) return;
        if (out instanceof Reply) {
          if ((typeof out.body === 'string' || out.body instanceof Uint8Array) && Object.keys(out.headers).some((h) => h.toLowerCase() === 'content-type')) ex.send(out.status, out.body, out.headers);
          else ex.json(out.status, out.body ?? null, out.headers);
        }
        else if (out !== undefined) ex.json(200, out);
        else if (ex.status === 0) ex.json(204, null);
      })().catch(fail).finally(() => {
        if (!ex.done && !ex.aborted && ex.status !== 0) {
          // a stream the handler left open
          ex.done = true;
          res.cork(() => res.end());
        }
        finish();
      });
    };
    const m = route.method.toLowerCase() as 'get' | 'post' | 'put' | 'patch' | 'del';
    app[m === ('delete' as string) ? 'del' : m](route.path, handler);
  }
}

function bearer(h: Record<string, string>): string | null {
  if (h['x-api-key']) return h['x-api-key'].trim();
  const a = h['authorization'];
  if (a && /^bearer\s+/i.test(a)) return a.replace(/^bearer\s+/i, '').trim();
  return null;
}

function sessionToken(h: Record<string, string>): string | null {
  const c = h['cookie'];
  if (!c) return null;
  for (const part of c.split(';')) {
    const [k, ...v] = part.trim().split('=');
    if (k === SESSION_COOKIE) return v.join('=');
  }
  return null;
}

export const SESSION_COOKIE = 'loom_session';

function authenticate(route: RouteDef, h: Record<string, string>, services: Services): Principal | null {
  if (route.auth === 'none') return null;
  const key = bearer(h);
  if (route.auth === 'session') {
    if (key) {
      services.auth.authenticateKey(key); // 401 for a bad key, else:
      throw new ForbiddenError('This endpoint requires a dashboard session; API-key-authenticated calls cannot create API keys');
    }
    const p = services.auth.fromSession(sessionToken(h));
    if (!p) throw new UnauthorizedError('Dashboard session required: log in with POST /auth/login');
    // CSRF guards state changes; a safe method (GET /auth/session, which returns the token) needs none
    if (route.method !== 'GET') services.auth.checkCsrf(p, h['x-csrf-token'] ?? null);
    return p;
  }
  if (key || route.auth === 'key') return services.auth.authenticateKey(key);
  // 'any': a dashboard session works too (CSRF on state changes)
  const p = services.auth.fromSession(sessionToken(h));
  if (!p) throw new UnauthorizedError('Missing API key: send it in the X-API-Key header');
  if (route.method !== 'GET') services.auth.checkCsrf(p, h['x-csrf-token'] ?? null);
  return p;
}
