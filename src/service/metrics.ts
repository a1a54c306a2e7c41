// Prometheus metrics (prom-client), one registry per service instance: request counts and latency
// by route and status, tokens by model and kind, in-flight model calls (queue depth), prompt-cache
// hit rate (cache-read tokens over all input tokens).
import { Counter, Gauge, Registry, collectDefaultMetrics, type Metric } from 'prom-client';
import type { TokenUsage } from '../store/index.ts';

export function createMetrics(opts: { defaultMetrics?: boolean; queueDepth?: () => number } = {}) {
  const registry = new Registry();
  // the event-loop lag histogram samples every 100 ms: prom-client's default of 10 ms woke an idle
  // server 100 times a second (about 8 ms of CPU a second on a loaded 2-core EPYC, measured)
  if (opts.defaultMetrics) {
    collectDefaultMetrics({ register: registry, prefix: 'loom_', eventLoopMonitoringPrecision: 100 });
  }
  const requests = createRequestMetrics(registry);
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
    observeRequest: requests.observe,
    /** the observer of one route and method: no key string per request (the router keeps one per route) */
    requestObserver: requests.observer,
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

const LATENCY_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];

interface RequestSeries {
  labels: { route: string; method: string; status: string };
  count: number;
  sum: number;
  /** observations per bucket (not cumulative) */
  buckets: number[];
}

/**
 * loom_http_requests_total (counter) and loom_http_request_duration_seconds (histogram) by route,
 * method and status. Observed on every request, so the hot path is one Map lookup and three
 * additions on plain numbers; prom-client's own Counter/Histogram hash the label object on each
 * call (twice per request), which cost more than the rest of a GET /health. The series are turned
 * into prom-client's value lists only when /metrics is scraped, in its usual text format.
 */
function createRequestMetrics(registry: Registry) {
  const series = new Map<string, RequestSeries>();
  /** times the series were cleared (an observer's cached series are stale after one) */
  let resets = 0;
  const counter = {
    name: 'loom_http_requests_total', help: 'HTTP requests by route, method and status',
    type: 'counter', aggregator: 'sum',
    get: async () => ({ ...counter, values: [...series.values()].map((s) => ({ labels: s.labels, value: s.count })) }),
    reset: () => { series.clear(); resets++; },
  };
  const histName = 'loom_http_request_duration_seconds';
  const histogram = {
    name: histName, help: 'HTTP request latency by route, method and status', type: 'histogram', aggregator: 'sum',
    get: async () => ({
      ...histogram,
      values: [...series.values()].flatMap((s) => {
        let cum = 0;
        const rows = LATENCY_BUCKETS.map((le, i) => {
          cum += s.buckets[i]!;
          return { metricName: `${histName}_bucket`, labels: { le, ...s.labels }, value: cum };
        });
        const inf = { le: '+Inf' as unknown as number, ...s.labels };
        rows.push({ metricName: `${histName}_bucket`, labels: inf, value: s.count });
        return [...rows, { metricName: `${histName}_sum`, labels: s.labels as never, value: s.sum },
          { metricName: `${histName}_count`, labels: s.labels as never, value: s.count }];
      }),
    }),
    reset: () => { series.clear(); resets++; },
  };
  registry.registerMetric(counter as unknown as Metric);
  registry.registerMetric(histogram as unknown as Metric);
  function seriesOf(route: string, method: string, status: number): RequestSeries {
    const key = `${route} ${method} ${status}`;
    let s = series.get(key);
    if (s === undefined) {
      const labels = { route, method, status: String(status) };
      s = { labels, count: 0, sum: 0, buckets: LATENCY_BUCKETS.map(() => 0) };
      series.set(key, s);
    }
    return s;
  }
  function add(s: RequestSeries, seconds: number): void {
    s.count++;
    s.sum += seconds;
    for (let i = 0; i < LATENCY_BUCKETS.length; i++) if (seconds <= LATENCY_BUCKETS[i]!) { s.buckets[i]!++; break; }
  }
  return {
    observe(route: string, method: string, status: number, seconds: number): void {
      add(seriesOf(route, method, status), seconds);
    },
    observer(route: string, method: string): (status: number, seconds: number) => void {
      // the series by status, found again after a reset (/metrics tests reset the registry)
      const byStatus = new Map<number, RequestSeries>();
      let seen = resets;
      return (status, seconds) => {
        if (seen !== resets) { byStatus.clear(); seen = resets; }
        let s = byStatus.get(status);
        if (s === undefined) {
          s = seriesOf(route, method, status);
          byStatus.set(status, s);
        }
        add(s, seconds);
      };
    },
  };
}
