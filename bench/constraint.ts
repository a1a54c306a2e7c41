// `npm run bench -- constraint [--quick]` (or `npx tsx bench/constraint.ts`): cost of JSON-Schema constrained
// decoding per generated token, without and with the constraint, for vocabularies of the sizes that matter:
// minueza's real 32k SentencePiece vocabulary, and synthetic byte-level vocabularies of SmolLM2 (49,152) and
// Qwen2.5 (151,643) size (speed depends on the vocabulary's size and byte structure, not on the exact merges).
// The "model" is replaced by fixed random logits; the path decoded is a fixed valid JSON document, tokenized
// by longest match, so both columns do the same number of steps. Cold = first document (trie walks, masks
// computed); warm = the same schema again (masks cached per matcher state).
import { join } from 'node:path';
import { Tokenizer } from '../src/tokenize/tokenizer.ts';
import { compileJsonSchema, type ConstraintTokenizer } from '../src/runtime/json-constraint.ts';
import { Sampler } from '../src/runtime/sampling.ts';

const shared = join(import.meta.dirname, '..', '..', 'shared');

function syntheticVocab(size: number, seed = 1): ConstraintTokenizer {
  let s = seed;
  const rnd = (): number => ((s = (Math.imul(s, 1103515245) + 12345) & 0x7fffffff) / 0x7fffffff);
  const enc = new TextEncoder();
  const toks: Uint8Array[] = [];
  const seen = new Set<string>();
  const add = (b: Uint8Array): void => {
    const k = b.join(',');
    if (!seen.has(k)) { seen.add(k); toks.push(b); }
  };
  for (let b = 0; b < 256; b++) add(Uint8Array.of(b));
  const punct = ['{', '}', '[', ']', '"', ':', ',', '":', '",', '{"', '"}', '["', '"]', ' "', ', "', '":"', '": "', '},', '],', '\n', '\n  ', '\n    ', '  ', '    ', '0', '1', '.', '-', 'true', 'false', 'null', ' {', ' [', '},{', '":[', '":{'];
  for (const p of punct) add(enc.encode(p));
  const sy = ['ka', 'lo', 're', 'mi', 'th', 'an', 'er', 'in', 'on', 'st', 'qu', 'ch', 'ea', 'ou', 'ng', 'ti', 'al', 'es', 'or', 'ar', 'ne', 'co', 'de', 'pe', 'ra', 'li', 'se', 'ma', 'to', 'ba'];
  const uni = ['é', 'ü', 'ñ', '東', '京', 'д', 'ж', 'ق', '🙂', 'の'];
  while (toks.length < size) {
    const r = rnd();
    let w = '';
    if (r < 0.08) w = String(Math.floor(rnd() * 1000));
    else if (r < 0.12) w = uni[Math.floor(rnd() * uni.length)] + uni[Math.floor(rnd() * uni.length)];
    else {
      const n = 1 + Math.floor(rnd() * 4);
      for (let i = 0; i < n; i++) w += sy[Math.floor(rnd() * sy.length)];
      if (rnd() < 0.3) w = w[0].toUpperCase() + w.slice(1);
      if (rnd() < 0.55) w = ' ' + w;
      if (rnd() < 0.05) w += rnd() < 0.5 ? '"' : ',';
    }
    add(enc.encode(w));
  }
  const eos = size; // EOS id just past the byte tokens
  return {
    vocabSize: size + 1,
    eosIds: [eos],
    specialIds: new Set([eos]),
    tokenBytes: (id: number) => (id < toks.length ? toks[id] : new Uint8Array(0)),
  };
}

/** Greedy longest-match tokenization of `text` over the vocabulary's byte strings. */
function longestMatch(tok: ConstraintTokenizer, text: string): number[] {
  const root = new Map<number, { id: number; kids: Map<number, unknown> }>();
  type N = { id: number; kids: Map<number, N> };
  const top: N = { id: -1, kids: root as Map<number, N> };
  for (let id = 0; id < tok.vocabSize; id++) {
    if (tok.specialIds.has(id)) continue;
    let n = top;
    for (const b of tok.tokenBytes(id)) {
      let c = n.kids.get(b);
      if (!c) n.kids.set(b, (c = { id: -1, kids: new Map() }));
      n = c;
    }
    if (n !== top && n.id < 0) n.id = id;
  }
  const bytes = new TextEncoder().encode(text);
  const out: number[] = [];
  for (let i = 0; i < bytes.length;) {
    let n = top, best = -1, bestLen = 0;
    for (let j = i; j < bytes.length; j++) {
      const c = n.kids.get(bytes[j]);
      if (!c) break;
      n = c;
      if (n.id >= 0) { best = n.id; bestLen = j - i + 1; }
    }
    if (best < 0) throw new Error(`byte ${bytes[i]} not in vocabulary`);
    out.push(best);
    i += bestLen;
  }
  return out;
}

