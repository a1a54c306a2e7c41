// Training jobs as stored records (the training service owns their life cycle; the service core
// reads them to deploy and serve). Listed per team, newest first, with a status index.
import { type Db, ikey, scanIndex } from './db.ts';
import type { TrainingJobRecord } from './types.ts';

export function makeTrainingJobsRepo(db: Db) {
  const { training_jobs: jobs, idx } = db.dbs;
  const teamKey = (j: TrainingJobRecord) => ikey('job_team', j.team_id, Date.parse(j.created_at), j.id);
  return {
    get: (id: string): TrainingJobRecord | undefined => jobs.get(id),
    /** inside a transaction (or use `save`) */
    put(j: TrainingJobRecord): void { jobs.put(j.id, j); idx.put(teamKey(j), null); },
    save(j: TrainingJobRecord): Promise<void> { return db.tx(() => this.put(j)); },
    /** inside a transaction */
    remove(id: string): void {
      const j = jobs.get(id) as TrainingJobRecord | undefined;
      if (!j) return;
      idx.remove(teamKey(j));
      jobs.remove(id);
    },
    listByTeam(teamId: string): TrainingJobRecord[] {
      return [...scanIndex(db, ['job_team', teamId])].map((id) => jobs.get(id)).filter(Boolean);
    },
    reindex(): void { for (const { value } of jobs.getRange()) idx.put(teamKey(value as TrainingJobRecord), null); },
  };
}
export type TrainingJobsRepo = ReturnType<typeof makeTrainingJobsRepo>;
