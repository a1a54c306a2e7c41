// Adaptive retraining runs (src/service/adaptive), listed per project newest first.
import { allRecords, ikey, type Kv, removeIndexed, scanRecords } from './db.ts';
import type { AdaptiveRunRecord } from './types.ts';

export function makeAdaptiveRunsRepo(h: Kv) {
  const keyOf = (r: AdaptiveRunRecord) => ikey('ar_proj', r.project_id, Date.parse(r.created_at), r.id);
  return {
    get: (id: string): Promise<AdaptiveRunRecord | undefined> => h.get('adaptive_runs', id),
    /** inside a transaction */
    put(r: AdaptiveRunRecord): void {
      h.put('adaptive_runs', r.id, r);
      h.put('idx', keyOf(r), null);
    },
    /** inside a transaction */
    remove: (id: string): Promise<void> => removeIndexed<AdaptiveRunRecord>(h, 'adaptive_runs', id, keyOf),
    listByProject: (projectId: string): Promise<AdaptiveRunRecord[]> => scanRecords(h, 'adaptive_runs', ['ar_proj', projectId]),
    all: (): Promise<AdaptiveRunRecord[]> => allRecords(h, 'adaptive_runs'),
    async reindex(): Promise<void> {
      for (const r of await allRecords<AdaptiveRunRecord>(h, 'adaptive_runs')) h.put('idx', keyOf(r), null);
    },
  };
}
export type AdaptiveRunsRepo = ReturnType<typeof makeAdaptiveRunsRepo>;
