// Service configuration: defaults, overridable by environment variables (server/main.ts) or by the
// object passed to createServices (tests, library users).
import { join, resolve } from 'node:path';

export interface PlanConfig {
  id: string;
  /** 'free': one-time allowance; 'paid': monthly included credits + overage */
  kind: 'free' | 'paid';
  /** credits: free allowance (free) or monthly included credits (paid) */
  credits: number;
  /** paid plans: maximum overage spend per billing month, in credits (then 403 credit_ceiling_reached) */
  overage_ceiling: number;
  /** paid plans need a verified payment method (else 403 card_required) */
  requires_card: boolean;
}

export interface RateLimitRule { points: number; duration_s: number }

export interface RateLimitConfig {
  /** every request, per observed IP */
  edge: RateLimitRule;
  /** endpoints without an override, per client IP (all rules apply) */
  default: RateLimitRule[];
  /** per-endpoint limits per team/key/user (IP when unauthenticated); replace the IP default */
  endpoints: Array<{ method: string; pattern: string; group: string } & RateLimitRule>;
}

export interface ServiceConfig {
  dataDir: string;
  /**
   * datasets (and their uploads), training jobs (checkpoints, weights), evaluations: a folder every
   * node reads (LOOM_ARTIFACTS_DIR, e.g. a shared mount); default the data dir. See artifactDir().
   */
  artifactsDir: string;
  /** postgres://... : the store on PostgreSQL (LOOM_DATABASE_URL); null: LMDB under dataDir */
  databaseUrl: string | null;
  /** PostgreSQL connections per process (LOOM_DATABASE_POOL) */
  databasePoolSize: number;
  /**
   * S3-compatible object storage for the artifacts (LOOM_S3_BUCKET, ...; src/service/artifacts/s3.ts):
   * the bucket is where they live, `artifactsDir` this node's cache of it. null: the folder is the store.
   */
  s3: S3Config | null;
  /** default <artifactsDir>/models */
  modelsDir: string;
  /** Redis for request-rate limits shared by every process (LOOM_REDIS_URL); null: counted in this process */
  redisUrl: string | null;
  /** JSON catalog file that adds to / overrides the curated catalog */
  catalogFile: string | null;
  /** public base URL used in resolution_url links */
  publicUrl: string;
  /** max JSON body size in bytes (413 above) */
  maxBodyBytes: number;
  /** bodies above this size are parsed and validated in the worker pool */
  workerParseBytes: number;
  sessionTtlS: number;
  cookieSecure: boolean;
  trustProxy: boolean;
  plans: Record<string, PlanConfig>;
  defaultPlan: string;
  rateLimits: RateLimitConfig;
  /** loaded models kept in memory at once (least recently used is unloaded) */
  maxLoadedModels: number;
  /** Retry-After for 425 while a model warms, seconds */
  warmingRetryAfterS: number;
  workerThreads: number;
  /** customization: max size of a dataset upload (413 above) */
  maxUploadBytes: number;
  /** customization: lifetime of presigned upload/download URLs, seconds */
  signedUrlTtlS: number;
  /** customization: training jobs run at once (the rest wait in the queue) */
  trainingConcurrency: number;
  /**
   * billing: how long a call whose credit hold does not fit waits for the team's calls in progress
   * to settle before it is refused (402/403), milliseconds
   */
  creditHoldWaitMs: number;
  /** generation jobs (POST /generate) that run at once, over all teams; the rest wait `queued` */
  generationConcurrency: number;
  /** generation jobs that run at once per team; the rest wait `queued` */
  generationConcurrencyPerTeam: number;
  /**
   * what this process does (LOOM_ROLE / `loom serve --role`, docs/deploy.md): 'api' serves the HTTP API,
   * 'worker' runs customization jobs (training, evaluation, datasets, generation), 'inference' holds
   * models for API processes to route to. Default all three: one process does everything.
   */
  roles: ReadonlySet<Role>;
  /**
   * lifetime of a job's lease (LOOM_JOB_LEASE_S, src/service/jobs/leases.ts), ms: renewed every third of
   * it; a job whose process died on another machine is taken over after at most this long
   */
  jobLeaseMs: number;
}

export interface S3Config {
  bucket: string;
  /** S3-compatible stores (MinIO, Ceph, R2, ...): their URL; null: AWS S3 of `region` */
  endpoint: string | null;
  region: string;
  /** keys start with this (e.g. 'loom/'), so one bucket can hold several installs */
  prefix: string;
  /** bucket in the path (http://host/bucket/key), as most S3-compatible stores want */
  forcePathStyle: boolean;
}

