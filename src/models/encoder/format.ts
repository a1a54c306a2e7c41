// Input formatting (spec §3): schema segments, choice prefix, processor tokens, sub-word ids and the
// routing positions (first piece of each text word; [P] and marker pieces of each segment).
import type { Schema } from './schema.ts';
import type { EncoderTokenizer } from './tokenizer.ts';
import { preprocessText, splitWords } from './words.ts';
import { wordFeatureIds, type WordFeatures } from './word-features.ts';
import { batchLabelBags, type LabelBags } from './label-isolation.ts';

export type TaskKind = 'entities' | 'structure' | 'relation' | 'classification';

export interface Segment {
  kind: TaskKind;
  /** structure / relation / classification name; "entities" for the entity segment */
  name: string;
  /** field / label names in prompt order (what the markers stand for) */
  names: string[];
  tokens: string[];
}

export interface Formatted {
  /** text after the reference preprocessing ("." appended when needed) */
  text: string;
  segments: Segment[];
  /** choice-prefix tokens (not lower-cased) */
  prefix: string[];
  /** lower-cased words of the text */
  words: string[];
  /** UTF-16 offsets of the words in `text` */
  start: number[];
  end: number[];
  processorTokens: string[];
  ids: Int32Array;
  /** sub-word position of the first piece of each text token (prefix + words) */
  wordPos: Int32Array;
  /** exclusive end of each text token's pieces (wordEnd[i] === wordPos[i] for a token with no pieces) */
  wordEnd: Int32Array;
  /** per segment: positions of [P] then each marker */
  specialPos: Int32Array[];
  /** word-feature rows of each piece ((ids.length × columns), -1 = none), when asked for (word-features.ts) */
  feats?: Int32Array;
  /** label-isolation group of each piece (ids.length): 0 shared, g >= 1 the g-th classification label's `[L]` and
   * words, counted over the classification segments in order; when asked for (label-isolation.ts) */
  groups?: Int32Array;
  /** label bags (label-isolation.ts): a classification label's name pieces, on its `[L]` row; when asked for */
  labelBags?: LabelBags;
}

/** B formatted inputs right-padded to the longest, N tokens: what the encoder's forward (served) and the training
 * step take. */
export interface PaddedInputs {
  B: number;
  N: number;
  /** (B, N) piece ids, 0 past an input's end */
  ids: Int32Array;
  /** (B, N) 1 on an input's pieces */
  mask: Uint8Array;
  /** (B, N, KF) word-feature rows, -1 = none; when KF > 0 */
  feats?: Int32Array;
  /** (B, N) label-isolation groups, 0 on padding; when asked for */
  groups?: Int32Array;
  /** (B, N, cols) label bags (batchLabelBags); when an input has them */
  bags?: Int32Array;
}

/** Pads `fs` to one (B, N) batch, with KF word-feature columns and label groups when `groups`. */
export function padInputs(fs: readonly Formatted[], KF: number, groups: boolean): PaddedInputs {
  const B = fs.length;
  const N = Math.max(1, ...fs.map((f) => f.ids.length));
  const ids = new Int32Array(B * N);
  const mask = new Uint8Array(B * N);
  const feats = KF ? new Int32Array(B * N * KF).fill(-1) : undefined;
  const grp = groups ? new Int32Array(B * N) : undefined;
  fs.forEach((f, b) => {
    ids.set(f.ids, b * N);
    mask.fill(1, b * N, b * N + f.ids.length);
    if (feats && f.feats) feats.set(f.feats, b * N * KF);
    if (grp && f.groups) grp.set(f.groups, b * N);
  });
  const bags = batchLabelBags(fs.map((f) => f.labelBags), N);
  return { B, N, ids, mask, ...(feats ? { feats } : {}), ...(grp ? { groups: grp } : {}), ...(bags ? { bags } : {}) };
}

