// Evaluation of a model on a dataset (customization worker pool): the model runs over every
// example and is scored against the labels.
//   entities (ner, relations, gliner2 with spans): strict span matching (exact start, end and
//     label), micro-averaged P/R/F1 plus per label (src/training/metrics.ts scoreSpans)
//   relations (relations records, gliner2 records with relations): also strict (head span, tail span,
//     relation label) triples, micro-averaged and per relation label (scoreRelations), in `relations`;
//     the model is asked for the dataset's entity labels and relation labels in one call
//   classification: accuracy and macro-F1 (scoreClassification); f1 = macro-F1
//   decoder (chat): the model's reply to each conversation (greedy) against the reference
//     assistant turn, token-overlap P/R/F1 (bag of lower-cased words), micro-averaged
import { readFileSync } from 'node:fs';
import type { MessagePort } from 'node:worker_threads';
import {
  type RelationLike, type SpanLike, scoreClassification, scoreRelations, scoreSpans,
} from '../../training/metrics.ts';
import { CLASSIFICATION_TASK } from '../../training/encoder/recipe.ts';

export interface EvaluateTask {
  op: 'evaluate';
  kind: 'encoder' | 'decoder';
  /** full model directory (encoder, or decoder base) */
  model_dir: string;
  /** decoder: PEFT adapter applied on top of model_dir */
  adapter_dir?: string;
  data_file: string;
  /** evaluate only these record indices (a validation split) */
  indices?: number[];
  threshold?: number;
  max_new_tokens?: number;
  port?: MessagePort;
}

export interface LabelScore { precision: number; recall: number; f1: number; support: number; tp: number; fp: number; fn: number }
/** strict relation triples: micro-averaged scores and the same per relation label */
export interface RelationScore extends LabelScore { per_label: Record<string, LabelScore> }
export interface EvaluateResult {
  task: 'ner' | 'classification' | 'decoder';
  precision: number;
  recall: number;
  f1: number;
  accuracy?: number;
  macro_f1?: number;
  sample_count: number;
  per_label: Record<string, LabelScore>;
  /** relation datasets: strict (head, tail, label) triples */
  relations?: RelationScore;
}

type Row = Record<string, any>;

const BATCH = 16;

function goldSpans(r: Row): SpanLike[] | null {
  if (Array.isArray(r.entities) && typeof r.text === 'string') return r.entities.map((e: Row) => ({ start: e.start, end: e.end, label: e.label }));
  if (typeof r.input === 'string' && r.output && typeof r.output.entities === 'object' && r.output.entities) {
    // GLiNER2 training format: entity texts without offsets; locate each mention in order
    const out: SpanLike[] = [];
    for (const [label, mentions] of Object.entries(r.output.entities as Record<string, unknown>)) {
      let from = 0;
      for (const m of [mentions].flat()) {
        if (typeof m !== 'string' || !m) continue;
        const i = r.input.indexOf(m, from);
        if (i < 0) continue;
        out.push({ start: i, end: i + m.length, label });
        from = i + m.length;
      }
    }
    return out;
  }
  return null;
}

/** Gold relations with their arguments' character spans, or null for a record without relations. */
function goldRelations(r: Row): RelationLike[] | null {
  if (Array.isArray(r.relations) && Array.isArray(r.entities) && typeof r.text === 'string') {
    const ents = r.entities as Row[];
    return (r.relations as Row[]).filter((x) => ents[x.head] && ents[x.tail]).map((x) => ({
      head: { start: ents[x.head].start, end: ents[x.head].end },
      tail: { start: ents[x.tail].start, end: ents[x.tail].end },
      label: x.label,
    }));
  }
  if (typeof r.input === 'string' && r.output && Array.isArray(r.output.relations)) {
    // GLiNER2 training format: argument texts without offsets; each located at its first occurrence
    const out: RelationLike[] = [];
    const at = (m: unknown) => {
      const i = typeof m === 'string' && m ? r.input.indexOf(m) : -1;
      return i < 0 ? null : { start: i, end: i + (m as string).length };
    };
    for (const item of r.output.relations as Row[])
      for (const [label, v] of Object.entries(item ?? {})) {
        const head = at((v as Row)?.head);
        const tail = at((v as Row)?.tail);
        if (head && tail) out.push({ head, tail, label });
      }
    return out;
  }
  return null;
}

