// What both trainers share: configuration defaults, hooks, the LR schedule, seeded shuffling,
// validation split, checkpoint bookkeeping (rotation, best/final), dataset loading.
import { cpSync, existsSync, readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { parseJsonl, type DataRecord, type RecordKind } from './data/formats.ts';
import { InitRng } from './encoder/init.ts';

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
  /** evaluations without improvement of the validation loss before stopping; 0 = off */
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
  stopped: 'completed' | 'early_stopping' | 'max_steps' | 'aborted';
  tokens_per_s: number;
  duration_s: number;
}

export function loadRecords(src: DataRecord[] | string, expect?: RecordKind[]): DataRecord[] {
  if (typeof src !== 'string') return src;
  if (!existsSync(src)) throw new TrainingConfigError(`dataset file ${src} not found`);
  return parseJsonl(readFileSync(src, 'utf8'), expect);
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

/** Learning-rate multiplier at optimizer step `step` (1-based) of `total`. */
export function lrFactor(kind: 'linear' | 'cosine' | 'constant', step: number, total: number, warmup: number): number {
  if (warmup > 0 && step <= warmup) return step / warmup;
  if (kind === 'constant') return 1;
  const p = Math.min(1, (step - warmup) / Math.max(1, total - warmup));
  return kind === 'cosine' ? 0.5 * (1 + Math.cos(Math.PI * p)) : Math.max(0, 1 - p);
}

/** Checkpoint directories: rotation of checkpoint-<step>, best/ and final/ copies. */
export class CheckpointBook {
  readonly events: CheckpointEvent[] = [];
  private rotating: string[] = [];
  bestLoss: number | null = null;
  bestDir: string | null = null;
  constructor(
    readonly outputDir: string,
    private readonly limit: number,
    private readonly hooks: TrainHooks,
  ) {}

  /** Records a checkpoint written to output_dir/checkpoint-<step>; maintains best/ and final/. */
  add(e: Omit<CheckpointEvent, 'is_best' | 'dir' | 'id'>, dir: string): CheckpointEvent {
    const isBest = e.val_loss !== null && (this.bestLoss === null || e.val_loss < this.bestLoss);
    const id = dir.split('/').pop()!;
    if (isBest) {
      this.bestLoss = e.val_loss;
      const best = join(this.outputDir, 'best');
      rmSync(best, { recursive: true, force: true });
      cpSync(dir, best, { recursive: true });
      this.bestDir = best;
    }
    let outDir = dir;
    if (e.is_final) {
      const fin = join(this.outputDir, 'final');
      rmSync(fin, { recursive: true, force: true });
      cpSync(dir, fin, { recursive: true });
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
