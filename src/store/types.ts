// Records persisted in the store. Money is kept in integer micro-credits (1 credit = 1e6 µcr,
// 1 credit = 0.01 currency unit) so sums of concurrent debits are exact.

export interface UserRecord {
  id: string;
  email: string;
  /** scrypt$N$r$p$salt$hash (base64) */
  password_hash: string;
  team_id: string;
  created_at: string;
}

export interface TeamRecord {
  id: string;
  name: string;
  /** ISO 3166-1 alpha-2 code of the account's region, used for export-control checks (451) */
  region: string | null;
  /** blocked for billing or fraud review: every key of the team gets 401 */
  blocked: boolean;
  created_at: string;
}

export interface SessionRecord {
  /** sha256 of the cookie token (the token itself is never stored) */
  id: string;
  user_id: string;
  team_id: string;
  csrf_token: string;
  created_at: string;
  expires_at: string;
}

export interface ApiKeyRecord {
  id: string;
  name: string;
  /** sha256 hex of the full secret */
  hash: string;
  last_digits: string;
  team_id: string;
  user_id: string;
  created_at: string;
  expires_at: string | null;
  revoked_at: string | null;
  last_used_at: string | null;
  request_count: number;
  usage_tokens: number;
  usage_cost_micro: number;
}

export interface BillingAccount {
  team_id: string;
  plan: string;
  /** free plan: the one-time allowance left (never renews) */
  free_allowance_micro: number;
  /** paid plans: included credits left in the current billing month */
  included_micro: number;
  /** purchased / granted credits (a paid balance); may go below 0 by at most one call's cost */
  paid_balance_micro: number;
  /** overage drawn this billing month (paid plans) */
  overage_micro: number;
  overage_enabled: boolean;
  card_on_file: boolean;
  /** start of the current billing month (ISO) */
  period_start: string;
  billing_customer_id: string | null;
  total_spent_micro: number;
  updated_at: string;
}

