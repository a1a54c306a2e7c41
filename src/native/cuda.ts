// CUDA availability and the GPU ops of the CMake build (`npm run build:cuda`). The default
// node-gyp addon has no CUDA functions: cudaInfo() then reports { available: false } with the
// reason, and the ops reject. Callers stay on the CPU path whenever `available` is false.
import { addon } from './addon.ts';

export interface CudaDevice {
  index: number;
  name: string;
  computeCapability: string;
  totalMemory: number;
  smCount: number;
}

export interface CudaInfo {
  /** A usable GPU and driver were found and the addon was built with the CUDA kernels. */
  available: boolean;
  /** Why not (empty when available). */
  reason: string;
  /** Whether this addon was built with the CUDA kernels. */
  built: boolean;
  runtimeVersion: number;
  driverVersion: number;
  devices: CudaDevice[];
  /** cuBLAS / cuBLASLt could be loaded (dlopen at run time). */
  cublas: boolean;
  cublasReason: string;
  /** 'cublaslt' | 'cublas' | 'kernel' | '' (unavailable). */
  gemmBackend: string;
}

const NOT_BUILT =
  'this addon was built without CUDA (the default node-gyp build); run `npm run build:cuda` on a machine with nvcc';

export function cudaInfo(): CudaInfo {
  if (typeof addon.cudaInfo !== 'function') {
    return {
      available: false,
      reason: NOT_BUILT,
      built: false,
      runtimeVersion: 0,
      driverVersion: 0,
      devices: [],
      cublas: false,
      cublasReason: '',
      gemmBackend: '',
    };
  }
  return addon.cudaInfo() as CudaInfo;
}

export function cudaAvailable(): boolean {
  return cudaInfo().available;
}

function need(name: string): (...args: unknown[]) => Promise<unknown> {
  const info = cudaInfo();
  if (!info.available) throw new Error(`CUDA unavailable: ${info.reason}`);
  return addon[name] as (...args: unknown[]) => Promise<unknown>;
}

export type GemmBackend = 'cublaslt' | 'cublas' | 'kernel';

/** Forces the GEMM backend (and optionally TF32 math for fp32 GEMMs). Throws if unavailable. */
export function cudaSetGemmBackend(backend: GemmBackend, tf32?: boolean): void {
  need('cudaSetGemmBackend')(backend, tf32);
}

/** y (M, N) = x (M, K) · Wᵀ + bias on the GPU. W (N, K) is fp32 (Float32Array) or bf16 bits (Uint16Array). */
export async function cudaLinear(
  x: Float32Array, w: Float32Array | Uint16Array, bias: Float32Array | null, M: number, N: number, K: number,
): Promise<Float32Array> {
  return (await need('cudaLinear')(x, w, bias, M, N, K)) as Float32Array;
}

export async function cudaRmsnorm(x: Float32Array, w: Float32Array | null, R: number, D: number, eps: number): Promise<Float32Array> {
  return (await need('cudaRmsnorm')(x, w, R, D, eps)) as Float32Array;
}

export async function cudaLayernorm(
  x: Float32Array, w: Float32Array | null, b: Float32Array | null, R: number, D: number, eps: number,
): Promise<Float32Array> {
  return (await need('cudaLayernorm')(x, w, b, R, D, eps)) as Float32Array;
}

export async function cudaSoftmax(x: Float32Array, R: number, D: number): Promise<Float32Array> {
  return (await need('cudaSoftmax')(x, R, D)) as Float32Array;
}

export interface CudaAttentionParams {
  B: number; Tq: number; Tk: number; Hq: number; Hkv: number; Dh: number;
  causal?: boolean; qOffset?: number; scale?: number;
}

/** Flash-style attention on the GPU; q (B, Tq, Hq, Dh), k/v (B, Tk, Hkv, Dh), packed. */
export async function cudaAttention(
  q: Float32Array, k: Float32Array, v: Float32Array, p: CudaAttentionParams,
): Promise<Float32Array> {
  return (await need('cudaAttention')(q, k, v, p)) as Float32Array;
}

/** Mean cross-entropy over rows with label >= 0, and its gradient. */
export async function cudaCrossEntropy(
  logits: Float32Array, labels: Int32Array, T: number, V: number,
): Promise<{ loss: number; dlogits: Float32Array }> {
  return (await need('cudaCrossEntropy')(logits, labels, T, V)) as { loss: number; dlogits: Float32Array };
}
