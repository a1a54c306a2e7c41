// Evaluation metrics.
//
// Entities: strict span matching as CoNLL scores it — a prediction is a true positive only if a
// gold entity has exactly the same start, end and label. Micro-averaged precision/recall/F1 over
// all entities, plus the same per label. Duplicated predictions count once.
// Relations: strict triples — a predicted relation is a true positive only if a gold relation has
// the same head span, the same tail span (start and end) and the same relation label (the
// arguments' entity types are not part of the triple). Micro-averaged and per relation label.
// Classification: accuracy and macro-F1 over the labels seen in gold or predictions
// (multi-label: micro-averaged P/R/F1 over (example, label) pairs, plus exact-match accuracy).

export interface SpanLike {
  start: number;
  end: number;
  label: string;
}

export interface PRF {
  precision: number;
  recall: number;
  f1: number;
  tp: number;
  fp: number;
  fn: number;
  support: number; // gold count
}

export interface SpanScores extends PRF {
  per_label: Record<string, PRF>;
  sample_count: number;
}

function prf(tp: number, fp: number, fn: number): PRF {
  const precision = tp + fp > 0 ? tp / (tp + fp) : 0;
  const recall = tp + fn > 0 ? tp / (tp + fn) : 0;
  const f1 = precision + recall > 0 ? (2 * precision * recall) / (precision + recall) : 0;
  return { precision, recall, f1, tp, fp, fn, support: tp + fn };
}

export interface RelationLike {
  head: { start: number; end: number };
  tail: { start: number; end: number };
  label: string;
}

const key = (s: SpanLike) => `${s.start}\u0000${s.end}\u0000${s.label}`;
const relKey = (r: RelationLike) =>
  `${r.head.start}\u0000${r.head.end}\u0000${r.tail.start}\u0000${r.tail.end}\u0000${r.label}`;

/** Strict span P/R/F1 over paired (gold, predicted) examples. */
export function scoreSpans(gold: SpanLike[][], pred: SpanLike[][]): SpanScores {
  return scoreStrict('scoreSpans', gold, pred, key);
}

/** Strict (head span, tail span, label) P/R/F1 over paired (gold, predicted) examples. */
export function scoreRelations(gold: RelationLike[][], pred: RelationLike[][]): SpanScores {
  return scoreStrict('scoreRelations', gold, pred, relKey);
}

function scoreStrict<T extends { label: string }>(
  what: string, gold: T[][], pred: T[][], key: (x: T) => string,
): SpanScores {
  if (gold.length !== pred.length)
    throw new Error(`${what}: ${gold.length} gold examples but ${pred.length} predictions`);
  const counts = new Map<string, { tp: number; fp: number; fn: number }>();
  const at = (label: string) => {
    let c = counts.get(label);
    if (!c) counts.set(label, (c = { tp: 0, fp: 0, fn: 0 }));
    return c;
  };
  for (let i = 0; i < gold.length; i++) {
    const g = new Map(gold[i].map((s) => [key(s), s]));
    const p = new Map(pred[i].map((s) => [key(s), s]));
    for (const [k, s] of p) {
      if (g.has(k)) at(s.label).tp++;
      else at(s.label).fp++;
    }
    for (const [k, s] of g) if (!p.has(k)) at(s.label).fn++;
  }
  let tp = 0, fp = 0, fn = 0;
  const per_label: Record<string, PRF> = {};
  for (const label of [...counts.keys()].sort()) {
    const c = counts.get(label)!;
    per_label[label] = prf(c.tp, c.fp, c.fn);
    tp += c.tp;
    fp += c.fp;
    fn += c.fn;
  }
  return { ...prf(tp, fp, fn), per_label, sample_count: gold.length };
}

export interface ClassificationScores {
  accuracy: number;
  macro_f1: number;
  precision: number; // macro (single-label) or micro (multi-label)
  recall: number;
  f1: number; // = macro_f1 for single-label, micro F1 for multi-label
  per_label: Record<string, PRF>;
  sample_count: number;
}

/** Classification scores; each example's gold/pred is a list of labels (length 1 for single-label). */
export function scoreClassification(gold: string[][], pred: string[][]): ClassificationScores {
  if (gold.length !== pred.length) throw new Error(`scoreClassification: ${gold.length} gold examples but ${pred.length} predictions`);
  const labels = new Set<string>();
  for (const g of gold) g.forEach((l) => labels.add(l));
  for (const p of pred) p.forEach((l) => labels.add(l));
  const multi = gold.some((g) => g.length !== 1) || pred.some((p) => p.length !== 1);
  let exact = 0;
  const per_label: Record<string, PRF> = {};
  let TP = 0, FP = 0, FN = 0;
  for (const label of [...labels].sort()) {
    let tp = 0, fp = 0, fn = 0;
    for (let i = 0; i < gold.length; i++) {
      const inG = gold[i].includes(label), inP = pred[i].includes(label);
      if (inG && inP) tp++;
      else if (inP) fp++;
      else if (inG) fn++;
    }
    per_label[label] = prf(tp, fp, fn);
    TP += tp;
    FP += fp;
    FN += fn;
  }
  for (let i = 0; i < gold.length; i++) {
    const g = new Set(gold[i]), p = new Set(pred[i]);
    if (g.size === p.size && [...g].every((l) => p.has(l))) exact++;
  }
  const ls = Object.values(per_label);
  const macro = (f: (x: PRF) => number) => (ls.length ? ls.reduce((a, x) => a + f(x), 0) / ls.length : 0);
  const macro_f1 = macro((x) => x.f1);
  const micro = prf(TP, FP, FN);
  return {
    accuracy: gold.length ? exact / gold.length : 0,
    macro_f1,
    precision: multi ? micro.precision : macro((x) => x.precision),
    recall: multi ? micro.recall : macro((x) => x.recall),
    f1: multi ? micro.f1 : macro_f1,
    per_label,
    sample_count: gold.length,
  };
}
