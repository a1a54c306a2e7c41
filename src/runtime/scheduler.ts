// Continuous batching over the native decoder. Requests join and leave between steps; every step
// is ONE async native call (never blocking the event loop) that mixes one decode token from every
// running sequence with prefill chunks of newly admitted ones, bounded by a token budget.
//
// Memory: a sequence's KV lives in paged blocks (kv-cache.ts). A waiting request is admitted when
// blocks for its whole prompt are available (after prefix-cache reuse); decode blocks are taken one
// at a time. When none is left for a running sequence's next token, the most recently admitted
// sequence is preempted (its blocks freed, recomputed later: vLLM's recompute preemption); the
// queue itself has a maximum depth beyond which submit() throws OverloadedError (HTTP 529).
// Cancellation (AbortSignal) frees the slot and its blocks at once.
// Sliding-window models (Mistral): once every later query of a sequence is past a block (the block
// ends before position computed - window + 1), the block is released and its table entry becomes
// -1, so a long generation holds about window / blockSize blocks instead of its whole length.
import type { DecoderConfig } from '../formats/hf-config.ts';
import type { NativeDecoder, StepBatch } from '../models/decoder/native-model.ts';
import type { KvCacheManager, KvDtype } from './kv-cache.ts';
import { BlockHasher, type CacheBreakpoint, type CacheMode, type PrefixCache } from './prefix-cache.ts';

export class OverloadedError extends Error {
  override name = 'OverloadedError';
  readonly code = 'overloaded';
  readonly status = 529;
}

export class AbortError extends Error {
  override name = 'AbortError';
  readonly code = 'aborted';
  /** For a sequence aborted after submit: what it had processed (prompt positions with KV, tokens generated). */
  stats?: SeqStats;
}

export class RequestTooLargeError extends Error {
  override name = 'RequestTooLargeError';
  readonly code = 'context_length_exceeded';
  readonly status = 400;
}

/** What the scheduler asks of the caller for each sequence. */
export interface SeqHandler {
  /**
   * Called with the logits (V) of the sequence's last position; returns the next token, or null to
   * finish. The view is only valid during the call. On the first call (the prompt is processed)
   * `prompt` carries its cache accounting (generatedTokens 0). `argmax` is argmaxF32(logits), computed by the
   * step on the native threads (the index of the first largest logit, -1 when none is above -Infinity).
   */
  next(logits: Float32Array, prompt?: SeqStats, argmax?: number): number | null;
  /** Called once when the sequence ends (finish), with cache accounting. */
  done(info: SeqStats): void;
  /** Called once on error / abort instead of done. */
  fail(err: Error): void;
}

export interface SeqStats {
  promptTokens: number;
  generatedTokens: number;
  cacheReadTokens: number;
  cacheWriteTokens: number;
}

export interface SubmitOptions {
  prompt: readonly number[];
  /** Upper bound on generated tokens (the caller stops earlier by returning null). */
  maxTokens: number;
  adapter?: number;
  cache?: { mode: CacheMode; breakpoints?: CacheBreakpoint[] };
  signal?: AbortSignal;
  handler: SeqHandler;
}

interface Seq {
  id: number;
  tokens: number[];
  promptLen: number;
  maxTokens: number;
  generated: number;
  computed: number; // positions with KV in the cache
  blocks: number[]; // -1: released (out of the sliding window)
  /** blocks [0, windowFreed) were checked for release (sliding-window models) */
  windowFreed: number;
  adapter: number;
  mode: CacheMode;
  bps: CacheBreakpoint[];
  bpDone: Set<number>;
  hasher: BlockHasher;
  autoFrom: number;
  /** automatic mode: the computed prompt's tail block was offered to the prefix cache (registerTail) */
  tailOffered: boolean;
  pendingCopy: { src: number; dst: number; nSlots: number } | null;
  cacheRead: number;
  cacheWrite: number;
  cacheAccounted: boolean; // read/write counted once (preemption recomputes do not count again)
  handler: SeqHandler;
  signal?: AbortSignal;
  onAbort?: () => void;
  finished: boolean;
  admitOrder: number;
}

export interface SchedulerOptions {
  /** Max tokens per step (decode tokens + prefill chunks). Default 512. */
  maxStepTokens?: number;
  /** Max sequences running at once. Default 64. */
  maxRunning?: number;
  /** Max requests waiting; beyond it submit() throws OverloadedError. Default 256. */
  maxQueue?: number;
}

