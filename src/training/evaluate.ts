// Evaluation of a trained (or base) encoder on NER records: strict span P/R/F1 (src/training/metrics.ts)
// from the model's stable extraction output.
import { loadEncoder } from '../models/encoder/index.ts';
import type { NerRecord, DataRecord } from './data/formats.ts';
import { scoreSpans, type SpanLike, type SpanScores } from './metrics.ts';
import { entityLabels } from './encoder/examples.ts';

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
  const res = await model.extract(ner.map((r) => r.text), labels, { threshold: opts.threshold ?? 0.5, batchSize: opts.batchSize ?? 32 });
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
