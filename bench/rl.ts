// `npm run bench -- rl [--quick] [--json] [--threads n]`
// DPO and GRPO on random weights of the SmolLM2-135M configuration (bench/decode/models.ts; bf16 base
// weights, fp32 compute), LoRA r=16 on q,k,v,o, side by side with TRL on PyTorch CPU (bench/rl_torch.py from
// bench/.venv: python3 -m venv bench/.venv && bench/.venv/bin/pip install torch transformers peft trl):
//   DPO: training tokens/s of one step (reference forward, policy forward + backward, AdamW) on B pairs of a
//        P-token prompt and two C-token completions; TRL: DPOTrainer._compute_loss + backward + AdamW.
//   GRPO: one step split into generation (B prompts x G completions of N new tokens: Loom's scheduler with
//        continuous batching and the adapter applied; TRL: transformers generate with num_return_sequences)
//        and training (policy + reference forwards, loss, backward, AdamW; TRL: GRPOTrainer._compute_loss).
//   SFT: one decoder SFT step of the same graph (forward, cross-entropy, backward, AdamW) on B sequences of
//        P + C tokens, Loom only (the training cost DPO and GRPO share, for comparison with earlier runs).
// Same shapes, same thread count; random token ids (speed does not depend on them).
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { loadDecoderConfig } from '../src/formats/hf-config.ts';
import { getThreads, setThreads } from '../src/native/cpu.ts';
import { loadDecoder } from '../src/runtime/generate.ts';
import { baseTensors, initLoras, savePeftAdapter } from '../src/training/decoder-trainer.ts';
import { DecoderTrainGraph } from '../src/training/native.ts';
import { dpoStep } from '../src/training/algorithms/dpo.ts';
import { grpoAdvantages, grpoStep, sampleGroup } from '../src/training/algorithms/grpo.ts';
import { ensureRandomCheckpoint, CONFIGS, withSmolTokenizer } from './decode/models.ts';

