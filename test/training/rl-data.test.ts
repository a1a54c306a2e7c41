// DPO / GRPO data through trainDecoder: rows whose prompt fills the context are skipped and counted in the
// logs; no usable row is a TrainingConfigError naming why; rows of another shape are refused; rl_config is
// validated by the trainer too. (Learning itself: test/service/e2e-rl.test.ts.)
import t from 'tap';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { trainDecoder } from '../../src/training/decoder-trainer.ts';
import type { DataRecord } from '../../src/training/data/formats.ts';

const base = join(import.meta.dirname, '../../../shared/models/tinystories-656k');
const tmp = mkdtempSync(join(tmpdir(), 'loom-rl-data-'));
const long = 'Once upon a time there was a very long story that went on and on. '.repeat(8);
const pair = (prompt: string): DataRecord => ({ kind: 'dpo', prompt, chosen: ' Yes.', rejected: ' No.' });
const common = {
  base_model: base,
  max_seq_len: 32,
  nr_epochs: 1,
  batch_size: 2,
  seed: 1,
  threads: 1,
  validation_data_percentage: 0,
};

t.test('DPO: prompts longer than the context are skipped and counted', async (t) => {
  const logs: string[] = [];
  const res = await trainDecoder(
    {
      ...common,
      output_dir: join(tmp, 'a'),
      training_algorithm: 'dpo',
      rl_config: {},
      train_data: [pair('Hi.'), pair(long), pair('Hello.'), pair('Hey.')],
    },
    { onLog: (l) => logs.push(l.message) },
  );
  t.equal(res.stopped, 'completed');
  t.match(
    logs.join('\n'),
    /3 training \/ 0 validation preference pairs; 1 skipped \(prompt longer than the 32-token context\)/,
  );
});

t.test('no usable row, wrong shapes and bad rl_config are refused', async (t) => {
  await t.rejects(
    trainDecoder({
      ...common,
      output_dir: join(tmp, 'b'),
      training_algorithm: 'dpo',
      rl_config: {},
      train_data: [pair(long)],
    }),
    { name: 'TrainingConfigError', message: /no usable dpo row: 1 prompt\(s\) longer than the 32-token context/ },
  );
  await t.rejects(
    trainDecoder({
      ...common,
      output_dir: join(tmp, 'c'),
      training_algorithm: 'grpo',
      rl_config: { reward_type: 'exact_match' },
      train_data: [{ kind: 'grpo', prompt: long, answer: 'x' }],
    }),
    { name: 'TrainingConfigError', message: /no usable grpo row/ },
  );
  await t.rejects(
    trainDecoder({
      ...common,
      output_dir: join(tmp, 'd'),
      training_algorithm: 'grpo',
      rl_config: { reward_type: 'exact_match' },
      train_data: [pair('Hi.')],
    }),
    { name: 'TrainingConfigError', message: /train_data: record 1 is a dpo record; grpo trains on grpo records/ },
  );
  await t.rejects(
    trainDecoder({
      ...common,
      output_dir: join(tmp, 'e'),
      training_algorithm: 'grpo',
      rl_config: { group_size: 1 },
      train_data: [],
    }),
    {
      name: 'TrainingConfigError',
      message: /\/rl_config\/group_size/,
    },
  );
  await t.rejects(trainDecoder({ ...common, output_dir: join(tmp, 'f'), training_algorithm: 'dpo', train_data: [] }), {
    message: /dpo needs rl_config/,
  });
});