export type Role = 'api' | 'inference' | 'worker';
export const ROLES: readonly Role[] = ['api', 'inference', 'worker'];

/** 'all', or a comma list of roles ('api,worker'); throws on an unknown role */
export function parseRoles(spec: string | undefined | null): ReadonlySet<Role> {
  const text = (spec ?? '').trim();
  if (text === '' || text === 'all') return new Set(ROLES);
  const roles = new Set<Role>();
  for (const part of text.split(',').map((x) => x.trim()).filter(Boolean)) {
    if (part === 'all') ROLES.forEach((r) => roles.add(r));
    else if ((ROLES as readonly string[]).includes(part)) roles.add(part as Role);
    else throw new Error(`unknown role '${part}' (roles: ${ROLES.join(', ')}, all)`);
  }
  if (!roles.size) throw new Error(`no role given (roles: ${ROLES.join(', ')}, all)`);
  return roles;
}

export const DEFAULT_RATE_LIMITS: RateLimitConfig = {
  edge: { points: 100_000, duration_s: 60 },
  default: [{ points: 20_000, duration_s: 60 }, { points: 1_000_000, duration_s: 3600 }],
  endpoints: [
    { method: 'POST', pattern: '/inference', group: 'inference', points: 5000, duration_s: 60 },
    { method: 'POST', pattern: '/v1/chat/completions', group: 'compat', points: 5000, duration_s: 60 },
    { method: 'POST', pattern: '/v1/completions', group: 'compat', points: 5000, duration_s: 60 },
    { method: 'POST', pattern: '/v1/responses', group: 'compat', points: 5000, duration_s: 60 },
    { method: 'POST', pattern: '/v1/messages', group: 'compat', points: 5000, duration_s: 60 },
    { method: 'POST', pattern: '/gliner-2/*', group: 'gliner2', points: 15_000, duration_s: 60 },
    { method: 'POST', pattern: '/generate', group: 'generate', points: 120, duration_s: 60 },
    { method: 'POST', pattern: '/generate/*', group: 'generate', points: 120, duration_s: 60 },
    { method: 'POST', pattern: '/felix/training-jobs', group: 'training', points: 20, duration_s: 60 },
  ],
};

export const DEFAULT_PLANS: Record<string, PlanConfig> = {
  free: { id: 'free', kind: 'free', credits: 100, overage_ceiling: 0, requires_card: false },
  pro: { id: 'pro', kind: 'paid', credits: 2000, overage_ceiling: 10_000, requires_card: true },
  scale: { id: 'scale', kind: 'paid', credits: 20_000, overage_ceiling: 200_000, requires_card: true },
};

export function defaultConfig(over: Partial<ServiceConfig> = {}): ServiceConfig {
  const dataDir = resolve(over.dataDir ?? './data');
  const artifactsDir = resolve(over.artifactsDir ?? dataDir);
  return {
    dataDir,
    artifactsDir,
    s3: over.s3 ?? null,
    databaseUrl: over.databaseUrl ?? null,
    databasePoolSize: over.databasePoolSize ?? 10,
    modelsDir: resolve(over.modelsDir ?? join(artifactsDir, 'models')),
    redisUrl: over.redisUrl ?? null,
    catalogFile: over.catalogFile ?? null,
    publicUrl: over.publicUrl ?? 'http://127.0.0.1:8080',
    maxBodyBytes: over.maxBodyBytes ?? 10 * 1024 * 1024,
    workerParseBytes: over.workerParseBytes ?? 1024 * 1024,
    sessionTtlS: over.sessionTtlS ?? 12 * 3600,
    cookieSecure: over.cookieSecure ?? false,
    trustProxy: over.trustProxy ?? false,
    plans: over.plans ?? DEFAULT_PLANS,
    defaultPlan: over.defaultPlan ?? 'free',
    rateLimits: over.rateLimits ?? DEFAULT_RATE_LIMITS,
    maxLoadedModels: over.maxLoadedModels ?? 4,
    warmingRetryAfterS: over.warmingRetryAfterS ?? 5,
    workerThreads: over.workerThreads ?? 2,
    maxUploadBytes: over.maxUploadBytes ?? 256 * 1024 * 1024,
    signedUrlTtlS: over.signedUrlTtlS ?? 3600,
    trainingConcurrency: over.trainingConcurrency ?? 1,
    creditHoldWaitMs: over.creditHoldWaitMs ?? 60_000,
    generationConcurrency: over.generationConcurrency ?? 8,
    generationConcurrencyPerTeam: over.generationConcurrencyPerTeam ?? 2,
    roles: over.roles ?? new Set(ROLES),
    jobLeaseMs: over.jobLeaseMs ?? 30_000,
  };
}

