// GEMM wrappers: linear layers (y = x·Wᵀ + b, W stored (N, K) as in Hugging Face checkpoints),
// general sgemm with transposes, batched sgemm, and pre-packed weights.
// All matrices are row-major; `ld*` are row strides in elements (default: dense).
// The async functions run off the event loop; the *Sync variants are for tests and tiny sizes.
import { addon } from './addon.ts';

/** Weight element type: fp32, or raw bf16 / f16 bits in a Uint16Array. */
export type WeightDtype = 'f32' | 'bf16' | 'f16';

export interface LinearArgs {
  /** rows of x / y */
  M: number;
  /** output features (rows of W) */
  N: number;
  /** input features */
  K: number;
  /** (M, K) activations */
  x: Float32Array;
  /** (N, K) weights: Float32Array (f32) or Uint16Array (bf16 / f16 bits) */
  w: Float32Array | Uint16Array;
  /** for a Uint16Array w: 'bf16' (default) or 'f16' */
  wtype?: WeightDtype;
  /** (N) */
  bias?: Float32Array | null;
  /** (M, N) output; allocated when omitted */
  y?: Float32Array;
  /** y = beta*y + x·Wᵀ (+ bias); 0 (default) ignores the old contents of y */
  beta?: number;
  /** 'bf16': round x to bf16 and multiply in bf16 (vdpbf16ps on AVX512_BF16); needs bf16 weights */
  compute?: 'f32' | 'bf16';
  ldx?: number;
  ldw?: number;
  ldy?: number;
}

export interface SgemmArgs {
  /** A stored (K, M) and used transposed */
  ta?: boolean;
  /** B stored (N, K) and used transposed */
  tb?: boolean;
  M: number;
  N: number;
  K: number;
  alpha?: number;
  A: Float32Array;
  B: Float32Array;
  beta?: number;
  /** (M, N) output; allocated when omitted */
  C?: Float32Array;
  lda?: number;
  ldb?: number;
  ldc?: number;
  /** 'bf16': op(A) and op(B) rounded to bf16, products in bf16 (vdpbf16ps on AVX512_BF16), fp32 accumulation */
  compute?: 'f32' | 'bf16';
}

export interface SgemmBatchedArgs extends SgemmArgs {
  batch: number;
  /** element offsets between consecutive matrices (default: dense) */
  strideA?: number;
  strideB?: number;
  strideC?: number;
}

function dim(v: number, name: string): number {
  if (!Number.isInteger(v) || v < 0) throw new RangeError(`${name} must be a non-negative integer, got ${v}`);
  return v;
}

function need(arr: { length: number }, rows: number, cols: number, ld: number, name: string): void {
  if (ld < cols) throw new RangeError(`${name}: row stride ${ld} is smaller than its ${cols} columns`);
  const n = rows === 0 || cols === 0 ? 0 : (rows - 1) * ld + cols;
  if (arr.length < n) throw new RangeError(`${name} (${rows}x${cols}, stride ${ld}) needs ${n} elements, has ${arr.length}`);
}

function linearPrep(a: LinearArgs): { call: unknown[]; y: Float32Array } {
  const M = dim(a.M, 'M'), N = dim(a.N, 'N'), K = dim(a.K, 'K');
  const ldx = a.ldx ?? K, ldw = a.ldw ?? K, ldy = a.ldy ?? N;
  let wtype: string;
  if (a.w instanceof Float32Array) {
    if (a.wtype && a.wtype !== 'f32') throw new TypeError(`w is a Float32Array but wtype is '${a.wtype}'`);
    if (a.compute === 'bf16') throw new TypeError("compute 'bf16' needs bf16 weights (a Uint16Array)");
    wtype = 'f32';
  } else if (a.w instanceof Uint16Array) {
    const t = a.wtype ?? 'bf16';
    if (t === 'f32') throw new TypeError("wtype 'f32' needs a Float32Array w");
    if (a.compute === 'bf16' && t !== 'bf16') throw new TypeError("compute 'bf16' needs bf16 weights");
    wtype = a.compute === 'bf16' ? 'bf16_bf16' : t;
  } else {
    throw new TypeError('w must be a Float32Array or a Uint16Array');
  }
  need(a.x, M, K, ldx, 'x');
  need(a.w, N, K, ldw, 'w');
  if (a.bias && a.bias.length < N) throw new RangeError(`bias has ${a.bias.length} elements, needs ${N}`);
  const y = a.y ?? new Float32Array(M * N);
  need(y, M, N, ldy, 'y');
  return { call: [wtype, M, N, K, a.x, ldx, a.w, ldw, a.bias ?? null, y, ldy, a.beta ?? 0], y };
}

