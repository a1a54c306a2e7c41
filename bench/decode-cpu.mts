// CPU time per decode step, Loom and llama.cpp (node-llama-cpp) on the same GGUF file: the steadiest figure on a
// machine shared with other work (wall-clock tok/s there depends on who else holds the cores; the CPU time a
// step costs much less). `npm run bench -- decode` reports wall-clock figures; this is the A/B for kernel work.
//   node --import tsx bench/decode-cpu.mts <file.gguf> [more.gguf ...] [--streams 1,8,32] [--tokens 64]
//     [--threads 1] [--reps 2] [--no-llama] [--bound] [--prefill N]
// Per row: streams, tok/s (wall), CPU ms per step (process CPU time over the steps after every stream's first
// token / steps), minor page faults per step. Several files run one after another in this process. Set LOOM_ADDON
// to compare two builds of the addon on the same file. --bound adds the read-bandwidth bound in the same unit: the
// weight bytes a token reads over the bytes a plain read loop streams per CPU-second (addon.benchRead over 256 MiB,
// far larger than the L3), i.e. the CPU ms a step would take if it did nothing but stream its weights once;
// measured in CPU time so that it holds on a loaded machine as well. --prefill N times one N-token prompt (no cache,
// one token generated; Loom only), --reps times: its wall and CPU time (TTFT of a long prompt, where the prefill
// attention's share grows with N).
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { buildNativeDecoder } from '../src/models/decoder/loader.ts';
import { ggufTensorSource } from '../src/models/decoder/gguf-source.ts';
import { loadGgufCheckpoint } from '../src/formats/gguf-hf.ts';
import { KvCacheManager } from '../src/runtime/kv-cache.ts';
import { PrefixCache } from '../src/runtime/prefix-cache.ts';
import { Scheduler } from '../src/runtime/scheduler.ts';
import { getIsa, setThreads } from '../src/native/cpu.ts';
import { addon } from '../src/native/addon.ts';
import { argmaxF32 } from '../src/native/ops.ts';
import { bytesPerToken } from './decode.ts';

const argv = process.argv.slice(2);
const flag = (name: string, def: string) => (argv.includes(name) ? argv[argv.indexOf(name) + 1] : def);
// one or more files, each run in turn in this process (a later file after the earlier ones' models are freed)
const firstFlag = argv.findIndex((a) => a.startsWith('--'));
const files = firstFlag < 0 ? argv : argv.slice(0, firstFlag);
if (!files.length || !files.every((f) => existsSync(f)))
  throw new Error('usage: decode-cpu.mts <file.gguf> [more.gguf ...] [--streams 1,8,32] [--tokens 64]');
const streams = flag('--streams', '1,8,32').split(',').map(Number);
const tokens = Number(flag('--tokens', '64')), threads = Number(flag('--threads', '1'));
const reps = Number(flag('--reps', '2'));
const cpuMs = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1000;
};
const prompt = (i: number, V: number) => Array.from({ length: 16 }, (_, j) => 300 + ((i * 977 + j * 131) % (V - 300)));
const faults = () => process.resourceUsage().minorPageFault;
const report = (engine: string, s: number, steps: number, wallMs: number, cpu: number, flt: number) =>
  console.log(`${engine} streams ${s}: ${((steps * s) / (wallMs / 1000)).toFixed(1)} tok/s wall, ` +
    `${(cpu / steps).toFixed(2)} ms CPU per step, ${(flt / steps).toFixed(1)} page faults per step`);

setThreads(threads);
for (const gguf of files) await benchFile(gguf);

