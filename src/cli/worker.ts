// `loom worker`: a process that runs customization jobs and serves no HTTP API (no port, no /health:
// its liveness is its job leases in the store, and the supervisor of every other process takes its
// jobs over when they expire). The same services as `npm start` with only the 'worker' role: it opens
// the store (LOOM_DATABASE_URL, else LMDB under LOOM_DATA_DIR) and the artifacts folder, starts the
// worker pool and consumes training jobs, evaluations, dataset processing and generation from the
// pg-boss queue on PostgreSQL (LOOM_TRAINING_CONCURRENCY training jobs, one evaluation, one dataset
// and up to LOOM_GENERATION_CONCURRENCY generation jobs at once), or training jobs from the store on
// LMDB (processes of one machine). SIGTERM or SIGINT stops it: running jobs stop where they
// are, their leases are released, and another worker (or the next start) queues them again under the
// restart rules (docs/deploy.md, docs/job-queue.md).
import { createLogger } from '../../server/log.ts';
import { configFromEnv, defaultConfig } from '../service/config.ts';
import { createServices } from '../service/index.ts';
import { createLocalRuntime } from '../service/runtime-local.ts';
import { onShutdownSignal } from '../service/shutdown.ts';
import { storePath } from '../store/index.ts';

export async function main(argv: string[]): Promise<number> {
  for (const a of argv) {
    if (a === '--help' || a === '-h') {
      console.log('usage: loom worker\n'
        + '  runs training jobs, evaluations, dataset processing and generation (and the job supervisor)\n'
        + '  without an HTTP API;\n'
        + '  environment as for `npm start`'
        + ' (LOOM_DATABASE_URL, LOOM_DATA_DIR, LOOM_ARTIFACTS_DIR, LOOM_TRAINING_CONCURRENCY, LOOM_JOB_LEASE_S;\n'
        + '  docs/deploy.md)');
      return 0;
    }
    console.error(`loom worker: unknown option ${a}`);
    return 2;
  }
  const config = defaultConfig({ ...configFromEnv(), roles: new Set(['worker']) });
  const log = createLogger();
  const runtime = createLocalRuntime({
    modelsDir: config.modelsDir, maxLoaded: config.maxLoadedModels, retryAfterS: config.warmingRetryAfterS,
  });
  const services = await createServices({ config, runtime, log });
  const store = config.databaseUrl
    ? `PostgreSQL (LOOM_DATABASE_URL); training jobs (${config.trainingConcurrency} at once), evaluations,`
      + ` dataset processing and generation (${config.generationConcurrency} at once) from its pg-boss queue`
    : `LMDB ${storePath(config.dataDir)}; training jobs from the store, ${config.trainingConcurrency} at once`;
  console.log(`Loom worker ${services.leases.owner} (pid ${process.pid})
  store:  ${store}
  artifacts: ${config.artifactsDir}${config.artifactsDir === config.dataDir ? ' (the data folder)' : ''}
  models: ${config.modelsDir}
  leases: ${Math.round(services.leases.ttlMs / 1000)} s (LOOM_JOB_LEASE_S); no HTTP API`);

  onShutdownSignal(log, 'worker shutting down: stopping jobs and releasing their leases', () => services.close());
  return new Promise<number>(() => {});
}
