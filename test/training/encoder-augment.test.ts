// Mention replacement (mention_replacement, issue 17): an entity mention of a training text is swapped for another
// mention of its label, the other targets moving with the text; examples whose targets a swap would break are left
// alone; the trainer takes the option and refuses values outside [0, 1].
import t from 'tap';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { DataRecord } from '../../src/training/data/formats.ts';
import { recordsToExamples, entityLabels } from '../../src/training/encoder/examples.ts';
import { dropMentions, mentionPool, replaceable, replaceMentions } from '../../src/training/encoder/augment.ts';
import { featurize } from '../../src/training/encoder/examples.ts';
import { EncoderTokenizer } from '../../src/models/encoder/tokenizer.ts';
import { InitRng, initEncoder } from '../../src/training/encoder/init.ts';
import { trainEncoder } from '../../src/training/encoder-trainer.ts';
import { TrainingConfigError } from '../../src/training/common.ts';

const ner = (text: string, ...ents: [string, string][]): DataRecord => ({
  kind: 'ner',
  text,
  entities: ents.map(([label, s]) => ({ label, start: text.indexOf(s), end: text.indexOf(s) + s.length, text: s })),
});
const RECORDS: DataRecord[] = [
  ner('EU rejects German call to boycott British lamb .', ['organization', 'EU'], ['miscellaneous', 'German'],
    ['miscellaneous', 'British']),
  ner('Peter Blackburn spoke in Brussels .', ['person', 'Peter Blackburn'], ['location', 'Brussels']),
  ner('Nadim Ladki went to Paris .', ['person', 'Nadim Ladki'], ['location', 'Paris']),
  ner('Nothing here .'),
];
const labels = entityLabels(RECORDS);
const examples = recordsToExamples(RECORDS, labels);
const spans = (ex: (typeof examples)[number]) =>
  [...ex.entities].flatMap(([l, ms]) =>
    ms.map((m) => (typeof m === 'string' ? '' : `${l}:${ex.text.slice(m.start, m.end)}`)));

t.test('the pool holds each label\'s mentions once, as written', async (t) => {
  const pool = mentionPool([...examples, ...examples]);
  t.same(pool.get('person'), ['Nadim Ladki', 'Peter Blackburn']);
  t.same(pool.get('location'), ['Brussels', 'Paris']);
  t.same(pool.get('miscellaneous'), ['British', 'German']);
});

t.test('every mention swapped at p = 1: offsets follow the new text, labels kept', async (t) => {
  const pool = mentionPool(examples);
  const rng = new InitRng(7);
  let changed = 0;
  for (let r = 0; r < 50; r++) {
    const ex = examples[1];
    const out = replaceMentions(ex, pool, 1, rng);
    const got = spans(out);
    t.equal(got.length, 2);
    t.ok(['person:Peter Blackburn', 'person:Nadim Ladki'].includes(got.find((s) => s.startsWith('person'))!));
    t.ok(['location:Brussels', 'location:Paris'].includes(got.find((s) => s.startsWith('location'))!));
    t.ok(out.text.endsWith(' spoke in ' + got.find((s) => s.startsWith('location'))!.slice(9) + ' .'), out.text);
    if (out.text !== ex.text) changed++;
  }
  t.ok(changed > 10 && changed < 50, `the text changed in ${changed} of 50 draws`);
  t.equal(examples[1].text, 'Peter Blackburn spoke in Brussels .', 'the example itself is not modified');
});

t.test('p = 0, no mentions, or targets a swap would break: the example itself', async (t) => {
  const pool = mentionPool(examples);
  const rng = new InitRng(1);
  t.equal(replaceMentions(examples[0], pool, 0, rng), examples[0]);
  t.equal(replaceMentions(examples[3], pool, 1, rng), examples[3]);
  const relRecord = { ...RECORDS[1], kind: 'relations', relations: [{ head: 0, tail: 1, label: 'in' }] } as DataRecord;
  const rel = recordsToExamples([relRecord], labels)[0];
  t.notOk(replaceable(rel));
  t.equal(replaceMentions(rel, pool, 1, rng), rel);
  const nested = recordsToExamples([ner('Bank of England', ['organization', 'Bank of England'],
    ['location', 'England'])], labels)[0];
  t.equal(replaceMentions(nested, pool, 1, rng), nested, 'overlapping mentions: left as they are');
});

