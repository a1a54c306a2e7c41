// Inference history (GET /inferences, GET /inferences/:id) and human feedback. An `incorrect`
// verdict with a correction becomes a labeled example (store `examples`) in the task's training
// format, checked against the inference's schema (src/service/adaptive/corrections.ts); adaptive
// retraining (src/service/adaptive) consumes it, and the inference then shows the job that did.
import type { FeedbackRecord, InferenceRecord, LabeledExampleRecord, Store } from '../store/index.ts';
import { correctionRecord } from './adaptive/corrections.ts';
import type { InferenceQuery } from '../store/inferences.ts';
import type { Principal } from './auth.ts';
import { ConflictError, NotFoundError, ValidationError } from './errors.ts';
import { newId, nowIso } from './ids.ts';

export type HistoryQuery = Omit<InferenceQuery, 'team_id'>;

/** the retraining that consumed an inference's correction (null: none yet, or no correction) */
const correctionView = (e: LabeledExampleRecord | undefined) => (e ? {
  training_job_id: e.training_job_id ?? null, adaptive_run_id: e.run_id ?? null, split: e.split ?? null,
} : null);

export function inferenceView(r: InferenceRecord, ex?: LabeledExampleRecord) {
  return {
    correction: correctionView(ex),
    id: r.id, inference_id: r.id, model_id: r.model_id, routed_model: r.routed_model, project_id: r.project_id, training_job_id: r.training_job_id,
    endpoint: r.endpoint, type: r.type, task: r.task, input: r.input, schema: r.schema, params: r.params, output: r.output,
    usage: r.usage, cost: r.cost, latency_ms: r.latency_ms, llmaj_score: r.llmaj_score,
    llmaj_verdict: r.llmaj_verdict ?? null, llmaj_reasoning: r.llmaj_reasoning ?? null,
    llmaj_judged_at: r.llmaj_judged_at ?? null, llmaj_model: r.llmaj_model ?? null,
    llmaj_inference_id: r.llmaj_inference_id ?? null, llmaj_error: r.llmaj_error ?? null,
    status: r.status, error: r.error,
    stored_content: r.stored_content, created_at: r.created_at,
  };
}

const feedbackView = (f: FeedbackRecord) => ({ inference_id: f.inference_id, human_verdict: f.human_verdict, human_feedback_at: f.human_feedback_at, corrected_output: f.corrected_output, notes: f.notes });

export function createHistoryService(store: Store, hooks: { corrected?: (e: LabeledExampleRecord) => void } = {}) {
  async function own(p: Principal, id: string): Promise<InferenceRecord> {
    const r = await store.inferences.get(id);
    if (!r || r.team_id !== p.team_id) throw new NotFoundError(`Inference ${id} not found`);
    return r;
  }
  return {
    async list(p: Principal, q: HistoryQuery) {
      const issues = [];
      if (q.latency_min !== undefined && q.latency_max !== undefined && q.latency_min > q.latency_max) issues.push({ path: '/latency_min', message: 'must be <= latency_max', keyword: 'minmax' });
      if (q.llmaj_score_min !== undefined && q.llmaj_score_max !== undefined && q.llmaj_score_min > q.llmaj_score_max) issues.push({ path: '/llmaj_score_min', message: 'must be <= llmaj_score_max', keyword: 'minmax' });
      if (q.since !== undefined && q.until !== undefined && q.since > q.until) issues.push({ path: '/since', message: 'must be <= until', keyword: 'minmax' });
      if (issues.length) throw new ValidationError('A minimum is greater than its maximum', issues);
      await store.settled();
      const { items, total } = await store.inferences.query({ ...q, team_id: p.team_id });
      const inferences = await Promise.all(items.map(async (r) => inferenceView(r, await store.examples.byInference(r.id))));
      return { inferences, count: items.length, total, limit: q.limit, offset: q.offset };
    },
    async get(p: Principal, id: string) { return inferenceView(await own(p, id), await store.examples.byInference(id)); },

    async submitFeedback(p: Principal, id: string, body: { verdict: 'correct' | 'incorrect'; corrected_output?: Record<string, unknown> | null; notes?: string | null }) {
      const r = await own(p, id);
      const corrected = body.corrected_output ?? null;
      if (body.verdict === 'incorrect' && corrected === null) throw new ValidationError('corrected_output is required when verdict is incorrect', [{ path: '/corrected_output', message: 'required when verdict is incorrect', keyword: 'verdict' }]);
      if (body.verdict === 'correct' && corrected !== null) throw new ValidationError('corrected_output must be omitted or null when verdict is correct', [{ path: '/corrected_output', message: 'must be omitted or null when verdict is correct', keyword: 'verdict' }]);
      if (corrected && r.output && typeof r.output === 'object' && !Array.isArray(r.output)) {
        const allowed = Object.keys(r.output as object);
        const extra = Object.keys(corrected).filter((k) => !allowed.includes(k));
        if (extra.length) throw new ValidationError('corrected_output must have the same shape as the original output', extra.map((k) => ({ path: `/corrected_output/${k}`, message: `not a key of the original output (${allowed.join(', ')})`, keyword: 'shape' })));
      }
      const record = corrected ? correctionRecord(r, corrected) : undefined;
      const f: FeedbackRecord = { inference_id: id, team_id: p.team_id, human_verdict: body.verdict, corrected_output: corrected, notes: body.notes ?? null, human_feedback_at: nowIso() };
      const ex = await store.tx(async (t) => {
        const old = await t.examples.byInference(id);
        // a correction a retraining already consumed stays as it was learned (the job and its data)
        if (old?.run_id) return 'consumed' as const;
        t.feedback.put(f);
        if (corrected) {
          const e: LabeledExampleRecord = {
            id: old?.id ?? newId(), team_id: p.team_id, inference_id: id, model_id: r.routed_model, project_id: r.project_id,
            task: r.task, input: r.input, schema: r.schema, output: corrected, record, created_at: f.human_feedback_at,
          };
          await t.examples.put(e);
          return e;
        }
        if (old) await t.examples.remove(old.id);
        return old ?? null;
      });
      if (ex === 'consumed') {
        const job = (await store.examples.byInference(id))?.training_job_id ?? '(being prepared)';
        throw new ConflictError(`The correction of inference ${id} was already used by retraining job ${job}; it cannot be changed`);
      }
      if (ex) hooks.corrected?.(ex);
      return feedbackView(f);
    },

    async getFeedback(p: Principal, id: string) {
      await own(p, id);
      const f = await store.feedback.get(id);
      if (!f) throw new NotFoundError(`No feedback for inference ${id}`);
      return feedbackView(f);
    },

    /** labeled examples from corrections, for the training side */
    labeledExamples(teamId: string, modelId?: string) {
      return modelId ? store.examples.listByModel(teamId, modelId) : store.examples.listByTeam(teamId);
    },
  };
}
export type HistoryService = ReturnType<typeof createHistoryService>;
