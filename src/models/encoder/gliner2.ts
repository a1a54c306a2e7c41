// GLiNER2 span-architecture model: checkpoint loading, batching with length bucketing, long-document
// chunking, the encoder + heads run on the native core, decoding and result formatting.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { addon } from '../../native/addon.ts';
import { SafetensorsCheckpoint, toFloat32 } from '../../formats/safetensors.ts';
import { DebertaEncoder, EncoderConfigError, parseDebertaConfig, type DebertaConfig } from './deberta.ts';
import { formatInput, padInputs, type FormatOptions, type Formatted } from './format.ts';
import { normalizeSchema, type Schema } from './schema.ts';
import { EncoderTokenizer } from './tokenizer.ts';
import { decodeSample, toReferenceJson, toResult, type ExtractResult, type RawTask, type SegmentScores, type Span } from './decode.ts';
import { ENCODER_LIMITS, overLimit } from './limits.ts';
import { splitWords } from './words.ts';
import { featureCols, featureRows, parseWordFeatures, type WordFeatures } from './word-features.ts';
import { parseLabelPrompt, type LabelPrompt } from './label-isolation.ts';

export type CountingLayer = 'count_lstm' | 'count_lstm_v2' | 'count_lstm_moe';

export interface LoadOptions {
  /** 'bf16' keeps the encoder's linear weights and embeddings in bf16 (fp32 compute). Default 'f32'. */
  dtype?: 'f32' | 'bf16';
}

export interface ModelInfo {
  dir: string;
  architecture: 'span';
  backbone: string;
  countingLayer: CountingLayer;
  maxWidth: number;
  hiddenSize: number;
  layers: number;
  heads: number;
  vocabSize: number;
  dtype: 'f32' | 'bf16';
  parameters: number;
  /** how a word's sub-word states become its embedding: first piece, or mean / elementwise max over its pieces */
  tokenPooling: TokenPooling;
}

export type TokenPooling = 'first' | 'mean' | 'max';

export interface ExtractOptions {
  /** span / label threshold, default 0.5 */
  threshold?: number;
  /** default true */
  include_confidence?: boolean;
  /** default true */
  include_spans?: boolean;
  /** 'loom' (default): the stable result format; 'gliner2': the reference library's exact JSON. */
  format?: 'loom' | 'gliner2';
  /** texts per encoder batch (default 32); batches also stay under maxBatchTokens tokens */
  batchSize?: number;
  maxBatchTokens?: number;
  /** words per chunk for long texts (default 384, overlap 64). 'loom' format only. */
  chunkWords?: number;
  chunkOverlap?: number;
  /** parity with the reference: prompt order of structure fields (a Python set order there) */
  fieldPromptOrder?: Record<string, string[]>;
}

interface Item {
  f: Formatted;
  schema: Schema;
  out?: SegmentScores[];
}

/** What the native heads produced for a batch, per item (for tests / debugging). */
export interface Intermediates {
  ids: Int32Array;
  hidden: Float32Array; // (N, D)
  wordEmbeddings: Float32Array; // (W, D)
  spanRep?: Float32Array; // (W, K, D)
  segments: { schemaEmbs: Float32Array; countLogits?: Float32Array; count: number; countEmbed?: Float32Array; scores?: Float32Array; cls?: Float32Array }[];
}

/**
 * Word embeddings from sub-word states. hidden: (N, D); words out: (W, D). `first` copies the first
 * piece's row; `mean` / `max` reduce over the word's pieces [wordPos, wordEnd). A word with no pieces
 * (the tokenizer dropped it) has an empty range and takes the row it points at, as `first` does,
 * which keeps the alignment the reference keeps.
 */
