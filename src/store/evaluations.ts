// Evaluations (listed per team newest first, filterable by project) and generation jobs.
import { allRecords, ikey, type Kv, removeIndexed, scanRecords } from './db.ts';
import type { EvaluationRecord, GenerationJobRecord } from './customization-types.ts';

export function makeEvaluationsRepo(h: Kv) {
  const keyOf = (e: EvaluationRecord) => ikey('ev_team', e.team_id, Date.parse(e.created_at), e.id);
  return {
    get: (id: string): Promise<EvaluationRecord | undefined> => h.get('evaluations', id),
    /** inside a transaction */
    put(e: EvaluationRecord): void { h.put('evaluations', e.id, e); h.put('idx', keyOf(e), null); },
    /** inside a transaction */
    remove: (id: string): Promise<void> => removeIndexed<EvaluationRecord>(h, 'evaluations', id, keyOf),
    listByTeam: (teamId: string): Promise<EvaluationRecord[]> => scanRecords(h, 'evaluations', ['ev_team', teamId]),
    all: (): Promise<EvaluationRecord[]> => allRecords(h, 'evaluations'),
    async reindex(): Promise<void> {
      for (const e of await allRecords<EvaluationRecord>(h, 'evaluations')) h.put('idx', keyOf(e), null);
    },
  };
}
export type EvaluationsRepo = ReturnType<typeof makeEvaluationsRepo>;

export function makeGenerationJobsRepo(h: Kv) {
  return {
    get: (id: string): Promise<GenerationJobRecord | undefined> => h.get('generation_jobs', id),
    /** inside a transaction */
    put(j: GenerationJobRecord): void { h.put('generation_jobs', j.job_id, j); },
    all: (): Promise<GenerationJobRecord[]> => allRecords(h, 'generation_jobs'),
  };
}
export type GenerationJobsRepo = ReturnType<typeof makeGenerationJobsRepo>;
