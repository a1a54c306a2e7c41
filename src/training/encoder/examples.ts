// Training examples for GLiNER2 span models: dataset records → (text, schema, gold targets) →
// formatted inputs with span / count / classification targets (spec §5.1, §5.2) → native batches.
//
// Label construction: NER and relation records carry character offsets, which are mapped to word
// spans exactly (first and last word overlapping the offsets); GLiNER2-format records give mention
// strings, matched as lower-cased word sub-sequences (all occurrences, spec §5.2). Spans wider than
// K words cannot be represented and are dropped. Entities: one task, count 1 (instance 0 holds every
// mention). Relations: instances = unique (head, tail) pairs, count = #instances. Classification:
// multi-hot over the label list.
import type { DataRecord } from '../data/formats.ts';
import type { Schema } from '../../models/encoder/schema.ts';
import { formatInput, type Formatted } from '../../models/encoder/format.ts';
import type { EncoderTokenizer } from '../../models/encoder/tokenizer.ts';
import { splitWords } from '../../models/encoder/words.ts';
import type { EncoderBatch } from '../native.ts';

type Mention = { start: number; end: number } | string;

export interface EncoderExample {
  text: string;
  schema: Schema;
  entities: Map<string, Mention[]>;
  relations: Map<string, { head: Mention; tail: Mention }[]>;
  classes: Map<string, string[]>;
}

export interface SegTarget {
  kind: 0 | 1;
  M: number;
  count: number;
  countLoss: boolean;
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

export function classLabels(records: DataRecord[]): string[] {
  const s = new Set<string>();
  for (const r of records) if (r.kind === 'classification') for (const l of r.labels) s.add(l);
  return [...s].sort();
}

const entitySpecs = (labels: string[]) => labels.map((name) => ({ name, dtype: 'list' as const }));

/**
 * Converts records to examples. `labels` fixes the entity label set (so every example asks for
 * every label and unlabeled mentions are negatives), `classes` the classification label set.
 */
export function recordsToExamples(records: DataRecord[], labels: string[], classes: string[] = [], task = 'category'): EncoderExample[] {
  const out: EncoderExample[] = [];
  for (const r of records) {
    const ex: EncoderExample = { text: '', schema: { structures: [], relations: [], classifications: [] }, entities: new Map(), relations: new Map(), classes: new Map() };
    if (r.kind === 'ner' || r.kind === 'relations') {
      ex.text = r.text;
      ex.schema.entities = entitySpecs(labels);
      for (const l of labels) ex.entities.set(l, []);
      for (const e of r.entities) ex.entities.get(e.label)?.push({ start: e.start, end: e.end });
      if (r.kind === 'relations') {
        const names = [...new Set(r.relations.map((x) => x.label))].sort();
        ex.schema.relations = names.map((name) => ({ name }));
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
      if (!ex.schema.entities && !ex.schema.classifications.length && !ex.schema.relations.length) continue;
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

export async function featurize(tok: EncoderTokenizer, ex: EncoderExample, K: number, maxWords?: number): Promise<Featurized> {
  const f = await formatInput(tok, ex.text, ex.schema, { maxWords });
  const segs: SegTarget[] = f.segments.map((s, si) => {
    const rows = f.specialPos[si];
    const M = s.names.length;
    if (s.kind === 'classification') {
      const truth = new Set(ex.classes.get(s.name) ?? []);
      return { kind: 1, M, count: 0, countLoss: false, rows, pos: [], clsY: Float32Array.from(s.names, (n) => (truth.has(n) ? 1 : 0)) };
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
    return { kind: 0, M, count: 0, countLoss: true, rows, pos };
  });
  return { f, segs };
}

/** Packs featurized samples into one native micro-batch (padding to the longest). */
export function collate(items: Featurized[]): EncoderBatch {
  const B = items.length;
  const N = Math.max(1, ...items.map((it) => it.f.ids.length));
  const ids = new Int32Array(B * N);
  const mask = new Uint8Array(B * N);
  const woff = new Int32Array(B + 1);
  const wordRows: number[] = [];
  const segSample: number[] = [];
  const segKind: number[] = [];
  const segM: number[] = [];
  const segCount: number[] = [];
  const segCountLoss: number[] = [];
  const segRows: number[] = [];
  const pos: number[] = [];
  const clsY: number[] = [];
  items.forEach((it, b) => {
    ids.set(it.f.ids, b * N);
    mask.fill(1, b * N, b * N + it.f.ids.length);
    for (const p of it.f.wordPos) wordRows.push(b * N + p);
    woff[b + 1] = wordRows.length;
    for (const s of it.segs) {
      const si = segSample.length;
      segSample.push(b);
      segKind.push(s.kind);
      segM.push(s.M);
      segCount.push(s.count);
      segCountLoss.push(s.countLoss ? 1 : 0);
      for (const r of s.rows) segRows.push(b * N + r);
      for (let q = 0; q < s.pos.length; q += 4) pos.push(si, s.pos[q], s.pos[q + 1], s.pos[q + 2], s.pos[q + 3]);
      if (s.clsY) clsY.push(...s.clsY);
    }
  });
  return {
    B,
    N,
    ids,
    mask,
    woff,
    wordRows: Int32Array.from(wordRows),
    segSample: Int32Array.from(segSample),
    segKind: Int32Array.from(segKind),
    segM: Int32Array.from(segM),
    segCount: Int32Array.from(segCount),
    segCountLoss: Uint8Array.from(segCountLoss),
    segRows: Int32Array.from(segRows),
    pos: Int32Array.from(pos),
    clsY: Float32Array.from(clsY),
  };
}

/** Uniform [0, 1) source (InitRng.uniform). */
export interface Uniform {
  uniform(): number;
}

/**
 * Negative label sampling for many-label classification: each classification task keeps its true
 * labels plus `k` labels drawn at random from the others, in a random order (so a label's place in
 * the prompt says nothing about it). Tasks with at most (positives + k) labels are left as they are.
 * The prompt, and so the step's cost, shrinks from every label to (positives + k); the model is
 * served with the full label set.
 */
export function sampleNegativeLabels(ex: EncoderExample, k: number, rng: Uniform): EncoderExample {
  if (!ex.schema.classifications.some((c) => c.labels.length > (ex.classes.get(c.task)?.length ?? 0) + k)) return ex;
  const classifications = ex.schema.classifications.map((c) => {
    const truth = new Set(ex.classes.get(c.task) ?? []);
    if (c.labels.length <= truth.size + k) return c;
    const neg = c.labels.filter((l) => !truth.has(l));
    for (let i = 0; i < k; i++) {
      const j = i + Math.floor(rng.uniform() * (neg.length - i));
      [neg[i], neg[j]] = [neg[j], neg[i]];
    }
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
 * Word dropout: each word of the text (not the prompt, not the choice prefix) has all its pieces
 * replaced by `unkId` with probability p. Returns a copy; the targets are unchanged.
 */
export function dropWords(it: Featurized, p: number, unkId: number, rng: Uniform): Featurized {
  if (p <= 0) return it;
  const ids = it.f.ids.slice();
  for (let w = it.f.prefix.length; w < it.f.wordPos.length; w++)
    if (rng.uniform() < p) ids.fill(unkId, it.f.wordPos[w], it.f.wordEnd[w]);
  return { f: { ...it.f, ids }, segs: it.segs };
}
