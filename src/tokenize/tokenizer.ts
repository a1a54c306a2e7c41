// Tokenizer for decoder LLMs, following `tokenizer.json` semantics exactly (the reference is the HF
// `tokenizers` library; goldens' "Tokenizer quirks"). The `tokenizers` npm package (0.23) only encodes
// asynchronously, so the pipeline is split:
//   added-token split (raw text) → normalizer (native, sync) → added-token split (normalized text)
//   → pre-tokenizer (native, sync) → BPE model (here, TS: ranked merges with a heap, byte fallback,
//   fuse_unk, ignore_merges) → post-processor (TemplateProcessing / Roberta / Bert / ByteLevel, here).
// Decoding uses the native decoder chain (sync). Tests compare against the native async encode, on the
// SentencePiece-style TinyStories / minueza files and on byte-level fixtures of Qwen2.5, SmolLM2, Llama 3 and
// Mistral v0.3 (test/fixtures/tokenizers). Files the synchronous pipeline does not cover (non-BPE models, BPE
// dropout, unknown post-processors) load with `syncEncode: false`: encode() throws there, and encodeAsync() /
// tokenCountAtAsync() (which every model-agnostic caller uses) run the package's own async encode.
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Tokenizer as HfTokenizer } from 'tokenizers';

export class TokenizerError extends Error {
  override name = 'TokenizerError';
}

interface AddedTokenJson {
  id: number;
  content: string;
  single_word?: boolean;
  lstrip?: boolean;
  rstrip?: boolean;
  normalized?: boolean;
  special?: boolean;
}

type Normalizer = { normalizeString(s: string): string };
type PreTokenizer = { preTokenizeString(s: string): [string, [number, number]][] };
type Decoder = { decode(tokens: string[]): string };

// GPT-2 byte-level alphabet: byte → printable unicode char (and the inverse), as in tokenizers' ByteLevel.
function byteLevelTables(): { byteToChar: string[]; charToByte: Map<string, number> } {
  const bs: number[] = [];
  for (let b = 33; b <= 126; b++) bs.push(b);
  for (let b = 161; b <= 172; b++) bs.push(b);
  for (let b = 174; b <= 255; b++) bs.push(b);
  const cs = bs.slice();
  let n = 0;
  for (let b = 0; b < 256; b++) {
    if (!bs.includes(b)) {
      bs.push(b);
      cs.push(256 + n++);
    }
  }
  const byteToChar: string[] = new Array(256);
  const charToByte = new Map<string, number>();
  bs.forEach((b, i) => {
    byteToChar[b] = String.fromCodePoint(cs[i]);
    charToByte.set(byteToChar[b], b);
  });
  return { byteToChar, charToByte };
}

/** Min-heap of merge candidates keyed by (rank, position). */
class MergeHeap {
  rank: number[] = [];
  pos: number[] = [];
  get size(): number {
    return this.rank.length;
  }
  private less(i: number, j: number): boolean {
    return this.rank[i] < this.rank[j] || (this.rank[i] === this.rank[j] && this.pos[i] < this.pos[j]);
  }
  private swap(i: number, j: number): void {
    const r = this.rank[i], p = this.pos[i];
    this.rank[i] = this.rank[j]; this.pos[i] = this.pos[j];
    this.rank[j] = r; this.pos[j] = p;
  }
  push(rank: number, pos: number): void {
    this.rank.push(rank); this.pos.push(pos);
    let i = this.rank.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (!this.less(i, p)) break;
      this.swap(i, p); i = p;
    }
  }
  pop(): [number, number] {
    const top: [number, number] = [this.rank[0], this.pos[0]];
    const lr = this.rank.pop()!, lp = this.pos.pop()!;
    if (this.rank.length) {
      this.rank[0] = lr; this.pos[0] = lp;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1, r = l + 1;
        let m = i;
        if (l < this.rank.length && this.less(l, m)) m = l;
        if (r < this.rank.length && this.less(r, m)) m = r;
        if (m === i) break;
        this.swap(i, m); i = m;
      }
    }
    return top;
  }
}

/** What the tokenizer needs of any model: the vocabulary both ways, unk, byte fallback. */
interface ModelVocab {
  readonly vocab: Map<string, number>;
  readonly idToTok: string[];
  readonly unkId: number | undefined;
  readonly byteFallback: boolean;
}

