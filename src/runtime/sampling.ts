// Token sampling: penalties → constraint mask → temperature → top-k / min-p / top-p truncation → draw.
//
// Semantics
// - temperature 0 (or top_k 1) is greedy: argmax of the processed logits, lowest id on ties; no RNG drawn.
// - repetition_penalty (HF): for every distinct token in prompt ∪ generated history, logit > 0 ? logit / p
//   : logit * p. The prompt is given with `setPrompt()` (HF applies it over the whole input_ids).
// - frequency_penalty / presence_penalty (OpenAI): logit -= count·frequency + (count>0)·presence, counted
//   over the *generated* tokens only (`history`).
// - logprobs: the log-softmax of the logits after penalties, the constraint mask and temperature (when
//   temperature > 0), before top-k/top-p/min-p truncation. With default parameters they are the model's
//   log-probabilities (what the tinystories goldens' top-5 log-probs record).
// - RNG: xoshiro128** seeded from `seed` (or from crypto when absent): same seed + same logits → same tokens.
// Cost: O(V) per step (no full sort): top-k by quickselect, top-p by mass-partitioning quickselect, the
// (small) surviving nucleus sorted for a deterministic draw order.
import { randomBytes } from 'node:crypto';
import { argmaxF32 } from '../native/ops.ts';

export interface SamplingParams {
  temperature?: number;
  top_p?: number;
  top_k?: number;
  min_p?: number;
  seed?: number;
  repetition_penalty?: number;
  frequency_penalty?: number;
  presence_penalty?: number;
  logprobs?: boolean;
  top_logprobs?: number;
}

export interface SampleResult {
  token: number;
  /** Log-probability of `token` (see the header); NaN unless `logprobs` or `top_logprobs` was requested. */
  logprob: number;
  top?: { token: number; logprob: number }[];
}

export class SamplingError extends Error {
  override name = 'SamplingError';
}

/** xoshiro128** (Blackman & Vigna), 32-bit state words. */
class Rng {
  private s = new Uint32Array(4);
  constructor(seed: number | undefined) {
    let x: number;
    if (seed === undefined) x = randomBytes(4).readUInt32LE(0);
    else x = Math.floor(Math.abs(seed)) % 2 ** 32 ^ Math.floor(seed / 2 ** 32);
    // splitmix32 to fill the state
    for (let i = 0; i < 4; i++) {
      x = (x + 0x9e3779b9) | 0;
      let z = x;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      this.s[i] = (z ^ (z >>> 16)) >>> 0;
    }
    if ((this.s[0] | this.s[1] | this.s[2] | this.s[3]) === 0) this.s[0] = 1;
  }
  private nextU32(): number {
    const s = this.s;
    const r = Math.imul(rotl(Math.imul(s[1], 5), 7), 9) >>> 0;
    const t = s[1] << 9;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 11);
    return r;
  }
  /** Uniform in [0, 1) with 53 bits. */
  next(): number {
    return ((this.nextU32() >>> 5) * 67108864 + (this.nextU32() >>> 6)) / 9007199254740992;
  }
}
function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k));
}

const POW2 = new Float64Array(200);
for (let k = 0; k < 200; k++) POW2[k] = 2 ** (k - 150);
/**
 * exp(d) for d ≤ 0 (d > -100): 2^k · 2^f with a degree-9 Taylor polynomial for 2^f on [0, 1)
 * (relative error < 1e-8), about 5x faster than Math.exp in V8 for the vocabulary-wide passes.
 */
export function fastExp(d: number): number {
  const t = d * 1.4426950408889634;
  const k = Math.floor(t);
  const f = (t - k) * 0.6931471805599453;
  const p = 1 + f * (1 + f * (0.5 + f * (1 / 6 + f * (1 / 24 + f * (1 / 120 + f * (1 / 720 + f * (1 / 5040 + f * (1 / 40320 + f * (1 / 362880)))))))));
  return p * POW2[k + 150];
}

