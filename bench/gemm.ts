// `npm run bench -- gemm [--quick] [--json] [--threads 1,2] [--cpu-time]`
//
// In one process run, side by side:
//   - the machine's peak: our own FMA loop (fp32, AVX-512 or AVX2 as the active ISA uses, and
//     bf16 vdpbf16ps where the CPU has AVX512_BF16), on 1 and 2 threads, each thread's rate
//     taken from its own CPU time (robust to other processes sharing the cores);
//   - memory bandwidth: a STREAM-style triad (a = b + s·c), which bounds the M=1 (decode) path;
//   - our GEMM, y (M,N) = x (M,K) · Wᵀ, W stored (N,K) as in checkpoints, at shapes from real
//     models: M ∈ {1, 16, 128, 512} × K×N ∈ {576×576, 576×1536, 768×3072, 2048×2048, 4096×4096},
//     for fp32 weights (unpacked, as OpenBLAS gets them; and pre-packed, as model weights are),
//     bf16 weights (unpacked / pre-packed, fp32 math) and bf16 compute (linear_bf16_bf16);
//   - OpenBLAS cblas_sgemm on the same shapes and thread counts, loaded at run time with dlopen
//     (Debian: `apt-get install libopenblas-dev`); with OPENBLAS_CORETYPE=SkylakeX on CPUs with
//     AVX-512 (OpenBLAS 0.3.21 mistakes Zen 4/5 for Haswell). Skipped, with a note, when absent.
// Timing runs in C++ (no JS call overhead); each figure is the best of repeated calls over at
// least 0.25 s (0.05 s with --quick), inputs random, packing done before the clock starts.
// --cpu-time (development on a busy machine): 1-thread figures from thread CPU time.
import { addon } from '../src/native/addon.ts';
import { cpuInfo, getIsa } from '../src/native/cpu.ts';

interface Timing {
  best: number;
  median: number;
  iters: number;
}

interface Row {
  shape: string;
  M: number;
  K: number;
  N: number;
  dtype: string;
  threads: number;
  gflops: number;
  median_gflops: number;
  peak_gflops: number | null;
  pct_peak: number | null;
  openblas_gflops: number | null;
  vs_openblas: number | null;
  gbps?: number;
  bw_bound_gbps?: number;
  pct_bw?: number;
  isa: string;
}

const DTYPES: { name: string; impl: string; wbytes: number; desc: string }[] = [
  { name: 'f32', impl: 'f32', wbytes: 4, desc: 'fp32 weights, unpacked (linear_f32)' },
  { name: 'f32_packed', impl: 'f32_packed', wbytes: 4, desc: 'fp32 weights, pre-packed (linear_packed)' },
  { name: 'bf16', impl: 'bf16', wbytes: 2, desc: 'bf16 weights, fp32 math (linear_bf16)' },
  { name: 'bf16_packed', impl: 'bf16_packed', wbytes: 2, desc: 'bf16 weights pre-packed, fp32 math' },
  { name: 'bf16c', impl: 'bf16c', wbytes: 2, desc: 'bf16 compute (linear_bf16_bf16)' },
];

function arg(argv: string[], name: string): string | undefined {
  const i = argv.indexOf(name);
  return i >= 0 ? argv[i + 1] : undefined;
}

function fmt(v: number | null | undefined, d = 1): string {
  return v === null || v === undefined || !Number.isFinite(v) ? '-' : v.toFixed(d);
}

