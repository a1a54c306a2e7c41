// The body of POST /felix/training-jobs (spec section 2): its type and its ajv schema, the one home of both
// (server/routes/training-jobs.ts validates with the schema; the service takes the type).
import type { EncoderTrainConfig } from '../../training/encoder-trainer.ts';
import { NEGATIVE_SPAN_HARD } from '../../training/encoder/recipe.ts';
import { PRECISION_OPTIONS, type PrecisionOption } from '../../training/precision.ts';

/** The encoder options a job hands to the trainer as they are (each documented there). */
export type EncoderRecipeOptions = Pick<EncoderTrainConfig,
  | 'hidden_dropout' | 'attention_dropout' | 'word_dropout' | 'rare_word_dropout' | 'piece_dropout' | 'mention_replacement'
  | 'mention_dropout' | 'hard_negatives' | 'negative_span_keep' | 'negative_span_hard' | 'negative_labels'
  | 'full_label_ratio' | 'classifier_prior_init' | 'classification_loss' | 'ema_decay' | 'selection_metric' | 'max_minutes'>;

export interface TrainingJobRequest extends EncoderRecipeOptions {
  base_model: string;
  datasets: Array<{ name: string; version?: string }>;
  model_name?: string;
  training_type?: 'lora' | 'full';
  training_algorithm?: 'sft' | 'grpo' | 'dpo';
  rl_config?: Record<string, unknown>;
  nr_epochs?: number;
  learning_rate?: number;
  encoder_learning_rate?: number;
  eval_steps?: number;
  batch_size?: number;
  seed?: number;
  validation_data_percentage?: number;
  early_stopping?: boolean;
  early_stopping_patience?: number;
  lora_r?: number;
  lora_alpha?: number;
  lora_dropout?: number;
  target_modules?: string[];
  max_steps?: number;
  warmup_ratio?: number;
  lr_scheduler?: 'cosine' | 'linear' | 'constant';
  gradient_accumulation_steps?: number;
  project_id?: string;
  precision?: PrecisionOption;
}

/** ajv schema of POST /felix/training-jobs */
export const trainingJobRequestSchema = {
  type: 'object', required: ['base_model', 'datasets'],
  properties: {
    base_model: { type: 'string', minLength: 1 },
    datasets: { type: 'array', minItems: 1, maxItems: 16, items: { type: 'object', required: ['name'], properties: { name: { type: 'string', minLength: 1 }, version: { type: 'string', minLength: 1 } } } },
    model_name: { type: 'string', minLength: 1, maxLength: 200 },
    training_type: { enum: ['lora', 'full'] },
    training_algorithm: { enum: ['sft', 'grpo', 'dpo'] },
    rl_config: { type: 'object' },
    nr_epochs: { type: 'integer', minimum: 1, maximum: 1000 },
    learning_rate: { type: 'number', exclusiveMinimum: 0, maximum: 1 },
    encoder_learning_rate: { type: 'number', exclusiveMinimum: 0, maximum: 1 },
    eval_steps: { type: 'integer', minimum: 1 },
    batch_size: { type: 'integer', minimum: 1, maximum: 4096 },
    seed: { type: 'integer', minimum: 0, maximum: 2 ** 31 - 1 },
    validation_data_percentage: { type: 'number', minimum: 0, maximum: 50 },
    early_stopping: { type: 'boolean' },
    early_stopping_patience: { type: 'integer', minimum: 1, maximum: 1000 },
    lora_r: { type: 'integer', minimum: 1, maximum: 1024 },
    lora_alpha: { type: 'number', exclusiveMinimum: 0, maximum: 4096 },
    lora_dropout: { type: 'number', minimum: 0, maximum: 0.9 },
    target_modules: { type: 'array', minItems: 1, items: { type: 'string', minLength: 1 } },
    max_steps: { type: 'integer', minimum: 1 },
    warmup_ratio: { type: 'number', minimum: 0, maximum: 0.5 },
    lr_scheduler: { enum: ['cosine', 'linear', 'constant'] },
    gradient_accumulation_steps: { type: 'integer', minimum: 1, maximum: 1024 },
    project_id: { type: 'string', minLength: 1 },
    // encoder training (service extension): dropout, negative labels, checkpoint selection, time budget
    hidden_dropout: { type: 'number', minimum: 0, maximum: 0.9 },
    attention_dropout: { type: 'number', minimum: 0, maximum: 0.9 },
    word_dropout: { type: 'number', minimum: 0, maximum: 0.9 },
    rare_word_dropout: { type: 'number', minimum: 0, maximum: 0.9 },
    piece_dropout: { type: 'number', minimum: 0, maximum: 0.9 },
    mention_replacement: { type: 'number', minimum: 0, maximum: 1 },
    mention_dropout: { type: 'number', minimum: 0, maximum: 0.9 },
    hard_negatives: { type: 'number', minimum: 0, maximum: 1 },
    negative_span_keep: { anyOf: [{ type: 'number', exclusiveMinimum: 0, maximum: 1 }, { const: 'balanced' }] },
    negative_span_hard: { enum: [...NEGATIVE_SPAN_HARD] },
    negative_labels: { type: 'integer', minimum: 0, maximum: 10000 },
    full_label_ratio: { type: 'number', minimum: 0, maximum: 1 },
    classifier_prior_init: { type: 'boolean' },
    classification_loss: { enum: ['bce', 'softmax'] },
    ema_decay: { type: 'number', minimum: 0, exclusiveMaximum: 1 },
    selection_metric: { enum: ['task', 'loss'] },
    max_minutes: { type: 'number', exclusiveMinimum: 0, maximum: 10080 },
    // compute precision of the matrix products, encoders and decoders (service extension; docs/training.md)
    precision: { enum: PRECISION_OPTIONS },
  },
};