export interface FormatOptions {
  /** structure name → field order in the prompt (default: declaration order). For parity with the
   * reference, whose order comes from a Python set. */
  fieldPromptOrder?: Record<string, string[]>;
  /** keep only the first maxWords words of the text */
  maxWords?: number;
  /** the model's word features (fresh encoders): fills `feats` */
  wordFeatures?: WordFeatures | null;
  /** the model isolates classification labels (fresh encoders, label-isolation.ts): fills `groups` */
  labelIsolation?: boolean;
  /** the model reads a classification label as one `[L]` token with its name's pieces in a bag (label-isolation.ts):
   * the names take no tokens, and `labelBags` holds them */
  labelBag?: boolean;
  /** training only: a text word's pieces in place of the tokenizer's (piece dropout, src/training/encoder) */
  resegment?: (word: string, pieces: Int32Array) => Int32Array;
}

function withDescriptions(prompt: string, names: string[], descs: [string, string][]): string {
  const set = new Set(names);
  for (const [l, d] of descs) if (set.has(l)) prompt += ` [DESCRIPTION] ${l}: ${d}`;
  return prompt;
}

function segmentTokens(prompt: string, mark: string, names: string[]): string[] {
  const t = ['(', '[P]', prompt, '('];
  for (const n of names) t.push(mark, n);
  t.push(')', ')');
  return t;
}

/** Segments in the reference's processing order: structures, entities, relations, classifications. */
export function buildSegments(schema: Schema, opts: FormatOptions = {}): Segment[] {
  const segs: Segment[] = [];
  for (const s of schema.structures) {
    let names = s.fields.map((f) => f.name);
    const order = opts.fieldPromptOrder?.[s.name];
    if (order && order.length === names.length && order.every((n) => names.includes(n))) names = order.slice();
    const descs = s.fields.filter((f) => f.description).map((f) => [f.name, f.description!] as [string, string]);
    segs.push({ kind: 'structure', name: s.name, names, tokens: segmentTokens(withDescriptions(s.name, names, descs), '[C]', names) });
  }
  if (schema.entities) {
    const names = schema.entities.map((e) => e.name);
    const descs = schema.entities.filter((e) => e.description).map((e) => [e.name, e.description!] as [string, string]);
    segs.push({ kind: 'entities', name: 'entities', names, tokens: segmentTokens(withDescriptions('entities', names, descs), '[E]', names) });
  }
  for (const r of schema.relations) {
    const names = ['head', 'tail'];
    segs.push({ kind: 'relation', name: r.name, names, tokens: segmentTokens(r.name, '[R]', names) });
  }
  for (const c of schema.classifications) {
    let prompt = c.prompt ? `${c.task}: ${c.prompt}` : c.task;
    prompt = withDescriptions(prompt, c.labels, Object.entries(c.labelDescriptions ?? {}));
    const set = new Set(c.labels);
    for (const [inp, out] of c.examples ?? []) if (set.has(out)) prompt += ` [EXAMPLE] ${inp} [OUTPUT] ${out}`;
    segs.push({ kind: 'classification', name: c.task, names: c.labels.slice(), tokens: segmentTokens(prompt, '[L]', c.labels) });
  }
  return segs;
}

/** "(", "parent:", field, "(", c1, "|", c2, ")", ",", field2, ... ")" for structures with choice fields. */
export function choicePrefix(schema: Schema): string[] {
  const out: string[] = [];
  for (const s of schema.structures) {
    const cf = s.fields.filter((f) => f.choices && f.choices.length);
    if (!cf.length) continue;
    out.push('(', `${s.name}:`);
    cf.forEach((f, i) => {
      out.push(f.name, '(');
      f.choices!.forEach((c, j) => {
        if (j) out.push('|');
        out.push(c);
      });
      out.push(')');
      if (i < cf.length - 1) out.push(',');
    });
    out.push(')');
  }
  return out;
}

const SPECIAL = new Set(['[P]', '[C]', '[E]', '[R]', '[L]']);

