// Prefix caching over the paged KV cache, two modes:
//
// automatic (vLLM-style): every full block of a sequence is identified by a hash chain
//   h_i = sha256(h_{i-1} ‖ tokens of block i), h_{-1} = sha256(adapter key). A new request walks its
//   prompt's chain and shares every block already present (refcount +1). Blocks nobody references
//   stay cached on the KV manager's LRU list until their space is needed.
//
// explicit (Anthropic cache_control-style): only prefixes that end at a request's breakpoints are
//   cached (at most 4 applied, each at least `minTokens` long). An entry holds references on the
//   blocks covering its prefix (the last one possibly partial) and lives for its TTL of inactivity
//   (default 5 minutes, or the marker's ttl such as "1h"); a hit refreshes it. A partial last block
//   is copied into a fresh block for the reader (copy-on-write), full blocks are shared.
//   Lookback: a request with breakpoints reads the longest cached entry that is a prefix of its
//   prompt up to its last breakpoint, wherever earlier requests put their markers; so a conversation
//   that moves its marker to the newest turn still reads the previous turn's prefix (Anthropic checks
//   earlier block boundaries the same way). Entries are indexed by the hash chain of their full
//   blocks, so the walk costs one lookup per block of the prompt.
//
// Both report, per request, tokens read from the cache and tokens written to it.
import { createHash } from 'node:crypto';
import type { KvCacheManager } from './kv-cache.ts';

export type CacheMode = 'none' | 'automatic' | 'explicit';

export interface CacheBreakpoint {
  /** Prefix length in tokens: the cached prefix is tokens[0, tokens). */
  tokens: number;
  /** Inactivity TTL in ms (default 5 minutes). */
  ttlMs?: number;
}

export const DEFAULT_TTL_MS = 5 * 60_000;
export const MAX_BREAKPOINTS = 4;

/** "5m", "1h", "30s", "300" (seconds) → ms. */
export function parseTtl(ttl: string | number | undefined): number {
  if (ttl === undefined || ttl === null) return DEFAULT_TTL_MS;
  if (typeof ttl === 'number') {
    if (!(ttl > 0)) throw new RangeError(`cache ttl must be positive (got ${ttl})`);
    return ttl * 1000;
  }
  const m = /^\s*([0-9]+(?:\.[0-9]+)?)\s*(ms|s|m|h|d)?\s*$/.exec(ttl);
  if (!m) throw new RangeError(`invalid cache ttl "${ttl}" (examples: 5m, 1h)`);
  const mult = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[m[2] ?? 's']!;
  return parseFloat(m[1]) * mult;
}

export interface PrefixMatch {
  /** Blocks (already retained for the caller) covering the first tokens of the sequence. */
  blocks: number[];
  /** A partially filled cached block whose first nSlots slots are copied into a fresh block (retained until released). */
  copy: { src: number; nSlots: number } | null;
  /** Prompt tokens whose KV comes from the cache. */
  tokens: number;
}

interface Entry {
  key: string;
  chain: string;
  length: number;
  blocks: number[];
  ttlMs: number;
  expires: number;
}

const EMPTY: PrefixMatch = { blocks: [], copy: null, tokens: 0 };

/** Hash chain of a token sequence's full blocks (memoized per sequence, extended on demand). */
export class BlockHasher {
  readonly hashes: string[] = [];
  private readonly root: string;
  constructor(
    readonly blockSize: number,
    adapterKey: string,
  ) {
    this.root = createHash('sha256').update('loom-kv\0' + adapterKey).digest('base64');
  }
  /** Hash of full block i of `tokens` (tokens must extend the ones hashed before). */
  get(tokens: readonly number[], i: number): string {
    while (this.hashes.length <= i) {
      const j = this.hashes.length;
      const prev = j === 0 ? this.root : this.hashes[j - 1];
      const buf = Int32Array.from(tokens.slice(j * this.blockSize, (j + 1) * this.blockSize));
      this.hashes.push(createHash('sha256').update(prev).update(new Uint8Array(buf.buffer)).digest('base64'));
    }
    return this.hashes[i];
  }
  /** Chain hash of the full blocks of tokens[0, n) (the root hash when n < one block). */
  chainKey(tokens: readonly number[], n: number): string {
    const full = Math.floor(n / this.blockSize);
    return full > 0 ? this.get(tokens, full - 1) : this.root;
  }
  /** Key of the prefix tokens[0, n) (full blocks' chain + the tail). */
  prefixKey(tokens: readonly number[], n: number): string {
    const full = Math.floor(n / this.blockSize);
    const base = this.chainKey(tokens, n);
    const tail = Int32Array.from(tokens.slice(full * this.blockSize, n));
    return createHash('sha256').update(base).update('tail').update(new Uint8Array(tail.buffer)).digest('base64') + ':' + n;
  }
}

export interface PrefixCacheOptions {
  /** Minimum prefix length (tokens) an explicit breakpoint needs to be cached. */
  minTokens?: number;
  now?: () => number;
}

