// Request-rate limits exactly as the spec's table (section 8), as in-memory fixed windows: an edge
// limit per observed IP on every request; a default per client IP (per minute and per hour) for
// endpoints without an override; per-endpoint limits that REPLACE the IP default, keyed by the
// billing team, falling back to API key, then user, then client IP.
// Synchronous on purpose: a check is a Map lookup and two additions on the request path (no
// promise, no timer per key, no header strings until the response is written); expired windows
// are swept once per `sweepMs`.
// With LOOM_REDIS_URL the same limits are counted in Redis instead (src/service/ratelimit-redis.ts),
// shared by every process; both implement `RateLimiter` below.
import type { RateLimitConfig, RateLimitRule } from './config.ts';
import { RateLimitError, type RateLimitScope } from './errors.ts';

export interface RateLimitSubject { ip: string; team_id?: string | null; key_id?: string | null; user_id?: string | null }

export interface RateHeaders { [name: string]: string }

/**
 * The binding limit of a request, as its X-RateLimit-* headers say it: the rule's points, the
 * points left, seconds to the window's end and the scope. One small object per check (the headers
 * are written from it, so a request allocates no header strings it does not send).
 */
export class RateVerdict {
  constructor(readonly limit: number, readonly remaining: number, readonly resetS: number, readonly scope: RateLimitScope) {}
}

/** the X-RateLimit-* header names, in the order they are written */
export const RATE_HEADER_NAMES = ['X-RateLimit-Limit', 'X-RateLimit-Remaining', 'X-RateLimit-Reset', 'X-RateLimit-Scope'] as const;

/** a verdict's header values, in RATE_HEADER_NAMES order */
export function rateHeaderValues(v: RateVerdict): [string, string, string, string] {
  return [String(v.limit), String(v.remaining), String(v.resetS), v.scope];
}

/** one key's window: points consumed since `resetAt - duration` */
interface Window { used: number; resetAt: number }

/** A fixed window per key: the first request opens it for `duration_s`; past `points` requests refuse until it ends. */
class FixedWindow {
  readonly windows = new Map<string, Window>();
  constructor(readonly rule: RateLimitRule, private readonly code: string) {}

  /** counts one request for `key`; returns its window (read it before the next call), or throws 429 */
  take(key: string, scope: RateLimitScope, now: number): Window {
    let w = this.windows.get(key);
    if (w === undefined || w.resetAt <= now) {
      w = { used: 0, resetAt: now + this.rule.duration_s * 1000 };
      this.windows.set(key, w);
    }
    w.used++;
    if (w.used > this.rule.points) {
      throw new RateLimitError(this.code, scope, (w.resetAt - now) / 1000, this.rule.points, this.rule.duration_s);
    }
    return w;
  }

  /** counts one request for `key`: the points left and the window's end, or throws 429 */
  consume(key: string, scope: RateLimitScope, now: number): RateVerdict {
    const w = this.take(key, scope, now);
    return new RateVerdict(this.rule.points, this.rule.points - w.used, Math.ceil((w.resetAt - now) / 1000), scope);
  }

  /** the state of `key`'s window without counting a request: remaining points and seconds to its end */
  peek(key: string, now: number): { remaining: number; reset_s: number | null } {
    const w = this.windows.get(key);
    if (w === undefined || w.resetAt <= now) return { remaining: this.rule.points, reset_s: null };
    return { remaining: Math.max(0, this.rule.points - w.used), reset_s: Math.ceil((w.resetAt - now) / 1000) };
  }

  sweep(now: number): void {
    for (const [k, w] of this.windows) if (w.resetAt <= now) this.windows.delete(k);
  }
}

export function matches(pattern: string, path: string): boolean {
  if (pattern.endsWith('/*')) return path.startsWith(pattern.slice(0, -1)) && path.length > pattern.length - 1;
  return path === pattern;
}

/** one limit as GET /rate-limits reports it; `reset_s` is null when no window is open (nothing counted yet) */
export interface RateLimitRow {
  family: string; endpoints: string[]; scope: RateLimitScope; limit: number; window_s: number;
  remaining: number; reset_s: number | null;
}

/** the scope an endpoint override counts a request under: team → key → user → IP */
export function subjectScope(s: RateLimitSubject): [RateLimitScope, string] {
  if (s.team_id) return ['team', s.team_id];
  if (s.key_id) return ['key', s.key_id];
  if (s.user_id) return ['user', s.user_id];
  return ['ip', s.ip];
}

/** the endpoint group of a request (the first override that matches), or null when the IP default applies */
export function endpointGroupOf(cfg: RateLimitConfig, method: string, path: string): string | null {
  for (const e of cfg.endpoints) if (e.method === method && matches(e.pattern, path)) return e.group;
  return null;
}