/** y (M, N) = beta·y + x (M, K) · W (N, K)ᵀ + bias. Resolves to y. */
export async function linear(a: LinearArgs): Promise<Float32Array> {
  const { call, y } = linearPrep(a);
  await addon.gemmLinear(...call, true);
  return y;
}

export function linearSync(a: LinearArgs): Float32Array {
  const { call, y } = linearPrep(a);
  addon.gemmLinear(...call, false);
  return y;
}

function sgemmPrep(
  a: Pick<SgemmArgs, 'ta' | 'tb' | 'M' | 'N' | 'K' | 'lda' | 'ldb' | 'ldc'>,
): { M: number; N: number; K: number; lda: number; ldb: number; ldc: number } {
  const M = dim(a.M, 'M'), N = dim(a.N, 'N'), K = dim(a.K, 'K');
  const lda = a.lda ?? (a.ta ? M : K), ldb = a.ldb ?? (a.tb ? K : N), ldc = a.ldc ?? N;
  return { M, N, K, lda, ldb, ldc };
}

function sgemmCall(a: SgemmArgs): { call: unknown[]; C: Float32Array } {
  const { M, N, K, lda, ldb, ldc } = sgemmPrep(a);
  if (a.ta) need(a.A, K, M, lda, 'A (stored K x M)');
  else need(a.A, M, K, lda, 'A');
  if (a.tb) need(a.B, N, K, ldb, 'B (stored N x K)');
  else need(a.B, K, N, ldb, 'B');
  const C = a.C ?? new Float32Array(M * N);
  need(C, M, N, ldc, 'C');
  return { call: [!!a.ta, !!a.tb, M, N, K, a.alpha ?? 1, a.A, lda, a.B, ldb, a.beta ?? 0, C, ldc], C };
}

/** C (M, N) = alpha · op(A) · op(B) + beta · C. Resolves to C. */
export async function sgemm(a: SgemmArgs): Promise<Float32Array> {
  const { call, C } = sgemmCall(a);
  await addon.gemmSgemm(...call, true, a.compute ?? 'f32');
  return C;
}

export function sgemmSync(a: SgemmArgs): Float32Array {
  const { call, C } = sgemmCall(a);
  addon.gemmSgemm(...call, false, a.compute ?? 'f32');
  return C;
}

/** C (M, N) = alpha · A (M, K) · B (K, N) + beta · C with B in bf16 bits (a linear layer's dx = dy·W); compute
 * 'bf16' rounds A to bf16 too (bf16 products, fp32 accumulation). */
export function sgemmBf16Sync(a: Omit<SgemmArgs, 'ta' | 'tb' | 'B'> & { B: Uint16Array }): Float32Array {
  const { M, N, K, lda, ldb, ldc } = sgemmPrep(a);
  need(a.A, M, K, lda, 'A');
  need(a.B, K, N, ldb, 'B');
  const C = a.C ?? new Float32Array(M * N);
  need(C, M, N, ldc, 'C');
  addon.gemmSgemmBf16(M, N, K, a.alpha ?? 1, a.A, lda, a.B, ldb, a.beta ?? 0, C, ldc, false, a.compute ?? 'f32');
  return C;
}

