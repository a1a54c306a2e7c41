// Labeled examples from corrected inferences (adaptive inference): the training side reads them
// per team and model (`listByModel`) to build retraining datasets.
import { allRecords, ikey, type Kv, scanRecords } from './db.ts';
import type { LabeledExampleRecord } from './types.ts';

export function makeExamplesRepo(h: Kv) {
  const keysOf = (e: LabeledExampleRecord) => {
    const ts = Date.parse(e.created_at);
    return [ikey('ex_team', e.team_id, ts, e.id), ikey('ex_model', e.team_id, e.model_id, ts, e.id), ikey('ex_inf', e.inference_id)];
  };
  const index = (e: LabeledExampleRecord) => {
    const [a, b, c] = keysOf(e);
    h.put('idx', a, null); h.put('idx', b, null); h.put('idx', c, e.id);
  };
  const repo = {
    get: (id: string): Promise<LabeledExampleRecord | undefined> => h.get('examples', id),
    async byInference(inferenceId: string): Promise<LabeledExampleRecord | undefined> {
      const id = await h.get('idx', ikey('ex_inf', inferenceId));
      return id ? h.get('examples', id) : undefined;
    },
    /** inside a transaction; replaces the example of the same inference */
    async put(e: LabeledExampleRecord): Promise<void> {
      const old = await repo.byInference(e.inference_id);
      if (old && old.id !== e.id) await repo.remove(old.id);
      h.put('examples', e.id, e);
      index(e);
    },
    /** inside a transaction */
    async remove(id: string): Promise<void> {
      const e = (await h.get('examples', id)) as LabeledExampleRecord | undefined;
      if (!e) return;
      for (const k of keysOf(e)) h.remove('idx', k);
      h.remove('examples', id);
    },
    listByTeam: (teamId: string): Promise<LabeledExampleRecord[]> =>
      scanRecords(h, 'examples', ['ex_team', teamId], { reverse: false }),
    listByModel: (teamId: string, modelId: string): Promise<LabeledExampleRecord[]> =>
      scanRecords(h, 'examples', ['ex_model', teamId, modelId], { reverse: false }),
    async reindex(): Promise<void> { for (const e of await allRecords<LabeledExampleRecord>(h, 'examples')) index(e); },
  };
  return repo;
}
export type ExamplesRepo = ReturnType<typeof makeExamplesRepo>;