t.test('about p of the mentions are swapped', async (t) => {
  const pool = new Map([['person', ['A', 'B']]]);
  const ex = recordsToExamples([ner('x y', ['person', 'x'])], ['person'])[0];
  const rng = new InitRng(3);
  let kept = 0;
  for (let r = 0; r < 2000; r++) if (replaceMentions(ex, pool, 0.3, rng) === ex) kept++;
  t.ok(Math.abs(kept / 2000 - 0.7) < 0.04, `kept ${kept} of 2000`);
});

t.test('the trainer takes mention_replacement and refuses values outside [0, 1]', async (t) => {
  const tmp = mkdtempSync(join(tmpdir(), 'loom-augment-'));
  const base = join(tmp, 'base');
  const cfg = { hidden_size: 32, num_hidden_layers: 1, num_attention_heads: 2, intermediate_size: 64, vocab_size: 300 };
  initEncoder(base, cfg, RECORDS.map((r) => ('text' in r ? r.text : '')), { seed: 1 });
  const run = (p: unknown, out: string) => trainEncoder({
    base_model: base, output_dir: join(tmp, out), train_data: RECORDS, nr_epochs: 2, batch_size: 2, seed: 1,
    validation_data_percentage: 0, mention_replacement: p as number,
  });
  await t.rejects(run(1.5, 'a'), TrainingConfigError);
  await t.rejects(run(-0.1, 'b'), TrainingConfigError);
  const res = await run(0.5, 'c');
  t.ok(res.steps > 0 && Number.isFinite(res.train_loss), `${res.steps} steps, loss ${res.train_loss}`);
});

t.test('mention dropout: the words of a dropped mention become [UNK], nothing else changes', async (t) => {
  const tmp = mkdtempSync(join(tmpdir(), 'loom-augment-'));
  const base = join(tmp, 'base');
  const cfg = { hidden_size: 32, num_hidden_layers: 1, num_attention_heads: 2, intermediate_size: 64, vocab_size: 300 };
  initEncoder(base, cfg, RECORDS.map((r) => ('text' in r ? r.text : '')), { seed: 1 });
  const tok = new EncoderTokenizer(join(base, 'tokenizer.json'));
  const unk = tok.tokenToId('[UNK]')!;
  const it = await featurize(tok, examples[1]!, 8);
  t.equal(dropMentions(it, 0, unk, new InitRng(1)), it, 'p = 0: the example itself');
  const all = dropMentions(it, 1, unk, new InitRng(1));
  const P = it.f.prefix.length;
  const words = it.f.words;
  const changed = words.flatMap((w, j) => {
    const [a, b] = [it.f.wordPos[P + j]!, it.f.wordEnd[P + j]!];
    const unkOnly = (ids: Int32Array) => ids.slice(a, b).every((id) => id === unk);
    return unkOnly(all.f.ids) && !unkOnly(it.f.ids) ? [w] : [];
  });
  t.same(changed, ['peter', 'blackburn', 'brussels'], 'both mentions\' words, and only they');
  t.same(all.segs, it.segs, 'the targets');
  t.same(all.f.feats, it.f.feats, 'the word features');
  const prompt = it.f.wordPos[P]!;
  t.same([...all.f.ids.slice(0, prompt)], [...it.f.ids.slice(0, prompt)], 'the prompt');
  let dropped = 0;
  const rng = new InitRng(2);
  for (let r = 0; r < 1000; r++) if (dropMentions(it, 0.25, unk, rng) !== it) dropped++;
  const expect = 1 - 0.75 * 0.75;
  t.ok(Math.abs(dropped / 1000 - expect) < 0.05, `${dropped} of 1000 with a mention dropped (about ${expect * 1000})`);
});
