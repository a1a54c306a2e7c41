// Compute precision of a training run (issue 17, "Speed"): which precision a run asks for, which one it gets on
// this CPU, and why (one line for the job's log). bf16 compute rounds the operands of the graph's matrix products
// to bf16 and multiplies them with AVX512_BF16's vdpbf16ps (fp32 accumulation); master weights, gradients and the
// AdamW state stay fp32. Without AVX512_BF16 the same rounding is emulated with fp32 FMAs, which is slower than
// plain fp32: a run never gets it unless LOOM_TRAIN_BF16_EMULATED=1 forces it (tests, CI checking the math).
// vdpbf16ps is not faster everywhere: AMD Zen 4/5 issue two per cycle (twice the FMA rate), but on an Intel Xeon
// (Sapphire Rapids) the same kernel measured 0.55x the fp32 one, so 'auto' times both once before it picks bf16.
import { cpuInfo, getThreads, type CpuInfo } from '../native/cpu.ts';
import { sgemm } from '../native/gemm.ts';

export type Precision = 'fp32' | 'bf16';
/** What a run may ask for: 'auto' (the default) is bf16 where the CPU has AVX512_BF16 and its products are faster
 * there than fp32's, fp32 elsewhere. */
export type PrecisionOption = Precision | 'auto';
export const PRECISION_OPTIONS: readonly PrecisionOption[] = ['auto', 'fp32', 'bf16'];
/** What a run or a training job gets when it names no precision. */
export const DEFAULT_PRECISION: PrecisionOption = 'auto';

/** The environment switch that lets bf16 run on the emulated path (tests only: slower than fp32). */
export const BF16_EMULATED_ENV = 'LOOM_TRAIN_BF16_EMULATED';

/** 'auto' takes bf16 when its products run at least this much faster than fp32's. */
export const AUTO_BF16_MIN_SPEEDUP = 1.1;

/** Whether bf16 products run natively now: the CPU has AVX512_BF16 and the AVX-512 kernels are the active ones. */
export function nativeBf16(cpu: Pick<CpuInfo, 'features' | 'isa'> = cpuInfo()): boolean {
  return cpu.features.avx512bf16 && cpu.isa === 'avx512';
}

/** A measured speedup at or above this and below AUTO_BF16_MIN_SPEEDUP is measured again (settledSpeedup). */
export const PROBE_INCONCLUSIVE_FROM = 0.8;

/** The speedup `measure` reads, measured again (up to `retries` times, `pauseMs` apart) while it reads near 1, the
 * best reading kept. Noise only pulls the ratio toward 1: a pool thread that loses its core for a time slice adds
 * the same wait to both products (a quality run's probe on the 2-core Zen 5 once read 1.03x, where the same probe
 * reads 1.57-2.11x there quiet, and the run trained in fp32 at about half the steps). A clear reading either way
 * (Sapphire Rapids' 0.55x, Zen 5's 1.9x) stands at once. */
export async function settledSpeedup(measure: () => Promise<number>, retries = 3, pauseMs = 50): Promise<number> {
  let s = await measure();
  for (let i = 0; i < retries && s >= PROBE_INCONCLUSIVE_FROM && s < AUTO_BF16_MIN_SPEEDUP; i++) {
    await new Promise((r) => setTimeout(r, pauseMs));
    s = Math.max(s, await measure());
  }
  return s;
}

/** bf16-compute over fp32 throughput of one encoder-layer-sized product (256 x 768 x 768, y = x·Wᵀ), best of 5 of
 * each, alternating, on the pool's threads (a few milliseconds, off the event loop). */
async function timeProducts(): Promise<number> {
  const M = 256, N = 768, K = 768;
  const A = Float32Array.from({ length: M * K }, (_, i) => Math.sin(i));
  const B = Float32Array.from({ length: N * K }, (_, i) => Math.cos(i));
  const C = new Float32Array(M * N);
  const best = { fp32: Infinity, bf16: Infinity };
  for (let r = 0; r < 6; r++)
    for (const compute of ['fp32', 'bf16'] as const) {
      const t0 = performance.now();
      await sgemm({ tb: true, M, N, K, A, B, C, compute: compute === 'bf16' ? 'bf16' : 'f32' });
      if (r > 0) best[compute] = Math.min(best[compute], performance.now() - t0);
    }
  return best.fp32 / best.bf16;
}

/** the measured speedup by pool size (a run may set its own thread count); a failed probe is not kept */
const probed = new Map<number, Promise<number>>();
/** bf16-compute over fp32 throughput (timeProducts, settledSpeedup): measured once per process and thread count. */
export function bf16Speedup(): Promise<number> {
  const threads = getThreads();
  const known = probed.get(threads);
  if (known) return known;
  const p = settledSpeedup(timeProducts);
  probed.set(threads, p);
  p.catch(() => { probed.delete(threads); });
  return p;
}

/** The precision a run gets for what it asked, and the log line that says so. */
export async function resolvePrecision(
  requested: PrecisionOption,
  cpu: Pick<CpuInfo, 'features' | 'isa'> = cpuInfo(),
  env: Record<string, string | undefined> = process.env,
  speedup: () => Promise<number> = bf16Speedup,
): Promise<{ precision: Precision; reason: string }> {
  if (requested === 'fp32') return { precision: 'fp32', reason: 'precision fp32 (as requested)' };
  const how = 'AVX512_BF16 vdpbf16ps products, fp32 accumulation and master weights';
  if (nativeBf16(cpu)) {
    if (requested === 'bf16') return { precision: 'bf16', reason: `precision bf16 (as requested: ${how})` };
    const s = await speedup();
    return s >= AUTO_BF16_MIN_SPEEDUP
      ? { precision: 'bf16', reason: `precision bf16 (auto: ${how}; ${s.toFixed(2)}x the fp32 products here)` }
      : { precision: 'fp32', reason: `precision fp32 (auto: bf16 products measured ${s.toFixed(2)}x fp32 here)` };
  }
  if (env[BF16_EMULATED_ENV] === '1')
    return { precision: 'bf16', reason: `precision bf16, emulated (${BF16_EMULATED_ENV}=1; slower than fp32: tests)` };
  const why = cpu.features.avx512bf16 ? `the active ISA is ${cpu.isa}` : 'this CPU has no AVX512_BF16';
  return requested === 'auto'
    ? { precision: 'fp32', reason: `precision fp32 (auto: ${why})` }
    : {
      precision: 'fp32', reason: `precision bf16 requested, but ${why}: falling back to fp32 (emulated bf16 is slower)`,
    };
}
