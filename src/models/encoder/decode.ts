// Decoding (spec §4.5) from head outputs to per-task raw results, and the two JSON formats:
//   - the stable Loom `result` format (README "Encoder result format"), and
//   - the reference library's exact JSON (format: 'gliner2'), reproduced for parity tests.
// Offsets in raw results are UTF-16 indices into the preprocessed text.
import type { ClassificationSpec, Schema } from './schema.ts';
import type { Formatted } from './format.ts';
import { passesValidators } from './validators.ts';
import { codePointOffsets } from './words.ts';

export interface Span {
  text: string;
  conf: number;
  start: number;
  end: number;
}
export interface ChoiceValue {
  choice: string;
  conf: number;
}
export type FieldValue = null | Span | Span[] | ChoiceValue | ChoiceValue[];

export type RawTask =
  | { kind: 'entities'; count: number; labels: { name: string; dtype: 'list' | 'str'; spans: Span[] }[] }
  | { kind: 'structure'; name: string; count: number; fields: string[]; instances: Record<string, FieldValue>[] }
  | { kind: 'relation'; name: string; count: number; pairs: [Span, Span][] }
  | { kind: 'classification'; name: string; multi: boolean; labels: { label: string; conf: number }[] };

/** Per-segment head output for one sample. */
export interface SegmentScores {
  count: number;
  /** (count, M, W, K) probabilities */
  scores?: Float32Array;
  /** (M) classifier logits */
  cls?: Float32Array;
}

export interface DecodeOptions {
  threshold: number;
  /** 'reference': str fields / relation arguments take the earliest, shortest span above threshold
   * (reference quirk); 'best': the most confident one. */
  pick: 'reference' | 'best';
  K: number;
}

function findSpans(f: Formatted, sc: Float32Array, base: number, W: number, K: number, P: number, tau: number): Span[] {
  const T = f.words.length;
  const out: Span[] = [];
  for (let i = 0; i < T; i++) {
    const row = base + (P + i) * K;
    for (let k = 0; k < K && i + k < T; k++) {
      const s = sc[row + k];
      if (s >= tau) {
        const start = f.start[i];
        const end = f.end[i + k];
        const text = f.text.slice(start, end).trim();
        if (text) out.push({ text, conf: s, start, end });
      }
    }
  }
  return out;
}

/** Greedy flat decoding: by confidence, drop spans overlapping a kept one. */
function finalize(spans: Span[], dtype: 'list' | 'str'): Span[] {
  const sorted = spans.slice().sort((a, b) => b.conf - a.conf || a.start - b.start || a.end - b.end);
  const kept: Span[] = [];
  for (const s of sorted) {
    if (kept.some((k) => s.start < k.end && k.start < s.end)) continue;
    kept.push(s);
    if (dtype === 'str') break;
  }
  return kept;
}

function pickOne(spans: Span[], pick: 'reference' | 'best'): Span | null {
  if (!spans.length) return null;
  if (pick === 'reference') return spans[0];
  return spans.reduce((a, b) => (b.conf > a.conf ? b : a));
}

function classify(c: ClassificationSpec, logits: Float32Array): { label: string; conf: number }[] {
  const act = c.classAct === 'auto' ? (c.multiLabel ? 'sigmoid' : 'softmax') : c.classAct;
  let probs: number[];
  if (act === 'sigmoid') probs = Array.from(logits, (x) => 1 / (1 + Math.exp(-x)));
  else {
    const mx = Math.max(...logits);
    const e = Array.from(logits, (x) => Math.exp(x - mx));
    const s = e.reduce((a, b) => a + b, 0);
    probs = e.map((x) => x / s);
  }
  let best = 0;
  for (let i = 1; i < probs.length; i++) if (probs[i] > probs[best]) best = i;
  if (c.multiLabel) {
    const sel = c.labels.map((label, i) => ({ label, conf: probs[i] })).filter((x) => x.conf >= c.clsThreshold);
    return sel.length ? sel : [{ label: c.labels[best], conf: probs[best] }];
  }
  return [{ label: c.labels[best], conf: probs[best] }];
}

