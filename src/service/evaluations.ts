// Evaluations: a model (training job id, base model id or baseline id) scored on a ready dataset,
// in the worker pool (src/service/jobs/evaluate-task.ts), one at a time in a FIFO queue.
// States: queued → running → complete | failed. Results: f1_score, precision_score,
// recall_score, sample_count, completed_at; per-label scores for entity tasks (strict spans,
// micro-averaged) and, on relation data, `relations` (strict head/tail/label triples, micro and per
// relation label); accuracy and macro_f1 for classification.
// Baselines (GET /felix/baseline-models) are real models Loom runs: the base models on disk and a
// fresh-initialized small GLiNER2 encoder (its tokenizer built from the evaluated text), so a
// trained model is compared with an honest starting point.
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import type { EvaluationRecord, LabelScores, Store } from '../store/index.ts';
import type { Principal } from './auth.ts';
import type { Catalog } from './catalog.ts';
import type { ArtifactStore } from './artifacts/types.ts';
import { artifactDir, type ServiceConfig } from './config.ts';
import type { DatasetsService } from './datasets.ts';
import { ConflictError, NotFoundError, ValidationError } from './errors.ts';
import { newId, nowIso } from './ids.ts';
import type { Logger } from './index.ts';
import type { EvaluateResult } from './jobs/evaluate-task.ts';
import type { Leases } from './jobs/leases.ts';
import type { JobPool } from './jobs/pool.ts';
import type { JobQueue } from './jobs/queue.ts';
import type { ModelRuntime } from './runtime.ts';
import { FRESH_ENCODERS, type TrainingJobsService } from './training-jobs.ts';

export const BASELINE_FRESH_ENCODER = 'baseline/gliner2-init-small';
/** fresh-initialized baselines: id → encoder preset (the same presets as the loom/gliner2-init-* bases) */
export const FRESH_BASELINES: Record<string, string> = { [BASELINE_FRESH_ENCODER]: 'small', 'baseline/gliner2-init-tiny': 'tiny' };

const r6 = (x: number) => Math.round(x * 1e6) / 1e6;

export function evaluationView(e: EvaluationRecord) {
  const done = e.status === 'complete';
  return {
    id: e.id, status: e.status, base_model: e.base_model, dataset_name: e.dataset_name, dataset_version: e.dataset_version, project_id: e.project_id,
    task: e.task,
    ...(done ? {
      f1_score: e.f1_score, precision_score: e.precision_score, recall_score: e.recall_score,
      ...(e.accuracy !== undefined ? { accuracy: e.accuracy, macro_f1: e.macro_f1 } : {}),
      ...(e.per_label && Object.keys(e.per_label).length ? { per_label: e.per_label } : {}),
      ...(e.relations ? { relations: e.relations } : {}),
    } : {}),
    sample_count: e.sample_count, threshold: e.threshold, error: e.error, created_at: e.created_at, started_at: e.started_at, completed_at: e.completed_at,
  };
}

