// Training jobs (spec sections 2-4): validation of a job request, the queue (one job at a time by
// default, LOOM_TRAINING_CONCURRENCY), the run in a worker thread (src/service/jobs/train-task.ts
// over src/training), progress / logs / checkpoints in the store, graceful stop, deletion,
// signed weight downloads, and recovery after a restart. With an S3 artifact store (src/service/artifacts)
// each checkpoint folder is uploaded before its record is written, the final weights before the job is
// complete, and the weight archive on its first download (then a GET presigned by the bucket); a node
// that lacks a job's folders fetches them (datasets, base checkpoints, weights) into its cache.
//
// States (spec section 3): requested → running → complete | failed | cancelled; complete → deployed
// (by a deployment, src/service/projects.ts); requested | running → cancelled (POST /stop).
// A running job has a lease (src/service/jobs/leases.ts) held by the process that runs it. When that
// process dies or stops renewing (crash, SIGKILL, clean shutdown), the supervisor of any live process
// (or of the next start) queues the job again from the start (same seed and data give the same
// weights), at most MAX_RESTARTS times, then fails it; a job another live process runs is left alone.
// `requested` jobs stay queued. Each of these moves writes a log line.
//
// Who runs queued jobs: on LMDB every process with the 'worker' role schedules `requested` jobs from
// the store (`requested → running` is a compare-and-set in a store transaction, so one of them wins);
// on PostgreSQL with a job queue (src/service/jobs/queue.ts) API processes enqueue the job's id and
// worker processes consume it. A stop request is seen by the process running the job through its
// record (polled every second), wherever it runs.
//
// Beside it in src/service/training/: the request body (request.ts), the job record and its view (job.ts), the
// settings a job gets by base where its request says nothing (defaults.ts), the DPO / GRPO rules (rl-jobs.ts).
import { existsSync, mkdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { CheckpointRecord, Store, TrainingLogRecord } from '../store/index.ts';
import { type ArtifactStore, localModelRef } from './artifacts/types.ts';
import type { Principal } from './auth.ts';
import type { Catalog } from './catalog.ts';
import { artifactDir, type ServiceConfig } from './config.ts';
import type { DatasetsService } from './datasets.ts';
import { ConflictError, NotFoundError, ValidationError } from './errors.ts';
import { newId, nowIso } from './ids.ts';
import type { Logger } from './index.ts';
import { writeTarGz } from './jobs/archive.ts';
import type { Leases } from './jobs/leases.ts';
import type { JobPool } from './jobs/pool.ts';
import type { JobQueue } from './jobs/queue.ts';
import type { TrainTaskResult } from './jobs/train-task.ts';
import { jobModelRef, type ModelRef, type ModelRuntime } from './runtime.ts';
import type { SignedUrls } from './signed-urls.ts';
import { adapterConflict } from '../training/adapter-shape.ts';
import { checkDatasetShape, checkJudge, checkRlBase, rlConfigOrThrow, type RewardJudge } from './training/rl-jobs.ts';

// the training-only fresh bases are catalog entries (listed by GET /base-models)
import { FRESH_ENCODER_ID, FRESH_ENCODERS } from './catalog.ts';
export { FRESH_ENCODER_ID, FRESH_ENCODERS };
// the request's body (type and schema), the job record and its view, the defaults by base
import type { TrainingJobRequest } from './training/request.ts';
import { jobView, round, type BaseSpec, type Job } from './training/job.ts';
import { jobDefaults } from './training/defaults.ts';
import { wordPiecePrefixIn } from '../models/encoder/tokenizer.ts';
import { DEFAULT_PRECISION } from '../training/precision.ts';

const MAX_RESTARTS = 2;
/** how often a running job's record is read for a stop request made through another process */
const STOP_POLL_MS = 1000;
/** a `requested` job this old is enqueued again by the supervisor (PostgreSQL queue: a lost send) */
const RESEND_AFTER_MS = 10_000;
const DECODER_SCORE_MAX = 100;
const ACTIVE = new Set(['requested', 'running']);
const STATUSES = ['requested', 'running', 'complete', 'deployed', 'failed', 'cancelled'] as const;

export function createTrainingJobsService(deps: {
  store: Store; config: ServiceConfig; pool: JobPool; urls: SignedUrls; datasets: DatasetsService; catalog: Catalog; runtime: ModelRuntime; log?: Logger;
  artifacts: ArtifactStore;
  /** GRPO llm_as_judge rewards: the service's LLM judge (src/service/judge); absent → such jobs are refused */
  judge?: RewardJudge;
  /** per-job ownership: running jobs hold a lease; orphaned ones are taken over */
  leases: Leases;
  /** the durable queue (PostgreSQL store); null: this process schedules from the store */
  queue?: JobQueue | null;
}) {
  const { store, config, pool, datasets, catalog, runtime, artifacts, leases } = deps;
  const queue = deps.queue ?? null;
  const worker = config.roles.has('worker');
  const root = artifactDir(config, 'jobs');
  const running = new Map<string, { stop(): void; done: Promise<void> }>();
  let closing = false;

  const jobDir = (id: string) => join(root, id);
  const getJob = (id: string) => store.trainingJobs.get(id) as Promise<Job | undefined>;

  async function own(p: Principal, id: string): Promise<Job> {
    const j = await getJob(id);
    if (!j || j.team_id !== p.team_id) throw new NotFoundError(`Training job ${id} not found`);
    return j;
  }

  async function patch(id: string, fn: (j: Job) => Partial<Job> | null, log?: { level: TrainingLogRecord['level']; message: string }): Promise<Job | undefined> {
    return store.tx(async (t) => {
      const j = (await t.trainingJobs.get(id)) as Job | undefined;
      if (!j) return undefined;
      const ch = fn(j);
      if (ch === null) return j;
      const nj = { ...j, ...ch, updated_at: nowIso() } as Job;
      t.trainingJobs.put(nj);
      if (log) await t.trainingArtifacts.appendLog(id, log.level, log.message);
      return nj;
    });
  }
  const addLog = (id: string, level: TrainingLogRecord['level'], message: string) => store.tx(async (t) => {
    if (await t.trainingJobs.get(id)) await t.trainingArtifacts.appendLog(id, level, message);
  });

  // datasets in use by a queued or running job cannot be deleted
  datasets.addUsageCheck(async (teamId, name) => {
    for (const j of (await store.trainingJobs.listByTeam(teamId)) as Job[]) if (ACTIVE.has(j.status) && j.datasets?.some((d) => d.name === name)) return `training job ${j.id} (${j.status})`;
    return null;
  });

  function invalid(path: string, message: string, keyword?: string): never {
    throw new ValidationError(message, [{ path, message, keyword }]);
  }

  async function resolveBase(p: Principal, id: string): Promise<BaseSpec> {
    const ck = await store.trainingArtifacts.getCheckpoint(id);
    const fromJob = (j: Job, dir: string, source: BaseSpec['source']): BaseSpec => {
      if (j.training_type === 'lora' && j.task_type === 'decoder') {
        return { task_type: j.task_type, requested: id, source, catalog_id: j.base.catalog_id, dir: j.base.dir, init_adapter: dir };
      }
      return { task_type: j.task_type, requested: id, source, catalog_id: j.base.catalog_id, dir, init_adapter: null };
    };
    if (ck) {
      const j = await getJob(ck.job_id);
      if (!j || j.team_id !== p.team_id) throw new NotFoundError(`Model ${id} not found`);
      if (!(await artifacts.hasDir(ck.dir))) invalid('/base_model', `checkpoint ${id} has no weights on disk any more`);
      return fromJob(j, await artifacts.getDir(ck.dir), 'checkpoint');
    }
    const j = await getJob(id);
    if (j && j.team_id === p.team_id) {
      if ((j.status !== 'complete' && j.status !== 'deployed') || !j.weights_dir) invalid('/base_model', `training job ${id} is ${j.status}; only a complete job (or one of its checkpoints) can be a base model`);
      return fromJob(j, await artifacts.getDir(j.weights_dir!), 'training_job');
    }
    if (FRESH_ENCODERS[id]) return { task_type: 'encoder', requested: id, source: 'fresh', catalog_id: id, dir: null, init_adapter: null };
    const entry = await catalog.get(id);
    if (!entry) throw new NotFoundError(`Model ${id} not found: use a model id from GET /base-models, a checkpoint id or a training job id`);
    if (!entry.supports_training) invalid('/base_model', `model ${id} does not support training`);
    const local = (await runtime.listLocal()).find((m) => m.id === id);
    return { task_type: entry.task_type, requested: id, source: 'catalog', catalog_id: id, dir: local?.dir ?? null, init_adapter: null };
  }

  /** The LoRA shape of the adapter a decoder job continues (422 when the request names another). */
  function continuedLora(dir: string, body: TrainingJobRequest): { r: number; alpha: number; targetModules: string[] } {
    let cfg: Record<string, unknown>;
    try { cfg = JSON.parse(readFileSync(join(dir, 'adapter_config.json'), 'utf8')); } catch {
      invalid('/base_model', `${body.base_model} has no readable adapter_config.json`, 'adapter_base');
    }
    const ad = { r: Number(cfg.r), alpha: Number(cfg.lora_alpha ?? cfg.r), targetModules: (cfg.target_modules ?? []) as string[] };
    const conflict = adapterConflict({ lora_r: body.lora_r, lora_alpha: body.lora_alpha, lora_target_modules: body.target_modules }, ad);
    if (conflict) {
      const path = conflict.startsWith('lora_r') ? '/lora_r' : conflict.startsWith('lora_alpha') ? '/lora_alpha' : '/target_modules';
      invalid(path, `${conflict}: a job continuing ${body.base_model} keeps its LoRA shape (omit the option)`, 'adapter_conflict');
    }
    return ad;
  }

  // ---- the queue -------------------------------------------------------------------------------

  async function queued(): Promise<Job[]> {
    const out = ((await store.trainingJobs.all()) as Job[]).filter((j) => j.status === 'requested');
    return out.sort((a, b) => a.created_at.localeCompare(b.created_at) || a.id.localeCompare(b.id));
  }

  // one pass over the queue at a time (a pass reads the store); a call during a pass runs another after it
  let scheduling = false;
  let scheduleAgain = false;
  function schedule(): void {
    if (closing || queue || !worker) return; // with a queue, workers take jobs from it
    if (scheduling) { scheduleAgain = true; return; }
    scheduling = true;
    (async () => {
      for (const j of await queued()) {
        if (closing || running.size >= config.trainingConcurrency) return;
        if (running.has(j.id)) continue;
        start(j);
      }
    })().catch((e) => deps.log?.error({ err: String(e) }, 'training queue')).finally(() => {
      scheduling = false;
      if (scheduleAgain) { scheduleAgain = false; schedule(); }
    });
  }

  function start(j: Job): void {
    let stopFn: () => void = () => {};
    let stopRequested = false;
    const entry = { stop: () => { stopRequested = true; stopFn(); }, done: Promise.resolve() };
    running.set(j.id, entry);
    entry.done = run(j, (fn) => { stopFn = fn; if (stopRequested) fn(); })
      .catch((e) => deps.log?.error({ job: j.id, err: String(e) }, 'training job runner error'))
      .finally(() => { running.delete(j.id); schedule(); });
  }

  async function prepareData(j: Job, dir: string): Promise<{ train: string; val: string | null; all: string; trainCount: number; valCount: number }> {
    const lines: string[] = [];
    for (const d of j.datasets) {
      const v = await store.datasets.getVersion(d.version_id);
      if (!v || v.status !== 'ready') throw new Error(`dataset ${d.name} version ${d.version_number} is no longer available`);
      for (const l of readFileSync(await datasets.localDataFile(v), 'utf8').split('\n')) if (l.trim()) lines.push(l);
    }
    // a seeded shuffle, then the validation split (validation_data_percentage)
    const seed = Number(j.configuration.seed ?? 42);
    let s = (seed ^ 0x9e3779b9) >>> 0;
    const rand = () => { s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0; return s / 2 ** 32; };
    const order = lines.map((_, i) => i);
    for (let i = order.length - 1; i > 0; i--) { const k = Math.floor(rand() * (i + 1)); [order[i], order[k]] = [order[k], order[i]]; }
    const pct = Number(j.configuration.validation_data_percentage ?? 10);
    let nVal = Math.round((lines.length * pct) / 100);
    if (pct > 0 && nVal === 0 && lines.length >= 2) nVal = 1;
    if (nVal >= lines.length) nVal = lines.length - 1;
    const val = order.slice(0, nVal).sort((a, b) => a - b).map((i) => lines[i]);
    const train = order.slice(nVal).sort((a, b) => a - b).map((i) => lines[i]);
    const all = join(dir, 'data.jsonl');
    writeFileSync(all, lines.join('\n') + '\n');
    writeFileSync(join(dir, 'train.jsonl'), train.join('\n') + '\n');
    if (val.length) writeFileSync(join(dir, 'validation.jsonl'), val.join('\n') + '\n');
    return { train: join(dir, 'train.jsonl'), val: val.length ? join(dir, 'validation.jsonl') : null, all, trainCount: train.length, valCount: val.length };
  }

  async function run(j0: Job, onStop: (fn: () => void) => void): Promise<void> {
    const id = j0.id;
    const dir = jobDir(id);
    // requested → running and this process's lease, in one transaction
    let lost = false;
    let stopNow = () => {};
    let j: Job | undefined | null = await leases.claim('training', id, async (t) => {
      const cur = (await t.trainingJobs.get(id)) as Job | undefined;
      if (!cur || cur.status !== 'requested') return null;
      const nj: Job = {
        ...cur, status: 'running', started_at: nowIso(), progress_percent: 0, current_epoch: 0, current_step: 0,
        error: null, updated_at: nowIso(),
      };
      t.trainingJobs.put(nj);
      await t.trainingArtifacts.appendLog(id, 'info', `training started${queue ? ` (worker ${leases.owner})` : ''}`);
      return nj;
    }, () => { lost = true; stopNow(); });
    if (!j) return;
    // a local stop (POST .../stop here, DELETE) or a lost lease (another process took the job over:
    // stop, and write nothing more about it)
    onStop(() => stopNow());
    const patchOwned: typeof patch = (pid, fn, log) =>
      patch(pid, (cur) => (lost ? null : fn(cur)), lost ? undefined : log);
    const fail = async (message: string) => {
      await patchOwned(
        id, (cur) => (cur.status === 'running' ? { status: 'failed', error: message, completed_at: nowIso() } : null),
        { level: 'error', message: `training failed: ${message}` },
      );
    };
    // a stop request made through another process: seen on the job's record
    const stopPoll = setInterval(() => {
      getJob(id).then((cur) => { if (!cur || cur.status === 'cancelled') stopNow(); }, () => {});
    }, STOP_POLL_MS);
    stopPoll.unref();
    try {
      // a run starts from the beginning in an empty folder: records of an interrupted run's checkpoints go with it
      rmSync(dir, { recursive: true, force: true });
      const dropped = await store.tx(async (t) => {
        const old = await t.trainingArtifacts.listCheckpoints(id);
        for (const c of old) t.trainingArtifacts.removeCheckpoint(c);
        return old.length;
      });
      if (dropped) await addLog(id, 'info', `${dropped} checkpoint(s) of the interrupted run were discarded with it`);
      mkdirSync(join(dir, 'checkpoints'), { recursive: true });
      const data = await prepareData(j, dir);
      await addLog(id, 'info', `data: ${data.trainCount} training and ${data.valCount} validation examples from ${j.datasets.map((d) => `${d.name} v${d.version_number}`).join(', ')}`);
      // the base weights
      // the base's folders on this node (S3: fetched; the job may have been created on another node)
      const base = { ...j.base, init_adapter: j.base.init_adapter && (await artifacts.getDir(j.base.init_adapter)) };
      let baseDir = base.dir && base.source !== 'catalog' ? await artifacts.getDir(base.dir) : base.dir;
      let initEncoder: { preset: string; texts_from: string[]; seed: number } | undefined;
      if (base.source === 'fresh') {
        baseDir = join(dir, 'base');
        initEncoder = { preset: FRESH_ENCODERS[base.catalog_id] ?? 'small', texts_from: [data.all], seed: Number(j.configuration.seed ?? 42) };
      } else if (!baseDir) {
        await addLog(id, 'info', `pulling base model ${base.catalog_id}`);
        await runtime.warm({ id: base.catalog_id, kind: base.task_type });
        baseDir = (await runtime.listLocal()).find((m) => m.id === base.catalog_id)?.dir ?? null;
        if (!baseDir) throw new Error(`base model ${base.catalog_id} is not available on this server`);
      }
      if (!existsSync(baseDir) && !initEncoder) throw new Error(`base model weights ${baseDir} are missing`);
      const c = j.configuration;
      const out = join(dir, 'output');
      const trainerConfig: Record<string, unknown> = {
        base_model: baseDir, output_dir: out, train_data: data.train, validation_data: data.val ?? undefined,
        training_type: j.training_type, nr_epochs: c.nr_epochs, learning_rate: c.learning_rate, encoder_learning_rate: c.encoder_learning_rate,
        batch_size: c.batch_size, seed: c.seed, validation_data_percentage: 0,
        early_stopping_patience: c.early_stopping ? c.early_stopping_patience : 0,
        lora_r: c.lora_r, lora_alpha: c.lora_alpha, lora_dropout: c.lora_dropout, lora_target_modules: c.target_modules ?? undefined,
        max_steps: c.max_steps ?? undefined, warmup_ratio: c.warmup_ratio ?? undefined, scheduler: c.lr_scheduler ?? undefined,
        gradient_accumulation_steps: c.gradient_accumulation_steps ?? undefined, eval_steps: c.eval_steps ?? undefined,
        hidden_dropout: c.hidden_dropout, attention_dropout: c.attention_dropout, word_dropout: c.word_dropout,
        rare_word_dropout: c.rare_word_dropout, piece_dropout: c.piece_dropout,
        mention_replacement: c.mention_replacement,
        mention_dropout: c.mention_dropout,
        hard_negatives: c.hard_negatives, negative_span_keep: c.negative_span_keep,
        negative_span_hard: c.negative_span_hard,
        negative_labels: c.negative_labels, full_label_ratio: c.full_label_ratio, selection_metric: c.selection_metric,
        max_minutes: c.max_minutes, precision: c.precision,
        classifier_prior_init: c.classifier_prior_init, classification_loss: c.classification_loss,
        ema_decay: c.ema_decay,
        // every checkpoint is kept (any of them may be the base of a new job); deleting the job frees them
        save_total_limit: 1_000_000,
        init_adapter: base.init_adapter ?? undefined,
        training_algorithm: j.task_type === 'decoder' ? j.training_algorithm : undefined, rl_config: c.rl_config ?? undefined,
      };
      for (const k of Object.keys(trainerConfig)) if (trainerConfig[k] === undefined || trainerConfig[k] === null) delete trainerConfig[k];
      await addLog(id, 'info', `base ${base.requested}${base.source !== 'catalog' ? ` (${base.source})` : ''}, ${j.training_type} ${j.training_algorithm}, ${c.nr_epochs} epoch(s), learning rate ${c.learning_rate}, batch size ${c.batch_size}, seed ${c.seed}`);

      let lastWrite = 0;
      let pendingProgress: Record<string, unknown> | null = null;
      const flushProgress = async () => {
        const pr = pendingProgress;
        pendingProgress = null;
        if (!pr) return;
        await patchOwned(id, (cur) => (cur.status === 'running' || cur.status === 'cancelled' ? {
          progress_percent: Math.max(0, Math.min(100, Number(pr.progress_percent ?? cur.progress_percent))),
          current_epoch: Number(pr.epoch ?? cur.current_epoch), current_step: Number(pr.step ?? cur.current_step),
          total_steps: pr.totalSteps !== undefined ? Number(pr.totalSteps) : cur.total_steps,
          train_loss: typeof pr.loss === 'number' ? pr.loss : cur.train_loss, tokens_per_s: typeof pr.tokens_per_s === 'number' ? pr.tokens_per_s : cur.tokens_per_s,
        } : null));
      };
      let chain = Promise.resolve();
      const enqueue = (fn: () => Promise<unknown>) => { chain = chain.then(fn).then(() => {}, (e) => deps.log?.warn({ job: id, err: String(e) }, 'training event not recorded')); };
      const { result, port } = pool.run<TrainTaskResult>(
        // the validation split is scored after training; decoders generate a reply per example, so
        // at most DECODER_SCORE_MAX of them are scored (dpo / grpo log their own validation metrics)
        { op: 'train', kind: j.task_type, config: trainerConfig, init_encoder: initEncoder, team_id: j0.team_id, score: data.val && j.training_algorithm === 'sft' ? { data_file: data.val, indices: j.task_type === 'decoder' && data.valCount > DECODER_SCORE_MAX ? Array.from({ length: DECODER_SCORE_MAX }, (_, i) => i) : undefined } : undefined },
        (m: { type: string; data: any }) => {
          if (m?.type === 'progress') {
            pendingProgress = m.data;
            const now = Date.now();
            if (now - lastWrite >= 500) { lastWrite = now; enqueue(flushProgress); }
          } else if (m?.type === 'log') {
            const lvl = ['debug', 'info', 'warn', 'error'].includes(m.data?.level) ? m.data.level : 'info';
            enqueue(async () => { if (!lost) await addLog(id, lvl, String(m.data?.message ?? '')); });
          } else if (m?.type === 'judge') {
            // GRPO llm_as_judge: the worker's judge call, answered on the port (a failure scores 0 with its error)
            const { id: callId, items, opts } = m.data ?? {};
            const n = Array.isArray(items) ? items.length : 0;
            const answer = (scores: number[], errors: (string | null)[]) => port.postMessage({ type: 'judge_result', id: callId, scores, errors });
            if (!deps.judge) answer(new Array(n).fill(0), new Array(n).fill('no judge on this server'));
            else deps.judge(items, { ...opts, teamId: j0.team_id }).then((r) => answer(r.scores, r.errors),
              (e) => answer(new Array(n).fill(0), new Array(n).fill(`judge failed: ${e instanceof Error ? e.message : String(e)}`)));
          } else if (m?.type === 'checkpoint') {
            const c = m.data ?? {};
            const ck: CheckpointRecord = {
              id: newId(), job_id: id, team_id: j0.team_id, epoch: Number(c.epoch ?? 0), step: Number(c.step ?? 0),
              train_loss: typeof c.train_loss === 'number' ? c.train_loss : null, val_loss: typeof c.val_loss === 'number' ? c.val_loss : null,
              is_best: !!c.is_best, is_final: !!c.is_final, dir: String(c.dir ?? ''), created_at: nowIso(),
            };
            // one record per (job, step): a final checkpoint at the step of the last evaluation replaces
            // that step's record (the trainer moved its folder to final/); the event comes after the
            // folder is complete (written as .partial, fsynced, renamed)
            enqueue(async () => {
              if (lost) return;
              // S3: the folder in the bucket before its record (a record names weights every node can read)
              try { await artifacts.putDir(ck.dir); } catch (e) {
                // a folder the trainer moved to final/ meanwhile is recorded by the final checkpoint's event
                const why = (e as Error).message;
                if (existsSync(ck.dir)) await addLog(id, 'warn', `checkpoint at step ${ck.step} not stored: ${why}`);
                return;
              }
              await recordCheckpoint(ck);
            });
            const recordCheckpoint = (ck: CheckpointRecord) => store.tx(async (t) => {
              if (lost || !(await t.trainingJobs.get(id))) return;
              const prev = (await t.trainingArtifacts.listCheckpoints(id)).find((o) => o.step === ck.step);
              if (prev) Object.assign(ck, { id: prev.id, created_at: prev.created_at, is_best: ck.is_best || prev.is_best });
              if (ck.is_best) {
                for (const o of await t.trainingArtifacts.listCheckpoints(id)) {
                  if (o.is_best && o.id !== ck.id) t.trainingArtifacts.putCheckpoint({ ...o, is_best: false });
                }
              }
              t.trainingArtifacts.putCheckpoint(ck);
              await t.trainingArtifacts.appendLog(id, 'info', `checkpoint at epoch ${ck.epoch}, step ${ck.step}${ck.val_loss !== null ? `, validation loss ${ck.val_loss.toFixed(4)}` : ''}${ck.is_best ? ' (best so far)' : ''}`);
              const cur = (await t.trainingJobs.get(id)) as Job;
              t.trainingJobs.put({ ...cur, val_loss: ck.val_loss ?? cur.val_loss, updated_at: nowIso() });
            });
          }
        },
      );
      stopNow = () => port.postMessage({ type: 'stop' });
      const now = await getJob(id);
      if (!now || now.status === 'cancelled' || lost) stopNow();
      let r: TrainTaskResult;
      try {
        r = await result;
      } finally {
        await new Promise((res) => setImmediate(res)); // let the last port messages arrive
        enqueue(flushProgress);
        await chain;
      }
      const res = r.result;
      // final/ holds the last weights: full models (encoder LoRA: merged, plus the PEFT adapter
      // files) or the decoder's PEFT adapter
      const finalDir = String(res.final_checkpoint ?? join(out, 'final'));
      const lora = j.training_type === 'lora';
      const modelRef: ModelRef = j.task_type === 'decoder' && lora
        ? { id, kind: 'decoder', dir: finalDir, base_model: base.catalog_id, weights: 'adapter', base_dir: baseDir! }
        : { id, kind: j.task_type, dir: finalDir, base_model: base.catalog_id, weights: 'full' };
      const finals = { weights_dir: finalDir, weights_format: lora ? 'peft_lora' as const : 'safetensors' as const, output_dir: finalDir, model_ref: modelRef, completed_at: nowIso() };
      if (r.metrics_error && !lost) {
        await addLog(id, 'warn', `could not score the validation split: ${r.metrics_error}`);
      }
      if (lost) return;
      // S3: the final weights in the bucket before the job is complete (throws: the job fails with the reason)
      if (existsSync(finalDir)) await artifacts.putDir(finalDir);
      j = await patchOwned(id, (cur) => {
        if (cur.status === 'cancelled') return { ...finals, base: { ...cur.base, dir: baseDir } };
        if (cur.status !== 'running') return null;
        return { ...finals, status: 'complete', progress_percent: 100, metrics: r.metrics ? { ...r.metrics } : null, base: { ...cur.base, dir: baseDir } };
      }, r.stopped ? { level: 'info', message: 'training stopped; the last checkpoint is kept' } : { level: 'info', message: `training complete${r.metrics ? `: validation F1 ${r.metrics.f1.toFixed(4)}, precision ${r.metrics.precision.toFixed(4)}, recall ${r.metrics.recall.toFixed(4)} (${r.metrics.sample_count} examples)` : ''}` });
      if (!j) await artifacts.remove(dir); // deleted while it ran
    } catch (e) {
      if (closing || lost) return; // shutting down (the lease is released) or taken over: the restart rules apply
      const msg = e instanceof Error ? e.message : String(e);
      const cur = await getJob(id);
      if (!cur) { await artifacts.remove(dir).catch(() => {}); return; }
      if (cur.status === 'cancelled') { await addLog(id, 'info', `training stopped (${msg})`); return; }
      await fail(msg);
    } finally {
      clearInterval(stopPoll);
      // at shutdown the lease is kept until the pool is gone (leases.close() releases it then)
      if (!closing) await leases.release('training', id);
    }
  }

  /** the restart rule, inside the takeover transaction: queued again (restarts + 1) or failed */
  async function requeueOrFail(t: Parameters<Parameters<Store['tx']>[0]>[0], id: string): Promise<boolean> {
    const j = (await t.trainingJobs.get(id)) as Job | undefined;
    if (!j || j.status !== 'running') return false;
    const where = `epoch ${j.current_epoch}, step ${j.current_step}`;
    const now = nowIso();
    const what = `the process running the job stopped while it was running (${where}): `
      + 'the server restarted or its worker was lost';
    if ((j.restarts ?? 0) >= MAX_RESTARTS) {
      const error = `the process running the job stopped during training ${MAX_RESTARTS + 1} times`
        + ' (restart, crash or lost worker)';
      t.trainingJobs.put({ ...j, status: 'failed', error, completed_at: now, updated_at: now });
      const msg = `${what}; it has been restarted ${MAX_RESTARTS} times already, so it is marked failed`;
      await t.trainingArtifacts.appendLog(id, 'error', msg);
    } else {
      const restarts = (j.restarts ?? 0) + 1;
      const reset = { progress_percent: 0, current_epoch: 0, current_step: 0 };
      t.trainingJobs.put({ ...j, ...reset, status: 'requested', restarts, updated_at: now });
      const msg = `${what}; the job is queued again and restarts from the beginning with the same seed and data`;
      await t.trainingArtifacts.appendLog(id, 'warn', msg);
    }
    return true;
  }

  const send = (id: string) => queue?.send('training', id)
    .catch((e) => deps.log?.warn({ job: id, err: String(e) }, 'training job not enqueued (sent again later)'));
  /** a job taken over, or one that may have missed its queue message: enqueue it (PostgreSQL) or schedule */
  function dispatch(id: string): void {
    if (queue) void send(id);
    else schedule();
  }

  leases.supervise('training', {
    async inFlight() {
      const all = (await store.trainingJobs.all()) as Job[];
      // the queue's safety net: a requested job left waiting without a message is sent again (idempotent)
      const old = Date.now() - RESEND_AFTER_MS;
      if (queue) for (const j of all) if (j.status === 'requested' && Date.parse(j.updated_at) < old) dispatch(j.id);
      // LMDB: a job accepted by a busy process is started by an idle one at its next sweep
      if (!queue && all.some((j) => j.status === 'requested')) schedule();
      return all.filter((j) => j.status === 'running').map((j) => j.id);
    },
    takeOver: requeueOrFail,
    after: dispatch,
  });

  /** drop checkpoint records whose folder is missing, and duplicates of a (job, step) */
  async function reconcileCheckpoints(): Promise<void> {
    const all = (await store.trainingArtifacts.allCheckpoints()).sort((a, b) => b.created_at.localeCompare(a.created_at));
    const keep = new Set<string>();
    const drop = all.filter((c) => {
      const k = `${c.job_id}|${c.step}`;
      if (keep.has(k) || !c.dir || !existsSync(c.dir)) return true;
      keep.add(k);
      return false;
    });
    if (!drop.length) return;
    await store.tx((t) => { for (const c of drop) t.trainingArtifacts.removeCheckpoint(c); });
    deps.log?.warn({ dropped: drop.length }, 'checkpoint records without a folder (or duplicated) were removed');
  }

  /** what a weight archive holds. LoRA: the PEFT adapter (its config and weights, tokenizer files); full: the model */
  const PEFT_FILES = new RegExp('^(adapter_config\\.json|adapter_model\\.safetensors|tokenizer[^/]*\\.json'
    + '|special_tokens_map\\.json|README\\.md)$');
  function archiveFilter(j: Job): (rel: string) => boolean {
    if (j.weights_format !== 'peft_lora') return (rel) => rel !== 'training_config.json';
    return (rel) => PEFT_FILES.test(rel);
  }

  /** false where `dir` holds a readable tokenizer.json of another model type than WordPiece (a missing or unreadable
   * one: true); read asynchronously, as a pretrained tokenizer.json is megabytes */
  async function wordPieceOrUnknown(dir: string): Promise<boolean> {
    try {
      return wordPiecePrefixIn(await readFile(join(dir, 'tokenizer.json'), 'utf8')) !== null;
    } catch {
      return true;
    }
  }

  // ---- the API ---------------------------------------------------------------------------------

  return {
    root,
    jobDir,

    /** `extra.adaptive`: the marker of an adaptive retraining (src/service/adaptive), shown on the job */
    async create(p: Principal, body: TrainingJobRequest, extra: { adaptive?: Record<string, unknown> } = {}) {
      const algo = body.training_algorithm ?? 'sft';
      if (algo === 'sft' && body.rl_config !== undefined) invalid('/rl_config', 'rl_config must be omitted for sft', 'rl_config_with_sft');
      const rl = algo === 'sft' ? null : rlConfigOrThrow(algo, body.rl_config);
      const base = await resolveBase(p, body.base_model);
      // a fresh-initialized encoder has no pretrained weights for an adapter to adapt: it trains in full
      const type = body.training_type ?? (base.source === 'fresh' ? 'full' : 'lora');
      if (base.source === 'fresh' && type === 'lora') {
        invalid('/training_type', `${body.base_model} is freshly initialized (random weights): train it with `
          + 'training_type full (its default); LoRA adapts pretrained weights', 'lora_on_fresh');
      }
      if (body.classifier_prior_init === true && type === 'lora') {
        invalid('/classifier_prior_init', 'classifier_prior_init shifts the weights of full fine-tuning; '
          + 'a LoRA job keeps the base classifier as it is', 'prior_init_with_lora');
      }
      // piece dropout redoes WordPiece's greedy longest match (the fresh encoders' tokenizers); a base on this node
      // with another tokenizer is refused here, one not yet pulled fails when its job starts
      const baseDir = base.source !== 'fresh' ? base.dir : null;
      if ((body.piece_dropout ?? 0) > 0 && baseDir && !(await wordPieceOrUnknown(baseDir))) {
        invalid('/piece_dropout', `${body.base_model}'s tokenizer is not WordPiece: piece dropout segments words `
          + 'again by WordPiece\'s greedy longest match, as the fresh loom/gliner2-init-* bases tokenize',
        'piece_dropout_tokenizer');
      }
      if (algo !== 'sft') checkRlBase(algo, base, body.base_model);
      if (rl) await checkJudge(rl, { store, catalog }, p.team_id, !!deps.judge);
      if (base.task_type === 'decoder' && type === 'full') invalid('/training_type', 'decoder models are LoRA-only: full fine-tuning is reserved for encoder models', 'full_on_decoder');
      // continuing a decoder adapter: its rank, alpha and targets; options that differ are refused
      const adapter = base.init_adapter ? continuedLora(base.init_adapter, body) : null;
      if (body.project_id && (await store.projects.get(body.project_id))?.team_id !== p.team_id) throw new NotFoundError(`Project ${body.project_id} not found`);
      const ds: Job['datasets'] = [];
      let classificationOnly = true; // every record of every dataset a classification record (freshRecipe)
      for (const [i, d] of body.datasets.entries()) {
        let v;
        try { v = await datasets.readyVersion(p.team_id, d.name, d.version ?? 'latest'); } catch (e) {
          if (e instanceof ValidationError) invalid(`/datasets/${i}/name`, e.message, 'dataset_not_ready');
          throw e;
        }
        const kinds = Object.keys(v.kinds);
        if (kinds.some((k) => k !== 'classification')) classificationOnly = false;
        const decoderData = kinds.some((k) => k === 'chat' || k === 'dpo' || k === 'grpo');
        if (base.task_type === 'encoder' && decoderData) invalid(`/datasets/${i}/name`, `dataset ${d.name} holds ${kinds.join('/')} records, which an encoder cannot train on`, 'dataset_type');
        if (base.task_type === 'decoder') {
          const file = await datasets.localDataFile(v);
          checkDatasetShape(algo, d.name, kinds, () => file, `/datasets/${i}/name`);
        }
        ds.push({ name: v.dataset_name, version_number: v.version_number, version_id: v.id, dataset_type: v.dataset_type, size: v.size });
      }
      const fresh = base.source === 'fresh' ? FRESH_ENCODERS[base.catalog_id] ?? null : null;
      const d = jobDefaults(base.task_type, fresh, type, base.init_adapter ? null : base.dir, classificationOnly);
      const configuration = {
        nr_epochs: body.nr_epochs ?? d.nr_epochs, learning_rate: body.learning_rate ?? d.learning_rate,
        ...(base.task_type === 'encoder' && 'encoder_learning_rate' in d ? {
          encoder_learning_rate: body.encoder_learning_rate ?? d.encoder_learning_rate,
          hidden_dropout: body.hidden_dropout ?? d.hidden_dropout,
          attention_dropout: body.attention_dropout ?? d.attention_dropout,
          word_dropout: body.word_dropout ?? d.word_dropout, negative_labels: body.negative_labels ?? d.negative_labels,
          rare_word_dropout: body.rare_word_dropout ?? d.rare_word_dropout,
          piece_dropout: body.piece_dropout ?? d.piece_dropout,
          mention_replacement: body.mention_replacement ?? d.mention_replacement,
          mention_dropout: body.mention_dropout ?? d.mention_dropout,
          hard_negatives: body.hard_negatives ?? d.hard_negatives,
          negative_span_keep: body.negative_span_keep ?? d.negative_span_keep,
          negative_span_hard: body.negative_span_hard ?? d.negative_span_hard,
          full_label_ratio: body.full_label_ratio ?? d.full_label_ratio,
          classifier_prior_init: type === 'full' && (body.classifier_prior_init ?? d.classifier_prior_init),
          classification_loss: body.classification_loss ?? d.classification_loss,
          ema_decay: body.ema_decay ?? d.ema_decay,
          selection_metric: body.selection_metric ?? d.selection_metric, max_minutes: body.max_minutes ?? null,
        } : {}),
        batch_size: body.batch_size ?? d.batch_size, precision: body.precision ?? DEFAULT_PRECISION,
        seed: body.seed ?? 42, validation_data_percentage: body.validation_data_percentage ?? 10,
        early_stopping: body.early_stopping ?? body.early_stopping_patience !== undefined, early_stopping_patience: body.early_stopping_patience ?? (body.early_stopping ? 3 : null),
        ...(type === 'lora' ? { lora_r: adapter?.r ?? body.lora_r ?? 8, lora_alpha: adapter?.alpha ?? body.lora_alpha ?? 16, lora_dropout: body.lora_dropout ?? 0.05, target_modules: adapter?.targetModules ?? body.target_modules ?? null } : {}),
        max_steps: body.max_steps ?? null, warmup_ratio: body.warmup_ratio ?? null, lr_scheduler: body.lr_scheduler ?? null, gradient_accumulation_steps: body.gradient_accumulation_steps ?? null,
        eval_steps: body.eval_steps ?? null,
        ...(rl ? { rl_config: rl } : {}),
      };
      const now = nowIso();
      const id = newId();
      const job: Job = {
        id, team_id: p.team_id, status: 'requested', base_model: body.base_model, model_name: body.model_name ?? `${base.catalog_id.split('/').pop()}-${id.slice(0, 8)}`,
        task_type: base.task_type, output_dir: null, training_type: type, project_id: body.project_id ?? null, created_at: now, updated_at: now,
        training_algorithm: algo, datasets: ds, configuration, base,
        progress_percent: 0, current_epoch: 0, current_step: 0, total_steps: null, train_loss: null, val_loss: null, tokens_per_s: null,
        metrics: null, error: null, started_at: null, completed_at: null, restarts: 0, weights_dir: null, weights_format: null,
        ...(extra.adaptive ? { adaptive: extra.adaptive } : {}),
      };
      const waiting = (await queued()).map((x) => x.id);
      await store.tx(async (t) => {
        t.trainingJobs.put(job);
        const ahead = new Set([...waiting, ...running.keys()].filter((x) => x !== id)).size;
        await t.trainingArtifacts.appendLog(id, 'info', `job created; ${ahead > 0 ? `queued behind ${ahead} job(s)` : 'queued'}`);
      });
      if (queue) await send(id);
      else setImmediate(schedule);
      return { id, status: 'requested' as const };
    },

    async list(p: Principal, q: { status?: string; project_id?: string; limit: number; offset: number }) {
      let jobs = (await store.trainingJobs.listByTeam(p.team_id)) as Job[];
      if (q.status) jobs = jobs.filter((j) => j.status === q.status);
      if (q.project_id) {
        const deps = await store.deployments.listByProject(q.project_id);
        jobs = jobs.filter((j) => j.project_id === q.project_id || deps.some((d) => d.training_job_id === j.id && d.team_id === p.team_id));
      }
      const page = jobs.slice(q.offset, q.offset + q.limit).map(jobView);
      return { training_jobs: page, count: page.length, total: jobs.length, limit: q.limit, offset: q.offset };
    },

    async get(p: Principal, id: string) { return jobView(await own(p, id)); },

    async logs(p: Principal, id: string, q: { after?: number; limit?: number }) {
      await own(p, id);
      const rows = await store.trainingArtifacts.listLogs(id, { after: q.after, limit: q.limit });
      return { success: true, job_id: id, count: rows.length, logs: rows.map((r) => ({ seq: r.seq, timestamp: r.timestamp, level: r.level, message: r.message })) };
    },

    async checkpoints(p: Principal, id: string) {
      await own(p, id);
      const cks = (await store.trainingArtifacts.listCheckpoints(id)).map((c) => ({ id: c.id, epoch: c.epoch, step: c.step, train_loss: round(c.train_loss), val_loss: round(c.val_loss), is_best: c.is_best, is_final: c.is_final, created_at: c.created_at }));
      return { success: true, job_id: id, count: cks.length, checkpoints: cks };
    },

    async download(p: Principal, id: string, baseUrl: string) {
      const j = await own(p, id);
      if (j.status !== 'complete' && j.status !== 'deployed') throw new ConflictError(`Training job ${id} is ${j.status}; weights can be downloaded once it is complete`);
      if (!j.weights_dir || !(await artifacts.hasDir(j.weights_dir))) {
        throw new NotFoundError(`The weights of training job ${id} are missing on disk`);
      }
      const archive = join(jobDir(id), 'weights.tar.gz');
      const filename = `${j.model_name}.tar.gz`;
      if (artifacts.kind === 's3') {
        // built once by any node, then served by the bucket itself (a presigned GET)
        let st = await artifacts.stat(archive);
        if (!st) {
          await writeTarGz(await artifacts.getDir(j.weights_dir), archive, j.model_name, archiveFilter(j));
          await artifacts.putFile(archive);
          st = { size: statSync(archive).size, etag: null };
        }
        const signed = (await artifacts.presignGet(archive, config.signedUrlTtlS, filename))!;
        return {
          success: true, download_url: signed.url, expires_at: signed.expires_at, filename, format: j.weights_format,
          size_bytes: st.size,
        };
      }
      if (!existsSync(archive)) await writeTarGz(j.weights_dir, archive, j.model_name, archiveFilter(j));
      const path = `/felix/training-jobs/${id}/download/archive`;
      const signed = deps.urls.sign('GET', path, config.signedUrlTtlS, baseUrl);
      return {
        success: true, download_url: signed.url, expires_at: signed.expires_at, filename: `${j.model_name}.tar.gz`,
        format: j.weights_format, size_bytes: statSync(archive).size,
      };
    },

    /** the signed archive URL (signature checked by the route) */
    async archive(id: string): Promise<{ path: string; filename: string }> {
      const j = await getJob(id);
      const path = join(jobDir(id), 'weights.tar.gz');
      if (!j || !existsSync(path)) throw new NotFoundError('Archive not found');
      return { path, filename: `${j.model_name}.tar.gz` };
    },

    async stop(p: Principal, id: string) {
      const j = await own(p, id);
      if (j.status !== 'running' && j.status !== 'requested') throw new ConflictError(`Training job ${id} is ${j.status}; only a running (or queued) job can be stopped`);
      const nj = await patch(id, (cur) => (ACTIVE.has(cur.status) ? { status: 'cancelled', completed_at: nowIso() } : null), { level: 'info', message: j.status === 'running' ? 'stop requested: finishing the current step and keeping the last checkpoint' : 'cancelled before it started' });
      running.get(id)?.stop();
      return { success: true, id, status: nj?.status ?? 'cancelled', message: j.status === 'running' ? 'The job stops after its current step; its last checkpoint is kept.' : 'The queued job was cancelled.' };
    },

    async remove(p: Principal, id: string) {
      const j = await own(p, id);
      let active: { name: string } | undefined;
      for (const pr of await store.projects.listByTeam(p.team_id)) {
        if (pr.active_deployment_id && (await store.deployments.get(pr.active_deployment_id))?.training_job_id === id) active = pr;
      }
      if (active) throw new ConflictError(`Training job ${id} is deployed to project ${active.name}; deploy another model there or delete the project first`);
      running.get(id)?.stop();
      await store.tx(async (t) => { await t.trainingArtifacts.removeJob(id); await t.trainingJobs.remove(id); });
      runtime.unload?.(localModelRef(artifacts, jobModelRef(j))); // its adapter (or weights) leaves memory with the job
      if (!running.has(id)) {
        await artifacts.remove(jobDir(id))
          .catch((e) => deps.log?.warn({ job: id, err: String(e) }, 'job files not removed'));
      }
      return { success: true, message: `Training job ${id} and its checkpoints, logs and weights were deleted` };
    },

    async trainedModels(p: Principal) {
      const models = ((await store.trainingJobs.listByTeam(p.team_id)) as Job[]).filter((j) => j.status === 'complete' || j.status === 'deployed').map((j) => ({
        id: j.id, training_job_id: j.id, model_name: j.model_name, base_model: j.base_model, task_type: j.task_type, training_type: j.training_type,
        status: j.status, metrics: j.metrics, weights_format: j.weights_format, project_id: j.project_id, created_at: j.created_at, completed_at: j.completed_at,
      }));
      return { success: true, count: models.length, models };
    },

    /** evaluations: what to run for a job id (null: not a job of this team) */
    async modelOf(teamId: string, id: string): Promise<{ kind: 'encoder' | 'decoder'; model_dir: string; adapter_dir?: string; status: string } | null> {
      const j = await getJob(id);
      if (!j || j.team_id !== teamId) return null;
      const ref = j.model_ref;
      if (!ref) return { kind: j.task_type, model_dir: '', status: j.status };
      return ref.weights === 'adapter' ? { kind: ref.kind, model_dir: ref.base_dir ?? '', adapter_dir: ref.dir, status: j.status } : { kind: ref.kind, model_dir: ref.dir ?? '', status: j.status };
    },

    /**
     * At start: checkpoint records are reconciled with the disk (a record whose folder is gone is
     * dropped; one record per job and step, the newest); running jobs whose process is gone (their
     * lease expired, or names a dead process of this machine) are re-queued or failed by the
     * supervisor; jobs another live process runs are left alone; queued jobs stay queued. With the
     * queue, a worker starts consuming here.
     */
    async resumePending(): Promise<void> {
      await reconcileCheckpoints();
      await leases.sweep('training');
      if (queue && worker && config.trainingConcurrency > 0) {
        await queue.work('training', config.trainingConcurrency, async (id) => {
          const j = await getJob(id);
          if (!j || j.status !== 'requested' || running.has(id) || closing) return;
          start(j);
          await running.get(id)?.done;
        });
      }
      schedule();
    },

    /** wait until no job is running or queued (tests), at most `timeoutMs` */
    async idle(timeoutMs = 60_000): Promise<void> {
      const until = Date.now() + timeoutMs;
      while (Date.now() < until) {
        if (running.size === 0 && (await queued()).length === 0) return;
        await Promise.race([...[...running.values()].map((r) => r.done), new Promise((r) => setTimeout(r, 100))]);
      }
    },

    /**
     * shutdown: running jobs are left `running` in the store; their leases are released once the pool
     * is gone (leases.close()), and any live process's supervisor (or the next start) re-queues them
     */
    async shutdown(): Promise<void> {
      // no stop message: a stopped trainer returns normally and the job would look finished.
      // The pool is destroyed next, which ends the workers; their jobs stay `running`.
      closing = true;
    },

    statuses: STATUSES,
  };
}
export type TrainingJobsService = ReturnType<typeof createTrainingJobsService>;