/** The vocabulary of a non-BPE model (Unigram: [piece, score] list; WordPiece / WordLevel: piece → id). */
function plainVocab(m: Record<string, unknown>): ModelVocab {
  const vocab = new Map<string, number>();
  if (Array.isArray(m.vocab)) (m.vocab as [string, number][]).forEach(([piece], id) => vocab.set(piece, id));
  else for (const [k, v] of Object.entries((m.vocab as Record<string, number>) ?? {})) vocab.set(k, v);
  const idToTok: string[] = [];
  for (const [t, id] of vocab) idToTok[id] = t;
  const unk = m.unk_token ?? (typeof m.unk_id === 'number' ? idToTok[m.unk_id] : undefined);
  return { vocab, idToTok, unkId: typeof unk === 'string' ? vocab.get(unk) : undefined, byteFallback: m.byte_fallback === true };
}

/** The BPE model of tokenizer.json (`model.type == "BPE"`). */
class BpeModel implements ModelVocab {
  readonly vocab: Map<string, number>;
  readonly idToTok: string[];
  private readonly merges = new Map<number, number>(); // pairKey → rank * 2^21 ... stored as [rank, newId] below
  private readonly mergeRank = new Map<number, number>();
  private readonly mergeNew = new Map<number, number>();
  private readonly n: number;
  readonly unkId: number | undefined;
  readonly byteFallback: boolean;
  readonly fuseUnk: boolean;
  readonly ignoreMerges: boolean;
  readonly prefix: string;
  readonly suffix: string;
  private readonly byteIds: (number | undefined)[] = new Array(256);
  private readonly cache = new Map<string, number[]>();

  constructor(m: Record<string, unknown>) {
    const vocab = m.vocab as Record<string, number>;
    this.vocab = new Map(Object.entries(vocab));
    let maxId = 0;
    for (const id of this.vocab.values()) maxId = Math.max(maxId, id);
    this.n = maxId + 1;
    this.idToTok = new Array(this.n);
    for (const [t, id] of this.vocab) this.idToTok[id] = t;
    const merges = (m.merges as (string | [string, string])[]) ?? [];
    this.prefix = (m.continuing_subword_prefix as string) ?? '';
    this.suffix = (m.end_of_word_suffix as string) ?? '';
    merges.forEach((mg, rank) => {
      let a: string, b: string;
      if (Array.isArray(mg)) [a, b] = mg;
      else {
        const sp = mg.indexOf(' ', 1);
        a = mg.slice(0, sp); b = mg.slice(sp + 1);
      }
      const ia = this.vocab.get(a), ib = this.vocab.get(b);
      const merged = a + (this.prefix && b.startsWith(this.prefix) ? b.slice(this.prefix.length) : b);
      const im = this.vocab.get(merged);
      if (ia === undefined || ib === undefined || im === undefined) return; // HF errors; skip silently
      const key = ia * this.n + ib;
      if (!this.mergeRank.has(key)) {
        this.mergeRank.set(key, rank);
        this.mergeNew.set(key, im);
      }
    });
    const unk = m.unk_token as string | null | undefined;
    this.unkId = unk != null ? this.vocab.get(unk) : undefined;
    this.byteFallback = m.byte_fallback === true;
    this.fuseUnk = m.fuse_unk === true;
    this.ignoreMerges = m.ignore_merges === true;
    for (let b = 0; b < 256; b++) this.byteIds[b] = this.vocab.get(`<0x${b.toString(16).toUpperCase().padStart(2, '0')}>`);
    void this.merges;
  }

