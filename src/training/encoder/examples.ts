// Training examples for GLiNER2 span models: dataset records → (text, schema, gold targets) →
// formatted inputs with span / count / classification targets (spec §5.1, §5.2) → native batches.
//
// Label construction: NER and relation records carry character offsets, which are mapped to word
// spans exactly (first and last word overlapping the offsets); GLiNER2-format records give mention
// strings, matched as lower-cased word sub-sequences (all occurrences, spec §5.2). Spans wider than
// K words cannot be represented and are dropped. Entities: one task, count 1 (instance 0 holds every
// mention). Relations: instances = unique (head, tail) pairs, count = #instances. Structures
// (json_structures, the library's _process_json_structures / _build_outputs): one segment per parent,
// its fields (union over the parent's items, first-seen order) as the [C] markers; instances = the
// unique field-value tuples, count = #instances (0 when every value is empty); instance t's field m
// is positive on every occurrence of each of its values, a choice field ({value, choices}) on its
// choice word in the choice prefix (case-insensitive, width 0). Classification: multi-hot over the
// label list.
import type { DataRecord } from '../data/formats.ts';
import type { Schema } from '../../models/encoder/schema.ts';
import { formatInput, padInputs, type FormatOptions, type Formatted } from '../../models/encoder/format.ts';
import type { EncoderTokenizer } from '../../models/encoder/tokenizer.ts';
import { preprocessText, splitWords } from '../../models/encoder/words.ts';
import type { WordFeatures } from '../../models/encoder/word-features.ts';
import type { EncoderBatch } from '../native.ts';
import type { LabelPrompt } from '../../models/encoder/label-isolation.ts';
import { CLASSIFICATION_TASK, type ClassificationLoss } from './recipe.ts';
import type { LabelConfusion } from './hard-negatives.ts';

type Mention = { start: number; end: number } | string;
/** one field value of a structure instance: mentions in the text, or choices (matched in the prefix) */
type FieldValue = { mentions: string[] } | { choices: string[] };

export interface EncoderExample {
  text: string;
  schema: Schema;
  entities: Map<string, Mention[]>;
  relations: Map<string, { head: Mention; tail: Mention }[]>;
  classes: Map<string, string[]>;
  /** parent → unique instances, each a field → value map (fields absent or empty have no positives) */
  structures: Map<string, Map<string, FieldValue>[]>;
}

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);
const strings = (v: unknown): string[] => [v].flat().filter((x): x is string => typeof x === 'string' && x !== '');

/**
 * json_structures items ([{parent: {field: value}}], value a string, a list of strings or
 * {value, choices}) → structure specs in the schema and unique instances per parent.
 */
function addStructures(ex: EncoderExample, items: unknown, descriptions: unknown): void {
  const groups = new Map<string, Record<string, unknown>[]>();
  for (const item of Array.isArray(items) ? items : [])
    if (isObj(item))
      for (const [parent, fields] of Object.entries(item))
        if (isObj(fields)) groups.set(parent, [...(groups.get(parent) ?? []), fields]);
  const descs = isObj(descriptions) ? descriptions : {};
  for (const [parent, occurrences] of groups) {
    const names: string[] = [];
    const choices = new Map<string, string[]>();
    const lists = new Set<string>();
    for (const occ of occurrences)
      for (const [f, v] of Object.entries(occ)) {
        if (!names.includes(f)) names.push(f);
        if (isObj(v) && Array.isArray(v.choices)) choices.set(f, strings(v.choices));
        if (Array.isArray(v) || (isObj(v) && Array.isArray(v.value))) lists.add(f);
      }
    if (!names.length) continue;
    const pd = isObj(descs[parent]) ? (descs[parent] as Record<string, unknown>) : {};
    ex.schema.structures.push({
      name: parent,
      fields: names.map((name) => ({
        name,
        dtype: lists.has(name) ? ('list' as const) : ('str' as const),
        ...(typeof pd[name] === 'string' && pd[name] ? { description: pd[name] as string } : {}),
        ...(choices.get(name)?.length ? { choices: choices.get(name) } : {}),
      })),
    });
    const seen = new Set<string>();
    const instances: Map<string, FieldValue>[] = [];
    for (const occ of occurrences) {
      const inst = new Map<string, FieldValue>();
      for (const name of names) {
        const v = occ[name];
        const value: FieldValue =
          isObj(v) && 'value' in v ? { choices: strings(v.value) } : { mentions: strings(v) };
        if ('choices' in value ? value.choices.length : value.mentions.length) inst.set(name, value);
      }
      const key = JSON.stringify(names.map((n) => inst.get(n) ?? null));
      if (!inst.size || seen.has(key)) continue; // empty instances do not count (count 0 when all are)
      seen.add(key);
      instances.push(inst);
    }
    ex.structures.set(parent, instances);
  }
}

