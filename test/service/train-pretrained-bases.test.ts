// Pretrained GLiNER2 bases of every head variant train through the service: a full fine-tuning job
// (POST /felix/training-jobs) on a count_lstm_v2 checkpoint with token_pooling "mean" (the
// repository's tiny GLiNER2 with its config switched to mean pooling) completes, and the trained
// model's entity F1 on held-out texts (POST /felix/evaluations) is far above the base's. And a job on
// json_structures records teaches the tiny checkpoint a structure field (POST /inference on the job).
import t from 'tap';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createLocalRuntime } from '../../src/service/runtime-local.ts';
import { call, makeUser, startServer } from './helpers.ts';
import { nerLine, poll, trainingJobEnded, uploadDataset } from './customization-helpers.ts';

const SRC = join(import.meta.dirname, '../../../shared/goldens/gliner2-tiny-span');
const modelsDir = mkdtempSync(join(tmpdir(), 'loom-bases-'));
const mean = join(modelsDir, 'gliner2-tiny-span-mean');
mkdirSync(mean);
for (const f of readdirSync(SRC)) if (f !== 'config.json') symlinkSync(join(SRC, f), join(mean, f));
writeFileSync(
  join(mean, 'config.json'),
  JSON.stringify({ ...JSON.parse(readFileSync(join(SRC, 'config.json'), 'utf8')), token_pooling: 'mean' }),
);
symlinkSync(SRC, join(modelsDir, 'gliner2-tiny-span'));
const ts = await startServer({ runtime: createLocalRuntime({ modelsDir }) });
t.teardown(async () => {
  await ts.close();
  rmSync(modelsDir, { recursive: true, force: true });
});
const u = await makeUser(ts, { credits: 100 });

// words the tokenizer splits into several pieces, so mean pooling differs from first-piece pooling
const NAMES = [
  'Wojciechowski',
  'Okonkwo',
  'Vasquezana',
  'Thorvaldsen',
  'Abernathy',
  'Kowalczyk',
  'Nakamura',
  'Ekwueme',
  'Haraldsson',
  'Papadopoulos',
  'Fitzgerald',
  'Oyelaran',
];
const CITIES = [
  'Reykjavik',
  'Ouagadougou',
  'Valparaiso',
  'Thessaloniki',
  'Kaohsiung',
  'Bratislava',
  'Antananarivo',
  'Guadalajara',
];
const line = (i: number) => {
  const n = NAMES[i % NAMES.length],
    c = CITIES[(i * 5 + 2) % CITIES.length];
  return i % 2
    ? nerLine(`Last spring ${n} moved to ${c} with her family .`, [
        [n, 'person'],
        [c, 'city'],
      ])
    : nerLine(`The mayor of ${c} welcomed ${n} on Monday .`, [
        [c, 'city'],
        [n, 'person'],
      ]);
};

t.test('count_lstm_v2 + mean pooling base: the job completes and the model gets far better', async (t) => {
  t.equal(
    (
      await uploadDataset(
        ts.url,
        u.key,
        'people',
        'ner',
        'people.jsonl',
        Array.from({ length: 80 }, (_, i) => line(i)).join('\n'),
      )
    ).body.status,
    'ready',
  );
  t.equal(
    (
      await uploadDataset(
        ts.url,
        u.key,
        'people-held',
        'ner',
        'held.jsonl',
        Array.from({ length: 16 }, (_, i) => line(500 + 7 * i)).join('\n'),
      )
    ).body.status,
    'ready',
  );
  // piece dropout redoes a WordPiece segmentation: a pretrained base's Unigram tokenizer is refused up front
  const pieces = await call(ts.url, 'POST', '/felix/training-jobs', {
    key: u.key, body: { base_model: 'gliner2-tiny-span-mean', datasets: [{ name: 'people' }], piece_dropout: 0.25 },
  });
  t.equal(pieces.status, 422, pieces.text);
  t.match(pieces.body, { errors: [{ path: '/piece_dropout', keyword: 'piece_dropout_tokenizer' }] });
  const created = await call(ts.url, 'POST', '/felix/training-jobs', {
    key: u.key,
    body: {
      base_model: 'gliner2-tiny-span-mean',
      datasets: [{ name: 'people' }],
      training_type: 'full',
      nr_epochs: 8,
      batch_size: 8,
      learning_rate: 2e-3,
      encoder_learning_rate: 5e-4,
      seed: 2,
    },
  });
  t.equal(created.status, 200, JSON.stringify(created.body));
  const id = created.body.id;
  const done = await trainingJobEnded(ts.url, u.key, id);
  if (done.body.status !== 'complete')
    t.comment(
      JSON.stringify((await call(ts.url, 'GET', `/felix/training-jobs/${id}/logs`, { key: u.key })).body).slice(-1500),
    );
  t.match(done.body, { status: 'complete', task_type: 'encoder', training_type: 'full', metrics: { f1: Number } });
  const ev = async (base: string) => {
    const r = await call(ts.url, 'POST', '/felix/evaluations', {
      key: u.key,
      body: { base_model: base, dataset_name: 'people-held' },
    });
    return (
      await poll(
        () => call(ts.url, 'GET', `/felix/evaluations/${r.body.evaluations[0].id}`, { key: u.key }),
        (x) => ['complete', 'failed'].includes(x.body.status),
        60_000,
        100,
      )
    ).body;
  };
  const before = await ev('gliner2-tiny-span-mean');
  const after = await ev(id);
  t.comment(
    `held-out entity F1: base ${before.f1_score} → trained ${after.f1_score}; validation F1 of the job ${done.body.metrics.f1}`,
  );
  t.equal(after.status, 'complete');
  t.ok(after.f1_score >= 0.8, `trained F1 ${after.f1_score} >= 0.8`);
  t.ok(after.f1_score >= before.f1_score + 0.4, 'far above the base');
});

