// `npm run bench -- decode [--quick] [--json] [--models smollm2-135m,qwen2.5-0.5b] [--threads N] [--f32] [--quant q8_0]
//   [--dequant] [--kv-dtype f32|bf16|auto] [--no-llama] [--no-ours]`
//
// Our decoder vs llama.cpp (node-llama-cpp 3.21.1, bench/package.json; `npm install --prefix bench`) on the
// same random weights with the real SmolLM2-135M and Qwen2.5-0.5B configurations (speed does not depend
// on the weights). Both engines read the same GGUF file (F16; ours keeps it as bf16 weights with fp32
// compute, 2 bytes per weight like llama.cpp's F16); --f32 compares f32 with an F32 GGUF instead; --quant q8_0
// writes the 2-D weights as Q8_0 blocks (ours keeps them block-quantized, native/kernels/quant*.cc), and with
// --dequant ours dequantizes them to bf16 at load instead (how Loom loaded quantized files before).
// Our KV cache dtype: --kv-dtype, else LOOM_KV_DTYPE, else auto (bf16 with bf16 weights, f32 with --f32);
// llama.cpp keeps its default F16 KV cache.
// Reported per model and engine:
//   prefill tok/s      one 512-token prompt
//   decode tok/s       batch 1, after a 16-token prompt
//   agg tok/s ×8, ×32  steady-state aggregate decode tokens/s with 8 and 32 concurrent streams (16-token
//                      prompts; tokens generated after each stream's first token, over the time from the
//                      last first token to the end, so the prompt processing is not counted)
//   TTFT uncached / cached   a 4096-token shared prefix + 8 new tokens, cold vs with the prefix in cache
//   decode @4k tok/s   batch 1, the cached request decoding on with ~4,100 tokens of context
//   bound tok/s        memory-bandwidth bound for decode: measured copy bandwidth / weight bytes read per token
import { cpus } from 'node:os';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { loadDecoderConfig, type DecoderConfig } from '../src/formats/hf-config.ts';
import { SafetensorsCheckpoint } from '../src/formats/safetensors.ts';
import { buildNativeDecoder, type TensorSource } from '../src/models/decoder/loader.ts';
import { ggufTensorSource } from '../src/models/decoder/gguf-source.ts';
import { loadGgufCheckpoint } from '../src/formats/gguf.ts';
import type { NativeDecoder } from '../src/models/decoder/native-model.ts';
import { KvCacheManager, type KvDtypeOption } from '../src/runtime/kv-cache.ts';
import { PrefixCache, type CacheMode } from '../src/runtime/prefix-cache.ts';
import { Scheduler } from '../src/runtime/scheduler.ts';
import { setThreads } from '../src/native/cpu.ts';
import { CACHE, CONFIGS, ensureRandomCheckpoint } from './decode/models.ts';
import { writeGgufFromCheckpoint } from './decode/gguf-writer.ts';

interface Row {
  model: string;
  engine: string;
  prefill?: number;
  decode?: number;
  agg8?: number;
  agg32?: number;
  ttftUncachedMs?: number;
  ttftCachedMs?: number;
  decodeLong?: number;
  boundTokS?: number;
  note?: string;
}

function flag(argv: string[], name: string): string | undefined {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
}

function randomTokens(n: number, seed: number, V: number): number[] {
  let s = seed >>> 0 || 1;
  const out: number[] = [];
  for (let i = 0; i < n; i++) {
    s ^= s << 13; s >>>= 0; s ^= s >>> 17; s ^= s << 5; s >>>= 0;
    out.push(300 + (s % (V - 300)));
  }
  return out;
}

/** Decode tokens/s once every stream is generating: tokens after each first token / (last end − last first token). */
function steadyAggregate(rs: { ttft: number; end: number; n: number }[]): number {
  const start = Math.max(...rs.map((x) => x.ttft));
  const end = Math.max(...rs.map((x) => x.end));
  const tok = rs.reduce((a, x) => a + x.n - 1, 0);
  return tok / ((end - start) / 1000);
}

