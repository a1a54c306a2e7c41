// The fresh-encoder training recipe (issue 17): negative label sampling for many-label classification
// (a model trained with it serving the full label set), word dropout, the time-budget LR schedule,
// checkpoint selection by the validation task metric, a time-limited run. (That a fresh encoder learns
// many-label classification is not asserted: it does not yet, see docs/training.md.)
import t from 'tap';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { DataRecord } from '../../src/training/data/formats.ts';
import { initEncoder, InitRng } from '../../src/training/encoder/init.ts';
import {
  dropWords, featurize, rareWordDropout, recordsToExamples, sampleNegativeLabels,
} from '../../src/training/encoder/examples.ts';
import { trainEncoder } from '../../src/training/encoder-trainer.ts';
import { evaluateClassification } from '../../src/training/evaluate.ts';
import { CheckpointBook, lrFactorAt } from '../../src/training/common.ts';
import { EncoderTokenizer } from '../../src/models/encoder/tokenizer.ts';

const tmp = mkdtempSync(join(tmpdir(), 'loom-recipe-'));
// 30 intents, each named by a word that its texts contain (among filler words)
const WORDS = [
  'apple',
  'river',
  'stone',
  'cloud',
  'tiger',
  'piano',
  'lemon',
  'candle',
  'rocket',
  'garden',
  'silver',
  'window',
  'forest',
  'bridge',
  'pepper',
  'violin',
  'castle',
  'ocean',
  'marble',
  'falcon',
  'desert',
  'coffee',
  'ladder',
  'planet',
  'copper',
  'mirror',
  'button',
  'island',
  'feather',
  'tunnel',
];
const FILL = [
  'please',
  'help',
  'me',
  'with',
  'my',
  'the',
  'today',
  'now',
  'about',
  'question',
  'i',
  'need',
  'a',
  'quick',
  'answer',
];
function make(n: number, seed: number): DataRecord[] {
  const r = new InitRng(seed);
  const pick = <T>(xs: T[]) => xs[Math.floor(r.uniform() * xs.length)];
  return Array.from({ length: n }, (_, i) => {
    const label = WORDS[i % WORDS.length];
    const words = Array.from({ length: 5 }, () => pick(FILL));
    words.splice(Math.floor(r.uniform() * 6), 0, label);
    return { kind: 'classification', text: words.join(' '), labels: [label], multiLabel: false } as DataRecord;
  });
}
const train = make(600, 1);
const held = make(90, 2);
const base = join(tmp, 'base');
initEncoder(
  base,
  { hidden_size: 64, num_hidden_layers: 2, num_attention_heads: 2, intermediate_size: 128, vocab_size: 1000 },
  [...train, ...held].map((x) => (x as { text: string }).text).concat(WORDS),
  { seed: 1 },
);

t.test('negative label sampling: true labels + k others in a random order', async (t) => {
  const [ex] = recordsToExamples([train[3]], [], WORDS);
  const rng = new InitRng(5);
  const firsts = new Set<string>();
  for (let i = 0; i < 20; i++) {
    const s = sampleNegativeLabels(ex, 4, rng);
    const labels = s.schema.classifications[0].labels;
    t.equal(labels.length, 5);
    t.ok(labels.includes(WORDS[3]), 'the true label is kept');
    t.equal(new Set(labels).size, 5, 'no repeats');
    firsts.add(labels[0]);
  }
  t.ok(firsts.size > 3, 'the true label is not always first');
  t.equal(ex.schema.classifications[0].labels.length, 30, 'the example itself is unchanged');
  t.equal(sampleNegativeLabels(ex, 29, rng), ex, 'k covering every label: as it is');
});

