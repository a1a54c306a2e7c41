// Negative spans in the span loss (negative_span_keep, issue 17): GLiNER keeps each negative span with probability 0.5;
// the keep probability is an option, for data whose entities are rare (WNUT-17's tweets: most spans are negatives).
import t from 'tap';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { DataRecord } from '../../src/training/data/formats.ts';
import { collate, featurize, recordsToExamples } from '../../src/training/encoder/examples.ts';
import { initEncoder, initEncoderTensors } from '../../src/training/encoder/init.ts';
import { trainEncoder } from '../../src/training/encoder-trainer.ts';
import { TrainingConfigError } from '../../src/training/common.ts';
import { EncoderTrainGraph } from '../../src/training/native.ts';
import { EncoderTokenizer } from '../../src/models/encoder/tokenizer.ts';
import { parseDebertaConfig } from '../../src/models/encoder/deberta.ts';

const TEXTS = ['Peter Blackburn spoke in Brussels on Monday about the new rules for farmers .',
  'Nadim Ladki went to Paris and then flew back to Beirut with his brother .'];
const RECORDS: DataRecord[] = TEXTS.map((text) => {
  const [a, b] = text.split(' ');
  return { kind: 'ner', text, entities: [{ label: 'person', start: 0, end: `${a} ${b}`.length, text: `${a} ${b}` }] };
});
const cfg = { hidden_size: 32, num_hidden_layers: 1, num_attention_heads: 2, intermediate_size: 64, vocab_size: 300 };

t.test('the span loss keeps negatives at the given rate', async (t) => {
  const tmp = mkdtempSync(join(tmpdir(), 'loom-negspan-'));
  const base = join(tmp, 'base');
  initEncoder(base, cfg, TEXTS, { seed: 4 });
  const tok = new EncoderTokenizer(join(base, 'tokenizer.json'));
  const enc = parseDebertaConfig(JSON.parse(readFileSync(join(base, 'encoder_config', 'config.json'), 'utf8')), 'x');
  const g = EncoderTrainGraph.create(enc, 8, true, initEncoderTensors(cfg, tok.vocabSize(), 3), null);
  const batch = collate(await Promise.all(recordsToExamples(RECORDS, ['person', 'location']).map((ex) =>
    featurize(tok, ex, 8))));
  const span = async (negKeep: number | undefined, dropNeg: boolean, seed = 1) =>
    (await g.step(batch, { backward: false, dropNeg, negKeep, seed })).span;
  const all = await span(undefined, false);
  t.equal(await span(1, true), all, 'keep 1: every negative, as without dropping');
  const mean = async (p: number) => {
    let s = 0;
    for (let seed = 1; seed <= 100; seed++) s += await span(p, true, seed);
    return s / 100;
  };
  const [q, h] = [await mean(0.25), await mean(0.5)];
  t.equal(await span(undefined, true, 3), await span(0.5, true, 3), 'GLiNER\'s 0.5 by default');
  // E[loss] = positives + p · negatives: linear in p
  const slope = (all - h) / 0.5;
  t.ok(Math.abs((h - q) / 0.25 - slope) < 0.1 * slope, `slopes ${((h - q) / 0.25).toFixed(2)} / ${slope.toFixed(2)}`);
  t.ok(q < h && h < all);
  t.throws(() => g.step(batch, { backward: false, negKeep: 0 }), /negKeep/);
});

t.test('the trainer takes negative_span_keep in (0, 1]', async (t) => {
  const tmp = mkdtempSync(join(tmpdir(), 'loom-negspan-'));
  const base = join(tmp, 'base');
  initEncoder(base, cfg, TEXTS, { seed: 4 });
  const run = (p: unknown, out: string) => trainEncoder({
    base_model: base, output_dir: join(tmp, out), train_data: RECORDS, nr_epochs: 2, batch_size: 2, seed: 1,
    validation_data_percentage: 0, negative_span_keep: p as number,
  });
  await t.rejects(run(0, 'a'), TrainingConfigError);
  await t.rejects(run(1.5, 'b'), TrainingConfigError);
  const res = await run(0.2, 'c');
  t.ok(res.steps > 0 && Number.isFinite(res.train_loss));
  t.equal(JSON.parse(readFileSync(join(tmp, 'c', 'training_config.json'), 'utf8')).resolved.negative_span_keep, 0.2);
});
