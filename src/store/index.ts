// The store: one repository per resource over a `Db` (db.ts), which is LMDB under <dataDir>/store
// (lmdb.ts, the default) or PostgreSQL when a database URL is given (postgres/). `openStore` opens
// (or creates) it and migrates it to SCHEMA_VERSION. The store's own repositories read committed
// data; `store.tx(async (t) => ...)` hands `fn` the same repositories bound to one transaction.
import { type Db, type Kv, type Migration, readOnly, SCHEMA_VERSION, type TxOptions } from './db.ts';
import { openLmdb } from './lmdb.ts';
import { makeUsersRepo } from './users.ts';
import { makeTeamsRepo } from './teams.ts';
import { makeSessionsRepo } from './sessions.ts';
import { makeKeysRepo } from './keys.ts';
import { makeAccountsRepo } from './accounts.ts';
import { makeUsageRepo } from './usage.ts';
import { makeInferencesRepo } from './inferences.ts';
import { makeJudgesRepo } from './judges.ts';
import { makeFeedbackRepo } from './feedback.ts';
import { makeExamplesRepo } from './examples.ts';
import { makeProjectsRepo } from './projects.ts';
import { makeDeploymentsRepo } from './deployments.ts';
import { makeTrainingJobsRepo } from './training-jobs.ts';
import { makeDatasetsRepo } from './datasets.ts';
import { makeTrainingArtifactsRepo } from './training-artifacts.ts';
import { makeEvaluationsRepo, makeGenerationJobsRepo } from './evaluations.ts';
import { makeAdaptiveRunsRepo } from './adaptive-runs.ts';
import { makeInferenceNodesRepo } from './inference-nodes.ts';
import { makeLeasesRepo } from './leases.ts';
import { makeCreditHoldsRepo } from './credit-holds.ts';

export { onCommit, SCHEMA_VERSION, ikey, scanIndex } from './db.ts';
export { storeExists, storePath } from './lmdb.ts';
export type * from './types.ts';
export type * from './customization-types.ts';
export type { JudgeConfigRecord, JudgeQueueEntry, JudgementFields } from './judges.ts';
export type { InferenceNodeRecord, NodeModel } from './inference-nodes.ts';
export type { LeaseKind, LeaseRecord } from './leases.ts';
export type { CreditHold } from './credit-holds.ts';

/** small values in `meta` (schema version, the auth generation, the signing secret) */
function makeMetaRepo(h: Kv) {
  return {
    get: (key: string): Promise<unknown> => h.get('meta', key),
    /** inside a transaction */
    put: (key: string, value: unknown): void => { h.put('meta', key, value); },
  };
}

/** the repositories over `h`, each made on first use (a transaction uses a few of them) */
function makeRepos(h: Kv) {
  const made = new Map<string, unknown>();
  const lazy = <T>(name: string, make: () => T): T => {
    let r = made.get(name) as T | undefined;
    if (r === undefined) made.set(name, (r = make()));
    return r;
  };
  return {
    get meta() { return lazy('meta', () => makeMetaRepo(h)); },
    get users() { return lazy('users', () => makeUsersRepo(h)); },
    get teams() { return lazy('teams', () => makeTeamsRepo(h)); },
    get sessions() { return lazy('sessions', () => makeSessionsRepo(h)); },
    get keys() { return lazy('keys', () => makeKeysRepo(h)); },
    get accounts() { return lazy('accounts', () => makeAccountsRepo(h)); },
    get usage() { return lazy('usage', () => makeUsageRepo(h)); },
    get inferences() { return lazy('inferences', () => makeInferencesRepo(h)); },
    get judges() { return lazy('judges', () => makeJudgesRepo(h)); },
    get feedback() { return lazy('feedback', () => makeFeedbackRepo(h)); },
    get examples() { return lazy('examples', () => makeExamplesRepo(h)); },
    get projects() { return lazy('projects', () => makeProjectsRepo(h)); },
    get deployments() { return lazy('deployments', () => makeDeploymentsRepo(h)); },
    get trainingJobs() { return lazy('trainingJobs', () => makeTrainingJobsRepo(h)); },
    get datasets() { return lazy('datasets', () => makeDatasetsRepo(h)); },
    get trainingArtifacts() { return lazy('trainingArtifacts', () => makeTrainingArtifactsRepo(h)); },
    get evaluations() { return lazy('evaluations', () => makeEvaluationsRepo(h)); },
    get generationJobs() { return lazy('generationJobs', () => makeGenerationJobsRepo(h)); },
    get adaptiveRuns() { return lazy('adaptiveRuns', () => makeAdaptiveRunsRepo(h)); },
    get inferenceNodes() { return lazy('inferenceNodes', () => makeInferenceNodesRepo(h)); },
    get leases() { return lazy('leases', () => makeLeasesRepo(h)); },
    get creditHolds() { return lazy('creditHolds', () => makeCreditHoldsRepo(h)); },
  };
}
export type Repos = ReturnType<typeof makeRepos>;
/** what a transaction's `fn` gets: every repository, reading and writing through the transaction */
export type Tx = Repos;

