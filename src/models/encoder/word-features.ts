// Word features of fresh GLiNER2 encoders (issue 17). GLiNER2 lower-cases every text word before
// tokenization (words.ts), so a model trained from scratch never sees capitalisation. A fresh model
// may carry a small table, `encoder.embeddings.word_feature_embeddings.weight` (rows, D), whose rows
// are added to the embedding of every sub-word piece of a text word before the embedding LayerNorm,
// chosen from the ORIGINAL (not lower-cased) word: its shape class and, optionally, hashed buckets
// of its lower-cased last three characters, of its lower-cased first three characters, and of its
// spaCy-style shape string ("Xxxxx", "dd.dd", "X.X."; spaCy's SHAPE, PREFIX and SUFFIX features).
// Config (one place): `word_features` in the GLiNER2 config.json, e.g.
//   "word_features": {"shape": true, "suffix_buckets": 1024, "prefix_buckets": 1024, "shape_buckets": 256}
// Rows: the shape classes first (SHAPE_CLASSES.length rows), then the suffix buckets, the prefix buckets and
// the shape-string buckets. Columns (ids per piece): one per enabled feature. Absent or null: no table,
// today's model exactly.
// Prompt tokens, markers and the choice prefix get no feature (-1).

export interface WordFeatures {
  /** one row per shape class (SHAPE_CLASSES) */
  shape: boolean;
  /** hashed lower-cased suffix-3 buckets (0 = none) */
  suffixBuckets: number;
  /** hashed lower-cased prefix-3 buckets (0 = none; absent in older configs) */
  prefixBuckets?: number;
  /** hashed shape-string buckets (0 = none; absent in older configs) */
  shapeBuckets?: number;
}

export const SHAPE_CLASSES = ['Xxxx', 'XXXX', 'xxxx', 'dd', 'alnum', 'punct', 'link', 'other'] as const;

/** The default of fresh models (`loom init-encoder`, the service's loom/gliner2-init-* bases): the shape classes.
 * CoNLL-2003 dev F1 in 8 minutes, tiny preset, side by side: none 0.442, shape 0.638, shape + 1024 suffix buckets
 * 0.682; but with the suffix rows a 6-intent Banking77 run fell from 0.33-0.40 to 0.20-0.21 accuracy (chance 0.167),
 * so the suffix stays opt-in (docs/training.md, "Word features"). */
export const DEFAULT_WORD_FEATURES: WordFeatures = { shape: true, suffixBuckets: 0 };

export class WordFeatureConfigError extends Error {
  override name = 'WordFeatureConfigError';
}

/** Reads `word_features` of a GLiNER2 config.json (undefined / null / false → none). */
export function parseWordFeatures(raw: unknown, where = 'config.json'): WordFeatures | null {
  if (raw === undefined || raw === null || raw === false) return null;
  if (typeof raw !== 'object' || Array.isArray(raw))
    throw new WordFeatureConfigError(`${where}: word_features must be an object`);
  const o = raw as Record<string, unknown>;
  const shape = o.shape ?? false;
  if (typeof shape !== 'boolean') throw new WordFeatureConfigError(`${where}: word_features.shape must be a boolean`);
  const buckets = (key: string): number => {
    const n = o[key] ?? 0;
    if (typeof n !== 'number' || !Number.isInteger(n) || n < 0 || n > 1 << 20)
      throw new WordFeatureConfigError(`${where}: word_features.${key} must be an integer in [0, 1048576]`);
    return n;
  };
  const sb = buckets('suffix_buckets');
  const pb = buckets('prefix_buckets');
  const hb = buckets('shape_buckets');
  if (!shape && !sb && !pb && !hb) return null;
  return { shape, suffixBuckets: sb, prefixBuckets: pb, shapeBuckets: hb };
}

export interface WordFeaturesConfig {
  shape: boolean;
  suffix_buckets: number;
  prefix_buckets?: number;
  shape_buckets?: number;
}

/** A command-line spec ("none", or a comma list of "shape", "suffix:N", "prefix:N" and "shapes:N") in the
 * config.json form. */
export function parseWordFeatureSpec(spec: string): WordFeaturesConfig | null {
  if (spec === 'none') return null;
  const wf: WordFeaturesConfig = { shape: false, suffix_buckets: 0 };
  const keys: Record<string, 'suffix_buckets' | 'prefix_buckets' | 'shape_buckets'> =
    { suffix: 'suffix_buckets', prefix: 'prefix_buckets', shapes: 'shape_buckets' };
  for (const part of spec.split(',')) {
    const m = /^(suffix|prefix|shapes):(\d+)$/.exec(part);
    if (part === 'shape') wf.shape = true;
    else if (m && Number(m[2]) > 0 && Number(m[2]) <= 1 << 20) wf[keys[m[1]!]!] = Number(m[2]);
    else
      throw new WordFeatureConfigError(
        `takes none, or shape, suffix:N, prefix:N and/or shapes:N (0 < N <= 1048576), not "${part}"`);
  }
  return wf;
}