  /** Tokenizes one pre-token (word). */
  tokenize(word: string, out: number[]): void {
    if (word.length === 0) return;
    const cached = this.cache.get(word);
    if (cached) {
      for (const id of cached) out.push(id);
      return;
    }
    if (this.ignoreMerges) {
      const id = this.vocab.get(word);
      if (id !== undefined) {
        out.push(id);
        return;
      }
    }
    // initial symbols
    const ids: number[] = [];
    let lastUnk = false;
    const chars = Array.from(word);
    for (let i = 0; i < chars.length; i++) {
      let s = chars[i];
      if (i > 0 && this.prefix) s = this.prefix + s;
      if (i === chars.length - 1 && this.suffix) s = s + this.suffix;
      const id = this.vocab.get(s);
      if (id !== undefined) {
        ids.push(id);
        lastUnk = false;
        continue;
      }
      if (this.byteFallback) {
        const bytes = new TextEncoder().encode(chars[i]);
        const bids = Array.from(bytes, (b) => this.byteIds[b]);
        if (bids.every((x) => x !== undefined)) {
          for (const b of bids) ids.push(b!);
          lastUnk = false;
          continue;
        }
      }
      if (this.unkId === undefined) throw new TokenizerError(`character ${JSON.stringify(chars[i])} is not in the vocabulary and the model has no unk_token`);
      if (this.fuseUnk && lastUnk) continue;
      ids.push(this.unkId);
      lastUnk = true;
    }
    // merges: linked list over symbols, heap of (rank, left position)
    const len = ids.length;
    if (len > 1) {
      const prev = new Int32Array(len), next = new Int32Array(len);
      const alive = new Uint8Array(len).fill(1);
      for (let i = 0; i < len; i++) {
        prev[i] = i - 1;
        next[i] = i + 1 < len ? i + 1 : -1;
      }
      const heap = new MergeHeap();
      const tryPush = (i: number): void => {
        const j = next[i];
        if (j < 0) return;
        const r = this.mergeRank.get(ids[i] * this.n + ids[j]);
        if (r !== undefined) heap.push(r, i);
      };
      for (let i = 0; i < len - 1; i++) tryPush(i);
      while (heap.size) {
        const [rank, i] = heap.pop();
        if (!alive[i]) continue;
        const j = next[i];
        if (j < 0) continue;
        const key = ids[i] * this.n + ids[j];
        if (this.mergeRank.get(key) !== rank) continue; // stale entry
        ids[i] = this.mergeNew.get(key)!;
        alive[j] = 0;
        next[i] = next[j];
        if (next[j] >= 0) prev[next[j]] = i;
        if (prev[i] >= 0) tryPush(prev[i]);
        tryPush(i);
      }
      let k = 0; // compact the surviving symbols in place (no spread: words can be 100k+ symbols long)
      for (let i = 0; i >= 0; i = next[i]) ids[k++] = ids[i];
      ids.length = k;
    }
    if (word.length <= 256 && this.cache.size < 100_000) this.cache.set(word, ids);
    for (const id of ids) out.push(id);
  }
}

interface PostStep {
  type: string;
  raw: Record<string, unknown>;
}

export interface EncodeOptions {
  /** Apply the post-processor (BOS etc., as tokenizer.json specifies). Default true. */
  addSpecialTokens?: boolean;
}

export interface DecodeOptions {
  /** Drop special ids before decoding (default true, see goldens quirk 3). */
  skipSpecialTokens?: boolean;
}

export interface StreamDecoder {
  /** Adds one generated id; returns the new text (holds back incomplete UTF-8). */
  push(id: number): string;
  /** Returns whatever is held back. */
  flush(): string;
}

function tokenContent(v: unknown): string | undefined {
  if (typeof v === 'string') return v;
  if (v && typeof v === 'object' && typeof (v as { content?: unknown }).content === 'string') return (v as { content: string }).content;
  return undefined;
}

export class Tokenizer {
  readonly vocabSize: number;
  readonly bosId?: number;
  readonly eosIds: number[];
  readonly padId?: number;
  readonly unkId?: number;
  /** tokenizer_config.json `add_bos_token` (else: whether the post-processor adds the BOS). Informational:
   *  encode() follows tokenizer.json's post-processor. */
  readonly addBosToken: boolean;
  readonly specialIds: Set<number>;
  readonly chatTemplate?: string;
  readonly bosToken?: string;
  readonly eosToken?: string;
  /** Where the tokenizer came from, for messages: its folder, or e.g. the GGUF file it was read from. */
  readonly dir: string;
  /** The native reference tokenizer (async encode/decode), for tests and batch paths. */
  readonly native: HfTokenizer;

  /**
   * Whether encode() (the synchronous pipeline) supports this tokenizer.json. When false (a non-BPE model,
   * BPE dropout, an unknown post-processor: see `syncUnsupported`), encode() / tokenCountAt() throw and
   * callers use encodeAsync() / tokenCountAtAsync(), which run the `tokenizers` package itself.
   */
  readonly syncEncode: boolean;
  /** Why the synchronous pipeline does not support this tokenizer (undefined when it does). */
  readonly syncUnsupported?: string;

