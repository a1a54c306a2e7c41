// LLM-as-judge state (src/service/judge/): judge configurations, one per team and one per project,
// and the queue of inferences waiting for a judgement. A queue entry is written in the same
// transaction as what causes it (the sampled inference record, a batch request) and removed in the
// same transaction as the judgement it leads to, so a restart finds exactly the work left.
import { type Db, ikey } from './db.ts';
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

export function makeJudgesRepo(db: Db) {
  const { judges } = db.dbs;
  return {
    getConfig: (scope: 'team' | 'project', id: string): JudgeConfigRecord | undefined => judges.get(cfgKey(scope, id)),
    /** inside a transaction */
    putConfig(c: JudgeConfigRecord): void {
      judges.put(cfgKey(c.scope, c.scope === 'team' ? c.team_id : c.project_id!), c);
    },
    /** inside a transaction */
    removeConfig(scope: 'team' | 'project', id: string): void {
      judges.remove(cfgKey(scope, id));
    },
    /** inside a transaction */
    enqueue(e: JudgeQueueEntry): void {
      judges.put(qKey(e.inference_id), e);
    },
    /** inside a transaction */
    dequeue(inferenceId: string): void {
      judges.remove(qKey(inferenceId));
    },
    queued: (inferenceId: string): JudgeQueueEntry | undefined => judges.get(qKey(inferenceId)),
    /** every queued entry (start-up) */
    *queue(): Generator<JudgeQueueEntry> {
      for (const { key, value } of judges.getRange({ start: Q_PREFIX, end: Q_PREFIX + '\uffff' }) as Iterable<{
        key: string;
        value: JudgeQueueEntry;
      }>) {
        if (key.startsWith(Q_PREFIX)) yield value;
      }
    },
  };
}
export type JudgesRepo = ReturnType<typeof makeJudgesRepo>;
