// Records of the customization half of Loom: datasets and their versions, presigned uploads,
// training logs and checkpoints, evaluations and generation jobs. (Training jobs themselves are
// TrainingJobRecord in types.ts, shared with the service core, which deploys and serves them.)

export type DatasetType = 'ner' | 'classification' | 'decoder' | 'custom';
export type DatasetStatus = 'initialized' | 'uploading' | 'converting' | 'validating' | 'ready' | 'failed';

/** One dataset name of a team; its versions are DatasetVersionRecords. */
export interface DatasetRecord {
  id: string;
  team_id: string;
  dataset_name: string;
  dataset_type: DatasetType;
  /** the counter of the next version (versions are numbered "1", "2", ...) */
  next_version: number;
  latest_version_id: string | null;
  created_at: string;
  updated_at: string;
}

export interface DatasetVersionRecord {
  id: string;
  team_id: string;
  dataset_id: string;
  dataset_name: string;
  dataset_type: DatasetType;
  /** "1", "2", ... (a counter per dataset name) */
  version_number: string;
  /** number of examples (0 until processed) */
  size: number;
  status: DatasetStatus;
  /** when failed: names the line and the problem ("line 3: entities[0] span ...") */
  processing_error: string | null;
  source: 'upload' | 'generate';
  /** uploaded file name (upload) */
  filename: string | null;
  /** detected input format */
  format: 'jsonl' | 'csv' | null;
  /** bytes of the uploaded file */
  bytes: number;
  /** record kinds found (ner, classification, chat, ...) → count */
  kinds: Record<string, number>;
  /** label → count (entity labels or classes) */
  labels: Record<string, number>;
  created_at: string;
  updated_at: string;
  ready_at: string | null;
}

/** A presigned upload URL: HMAC-signed, expiring, single-use, size-limited. */
export interface UploadRecord {
  id: string;
  team_id: string;
  version_id: string;
  dataset_name: string;
  filename: string;
  max_bytes: number;
  expires_at: string;
  used_at: string | null;
  created_at: string;
}

export interface TrainingLogRecord {
  job_id: string;
  seq: number;
  timestamp: string;
  level: 'debug' | 'info' | 'warn' | 'error';
  message: string;
}

export interface CheckpointRecord {
  id: string;
  job_id: string;
  team_id: string;
  epoch: number;
  step: number;
  train_loss: number | null;
  val_loss: number | null;
  is_best: boolean;
  is_final: boolean;
  /** directory with the weights (full model or PEFT adapter) */
  dir: string;
  created_at: string;
}

/** strict-match scores of one label (or all, micro-averaged) */
export interface LabelScores {
  precision: number; recall: number; f1: number; support: number; tp: number; fp: number; fn: number;
}

export interface EvaluationRecord {
  id: string;
  team_id: string;
  project_id: string | null;
  base_model: string;
  /** 'training_job' | 'base_model' | 'baseline' */
  model_source: string;
  dataset_name: string;
  dataset_version: string;
  dataset_version_id: string;
  task: 'ner' | 'classification' | 'decoder';
  status: 'queued' | 'running' | 'complete' | 'failed';
  threshold: number;
  f1_score?: number;
  precision_score?: number;
  recall_score?: number;
  accuracy?: number;
  macro_f1?: number;
  sample_count: number;
  per_label?: Record<string, LabelScores>;
  /** relation datasets: strict (head span, tail span, label) triples, micro-averaged and per relation label */
  relations?: LabelScores & { per_label: Record<string, LabelScores> };
  error: string | null;
  created_at: string;
  started_at: string | null;
  completed_at: string | null;
}

export interface GenerationJobRecord {
  job_id: string;
  team_id: string;
  status: 'queued' | 'generating' | 'ready' | 'failed';
  dataset_name: string;
  task_type: string;
  count: number;
  num_examples: number;
  error: string | null;
  version_id: string | null;
  request: Record<string, unknown>;
  created_at: string;
  updated_at: string;
}
