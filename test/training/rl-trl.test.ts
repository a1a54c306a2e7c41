// DPO and GRPO against TRL's own loss code (test/fixtures/rl-trl: make.py runs trl.DPOTrainer._compute_loss and
// trl.GRPOTrainer._compute_loss on ../shared/goldens/llama-tiny + the lora-grad adapter): the loss of every
// DPO loss_type and of GRPO (fixed completions, rewards and old log-probs, with and without the KL term, at a
// sampling temperature), and every LoRA gradient, through the same dpoStep / grpoStep the trainers run.
import t from 'tap';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { loadDecoderConfig } from '../../src/formats/hf-config.ts';
import { SafetensorsCheckpoint, toFloat32 } from '../../src/formats/safetensors.ts';
import { readPeftAdapter } from '../../src/runtime/adapters.ts';
import { DecoderTrainGraph } from '../../src/training/native.ts';
import { dpoStep } from '../../src/training/algorithms/dpo.ts';
import { grpoAdvantages, grpoStep } from '../../src/training/algorithms/grpo.ts';
import type { DpoLossType } from '../../src/training/algorithms/rl-config.ts';

const fx = JSON.parse(readFileSync(join(import.meta.dirname, '../fixtures/rl-trl/expected.json'), 'utf8'));
const goldens = join(import.meta.dirname, '../../../shared/goldens');
const config = loadDecoderConfig(join(goldens, 'llama-tiny'));
const ckpt = SafetensorsCheckpoint.open(join(goldens, 'llama-tiny'));
const tensors: Record<string, Float32Array> = {};
for (const n of ckpt.names()) tensors[n] = toFloat32(ckpt.get(n));
const ad = readPeftAdapter(join(goldens, 'lora-grad/adapter'), config);
const graph = () =>
  DecoderTrainGraph.create(
    config,
    tensors,
    ad.modules.map((m) => ({ ...m, dropout: 0 })),
  );

function checkGrads(
  t: { equal(a: unknown, b: unknown, m: string): unknown; ok(v: boolean, m: string): unknown },
  g: DecoderTrainGraph,
  expected: Record<string, number[]>,
  what: string,
) {
  const names = g
    .params()
    .filter((p) => p.trainable)
    .map((p) => p.name);
  t.equal(names.length, Object.keys(expected).length, `${what}: every LoRA tensor has a reference gradient`);
  for (const n of names) {
    const ref = expected[n];
    const got = g.grad(n);
    const mref = ref.reduce((m, x) => Math.max(m, Math.abs(x)), 0);
    const d = ref.reduce((m, x, i) => Math.max(m, Math.abs(x - got[i])), 0);
    t.ok(
      mref > 0 && d <= 1e-4 * mref,
      `${what} ${n.replace('base_model.model.model.', '')}: max abs diff ${d.toExponential(2)} (max |ref| ${mref.toExponential(2)})`,
    );
  }
}

t.test('DPO losses and LoRA gradients match TRL', async (t) => {
  const pairs = fx.dpo.pairs as { prompt: number[]; chosen: number[]; rejected: number[] }[];
  for (const c of fx.dpo.cases) {
    const g = graph();
    const ps = pairs.map((p) => ({
      chosen: { prompt: p.prompt, completion: p.chosen },
      rejected: { prompt: p.prompt, completion: p.rejected },
    }));
    const { results } = await dpoStep(g, ps, { type: c.loss_type as DpoLossType, beta: c.beta, gradScale: 1, seed: 0 });
    const what = `${c.loss_type} beta ${c.beta}`;
    const loss = results.reduce((s, r) => s + r.loss, 0) / results.length;
    t.ok(Math.abs(loss - c.loss) <= 1e-5, `${what}: loss ${loss} vs TRL ${c.loss}`);
    const chosen = results.reduce((s, r) => s + r.chosenReward, 0) / results.length;
    const rejected = results.reduce((s, r) => s + r.rejectedReward, 0) / results.length;
    t.ok(
      Math.abs(chosen - c.rewards_chosen) <= 1e-5 && Math.abs(rejected - c.rewards_rejected) <= 1e-5,
      `${what}: rewards ${chosen} / ${rejected} vs TRL ${c.rewards_chosen} / ${c.rewards_rejected}`,
    );
    checkGrads(t, g, c.gradients, what);
  }
});

t.test('GRPO loss and LoRA gradients match TRL', async (t) => {
  const { prompts, completions, rewards, group_size: G } = fx.grpo;
  const seqs = (prompts as number[][]).flatMap((p, i) =>
    (completions[i] as number[][]).map((c) => ({ prompt: p, completion: c })),
  );
  const adv = grpoAdvantages((rewards as number[][]).flat(), G);
  for (const c of fx.grpo.cases) {
    t.ok(
      adv.every((a, i) => Math.abs(a - c.advantages[i]) < 1e-5),
      `advantages ${adv.map((a) => a.toFixed(4))} as TRL's`,
    );
    const g = graph();
    const r = await grpoStep(g, seqs, adv, {
      beta: c.beta,
      epsilon: c.epsilon,
      temperature: c.temperature,
      gradScale: 1,
      seed: 0,
      oldLogps: c.old_logps,
    });
    const what = `beta ${c.beta} temperature ${c.temperature}`;
    t.ok(Math.abs(r.loss - c.loss) <= 1e-5, `${what}: loss ${r.loss} vs TRL ${c.loss}`);
    if (c.kl !== null)
      t.ok(Math.abs(r.kl - c.kl) <= 1e-4 * Math.max(1, c.kl), `${what}: mean KL ${r.kl} vs TRL ${c.kl}`);
    t.ok(r.clipRatio > 0, `some ratios are clipped (${r.clipRatio.toFixed(3)})`);
    checkGrads(t, g, c.gradients, what);
  }
});