/** Copy bandwidth (read + write bytes per second) over 256 MiB buffers. */
function copyBandwidth(): number {
  const n = 256 * 1024 * 1024;
  const a = Buffer.alloc(n, 1);
  const b = Buffer.alloc(n);
  a.copy(b);
  let best = Infinity;
  for (let i = 0; i < 3; i++) {
    const t0 = performance.now();
    a.copy(b);
    best = Math.min(best, performance.now() - t0);
  }
  return (2 * n) / (best / 1000);
}

// ------------------------------------------------------------------------------------------------
// ours: the scheduler with a greedy handler (no tokenizer needed)
// ------------------------------------------------------------------------------------------------
class Ours {
  sched: Scheduler;
  constructor(readonly model: NativeDecoder, readonly cfg: DecoderConfig, kvMemory: string, maxStepTokens: number, kvDtype?: KvDtypeOption) {
    const kv = new KvCacheManager(cfg, { memory: kvMemory, dtype: kvDtype, weightDtype: model.weightDtype });
    const prefix = new PrefixCache(kv, { minTokens: 16 });
    this.sched = new Scheduler(model, kv, prefix, { maxStepTokens, maxRunning: 64, maxQueue: 1024 });
  }
  /** Runs the prompts concurrently; per request: ms to first token and ms to the end, tokens generated. */
  run(prompts: number[][], maxTokens: number, mode: CacheMode = 'none'): Promise<{ ttft: number; end: number; n: number }[]> {
    const V = this.cfg.vocabSize;
    const t0 = performance.now();
    return Promise.all(prompts.map((prompt) => new Promise<{ ttft: number; end: number; n: number }>((resolve, reject) => {
      let ttft = 0;
      let n = 0;
      this.sched.submit({
        prompt, maxTokens, cache: { mode },
        handler: {
          next: (logits) => {
            if (n++ === 0) ttft = performance.now() - t0;
            let best = 0;
            for (let i = 1; i < V; i++) if (logits[i] > logits[best]) best = i;
            return best;
          },
          done: () => resolve({ ttft, end: performance.now() - t0, n }),
          fail: reject,
        },
      });
    })));
  }
}

