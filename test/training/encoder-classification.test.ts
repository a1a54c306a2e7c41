// Many-label classification with a fresh encoder (issue 17): what made Banking77 stay at chance.
// 1. The prompt a classifier is trained on is the prompt it is asked with: the task name is part of the prompt, and
//    training used 'category' while evaluations and label-existing ask with 'label'.
// 2. A fresh encoder's label markers start apart: with DeBERTa's N(0, 0.02) init every [L] marker had the same state,
//    so the classifier gave every label the same logit and a shuffled, sampled label prompt never left the prior.
// 3. A model trained on short sampled label prompts alone ranks labels only in prompts that short, not the full label
//    set it is served with, and one trained on every label in one order learns places: every label, shuffled.
import t from 'tap';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseJsonl, type DataRecord } from '../../src/training/data/formats.ts';
import { initEncoder, initEncoderTensors } from '../../src/training/encoder/init.ts';
import { trainEncoder } from '../../src/training/encoder-trainer.ts';
import { evaluateClassification } from '../../src/training/evaluate.ts';
import { CLASSIFICATION_TASK } from '../../src/training/encoder/recipe.ts';
import { collate, featurize, recordsToExamples } from '../../src/training/encoder/examples.ts';
import { EncoderTrainGraph } from '../../src/training/native.ts';
import { EncoderTokenizer } from '../../src/models/encoder/tokenizer.ts';
import { formatInput } from '../../src/models/encoder/format.ts';
import { normalizeSchema } from '../../src/models/encoder/schema.ts';
import { parseDebertaConfig } from '../../src/models/encoder/deberta.ts';

const tmp = mkdtempSync(join(tmpdir(), 'loom-cls-'));
const DATA = join(import.meta.dirname, '../../../shared/data/banking77');
const LABELS = ['activate my card', 'age limit', 'apple pay', 'atm support', 'card arrival', 'cash withdrawal'];
const TEXTS = ['I am still waiting on my card?', 'How old do I need to be?', 'Can I top up with apple pay?'];
const cfg = { hidden_size: 64, num_hidden_layers: 2, num_attention_heads: 2, intermediate_size: 128, vocab_size: 600 };
const base = join(tmp, 'base');
initEncoder(base, cfg, [...TEXTS, ...LABELS], { seed: 1 });
const tok = new EncoderTokenizer(join(base, 'tokenizer.json'));
const rec = (text: string, label: string): DataRecord =>
  ({ kind: 'classification', text, labels: [label], multiLabel: false });

t.test('a classification example is trained on the prompt the model is asked with', async (t) => {
  const [ex] = recordsToExamples([rec(TEXTS[0], 'card arrival')], [], LABELS);
  const trained = await featurize(tok, ex, 8);
  const asked = { classifications: [{ task: CLASSIFICATION_TASK, labels: LABELS, multi_label: false }] };
  const served = await formatInput(tok, TEXTS[0], normalizeSchema(asked));
  t.same(trained.f.processorTokens, served.processorTokens);
  t.same([...trained.f.ids], [...served.ids]);
  t.same([...trained.f.specialPos[0]], [...served.specialPos[0]], 'the same [L] positions');
});

t.test('a fresh encoder tells its label markers apart before training', async (t) => {
  const enc = parseDebertaConfig(JSON.parse(readFileSync(join(base, 'encoder_config', 'config.json'), 'utf8')), 'x');
  const spread = async (tensors: Record<string, Float32Array>) => {
    const g = EncoderTrainGraph.create(enc, 8, true, tensors, null);
    const [ex] = recordsToExamples([rec(TEXTS[0], LABELS[0])], [], LABELS);
    const f = await featurize(tok, ex, 8);
    // the classification loss with each label as the true one: equal losses = equal logits for every label
    const losses: number[] = [];
    for (let m = 0; m < LABELS.length; m++) {
      const clsY = Float32Array.from(LABELS, (_, i) => (i === m ? 1 : 0));
      losses.push((await g.step(collate([{ f: f.f, segs: [{ ...f.segs[0], clsY }] }]), { backward: false })).loss);
    }
    return Math.max(...losses) - Math.min(...losses);
  };
  const V = tok.vocabSize();
  const fresh = await spread(initEncoderTensors(cfg, V, 1));
  t.ok(fresh > 2e-3, `the labels' losses differ by ${fresh.toExponential(2)} at init`);
  // the same model without the local heads (key biases 0, as DeBERTa's init leaves them): 100x closer
  const flat = initEncoderTensors(cfg, V, 1);
  for (let l = 0; l < cfg.num_hidden_layers; l++)
    flat[`encoder.encoder.layer.${l}.attention.self.key_proj.bias`].fill(0);
  const uniform = await spread(flat);
  t.ok(uniform * 20 < fresh, `without local heads they differ by ${uniform.toExponential(2)}`);
});