export function poolWords(hidden: Float32Array, D: number, wordPos: Int32Array, wordEnd: Int32Array, mode: TokenPooling, out: Float32Array): void {
  for (let w = 0; w < wordPos.length; w++) {
    const p0 = wordPos[w];
    const p1 = Math.max(wordEnd[w], p0 + 1);
    const o = out.subarray(w * D, (w + 1) * D);
    o.set(hidden.subarray(p0 * D, (p0 + 1) * D));
    if (mode === 'first' || p1 === p0 + 1) continue;
    for (let p = p0 + 1; p < p1; p++) {
      const h = hidden.subarray(p * D, (p + 1) * D);
      if (mode === 'mean') for (let d = 0; d < D; d++) o[d] += h[d];
      else for (let d = 0; d < D; d++) if (h[d] > o[d]) o[d] = h[d];
    }
    if (mode === 'mean') {
      const inv = 1 / (p1 - p0);
      for (let d = 0; d < D; d++) o[d] *= inv;
    }
  }
}

export class Gliner2Model {
  private constructor(
    readonly info: ModelInfo,
    readonly tokenizer: EncoderTokenizer,
    readonly encoder: DebertaEncoder,
    private readonly heads: unknown,
    /** word features of a fresh encoder (config.json `word_features`), null for every other checkpoint */
    readonly wordFeatures: WordFeatures | null = null,
    /** a fresh encoder's classification labels are isolated (config.json `label_isolation`, label-isolation.ts) */
    readonly labelIsolation = false,
    /** a fresh encoder reads each classification label as one bagged `[L]` token (config.json `label_bag`) */
    readonly labelBag = false,
  ) {}

  /** Releases the encoder's and heads' native memory now (the service's unload), not at a garbage collection V8,
   * unaware of that memory, may not run for a long time; a call in flight finishes. The model is unusable after. */
  dispose(): void {
    this.encoder.free();
    addon.gliner2HeadsFree(this.heads);
  }

