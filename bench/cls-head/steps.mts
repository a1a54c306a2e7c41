// Issue 17 diagnostic: Loom's own trainer on a Banking77 intent subset, by steps (not by wall clock: the dev machine
// is shared, CPU time per step is steady). Prints the steps, the CPU seconds per step and the dev accuracy with all
// the subset's labels (sorted, as served, and in one shuffled order).
//   npx tsx bench/cls-head/steps.mts --intents 20 --steps 600 [--negative-labels 16 --full-label-ratio 1 --bs 8
//     --lr 5e-3 --encoder-lr 1e-3 --prior-init 1 --preset tiny --dev 300]   (defaults: the fresh recipe)
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { parseJsonl, type DataRecord } from '../../src/training/data/formats.ts';
import { ENCODER_PRESETS, initEncoder, InitRng } from '../../src/training/encoder/init.ts';
import { shuffled } from '../../src/training/common.ts';
import { evaluateClassification, trainEncoder } from '../../src/training/index.ts';
import { FRESH_RECIPE } from '../../src/training/encoder/recipe.ts';

const { values: v } = parseArgs({
  options: {
    intents: { type: 'string', default: '20' }, steps: { type: 'string', default: '600' },
    bs: { type: 'string', default: '8' }, lr: { type: 'string', default: '5e-3' },
    'encoder-lr': { type: 'string', default: '1e-3' }, 'negative-labels': { type: 'string', default: '16' },
    'full-label-ratio': { type: 'string', default: '1' }, preset: { type: 'string', default: 'tiny' },
    dev: { type: 'string', default: '300' }, seed: { type: 'string', default: '42' },
    'prior-init': { type: 'string', default: '1' },
  },
});
type Cls = Extract<DataRecord, { kind: 'classification' }>;
const DATA = join(import.meta.dirname, '../../../shared/data/banking77');
const load = (split: string) => parseJsonl(readFileSync(join(DATA, `${split}.jsonl`), 'utf8'))
  .filter((r): r is Cls => r.kind === 'classification');
const intents = [...new Set(load('train').map((r) => r.labels[0]))].sort();
const keep = new Set(shuffled(intents, new InitRng(5)).slice(0, Number(v.intents)));
const train = load('train').filter((r) => keep.has(r.labels[0]));
const dev = shuffled(load('dev').filter((r) => keep.has(r.labels[0])), new InitRng(17)).slice(0, Number(v.dev));
const work = mkdtempSync(join(tmpdir(), 'loom-cls-steps-'));
initEncoder(join(work, 'base'), { ...ENCODER_PRESETS[v.preset!] }, train.map((r) => r.text), { seed: 42 });
const c0 = process.cpuUsage();
let last = '';
const res = await trainEncoder({
  ...FRESH_RECIPE, classifier_prior_init: v['prior-init'] === '1',
  base_model: join(work, 'base'), output_dir: join(work, 'run'), train_data: train, training_type: 'full',
  nr_epochs: 1000, max_steps: Number(v.steps), batch_size: Number(v.bs), learning_rate: Number(v.lr),
  encoder_learning_rate: Number(v['encoder-lr']), negative_labels: Number(v['negative-labels']),
  full_label_ratio: Number(v['full-label-ratio']), seed: Number(v.seed), threads: 1, validation_data_percentage: 0,
  eval_steps: 1e9, selection_metric: 'loss',
}, { onProgress: (e) => void (last = e.loss.toFixed(3)) });
const u = process.cpuUsage(c0);
const cpu = (u.user + u.system) / 1e6;
const labels = [...keep].sort();
const sorted = await evaluateClassification(res.final_checkpoint, dev, { labels });
const mixed = await evaluateClassification(res.final_checkpoint, dev, { labels: shuffled(labels, new InitRng(9)) });
console.log(JSON.stringify({ ...v, steps_done: res.steps, train_loss: Number(last), cpu_s: +cpu.toFixed(1),
  cpu_s_per_step: +(cpu / res.steps).toFixed(4), dev_acc: sorted.accuracy, dev_acc_shuffled: mixed.accuracy,
  dev: dev.length }));
rmSync(work, { recursive: true, force: true });
