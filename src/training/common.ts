// What both trainers share: configuration defaults, hooks, the LR schedule, seeded shuffling,
// validation split, checkpoint bookkeeping (rotation, best/final), dataset loading.
import {
  closeSync, cpSync, existsSync, fsyncSync, openSync, readdirSync, readFileSync, renameSync, rmSync,
} from 'node:fs';
import { dirname, join } from 'node:path';
import { parseJsonl, type DataRecord, type RecordKind } from './data/formats.ts';
import { InitRng } from './encoder/init.ts';
import { DEFAULT_PRECISION, PRECISION_OPTIONS, type PrecisionOption } from './precision.ts';

export interface ProgressEvent {
  epoch: number;
  step: number;
  totalSteps: number;
  progress_percent: number;
  loss: number;
  tokens_per_s: number;
}
export interface LogEvent {
  level: 'debug' | 'info' | 'warn' | 'error';
  message: string;
}
export interface CheckpointEvent {
  id: string;
  epoch: number;
  step: number;
  train_loss: number;
  val_loss: number | null;
  /** the validation task metric (F1 / accuracy, higher is better) when the trainer scores one */
  val_metric?: number | null;
  is_best: boolean;
  is_final: boolean;
  dir: string;
}
export interface TrainHooks {
  onProgress?(e: ProgressEvent): void;
  onLog?(e: LogEvent): void;
  onCheckpoint?(e: CheckpointEvent): void;
  /** aborting stops after the current optimizer step and saves the current weights as the final checkpoint */
  signal?: AbortSignal;
}

export class TrainingConfigError extends Error {
  override name = 'TrainingConfigError';
}

export interface CommonTrainConfig {
  /** compute precision of the graph's matrix products: 'auto' (default: bf16 where the CPU has AVX512_BF16 and its
   *  bf16 products time faster than fp32's, else fp32), 'fp32', or 'bf16' (falls back to fp32 on CPUs without
   *  AVX512_BF16). Weights, gradients and optimizer state stay fp32 (src/training/precision.ts). */
  precision?: PrecisionOption;
  /** base model directory (Hugging Face / GLiNER2 layout) or a checkpoint directory */
  base_model: string;
  output_dir: string;
  /** records, or a JSONL file path */
  train_data: DataRecord[] | string;
  /** explicit validation records (otherwise validation_data_percentage of train_data is held out) */
  validation_data?: DataRecord[] | string;
  training_type?: 'lora' | 'full';
  nr_epochs?: number;
  learning_rate?: number;
  batch_size?: number;
  gradient_accumulation_steps?: number;
  seed?: number;
  validation_data_percentage?: number;
  /** evaluations without improvement of the validation loss (or task metric, when scored) before stopping; 0 = off */
  early_stopping_patience?: number;
  scheduler?: 'linear' | 'cosine' | 'constant';
  warmup_ratio?: number;
  warmup_steps?: number;
  weight_decay?: number;
  max_grad_norm?: number;
  lora_r?: number;
  lora_alpha?: number;
  lora_dropout?: number;
  lora_target_modules?: string[];
  /** stop after this many optimizer steps (0 = no limit) */
  max_steps?: number;
  /** evaluate + checkpoint every n optimizer steps (default: at the end of each epoch) */
  eval_steps?: number;
  /** checkpoint-<step> directories kept (best/ and final/ are never rotated); default 3 */
  save_total_limit?: number;
  /** size of the native thread pool for this process (tiny models train faster on 1 thread) */
  threads?: number;
}

export interface TrainResult {
  output_dir: string;
  best_checkpoint: string | null;
  final_checkpoint: string;
  checkpoints: CheckpointEvent[];
  steps: number;
  epochs_completed: number;
  train_loss: number;
  val_loss: number | null;
  best_val_loss: number | null;
  /** best validation task metric (F1 / accuracy) when the trainer scores one; it then picks the best checkpoint */
  best_val_metric?: number | null;
  stopped: 'completed' | 'early_stopping' | 'max_steps' | 'time_limit' | 'aborted';
  tokens_per_s: number;
  duration_s: number;
}