export interface SegTarget {
  kind: 0 | 1;
  M: number;
  count: number;
  countLoss: boolean;
  /** classification: softmax cross-entropy over the segment's labels instead of a BCE per label */
  softmax?: boolean;
  /** positions (relative to the sample) of [P] then each marker */
  rows: Int32Array;
  /** (t, m, i, k) quadruples */
  pos: number[];
  clsY?: Float32Array;
}

export interface Featurized {
  f: Formatted;
  segs: SegTarget[];
}

/** Label set of NER-like records (sorted, stable). */
export function entityLabels(records: DataRecord[]): string[] {
  const s = new Set<string>();
  for (const r of records) if (r.kind === 'ner' || r.kind === 'relations') for (const e of r.entities) s.add(e.label);
  return [...s].sort();
}

/** Relation types of the relation records (sorted, stable). */
export function relationLabelsOf(records: DataRecord[]): string[] {
  const s = new Set<string>();
  for (const r of records) if (r.kind === 'relations') for (const x of r.relations) s.add(x.label);
  return [...s].sort();
}

export function classLabels(records: DataRecord[]): string[] {
  const s = new Set<string>();
  for (const r of records) if (r.kind === 'classification') for (const l of r.labels) s.add(l);
  return [...s].sort();
}

const entitySpecs = (labels: string[]) => labels.map((name) => ({ name, dtype: 'list' as const }));

/**
 * Converts records to examples. `labels` fixes the entity label set (so every example asks for
 * every label and unlabeled mentions are negatives), `classes` the classification label set,
 * `relationLabels` the relation types every relation record asks for (default: those of `records`;
 * a type without a relation in the record is a count-0 task, which trains the count head to 0 as
 * spec §5.4 recommends; the library asks only for the types present, so its count head never sees 0).
 */
export function recordsToExamples(
  records: DataRecord[],
  labels: string[],
  classes: string[] = [],
  task = CLASSIFICATION_TASK,
  relationLabels: string[] = relationLabelsOf(records),
): EncoderExample[] {
  const out: EncoderExample[] = [];
  for (const r of records) {
    const ex: EncoderExample = {
      text: '', schema: { structures: [], relations: [], classifications: [] },
      entities: new Map(), relations: new Map(), classes: new Map(), structures: new Map(),
    };
    if (r.kind === 'ner' || r.kind === 'relations') {
      ex.text = r.text;
      ex.schema.entities = entitySpecs(labels);
      for (const l of labels) ex.entities.set(l, []);
      for (const e of r.entities) ex.entities.get(e.label)?.push({ start: e.start, end: e.end });
      if (r.kind === 'relations') {
        // every relation type of the data, like the entity labels: absent types are count-0 tasks
        ex.schema.relations = relationLabels.map((name) => ({ name }));
        for (const x of r.relations) {
          const h = r.entities[x.head];
          const t = r.entities[x.tail];
          if (!h || !t) continue;
          const list = ex.relations.get(x.label) ?? [];
          list.push({ head: { start: h.start, end: h.end }, tail: { start: t.start, end: t.end } });
          ex.relations.set(x.label, list);
        }
      }
    } else if (r.kind === 'classification') {
      ex.text = r.text;
      ex.schema.classifications = [{ task, labels: classes.slice(), multiLabel: r.multiLabel, clsThreshold: 0.5, classAct: 'auto' }];
      ex.classes.set(task, r.labels);
    } else if (r.kind === 'gliner2') {
      ex.text = r.text;
      const o = r.output;
      const ents = o.entities as Record<string, string[]> | undefined;
      if (ents && typeof ents === 'object') {
        const names = Object.keys(ents);
        ex.schema.entities = entitySpecs(names);
        for (const n of names) ex.entities.set(n, (Array.isArray(ents[n]) ? ents[n] : []).filter((m) => typeof m === 'string'));
      }
      const cls = o.classifications as { task: string; labels: string[]; true_label: string | string[]; multi_label?: boolean }[] | undefined;
      for (const c of Array.isArray(cls) ? cls : []) {
        const truth = Array.isArray(c.true_label) ? c.true_label : [c.true_label];
        ex.schema.classifications.push({ task: c.task, labels: c.labels.slice(), multiLabel: c.multi_label ?? truth.length > 1, clsThreshold: 0.5, classAct: 'auto' });
        ex.classes.set(c.task, truth);
      }
      const rels = o.relations as Record<string, { head: string; tail: string }>[] | undefined;
      for (const item of Array.isArray(rels) ? rels : []) {
        for (const [name, v] of Object.entries(item)) {
          if (!v || typeof v.head !== 'string' || typeof v.tail !== 'string') continue;
          if (!ex.relations.has(name)) {
            ex.relations.set(name, []);
            ex.schema.relations.push({ name });
          }
          ex.relations.get(name)!.push({ head: v.head, tail: v.tail });
        }
      }
      addStructures(ex, o.json_structures, o.json_descriptions);
      const sc = ex.schema;
      if (!sc.entities && !sc.classifications.length && !sc.relations.length && !sc.structures.length) continue;
    } else {
      continue;
    }
    out.push(ex);
  }
  return out;
}

