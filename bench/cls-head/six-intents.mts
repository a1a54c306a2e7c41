// Issue 17 diagnostic: the six-intent learning test of test/training/encoder-classification.test.ts (Banking77, six
// intents, a 64-wide two-layer fresh encoder, 6 epochs = 468 steps) over several trainer seeds, to see how far its
// dev accuracy moves when only the run's randomness (or rounding) changes. Prints `seed:accuracy` per seed.
//   npx tsx bench/cls-head/six-intents.mts [--seeds 42,43,...] [--negative-labels 4] [--isolation 1] [--bag 0|1]
//     [--epochs 6]   (--bag: label bags, config.json label_bag; absent: the fresh default)
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { parseJsonl, type DataRecord } from '../../src/training/data/formats.ts';
import { initEncoder } from '../../src/training/encoder/init.ts';
import { trainEncoder } from '../../src/training/encoder-trainer.ts';
import { evaluateClassification } from '../../src/training/evaluate.ts';

const { values } = parseArgs({
  options: {
    seeds: { type: 'string', default: '42,43,44,45,46,47,48,49,50,51,52' },
    'negative-labels': { type: 'string', default: '4' },
    isolation: { type: 'string', default: '1' },
    bag: { type: 'string' },
    epochs: { type: 'string', default: '6' },
  },
});
const DATA = join(import.meta.dirname, '../../../shared/data/banking77');
const INTENTS = ['age limit', 'apple pay or google pay', 'change pin', 'exchange rate', 'lost or stolen phone',
  'terminate account'];
const banking = (split: string) => parseJsonl(readFileSync(join(DATA, `${split}.jsonl`), 'utf8'))
  .filter((r) => r.kind === 'classification' && INTENTS.includes(r.labels[0])) as DataRecord[];
const train = banking('train');
const dev = banking('dev');
const cfg = { hidden_size: 64, num_hidden_layers: 2, num_attention_heads: 2, intermediate_size: 128, vocab_size: 1500 };
const tmp = mkdtempSync(join(tmpdir(), 'loom-six-'));
const out: string[] = [];
try {
  for (const seed of values.seeds!.split(',').map(Number)) {
    const dir = join(tmp, `base-${seed}`);
    const texts = train.map((r) => (r as { text: string }).text);
    const bag = values.bag === undefined ? {} : { label_bag: values.bag === '1' };
    initEncoder(dir, { ...cfg, label_isolation: values.isolation === '1', ...bag }, texts, { seed: 42 });
    const res = await trainEncoder({
      base_model: dir, output_dir: join(tmp, `run-${seed}`), train_data: train, validation_data_percentage: 0,
      nr_epochs: Number(values.epochs), batch_size: 8, learning_rate: 5e-3, encoder_learning_rate: 1e-3, seed,
      threads: 1, negative_labels: Number(values['negative-labels']),
    });
    const after = await evaluateClassification(res.final_checkpoint, dev, { labels: INTENTS });
    out.push(`${seed}:${after.accuracy.toFixed(3)}`);
    console.error(`seed ${seed}: ${after.accuracy.toFixed(3)} after ${res.steps} steps`);
  }
} finally {
  rmSync(tmp, { recursive: true, force: true });
}
const bagSetting = values.bag ?? 'default';
console.log(`isolation ${values.isolation}, bag ${bagSetting}, negative labels ${values['negative-labels']}: ${out.join(' ')}`);
