// A small WordPiece vocabulary builder for fresh GLiNER2 encoders (no pretrained tokenizer offline).
//
// The `tokenizers` npm package (0.23) can load and run WordPiece/Unigram/BPE models but exposes no
// trainer constructors, so the vocabulary is built here and written as a standard tokenizer.json
// that `tokenizers` (and Hugging Face) load:
//   normalizer NFC, pre-tokenizer BertPreTokenizer (whitespace + punctuation), model WordPiece
//   ("##" continuation, [UNK]), decoder WordPiece, the GLiNER2 markers as special added tokens.
// Vocabulary (frequency based, deterministic; not the likelihood-merge algorithm of the original
// WordPiece paper): special tokens; every character seen (as a word start and as "##c"); then whole
// words by descending frequency (ties by string) up to 70% of the remaining budget; then the most
// frequent word-initial prefixes and "##" suffixes (2..6 characters) of the words left out. GLiNER2
// lower-cases text words before tokenization, so words are counted lower-cased; characters are
// collected in both cases so prompts with capitals still tokenize without [UNK].
import { MARKERS } from '../../models/encoder/tokenizer.ts';

export const BASE_SPECIALS = ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]'] as const;

export interface WordPieceOptions {
  vocabSize?: number;
  /** words seen fewer times are not added whole (default 2) */
  minFrequency?: number;
}

const PRE = /[\p{L}\p{N}\p{M}_]+|[^\s\p{L}\p{N}\p{M}_]/gu;

export function preTokenize(text: string): string[] {
  return text.normalize('NFC').match(PRE) ?? [];
}

/** Builds the vocabulary (token → id) from texts. */
export function buildWordPieceVocab(texts: Iterable<string>, opts: WordPieceOptions = {}): string[] {
  const size = opts.vocabSize ?? 8000;
  const minFreq = opts.minFrequency ?? 2;
  const words = new Map<string, number>();
  const chars = new Set<string>();
  for (const t of texts) {
    for (const w of preTokenize(t)) {
      for (const ch of w) chars.add(ch);
      const lw = w.toLowerCase();
      for (const ch of lw) chars.add(ch);
      words.set(lw, (words.get(lw) ?? 0) + 1);
    }
  }
  const vocab: string[] = [...BASE_SPECIALS, ...MARKERS];
  const seen = new Set(vocab);
  const push = (s: string) => {
    if (seen.has(s) || vocab.length >= size) return;
    seen.add(s);
    vocab.push(s);
  };
  const sortedChars = [...chars].sort();
  for (const c of sortedChars) push(c);
  for (const c of sortedChars) push('##' + c);
  const byFreq = [...words.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  const wholeBudget = vocab.length + Math.floor((size - vocab.length) * 0.7);
  const rest: [string, number][] = [];
  for (const [w, f] of byFreq) {
    if (f >= minFreq && vocab.length < wholeBudget && [...w].length > 1) push(w);
    else if (!seen.has(w)) rest.push([w, f]);
  }
  const pieces = new Map<string, number>();
  for (const [w, f] of rest) {
    const cs = [...w];
    for (let n = 2; n <= Math.min(6, cs.length - 1); n++) {
      const pre = cs.slice(0, n).join('');
      pieces.set(pre, (pieces.get(pre) ?? 0) + f);
      const suf = '##' + cs.slice(cs.length - n).join('');
      pieces.set(suf, (pieces.get(suf) ?? 0) + f);
    }
  }
  const pf = [...pieces.entries()].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
  for (const [p] of pf) {
    if (vocab.length >= size) break;
    push(p);
  }
  return vocab;
}

/** A tokenizer.json (Hugging Face format) for the vocabulary. */
export function wordPieceTokenizerJson(vocab: string[]): Record<string, unknown> {
  const specials = new Set<string>([...BASE_SPECIALS, ...MARKERS]);
  const v: Record<string, number> = {};
  vocab.forEach((t, i) => (v[t] = i));
  return {
    version: '1.0',
    truncation: null,
    padding: null,
    added_tokens: vocab
      .map((t, i) => ({ id: i, content: t, single_word: false, lstrip: false, rstrip: false, normalized: false, special: true }))
      .filter((a) => specials.has(a.content)),
    normalizer: { type: 'NFC' },
    pre_tokenizer: { type: 'BertPreTokenizer' },
    post_processor: null,
    decoder: { type: 'WordPiece', prefix: '##', cleanup: true },
    model: { type: 'WordPiece', unk_token: '[UNK]', continuing_subword_prefix: '##', max_input_chars_per_word: 100, vocab: v },
  };
}