export async function run(argv: string[] = []): Promise<void> {
  const quick = argv.includes('--quick');
  const json = argv.includes('--json');
  const cpuTime = argv.includes('--cpu-time');
  const threadList = (arg(argv, '--threads') ?? '1,2').split(',').map(Number);
  const minS = quick ? 0.05 : 0.25;
  const Ms = quick ? [1, 16, 128] : [1, 16, 128, 512];
  const KNs: [number, number][] = quick
    ? [[576, 576], [768, 3072], [2048, 2048]]
    : [[576, 576], [576, 1536], [768, 3072], [2048, 2048], [4096, 4096]];
  const dtypes = quick ? DTYPES.filter((d) => d.name !== 'bf16_packed') : DTYPES;

  const info = cpuInfo();
  const isa = getIsa();
  const fpKind = isa === 'avx512' ? 'avx512' : isa === 'avx2' ? 'avx2' : null;
  const log = (s: string): void => {
    if (!json) console.log(s);
  };
  log(`# GEMM benchmark: ${info.brand.trim()}, ${info.threads} hardware threads in the pool, ISA ${isa}` +
    ` (CPU supports: ${info.supportedIsas.join(', ')}; avx512_bf16: ${info.features.avx512bf16})`);

  // Peaks and bandwidth
  const peak: Record<number, { fp32: number | null; bf16: number | null; triad: number }> = {};
  for (const th of threadList) {
    const fp32 = fpKind ? (addon.benchPeak(fpKind, th, quick ? 0.1 : 0.3) as number | null) : null;
    const bf16 = addon.benchPeak('bf16', th, quick ? 0.1 : 0.3) as number | null;
    const triad = addon.benchTriad(th, quick ? 64 : 256, quick ? 3 : 5) as number;
    peak[th] = { fp32, bf16, triad };
    log(`# ${th} thread${th > 1 ? 's' : ' '}: fp32 peak (${fpKind ?? 'n/a'} FMA loop, per-thread CPU time) ${fmt(fp32)} GFLOP/s, ` +
      `bf16 peak (vdpbf16ps) ${bf16 === null ? 'n/a (no AVX512_BF16)' : fmt(bf16) + ' GFLOP/s'}, triad ${fmt(triad)} GB/s`);
    if (json)
      console.log(JSON.stringify({ kind: 'peak', threads: th, fp32_peak_gflops: fp32, bf16_peak_gflops: bf16, triad_gbps: triad, isa }));
  }

  const ob = addon.benchOpenBlasInfo() as { available: boolean; error?: string; config?: string; core?: string; coretype?: string | null };
  if (ob.available) log(`# OpenBLAS: ${ob.config} (core ${ob.core}${ob.coretype ? `, OPENBLAS_CORETYPE=${ob.coretype}` : ''})`);
  else log(`# OpenBLAS not found (${ob.error}); install it with \`apt-get install libopenblas-dev\` for that column`);
  if (cpuTime) log('# --cpu-time: 1-thread GEMM figures use thread CPU time (2-thread ones wall time)');
  log(`# GEMM figures: best of repeated calls over ${minS} s each`);

  const header = ['shape MxKxN', 'thr', 'dtype', 'GFLOP/s', '% peak', 'OpenBLAS', 'x OpenBLAS', 'GB/s W', '% triad'];
  const widths = [18, 4, 12, 9, 7, 9, 11, 8, 8];
  const line = (cells: string[]): string => cells.map((c, i) => (i < 3 ? c.padEnd(widths[i]) : c.padStart(widths[i]))).join(' ');
  log('');
  log(line(header));
  log(widths.map((w) => '-'.repeat(w)).join(' '));

  const rows: Row[] = [];
  for (const th of threadList) {
    for (const [K, N] of KNs) {
      for (const M of Ms) {
        const flop = 2 * M * N * K;
        const obT = ob.available ? (addon.benchGemm('openblas', M, N, K, th, minS, cpuTime) as Timing | null) : null;
        const obG = obT ? flop / obT.best / 1e9 : null;
        for (const d of dtypes) {
          const t = addon.benchGemm(d.impl, M, N, K, th, minS, cpuTime) as Timing;
          const g = flop / t.best / 1e9;
          const pk = d.name === 'bf16c' && peak[th].bf16 !== null ? peak[th].bf16 : peak[th].fp32;
          const cmpOb = d.name === 'f32' || d.name === 'f32_packed' ? obG : null;
          const row: Row = {
            shape: `${M}x${K}x${N}`,
            M,
            K,
            N,
            dtype: d.name,
            threads: th,
            gflops: +g.toFixed(2),
            median_gflops: +(flop / t.median / 1e9).toFixed(2),
            peak_gflops: pk === null ? null : +pk.toFixed(1),
            pct_peak: pk ? +((100 * g) / pk).toFixed(1) : null,
            openblas_gflops: cmpOb === null ? null : +cmpOb.toFixed(2),
            vs_openblas: cmpOb ? +(g / cmpOb).toFixed(3) : null,
            isa,
          };
          if (M === 1) {
            const gbps = (N * K * d.wbytes) / t.best / 1e9;
            row.gbps = +gbps.toFixed(2);
            row.bw_bound_gbps = +peak[th].triad.toFixed(2);
            row.pct_bw = +((100 * gbps) / peak[th].triad).toFixed(1);
          }
          rows.push(row);
          if (json) console.log(JSON.stringify(row));
          else
            log(line([
              row.shape, String(th), d.name, fmt(g), fmt(row.pct_peak), fmt(cmpOb), cmpOb ? fmt(row.vs_openblas, 2) : '-',
              fmt(row.gbps), fmt(row.pct_bw),
            ]));
        }
      }
    }
  }
  if (!json) {
    log('');
    log('dtypes: ' + dtypes.map((d) => `${d.name} = ${d.desc}`).join('; '));
    log('% peak: of the fp32 FMA-loop peak (bf16c: of the vdpbf16ps peak where the CPU has it).');
    log('GB/s W (M=1): weight bytes read per second; % triad: of the triad bandwidth (the M=1 bound).');
    log('Weights that fit in cache (576x576 fp32 = 1.3 MB) can exceed the DRAM bound.');
  }
}

if (process.argv[1] && process.argv[1].endsWith('gemm.ts')) await run(process.argv.slice(2));
