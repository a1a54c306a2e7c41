// Human feedback on an inference, keyed by inference id (a new submission replaces the old one).
import type { Db } from './db.ts';
import type { FeedbackRecord } from './types.ts';

export function makeFeedbackRepo(db: Db) {
  const { feedback } = db.dbs;
  return {
    get: (inferenceId: string): FeedbackRecord | undefined => feedback.get(inferenceId),
    put: (f: FeedbackRecord): void => { feedback.put(f.inference_id, f); },
  };
}
export type FeedbackRepo = ReturnType<typeof makeFeedbackRepo>;