export function loadRecords(src: DataRecord[] | string, expect?: RecordKind[]): DataRecord[] {
  if (typeof src !== 'string') return src;
  if (!existsSync(src)) throw new TrainingConfigError(`dataset file ${src} not found`);
  return parseJsonl(readFileSync(src, 'utf8'), expect);
}

/** A run's precision option: what it names (checked), or the default. */
export function trainPrecision(v: unknown): PrecisionOption {
  if (v === undefined || v === null) return DEFAULT_PRECISION;
  if (!PRECISION_OPTIONS.includes(v as PrecisionOption))
    throw new TrainingConfigError(`precision must be ${PRECISION_OPTIONS.join(', ')}`);
  return v as PrecisionOption;
}

export function positiveInt(v: unknown, name: string, def: number, min = 1): number {
  if (v === undefined || v === null) return def;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < min) throw new TrainingConfigError(`${name} must be an integer >= ${min}`);
  return v;
}
export function positiveNum(v: unknown, name: string, def: number, allowZero = false): number {
  if (v === undefined || v === null) return def;
  if (typeof v !== 'number' || !Number.isFinite(v) || v < 0 || (!allowZero && v === 0)) throw new TrainingConfigError(`${name} must be a ${allowZero ? 'non-negative' : 'positive'} number`);
  return v;
}

/** Fisher-Yates with the seeded generator. */
export function shuffled<T>(xs: T[], rng: InitRng): T[] {
  const a = xs.slice();
  for (let i = a.length - 1; i > 0; i--) {
    const j = Math.floor(rng.uniform() * (i + 1));
    [a[i], a[j]] = [a[j], a[i]];
  }
  return a;
}

/** Holds out `pct` % (at least 1 record when pct > 0 and there are >= 2) with the seed. */
export function splitValidation<T>(xs: T[], pct: number, seed: number): { train: T[]; val: T[] } {
  if (pct <= 0 || xs.length < 2) return { train: xs, val: [] };
  const s = shuffled(xs, new InitRng(seed ^ 0x5eed));
  const n = Math.min(xs.length - 1, Math.max(1, Math.round((xs.length * pct) / 100)));
  return { val: s.slice(0, n), train: s.slice(n) };
}

/**
 * Learning-rate multiplier at `progress` (0..1) of a run whose warm-up is its first `warmupFrac`:
 * linear warm-up, then linear or cosine decay to 0 at progress 1 (a time budget's schedule).
 */
export function lrFactorAt(kind: 'linear' | 'cosine' | 'constant', progress: number, warmupFrac: number): number {
  if (warmupFrac > 0 && progress < warmupFrac) return Math.max(progress / warmupFrac, 1e-3);
  if (kind === 'constant') return 1;
  const p = Math.min(1, (progress - warmupFrac) / Math.max(1e-9, 1 - warmupFrac));
  return kind === 'cosine' ? 0.5 * (1 + Math.cos(Math.PI * p)) : Math.max(0, 1 - p);
}

/** Learning-rate multiplier at optimizer step `step` (1-based) of `total`. */
export function lrFactor(kind: 'linear' | 'cosine' | 'constant', step: number, total: number, warmup: number): number {
  if (warmup > 0 && step <= warmup) return step / warmup;
  if (kind === 'constant') return 1;
  const p = Math.min(1, (step - warmup) / Math.max(1, total - warmup));
  return kind === 'cosine' ? 0.5 * (1 + Math.cos(Math.PI * p)) : Math.max(0, 1 - p);
}

/** fsync every file and directory under `path` (and `path` itself) */
function syncTree(path: string): void {
  for (const e of readdirSync(path, { withFileTypes: true })) {
    const p = join(path, e.name);
    if (e.isDirectory()) syncTree(p);
    else if (e.isFile()) { const fd = openSync(p, 'r'); try { fsyncSync(fd); } finally { closeSync(fd); } }
  }
  const fd = openSync(path, 'r');
  try { fsyncSync(fd); } finally { closeSync(fd); }
}