/** Whether token `id` is set in the allowed bitset. */
export function bitsetHas(bits: Uint32Array, id: number): boolean {
  return ((bits[id >>> 5] >>> (id & 31)) & 1) === 1;
}

export class Sampler {
  readonly params: Required<Omit<SamplingParams, 'seed'>> & { seed?: number };
  readonly vocabSize: number;
  private readonly rng: Rng;
  private readonly work: Float32Array;
  private readonly idx: Int32Array;
  private readonly prob: Float64Array;
  private prompt: readonly number[] = [];

  constructor(params: SamplingParams, vocabSize: number) {
    const p = {
      temperature: params.temperature ?? 1,
      top_p: params.top_p ?? 1,
      top_k: params.top_k ?? 0,
      min_p: params.min_p ?? 0,
      repetition_penalty: params.repetition_penalty ?? 1,
      frequency_penalty: params.frequency_penalty ?? 0,
      presence_penalty: params.presence_penalty ?? 0,
      logprobs: params.logprobs ?? false,
      top_logprobs: params.top_logprobs ?? 0,
      seed: params.seed,
    };
    const bad = (m: string): never => {
      throw new SamplingError(m);
    };
    if (!(p.temperature >= 0) || !Number.isFinite(p.temperature)) bad(`temperature must be >= 0 (got ${p.temperature})`);
    if (!(p.top_p > 0 && p.top_p <= 1)) bad(`top_p must be in (0, 1] (got ${p.top_p})`);
    if (!Number.isInteger(p.top_k) || p.top_k < 0) bad(`top_k must be a non-negative integer (got ${p.top_k})`);
    if (!(p.min_p >= 0 && p.min_p <= 1)) bad(`min_p must be in [0, 1] (got ${p.min_p})`);
    if (!(p.repetition_penalty > 0) || !Number.isFinite(p.repetition_penalty)) bad(`repetition_penalty must be > 0 (got ${p.repetition_penalty})`);
    if (!Number.isFinite(p.frequency_penalty) || !Number.isFinite(p.presence_penalty)) bad('frequency_penalty and presence_penalty must be finite numbers');
    if (!Number.isInteger(p.top_logprobs) || p.top_logprobs < 0 || p.top_logprobs > 20) bad(`top_logprobs must be an integer in [0, 20] (got ${p.top_logprobs})`);
    if (p.seed !== undefined && !Number.isFinite(p.seed)) bad(`seed must be a finite number`);
    this.params = p;
    this.vocabSize = vocabSize;
    this.rng = new Rng(p.seed);
    this.work = new Float32Array(vocabSize);
    this.idx = new Int32Array(vocabSize);
    this.prob = new Float64Array(vocabSize);
  }

  /** The prompt ids, for the HF repetition penalty (which covers prompt + generated tokens). */
  setPrompt(ids: readonly number[]): void {
    this.prompt = ids;
  }

  get greedy(): boolean {
    return this.params.temperature === 0 || this.params.top_k === 1;
  }

