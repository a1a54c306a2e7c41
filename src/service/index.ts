// All services, wired. Framework-free: the HTTP layer (server/) and the CLI (src/cli/) both use
// `createServices`; library users can too.
import { openStore, type Store } from '../store/index.ts';
import { type ServiceConfig, defaultConfig } from './config.ts';
import { createAuthService } from './auth.ts';
import { createBillingService } from './billing.ts';
import { createCatalog } from './catalog.ts';
import { createHistoryService } from './history.ts';
import { createInferenceService } from './inference.ts';
import { createCompatService } from './compat/call.ts';
import { createMetrics } from './metrics.ts';
import { createProjectsService } from './projects.ts';
import { createRateLimiter, type RateLimiter } from './ratelimit.ts';
import type { ModelRuntime } from './runtime.ts';
import { createRoutePolicy, loadRouterPolicy, type RouterPolicy } from './router.ts';
import { createWorkerPool } from './workers.ts';
import { createCustomization } from './customization.ts';
import { createArtifactStore } from './artifacts/index.ts';
import { createJudgeService } from './judge/index.ts';
import { type AdaptiveService, createAdaptiveService } from './adaptive/index.ts';
import type { RewardJudge } from './training/rl-jobs.ts';

export interface Logger { info(o: object, m?: string): void; warn(o: object, m?: string): void; error(o: object, m?: string): void; debug?(o: object, m?: string): void }

export interface ServicesOptions {
  config?: Partial<ServiceConfig> | ServiceConfig;
  /** an already-open store (else opened under config.dataDir) */
  store?: Store;
  /** the model runtime (src/service/runtime-local.ts in production) */
  runtime: ModelRuntime;
  log?: Logger;
  /** the `service/auto` policy (default: LOOM_ROUTER_POLICY's file, else the documented defaults) */
  routerPolicy?: RouterPolicy;
  /** the judge of GRPO llm_as_judge rewards (injection point: the service's LLM judge, src/service/judge) */
  judge?: RewardJudge;
}

export async function createServices(opts: ServicesOptions) {
  const config = defaultConfig(opts.config ?? {});
  const log = opts.log;
  // LOOM_REDIS_URL: windows shared by every process (fail-open on an outage); else in this process.
  // First, so that a malformed URL fails the start before anything is opened.
  let rateLimiter: RateLimiter;
  if (config.redisUrl) {
    // loaded only when configured: ioredis and rate-limiter-flexible cost ~0.2 CPU-s to import
    const { createRedisRateLimiter } = await import('./ratelimit-redis.ts');
    const shared = createRedisRateLimiter(config.rateLimits, { url: config.redisUrl, log });
    await shared.ready();
    rateLimiter = shared;
  } else rateLimiter = createRateLimiter(config.rateLimits);
  const store = opts.store
    ?? (await openStore(config.dataDir, { databaseUrl: config.databaseUrl, poolSize: config.databasePoolSize }));
  // datasets, checkpoints, weights: the artifacts folder, or an S3 bucket it caches (src/service/artifacts)
  const artifacts = await createArtifactStore(config);
  const runtime = opts.runtime;
  const metrics = createMetrics({ defaultMetrics: true, queueDepth: () => runtime.stats().queue_depth });
  const billing = createBillingService(store, config);
  const auth = createAuthService(store, config, billing);
  const catalog = createCatalog({ runtime, catalogFile: config.catalogFile, store });
  const inference = createInferenceService({ store, config, billing, catalog, runtime, metrics, log, artifacts });
  // `service/auto`: the documented router policy (src/service/router.ts, LOOM_ROUTER_POLICY), set
  // here once for every endpoint that routes (/inference, /gliner-2/*, /v1/*)
  inference.setRoutePolicy(createRoutePolicy(opts.routerPolicy ?? loadRouterPolicy()));
  // LLM-as-judge (src/service/judge/): samples stored inferences, judges them in the background
  const judge = createJudgeService({ store, inference, runtime, catalog, log });
  inference.setStoredHooks({ inTx: judge.sampleInTx, after: judge.stored });
  const compat = createCompatService({ inference, runtime, catalog, store });
  // corrections → adaptive retraining (created below, with the customization services it drives)
  let adaptive: AdaptiveService | null = null;
  const history = createHistoryService(store, { corrected: (e) => adaptive?.corrected(e) });
  const projects = createProjectsService({ store, runtime, inference, log, artifacts });
  const workers = createWorkerPool({ threads: config.workerThreads });
  await projects.resumePending();
  await judge.resumePending();
  // datasets, training jobs, evaluations, generation (src/service/customization.ts)
  const customization = await createCustomization({
    store, config, runtime, catalog, inference, log, artifacts, judge: opts.judge ?? judge.rewardJudge,
  });
  const { datasets, trainingJobs, evaluations } = customization.services;
  adaptive = createAdaptiveService({ store, datasets, trainingJobs, evaluations, projects, log });
  await adaptive.start();
  let closed = false;
  return {
    config, store, runtime, metrics, billing, auth, catalog, inference, compat, history, projects, rateLimiter, workers,
    judge, artifacts,
    ...customization.services,
    adaptive,
    /** flush and close everything (after the HTTP layer drained) */
    async close() {
      if (closed) return;
      closed = true;
      await adaptive!.shutdown();
      await projects.settle(2000);
      await judge.close(2000);
      await customization.close();
      artifacts.close();
      await workers.close();
      await runtime.close();
      await auth.close();
      await rateLimiter.close();
      await store.close();
    },
  };
}
export type Services = Awaited<ReturnType<typeof createServices>>;
export { ServiceError } from './errors.ts';
