// `npm run bench -- dequant [--quick] [--json] [--threads 1,2] [--types Q4_K,Q6_K]`
//
// Load-time dequantization of GGUF block types (native/formats/gguf_dequant.cc) to float32: one
// 4096 × 11008 matrix (a 7B model's ffn weight, 45 M values) per type, through the same call the loader
// makes (addon.ggmlDequantize, split across the thread pool), on 1 and 2 threads. Blocks are random bytes
// with normal-range f16 scales (dequantization does the same work whatever the values). Reported: input
// MB/s (the quantized file bytes), output M values/s, and the time for the matrix; best and median of
// repeated calls over at least 1 s (0.3 s with --quick). --cpu-time (a busy machine): also the 1-thread
// rate from the process's CPU time, which other processes sharing the cores do not inflate.
import { addon } from '../src/native/addon.ts';
import { cpuInfo, getIsa, getThreads, setThreads } from '../src/native/cpu.ts';
import { GgmlType } from '../src/formats/gguf.ts';

// block values, block bytes, byte offsets of the f16 scale fields
const LAYOUT: Record<string, [number, number, number[]]> = {
  Q4_0: [32, 18, [0]], Q4_1: [32, 20, [0, 2]], Q5_0: [32, 22, [0]], Q5_1: [32, 24, [0, 2]], Q8_0: [32, 34, [0]],
  Q2_K: [256, 84, [80, 82]], Q3_K: [256, 110, [108]], Q4_K: [256, 144, [0, 2]], Q5_K: [256, 176, [0, 2]], Q6_K: [256, 210, [208]],
};

function arg(argv: string[], name: string): string | undefined {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
}

export async function run(argv: string[] = []): Promise<void> {
  const quick = argv.includes('--quick');
  const json = argv.includes('--json');
  const cpuTime = argv.includes('--cpu-time');
  const threadList = (arg(argv, '--threads') ?? '1,2').split(',').map(Number);
  const types = (arg(argv, '--types') ?? (quick ? 'Q4_K,Q6_K,Q8_0' : Object.keys(LAYOUT).join(','))).split(',');
  const minS = quick ? 0.3 : 1;
  const rows = 4096, cols = 11008, n = rows * cols;
  const before = getThreads();
  if (!json) console.log(`dequantize ${rows}×${cols} (${(n / 1e6).toFixed(1)} M values) to f32 — ${cpuInfo().brand}, isa ${getIsa()}`);
  if (!json) console.log('type   thr   in MB/s   out Mval/s   ms/matrix (best)   ms (median)');
  const out = new Float32Array(n);
  let seed = 12345;
  const rnd = () => ((seed = (seed * 1103515245 + 12345) >>> 0) >>> 8) & 0xff;
  try {
    for (const name of types) {
      const lay = LAYOUT[name];
      if (!lay) throw new Error(`unknown type ${name}; one of ${Object.keys(LAYOUT).join(', ')}`);
      const [bv, bb, f16] = lay;
      const nb = n / bv;
      const src = new Uint8Array(nb * bb);
      for (let i = 0; i < src.length; i++) src[i] = rnd();
      const dv = new DataView(src.buffer);
      for (let b = 0; b < nb; b++) for (const o of f16) dv.setUint16(b * bb + o, 0x2000 + (rnd() << 2), true); // ~1e-3 .. 0.06
      for (const th of threadList) {
        setThreads(th);
        addon.ggmlDequantize(GgmlType[name as keyof typeof GgmlType], src, out); // warm up (page faults on out)
        const times: number[] = [];
        let cpuBest = Infinity;
        const t0 = performance.now();
        while (performance.now() - t0 < minS * 1000 || times.length < 3) {
          const c = process.cpuUsage();
          const s = performance.now();
          addon.ggmlDequantize(GgmlType[name as keyof typeof GgmlType], src, out);
          times.push(performance.now() - s);
          const cu = process.cpuUsage(c);
          cpuBest = Math.min(cpuBest, (cu.user + cu.system) / 1e3);
        }
        times.sort((a, b) => a - b);
        const best = times[0], median = times[times.length >> 1];
        const cpuMs = cpuTime && th === 1 ? cpuBest : null;
        const row = { type: name, threads: th, in_mbps: src.length / 1e6 / (best / 1e3), out_mvals: n / 1e6 / (best / 1e3), best_ms: best, median_ms: median, cpu_ms: cpuMs, iters: times.length, isa: getIsa() };
        if (json) console.log(JSON.stringify(row));
        else console.log(`${name.padEnd(6)} ${String(th).padStart(3)} ${row.in_mbps.toFixed(0).padStart(9)} ${row.out_mvals.toFixed(0).padStart(12)} ${best.toFixed(1).padStart(18)} ${median.toFixed(1).padStart(13)}${cpuMs === null ? '' : `   cpu ${cpuMs.toFixed(1)} ms (${(src.length / 1e6 / (cpuMs / 1e3)).toFixed(0)} MB/s in)`}`);
      }
    }
  } finally {
    setThreads(before);
  }
}
