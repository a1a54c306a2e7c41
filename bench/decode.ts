// `npm run bench -- decode [--quick] [--json] [--models smollm2-135m,qwen2.5-0.5b,llama-1024] [--threads N] [--f32]
//   [--quant f16,q8_0,q4_k_m,q6_k] [--gguf <file>] [--dequant] [--kv-dtype f32|bf16|auto] [--no-llama] [--no-ours]`
//
// Our decoder vs llama.cpp (node-llama-cpp 3.21.1, bench/package.json; `npm install --prefix bench`) on the
// same GGUF file and threads. By default the files hold random weights with the real SmolLM2-135M and
// Qwen2.5-0.5B configurations (speed does not depend on the weights), written by bench/decode/gguf-writer.ts:
// F16 (ours keeps it as bf16 weights with fp32 compute, 2 bytes per weight like llama.cpp's F16); --f32 an F32
// file; --quant one row pair per listed file type, the quantized ones with each tensor's type and blocks from
// Loom's quantizers (src/formats/gguf-quantize.ts, llama-quantize's choices: Q4_K_M = Q4_K with Q6_K attn_v /
// ffn_down in some layers, Q5_0 / Q8_0 where rows are not a multiple of 256); ours keeps the blocks
// (native/kernels/quant*.cc), with --dequant it dequantizes them to bf16 at load instead. --gguf <file> runs
// both engines on any GGUF file (its own vocabulary, random token ids).
// Our KV cache dtype: --kv-dtype, else LOOM_KV_DTYPE, else auto (bf16 with bf16 weights, f32 with --f32);
// llama.cpp keeps its default F16 KV cache.
// Reported per file and engine:
//   prefill tok/s      one 512-token prompt
//   decode tok/s       batch 1, after a 16-token prompt
//   agg tok/s ×8, ×32  steady-state aggregate decode tokens/s with 8 and 32 concurrent streams (16-token
//                      prompts; tokens generated after each stream's first token, over the time from the
//                      last first token to the end, so the prompt processing is not counted)
//   TTFT uncached / cached   a 4096-token shared prefix + 8 new tokens, cold vs with the prefix in cache
//   decode @4k tok/s   batch 1, the cached request decoding on with ~4,100 tokens of context
//   RSS Δ MB           the process's resident memory growth while the engine's model loads: approximate, since
//                      every row runs in one process and memory the previous row frees (GC) offsets it (it can
//                      read negative); ours also notes the weight bytes the model itself counts
//   bound tok/s        memory-bandwidth bound for decode: read bandwidth (loads and a sum over a buffer far
//                      larger than the L3, addon.benchRead, measured just before and after the row's decode b=1
//                      run, the mean) / weight bytes read per token (the file's tensor bytes, less the embedding
//                      table unless it doubles as the output matrix)
import { cpus, loadavg } from 'node:os';
import { existsSync, readFileSync } from 'node:fs';
import { basename, join } from 'node:path';
import { pathToFileURL } from 'node:url';
import type { DecoderConfig } from '../src/formats/hf-config.ts';
import { addon } from '../src/native/addon.ts';
import { buildNativeDecoder, type TensorSource } from '../src/models/decoder/loader.ts';
import { ggufTensorSource } from '../src/models/decoder/gguf-source.ts';
import { loadGgufCheckpoint } from '../src/formats/gguf-hf.ts';
import type { NativeDecoder } from '../src/models/decoder/native-model.ts';
import { KvCacheManager, type KvDtypeOption } from '../src/runtime/kv-cache.ts';
import { PrefixCache, type CacheMode } from '../src/runtime/prefix-cache.ts';
import { Scheduler } from '../src/runtime/scheduler.ts';
import { getIsa, setThreads } from '../src/native/cpu.ts';
import { argmaxF32 } from '../src/native/ops.ts';
import { CACHE, CONFIGS, DEFAULT_MODELS, ensureRandomCheckpoint } from './decode/models.ts';
import { writeGgufFromCheckpoint, type BenchGgufType } from './decode/gguf-writer.ts';

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
  rssMB?: number;
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

/** Resident set size in bytes (Linux: /proc/self/statm), 0 elsewhere. */
function rssBytes(): number {
  try {
    return Number(readFileSync('/proc/self/statm', 'utf8').split(' ')[1]) * 4096;
  } catch {
    return 0;
  }
}

/** Weight bytes a decode step reads per token: every tensor of the file but the embedding table (one row of it
 * is read), which counts when it is also the output matrix (no output.weight). */
export function bytesPerToken(gguf: string): number {
  const f = loadGgufCheckpoint(gguf).file;
  let total = 0;
  for (const [name, t] of f.tensors) if (name !== 'token_embd.weight' || !f.tensors.has('output.weight')) total += t.bytes.byteLength;
  return total;
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
            return Math.max(0, argmaxF32(logits.subarray(0, V)));  // the sampler's greedy argmax
          },
          done: () => resolve({ ttft, end: performance.now() - t0, n }),
          fail: reject,
        },
      });
    })));
  }
}

