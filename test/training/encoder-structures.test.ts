// json_structures records are trained (the GLiNER2 structure objective: the structure's fields as
// span targets under the structure prompt, instance count in the count loss): the repository's tiny
// GLiNER2 checkpoint (count_lstm_v2) starts out extracting the wrong "customer" of an order and, after
// a short full fine-tuning on structure records, extracts the right one on held-out texts. Also the
// targets themselves: fields, instances, choice fields in the prefix; and relation records asking for
// every relation type of the data.
import t from 'tap';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadEncoder } from '../../src/models/encoder/index.ts';
import { EncoderTokenizer } from '../../src/models/encoder/tokenizer.ts';
import { featurize, recordsToExamples } from '../../src/training/encoder/examples.ts';
import { trainEncoder } from '../../src/training/encoder-trainer.ts';
import type { DataRecord } from '../../src/training/data/formats.ts';

const BASE = join(import.meta.dirname, '../../../shared/goldens/gliner2-tiny-span');
const NAMES = [
  'Alice',
  'Bruno',
  'Chen',
  'Dmitri',
  'Elena',
  'Farid',
  'Grace',
  'Hiro',
  'Ines',
  'Jonas',
  'Kofi',
  'Lena',
  'Marco',
  'Nadia',
  'Oscar',
  'Priya',
];
const ITEMS = ['laptop', 'bicycle', 'guitar', 'camera', 'teapot', 'kayak', 'printer', 'violin', 'drone', 'sofa'];
const SHOPS = ['Berlin', 'Lisbon', 'Osaka', 'Denver', 'Nairobi', 'Quito'];
const order = (i: number) => {
  const name = NAMES[i % NAMES.length];
  const item = ITEMS[(i * 7 + 3) % ITEMS.length];
  const shop = SHOPS[(i * 5 + 1) % SHOPS.length];
  const text =
    i % 2
      ? `Yesterday in ${shop} ${name} ordered a ${item} online .`
      : `A ${item} was bought in ${shop} by ${name} last week .`;
  return { text, name, item };
};
const rec = (i: number): DataRecord => {
  const o = order(i);
  return {
    kind: 'gliner2',
    text: o.text,
    output: { json_structures: [{ order: { customer: o.name, product: o.item } }] },
  };
};
const train = Array.from({ length: 96 }, (_, i) => rec(i));
const held = Array.from({ length: 24 }, (_, i) => order(1000 + i * 3));
const schema = { structures: { order: ['customer::str', 'product::str'] } };

async function customerAccuracy(dir: string): Promise<number> {
  const enc = await loadEncoder(dir);
  const res = await enc.extract(
    held.map((h) => h.text),
    schema,
    { threshold: 0.5 },
  );
  let ok = 0;
  res.forEach((r, i) => {
    const inst = r.structures?.order?.[0];
    const c = inst?.customer as { text?: string } | string | null | undefined;
    const text = typeof c === 'string' ? c : c?.text;
    if (text?.toLowerCase() === held[i].name.toLowerCase()) ok++;
  });
  return ok / held.length;
}

t.test('targets: one [C] segment per parent, unique instances, choices in the prefix', async (t) => {
  const tok = new EncoderTokenizer(join(BASE, 'tokenizer.json'));
  const [ex] = recordsToExamples(
    [
      {
        kind: 'gliner2',
        text: 'Ann and Bob bought tea and tea again .',
        output: {
          json_structures: [
            { buy: { who: 'Ann', what: 'tea', kind: { value: 'drink', choices: ['food', 'drink'] } } },
            { buy: { who: 'Bob', what: 'tea' } },
            { buy: { who: 'Ann', what: 'tea', kind: { value: 'drink', choices: ['food', 'drink'] } } },
          ],
        },
      },
    ],
    [],
  );
  t.same(
    ex.schema.structures.map((s) => [s.name, s.fields.map((f) => f.name)]),
    [['buy', ['who', 'what', 'kind']]],
  );
  t.same(ex.schema.structures[0].fields[2].choices, ['food', 'drink']);
  const f = await featurize(tok, ex, 8);
  t.equal(f.segs.length, 1);
  const s = f.segs[0];
  t.match(s, { kind: 0, M: 3, count: 2, countLoss: true }, 'two unique instances (the repeated one counted once)');
  const P = f.f.prefix.length;
  const quads: number[][] = [];
  for (let q = 0; q < s.pos.length; q += 4) quads.push(s.pos.slice(q, q + 4));
  const word = (i: number) => (i < P ? f.f.prefix[i] : f.f.words[i - P]);
  const got = quads.map(([ti, m, i, k]) => `${ti}:${['who', 'what', 'kind'][m]}=${word(i)}/${k}`).sort();
  t.same(
    got,
    [
      '0:kind=drink/0',
      '0:what=tea/0',
      '0:what=tea/0',
      '0:who=ann/0',
      '1:what=tea/0',
      '1:what=tea/0',
      '1:who=bob/0',
    ].sort(),
    'every occurrence; the choice word of the prefix',
  );
});

t.test('a structure field the base gets wrong is learned', async (t) => {
  const before = await customerAccuracy(BASE);
  const out = mkdtempSync(join(tmpdir(), 'loom-struct-'));
  const res = await trainEncoder({
    base_model: BASE,
    output_dir: out,
    train_data: train,
    nr_epochs: 6,
    batch_size: 8,
    learning_rate: 1e-3,
    encoder_learning_rate: 3e-4,
    seed: 3,
    validation_data_percentage: 0,
    threads: 1,
    warmup_ratio: 0.05,
  });
  const after = await customerAccuracy(res.final_checkpoint);
  t.comment(
    `customer field accuracy on ${held.length} held-out texts: ${before.toFixed(3)} → ${after.toFixed(3)} (${res.steps} steps)`,
  );
  t.ok(before <= 0.25, `the base gets it wrong (${before.toFixed(3)})`);
  t.ok(after >= 0.8, `trained: ${after.toFixed(3)} >= 0.8`);
});

t.test('relation records ask for every relation type of the data; absent types are count-0 tasks', async (t) => {
  const tok = new EncoderTokenizer(join(BASE, 'tokenizer.json'));
  const ents = [
    { start: 0, end: 3, label: 'person', text: 'Ann' },
    { start: 13, end: 17, label: 'organization', text: 'Acme' },
    { start: 21, end: 25, label: 'location', text: 'Oslo' },
  ];
  const recs: DataRecord[] = [
    {
      kind: 'relations',
      text: 'Ann works at Acme in Oslo .',
      entities: ents,
      relations: [{ head: 0, tail: 1, label: 'works_for' }],
    },
    {
      kind: 'relations',
      text: 'Ann works at Acme in Oslo .',
      entities: ents,
      relations: [{ head: 1, tail: 2, label: 'based_in' }],
    },
  ];
  const exs = recordsToExamples(recs, ['location', 'organization', 'person']);
  t.same(
    exs[0].schema.relations.map((r) => r.name),
    ['based_in', 'works_for'],
  );
  const f = await featurize(tok, exs[0], 8);
  const rel = f.f.segments
    .map((s, i) => [s.kind, s.name, f.segs[i].count, f.segs[i].countLoss])
    .filter((x) => x[0] === 'relation');
  t.same(rel, [
    ['relation', 'based_in', 0, true],
    ['relation', 'works_for', 1, true],
  ]);
});