/** The config.json form of `wf` (the prefix and shape-string counts only when set, as older configs lack them). */
export function wordFeaturesJson(wf: WordFeatures): WordFeaturesConfig {
  const out: WordFeaturesConfig = { shape: wf.shape, suffix_buckets: wf.suffixBuckets };
  if (wf.prefixBuckets) out.prefix_buckets = wf.prefixBuckets;
  if (wf.shapeBuckets) out.shape_buckets = wf.shapeBuckets;
  return out;
}

/** The hashed features in row order (after the shape classes): suffix-3, prefix-3, shape string. */
function hashedCounts(wf: WordFeatures): number[] {
  return [wf.suffixBuckets, wf.prefixBuckets ?? 0, wf.shapeBuckets ?? 0];
}

/** Rows of the table. */
export function featureRows(wf: WordFeatures): number {
  return (wf.shape ? SHAPE_CLASSES.length : 0) + hashedCounts(wf).reduce((a, b) => a + b, 0);
}

/** Feature ids per piece. */
export function featureCols(wf: WordFeatures): number {
  return (wf.shape ? 1 : 0) + hashedCounts(wf).filter((n) => n > 0).length;
}

const UPPER = /\p{Lu}/u;
const LOWER = /\p{Ll}/u;
const LETTER = /\p{L}/u;
const DIGIT = /\p{N}/u;

/** Shape class (index into SHAPE_CLASSES) of an original-case word. */
export function shapeClass(word: string): number {
  if (/^(?:https?:\/\/|www\.)|^@\S|@\S+\.\S/i.test(word)) return 6; // link: URL, @mention, e-mail
  let up = 0;
  let low = 0;
  let letters = 0;
  let digits = 0;
  let firstLetterUpper: boolean | null = null;
  for (const ch of word) {
    if (LETTER.test(ch)) {
      letters++;
      const u = UPPER.test(ch);
      if (u) up++;
      else if (LOWER.test(ch)) low++;
      if (firstLetterUpper === null) firstLetterUpper = u;
    } else if (DIGIT.test(ch)) digits++;
  }
  if (!letters && !digits) return 5; // punct
  if (!letters) return 3; // dd
  if (digits) return 4; // alnum (letters with digits: "A4", "2nd", "B-52")
  if (up === 0) return 2; // xxxx
  if (low === 0) return up >= 2 ? 1 : 0; // XXXX, or a single capital ("I", "A"): Xxxx
  if (firstLetterUpper) return 0; // Xxxx (also "McDonald", "New-York")
  return 7; // other: lower-case start with capitals inside ("iPhone", "eBay")
}

/** Bucket of a string (FNV-1a 32-bit over its UTF-16 units). */
function hashBucket(s: string, buckets: number): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h % buckets;
}

/** Bucket of the lower-cased last three UTF-16 units of `word`. */
export function suffixBucket(word: string, buckets: number): number {
  return hashBucket(word.toLowerCase().slice(-3), buckets);
}

/** Bucket of the lower-cased first three UTF-16 units of `word`. */
export function prefixBucket(word: string, buckets: number): number {
  return hashBucket(word.toLowerCase().slice(0, 3), buckets);
}

/** spaCy's shape string: capitals X, other letters x, digits d, anything else itself; a run of one symbol longer
 * than 4 is cut to 4 ("Xxxxx" for "Washington", "dd.dd", "X.X.", "xxxx@xxxx.xxx"). */
export function shapeString(word: string): string {
  let out = '';
  let last = '';
  let run = 0;
  for (const ch of word) {
    const c = UPPER.test(ch) ? 'X' : LETTER.test(ch) ? 'x' : DIGIT.test(ch) ? 'd' : ch;
    run = c === last ? run + 1 : 1;
    last = c;
    if (run <= 4) out += c;
  }
  return out;
}

/** Bucket of `word`'s shape string. */
export function shapeBucket(word: string, buckets: number): number {
  return hashBucket(shapeString(word), buckets);
}

/** What wordFeatureIds reads of a formatted input (format.ts `Formatted`). */
export interface FormattedWords {
  text: string;
  ids: Int32Array;
  prefix: string[];
  words: string[];
  start: number[];
  end: number[];
  wordPos: Int32Array;
  wordEnd: Int32Array;
}

/**
 * Feature ids of every sub-word piece of `f` ((ids.length × featureCols) int32, -1 = none): the
 * pieces [wordPos, wordEnd) of each text word get its shape row and its hashed rows.
 */
export function wordFeatureIds(f: FormattedWords, wf: WordFeatures): Int32Array {
  const K = featureCols(wf);
  const out = new Int32Array(f.ids.length * K).fill(-1);
  const P = f.prefix.length;
  const hashers = [suffixBucket, prefixBucket, shapeBucket];
  const counts = hashedCounts(wf);
  for (let w = 0; w < f.words.length; w++) {
    const word = f.text.slice(f.start[w], f.end[w]);
    const row: number[] = [];
    if (wf.shape) row.push(shapeClass(word));
    let base = wf.shape ? SHAPE_CLASSES.length : 0;
    for (let k = 0; k < counts.length; k++) {
      if (counts[k]! > 0) row.push(base + hashers[k]!(word, counts[k]!));
      base += counts[k]!;
    }
    for (let p = f.wordPos[P + w]; p < f.wordEnd[P + w]; p++) out.set(row, p * K);
  }
  return out;
}