t.test('word dropout replaces text words only', async (t) => {
  const tok = new EncoderTokenizer(join(base, 'tokenizer.json'));
  const unk = tok.tokenToId('[UNK]')!;
  const [ex] = recordsToExamples([train[0]], [], WORDS.slice(0, 3));
  const f = await featurize(tok, ex, 8);
  const all = dropWords(f, 0.999999, unk, new InitRng(1));
  const textStart = f.f.wordPos[f.f.prefix.length];
  t.same([...all.f.ids.slice(0, textStart)], [...f.f.ids.slice(0, textStart)], 'prompt untouched');
  for (let w = f.f.prefix.length; w < f.f.wordPos.length; w++)
    for (let p = f.f.wordPos[w]; p < f.f.wordEnd[w]; p++) t.equal(all.f.ids[p], unk);
  t.equal(dropWords(f, 0, unk, new InitRng(1)), f, 'p = 0: the same sample');
  t.not(all.f.ids, f.f.ids, 'a copy');
});

t.test('rare word dropout: the words seen once are dropped at their own rate', async (t) => {
  const tok = new EncoderTokenizer(join(base, 'tokenizer.json'));
  const unk = tok.tokenToId('[UNK]')!;
  const texts = ['the river and the stone', 'the river bank'];
  const pWord = rareWordDropout(texts, 0.1, 0.5);
  t.equal(pWord('the'), 0.1, 'seen three times');
  t.equal(pWord('river'), 0.1, 'seen twice');
  t.equal(pWord('stone'), 0.5, 'seen once');
  t.equal(pWord('tiger'), 0.5, 'never seen');
  t.equal(rareWordDropout(texts, 0.1, 0.5, 2)('river'), 0.5, 'maxCount 2');
  // dropped per word at its rate: over many draws, the singleton's share is near 0.5 and the frequent word's near 0.1
  const ex = { kind: 'classification', text: 'the river and the stone', labels: [WORDS[0]], multiLabel: false };
  const [e] = recordsToExamples([ex as DataRecord], [], WORDS.slice(0, 2));
  const f = await featurize(tok, e, 8);
  const first = f.f.prefix.length;
  const at = (w: string) => f.f.wordPos[first + f.f.words.indexOf(w)];
  const rng = new InitRng(9);
  let stone = 0;
  let river = 0;
  for (let i = 0; i < 2000; i++) {
    const d = dropWords(f, pWord, unk, rng);
    stone += +(d.f.ids[at('stone')] === unk);
    river += +(d.f.ids[at('river')] === unk);
  }
  t.ok(Math.abs(stone / 2000 - 0.5) < 0.05, `singleton dropped ${(stone / 20).toFixed(1)}%`);
  t.ok(Math.abs(river / 2000 - 0.1) < 0.03, `frequent word dropped ${(river / 20).toFixed(1)}%`);
});

t.test('time-budget schedule: warm-up, then decay to 0 at the end of the budget', async (t) => {
  t.ok(lrFactorAt('linear', 0.05, 0.1) > 0.45 && lrFactorAt('linear', 0.05, 0.1) < 0.55);
  t.equal(lrFactorAt('linear', 0.1, 0.1), 1);
  t.ok(Math.abs(lrFactorAt('linear', 0.55, 0.1) - 0.5) < 1e-9);
  t.equal(lrFactorAt('linear', 1, 0.1), 0);
  t.ok(Math.abs(lrFactorAt('cosine', 0.55, 0.1) - 0.5) < 1e-9);
  t.equal(lrFactorAt('constant', 0.9, 0.1), 1);
});

t.test('the best checkpoint is the one with the best task metric, not the lowest loss', async (t) => {
  const book = new CheckpointBook(join(tmp, 'book'), 10, {});
  const dir = (n: number) => {
    const d = join(tmp, 'book', `checkpoint-${n}`);
    initEncoder(
      d,
      { hidden_size: 8, num_hidden_layers: 1, num_attention_heads: 1, intermediate_size: 8, vocab_size: 200 },
      ['a b'],
      { seed: n },
    );
    return d;
  };
  const a = book.add({ epoch: 1, step: 1, train_loss: 1, val_loss: 1.0, val_metric: 0.5, is_final: false }, dir(1));
  const b = book.add({ epoch: 1, step: 2, train_loss: 1, val_loss: 0.5, val_metric: 0.4, is_final: false }, dir(2));
  const c = book.add({ epoch: 1, step: 3, train_loss: 1, val_loss: 0.9, val_metric: 0.6, is_final: false }, dir(3));
  t.same([a.is_best, b.is_best, c.is_best], [true, false, true]);
  t.equal(book.bestMetric, 0.6);
  t.equal(book.bestLoss, 0.5, 'the loss is still tracked');
});

