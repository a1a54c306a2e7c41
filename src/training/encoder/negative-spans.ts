// Class-balanced negative spans for the span loss (issue 17, docs/training.md "Negative spans by the data's
// balance"). GLiNER keeps each negative (span, label) pair of the span loss with probability 0.5, which suits data as
// dense in entities as CoNLL-2003 (0.0042 of its (candidate span, label) pairs are mentions, spans of up to the fresh
// bases' 8 words). Data six times sparser, WNUT-17's tweets (0.00069), then trains a model that rarely reaches the 0.5
// threshold on a name it has not seen: dev recall 0.10 at precision 0.49. `negative_span_keep: 'balanced'` keeps
// fewer negatives where mentions are rarer, by the square root of the ratio of the data's positive share to
// CoNLL-2003's (square-root rebalancing, halfway in log between keeping every negative and matching the reference's
// balance exactly): 0.5 for CoNLL-2003, 0.203 for WNUT-17, where 0.2 measured best of 0.1 / 0.2 / 0.5.
import { preprocessText, splitWords } from '../../models/encoder/words.ts';
import type { EncoderExample } from './examples.ts';
import { NEGATIVE_SPAN_HARD, type NegativeSpanHard } from './recipe.ts';

/** The positive share at which GLiNER's 0.5 is the measured best: CoNLL-2003's training split as positiveSpanShare
 * counts it for a fresh base (spans of up to 8 words, the formatter's words; 1.67 mentions per text, 4 labels). */
export const BALANCED_REFERENCE_SHARE = 0.00415;
/** GLiNER's keep, the most 'balanced' gives, and the least. */
export const GLINER_NEGATIVE_KEEP = 0.5;
const LEAST_KEEP = 0.05;

/** The share of (candidate span, entity label) pairs of the examples that ask for entities which are mentions: every
 * span of up to `maxWidth` words of a text's first `maxWords` words (as formatInput splits it), once per entity label
 * of its prompt. null when no example asks for entities or none has a mention. */
export function positiveSpanShare(examples: EncoderExample[], maxWidth: number, maxWords: number): number | null {
  let pairs = 0;
  let pos = 0;
  for (const ex of examples) {
    const M = ex.schema.entities?.length ?? 0;
    if (!M) continue;
    const W = Math.min(maxWords, splitWords(preprocessText(ex.text)).tokens.length);
    const spans = W <= maxWidth ? (W * (W + 1)) / 2 : maxWidth * (W - maxWidth) + (maxWidth * (maxWidth + 1)) / 2;
    pairs += spans * M;
    for (const ms of ex.entities.values()) pos += ms.length;
  }
  return pairs > 0 && pos > 0 ? pos / pairs : null;
}

/** The keep 'balanced' resolves to for a positive share: 0.5·√(share / reference), within [0.05, 0.5]. The reference
 * is counted at the fresh bases' width; a base with wider spans has more negatives per mention on any data, so it
 * reads as sparser. */
export function balancedNegativeKeep(share: number | null): number {
  if (share === null) return GLINER_NEGATIVE_KEEP;
  const keep = GLINER_NEGATIVE_KEEP * Math.sqrt(share / BALANCED_REFERENCE_SHARE);
  return Math.round(Math.max(LEAST_KEEP, Math.min(GLINER_NEGATIVE_KEEP, keep)) * 1000) / 1000;
}

/** The hard negatives a run trains with, as the native step numbers them (0 none, 1 'label', 2 'boundary'). 'auto' is
 * 'label' at GLiNER's keep (dense data: CoNLL-2003 gained with it) and none where the keep is lower (sparse data: on
 * WNUT-17 at 0.2 the mention's span under five other labels, always kept, cut its dev recall from 0.23 to 0.11). */
export function resolveSpanHard(mode: NegativeSpanHard, keep: number): { mode: Exclude<NegativeSpanHard, 'auto'>;
  native: number } {
  const m = mode === 'auto' ? (keep >= GLINER_NEGATIVE_KEEP ? 'label' : 'none') : mode;
  return { mode: m, native: NEGATIVE_SPAN_HARD.indexOf(m) };
}
