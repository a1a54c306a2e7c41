// Polyak averaging of an encoder's weights (ema_decay, issue 17): the graph keeps an exponential moving average of
// its trainable weights beside them, and a run with ema_decay evaluates, selects and saves the average while it
// trains the weights exactly as a run without it does.
import t from 'tap';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { DataRecord } from '../../src/training/data/formats.ts';
import { initEncoder, initEncoderTensors } from '../../src/training/encoder/init.ts';
import { collate, featurize, recordsToExamples } from '../../src/training/encoder/examples.ts';
import { trainEncoder } from '../../src/training/encoder-trainer.ts';
import { TrainingConfigError } from '../../src/training/common.ts';
import { EncoderTrainGraph } from '../../src/training/native.ts';
import { EncoderTokenizer } from '../../src/models/encoder/tokenizer.ts';
import { parseDebertaConfig } from '../../src/models/encoder/deberta.ts';
import { SafetensorsCheckpoint, toFloat32 } from '../../src/formats/safetensors.ts';

const tmp = mkdtempSync(join(tmpdir(), 'loom-ema-'));
const LABELS = ['card arrival', 'age limit', 'apple pay'];
const TEXTS = ['I am still waiting on my card?', 'How old do I need to be?', 'Can I top up with apple pay?'];
const cfg = { hidden_size: 32, num_hidden_layers: 1, num_attention_heads: 2, intermediate_size: 64, vocab_size: 300 };
const base = join(tmp, 'base');
initEncoder(base, cfg, [...TEXTS, ...LABELS], { seed: 1 });
const tok = new EncoderTokenizer(join(base, 'tokenizer.json'));
const records: DataRecord[] = TEXTS.map((text, i) => ({ kind: 'classification', text, labels: [LABELS[i]],
  multiLabel: false }));

t.test('the graph averages its trainable weights and swaps the average in and out', async (t) => {
  const enc = parseDebertaConfig(JSON.parse(readFileSync(join(base, 'encoder_config', 'config.json'), 'utf8')), 'x');
  const g = EncoderTrainGraph.create(enc, 8, true, initEncoderTensors(cfg, tok.vocabSize(), 3), null);
  t.equal(g.emaSwap(), false, 'no average before a first update');
  const names = g.params().filter((p) => p.trainable).map((p) => p.name);
  const batch = collate(await Promise.all(recordsToExamples(records, [], LABELS).map((ex) => featurize(tok, ex, 8))));
  const decays = [0.5, 0.8, 0.9];
  const expect = new Map<string, Float32Array>();
  for (let s = 1; s <= decays.length; s++) {
    g.zeroGrad();
    await g.step(batch, { backward: true });
    await g.optimizerStep({ lr: [1e-2, 1e-2], weightDecay: 0.01, maxGradNorm: 1, step: s, emaDecay: decays[s - 1] });
    for (const n of names) {
      const w = g.get(n);
      const a = expect.get(n);
      if (!a) expect.set(n, Float32Array.from(w)); // the first update starts the average at the weights
      else for (let i = 0; i < w.length; i++) a[i] = decays[s - 1] * a[i] + (1 - decays[s - 1]) * w[i];
    }
  }
  const trained = new Map(names.map((n) => [n, g.get(n)]));
  t.equal(g.emaSwap(), true);
  let worst = 0;
  let moved = 0;
  for (const n of names) {
    const got = g.get(n);
    const a = expect.get(n)!;
    const w = trained.get(n)!;
    for (let i = 0; i < got.length; i++) {
      worst = Math.max(worst, Math.abs(got[i] - a[i]) / (1 + Math.abs(a[i])));
      moved = Math.max(moved, Math.abs(got[i] - w[i]));
    }
  }
  // the graph sums in fp32 (three roundings an update), the reference rounds once
  t.ok(worst < 1e-6, `the swapped-in weights are the average (max |Δ| / (1 + |a|) ${worst.toExponential(1)})`);
  t.ok(moved > 1e-4, `and differ from the trained weights (max |Δ| ${moved.toExponential(1)})`);
  g.emaSwap();
  t.ok(names.every((n) => g.get(n).every((x, i) => x === trained.get(n)![i])), 'swapping back restores them exactly');
});

t.test('a run with ema_decay trains the same weights and saves their average', async (t) => {
  const run = (name: string, ema: number) => trainEncoder({
    base_model: base, output_dir: join(tmp, name), train_data: [...records, ...records, ...records, ...records],
    validation_data: records, batch_size: 4, nr_epochs: 4, learning_rate: 1e-2, encoder_learning_rate: 1e-2,
    eval_steps: 1, seed: 7, threads: 1, selection_metric: 'loss', ema_decay: ema,
  });
  const plain = await run('plain', 0);
  const averaged = await run('ema', 0.6);
  t.equal(averaged.steps, plain.steps);
  t.same(averaged.checkpoints.map((c) => c.train_loss), plain.checkpoints.map((c) => c.train_loss),
    'the training losses are the same: the average does not feed back into training');
  t.not(averaged.checkpoints.at(-1)!.val_loss, plain.checkpoints.at(-1)!.val_loss, 'the average is what is evaluated');
  const last = (r: typeof plain) =>
    toFloat32(SafetensorsCheckpoint.open(r.final_checkpoint).get('classifier.0.weight'));
  const a = last(averaged);
  const p = last(plain);
  t.ok(a.some((x, i) => x !== p[i]), 'and what is saved');
  const cfgSaved = JSON.parse(readFileSync(join(tmp, 'ema', 'training_config.json'), 'utf8'));
  t.equal(cfgSaved.resolved.ema_decay, 0.6);
  await t.rejects(run('bad', 1), TrainingConfigError);
});