export async function formatInput(tok: EncoderTokenizer, rawText: string, schema: Schema, opts: FormatOptions = {}): Promise<Formatted> {
  const text = preprocessText(rawText);
  const w = splitWords(text);
  if (opts.maxWords !== undefined && w.tokens.length > opts.maxWords) {
    w.tokens.length = opts.maxWords;
    w.start.length = opts.maxWords;
    w.end.length = opts.maxWords;
  }
  const segments = buildSegments(schema, opts);
  const prefix = choicePrefix(schema);
  const processorTokens: string[] = [];
  const segStart: number[] = [];
  segments.forEach((s, i) => {
    if (i) processorTokens.push('[SEP_STRUCT]');
    segStart.push(processorTokens.length);
    processorTokens.push(...s.tokens);
  });
  processorTokens.push('[SEP_TEXT]');
  const textStart = processorTokens.length;
  processorTokens.push(...prefix, ...w.tokens);

  const pieces = await tok.pieces(processorTokens);
  if (opts.resegment) {
    for (let i = textStart + prefix.length; i < processorTokens.length; i++) {
      pieces[i] = opts.resegment(processorTokens[i]!, pieces[i]!);
    }
  }
  // a classification segment's tokens: ( [P] prompt ( [L] name [L] name ... ) ); label k's [L] at labelAt(si, k)
  const labelAt = (si: number, k: number) => segStart[si]! + 4 + 2 * k;
  const named: [number, Int32Array][] = []; // label bags: the [L] token and its name's pieces
  if (opts.labelBag) {
    segments.forEach((s, si) => {
      if (s.kind !== 'classification') return;
      for (let k = 0; k < s.names.length; k++) {
        const t0 = labelAt(si, k);
        named.push([t0, pieces[t0 + 1]!]);
        pieces[t0 + 1] = new Int32Array(0);
      }
    });
  }
  let n = 0;
  for (const p of pieces) n += p.length;
  const ids = new Int32Array(n);
  const firstPos = new Int32Array(processorTokens.length);
  let pos = 0;
  pieces.forEach((p, i) => {
    firstPos[i] = pos; // a token with zero pieces points at the next piece (reference HEAD behaviour)
    ids.set(p, pos);
    pos += p.length;
  });
  const clamp = (x: number) => Math.min(x, Math.max(n - 1, 0));
  const nText = prefix.length + w.tokens.length;
  const wordPos = new Int32Array(nText);
  const wordEnd = new Int32Array(nText);
  for (let i = 0; i < nText; i++) {
    wordPos[i] = clamp(firstPos[textStart + i]);
    const end = textStart + i + 1 < processorTokens.length ? firstPos[textStart + i + 1] : n;
    wordEnd[i] = Math.max(wordPos[i], Math.min(end, n));
  }
  const specialPos = segments.map((s, si) => {
    const out: number[] = [];
    s.tokens.forEach((t, j) => {
      if (SPECIAL.has(t)) out.push(clamp(firstPos[segStart[si] + j]));
    });
    return Int32Array.from(out);
  });
  const f: Formatted = {
    text, segments, prefix, words: w.tokens, start: w.start, end: w.end,
    processorTokens, ids, wordPos, wordEnd, specialPos,
  };
  if (opts.wordFeatures) f.feats = wordFeatureIds(f, opts.wordFeatures);
  if (named.length) {
    const cols = Math.max(1, ...named.map(([, p]) => p.length));
    const bags = new Int32Array(n * cols).fill(-1);
    for (const [t0, p] of named) bags.set(p, firstPos[t0]! * cols);
    f.labelBags = { bags, cols };
  }
  if (opts.labelIsolation) {
    const groups = new Int32Array(n);
    let g = 0;
    segments.forEach((s, si) => {
      if (s.kind !== 'classification') return;
      for (let k = 0; k < s.names.length; k++) {
        const t0 = labelAt(si, k);
        const end = t0 + 2 < processorTokens.length ? firstPos[t0 + 2] : n;
        groups.fill(++g, firstPos[t0], end);
      }
    });
    f.groups = groups;
  }
  return f;
}
