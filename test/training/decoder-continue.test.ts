// Continuing a decoder LoRA adapter: a second SFT run started from the first run's adapter
// (init_adapter) begins at the first run's final loss, not the base model's, keeps the adapter's
// rank / alpha / targets, and refuses options that contradict them.
import t from 'tap';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { trainDecoder } from '../../src/training/decoder-trainer.ts';
import type { DataRecord } from '../../src/training/data/formats.ts';

const base = join(import.meta.dirname, '../../../shared/models/tinystories-656k');
const tmp = mkdtempSync(join(tmpdir(), 'loom-continue-'));
const story = 'Once upon a time there was a little cat. The cat liked to play with a red ball.';
const records: DataRecord[] = Array.from({ length: 8 }, (_, i) => ({
  kind: 'chat',
  messages: [
    { role: 'user', content: `Tell me story ${i % 4}.` },
    { role: 'assistant', content: story },
  ],
}));
const common = {
  base_model: base,
  train_data: records,
  batch_size: 4,
  learning_rate: 5e-3,
  seed: 1,
  validation_data_percentage: 0,
  threads: 1,
  scheduler: 'constant' as const,
  warmup_steps: 0,
};

t.test('an SFT run continued from an adapter starts at its final loss', async (t) => {
  const first: number[] = [];
  const a = await trainDecoder(
    {
      ...common,
      output_dir: join(tmp, 'a'),
      nr_epochs: 6,
      lora_r: 4,
      lora_alpha: 8,
      lora_target_modules: ['q_proj', 'v_proj'],
    },
    { onProgress: (e) => first.push(e.loss) },
  );
  const second: number[] = [];
  const b = await trainDecoder(
    { ...common, output_dir: join(tmp, 'b'), nr_epochs: 1, init_adapter: a.final_checkpoint },
    { onProgress: (e) => second.push(e.loss) },
  );
  t.comment(
    `first run ${first.map((x) => x.toFixed(3)).join(' ')}; continued ${second.map((x) => x.toFixed(3)).join(' ')}`,
  );
  t.ok(first[first.length - 1] < first[0] * 0.7, 'the first run learned');
  // the continued run's first step is measured before its first update: the first run's weights
  t.ok(
    second[0] < first[0] * 0.7,
    `continued starts at ${second[0].toFixed(3)}, far below the base's ${first[0].toFixed(3)}`,
  );
  t.ok(
    Math.abs(second[0] - a.train_loss) < 0.25 * a.train_loss,
    `≈ the first run's final loss ${a.train_loss.toFixed(3)}`,
  );
  const cfg = JSON.parse(readFileSync(join(b.final_checkpoint, 'adapter_config.json'), 'utf8'));
  t.match(
    cfg,
    { r: 4, lora_alpha: 8, target_modules: ['q_proj', 'v_proj'], base_model_name_or_path: base },
    'same LoRA shape, same base',
  );
});

t.test('options contradicting the adapter are refused', async (t) => {
  const a = await trainDecoder({
    ...common,
    output_dir: join(tmp, 'c'),
    nr_epochs: 1,
    max_steps: 1,
    lora_r: 4,
    lora_alpha: 8,
  });
  await t.rejects(
    trainDecoder({ ...common, output_dir: join(tmp, 'd'), init_adapter: a.final_checkpoint, lora_r: 8 }),
    { name: 'TrainingConfigError', message: /lora_r 8 differs from the adapter's rank 4/ },
  );
  await t.rejects(
    trainDecoder({
      ...common,
      output_dir: join(tmp, 'e'),
      init_adapter: a.final_checkpoint,
      lora_target_modules: ['o_proj'],
    }),
    { name: 'TrainingConfigError', message: /target modules/ },
  );
  await t.rejects(trainDecoder({ ...common, output_dir: join(tmp, 'f'), init_adapter: join(tmp, 'nowhere') }), {
    name: 'TrainingConfigError',
    message: /init_adapter: .*adapter_config.json not found/,
  });
});