/** the endpoints of each override group, as GET /rate-limits lists them */
export function groupEndpoints(cfg: RateLimitConfig, group: string): string[] {
  return cfg.endpoints.filter((e) => e.group === group).map((e) => `${e.method} ${e.pattern}`);
}

/**
 * The request path's view of a limiter. The in-memory one answers synchronously (the request path
 * stays promise-free); the Redis one returns promises, which the request path awaits only then.
 * A refusal is a RateLimitError (429): thrown, or the promise's rejection.
 */
export interface RateLimiter {
  /** the endpoint group of a request, or null when the IP default applies */
  endpointGroup(method: string, path: string): string | null;
  /** every request, before anything else (its headers are sent only with a refusal) */
  edge(ip: string): void | Promise<void>;
  /** endpoints without an override: all default rules per IP; the most restrictive one is reported */
  ipDefault(ip: string): RateVerdict | null | Promise<RateVerdict | null>;
  /** an endpoint override, scoped team → key → user → IP */
  endpoint(group: string, s: RateLimitSubject): RateVerdict | null | Promise<RateVerdict | null>;
  /** GET /rate-limits: every limit as it applies to `s` now, without counting a request */
  table(s: RateLimitSubject): RateLimitRow[] | Promise<RateLimitRow[]>;
  close(): void | Promise<void>;
}

export function createRateLimiter(cfg: RateLimitConfig, opts: { sweepMs?: number } = {}) {
  const edge = new FixedWindow(cfg.edge, 'edge_rate_limit');
  const defaults = cfg.default.map((r) => new FixedWindow(r, 'ip_rate_limit'));
  const groups = new Map<string, FixedWindow>();
  for (const e of cfg.endpoints) if (!groups.has(e.group)) groups.set(e.group, new FixedWindow(e, 'endpoint_rate_limit'));
  const all = [edge, ...defaults, ...groups.values()];
  const sweeper = setInterval(() => { const now = Date.now(); for (const l of all) l.sweep(now); }, opts.sweepMs ?? 60_000);
  sweeper.unref();

  return {
    /** the endpoint group of a request, or null when the IP default applies */
    endpointGroup(method: string, path: string): string | null { return endpointGroupOf(cfg, method, path); },
    /** every request, before anything else (its headers are sent only with a refusal) */
    edge(ip: string): void { edge.take(ip, 'ip', Date.now()); },
    /** endpoints without an override: all default rules per IP; the most restrictive one is reported */
    ipDefault(ip: string): RateVerdict | null {
      const now = Date.now();
      let best: FixedWindow | null = null;
      let bestLeft = Infinity;
      let bestReset = 0;
      for (const d of defaults) {
        const w = d.take(ip, 'ip', now);
        const left = d.rule.points - w.used;
        if (best === null || left < bestLeft) { best = d; bestLeft = left; bestReset = w.resetAt; }
      }
      return best && new RateVerdict(best.rule.points, bestLeft, Math.ceil((bestReset - now) / 1000), 'ip');
    },
    /** an endpoint override, scoped team → key → user → IP */
    endpoint(group: string, s: RateLimitSubject): RateVerdict | null {
      const l = groups.get(group);
      if (!l) return null;
      const [scope, id] = subjectScope(s);
      return l.consume(`${scope}:${id}`, scope, Date.now());
    },
    /**
     * GET /rate-limits: every limit as it applies to `s` now (limit, window, remaining), without
     * counting a request: the edge and the per-IP defaults for `s.ip`, each endpoint family for the
     * scope its requests are counted under (team → key → user → IP).
     */
    table(s: RateLimitSubject): RateLimitRow[] {
      const now = Date.now();
      const [scope, id]: [RateLimitScope, string] = subjectScope(s);
      const row = (l: FixedWindow, family: string, endpoints: string[], sc: RateLimitScope, key: string) => ({
        family, endpoints, scope: sc, limit: l.rule.points, window_s: l.rule.duration_s, ...l.peek(key, now),
      });
      const rows: RateLimitRow[] = [row(edge, 'edge', ['every request'], 'ip', s.ip)];
      for (const d of defaults) rows.push(row(d, 'default', ['endpoints without an override'], 'ip', s.ip));
      for (const [group, l] of groups) {
        rows.push(row(l, group, groupEndpoints(cfg, group), scope, `${scope}:${id}`));
      }
      return rows;
    },
    /** keys with an open window (all limits): bounded by the sweep */
    get trackedKeys(): number { let n = 0; for (const l of all) n += l.windows.size; return n; },
    close(): void { clearInterval(sweeper); },
  };
}
export type MemoryRateLimiter = ReturnType<typeof createRateLimiter>;
