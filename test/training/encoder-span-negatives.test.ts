// Negative spans in the span loss (negative_span_keep, issue 17): GLiNER keeps each negative span with probability 0.5;
// the keep probability is an option, for data whose entities are rare (WNUT-17's tweets: most spans are negatives),
// and 'balanced' sets it from the data's share of mentions (the fresh small preset's default).
import t from 'tap';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { DataRecord } from '../../src/training/data/formats.ts';
import { collate, featurize, recordsToExamples, type EncoderExample } from '../../src/training/encoder/examples.ts';
import {
  BALANCED_REFERENCE_SHARE, balancedNegativeKeep, positiveSpanShare, resolveSpanHard,
} from '../../src/training/encoder/negative-spans.ts';
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

/** A fresh one-layer training graph and the two records as one batch, person and location asked. */
async function graphAndBatch() {
  const tmp = mkdtempSync(join(tmpdir(), 'loom-negspan-'));
  const base = join(tmp, 'base');
  initEncoder(base, cfg, TEXTS, { seed: 4 });
  const tok = new EncoderTokenizer(join(base, 'tokenizer.json'));
  const enc = parseDebertaConfig(JSON.parse(readFileSync(join(base, 'encoder_config', 'config.json'), 'utf8')), 'x');
  const g = EncoderTrainGraph.create(enc, 8, true, initEncoderTensors(cfg, tok.vocabSize(), 3), null);
  const batch = collate(await Promise.all(recordsToExamples(RECORDS, ['person', 'location']).map((ex) =>
    featurize(tok, ex, 8))));
  return { g, batch };
}