  static async load(dir: string, opts: LoadOptions = {}): Promise<Gliner2Model> {
    const readJson = (p: string) => {
      if (!existsSync(p)) throw new EncoderConfigError(`${dir}: missing ${p.slice(dir.length + 1)}`);
      try {
        return JSON.parse(readFileSync(p, 'utf8')) as Record<string, unknown>;
      } catch (e) {
        throw new EncoderConfigError(`${p}: invalid JSON (${(e as Error).message})`);
      }
    };
    const cfg = readJson(join(dir, 'config.json'));
    const arch = (cfg.architecture as string | undefined) ?? 'span';
    if (arch !== 'span') throw new EncoderConfigError(`${dir}: architecture "${arch}" is not supported (span checkpoints only)`);
    const encCfg: DebertaConfig = parseDebertaConfig(readJson(join(dir, 'encoder_config', 'config.json')), `${dir}/encoder_config/config.json`);
    const spanHead = (cfg.span_head as Record<string, unknown> | undefined) ?? {};
    const maxWidth = Number(spanHead.max_width ?? cfg.max_width ?? 8);
    // The reference treats any other value as "first" (spec §1.2); so do we.
    const tokenPooling: TokenPooling = cfg.token_pooling === 'mean' || cfg.token_pooling === 'max' ? cfg.token_pooling : 'first';
    let wordFeatures: WordFeatures | null;
    let labels: LabelPrompt;
    try {
      wordFeatures = parseWordFeatures(cfg.word_features, `${dir}/config.json`);
      labels = parseLabelPrompt(cfg, `${dir}/config.json`);
    } catch (e) {
      throw new EncoderConfigError((e as Error).message);
    }
    const ckpt = SafetensorsCheckpoint.open(dir);
    const names = ckpt.names();
    let counting: CountingLayer;
    if (names.some((n) => n.startsWith('count_embed.projector.'))) counting = 'count_lstm';
    else if (names.some((n) => n.startsWith('count_embed.transformer.'))) counting = 'count_lstm_v2';
    else if (names.includes('count_embed.w1')) counting = 'count_lstm_moe';
    else throw new EncoderConfigError(`${dir}: no count_embed weights found`);
    // The state-dict keys decide; config.json's counting_layer is only cross-checked.
    const tokenizer = new EncoderTokenizer(join(dir, 'tokenizer.json'));
    const feats = wordFeatures ? { rows: featureRows(wordFeatures), cols: featureCols(wordFeatures) } : undefined;
    const encoder = await DebertaEncoder.load(ckpt, encCfg, 'encoder.', { dtype: opts.dtype, wordFeatures: feats });
    if (tokenizer.vocabSize() > encoder.config.vocabSize)
      throw new EncoderConfigError(`${dir}: tokenizer has ${tokenizer.vocabSize()} tokens but the embedding only ${encoder.config.vocabSize} rows`);
    const headTensors: Record<string, Float32Array> = {};
    let params = 0;
    for (const n of names) {
      const t = ckpt.get(n);
      params += t.shape.reduce((a, c) => a * c, 1);
      if (!n.startsWith('encoder.')) headTensors[n] = toFloat32(t);
    }
    let moe: [number, number] | [] = [];
    if (counting === 'count_lstm_moe') {
      // w1 (E, D, I), b1 (E, I), w2 (E, I, D), b2 (E, D), router.0 (D, D), router.2 (E, D)
      const D = encCfg.hiddenSize;
      const sh = (n: string) => (names.includes(n) ? ckpt.get(n).shape : undefined);
      const w1 = sh('count_embed.w1');
      const [E, I] = w1 && w1.length === 3 ? [w1[0], w1[2]] : [0, 0];
      const want: Record<string, number[]> = {
        'count_embed.w1': [E, D, I], 'count_embed.b1': [E, I], 'count_embed.w2': [E, I, D], 'count_embed.b2': [E, D],
        'count_embed.router.0.weight': [D, D], 'count_embed.router.0.bias': [D], 'count_embed.router.2.weight': [E, D], 'count_embed.router.2.bias': [E],
      };
      for (const [n, shape] of Object.entries(want))
        if (!E || JSON.stringify(sh(n)) !== JSON.stringify(shape))
          throw new EncoderConfigError(`${dir}: count_lstm_moe tensor ${n} has shape ${JSON.stringify(sh(n) ?? null)}, expected ${JSON.stringify(shape)}`);
      moe = [E, I];
    }
    const heads = await addon.gliner2HeadsCreate(encCfg.hiddenSize, maxWidth, counting, headTensors, ...moe);
    const info: ModelInfo = {
      dir,
      architecture: 'span',
      backbone: String(cfg.model_name ?? 'deberta-v2'),
      countingLayer: counting,
      maxWidth,
      hiddenSize: encCfg.hiddenSize,
      layers: encCfg.numLayers,
      heads: encCfg.numHeads,
      vocabSize: encoder.config.vocabSize,
      dtype: opts.dtype ?? 'f32',
      parameters: params,
      tokenPooling,
    };
    return new Gliner2Model(info, tokenizer, encoder, heads, wordFeatures, labels.isolation, labels.bag);
  }

  /** Formats one (text, schema) pair (ids, routing positions) — exposed for tests and tooling. */
  format(text: string, schema: Schema, opts: FormatOptions = {}): Promise<Formatted> {
    return formatInput(this.tokenizer, text, schema, {
      wordFeatures: this.wordFeatures, labelIsolation: this.labelIsolation, labelBag: this.labelBag, ...opts,
    });
  }

  /**
   * Extraction over one text or many. `schema` is the service's schema input (see schema.ts); with
   * `perText`, `schema` is an array holding one schema per text.
   */
  async extract(text: string, schema: unknown, opts?: ExtractOptions): Promise<ExtractResult>;
  async extract(text: string[], schema: unknown, opts?: ExtractOptions): Promise<ExtractResult[]>;
  async extract(text: string | string[], schema: unknown, opts: ExtractOptions = {}): Promise<ExtractResult | ExtractResult[]> {
    const texts = Array.isArray(text) ? text : [text];
    for (const [i, t] of texts.entries()) if (typeof t !== 'string') throw new TypeError(`text${Array.isArray(text) ? `[${i}]` : ''} must be a string`);
    const s = normalizeSchema(schema);
    const res = await this.extractMany(texts.map((t) => ({ text: t, schema: s })), opts);
    return Array.isArray(text) ? res : res[0];
  }