const SCHEMA = {
  type: 'object',
  properties: {
    name: { type: 'string' },
    age: { type: 'integer' },
    email: { type: ['string', 'null'] },
    tags: { type: 'array', items: { type: 'string' }, maxItems: 8 },
    address: { type: 'object', properties: { street: { type: 'string' }, city: { type: 'string' }, zip: { type: 'string', maxLength: 10 } }, required: ['city'] },
    role: { enum: ['admin', 'editor', 'viewer'] },
    score: { type: 'number' },
    active: { type: 'boolean' },
  },
  required: ['name', 'age', 'tags', 'role'],
  additionalProperties: false,
};
const DOC = JSON.stringify({
  name: 'Katherine Lorenza', age: 42, email: null, tags: ['kalo', 'mire', 'stan', 'thea'],
  address: { street: '12 Quinton Road', city: 'Ealing', zip: 'W5 2QT' }, role: 'editor', score: 98.25, active: true,
});

function measure(name: string, tok: ConstraintTokenizer, reps: number): void {
  const V = tok.vocabSize;
  const ids = longestMatch(tok, DOC);
  const logits = new Float32Array(V);
  for (let i = 0; i < V; i++) logits[i] = Math.sin(i * 7.13) * 3;
  const sampler = new Sampler({ temperature: 0 }, V);
  // without: sampling only
  let t0 = performance.now();
  for (let r = 0; r < reps; r++) for (let i = 0; i < ids.length; i++) sampler.sample(logits, ids.slice(0, i));
  const without = (reps * ids.length) / ((performance.now() - t0) / 1000);
  // with: compile (trie built once per tokenizer), then allowed() + sample(masked) + advance(the doc token)
  t0 = performance.now();
  const c = compileJsonSchema(SCHEMA, tok);
  const compileMs = performance.now() - t0;
  const pass = (): number => {
    const st = c.start();
    const t1 = performance.now();
    for (let i = 0; i < ids.length; i++) {
      const mask = st.allowed();
      sampler.sample(logits, ids.slice(0, i), mask);
      st.advance(ids[i]);
    }
    if (!st.canEnd) throw new Error('document did not complete');
    return ids.length / ((performance.now() - t1) / 1000);
  };
  const cold = pass();
  let warm = 0;
  for (let r = 0; r < reps; r++) warm = Math.max(warm, pass());
  console.log(
    `| ${name} | ${V.toLocaleString('en-US')} | ${ids.length} | ${compileMs.toFixed(0)} | ${without.toFixed(0)} | ${cold.toFixed(0)} | ${warm.toFixed(0)} | ${(warm / without).toFixed(2)} | ${c.stats.computed} / ${c.stats.cached} |`,
  );
}

export async function run(argv: string[] = []): Promise<void> {
  const quick = argv.includes('--quick');
  const reps = quick ? 1 : 3;
  console.log('JSON-Schema constrained decoding: per-token cost of mask + greedy sampling (no model forward)');
  console.log(`document: ${DOC.length} chars; schema: 8 properties, nested object, array, enum, nullable, number`);
  console.log('| vocabulary | V | tokens | compile+trie ms | tok/s without | tok/s with (cold) | tok/s with (warm) | warm/without | masks computed / cached |');
  console.log('|---|---:|---:|---:|---:|---:|---:|---:|---|');
  const mz = await Tokenizer.fromDir(join(shared, 'models/minueza-32m-ultrachat-tokenizer'));
  measure('minueza (real SentencePiece BPE)', mz, reps);
  measure('synthetic byte-level (SmolLM2 size)', syntheticVocab(49152), reps);
  if (!quick) measure('synthetic byte-level (Qwen2.5 size)', syntheticVocab(151643), reps);
}


if (process.argv[1] && process.argv[1].endsWith('constraint.ts')) await run(process.argv.slice(2));
