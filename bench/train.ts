// `npm run bench -- train [--quick] [--json] [--config small,base|tiny] [--threads n] [--rows encoder,decoder]
//   [--autocast] [--lora-dropout p]`
// Training throughput (tokens/s), Loom's native graphs next to PyTorch CPU on the same shapes and threads:
//   encoder: one GLiNER2 span-model step (forward + backward + AdamW, full fine-tuning) per --config preset (default
//     small and base), Loom in fp32 and in bf16 compute (precision bf16; only where the CPU runs vdpbf16ps, and the
//     ISA and that fact are printed), against bench/train_torch.py (transformers DebertaV2Model + the same heads) in
//     fp32 and under bf16 autocast (autocast only where bf16 is native, or with --autocast: elsewhere it crawls);
//   decoder: one LoRA SFT step (forward, masked cross-entropy, backward, clipping, AdamW over the adapter) of the
//     SmolLM2-135M configuration (random weights), batch 4 x 256 tokens, LoRA r=16 on q,k,v,o, against PyTorch +
//     PEFT (bench/sft_torch.py) in fp32 and under bf16 autocast. Loom runs it with the frozen base in bf16 (as it
//     loads the bf16 checkpoint: fp32 compute, bf16 weights read in place), in fp32, and (where the CPU runs
//     vdpbf16ps) with the bf16 base in bf16 compute (precision bf16).
// PyTorch runs from bench/.venv (python3 -m venv bench/.venv && bench/.venv/bin/pip install torch transformers peft),
// or from the Python that BENCH_PYTHON names.
import { execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { loadDecoderConfig } from '../src/formats/hf-config.ts';
import { ENCODER_PRESETS, initEncoderTensors } from '../src/training/encoder/init.ts';
import { baseTensors, initLoras } from '../src/training/decoder-trainer.ts';
import { DecoderTrainGraph, EncoderTrainGraph } from '../src/training/native.ts';
import { cpuInfo, setThreads, getThreads } from '../src/native/cpu.ts';
import { AUTO_BF16_MIN_SPEEDUP, bf16Speedup, nativeBf16 } from '../src/training/precision.ts';
import { CONFIGS, ensureRandomCheckpoint } from './decode/models.ts';

const PY = process.env.BENCH_PYTHON ?? join(import.meta.dirname, '.venv/bin/python');
type Rate = { tokens_per_s: number; step_ms: number };

export async function run(argv: string[]): Promise<void> {
  const { values } = parseArgs({
    args: argv,
    options: {
      quick: { type: 'boolean' }, json: { type: 'boolean' }, config: { type: 'string', default: 'small,base' },
      threads: { type: 'string' }, rows: { type: 'string', default: 'encoder,decoder' },
      autocast: { type: 'boolean' },
      'lora-dropout': { type: 'string', default: '0' },  // the decoder row's LoRA dropout (PEFT's, both sides)
    },
  });
  if (values.threads) setThreads(Number(values.threads));
  const rows = values.rows!.split(',');
  for (const r of rows) if (r !== 'encoder' && r !== 'decoder') throw new Error(`unknown row ${r} (encoder, decoder)`);
  if (rows.includes('encoder'))
    for (const c of values.config!.split(',')) await encoderRow(c, !!values.quick, !!values.json, !!values.autocast);
  const dropout = Number(values['lora-dropout']);
  if (!(dropout >= 0 && dropout < 1)) throw new Error(`--lora-dropout must be in [0, 1), got ${values['lora-dropout']}`);
  if (rows.includes('decoder')) await decoderRow(!!values.quick, !!values.json, dropout);
}

/** Decoder LoRA SFT: SmolLM2-135M configuration, B x T random tokens, r=16 on q,k,v,o; Loom (bf16 and fp32 base)
 * and PyTorch + PEFT (fp32, bf16 autocast). */
async function decoderRow(quick: boolean, json: boolean, dropout: number): Promise<void> {
  const threads = getThreads();
  const B = 4, T = 256, r = 16, targets = ['q_proj', 'k_proj', 'v_proj', 'o_proj'];
  const warmup = 1, iters = quick ? 1 : 3;
  const dir = ensureRandomCheckpoint('smollm2-135m');
  const dc = loadDecoderConfig(dir);
  let seed = 7;
  const next = () => ((seed = (seed * 1103515245 + 12345) >>> 0) % (dc.vocabSize - 3)) + 3;
  const tokens = Int32Array.from({ length: B * T }, next);
  const labels = Int32Array.from(tokens, (_, i) => (i % T === T - 1 ? -100 : tokens[i + 1]));
  const batch = {
    tokens, labels, positions: Int32Array.from(tokens, (_, i) => i % T),
    seqOff: Int32Array.from({ length: B + 1 }, (_, s) => s * T),
  };
  const loom = async (dtype: 'bf16' | 'f32', precision: 'fp32' | 'bf16' = 'fp32'): Promise<Rate> => {
    const graph = DecoderTrainGraph.create(dc, baseTensors(dir, dc, dtype),
      initLoras(dc, targets, r, 2 * r, dropout, 1), precision);
    const one = async (step: number) => {
      graph.zeroGrad();
      await graph.step(batch, { seed: step });
      await graph.optimizerStep({ lr: [1e-4], weightDecay: 0, maxGradNorm: 1, step });
    };
    for (let i = 0; i < warmup; i++) await one(i + 1);
    const t0 = performance.now();
    for (let i = 0; i < iters; i++) await one(warmup + i + 1);
    const ms = (performance.now() - t0) / iters;
    return { tokens_per_s: (B * T) / (ms / 1000), step_ms: ms };
  };
  const cpu = cpuInfo();
  const native = nativeBf16(cpu);
  const f = (x: Rate) => `${x.tokens_per_s.toFixed(0).padStart(8)} tokens/s  (${(x.step_ms / 1000).toFixed(2)} s/step)`;
  if (!json) {
    console.log(`Decoder LoRA SFT step, SmolLM2-135M configuration (random weights), batch ${B}x${T} tokens, `
      + `LoRA r=${r} on q,k,v,o${dropout ? `, LoRA dropout ${dropout}` : ''}, ${threads} threads; ISA ${cpu.isa}, `
      + `AVX512_BF16 ${cpu.features.avx512bf16 ? 'yes' : 'no'}, `
      + `bf16 compute ${native ? 'native' : 'not native here (precision bf16 falls back to fp32)'}`);
  }
  const loomBf16 = await loom('bf16');
  if (!json) console.log(`  loom, bf16 base                ${f(loomBf16)}`);
  const loomF32 = await loom('f32');
  if (!json) console.log(`  loom, fp32 base                ${f(loomF32)}`);
  // bf16 base weights multiplied in bf16 (vdpbf16ps), only where that is native
  const loomBf16c = native ? await loom('bf16', 'bf16') : null;
  if (!json)
    console.log(loomBf16c ? `  loom, bf16 base, bf16 compute ${f(loomBf16c)}`
      : '  loom, bf16 compute           (not run: no native bf16 here)');
  let torch: { fp32: Rate; bf16_autocast: Rate } | null = null;
  if (existsSync(PY)) {
    const arg = JSON.stringify({ config: CONFIGS['smollm2-135m'], B, T, r, targets, threads, warmup, iters, dropout });
    const out = execFileSync(PY, [join(import.meta.dirname, 'sft_torch.py'), arg], {
      encoding: 'utf8', stdio: ['ignore', 'pipe', json ? 'ignore' : 'inherit'],
    });
    torch = JSON.parse(out.trim().split('\n').pop()!);
  }
  const ratio = (x: Rate, y?: Rate) => (y ? x.tokens_per_s / y.tokens_per_s : null);
  const best = loomBf16c && loomBf16c.tokens_per_s > loomBf16.tokens_per_s ? loomBf16c : loomBf16;
  const row = {
    bench: 'train', row: 'decoder-lora-sft', model: 'smollm2-135m (random weights)', threads, batch: `${B}x${T}`,
    lora: `r=${r} ${targets.join(',')}`, lora_dropout: dropout, isa: cpu.isa, bf16_native: native,
    loom: { bf16_base: loomBf16, fp32_base: loomF32, bf16_base_bf16_compute: loomBf16c }, torch,
    loom_best: best === loomBf16c ? 'bf16 base, bf16 compute' : 'bf16 base',
    ratio_fp32: ratio(best, torch?.fp32), ratio_bf16_autocast: ratio(best, torch?.bf16_autocast),
  };
  if (json) return console.log(JSON.stringify(row));
  if (!torch)
    return console.log('  pytorch  (bench/.venv missing: python3 -m venv bench/.venv && '
      + 'bench/.venv/bin/pip install torch transformers peft)');
  console.log(`  pytorch + peft, fp32           ${f(torch.fp32)}   loom (${row.loom_best}) / pytorch fp32 = `
    + `${row.ratio_fp32!.toFixed(2)}x`);
  console.log(`  pytorch + peft, bf16 autocast  ${f(torch.bf16_autocast)}   loom (${row.loom_best}) / autocast = `
    + `${row.ratio_bf16_autocast!.toFixed(2)}x`);
}

/** GLiNER2 span model, full fine-tuning step, batch 8 x 96 tokens: Loom in fp32 and in bf16 compute (where the CPU
 * runs it natively), PyTorch in fp32 and under bf16 autocast. */
async function encoderRow(config: string, quick: boolean, json: boolean, autocast: boolean): Promise<void> {
  const p = ENCODER_PRESETS[config];
  if (!p) throw new Error(`unknown config ${config} (${Object.keys(ENCODER_PRESETS).join(', ')})`);
  const threads = getThreads();
  const B = 8, N = 96, W = 64, M = 4, V = p.vocab_size;
  const iters = quick ? 3 : 10;
  const cfg = { hiddenSize: p.hidden_size, numLayers: p.num_hidden_layers, numHeads: p.num_attention_heads, intermediateSize: p.intermediate_size, vocabSize: V, positionBuckets: 256, maxRelativePositions: -1, maxPositionEmbeddings: 512, layerNormEps: 1e-7, posAttType: ['p2c', 'c2p'], hiddenAct: 'gelu' };
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
  const loom = async (precision: 'fp32' | 'bf16'): Promise<Rate> => {
    const g = EncoderTrainGraph.create(cfg, 8, true, initEncoderTensors(p, V, 1), null, {}, undefined, precision);
    const one = async (s: number) => {
      g.zeroGrad();
      await g.step(batch, { dropNeg: false });
      await g.optimizerStep({ lr: [1e-4, 1e-4], weightDecay: 0.01, maxGradNorm: 1, step: s });
    };
    await one(1);
    const t0 = performance.now();
    for (let i = 0; i < iters; i++) await one(i + 2);
    const ms = (performance.now() - t0) / iters;
    return { tokens_per_s: (B * N) / (ms / 1000), step_ms: ms };
  };
  // bf16 runs only where it is native: the emulated path (AVX2, or AVX-512 without BF16) is slower than fp32, and a
  // training run there gets fp32 (src/training/precision.ts); PyTorch's autocast there is slower still
  const cpu = cpuInfo();
  const native = nativeBf16(cpu);
  const speedup = native ? await bf16Speedup() : null;
  const isaLine = `ISA ${cpu.isa}, AVX512_BF16 ${cpu.features.avx512bf16 ? 'yes' : 'no'}: bf16 compute `
    + (native ? `native (vdpbf16ps; one 256x768x768 product ${speedup!.toFixed(2)}x fp32, precision auto picks `
      + `${speedup! >= AUTO_BF16_MIN_SPEEDUP ? 'bf16' : 'fp32'})`
      : 'not native here (precision bf16 falls back to fp32)');
  if (!json) {
    console.log(`GLiNER2 span model "${config}" (D=${p.hidden_size}, L=${p.num_hidden_layers}), full fine-tuning `
      + `step, batch ${B}x${N} tokens, ${threads} threads; ${isaLine}`);
  }
  const f = (x: Rate) => `${x.tokens_per_s.toFixed(0).padStart(8)} tokens/s  (${x.step_ms.toFixed(1)} ms/step)`;
  const loomF32 = await loom('fp32');
  if (!json) console.log(`  loom, fp32                ${f(loomF32)}`);
  const loomBf16 = native ? await loom('bf16') : null;
  if (!json)
    console.log(loomBf16 ? `  loom, bf16                ${f(loomBf16)}`
      : '  loom, bf16                (not run: no native bf16 here; a bf16 run trains in fp32, the row above)');
  const modes = native || autocast ? ['fp32', 'bf16_autocast'] : ['fp32'];
  let torch: { fp32?: Rate; bf16_autocast?: Rate } | null = null;
  if (existsSync(PY)) {
    const arg = JSON.stringify({
      D: p.hidden_size, L: p.num_hidden_layers, H: p.num_attention_heads, F: p.intermediate_size, V, B, N, W, M,
      threads, warmup: 1, iters, modes,
    });
    const out = execFileSync(PY, [join(import.meta.dirname, 'train_torch.py'), arg], {
      encoding: 'utf8', stdio: ['ignore', 'pipe', json ? 'ignore' : 'inherit'],
    });
    torch = JSON.parse(out.trim().split('\n').pop()!);
  }
  const best = loomBf16 && loomBf16.tokens_per_s > loomF32.tokens_per_s ? loomBf16 : loomF32;
  const ratio = (y?: Rate) => (y ? best.tokens_per_s / y.tokens_per_s : null);
  const row = {
    bench: 'train', row: 'encoder-full', config, threads, batch: `${B}x${N}`, isa: cpu.isa,
    avx512bf16: cpu.features.avx512bf16, bf16_native: native, bf16_product_speedup: speedup,
    loom: { fp32: loomF32, bf16: loomBf16 }, torch,
    loom_best: best === loomBf16 ? 'bf16' : 'fp32', ratio_fp32: ratio(torch?.fp32),
    ratio_bf16_autocast: ratio(torch?.bf16_autocast),
  };
  if (json) return console.log(JSON.stringify(row));
  if (!torch) {
    return console.log('  pytorch  (bench/.venv missing: python3 -m venv bench/.venv && '
      + 'bench/.venv/bin/pip install torch transformers)');
  }
  const which = `loom (${row.loom_best})`;
  if (torch.fp32)
    console.log(`  pytorch, fp32             ${f(torch.fp32)}   ${which} / pytorch fp32 = `
      + `${row.ratio_fp32!.toFixed(2)}x`);
  if (torch.bf16_autocast)
    console.log(`  pytorch, bf16 autocast    ${f(torch.bf16_autocast)}   ${which} / autocast = `
      + `${row.ratio_bf16_autocast!.toFixed(2)}x`);
  else console.log('  pytorch, bf16 autocast    (not run: no native bf16 here, where it is slower than fp32; '
    + '--autocast runs it)');
}
