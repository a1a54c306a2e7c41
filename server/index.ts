// The HTTP server: uWebSockets.js (the `@trufflesuite/uws-js-unofficial` republish) over the
// framework-free services. `createServer({services})` registers every route module; extra route
// modules (compat endpoints, training) are passed in `routes` or added to ROUTE_MODULES below.
import { chmodSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import uws from '@trufflesuite/uws-js-unofficial';
import type { Logger } from 'pino';
import type { Services } from '../src/service/index.ts';
import { NotFoundError } from '../src/service/errors.ts';
import { wantsMessagesErrors } from '../src/service/compat/errors.ts';
import { errorResponse } from './errors.ts';
import { type Guard, guardConnection, guardPort, installNativeGuard, startGuard } from './guard.ts';
import { Exchange } from './http.ts';
import { createLogger } from './log.ts';
import { type AppState, type RouteDef, registerRoutes } from './router.ts';
import { authRoutes } from './routes/auth.ts';
import { compatRoutes } from './routes/compat.ts';
import { gliner2Routes } from './routes/gliner2.ts';
import { judgeRoutes } from './routes/judge.ts';
import { inferenceRoutes } from './routes/inference.ts';
import { projectRoutes } from './routes/projects.ts';
import { systemRoutes } from './routes/system.ts';
import { datasetRoutes } from './routes/datasets.ts';
import { trainingJobRoutes } from './routes/training-jobs.ts';
import { evaluationRoutes } from './routes/evaluations.ts';
import { generationRoutes } from './routes/generation.ts';
import { dashboardRoutes } from './routes/dashboard.ts';
import { modelRoutes } from './routes/models.ts';
import { usageRoutes } from './routes/usage.ts';

export type { RouteDef, Ctx } from './router.ts';
export { reply, Reply } from './router.ts';

/** Route modules mounted by default. Add a module here (one line) to mount it everywhere. */
export const ROUTE_MODULES: Array<(state: AppState) => RouteDef[]> = [
  (s) => systemRoutes(s),
  () => authRoutes(),
  () => dashboardRoutes(),
  () => modelRoutes(),
  () => usageRoutes(),
  () => inferenceRoutes(),
  () => projectRoutes(),
  () => compatRoutes(),
  () => gliner2Routes(),
  () => datasetRoutes(),
  () => trainingJobRoutes(),
  () => evaluationRoutes(),
  () => generationRoutes(),
  () => judgeRoutes(),
];

export interface LoomServer {
  /** bound port */
  port: number;
  url: string;
  services: Services;
  log: Logger;
  /** stop accepting, drain in-flight requests (up to `timeoutMs`), then close the services */
  close(opts?: { timeoutMs?: number; keepServices?: boolean }): Promise<void>;
}

export async function createServer(opts: {
  services: Services; host?: string; port?: number; log?: Logger; routes?: RouteDef[];
  /**
   * the framing guard of server/guard.ts (answers malformed HTTP/1.x that uWS drops): true (the
   * default) the native one inside uWS's reads, or the proxy where that cannot be installed;
   * 'proxy' the proxy; false none. LOOM_HTTP_GUARD=0 / proxy set the default (0 behind a reverse
   * proxy that already answers malformed requests).
   */
  guard?: boolean | 'proxy';
}): Promise<LoomServer> {
  const { services } = opts;
  const log = opts.log ?? createLogger();
  const env = process.env.LOOM_HTTP_GUARD;
  const guard = opts.guard ?? (env === '0' ? false : env === 'proxy' ? 'proxy' : true);
  let proxied = guard === 'proxy';
  if (guard === true) {
    const why = await installNativeGuard();
    if (why !== null) log.warn({ reason: why }, 'native HTTP guard unavailable; using the proxy guard');
    proxied = why !== null;
  }
  const state: AppState = { draining: false, inflight: 0, idle: [], proxied };
  const app = uws.App();
  const routes = [...ROUTE_MODULES.flatMap((m) => m(state)), ...(opts.routes ?? [])];
  const accessLog = registerRoutes(app, routes, services, log, state);
  const known = new Map<string, Set<string>>();
  for (const r of routes) { const k = r.path; if (!known.has(k)) known.set(k, new Set()); known.get(k)!.add(r.method); }
  app.any('/*', (res, req) => {
    const ex = new Exchange(res);
    const url = req.getUrl();
    const method = req.getMethod().toUpperCase();
    const allowed = known.get(url);
    if (allowed && !allowed.has(method)) {
      ex.json(405, { detail: `Method ${method} not allowed on ${url}` }, { Allow: [...allowed].join(', ') });
    } else {
      // clients of the compatibility APIs get their error shapes here too
      const messages = wantsMessagesErrors((n) => req.getHeader(n) || undefined);
      const style = messages ? 'messages' : url.startsWith('/v1/') ? 'openai' : 'native';
      const r = errorResponse(new NotFoundError(`No route for ${method} ${url}`), style);
      ex.json(r.status, r.body, r.headers);
    }
    services.metrics.observeRequest('unmatched', method, ex.status, 0);
  });
  const host = opts.host ?? '127.0.0.1';
  // behind the proxy guard, uWS listens on a unix socket in a private folder that only the guard
  // connects to: a local hop without TCP (cheaper per request than loopback TCP) that no other user
  // can reach, so none can bypass the guard or forge its X-Loom-Peer header
  const socketDir = proxied ? mkdtempSync(join(tmpdir(), 'loom-uws-')) : null;
  const socketPath = socketDir && join(socketDir, 'uws.sock');
  const listenSocket = await new Promise<uws.us_listen_socket>((resolve, reject) => {
    const where = socketPath ?? `${host}:${opts.port ?? 0}`;
    const done = (sock: uws.us_listen_socket | false) =>
      (sock ? resolve(sock) : reject(new Error(`cannot listen on ${where}`)));
    if (socketPath) app.listen_unix(done, socketPath);
    else app.listen(host, opts.port ?? 0, done);
  });
  let proxy: Guard | null = null;
  if (socketDir && socketPath) {
    chmodSync(socketDir, 0o700);
    proxy = await startGuard(host, opts.port ?? 0, socketPath).catch((e) => {
      uws.us_listen_socket_close(listenSocket);
      rmSync(socketDir, { recursive: true, force: true });
      throw e;
    });
  }
  const port = proxy ? proxy.port : uws.us_socket_local_port(listenSocket);
  // the native guard checks the connections uWS accepts on this port from here on (before the loop
  // runs again, so before the first accept)
  const localHost = `${host.includes(':') ? `[${host}]` : host}:${port}`;
  const unguard = guard === true && !proxied ? guardPort(port, localHost) : null;
  // the guard numbers this server's connections: the router keeps each one's client address
  if (unguard) state.connection = guardConnection();
  let closing: Promise<void> | null = null;
  return {
    port, url: `http://${host}:${port}`, services, log,
    close(copts = {}) {
      closing ??= (async () => {
        state.draining = true;
        proxy?.close();
        uws.us_listen_socket_close(listenSocket);
        unguard?.();
        if (state.inflight > 0) {
          await Promise.race([
            new Promise<void>((r) => state.idle.push(r)),
            new Promise<void>((r) => setTimeout(r, copts.timeoutMs ?? 10_000).unref()),
          ]);
        }
        (app as unknown as { close(): void }).close(); // drop idle keep-alive connections
        if (socketDir) rmSync(socketDir, { recursive: true, force: true });
        accessLog.flush();
        if (!copts.keepServices) await services.close();
        log.info({ inflight: state.inflight }, 'server closed');
      })();
      return closing;
    },
  };
}
