// The training recipe of a fresh GLiNER2 encoder (issue 17; figures in docs/training.md). One place for
// what the service's defaults (src/service/training-jobs.ts), `npm run bench -- quality` and the
// trainer's own defaults share. A leaf module: no imports.

/** The classification task name a trained classifier is taught with (training prompts), and asked with wherever Loom
 * scores or serves one (evaluations, label-existing): the task name is part of the prompt, so a fresh model
 * trained on one name and asked with another sees a prompt it never saw. */
export const CLASSIFICATION_TASK = 'label';

/** Negatives the span loss never drops, whatever the keep (`negative_span_hard`): 'none'; 'label', a span that is a
 * mention under another label of its text (the right span under the wrong label: 88 of 277 misses and 96 of 189 false
 * positives of a CoNLL-2003 model, docs/training.md "Where CoNLL-2003's errors are"); 'boundary', also any span that
 * starts or ends where a mention does (the overlapping ones); 'auto', 'label' where the keep is GLiNER's 0.5 and 'none'
 * where it is lower (src/training/encoder/negative-spans.ts resolveSpanHard). The first three in the native step's
 * order (`neg_hard` 0, 1, 2). */
export const NEGATIVE_SPAN_HARD = ['none', 'label', 'boundary', 'auto'] as const;
export type NegativeSpanHard = typeof NEGATIVE_SPAN_HARD[number];

/** Negative labels sampled per classification example and step (all true labels + this many). */
export const DEFAULT_NEGATIVE_LABELS = 16;

/** The fraction of steps whose classification examples carry every label, in a fresh random order each time, instead
 * of true + DEFAULT_NEGATIVE_LABELS sampled ones. A model trained on sampled prompts alone ranks its few sampled labels
 * but not the full set it is served with (Banking77: 0.39 accuracy among 8 labels, chance among all 77), and one
 * trained on every label in one fixed order learns the labels' places, not their meaning (chance when asked in
 * another order). On 20 Banking77 intents, 4 minutes: all-20 dev accuracy 0.19-0.25 in any order with every step
 * shuffled full, 0.07 with half the steps so (docs/training.md). */
export const DEFAULT_FULL_LABEL_RATIO = 1;

/** Whether `loom init-encoder` and the service's loom/gliner2-init-* bases isolate classification labels
 * (config.json `label_isolation`, src/models/encoder/label-isolation.ts). */
export const FRESH_LABEL_ISOLATION = true;

/** Whether fresh bases read each classification label as one `[L]` token whose embedding adds the mean of its name's
 * piece embeddings (config.json `label_bag`, src/models/encoder/label-isolation.ts) instead of the marker followed by
 * the name's pieces. Banking77, 10 minutes on a 2-core Zen 3: small preset dev accuracy 0.796-0.802 against 0.604,
 * tiny 0.859-0.863 against 0.780; SST-2 (small) 0.763 against 0.755; served with all 77 intents 4.7× the texts a
 * second (docs/training.md, "Label bags"). */
export const FRESH_LABEL_BAG = true;

/** The full_label_ratio a base trains with by default. With label isolation a label's logit does not depend on the
 * other labels of the prompt, so a sampled prompt (true + negative_labels) computes for each of its labels exactly what
 * the served full prompt does: sampling is then the served computation at a fraction of the cost (ratio 0). Without
 * it, DEFAULT_FULL_LABEL_RATIO. */
export function fullLabelRatio(labelIsolation: boolean): number {
  return labelIsolation ? 0 : DEFAULT_FULL_LABEL_RATIO;
}

/** DeBERTa's hidden and attention dropout inside the encoder, word dropout on the text and piece dropout (a text
 * word segmented again at each step, src/training/encoder/piece-dropout.ts) (FreshSettings). */
function dropout(hidden: number, attention: number, word: number, pieces = 0) {
  return { hidden_dropout: hidden, attention_dropout: attention, word_dropout: word, piece_dropout: pieces };
}

/** What a fresh encoder trains with, by preset: learning rates (heads, backbone), batch size and dropout inside the
 * encoder. tiny: measured on a 60-record NER set, 20 held-out (5e-3/1e-3 reaches held-out F1 0.45 in 8 epochs,
 * 5e-4/1e-4 0.17), and dropout lowered CoNLL-2003 dev F1 by 0.14 in a budget the tiny model underfits. small:
 * CoNLL-2003 and WNUT-17 in 20-minute budgets (docs/training.md, "The small preset's recipe"): 2e-3/5e-4 at batch
 * 16 against the former 5e-4/1e-4 at batch 8, and DeBERTa's hidden and attention dropout 0.1, which helped both
 * once the model trains for many epochs. And piece dropout 0.25 (docs/training.md, "Piece dropout"): WNUT-17 dev F1
 * 0.198 / 0.170 against 0.113 / 0.106 (seeds 42 / 43, 3,000 steps), CoNLL-2003 0.873 / 0.876 against 0.870 / 0.873;
 * not measured on the tiny preset; examples that ask a classification keep their pieces whatever the rate. And
 * negative spans kept by the data's balance (src/training/encoder/negative-spans.ts; docs/training.md, "Negative spans
 * by the data's balance"): WNUT-17 dev F1 0.247 / 0.195 at 0.2 against 0.165 / 0.180 at GLiNER's 0.5 (seeds 42 / 43),
 * where CoNLL-2003 at 0.2 fell behind (0.801 against 0.871); 'balanced' gives each its own. And a mention's span under
 * the text's other labels always in the span loss where the keep is GLiNER's 0.5 (negative_span_hard 'auto';
 * docs/training.md, "Hard negative spans"): CoNLL-2003 0.884 / 0.880 against 0.871 / 0.876 (seeds 42 / 43, 4,000
 * steps), where WNUT-17 at 0.2 fell to 0.173 from 0.247. Data of classification records only take
 * FRESH_CLASSIFICATION_SETTINGS. */
