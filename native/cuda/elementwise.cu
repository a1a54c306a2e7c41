// Elementwise ops, activations, conversions, embedding, AdamW and reductions (grid-stride loops).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "cuda_internal.h"

namespace loom::cuda {
namespace {

constexpr int BS = 256;
#define GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

__global__ void add_k(int64_t n, const float* a, const float* b, float* y) { GRID_LOOP(i, n) y[i] = a[i] + b[i]; }
__global__ void mul_k(int64_t n, const float* a, const float* b, float* y) { GRID_LOOP(i, n) y[i] = a[i] * b[i]; }
__global__ void mul_bwd_k(int64_t n, const float* a, const float* b, const float* dy, float* da, float* db) {
  GRID_LOOP(i, n) {
    float g = dy[i];
    if (da) da[i] += g * b[i];
    if (db) db[i] += g * a[i];
  }
}
__global__ void scale_k(int64_t n, const float* x, float s, float* y) { GRID_LOOP(i, n) y[i] = s * x[i]; }
__global__ void axpy_k(int64_t n, float a, const float* x, float* y) { GRID_LOOP(i, n) y[i] += a * x[i]; }
__global__ void add_bias_k(int64_t R, int64_t D, float* x, const float* b) { GRID_LOOP(i, R * D) x[i] += b[i % D]; }
__global__ void f32_to_bf16_k(int64_t n, const float* s, __nv_bfloat16* d) { GRID_LOOP(i, n) d[i] = __float2bfloat16_rn(s[i]); }
__global__ void bf16_to_f32_k(int64_t n, const __nv_bfloat16* s, float* d) { GRID_LOOP(i, n) d[i] = __bfloat162float(s[i]); }

// Column sums: db[c] += sum_r dy[r, c]. Threads run along columns (coalesced), blockIdx.y splits
// the rows into chunks, one atomicAdd per (chunk, column).
__global__ void colsum_k(int64_t R, int64_t D, int64_t rows_per, const float* dy, float* db) {
  int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (c >= D) return;
  int64_t r0 = blockIdx.y * rows_per, r1 = min(R, r0 + rows_per);
  float s = 0.f;
  for (int64_t r = r0; r < r1; r++) s += dy[r * D + c];
  atomicAdd(db + c, s);
}

// GELU. erf form: 0.5 x (1 + erf(x/√2)); tanh form: 0.5 x (1 + tanh(√(2/π)(x + 0.044715 x³))).
__device__ __forceinline__ float gelu_f(float x, bool approx) {
  if (approx) {
    const float k = 0.7978845608028654f;
    return 0.5f * x * (1.f + tanhf(k * (x + 0.044715f * x * x * x)));
  }
  return 0.5f * x * (1.f + erff(x * 0.7071067811865476f));
}
__device__ __forceinline__ float gelu_grad(float x, bool approx) {
  if (approx) {
    const float k = 0.7978845608028654f;
    float u = k * (x + 0.044715f * x * x * x);
    float t = tanhf(u);
    return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * k * (1.f + 3.f * 0.044715f * x * x);
  }
  float cdf = 0.5f * (1.f + erff(x * 0.7071067811865476f));
  float pdf = 0.3989422804014327f * expf(-0.5f * x * x);
  return cdf + x * pdf;
}
__global__ void gelu_k(int64_t n, const float* x, float* y, bool approx) { GRID_LOOP(i, n) y[i] = gelu_f(x[i], approx); }
__global__ void gelu_bwd_k(int64_t n, const float* x, const float* dy, float* dx, bool approx) {
  GRID_LOOP(i, n) dx[i] = dy[i] * gelu_grad(x[i], approx);
}
__device__ __forceinline__ float sigmoid_f(float x) { return 1.f / (1.f + expf(-x)); }
__global__ void silu_k(int64_t n, const float* x, float* y) { GRID_LOOP(i, n) y[i] = x[i] * sigmoid_f(x[i]); }
__global__ void silu_bwd_k(int64_t n, const float* x, const float* dy, float* dx) {
  GRID_LOOP(i, n) {
    float s = sigmoid_f(x[i]);
    dx[i] = dy[i] * s * (1.f + x[i] * (1.f - s));
  }
}
__global__ void swiglu_k(int64_t n, const float* g, const float* u, float* y) {
  GRID_LOOP(i, n) y[i] = g[i] * sigmoid_f(g[i]) * u[i];
}
__global__ void swiglu_bwd_k(int64_t n, const float* g, const float* u, const float* dy, float* dg, float* du) {
  GRID_LOOP(i, n) {
    float x = g[i], s = sigmoid_f(x), d = dy[i], up = u[i];
    dg[i] = d * up * s * (1.f + x * (1.f - s));
    du[i] = d * x * s;
  }
}

// Embedding: one thread per output element.
template <typename T>
__global__ void embedding_k(int64_t T_, int64_t D, int64_t V, const int32_t* ids, const T* table, float* out,
                            int* err) {
  GRID_LOOP(e, T_ * D) {
    int64_t t = e / D, c = e % D;
    int32_t id = ids[t];
    if (id < 0 || id >= V) {
      out[e] = 0.f;
      if (c == 0) atomicExch(err, ERR_BAD_ID);
      continue;
    }
    if constexpr (sizeof(T) == 4) out[e] = table[(int64_t)id * D + c];
    else out[e] = __bfloat162float(table[(int64_t)id * D + c]);
  }
}
__global__ void embedding_bwd_k(int64_t T_, int64_t D, int64_t V, const int32_t* ids, const float* dout, float* dtable,
                                int* err) {
  GRID_LOOP(e, T_ * D) {
    int64_t t = e / D, c = e % D;
    int32_t id = ids[t];
    if (id < 0 || id >= V) {
      if (c == 0) atomicExch(err, ERR_BAD_ID);
      continue;
    }
    atomicAdd(dtable + (int64_t)id * D + c, dout[e]);
  }
}

__global__ void adamw_k(int64_t n, float* p, const float* g, float* m, float* v, float lr, float b1, float b2,
                        float eps, float wd, float bc1, float bc2) {
  GRID_LOOP(i, n) {
    float gi = g[i];
    float mi = b1 * m[i] + (1.f - b1) * gi;
    float vi = b2 * v[i] + (1.f - b2) * gi * gi;
    m[i] = mi;
    v[i] = vi;
    float pi = p[i];
    pi -= lr * wd * pi;
    pi -= lr * (mi / bc1) / (sqrtf(vi / bc2) + eps);
    p[i] = pi;
  }
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__global__ void sumsq_k(int64_t n, const float* g, float* out) {
  __shared__ float sh[32];
  float s = 0.f;
  GRID_LOOP(i, n) s += g[i] * g[i];
  s = warp_sum(s);
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = s;
  __syncthreads();
  if (threadIdx.x < 32) {
    s = threadIdx.x < blockDim.x / 32 ? sh[threadIdx.x] : 0.f;
    s = warp_sum(s);
    if (threadIdx.x == 0) atomicAdd(out, s);
  }
}

}  // namespace

#define LAUNCH(kernel, n, ...)                                                  \
  do {                                                                          \
    if ((n) <= 0) return;                                                       \
    Context& c_ = ctx();                                                        \
    kernel<<<grid_for((n), BS), BS, 0, c_.stream>>>(__VA_ARGS__);               \
    check_launch(#kernel);                                                      \
  } while (0)

void add_fwd(int64_t n, const float* a, const float* b, float* y) { LAUNCH(add_k, n, n, a, b, y); }
void mul_fwd(int64_t n, const float* a, const float* b, float* y) { LAUNCH(mul_k, n, n, a, b, y); }
void mul_bwd(int64_t n, const float* a, const float* b, const float* dy, float* da, float* db) {
  LAUNCH(mul_bwd_k, n, n, a, b, dy, da, db);
}
void scale_fwd(int64_t n, const float* x, float s, float* y) { LAUNCH(scale_k, n, n, x, s, y); }
void axpy(int64_t n, float a, const float* x, float* y) { LAUNCH(axpy_k, n, n, a, x, y); }
void add_bias(int64_t R, int64_t D, float* x, const float* b) { LAUNCH(add_bias_k, R * D, R, D, x, b); }
void convert_f32_to_bf16(int64_t n, const float* s, uint16_t* d) {
  LAUNCH(f32_to_bf16_k, n, n, s, reinterpret_cast<__nv_bfloat16*>(d));
}
void convert_bf16_to_f32(int64_t n, const uint16_t* s, float* d) {
  LAUNCH(bf16_to_f32_k, n, n, reinterpret_cast<const __nv_bfloat16*>(s), d);
}
void gelu_fwd(int64_t n, const float* x, float* y, bool approx) { LAUNCH(gelu_k, n, n, x, y, approx); }
void gelu_bwd(int64_t n, const float* x, const float* dy, float* dx, bool approx) {
  LAUNCH(gelu_bwd_k, n, n, x, dy, dx, approx);
}
void silu_fwd(int64_t n, const float* x, float* y) { LAUNCH(silu_k, n, n, x, y); }
void silu_bwd(int64_t n, const float* x, const float* dy, float* dx) { LAUNCH(silu_bwd_k, n, n, x, dy, dx); }
void swiglu_fwd(int64_t n, const float* g, const float* u, float* y) { LAUNCH(swiglu_k, n, n, g, u, y); }
void swiglu_bwd(int64_t n, const float* g, const float* u, const float* dy, float* dg, float* du) {
  LAUNCH(swiglu_bwd_k, n, n, g, u, dy, dg, du);
}

// Column-sum helper shared with the norm backward (declared in norm.cu via extern).
void colsum_accumulate(int64_t R, int64_t D, const float* dy, float* db) {
  if (R <= 0 || D <= 0) return;
  Context& c = ctx();
  int64_t rows_per = 64;
  int64_t chunks = (R + rows_per - 1) / rows_per;
  if (chunks > 65535) {
    rows_per = (R + 65534) / 65535;
    chunks = (R + rows_per - 1) / rows_per;
  }
  dim3 grid(unsigned((D + BS - 1) / BS), unsigned(chunks));
  colsum_k<<<grid, BS, 0, c.stream>>>(R, D, rows_per, dy, db);
  check_launch("colsum_k");
}
void bias_bwd(int64_t R, int64_t D, const float* dy, float* db) { colsum_accumulate(R, D, dy, db); }

void embedding_fwd(int64_t T, int64_t D, int64_t V, const int32_t* ids, int wtype, const void* table, float* out) {
  require(wtype == W_F32 || wtype == W_BF16, "embedding: table dtype must be f32 or bf16");
  if (T * D <= 0) return;
  Context& c = ctx();
  if (wtype == W_F32)
    embedding_k<float><<<grid_for(T * D, BS), BS, 0, c.stream>>>(T, D, V, ids, (const float*)table, out, c.err_flag);
  else
    embedding_k<__nv_bfloat16><<<grid_for(T * D, BS), BS, 0, c.stream>>>(T, D, V, ids, (const __nv_bfloat16*)table,
                                                                         out, c.err_flag);
  check_launch("embedding_k");
}
void embedding_bwd(int64_t T, int64_t D, int64_t V, const int32_t* ids, const float* dout, float* dtable) {
  if (T * D <= 0) return;
  Context& c = ctx();
  embedding_bwd_k<<<grid_for(T * D, BS), BS, 0, c.stream>>>(T, D, V, ids, dout, dtable, c.err_flag);
  check_launch("embedding_bwd_k");
}

void adamw_step(int64_t n, float* p, const float* g, float* m, float* v, float lr, float b1, float b2, float eps,
                float wd, int64_t step) {
  require(step >= 1, "adamw: step must be >= 1");
  float bc1 = float(1.0 - std::pow(double(b1), double(step)));
  float bc2 = float(1.0 - std::pow(double(b2), double(step)));
  LAUNCH(adamw_k, n, n, p, g, m, v, lr, b1, b2, eps, wd, bc1, bc2);
}

float l2_norm(int64_t n, const float* g) {
  if (n <= 0) return 0.f;
  Context& c = ctx();
  check(cudaMemsetAsync(c.red, 0, sizeof(float), c.stream), "cudaMemsetAsync");
  sumsq_k<<<grid_for(n, BS, int64_t(c.sm_count) * 8), BS, 0, c.stream>>>(n, g, c.red);
  check_launch("sumsq_k");
  float s = 0.f;
  to_host(&s, c.red, sizeof(float));
  return std::sqrt(s);
}

}  // namespace loom::cuda
