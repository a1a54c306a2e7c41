// `node --import tsx bench/grpo-gen-ab.mts`: GRPO generation A/B in one process, one thread, CPU time
// (process.cpuUsage): 2 prompts x 8 completions of 32 tokens after a 64-token prompt on random SmolLM2-135M
// weights with a LoRA adapter, each completion its own request (`separate`, cache none: how GRPO sampled
// before sampleGroup) against sampleGroup (`shared`), and the training step of the same batch.
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setThreads } from '../src/native/cpu.ts';
import { loadDecoder } from '../src/runtime/generate.ts';
import { loadDecoderConfig } from '../src/formats/hf-config.ts';
import { baseTensors, initLoras, savePeftAdapter } from '../src/training/decoder-trainer.ts';
import { DecoderTrainGraph } from '../src/training/native.ts';
import { grpoAdvantages, grpoStep, sampleGroup } from '../src/training/algorithms/grpo.ts';
import { ensureRandomCheckpoint, withSmolTokenizer } from './decode/models.ts';
setThreads(1);
const dir = withSmolTokenizer(ensureRandomCheckpoint('smollm2-135m'));
const dc = loadDecoderConfig(dir);
const targets = ['q_proj', 'k_proj', 'v_proj', 'o_proj'];
const graph = DecoderTrainGraph.create(dc, baseTensors(dir, dc), initLoras(dc, targets, 16, 32, 0, 1));
const ad = mkdtempSync(join(tmpdir(), 'prof-'));
savePeftAdapter(ad, graph, { base: dir, r: 16, alpha: 32, dropout: 0, targets });
const engine = await loadDecoder(dir, { kv: { memory: 256 << 20 }, maxRunning: 16 });
engine.loadAdapter('policy', ad);
let seed = 7;
const ids = (n: number) => Array.from({ length: n }, () => ((seed = (seed * 1103515245 + 12345) >>> 0) % 49000) + 3);
const req = { max_tokens: 32, temperature: 1, adapter: 'policy', stop_at_eos: false };
const res: Record<string, number[]> = { separate: [], shared: [], training: [] };
for (let it = 0; it < 2; it++) {
  for (const mode of ['separate', 'shared']) {
    const prompts = [ids(64), ids(64)];
    const c0 = process.cpuUsage();
    const one = (p: number[], i: number, k: number) =>
      engine.generate({ ...req, prompt_ids: p, seed: i * 31 + k, cache: { mode: 'none' } }).result;
    await Promise.all(
      prompts.flatMap((p, i) =>
        mode === 'shared'
          ? sampleGroup(engine, { ...req, prompt_ids: p }, 8, (k) => i * 31 + k)
          : Array.from({ length: 8 }, (_, k) => one(p, i, k)),
      ),
    );
    const c = process.cpuUsage(c0);
    res[mode].push((c.user + c.system) / 1000);
    if (mode === 'shared') {
      const finals = await Promise.all(
        prompts.flatMap((p, i) => sampleGroup(engine, { ...req, prompt_ids: p }, 8, (k) => 99 + i * 31 + k)),
      );
      const c1 = process.cpuUsage();
      graph.zeroGrad();
      const seqs = finals.map((f, j) => ({ prompt: prompts[Math.floor(j / 8)], completion: f.tokenIds }));
      const adv = grpoAdvantages(finals.map((f, j) => ((f.tokenIds[0] + j) % 3) / 2), 8);
      await grpoStep(graph, seqs, adv, { beta: 0.04, epsilon: 0.2, temperature: 1, gradScale: 1, seed: it });
      await graph.optimizerStep({ lr: [1e-5], weightDecay: 0, maxGradNorm: 1, step: it + 1 });
      const c2 = process.cpuUsage(c1);
      res.training.push((c2.user + c2.system) / 1000);
    }
  }
}
console.log(JSON.stringify(res), 'kv', engine.kv.dtype);
engine.close();