async function benchOurs(name: string, dir: string, gguf: string | null, cfg: DecoderConfig, o: Opts, bwBound: (bytes: number) => number): Promise<Row> {
  // the same GGUF file llama.cpp reads when there is one, else the safetensors checkpoint
  const src: TensorSource = gguf ? (() => { const ck = loadGgufCheckpoint(gguf); return ggufTensorSource(ck.tensors, ck.tied); })() : (SafetensorsCheckpoint.open(dir) as unknown as TensorSource);
  if (o.dequant) delete src.raw;  // every quantized tensor dequantized at load (to bf16)
  const model = await buildNativeDecoder(cfg, src, { dtype: o.f32 ? 'f32' : 'bf16' });
  const V = cfg.vocabSize;
  const ours = new Ours(model, cfg, o.quick ? '1GiB' : '3GiB', 512, o.kvDtype);
  const kv = ours.sched.kv;
  const wdesc = o.quant && !o.dequant ? `${o.quant} blocks` : `${model.weightDtype.toLowerCase()} weights`;
  const row: Row = { model: name, engine: `loom (${wdesc}, ${kv.dtype} kv${gguf ? `, same ${o.quant ?? ''} gguf` : ''})` };
  progress(`${name}: loom loaded (${(model.weightBytes / 1e6).toFixed(0)} MB weights; ${kv.dtype} KV cache, ${kv.numBlocks} blocks = ${kv.capacityTokens} tokens in ${(kv.bytes / 2 ** 20).toFixed(0)} MiB)`);
  // warm-up
  await ours.run([randomTokens(32, 99, V)], 4);
  // prefill: one 512-token prompt (a single step), 1 generated token
  let best = Infinity;
  for (let r = 0; r < (o.quick ? 1 : 3); r++) best = Math.min(best, (await ours.run([randomTokens(512, 1 + r, V)], 1))[0].ttft);
  row.prefill = 512 / (best / 1000);
  progress(`${name}: loom prefill ${row.prefill.toFixed(1)} tok/s`);
  // decode batch 1
  const nDec = o.quick ? 16 : 64;
  const d = (await ours.run([randomTokens(16, 7, V)], nDec))[0];
  row.decode = (d.n - 1) / ((d.end - d.ttft) / 1000);
  // aggregate with 8 / 32 streams
  for (const streams of [8, 32]) {
    const gen = o.quick ? 16 : 48;
    const rs = await ours.run(Array.from({ length: streams }, (_, i) => randomTokens(16, 100 + i, V)), gen);
    const agg = steadyAggregate(rs);
    if (streams === 8) row.agg8 = agg;
    else row.agg32 = agg;
    progress(`${name}: loom ${streams} streams ${agg.toFixed(1)} tok/s`);
  }
  // TTFT with a shared prefix: cold (no cache) vs warm (automatic prefix cache)
  const P = o.quick ? 1024 : 4096;
  const prefix = randomTokens(P, 4242, V);
  const withTail = (s: number) => [...prefix, ...randomTokens(8, s, V)];
  row.ttftUncachedMs = (await ours.run([withTail(1)], 1, 'none'))[0].ttft;
  await ours.run([withTail(2)], 1, 'automatic'); // writes the prefix
  // the cached request then keeps decoding: decode speed with the long prefix as context
  const nLong = o.quick ? 16 : 48;
  const cached = (await ours.run([withTail(3)], nLong, 'automatic'))[0];
  row.ttftCachedMs = cached.ttft;
  row.decodeLong = (cached.n - 1) / ((cached.end - cached.ttft) / 1000);
  progress(`${name}: loom TTFT ${row.ttftUncachedMs.toFixed(0)} / ${row.ttftCachedMs.toFixed(0)} ms, decode at ${P} context ${row.decodeLong.toFixed(1)} tok/s`);
  // bandwidth bound: every linear weight once per token (the embedding table contributes one row)
  // weights read per token: all of them but the embedding table (block-quantized: the table is lm_head's blocks
  // when tied, so nothing to take off then)
  const embBytes = o.quant && !o.dequant ? (cfg.tieWordEmbeddings ? 0 : cfg.vocabSize * cfg.hiddenSize * 34 / 32)
    : cfg.vocabSize * cfg.hiddenSize * (model.weightDtype === 'BF16' ? 2 : 4);
  const bytes = model.weightBytes - embBytes;
  row.boundTokS = bwBound(bytes);
  if (P !== 4096) row.note = `TTFT prefix ${P} tokens (--quick)`;
  return row;
}

// ------------------------------------------------------------------------------------------------
// llama.cpp through node-llama-cpp
// ------------------------------------------------------------------------------------------------
// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Any = any;

async function loadNodeLlamaCpp(): Promise<Any | null> {
  const p = join(import.meta.dirname, 'node_modules', 'node-llama-cpp', 'dist', 'index.js');
  if (!existsSync(p)) return null;
  return import(pathToFileURL(p).href);
}