/** Decodes one sample: segments of `f` in order, with their head outputs. */
export function decodeSample(f: Formatted, schema: Schema, outs: SegmentScores[], opts: DecodeOptions): RawTask[] {
  const K = opts.K;
  const P = f.prefix.length;
  const W = P + f.words.length;
  const tasks: RawTask[] = [];
  let si = 0;
  for (const seg of f.segments) {
    const o = outs[si++];
    const M = seg.names.length;
    const plane = W * K; // one (t, m) slice
    if (seg.kind === 'classification') {
      const c = schema.classifications.find((x) => x.task === seg.name)!;
      tasks.push({ kind: 'classification', name: c.task, multi: c.multiLabel, labels: classify(c, o.cls!) });
    } else if (seg.kind === 'entities') {
      const ents = schema.entities!;
      const labels: { name: string; dtype: 'list' | 'str'; spans: Span[] }[] = [];
      if (o.count > 0) {
        for (const e of ents) {
          const m = seg.names.indexOf(e.name);
          const spans = findSpans(f, o.scores!, m * plane, W, K, P, e.threshold ?? opts.threshold);
          labels.push({ name: e.name, dtype: e.dtype, spans: finalize(spans, e.dtype) });
        }
      }
      tasks.push({ kind: 'entities', count: o.count, labels });
    } else if (seg.kind === 'structure') {
      const s = schema.structures.find((x) => x.name === seg.name)!;
      const instances: Record<string, FieldValue>[] = [];
      for (let t = 0; t < o.count; t++) {
        const inst: Record<string, FieldValue> = {};
        let any = false;
        for (const fld of s.fields) {
          const m = seg.names.indexOf(fld.name);
          const base = (t * M + m) * plane;
          const tau = fld.threshold ?? opts.threshold;
          let v: FieldValue;
          if (fld.choices && fld.choices.length) {
            // Width-0 score of the choice's token in the prefix (searched within this field's group).
            const vals: ChoiceValue[] = [];
            const group = choiceGroup(f.prefix, s.name, fld.name);
            for (const ch of fld.choices) {
              let idx = -1;
              for (let p = group[0]; p < group[1]; p++)
                if (f.prefix[p].toLowerCase() === ch.toLowerCase()) {
                  idx = p;
                  break;
                }
              if (idx < 0) continue;
              vals.push({ choice: ch, conf: o.scores![base + idx * K] });
            }
            if (fld.dtype === 'list') v = vals.filter((x) => x.conf >= tau);
            else {
              const best = vals.reduce<ChoiceValue | null>((a, b) => (a === null || b.conf > a.conf ? b : a), null);
              v = best && best.conf >= tau ? best : null;
            }
          } else {
            let spans = findSpans(f, o.scores!, base, W, K, P, tau);
            if (fld.validators) spans = spans.filter((sp) => passesValidators(sp.text, fld.validators));
            v = fld.dtype === 'list' ? finalize(spans, 'list') : pickOne(spans, opts.pick);
          }
          if (v !== null && !(Array.isArray(v) && v.length === 0)) any = true;
          inst[fld.name] = v;
        }
        if (any) instances.push(inst);
      }
      tasks.push({ kind: 'structure', name: s.name, count: o.count, fields: s.fields.map((x) => x.name), instances });
    } else {
      const r = schema.relations.find((x) => x.name === seg.name)!;
      const tau = r.threshold ?? opts.threshold;
      const pairs: [Span, Span][] = [];
      for (let t = 0; t < o.count; t++) {
        const head = pickOne(findSpans(f, o.scores!, (t * M + 0) * plane, W, K, P, tau), opts.pick);
        const tail = pickOne(findSpans(f, o.scores!, (t * M + 1) * plane, W, K, P, tau), opts.pick);
        if (head && tail) pairs.push([head, tail]);
      }
      tasks.push({ kind: 'relation', name: r.name, count: o.count, pairs });
    }
  }
  return tasks;
}

/** [begin, end) of the prefix tokens listing `field`'s choices inside structure `parent`'s group. */
function choiceGroup(prefix: string[], parent: string, field: string): [number, number] {
  let p = 0;
  while (p < prefix.length) {
    // group: "(", "parent:", f1, "(", ..., ")", [",", f2, "(", ..., ")"]*, ")"
    const name = prefix[p + 1];
    let q = p + 2;
    while (q < prefix.length && prefix[q] !== ')') {
      const f = prefix[q];
      const open = q + 1;
      let close = open + 1;
      while (close < prefix.length && prefix[close] !== ')') close++;
      if (name === `${parent}:` && f === field) return [open + 1, close];
      q = close + 1;
      if (prefix[q] === ',') q++;
    }
    p = q + 1;
  }
  return [0, prefix.length];
}

// ------------------------------------------------------------------------------------------------
// Output formats
// ------------------------------------------------------------------------------------------------

export interface FormatFlags {
  includeConfidence: boolean;
  includeSpans: boolean;
}

/** The reference library's JSON (format_results=True), offsets in code points. */
export function toReferenceJson(tasks: RawTask[], f: Formatted, flags: FormatFlags): Record<string, unknown> {
  const cp = codePointOffsets(f.text);
  const span = (s: Span): unknown => {
    if (!flags.includeConfidence && !flags.includeSpans) return s.text;
    const o: Record<string, unknown> = { text: s.text };
    if (flags.includeConfidence) o.confidence = s.conf;
    if (flags.includeSpans) {
      o.start = cp(s.start);
      o.end = cp(s.end);
    }
    return o;
  };
  const choice = (c: ChoiceValue): unknown => (flags.includeConfidence ? { text: c.choice, confidence: c.conf } : c.choice);
  const out: Record<string, unknown> = {};
  let rel: Record<string, unknown> | undefined;
  for (const t of tasks) {
    if (t.kind === 'entities') {
      const e: Record<string, unknown> = {};
      for (const l of t.labels) e[l.name] = l.dtype === 'str' ? (l.spans.length ? span(l.spans[0]) : null) : l.spans.map(span);
      out.entities = e;
    } else if (t.kind === 'structure') {
      if (t.count === 0) out[t.name] = {};
      else
        out[t.name] = t.instances.map((inst) => {
          const o: Record<string, unknown> = {};
          for (const k of t.fields) {
            const v = inst[k];
            if (v === null) o[k] = null;
            else if (Array.isArray(v)) o[k] = (v as (Span | ChoiceValue)[]).map((x) => ('choice' in x ? choice(x) : span(x)));
            else o[k] = 'choice' in v ? choice(v) : span(v);
          }
          return o;
        });
    } else if (t.kind === 'relation') {
      rel ??= {};
      rel[t.name] = t.pairs.map(([h, tl]) =>
        !flags.includeConfidence && !flags.includeSpans ? [h.text, tl.text] : { head: span(h), tail: span(tl) },
      );
    } else {
      const lab = (x: { label: string; conf: number }) => (flags.includeConfidence ? { label: x.label, confidence: x.conf } : x.label);
      out[t.name] = t.multi ? t.labels.map(lab) : lab(t.labels[0]);
    }
  }
  if (rel) out.relation_extraction = rel;
  return out;
}

