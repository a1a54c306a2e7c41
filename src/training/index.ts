// Loom training library: the one API the CLI (`loom train`, `loom init-encoder`) and the service's
// training jobs (Piscina workers) call. Everything heavy runs in the native graphs (native/train)
// through async N-API calls on the addon's thread pool, so these functions work inside worker threads.
//
//   trainEncoder(config: EncoderTrainConfig, hooks?: TrainHooks): Promise<TrainResult>
//     GLiNER2 span models (count_lstm), training_type 'full' | 'lora'. Data: NER / relations /
//     classification / GLiNER2-format records (src/training/data/formats.ts) or a JSONL path.
//   trainDecoder(config: DecoderTrainConfig, hooks?: TrainHooks): Promise<TrainResult>
//     Llama-family LoRA SFT on chat records ({messages}); 'full' is rejected (TrainingConfigError).
//   initEncoder(dir, EncoderInitConfig | ENCODER_PRESETS[name], texts, {seed}) → a fresh model in the real layout
//   evaluateNer(modelDir, records, {labels?, threshold?}) → strict span P/R/F1 (+ per label)
//
// Config (both; snake_case as in the service API):
//   base_model (dir), output_dir, train_data (records | JSONL path), validation_data?,
//   training_type, nr_epochs (enc 10 / dec 3), learning_rate (enc: heads/task lr 5e-4; dec 2e-4),
//   batch_size (8 / 4), gradient_accumulation_steps (1), seed (42; same seed + data ⇒ identical weights),
//   validation_data_percentage (10), early_stopping_patience (0 = off; counted in evaluations),
//   scheduler 'linear' | 'cosine' | 'constant' (enc linear, dec cosine), warmup_ratio (0.1 / 0.03) | warmup_steps,
//   weight_decay (0.01 / 0), max_grad_norm (1), lora_r (16), lora_alpha (32), lora_dropout (0),
//   lora_target_modules (enc: ['encoder','span_rep','classifier','count_embed','count_pred'], spec §5.6;
//   dec: ['q_proj','k_proj','v_proj','o_proj']), max_steps (0), eval_steps (default: once per epoch),
//   save_total_limit (3), threads (native pool size for the process).
//   Encoder only: encoder_learning_rate (1e-5 for pretrained encoders; ~1e-3 for fresh ones),
//   max_words (256), entity_labels, negative_dropping (true), hidden_dropout / attention_dropout / word_dropout (0),
//   negative_labels (16; 0 = every label), full_label_ratio (1: the share of steps that carry every label, shuffled),
//   selection_metric ('task' | 'loss'; 'task'), metric_samples (500),
//   max_minutes (0; the LR schedule's length and a stop). Decoder only: max_seq_len (1024), base_dtype.
// Hooks: onProgress({epoch, step, totalSteps, progress_percent, loss, tokens_per_s}) after every optimizer
//   step; onLog({level, message}); onCheckpoint({id, epoch, step, train_loss, val_loss, is_best, is_final, dir});
//   signal: AbortSignal — stops after the current step and saves the current weights as final/.
// Result: {output_dir, best_checkpoint, final_checkpoint, checkpoints, steps, epochs_completed, train_loss,
//   val_loss, best_val_loss, best_val_metric, stopped: 'completed'|'early_stopping'|'max_steps'|'time_limit'|'aborted',
//   tokens_per_s, duration_s}.
// Output layout (spec §5.7): output_dir/training_config.json, checkpoint-<step>/ (rotated), best/ (highest
//   validation task metric when scored, else lowest val loss), final/.
//   Encoder checkpoint = full model (config.json, encoder_config/config.json,
//   model.safetensors, tokenizer files; LoRA: merged weights + lora_config.json + adapter_config.json +
//   adapter_model.safetensors) → loadEncoder(dir). Decoder checkpoint = PEFT adapter (adapter_config.json +
//   adapter_model.safetensors) → AdapterRegistry.load(name, dir).
// Bad configuration throws TrainingConfigError (message suitable for a 422).
export { trainEncoder, resolveEncoderLoraTargets, type EncoderTrainConfig } from './encoder-trainer.ts';
export { trainDecoder, chatToSequence, packSequences, savePeftAdapter, type DecoderTrainConfig } from './decoder-trainer.ts';
export { initEncoder, ENCODER_PRESETS, type EncoderInitConfig } from './encoder/init.ts';
export { evaluateNer, evaluateClassification, validationMetric } from './evaluate.ts';
export { TrainingConfigError, type TrainHooks, type TrainResult, type ProgressEvent, type LogEvent, type CheckpointEvent, type CommonTrainConfig } from './common.ts';
export { EncoderTrainGraph, DecoderTrainGraph } from './native.ts';
