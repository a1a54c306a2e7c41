// GLiNER2 span-model training (spec ../shared/specs/gliner2.md §5): full fine-tuning or LoRA on the
// native graph, separate encoder / head learning rates, validation split, early stopping, best
// checkpoint, checkpoints in the real layout (§5.7) that loadEncoder() loads.
import { copyFileSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { SafetensorsCheckpoint, toFloat32, writeSafetensors, type TensorToWrite } from '../formats/safetensors.ts';
import { parseDebertaConfig } from '../models/encoder/deberta.ts';
import { featureCols, featureRows, parseWordFeatures, type WordFeatures } from '../models/encoder/word-features.ts';
import { parseLabelPrompt, type LabelPrompt } from '../models/encoder/label-isolation.ts';
import { EncoderTokenizer } from '../models/encoder/tokenizer.ts';
import type { DataRecord } from './data/formats.ts';
import {
  classLabels, collate, dropWords, entityLabels, featurize, rareWordDropout, recordsToExamples, sampleNegativeLabels,
  shuffleLabels,
  type EncoderExample, type Featurized, type Uniform,
} from './encoder/examples.ts';
import { dropMentions, mentionPool, replaceMentions } from './encoder/augment.ts';
import {
  balancedNegativeKeep, GLINER_NEGATIVE_KEEP, positiveSpanShare, resolveSpanHard,
} from './encoder/negative-spans.ts';
import { LabelConfusion } from './encoder/hard-negatives.ts';
import { pieceDropout } from './encoder/piece-dropout.ts';
import { InitRng } from './encoder/init.ts';
import {
  CLASSIFICATION_TASK, DEFAULT_NEGATIVE_LABELS, fullLabelRatio, NEGATIVE_SPAN_HARD, type ClassificationLoss,
  type NegativeSpanHard,
} from './encoder/recipe.ts';
import { validationMetric } from './evaluate.ts';
import { EncoderTrainGraph, type ParamInfo } from './native.ts';
import { resolvePrecision, type Precision } from './precision.ts';
import { setThreads } from '../native/cpu.ts';
import {
  CheckpointBook, runTrainingLoop, loadRecords, log, positiveInt, positiveNum, splitValidation, trainPrecision,
  TrainingConfigError,
  type CommonTrainConfig, type TrainHooks, type TrainResult,
} from './common.ts';

export interface EncoderTrainConfig extends CommonTrainConfig {
  /** learning rate of encoder.* parameters in full fine-tuning (spec default 1e-5; a freshly initialized encoder needs ~1e-4) */
  encoder_learning_rate?: number;
  /** words kept per text (longer texts are truncated); default 256 */
  max_words?: number;
  /** entity label set (default: every label in the training data) */
  entity_labels?: string[];
  /** drop each negative span with probability 0.5 during training (spec §5.4); default true */
  negative_dropping?: boolean;
  /** with negative_dropping: the probability that a negative span enters the span loss; default 0.5 (GLiNER's).
   *  'balanced': fewer where the data's mentions are rarer (src/training/encoder/negative-spans.ts) */
  negative_span_keep?: number | 'balanced';
  /** with negative_dropping: negatives never dropped. 'label': a span that is a mention under another label of its
   *  text; 'boundary': also any span that starts or ends where a mention does; 'auto': 'label' where the keep is
   *  GLiNER's 0.5, else none (src/training/encoder/negative-spans.ts resolveSpanHard); default 'none' */
  negative_span_hard?: NegativeSpanHard;
  /** DeBERTa hidden dropout inside the encoder during training (embeddings, attention and FFN outputs); default 0 */
  hidden_dropout?: number;
  /** dropout of the attention probabilities during training; default 0 */
  attention_dropout?: number;
  /** probability that a text word's pieces are replaced by [UNK] during training; default 0 */
  word_dropout?: number;
  /** the same for the words seen once in the training texts (singletons), if higher than word_dropout; default 0 */
  rare_word_dropout?: number;
  /** subword regularization: a candidate piece is passed over with this probability when a text word is segmented
   * again at each step (piece-dropout.ts); 0 keeps the tokenizer's pieces */
  piece_dropout?: number;
  /** NER: the probability that an entity mention of a training text is swapped, at each step, for another mention of
   *  its label from the training data (src/training/encoder/augment.ts); default 0 */
  mention_replacement?: number;
  /** NER: the probability that an entity mention's words are replaced by [UNK] at a step (their word features kept);
   *  default 0 */
  mention_dropout?: number;
  /** classification: the share of a single-label example's sampled negatives drawn by the labels it is confused with
   *  (the running logit margins of the training steps, src/training/encoder/hard-negatives.ts); default 0 */
  hard_negatives?: number;
  /** classification: negative labels sampled per example and step (all true labels + k); 0 = every label.
   *  Default 16 (DEFAULT_NEGATIVE_LABELS). Served models are asked with the full label set. */
  negative_labels?: number;
  /** classification: the fraction of steps whose examples carry every label (in a fresh random order each time) instead
   *  of true + negative_labels sampled ones; default 1. A model trained on short sampled prompts ranks labels only in
   *  prompts that short, and one trained on every label in a fixed order learns the labels' places, not their
   *  meaning (docs/training.md). */
  full_label_ratio?: number;
  /** pick the best checkpoint and stop early on the validation task metric ('task': span F1 / accuracy) or
   *  the validation loss ('loss'); default 'task' */
  selection_metric?: 'task' | 'loss';
  /** validation records scored for the task metric at each evaluation (the first n of the split); default 500 */
  metric_samples?: number;
  /** wall-clock budget in minutes: the LR schedule's length (warm-up + decay over it) and a stop; 0 = none */
  max_minutes?: number;
  /** classification: before the first step, shift the classifier's output bias so that its mean logit is the label
   *  prior (the share of positive labels in the training prompts); default false (freshRecipe: true) */
  classifier_prior_init?: boolean;
  /** single-label classification tasks: a BCE per label ('bce', GLiNER2's; default) or softmax cross-entropy over the
   *  prompt's labels ('softmax'; freshRecipe), which the served single-label softmax reads. Multi-label: always BCE */
  classification_loss?: ClassificationLoss;
  /** Polyak averaging: evaluate, select and save an exponential moving average of the weights with this decay (the
   *  first steps average over fewer: min(decay, (1 + step) / (10 + step))); 0 = the trained weights (default) */
  ema_decay?: number;
}


/** A training example; classification examples with more labels than the sample are featurized per step (`f` null). */
interface TrainItem {
  ex: EncoderExample;
  f: Featurized | null;
}

const LINEAR_GROUPS = ['span_rep', 'classifier', 'count_embed', 'count_pred'];

/** Resolves LoRA target names (spec §5.6) to full Linear module names of the checkpoint. */
export function resolveEncoderLoraTargets(params: { name: string; shape: number[] }[], targets: string[]): string[] {
  const linears = params
    .filter((p) => p.shape.length === 2 && p.name.endsWith('.weight') && !/embeddings|pos_embedding/.test(p.name))
    .map((p) => p.name.slice(0, -'.weight'.length));
  const out = new Set<string>();
  for (const t of targets) {
    const [group, kind] = t.split('.', 2);
    let hit = 0;
    for (const m of linears) {
      const last = m.split('.').filter((x) => !/^\d+$/.test(x)).pop() ?? '';
      if (group === 'encoder' && m.startsWith('encoder.')) {
        const ok = kind ? last.includes(kind) : ['query', 'key', 'value', 'dense'].some((k) => last.includes(k));
        if (ok) (out.add(m), hit++);
      } else if (LINEAR_GROUPS.includes(group) && m.startsWith(group + '.') && !kind) {
        out.add(m);
        hit++;
      } else if (m === t) {
        out.add(m);
        hit++;
      }
    }
    if (!hit) throw new TrainingConfigError(`lora_target_modules: "${t}" matches no Linear layer`);
  }
  return [...out].sort();
}

interface Loaded {
  graph: EncoderTrainGraph;
  tok: EncoderTokenizer;
  maxWidth: number;
  params: ParamInfo[];
  shapes: Map<string, number[]>;
  lora: { r: number; alpha: number; dropout: number; targets: string[] } | null;
  /** word features of a fresh encoder (config.json word_features), null otherwise */
  wordFeatures: WordFeatures | null;
  /** a fresh encoder's classification labels: isolated (config.json label_isolation), each one bagged [L] token
   * (label_bag) */
  labels: LabelPrompt;
}

async function loadBase(cfg: EncoderTrainConfig, seed: number, precision: Precision): Promise<Loaded> {
  const dir = cfg.base_model;
  for (const f of ['config.json', 'encoder_config/config.json', 'tokenizer.json'])
    if (!existsSync(join(dir, f))) throw new TrainingConfigError(`base_model ${dir}: missing ${f} (a GLiNER2 checkpoint directory is expected; see \`loom init-encoder\`)`);
  const g2 = JSON.parse(readFileSync(join(dir, 'config.json'), 'utf8'));
  const encRaw = JSON.parse(readFileSync(join(dir, 'encoder_config', 'config.json'), 'utf8'));
  const enc = parseDebertaConfig(encRaw, `${dir}/encoder_config/config.json`);
  const maxWidth = Number(g2.span_head?.max_width ?? g2.max_width ?? 8);
  // token_pooling as the library reads it: anything but mean / max pools the first piece
  const pooling = g2.token_pooling === 'mean' || g2.token_pooling === 'max' ? g2.token_pooling : 'first';
  let wordFeatures: WordFeatures | null;
  let labels: LabelPrompt;
  try {
    wordFeatures = parseWordFeatures(g2.word_features, `base_model ${dir}/config.json`);
    labels = parseLabelPrompt(g2, `base_model ${dir}/config.json`);
  } catch (e) {
    throw new TrainingConfigError((e as Error).message);
  }
  const ckpt = SafetensorsCheckpoint.open(dir);
  const names = ckpt.names();
  const counting = names.some((n) => n.startsWith('count_embed.projector.')) ? 'count_lstm'
    : names.some((n) => n.startsWith('count_embed.transformer.')) ? 'count_lstm_v2' : null;
  if (!counting)
    throw new TrainingConfigError(
      `base_model ${dir}: only count_lstm and count_lstm_v2 GLiNER2 checkpoints can be trained ` +
        '(count_lstm_moe training is not implemented)',
    );
  const tensors: Record<string, Float32Array> = {};
  const shapes = new Map<string, number[]>();
  for (const n of names) {
    const t = ckpt.get(n);
    tensors[n] = toFloat32(t);
    shapes.set(n, t.shape);
  }
  const relLn = String(encRaw.norm_rel_ebd ?? 'none').includes('layer_norm');
  const S2 = 2 * (enc.positionBuckets > 0 ? enc.positionBuckets : enc.maxRelativePositions < 1 ? enc.maxPositionEmbeddings : enc.maxRelativePositions);
  const rel = shapes.get('encoder.encoder.rel_embeddings.weight');
  if (!rel || rel[0] !== S2) throw new TrainingConfigError(`base_model ${dir}: rel_embeddings must have ${S2} rows`);
  let lora: Loaded['lora'] = null;
  if ((cfg.training_type ?? 'full') === 'lora') {
    const targets = resolveEncoderLoraTargets([...shapes].map(([name, shape]) => ({ name, shape })), cfg.lora_target_modules ?? ['encoder', 'span_rep', 'classifier', 'count_embed', 'count_pred']);
    lora = { r: positiveInt(cfg.lora_r, 'lora_r', 16), alpha: positiveNum(cfg.lora_alpha, 'lora_alpha', 32), dropout: positiveNum(cfg.lora_dropout, 'lora_dropout', 0, true), targets };
    if (lora.dropout >= 1) throw new TrainingConfigError('lora_dropout must be < 1');
  }
  const heads = {
    counting, pooling,
    countHidden: shapes.get('count_embed.transformer.in_projector.weight')?.[0],
    countFF: shapes.get('count_embed.transformer.transformer.layers.0.linear1.weight')?.[0],
  } as const;
  const wf = wordFeatures ? { rows: featureRows(wordFeatures), cols: featureCols(wordFeatures) } : undefined;
  const ft = shapes.get('encoder.embeddings.word_feature_embeddings.weight');
  if (wordFeatures && (!ft || ft[0] !== featureRows(wordFeatures) || ft[1] !== enc.hiddenSize))
    throw new TrainingConfigError(
      `base_model ${dir}: config.json word_features needs encoder.embeddings.word_feature_embeddings.weight of shape ` +
        `[${featureRows(wordFeatures)}, ${enc.hiddenSize}]`,
    );
  if (!wordFeatures) delete tensors['encoder.embeddings.word_feature_embeddings.weight'];
  const graph = EncoderTrainGraph.create(enc, maxWidth, relLn, tensors, lora ? { ...lora, seed } : null, heads, wf, precision);
  const tok = new EncoderTokenizer(join(dir, 'tokenizer.json'));
  return { graph, tok, maxWidth, params: graph.params(), shapes, lora, wordFeatures, labels };
}

/** Writes the current weights as a checkpoint in the real layout (+ the PEFT adapter for LoRA). */
function saveCheckpoint(base: string, dir: string, L: Loaded): void {
  mkdirSync(join(dir, 'encoder_config'), { recursive: true });
  copyFileSync(join(base, 'config.json'), join(dir, 'config.json'));
  copyFileSync(join(base, 'encoder_config', 'config.json'), join(dir, 'encoder_config', 'config.json'));
  for (const f of ['tokenizer.json', 'tokenizer_config.json', 'special_tokens_map.json', 'added_tokens.json', 'spm.model'])
    if (existsSync(join(base, f))) copyFileSync(join(base, f), join(dir, f));
  const out: Record<string, TensorToWrite> = {};
  const baseParams = L.params.filter((p) => !p.name.startsWith('base_model.model.'));
  const w = new Map<string, Float32Array>();
  for (const p of baseParams) w.set(p.name, L.graph.get(p.name));
  if (L.lora) {
    // merged full save: W += (α/r)·B·A
    const s = L.lora.alpha / L.lora.r;
    const adapter: Record<string, TensorToWrite> = {};
    for (const m of L.lora.targets) {
      const A = L.graph.get(`base_model.model.${m}.lora_A.weight`);
      const B = L.graph.get(`base_model.model.${m}.lora_B.weight`);
      const W = w.get(m + '.weight')!;
      const [N, K] = L.shapes.get(m + '.weight')!;
      const r = L.lora.r;
      for (let i = 0; i < N; i++)
        for (let q = 0; q < r; q++) {
          const b = B[i * r + q] * s;
          if (b === 0) continue;
          for (let k = 0; k < K; k++) W[i * K + k] += b * A[q * K + k];
        }
      adapter[`base_model.model.${m}.lora_A.weight`] = { dtype: 'F32', shape: [r, K], data: A };
      adapter[`base_model.model.${m}.lora_B.weight`] = { dtype: 'F32', shape: [N, r], data: B };
    }
    writeSafetensors(join(dir, 'adapter_model.safetensors'), adapter, { format: 'pt' });
    writeFileSync(join(dir, 'adapter_config.json'), JSON.stringify({
      peft_type: 'LORA', r: L.lora.r, lora_alpha: L.lora.alpha, lora_dropout: L.lora.dropout, target_modules: L.lora.targets,
      bias: 'none', use_dora: false, use_rslora: false, base_model_name_or_path: base, task_type: null, inference_mode: true,
    }, null, 2));
    writeFileSync(join(dir, 'lora_config.json'), JSON.stringify({ use_lora: true, lora_r: L.lora.r, lora_alpha: L.lora.alpha, lora_dropout: L.lora.dropout, lora_target_modules: L.lora.targets, merged: true }, null, 2));
  }
  for (const [n, v] of w) out[n] = { dtype: 'F32', shape: L.shapes.get(n)!, data: v };
  writeSafetensors(join(dir, 'model.safetensors'), out, { format: 'pt' });
}

/** Trains a GLiNER2 span model. See src/training/index.ts for the API. */
export async function trainEncoder(config: EncoderTrainConfig, hooks: TrainHooks = {}): Promise<TrainResult> {
  const t0 = Date.now();
  const seed = positiveInt(config.seed, 'seed', 42, 0);
  const epochs = positiveInt(config.nr_epochs, 'nr_epochs', 10);
  const bs = positiveInt(config.batch_size, 'batch_size', 8);
  const accum = positiveInt(config.gradient_accumulation_steps, 'gradient_accumulation_steps', 1);
  const taskLr = positiveNum(config.learning_rate, 'learning_rate', 5e-4);
  const encLr = positiveNum(config.encoder_learning_rate, 'encoder_learning_rate', 1e-5);
  const wd = positiveNum(config.weight_decay, 'weight_decay', 0.01, true);
  const maxNorm = positiveNum(config.max_grad_norm, 'max_grad_norm', 1.0, true);
  const patience = positiveInt(config.early_stopping_patience, 'early_stopping_patience', 0, 0);
  const valPct = positiveNum(config.validation_data_percentage, 'validation_data_percentage', 10, true);
  if (valPct >= 100) throw new TrainingConfigError('validation_data_percentage must be below 100');
  const maxSteps = positiveInt(config.max_steps, 'max_steps', 0, 0);
  const sched = config.scheduler ?? 'linear';
  if (!['linear', 'cosine', 'constant'].includes(sched)) throw new TrainingConfigError('scheduler must be linear, cosine or constant');
  const type = config.training_type ?? 'full';
  if (type !== 'full' && type !== 'lora') throw new TrainingConfigError('training_type must be lora or full');
  if (!config.output_dir) throw new TrainingConfigError('output_dir is required');
  if (config.threads !== undefined) setThreads(positiveInt(config.threads, 'threads', 1));
  const { precision, reason: precisionWhy } = await resolvePrecision(trainPrecision(config.precision));

  const all = loadRecords(config.train_data, ['ner', 'relations', 'classification', 'gliner2']);
  let trainRecs: DataRecord[];
  let valRecs: DataRecord[];
  if (config.validation_data) {
    trainRecs = all;
    valRecs = loadRecords(config.validation_data, ['ner', 'relations', 'classification', 'gliner2']);
  } else ({ train: trainRecs, val: valRecs } = splitValidation(all, valPct, seed));
  if (!trainRecs.length) throw new TrainingConfigError('the training data is empty');
  const labels = config.entity_labels ?? entityLabels(all);
  const classes = classLabels(all);
  const L = await loadBase(config, seed, precision);
  log(hooks, 'info', precisionWhy);
  log(hooks, 'info', `loaded ${config.base_model}: ${L.params.length} tensors, ${L.params.filter((p) => p.trainable).reduce((a, p) => a + p.shape.reduce((x, y) => x * y, 1), 0)} trainable parameters (${type})`);
  const maxWords = positiveInt(config.max_words, 'max_words', 256);
  const negK = positiveInt(config.negative_labels, 'negative_labels', DEFAULT_NEGATIVE_LABELS, 0);
  const sampled = (ex: EncoderExample) => negK > 0 && ex !== sampleNegativeLabels(ex, negK, FIRST_DRAW);
  const fullRatio = positiveNum(config.full_label_ratio, 'full_label_ratio', fullLabelRatio(L.labels.isolation), true);
  if (fullRatio > 1) throw new TrainingConfigError('full_label_ratio must be between 0 and 1');
  // a number now, or 'balanced': resolved from the training examples below
  const balanced = config.negative_span_keep === 'balanced';
  const givenKeep = balanced ? null
    : positiveNum(config.negative_span_keep, 'negative_span_keep', GLINER_NEGATIVE_KEEP);
  if (givenKeep !== null && givenKeep > 1) {
    throw new TrainingConfigError('negative_span_keep must be in (0, 1] or \'balanced\'');
  }
  const spanHard = config.negative_span_hard ?? 'none';
  if (!NEGATIVE_SPAN_HARD.includes(spanHard)) {
    throw new TrainingConfigError(`negative_span_hard must be one of ${NEGATIVE_SPAN_HARD.join(', ')}`);
  }
  const hardRatio = positiveNum(config.hard_negatives, 'hard_negatives', 0, true);
  if (hardRatio > 1) throw new TrainingConfigError('hard_negatives must be between 0 and 1');
  const hard = hardRatio > 0 && negK > 0 ? { confusion: new LabelConfusion(classes), ratio: hardRatio } : undefined;
  const clsLoss = config.classification_loss ?? 'bce';
  if (clsLoss !== 'bce' && clsLoss !== 'softmax') {
    throw new TrainingConfigError('classification_loss must be bce or softmax');
  }
  const dropP = dropoutRate(config.piece_dropout, 'piece_dropout');
  const reseg = dropP > 0 ? pieceDropout(L.tok, dropP) : null;
  // examples that ask a classification keep their pieces: SST-2 on the fresh tiny preset never left chance with them
  // segmented again (docs/training.md, "Piece dropout")
  const resegmented = (ex: EncoderExample) => reseg !== null && !ex.schema.classifications.length;
  const feat = (e: EncoderExample, rng?: Uniform) =>
    featurize(L.tok, e, L.maxWidth, maxWords, L.wordFeatures, L.labels, clsLoss,
      rng && reseg ? (w, p) => reseg(w, p, rng) : undefined);
  const trainEx = recordsToExamples(trainRecs, labels, classes);
  if (!trainEx.length) {
    throw new TrainingConfigError(`none of the ${trainRecs.length} training records is an encoder record (kind ner, `
      + 'relations, classification or gliner2)');
  }
  const share = balanced ? positiveSpanShare(trainEx, L.maxWidth, maxWords) : null;
  const negKeep = givenKeep ?? balancedNegativeKeep(share);
  const hardSpans = resolveSpanHard(spanHard, negKeep);
  if (balanced) {
    log(hooks, 'info', `negative spans kept ${negKeep} (balanced: ${share === null ? 'no mentions'
      : `${share.toPrecision(2)} of the (span, label) pairs are mentions`})`);
  }
  if (spanHard === 'auto') log(hooks, 'info', `hard negative spans: ${hardSpans.mode} (auto, at a keep of ${negKeep})`);
  const trainF: TrainItem[] = await Promise.all(
    trainEx.map(async (ex) => ({ ex, f: sampled(ex) || resegmented(ex) ? null : await feat(ex) })),
  );
  // validation loss over the same sampled prompts every time (a fixed seed), so evaluations compare
  const valRng = new InitRng(seed ^ 0x7a1);
  const valEx = recordsToExamples(valRecs, labels, classes);
  const valPrompt = (ex: EncoderExample) =>
    fullRatio === 1 ? shuffleLabels(ex, valRng) : negK > 0 ? sampleNegativeLabels(ex, negK, valRng) : ex;
  const valF = await Promise.all(valEx.map((ex) => feat(valPrompt(ex))));
  const full = fullRatio > 0 ? `, every label (shuffled) in ${Math.round(fullRatio * 100)}% of the steps` : '';
  const sampling = negK > 0 && classes.length > negK + 1
    ? fullRatio === 1 ? ' (every label, shuffled, at every step)'
    : ` (true + ${negK} sampled negative labels per example${full})` : '';
  log(hooks, 'info', `${trainF.length} training / ${valF.length} validation examples; entity labels: `
    + `${labels.join(', ') || '(none)'}${classes.length ? `; ${classes.length} classes${sampling}` : ''}`);
  const dropH = dropoutRate(config.hidden_dropout, 'hidden_dropout');
  const dropA = dropoutRate(config.attention_dropout, 'attention_dropout');
  const dropW = dropoutRate(config.word_dropout, 'word_dropout');
  const dropRare = dropoutRate(config.rare_word_dropout, 'rare_word_dropout');
  const swapP = positiveNum(config.mention_replacement, 'mention_replacement', 0, true);
  if (swapP > 1) throw new TrainingConfigError('mention_replacement must be between 0 and 1');
  const pool = mentionPool(swapP > 0 ? trainEx : []);
  const dropM = dropoutRate(config.mention_dropout, 'mention_dropout');
  const unk = L.tok.tokenToId('[UNK]');
  if ((dropW > 0 || dropRare > 0 || dropM > 0) && unk === null)
    throw new TrainingConfigError('word dropout needs a tokenizer with an [UNK] token');
  const wordDrop = dropRare > dropW ? rareWordDropout(trainEx.map((e) => e.text), dropW, dropRare) : dropW;
  const selection = config.selection_metric ?? 'task';
  if (selection !== 'task' && selection !== 'loss')
    throw new TrainingConfigError('selection_metric must be task or loss');
  const metricN = positiveInt(config.metric_samples, 'metric_samples', 500);
  const maxMinutes = positiveNum(config.max_minutes, 'max_minutes', 0, true);
  const emaDecay = positiveNum(config.ema_decay, 'ema_decay', 0, true);
  if (emaDecay >= 1) throw new TrainingConfigError('ema_decay must be below 1');
  const priorInit = config.classifier_prior_init ?? false;
  if (typeof priorInit !== 'boolean') throw new TrainingConfigError('classifier_prior_init must be a boolean');
  const shift = priorInit && type === 'full' ? await classifierPriorShift(L, trainEx, feat, negK, fullRatio) : null;
  if (shift !== null) log(hooks, 'info', `classifier output bias shifted by ${shift.toFixed(3)} to the label prior`);

  const perEpochBatches = trainF.length > bs ? Math.floor(trainF.length / bs) : 1; // drop_last
  const stepsPerEpoch = Math.max(1, Math.floor(perEpochBatches / accum));
  let totalSteps = stepsPerEpoch * epochs;
  if (maxSteps) totalSteps = Math.min(totalSteps, maxSteps);
  const warmupRatio = positiveNum(config.warmup_ratio, 'warmup_ratio', 0.1, true);
  const warmup = config.warmup_steps ?? Math.round(warmupRatio * totalSteps);
  const evalEvery = config.eval_steps ?? stepsPerEpoch;
  const resolved = {
    totalSteps, warmup, stepsPerEpoch, labels, lora: L.lora, hidden_dropout: dropH, attention_dropout: dropA,
    word_dropout: dropW, rare_word_dropout: dropRare, piece_dropout: dropP, mention_replacement: swapP,
    mention_dropout: dropM,
    negative_labels: negK, hard_negatives: hardRatio, negative_span_keep: negKeep, negative_span_hard: hardSpans.mode,
    full_label_ratio: fullRatio,
    selection_metric: selection, max_minutes: maxMinutes, precision, classifier_prior_shift: shift, ema_decay: emaDecay,
  };
  const by = selection === 'task' ? 'validation task metric' : 'validation loss';
  const over = maxMinutes ? `${maxMinutes} min` : `${totalSteps} steps`;
  const averaged = emaDecay ? `; weights averaged (EMA ${emaDecay})` : '';
  const rareW = (dropRare > dropW ? ` (seen once: ${dropRare})` : '') + (swapP ? `; mentions swapped ${swapP}` : '')
    + (dropM ? `; mentions dropped ${dropM}` : '') + (dropP ? `; pieces dropped ${dropP}` : '');
  log(hooks, 'info', `recipe: dropout hidden ${dropH} attention ${dropA} word ${dropW}${rareW}; `
    + `negative labels ${negK || 'all'}${full}; selection by ${by}; schedule ${sched} over ${over}${averaged}`);
  mkdirSync(config.output_dir, { recursive: true });
  const trainData = typeof config.train_data === 'string' ? config.train_data : `${all.length} records`;
  const saved = { ...config, train_data: trainData, validation_data: undefined, resolved };
  writeFileSync(join(config.output_dir, 'training_config.json'), JSON.stringify(saved, null, 2));
  const book = new CheckpointBook(config.output_dir, positiveInt(config.save_total_limit, 'save_total_limit', 3), hooks);

  const evaluate = async (): Promise<number | null> => {
    if (!valF.length) return null;
    let s = 0;
    for (let i = 0; i < valF.length; i += bs) s += (await L.graph.step(collate(valF.slice(i, i + bs)), { backward: false, dropNeg: false })).loss;
    return s / valF.length;
  };

  const metricRecs = valRecs.slice(0, metricN);
  const metricOpts = { entityLabels: labels, classLabels: classes, limit: metricN };
  const score = selection === 'task' && metricRecs.length
    ? (dir: string) => validationMetric(dir, metricRecs, metricOpts)
    : undefined;

  return runTrainingLoop<TrainItem>({
    outputDir: config.output_dir, hooks, t0, items: trainF, batchSize: bs, accum, epochs, perEpoch: perEpochBatches, totalSteps,
    evalEvery, patience, maxSteps, seed, scheduler: sched, warmup, book, evalUntrainedOnAbort: false,
    maxMs: maxMinutes * 60_000, warmupFrac: warmupRatio,
    evalEveryMs: maxMinutes && config.eval_steps === undefined ? (maxMinutes * 60_000) / 8 : 0,
    score,
    zeroGrad: () => L.graph.zeroGrad(),
    microStep: async (items, o) => {
      // per-step randomness (sampled labels, dropped words) from the step's seed: a run is reproducible
      const rng = new InitRng(o.seed ^ 0x51ed);
      const everyLabel = fullRatio > 0 && rng.uniform() < fullRatio; // the whole batch: one prompt length
      const featurized = await Promise.all(items.map((it) => {
        // an example's own stream for its pieces, drawn in batch order (featurize calls finish in any order)
        const own = resegmented(it.ex) ? new InitRng(Math.floor(rng.uniform() * 2 ** 32)) : undefined;
        const ex = swapP > 0 ? replaceMentions(it.ex, pool, swapP, rng) : it.ex;
        if (ex !== it.ex) return feat(ex, own);
        return it.f ?? feat(everyLabel ? shuffleLabels(ex, rng) : sampleNegativeLabels(ex, negK, rng, hard), own);
      }));
      // words dropped in batch order once every example is featurized (featurize calls finish in any order)
      const dropped = wordDrop ? featurized.map((f) => dropWords(f, wordDrop, unk!, rng)) : featurized;
      const batch = dropM ? dropped.map((f) => dropMentions(f, dropM, unk!, rng)) : dropped;
      const opts = {
        dropNeg: config.negative_dropping ?? true, negKeep, negHard: hardSpans.native,
        hiddenDropout: dropH, attentionDropout: dropA, ...o,
      };
      const r = await L.graph.step(collate(batch), opts);
      if (hard && r.clsLogits) observeConfusion(hard.confusion, items, batch, r.clsLogits);
      return { loss: r.loss, weight: items.length, tokens: batch.reduce((n, it) => n + it.f.ids.length, 0) };
    },
    optimizerStep: (step, f) => L.graph.optimizerStep({
      lr: [encLr * f, taskLr * f], weightDecay: wd, maxGradNorm: maxNorm, step,
      emaDecay: emaDecay && Math.min(emaDecay, (1 + step) / (10 + step)),
    }),
    evaluate,
    writeCheckpoint: (dir) => saveCheckpoint(config.base_model, dir, L),
    evalWeights: emaDecay ? emaWeights(L.graph) : undefined,
  });
}

/** Feeds one step's classifier logits to the confusion: each single-label classification segment of the task the
 * confusion ranks, its prompt's labels against its true one (segments in batch order, as the native step returns
 * their logits). */
function observeConfusion(confusion: LabelConfusion, items: TrainItem[], batch: Featurized[], logits: Float32Array) {
  let at = 0;
  batch.forEach((b, i) => {
    for (const seg of b.f.segments) {
      if (seg.kind !== 'classification') continue;
      const M = seg.names.length;
      const truth = items[i]!.ex.classes.get(seg.name) ?? [];
      const single = seg.name === CLASSIFICATION_TASK && truth.length === 1;
      if (single) confusion.observe(truth[0]!, seg.names, logits.subarray(at, at + M));
      at += M;
    }
  });
}

/** The moving average in place of the trained weights while they are evaluated and saved (none before a first step). */
function emaWeights(graph: EncoderTrainGraph) {
  let swapped = false;
  return {
    enter: () => void (swapped = graph.emaSwap()),
    leave: () => void (swapped && graph.emaSwap(), (swapped = false)),
  };
}

/** a sampler draw that takes the first candidates: the sampled prompt's size without randomness */
const FIRST_DRAW = { uniform: () => 0 };

/**
 * The classifier's output bias is moved so that its mean logit over the first classification examples' labels is
 * logit(p), p the share of positive labels in them, and returns the shift (null without classification examples).
 * A fresh classifier starts near logit 0 for every label (p ≈ 0.43 for each of Banking77's 77): the summed BCE then
 * pushes every logit down at once for hundreds of steps, and that common gradient fills Adam's second moments, so the
 * per-label signal moves the weights slowly long after the prior is reached (docs/training.md). The mean logit comes
 * from the loss of each example asked with no true label: Σ softplus(z_l) = M·softplus(z̄) while the logits are close,
 * as they are at init; an example with other tasks is skipped.
 */
async function classifierPriorShift(
  L: Loaded, examples: EncoderExample[], feat: (e: EncoderExample) => Promise<Featurized>, negK: number,
  fullRatio: number,
): Promise<number | null> {
  const probe = examples.filter((e) => e.schema.classifications.length && !e.schema.entities
    && !e.schema.relations.length && !e.schema.structures.length).slice(0, 8);
  let pos = 0;
  let all = 0;
  // labels per prompt as training asks them: every label in `fullRatio` of the steps, else the prompt the
  // sampler gives (true labels and negK negatives per task; every label where negK is 0 or covers them)
  let asked = 0;
  let zsum = 0;
  const labelCount = (e: EncoderExample) => e.schema.classifications.reduce((n, c) => n + c.labels.length, 0);
  for (const ex of probe) {
    const f = await feat(ex);
    const M = f.segs.reduce((n, s) => n + s.M, 0);
    pos += f.segs.reduce((n, s) => n + (s.clsY?.reduce((a, b) => a + b, 0) ?? 0), 0);
    all += M;
    asked += fullRatio * M + (1 - fullRatio) * (negK > 0 ? labelCount(sampleNegativeLabels(ex, negK, FIRST_DRAW)) : M);
    const none = { f: f.f, segs: f.segs.map((s) => ({ ...s, clsY: s.clsY && new Float32Array(s.M) })) };
    const loss = (await L.graph.step(collate([none]), { backward: false, dropNeg: false })).loss;
    zsum += Math.log(Math.expm1(loss / M)) * M; // softplus⁻¹ of the mean per-label loss
  }
  if (!all || !pos || pos >= asked) return null;
  const p = pos / asked;
  const shift = Math.log(p / (1 - p)) - zsum / all;
  if (!Number.isFinite(shift)) return null;
  const bias = L.graph.get('classifier.2.bias');
  L.graph.set('classifier.2.bias', Float32Array.of(bias[0] + shift));
  return shift;
}

function dropoutRate(v: unknown, name: string): number {
  const p = positiveNum(v, name, 0, true);
  if (p >= 1) throw new TrainingConfigError(`${name} must be below 1`);
  return p;
}
