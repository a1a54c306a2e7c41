// LLM-as-judge state (src/service/judge/): judge configurations, one per team and one per project,
// and the queue of inferences waiting for a judgement. A queue entry is written in the same
// transaction as what causes it (the sampled inference record, a batch request) and removed in the
// same transaction as the judgement it leads to, so a restart finds exactly the work left.
import { ikey, KEY_END, type Kv } from './db.ts';
import type { JudgeVerdict } from './types.ts';

export interface JudgeConfigRecord {
  scope: 'team' | 'project';
  team_id: string;
  project_id: string | null;
  /** a decoder: catalog base model id or a trained decoder's training job id */
  model: string;
  rubric: string;
  /** share of the scope's inferences judged in the background, 0..1 */
  sample_rate: number;
  /** the judge scores 0..score_scale; stored scores are normalised to 0..1 */
  score_scale: number;
  timeout_s: number;
  max_retries: number;
  retry_backoff_s: number;
  /** judge calls of this configuration running at once */
  max_concurrent: number;
  updated_at: string;
  /** who set it: background judge calls are billed to the team in this user's name */
  updated_by: string;
}

export interface JudgeQueueEntry {
  inference_id: string;
  team_id: string;
  /** 'sample': drawn by the sample rate; 'request': POST /inferences/judge */
  reason: 'sample' | 'request';
  enqueued_at: string;
}

/** what a judgement writes on the inference record */
export interface JudgementFields {
  llmaj_score?: number | null;
  llmaj_verdict?: JudgeVerdict | null;
  llmaj_reasoning?: string | null;
  llmaj_judged_at: string;
  llmaj_model: string | null;
  llmaj_inference_id?: string | null;
  llmaj_error: string | null;
}

const cfgKey = (scope: 'team' | 'project', id: string) => ikey('cfg', scope, id);
const qKey = (inferenceId: string) => ikey('q', inferenceId);
const Q_PREFIX = ikey('q') + '|';

export function makeJudgesRepo(h: Kv) {
  return {
    getConfig: (scope: 'team' | 'project', id: string): Promise<JudgeConfigRecord | undefined> => h.get('judges', cfgKey(scope, id)),
    /** inside a transaction */
    putConfig(c: JudgeConfigRecord): void {
      h.put('judges', cfgKey(c.scope, c.scope === 'team' ? c.team_id : c.project_id!), c);
    },
    /** inside a transaction */
    removeConfig(scope: 'team' | 'project', id: string): void {
      h.remove('judges', cfgKey(scope, id));
    },
    /** inside a transaction */
    enqueue(e: JudgeQueueEntry): void {
      h.put('judges', qKey(e.inference_id), e);
    },
    /** inside a transaction */
    dequeue(inferenceId: string): void {
      h.remove('judges', qKey(inferenceId));
    },
    queued: (inferenceId: string): Promise<JudgeQueueEntry | undefined> => h.get('judges', qKey(inferenceId)),
    /** every queued entry (start-up) */
    async queue(): Promise<JudgeQueueEntry[]> {
      return (await h.range('judges', { gte: Q_PREFIX, lt: Q_PREFIX + KEY_END }))
        .filter((e) => e.key.startsWith(Q_PREFIX)).map((e) => e.value as JudgeQueueEntry);
    },
  };
}
export type JudgesRepo = ReturnType<typeof makeJudgesRepo>;
