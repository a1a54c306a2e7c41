// A training job as the store keeps it (the record plus what the service adds: its base, datasets, progress, metrics)
// and as the API shows it (jobView).
import type { TrainingJobRecord } from '../../store/index.ts';
import type { ModelRef } from '../runtime.ts';

/** The base a job trains from. */
export interface BaseSpec {
  task_type: 'encoder' | 'decoder';
  /** what the caller named (catalog id, checkpoint id or job id) */
  requested: string;
  source: 'catalog' | 'fresh' | 'checkpoint' | 'training_job';
  /** the catalog model underneath (base of a checkpoint chain) */
  catalog_id: string;
  /** full-weights directory to start from (null: resolved at start, e.g. pulled) */
  dir: string | null;
  /** decoder LoRA chains: adapter to continue from */
  init_adapter: string | null;
}

export type Job = TrainingJobRecord & {
  training_algorithm: string;
  datasets: Array<{ name: string; version_number: string; version_id: string; dataset_type: string; size: number }>;
  configuration: Record<string, unknown>;
  base: BaseSpec;
  progress_percent: number;
  current_epoch: number;
  current_step: number;
  total_steps: number | null;
  train_loss: number | null;
  val_loss: number | null;
  tokens_per_s: number | null;
  metrics: { f1: number; precision: number; recall: number; [k: string]: number } | null;
  error: string | null;
  started_at: string | null;
  completed_at: string | null;
  restarts: number;
  model_ref?: ModelRef;
  weights_dir?: string | null;
  weights_format?: 'peft_lora' | 'safetensors' | null;
  adaptive?: Record<string, unknown>;
};

/** x to d decimals; null for a missing or non-finite value (the API's figures). */
export const round = (x: number | null | undefined, d = 6) => (x === null || x === undefined || !Number.isFinite(x) ? null : Math.round(x * 10 ** d) / 10 ** d);

export function jobView(j: Job) {
  const done = j.status === 'complete'; // spec §2: metrics are present only when status is complete
  return {
    id: j.id, status: j.status, model_name: j.model_name, base_model: j.base_model, task_type: j.task_type, training_type: j.training_type,
    training_algorithm: j.training_algorithm, datasets: j.datasets.map((d) => ({ name: d.name, version: d.version_number, size: d.size })),
    project_id: j.project_id, configuration: j.configuration,
    progress_percent: round(j.progress_percent, 2) ?? 0, current_epoch: j.current_epoch, current_step: j.current_step, total_steps: j.total_steps,
    train_loss: round(j.train_loss), val_loss: round(j.val_loss), tokens_per_s: round(j.tokens_per_s, 1),
    ...(done && j.metrics ? { metrics: j.metrics } : {}),
    error: j.error, created_at: j.created_at, updated_at: j.updated_at, started_at: j.started_at, completed_at: j.completed_at,
    // an adaptive retraining (src/service/adaptive): its run, trigger, scores and decision
    ...(j.adaptive ? { adaptive: j.adaptive } : {}),
  };
}