async function benchLlamaCpp(lib: Any, name: string, gguf: string, cfg: DecoderConfig, o: Opts): Promise<Row> {
  const V = cfg.vocabSize;
  const llama = await lib.getLlama({ gpu: false, build: 'never', logLevel: 'error', maxThreads: o.threads });
  const model = await llama.loadModel({ modelPath: gguf, gpuLayers: 0 });
  const row: Row = { model: name, engine: `llama.cpp (${o.quant ? o.quant.toUpperCase() : o.f32 ? 'F32' : 'F16'} gguf)` };
  const P = o.quick ? 1024 : 4096;
  const mk = async (sequences: number, contextSize: number) =>
    model.createContext({ sequences, contextSize, batchSize: 512, threads: { ideal: o.threads, min: o.threads }, flashAttention: false });
  // generate `n` tokens greedily on a sequence; returns [ttft ms, end ms]
  const gen = async (seq: Any, prompt: number[], n: number, t0: number): Promise<{ ttft: number; end: number; n: number }> => {
    let ttft = 0, k = 0;
    const it = seq.evaluate(prompt, { temperature: 0 });
    for await (const _t of it) {
      void _t;
      if (k++ === 0) ttft = performance.now() - t0;
      if (k >= n) break;
    }
    return { ttft, end: performance.now() - t0, n: k };
  };
  {
    const ctx = await mk(1, Math.max(2048, P + 64));
    const seq = ctx.getSequence();
    await gen(seq, randomTokens(32, 99, V), 4, performance.now());
    let best = Infinity;
    for (let r = 0; r < (o.quick ? 1 : 3); r++) {
      await seq.clearHistory();
      best = Math.min(best, (await gen(seq, randomTokens(512, 1 + r, V), 1, performance.now())).ttft);
    }
    row.prefill = 512 / (best / 1000);
    progress(`${name}: llama.cpp prefill ${row.prefill.toFixed(1)} tok/s`);
    await seq.clearHistory();
    const nDec = o.quick ? 16 : 64;
    const d = await gen(seq, randomTokens(16, 7, V), nDec, performance.now());
    row.decode = (d.n - 1) / ((d.end - d.ttft) / 1000);
    progress(`${name}: llama.cpp decode ${row.decode.toFixed(1)} tok/s`);
    // TTFT: cold, then with the prefix kept in the sequence's KV cache (suffix only evaluated)
    const prefix = randomTokens(P, 4242, V);
    await seq.clearHistory();
    row.ttftUncachedMs = (await gen(seq, [...prefix, ...randomTokens(8, 1, V)], 1, performance.now())).ttft;
    await seq.eraseContextTokenRanges([{ start: P, end: seq.nextTokenIndex }]);
    const cached = await gen(seq, randomTokens(8, 3, V), o.quick ? 16 : 48, performance.now());
    row.ttftCachedMs = cached.ttft;
    row.decodeLong = (cached.n - 1) / ((cached.end - cached.ttft) / 1000);
    progress(`${name}: llama.cpp TTFT ${row.ttftUncachedMs.toFixed(0)} / ${row.ttftCachedMs.toFixed(0)} ms, decode at ${P} context ${row.decodeLong.toFixed(1)} tok/s`);
    await ctx.dispose();
  }
  for (const streams of [8, 32]) {
    const ctx = await mk(streams, streams * 64);
    const n = o.quick ? 16 : 48;
    const t0 = performance.now();
    const rs = await Promise.all(Array.from({ length: streams }, (_, i) => gen(ctx.getSequence(), randomTokens(16, 100 + i, V), n, t0)));
    const agg = steadyAggregate(rs);
    if (streams === 8) row.agg8 = agg;
    else row.agg32 = agg;
    progress(`${name}: llama.cpp ${streams} streams ${agg.toFixed(1)} tok/s`);
    await ctx.dispose();
  }
  await model.dispose();
  return row;
}

interface Opts {
  quick: boolean;
  json: boolean;
  threads: number;
  f32: boolean;
  /** write the GGUF's 2-D weights in this block type (Q8_0 only so far) */
  quant?: 'q8_0';
  /** ours dequantizes the quantized weights to bf16 at load (the behaviour before quant kernels) */
  dequant: boolean;
  kvDtype?: KvDtypeOption;
  llama: boolean;
  ours: boolean;
  models: string[];
}

const progress = (msg: string) => process.stderr.write(`  [decode bench] ${msg}\n`);

const fmt = (v: number | undefined, d = 1) => (v === undefined ? '—' : v.toFixed(d));

