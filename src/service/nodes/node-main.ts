// `loom serve --role inference` (LOOM_ROLE=inference, without 'api'): an inference node. It holds the
// models of its models folder (runtime-local.ts), serves them to API processes on its internal endpoint
// (node-server.ts) at LOOM_HOST:LOOM_PORT, registers in the shared store with a heartbeat (registry.ts)
// and deregisters on SIGINT/SIGTERM, after which it drains its calls and exits. It opens the store only
// for its registration: no accounts, billing or jobs run here.
import { hostname } from 'node:os';
import type { ServiceConfig } from '../config.ts';
import type { Logger } from '../index.ts';
import { createLocalRuntime } from '../runtime-local.ts';
import { onShutdownSignal } from '../shutdown.ts';
import { openStore } from '../../store/index.ts';
import { checkNodeSecret, defaultNodeId, nodeConfigFromEnv } from './config.ts';
import { startNodeServer } from './node-server.ts';
import { startHeartbeat } from './registry.ts';

export async function serveNode(
  config: ServiceConfig, log: Logger, env: NodeJS.ProcessEnv = process.env,
): Promise<void> {
  const nc = nodeConfigFromEnv(env);
  checkNodeSecret(nc.secret, 'an inference node');
  const host = env.LOOM_HOST || '127.0.0.1';
  const runtime = createLocalRuntime({
    modelsDir: config.modelsDir, maxLoaded: config.maxLoadedModels, retryAfterS: config.warmingRetryAfterS,
  });
  const store = await openStore(config.dataDir, { databaseUrl: config.databaseUrl, poolSize: 2 });
  const server = await startNodeServer({
    runtime, secret: nc.secret, host, port: Number(env.LOOM_PORT || 8080), maxQueue: nc.maxQueue, log,
  });
  const id = nc.id ?? defaultNodeId(server.port);
  // a node listening on every interface is reached at this machine's name
  const url = nc.url ?? (host === '0.0.0.0' || host === '::' ? `http://${hostname()}:${server.port}` : server.url);
  const started_at = new Date().toISOString();
  const heartbeat = await startHeartbeat(store, {
    intervalMs: nc.heartbeatMs,
    async record() {
      const st = runtime.stats();
      const models = (await runtime.listLocal()).map((m) => ({ ...m }));
      return {
        id, url, models, loaded: [...st.loaded], warming: [...st.warming],
        queue_depth: server.inflight(), max_queue: nc.maxQueue, started_at,
      };
    },
  }, log);
  const models = await runtime.listLocal();
  const names = models.length ? `: ${models.map((m) => m.id).join(', ')}` : '';
  console.log(`Loom inference node ${id} listening on ${server.url} (registered as ${url})
  store:  ${config.databaseUrl ? 'PostgreSQL (LOOM_DATABASE_URL)' : config.dataDir}
  models: ${config.modelsDir} (${models.length} on disk${names})
  heartbeat every ${nc.heartbeatMs} ms; at most ${nc.maxQueue} calls at once (LOOM_NODE_MAX_QUEUE)`);

  // out of the registry first, so no API process sends it more work; then the calls in progress end
  onShutdownSignal(log, 'inference node shutting down: deregistering, draining calls', async () => {
    await heartbeat.stop();
    await server.close(15_000);
    await runtime.close();
    await store.close();
  });
}