export class PrefixCache {
  readonly kv: KvCacheManager;
  readonly minTokens: number;
  private readonly now: () => number;
  // automatic mode
  private readonly byHash = new Map<string, number>();
  private readonly hashOf = new Map<number, string>();
  // explicit mode (insertion order refreshed on use: first = least recently used)
  private readonly entries = new Map<string, Entry>();
  // explicit entries by the chain hash of their full blocks (root hash when shorter than a block)
  private readonly byChain = new Map<string, Set<Entry>>();
  // automatic mode, prompt tails: the block holding the last prompt tokens of a running sequence (whose
  // later slots its completion fills), by the prompt's prefixKey; valid while that sequence holds the block
  private readonly tails = new Map<string, { block: number; nSlots: number }>();
  private readonly tailOf = new Map<number, string>();

  constructor(kv: KvCacheManager, opts: PrefixCacheOptions = {}) {
    this.kv = kv;
    this.minTokens = opts.minTokens ?? 1024;
    this.now = opts.now ?? Date.now;
    kv.onEvict = (b) => {
      const h = this.hashOf.get(b);
      if (h !== undefined) {
        this.hashOf.delete(b);
        if (this.byHash.get(h) === b) this.byHash.delete(h);
      }
    };
    kv.reclaim = (needed) => this.reclaim(needed);
  }

  /** Cached blocks (automatic) and entries (explicit), for stats. */
  stats(): { automaticBlocks: number; explicitEntries: number } {
    return { automaticBlocks: this.byHash.size, explicitEntries: this.entries.size };
  }

  /** The explicit breakpoints that apply: at most 4 (first given), long enough, inside the prompt. */
  applicable(bps: readonly CacheBreakpoint[] | undefined, promptLen: number): CacheBreakpoint[] {
    if (!bps) return [];
    return bps
      .slice(0, MAX_BREAKPOINTS)
      .filter((b) => Number.isInteger(b.tokens) && b.tokens >= this.minTokens && b.tokens <= promptLen)
      .sort((a, b) => a.tokens - b.tokens);
  }

  // ---------------------------------------------------------------------------------------------
  // automatic
  // ---------------------------------------------------------------------------------------------
  /**
   * Shares the longest cached chain of full blocks of tokens[0, maxTokens). When every full block is shared
   * and a running sequence with the same prompt (`promptLen` tokens) has computed it, the rest up to maxTokens
   * is copied from that sequence's prompt tail (copy-on-write): n samples of one prompt compute its last
   * token once each, not its whole last block.
   */
  matchAutomatic(tokens: readonly number[], maxTokens: number, hasher: BlockHasher, promptLen = -1): PrefixMatch {
    const bs = this.kv.blockSize;
    const n = Math.floor(maxTokens / bs);
    const blocks: number[] = [];
    for (let i = 0; i < n; i++) {
      const b = this.byHash.get(hasher.get(tokens, i));
      if (b === undefined || !this.kv.retain(b)) break; // not cached, or the process KV budget is spent
      blocks.push(b);
    }
    const partial = maxTokens - n * bs;
    if (blocks.length === n && partial > 0 && promptLen > 0 && Math.floor((promptLen - 1) / bs) === n) {
      const t = this.tails.get(hasher.prefixKey(tokens, promptLen));
      if (t && t.nSlots >= partial && this.kv.retain(t.block))
        return { blocks, copy: { src: t.block, nSlots: partial }, tokens: maxTokens };
    }
    return blocks.length ? { blocks, copy: null, tokens: blocks.length * bs } : EMPTY;
  }

  /** Offers a running sequence's computed prompt tail (tokens[0, promptLen), block table `blocks`) to matching. */
  registerTail(tokens: readonly number[], promptLen: number, blocks: readonly number[], hasher: BlockHasher): void {
    const bs = this.kv.blockSize;
    const t = Math.floor((promptLen - 1) / bs);
    const b = blocks[t];
    if (b === undefined || b < 0 || this.tailOf.has(b)) return;
    const key = hasher.prefixKey(tokens, promptLen);
    if (this.tails.has(key)) return;
    this.tails.set(key, { block: b, nSlots: promptLen - t * bs });
    this.tailOf.set(b, key);
  }

  /** Withdraws the prompt tails held in `blocks` (their sequence is releasing them). */
  dropTails(blocks: readonly number[]): void {
    for (const b of blocks) {
      const key = this.tailOf.get(b);
      if (key === undefined) continue;
      this.tailOf.delete(b);
      if (this.tails.get(key)?.block === b) this.tails.delete(key);
    }
  }