// Read bandwidth in bytes/s, measured again beside each decode row (before and after it, the mean): on a machine
// shared with other tenants it moved by half between rows minutes apart (one file's bound read 48, 63 and 73 tok/s in
// three runs of one session), so a figure from the start of the run made "% of bound" a comparison across time.
function readBandwidth(o: Opts): number {
  return (addon.benchRead(o.threads, o.quick ? 512 : 1024, 3) as number) * 1e9;
}

async function benchOurs(name: string, gguf: string, label: string, o: Opts): Promise<Row> {
  // the same GGUF file llama.cpp reads
  const ck = loadGgufCheckpoint(gguf);
  const cfg = ck.config;
  const src: TensorSource = ggufTensorSource(ck.tensors, ck.tied);
  if (o.dequant) delete src.raw;  // every quantized tensor dequantized at load (to bf16)
  const rss0 = rssBytes();
  const model = await buildNativeDecoder(cfg, src, { dtype: o.f32 ? 'f32' : 'bf16' });
  const V = cfg.vocabSize;
  const ours = new Ours(model, cfg, o.quick ? '1GiB' : '3GiB', 512, o.kvDtype);
  const kv = ours.sched.kv;
  const wdesc = label !== 'F16' && label !== 'F32' && !o.dequant ? 'blocks kept' : `${model.weightDtype.toLowerCase()} weights`;
  const row: Row = { model: name, engine: `loom (${label} gguf, ${wdesc}, ${kv.dtype} kv)` };
  row.rssMB = (rssBytes() - rss0) / 1e6;
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
  const bw0 = readBandwidth(o);
  const d = (await ours.run([randomTokens(16, 7, V)], nDec))[0];
  row.decode = (d.n - 1) / ((d.end - d.ttft) / 1000);
  row.boundTokS = (bw0 + readBandwidth(o)) / 2 / bytesPerToken(gguf);
  // aggregate with 8 / 32 streams, after one untimed run of 32 so that the KV blocks they take have been written
  // once: the pool's pages are first touched (faulted in, zeroed) by the first sequences that reach them, and with
  // the 512-token prefill and 8 streams before it the timed 32-stream run took about 30 fresh blocks, one per
  // stream, for all of its decode steps (1,553 page faults in it, 9 in the same run repeated; clear_page_erms 5-7 %
  // of a first 32-stream decode-cpu.mts rep's samples, none in the next). llama.cpp's side clears its KV buffer when
  // it creates the context, outside its timed run.
  const gen = o.quick ? 16 : 48;
  await ours.run(Array.from({ length: 32 }, (_, i) => randomTokens(16, 200 + i, V)), gen);
  for (const streams of [8, 32]) {
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
  row.note = `weights ${(model.weightBytes / 1e6).toFixed(0)} MB`;
  if (P !== 4096) row.note += `; TTFT prefix ${P} tokens (--quick)`;
  // the weights and the KV pool released now, as llama.cpp's side disposes of its model, not at some later garbage
  // collection while the next file's rows run
  ours.sched.close();
  kv.native.free();
  model.free();
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

async function benchLlamaCpp(lib: Any, name: string, gguf: string, label: string, o: Opts): Promise<Row> {
  const V = loadGgufCheckpoint(gguf).config.vocabSize;
  const llama = await lib.getLlama({ gpu: false, build: 'never', logLevel: 'error', maxThreads: o.threads });
  const rss0 = rssBytes();
  const model = await llama.loadModel({ modelPath: gguf, gpuLayers: 0, useMmap: false });
  const row: Row = { model: name, engine: `llama.cpp (${label} gguf)`, rssMB: (rssBytes() - rss0) / 1e6 };
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
    const bw0 = readBandwidth(o);
    const d = await gen(seq, randomTokens(16, 7, V), nDec, performance.now());
    row.decode = (d.n - 1) / ((d.end - d.ttft) / 1000);
    row.boundTokS = (bw0 + readBandwidth(o)) / 2 / bytesPerToken(gguf);
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
  /** GGUF file types to write and compare, one row pair each (F16, Q8_0, Q6_K, Q4_K_M) */
  quants: BenchGgufType[];
  /** a GGUF file to run instead of the random-weight models */
  gguf?: string;
  /** read bandwidth, bytes/s (addon.benchRead at the bench's threads) */
  readBw: number;
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
  const quants = (flag(argv, '--quant') ?? (argv.includes('--f32') ? 'f32' : 'f16')).split(',').map((q) => q.toUpperCase());
  for (const q of quants)
    if (!['F16', 'F32', 'Q8_0', 'Q6_K', 'Q4_K_M'].includes(q)) throw new Error(`--quant ${q}: one of f16, q8_0, q6_k, q4_k_m`);
  const o: Opts = {
    quick: argv.includes('--quick'),
    json: argv.includes('--json'),
    threads: Number(flag(argv, '--threads') ?? cpus().length),
    f32: argv.includes('--f32'),
    quants: quants as BenchGgufType[],
    gguf: flag(argv, '--gguf'),
    readBw: 0,
    dequant: argv.includes('--dequant'),
    kvDtype: flag(argv, '--kv-dtype') as KvDtypeOption | undefined,
    llama: !argv.includes('--no-llama'),
    ours: !argv.includes('--no-ours'),
    models: (flag(argv, '--models') ?? DEFAULT_MODELS.join(',')).split(','),
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
  o.readBw = (addon.benchRead(o.threads, o.quick ? 512 : 1024, 5) as number) * 1e9;
  console.log(`decode bench: ${o.threads} threads, read bandwidth ${(o.readBw / 1e9).toFixed(1)} GB/s ` +
    `(loads + sum over ${o.quick ? 512 : 1024} MiB), ${cpus()[0]?.model ?? 'unknown CPU'}, ISA ${getIsa()}, ` +
    `load average ${loadavg().map((x) => x.toFixed(1)).join(' ')}${o.quick ? ', --quick' : ''}`);
  const lib = o.llama ? await loadNodeLlamaCpp() : null;
  if (o.llama && !lib) console.log('llama.cpp column skipped: node-llama-cpp is not installed (npm install --prefix bench)');
  // (model label, file, type label) per row pair
  const cases: [string, string, string][] = [];
  if (o.gguf) cases.push([basename(o.gguf), o.gguf, 'given']);
  else
    for (const name of o.models) {
      if (!CONFIGS[name]) throw new Error(`unknown model ${name}; available: ${Object.keys(CONFIGS).join(', ')}`);
      const dir = ensureRandomCheckpoint(name);
      for (const q of o.quants) {
        const path = join(CACHE, `${name}.${q.toLowerCase()}.gguf`);
        if (!existsSync(path)) progress(`${name}: writing ${q} GGUF (Loom's quantizers)`);
        cases.push([name, writeGgufFromCheckpoint(dir, CONFIGS[name], path, q as BenchGgufType), q]);
      }
    }
  const rows: Row[] = [];
  for (const [name, gguf, label] of cases) {
    const r: Row = o.ours ? await benchOurs(name, gguf, label, o) : { model: name, engine: 'loom (skipped: --no-ours)' };
    rows.push(r);
    if (o.json) console.log(JSON.stringify(r));
    if (lib) {
      try {
        const l = await benchLlamaCpp(lib, name, gguf, label, o);
        rows.push(l);
        if (o.json) console.log(JSON.stringify(l));
      } catch (e) {
        console.log(`llama.cpp column skipped for ${name} ${label}: ${(e as Error).message}`);
      }
    }
  }
  finished = true;
  console.log('\n| model | engine | prefill 512 tok/s | decode b=1 tok/s | agg ×8 tok/s | agg ×32 tok/s | TTFT 4k uncached ms | TTFT 4k cached ms | decode @4k tok/s | RSS Δ MB (approx.) | bw bound tok/s |');
  console.log('|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|');
  for (const r of rows)
    console.log(`| ${r.model} | ${r.engine} | ${fmt(r.prefill)} | ${fmt(r.decode)} | ${fmt(r.agg8)} | ${fmt(r.agg32)} | ${fmt(r.ttftUncachedMs, 0)} | ${fmt(r.ttftCachedMs, 0)} | ${fmt(r.decodeLong)} | ${fmt(r.rssMB, 0)} | ${fmt(r.boundTokS)} |`);
  console.log('\nratios (ours / llama.cpp, and targets):');
  for (let i = 0; i < rows.length; i++) {
    const a = rows[i], b = rows[i + 1]?.engine.startsWith('llama.cpp') ? rows[i + 1] : undefined;
    if (!a.engine.startsWith('loom') || a.decode === undefined) continue;
    const parts = [
      `32-stream aggregate / single stream = ${fmt(a.agg32! / a.decode!, 2)}× (target ≥ 8×)`,
      `cached TTFT speed-up = ${fmt(a.ttftUncachedMs! / a.ttftCachedMs!, 1)}× (target ≥ 10×)`,
      `decode / read-bandwidth bound = ${fmt((100 * a.decode!) / a.boundTokS!, 0)}% (target ≥ 80%)`,
    ];
    if (b) parts.unshift(`decode b=1 vs llama.cpp = ${fmt(a.decode! / b.decode!, 2)}× (target ≥ 1.1×)`, `prefill vs llama.cpp = ${fmt(a.prefill! / b.prefill!, 2)}× (target ≥ 1.5×)`, `agg ×32 vs llama.cpp = ${fmt(a.agg32! / b.agg32!, 2)}×`);
    console.log(`  ${a.model} ${a.engine}: ${parts.join('; ')}`);
  }
}

if (import.meta.url === pathToFileURL(process.argv[1] ?? '').href) await run(process.argv.slice(2));
