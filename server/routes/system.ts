// /health and /metrics (no auth).
import type { RouteDef } from '../router.ts';
import { reply } from '../router.ts';

/** /health reads the store at most this often (a probe per request would be a store read per request) */
const STORE_CHECK_MS = 100;

export function systemRoutes(state: { draining: boolean }): RouteDef[] {
  let storeOk = true;
  let storeCheckedAt = -Infinity;
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
        const body = {
          status: ok ? 'ok' : state.draining ? 'draining' : 'degraded', store: storeOk ? 'ok' : 'error',
          models_loaded: rt.loaded, models_memory: rt.memory ?? [], models_warming: rt.warming, queue_depth: rt.queue_depth,
        };
        return ok ? body : reply(503, body);
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