// Six Banking77 intents (train 629 records, dev 70). Without label isolation, asked for all six labels in a fresh
// random order at every step (full_label_ratio 1, that base's default). Measured with the same seed and 468 steps: dev
// accuracy 0.357 so; 0.186 with true + 2 sampled labels per step (0.186 too with half the steps each way; chance
// 0.167); 0.529 with all six in one fixed order, which only holds in that order. With label isolation (true + sampled
// labels at every step, full_label_ratio 0) the same accuracy in every order. Its setting is true + 4 of the 5 other
// labels: with true + 2, the result hung on rounding (seed 42 read 0.843 on the Zen 5, 0.686 on a Zen 3, 0.443 once
// the encoder packed its batches, which changes only summation order). `npx tsx bench/cls-head/six-intents.mts
// [--negative-labels 2] [--isolation 0] [--bag 0|1]` over trainer seeds 42-52 on a Zen 3, AVX2, with the label's
// marker and name pieces (--bag 0): true + 2 0.329-0.914, true + 4 0.614-0.914 (0.871 at seed 42), hence the bar at
// 0.6; without isolation 0.171-0.629 (so no bar of its own): below the isolated model. With label bags (the fresh
// default: a label is one [L] token holding its name's pieces) true + 4 read 0.829-1.000 (1.000 at seed 42), hence
// the bar at 0.8; true + 2 0.743-1.000, and without isolation 0.786-1.000.
const INTENTS = ['age limit', 'apple pay or google pay', 'change pin', 'exchange rate', 'lost or stolen phone',
  'terminate account'];
const banking = (split: string) => parseJsonl(readFileSync(join(DATA, `${split}.jsonl`), 'utf8'))
  .filter((r) => r.kind === 'classification' && INTENTS.includes(r.labels[0]));

t.test('the model learns the labels, and ranks them in any order when served, with label isolation', async (t) => {
  const train = banking('train');
  const dev = banking('dev');
  const texts = train.map((r) => (r as { text: string }).text);
  const orders = [INTENTS, [...INTENTS].reverse(), [3, 0, 5, 1, 4, 2].map((i) => INTENTS[i])];
  const seen: Record<string, number[]> = {};
  const runs = { bag: { label_isolation: true }, iso: { label_isolation: true, label_bag: false },
    mixed: { label_isolation: false, label_bag: false } };
  for (const [run, labelCfg] of Object.entries(runs)) {
    const dir = join(tmp, `intents-${run}`);
    initEncoder(dir, { ...cfg, vocab_size: 1500, ...labelCfg }, texts, { seed: 42 });
    const before = await evaluateClassification(dir, dev, { labels: INTENTS });
    const res = await trainEncoder({
      base_model: dir, output_dir: join(tmp, `intents-run-${run}`), train_data: train,
      validation_data_percentage: 0,
      nr_epochs: 6, batch_size: 8, learning_rate: 5e-3, encoder_learning_rate: 1e-3, seed: 42, threads: 1,
      negative_labels: 4,
    });
    const ran = `after ${res.steps} steps, ${res.duration_s.toFixed(1)} s`;
    const acc: number[] = (seen[run] = []);
    for (const labels of orders) {
      const after = await evaluateClassification(res.final_checkpoint, dev, { labels });
      t.equal(after.sample_count, dev.length, 'every dev record, asked with all six labels');
      t.comment(`${run}, asked as ${labels.map((l) => l[0]).join('')}: dev accuracy `
        + `${before.accuracy.toFixed(3)} -> ${after.accuracy.toFixed(3)} (chance 0.167) ${ran}`);
      acc.push(after.accuracy);
    }
  }
  const { bag, iso, mixed } = seen as Record<keyof typeof runs, number[]>;
  t.ok(bag.every((a) => a >= 0.8), `the fresh default (isolated, bags): dev accuracy ${bag[0].toFixed(3)} (bar 0.8)`);
  t.ok(bag.every((a) => a === bag[0]), 'the same accuracy in every order');
  t.ok(iso.every((a) => a >= 0.6), `isolated, marker and name pieces: dev accuracy ${iso[0].toFixed(3)} (bar 0.6)`);
  t.ok(iso.every((a) => a === iso[0]), 'isolated labels: the same accuracy in every order');
  t.ok(mixed.every((a) => a < iso[0]), `without isolation, below it in every order (${mixed.map((a) => a.toFixed(3))})`);
});