/** Suffix of a checkpoint directory still being written (never a checkpoint; removed on the next write). */
export const PARTIAL_SUFFIX = '.partial';

/**
 * Writes a checkpoint directory crash-consistently: `write` fills `dir` + PARTIAL_SUFFIX, its files
 * are fsynced, then it is renamed to `dir` and the parent fsynced. A kill at any point leaves no
 * half-written directory under the checkpoint's name.
 */
export function writeDirAtomic(dir: string, write: (tmp: string) => void): void {
  const tmp = dir + PARTIAL_SUFFIX;
  rmSync(tmp, { recursive: true, force: true });
  write(tmp);
  syncTree(tmp);
  rmSync(dir, { recursive: true, force: true });
  renameSync(tmp, dir);
  const fd = openSync(dirname(dir), 'r');
  try { fsyncSync(fd); } finally { closeSync(fd); }
}

/** Checkpoint directories: rotation of checkpoint-<step>, best/ and final/ copies (each written atomically). */
export class CheckpointBook {
  readonly events: CheckpointEvent[] = [];
  private rotating: string[] = [];
  bestLoss: number | null = null;
  bestMetric: number | null = null;
  bestDir: string | null = null;
  constructor(
    readonly outputDir: string,
    private readonly limit: number,
    private readonly hooks: TrainHooks,
  ) {}

  /** Records a checkpoint written to output_dir/checkpoint-<step>; maintains best/ and final/. */
  add(e: Omit<CheckpointEvent, 'is_best' | 'dir' | 'id'>, dir: string): CheckpointEvent {
    // by the task metric when one is scored (higher is better), else by the validation loss
    const metric = e.val_metric ?? null;
    const betterLoss = e.val_loss !== null && (this.bestLoss === null || e.val_loss < this.bestLoss);
    const isBest = metric !== null
      ? this.bestMetric === null || metric > this.bestMetric
      : this.bestMetric === null && betterLoss;
    const id = dir.split('/').pop()!;
    if (betterLoss) this.bestLoss = e.val_loss;
    if (isBest) {
      if (metric !== null) this.bestMetric = metric;
      const best = join(this.outputDir, 'best');
      writeDirAtomic(best, (tmp) => cpSync(dir, tmp, { recursive: true }));
      this.bestDir = best;
    }
    let outDir = dir;
    if (e.is_final) {
      const fin = join(this.outputDir, 'final');
      writeDirAtomic(fin, (tmp) => cpSync(dir, tmp, { recursive: true }));
      outDir = fin;
    }
    const ev: CheckpointEvent = { ...e, id, is_best: isBest, dir: outDir };
    this.events.push(ev);
    if (!e.is_final) {
      this.rotating.push(dir);
      while (this.rotating.length > this.limit) rmSync(this.rotating.shift()!, { recursive: true, force: true });
    } else if (dir !== outDir) {
      rmSync(dir, { recursive: true, force: true });
      this.rotating = this.rotating.filter((d) => d !== dir);
    }
    this.hooks.onCheckpoint?.(ev);
    return ev;
  }
}

export const log = (hooks: TrainHooks, level: LogEvent['level'], message: string) => hooks.onLog?.({ level, message });

