// Piece dropout: subword regularization for fresh encoders (BPE-dropout, Provilkov et al. 2020, applied to
// WordPiece). At training time a text word is segmented again with WordPiece's greedy longest match, where each
// candidate piece longer than one character is passed over with probability p, so the model also sees a word as
// smaller pieces of its own vocabulary. With pooled words (token_pooling mean) a word unseen in train is read from its
// pieces; this trains that reading on the words it has seen. Serving never drops pieces.
import type { EncoderTokenizer } from '../../models/encoder/tokenizer.ts';
import { TrainingConfigError } from '../common.ts';
import type { Uniform } from './examples.ts';

/** One start position's candidates, longest first: [end, id]. */
type Candidates = [number, number][];

/** Segments a (lower-cased) text word again, drawing from `rng`; returns the tokenizer's own pieces where the word
 * is not a plain run of letters and digits (the pre-tokenizer would split it) or a character is out of vocabulary. */
export type Resegment = (word: string, pieces: Int32Array, rng: Uniform) => Int32Array;

const PLAIN = /^[\p{L}\p{N}]{2,64}$/u;

/** Throws where the tokenizer is not WordPiece (a pretrained base's Unigram has no greedy longest match to redo). */
export function pieceDropout(tok: EncoderTokenizer, p: number): Resegment {
  const prefix = tok.wordPiecePrefix();
  if (prefix === null) throw new TrainingConfigError('piece_dropout needs a WordPiece tokenizer (a fresh encoder\'s)');
  const vocab = tok.vocab();
  const cache = new Map<string, Candidates[] | null>();
  const candidates = (word: string): Candidates[] | null => {
    let c = cache.get(word);
    if (c !== undefined) return c;
    c = null;
    if (PLAIN.test(word)) {
      const chars = [...word.normalize('NFC')];
      c = chars.map((_, i) => {
        const out: Candidates = [];
        for (let j = chars.length; j > i; j--) {
          const id = vocab.get((i ? prefix : '') + chars.slice(i, j).join(''));
          if (id !== undefined) out.push([j, id]);
        }
        return out;
      });
      if (c.some((o, i) => o[o.length - 1]?.[0] !== i + 1)) c = null; // a character out of vocabulary
    }
    if (cache.size > 200_000) cache.clear();
    cache.set(word, c);
    return c;
  };
  return (word, pieces, rng) => {
    if (p <= 0 || pieces.length === 0) return pieces;
    const c = candidates(word);
    if (!c) return pieces;
    const out: number[] = [];
    for (let i = 0; i < c.length; ) {
      const opts = c[i]!;
      let k = 0;
      while (k < opts.length - 1 && rng.uniform() < p) k++; // the single character is never passed over
      out.push(opts[k]![1]);
      i = opts[k]![0];
    }
    return Int32Array.from(out);
  };
}
