// GLiNER2 formatting + public API: word splitting and offsets, schema normalization and errors,
// tokenizer.json ids, the stable result format (UTF-16 offsets, flags), batches, long documents,
// embeddings and bf16 weights.
import t from 'tap';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadEncoder, normalizeSchema, SchemaError } from '../../src/models/encoder/index.ts';
import { splitWords, codePointOffsets } from '../../src/models/encoder/words.ts';
import { choicePrefix } from '../../src/models/encoder/format.ts';

const dir = join(import.meta.dirname, '../../../shared/goldens/gliner2-tiny-span');
const golden = JSON.parse(readFileSync(join(dir, 'cases.json'), 'utf8'));

t.test('word splitting follows Python re semantics', async (t) => {
  const w = splitWords('Contact john.smith@example.com or visit https://example.com/page for @acme_corp, state-of-the-art!');
  t.same(w.tokens, ['contact', 'john.smith@example.com', 'or', 'visit', 'https://example.com/page', 'for', '@acme_corp', ',', 'state-of-the-art', '!']);
  // combining marks are not word characters in Python: Devanagari splits per character
  t.same(splitWords('हिन्दी').tokens.length, 6);
  t.same(splitWords('東京 University').tokens, ['東京', 'university']);
  const e = 'a 😀 b';
  const s = splitWords(e);
  t.same(s.start, [0, 2, 5]);
  t.same(s.start.map(codePointOffsets(e)), [0, 2, 4]);
  // matches the reference start/end maps (code points) for every golden sample
  for (const c of golden.cases)
    for (const p of c.processed)
      for (const smp of p.samples) {
        const ws = splitWords(smp.text_after_preprocessing);
        const cp = codePointOffsets(smp.text_after_preprocessing);
        t.same(ws.start.map(cp), smp.start_map, `${c.name} start_map`);
        t.same(ws.end.map(cp), smp.end_map, `${c.name} end_map`);
      }
});

t.test('schema normalization', async (t) => {
  const s = normalizeSchema({
    entities: [{ name: 'person', description: 'a human' }, 'company', 'company'],
    classifications: [{ task: 'sentiment', labels: ['positive', 'negative'] }],
    structures: { product: ['name::str::Full model name', 'price', 'tier::[basic|premium]::str'] },
    relations: ['works_for', { name: 'lives_in', threshold: 0.3 }],
  });
  t.same(s.entities!.map((e) => e.name), ['person', 'company']);
  t.same(s.structures[0].fields, [
    { name: 'name', dtype: 'str', description: 'Full model name', choices: undefined },
    { name: 'price', dtype: 'list', description: undefined, choices: undefined },
    { name: 'tier', dtype: 'str', description: undefined, choices: ['basic', 'premium'] },
  ]);
  t.same(choicePrefix(s), ['(', 'product:', 'tier', '(', 'basic', '|', 'premium', ')', ')']);
  t.equal(s.relations[1].threshold, 0.3);
  t.same(normalizeSchema(['a', 'b']).entities!.length, 2);
  for (const bad of [null, {}, { foo: [] }, { entities: [3] }, { classifications: [{ task: 'x', labels: [] }] }, { relations: [{ name: 'r', threshold: 2 }] }, { structures: { p: [] } }])
    t.throws(() => normalizeSchema(bad), SchemaError, JSON.stringify(bad));
});