/** What a trainer plugs into runTrainingLoop: its data, its graph's micro-step and optimizer step. */
export interface TrainingLoop<T> {
  outputDir: string;
  hooks: TrainHooks;
  t0: number; // Date.now() when the trainer started (for duration_s)
  items: T[]; // training examples, shuffled each epoch with `seed`
  batchSize: number;
  accum: number; // gradient accumulation steps
  epochs: number;
  perEpoch: number; // micro-batches per epoch (drop_last)
  totalSteps: number;
  evalEvery: number;
  patience: number; // early stopping (0 = off)
  maxSteps: number; // 0 = no cap
  seed: number;
  scheduler: 'linear' | 'cosine' | 'constant';
  warmup: number;
  book: CheckpointBook;
  /** Clears the gradients before an optimizer step's micro-batches. */
  zeroGrad(): void;
  /** Forward + backward of one micro-batch (gradients scaled by gradScale). `loss` is added to the
   *  logging window with weight `weight` (the window reports Σloss / Σweight). */
  microStep(items: T[], opts: { gradScale: number; seed: number }): Promise<{ loss: number; weight: number; tokens: number; aborted?: boolean }>;
  optimizerStep(step: number, lrFactor: number): Promise<unknown>;
  /** After each optimizer step (an algorithm's own metrics log, a generation engine's weights refresh). */
  afterStep?(step: number, last: boolean): Promise<void>;
  evaluate(): Promise<number | null>;
  /** Scores a written checkpoint on the validation task (F1 / accuracy, higher is better): when present, it picks
   *  the best checkpoint and drives early stopping instead of the loss. */
  score?(dir: string): Promise<number | null>;
  /** Wall-clock budget from t0 (ms): the LR schedule runs over it (progress = max(step share, time share)) and
   *  training stops when it is spent, leaving time for the last evaluation. 0 / undefined = none. */
  maxMs?: number;
  /** warm-up share of a time budget's schedule (the step schedule uses `warmup`) */
  warmupFrac?: number;
  /** also evaluate every this many ms (a time budget with fewer steps than an epoch) */
  evalEveryMs?: number;
  /** Writes the current weights to `dir`. */
  writeCheckpoint(dir: string): void;
  /** Weights evaluated and saved in place of the trained ones (a moving average): `enter` puts them in before an
   *  evaluation and its checkpoint, `leave` restores the trained ones after. */
  evalWeights?: { enter(): void; leave(): void };
  /** Whether a run aborted before its first step still scores the validation split for the final checkpoint. */
  evalUntrainedOnAbort: boolean;
}