export interface Store extends Repos {
  db: Db;
  /**
   * One transaction across repositories: everything `fn` reads and writes through `t` is one
   * transaction; its writes commit together when `fn` resolves (durably), or not at all when it
   * throws. `fn` may run again when another process changed what it read (see db.ts).
   */
  tx<T>(fn: (t: Tx) => Promise<T> | T, opts?: TxOptions): Promise<T>;
  /** resolves once every transaction started so far has committed (or failed) */
  settled(): Promise<void>;
  /** flush pending writes and close */
  close(): Promise<void>;
}

const REPO_NAMES = [
  'users', 'teams', 'sessions', 'keys', 'accounts', 'usage', 'inferences', 'judges', 'feedback', 'examples', 'projects',
  'deployments', 'trainingJobs', 'datasets', 'trainingArtifacts', 'evaluations', 'generationJobs', 'adaptiveRuns',
  'leases',
] as const;

/**
 * Migrations of an LMDB store, in order. v1 → v2: secondary indexes moved into the shared `idx`
 * database with timestamped keys (history filters by time range); the migration rebuilds every
 * index from the primary records, which also repairs a store whose indexes were lost. (A PostgreSQL
 * store's schema is its SQL migrations, postgres/migrations/; it starts at SCHEMA_VERSION.)
 */
export const MIGRATIONS: Migration[] = [
  {
    to: 2,
    description: 'rebuild all secondary indexes into idx',
    async run(h) {
      for (const { key } of await h.range('idx')) h.remove('idx', key);
      const r = makeRepos(h);
      for (const name of REPO_NAMES) {
        const repo = r[name] as { reindex?: () => Promise<void> };
        if (repo.reindex) await repo.reindex();
      }
    },
  },
];

async function migrate(db: Db, migrations: Migration[]): Promise<void> {
  const found = (await db.read.get('meta', 'schema_version')) as number | undefined;
  if (found === undefined) {
    // a fresh store: nothing to migrate
    await db.tx((h) => { h.put('meta', 'schema_version', SCHEMA_VERSION); });
    return;
  }
  if (found > SCHEMA_VERSION) {
    throw new Error(`store schema version ${found} is newer than this Loom (${SCHEMA_VERSION}); upgrade Loom`);
  }
  for (const m of [...migrations].sort((a, b) => a.to - b.to)) {
    if (m.to <= found) continue;
    await db.tx(async (h) => {
      await m.run(h);
      h.put('meta', 'schema_version', m.to);
    });
  }
  if ((await db.read.get('meta', 'schema_version')) !== SCHEMA_VERSION) {
    await db.tx((h) => { h.put('meta', 'schema_version', SCHEMA_VERSION); });
  }
}

export interface StoreOptions {
  /** postgres://... : the PostgreSQL store (default: LMDB under dataDir) */
  databaseUrl?: string | null;
  /** PostgreSQL connections of this process */
  poolSize?: number;
}

export async function openStore(dataDir: string, opts: StoreOptions = {}): Promise<Store> {
  let db: Db;
  if (opts.databaseUrl) {
    // loaded only when used: the embedded default never loads the PostgreSQL client
    const { openPostgres } = await import('./postgres/index.ts');
    db = await openPostgres(opts.databaseUrl, { poolSize: opts.poolSize });
  } else {
    db = await openLmdb(dataDir);
    try { await migrate(db, MIGRATIONS); } catch (e) { await db.close(); throw e; }
  }
  const repos = makeRepos(readOnly(db.read));
  const store = Object.create(repos) as Store;
  return Object.assign(store, {
    db,
    tx: <T>(fn: (t: Tx) => Promise<T> | T, opts?: TxOptions) => db.tx((h) => fn(makeRepos(h)), opts),
    settled: () => db.settled(),
    close: () => db.close(),
  });
}