/** All word spans (i, k) of a mention in the formatted input (word indices include the prefix). */
function matchMention(f: Formatted, m: Mention, K: number): [number, number][] {
  const P = f.prefix.length;
  if (typeof m !== 'string') {
    let i = -1;
    let j = -1;
    for (let w = 0; w < f.words.length; w++) {
      if (f.end[w] > m.start && f.start[w] < m.end) {
        if (i < 0) i = w;
        j = w;
      }
    }
    if (i < 0 || j - i >= K) return [];
    return [[P + i, j - i]];
  }
  const q = splitWords(m).tokens;
  if (!q.length || q.length > K) return [];
  const res: [number, number][] = [];
  for (let w = 0; w + q.length <= f.words.length; w++) {
    let ok = true;
    for (let x = 0; x < q.length && ok; x++) ok = f.words[w + x] === q[x];
    if (ok) res.push([P + w, q.length - 1]);
  }
  return res;
}

/** One example formatted and its loss targets; `labels`: the model's label prompt (label-isolation.ts; a flag left out
 * is off). */
export async function featurize(
  tok: EncoderTokenizer, ex: EncoderExample, K: number, maxWords?: number, wordFeatures?: WordFeatures | null,
  labels: Partial<LabelPrompt> = {}, classificationLoss: ClassificationLoss = 'bce',
  resegment?: FormatOptions['resegment'],
): Promise<Featurized> {
  const { isolation: labelIsolation = false, bag: labelBag = false } = labels;
  const opts = { maxWords, wordFeatures, labelIsolation, labelBag, resegment };
  const f = await formatInput(tok, ex.text, ex.schema, opts);
  const segs: SegTarget[] = f.segments.map((s, si) => {
    const rows = f.specialPos[si];
    const M = s.names.length;
    if (s.kind === 'classification') {
      const truth = new Set(ex.classes.get(s.name) ?? []);
      const single = !ex.schema.classifications.find((c) => c.task === s.name)?.multiLabel;
      const softmax = classificationLoss === 'softmax' && single;
      const clsY = Float32Array.from(s.names, (n) => (truth.has(n) ? 1 : 0));
      return { kind: 1, M, count: 0, countLoss: false, softmax, rows, pos: [], clsY };
    }
    const pos: number[] = [];
    if (s.kind === 'entities') {
      s.names.forEach((label, m) => {
        for (const mention of ex.entities.get(label) ?? []) for (const [i, k] of matchMention(f, mention, K)) pos.push(0, m, i, k);
      });
      // count 1 (spec §5.2); trained in the count loss too, so a fresh model learns to open the entity task
      return { kind: 0, M, count: 1, countLoss: true, rows, pos };
    }
    if (s.kind === 'relation') {
      const seen = new Set<string>();
      let t = 0;
      for (const { head, tail } of ex.relations.get(s.name) ?? []) {
        const h = matchMention(f, head, K);
        const tl = matchMention(f, tail, K);
        if (!h.length || !tl.length) continue;
        const key = JSON.stringify([h[0], tl[0]]);
        if (seen.has(key) || t >= 19) continue;
        seen.add(key);
        for (const [i, k] of h) pos.push(t, 0, i, k);
        for (const [i, k] of tl) pos.push(t, 1, i, k);
        t++;
      }
      return { kind: 0, M, count: t, countLoss: true, rows, pos };
    }
    if (s.kind === 'structure') {
      const instances = (ex.structures.get(s.name) ?? []).slice(0, 19); // counts above 19 are capped (spec §5.4)
      const P = f.prefix.length;
      instances.forEach((inst, t) => {
        s.names.forEach((field, m) => {
          const v = inst.get(field);
          if (!v) return;
          if ('mentions' in v) {
            for (const mention of v.mentions) for (const [i, k] of matchMention(f, mention, K)) pos.push(t, m, i, k);
            return;
          }
          for (const c of v.choices)
            for (let i = 0; i < P; i++) if (f.prefix[i].toLowerCase() === c.toLowerCase()) pos.push(t, m, i, 0);
        });
      });
      return { kind: 0, M, count: instances.length, countLoss: true, rows, pos };
    }
    return { kind: 0, M, count: 0, countLoss: true, rows, pos };
  });
  return { f, segs };
}

