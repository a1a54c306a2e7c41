// CPU features, ISA dispatch and thread-pool control.
import { addon } from './addon.ts';

export type Isa = 'portable' | 'avx2' | 'avx512';

export interface CpuInfo {
  brand: string;
  features: Record<'avx2' | 'fma' | 'f16c' | 'avx512f' | 'avx512bw' | 'avx512vl' | 'avx512dq' | 'avx512bf16' | 'avx512vnni', boolean>;
  supportedIsas: Isa[];
  bestIsa: Isa;
  isa: Isa;
  threads: number;
}

export function cpuInfo(): CpuInfo {
  return addon.cpuInfo() as CpuInfo;
}

/** The ISA kernels dispatch to now (LOOM_ISA at start-up, else the best supported). */
export function getIsa(): Isa {
  return addon.getIsa() as Isa;
}

/** Forces a dispatch path; throws RangeError if the CPU lacks it. Process-wide. */
export function setIsa(isa: Isa): void {
  addon.setIsa(isa);
}

export function getThreads(): number {
  return addon.getThreads() as number;
}

/** Resizes the native thread pool (LOOM_THREADS at start-up, else one per core). */
export function setThreads(n: number): void {
  addon.setThreads(n);
}

/** Runs `fn` once per ISA this CPU supports, restoring the previous ISA afterwards. */
export async function forEachIsa(fn: (isa: Isa) => void | Promise<void>): Promise<void> {
  const prev = getIsa();
  try {
    for (const isa of cpuInfo().supportedIsas) {
      setIsa(isa);
      await fn(isa);
    }
  } finally {
    setIsa(prev);
  }
}