  /** One result per {text, schema} item (schemas may differ per text), in input order. */
  async extractMany(items: { text: string; schema: Schema | unknown }[], opts: ExtractOptions = {}): Promise<ExtractResult[]> {
    const threshold = opts.threshold ?? 0.5;
    if (typeof threshold !== 'number' || !(threshold >= 0 && threshold <= 1)) throw new RangeError('threshold must be a number between 0 and 1');
    const flags = { includeConfidence: opts.include_confidence ?? true, includeSpans: opts.include_spans ?? true };
    const reference = opts.format === 'gliner2';
    const chunkWords = opts.chunkWords ?? 384;
    const overlap = Math.min(opts.chunkOverlap ?? 64, chunkWords - 1);
    const schemas = items.map((it) => (isSchema(it.schema) ? it.schema : normalizeSchema(it.schema)));
    const fmt = { fieldPromptOrder: opts.fieldPromptOrder };
    const L = ENCODER_LIMITS;
    // Prompt tokens of each distinct schema (the formatted empty text less its "." token).
    const promptTok = new Map<Schema, number>();
    for (const sc of new Set(schemas)) {
      const n = (await this.format('', sc, fmt)).ids.length - 1;
      if (n > L.promptTokens)
        throw overLimit('promptTokens', '/schema', `the schema's prompt is ${n} tokens, over the limit`);
      promptTok.set(sc, n);
    }
    // Expand long texts into overlapping windows of at most chunkWords words and windowTokens
    // tokens (stable format only; the reference runs texts whole), and bound the request's work.
    const jobs: { item: number; text: string; offset: number }[] = [];
    const textPath = (i: number) => (items.length > 1 ? `/text/${i}` : '/text');
    const overWork = (i: number) => overLimit('requestTokens', textPath(i),
      "the request needs more encoder tokens (every window's schema prompt and text) than allowed");
    let work = 0;
    for (const [i, it] of items.entries()) {
      // every word is at least one token: stop splitting (on the event loop) once the budget is spent
      const left = L.requestTokens - work - promptTok.get(schemas[i])! - 1;
      const w = splitWords(it.text, true, L.wordChars, Math.max(0, left) + 1);
      if (w.tokens.length > left) throw overWork(i);
      const counts = (await this.tokenizer.pieces(w.tokens)).map((p) => p.length);
      const windows = reference ? [[0, w.tokens.length]] : windowWords(counts, chunkWords, overlap, L.windowTokens);
      if (reference) {
        const n = counts.reduce((a, b) => a + b, 0);
        const what = `format 'gliner2' runs a text whole: ${n} tokens, over the limit`;
        if (n > L.wholeTextTokens) throw overLimit('wholeTextTokens', textPath(i), what);
      }
      for (const [s, e] of windows) for (let k = s; k < e; k++) work += counts[k];
      work += windows.length * (promptTok.get(schemas[i])! + 1);
      if (work > L.requestTokens) throw overWork(i);
      if (windows.length === 1) jobs.push({ item: i, text: it.text, offset: 0 });
      else for (const [s, e] of windows) jobs.push({ item: i, text: it.text.slice(w.start[s], w.end[e - 1]), offset: w.start[s] });
    }
    const formatted = await Promise.all(jobs.map((j) => this.format(j.text, schemas[j.item], fmt)));
    const runItems: Item[] = formatted.map((f, i) => ({ f, schema: schemas[jobs[i].item] }));
    const decodeOpts = { threshold, pick: reference ? ('reference' as const) : ('best' as const), K: this.info.maxWidth };
    // Decode each batch as it completes and drop its score tensors (count × labels × words × K per
    // segment), so a request of many windows holds one batch of them at a time.
    const raws: RawTask[][] = new Array(runItems.length);
    await this.runBatches(runItems, opts, undefined, (done) => {
      for (const i of done) {
        raws[i] = decodeSample(runItems[i].f, runItems[i].schema, runItems[i].out!, decodeOpts);
        runItems[i].out = undefined;
      }
    });
    if (reference) return raws.map((r, i) => toReferenceJson(r, runItems[i].f, flags) as ExtractResult);
    // Merge chunks per item.
    const perItem: { tasks: RawTask[]; offset: number }[][] = items.map(() => []);
    jobs.forEach((j, i) => perItem[j.item].push({ tasks: raws[i], offset: j.offset }));
    return perItem.map((chunks, i) => {
      const merged = chunks.length === 1 ? chunks[0].tasks : mergeChunks(chunks);
      return toResult(merged, items[i].text.length, items[i].text, flags);
    });
  }

