// `node --import tsx bench/rl-step-prof.mts [dpo|grpo|gen|sft|both] [steps]`: CPU time (process.cpuUsage) of one
// DPO training step, one GRPO training step, one GRPO generation (sampleGroup on the serving engine with the
// adapter) at the rl bench's shapes (DPO: 4 pairs x (64 + 64 + 64) tokens; GRPO: 2 prompts x 8 completions,
// 64 + 32 tokens), or one LoRA SFT step at the train bench's (4 x 256 tokens), random SmolLM2-135M weights, LoRA r=16 on q,k,v,o, on
// LOOM_THREADS threads (default 1: CPU time on one thread is steady on a loaded machine). Also the driver for
// `perf record -e cpu-clock -g node --perf-basic-prof --import tsx bench/rl-step-prof.mts dpo 3`.
import { setThreads } from '../src/native/cpu.ts';
import { loadDecoderConfig } from '../src/formats/hf-config.ts';
import { baseTensors, initLoras } from '../src/training/decoder-trainer.ts';
import { DecoderTrainGraph } from '../src/training/native.ts';
import { dpoStep } from '../src/training/algorithms/dpo.ts';
import { grpoAdvantages, grpoStep, sampleGroup } from '../src/training/algorithms/grpo.ts';
import { loadDecoder } from '../src/runtime/generate.ts';
import { savePeftAdapter } from '../src/training/decoder-trainer.ts';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ensureRandomCheckpoint, withSmolTokenizer } from './decode/models.ts';
setThreads(Number(process.env.LOOM_THREADS ?? 1));
const which = process.argv[2] ?? 'both';
const steps = Number(process.argv[3] ?? 3);
const dir = withSmolTokenizer(ensureRandomCheckpoint('smollm2-135m'));
const dc = loadDecoderConfig(dir);
const targets = ['q_proj', 'k_proj', 'v_proj', 'o_proj'];
const graph = DecoderTrainGraph.create(dc, baseTensors(dir, dc), initLoras(dc, targets, 16, 32, 0, 1));
let seed = 7;
const ids = (n: number) => Array.from({ length: n }, () => ((seed = (seed * 1103515245 + 12345) >>> 0) % 49000) + 3);
const cpu = async (f: () => Promise<unknown>) => {
  const c0 = process.cpuUsage();
  const w0 = performance.now();
  await f();
  const c = process.cpuUsage(c0);
  return { cpu: Math.round((c.user + c.system) / 1000), wall: Math.round(performance.now() - w0) };
};
const out: Record<string, unknown> = {};
if (which === 'dpo' || which === 'both') {
  const r: unknown[] = [];
  for (let it = 0; it < steps; it++) {
    const pairs = Array.from({ length: 4 }, () => {
      const p = ids(64);
      return { chosen: { prompt: p, completion: ids(64) }, rejected: { prompt: p, completion: ids(64) } };
    });
    r.push(
      await cpu(async () => {
        graph.zeroGrad();
        await dpoStep(graph, pairs, { type: 'sigmoid', beta: 0.1, gradScale: 1, seed: it });
        await graph.optimizerStep({ lr: [1e-5], weightDecay: 0, maxGradNorm: 1, step: it + 1 });
      }),
    );
  }
  out.dpo = r;
}
if (which === 'grpo' || which === 'both') {
  const r: unknown[] = [];
  for (let it = 0; it < steps; it++) {
    const prompts = [ids(64), ids(64)];
    const seqs = Array.from({ length: 16 }, (_, j) => ({ prompt: prompts[j >> 3], completion: ids(32) }));
    const adv = grpoAdvantages(seqs.map((s, j) => ((s.completion[0] + j) % 3) / 2), 8);
    r.push(
      await cpu(async () => {
        graph.zeroGrad();
        await grpoStep(graph, seqs, adv, { beta: 0.04, epsilon: 0.2, temperature: 1, gradScale: 1, seed: it });
        await graph.optimizerStep({ lr: [1e-5], weightDecay: 0, maxGradNorm: 1, step: it + 1 });
      }),
    );
  }
  out.grpo = r;
}
if (which === 'gen') {
  const ad = mkdtempSync(join(tmpdir(), 'loom-prof-'));
  savePeftAdapter(ad, graph, { base: dir, r: 16, alpha: 32, dropout: 0, targets });
  const engine = await loadDecoder(dir, { kv: { memory: 256 << 20 }, maxRunning: 16 });
  engine.loadAdapter('policy', ad);
  const req = { max_tokens: 32, temperature: 1, adapter: 'policy', stop_at_eos: false };
  const r: unknown[] = [];
  for (let it = 0; it < steps; it++) {
    const prompts = [ids(64), ids(64)];
    r.push(
      await cpu(() =>
        Promise.all(
          prompts.flatMap((p, i) => sampleGroup(engine, { ...req, prompt_ids: p }, 8, (k) => it * 99 + i * 31 + k)),
        ),
      ),
    );
  }
  out.gen = r;
  engine.close();
  rmSync(ad, { recursive: true, force: true });
}
if (which === 'sft') {
  const B = 4, T = 256;
  const tokens = Int32Array.from(ids(B * T));
  const batch = {
    tokens, labels: Int32Array.from(tokens, (_, i) => (i % T === T - 1 ? -100 : tokens[i + 1])),
    positions: Int32Array.from(tokens, (_, i) => i % T), seqOff: Int32Array.from({ length: B + 1 }, (_, s) => s * T),
  };
  const r: unknown[] = [];
  for (let it = 0; it < steps; it++) {
    r.push(
      await cpu(async () => {
        graph.zeroGrad();
        await graph.step(batch, { seed: it });
        await graph.optimizerStep({ lr: [1e-4], weightDecay: 0, maxGradNorm: 1, step: it + 1 });
      }),
    );
  }
  out.sft = r;
}
console.log(JSON.stringify(out));
