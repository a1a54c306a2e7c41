// Training jobs as stored records (the training service owns their life cycle; the service core
// reads them to deploy and serve). Listed per team, newest first.
import { allRecords, ikey, type Kv, removeIndexed, scanRecords } from './db.ts';
import type { TrainingJobRecord } from './types.ts';

export function makeTrainingJobsRepo(h: Kv) {
  const teamKey = (j: TrainingJobRecord) => ikey('job_team', j.team_id, Date.parse(j.created_at), j.id);
  return {
    get: (id: string): Promise<TrainingJobRecord | undefined> => h.get('training_jobs', id),
    /** inside a transaction */
    put(j: TrainingJobRecord): void { h.put('training_jobs', j.id, j); h.put('idx', teamKey(j), null); },
    /** inside a transaction */
    remove: (id: string): Promise<void> => removeIndexed<TrainingJobRecord>(h, 'training_jobs', id, teamKey),
    listByTeam: (teamId: string): Promise<TrainingJobRecord[]> => scanRecords(h, 'training_jobs', ['job_team', teamId]),
    all: (): Promise<TrainingJobRecord[]> => allRecords(h, 'training_jobs'),
    async reindex(): Promise<void> {
      for (const j of await allRecords<TrainingJobRecord>(h, 'training_jobs')) h.put('idx', teamKey(j), null);
    },
  };
}
export type TrainingJobsRepo = ReturnType<typeof makeTrainingJobsRepo>;
