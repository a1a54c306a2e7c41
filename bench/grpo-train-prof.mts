// `node --import tsx bench/grpo-train-prof.mts [steps]`: CPU time (process.cpuUsage) of the GRPO training step
// alone on one thread, the rl bench's shapes (2 prompts x 8 completions, 64 + 32 tokens, random SmolLM2-135M
// weights, LoRA r=16 on q,k,v,o): policy forward, reference forward, loss, backward, AdamW. Completions are
// random tokens (the step's work does not depend on them). A driver for `perf record -g node ...` too.
import { setThreads } from '../src/native/cpu.ts';
import { loadDecoderConfig } from '../src/formats/hf-config.ts';
import { baseTensors, initLoras } from '../src/training/decoder-trainer.ts';
import { DecoderTrainGraph } from '../src/training/native.ts';
import { grpoAdvantages, grpoStep } from '../src/training/algorithms/grpo.ts';
import { ensureRandomCheckpoint } from './decode/models.ts';
setThreads(Number(process.env.LOOM_THREADS ?? 1));
const steps = Number(process.argv[2] ?? 2);
const dir = ensureRandomCheckpoint('smollm2-135m');
const dc = loadDecoderConfig(dir);
const targets = ['q_proj', 'k_proj', 'v_proj', 'o_proj'];
const graph = DecoderTrainGraph.create(dc, baseTensors(dir, dc), initLoras(dc, targets, 16, 32, 0, 1));
let seed = 7;
const ids = (n: number) => Array.from({ length: n }, () => ((seed = (seed * 1103515245 + 12345) >>> 0) % 49000) + 3);
const ms: number[] = [];
for (let it = 0; it < steps; it++) {
  const prompts = [ids(64), ids(64)];
  const seqs = Array.from({ length: 16 }, (_, j) => ({ prompt: prompts[j >> 3], completion: ids(32) }));
  const adv = grpoAdvantages(seqs.map((s, j) => ((s.completion[0] + j) % 3) / 2), 8);
  const c0 = process.cpuUsage();
  graph.zeroGrad();
  await grpoStep(graph, seqs, adv, { beta: 0.04, epsilon: 0.2, temperature: 1, gradScale: 1, seed: it });
  await graph.optimizerStep({ lr: [1e-5], weightDecay: 0, maxGradNorm: 1, step: it + 1 });
  const c = process.cpuUsage(c0);
  ms.push(Math.round((c.user + c.system) / 1000));
}
console.log(JSON.stringify({ training_cpu_ms: ms }));