  private readonly model: ModelVocab;
  private readonly bpe: BpeModel | null;
  private readonly added: AddedTokenJson[];
  private readonly addedById = new Map<number, AddedTokenJson>();
  private readonly addedByContent = new Map<string, number>();
  private readonly rawAdded: Map<string, AddedTokenJson[]>; // first char → tokens (longest first)
  private readonly normAdded: Map<string, AddedTokenJson[]>;
  private readonly normalizer: Normalizer | null;
  private readonly preTokenizer: PreTokenizer | null;
  /** The pre-tokenizer for text that does not start at offset 0 of the input (see encode). */
  private readonly preTokenizerRest: PreTokenizer | null;
  private readonly decoder: Decoder | null;
  private readonly post: PostStep[];
  private readonly byteLevel: boolean;
  private readonly bytesCache = new Map<number, Uint8Array>();
  private readonly charToByte: Map<string, number>;

  /** `files`: the folder to look in for chat_template.jinja / chat_template.json (none for in-memory tokenizers). */
  private constructor(dir: string, json: Record<string, unknown>, cfg: Record<string, unknown>, gen: Record<string, unknown>, files: string | null) {
    this.dir = dir;
    const model = json.model as Record<string, unknown>;
    if (!model || typeof model !== 'object' || !model.vocab) throw new TokenizerError(`${dir}: tokenizer.json has no model vocabulary`);
    try {
      this.native = HfTokenizer.fromString(JSON.stringify(json));
    } catch (e) {
      throw new TokenizerError(`${dir}: tokenizer.json is not a valid tokenizer (${(e as Error).message})`);
    }
    // transformers ignores tokenizer.json's truncation / padding unless asked per call: so do we.
    this.native.disableTruncation();
    this.native.disablePadding();
    const isBpe = model.type === 'BPE' || (model.type === undefined && !!model.merges);
    const reasons: string[] = [];
    if (!isBpe) reasons.push(`model type ${String(model.type)}`);
    if (isBpe && typeof model.dropout === 'number' && model.dropout > 0) reasons.push('BPE dropout');
    this.bpe = isBpe ? new BpeModel(model) : null;
    this.model = this.bpe ?? plainVocab(model);
    this.normalizer = this.native.getNormalizer() as Normalizer | null;
    this.preTokenizer = this.native.getPreTokenizer() as PreTokenizer | null;
    // Metaspace with prepend_scheme "first" (Mistral v0.3, Llama 2 non-legacy) prepends "▁" only to the split
    // that starts at offset 0 of the original text: text after an added token gets none. preTokenizeString
    // sees each segment on its own (offset 0), so segments after the first use a copy with "never".
    let firstScheme = false;
    const toNever = (p: unknown): unknown => {
      if (Array.isArray(p)) return p.map(toNever);
      if (!p || typeof p !== 'object') return p;
      const o: Record<string, unknown> = {};
      for (const [k, v] of Object.entries(p)) o[k] = toNever(v);
      if (o.type === 'Metaspace' && o.prepend_scheme === 'first') {
        firstScheme = true;
        o.prepend_scheme = 'never';
      }
      return o;
    };
    const restJson = toNever(json.pre_tokenizer ?? null);
    this.preTokenizerRest = firstScheme
      ? (HfTokenizer.fromString(JSON.stringify({ version: '1.0', pre_tokenizer: restJson, model: { type: 'BPE', vocab: {}, merges: [] } })).getPreTokenizer() as PreTokenizer)
      : this.preTokenizer;
    this.decoder = this.native.getDecoder() as Decoder | null;
    this.added = (json.added_tokens as AddedTokenJson[]) ?? [];
    for (const a of this.added) {
      this.addedById.set(a.id, a);
      this.addedByContent.set(a.content, a.id);
    }
    const group = (list: AddedTokenJson[]): Map<string, AddedTokenJson[]> => {
      const m = new Map<string, AddedTokenJson[]>();
      for (const a of list) {
        if (!a.content) continue;
        const c = String.fromCodePoint(a.content.codePointAt(0)!);
        if (!m.has(c)) m.set(c, []);
        m.get(c)!.push(a);
      }
      for (const l of m.values()) l.sort((x, y) => y.content.length - x.content.length);
      return m;
    };
    // Normalized added tokens are matched after normalization (their content normalized too).
    const normList = this.added.filter((a) => a.normalized === true && !a.special);
    const normSpecial = this.added.filter((a) => a.normalized === true && a.special);
    this.rawAdded = group(this.added.filter((a) => a.normalized !== true));
    this.normAdded = group(
      [...normSpecial, ...normList].map((a) => ({ ...a, content: this.normalizer ? this.normalizer.normalizeString(a.content) : a.content })),
    );
    // HF: normalized *special* tokens are matched on the raw text too? No: special tokens are matched
    // on the normalized text when normalized=true. Matching content as normalized is what tokenizers does.
    const pp = json.post_processor as Record<string, unknown> | null;
    this.post = [];
    const addStep = (p: Record<string, unknown> | null): void => {
      if (!p) return;
      if (p.type === 'Sequence') for (const s of (p.processors as Record<string, unknown>[]) ?? []) addStep(s);
      else this.post.push({ type: String(p.type), raw: p });
    };
    addStep(pp);
    const knownPost = new Set(['TemplateProcessing', 'RobertaProcessing', 'BertProcessing', 'ByteLevel']);
    for (const st of this.post) if (!knownPost.has(st.type)) reasons.push(`post_processor ${st.type}`);
    this.syncEncode = reasons.length === 0;
    if (!this.syncEncode) this.syncUnsupported = reasons.join(', ');
    const dec = json.decoder as Record<string, unknown> | null;
    const decTypes = new Set<string>();
    const walk = (d: Record<string, unknown> | null): void => {
      if (!d) return;
      decTypes.add(String(d.type));
      for (const s of (d.decoders as Record<string, unknown>[]) ?? []) walk(s);
    };
    walk(dec);
    this.byteLevel = decTypes.has('ByteLevel');
    this.charToByte = byteLevelTables().charToByte;

    let maxId = this.model.idToTok.length - 1;
    for (const a of this.added) maxId = Math.max(maxId, a.id);
    this.vocabSize = maxId + 1;
    this.specialIds = new Set(this.added.filter((a) => a.special).map((a) => a.id));
    this.unkId = this.model.unkId;

    // special tokens from tokenizer_config.json
    const idOf = (v: unknown): number | undefined => {
      const c = tokenContent(v);
      return c === undefined ? undefined : this.tokenToId(c);
    };
    this.bosToken = tokenContent(cfg.bos_token);
    this.eosToken = tokenContent(cfg.eos_token);
    this.bosId = idOf(cfg.bos_token);
    this.padId = idOf(cfg.pad_token);
    const eos = new Set<number>();
    const e = idOf(cfg.eos_token);
    if (e !== undefined) eos.add(e);
    const ge = gen.eos_token_id;
    for (const x of Array.isArray(ge) ? ge : ge != null ? [ge] : []) if (typeof x === 'number') eos.add(x);
    this.eosIds = [...eos];
    if (this.bosId !== undefined && !this.bosToken) this.bosToken = this.idToToken(this.bosId);
    const postAddsBos = this.bosId !== undefined && this.encodePost([], true).includes(this.bosId);
    this.addBosToken = typeof cfg.add_bos_token === 'boolean' ? cfg.add_bos_token : postAddsBos;
    let tpl = cfg.chat_template as unknown;
    if (Array.isArray(tpl)) tpl = (tpl as { name: string; template: string }[]).find((x) => x.name === 'default')?.template;
    if (files !== null && typeof tpl !== 'string' && existsSync(join(files, 'chat_template.jinja'))) tpl = readFileSync(join(files, 'chat_template.jinja'), 'utf8');
    if (files !== null && typeof tpl !== 'string' && existsSync(join(files, 'chat_template.json')))
      tpl = (JSON.parse(readFileSync(join(files, 'chat_template.json'), 'utf8')) as { chat_template?: string }).chat_template;
    this.chatTemplate = typeof tpl === 'string' ? tpl : undefined;
  }

