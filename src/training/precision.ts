// Compute precision of a training run (issue 17, "Speed"): which precision a run asks for, which one it gets on
// this CPU, and why (one line for the job's log). bf16 compute rounds the operands of the graph's matrix products
// to bf16 and multiplies them with AVX512_BF16's vdpbf16ps (fp32 accumulation); master weights, gradients and the
// AdamW state stay fp32. Without AVX512_BF16 the same rounding is emulated with fp32 FMAs, which is slower than
// plain fp32: a run never gets it unless LOOM_TRAIN_BF16_EMULATED=1 forces it (tests, CI checking the math).
import { cpuInfo, type CpuInfo } from '../native/cpu.ts';

export type Precision = 'fp32' | 'bf16';
/** What a run may ask for: 'auto' (the default) is bf16 where the CPU has AVX512_BF16, fp32 elsewhere. */
export type PrecisionOption = Precision | 'auto';
export const PRECISION_OPTIONS: readonly PrecisionOption[] = ['auto', 'fp32', 'bf16'];

/** The environment switch that lets bf16 run on the emulated path (tests only: slower than fp32). */
export const BF16_EMULATED_ENV = 'LOOM_TRAIN_BF16_EMULATED';

/** Whether bf16 products run natively now: the CPU has AVX512_BF16 and the AVX-512 kernels are the active ones. */
export function nativeBf16(cpu: Pick<CpuInfo, 'features' | 'isa'> = cpuInfo()): boolean {
  return cpu.features.avx512bf16 && cpu.isa === 'avx512';
}

/** The precision a run gets for what it asked, and the log line that says so. */
export function resolvePrecision(
  requested: PrecisionOption,
  cpu: Pick<CpuInfo, 'features' | 'isa'> = cpuInfo(),
  env: Record<string, string | undefined> = process.env,
): { precision: Precision; reason: string } {
  if (requested === 'fp32') return { precision: 'fp32', reason: 'precision fp32 (as requested)' };
  if (nativeBf16(cpu)) return { precision: 'bf16', reason: `precision bf16 (${requested}: AVX512_BF16 vdpbf16ps products, fp32 accumulation and master weights)` };
  if (env[BF16_EMULATED_ENV] === '1')
    return { precision: 'bf16', reason: `precision bf16 on the emulated path (${BF16_EMULATED_ENV}=1; slower than fp32, for tests)` };
  const why = cpu.features.avx512bf16 ? `the active ISA is ${cpu.isa}` : 'this CPU has no AVX512_BF16';
  return requested === 'auto'
    ? { precision: 'fp32', reason: `precision fp32 (auto: ${why})` }
    : { precision: 'fp32', reason: `precision bf16 requested, but ${why}: falling back to fp32 (emulated bf16 is slower)` };
}
