// /health and /metrics (no auth).
import type { RouteDef } from '../router.ts';
import { type Reply, reply } from '../router.ts';

/** /health reads the store at most this often (a probe per request would be a store read per request) */
const STORE_CHECK_MS = 100;

const JSON_TYPE = { 'Content-Type': 'application/json' };

export function systemRoutes(state: { draining: boolean }): RouteDef[] {
  let storeOk = true;
  let storeCheckedAt = -Infinity;
  // the reply of a server with no model loaded, warming or in memory, serialized once per (status,
  // queue depth): most probes find it so
  let idle: { status: string; storeOk: boolean; queue: number; reply: Reply } | null = null;
  return [
    {
      // not rate-limited: a load balancer's probes all come from its one address
      method: 'GET', path: '/health', auth: 'none', rateLimit: false,
      // synchronous: answered within uWS's handler call (server/router.ts)
      handler({ services }) {
        const rt = services.runtime.stats();
        const now = performance.now();
        if (now - storeCheckedAt >= STORE_CHECK_MS) {
          storeCheckedAt = now;
          // the answer of the last probe: this handler stays synchronous (a probe may need a round trip)
          services.store.db.ping().then(() => { storeOk = true; }, () => { storeOk = false; });
        }
        const ok = storeOk && !state.draining;
        const status = ok ? 'ok' : state.draining ? 'draining' : 'degraded';
        const isIdle = rt.loaded.length === 0 && rt.warming.length === 0 && (rt.memory?.length ?? 0) === 0 && !rt.nodes;
        const last = idle;
        if (isIdle && last?.status === status && last.storeOk === storeOk && last.queue === rt.queue_depth) {
          return last.reply;
        }
        const body = {
          status, store: storeOk ? 'ok' : 'error',
          models_loaded: rt.loaded, models_memory: rt.memory ?? [], models_warming: rt.warming, queue_depth: rt.queue_depth,
          // an API process routing to inference nodes: the live ones
          ...(rt.nodes ? { inference_nodes: rt.nodes } : {}),
        };
        if (!isIdle) return ok ? body : reply(503, body);
        const r = reply(ok ? 200 : 503, JSON.stringify(body), JSON_TYPE);
        idle = { status, storeOk, queue: rt.queue_depth, reply: r };
        return r;
      },
    },
    {
      method: 'GET', path: '/metrics', auth: 'none',
      async handler({ services }) {
        return reply(200, await services.metrics.text(), { 'Content-Type': services.metrics.contentType });
      },
    },
  ];
}
