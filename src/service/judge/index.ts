// LLM-as-judge: a judge is a served decoder (a catalog base model or a trained decoder) with a
// rubric and a score scale, configured per team (PUT /judge) or per project (PUT
// /projects/:id/judge; a project's own judge wins over the team's for its inferences).
//
//   background  after an inference is stored, a share `sample_rate` of the eligible ones is queued:
//               the queue entry is written in the SAME transaction as the inference record
//               (store/judges.ts), and removed in the same transaction as the judgement it leads to,
//               so a restart finds exactly the queued work (resumePending) and nothing is judged
//               on the request path of the inference it scores.
//   on demand   POST /inferences/:id/judge judges one inference now and answers with the result;
//               POST /inferences/judge queues every inference matching the history filters (202).
//   rewards     `rewardJudge` is RewardContext.judge of the llm_as_judge reward (src/rl/rewards).
//
// A judgement writes llmaj_verdict, llmaj_score (raw score / score_scale), llmaj_reasoning,
// llmaj_judged_at, llmaj_model and llmaj_inference_id on the inference record; a failure after the
// retries writes llmaj_error and leaves the rest of the record as it was. Judge calls are ordinary
// billed inferences (core.ts), made in the name of whoever last set the configuration.
import type {
  InferenceRecord, JudgeConfigRecord, JudgeQueueEntry, JudgementFields, Store, Tx,
} from '../../store/index.ts';
import type { InferenceQuery } from '../../store/inferences.ts';
import type { Principal } from '../auth.ts';
import type { Catalog } from '../catalog.ts';
import { ConflictError, NotFoundError, ValidationError, type ValidationIssue } from '../errors.ts';
import { nowIso } from '../ids.ts';
import type { InferenceService } from '../inference.ts';
import type { ModelRuntime } from '../runtime.ts';
import type { JudgeRewardOptions, RewardItem } from '../../rl/rewards/index.ts';
import { JUDGE_ENDPOINT, type JudgeOutcome, type JudgeSpec, judgeWithRetries, Semaphore } from './core.ts';
import { checkJudgeModel } from './model.ts';
import { inferenceMessages, rewardMessages, unjudgeable } from './prompt.ts';

export { JUDGE_ENDPOINT } from './core.ts';

/** PUT body of a judge configuration (every key but `model` and `rubric` has a default) */
export interface JudgeConfigInput {
  model: string;
  rubric: string;
  sample_rate?: number;
  score_scale?: number;
  timeout_s?: number;
  max_retries?: number;
  retry_backoff_s?: number;
  max_concurrent?: number;
}

export const JUDGE_DEFAULTS = {
  sample_rate: 0,
  score_scale: 10,
  timeout_s: 60,
  max_retries: 2,
  retry_backoff_s: 1,
  max_concurrent: 2,
};
/** the ranges of the configuration keys (the route's body schema repeats the types only) */
export const JUDGE_LIMITS = {
  sample_rate: [0, 1],
  score_scale: [1, 100],
  timeout_s: [0.001, 600],
  max_retries: [0, 10],
  retry_backoff_s: [0, 60],
  max_concurrent: [1, 16],
} as const;
/** judgements running at once in the background, over all teams */
export const BACKGROUND_CONCURRENCY = 4;
/** inferences one batch request may queue */
export const MAX_BATCH = 1000;

/** the body of POST /inferences/judge: GET /inferences' filters, dates as ISO strings */
export type BatchFilters = Omit<InferenceQuery, 'team_id' | 'offset' | 'limit' | 'since' | 'until'> & {
  limit?: number;
  since?: string;
  until?: string;
};

