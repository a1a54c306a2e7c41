// Human feedback on an inference, keyed by inference id (a new submission replaces the old one).
import type { Kv } from './db.ts';
import type { FeedbackRecord } from './types.ts';

export function makeFeedbackRepo(h: Kv) {
  return {
    get: (inferenceId: string): Promise<FeedbackRecord | undefined> => h.get('feedback', inferenceId),
    /** inside a transaction */
    put: (f: FeedbackRecord): void => { h.put('feedback', f.inference_id, f); },
  };
}
export type FeedbackRepo = ReturnType<typeof makeFeedbackRepo>;
