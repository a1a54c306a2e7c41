// Paged KV cache manager: fixed-size blocks in one native allocation (native/models/llama.h
// KvCache), reference counts, a free list, and an LRU list of cached-but-unreferenced blocks that
// the prefix cache can still hit and that are evicted (oldest first) when free blocks run out.
//
// Memory budget: LOOM_KV_MEMORY ("512MiB", "2GiB", "1.5GB", plain bytes) or the `memory` option;
// the number of blocks is budget / bytes-per-block. Allocation never throws for lack of space: it
// returns null and the scheduler queues (back-pressure). Every pool in the process also draws the blocks
// it holds (referenced by a sequence or a cache entry; cached-but-unreferenced blocks are free to take)
// from the process-wide budget of src/runtime/kv-budget.ts, so all decoder engines together (serving
// models, a GRPO job's generation engine) never hold more than LOOM_KV_MEMORY; `hold(n)` reserves n blocks
// ahead (a GRPO micro-batch) and `unhold()` gives back what is not in use.
//
// Storage dtype: LOOM_KV_DTYPE or the `dtype` option, 'f32' | 'bf16' | 'auto' (default 'auto': bf16
// when the model keeps its weights in bf16, else f32). A bf16 block takes half the bytes of an f32
// one, so the same budget holds twice the tokens; K/V are rounded to bf16 when written and the
// attention math stays fp32.
import type { DecoderConfig } from '../formats/hf-config.ts';
import { NativeKvCache, type KvDtype } from '../models/decoder/native-model.ts';
import { DEFAULT_KV_MEMORY, kvBudget, parseMemorySize } from './kv-budget.ts';

export type { KvDtype };
export type KvDtypeOption = KvDtype | 'auto';

export { DEFAULT_KV_MEMORY, parseMemorySize };
export const DEFAULT_BLOCK_SIZE = 16;

/**
 * The KV storage dtype: `opt` (the kvDtype option), else LOOM_KV_DTYPE, else 'auto'; 'auto' is bf16
 * when the model keeps its weights in bf16, else f32. Throws a RangeError naming the source on
 * anything but f32 / bf16 / auto (case-insensitive).
 */
export function resolveKvDtype(opt: string | undefined, weightDtype: 'F32' | 'BF16' = 'F32'): KvDtype {
  const fromEnv = opt === undefined;
  const raw = (fromEnv ? process.env.LOOM_KV_DTYPE : opt) ?? '';
  const v = String(raw).trim().toLowerCase();
  if (v === 'f32' || v === 'bf16') return v;
  if (v === 'auto' || (fromEnv && v === '')) return weightDtype === 'BF16' ? 'bf16' : 'f32';
  throw new RangeError(`invalid KV cache dtype ${JSON.stringify(raw)} ${fromEnv ? 'in LOOM_KV_DTYPE' : 'in the kvDtype option'}: expected f32, bf16 or auto`);
}

export interface KvCacheOptions {
  /** Budget in bytes or a size string; default LOOM_KV_MEMORY, else 512MiB. */
  memory?: number | string;
  /** Storage dtype; default LOOM_KV_DTYPE, else 'auto' (bf16 when `weightDtype` is BF16, else f32). */
  dtype?: KvDtypeOption;
  /** How the model keeps its weights ('auto' follows it); default F32. */
  weightDtype?: 'F32' | 'BF16';
  blockSize?: number;
  /** Hard cap on the number of blocks (tests). */
  maxBlocks?: number;
}

export class KvCacheManager {
  readonly native: NativeKvCache;
  readonly blockSize: number;
  readonly numBlocks: number;
  /** Storage dtype of K/V. */
  readonly dtype: KvDtype;
  private readonly refs: Int32Array;
  private readonly free: number[] = [];
  /** Blocks holding reusable content (prefix cache) with no references, oldest first. */
  private readonly evictable = new Map<number, true>();
  private readonly cachedFlag: Uint8Array;
  /** Called when a cached block is evicted to serve an allocation (the prefix cache forgets it). */
  onEvict: ((block: number) => void) | null = null;
  /** Called when allocation falls short: may release blocks (e.g. expired/LRU explicit entries); returns how many it freed. */
  reclaim: ((needed: number) => number) | null = null;
  /** bytes of one block */
  readonly blockBytes: number;
  /** blocks' worth of the process budget this pool holds (≥ the referenced blocks, ≥ floor) */
  private held = 0;
  /** blocks kept reserved even when unreferenced (hold()) */
  private floor = 0;