async function benchFile(gguf: string) {
  const ck = loadGgufCheckpoint(gguf);
  const V = ck.config.vocabSize;
  console.log(`${gguf}: ${threads} thread(s), ISA ${getIsa()}`);
  {
    const model = await buildNativeDecoder(ck.config, ggufTensorSource(ck.tensors, ck.tied), { dtype: 'bf16' });
    const kv = new KvCacheManager(ck.config, { memory: '1GiB', weightDtype: model.weightDtype });
    const opts = { maxStepTokens: 512, maxRunning: 64, maxQueue: 1024 };
    const sched = new Scheduler(model, kv, new PrefixCache(kv, { minTokens: 16 }), opts);
    // every stream generates `n` tokens greedily; returns the wall and CPU time at the last first token
    const run = (s: number, n: number) => Promise.all(Array.from({ length: s }, (_, i) =>
      new Promise<{ t: number; c: number; f: number }>((resolve, reject) => {
        let k = 0, t = 0, c = 0, f = 0;
        sched.submit({
          prompt: prompt(i, V), maxTokens: n, cache: { mode: 'none' },
          handler: {
            next: (l: Float32Array, _p, best?: number) => {
              if (k++ === 0) [t, c, f] = [performance.now(), cpuMs(), faults()];
              // the sampler's greedy argmax: the step's where the addon makes it
              return Math.max(0, best ?? argmaxF32(l.subarray(0, V)));
            },
            done: () => resolve({ t, c, f }),
            fail: reject,
          },
        });
      })));
    await run(1, 4);
    const prefill = Number(flag('--prefill', '0'));
    for (let r = 0; prefill > 0 && r < reps; r++) {
      const ids = Array.from({ length: prefill }, (_, j) => 300 + ((r * 977 + j * 131) % (V - 300)));
      const [t, c] = [performance.now(), cpuMs()];
      await new Promise<void>((resolve, reject) => sched.submit({
        prompt: ids, maxTokens: 1, cache: { mode: 'none' }, handler: { next: () => null, done: resolve, fail: reject },
      }));
      console.log(`loom prefill ${prefill}: ${(performance.now() - t).toFixed(0)} ms wall, ${(cpuMs() - c).toFixed(0)} ms CPU`);
    }
    for (const s of streams)
      for (let r = 0; r < reps; r++) {
        const rs = await run(s, tokens);
        const t = Math.max(...rs.map((x) => x.t)), c = Math.max(...rs.map((x) => x.c));
        const f = Math.max(...rs.map((x) => x.f));
        report('loom', s, tokens - 1, performance.now() - t, cpuMs() - c, faults() - f);
      }
    sched.close();
    kv.native.free();
    model.free();
  }
  if (argv.includes('--bound')) {
    // CPU ms per GiB read: 48 passes over 256 MiB less 8 (the buffer's setup and first touch cancel out), the median
    // of 5 (the best of 3 took an outlier at times: a slow 8-pass run made the difference small, 40 GB per CPU-second
    // on a machine that streams 14-15)
    const runs: number[] = [];
    for (let i = 0; i < 5; i++) {
      let c = cpuMs();
      addon.benchRead(threads, 256, 8);
      const few = cpuMs() - c;
      c = cpuMs();
      addon.benchRead(threads, 256, 48);
      runs.push((cpuMs() - c - few) / 10);
    }
    const median = runs.sort((a, b) => a - b)[2];
    const gbPerCpuS = 2 ** 30 / 1e9 / (median / 1000), bytes = bytesPerToken(gguf);
    console.log(`read bound: ${(bytes / 1e6).toFixed(1)} MB of weights per token at ${gbPerCpuS.toFixed(2)} GB per ` +
      `CPU-second = ${((bytes / 1e9 / gbPerCpuS) * 1000).toFixed(2)} ms CPU per step`);
  }
  const lib = join(import.meta.dirname, 'node_modules', 'node-llama-cpp', 'dist', 'index.js');
  if (!argv.includes('--no-llama') && existsSync(lib)) {
    // eslint-disable-next-line @typescript-eslint/no-explicit-any
    const { getLlama } = (await import(pathToFileURL(lib).href)) as any;
    const llama = await getLlama({ gpu: false, build: 'never', logLevel: 'error', maxThreads: threads });
    const model = await llama.loadModel({ modelPath: gguf, gpuLayers: 0, useMmap: false });
    for (const s of streams) {
      const ctx = await model.createContext({ sequences: s, contextSize: Math.max(2048, s * 128), batchSize: 512,
        threads: { ideal: threads, min: threads }, flashAttention: false });
      const seqs = Array.from({ length: s }, () => ctx.getSequence());
      for (let r = 0; r < reps; r++) {
        const rs = await Promise.all(seqs.map(async (seq, i) => {
          await seq.clearHistory();
          let k = 0, t = 0, c = 0, f = 0;
          for await (const _tok of seq.evaluate(prompt(i, V), { temperature: 0 })) {
            void _tok;
            if (k++ === 0) [t, c, f] = [performance.now(), cpuMs(), faults()];
            if (k >= tokens) break;
          }
          return { t, c, f };
        }));
        const t = Math.max(...rs.map((x) => x.t)), c = Math.max(...rs.map((x) => x.c));
        const f = Math.max(...rs.map((x) => x.f));
        report('llama.cpp', s, tokens - 1, performance.now() - t, cpuMs() - c, faults() - f);
      }
      await ctx.dispose();
    }
    await model.dispose();
  }
}