export async function run(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: { quick: { type: 'boolean' }, json: { type: 'boolean' }, threads: { type: 'string' } },
  });
  if (values.threads) setThreads(Number(values.threads));
  const threads = getThreads();
  const quick = !!values.quick;
  const dir = withSmolTokenizer(ensureRandomCheckpoint('smollm2-135m'));
  const dc = loadDecoderConfig(dir);
  const V = dc.vocabSize;
  let seed = 7;
  const ids = (n: number) =>
    Array.from({ length: n }, () => ((seed = (seed * 1103515245 + 12345) >>> 0) % (V - 3)) + 3);
  const targets = ['q_proj', 'k_proj', 'v_proj', 'o_proj'];
  const graph = DecoderTrainGraph.create(dc, baseTensors(dir, dc), initLoras(dc, targets, 16, 32, 0, 1));
  const iters = quick ? 2 : 4;

  // ---- DPO ----
  const B = 4,
    P = 64,
    C = 64;
  const pairs = () =>
    Array.from({ length: B }, () => {
      const p = ids(P);
      return { chosen: { prompt: p, completion: ids(C) }, rejected: { prompt: p, completion: ids(C) } };
    });
  const dpoOne = async (step: number) => {
    graph.zeroGrad();
    const r = await dpoStep(graph, pairs(), { type: 'sigmoid', beta: 0.1, gradScale: 1, seed: step });
    await graph.optimizerStep({ lr: [1e-5], weightDecay: 0, maxGradNorm: 1, step });
    return r.tokens;
  };
  await dpoOne(1);
  let t0 = performance.now();
  let tokens = 0;
  for (let i = 0; i < iters; i++) tokens += await dpoOne(i + 2);
  const dpoMs = (performance.now() - t0) / iters;
  const dpo = { tokens_per_s: tokens / iters / (dpoMs / 1000), step_ms: dpoMs };

  // ---- SFT (Loom only): forward, cross-entropy, backward, AdamW on B sequences of P + C tokens ----
  const sftOne = async (step: number) => {
    const T = P + C;
    const tokens = Int32Array.from(Array.from({ length: B }, () => ids(T)).flat());
    const labels = Int32Array.from(tokens, (_, i) => (i % T === T - 1 ? -100 : tokens[i + 1]));
    const positions = Int32Array.from(tokens, (_, i) => i % T);
    const seqOff = Int32Array.from({ length: B + 1 }, (_, s) => s * T);
    graph.zeroGrad();
    await graph.step({ tokens, positions, labels, seqOff }, { seed: step });
    await graph.optimizerStep({ lr: [1e-5], weightDecay: 0, maxGradNorm: 1, step });
    return tokens.length;
  };
  await sftOne(1);
  t0 = performance.now();
  tokens = 0;
  for (let i = 0; i < iters; i++) tokens += await sftOne(i + 2);
  const sftMs = (performance.now() - t0) / iters;
  const sft = { tokens_per_s: tokens / iters / (sftMs / 1000), step_ms: sftMs };

  // ---- GRPO: generation by the serving engine with the policy adapter, then the training step ----
  const G = 8,
    Bp = 2,
    N = quick ? 32 : 64;
  const adapterDir = mkdtempSync(join(tmpdir(), 'loom-bench-rl-'));
  savePeftAdapter(adapterDir, graph, { base: dir, r: 16, alpha: 32, dropout: 0, targets });
  const engine = await loadDecoder(dir, { kv: { memory: 256 << 20 }, maxRunning: Bp * G });
  engine.loadAdapter('policy', adapterDir);
  const grpoOne = async (step: number) => {
    const prompts = Array.from({ length: Bp }, () => ids(P));
    const tg = performance.now();
    // as the GRPO trainer samples (sampleGroup: the prompt prefilled once per group, shared by its completions)
    const finals = await Promise.all(
      prompts.flatMap((p, i) =>
        sampleGroup(
          engine,
          { prompt_ids: p, max_tokens: N, temperature: 1, adapter: 'policy', stop_at_eos: false },
          G,
          (k) => step * 1000 + i * 31 + k,
        ),
      ),
    );
    const genMs = performance.now() - tg;
    const tt = performance.now();
    const rewards = finals.map((f, j) => ((f.tokenIds[0] + j) % 3) / 2); // any spread of rewards: speed only
    graph.zeroGrad();
    await grpoStep(
      graph,
      finals.map((f, j) => ({ prompt: prompts[Math.floor(j / G)], completion: f.tokenIds })),
      grpoAdvantages(rewards, G),
      { beta: 0.04, epsilon: 0.2, temperature: 1, gradScale: 1, seed: step },
    );
    await graph.optimizerStep({ lr: [1e-5], weightDecay: 0, maxGradNorm: 1, step });
    const trainMs = performance.now() - tt;
    return { genMs, trainMs, newTokens: finals.reduce((s, f) => s + f.tokenIds.length, 0) };
  };
  await grpoOne(1);
  const gr: Array<{ genMs: number; trainMs: number; newTokens: number }> = [];
  for (let i = 0; i < (quick ? 1 : 2); i++) gr.push(await grpoOne(i + 2));
  engine.close();
  rmSync(adapterDir, { recursive: true, force: true });
  const mean = (f: (x: { genMs: number; trainMs: number; newTokens: number }) => number) =>
    gr.reduce((s, x) => s + f(x), 0) / gr.length;
  const grpo = {
    generation_ms: mean((x) => x.genMs),
    training_ms: mean((x) => x.trainMs),
    step_ms: mean((x) => x.genMs + x.trainMs),
    new_tokens: mean((x) => x.newTokens),
  };

  let torch: { dpo: typeof dpo; grpo: typeof grpo } | null = null;
  const py = join(import.meta.dirname, '.venv/bin/python');
  if (existsSync(py)) {
    const arg = JSON.stringify({
      config: CONFIGS['smollm2-135m'],
      B,
      P,
      C,
      G,
      Bp,
      N,
      threads,
      iters,
      grpo_iters: quick ? 1 : 2,
    });
    torch = JSON.parse(
      execFileSync(py, [join(import.meta.dirname, 'rl_torch.py'), arg], {
        encoding: 'utf8',
        stdio: ['ignore', 'pipe', 'ignore'],
      })
        .trim()
        .split('\n')
        .pop()!,
    );
  }
  const row = {
    bench: 'rl',
    model: 'smollm2-135m (random weights)',
    threads,
    dpo_batch: `${B} pairs x (${P} + ${C} + ${C})`,
    grpo_batch: `${Bp} prompts x ${G} completions, ${P} + ${N} tokens`,
    loom: { dpo, grpo, sft },
    torch,
  };
  if (values.json) {
    console.log(JSON.stringify(row));
    return;
  }
  console.log(`DPO / GRPO, SmolLM2-135M configuration (random weights), LoRA r=16 q,k,v,o, ${threads} threads`);
  const f = (x: number) => x.toFixed(0).padStart(7);
  console.log(`  DPO step, ${row.dpo_batch} tokens`);
  console.log(`    loom ${f(dpo.tokens_per_s)} tokens/s (${dpo.step_ms.toFixed(0)} ms/step)`);
  if (torch)
    console.log(
      `    trl  ${f(torch.dpo.tokens_per_s)} tokens/s (${torch.dpo.step_ms.toFixed(0)} ms/step)   loom/trl = ${(dpo.tokens_per_s / torch.dpo.tokens_per_s).toFixed(2)}x`,
    );
  console.log(`  GRPO step, ${row.grpo_batch}`);
  console.log(
    `    loom ${f(grpo.step_ms)} ms = generation ${grpo.generation_ms.toFixed(0)} + training ${grpo.training_ms.toFixed(0)}`,
  );
  if (torch)
    console.log(
      `    trl  ${f(torch.grpo.step_ms)} ms = generation ${torch.grpo.generation_ms.toFixed(0)} + training ${torch.grpo.training_ms.toFixed(0)}   trl/loom = ${(torch.grpo.step_ms / grpo.step_ms).toFixed(2)}x`,
    );
  console.log(`  SFT step, ${B} x ${P + C} tokens`);
  console.log(`    loom ${f(sft.tokens_per_s)} tokens/s (${sft.step_ms.toFixed(0)} ms/step)`);
  if (!torch)
    console.log(
      '  (bench/.venv missing: python3 -m venv bench/.venv && bench/.venv/bin/pip install torch transformers peft trl)',
    );
}