t.test('the span loss keeps negatives at the given rate', async (t) => {
  const { g, batch } = await graphAndBatch();
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

t.test('hard negatives enter the span loss whatever the keep (negative_span_hard)', async (t) => {
  const { g, batch } = await graphAndBatch();
  const span = async (negKeep: number, negHard: number, seed = 1) =>
    (await g.step(batch, { backward: false, negKeep, negHard, seed })).span;
  const all = (await g.step(batch, { backward: false, dropNeg: false })).span;
  // at a keep near 0 only the positives and the hard negatives are left, the same ones at every seed
  const eps = 1e-7;
  const [pos, label, boundary] = [await span(eps, 0), await span(eps, 1), await span(eps, 2)];
  t.equal(await span(eps, 1, 7), label, "'label': the same loss at another seed");
  t.equal(await span(eps, 2, 7), boundary, "'boundary': the same loss at another seed");
  t.ok(pos < label && label < boundary && boundary < all, `${pos} < ${label} < ${boundary} < ${all}`);
  t.equal(await span(1, 2), all, 'keep 1: every negative');
  // the same draws: at any seed a hard mode only adds terms
  for (let seed = 1; seed <= 20; seed++) {
    const [a, b, c] = [await span(0.3, 0, seed), await span(0.3, 1, seed), await span(0.3, 2, seed)];
    if (!(a <= b && b <= c)) t.fail(`seed ${seed}: ${a} ${b} ${c}`);
  }
  // E[loss] = positives + hard + p · (the other negatives)
  let s = 0;
  for (let seed = 1; seed <= 100; seed++) s += await span(0.5, 1, seed);
  const expect = label + 0.5 * (all - label);
  t.ok(Math.abs(s / 100 - expect) < 0.1 * (all - label), `mean ${(s / 100).toFixed(2)} against ${expect.toFixed(2)}`);
  t.throws(() => g.step(batch, { backward: false, negHard: 3 }), /negHard/);
  // 'auto': 'label' at GLiNER's keep, none below it
  t.same(resolveSpanHard('auto', 0.5), { mode: 'label', native: 1 });
  t.same(resolveSpanHard('auto', 0.203), { mode: 'none', native: 0 });
  t.same(resolveSpanHard('boundary', 0.2), { mode: 'boundary', native: 2 });
});

t.test('the trainer takes negative_span_keep in (0, 1]', async (t) => {
  const tmp = mkdtempSync(join(tmpdir(), 'loom-negspan-'));
  const base = join(tmp, 'base');
  initEncoder(base, cfg, TEXTS, { seed: 4 });
  const run = (p: unknown, out: string, hard: unknown = undefined) => trainEncoder({
    base_model: base, output_dir: join(tmp, out), train_data: RECORDS, nr_epochs: 2, batch_size: 2, seed: 1,
    validation_data_percentage: 0, negative_span_keep: p as number, negative_span_hard: hard as 'label',
  });
  await t.rejects(run(0, 'a'), TrainingConfigError);
  await t.rejects(run(1.5, 'b'), TrainingConfigError);
  await t.rejects(run(0.2, 'd', 'overlap'), TrainingConfigError);
  const res = await run(0.2, 'c', 'boundary');
  t.ok(res.steps > 0 && Number.isFinite(res.train_loss));
  const resolved = JSON.parse(readFileSync(join(tmp, 'c', 'training_config.json'), 'utf8')).resolved;
  t.match(resolved, { negative_span_keep: 0.2, negative_span_hard: 'boundary' });
  await run(0.5, 'e', 'auto');
  t.equal(JSON.parse(readFileSync(join(tmp, 'e', 'training_config.json'), 'utf8')).resolved.negative_span_hard, 'label',
    "'auto' at GLiNER's keep: a mention's span under the other labels");
});

t.test("'balanced': fewer negatives where mentions are rarer, GLiNER's 0.5 at CoNLL-2003's balance", async (t) => {
  const ner = (text: string, n: number): EncoderExample =>
    recordsToExamples([{ kind: 'ner', text, entities: TEXTS[0]!.split(' ').slice(0, n).map((w, i, ws) => {
      const start = ws.slice(0, i).join(' ').length + (i ? 1 : 0);
      return { label: 'person', start, end: start + w.length, text: w };
    }) }], ['person', 'location'])[0]!;
  // 14 words, width 12: 12·2 + 78 = 102 spans, 2 labels: 204 pairs; 3 mentions
  const ex = ner(TEXTS[0]!, 3);
  t.equal(positiveSpanShare([ex], 12, 256), 3 / 204);
  t.equal(positiveSpanShare([ex], 12, 4), 3 / 20, 'max_words bounds the spans: 10 spans of 4 words, 2 labels');
  t.equal(positiveSpanShare([ner('No one here .', 0)], 12, 256), null, 'no mentions');
  t.equal(positiveSpanShare([ner('Peter Blackburn', 1)], 12, 256), 1 / 12, 'the formatter\'s words: "." appended');
  t.equal(balancedNegativeKeep(null), 0.5);
  t.equal(balancedNegativeKeep(BALANCED_REFERENCE_SHARE * 2), 0.5, 'denser data: GLiNER\'s 0.5 at most');
  t.equal(balancedNegativeKeep(BALANCED_REFERENCE_SHARE / 4), 0.25, 'four times sparser: half the keep');
  t.equal(balancedNegativeKeep(1e-9), 0.05, 'at least 0.05');
  const tmp = mkdtempSync(join(tmpdir(), 'loom-negspan-'));
  const base = join(tmp, 'base');
  initEncoder(base, cfg, TEXTS, { seed: 4 });
  // 29 words, one mention, 2 labels, the fresh width 8: 8·21 + 36 = 204 spans, share 1/408 → 0.5·√(0.00245 / 0.00415)
  const sparse: DataRecord[] = Array.from({ length: 4 }, () => ({
    kind: 'ner', text: `${TEXTS[0]} ${TEXTS[1]}`, entities: [{ label: 'person', start: 0, end: 5, text: 'Peter' }],
  }));
  const res = await trainEncoder({
    base_model: base, output_dir: join(tmp, 'b'), train_data: sparse, nr_epochs: 1, batch_size: 2, seed: 1,
    validation_data_percentage: 0, negative_span_keep: 'balanced', entity_labels: ['person', 'location'],
    negative_span_hard: 'auto',
  });
  t.ok(res.steps > 0 && Number.isFinite(res.train_loss));
  const resolved = JSON.parse(readFileSync(join(tmp, 'b', 'training_config.json'), 'utf8')).resolved;
  const keep = resolved.negative_span_keep;
  t.equal(keep, balancedNegativeKeep(1 / 408));
  t.equal(resolved.negative_span_hard, 'none', "'auto' below GLiNER's keep: no hard negatives");
  t.ok(keep > 0.38 && keep < 0.39, `resolved ${keep}`);
  await t.rejects(trainEncoder({
    base_model: base, output_dir: join(tmp, 'c'), train_data: sparse, nr_epochs: 1, batch_size: 2,
    validation_data_percentage: 0, negative_span_keep: 'auto' as 'balanced',
  }), TrainingConfigError);
});
