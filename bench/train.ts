// `npm run bench -- train [--quick] [--json] [--config small|base|tiny] [--threads n]`
// Training throughput (tokens/s) of one GLiNER2 span-model step (forward + backward + AdamW, full
// fine-tuning) on the native graph, next to PyTorch CPU (bench/train_torch.py, transformers
// DebertaV2Model + the same heads) on the same configuration and batch shapes. PyTorch runs from
// bench/.venv (python3 -m venv bench/.venv && bench/.venv/bin/pip install torch transformers).
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { ENCODER_PRESETS, initEncoderTensors } from '../src/training/encoder/init.ts';
import { EncoderTrainGraph } from '../src/training/native.ts';
import { setThreads, getThreads } from '../src/native/cpu.ts';

export async function run(argv: string[]): Promise<void> {
  const { values } = parseArgs({ args: argv, options: { quick: { type: 'boolean' }, json: { type: 'boolean' }, config: { type: 'string', default: 'small' }, threads: { type: 'string' } } });
  const p = ENCODER_PRESETS[values.config!];
  if (!p) throw new Error(`unknown config ${values.config}`);
  if (values.threads) setThreads(Number(values.threads));
  const threads = getThreads();
  const B = 8, N = 96, W = 64, M = 4, V = p.vocab_size;
  const iters = values.quick ? 3 : 10;
  const cfg = { hiddenSize: p.hidden_size, numLayers: p.num_hidden_layers, numHeads: p.num_attention_heads, intermediateSize: p.intermediate_size, vocabSize: V, positionBuckets: 256, maxRelativePositions: -1, maxPositionEmbeddings: 512, layerNormEps: 1e-7, posAttType: ['p2c', 'c2p'], hiddenAct: 'gelu' };
  const g = EncoderTrainGraph.create(cfg, 8, true, initEncoderTensors(p, V, 1), null);
  // Batch: [P] at 0, M label markers at 1..M, W words at the end (one sub-word each).
  const ids = Int32Array.from({ length: B * N }, (_, i) => 5 + ((i * 7919) % (V - 5)));
  const wordRows: number[] = [];
  const segRows: number[] = [];
  const pos: number[] = [];
  for (let b = 0; b < B; b++) {
    for (let w = 0; w < W; w++) wordRows.push(b * N + N - W + w);
    for (let m = 0; m <= M; m++) segRows.push(b * N + m);
    for (let q = 0; q < 3; q++) pos.push(b, 0, q % M, (q * 13 + b) % (W - 2), q % 2);
  }
  const batch = {
    B, N, ids, mask: new Uint8Array(B * N).fill(1), woff: Int32Array.from({ length: B + 1 }, (_, b) => b * W), wordRows: Int32Array.from(wordRows),
    segSample: Int32Array.from({ length: B }, (_, b) => b), segKind: new Int32Array(B), segM: new Int32Array(B).fill(M), segCount: new Int32Array(B).fill(1),
    segCountLoss: new Uint8Array(B).fill(1), segRows: Int32Array.from(segRows), pos: Int32Array.from(pos), clsY: new Float32Array(0),
  };
  const one = async (s: number) => {
    g.zeroGrad();
    await g.step(batch, { dropNeg: false });
    await g.optimizerStep({ lr: [1e-4, 1e-4], weightDecay: 0.01, maxGradNorm: 1, step: s });
  };
  await one(1);
  const t0 = performance.now();
  for (let i = 0; i < iters; i++) await one(i + 2);
  const ms = (performance.now() - t0) / iters;
  const loom = { tokens_per_s: (B * N) / (ms / 1000), step_ms: ms };
  let torch: { tokens_per_s: number; step_ms: number } | null = null;
  const py = join(import.meta.dirname, '.venv/bin/python');
  if (existsSync(py)) {
    const arg = JSON.stringify({ D: p.hidden_size, L: p.num_hidden_layers, H: p.num_attention_heads, F: p.intermediate_size, V, B, N, W, M, threads, warmup: 1, iters });
    torch = JSON.parse(execFileSync(py, [join(import.meta.dirname, 'train_torch.py'), arg], { encoding: 'utf8' }).trim().split('\n').pop()!);
  }
  const row = { bench: 'train', config: values.config, threads, batch: `${B}x${N}`, loom, torch, ratio: torch ? loom.tokens_per_s / torch.tokens_per_s : null };
  if (values.json) console.log(JSON.stringify(row));
  else {
    console.log(`GLiNER2 span model "${values.config}" (D=${p.hidden_size}, L=${p.num_hidden_layers}), full fine-tuning step, batch ${B}x${N} tokens, ${threads} threads`);
    console.log(`  loom     ${loom.tokens_per_s.toFixed(0).padStart(8)} tokens/s  (${loom.step_ms.toFixed(1)} ms/step)`);
    if (torch) console.log(`  pytorch  ${torch.tokens_per_s.toFixed(0).padStart(8)} tokens/s  (${torch.step_ms.toFixed(1)} ms/step)   loom/pytorch = ${row.ratio!.toFixed(2)}x`);
    else console.log('  pytorch  (bench/.venv missing: python3 -m venv bench/.venv && bench/.venv/bin/pip install torch transformers)');
  }
}