  /**
   * Publishes the full blocks of a sequence computed so far (blocks [from, computed/bs)). Returns the
   * number of blocks processed (the caller's next `from`) and how many prompt tokens were newly written.
   */
  registerAutomatic(tokens: readonly number[], blocks: readonly number[], from: number, computed: number, promptLen: number, hasher: BlockHasher): { next: number; written: number } {
    const bs = this.kv.blockSize;
    const n = Math.floor(computed / bs);
    let written = 0;
    for (let i = from; i < n; i++) {
      const h = hasher.get(tokens, i);
      const b = blocks[i];
      if (this.byHash.has(h) || this.hashOf.has(b)) continue;
      this.byHash.set(h, b);
      this.hashOf.set(b, h);
      this.kv.markCached(b);
      written += Math.max(0, Math.min(bs, promptLen - i * bs));
    }
    return { next: Math.max(from, n), written };
  }

  // ---------------------------------------------------------------------------------------------
  // explicit
  // ---------------------------------------------------------------------------------------------
  private sweep(): void {
    const t = this.now();
    for (const e of [...this.entries.values()]) if (e.expires <= t) this.drop(e);
  }

  private drop(e: Entry): void {
    this.entries.delete(e.key);
    const set = this.byChain.get(e.chain);
    set?.delete(e);
    if (set && set.size === 0) this.byChain.delete(e.chain);
    this.kv.releaseAll(e.blocks);
  }

  /** Longest live entry that is a prefix of tokens[0, last breakpoint] (lookback), usable up to maxTokens (prompt length - 1). */
  matchExplicit(tokens: readonly number[], bps: readonly CacheBreakpoint[], maxTokens: number, hasher: BlockHasher): PrefixMatch {
    this.sweep();
    const bs = this.kv.blockSize;
    if (!bps.length || !this.entries.size) return EMPTY;
    const limit = Math.max(...bps.map((b) => b.tokens));
    // Walk the prompt's block chain from the last breakpoint back; the first chain with an entry
    // whose tail matches too is the longest cached prefix.
    let e: Entry | undefined;
    for (let full = Math.floor(limit / bs); full >= 0 && !e; full--) {
      const set = this.byChain.get(hasher.chainKey(tokens, full * bs));
      if (!set) continue;
      for (const c of set)
        if (c.length <= limit && (!e || c.length > e.length) && c.key === hasher.prefixKey(tokens, c.length)) e = c;
    }
    if (e) {
      e.expires = this.now() + e.ttlMs;
      this.entries.delete(e.key);
      this.entries.set(e.key, e);
      const use = Math.min(e.length, maxTokens);
      const full = Math.floor(use / bs);
      const blocks = e.blocks.slice(0, full);
      for (const b of blocks) this.kv.retain(b);
      const partial = use - full * bs;
      let copy: PrefixMatch['copy'] = null;
      if (partial > 0) {
        this.kv.retain(e.blocks[full]);
        copy = { src: e.blocks[full], nSlots: partial };
      }
      return { blocks, copy, tokens: use };
    }
    return EMPTY;
  }

  /**
   * Creates entries for the breakpoints the sequence has now computed past (or refreshes existing
   * ones). `done` tracks breakpoints already handled for this sequence. Returns the longest prefix
   * newly written (tokens), 0 if none.
   */
  registerExplicit(tokens: readonly number[], blocks: readonly number[], computed: number, bps: readonly CacheBreakpoint[], done: Set<number>, hasher: BlockHasher): number {
    this.sweep();
    const bs = this.kv.blockSize;
    let longest = 0;
    for (const bp of bps) {
      if (done.has(bp.tokens) || bp.tokens > computed) continue;
      done.add(bp.tokens);
      const key = hasher.prefixKey(tokens, bp.tokens);
      const ttlMs = bp.ttlMs ?? DEFAULT_TTL_MS;
      const old = this.entries.get(key);
      const chain = hasher.chainKey(tokens, bp.tokens);
      if (old) {
        old.ttlMs = Math.max(old.ttlMs, ttlMs);
        old.expires = Math.max(old.expires, this.now() + ttlMs);
        continue;
      }
      const eb = blocks.slice(0, Math.ceil(bp.tokens / bs));
      for (const b of eb) this.kv.retain(b);
      const entry: Entry = { key, chain, length: bp.tokens, blocks: eb, ttlMs, expires: this.now() + ttlMs };
      this.entries.set(key, entry);
      let set = this.byChain.get(chain);
      if (!set) this.byChain.set(chain, (set = new Set()));
      set.add(entry);
      longest = Math.max(longest, bp.tokens);
    }
    return longest;
  }

  /** Releases expired, then least recently used explicit entries until `needed` blocks came free. */
  reclaim(needed: number): number {
    const before = this.kv.available();
    this.sweep();
    for (const e of [...this.entries.values()]) {
      if (this.kv.available() - before >= needed) break;
      this.drop(e);
    }
    return this.kv.available() - before;
  }

  /** Drops everything (explicit entries and automatic hashes). */
  clear(): void {
    for (const e of [...this.entries.values()]) this.drop(e);
    for (const b of [...this.hashOf.keys()]) this.kv.unmarkCached(b);
    this.byHash.clear();
    this.hashOf.clear();
  }
}