  /** Runs encoder + heads over items, bucketing by length; fills item.out, then calls onBatch(batch indices). */
  private async runBatches(
    items: Item[],
    opts: ExtractOptions,
    inter?: Intermediates[],
    onBatch?: (done: number[]) => void,
  ): Promise<void> {
    const maxB = Math.max(1, opts.batchSize ?? 32);
    const maxTok = Math.max(1, opts.maxBatchTokens ?? 16384);
    const order = items.map((_, i) => i).sort((a, b) => items[a].f.ids.length - items[b].f.ids.length);
    let i = 0;
    while (i < order.length) {
      const batch = [order[i++]];
      while (i < order.length && batch.length < maxB && (batch.length + 1) * items[order[i]].f.ids.length <= maxTok) batch.push(order[i++]);
      await this.runBatch(batch.map((j) => items[j]), inter ? batch.map((j) => j) : undefined, inter);
      onBatch?.(batch);
    }
  }

  private async runBatch(batch: Item[], idx?: number[], inter?: Intermediates[]): Promise<void> {
    const D = this.info.hiddenSize;
    const KF = this.wordFeatures ? featureCols(this.wordFeatures) : 0;
    const { B, N, ids, mask, feats, groups, bags } = padInputs(batch.map((it) => it.f), KF, this.labelIsolation);
    const hidden = await this.encoder.forward(ids, mask, B, N, feats, groups, bags);
    // Gather word embeddings (token_pooling) and schema embeddings.
    const woff = new Int32Array(B + 1);
    batch.forEach((it, b) => (woff[b + 1] = woff[b] + it.f.wordPos.length));
    const words = new Float32Array(woff[B] * D);
    const segSample: number[] = [];
    const segKind: number[] = [];
    const segM: number[] = [];
    let rows = 0;
    batch.forEach((it) => it.f.specialPos.forEach((p) => (rows += p.length)));
    const segEmbs = new Float32Array(rows * D);
    let r = 0;
    batch.forEach((it, b) => {
      const base = b * N * D;
      poolWords(hidden.subarray(base, base + N * D), D, it.f.wordPos, it.f.wordEnd, this.info.tokenPooling, words.subarray(woff[b] * D, woff[b + 1] * D));
      it.f.segments.forEach((s, si) => {
        segSample.push(b);
        segKind.push(s.kind === 'classification' ? 1 : 0);
        segM.push(s.names.length);
        for (const p of it.f.specialPos[si]) segEmbs.set(hidden.subarray(base + p * D, base + (p + 1) * D), r++ * D);
      });
    });
    const res = await addon.gliner2HeadsRun(this.heads, words, woff, Int32Array.from(segSample), Int32Array.from(segKind), Int32Array.from(segM), segEmbs, !!inter);
    let s = 0;
    let er = 0;
    batch.forEach((it, b) => {
      it.out = it.f.segments.map((seg, si) => {
        const o: SegmentScores = { count: res.counts[s], scores: res.scores[s], cls: res.cls[s] };
        if (inter && idx) {
          const M = seg.names.length;
          inter[idx[b]] ??= {
            ids: it.f.ids,
            hidden: hidden.slice(b * N * D, (b * N + it.f.ids.length) * D),
            wordEmbeddings: words.slice(woff[b] * D, woff[b + 1] * D),
            spanRep: res.spanRep?.[b],
            segments: [],
          };
          inter[idx[b]].segments[si] = {
            schemaEmbs: segEmbs.slice(er * D, (er + 1 + M) * D),
            count: res.counts[s],
            countLogits: seg.kind === 'classification' ? undefined : res.countLogits.slice(s * 20, s * 20 + 20),
            countEmbed: res.countEmbed[s],
            scores: res.scores[s],
            cls: res.cls[s],
          };
        }
        er += 1 + seg.names.length;
        s++;
        return o;
      });
    });
  }