const labelScore = (x: LabelScore): LabelScore => ({
  precision: x.precision, recall: x.recall, f1: x.f1, support: x.support, tp: x.tp, fp: x.fp, fn: x.fn,
});
const NONE: LabelScore = { precision: 0, recall: 0, f1: 0, tp: 0, fp: 0, fn: 0, support: 0 };

function goldLabels(r: Row): string[] | null {
  if (typeof r.text === 'string' && typeof r.label === 'string') return [r.label];
  if (typeof r.text === 'string' && Array.isArray(r.labels) && !Array.isArray(r.entities)) return r.labels;
  return null;
}

const words = (s: string) => s.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? [];

export async function evaluate(t: EvaluateTask): Promise<EvaluateResult> {
  let rows: Row[] = readFileSync(t.data_file, 'utf8').split('\n').filter(Boolean).map((l) => JSON.parse(l));
  if (t.indices) rows = t.indices.map((i) => rows[i]).filter(Boolean);
  const progress = (done: number) => t.port?.postMessage({ done, total: rows.length });
  if (rows.length === 0) throw new Error('no examples to evaluate');

  if (t.kind === 'decoder') {
    const { loadDecoder } = await import('../../runtime/generate.ts');
    const dec = await loadDecoder(t.model_dir, { id: 'eval' });
    try {
      const adapter = t.adapter_dir ? (dec.loadAdapter('eval-adapter', t.adapter_dir), 'eval-adapter') : undefined;
      let tp = 0, fp = 0, fn = 0, n = 0;
      for (const r of rows) {
        const msgs = r.messages as Array<{ role: string; content: string }> | undefined;
        if (!Array.isArray(msgs)) continue;
        const last = msgs.map((m) => m.role).lastIndexOf('assistant');
        if (last < 1) continue;
        const ref = words(msgs[last].content);
        const prompt = msgs.slice(0, last);
        let text = '';
        for await (const ev of dec.generate({ messages: prompt as never, max_tokens: t.max_new_tokens ?? Math.min(256, Math.max(16, Math.ceil(ref.length * 2))), temperature: 0, adapter } as never)) {
          // the stream's last event is `final` (src/runtime/generate.ts), holding the whole reply
          if ((ev as { type: string }).type === 'final') text = (ev as { text: string }).text;
        }
        const hyp = words(text);
        const counts = new Map<string, number>();
        for (const w of ref) counts.set(w, (counts.get(w) ?? 0) + 1);
        let common = 0;
        for (const w of hyp) { const c = counts.get(w) ?? 0; if (c > 0) { common++; counts.set(w, c - 1); } }
        tp += common; fp += hyp.length - common; fn += ref.length - common;
        n++;
        if (n % 4 === 0) progress(n);
      }
      if (n === 0) throw new Error('no conversation with an assistant reply to compare against');
      const precision = tp + fp ? tp / (tp + fp) : 0, recall = tp + fn ? tp / (tp + fn) : 0;
      const f1 = precision + recall ? (2 * precision * recall) / (precision + recall) : 0;
      return { task: 'decoder', precision, recall, f1, sample_count: n, per_label: {} };
    } finally {
      (dec as unknown as { close?: () => void }).close?.();
    }
  }

  const { loadEncoder } = await import('../../models/encoder/index.ts');
  const enc = await loadEncoder(t.model_dir);
  const threshold = t.threshold ?? 0.5;
  const spanRows = rows.map(goldSpans);
  if (spanRows.some((s) => s !== null)) {
    type Kept = { r: Row; g: SpanLike[]; rel: RelationLike[] | null };
    const keep = rows
      .map((r, i) => ({ r, g: spanRows[i], rel: goldRelations(r) }))
      .filter((x) => x.g !== null) as Kept[];
    const labels = [...new Set(keep.flatMap((x) => x.g.map((s) => s.label)))].sort();
    if (labels.length === 0) throw new Error('the dataset has no entity labels to evaluate');
    const relLabels = [...new Set(keep.flatMap((x) => (x.rel ?? []).map((r) => r.label)))].sort();
    const schema = relLabels.length ? { entities: labels, relations: relLabels } : { entities: labels };
    const gold: SpanLike[][] = [], pred: SpanLike[][] = [];
    const goldRel: RelationLike[][] = [], predRel: RelationLike[][] = [];
    const span = (e: { start?: number; end?: number } | null | undefined) =>
      e && e.start !== undefined && e.end !== undefined ? { start: e.start, end: e.end } : null;
    for (let i = 0; i < keep.length; i += BATCH) {
      const batch = keep.slice(i, i + BATCH);
      const texts = batch.map((x) => (typeof x.r.text === 'string' ? x.r.text : x.r.input) as string);
      const res = await enc.extract(texts, schema, { threshold, include_spans: true, include_confidence: false });
      res.forEach((r, j) => {
        gold.push(batch[j].g);
        const p: SpanLike[] = [];
        for (const [label, ents] of Object.entries(r.entities ?? {}))
          for (const e of [ents].flat()) if (span(e)) p.push({ ...span(e)!, label });
        pred.push(p);
        if (!relLabels.length) return;
        goldRel.push(batch[j].rel ?? []);
        const pr: RelationLike[] = [];
        for (const [label, list] of Object.entries(r.relations ?? {}))
          for (const x of list)
            if (span(x.head) && span(x.tail)) pr.push({ head: span(x.head)!, tail: span(x.tail)!, label });
        predRel.push(pr);
      });
      progress(Math.min(keep.length, i + BATCH));
    }
    const s = scoreSpans(gold, pred);
    const per_label: Record<string, LabelScore> = {};
    for (const l of labels) per_label[l] = labelScore(s.per_label[l] ?? NONE);
    let relations: RelationScore | undefined;
    if (relLabels.length) {
      const rs = scoreRelations(goldRel, predRel);
      const perRel = Object.fromEntries(relLabels.map((l) => [l, labelScore(rs.per_label[l] ?? NONE)]));
      relations = { ...labelScore(rs), per_label: perRel };
    }
    return {
      task: 'ner', precision: s.precision, recall: s.recall, f1: s.f1, sample_count: s.sample_count, per_label,
      ...(relations ? { relations } : {}),
    };
  }
  const labelRows = rows.map(goldLabels);
  const keep = rows.map((r, i) => ({ r, g: labelRows[i] })).filter((x) => x.g !== null) as Array<{ r: Row; g: string[] }>;
  if (keep.length === 0) throw new Error('the dataset has neither entity spans nor class labels to evaluate');
  const labels = [...new Set(keep.flatMap((x) => x.g))].sort();
  if (labels.length < 2) throw new Error('classification evaluation needs at least two classes');
  const multi = keep.some((x) => x.g.length !== 1);
  const gold: string[][] = [], pred: string[][] = [];
  for (let i = 0; i < keep.length; i += BATCH) {
    const batch = keep.slice(i, i + BATCH);
    const schema = { classifications: [{ task: CLASSIFICATION_TASK, labels, multi_label: multi }] };
    const texts = batch.map((x) => x.r.text as string);
    const res = await enc.extract(texts, schema, { threshold, include_confidence: false });
    res.forEach((r, j) => {
      gold.push(batch[j].g);
      const out = r.classifications?.[CLASSIFICATION_TASK];
      pred.push([out].flat().filter(Boolean).map((o) => (o as { label: string }).label));
    });
    progress(Math.min(keep.length, i + BATCH));
  }
  const s = scoreClassification(gold, pred);
  const per_label: Record<string, LabelScore> = {};
  for (const [l, x] of Object.entries(s.per_label)) per_label[l] = { precision: x.precision, recall: x.recall, f1: x.f1, support: x.support, tp: x.tp, fp: x.fp, fn: x.fn };
  return { task: 'classification', precision: s.precision, recall: s.recall, f1: s.f1, accuracy: s.accuracy, macro_f1: s.macro_f1, sample_count: s.sample_count, per_label };
}