  /**
   * Picks the next token. `logits`: (V) raw logits of the last position (not modified). `history`: the tokens
   * generated so far in this sequence. `allowed`: optional bitset (⌈V/32⌉ words) from a constraint. `argmax`:
   * argmaxF32(logits) where the caller has it already (the decode step makes it on the native threads).
   */
  sample(logits: Float32Array, history: readonly number[], allowed?: Uint32Array | null,
    argmax?: number): SampleResult {
    const V = this.vocabSize;
    if (logits.length < V) throw new SamplingError(`logits has ${logits.length} entries, vocabulary is ${V}`);
    const p = this.params;
    // the logits are read in place unless a penalty or a constraint changes them (a copy is a pass over V)
    const edits = p.repetition_penalty !== 1 || p.frequency_penalty !== 0 || p.presence_penalty !== 0 || !!allowed;
    const x = edits ? this.work : logits;
    if (edits) x.set(logits.subarray(0, V));
    // penalties
    if (p.repetition_penalty !== 1) {
      const seen = new Set<number>(this.prompt);
      for (const t of history) seen.add(t);
      for (const t of seen) if (t >= 0 && t < V) x[t] = x[t] > 0 ? x[t] / p.repetition_penalty : x[t] * p.repetition_penalty;
    }
    if (p.frequency_penalty !== 0 || p.presence_penalty !== 0) {
      const counts = new Map<number, number>();
      for (const t of history) counts.set(t, (counts.get(t) ?? 0) + 1);
      for (const [t, c] of counts) if (t >= 0 && t < V) x[t] -= c * p.frequency_penalty + p.presence_penalty;
    }
    if (allowed) {
      for (let w = 0; w < allowed.length; w++) {
        const bits = allowed[w];
        if (bits === 0xffffffff) continue;
        const base = w << 5;
        for (let b = 0; b < 32 && base + b < V; b++) if (!((bits >>> b) & 1)) x[base + b] = -Infinity;
      }
    }
    const invT = p.temperature > 0 ? 1 / p.temperature : 1;
    // max / argmax (lowest id on ties) and log-partition of the processed distribution
    // `argmax`: argmaxF32 of these logits made by the decode step (used only where nothing edited them)
    const best = !edits && argmax !== undefined ? argmax : argmaxF32(x.length === V ? x : x.subarray(0, V));
    const mx = best >= 0 ? x[best] : -Infinity;
    if (best < 0) throw new SamplingError(allowed ? 'no token is allowed by the constraint' : 'all logits are -inf or NaN');
    const wantLp = p.logprobs || p.top_logprobs > 0;
    let logZ = NaN;
    let token: number;
    if (this.greedy) token = best;
    else {
      const r = this.draw(x, mx, invT);
      token = r.token;
      logZ = Math.log(r.z);
    }
    if (wantLp && Number.isNaN(logZ)) {
      let s = 0;
      for (let i = 0; i < V; i++) {
        const d = (x[i] - mx) * invT;
        if (d > -40) s += fastExp(d);
      }
      logZ = Math.log(s);
    }
    const lp = (t: number): number => (x[t] - mx) * invT - logZ;
    const res: SampleResult = { token, logprob: wantLp ? lp(token) : NaN };
    if (p.top_logprobs > 0) res.top = this.topN(x, p.top_logprobs).map((t) => ({ token: t, logprob: lp(t) }));
    return res;
  }

  /** The n largest processed logits, by value desc then id asc. */
  private topN(x: Float32Array, n: number): number[] {
    const ids: number[] = [];
    for (let i = 0; i < this.vocabSize; i++) {
      const v = x[i];
      if (v === -Infinity) continue;
      if (ids.length < n) {
        ids.push(i);
        ids.sort((a, b) => x[b] - x[a] || a - b);
      } else if (v > x[ids[n - 1]]) {
        ids[n - 1] = i;
        ids.sort((a, b) => x[b] - x[a] || a - b);
      }
    }
    return ids;
  }

