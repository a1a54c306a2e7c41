// Hard negative labels (hard_negatives, issue 17): the running logit margins of the training steps decide part of a
// single-label example's sampled negatives, drawn by exp(margin) without replacement; the rest stay uniform.
import t from 'tap';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { DataRecord } from '../../src/training/data/formats.ts';
import { LabelConfusion } from '../../src/training/encoder/hard-negatives.ts';
import { collate, featurize, recordsToExamples, sampleNegativeLabels } from '../../src/training/encoder/examples.ts';
import { InitRng, initEncoder, initEncoderTensors } from '../../src/training/encoder/init.ts';
import { EncoderTrainGraph } from '../../src/training/native.ts';
import { EncoderTokenizer } from '../../src/models/encoder/tokenizer.ts';
import { parseDebertaConfig } from '../../src/models/encoder/deberta.ts';
import { trainEncoder } from '../../src/training/encoder-trainer.ts';
import { TrainingConfigError } from '../../src/training/common.ts';

const LABELS = 'abcdefghij'.split('');

t.test('the margins are running means of z_other - z_true', async (t) => {
  const c = new LabelConfusion(LABELS, 0.5);
  c.observe('a', ['c', 'a', 'b'], [1, 3, 4]);
  t.equal(c.marginOf('a', 'b'), 0.5);
  t.equal(c.marginOf('a', 'c'), -1);
  c.observe('a', ['b', 'a'], [5, 2]);
  t.equal(c.marginOf('a', 'b'), 0.5 + 0.5 * (3 - 0.5));
  t.equal(c.marginOf('b', 'a'), 0, 'per true label');
  c.observe('zz', ['a', 'zz'], [1, 2]);
  c.observe('a', ['b', 'c'], [1, 2]);
  t.equal(c.marginOf('a', 'b'), 1.75, 'an unknown label or a prompt without the true one changes nothing');
});

t.test('hard draws follow exp(margin), the others are uniform', async (t) => {
  const c = new LabelConfusion(LABELS, 1);
  c.observe('a', ['a', 'b'], [0, 2]);
  const rng = new InitRng(5);
  const neg = LABELS.slice(1);
  const count = (hard: number) => {
    let b = 0;
    let sizes = 0;
    for (let r = 0; r < 4000; r++) {
      const got = c.pick('a', neg, 1, hard, rng);
      sizes += got.length;
      if (got[0] === 'b') b++;
    }
    t.equal(sizes, 4000, 'one label a draw');
    return b / 4000;
  };
  const pb = Math.exp(2) / (Math.exp(2) + 8);
  const hardShare = count(1);
  t.ok(Math.abs(hardShare - pb) < 0.03, `P(b) ${hardShare.toFixed(3)} against ${pb.toFixed(3)}`);
  const uniform = count(0);
  t.ok(Math.abs(uniform - 1 / 9) < 0.02, `P(b) ${uniform.toFixed(3)} against ${(1 / 9).toFixed(3)} uniform`);
  const k = c.pick('a', neg, 6, 0.5, rng);
  t.equal(new Set(k).size, 6, 'no label twice');
  t.notOk(k.includes('a'));
});

t.test('sampleNegativeLabels draws a single-label task\'s negatives through the confusion', async (t) => {
  const records: DataRecord[] = [{ kind: 'classification', text: 'x y', labels: ['a'], multiLabel: false }];
  const [ex] = recordsToExamples(records, [], LABELS);
  const confusion = new LabelConfusion(LABELS, 1);
  confusion.observe('a', ['a', 'j'], [0, 6]);
  const rng = new InitRng(9);
  let withJ = 0;
  let wellFormed = 0;
  for (let r = 0; r < 500; r++) {
    const out = sampleNegativeLabels(ex!, 2, rng, { confusion, ratio: 0.5 });
    const labels = out.schema.classifications[0]!.labels;
    if (labels.length === 3 && new Set(labels).size === 3 && labels.includes('a')) wellFormed++;
    if (labels.includes('j')) withJ++;
  }
  t.equal(wellFormed, 500, 'the true label and two distinct negatives in every prompt');
  t.ok(withJ > 450, `j asked in ${withJ} of 500 prompts (uniform: about 111)`);
});

t.test('the trainer takes hard_negatives and refuses values outside [0, 1]', async (t) => {
  const tmp = mkdtempSync(join(tmpdir(), 'loom-hard-'));
  const texts = ['card still not here', 'how old must I be', 'top up with apple pay', 'my card has not arrived'];
  const labels = ['card arrival', 'age limit', 'apple pay', 'card arrival'];
  const records: DataRecord[] = texts.map((text, i) => ({ kind: 'classification', text, labels: [labels[i]!],
    multiLabel: false }));
  const others = ['cash', 'fees', 'pin', 'visa'].map((l) => ({ kind: 'classification' as const, text: `about ${l}`,
    labels: [l], multiLabel: false }));
  const base = join(tmp, 'base');
  const cfg = { hidden_size: 32, num_hidden_layers: 1, num_attention_heads: 2, intermediate_size: 64, vocab_size: 300 };
  initEncoder(base, cfg, [...texts, ...labels], { seed: 1 });
  const run = (p: unknown, out: string) => trainEncoder({
    base_model: base, output_dir: join(tmp, out), train_data: [...records, ...others], nr_epochs: 3, batch_size: 2,
    seed: 1, validation_data_percentage: 0, negative_labels: 2, full_label_ratio: 0, hard_negatives: p as number,
  });
  await t.rejects(run(2, 'a'), TrainingConfigError);
  await t.rejects(run(-1, 'b'), TrainingConfigError);
  const res = await run(0.5, 'c');
  t.ok(res.steps > 0 && Number.isFinite(res.train_loss));
  const saved = JSON.parse(readFileSync(join(tmp, 'c', 'training_config.json'), 'utf8'));
  t.equal(saved.resolved.hard_negatives, 0.5);
});

t.test('a training step returns the classifier logits the confusion reads, in segment order', async (t) => {
  const tmp = mkdtempSync(join(tmpdir(), 'loom-hard-'));
  const base = join(tmp, 'base');
  const cfg = { hidden_size: 32, num_hidden_layers: 1, num_attention_heads: 2, intermediate_size: 64, vocab_size: 300 };
  initEncoder(base, cfg, ['x y', ...LABELS], { seed: 2 });
  const tok = new EncoderTokenizer(join(base, 'tokenizer.json'));
  const enc = parseDebertaConfig(JSON.parse(readFileSync(join(base, 'encoder_config', 'config.json'), 'utf8')), 'x');
  const g = EncoderTrainGraph.create(enc, 8, true, initEncoderTensors(cfg, tok.vocabSize(), 3), null);
  const records: DataRecord[] = [
    { kind: 'classification', text: 'x y', labels: ['a'], multiLabel: false },
    { kind: 'ner', text: 'x y', entities: [] },
    { kind: 'classification', text: 'y x', labels: ['b'], multiLabel: false },
  ];
  const exs = recordsToExamples(records, ['thing'], LABELS.slice(0, 4));
  const batch = await Promise.all(exs.map((ex) => featurize(tok, ex, 8)));
  const r = await g.step(collate(batch), { backward: false });
  t.equal(r.clsLogits?.length, 8, 'two segments of four labels');
  const one = await g.step(collate([batch[2]!]), { backward: false });
  t.same([...r.clsLogits!.subarray(4)].map((x) => x.toFixed(4)), [...one.clsLogits!].map((x) => x.toFixed(4)),
    'the second segment\'s logits, as a batch of it alone gives them');
});