export function createEvaluationsService(deps: {
  store: Store; config: ServiceConfig; pool: JobPool; datasets: DatasetsService; catalog: Catalog;
  runtime: ModelRuntime; artifacts: ArtifactStore;
  trainingJobs: TrainingJobsService; log?: Logger;
  /**
   * an evaluation is held (queued in this process's memory, or running here) under a lease taken when
   * it is created; one whose process is gone is queued again by the supervisor of a live process
   */
  leases: Leases;
  /**
   * the durable queue (PostgreSQL store): evaluations are enqueued and run by processes with the
   * 'worker' role, which take the lease when they start one; null: the accepting process runs them
   */
  queue?: JobQueue | null;
}) {
  const { store, config, pool, datasets, catalog, runtime, trainingJobs, artifacts, leases } = deps;
  const durable = deps.queue ?? null;
  /** a queued evaluation this old is enqueued again by the supervisor (a lost send) */
  const RESEND_AFTER_MS = 10_000;
  const send = (id: string) => durable?.send('evaluation', id)
    .catch((e) => deps.log?.warn({ evaluation: id, err: String(e) }, 'evaluation not enqueued (sent again later)'));
  const queue: string[] = [];
  /** evaluations whose lease this process lost: dropped here, nothing more written */
  const lost = new Set<string>();
  const onLost = (id: string) => {
    lost.add(id);
    const i = queue.indexOf(id);
    if (i >= 0) queue.splice(i, 1);
  };
  let active: Promise<void> | null = null;
  let closing = false;

  datasets.addUsageCheck(async (teamId, name) => {
    for (const e of await store.evaluations.listByTeam(teamId)) if ((e.status === 'queued' || e.status === 'running') && e.dataset_name === name) return `evaluation ${e.id} (${e.status})`;
    return null;
  });

  async function patchAny(id: string, ch: Partial<EvaluationRecord>): Promise<void> {
    await store.tx(async (t) => {
      const e = await t.evaluations.get(id);
      if (e) t.evaluations.put({ ...e, ...ch });
    });
  }

  async function baselines() {
    const local = await runtime.listLocal();
    const entries = await catalog.list({ supports_inference: true });
    const models = entries.filter((e) => e.local).map((e) => ({ id: e.id, name: e.name, provider: e.provider, description: `${e.description} (base ${e.task_type}, as released)`, task_type: e.task_type }));
    for (const l of local) if (!models.some((m) => m.id === l.id)) models.push({ id: l.id, name: l.id, provider: 'local', description: `${l.kind} on disk`, task_type: l.kind });
    for (const [id, preset] of Object.entries(FRESH_BASELINES)) {
      models.push({ id, name: `GLiNER2 ${preset}, freshly initialized`, provider: 'loom', description: `An untrained ${preset} GLiNER2 encoder (the starting point of training loom/gliner2-init-${preset} from scratch): the floor a trained model should clear`, task_type: 'encoder' });
    }
    return models;
  }

  /** what to run for `base_model` */
  async function resolveModel(p: Principal, id: string): Promise<{ source: string; kind: 'encoder' | 'decoder'; dir: string | null; adapter?: string; fresh?: string }> {
    const job = await trainingJobs.modelOf(p.team_id, id);
    if (job) {
      if (job.status !== 'complete' && job.status !== 'deployed') throw new ConflictError(`Training job ${id} is ${job.status}; evaluate it once it is complete`);
      return { source: 'training_job', kind: job.kind, dir: job.model_dir, adapter: job.adapter_dir };
    }
    const preset = FRESH_BASELINES[id] ?? FRESH_ENCODERS[id];
    if (preset) return { source: 'baseline', kind: 'encoder', dir: null, fresh: preset };
    const local = (await runtime.listLocal()).find((m) => m.id === id);
    if (local) return { source: (await baselines()).some((b) => b.id === id) ? 'baseline' : 'base_model', kind: local.kind, dir: local.dir };
    const entry = await catalog.get(id);
    if (entry) return { source: 'base_model', kind: entry.task_type, dir: null };
    throw new NotFoundError(`Model ${id} not found: use a training job id, a base model id or a baseline id`);
  }

  leases.supervise('evaluation', {
    async inFlight() {
      const all = (await store.evaluations.all()).sort((a, b) => a.created_at.localeCompare(b.created_at));
      if (!durable) return all.filter((e) => e.status === 'queued' || e.status === 'running').map((e) => e.id);
      // queue: waiting evaluations belong to no process (the queue holds them); a lost send is sent again
      const old = Date.now() - RESEND_AFTER_MS;
      for (const e of all) if (e.status === 'queued' && Date.parse(e.created_at) < old) void send(e.id);
      return all.filter((e) => e.status === 'running').map((e) => e.id);
    },
    async takeOver(t, id) {
      const e = await t.evaluations.get(id);
      if (!e || (e.status !== 'queued' && e.status !== 'running')) return false;
      if (e.status === 'running') t.evaluations.put({ ...e, status: 'queued', started_at: null });
      return durable ? true : 'adopt';
    },
    after(id) {
      if (durable) { void send(id); return; }
      if (!queue.includes(id)) queue.push(id);
      pump();
    },
    onLost,
  });

  function pump(): void {
    if (active || closing) return;
    const id = queue.shift();
    if (!id) return;
    active = runOne(id).catch((e) => deps.log?.error({ evaluation: id, err: String(e) }, 'evaluation runner error')).finally(() => { active = null; pump(); });
  }

  async function runOne(id: string): Promise<void> {
    try {
      await runHeld(id);
    } finally {
      if (!closing) await leases.release('evaluation', id);
      lost.delete(id);
    }
  }

  async function runHeld(id: string): Promise<void> {
    const toRunning = async (t: Parameters<Parameters<Store['tx']>[0]>[0]) => {
      const cur = await t.evaluations.get(id);
      if (!cur || cur.status !== 'queued') return null;
      t.evaluations.put({ ...cur, status: 'running', started_at: nowIso() });
      return cur;
    };
    // from the queue: queued → running with this process's lease; in process: the lease is ours since create
    const e = durable
      ? await leases.claim('evaluation', id, toRunning, () => onLost(id))
      : leases.holds('evaluation', id) ? await store.tx(toRunning) : null;
    if (!e) return;
    const patch = (id: string, ch: Partial<EvaluationRecord>) => (lost.has(id) ? Promise.resolve() : patchAny(id, ch));
    const work = join(artifactDir(config, 'evaluations'), id);
    try {
      const v = await store.datasets.getVersion(e.dataset_version_id);
      if (!v || v.status !== 'ready') throw new Error(`dataset ${e.dataset_name} version ${e.dataset_version} is no longer available`);
      const m = JSON.parse((e as unknown as { model_json: string }).model_json) as Awaited<ReturnType<typeof resolveModel>>;
      // a trained model's folders and the data on this node (S3 artifact store: fetched into the cache)
      let dir = m.dir && m.source === 'training_job' ? await artifacts.getDir(m.dir) : m.dir;
      const adapter = m.adapter ? await artifacts.getDir(m.adapter) : undefined;
      const dataFile = await datasets.localDataFile(v);
      if (!dir && !m.fresh) {
        await runtime.warm({ id: e.base_model, kind: m.kind });
        dir = (await runtime.listLocal()).find((x) => x.id === e.base_model)?.dir ?? null;
        if (!dir) throw new Error(`model ${e.base_model} is not available on this server`);
      }
      if (m.fresh) {
        // the baseline: a freshly initialized encoder, its tokenizer built from this data
        mkdirSync(work, { recursive: true });
        dir = join(work, 'fresh-encoder');
        await pool.run<unknown>({ op: 'init_encoder', dir, preset: m.fresh, texts_from: [dataFile] }).result;
      }
      const { result } = pool.run<EvaluateResult>({
        op: 'evaluate', kind: m.kind, model_dir: dir!, adapter_dir: adapter, data_file: dataFile,
        threshold: e.threshold,
      });
      const r = await result;
      const rounded = (x: LabelScores): LabelScores => ({
        precision: r6(x.precision), recall: r6(x.recall), f1: r6(x.f1), support: x.support, tp: x.tp, fp: x.fp, fn: x.fn,
      });
      const per_label: EvaluationRecord['per_label'] = {};
      for (const [l, x] of Object.entries(r.per_label)) per_label[l] = rounded(x);
      const relations = r.relations
        ? {
          ...rounded(r.relations),
          per_label: Object.fromEntries(Object.entries(r.relations.per_label).map(([l, x]) => [l, rounded(x)])),
        }
        : undefined;
      await patch(id, {
        status: 'complete', task: r.task, f1_score: r6(r.f1), precision_score: r6(r.precision), recall_score: r6(r.recall), sample_count: r.sample_count,
        ...(r.accuracy !== undefined ? { accuracy: r6(r.accuracy), macro_f1: r6(r.macro_f1 ?? r.f1) } : {}),
        per_label: r.task === 'ner' ? per_label : r.task === 'classification' ? per_label : undefined,
        relations, completed_at: nowIso(), error: null,
      });
    } catch (err) {
      if (closing) return;
      await patch(id, { status: 'failed', error: err instanceof Error ? err.message : String(err), completed_at: nowIso() });
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  }

  return {
    baselines: async () => { const models = (await baselines()).map(({ task_type: _t, ...m }) => m); return { models, count: models.length }; },

    async create(p: Principal, body: { base_model: string; dataset_name: string; project_id?: string; dataset_version?: string; threshold?: number }) {
      if (body.project_id && (await store.projects.get(body.project_id))?.team_id !== p.team_id) throw new NotFoundError(`Project ${body.project_id} not found`);
      let v;
      try { v = await datasets.readyVersion(p.team_id, body.dataset_name, body.dataset_version ?? 'latest'); } catch (e) {
        if (e instanceof ValidationError) throw new ValidationError(e.message, [{ path: '/dataset_name', message: e.message, keyword: 'dataset_not_ready' }]);
        throw e;
      }
      const m = await resolveModel(p, body.base_model);
      const kinds = Object.keys(v.kinds);
      const task: EvaluationRecord['task'] = kinds.includes('chat') ? 'decoder' : kinds.some((k) => k === 'ner' || k === 'relations' || k === 'gliner2') ? 'ner' : 'classification';
      if (m.kind === 'decoder' && task !== 'decoder') throw new ValidationError(`Model ${body.base_model} is a decoder; dataset ${body.dataset_name} holds ${kinds.join('/')} records (evaluate a decoder on chat data)`, [{ path: '/dataset_name', message: 'dataset does not fit a decoder' }]);
      if (m.kind === 'encoder' && task === 'decoder') throw new ValidationError(`Model ${body.base_model} is an encoder; dataset ${body.dataset_name} holds chat records`, [{ path: '/dataset_name', message: 'dataset does not fit an encoder' }]);
      if (kinds.some((k) => k === 'dpo' || k === 'grpo')) throw new ValidationError(`Dataset ${body.dataset_name} holds preference/reward records, which have no reference answer to score`, [{ path: '/dataset_name', message: 'not evaluable' }]);
      const e: EvaluationRecord & { model_json: string } = {
        id: newId(), team_id: p.team_id, project_id: body.project_id ?? null, base_model: body.base_model, model_source: m.source,
        dataset_name: v.dataset_name, dataset_version: v.version_number, dataset_version_id: v.id, task, status: 'queued', threshold: body.threshold ?? 0.5,
        sample_count: 0, error: null, created_at: nowIso(), started_at: null, completed_at: null, model_json: JSON.stringify(m),
      };
      if (durable) {
        await store.tx((t) => t.evaluations.put(e));
        await send(e.id);
      } else {
        await leases.claim('evaluation', e.id, async (t) => { t.evaluations.put(e); return e; }, () => onLost(e.id));
        queue.push(e.id);
        setImmediate(pump);
      }
      return { success: true, count: 1, evaluations: [evaluationView(e)] };
    },

    async list(p: Principal, q: { project_id?: string }) {
      let rows = await store.evaluations.listByTeam(p.team_id);
      if (q.project_id) rows = rows.filter((e) => e.project_id === q.project_id);
      const evaluations = rows.map(evaluationView);
      return { success: true, count: evaluations.length, evaluations };
    },

    async get(p: Principal, id: string) {
      const e = await store.evaluations.get(id);
      if (!e || e.team_id !== p.team_id) throw new NotFoundError(`Evaluation ${id} not found`);
      return evaluationView(e);
    },

    async remove(p: Principal, id: string) {
      const e = await store.evaluations.get(id);
      if (!e || e.team_id !== p.team_id) throw new NotFoundError(`Evaluation ${id} not found`);
      const i = queue.indexOf(id);
      if (i >= 0) queue.splice(i, 1);
      await store.tx((t) => t.evaluations.remove(id));
      if (i >= 0) await leases.release('evaluation', id); // a running one releases it when it ends
      return { success: true, message: `Evaluation ${id} deleted` };
    },

    /**
     * at start: queued and running evaluations whose process is gone (lease expired) are queued again
     * here (they have no side effects); those of a live process are left to it
     */
    async resumePending(): Promise<void> {
      await leases.sweep('evaluation');
      if (durable && config.roles.has('worker')) {
        await durable.work('evaluation', 1, (id) => (closing ? Promise.resolve() : runOne(id)));
      }
      pump();
    },

    async idle(timeoutMs = 60_000): Promise<void> {
      const until = Date.now() + timeoutMs;
      while ((active || queue.length) && Date.now() < until) await Promise.race([active ?? Promise.resolve(), new Promise((r) => setTimeout(r, 100))]);
    },

    async shutdown(): Promise<void> { closing = true; queue.length = 0; },
  };
}
export type EvaluationsService = ReturnType<typeof createEvaluationsService>;
