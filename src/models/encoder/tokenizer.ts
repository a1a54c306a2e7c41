// Sub-word tokenization for GLiNER2: every processor token (schema piece, separator, prefix token,
// text word) is tokenized on its own with tokenizer.json semantics (HF `tokenizers`, no special
// tokens added), as the reference does (spec §3.5). Results are cached per token string, so a
// running service tokenizes each distinct word once.
import { readFileSync } from 'node:fs';
import { Tokenizer } from 'tokenizers';

export const MARKERS = ['[SEP_STRUCT]', '[SEP_TEXT]', '[P]', '[C]', '[E]', '[R]', '[L]', '[EXAMPLE]', '[OUTPUT]', '[DESCRIPTION]'] as const;

/** The continuation prefix of the WordPiece model in a tokenizer.json's text, null for another model type. */
export function wordPiecePrefixIn(tokenizerJson: string): string | null {
  const model = (JSON.parse(tokenizerJson) as { model?: Record<string, unknown> }).model;
  if (model?.type !== 'WordPiece') return null;
  return typeof model.continuing_subword_prefix === 'string' ? model.continuing_subword_prefix : '##';
}

export class EncoderTokenizer {
  private readonly tok: Tokenizer;
  private readonly cache = new Map<string, Int32Array>();
  private readonly maxCache: number;
  private vocabMap: Map<string, number> | undefined;
  readonly markerIds: Record<string, number>;

  constructor(readonly path: string, maxCache = 200_000) {
    this.tok = Tokenizer.fromFile(path);
    this.maxCache = maxCache;
    this.markerIds = {};
    for (const m of MARKERS) {
      const id = this.tok.tokenToId(m);
      if (id === null || id === undefined) throw new Error(`${path}: tokenizer has no GLiNER2 marker token ${m}`);
      this.markerIds[m] = id;
    }
  }

  vocabSize(): number {
    return this.tok.getVocabSize(true);
  }

  /** Piece ids of each token (tokenized independently), in order. */
  async pieces(tokens: string[]): Promise<Int32Array[]> {
    if (this.cache.size > this.maxCache) this.cache.clear();
    const missing: string[] = [];
    const seen = new Set<string>();
    for (const t of tokens) if (!this.cache.has(t) && !seen.has(t)) (seen.add(t), missing.push(t));
    if (missing.length) {
      const encs = await this.tok.encodeBatch(missing, { addSpecialTokens: false });
      missing.forEach((t, i) => this.cache.set(t, Int32Array.from(encs[i].getIds())));
    }
    return tokens.map((t) => this.cache.get(t)!);
  }

  /** Whole texts with the tokenizer's template (for embeddings). */
  async encodeTexts(texts: string[]): Promise<Int32Array[]> {
    if (!texts.length) return [];
    const encs = await this.tok.encodeBatch(texts, { addSpecialTokens: true });
    return encs.map((e) => Int32Array.from(e.getIds()));
  }

  /** The vocabulary (piece → id), added tokens included; read once. */
  vocab(): Map<string, number> {
    this.vocabMap ??= new Map(Object.entries(this.tok.getVocab(true)));
    return this.vocabMap;
  }

  /** The continuation prefix of a WordPiece tokenizer ("##" for the fresh encoders' own), null for other models
   * (the pretrained DeBERTa-v3 checkpoints' Unigram). */
  wordPiecePrefix(): string | null {
    return wordPiecePrefixIn(readFileSync(this.path, 'utf8'));
  }

  /** Id of a vocabulary token (e.g. "[UNK]"), or null. */
  tokenToId(token: string): number | null {
    return this.tok.tokenToId(token) ?? null;
  }

  idToToken(id: number): string | null {
    return this.tok.idToToken(id);
  }
}