/** The epoch / accumulation / schedule / evaluation / early-stopping / checkpoint loop both trainers share. */
export async function runTrainingLoop<T>(p: TrainingLoop<T>): Promise<TrainResult> {
  const { hooks, book, accum, totalSteps, epochs, patience, maxSteps, seed } = p;
  let step = 0;
  let epoch = 0;
  let stopped: TrainResult['stopped'] = 'completed';
  let bad = 0;
  let windowLoss = 0;
  let windowN = 0;
  let lastTrain = NaN;
  let lastVal: number | null = null;
  let lastMetric: number | null = null;
  let tokens = 0;
  let busy = 0;
  let lastEvalAt = Date.now();
  let evalMs = 0; // duration of the last evaluation + checkpoint (kept in reserve at the end of a time budget)
  const rng = new InitRng(seed);
  const save = async (isFinal: boolean) => {
    const dir = join(p.outputDir, `checkpoint-${step}`);
    writeDirAtomic(dir, (tmp) => p.writeCheckpoint(tmp));
    lastMetric = p.score ? await p.score(dir) : null;
    const e = { epoch, step, train_loss: lastTrain, val_loss: lastVal, val_metric: lastMetric, is_final: isFinal };
    return book.add(e, dir);
  };
  // an evaluation and its checkpoint see the evaluated weights (evalWeights), training the trained ones
  const withEvalWeights = async (fn: () => Promise<void>) => {
    p.evalWeights?.enter();
    try {
      await fn();
    } finally {
      p.evalWeights?.leave();
    }
  };
  const maxMs = p.maxMs ?? 0;
  const elapsed = () => Date.now() - p.t0;
  outer: for (epoch = 1; epoch <= epochs; epoch++) {
    const order = shuffled(p.items, rng);
    for (let b0 = 0; b0 + accum <= p.perEpoch; b0 += accum) {
      if (hooks.signal?.aborted) {
        stopped = 'aborted';
        break outer;
      }
      const ts = Date.now();
      p.zeroGrad();
      for (let a = 0; a < accum; a++) {
        const items = order.slice((b0 + a) * p.batchSize, (b0 + a + 1) * p.batchSize);
        const r = await p.microStep(items, { gradScale: 1 / accum, seed: seed * 1000003 + step * 131 + a });
        if (r.aborted) {
          stopped = 'aborted';
          break outer;
        }
        windowLoss += r.loss;
        windowN += r.weight;
        tokens += r.tokens;
      }
      step++;
      const f = maxMs
        ? lrFactorAt(p.scheduler, Math.max(step / totalSteps, elapsed() / maxMs), p.warmupFrac ?? 0.1)
        : lrFactor(p.scheduler, step, totalSteps, p.warmup);
      await p.optimizerStep(step, f);
      await p.afterStep?.(step, step === totalSteps || (maxSteps > 0 && step >= maxSteps));
      busy += Date.now() - ts;
      const tps = tokens / Math.max(busy / 1000, 1e-9);
      hooks.onProgress?.({ epoch, step, totalSteps, progress_percent: (100 * step) / totalSteps, loss: windowLoss / Math.max(windowN, 1), tokens_per_s: tps });
      const outOfTime = maxMs > 0 && elapsed() + evalMs >= maxMs;
      if (outOfTime) {
        stopped = 'time_limit';
        log(hooks, 'info', `time budget of ${(maxMs / 60_000).toFixed(1)} min reached at step ${step}`);
        break outer;
      }
      const timeToEval = p.evalEveryMs && Date.now() - lastEvalAt >= p.evalEveryMs;
      if (step % p.evalEvery === 0 || step === totalSteps || timeToEval) {
        const te = Date.now();
        lastTrain = windowLoss / Math.max(windowN, 1);
        windowLoss = windowN = 0;
        const prevBest = book.bestLoss;
        const prevMetric = book.bestMetric;
        const isLast = step === totalSteps;
        await withEvalWeights(async () => {
          lastVal = await p.evaluate();
          await save(isLast);
        });
        const vl = lastVal !== null ? ` val_loss ${lastVal.toFixed(4)}` : '';
        const vm = lastMetric !== null ? ` val_metric ${(lastMetric as number).toFixed(4)}` : '';
        log(hooks, 'info', `epoch ${epoch} step ${step}/${totalSteps}: train_loss ${lastTrain.toFixed(4)}${vl}${vm} `
          + `(${tps.toFixed(0)} tokens/s)`);
        lastEvalAt = Date.now();
        evalMs = lastEvalAt - te;
        if (isLast) break outer;
        if (patience > 0 && lastMetric !== null) {
          bad = prevMetric !== null && lastMetric <= prevMetric ? bad + 1 : 0;
          if (bad >= patience) {
            stopped = 'early_stopping';
            log(hooks, 'info', `early stopping: no validation improvement in ${patience} evaluations`);
            break outer;
          }
        } else if (patience > 0 && lastVal !== null) {
          bad = prevBest !== null && lastVal >= prevBest ? bad + 1 : 0;
          if (bad >= patience) {
            stopped = 'early_stopping';
            log(hooks, 'info', `early stopping: no validation improvement in ${patience} evaluations`);
            break outer;
          }
        }
      }
      if (maxSteps && step >= maxSteps) {
        stopped = 'max_steps';
        break outer;
      }
    }
  }
  epoch = Math.min(epoch, epochs);
  if (!book.events.some((e) => e.is_final)) {
    if (windowN) lastTrain = windowLoss / windowN;
    await withEvalWeights(async () => {
      if (p.evalUntrainedOnAbort || stopped !== 'aborted' || step > 0) lastVal = await p.evaluate();
      await save(true);
    });
  }
  const fin = book.events[book.events.length - 1];
  return {
    output_dir: p.outputDir,
    best_checkpoint: book.bestDir,
    final_checkpoint: fin.dir,
    checkpoints: book.events,
    steps: step,
    epochs_completed: stopped === 'completed' ? epochs : Math.max(0, epoch - 1),
    train_loss: lastTrain,
    val_loss: lastVal,
    best_val_loss: book.bestLoss,
    best_val_metric: book.bestMetric,
    stopped,
    tokens_per_s: tokens / Math.max(busy / 1000, 1e-9),
    duration_s: (Date.now() - p.t0) / 1000,
  };
}
