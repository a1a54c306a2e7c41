// Adaptive retraining runs (src/service/adaptive), listed per project newest first.
import { type Db, ikey, scanIndex } from './db.ts';
import type { AdaptiveRunRecord } from './types.ts';

export function makeAdaptiveRunsRepo(db: Db) {
  const { adaptive_runs: runs, idx } = db.dbs;
  const keyOf = (r: AdaptiveRunRecord) => ikey('ar_proj', r.project_id, Date.parse(r.created_at), r.id);
  return {
    get: (id: string): AdaptiveRunRecord | undefined => runs.get(id),
    /** inside a transaction */
    put(r: AdaptiveRunRecord): void {
      runs.put(r.id, r);
      idx.put(keyOf(r), null);
    },
    /** inside a transaction */
    remove(id: string): void {
      const r = runs.get(id) as AdaptiveRunRecord | undefined;
      if (!r) return;
      idx.remove(keyOf(r));
      runs.remove(id);
    },
    listByProject(projectId: string): AdaptiveRunRecord[] {
      return [...scanIndex(db, ['ar_proj', projectId])].map((id) => runs.get(id)).filter(Boolean);
    },
    all(): AdaptiveRunRecord[] {
      return [...(runs.getRange() as Iterable<{ value: AdaptiveRunRecord }>)].map((x) => x.value);
    },
    reindex(): void {
      for (const { value } of runs.getRange()) idx.put(keyOf(value as AdaptiveRunRecord), null);
    },
  };
}
export type AdaptiveRunsRepo = ReturnType<typeof makeAdaptiveRunsRepo>;