/** Packs featurized samples into one native micro-batch (padding to the longest). */
export function collate(items: Featurized[]): EncoderBatch {
  const KF = items[0]?.f.feats ? items[0].f.feats.length / Math.max(1, items[0].f.ids.length) : 0;
  const inputs = padInputs(items.map((it) => it.f), KF, items.some((it) => it.f.groups));
  const { B, N } = inputs;
  const woff = new Int32Array(B + 1);
  const wordRows: number[] = [];
  const wordEnd: number[] = [];
  const segSample: number[] = [];
  const segKind: number[] = [];
  const segM: number[] = [];
  const segCount: number[] = [];
  const segCountLoss: number[] = [];
  const segSoftmax: number[] = [];
  const segRows: number[] = [];
  const pos: number[] = [];
  const clsY: number[] = [];
  items.forEach((it, b) => {
    for (const p of it.f.wordPos) wordRows.push(b * N + p);
    for (const e of it.f.wordEnd) wordEnd.push(b * N + e);
    woff[b + 1] = wordRows.length;
    for (const s of it.segs) {
      const si = segSample.length;
      segSample.push(b);
      segKind.push(s.kind);
      segM.push(s.M);
      segCount.push(s.count);
      segCountLoss.push(s.countLoss ? 1 : 0);
      segSoftmax.push(s.softmax ? 1 : 0);
      for (const r of s.rows) segRows.push(b * N + r);
      for (let q = 0; q < s.pos.length; q += 4) pos.push(si, s.pos[q], s.pos[q + 1], s.pos[q + 2], s.pos[q + 3]);
      if (s.clsY) clsY.push(...s.clsY);
    }
  });
  return {
    ...inputs,
    woff,
    wordRows: Int32Array.from(wordRows),
    wordEnd: Int32Array.from(wordEnd),
    segSample: Int32Array.from(segSample),
    segKind: Int32Array.from(segKind),
    segM: Int32Array.from(segM),
    segCount: Int32Array.from(segCount),
    segCountLoss: Uint8Array.from(segCountLoss),
    segSoftmax: Uint8Array.from(segSoftmax),
    segRows: Int32Array.from(segRows),
    pos: Int32Array.from(pos),
    clsY: Float32Array.from(clsY),
  };
}

/** Uniform [0, 1) source (InitRng.uniform). */
export interface Uniform {
  uniform(): number;
}

/** Partial Fisher-Yates, in place: xs[0 .. min(k, xs.length)) become a uniform draw without replacement from xs (one
 * draw each). */
