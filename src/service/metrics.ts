// Prometheus metrics (prom-client), one registry per service instance: request counts and latency
// by route and status, tokens by model and kind, in-flight model calls (queue depth), prompt-cache
// hit rate (cache-read tokens over all input tokens).
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import type { TokenUsage } from '../store/index.ts';

export function createMetrics(opts: { defaultMetrics?: boolean; queueDepth?: () => number } = {}) {
  const registry = new Registry();
  if (opts.defaultMetrics) collectDefaultMetrics({ register: registry, prefix: 'loom_' });
  const requests = new Counter({ name: 'loom_http_requests_total', help: 'HTTP requests by route, method and status', labelNames: ['route', 'method', 'status'], registers: [registry] });
  const latency = new Histogram({
    name: 'loom_http_request_duration_seconds', help: 'HTTP request latency by route, method and status', labelNames: ['route', 'method', 'status'],
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30], registers: [registry],
  });
  const tokens = new Counter({ name: 'loom_tokens_total', help: 'Tokens processed by model and kind (prompt, cache_read, cache_write, completion)', labelNames: ['model', 'kind'], registers: [registry] });
  const inflight = new Gauge({ name: 'loom_inference_inflight', help: 'Model calls in flight (queue depth seen by the service)', registers: [registry] });
  const cacheRead = { v: 0 };
  const inputAll = { v: 0 };
  new Gauge({
    name: 'loom_prompt_cache_hit_ratio', help: 'Cache-read tokens over all input tokens since start', registers: [registry],
    collect() { this.set(inputAll.v ? cacheRead.v / inputAll.v : 0); },
  });
  if (opts.queueDepth) {
    const q = opts.queueDepth;
    new Gauge({ name: 'loom_runtime_queue_depth', help: 'Requests queued in the model runtime', registers: [registry], collect() { this.set(q()); } });
  }
  return {
    registry,
    inflight,
    observeRequest(route: string, method: string, status: number, seconds: number) {
      const l = { route, method, status: String(status) };
      requests.inc(l);
      latency.observe(l, seconds);
    },
    recordUsage(model: string, u: TokenUsage) {
      for (const k of ['prompt', 'cache_read', 'cache_write', 'completion'] as const) {
        const n = u[`${k}_tokens`];
        if (n) tokens.inc({ model, kind: k }, n);
      }
      cacheRead.v += u.cache_read_tokens;
      inputAll.v += u.prompt_tokens + u.cache_read_tokens + u.cache_write_tokens;
    },
    text: () => registry.metrics(),
    contentType: registry.contentType,
  };
}
export type Metrics = ReturnType<typeof createMetrics>;