// 4. A fresh classifier starts near logit 0 for every label, far above the label prior: classifier_prior_init (the
//    fresh recipe) moves its output bias so that the first step's loss is the prior's.
t.test('classifier_prior_init starts the classifier at the label prior', async (t) => {
  const all = banking('train');
  const train = INTENTS.flatMap((i) => all.filter((r) => r.kind === 'classification' && r.labels[0] === i).slice(0, 8));
  const prior = -Math.log(1 / 6) - 5 * Math.log(5 / 6); // BCE of six labels at p = 1/6, one of them true
  const firstLoss = async (init: boolean, sampling: Record<string, number> = {}) => {
    let loss = NaN;
    const dir = join(tmp, `prior-${init}-${Object.keys(sampling).length}`);
    const res = await trainEncoder({
      base_model: base, output_dir: dir, train_data: train, validation_data_percentage: 0,
      max_steps: 1, batch_size: 8, learning_rate: 5e-3, encoder_learning_rate: 1e-3, seed: 42, threads: 1,
      classifier_prior_init: init, ...sampling,
    }, { onProgress: (e) => void (loss = e.loss) });
    const saved = JSON.parse(readFileSync(join(dir, 'training_config.json'), 'utf8'));
    return { loss, shift: saved.resolved.classifier_prior_shift, steps: res.steps };
  };
  const on = await firstLoss(true);
  const off = await firstLoss(false);
  t.ok(Math.abs(on.loss - prior) < 0.05 * prior, `first loss ${on.loss.toFixed(3)} at the prior ${prior.toFixed(3)}`);
  t.ok(off.loss > prior + 1, `without it ${off.loss.toFixed(3)}`);
  t.ok(on.shift < 0 && off.shift === null, `bias shifted by ${on.shift}`);
  // prompts of the true label and 2 sampled negatives: the prior of three labels, not of the six
  const three = -Math.log(1 / 3) - 2 * Math.log(2 / 3);
  const sampled = await firstLoss(true, { negative_labels: 2, full_label_ratio: 0 });
  t.ok(Math.abs(sampled.loss - three) < 0.05 * three,
    `sampled prompts: first loss ${sampled.loss.toFixed(3)} at their prior ${three.toFixed(3)}`);
});

// 5. classification_loss 'softmax' (the fresh recipe): a single-label task is trained with softmax cross-entropy over
//    its prompt's labels, the distribution the served single-label task (class_act auto) reads; multi-label keeps BCE.
t.test('softmax classification loss: a distribution, shift-invariant, multi-label untouched', async (t) => {
  const enc = parseDebertaConfig(JSON.parse(readFileSync(join(base, 'encoder_config', 'config.json'), 'utf8')), 'x');
  const g = EncoderTrainGraph.create(enc, 8, true, initEncoderTensors(cfg, tok.vocabSize(), 3), null);
  const featOf = async (multiLabel: boolean) => {
    const [ex] = recordsToExamples([{ kind: 'classification', text: TEXTS[0], labels: [LABELS[0]], multiLabel }], [],
      LABELS);
    return featurize(tok, ex, 8, undefined, null, {}, 'softmax');
  };
  const single = await featOf(false);
  t.equal(single.segs[0].softmax, true, 'a single-label task takes the softmax loss');
  t.equal((await featOf(true)).segs[0].softmax, false, 'a multi-label task keeps BCE');
  const lossWith = async (m: number, softmax: boolean, backward = false) => {
    const clsY = Float32Array.from(LABELS, (_, i) => (i === m ? 1 : 0));
    if (backward) g.zeroGrad();
    return (await g.step(collate([{ f: single.f, segs: [{ ...single.segs[0], clsY, softmax }] }]), { backward })).loss;
  };
  // the loss with label m true is -log p_m: over every m the p_m sum to 1
  let total = 0;
  for (let m = 0; m < LABELS.length; m++) total += Math.exp(-(await lossWith(m, true)));
  t.ok(Math.abs(total - 1) < 1e-4, `Σ_m exp(-loss_m) = ${total.toFixed(6)}`);
  let bceTotal = 0;
  for (let m = 0; m < LABELS.length; m++) bceTotal += Math.exp(-(await lossWith(m, false)));
  t.ok(Math.abs(bceTotal - 1) > 0.05, `BCE losses are not a distribution (${bceTotal.toFixed(4)})`);
  // a common shift of every logit leaves softmax unchanged: the classifier's output bias gets no gradient
  await lossWith(2, true, true);
  const dbSoft = Math.abs(g.grad('classifier.2.bias')[0]);
  const dwSoft = g.grad('classifier.2.weight').reduce((a, x) => a + Math.abs(x), 0);
  await lossWith(2, false, true);
  const dbBce = Math.abs(g.grad('classifier.2.bias')[0]);
  t.ok(dbSoft < 1e-5 && dbBce > 1e-2,
    `output bias gradient: softmax ${dbSoft.toExponential(1)}, BCE ${dbBce.toFixed(3)}`);
  t.ok(dwSoft > 1e-3, 'the classifier weights do get gradient');
  // and the loss itself: a shifted output bias leaves it as it was
  const shifted = g.get('classifier.2.bias');
  g.set('classifier.2.bias', Float32Array.of(shifted[0] + 3));
  const after = await lossWith(2, true);
  g.set('classifier.2.bias', shifted);
  t.ok(Math.abs(after - (await lossWith(2, true))) < 1e-4, 'a shifted output bias leaves the softmax loss');
});
