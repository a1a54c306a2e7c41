// Request-rate limits exactly as the spec's table (section 8), on rate-limiter-flexible's in-memory
// fixed windows: an edge limit per observed IP on every request; a default per client IP (per minute
// and per hour) for endpoints without an override; per-endpoint limits that REPLACE the IP default,
// keyed by the billing team, falling back to API key, then user, then client IP.
import { RateLimiterMemory, RateLimiterRes } from 'rate-limiter-flexible';
import type { RateLimitConfig, RateLimitRule } from './config.ts';
import { RateLimitError, type RateLimitScope } from './errors.ts';

export interface RateLimitSubject { ip: string; team_id?: string | null; key_id?: string | null; user_id?: string | null }

interface Limiter { rule: RateLimitRule; lim: RateLimiterMemory }

const make = (prefix: string, rule: RateLimitRule): Limiter => ({ rule, lim: new RateLimiterMemory({ keyPrefix: prefix, points: rule.points, duration: rule.duration_s }) });

export interface RateHeaders { [name: string]: string }

function headersOf(rule: RateLimitRule, res: RateLimiterRes, scope: RateLimitScope): RateHeaders {
  return {
    'X-RateLimit-Limit': String(rule.points),
    'X-RateLimit-Remaining': String(Math.max(0, res.remainingPoints)),
    'X-RateLimit-Reset': String(Math.max(0, Math.ceil(res.msBeforeNext / 1000))),
    'X-RateLimit-Scope': scope,
  };
}

function matches(pattern: string, path: string): boolean {
  if (pattern.endsWith('/*')) return path.startsWith(pattern.slice(0, -1)) && path.length > pattern.length - 1;
  return path === pattern;
}

export function createRateLimiter(cfg: RateLimitConfig) {
  const edge = make('edge', cfg.edge);
  const defaults = cfg.default.map((r, i) => make(`ip${i}`, r));
  const groups = new Map<string, Limiter>();
  for (const e of cfg.endpoints) if (!groups.has(e.group)) groups.set(e.group, make(`ep_${e.group}`, e));

  async function consume(l: Limiter, key: string, code: string, scope: RateLimitScope): Promise<RateHeaders> {
    try {
      return headersOf(l.rule, await l.lim.consume(key), scope);
    } catch (e) {
      if (e instanceof RateLimiterRes) throw new RateLimitError(code, scope, e.msBeforeNext / 1000, l.rule.points, l.rule.duration_s);
      throw e;
    }
  }

  return {
    /** the endpoint group of a request, or null when the IP default applies */
    endpointGroup(method: string, path: string): string | null {
      for (const e of cfg.endpoints) if (e.method === method && matches(e.pattern, path)) return e.group;
      return null;
    },
    /** every request, before anything else */
    edge: (ip: string) => consume(edge, ip, 'edge_rate_limit', 'ip'),
    /** endpoints without an override: all default rules per IP; the most restrictive headers win */
    async ipDefault(ip: string): Promise<RateHeaders> {
      let best: RateHeaders | null = null;
      for (const d of defaults) {
        const h = await consume(d, ip, 'ip_rate_limit', 'ip');
        if (!best || Number(h['X-RateLimit-Remaining']) < Number(best['X-RateLimit-Remaining'])) best = h;
      }
      return best ?? {};
    },
    /** an endpoint override, scoped team → key → user → IP */
    async endpoint(group: string, s: RateLimitSubject): Promise<RateHeaders> {
      const l = groups.get(group);
      if (!l) return {};
      const [scope, id]: [RateLimitScope, string] = s.team_id ? ['team', s.team_id] : s.key_id ? ['key', s.key_id] : s.user_id ? ['user', s.user_id] : ['ip', s.ip];
      return consume(l, `${scope}:${id}`, 'endpoint_rate_limit', scope);
    },
  };
}
export type RateLimiter = ReturnType<typeof createRateLimiter>;
