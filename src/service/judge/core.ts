// One judgement: a served decoder reads the judge prompt and answers, under the existing JSON-schema
// constrained decoding, {verdict: "pass"|"fail"|"uncertain", score: 0..scale (integer), reasoning}.
// The call goes through Loom's own billed inference path, as /inference and the compat endpoints do:
// `inference.begin` (model resolution, credit hold) → generation → `call.finish` (inference record
// with endpoint "judge", usage record and debit in one transaction) or `call.fail` (a timed-out
// call is billed for the tokens it processed). Judge calls therefore appear in the team's history
// (task "judge") and usage like any inference.
//
// `judgeWithRetries` adds the timeout (per attempt: an AbortSignal that cancels the generation),
// retries with exponential backoff (retry_backoff_s · 2^attempt) and turns every failure into an
// error result: it never throws. Errors a retry cannot fix (the model is gone, no credit) stop at once.
import type { Principal } from '../auth.ts';
import { ServiceError } from '../errors.ts';
import type { InferenceService } from '../inference.ts';
import { type GenerateMessage, type ModelRuntime, generateAll } from '../runtime.ts';
import type { JudgeVerdict } from '../../store/index.ts';

/** the `endpoint` of the judge's own inference records (never sampled for judging themselves) */
export const JUDGE_ENDPOINT = 'judge';
export const JUDGE_TASK = 'judge';
export const VERDICTS: readonly JudgeVerdict[] = ['pass', 'fail', 'uncertain'];
/** reasoning is cut at this many characters by the constraint, so every answer ends */
export const REASONING_MAX_CHARS = 300;
/** generation bound of a judge call: the JSON keys, the score and the reasoning fit well within it */
export const JUDGE_MAX_TOKENS = 768;

export interface JudgeSpec {
  /** decoder: catalog base model id or trained decoder (training job id) */
  model: string;
  rubric: string;
  /** integer: the judge scores 0..scoreScale */
  scoreScale: number;
  timeoutS: number;
  maxRetries: number;
  retryBackoffS: number;
}

export interface Judgement {
  verdict: JudgeVerdict;
  /** score / scoreScale, in [0, 1] */
  score: number;
  /** as the judge wrote it, 0..scoreScale */
  raw_score: number;
  reasoning: string;
  /** the judge's own inference record */
  inference_id: string;
}

export type JudgeOutcome =
  ({ ok: true } & Judgement) | { ok: false; error: string; inference_id: string | null; attempts: number };

/** The JSON schema the judge's output is constrained to. */
export function judgeSchema(scoreScale: number): Record<string, unknown> {
  return {
    type: 'object',
    properties: {
      verdict: { type: 'string', enum: [...VERDICTS] },
      score: { enum: Array.from({ length: scoreScale + 1 }, (_, i) => i) },
      reasoning: { type: 'string', maxLength: REASONING_MAX_CHARS },
    },
    required: ['verdict', 'score', 'reasoning'],
    additionalProperties: false,
  };
}

/** The judge's answer, checked (the constraint makes it valid; a cut-off answer is not). */
export function parseJudgeOutput(
  text: string,
  scoreScale: number,
): { verdict: JudgeVerdict; raw_score: number; reasoning: string } {
  let v: unknown;
  try {
    v = JSON.parse(text);
  } catch {
    throw new Error(`the judge's answer is not complete JSON: ${JSON.stringify(text.slice(0, 80))}`);
  }
  const o = v as { verdict?: unknown; score?: unknown; reasoning?: unknown };
  if (!o || typeof o !== 'object' || !VERDICTS.includes(o.verdict as JudgeVerdict))
    throw new Error("the judge's answer has no valid verdict");
  if (typeof o.score !== 'number' || !(o.score >= 0 && o.score <= scoreScale))
    throw new Error(`the judge's score is not in 0..${scoreScale}`);
  return {
    verdict: o.verdict as JudgeVerdict,
    raw_score: o.score,
    reasoning: typeof o.reasoning === 'string' ? o.reasoning : '',
  };
}

class JudgeAttemptError extends Error {
  constructor(
    message: string,
    readonly inferenceId: string | null,
    readonly final = false,
  ) {
    super(message);
  }
}

export interface JudgeDeps {
  inference: InferenceService;
  runtime: ModelRuntime;
}

