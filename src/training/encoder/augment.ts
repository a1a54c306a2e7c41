// Mention replacement for NER training (Dai & Adel 2020, "An Analysis of Simple Data Augmentation for Named Entity
// Recognition"): at each step an entity mention of a training text is swapped, with probability p, for another
// mention of the same label drawn from the training data, so the model sees each context with names it was not
// written with and has to read the context, not memorize the names (most of a dev split's names are unseen).
// Only examples whose targets are entity mentions by character offset take part: relation and structure targets
// point into the text by offsets or strings that a swap would break.
import type { EncoderExample, Featurized, Uniform } from './examples.ts';

/** Per label, the distinct mention strings of the training texts (their original case). */
export type MentionPool = Map<string, string[]>;

type Span = { start: number; end: number };
const isSpan = (m: unknown): m is Span => typeof m === 'object' && m !== null && 'start' in m;

/** Whether a swap keeps an example's targets whole: entity mentions by offset only, nothing else to point into it. */
export function replaceable(ex: EncoderExample): boolean {
  if (ex.relations.size || ex.structures.size || ex.classes.size) return false;
  let any = false;
  for (const ms of ex.entities.values())
    for (const m of ms) {
      if (!isSpan(m)) return false;
      any = true;
    }
  return any;
}

/** The mention strings of every replaceable example, per label, each once (sorted, so a pool is the same for the
 * same data in any order). */
export function mentionPool(examples: EncoderExample[]): MentionPool {
  const sets = new Map<string, Set<string>>();
  for (const ex of examples) {
    if (!replaceable(ex)) continue;
    for (const [label, ms] of ex.entities) {
      const set = sets.get(label) ?? new Set<string>();
      for (const m of ms as Span[]) {
        const s = ex.text.slice(m.start, m.end);
        if (s.trim()) set.add(s);
      }
      sets.set(label, set);
    }
  }
  return new Map([...sets].map(([label, set]) => [label, [...set].sort()]));
}

/**
 * A copy of `ex` in which each entity mention is replaced, with probability p, by a mention of its label drawn
 * uniformly from `pool`; the other mentions' offsets move with the text. An example with overlapping mentions (nested,
 * or one span under two labels) is left as it is. Returns `ex` itself when nothing is replaced.
 */
export function replaceMentions(ex: EncoderExample, pool: MentionPool, p: number, rng: Uniform): EncoderExample {
  if (p <= 0 || !replaceable(ex)) return ex;
  const all: { label: string; start: number; end: number }[] = [];
  for (const [label, ms] of ex.entities) for (const m of ms as Span[]) all.push({ label, start: m.start, end: m.end });
  all.sort((a, b) => a.start - b.start || a.end - b.end);
  if (all.some((m, i) => i > 0 && all[i - 1].end > m.start)) return ex;
  // two draws per mention, in text order, whether or not it is replaced: the stream does not depend on the pool
  const swap = all.map((m) => {
    const u = rng.uniform();
    const v = rng.uniform();
    const cands = pool.get(m.label);
    return u < p && cands?.length ? cands[Math.min(cands.length - 1, Math.floor(v * cands.length))] : null;
  });
  if (swap.every((s) => s === null)) return ex;
  let text = '';
  let at = 0;
  const entities = new Map<string, Span[]>([...ex.entities.keys()].map((l) => [l, []]));
  all.forEach((m, i) => {
    text += ex.text.slice(at, m.start);
    const s = swap[i] ?? ex.text.slice(m.start, m.end);
    entities.get(m.label)!.push({ start: text.length, end: text.length + s.length });
    text += s;
    at = m.end;
  });
  text += ex.text.slice(at);
  return { ...ex, text, entities };
}

/**
 * Mention dropout: each entity mention of a featurized NER example has all the pieces of its words replaced by `unkId`
 * with probability p, its word features (shape, suffix) kept, so the model learns to find a name it has no embedding
 * for from its shape and its context (a third of CoNLL-2003's dev entities are names unseen in train). Returns a copy;
 * the targets are unchanged.
 */
export function dropMentions(it: Featurized, p: number, unkId: number, rng: Uniform): Featurized {
  if (p <= 0) return it;
  let ids: Int32Array | null = null;
  it.segs.forEach((s, si) => {
    if (it.f.segments[si]?.kind !== 'entities') return;
    for (let q = 0; q < s.pos.length; q += 4) {
      if (rng.uniform() >= p) continue;
      const [i, k] = [s.pos[q + 2]!, s.pos[q + 3]!];
      ids ??= it.f.ids.slice();
      for (let w = i; w <= i + k && w < it.f.wordPos.length; w++) ids.fill(unkId, it.f.wordPos[w], it.f.wordEnd[w]);
    }
  });
  return ids ? { f: { ...it.f, ids }, segs: it.segs } : it;
}
