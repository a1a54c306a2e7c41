// `npm start`: a working Loom service on an embedded LMDB store under LOOM_DATA_DIR (default ./data),
// models from LOOM_MODELS_DIR (default <data>/models). Nothing else to set up.
import { createServer } from './index.ts';
import { createLogger } from './log.ts';
import { configFromEnv } from '../src/service/config.ts';
import { createServices } from '../src/service/index.ts';
import { createLocalRuntime } from '../src/service/runtime-local.ts';
import { onShutdownSignal } from '../src/service/shutdown.ts';
import { openStore, type Store, storePath } from '../src/store/index.ts';
import { redactUrl } from '../src/service/redact-url.ts';
import type { ModelRuntime } from '../src/service/runtime.ts';

const config = configFromEnv();
const log = createLogger();
// an inference node (`--role inference` without 'api'): the internal model server only (docs/deploy.md)
if (config.roles.has('inference') && !config.roles.has('api')) {
  await (await import('../src/service/nodes/node-main.ts')).serveNode(config, log);
  await new Promise(() => {}); // serves until a signal; serveNode exits the process then
}
// models held here (the 'inference' role, the default), or on the inference nodes registered in the store
let runtime: ModelRuntime;
let store: Store | undefined;
if (config.roles.has('inference')) {
  runtime = createLocalRuntime({
    modelsDir: config.modelsDir, maxLoaded: config.maxLoadedModels, retryAfterS: config.warmingRetryAfterS,
  });
} else {
  const { checkNodeSecret, nodeConfigFromEnv } = await import('../src/service/nodes/config.ts');
  const { createRemoteRuntime } = await import('../src/service/nodes/runtime-remote.ts');
  const { secret } = nodeConfigFromEnv();
  checkNodeSecret(secret, 'a process without the inference role (it routes to inference nodes)');
  store = await openStore(config.dataDir, { databaseUrl: config.databaseUrl, poolSize: config.databasePoolSize });
  runtime = await createRemoteRuntime({ store, secret, retryAfterS: config.warmingRetryAfterS, log });
}
const services = await createServices({ config, runtime, log, store });
const host = process.env.LOOM_HOST || '127.0.0.1';
const port = Number(process.env.LOOM_PORT || 8080);
const server = await createServer({ services, host, port, log });
const users = (await services.store.teams.list()).length;
const models = await services.runtime.listLocal();

const s3 = config.s3;
const artifactsLine = s3
  ? `s3://${s3.bucket}/${s3.prefix}${s3.endpoint ? ` at ${s3.endpoint}` : ''} (LOOM_S3_BUCKET), cache ${config.artifactsDir}`
  : config.artifactsDir === config.dataDir ? 'in the data folder' : `${config.artifactsDir} (LOOM_ARTIFACTS_DIR)`;

// `loom admin` works on the store of LOOM_DATA_DIR: it must name this server's data folder
const names = models.length ? `: ${models.map((m) => m.id).join(', ')}` : '';
const modelsLine = config.roles.has('inference') ? `${config.modelsDir} (${models.length} on disk${names})`
  : `on the inference nodes (${models.length} held${names})`;
const admin = `LOOM_DATA_DIR=${config.dataDir} npx loom admin`;
console.log(`Loom listening on ${server.url}
  data:   ${config.dataDir} (store ${storePath(config.dataDir)})
  models: ${modelsLine}
  artifacts: ${artifactsLine}
  roles:  ${[...config.roles].join(', ')}${process.env.LOOM_ROLE ? ' (LOOM_ROLE)' : ' (all: LOOM_ROLE or `loom serve --role` to choose)'}
  rate limits: ${config.redisUrl ? `shared in Redis ${redactUrl(config.redisUrl)}` : 'counted in this process'}
  admin:  ${admin} <command>   (the CLI must use this data folder: keys made in another store get 401)
${users ? '' : `
No accounts yet. Create a user and an API key:
  ${admin} create-user --email you@example.com --password 'a long password' --key default
  (add credits: ${admin} grant-credits --email you@example.com --credits 100)
Then:
  curl -H "X-API-Key: loom_sk_..." ${server.url}/base-models
`}`);

onShutdownSignal(log, 'shutting down: draining in-flight requests', () => server.close({ timeoutMs: 15_000 }));
