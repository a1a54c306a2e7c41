// Encoder input bounds (issue 13, defects 1 and 2): one long word is split into pieces and long
// texts run in token-bounded windows, so cost is linear in the input's length; schema sizes and the
// request's work are capped with an error naming the limit and the path; a failed native
// allocation rejects the call and leaves the encoder's reused scratch consistent.
import t from 'tap';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadEncoder } from '../../src/models/encoder/index.ts';
import { windowWords } from '../../src/models/encoder/gliner2.ts';
import { ENCODER_LIMITS, InputLimitError } from '../../src/models/encoder/limits.ts';
import { normalizeSchema } from '../../src/models/encoder/schema.ts';
import { splitWords } from '../../src/models/encoder/words.ts';

const DIR = join(import.meta.dirname, '../../../shared/goldens/gliner2-tiny-span');
const m = await loadEncoder(DIR);
const TEXT = 'Tim Cook announced the new iPhone at the Apple campus in Cupertino on Monday.';
const SCHEMA = { entities: ['person', 'company', 'location'] };
const before = await m.extract(TEXT, SCHEMA, { threshold: 0.3 });

async function best(f: () => Promise<unknown>, runs = 2): Promise<number> {
  let min = Infinity;
  for (let i = 0; i < runs; i++) {
    const t0 = performance.now();
    await f();
    min = Math.min(min, performance.now() - t0);
  }
  return min;
}

t.test('a long word becomes pieces of at most wordChars, offsets exact, surrogate pairs kept', async (t) => {
  const W = ENCODER_LIMITS.wordChars;
  const text = `x ${'A'.repeat(2 * W + 5)} y`;
  const w = splitWords(text, false);
  t.same(w.tokens.map((s) => s.length), [1, W, W, 5, 1]);
  w.tokens.forEach((s, i) => t.equal(text.slice(w.start[i], w.end[i]), s));
  const astral = 'a'.repeat(W - 1) + '𝐀' + 'b'; // U+1D400, a letter outside the BMP (two UTF-16 units)
  const e = splitWords(astral, false);
  t.same(e.tokens, ['a'.repeat(W - 1), '𝐀b'], 'the cut moves before a surrogate pair');
  const plain = splitWords('Tim Cook, tim@apple.com!').tokens;
  t.same(plain, ['tim', 'cook', ',', 'tim@apple.com', '!'], 'ordinary words unchanged');
});

t.test('word splitting is linear: "a.a.a…" no longer rescans the text from every position', async (t) => {
  const small = await best(async () => splitWords('a.'.repeat(10_000)));
  const big = await best(async () => splitWords('a.'.repeat(100_000)));
  // linear: ~10x; before: quadratic (~100x, 1.9 s for 40,000 characters)
  t.ok(big < Math.max(30 * small, 200), `10x the text: ${small.toFixed(1)} ms → ${big.toFixed(1)} ms`);
});

t.test('windows: the fixed word stride for ordinary words, bounded tokens for long ones', async (t) => {
  const ones = new Array(1000).fill(1);
  t.same(windowWords(ones, 384, 64, 1024), [[0, 384], [320, 704], [640, 1000]], 'as before: 384 words, overlap 64');
  t.same(windowWords(ones.slice(0, 384), 384, 64, 1024), [[0, 384]]);
  const fat = new Array(10).fill(300);
  const w = windowWords(fat, 384, 64, 1024);
  t.ok(w.every(([s, e]) => fat.slice(s, e).reduce((a, b) => a + b, 0) <= 1024), JSON.stringify(w));
  t.equal(w[w.length - 1][1], 10, 'covers every word');
  t.ok(w.every(([s], i) => i === 0 || s > w[i - 1][0]), 'always progresses');
  t.same(windowWords([5000, 1], 384, 64, 1024), [[0, 1], [1, 2]], 'a word over the budget runs alone');
});

t.test('one long word: no encoder call sees more than a window, and time is linear', async (t) => {
  const seen: number[] = [];
  const forward = m.encoder.forward.bind(m.encoder);
  m.encoder.forward = (ids, mask, B, N, ...rest) => (seen.push(N), forward(ids, mask, B, N, ...rest));
  try {
    const r = await m.extract('A'.repeat(20_000), ['person']);
    t.same(Object.keys(r.entities!), ['person']);
    const prompt = (await m.format('', normalizeSchema(['person']))).ids.length;
    t.ok(Math.max(...seen) <= ENCODER_LIMITS.windowTokens + prompt + 1, `longest sequence ${Math.max(...seen)} tokens`);
  } finally {
    m.encoder.forward = forward;
  }
  const t2k = await best(() => m.extract('A'.repeat(2_000), ['person']));
  const t20k = await best(() => m.extract('A'.repeat(20_000), ['person']));
  // linear: ~10x; before the fix one sequence of 20,000 tokens: ~70-100x (7-10 s against 0.1 s)
  t.ok(t20k < 30 * t2k, `2,000 characters ${t2k.toFixed(0)} ms, 20,000 characters ${t20k.toFixed(0)} ms`);
});