export function drawFirst<T>(xs: T[], k: number, rng: Uniform): void {
  for (let i = 0; i < k && i < xs.length; i++) {
    const j = i + Math.floor(rng.uniform() * (xs.length - i));
    [xs[i], xs[j]] = [xs[j]!, xs[i]!];
  }
}

/**
 * Negative label sampling for many-label classification: each classification task keeps its true
 * labels plus `k` labels drawn at random from the others, in a random order (so a label's place in
 * the prompt says nothing about it). Tasks with at most (positives + k) labels are left as they are.
 * The prompt, and so the step's cost, shrinks from every label to (positives + k); the model is
 * served with the full label set.
 */
export function sampleNegativeLabels(
  ex: EncoderExample, k: number, rng: Uniform, hard?: { confusion: LabelConfusion; ratio: number },
): EncoderExample {
  if (!ex.schema.classifications.some((c) => c.labels.length > (ex.classes.get(c.task)?.length ?? 0) + k)) return ex;
  const classifications = ex.schema.classifications.map((c) => {
    const truth = new Set(ex.classes.get(c.task) ?? []);
    if (c.labels.length <= truth.size + k) return c;
    const neg = c.labels.filter((l) => !truth.has(l));
    // a single-label task of the confusion's label set: part of the negatives by the labels it is confused with
    const mined = hard && hard.ratio > 0 && truth.size === 1 && !c.multiLabel && c.task === CLASSIFICATION_TASK;
    if (mined) neg.splice(0, neg.length, ...hard.confusion.pick([...truth][0]!, neg, k, hard.ratio, rng));
    else drawFirst(neg, k, rng);
    const labels = [...c.labels.filter((l) => truth.has(l)), ...neg.slice(0, k)];
    for (let i = labels.length - 1; i > 0; i--) {
      const j = Math.floor(rng.uniform() * (i + 1));
      [labels[i], labels[j]] = [labels[j], labels[i]];
    }
    return { ...c, labels };
  });
  return { ...ex, schema: { ...ex.schema, classifications } };
}

/**
 * Every label of each classification task, in a random order: the long prompt a model is served with, without a fixed
 * place per label (a model trained on one order learns the places, not the labels).
 */
export function shuffleLabels(ex: EncoderExample, rng: Uniform): EncoderExample {
  const classifications = ex.schema.classifications.map((c) => {
    const labels = c.labels.slice();
    for (let i = labels.length - 1; i > 0; i--) {
      const j = Math.floor(rng.uniform() * (i + 1));
      [labels[i], labels[j]] = [labels[j], labels[i]];
    }
    return { ...c, labels };
  });
  return { ...ex, schema: { ...ex.schema, classifications } };
}

/**
 * Word dropout: each word of the text (not the prompt, not the choice prefix) has all its pieces
 * replaced by `unkId` with probability p. Returns a copy; the targets are unchanged.
 */
export function dropWords(it: Featurized, p: number | WordDropout, unkId: number, rng: Uniform): Featurized {
  if (typeof p === 'number' && p <= 0) return it;
  const ids = it.f.ids.slice();
  const first = it.f.prefix.length;
  for (let w = first; w < it.f.wordPos.length; w++) {
    const pw = typeof p === 'number' ? p : p(it.f.words[w - first]);
    if (rng.uniform() < pw) ids.fill(unkId, it.f.wordPos[w], it.f.wordEnd[w]);
  }
  return { f: { ...it.f, ids }, segs: it.segs };
}

/** The probability that a (lower-cased) text word is dropped. */
export type WordDropout = (word: string) => number;

/** Word dropout that drops the training data's rare words more often: a word seen at most `maxCount` times in
 * `texts` with probability `rare`, any other with `p` (Lample et al. 2016 replace singletons with UNK at 0.5, so that
 * the model learns what unknown words in context are: most of a dev split's names are unseen). */
export function rareWordDropout(texts: string[], p: number, rare: number, maxCount = 1): WordDropout {
  const counts = new Map<string, number>();
  for (const t of texts) for (const w of splitWords(preprocessText(t)).tokens) counts.set(w, (counts.get(w) ?? 0) + 1);
  return (w) => ((counts.get(w) ?? 0) <= maxCount ? Math.max(p, rare) : p);
}