  /** Draws a token; also returns z = Σ exp((x - mx)·invT) over all tokens when it was computed (else NaN). */
  private draw(x: Float32Array, mx: number, invT: number): { token: number; z: number } {
    const p = this.params;
    const idx = this.idx, pr = this.prob;
    let n = 0, z = NaN;
    if (p.top_k === 0 && p.min_p === 0 && p.top_p === 1) {
      return drawAll(x, this.vocabSize, mx, invT, this.rng.next(), idx, pr);
    }
    if (p.top_k > 0 && p.top_k <= 256) {
      // small top-k: one pass with a size-k min-heap over the raw logits (usually one compare per token)
      n = heapTopK(x, this.vocabSize, p.top_k, idx);
      for (let i = 0; i < n; i++) pr[i] = (x[idx[i]] - mx) * invT;
      let m = 0;
      for (let i = 0; i < n; i++) if (pr[i] > -40) { idx[m] = idx[i]; pr[m] = pr[i]; m++; }
      n = m;
    } else for (let i = 0; i < this.vocabSize; i++) {
      const d = (x[i] - mx) * invT;
      if (!(d > -40)) continue;
      idx[n] = i;
      pr[n] = d;
      n++;
    }
    // pr holds the scaled logit difference d = (x - mx)·invT ≤ 0 first (same order as probabilities), and
    // exp(d) only once the candidate set is small. Tokens more than 40 nats below the max (relative
    // probability < 4e-18) are never drawn.
    if (p.top_k > 0 && p.top_k < n) {
      selectTopK(idx, pr, 0, n, p.top_k);
      n = p.top_k;
    }
    if (p.min_p > 0) {
      // pmax is exp(0) = 1 (the max logit survives every filter): keep d ≥ log(min_p)
      const thr = Math.log(p.min_p);
      let m = 0;
      for (let i = 0; i < n; i++) if (pr[i] >= thr) { idx[m] = idx[i]; pr[m] = pr[i]; m++; }
      n = m;
    }
    let zc = 0;
    for (let i = 0; i < n; i++) { pr[i] = fastExp(pr[i]); zc += pr[i]; }
    if (p.top_k === 0 && p.min_p === 0) z = zc; // nothing truncated yet: this is the full partition function
    if (p.top_p < 1) {
      let total = 0;
      for (let i = 0; i < n; i++) total += pr[i];
      n = selectMass(idx, pr, n, p.top_p * total);
    }
    return { token: pick(idx, pr, n, this.rng.next()), z };
  }
}

/**
 * The token at u01 of the cumulative probabilities pr[0, n) (unnormalised) of the candidates idx[0, n), in a
 * deterministic order: small sets sorted (prob desc, id asc), large ones in id order as built. `sum`, when
 * given, is Σ pr in that build order (it serves the large sets; small ones are summed after the sort).
 */
function pick(idx: Int32Array, pr: Float64Array, n: number, u01: number, sum = NaN): number {
  let total = sum;
  if (n <= 4096) {
    sortPairs(idx, pr, n);
    total = NaN;
  }
  if (Number.isNaN(total)) {
    total = 0;
    for (let i = 0; i < n; i++) total += pr[i];
  }
  let u = u01 * total;
  for (let i = 0; i < n; i++) {
    u -= pr[i];
    if (u < 0) return idx[i];
  }
  return idx[n - 1];
}

/**
 * draw() without truncation (no top-k, min-p or top-p: GRPO's sampling): one pass computes each candidate's
 * exp and the partition function, a second walks to the drawn token. The same tokens as the general path
 * (the same probabilities, summed in the same order) in two passes over V instead of five.
 */
function drawAll(
  x: Float32Array,
  V: number,
  mx: number,
  invT: number,
  u01: number,
  idx: Int32Array,
  pr: Float64Array,
): { token: number; z: number } {
  let n = 0,
    z = 0;
  for (let i = 0; i < V; i++) {
    const d = (x[i] - mx) * invT;
    if (!(d > -40)) continue;
    const e = fastExp(d);
    idx[n] = i;
    pr[n] = e;
    z += e;
    n++;
  }
  return { token: pick(idx, pr, n, u01, z), z };
}