function batchedCall(a: SgemmBatchedArgs): { call: unknown[]; C: Float32Array } {
  const batch = dim(a.batch, 'batch');
  const { M, N, K, lda, ldb, ldc } = sgemmPrep(a);
  const sA = a.strideA ?? M * K, sB = a.strideB ?? K * N, sC = a.strideC ?? M * N;
  const C = a.C ?? new Float32Array(batch * M * N);
  return {
    call: [!!a.ta, !!a.tb, batch, M, N, K, a.alpha ?? 1, a.A, lda, sA, a.B, ldb, sB, a.beta ?? 0, C, ldc, sC],
    C,
  };
}

/** For b < batch: C_b = alpha · op(A_b) · op(B_b) + beta · C_b (strided). Resolves to C. */
export async function sgemmBatched(a: SgemmBatchedArgs): Promise<Float32Array> {
  const { call, C } = batchedCall(a);
  await addon.gemmSgemmBatched(...call, true);
  return C;
}

export function sgemmBatchedSync(a: SgemmBatchedArgs): Float32Array {
  const { call, C } = batchedCall(a);
  addon.gemmSgemmBatched(...call, false);
  return C;
}

export interface PackedLinearArgs {
  M: number;
  x: Float32Array;
  bias?: Float32Array | null;
  y?: Float32Array;
  beta?: number;
  ldx?: number;
  ldy?: number;
}

/**
 * A weight matrix W (N, K) packed once into the micro-kernel's panel layout of the ISA active at
 * packing time (model weights: pack at load). bf16 weights stay bf16 (widened in registers).
 * Memory is native; it is released by `free()` or when the object is garbage-collected.
 */
export class PackedWeight {
  readonly rows: number;
  readonly cols: number;
  readonly bytes: number;
  private handle: unknown;

  private constructor(handle: unknown) {
    this.handle = handle;
    const info = addon.gemmWeightInfo(handle) as { rows: number; cols: number; bytes: number };
    this.rows = info.rows;
    this.cols = info.cols;
    this.bytes = info.bytes;
  }

  /** Packs W (N, K) (row stride ldw, default K). */
  static pack(w: Float32Array | Uint16Array, N: number, K: number, opts: { wtype?: WeightDtype; ldw?: number } = {}): PackedWeight {
    const wtype = w instanceof Float32Array ? 'f32' : (opts.wtype ?? 'bf16');
    if (w instanceof Float32Array && opts.wtype && opts.wtype !== 'f32') throw new TypeError(`w is a Float32Array but wtype is '${opts.wtype}'`);
    if (!(w instanceof Float32Array) && wtype === 'f32') throw new TypeError("wtype 'f32' needs a Float32Array w");
    if (dim(N, 'N') === 0 || dim(K, 'K') === 0) throw new RangeError('N and K must be positive');
    const ldw = opts.ldw ?? K;
    need(w, N, K, ldw, 'w');
    return new PackedWeight(addon.gemmWeightPack(wtype, N, K, w, ldw));
  }

  private prep(a: PackedLinearArgs): { call: unknown[]; y: Float32Array } {
    if (this.handle === null) throw new Error('packed weight has been freed');
    const M = dim(a.M, 'M');
    const ldx = a.ldx ?? this.cols, ldy = a.ldy ?? this.rows;
    need(a.x, M, this.cols, ldx, 'x');
    if (a.bias && a.bias.length < this.rows) throw new RangeError(`bias has ${a.bias.length} elements, needs ${this.rows}`);
    const y = a.y ?? new Float32Array(M * this.rows);
    need(y, M, this.rows, ldy, 'y');
    return { call: [M, a.x, ldx, this.handle, a.bias ?? null, y, ldy, a.beta ?? 0], y };
  }

  /** y (M, N) = beta·y + x (M, K) · Wᵀ + bias. Resolves to y. */
  async linear(a: PackedLinearArgs): Promise<Float32Array> {
    const { call, y } = this.prep(a);
    await addon.gemmLinearPacked(...call, true);
    return y;
  }

  linearSync(a: PackedLinearArgs): Float32Array {
    const { call, y } = this.prep(a);
    addon.gemmLinearPacked(...call, false);
    return y;
  }

  /** Releases the native memory now (calls already running keep it until they finish). */
  free(): void {
    if (this.handle !== null) addon.gemmWeightFree(this.handle);
    this.handle = null;
  }
}