  /** Loads `dir/tokenizer.json` with `tokenizer_config.json` (and generation_config.json eos ids) beside it. */
  static async fromDir(dir: string): Promise<Tokenizer> {
    return Tokenizer.fromDirSync(dir);
  }

  static fromDirSync(dir: string): Tokenizer {
    const path = join(dir, 'tokenizer.json');
    if (!existsSync(path)) throw new TokenizerError(`${dir}: tokenizer.json not found`);
    const readOpt = (f: string): Record<string, unknown> => {
      const p = join(dir, f);
      if (!existsSync(p)) return {};
      try {
        return JSON.parse(readFileSync(p, 'utf8'));
      } catch (e) {
        throw new TokenizerError(`${p}: invalid JSON (${(e as Error).message})`);
      }
    };
    let json: Record<string, unknown>;
    try {
      json = JSON.parse(readFileSync(path, 'utf8'));
    } catch (e) {
      throw new TokenizerError(`${path}: invalid JSON (${(e as Error).message})`);
    }
    return new Tokenizer(dir, json, readOpt('tokenizer_config.json'), readOpt('generation_config.json'), dir);
  }

  /**
   * A tokenizer from an in-memory tokenizer.json (object or JSON text), with what tokenizer_config.json and
   * generation_config.json would hold (bos_token / eos_token / pad_token, add_bos_token, chat_template; eos_token_id).
   * `source` names where it came from in messages (e.g. the GGUF file whose embedded vocabulary it is).
   */
  static fromJson(
    json: Record<string, unknown> | string,
    opts: { source?: string; tokenizerConfig?: Record<string, unknown>; generationConfig?: Record<string, unknown> } = {},
  ): Tokenizer {
    const source = opts.source ?? '<tokenizer.json>';
    let obj: Record<string, unknown>;
    if (typeof json === 'string') {
      try {
        obj = JSON.parse(json);
      } catch (e) {
        throw new TokenizerError(`${source}: invalid JSON (${(e as Error).message})`);
      }
    } else obj = json;
    return new Tokenizer(source, obj, opts.tokenizerConfig ?? {}, opts.generationConfig ?? {}, null);
  }