  constructor(config: DecoderConfig, opts: KvCacheOptions = {}) {
    this.blockSize = opts.blockSize ?? DEFAULT_BLOCK_SIZE;
    if (!Number.isInteger(this.blockSize) || this.blockSize < 1 || this.blockSize > 4096) throw new RangeError(`blockSize must be an integer in [1, 4096]`);
    this.dtype = resolveKvDtype(opts.dtype, opts.weightDtype);
    const budget = parseMemorySize(opts.memory ?? process.env.LOOM_KV_MEMORY ?? DEFAULT_KV_MEMORY);
    const per = NativeKvCache.blockBytes(config, this.blockSize, this.dtype);
    let n = Math.floor(budget / per);
    if (opts.maxBlocks !== undefined) n = Math.min(n, opts.maxBlocks);
    if (n < 1) throw new RangeError(`KV memory budget ${budget} bytes is smaller than one block (${per} bytes, ${this.dtype})`);
    this.numBlocks = n;
    this.blockBytes = per;
    this.native = new NativeKvCache(config, n, this.blockSize, this.dtype);
    this.refs = new Int32Array(n);
    this.cachedFlag = new Uint8Array(n);
    for (let i = n - 1; i >= 0; i--) this.free.push(i);
  }

  get bytes(): number {
    return this.native.bytes;
  }

  /** Token slots the cache holds (numBlocks × blockSize). */
  get capacityTokens(): number {
    return this.numBlocks * this.blockSize;
  }

  /** Blocks obtainable now (free + evictable). */
  available(): number {
    return this.free.length + this.evictable.size;
  }

  /** Blocks referenced by at least one sequence or cache entry. */
  used(): number {
    return this.numBlocks - this.available();
  }

  /** Blocks needed to hold `tokens` positions. */
  blocksFor(tokens: number): number {
    return Math.ceil(tokens / this.blockSize);
  }

  /** n fresh blocks (refcount 1) or null if they cannot be had (nothing is taken then). */
  allocate(n: number): number[] | null {
    if (n <= 0) return [];
    if (this.available() < n && this.reclaim) this.reclaim(n - this.available());
    if (this.available() < n) return null;
    if (!this.grant(this.used() + n)) return null;
    const out: number[] = [];
    for (let i = 0; i < n; i++) {
      let b = this.free.pop();
      if (b === undefined) {
        // evict the least recently used cached block
        const it = this.evictable.keys().next();
        b = it.value as number;
        this.evictable.delete(b);
        this.cachedFlag[b] = 0;
        this.onEvict?.(b);
      }
      this.refs[b] = 1;
      out.push(b);
    }
    return out;
  }

  /** One more reference to `b`; false (nothing taken) when an unreferenced block cannot be had from the budget. */
  retain(b: number): boolean {
    if (this.refs[b] === 0) {
      if (!this.grant(this.used() + 1)) return false;
      this.evictable.delete(b);
    }
    this.refs[b]++;
    return true;
  }

  /** Raises what this pool holds of the process budget to `blocks` (false: the budget cannot grant it now). */
  private grant(blocks: number): boolean {
    if (blocks <= this.held) return true;
    if (!kvBudget.reserve((blocks - this.held) * this.blockBytes)) return false;
    this.held = blocks;
    return true;
  }

  /** Gives back to the process budget what is neither referenced nor held by hold(). */
  private trim(): void {
    const keep = Math.max(this.used(), this.floor);
    if (this.held > keep) {
      kvBudget.release((this.held - keep) * this.blockBytes);
      this.held = keep;
    }
  }

  /** Reserves `blocks` from the process budget ahead of use (kept until unhold()); false when it cannot now. */
  hold(blocks: number): boolean {
    if (blocks > this.numBlocks) return false;
    if (!this.grant(blocks)) return false;
    this.floor = blocks;
    return true;
  }

  /** Ends hold(): gives back the reserved blocks not in use. */
  unhold(): void {
    this.floor = 0;
    this.trim();
  }

  /** Blocks the whole process budget could ever grant this pool. */
  budgetBlocks(): number {
    return Math.floor(kvBudget.capacity() / this.blockBytes);
  }

  /** Bytes of the process budget this pool holds now. */
  get heldBytes(): number {
    return this.held * this.blockBytes;
  }

  release(b: number): void {
    if (this.refs[b] <= 0) throw new Error(`kv cache: block ${b} released more often than retained`);
    if (--this.refs[b] === 0) {
      if (this.cachedFlag[b]) this.evictable.set(b, true);
      else this.free.push(b);
      this.trim();
    }
  }

  releaseAll(blocks: readonly number[]): void {
    for (const b of blocks) this.release(b);
  }

  refCount(b: number): number {
    return this.refs[b];
  }

  /** Marks a block as holding reusable prefix content (kept on the LRU list when unreferenced). */
  markCached(b: number): void {
    this.cachedFlag[b] = 1;
  }

  /** Forgets that a block is cached; an unreferenced one returns to the free list. */
  unmarkCached(b: number): void {
    if (!this.cachedFlag[b]) return;
    this.cachedFlag[b] = 0;
    if (this.refs[b] === 0 && this.evictable.delete(b)) this.free.push(b);
  }

  isCached(b: number): boolean {
    return this.cachedFlag[b] === 1;
  }

  /** Moves an evictable block to the most-recently-used end. */
  touch(b: number): void {
    if (this.evictable.delete(b)) this.evictable.set(b, true);
  }
}
