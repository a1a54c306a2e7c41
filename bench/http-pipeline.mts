// `npm run bench -- http --pipeline`: the JS cost of Loom's request pipeline alone, in process. The
// real route table (createServices + registerRoutes, the same setup as bench/http-server.mts) is
// driven with stub uWS request/response objects that do nothing, so the figure is the CPU time of
// Loom's own code per request (router, auth, rate limits, handler, access log, metrics), without
// uWS, sockets or the kernel, and it hardly depends on what else runs on the machine: the figure to
// compare changes by when the socket figures swing with a shared CPU. Prints one JSON line per
// target: {"target", "us_per_req"} (process CPU time, median of 5 runs of `N` requests).
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { HttpRequest, HttpResponse, TemplatedApp } from '@trufflesuite/uws-js-unofficial';
import { pino } from 'pino';
import { ROUTE_MODULES } from '../server/index.ts';
import { createLogger } from '../server/log.ts';
import { registerRoutes } from '../server/router.ts';
import { DEFAULT_RATE_LIMITS } from '../src/service/config.ts';
import { createServices } from '../src/service/index.ts';
import { createLocalRuntime } from '../src/service/runtime-local.ts';

const N = Number(process.argv[2] ?? 100_000);
/** only the targets whose name contains this (for profiling one route: node --cpu-prof ... N health) */
const only = process.argv[3] ?? '';
const dataDir = mkdtempSync(join(tmpdir(), 'loom-bench-pipeline-'));
const modelsDir = join(dataDir, 'models');
// 1e9: a small integer to V8 (as real limits are; 1e12 made every X-RateLimit-* value a
// double-to-string conversion) and more requests than any run makes
const huge = 1e9;
const rateLimits = {
  edge: { ...DEFAULT_RATE_LIMITS.edge, points: huge },
  default: DEFAULT_RATE_LIMITS.default.map((r) => ({ ...r, points: huge })),
  endpoints: DEFAULT_RATE_LIMITS.endpoints.map((r) => ({ ...r, points: huge })),
};
// info level, as the socket bench, into the destination pino gives a server by default (an
// asynchronous sonic-boom, here on /dev/null): the access lines are built and written
const log = createLogger({
  level: process.env.LOOM_LOG_LEVEL ?? 'info',
  destination: pino.destination({ dest: '/dev/null', sync: false, minLength: 0 }) as unknown as NodeJS.WritableStream,
});
const runtime = createLocalRuntime({ modelsDir, maxLoaded: 1, retryAfterS: 5 });
const services = await createServices({ config: { dataDir, modelsDir, rateLimits }, runtime, log });
const { user } = await services.auth.createUser({ email: 'bench@example.com', password: 'bench-password-1' });
const { secret_key: key } = await services.auth.createKeyForUser(user.id, 'bench');

type Handler = (res: HttpResponse, req: HttpRequest) => void;
const handlers = new Map<string, Handler>();
const app = new Proxy({}, {
  get: (_, method) => (path: string, h: Handler) => { handlers.set(`${String(method)} ${path}`, h); },
}) as unknown as TemplatedApp;
registerRoutes(app, ROUTE_MODULES.flatMap((m) => m({ draining: false, inflight: 0, idle: [] })), services, log,
  { draining: false, inflight: 0, idle: [] });

const address = new TextEncoder().encode('127.0.0.1').buffer;
const res = {
  onAborted() { return res; }, onData() { return res; }, onWritable() { return res; },
  cork(cb: () => void) { cb(); return res; }, writeStatus() { return res; }, writeHeader() { return res; },
  end() { return res; }, endWithoutBody() { return res; }, getRemoteAddressAsText: () => address,
} as unknown as HttpResponse;
const request = (url: string, headers: Record<string, string>) => ({
  forEach(cb: (k: string, v: string) => void) { for (const k in headers) cb(k, headers[k]!); },
  getUrl: () => url, getQuery: () => '', getParameter: () => '', getHeader: (n: string) => headers[n] ?? '',
  getMethod: () => 'get',
}) as unknown as HttpRequest;

const targets: Array<[string, string, Record<string, string>]> = [
  ['GET /health', '/health', { host: '127.0.0.1', 'user-agent': 'bench' }],
  ['GET /v1/models', '/v1/models', { host: '127.0.0.1', 'user-agent': 'bench', 'x-api-key': key }],
];
const turn = () => new Promise((r) => setImmediate(r));
for (const [name, url, headers] of targets) {
  if (!name.includes(only)) continue;
  const h = handlers.get(`get ${url}`)!;
  const req = request(url, headers);
  for (let i = 0; i < 20_000; i++) h(res, req); // warm-up (JIT)
  await turn();
  const runs: number[] = [];
  for (let r = 0; r < 5; r++) {
    const t0 = process.cpuUsage();
    // an event-loop turn every 256 requests, as a loaded server gets (lmdb renews its read
    // transaction, timers and promises run)
    for (let i = 0; i < N; i++) { h(res, req); if ((i & 255) === 255) await turn(); }
    await turn();
    const d = process.cpuUsage(t0);
    runs.push((d.user + d.system) / N);
  }
  runs.sort((a, b) => a - b);
  console.log(JSON.stringify({ target: name, us_per_req: +runs[2]!.toFixed(2) }));
}
process.exit(0);