  /** Intermediate tensors of one (text, schema) run, for parity tests. */
  async debugRun(text: string, schema: unknown, opts: ExtractOptions = {}): Promise<{ formatted: Formatted; inter: Intermediates }> {
    const s = isSchema(schema) ? schema : normalizeSchema(schema);
    const f = await this.format(text, s, { fieldPromptOrder: opts.fieldPromptOrder });
    const inter: Intermediates[] = [];
    await this.runBatches([{ f, schema: s }], opts, inter);
    return { formatted: f, inter: inter[0] };
  }

  /**
   * Mean-pooled encoder states of each text (for /v1/embeddings): the text is tokenized with the
   * tokenizer's own template ([CLS] … [SEP]); long texts are encoded in windows of `window` tokens
   * and the window means averaged by token count. At most ENCODER_LIMITS.requestTokens tokens in all
   * (InputLimitError, path '/input': the embeddings request's field).
   */
  async embed(texts: string[], opts: { window?: number; batchSize?: number } = {}): Promise<Float32Array[]> {
    const D = this.info.hiddenSize;
    const win = Math.max(8, opts.window ?? 512);
    const seqs = await this.tokenizer.encodeTexts(texts);
    let total = 0;
    for (const ids of seqs) total += ids.length;
    if (total > ENCODER_LIMITS.requestTokens)
      throw overLimit('requestTokens', '/input', `the input is ${total} tokens, over the limit`);
    const chunks: { t: number; ids: Int32Array }[] = [];
    seqs.forEach((ids, t) => {
      if (ids.length === 0) chunks.push({ t, ids: new Int32Array([0]) });
      for (let s = 0; s < ids.length; s += win) chunks.push({ t, ids: ids.subarray(s, s + win) });
    });
    const sums = texts.map(() => new Float64Array(D));
    const counts = texts.map(() => 0);
    const order = chunks.map((_, i) => i).sort((a, b) => chunks[a].ids.length - chunks[b].ids.length);
    const maxB = opts.batchSize ?? 32;
    for (let i = 0; i < order.length; i += maxB) {
      const batch = order.slice(i, i + maxB).map((j) => chunks[j]);
      const N = Math.max(...batch.map((c) => c.ids.length));
      const ids = new Int32Array(batch.length * N);
      const mask = new Uint8Array(batch.length * N);
      batch.forEach((c, b) => {
        ids.set(c.ids, b * N);
        mask.fill(1, b * N, b * N + c.ids.length);
      });
      const h = await this.encoder.forward(ids, mask, batch.length, N);
      batch.forEach((c, b) => {
        const sum = sums[c.t];
        for (let p = 0; p < c.ids.length; p++) for (let d = 0; d < D; d++) sum[d] += h[(b * N + p) * D + d];
        counts[c.t] += c.ids.length;
      });
    }
    return sums.map((s, t) => Float32Array.from(s, (x) => x / Math.max(1, counts[t])));
  }
}

/**
 * Windows [start, end) over words with `counts[i]` sub-word tokens each: at most `maxWords` words
 * and `maxTokens` tokens (a window always takes at least one word), consecutive windows sharing up
 * to `overlap` words (and at most a quarter of a window's tokens), so every window makes progress. With
 * words of ordinary length this is the fixed stride of maxWords − overlap words.
 */