function batchQuery(b: BatchFilters): Omit<InferenceQuery, 'team_id'> {
  const issues: ValidationIssue[] = [];
  const time = (k: 'since' | 'until') => {
    if (b[k] === undefined) return undefined;
    const ms = Date.parse(b[k]!);
    if (Number.isNaN(ms)) issues.push({ path: `/${k}`, message: 'must be an ISO 8601 date-time', keyword: 'format' });
    return ms;
  };
  const q = { ...b, limit: b.limit ?? 100, offset: 0, since: time('since'), until: time('until') };
  const pairs = [
    ['latency_min', 'latency_max'],
    ['llmaj_score_min', 'llmaj_score_max'],
    ['since', 'until'],
  ] as const;
  for (const [lo, hi] of pairs) {
    if (q[lo] !== undefined && q[hi] !== undefined && q[lo]! > q[hi]!)
      issues.push({ path: `/${lo}`, message: `must be <= ${hi}`, keyword: 'minmax' });
  }
  if (issues.length)
    throw new ValidationError(`Invalid filter: ${issues[0].path.slice(1)} ${issues[0].message}`, issues);
  return q;
}

type Scope = { scope: 'team' } | { scope: 'project'; project_id: string };

const configView = (c: JudgeConfigRecord) => ({
  scope: c.scope,
  project_id: c.project_id,
  model: c.model,
  rubric: c.rubric,
  sample_rate: c.sample_rate,
  score_scale: c.score_scale,
  timeout_s: c.timeout_s,
  max_retries: c.max_retries,
  retry_backoff_s: c.retry_backoff_s,
  max_concurrent: c.max_concurrent,
  updated_at: c.updated_at,
});

export const judgementView = (r: InferenceRecord) => ({
  inference_id: r.id,
  llmaj_verdict: r.llmaj_verdict ?? null,
  llmaj_score: r.llmaj_score,
  llmaj_reasoning: r.llmaj_reasoning ?? null,
  llmaj_judged_at: r.llmaj_judged_at ?? null,
  llmaj_model: r.llmaj_model ?? null,
  llmaj_inference_id: r.llmaj_inference_id ?? null,
  llmaj_error: r.llmaj_error ?? null,
});

const specOf = (c: JudgeConfigRecord): JudgeSpec => ({
  model: c.model,
  rubric: c.rubric,
  scoreScale: c.score_scale,
  timeoutS: c.timeout_s,
  maxRetries: c.max_retries,
  retryBackoffS: c.retry_backoff_s,
});

export interface JudgeServiceDeps {
  store: Store;
  inference: InferenceService;
  runtime: ModelRuntime;
  catalog: Catalog;
  log?: { warn(o: object, m: string): void };
}