  idToToken(id: number): string | undefined {
    const a = this.addedById.get(id);
    if (a) return a.content;
    return this.model.idToTok[id];
  }

  tokenToId(t: string): number | undefined {
    return this.addedByContent.get(t) ?? this.model.vocab.get(t);
  }

  /** Splits `text` on added tokens (leftmost-longest, honouring lstrip/rstrip/single_word). */
  private splitAdded(text: string, table: Map<string, AddedTokenJson[]>): (string | number)[] {
    if (table.size === 0 || text.length === 0) return text.length ? [text] : [];
    const out: (string | number)[] = [];
    let start = 0; // start of pending plain text
    let i = 0;
    const isWs = (c: string | undefined): boolean => c !== undefined && /\s/u.test(c);
    const isWordChar = (c: string | undefined): boolean => c !== undefined && /[\p{L}\p{N}_]/u.test(c);
    while (i < text.length) {
      const cp = text.codePointAt(i)!;
      const c = String.fromCodePoint(cp);
      const cands = table.get(c);
      let hit: AddedTokenJson | undefined;
      if (cands) {
        for (const a of cands) {
          if (!text.startsWith(a.content, i)) continue;
          if (a.single_word) {
            const before = i > 0 ? text[i - 1] : undefined;
            const after = text[i + a.content.length];
            if (isWordChar(before) || isWordChar(after)) continue;
          }
          hit = a;
          break;
        }
      }
      if (!hit) {
        i += c.length;
        continue;
      }
      let s = i, e = i + hit.content.length;
      if (hit.lstrip) while (s > start && isWs(text[s - 1])) s--;
      if (hit.rstrip) while (e < text.length && isWs(text[e])) e++;
      if (s > start) out.push(text.slice(start, s));
      out.push(hit.id);
      start = i = e;
    }
    if (start < text.length) out.push(text.slice(start));
    return out;
  }

  /** The model part of encoding for one plain (non-added-token) segment of raw text; `atStart`: the segment
   *  starts at offset 0 of the input. */
  private encodeSegment(seg: string, out: number[], atStart: boolean): void {
    const norm = this.normalizer ? this.normalizer.normalizeString(seg) : seg;
    let first = atStart;
    for (const part of this.splitAdded(norm, this.normAdded)) {
      if (typeof part === 'number') {
        out.push(part);
        first = false;
        continue;
      }
      const pre = first ? this.preTokenizer : this.preTokenizerRest;
      first = false;
      const bpe = this.bpe!;
      if (!pre) {
        bpe.tokenize(part, out);
        continue;
      }
      for (const [w] of pre.preTokenizeString(part)) bpe.tokenize(w, out);
    }
  }

  /**
   * The ids the post-processor puts around a single sequence when special tokens are added (e.g. BOS before it
   * for Llama, nothing for Qwen2). What a converter records as add_bos_token / add_eos_token.
   */
  postProcessorTokens(): { before: number[]; after: number[] } {
    const ids = this.encodePost([-1], true);
    const at = ids.indexOf(-1);
    return { before: ids.slice(0, at), after: ids.slice(at + 1) };
  }