t.test('many labels: a step carries true + k labels, the trained model serves all 30', async (t) => {
  for (const k of [0, 4]) {
    const res = await trainEncoder({
      base_model: base,
      output_dir: join(tmp, `run-${k}`),
      train_data: train.slice(0, 64),
      validation_data: held.slice(0, 10),
      nr_epochs: 1,
      batch_size: 8,
      learning_rate: 5e-3,
      encoder_learning_rate: 1e-3,
      seed: 3,
      threads: 1,
      negative_labels: k,
      metric_samples: 10,
    });
    t.equal(res.stopped, 'completed');
    t.ok(typeof res.best_val_metric === 'number', 'the validation accuracy picked the checkpoint');
    const s = await evaluateClassification(res.best_checkpoint!, held.slice(0, 16), { labels: WORDS });
    t.equal(s.sample_count, 16, 'served with the full label set');
  }
  // the prompt of a 30-label example: 30 markers + names; with k = 4: 5. The sampled run is much cheaper per step.
  const [ex] = recordsToExamples([train[0]], [], WORDS);
  const tok = new EncoderTokenizer(join(base, 'tokenizer.json'));
  const full = await featurize(tok, ex, 8);
  const cut = await featurize(tok, sampleNegativeLabels(ex, 4, new InitRng(1)), 8);
  t.equal(cut.segs[0].M, 5, 'true + 4 label markers');
  t.equal(full.segs[0].M, 30);
  t.ok(
    cut.f.ids.length * 2 < full.f.ids.length,
    `a sampled example is ${cut.f.ids.length} pieces, the full one ${full.f.ids.length}`,
  );
});

t.test('max_minutes stops the run and keeps a scored final checkpoint', async (t) => {
  const res = await trainEncoder({
    base_model: base,
    output_dir: join(tmp, 'timed'),
    train_data: train,
    validation_data: held.slice(0, 10),
    nr_epochs: 1000,
    batch_size: 8,
    learning_rate: 5e-3,
    encoder_learning_rate: 1e-3,
    seed: 3,
    threads: 1,
    max_minutes: 0.1,
    metric_samples: 10,
  });
  t.equal(res.stopped, 'time_limit');
  t.ok(res.duration_s < 20, `stopped in ${res.duration_s.toFixed(1)} s`);
  t.ok(
    res.checkpoints.some((c) => c.is_final && typeof c.val_metric === 'number'),
    'final checkpoint with its metric',
  );
});

t.test('records of no encoder kind are refused before training', async (t) => {
  const chat = [{ kind: 'chat', messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: 'hello' }] }];
  await t.rejects(trainEncoder({
    base_model: base, output_dir: join(tmp, 'no-kind'), train_data: chat as DataRecord[], validation_data_percentage: 0,
    nr_epochs: 1, threads: 1,
  }), { name: 'TrainingConfigError', message: /none of the 1 training records is an encoder record/ });
});

t.test('word dropout and sampled labels: reproducible; piece dropout leaves classification alone', async (t) => {
  const losses: number[][] = [];
  for (const [name, pieces] of [['again-1', 0.3], ['again-2', 0.3], ['whole-pieces', 0]] as const) {
    const seen: number[] = [];
    await trainEncoder({
      base_model: base, output_dir: join(tmp, name), train_data: train.slice(0, 96), validation_data_percentage: 0,
      nr_epochs: 1, batch_size: 8, learning_rate: 5e-3, encoder_learning_rate: 1e-3, seed: 4, threads: 1,
      word_dropout: 0.3, hidden_dropout: 0.1, negative_labels: 4, full_label_ratio: 0, selection_metric: 'loss',
      piece_dropout: pieces,
    }, { onProgress: (e) => void seen.push(e.loss) });
    losses.push(seen);
  }
  t.equal(losses[0].length, 12);
  t.same(losses[0], losses[1], 'the same losses at every step');
  t.same(losses[0], losses[2], 'classification examples keep their pieces');
});