/** One billed judge call (no retry). Throws JudgeAttemptError. */
export async function judgeOnce(
  deps: JudgeDeps,
  p: Principal,
  spec: JudgeSpec,
  messages: GenerateMessage[],
): Promise<Judgement> {
  const signal = AbortSignal.timeout(Math.max(1, Math.round(spec.timeoutS * 1000)));
  const timedOut = () => new JudgeAttemptError(`the judge timed out after ${spec.timeoutS} s`, null);
  let call;
  try {
    call = await deps.inference.begin(p, {
      endpoint: JUDGE_ENDPOINT,
      model_id: spec.model,
      kind: 'decoder',
      hints: { messages },
      bound: { max_tokens: JUDGE_MAX_TOKENS },
    });
  } catch (err) {
    // the model is gone or not a decoder (4xx), no credit (402/403): retrying cannot help; 425/503 can
    const status = err instanceof ServiceError ? err.status : 500;
    const final = status >= 400 && status < 500 && status !== 425 && status !== 429;
    throw new JudgeAttemptError(`judge call refused: ${(err as Error).message}`, null, final);
  }
  const params = { max_tokens: JUDGE_MAX_TOKENS, temperature: 0, score_scale: spec.scoreScale };
  const base = { task: JUDGE_TASK, input: { messages }, params };
  let done;
  try {
    if (signal.aborted) throw timedOut();
    done = await generateAll(deps.runtime, call.model.ref, {
      messages,
      max_tokens: JUDGE_MAX_TOKENS,
      temperature: 0,
      signal,
      response_format: {
        type: 'json_schema',
        json_schema: { name: 'judgement', schema: judgeSchema(spec.scoreScale) },
      },
    });
  } catch (err) {
    await call.fail(base, err);
    if (signal.aborted) throw new JudgeAttemptError(timedOut().message, call.inference_id);
    throw new JudgeAttemptError(`the judge model failed: ${(err as Error).message}`, call.inference_id);
  }
  if (done.finish_reason === 'cancelled') {
    const err = timedOut();
    await call.fail({ ...base, output: { content: done.text, finish_reason: 'cancelled' } }, err, done.usage);
    throw new JudgeAttemptError(err.message, call.inference_id);
  }
  // the model did the work: the call is billed whether or not its answer is usable
  await call.finish({ ...base, output: { content: done.text, finish_reason: done.finish_reason }, usage: done.usage });
  try {
    const out = parseJudgeOutput(done.text, spec.scoreScale);
    return { ...out, score: out.raw_score / spec.scoreScale, inference_id: call.inference_id };
  } catch (err) {
    throw new JudgeAttemptError((err as Error).message, call.inference_id);
  }
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** judgeOnce with the spec's retries and backoff; never throws. */
export async function judgeWithRetries(
  deps: JudgeDeps,
  p: Principal,
  spec: JudgeSpec,
  messages: GenerateMessage[],
): Promise<JudgeOutcome> {
  let last: JudgeAttemptError | null = null;
  let attempt = 0;
  for (; attempt <= spec.maxRetries; attempt++) {
    if (attempt > 0 && spec.retryBackoffS > 0) await sleep(spec.retryBackoffS * 1000 * 2 ** (attempt - 1));
    try {
      return { ok: true, ...(await judgeOnce(deps, p, spec, messages)) };
    } catch (err) {
      last =
        err instanceof JudgeAttemptError ? err : new JudgeAttemptError(String((err as Error)?.message ?? err), null);
      if (last.final) {
        attempt++;
        break;
      }
    }
  }
  const tries = attempt;
  return {
    ok: false,
    error: `${last!.message} (${tries} attempt${tries === 1 ? '' : 's'})`,
    inference_id: last!.inferenceId,
    attempts: tries,
  };
}

/** A counting semaphore: at most `n` holders at once (the judge's max concurrency). */
export class Semaphore {
  private active = 0;
  private waiters: (() => void)[] = [];
  constructor(public n: number) {}
  async run<T>(fn: () => Promise<T>): Promise<T> {
    while (this.active >= this.n) await new Promise<void>((r) => this.waiters.push(r));
    this.active++;
    try {
      return await fn();
    } finally {
      this.active--;
      this.waiters.shift()?.();
    }
  }
}