t.test('model API', async (t) => {
  const model = await loadEncoder(dir);
  t.equal(model.info.countingLayer, 'count_lstm_v2');
  t.ok(model.info.parameters > 0);

  // tokenizer.json ids for the golden tokenizer cases
  for (const c of golden.tokenizer_cases) {
    const [ids] = await model.tokenizer.pieces([c.text]);
    t.same(Array.from(ids), c.tokenizer_json_ids, `tokenizer ${JSON.stringify(c.text)}`);
  }

  // stable format: UTF-16 offsets into the caller's string
  const text = 'José Müller flew from São Paulo to Zürich with Lufthansa 😀 and met officials of 東京 University!';
  const r = await model.extract(text, ['person', 'organization', 'location'], { threshold: 0.1 });
  t.same(Object.keys(r), ['entities']);
  let n = 0;
  for (const list of Object.values(r.entities!))
    for (const e of list as { text: string; start: number; end: number; confidence: number }[]) {
      n++;
      t.equal(text.slice(e.start, e.end), e.text, `offsets of ${e.text}`);
      t.ok(e.confidence >= 0.1 && e.confidence <= 1);
    }
  t.ok(n > 0, 'found entities');
  const tokyo = (r.entities!.person as { text: string; start: number }[]).find((e) => e.text === '東京');
  t.equal(tokyo?.start, 81, 'UTF-16 offset after the astral emoji');

  // flags
  const bare = await model.extract(text, ['location'], { include_confidence: false, include_spans: false });
  for (const e of bare.entities!.location as object[]) t.same(Object.keys(e), ['text']);

  // combined schema, stable key order and shapes
  const combo = await model.extract('John Smith, a senior engineer at Google, lives in London.', {
    entities: ['person'],
    classifications: [{ task: 'topics', labels: ['sports', 'business'], multi_label: true, cls_threshold: 0.3 }, { task: 'sentiment', labels: ['positive', 'negative'] }],
    structures: { employment: ['person::str', 'type::[works for|lives in]::str'] },
    relations: ['works_for'],
  });
  t.same(Object.keys(combo), ['entities', 'classifications', 'structures', 'relations']);
  t.ok(Array.isArray(combo.classifications!.topics));
  t.ok(typeof (combo.classifications!.sentiment as { label: string }).label === 'string');
  t.ok(Array.isArray(combo.structures!.employment));
  t.ok(Array.isArray(combo.relations!.works_for));

  // text without final punctuation: no span reaches past the caller's string
  const np = 'Apple CEO Tim Cook announced the new iPhone in Cupertino';
  const r2 = await model.extract(np, ['person', 'organization', 'location', 'product'], { threshold: 0.05 });
  for (const list of Object.values(r2.entities!))
    for (const e of list as { text: string; start: number; end: number }[]) {
      t.ok(e.end <= np.length);
      t.equal(np.slice(e.start, e.end), e.text);
    }

  // batch = one result per text, same as one by one (padding does not change results)
  const texts = golden.cases.find((c: { name: string }) => c.name === 'batch_entities').call.texts as string[];
  const batch = await model.extract(texts, ['person', 'organization', 'location']);
  t.equal(batch.length, texts.length);
  for (let i = 0; i < texts.length; i++) {
    const one = await model.extract(texts[i], ['person', 'organization', 'location']);
    t.same(Object.keys(batch[i].entities!), Object.keys(one.entities!));
    for (const k of Object.keys(one.entities!))
      t.same((batch[i].entities![k] as { text: string }[]).map((e) => e.text), (one.entities![k] as { text: string }[]).map((e) => e.text), `batch vs single ${i} ${k}`);
  }

  // long document: never fails, chunked and merged, offsets valid in the full text
  const sent = 'Barack Obama met Angela Merkel in Berlin on Tuesday, a spokesman for the European Commission said. ';
  const long = sent.repeat(60); // ~1000 words
  const lr = await model.extract(long, ['person', 'location'], { threshold: 0.3 });
  let m = 0;
  for (const list of Object.values(lr.entities!))
    for (const e of list as { text: string; start: number; end: number }[]) {
      m++;
      t.equal(long.slice(e.start, e.end), e.text);
    }
  t.ok(m > 60, `long document yields entities across chunks (${m})`);
  const lastStart = Math.max(...Object.values(lr.entities!).flatMap((l) => (l as { start: number }[]).map((e) => e.start)));
  t.ok(lastStart > long.length * 0.8, 'entities from the last chunk');

  // embeddings
  const [e1, e2] = await model.embed(['hello world', 'a much longer sentence about Berlin']);
  t.equal(e1.length, model.info.hiddenSize);
  t.ok(e1.every(Number.isFinite) && e2.some((x, i) => x !== e1[i]));

  // bad input
  await t.rejects(model.extract('x', { nope: 1 }), SchemaError);
  await t.rejects(model.extract('x', ['a'], { threshold: 3 }), RangeError);
  await t.rejects(model.extract([1 as unknown as string], ['a']), TypeError);
  // empty text works ("." like the reference)
  t.same(Object.keys((await model.extract('', ['a'])).entities!), ['a']);
});

t.test('bf16 weights stay within tolerance of fp32', async (t) => {
  const f32 = await loadEncoder(dir);
  const bf = await loadEncoder(dir, { dtype: 'bf16' });
  t.equal(bf.info.dtype, 'bf16');
  const c = golden.cases.find((x: { name: string }) => x.name === 'entities_unicode_threshold_0.1');
  const schema = { entities: c.call.args.entity_types };
  const a = await f32.debugRun(c.call.text, schema);
  const b = await bf.debugRun(c.call.text, schema);
  let d = 0;
  a.inter.segments[0].scores!.forEach((x, i) => (d = Math.max(d, Math.abs(x - b.inter.segments[0].scores![i]))));
  t.ok(d < 0.02, `span probabilities differ by ${d.toExponential(2)} (bf16 weights)`);
});