/** The k largest of x[0, V) (value desc, id asc on ties) into out[0, k) (unordered); returns the count. */
function heapTopK(x: Float32Array, V: number, k: number, out: Int32Array): number {
  // min-heap on (value asc, id desc): the root is the worst kept token
  const hv = new Float64Array(k);
  const hi = new Int32Array(k);
  let n = 0;
  const worse = (va: number, ia: number, vb: number, ib: number): boolean => va < vb || (va === vb && ia > ib);
  for (let i = 0; i < V; i++) {
    const v = x[i];
    if (v === -Infinity || v !== v) continue;
    if (n < k) {
      let c = n++;
      hv[c] = v; hi[c] = i;
      while (c > 0) {
        const par = (c - 1) >> 1;
        if (!worse(hv[c], hi[c], hv[par], hi[par])) break;
        const tv = hv[c], ti = hi[c]; hv[c] = hv[par]; hi[c] = hi[par]; hv[par] = tv; hi[par] = ti;
        c = par;
      }
    } else if (v > hv[0]) {
      hv[0] = v; hi[0] = i;
      let c = 0;
      for (;;) {
        const l = 2 * c + 1, r = l + 1;
        let m = c;
        if (l < k && worse(hv[l], hi[l], hv[m], hi[m])) m = l;
        if (r < k && worse(hv[r], hi[r], hv[m], hi[m])) m = r;
        if (m === c) break;
        const tv = hv[c], ti = hi[c]; hv[c] = hv[m]; hi[c] = hi[m]; hv[m] = tv; hi[m] = ti;
        c = m;
      }
    }
  }
  for (let i = 0; i < n; i++) out[i] = hi[i];
  return n;
}

function swap(idx: Int32Array, pr: Float64Array, i: number, j: number): void {
  const a = idx[i]; idx[i] = idx[j]; idx[j] = a;
  const b = pr[i]; pr[i] = pr[j]; pr[j] = b;
}

/** "a before b": higher probability first, then lower id. */
function before(idx: Int32Array, pr: Float64Array, i: number, j: number): boolean {
  return pr[i] > pr[j] || (pr[i] === pr[j] && idx[i] < idx[j]);
}

/** Partitions [lo, hi) around a median-of-three pivot; returns the pivot's final position. */
function partition(idx: Int32Array, pr: Float64Array, lo: number, hi: number): number {
  const mid = (lo + hi) >>> 1, last = hi - 1;
  if (before(idx, pr, mid, lo)) swap(idx, pr, mid, lo);
  if (before(idx, pr, last, lo)) swap(idx, pr, last, lo);
  if (before(idx, pr, mid, last)) swap(idx, pr, mid, last);
  // pivot (median) now at `last`
  let store = lo;
  for (let i = lo; i < last; i++) if (before(idx, pr, i, last)) swap(idx, pr, i, store++);
  swap(idx, pr, store, last);
  return store;
}

/** Moves the k best (prob desc, id asc) of [lo, hi) into [lo, lo + k) (unordered). */
function selectTopK(idx: Int32Array, pr: Float64Array, lo: number, hi: number, k: number): void {
  let l = lo, h = hi;
  const target = lo + k;
  while (h - l > 1) {
    const pIdx = partition(idx, pr, l, h);
    if (pIdx === target || pIdx === target - 1) return;
    if (pIdx < target) l = pIdx + 1;
    else h = pIdx;
  }
}

/** Reorders [0, n) so that the smallest prefix of best tokens with mass ≥ target comes first; returns its size. */
function selectMass(idx: Int32Array, pr: Float64Array, n: number, target: number): number {
  let l = 0, h = n, acc = 0; // [0, l) is taken, mass acc
  while (h - l > 1) {
    const pIdx = partition(idx, pr, l, h);
    let m = 0;
    for (let i = l; i <= pIdx; i++) m += pr[i];
    if (acc + m >= target) {
      // nucleus ends inside [l, pIdx]
      if (pIdx === l) return l + 1;
      // check whether [l, pIdx) alone suffices
      h = pIdx + 1;
      // shrink: if without the pivot it already reaches, recurse left part excluding pivot
      if (acc + m - pr[pIdx] >= target) h = pIdx;
      else return pIdx + 1;
    } else {
      acc += m;
      l = pIdx + 1;
    }
  }
  return Math.min(n, Math.max(1, h));
}

function sortPairs(idx: Int32Array, pr: Float64Array, n: number): void {
  const order = Array.from({ length: n }, (_, i) => i);
  order.sort((a, b) => pr[b] - pr[a] || idx[a] - idx[b]);
  const i2 = order.map((o) => idx[o]), p2 = order.map((o) => pr[o]);
  for (let i = 0; i < n; i++) { idx[i] = i2[i]; pr[i] = p2[i]; }
}