export interface TokenUsage {
  prompt_tokens: number;
  cache_read_tokens: number;
  cache_write_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

export interface UsageRecord {
  id: string;
  team_id: string;
  key_id: string | null;
  user_id: string | null;
  model_id: string;
  endpoint: string;
  inference_id: string | null;
  usage: TokenUsage;
  cost_micro: number;
  /** how the cost was drawn */
  drawn: { free_micro: number; included_micro: number; paid_micro: number; overage_micro: number };
  created_at: string;
}

export type JudgeVerdict = 'pass' | 'fail' | 'uncertain';

export interface InferenceRecord {
  id: string;
  team_id: string;
  key_id: string | null;
  project_id: string | null;
  /** the id the caller asked for (base model id, training job id or `service/auto`) */
  model_id: string;
  /** the model that actually answered (router target, deployment's job) */
  routed_model: string;
  training_job_id: string | null;
  endpoint: string;
  type: 'encoder' | 'decoder';
  /** ner | classification | structure | relations | extraction | generate */
  task: string;
  /** false when the caller asked for `store: false`: content fields are not kept */
  stored_content: boolean;
  input: { text?: string | string[]; messages?: unknown[]; prompt?: string } | null;
  schema: unknown;
  params: Record<string, unknown>;
  output: unknown;
  usage: TokenUsage;
  cost: number;
  latency_ms: number;
  llmaj_score: number | null;
  /** LLM-as-judge (src/service/judge/): absent on records never judged */
  llmaj_verdict?: JudgeVerdict | null;
  llmaj_reasoning?: string | null;
  llmaj_judged_at?: string | null;
  /** the judge model and its own (billed) inference */
  llmaj_model?: string | null;
  llmaj_inference_id?: string | null;
  /** why the last judgement failed (timeout, invalid output after retries); the score is then left as it was */
  llmaj_error?: string | null;
  status: 'success' | 'error';
  error: string | null;
  created_at: string;
}

export interface FeedbackRecord {
  inference_id: string;
  team_id: string;
  human_verdict: 'correct' | 'incorrect';
  corrected_output: Record<string, unknown> | null;
  notes: string | null;
  human_feedback_at: string;
}

/** A corrected inference kept as a labeled example for retraining (adaptive inference). */
export interface LabeledExampleRecord {
  id: string;
  team_id: string;
  inference_id: string;
  model_id: string;
  project_id: string | null;
  task: string;
  input: InferenceRecord['input'];
  schema: unknown;
  output: Record<string, unknown>;
  created_at: string;
  /** the correction in the task's training format (src/service/adaptive/corrections.ts) */
  record?: Record<string, unknown>;
  /** set by the adaptive run that consumed it (one transaction with the run's creation) */
  run_id?: string | null;
  /** the retraining job that learned from it (or was evaluated on it: split `holdout`) */
  training_job_id?: string | null;
  split?: 'train' | 'holdout' | null;
}

/** A project's adaptive-inference policy (PATCH /projects/:id `adaptive`). */
export interface AdaptivePolicy {
  enabled: boolean;
  /** new corrections needed before retraining is triggered (policy and manual triggers) */
  min_new_corrections: number;
  /** null: trigger as soon as min_new_corrections is reached; else check every N minutes */
  schedule_minutes: number | null;
  /** a dataset of the team always part of the held-out evaluation (with held-out corrections) */
  eval_dataset: string | null;
  /** F1 the new model must gain over the deployed one to be promoted */
  min_gain: number;
  /** replayed records of the deployed model's training data, as a fraction of that data */
  replay_fraction: number;
  /** share of the new corrections held out for the evaluation */
  holdout_fraction: number;
  /** training overrides (else the deployed job's own settings) */
  nr_epochs: number | null;
  learning_rate: number | null;
}

export interface ProjectRecord {
  id: string;
  team_id: string;
  name: string;
  active_deployment_id: string | null;
  created_at: string;
  adaptive?: AdaptivePolicy | null;
  /** last scheduled policy check (schedule_minutes) */
  adaptive_checked_at?: string | null;
}

/** One retraining of a project (src/service/adaptive): corrections → job → evaluation → decision. */
export interface AdaptiveRunRecord {
  id: string;
  team_id: string;
  project_id: string;
  trigger: 'manual' | 'policy';
  /** preparing → training → evaluating → promoted | rejected | failed | cancelled */
  status: 'preparing' | 'training' | 'evaluating' | 'promoted' | 'rejected' | 'failed' | 'cancelled';
  /** the deployment (and its job) the retraining continues from */
  from_deployment_id: string;
  from_job_id: string;
  train_example_ids: string[];
  holdout_example_ids: string[];
  corrections_version: string | null;
  train_dataset: { name: string; version: string; size: number; replayed: number } | null;
  holdout_dataset: { name: string; version: string; size: number } | null;
  training_job_id: string | null;
  evaluation_ids: { candidate: string; deployed: string } | null;
  scores: { candidate: number; deployed: number; gain: number; metric: 'f1' } | null;
  decision: 'promote' | 'reject' | null;
  reason: string | null;
  deployment_id: string | null;
  error: string | null;
  created_at: string;
  updated_at: string;
}

export interface DeploymentRecord {
  deployment_id: string;
  project_id: string;
  team_id: string;
  training_job_id: string;
  /**
   * deploying | active | failed | inactive (replaced by a newer deployment) | rejected (an adaptive
   * retraining that did not beat the active model: never served)
   */
  status: 'deploying' | 'active' | 'failed' | 'inactive' | 'rejected';
  error: string | null;
  created_at: string;
  activated_at: string | null;
  replaced_at: string | null;
  /** an adaptive retraining's decision (src/service/adaptive) */
  adaptive?: {
    run_id: string; decision: 'promote' | 'reject'; candidate_f1: number; deployed_f1: number; gain: number;
    reason: string;
  } | null;
}

/**
 * Training job as the service core needs it (deploy, serve by id). The training engineer owns the
 * full record; extra members are stored as given.
 */
export interface TrainingJobRecord {
  id: string;
  team_id: string;
  status: 'requested' | 'running' | 'complete' | 'failed' | 'deployed' | 'cancelled';
  base_model: string;
  model_name: string;
  task_type: 'encoder' | 'decoder';
  /** directory holding the trained weights (full model) or adapter, once complete */
  output_dir: string | null;
  /** 'lora' | 'full' */
  training_type: string;
  project_id: string | null;
  created_at: string;
  updated_at: string;
  [extra: string]: unknown;
}