t.test('schema sizes are capped before any native call, naming the limit and the path', async (t) => {
  const cases: [unknown, string, string][] = [
    [[Array(200_000).fill('word').join(' ')], '/schema/0', 'nameChars'],
    [{ entities: { person: 'd'.repeat(ENCODER_LIMITS.descriptionChars + 1) } },
      '/schema/entities/person', 'descriptionChars'],
    [{ entities: Array.from({ length: ENCODER_LIMITS.labels + 1 }, (_, i) => `l${i}`) }, '/schema/entities', 'labels'],
    [{ structures: { p: [{ name: 'f', choices: Array.from({ length: 600 }, (_, i) => `c${i}`) }] } },
      '/schema/structures/p/0/choices', 'labels'],
    [{ structures: { p: ['f::[a|' + 'b'.repeat(300) + ']::str'] } }, '/schema/structures/p/0', 'nameChars'],
    [{ classifications: [{ task: 't', labels: ['a', 'x'.repeat(300)] }] },
      '/schema/classifications/0/labels/1', 'nameChars'],
    [{ relations: Array.from({ length: ENCODER_LIMITS.tasks + 1 }, (_, i) => `r${i}`) }, '/schema/relations', 'tasks'],
    // within the per-item caps but over the prompt's token budget
    [{ entities: Array.from({ length: 500 }, (_, i) => ({ name: `l${i}`, description: 'words '.repeat(12) })) },
      '/schema', 'promptTokens'],
  ];
  for (const [schema, path, limit] of cases) {
    const err = await m.extract('Alice', schema).then(() => null, (e) => e);
    t.type(err, InputLimitError, `${path} (${limit})`);
    t.equal(err?.path, path);
    t.equal(err?.limit, limit);
    t.match(err?.message, new RegExp(`${limit}.*|limit of ${ENCODER_LIMITS[limit as keyof typeof ENCODER_LIMITS]}`));
  }
});

t.test('over the work bound: refused with the path of its text (extraction, embeddings, whole texts)', async (t) => {
  const big = 'word '.repeat(ENCODER_LIMITS.requestTokens);
  const one = await m.extract(big, ['person']).then(() => null, (e) => e);
  t.match(one, { name: 'InputLimitError', path: '/text', limit: 'requestTokens' });
  const many = await m.extract(['Alice', big], ['person']).then(() => null, (e) => e);
  t.match(many, { name: 'InputLimitError', path: '/text/1', limit: 'requestTokens' });
  // refused after splitting no more than the budget's worth of words: 10x the text, about the same time
  const refuse = (n: number) =>
    best(() => m.extract('a.'.repeat(n), ['person']).then(() => t.fail('served'), () => {}));
  const t400k = await refuse(200_000);
  const t4m = await refuse(2_000_000);
  t.ok(t4m < 4 * t400k + 50, `400,000 characters refused in ${t400k.toFixed(0)} ms, 4,000,000 in ${t4m.toFixed(0)} ms`);
  const emb = await m.embed(['a', big]).then(() => null, (e) => e);
  t.match(emb, { name: 'InputLimitError', path: '/input', limit: 'requestTokens' }, 'embeddings: the same bound');
  const whole = 'A'.repeat(ENCODER_LIMITS.wholeTextTokens * 2);
  const ref = await m.extract(whole, ['person'], { format: 'gliner2' }).then(() => null, (e) => e);
  t.match(ref, { name: 'InputLimitError', path: '/text', limit: 'wholeTextTokens' });
});

// With overcommit_memory 1 (always) a 1 TB malloc succeeds and touching it would be an OOM kill.
const overcommitAlways = (() => {
  try {
    return readFileSync('/proc/sys/vm/overcommit_memory', 'utf8').trim() === '1';
  } catch {
    return false;
  }
})();

const skip = overcommitAlways && 'vm.overcommit_memory=1';
t.test('a failed native allocation rejects; the reused workspace stays consistent', { skip }, async (t) => {
  const N = 2000;
  const ids = new Int32Array(N).fill(5);
  const mask = new Uint8Array(N).fill(1);
  const h1 = await m.encoder.forward(ids, mask, 1, N); // grows the pooled workspace (an mmap'd block)
  const HUGE = 200_000; // attention scratch ~1 TB: the allocation fails
  await t.rejects(m.encoder.forward(new Int32Array(HUGE).fill(5), new Uint8Array(HUGE).fill(1), 1, HUGE), /bad_alloc/);
  // before: the workspace kept its freed buffer and old capacity; this call wrote into it (SIGSEGV)
  const h2 = await m.encoder.forward(ids, mask, 1, N);
  t.same(h2, h1, 'the same call gives the same hidden states afterwards');
});

t.test('ordinary extraction is unchanged by all of the above', async (t) => {
  t.same(await m.extract(TEXT, SCHEMA, { threshold: 0.3 }), before);
});

t.test('dispose() releases the native encoder and heads at once; the model is spent after, other copies not', async (t) => {
  const m2 = await loadEncoder(DIR);
  t.same(await m2.extract(TEXT, SCHEMA, { threshold: 0.3 }), before, 'a second load answers the same');
  m2.dispose();
  await t.rejects(m2.extract(TEXT, SCHEMA, { threshold: 0.3 }), /handle is invalid/);
  t.doesNotThrow(() => m2.dispose(), 'a second dispose is harmless');
  t.same(await m.extract(TEXT, SCHEMA, { threshold: 0.3 }), before, 'another loaded copy is untouched');
});
