// Evaluation of a trained (or base) encoder: NER records by strict span P/R/F1, classification records by
// accuracy / macro-F1 (src/training/metrics.ts), from the model's extraction output with the full label set.
import { loadEncoder } from '../models/encoder/index.ts';
import type { NerRecord, DataRecord, ClassificationRecord } from './data/formats.ts';
import {
  scoreClassification, scoreSpans, type ClassificationScores, type SpanLike, type SpanScores,
} from './metrics.ts';
import { classLabels, entityLabels } from './encoder/examples.ts';
import { CLASSIFICATION_TASK } from './encoder/recipe.ts';

export interface NerEvalOptions {
  labels?: string[];
  threshold?: number;
  batchSize?: number;
  /** words kept per text (as in training); default: whole texts */
  limit?: number;
}

/** Runs the encoder in `dir` over the NER records and scores strict spans. */
export async function evaluateNer(dir: string, records: DataRecord[], opts: NerEvalOptions = {}): Promise<SpanScores> {
  const ner = records.filter((r): r is NerRecord => r.kind === 'ner' || r.kind === 'relations').slice(0, opts.limit ?? Infinity);
  const labels = opts.labels ?? entityLabels(ner);
  const model = await loadEncoder(dir);
  // a batch of texts per call, as evaluateClassification: one call over a whole dev split (CoNLL-2003's 3250 texts)
  // needs more encoder tokens than one request may run (ENCODER_LIMITS.requestTokens)
  const bs = opts.batchSize ?? 32;
  const res = [];
  for (let i = 0; i < ner.length; i += bs) {
    const texts = ner.slice(i, i + bs).map((r) => r.text);
    res.push(...(await model.extract(texts, labels, { threshold: opts.threshold ?? 0.5, batchSize: bs })));
  }
  const pred: SpanLike[][] = res.map((r) => {
    const out: SpanLike[] = [];
    for (const [label, v] of Object.entries(r.entities ?? {})) {
      const list = Array.isArray(v) ? v : v ? [v] : [];
      for (const e of list) if (e.start !== undefined && e.end !== undefined) out.push({ start: e.start, end: e.end, label });
    }
    return out;
  });
  const gold = ner.map((r) => r.entities.map((e) => ({ start: e.start, end: e.end, label: e.label })));
  return scoreSpans(gold, pred);
}

export interface ClassificationEvalOptions {
  /** the label set asked for (default: every label of the records) */
  labels?: string[];
  batchSize?: number;
  limit?: number;
}

/** Runs the encoder in `dir` over the classification records with the full label set; accuracy and macro-F1. */
export async function evaluateClassification(
  dir: string, records: DataRecord[], opts: ClassificationEvalOptions = {},
): Promise<ClassificationScores> {
  const isCls = (r: DataRecord): r is ClassificationRecord => r.kind === 'classification';
  const cls = records.filter(isCls).slice(0, opts.limit ?? Infinity);
  const labels = opts.labels ?? classLabels(cls);
  const multi = cls.some((r) => r.multiLabel);
  const model = await loadEncoder(dir);
  const bs = opts.batchSize ?? 32;
  const pred: string[][] = [];
  for (let i = 0; i < cls.length; i += bs) {
    const batch = cls.slice(i, i + bs);
    const schema = { classifications: [{ task: CLASSIFICATION_TASK, labels, multi_label: multi }] };
    const res = await model.extract(batch.map((r) => r.text), schema, { include_confidence: false });
    for (const r of res) {
      const out = [r.classifications?.[CLASSIFICATION_TASK]].flat().filter(Boolean);
      pred.push(out.map((o) => (o as { label: string }).label));
    }
  }
  return scoreClassification(cls.map((r) => r.labels), pred);
}

/**
 * The validation task metric of a checkpoint (higher is better): micro span F1 when the records hold entities,
 * accuracy when they are classification records, null otherwise (the trainer then selects by loss).
 */
export async function validationMetric(
  dir: string, records: DataRecord[], o: { entityLabels: string[]; classLabels: string[]; limit: number },
): Promise<number | null> {
  const ner = records.filter((r) => r.kind === 'ner' || r.kind === 'relations');
  if (ner.length && o.entityLabels.length)
    return (await evaluateNer(dir, ner, { labels: o.entityLabels, limit: o.limit })).f1;
  const cls = records.filter((r) => r.kind === 'classification');
  if (cls.length && o.classLabels.length > 1)
    return (await evaluateClassification(dir, cls, { labels: o.classLabels, limit: o.limit })).accuracy;
  return null;
}