export function createJudgeService(deps: JudgeServiceDeps) {
  const { store, catalog } = deps;
  const core = { inference: deps.inference, runtime: deps.runtime };
  /** one semaphore per configuration (team or project) and per reward batch: max_concurrent */
  const limits = new Map<string, Semaphore>();
  const inflight = new Map<string, Promise<void>>();
  /** entries whose result could not be written (store closing): left in the queue for the next start */
  const stuck = new Set<string>();
  let closing = false;

  const limitOf = (key: string, n: number): Semaphore => {
    let s = limits.get(key);
    if (!s) limits.set(key, (s = new Semaphore(n)));
    s.n = n;
    return s;
  };
  const cfgKey = (c: JudgeConfigRecord) => `${c.scope}:${c.scope === 'team' ? c.team_id : c.project_id}`;

  /** 404 when the model is unknown to the team, 422 when it is not a decoder; `path` names the field */
  /** 404 / 422 unless `model` can judge (src/service/judge/model.ts) */
  const checkModel = (teamId: string, model: string, path = '/model') =>
    checkJudgeModel({ store, catalog }, teamId, model, path);

  function validate(
    body: JudgeConfigInput,
  ): Omit<JudgeConfigRecord, 'scope' | 'team_id' | 'project_id' | 'updated_at' | 'updated_by'> {
    const issues: ValidationIssue[] = [];
    const c = {
      ...JUDGE_DEFAULTS,
      ...Object.fromEntries(Object.entries(body).filter(([, v]) => v !== undefined)),
    } as Required<JudgeConfigInput>;
    for (const [k, [lo, hi]] of Object.entries(JUDGE_LIMITS)) {
      const v = c[k as keyof typeof JUDGE_LIMITS];
      if (typeof v !== 'number' || !Number.isFinite(v) || v < lo || v > hi)
        issues.push({ path: `/${k}`, message: `must be between ${lo} and ${hi}`, keyword: 'range' });
    }
    for (const k of ['score_scale', 'max_retries', 'max_concurrent'] as const) {
      if (!Number.isInteger(c[k])) issues.push({ path: `/${k}`, message: 'must be an integer', keyword: 'type' });
    }
    if (typeof c.rubric !== 'string' || !c.rubric.trim())
      issues.push({ path: '/rubric', message: 'must not be empty', keyword: 'minLength' });
    if (issues.length)
      throw new ValidationError(`Invalid judge configuration: ${issues[0].path.slice(1)} ${issues[0].message}`, issues);
    return {
      model: c.model,
      rubric: c.rubric,
      sample_rate: c.sample_rate,
      score_scale: c.score_scale,
      timeout_s: c.timeout_s,
      max_retries: c.max_retries,
      retry_backoff_s: c.retry_backoff_s,
      max_concurrent: c.max_concurrent,
    };
  }

  async function scopeId(p: Principal, s: Scope): Promise<string> {
    if (s.scope === 'team') return p.team_id;
    const pr = await store.projects.get(s.project_id);
    if (!pr || pr.team_id !== p.team_id) throw new NotFoundError(`Project ${s.project_id} not found`);
    return s.project_id;
  }

  /** the judge in effect for a record: its project's, else its team's */
  async function configFor(
    r: Pick<InferenceRecord, 'team_id' | 'project_id'>, t: Pick<Tx, 'projects' | 'judges'> = store,
  ): Promise<JudgeConfigRecord | undefined> {
    // a deleted project's judge no longer applies to the inferences it served
    const pc = r.project_id && (await t.projects.get(r.project_id))
      ? await t.judges.getConfig('project', r.project_id) : undefined;
    return pc ?? t.judges.getConfig('team', r.team_id);
  }

  /** the team's principal for calls made in the background (billed to the team, in the setter's name) */
  async function principalFor(teamId: string, userId: string): Promise<Principal | null> {
    const team = await store.teams.get(teamId);
    return team ? { kind: 'key', team_id: teamId, user_id: userId, key_id: null, team, session: null } : null;
  }

  const eligible = (r: InferenceRecord) => r.endpoint !== JUDGE_ENDPOINT && unjudgeable(r) === null;

  function fieldsOf(out: JudgeOutcome, model: string): JudgementFields {
    const at = nowIso();
    if (!out.ok)
      return { llmaj_judged_at: at, llmaj_model: model, llmaj_inference_id: out.inference_id, llmaj_error: out.error };
    return {
      llmaj_score: out.score,
      llmaj_verdict: out.verdict,
      llmaj_reasoning: out.reasoning,
      llmaj_judged_at: at,
      llmaj_model: model,
      llmaj_inference_id: out.inference_id,
      llmaj_error: null,
    };
  }

  /** judge one record with a configuration and write the result (and drop its queue entry) */
  async function judgeRecord(r: InferenceRecord, cfg: JudgeConfigRecord, p: Principal): Promise<InferenceRecord> {
    const why = unjudgeable(r);
    let out: JudgeOutcome;
    try {
      out = why
        ? { ok: false, error: why, inference_id: null, attempts: 0 }
        : await limitOf(cfgKey(cfg), cfg.max_concurrent).run(() =>
            judgeWithRetries(core, p, specOf(cfg), inferenceMessages(r, cfg.rubric, cfg.score_scale)),
          );
    } catch (err) {
      // judgeWithRetries never throws; anything else (the prompt) is this record's error, not a crash
      out = {
        ok: false,
        error: `the judgement failed: ${(err as Error)?.message ?? err}`,
        inference_id: null,
        attempts: 0,
      };
    }
    if (!out.ok) deps.log?.warn({ inference: r.id, judge: cfg.model, err: out.error }, 'judgement failed');
    const fields = fieldsOf(out, cfg.model);
    const next = await store.tx((t) => {
      t.judges.dequeue(r.id);
      return t.inferences.applyJudgement(r.id, fields);
    });
    return next ?? r;
  }

  /** drop a queue entry that can no longer be judged, saying why on the record */
  async function drop(e: JudgeQueueEntry, error: string): Promise<void> {
    await store.tx(async (t) => {
      t.judges.dequeue(e.inference_id);
      if (await t.inferences.get(e.inference_id)) {
        await t.inferences.applyJudgement(e.inference_id, {
          llmaj_judged_at: nowIso(),
          llmaj_model: null,
          llmaj_error: error,
        });
      }
    });
  }

  /** start queued judgements up to the background concurrency */
  // one pass over the queue at a time (a pass awaits store reads); a kick during a pass runs another after it
  let kicking = false;
  let kickAgain = false;
  function kick(): void {
    if (closing) return;
    if (kicking) { kickAgain = true; return; }
    kicking = true;
    kickPass().catch((err) => deps.log?.warn({ err: String(err) }, 'judge queue')).finally(() => {
      kicking = false;
      if (kickAgain) { kickAgain = false; kick(); }
    });
  }
  async function kickPass(): Promise<void> {
    for (const e of await store.judges.queue()) {
      if (closing || inflight.size >= BACKGROUND_CONCURRENCY) return;
      if (inflight.has(e.inference_id) || stuck.has(e.inference_id)) continue;
      const r = await store.inferences.get(e.inference_id);
      const cfg = r && (await configFor(r));
      const p = cfg && (await principalFor(cfg.team_id, cfg.updated_by));
      let work: Promise<unknown>;
      if (!r) work = store.tx((t) => t.judges.dequeue(e.inference_id));
      else if (!cfg || !p) work = drop(e, 'no judge is configured for this inference any more');
      else work = judgeRecord(r, cfg, p);
      const w = work
        .then(
          () => undefined,
          (err) => {
            stuck.add(e.inference_id); // never retried in a loop: the next start picks it up
            deps.log?.warn({ inference: e.inference_id, err: String(err) }, 'judge queue');
          },
        )
        .finally(() => {
          inflight.delete(e.inference_id);
          queueMicrotask(kick);
        });
      inflight.set(e.inference_id, w);
    }
  }

  return {
    checkModel,

    async getConfig(p: Principal, s: Scope) {
      const c = await store.judges.getConfig(s.scope, await scopeId(p, s));
      if (!c)
        throw new NotFoundError(
          s.scope === 'team'
            ? 'No judge is configured for this team'
            : `No judge is configured for project ${s.project_id}`,
        );
      return configView(c);
    },

    async putConfig(p: Principal, s: Scope, body: JudgeConfigInput) {
      const id = await scopeId(p, s);
      const v = validate(body);
      await checkModel(p.team_id, v.model);
      const c: JudgeConfigRecord = {
        ...v,
        scope: s.scope,
        team_id: p.team_id,
        project_id: s.scope === 'project' ? id : null,
        updated_at: nowIso(),
        updated_by: p.user_id,
      };
      await store.tx((t) => t.judges.putConfig(c));
      return configView(c);
    },

    async removeConfig(p: Principal, s: Scope): Promise<void> {
      const id = await scopeId(p, s);
      if (!(await store.judges.getConfig(s.scope, id))) throw new NotFoundError('No judge is configured here');
      await store.tx((t) => t.judges.removeConfig(s.scope, id));
    },

    /**
     * Called by the inference service inside the transaction that stores a record: queue it for the
     * background judge when a judge is configured for it and the sample draw says so.
     */
    async sampleInTx(t: Tx, r: InferenceRecord): Promise<void> {
      if (!eligible(r)) return;
      const cfg = await configFor(r, t);
      if (!cfg || cfg.sample_rate <= 0 || Math.random() >= cfg.sample_rate) return;
      t.judges.enqueue({ inference_id: r.id, team_id: r.team_id, reason: 'sample', enqueued_at: nowIso() });
    },

    /** after that transaction committed: start the queued work once the inference's reply is on its way */
    stored(): void {
      setImmediate(kick);
    },

    /** POST /inferences/:id/judge: judge now with the judge in effect; answers with the result */
    async judgeNow(p: Principal, id: string) {
      const r = await store.inferences.get(id);
      if (!r || r.team_id !== p.team_id) throw new NotFoundError(`Inference ${id} not found`);
      if (r.endpoint === JUDGE_ENDPOINT)
        throw new ConflictError('This inference is a judge call; judges are not judged');
      const cfg = await configFor(r);
      if (!cfg)
        throw new ConflictError('No judge is configured for this inference (PUT /judge or PUT /projects/:id/judge)');
      const why = unjudgeable(r);
      if (why) throw new ConflictError(`Inference ${id} cannot be judged: ${why}`);
      return judgementView(await judgeRecord(r, cfg, p));
    },

    /**
     * POST /inferences/judge: queue the newest `limit` (default 100) inferences matching the history
     * filters of GET /inferences (`since`/`until` as ISO 8601 strings); already queued, judge calls,
     * failed and store:false inferences and those without a judge in effect are skipped.
     */
    async judgeBatch(p: Principal, body: BatchFilters) {
      const q = batchQuery(body);
      await store.settled();
      const { items, total } = await store.inferences.query({ ...q, team_id: p.team_id });
      const at = nowIso();
      const { queued, skipped } = await store.tx(async (t) => {
        let queued = 0;
        let skipped = 0;
        for (const r of items) {
          if (!eligible(r) || !(await configFor(r, t)) || (await t.judges.queued(r.id))) {
            skipped++;
            continue;
          }
          t.judges.enqueue({ inference_id: r.id, team_id: r.team_id, reason: 'request', enqueued_at: at });
          queued++;
        }
        return { queued, skipped };
      });
      kick();
      return { queued, skipped, matched: total };
    },

    /** RewardContext.judge for llm_as_judge rewards: scores in [0, 1], an error per failed item */
    async rewardJudge(
      items: RewardItem[],
      opts: JudgeRewardOptions,
    ): Promise<{ scores: number[]; errors: (string | null)[] }> {
      const team = await store.teams.get(opts.teamId);
      const scores = items.map(() => 0);
      const errors: (string | null)[] = items.map(() => null);
      if (!team) return { scores, errors: items.map(() => `team ${opts.teamId} not found`) };
      const p: Principal = { kind: 'key', team_id: opts.teamId, user_id: '', key_id: null, team, session: null };
      const spec: JudgeSpec = {
        model: opts.model,
        rubric: opts.rubric,
        scoreScale: opts.scoreScale,
        timeoutS: opts.timeoutS,
        maxRetries: opts.maxRetries,
        retryBackoffS: opts.retryBackoffS,
      };
      const sem = new Semaphore(Math.max(1, opts.maxConcurrent));
      await Promise.all(
        items.map((it, i) =>
          sem.run(async () => {
            const out = await judgeWithRetries(core, p, spec, rewardMessages(it, opts.rubric, opts.scoreScale));
            if (out.ok) scores[i] = out.score;
            else errors[i] = out.error;
          }),
        ),
      );
      return { scores, errors };
    },

    /** after a restart: judge what was queued */
    async resumePending(): Promise<number> {
      const n = (await store.judges.queue()).length;
      kick();
      return n;
    },

    /** judgements in progress or queued (tests, /health) */
    async pending(): Promise<number> {
      return (await store.judges.queue()).length;
    },

    /** stop starting judgements and wait (at most timeoutMs) for those running; the queue stays for the next start */
    async close(timeoutMs = 2000): Promise<void> {
      closing = true;
      await Promise.race([
        Promise.allSettled([...inflight.values()]),
        new Promise((r) => setTimeout(r, timeoutMs).unref()),
      ]);
    },
  };
}
export type JudgeService = ReturnType<typeof createJudgeService>;