export interface FreshSettings {
  learning_rate: number;
  encoder_learning_rate: number;
  batch_size: number;
  hidden_dropout: number;
  attention_dropout: number;
  word_dropout: number;
  piece_dropout: number;
  /** the share of negative (span, label) pairs in the span loss, or 'balanced' by the data's mentions */
  negative_span_keep: number | 'balanced';
  /** negatives the span loss never drops */
  negative_span_hard: NegativeSpanHard;
}
export const FRESH_SETTINGS: Record<string, FreshSettings> = {
  tiny: {
    learning_rate: 5e-3, encoder_learning_rate: 1e-3, batch_size: 8, ...dropout(0, 0, 0), negative_span_keep: 0.5,
    negative_span_hard: 'none',
  },
  small: {
    learning_rate: 2e-3, encoder_learning_rate: 5e-4, batch_size: 16, ...dropout(0.1, 0.1, 0, 0.25),
    negative_span_keep: 'balanced', negative_span_hard: 'auto',
  },
};

/** The same for data of classification records only (docs/training.md, "Softmax cross-entropy for single-label
 * classification"). The tiny preset, which passes some 30 epochs of Banking77 in 10 minutes, overfits without dropout:
 * 0.1 inside the encoder and on words lifts its dev accuracy from 0.726 to 0.791 (1 thread). The small preset trains
 * without dropout, which it gets too few steps for (0.609 against 0.419 with it), at 1e-3 / 2e-4: with label bags,
 * Banking77 0.824 / 0.843 (trainer seeds 42 / 43) against 0.796 / 0.802 at the former 5e-4 / 1e-4, SST-2 0.750 against
 * 0.763 (one standard error of its dev set: 0.014); 2e-3 / 5e-4 keeps SST-2 at the prior (docs/training.md, "Around
 * the label bags"). */
export const FRESH_CLASSIFICATION_SETTINGS: Record<string, FreshSettings> = {
  tiny: { ...FRESH_SETTINGS.tiny!, ...dropout(0.1, 0.1, 0.1) },
  small: {
    learning_rate: 1e-3, encoder_learning_rate: 2e-4, batch_size: 8, ...dropout(0, 0, 0), negative_span_keep: 0.5,
    negative_span_hard: 'none',
  },
};

/** How a single-label classification task is trained: a BCE per label (GLiNER2's) or softmax cross-entropy over the
 * prompt's labels (as the served `class_act: auto` reads a single-label task); multi-label tasks always use BCE. */
export type ClassificationLoss = 'bce' | 'softmax';

/** How a fresh encoder (and a job continuing one) trains single-label classification: softmax cross-entropy over the
 * prompt's labels, which is what the served single-label task reads (class_act auto). Pretrained GLiNER2 bases keep the
 * library's BCE per label. */
export const FRESH_CLASSIFICATION_LOSS: ClassificationLoss = 'softmax';

/** What every encoder job gets unless it says otherwise: sampled negative labels, selection by the task metric. */
export const ENCODER_RECIPE = {
  classifier_prior_init: false,
  classification_loss: 'bce' as ClassificationLoss,
  ema_decay: 0,
  hidden_dropout: 0,
  attention_dropout: 0,
  word_dropout: 0,
  rare_word_dropout: 0,
  piece_dropout: 0,
  mention_replacement: 0,
  mention_dropout: 0,
  hard_negatives: 0,
  negative_span_keep: 0.5,
  negative_span_hard: 'none' as NegativeSpanHard,
  negative_labels: DEFAULT_NEGATIVE_LABELS,
  full_label_ratio: fullLabelRatio(false),
  selection_metric: 'task' as const,
};

/** A fresh encoder: the same, with its labels isolated (so sampled labels at every step: fullLabelRatio), the
 * classifier's output bias started at the label prior (a pretrained classifier is left as it is; on 20 Banking77
 * intents, 1500 steps: train loss 2.87 against 3.60, dev accuracy 0.57 / 0.56 against 0.37 / 0.36, labels sorted /
 * shuffled, docs/training.md), and its preset's settings (FRESH_SETTINGS, or FRESH_CLASSIFICATION_SETTINGS for data of
 * classification records only; an unknown preset gets small's). */
export function freshRecipe(preset: string, classificationOnly = false) {
  const table = classificationOnly ? FRESH_CLASSIFICATION_SETTINGS : FRESH_SETTINGS;
  return {
    ...ENCODER_RECIPE, classifier_prior_init: true, full_label_ratio: fullLabelRatio(FRESH_LABEL_ISOLATION),
    classification_loss: FRESH_CLASSIFICATION_LOSS,
    ...(table[preset] ?? table.small!),
  };
}