  private encodePost(ids: number[], addSpecial: boolean): number[] {
    if (!addSpecial) return ids;
    let cur = ids;
    for (const step of this.post) {
      const r = step.raw;
      if (step.type === 'TemplateProcessing') {
        const single = r.single as Record<string, { id: string }>[];
        const specials = (r.special_tokens as Record<string, { ids: number[] }>) ?? {};
        const res: number[] = [];
        for (const piece of single) {
          if (piece.Sequence) for (const id of cur) res.push(id);
          else if (piece.SpecialToken) {
            const sp = specials[piece.SpecialToken.id];
            if (!sp) throw new TokenizerError(`post_processor: unknown special token ${piece.SpecialToken.id}`);
            for (const id of sp.ids) res.push(id);
          }
        }
        cur = res;
      } else if (step.type === 'RobertaProcessing' || step.type === 'BertProcessing') {
        const cls = (r.cls as [string, number])[1], sep = (r.sep as [string, number])[1];
        cur = [cls, ...cur, sep];
      }
      // ByteLevel post-processing only trims offsets: ids unchanged.
    }
    return cur;
  }

  /**
   * Encodes text to ids exactly as tokenizer.json does (special tokens in the text are recognised), on the
   * calling thread. Throws a TokenizerError when `syncEncode` is false: use encodeAsync() then.
   */
  encode(text: string, opts: EncodeOptions = {}): number[] {
    if (!this.syncEncode)
      throw new TokenizerError(`${this.dir}: synchronous encode does not support this tokenizer.json (${this.syncUnsupported}); use encodeAsync()`);
    const ids: number[] = [];
    this.splitAdded(text, this.rawAdded).forEach((part, i) => {
      if (typeof part === 'number') ids.push(part);
      else this.encodeSegment(part, ids, i === 0);
    });
    return this.encodePost(ids, opts.addSpecialTokens !== false);
  }

  /**
   * Encodes for every tokenizer.json, without blocking the event loop on long inputs: short texts take the
   * synchronous pipeline (same ids, no thread hop), long ones (over ASYNC_ENCODE_MIN_CHARS; the sync path
   * runs at roughly 0.5-1 M chars/s) and files the sync pipeline does not cover go to the `tokenizers`
   * package, which encodes on the libuv thread pool. Callers that must work with any model and any prompt
   * length (generation, chat encoding) use this.
   */
  async encodeAsync(text: string, opts: EncodeOptions = {}): Promise<number[]> {
    if (this.syncEncode && typeof text === 'string' && text.length <= ASYNC_ENCODE_MIN_CHARS) return this.encode(text, opts);
    return this.encodeNative(text, opts);
  }

  /** Encodes with the `tokenizers` package (the reference implementation), whatever syncEncode says. */
  async encodeNative(text: string, opts: EncodeOptions = {}): Promise<number[]> {
    if (typeof text !== 'string') throw new TokenizerError('text must be a string');
    return (await this.native.encode(text, null, { addSpecialTokens: opts.addSpecialTokens !== false })).getIds();
  }

  /** Decodes ids (special ids removed first unless skipSpecialTokens is false; ids without a token are skipped). */
  decode(ids: readonly number[], opts: DecodeOptions = {}): string {
    const skip = opts.skipSpecialTokens !== false;
    const toks: string[] = [];
    for (const id of ids) {
      if (skip && this.specialIds.has(id)) continue;
      const t = this.idToToken(id);
      // ids without a token (the padding rows of a model whose embedding is larger than its vocabulary, e.g.
      // Qwen2.5's 151936 vs 151665) decode to nothing, as in the tokenizers library
      if (t === undefined) continue;
      toks.push(t);
    }
    if (!this.decoder) return toks.join(' ');
    return this.decoder.decode(toks);
  }

