// Inference records with secondary indexes for the history filters of GET /inferences:
// by team (all), model, project, training job and task, each ordered by created_at, so a query
// walks the most selective index between `since` (inclusive) and `until` (exclusive).
import { allRecords, ikey, type Kv, scanIndex } from './db.ts';
import type { InferenceRecord, JudgeVerdict } from './types.ts';
import type { JudgementFields } from './judges.ts';

export interface InferenceQuery {
  team_id: string;
  limit: number;
  offset: number;
  model_id?: string;
  task?: string;
  project_id?: string;
  training_job_id?: string;
  latency_min?: number;
  latency_max?: number;
  llmaj_score_min?: number;
  llmaj_score_max?: number;
  /** the LLM judge's verdict; 'none': not judged (no verdict) */
  llmaj_verdict?: JudgeVerdict | 'none';
  /** ms since epoch, inclusive */
  since?: number;
  /** ms since epoch, exclusive */
  until?: number;
}

export function makeInferencesRepo(h: Kv) {
  const entries = (r: InferenceRecord): string[] => {
    const ts = Date.parse(r.created_at);
    const out = [ikey('inf', r.team_id, ts, r.id), ikey('inf_t', r.team_id, r.task, ts, r.id)];
    out.push(ikey('inf_m', r.team_id, r.model_id, ts, r.id));
    if (r.routed_model !== r.model_id) out.push(ikey('inf_m', r.team_id, r.routed_model, ts, r.id));
    if (r.project_id) out.push(ikey('inf_p', r.team_id, r.project_id, ts, r.id));
    if (r.training_job_id) out.push(ikey('inf_j', r.team_id, r.training_job_id, ts, r.id));
    return out;
  };
  return {
    get: (id: string): Promise<InferenceRecord | undefined> => h.get('inferences', id),
    /** inside a transaction */
    put(r: InferenceRecord): void {
      h.put('inferences', r.id, r);
      for (const k of entries(r)) h.put('idx', k, null);
    },
    /** inside a transaction: LLM-as-judge score (0..1) set by a judge after the fact */
    async setJudgeScore(id: string, score: number): Promise<void> {
      const r = (await h.get('inferences', id)) as InferenceRecord | undefined;
      if (r) h.put('inferences', id, { ...r, llmaj_score: score });
    },
    /**
     * A judgement on a record (inside a transaction): only the `llmaj_*` fields change. A failed
     * judgement (`llmaj_error` set, no score) keeps the score, verdict and reasoning it had.
     */
    async applyJudgement(id: string, f: JudgementFields): Promise<InferenceRecord | undefined> {
      const r = (await h.get('inferences', id)) as InferenceRecord | undefined;
      if (!r) return undefined;
      const next = { ...r, ...f };
      h.put('inferences', id, next);
      return next;
    },
    /** newest first; `total` counts every match */
    async query(q: InferenceQuery): Promise<{ items: InferenceRecord[]; total: number }> {
      let prefix: (string | number)[];
      if (q.project_id !== undefined) prefix = ['inf_p', q.team_id, q.project_id];
      else if (q.training_job_id !== undefined) prefix = ['inf_j', q.team_id, q.training_job_id];
      else if (q.model_id !== undefined) prefix = ['inf_m', q.team_id, q.model_id];
      else if (q.task !== undefined) prefix = ['inf_t', q.team_id, q.task];
      else prefix = ['inf', q.team_id];
      const items: InferenceRecord[] = [];
      let total = 0;
      const ids = [...new Set(await scanIndex(h, prefix, {
        from: q.since !== undefined ? [q.since] : undefined, to: q.until !== undefined ? [q.until] : undefined,
      }))];
      for (const r of (await h.getMany('inferences', ids)) as InferenceRecord[]) {
        if (r.team_id !== q.team_id) continue;
        if (q.model_id !== undefined && r.model_id !== q.model_id && r.routed_model !== q.model_id) continue;
        if (q.task !== undefined && r.task !== q.task) continue;
        if (q.project_id !== undefined && r.project_id !== q.project_id) continue;
        if (q.training_job_id !== undefined && r.training_job_id !== q.training_job_id) continue;
        if (q.latency_min !== undefined && r.latency_ms < q.latency_min) continue;
        if (q.latency_max !== undefined && r.latency_ms > q.latency_max) continue;
        if (q.llmaj_score_min !== undefined && (r.llmaj_score === null || r.llmaj_score < q.llmaj_score_min)) continue;
        if (q.llmaj_score_max !== undefined && (r.llmaj_score === null || r.llmaj_score > q.llmaj_score_max)) continue;
        if (q.llmaj_verdict !== undefined && (r.llmaj_verdict ?? 'none') !== q.llmaj_verdict) continue;
        if (total >= q.offset && items.length < q.limit) items.push(r);
        total++;
      }
      return { items, total };
    },
    /** rebuild the index entries of every record (migration) */
    async reindex(): Promise<void> {
      for (const r of await allRecords<InferenceRecord>(h, 'inferences')) for (const k of entries(r)) h.put('idx', k, null);
    },
  };
}
export type InferencesRepo = ReturnType<typeof makeInferencesRepo>;
