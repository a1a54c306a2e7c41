// GRPO's generation engine draws its KV blocks from the process-wide KV budget (src/runtime/kv-budget.ts) that
// serving models draw from too: a micro-batch that cannot fit the budget fails the job with the reason, one that
// fits but finds the budget in use waits (logged) and never makes the process hold more than the budget; a stop
// gives the blocks back at once. Also: the last step's metrics are logged whatever logging_steps is.
import t from 'tap';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadDecoder } from '../../src/runtime/generate.ts';
import { kvBudget } from '../../src/runtime/kv-budget.ts';
import { trainDecoder, type DecoderTrainConfig } from '../../src/training/decoder-trainer.ts';
import type { DataRecord } from '../../src/training/data/formats.ts';

const base = join(import.meta.dirname, '../../../shared/models/tinystories-656k');
const tmp = mkdtempSync(join(tmpdir(), 'loom-grpo-kv-'));
t.teardown(() => rmSync(tmp, { recursive: true, force: true }));
const rows: DataRecord[] = ['happy', 'sad', 'big', 'small'].map((a) => ({
  kind: 'grpo',
  prompt: `Once upon a time, a ${a}`,
  answer: 'cat',
}));
// tinystories-656k: 2 layers × 4 KV heads × 16 dims, f32 K and V: 1 KiB per token, 16 KiB per 16-token block
const BLOCK = 16 << 10;
const grpo = (over: Partial<DecoderTrainConfig>, rl: Record<string, unknown> = {}): DecoderTrainConfig => ({
  base_model: base,
  output_dir: join(tmp, String(Math.random()).slice(2)),
  training_algorithm: 'grpo' as const,
  rl_config: { reward_type: 'contains_substring', group_size: 4, max_completion_length: 16, ...rl },
  train_data: rows,
  max_seq_len: 32,
  batch_size: 2,
  nr_epochs: 10,
  scheduler: 'constant',
  validation_data_percentage: 0,
  threads: 1,
  seed: 1,
  ...over,
});

t.test('a micro-batch larger than the whole budget fails the job with the reason', async (t) => {
  kvBudget.setCapacity(4 * BLOCK);
  await t.rejects(trainDecoder(grpo({ max_steps: 1 })), {
    name: 'TrainingConfigError',
    message:
      /GRPO generation needs 256 KiB of KV cache for a micro-batch .*process KV budget \(LOOM_KV_MEMORY\) is 64 KiB/,
  });
  t.equal(kvBudget.stats().used, 0, 'nothing left reserved');
});

t.test('generation shares the budget with a serving model: waits, never exceeds it; last step logged', async (t) => {
  const capacity = 24 * BLOCK; // the micro-batch needs 16 blocks (2 prompts × 4 samples × 2 blocks)
  kvBudget.setCapacity(capacity);
  const serving = await loadDecoder(base, { kv: { memory: capacity } });
  t.teardown(() => serving.close());
  t.ok(serving.kv.hold(12), 'a serving model holds half the budget');
  // released once generation says it waits (a fixed delay raced the job's start on a loaded machine);
  // after 30 s regardless, so a generation that never waits fails the log check below instead of hanging
  let released = false;
  const release = () => { if (!released) { released = true; serving.kv.unhold(); } };
  const fallback = setTimeout(release, 30_000);
  t.teardown(() => clearTimeout(fallback));
  kvBudget.resetPeak();
  const logs: string[] = [];
  const res = await trainDecoder(grpo({ max_steps: 4 }, { logging_steps: 3 }), {
    onLog: (l) => {
      logs.push(l.message);
      if (/generation waits/.test(l.message)) setTimeout(release, 100);
    },
  });
  t.equal(res.steps, 4);
  const st = kvBudget.stats();
  t.ok(st.peak <= capacity, `peak ${st.peak} bytes within the ${capacity}-byte budget`);
  t.ok(st.peak >= 16 * BLOCK, 'the generation engine reserved its micro-batch from the process budget');
  t.equal(st.used, 0, 'all given back after the job');
  t.match(logs.join('\n'), /generation waits for 256 KiB of KV memory \(process budget: 192 KiB of 384 KiB in use\)/);
  const steps = logs.filter((l) => /reward mean/.test(l)).map((l) => Number(/^step (\d+):/.exec(l)?.[1]));
  t.same(steps, [3, 4], 'metrics at logging_steps and at the last step');
});

t.test('a stop mid-generation frees the KV blocks at once', async (t) => {
  kvBudget.setCapacity(512 << 20);
  const ac = new AbortController();
  const job = trainDecoder(
    grpo({ max_seq_len: 512, max_steps: 2 }, { group_size: 8, max_completion_length: 480 }),
    { signal: ac.signal },
  );
  const deadline = Date.now() + 30_000;
  while (kvBudget.stats().used === 0 && Date.now() < deadline) await new Promise((r) => setImmediate(r));
  t.ok(kvBudget.stats().used > 0, 'generation holds KV blocks');
  ac.abort();
  t.equal(kvBudget.stats().used, 0, 'no KV block held right after the stop');
  const res = await job;
  t.equal(res.stopped, 'aborted');
  t.equal(kvBudget.stats().used, 0);
});

t.test('validation prompts are sampled in micro-batches that fit the pool', async (t) => {
  kvBudget.setCapacity(512 << 20);
  const logs: string[] = [];
  const more = [...rows, ...rows.map((r) => ({ ...r, prompt: `${(r as { prompt: string }).prompt} dog` }))];
  const res = await trainDecoder(
    grpo({ train_data: more, batch_size: 1, max_steps: 1, validation_data_percentage: 50 }, { group_size: 2 }),
    { onLog: (l) => logs.push(l.message) },
  );
  t.equal(res.steps, 1);
  t.match(logs.join('\n'), /validation: reward mean [\d.]+ over 4 prompts/);
});
