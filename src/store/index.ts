// The store: an LMDB environment and one repository per resource. `openStore(dataDir)` opens (or
// creates) <dataDir>/store and migrates it to SCHEMA_VERSION.
import { type Db, type Migration, openDb, SCHEMA_VERSION } from './db.ts';
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

export { authGeneration, onCommit, SCHEMA_VERSION, ikey, scanIndex, storeExists, storePath } from './db.ts';
export type * from './types.ts';
export type * from './customization-types.ts';
export type { JudgeConfigRecord, JudgeQueueEntry, JudgementFields } from './judges.ts';

function makeRepos(db: Db) {
  return {
    users: makeUsersRepo(db),
    teams: makeTeamsRepo(db),
    sessions: makeSessionsRepo(db),
    keys: makeKeysRepo(db),
    accounts: makeAccountsRepo(db),
    usage: makeUsageRepo(db),
    inferences: makeInferencesRepo(db),
    judges: makeJudgesRepo(db),
    feedback: makeFeedbackRepo(db),
    examples: makeExamplesRepo(db),
    projects: makeProjectsRepo(db),
    deployments: makeDeploymentsRepo(db),
    trainingJobs: makeTrainingJobsRepo(db),
    datasets: makeDatasetsRepo(db),
    trainingArtifacts: makeTrainingArtifactsRepo(db),
    evaluations: makeEvaluationsRepo(db),
    generationJobs: makeGenerationJobsRepo(db),
    adaptiveRuns: makeAdaptiveRunsRepo(db),
  };
}
export type Repos = ReturnType<typeof makeRepos>;

export interface Store extends Repos {
  db: Db;
  /** one write transaction across repositories: all writes in `fn` commit together */
  tx<T>(fn: () => T): Promise<T>;
  /** flush pending writes and close the environment */
  close(): Promise<void>;
}

/**
 * Migrations, in order. v1 → v2: secondary indexes moved into the shared `idx` database with
 * timestamped keys (history filters by time range); the migration rebuilds every index from the
 * primary records, which also repairs a store whose indexes were lost.
 */
export const MIGRATIONS: Migration[] = [
  {
    to: 2,
    description: 'rebuild all secondary indexes into idx',
    run(db) {
      for (const k of [...db.dbs.idx.getKeys()]) db.dbs.idx.remove(k);
      const r = makeRepos(db);
      for (const repo of Object.values(r)) if ('reindex' in repo) (repo as { reindex(): void }).reindex();
    },
  },
];

export async function openStore(dataDir: string): Promise<Store> {
  const db = await openDb(dataDir, MIGRATIONS);
  const repos = makeRepos(db);
  let closed = false;
  return {
    ...repos,
    db,
    tx: db.tx,
    async close() {
      if (closed) return;
      closed = true;
      await db.root.committed;
      await db.root.close();
    },
  };
}
