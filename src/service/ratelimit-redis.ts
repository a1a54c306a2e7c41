// The spec's request-rate limits counted in Redis (LOOM_REDIS_URL), so every Loom process behind a
// load balancer counts against the same windows: the limits, scopes, keys, headers and 429 bodies of
// the in-memory limiter (src/service/ratelimit.ts), through rate-limiter-flexible's RateLimiterRedis
// (one atomic Lua INCR + PTTL per check: a fixed window per key that the first request opens).
//
// A Redis outage fails OPEN: a check that cannot reach Redis (not connected, or no reply within
// COMMAND_TIMEOUT_MS, after which the connection is dropped so later checks do not wait too) is
// counted by rate-limiter-flexible's in-memory limiter with the same rule in this process, one
// warning is logged per outage, and requests keep being served; while Redis is down each process
// enforces the limits on its own (N processes let through up to N times a limit). ioredis
// reconnects in the background; once Redis answers again the shared counts apply again (the
// outage's local counts are not carried over). Rate limits guard
// against abuse, not billing (credits are exact in the store), so an outage of the limiter's store
// should not take the API down: hence fail-open rather than the spec's 503.
import { Redis } from 'ioredis';
import { RateLimiterMemory, RateLimiterRedis, RateLimiterRes } from 'rate-limiter-flexible';
import { redactUrl } from './redact-url.ts';
import type { RateLimitConfig, RateLimitRule } from './config.ts';
import { RateLimitError, type RateLimitScope } from './errors.ts';
import type { Logger } from './index.ts';
import {
  endpointGroupOf, groupEndpoints, type RateLimiter, type RateLimitRow, type RateLimitSubject, RateVerdict,
  subjectScope,
} from './ratelimit.ts';

/** a check waits at most this long for Redis before it is counted locally */
export const COMMAND_TIMEOUT_MS = 500;
/** connecting (and each reconnect attempt) gives up after this long */
export const CONNECT_TIMEOUT_MS = 1000;
/** reconnect attempts back off up to this interval */
const MAX_RECONNECT_MS = 2000;
/** every key Loom writes in Redis starts with this */
export const KEY_PREFIX = 'loom:rl';

/** one rule's fixed windows in Redis (a key per IP / scope), and the same rule in memory for outages */
class SharedWindow {
  readonly shared: RateLimiterRedis;
  readonly local: RateLimiterMemory;
  constructor(
    readonly rule: RateLimitRule, private readonly code: string, name: string, client: Redis,
    private readonly onFailure: (err: unknown) => void,
  ) {
    const keyPrefix = `${KEY_PREFIX}:${name}`;
    const opts = { keyPrefix, points: rule.points, duration: rule.duration_s };
    // not connected: rejected at once (no queue of commands waiting for a reconnect)
    this.shared = new RateLimiterRedis({ ...opts, storeClient: client, rejectIfRedisNotReady: true });
    this.local = new RateLimiterMemory(opts);
  }

  /** counts one request for `key`: the points left and the window's end, or rejects with a 429 */
  async consume(key: string, scope: RateLimitScope): Promise<RateVerdict> {
    let r: RateLimiterRes;
    try {
      try {
        r = await this.shared.consume(key);
      } catch (e) {
        if (e instanceof RateLimiterRes) throw e;
        this.onFailure(e);
        r = await this.local.consume(key);
      }
    } catch (e) {
      if (!(e instanceof RateLimiterRes)) throw e;
      throw new RateLimitError(this.code, scope, e.msBeforeNext / 1000, this.rule.points, this.rule.duration_s);
    }
    return new RateVerdict(this.rule.points, r.remainingPoints, Math.ceil(r.msBeforeNext / 1000), scope);
  }

  /** the state of `key`'s window without counting a request */
  async peek(key: string): Promise<{ remaining: number; reset_s: number | null }> {
    let r: RateLimiterRes | null;
    try {
      r = await this.shared.get(key);
    } catch (e) {
      this.onFailure(e);
      r = await this.local.get(key);
    }
    if (r === null || r.msBeforeNext <= 0) return { remaining: this.rule.points, reset_s: null };
    return { remaining: Math.max(0, this.rule.points - r.consumedPoints), reset_s: Math.ceil(r.msBeforeNext / 1000) };
  }
}

export interface RedisRateLimiter extends RateLimiter {
  /** true while Redis is unreachable and the limits are counted in this process */
  readonly degraded: boolean;
  /**
   * resolves once connected, or after CONNECT_TIMEOUT_MS (logging the outage's warning: the checks
   * fail open until it is)
   */
  ready(): Promise<void>;
  close(): Promise<void>;
}

