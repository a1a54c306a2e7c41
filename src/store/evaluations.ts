// Evaluations (listed per team newest first, filterable by project) and generation jobs.
import { type Db, ikey, scanIndex } from './db.ts';
import type { EvaluationRecord, GenerationJobRecord } from './customization-types.ts';

export function makeEvaluationsRepo(db: Db) {
  const { evaluations, idx } = db.dbs;
  const keyOf = (e: EvaluationRecord) => ikey('ev_team', e.team_id, Date.parse(e.created_at), e.id);
  return {
    get: (id: string): EvaluationRecord | undefined => evaluations.get(id),
    /** inside a transaction */
    put(e: EvaluationRecord): void { evaluations.put(e.id, e); idx.put(keyOf(e), null); },
    save(e: EvaluationRecord): Promise<void> { return db.tx(() => this.put(e)); },
    /** inside a transaction */
    remove(id: string): void {
      const e = evaluations.get(id) as EvaluationRecord | undefined;
      if (!e) return;
      idx.remove(keyOf(e));
      evaluations.remove(id);
    },
    listByTeam(teamId: string): EvaluationRecord[] {
      return [...scanIndex(db, ['ev_team', teamId])].map((id) => evaluations.get(id)).filter(Boolean);
    },
    all(): EvaluationRecord[] { return [...(evaluations.getRange() as Iterable<{ value: EvaluationRecord }>)].map((x) => x.value); },
    reindex(): void { for (const { value } of evaluations.getRange()) idx.put(keyOf(value as EvaluationRecord), null); },
  };
}
export type EvaluationsRepo = ReturnType<typeof makeEvaluationsRepo>;

export function makeGenerationJobsRepo(db: Db) {
  const { generation_jobs: jobs } = db.dbs;
  return {
    get: (id: string): GenerationJobRecord | undefined => jobs.get(id),
    /** inside a transaction */
    put(j: GenerationJobRecord): void { jobs.put(j.job_id, j); },
    save(j: GenerationJobRecord): Promise<void> { return db.tx(() => this.put(j)); },
    all(): GenerationJobRecord[] { return [...(jobs.getRange() as Iterable<{ value: GenerationJobRecord }>)].map((x) => x.value); },
  };
}
export type GenerationJobsRepo = ReturnType<typeof makeGenerationJobsRepo>;