export async function run(argv: string[]): Promise<void> {
  const o: Opts = {
    quick: argv.includes('--quick'),
    json: argv.includes('--json'),
    threads: Number(flag(argv, '--threads') ?? cpus().length),
    f32: argv.includes('--f32'),
    quant: flag(argv, '--quant') as 'q8_0' | undefined,
    dequant: argv.includes('--dequant'),
    kvDtype: flag(argv, '--kv-dtype') as KvDtypeOption | undefined,
    llama: !argv.includes('--no-llama'),
    ours: !argv.includes('--no-ours'),
    models: (flag(argv, '--models') ?? Object.keys(CONFIGS).join(',')).split(','),
  };
  setThreads(o.threads);
  // an engine that stops scheduling work would let the process exit silently mid-run: say so
  let finished = false;
  process.on('beforeExit', () => {
    if (!finished) {
      console.error('decode bench: the event loop drained before the run finished (an engine stalled)');
      process.exitCode = 1;
    }
  });
  if (o.quant && o.quant !== 'q8_0') throw new Error(`--quant ${o.quant}: only q8_0 is written so far`);
  const bw = copyBandwidth();
  const bound = (bytes: number) => bw / 2 / bytes; // copy moves 2 bytes per byte read
  console.log(`decode bench: ${o.threads} threads, copy bandwidth ${(bw / 1e9).toFixed(1)} GB/s (read+write)${o.quick ? ', --quick' : ''}`);
  const lib = o.llama ? await loadNodeLlamaCpp() : null;
  if (o.llama && !lib) console.log('llama.cpp column skipped: node-llama-cpp is not installed (npm install --prefix bench)');
  const rows: Row[] = [];
  for (const name of o.models) {
    if (!CONFIGS[name]) throw new Error(`unknown model ${name}; available: ${Object.keys(CONFIGS).join(', ')}`);
    const dir = ensureRandomCheckpoint(name);
    const cfg = loadDecoderConfig(dir);
    const gtype = o.quant === 'q8_0' ? 'Q8_0' : o.f32 ? 'F32' : 'F16';
    const gguf = lib || o.quant ? writeGgufFromCheckpoint(dir, CONFIGS[name], join(CACHE, `${name}.${gtype.toLowerCase()}.gguf`), gtype) : null;
    const r: Row = o.ours ? await benchOurs(name, dir, gguf, cfg, o, bound) : { model: name, engine: 'loom (skipped: --no-ours)' };
    rows.push(r);
    if (o.json) console.log(JSON.stringify(r));
    if (lib && gguf) {
      try {
        const l = await benchLlamaCpp(lib, name, gguf, cfg, o);
        l.boundTokS = r.boundTokS;
        rows.push(l);
        if (o.json) console.log(JSON.stringify(l));
      } catch (e) {
        console.log(`llama.cpp column skipped for ${name}: ${(e as Error).message}`);
      }
    }
  }
  finished = true;
  console.log('\n| model | engine | prefill 512 tok/s | decode b=1 tok/s | agg ×8 tok/s | agg ×32 tok/s | TTFT 4k uncached ms | TTFT 4k cached ms | decode @4k tok/s | bw bound tok/s |');
  console.log('|---|---|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const r of rows)
    console.log(`| ${r.model} | ${r.engine} | ${fmt(r.prefill)} | ${fmt(r.decode)} | ${fmt(r.agg8)} | ${fmt(r.agg32)} | ${fmt(r.ttftUncachedMs, 0)} | ${fmt(r.ttftCachedMs, 0)} | ${fmt(r.decodeLong)} | ${fmt(r.boundTokS)} |`);
  console.log('\nratios (ours / llama.cpp, and targets):');
  for (const name of o.models) {
    const a = rows.find((r) => r.model === name && r.engine.startsWith('loom'));
    const b = rows.find((r) => r.model === name && r.engine.startsWith('llama.cpp'));
    if (!a || a.decode === undefined) continue;
    const parts = [
      `32-stream aggregate / single stream = ${fmt(a.agg32! / a.decode!, 2)}× (target ≥ 8×)`,
      `cached TTFT speed-up = ${fmt(a.ttftUncachedMs! / a.ttftCachedMs!, 1)}× (target ≥ 10×)`,
      `decode / bandwidth bound = ${fmt((100 * a.decode!) / a.boundTokS!, 0)}%`,
    ];
    if (b) parts.unshift(`decode b=1 vs llama.cpp = ${fmt(a.decode! / b.decode!, 2)}× (target ≥ 1.0×)`, `prefill vs llama.cpp = ${fmt(a.prefill! / b.prefill!, 2)}×`, `agg ×32 vs llama.cpp = ${fmt(a.agg32! / b.agg32!, 2)}×`);
    console.log(`  ${name}: ${parts.join('; ')}`);
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) await run(process.argv.slice(2));