export function createRedisRateLimiter(cfg: RateLimitConfig, opts: { url: string; log?: Logger }): RedisRateLimiter {
  const { log } = opts;
  // ioredis would take anything else for a socket path and retry it forever: a typo fails at start
  if (!/^rediss?:\/\/[^/]/.test(opts.url)) {
    throw new Error('LOOM_REDIS_URL must be a redis:// or rediss:// URL (redis://[:password@]host:port/db), '
      + `got ${JSON.stringify(redactUrl(opts.url))}`);
  }
  const client = new Redis(opts.url, {
    connectTimeout: CONNECT_TIMEOUT_MS,
    commandTimeout: COMMAND_TIMEOUT_MS,
    // a command is never parked waiting for a connection or resent after one dropped: it fails and
    // the check is counted locally (a request never waits on Redis longer than COMMAND_TIMEOUT_MS)
    enableOfflineQueue: false,
    autoResendUnfulfilledCommands: false,
    maxRetriesPerRequest: 0,
    retryStrategy: (times) => Math.min(times * 100, MAX_RECONNECT_MS),
    // the checks of one event-loop turn (many requests) go to Redis in one write
    enableAutoPipelining: true,
  });
  let degraded = false;
  let lastError = '';
  /** a check could not reach Redis: it was counted locally; say so once per outage */
  const failure = (err: unknown) => {
    const message = err instanceof Error ? err.message : String(err);
    // connected but silent (a stalled server, a network partition without resets): drop the
    // connection so that the next checks fail at once while ioredis reconnects, instead of each
    // waiting COMMAND_TIMEOUT_MS
    if (/timed out/i.test(message) && client.status === 'ready') client.disconnect(true);
    if (degraded) return;
    degraded = true;
    log?.warn({ redis: redactUrl(opts.url), err: lastError || message },
      'Redis unreachable: rate limits are counted in this process until it is back (fail-open)');
  };
  // an 'error' without a listener would be thrown: ioredis reports each failed (re)connect here
  client.on('error', (err: Error) => { lastError = err.message; });
  client.on('ready', () => {
    if (degraded) log?.info({ redis: redactUrl(opts.url) }, 'Redis is back: rate limits are shared again');
    degraded = false;
    lastError = '';
  });

  const edge = new SharedWindow(cfg.edge, 'edge_rate_limit', 'edge', client, failure);
  const defaults = cfg.default.map((r, i) => new SharedWindow(r, 'ip_rate_limit', `default${i}`, client, failure));
  const groups = new Map<string, SharedWindow>();
  for (const e of cfg.endpoints) {
    if (groups.has(e.group)) continue;
    groups.set(e.group, new SharedWindow(e, 'endpoint_rate_limit', `ep:${e.group}`, client, failure));
  }

  return {
    get degraded() { return degraded; },
    ready() {
      if (client.status === 'ready') return Promise.resolve();
      return new Promise<void>((resolve) => {
        const done = () => { clearTimeout(timer); client.off('ready', done); resolve(); };
        // not reachable at start: said now, not at the first request (then "Redis is back" on connect)
        const timer = setTimeout(() => { failure(new Error(lastError || `not connected (${client.status})`)); done(); },
          CONNECT_TIMEOUT_MS);
        client.on('ready', done);
      });
    },
    endpointGroup: (method, path) => endpointGroupOf(cfg, method, path),
    async edge(ip) { await edge.consume(ip, 'ip'); },
    // the rules in order, as the in-memory limiter: a refusal by one leaves the later ones uncounted
    async ipDefault(ip) {
      let best: RateVerdict | null = null;
      for (const d of defaults) {
        const v = await d.consume(ip, 'ip');
        if (best === null || v.remaining < best.remaining) best = v;
      }
      return best;
    },
    async endpoint(group, s) {
      const l = groups.get(group);
      if (!l) return null;
      const [scope, id] = subjectScope(s);
      return l.consume(`${scope}:${id}`, scope);
    },
    async table(s: RateLimitSubject): Promise<RateLimitRow[]> {
      const [scope, id] = subjectScope(s);
      const row = async (l: SharedWindow, family: string, endpoints: string[], sc: RateLimitScope, key: string) => ({
        family, endpoints, scope: sc, limit: l.rule.points, window_s: l.rule.duration_s, ...(await l.peek(key)),
      });
      return Promise.all([
        row(edge, 'edge', ['every request'], 'ip', s.ip),
        ...defaults.map((d) => row(d, 'default', ['endpoints without an override'], 'ip', s.ip)),
        ...[...groups].map(([group, l]) => row(l, group, groupEndpoints(cfg, group), scope, `${scope}:${id}`)),
      ]);
    },
    async close() {
      try { await client.quit(); } catch { client.disconnect(); }
    },
  };
}