export interface SchedulerStats {
  running: number;
  waiting: number;
  steps: number;
  kvBlocksUsed: number;
  kvBlocksTotal: number;
  /** KV storage dtype and token slots (kvBlocksTotal × block size). */
  kvDtype: KvDtype;
  kvCapacityTokens: number;
}

export class Scheduler {
  readonly model: NativeDecoder;
  readonly kv: KvCacheManager;
  readonly prefix: PrefixCache;
  readonly config: DecoderConfig;
  readonly maxStepTokens: number;
  readonly maxRunning: number;
  readonly maxQueue: number;
  private readonly waiting: Seq[] = [];
  private readonly running: Seq[] = [];
  private readonly exclusive: (() => Promise<void>)[] = [];
  private looping = false;
  private nextId = 1;
  private admitCounter = 0;
  private steps = 0;
  private out = new Float32Array(0);
  private stepWaiters: (() => void)[] = [];

  constructor(model: NativeDecoder, kv: KvCacheManager, prefix: PrefixCache, opts: SchedulerOptions = {}) {
    this.model = model;
    this.kv = kv;
    this.prefix = prefix;
    this.config = model.config;
    this.maxStepTokens = opts.maxStepTokens ?? 512;
    this.maxRunning = opts.maxRunning ?? 64;
    this.maxQueue = opts.maxQueue ?? 256;
  }

  stats(): SchedulerStats {
    return { running: this.running.length, waiting: this.waiting.length, steps: this.steps, kvBlocksUsed: this.kv.used(), kvBlocksTotal: this.kv.numBlocks, kvDtype: this.kv.dtype, kvCapacityTokens: this.kv.capacityTokens };
  }

  /** Queues a sequence. Throws OverloadedError when the queue is full, RequestTooLargeError when it can never fit. */
  submit(o: SubmitOptions): void {
    const ctx = this.config.maxPositionEmbeddings;
    if (o.prompt.length === 0) throw new RequestTooLargeError('prompt is empty');
    if (o.prompt.length >= ctx) throw new RequestTooLargeError(`prompt has ${o.prompt.length} tokens; the model's context is ${ctx}`);
    if (this.kv.blocksFor(o.prompt.length + 1) > Math.min(this.kv.numBlocks, this.kv.budgetBlocks()))
      throw new RequestTooLargeError(`prompt of ${o.prompt.length} tokens does not fit the KV cache (${this.kv.capacityTokens} tokens in ${this.kv.dtype}; raise LOOM_KV_MEMORY${this.kv.dtype === 'f32' ? ' or set LOOM_KV_DTYPE=bf16' : ''})`);
    if (this.waiting.length >= this.maxQueue) throw new OverloadedError(`decoder queue is full (${this.maxQueue} waiting)`);
    if (o.signal?.aborted) throw new AbortError('request aborted');
    const mode = o.cache?.mode ?? 'none';
    const seq: Seq = {
      id: this.nextId++,
      tokens: [...o.prompt],
      promptLen: o.prompt.length,
      maxTokens: Math.max(0, Math.min(o.maxTokens, ctx - o.prompt.length)),
      generated: 0,
      computed: 0,
      blocks: [],
      windowFreed: 0,
      adapter: o.adapter ?? -1,
      mode,
      bps: mode === 'explicit' ? this.prefix.applicable(o.cache?.breakpoints, o.prompt.length) : [],
      bpDone: new Set(),
      hasher: new BlockHasher(this.kv.blockSize, String(o.adapter ?? -1)),
      autoFrom: 0,
      tailOffered: false,
      pendingCopy: null,
      cacheRead: 0,
      cacheWrite: 0,
      cacheAccounted: false,
      handler: o.handler,
      signal: o.signal,
      finished: false,
      admitOrder: 0,
    };
    if (o.signal) {
      seq.onAbort = () => this.abort(seq);
      o.signal.addEventListener('abort', seq.onAbort, { once: true });
    }
    if (seq.maxTokens === 0) {
      // nothing to generate: finish without touching the model
      queueMicrotask(() => this.finish(seq));
      return;
    }
    this.waiting.push(seq);
    this.kick();
  }

  /** Fails every queued and running sequence (model unload / shutdown). */
  close(): void {
    this.failAll(new AbortError('the model was unloaded'));
  }

