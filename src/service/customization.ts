// The customization half of Loom, wired: the worker pool (dataset processing, training,
// evaluation), signed URLs, datasets, training jobs and evaluations, the job leases and their
// supervisor (src/service/jobs/leases.ts) and, on PostgreSQL, the durable job queue
// (src/service/jobs/queue.ts). createServices spreads `services` into the service object and calls
// `close()` on shutdown.
import type { Store } from '../store/index.ts';
import type { ArtifactStore } from './artifacts/types.ts';
import type { Catalog } from './catalog.ts';
import type { ServiceConfig } from './config.ts';
import { createDatasetsService } from './datasets.ts';
import { createEvaluationsService } from './evaluations.ts';
import { createGenerationService } from './generation.ts';
import type { Logger } from './index.ts';
import type { InferenceService } from './inference.ts';
import { createLeases } from './jobs/leases.ts';
import { createJobPool } from './jobs/pool.ts';
import type { JobQueue } from './jobs/queue.ts';
import type { ModelRuntime } from './runtime.ts';
import { createSignedUrls } from './signed-urls.ts';
import { createTrainingJobsService } from './training-jobs.ts';
import type { RewardJudge } from './training/rl-jobs.ts';

export async function createCustomization(deps: {
  store: Store; config: ServiceConfig; runtime: ModelRuntime; catalog: Catalog; inference: InferenceService; log?: Logger;
  /** where datasets, checkpoints and weights live (src/service/artifacts) */
  artifacts: ArtifactStore;
  /** GRPO llm_as_judge rewards (the service's LLM judge) */
  judge?: RewardJudge;
}) {
  const { store, config, runtime, catalog, inference, log, judge, artifacts } = deps;
  // training jobs (trainingConcurrency) + one evaluation + one dataset task at a time
  const jobPool = createJobPool({ threads: config.trainingConcurrency + 2 });
  const signedUrls = await createSignedUrls(store);
  const leases = createLeases({ store, ttlMs: config.jobLeaseMs, log });
  // the durable queue lives in the PostgreSQL store's database; LMDB keeps the in-process scheduler
  const queue: JobQueue | null = config.databaseUrl
    // loaded only on PostgreSQL: pg-boss and pg cost ~0.25 CPU-s to import
    ? await (await import('./jobs/queue.ts')).openJobQueue({ url: config.databaseUrl, log }) : null;
  const datasets = createDatasetsService({
    store, config, pool: jobPool, urls: signedUrls, artifacts, log, leases, queue,
  });
  const trainingJobs = createTrainingJobsService({
    store, config, pool: jobPool, urls: signedUrls, artifacts, datasets, catalog, runtime, log, judge, leases, queue,
  });
  const evaluations = createEvaluationsService({
    store, config, pool: jobPool, artifacts, datasets, catalog, runtime, trainingJobs, log, leases, queue,
  });
  const generation = createGenerationService({ store, config, inference, datasets, log, leases, queue });
  await datasets.resumePending();
  await generation.resumePending();
  await trainingJobs.resumePending();
  await evaluations.resumePending();
  leases.start();
  return {
    services: { jobPool, signedUrls, datasets, trainingJobs, evaluations, generation, leases },
    async close() {
      await generation.shutdown();
      await trainingJobs.shutdown();
      await evaluations.shutdown();
      await datasets.shutdown(2000);
      await jobPool.close();
      await queue?.close();
      // after the pool: no job of this process runs any more when its lease goes
      await leases.close();
    },
  };
}