export interface EntityOut {
  text: string;
  confidence?: number;
  start?: number;
  end?: number;
}
export interface ChoiceOut {
  text: string;
  confidence?: number;
}
export interface LabelOut {
  label: string;
  confidence?: number;
}
export interface ExtractResult {
  entities?: Record<string, EntityOut[] | EntityOut | null>;
  classifications?: Record<string, LabelOut | LabelOut[]>;
  structures?: Record<string, Record<string, EntityOut | ChoiceOut | null | (EntityOut | ChoiceOut)[]>[]>;
  relations?: Record<string, { head: EntityOut; tail: EntityOut }[]>;
}

/**
 * The stable Loom result. Offsets are UTF-16 indices into the caller's string (end exclusive);
 * spans reaching into the "." the reference appends are clipped to the caller's text.
 */
export function toResult(tasks: RawTask[], origLen: number, orig: string, flags: FormatFlags): ExtractResult {
  const span = (s: Span): EntityOut | null => {
    let { start, end, text } = s;
    if (end > origLen) {
      end = origLen;
      if (start >= end) return null;
      const raw = orig.slice(start, end);
      text = raw.trim();
      if (!text) return null;
    }
    const o: EntityOut = { text };
    if (flags.includeConfidence) o.confidence = s.conf;
    if (flags.includeSpans) {
      o.start = start;
      o.end = end;
    }
    return o;
  };
  const spans = (l: Span[]) => l.map(span).filter((x): x is EntityOut => x !== null);
  const choice = (c: ChoiceValue): ChoiceOut => (flags.includeConfidence ? { text: c.choice, confidence: c.conf } : { text: c.choice });
  const r: ExtractResult = {};
  for (const t of tasks) {
    if (t.kind === 'entities') {
      r.entities = {};
      // Fixed quirk: a count of 0 still lists every label (empty), same shape as any other answer.
      if (t.count === 0) for (const e of t.labels) r.entities[e.name] = [];
      for (const l of t.labels) r.entities[l.name] = l.dtype === 'str' ? (spans(l.spans)[0] ?? null) : spans(l.spans);
    } else if (t.kind === 'structure') {
      r.structures ??= {};
      r.structures[t.name] = t.instances.map((inst) => {
        const o: Record<string, EntityOut | ChoiceOut | null | (EntityOut | ChoiceOut)[]> = {};
        for (const k of t.fields) {
          const v = inst[k];
          if (v === null) o[k] = null;
          else if (Array.isArray(v))
            o[k] = (v as (Span | ChoiceValue)[]).map((x) => ('choice' in x ? choice(x) : span(x))).filter((x): x is EntityOut => x !== null);
          else o[k] = 'choice' in v ? choice(v) : span(v);
        }
        return o;
      });
    } else if (t.kind === 'relation') {
      r.relations ??= {};
      const seen = new Set<string>();
      const list: { head: EntityOut; tail: EntityOut }[] = [];
      for (const [h, tl] of t.pairs) {
        // Fixed quirk: identical (head, tail) pairs from different instance slots are reported once.
        const key = `${h.start}:${h.end}:${tl.start}:${tl.end}`;
        if (seen.has(key)) continue;
        seen.add(key);
        const hh = span(h);
        const tt = span(tl);
        if (hh && tt) list.push({ head: hh, tail: tt });
      }
      r.relations[t.name] = list;
    } else {
      r.classifications ??= {};
      const lab = (x: { label: string; conf: number }): LabelOut => (flags.includeConfidence ? { label: x.label, confidence: x.conf } : { label: x.label });
      r.classifications[t.name] = t.multi ? t.labels.map(lab) : lab(t.labels[0]);
    }
  }
  // Stable key order: entities, classifications, structures, relations.
  const ordered: ExtractResult = {};
  if (r.entities) ordered.entities = r.entities;
  if (r.classifications) ordered.classifications = r.classifications;
  if (r.structures) ordered.structures = r.structures;
  if (r.relations) ordered.relations = r.relations;
  return ordered;
}