  /** Resolves when the next step has run, or after `ms` when none runs (for callers waiting on blocks). */
  progress(ms = 20): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        resolve();
      };
      const timer = setTimeout(() => {
        const i = this.stepWaiters.indexOf(done);
        if (i >= 0) this.stepWaiters.splice(i, 1);
        resolve();
      }, ms);
      this.stepWaiters.push(done);
    });
  }

  /** Runs `fn` between steps with the model to itself (embeddings, maintenance). */
  runExclusive<T>(fn: () => Promise<T>): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      this.exclusive.push(() => fn().then(resolve, reject));
      this.kick();
    });
  }

  private kick(): void {
    if (this.looping) return;
    this.looping = true;
    setImmediate(() => {
      this.loop().catch((e) => { this.failAll(e as Error); return true; }).then((stalled) => {
        this.looping = false;
        if (!(this.waiting.length || this.running.length || this.exclusive.length)) return;
        // stalled: blocks come back when another engine of the process frees them (the shared KV budget)
        // or a cache entry expires; look again shortly instead of spinning
        if (stalled) setTimeout(() => this.kick(), 5);
        else this.kick();
      });
    });
  }

  /** Runs steps while there is work; true when it stopped because nothing could be scheduled. */
  private async loop(): Promise<boolean> {
    for (;;) {
      while (this.exclusive.length) await this.exclusive.shift()!();
      if (!this.waiting.length && !this.running.length) return false;
      const progressed = await this.stepOnce();
      if (!progressed) return true; // nothing could be scheduled (waits for blocks freed by an abort/expiry)
    }
  }

  private abort(seq: Seq): void {
    if (seq.finished) return;
    seq.finished = true;
    this.detach(seq);
    const e = new AbortError('request aborted');
    // prompt tokens count once prefilled (cache reads included); a preempted sequence recomputes, never bills twice
    const prompt = seq.generated > 0 ? seq.promptLen : Math.min(seq.computed, seq.promptLen);
    e.stats = { promptTokens: Math.max(prompt, seq.cacheRead + seq.cacheWrite), generatedTokens: seq.generated, cacheReadTokens: seq.cacheRead, cacheWriteTokens: seq.cacheWrite };
    seq.handler.fail(e);
  }

  private detach(seq: Seq): void {
    let i = this.waiting.indexOf(seq);
    if (i >= 0) this.waiting.splice(i, 1);
    i = this.running.indexOf(seq);
    if (i >= 0) this.running.splice(i, 1);
    this.freeSeq(seq);
    if (seq.signal && seq.onAbort) seq.signal.removeEventListener('abort', seq.onAbort);
  }

  private freeSeq(seq: Seq): void {
    if (seq.tailOffered) this.prefix.dropTails(seq.blocks);
    seq.tailOffered = false;
    this.kv.releaseAll(seq.blocks.filter((b) => b >= 0));
    seq.blocks = [];
    seq.windowFreed = 0;
    if (seq.pendingCopy) {
      this.kv.release(seq.pendingCopy.src);
      seq.pendingCopy = null;
    }
  }

  private finish(seq: Seq): void {
    if (seq.finished) return;
    seq.finished = true;
    this.detach(seq);
    seq.handler.done({ promptTokens: seq.promptLen, generatedTokens: seq.generated, cacheReadTokens: seq.cacheRead, cacheWriteTokens: seq.cacheWrite });
  }

  private failAll(e: Error): void {
    for (const s of [...this.running, ...this.waiting]) {
      if (s.finished) continue;
      s.finished = true;
      this.detach(s);
      s.handler.fail(e);
    }
  }

  /** Preempts the most recently admitted running sequence other than `keep`; false if none. */
  private preempt(keep: Seq): boolean {
    let victim: Seq | null = null;
    for (const s of this.running) if (s !== keep && (!victim || s.admitOrder > victim.admitOrder)) victim = s;
    if (!victim) return false;
    this.running.splice(this.running.indexOf(victim), 1);
    this.freeSeq(victim);
    victim.computed = 0;
    victim.autoFrom = 0;
    victim.bpDone = new Set();
    this.waiting.unshift(victim);
    return true;
  }

  /**
   * Sliding-window models: releases the blocks no later query of `q` can see (they end before
   * computed - window + 1, the first key the next token sees). Nothing is released while an explicit
   * breakpoint is still to be published (its entry takes every block up to it); automatic mode
   * releases only blocks already offered to the cache, which keeps them on its LRU list.
   */
  private releaseOutOfWindow(q: Seq): void {
    const W = this.config.slidingWindow ?? 0;
    if (!(W > 0) || q.finished) return;
    const bs = this.kv.blockSize;
    let upTo = Math.floor(Math.max(0, q.computed - W + 1) / bs);
    // an explicit breakpoint not yet published needs every block up to it
    for (const bp of q.bps) if (!q.bpDone.has(bp.tokens)) return;
    if (q.mode === 'automatic') upTo = Math.min(upTo, q.autoFrom);
    for (let i = q.windowFreed; i < upTo; i++) {
      if (q.tailOffered) this.prefix.dropTails([q.blocks[i]]);
      if (q.blocks[i] >= 0) this.kv.release(q.blocks[i]);
      q.blocks[i] = -1;
    }
    q.windowFreed = Math.max(q.windowFreed, upTo);
  }

  /** Tries to admit the head of the queue: prefix-cache match + blocks for the whole prompt. */
  private admit(seq: Seq): boolean {
    const len = seq.tokens.length;
    const maxReuse = len - 1; // the last token is always computed (its logits are needed)
    let m = { blocks: [] as number[], copy: null as { src: number; nSlots: number } | null, tokens: 0 };
    if (seq.mode === 'automatic') m = this.prefix.matchAutomatic(seq.tokens, maxReuse, seq.hasher, seq.promptLen);
    else if (seq.mode === 'explicit' && seq.bps.length) m = this.prefix.matchExplicit(seq.tokens, seq.bps, maxReuse, seq.hasher);
    const need = this.kv.blocksFor(len) - m.blocks.length;
    const fresh = this.kv.allocate(need);
    if (!fresh) {
      this.kv.releaseAll(m.blocks);
      if (m.copy) this.kv.release(m.copy.src);
      return false;
    }
    seq.blocks = [...m.blocks, ...fresh];
    seq.computed = m.tokens;
    if (m.copy) seq.pendingCopy = { src: m.copy.src, dst: fresh[0], nSlots: m.copy.nSlots };
    if (seq.mode === 'automatic') seq.autoFrom = m.blocks.length;
    if (!seq.cacheAccounted) seq.cacheRead = m.tokens;
    seq.admitOrder = ++this.admitCounter;
    return true;
  }

  private async stepOnce(): Promise<boolean> {
    const bs = this.kv.blockSize;
    const plan: { seq: Seq; n: number }[] = [];
    let budget = this.maxStepTokens;
    // sequences whose adapter was unloaded while they ran end with an error
    for (const seq of [...this.running, ...this.waiting]) {
      if (seq.adapter >= 0 && !this.model.adapters.has(seq.adapter) && !seq.finished) {
        seq.finished = true;
        this.detach(seq);
        seq.handler.fail(new Error('the LoRA adapter of this request was unloaded'));
      }
    }
    // 1. decode tokens of running sequences (one each), taking a block when a new one starts
    for (const seq of [...this.running]) {
      if (seq.finished || !this.running.includes(seq)) continue;
      const remaining = seq.tokens.length - seq.computed;
      if (remaining !== 1) continue;
      if (seq.computed >= seq.blocks.length * bs) {
        let b = this.kv.allocate(1);
        while (!b && this.preempt(seq)) b = this.kv.allocate(1);
        if (!b) {
          // cannot even run alone: give up on this sequence rather than deadlock
          this.finish(seq);
          continue;
        }
        seq.blocks.push(b[0]);
      }
      plan.push({ seq, n: 1 });
      budget--;
    }
    // drop plans of sequences preempted while planning
    for (let i = plan.length - 1; i >= 0; i--) if (!this.running.includes(plan[i].seq)) plan.splice(i, 1);
    // 2. prefill chunks of running sequences still in their prompt
    for (const seq of this.running) {
      if (budget <= 0) break;
      const remaining = seq.tokens.length - seq.computed;
      if (remaining <= 1 && plan.some((p) => p.seq === seq)) continue;
      if (remaining < 1) continue;
      if (plan.some((p) => p.seq === seq)) continue;
      const n = Math.min(remaining, budget);
      plan.push({ seq, n });
      budget -= n;
    }
    // 3. admit waiting sequences while there is budget and room
    while (budget > 0 && this.waiting.length && this.running.length < this.maxRunning) {
      const seq = this.waiting[0];
      if (!this.admit(seq)) break;
      this.waiting.shift();
      this.running.push(seq);
      const n = Math.min(seq.tokens.length - seq.computed, budget);
      plan.push({ seq, n });
      budget -= n;
    }
    if (!plan.length) return false;
    // sequences with the same adapter next to each other: the graph applies each adapter once per run of rows
    if (plan.some((p) => p.seq.adapter >= 0)) plan.sort((a, b) => a.seq.adapter - b.seq.adapter);

    // build the batch
    const T = plan.reduce((a, p) => a + p.n, 0);
    const S = plan.length;
    const tokens = new Int32Array(T);
    const positions = new Int32Array(T);
    const seqLens = new Int32Array(S);
    const tableOffsets = new Int32Array(S + 1);
    const adapters = new Int32Array(S);
    const outRowsArr: number[] = [];
    const outSeqs: Seq[] = [];
    const copies: number[] = [];
    let tableLen = 0;
    for (const p of plan) tableLen += p.seq.blocks.length;
    const tables = new Int32Array(tableLen);
    let row = 0;
    let to = 0;
    plan.forEach((p, s) => {
      const q = p.seq;
      for (let i = 0; i < p.n; i++) {
        tokens[row + i] = q.tokens[q.computed + i];
        positions[row + i] = q.computed + i;
      }
      seqLens[s] = p.n;
      tableOffsets[s] = to;
      tables.set(q.blocks, to);
      to += q.blocks.length;
      adapters[s] = q.adapter;
      if (q.pendingCopy) copies.push(q.pendingCopy.src, q.pendingCopy.dst, q.pendingCopy.nSlots);
      if (q.computed + p.n === q.tokens.length) {
        outRowsArr.push(row + p.n - 1);
        outSeqs.push(q);
      }
      row += p.n;
    });
    tableOffsets[S] = to;
    const V = this.config.vocabSize;
    if (this.out.length < outRowsArr.length * V) this.out = new Float32Array(Math.max(outRowsArr.length, 8) * V);
    const best = new Int32Array(outRowsArr.length).fill(-2);  // -2: not computed (an addon without it)
    const batch: StepBatch = {
      tokens, positions, seqLens, tables, tableOffsets, adapters,
      outRows: Int32Array.from(outRowsArr),
      copies: copies.length ? Int32Array.from(copies) : undefined,
      // several rows: their argmax split over the native threads (a single row gains nothing there: it stays with
      // the handler, the b = 1 step exactly as before)
      argmax: outRowsArr.length > 1 ? best : undefined,
    };
    await this.model.step(this.kv.native, batch, this.out);
    this.steps++;
    for (const f of this.stepWaiters.splice(0)) f();

    // advance, publish cache entries, sample
    for (const p of plan) {
      const q = p.seq;
      if (q.pendingCopy) {
        this.kv.release(q.pendingCopy.src);
        q.pendingCopy = null;
      }
      if (q.finished) continue;
      q.computed += p.n;
      if (q.mode === 'automatic') {
        const r = this.prefix.registerAutomatic(q.tokens, q.blocks, q.autoFrom, q.computed, q.promptLen, q.hasher);
        q.autoFrom = r.next;
        if (!q.cacheAccounted) q.cacheWrite += r.written;
        if (!q.tailOffered && q.computed >= q.promptLen) {
          this.prefix.registerTail(q.tokens, q.promptLen, q.blocks, q.hasher);
          q.tailOffered = true;
        }
      } else if (q.mode === 'explicit' && q.bps.length) {
        const w = this.prefix.registerExplicit(q.tokens, q.blocks, q.computed, q.bps, q.bpDone, q.hasher);
        if (!q.cacheAccounted && w > 0) q.cacheWrite = Math.max(q.cacheWrite, w - q.cacheRead);
      }
      if (q.computed >= q.promptLen) q.cacheAccounted = true;
      this.releaseOutOfWindow(q);
    }
    outSeqs.forEach((q, r) => {
      if (q.finished) return;
      let next: number | null;
      try {
        const prompt = q.generated > 0 ? undefined : {
          promptTokens: q.promptLen, generatedTokens: 0, cacheReadTokens: q.cacheRead, cacheWriteTokens: q.cacheWrite,
        };
        next = q.handler.next(this.out.subarray(r * V, (r + 1) * V), prompt, best[r] >= -1 ? best[r] : undefined);
      } catch (e) {
        q.finished = true;
        this.detach(q);
        q.handler.fail(e as Error);
        return;
      }
      if (q.finished) return; // aborted from inside the handler
      if (next === null) return this.finish(q);
      q.tokens.push(next);
      q.generated++;
      if (q.generated >= q.maxTokens) this.finish(q);
    });
    return true;
  }
}