/** the kinds of artifact that live under the artifacts dir, one folder each */
export type ArtifactKind = 'datasets' | 'jobs' | 'evaluations' | 'models';

/**
 * The folder of one kind of artifact: <artifactsDir>/<kind>, the one place these paths are derived
 * (datasets and uploads: datasets/<team>/<dataset>/<version>; training jobs with their checkpoints
 * and weights: jobs/<id>; evaluations: evaluations/<id>; models, unless LOOM_MODELS_DIR moves them).
 */
export function artifactDir(config: Pick<ServiceConfig, 'artifactsDir' | 'modelsDir'>, kind: ArtifactKind): string {
  return kind === 'models' ? config.modelsDir : join(config.artifactsDir, kind);
}

/** LOOM_S3_* (credentials: the AWS SDK's own chain, e.g. AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY) */
export function s3FromEnv(env: NodeJS.ProcessEnv): S3Config | null {
  if (!env.LOOM_S3_BUCKET) return null;
  const endpoint = env.LOOM_S3_ENDPOINT || null;
  const flag = env.LOOM_S3_FORCE_PATH_STYLE;
  const prefix = (env.LOOM_S3_PREFIX ?? '').replace(/^\/+/, '');
  return {
    bucket: env.LOOM_S3_BUCKET, endpoint, region: env.LOOM_S3_REGION || env.AWS_REGION || 'us-east-1',
    prefix: prefix && !prefix.endsWith('/') ? `${prefix}/` : prefix,
    forcePathStyle: flag ? flag === '1' || flag === 'true' : endpoint !== null,
  };
}

/** Configuration from LOOM_* environment variables (see README). */
export function configFromEnv(env: NodeJS.ProcessEnv = process.env): ServiceConfig {
  const num = (v: string | undefined) => (v !== undefined && v !== '' && Number.isFinite(Number(v)) ? Number(v) : undefined);
  const port = num(env.LOOM_PORT) ?? 8080;
  return defaultConfig({
    dataDir: env.LOOM_DATA_DIR || './data',
    artifactsDir: env.LOOM_ARTIFACTS_DIR || undefined,
    s3: s3FromEnv(env),
    databaseUrl: env.LOOM_DATABASE_URL || null,
    databasePoolSize: num(env.LOOM_DATABASE_POOL),
    modelsDir: env.LOOM_MODELS_DIR || undefined,
    redisUrl: env.LOOM_REDIS_URL || null,
    catalogFile: env.LOOM_CATALOG_FILE || null,
    publicUrl: env.LOOM_PUBLIC_URL || `http://${env.LOOM_HOST || '127.0.0.1'}:${port}`,
    maxBodyBytes: num(env.LOOM_MAX_BODY_BYTES),
    cookieSecure: env.LOOM_COOKIE_SECURE === '1',
    trustProxy: env.LOOM_TRUST_PROXY === '1',
    maxLoadedModels: num(env.LOOM_MAX_LOADED_MODELS),
    workerThreads: num(env.LOOM_WORKER_THREADS),
    maxUploadBytes: num(env.LOOM_MAX_UPLOAD_BYTES),
    signedUrlTtlS: num(env.LOOM_SIGNED_URL_TTL_S),
    trainingConcurrency: num(env.LOOM_TRAINING_CONCURRENCY),
    creditHoldWaitMs: num(env.LOOM_CREDIT_HOLD_WAIT_MS),
    generationConcurrency: num(env.LOOM_GENERATION_CONCURRENCY),
    generationConcurrencyPerTeam: num(env.LOOM_GENERATION_CONCURRENCY_PER_TEAM),
    roles: parseRoles(env.LOOM_ROLE),
    jobLeaseMs: num(env.LOOM_JOB_LEASE_S) === undefined ? undefined : num(env.LOOM_JOB_LEASE_S)! * 1000,
    rateLimits: env.LOOM_RATE_LIMITS ? { ...DEFAULT_RATE_LIMITS, ...JSON.parse(env.LOOM_RATE_LIMITS) } : undefined,
  });
}