export function windowWords(counts: number[], maxWords: number, overlap: number, maxTokens: number): [number, number][] {
  const n = counts.length;
  const out: [number, number][] = [];
  for (let s = 0; ; ) {
    let e = s;
    let tok = 0;
    while (e < n && e - s < maxWords && (e === s || tok + counts[e] <= maxTokens)) tok += counts[e++];
    out.push([s, e]);
    if (e >= n) return out;
    let next = e;
    let shared = 0;
    while (next > s + 1 && e - next < overlap && shared + counts[next - 1] <= maxTokens / 4) shared += counts[--next];
    s = next;
  }
}

function isSchema(s: unknown): s is Schema {
  return typeof s === 'object' && s !== null && Array.isArray((s as Schema).structures) && Array.isArray((s as Schema).classifications) && Array.isArray((s as Schema).relations);
}

/** Merges per-chunk raw results of one long text (offsets shifted into the full text). */
function mergeChunks(chunks: { tasks: RawTask[]; offset: number }[]): RawTask[] {
  const shift = (s: Span, off: number): Span => ({ ...s, start: s.start + off, end: s.end + off });
  const base = chunks[0].tasks.map((t) => structuredClone(t));
  base.forEach((t, ti) => {
    if (t.kind === 'entities') {
      const labels = new Map<string, { dtype: 'list' | 'str'; spans: Span[] }>();
      let count = 0;
      for (const c of chunks) {
        const ct = c.tasks[ti] as typeof t;
        count = Math.max(count, ct.count);
        for (const l of ct.labels) {
          const e = labels.get(l.name) ?? { dtype: l.dtype, spans: [] };
          e.spans.push(...l.spans.map((s) => shift(s, c.offset)));
          labels.set(l.name, e);
        }
      }
      t.count = count;
      t.labels = [...labels.entries()].map(([name, v]) => {
        // dedupe (start, end), then greedy confidence-ordered overlap removal
        const sorted = v.spans.sort((a, b) => b.conf - a.conf || a.start - b.start || a.end - b.end);
        const kept: Span[] = [];
        for (const s of sorted) {
          if (kept.some((k) => s.start < k.end && k.start < s.end)) continue;
          kept.push(s);
          if (v.dtype === 'str') break;
        }
        return { name, dtype: v.dtype, spans: kept };
      });
    } else if (t.kind === 'structure') {
      const seen = new Set<string>();
      t.instances = [];
      for (const c of chunks) {
        const ct = c.tasks[ti] as typeof t;
        t.count = Math.max(t.count, ct.count);
        for (const inst of ct.instances) {
          const sh: typeof inst = {};
          for (const [k, v] of Object.entries(inst))
            sh[k] = v === null ? null : Array.isArray(v) ? (v as (Span | { choice: string })[]).map((x) => ('choice' in x ? x : shift(x, c.offset))) as typeof v : 'choice' in v ? v : shift(v, c.offset);
          const key = JSON.stringify(Object.entries(sh).map(([k, v]) => [k, v === null ? null : Array.isArray(v) ? v.map((x) => ('choice' in x ? x.choice : [x.start, x.end])) : 'choice' in v ? v.choice : [v.start, v.end]]));
          if (seen.has(key)) continue;
          seen.add(key);
          t.instances.push(sh);
        }
      }
    } else if (t.kind === 'relation') {
      t.pairs = [];
      for (const c of chunks) {
        const ct = c.tasks[ti] as typeof t;
        t.count = Math.max(t.count, ct.count);
        for (const [h, tl] of ct.pairs) t.pairs.push([shift(h, c.offset), shift(tl, c.offset)]);
      }
    } else {
      // classification: the most confident chunk decides (multi-label: union, max confidence per label)
      const best = new Map<string, number>();
      for (const c of chunks) for (const l of (c.tasks[ti] as typeof t).labels) best.set(l.label, Math.max(best.get(l.label) ?? 0, l.conf));
      const all = [...best.entries()].map(([label, conf]) => ({ label, conf }));
      t.labels = t.multi ? all : [all.reduce((a, b) => (b.conf > a.conf ? b : a))];
    }
  });
  return base;
}
