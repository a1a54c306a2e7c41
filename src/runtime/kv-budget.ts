// The process-wide KV-cache budget (native/napi/kv_budget_napi.cc): every decoder engine in the process
// (the serving runtime's models on the main thread, a GRPO job's generation engine in a training worker)
// reserves the bytes of the KV blocks it holds from one accountant, so together they never hold more than
// LOOM_KV_MEMORY (default 512MiB). A pool may be sized up to the whole budget; what it may *hold* is what the
// budget grants at the time (src/runtime/kv-cache.ts: blocks referenced by a sequence or a cache entry).
import { addon } from '../native/addon.ts';
import { parseMemorySize } from './memory-size.ts';

export { parseMemorySize };

export const DEFAULT_KV_MEMORY = 512 * 1024 ** 2;

export interface KvBudgetStats {
  /** bytes the process may hold in KV blocks */
  capacity: number;
  /** bytes held now */
  used: number;
  /** the most held at once since the last resetKvBudgetPeak() */
  peak: number;
}

/** The accountant, its capacity set from LOOM_KV_MEMORY on first use in the process. */
function ensure(): void {
  if ((addon.kvBudgetCapacity() as number) > 0) return;
  addon.kvBudgetCapacity(parseMemorySize(process.env.LOOM_KV_MEMORY ?? DEFAULT_KV_MEMORY));
}

export const kvBudget = {
  capacity(): number {
    ensure();
    return addon.kvBudgetCapacity() as number;
  },
  /** Sets the process's capacity (the server's configuration, tests). */
  setCapacity(bytes: number | string): void {
    addon.kvBudgetCapacity(parseMemorySize(bytes));
  },
  /** all of `bytes` or nothing */
  reserve(bytes: number): boolean {
    ensure();
    return addon.kvBudgetReserve(bytes) as boolean;
  },
  release(bytes: number): void {
    if (bytes > 0) addon.kvBudgetRelease(bytes);
  },
  stats(): KvBudgetStats {
    ensure();
    return addon.kvBudgetStats() as KvBudgetStats;
  },
  resetPeak(): void {
    addon.kvBudgetResetPeak();
  },
};