t.test('a job on json_structures records: the trained model extracts the field the base got wrong', async (t) => {
  const NAMES2 = [
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
  ];
  const ITEMS = ['laptop', 'bicycle', 'guitar', 'camera', 'teapot', 'kayak', 'printer', 'violin'];
  const order = (i: number) => {
    const name = NAMES2[i % NAMES2.length],
      item = ITEMS[(i * 3 + 1) % ITEMS.length];
    return {
      text: i % 2 ? `Yesterday ${name} ordered a ${item} online .` : `A ${item} was bought by ${name} last week .`,
      name,
      item,
    };
  };
  const recs = Array.from({ length: 64 }, (_, i) => order(i)).map((o) =>
    JSON.stringify({ input: o.text, output: { json_structures: [{ order: { customer: o.name, product: o.item } }] } }),
  );
  t.equal(
    (await uploadDataset(ts.url, u.key, 'orders', 'custom', 'orders.jsonl', recs.join('\n'))).body.status,
    'ready',
  );
  const created = await call(ts.url, 'POST', '/felix/training-jobs', {
    key: u.key,
    body: {
      base_model: 'gliner2-tiny-span',
      datasets: [{ name: 'orders' }],
      training_type: 'full',
      nr_epochs: 6,
      batch_size: 8,
      learning_rate: 1e-3,
      encoder_learning_rate: 3e-4,
      seed: 3,
    },
  });
  t.equal(created.status, 200, JSON.stringify(created.body));
  const id = created.body.id;
  const done = await trainingJobEnded(ts.url, u.key, id);
  t.equal(done.body.status, 'complete', done.body.error ?? '');
  const held = Array.from({ length: 10 }, (_, i) => order(301 + 5 * i));
  const correct = async (model: string) => {
    let ok = 0;
    for (const h of held) {
      const r = await call(ts.url, 'POST', '/inference', {
        key: u.key,
        body: { model_id: model, text: h.text, schema: { structures: { order: ['customer::str', 'product::str'] } } },
      });
      t.equal(r.status, 200, JSON.stringify(r.body).slice(0, 300));
      const c = r.body.result?.structures?.order?.[0]?.customer;
      if ((typeof c === 'string' ? c : c?.text)?.toLowerCase() === h.name.toLowerCase()) ok++;
    }
    return ok;
  };
  const before = await correct('gliner2-tiny-span');
  const after = await correct(id);
  t.comment(`customer field right on ${before} → ${after} of ${held.length} held-out texts`);
  t.ok(before <= 2 && after >= 8, 'learned');
});

t.test('a job on relation data reports the validation split relation scores', async (t) => {
  const conll04 = readFileSync(join(import.meta.dirname, '../../../shared/data/conll04/train.jsonl'), 'utf8');
  const rows = conll04.split('\n').filter(Boolean).slice(0, 24).join('\n');
  t.equal((await uploadDataset(ts.url, u.key, 'rel', 'ner', 'rel.jsonl', rows)).body.status, 'ready');
  const created = await call(ts.url, 'POST', '/felix/training-jobs', {
    key: u.key,
    body: {
      base_model: 'gliner2-tiny-span',
      datasets: [{ name: 'rel' }],
      training_type: 'full',
      nr_epochs: 1,
      max_steps: 2,
      batch_size: 4,
      validation_data_percentage: 25,
      seed: 1,
    },
  });
  const id = created.body.id;
  const done = await trainingJobEnded(ts.url, u.key, id);
  t.match(done.body, {
    status: 'complete',
    metrics: { f1: Number, relation_f1: Number, relation_precision: Number, relation_recall: Number, sample_count: 6 },
  });
  const m = done.body.metrics;
  for (const k of ['relation_f1', 'relation_precision', 'relation_recall'])
    t.ok(m[k] >= 0 && m[k] <= 1, `${k} ${m[k]}`);
});
