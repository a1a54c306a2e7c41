// Labeled examples from corrected inferences (adaptive inference): the training side reads them
// per team and model (`listByModel`) to build retraining datasets.
import { type Db, ikey, scanIndex } from './db.ts';
import type { LabeledExampleRecord } from './types.ts';

export function makeExamplesRepo(db: Db) {
  const { examples, idx } = db.dbs;
  const keysOf = (e: LabeledExampleRecord) => {
    const ts = Date.parse(e.created_at);
    return [ikey('ex_team', e.team_id, ts, e.id), ikey('ex_model', e.team_id, e.model_id, ts, e.id), ikey('ex_inf', e.inference_id)];
  };
  return {
    get: (id: string): LabeledExampleRecord | undefined => examples.get(id),
    byInference(inferenceId: string): LabeledExampleRecord | undefined {
      const id = idx.get(ikey('ex_inf', inferenceId));
      return id ? examples.get(id) : undefined;
    },
    /** inside a transaction; replaces the example of the same inference */
    put(e: LabeledExampleRecord): void {
      const old = this.byInference(e.inference_id);
      if (old && old.id !== e.id) this.remove(old.id);
      examples.put(e.id, e);
      const [a, b, c] = keysOf(e);
      idx.put(a, null); idx.put(b, null); idx.put(c, e.id);
    },
    /** inside a transaction */
    remove(id: string): void {
      const e = examples.get(id) as LabeledExampleRecord | undefined;
      if (!e) return;
      for (const k of keysOf(e)) idx.remove(k);
      examples.remove(id);
    },
    listByTeam(teamId: string): LabeledExampleRecord[] {
      return [...scanIndex(db, ['ex_team', teamId], { reverse: false })].map((id) => examples.get(id)).filter(Boolean);
    },
    listByModel(teamId: string, modelId: string): LabeledExampleRecord[] {
      return [...scanIndex(db, ['ex_model', teamId, modelId], { reverse: false })].map((id) => examples.get(id)).filter(Boolean);
    },
    reindex(): void {
      for (const { value } of examples.getRange()) {
        const e = value as LabeledExampleRecord;
        const [a, b, c] = keysOf(e);
        idx.put(a, null); idx.put(b, null); idx.put(c, e.id);
      }
    },
  };
}
export type ExamplesRepo = ReturnType<typeof makeExamplesRepo>;