  /**
   * Incremental detokenizer for streaming. Each push decodes a window that starts at the previous emission
   * point (a character boundary, with one emitted chunk of left context so decoders that strip a leading
   * space or merge across tokens see a real neighbour) and emits the text past that context, holding back
   * while the text ends in U+FFFD (an incomplete UTF-8 sequence from byte-level / byte-fallback tokens).
   * Skipped special ids never enter the window (decode() drops them before the decoder runs too).
   * With byte fallback (`<0x..>` tokens), the ByteFallback decoder turns a whole run of byte tokens into
   * U+FFFDs when the run is not valid UTF-8, so text is held back while the last token is a byte token (the
   * run may still turn invalid); a window never starts inside a run. Concatenated deltas equal
   * `decode(all ids)`, invalid sequences included.
   */
  createStreamDecoder(opts: DecodeOptions = {}): StreamDecoder {
    const skip = opts.skipSpecialTokens !== false;
    const ids: number[] = [];
    let prefixOffset = 0; // window start: the emission point before the last one
    let readOffset = 0; // tokens up to here have been emitted
    const text = (a: number, b: number): string => this.decode(ids.slice(a, b), { skipSpecialTokens: false });
    const commonPrefix = (a: string, b: string): number => {
      let i = 0;
      while (i < a.length && i < b.length && a.charCodeAt(i) === b.charCodeAt(i)) i++;
      return i;
    };
    return {
      push: (id: number): string => {
        if (skip && this.specialIds.has(id)) return '';
        if (this.idToToken(id) === undefined) return ''; // decodes to nothing (see decode)
        ids.push(id);
        const prefix = text(prefixOffset, readOffset);
        const full = text(prefixOffset, ids.length);
        if (this.model.byteFallback && this.isByteToken(id)) return '';
        if (full.length > prefix.length && !full.endsWith('\uFFFD') && full.startsWith(prefix)) {
          prefixOffset = readOffset;
          readOffset = ids.length;
          return full.slice(prefix.length);
        }
        return '';
      },
      flush: (): string => {
        if (readOffset === ids.length) return '';
        const prefix = text(prefixOffset, readOffset);
        const full = text(prefixOffset, ids.length);
        prefixOffset = readOffset;
        readOffset = ids.length;
        return full.slice(commonPrefix(prefix, full));
      },
    };
  }

  /** Whether `id` is a byte-fallback token `<0xAB>` of the model vocabulary. */
  private isByteToken(id: number): boolean {
    return !this.addedById.has(id) && /^<0x[0-9A-F]{2}>$/.test(this.model.idToTok[id] ?? '');
  }

  /**
   * The bytes a token contributes to the decoded text (for constrained decoding). Byte-level vocabularies
   * map through the GPT-2 byte table; SentencePiece vocabularies turn "▁" into a space and `<0xAB>` into
   * the byte. Special tokens give their content. The sequence-initial space strip of Llama decoders is
   * not applied here (callers treat the first token's leading space accordingly).
   */
  tokenBytes(id: number): Uint8Array {
    const c = this.bytesCache.get(id);
    if (c) return c;
    const t = this.idToToken(id);
    let out: Uint8Array;
    if (t === undefined) out = new Uint8Array(0);
    else if (this.addedById.has(id)) out = new TextEncoder().encode(t);
    else if (this.byteLevel) {
      const bytes: number[] = [];
      for (const ch of t) {
        const b = this.charToByte.get(ch);
        if (b === undefined) bytes.push(...new TextEncoder().encode(ch));
        else bytes.push(b);
      }
      out = Uint8Array.from(bytes);
    } else {
      const m = /^<0x([0-9A-Fa-f]{2})>$/.exec(t);
      if (m && this.model.byteFallback) out = Uint8Array.of(parseInt(m[1], 16));
      else out = new TextEncoder().encode(t.replaceAll('\u2581', ' '));
    }
    this.bytesCache.set(id, out);
    return out;
  }

  /** Whether the decoder strips one leading space at the start of the text (Llama/SentencePiece). */
  get stripsLeadingSpace(): boolean {
    return !this.byteLevel && this.decode([this.model.vocab.get('\u2581') ?? -1].filter((x) => x >= 0)) === '';
  }

  /**
   * Number of leading tokens of `encode(text)` that are fully determined by `text.slice(0, charOffset)`:
   * the length of the common prefix of encode(text) and encode(text.slice(0, charOffset)). When no token
   * straddles the boundary this is exactly the token count of the prefix; when one does (a merge across the
   * boundary), the straddling token is excluded, so a cache breakpoint never covers text past the marker.
   */
  tokenCountAt(text: string, charOffset: number, opts: EncodeOptions = {}, full?: number[]): number {
    const all = full ?? this.encode(text, opts);
    return commonPrefixLength(all, this.encode(text.slice(0, charOffset), opts));
  }

  /** tokenCountAt for every tokenizer.json (see encodeAsync). */
  async tokenCountAtAsync(text: string, charOffset: number, opts: EncodeOptions = {}, full?: number[]): Promise<number> {
    const all = full ?? (await this.encodeAsync(text, opts));
    return commonPrefixLength(all, await this.encodeAsync(text.slice(0, charOffset), opts));
  }
}

/** encodeAsync hands texts longer than this (UTF-16 units) to the thread pool. */
export const ASYNC_ENCODE_MIN_CHARS = 16_384;

function commonPrefixLength(a: readonly number[], b: readonly number[]): number {
  let k = 0;
  while (k < a.length && k < b.length && a[k] === b[k]) k++;
  return k;
}
