// Row-wise ops: LayerNorm, RMSNorm, softmax (one warp per row), cross-entropy (one block per
// row), and RoPE. Weight gradients of the norms are column reductions (coalesced, one atomicAdd
// per row chunk and column).
#include <cuda_runtime.h>

#include <cmath>
#include <cstring>

#include "cuda_internal.h"

namespace loom::cuda {

void colsum_accumulate(int64_t R, int64_t D, const float* dy, float* db);  // elementwise.cu

namespace {

constexpr int WARPS = 8;  // rows per block for the warp-per-row kernels

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// x, y: (R, D)
__global__ void layernorm_fwd_k(int64_t R, int64_t D, const float* __restrict__ x, const float* __restrict__ w,
                                const float* __restrict__ b, float eps, float* __restrict__ y, float* mean,
                                float* rstd) {
  int64_t r = blockIdx.x * (int64_t)WARPS + threadIdx.x / 32;
  int lane = threadIdx.x & 31;
  if (r >= R) return;
  const float* xr = x + r * D;
  float s = 0.f;
  for (int64_t i = lane; i < D; i += 32) s += xr[i];
  float mu = warp_sum(s) / float(D);
  float v = 0.f;
  for (int64_t i = lane; i < D; i += 32) {
    float d = xr[i] - mu;
    v += d * d;
  }
  float rs = 1.f / sqrtf(warp_sum(v) / float(D) + eps);
  float* yr = y + r * D;
  for (int64_t i = lane; i < D; i += 32) {
    float t = (xr[i] - mu) * rs;
    if (w) t *= w[i];
    if (b) t += b[i];
    yr[i] = t;
  }
  if (lane == 0) {
    if (mean) mean[r] = mu;
    if (rstd) rstd[r] = rs;
  }
}

// dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy * w
__global__ void layernorm_bwd_k(int64_t R, int64_t D, const float* __restrict__ x, const float* __restrict__ w,
                                const float* __restrict__ mean, const float* __restrict__ rstd,
                                const float* __restrict__ dy, float* __restrict__ dx) {
  int64_t r = blockIdx.x * (int64_t)WARPS + threadIdx.x / 32;
  int lane = threadIdx.x & 31;
  if (r >= R) return;
  const float *xr = x + r * D, *dyr = dy + r * D;
  float mu = mean[r], rs = rstd[r];
  float s1 = 0.f, s2 = 0.f;
  for (int64_t i = lane; i < D; i += 32) {
    float g = dyr[i] * (w ? w[i] : 1.f);
    s1 += g;
    s2 += g * (xr[i] - mu) * rs;
  }
  s1 = warp_sum(s1) / float(D);
  s2 = warp_sum(s2) / float(D);
  float* dxr = dx + r * D;
  for (int64_t i = lane; i < D; i += 32) {
    float g = dyr[i] * (w ? w[i] : 1.f);
    dxr[i] = rs * (g - s1 - (xr[i] - mu) * rs * s2);
  }
}

__global__ void rmsnorm_fwd_k(int64_t R, int64_t D, const float* __restrict__ x, const float* __restrict__ w, float eps,
                              float* __restrict__ y, float* rstd) {
  int64_t r = blockIdx.x * (int64_t)WARPS + threadIdx.x / 32;
  int lane = threadIdx.x & 31;
  if (r >= R) return;
  const float* xr = x + r * D;
  float s = 0.f;
  for (int64_t i = lane; i < D; i += 32) s += xr[i] * xr[i];
  float rs = 1.f / sqrtf(warp_sum(s) / float(D) + eps);
  float* yr = y + r * D;
  for (int64_t i = lane; i < D; i += 32) yr[i] = xr[i] * rs * (w ? w[i] : 1.f);
  if (lane == 0 && rstd) rstd[r] = rs;
}

// dx = rstd * (dxhat - xhat * mean(dxhat * xhat)), xhat = x * rstd, dxhat = dy * w
__global__ void rmsnorm_bwd_k(int64_t R, int64_t D, const float* __restrict__ x, const float* __restrict__ w,
                              const float* __restrict__ rstd, const float* __restrict__ dy, float* __restrict__ dx) {
  int64_t r = blockIdx.x * (int64_t)WARPS + threadIdx.x / 32;
  int lane = threadIdx.x & 31;
  if (r >= R) return;
  const float *xr = x + r * D, *dyr = dy + r * D;
  float rs = rstd[r];
  float s = 0.f;
  for (int64_t i = lane; i < D; i += 32) s += dyr[i] * (w ? w[i] : 1.f) * xr[i] * rs;
  s = warp_sum(s) / float(D);
  float* dxr = dx + r * D;
  for (int64_t i = lane; i < D; i += 32) dxr[i] = rs * (dyr[i] * (w ? w[i] : 1.f) - xr[i] * rs * s);
}

// dw[c] += sum_r dy[r,c] * xhat[r,c] (xhat = (x - mean) * rstd; mean null for RMSNorm);
// db[c] += sum_r dy[r,c] if db.
__global__ void norm_wgrad_k(int64_t R, int64_t D, int64_t rows_per, const float* __restrict__ x,
                             const float* __restrict__ mean, const float* __restrict__ rstd,
                             const float* __restrict__ dy, float* dw, float* db) {
  int64_t c = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (c >= D) return;
  int64_t r0 = blockIdx.y * rows_per, r1 = min(R, r0 + rows_per);
  float sw = 0.f, sb = 0.f;
  for (int64_t r = r0; r < r1; r++) {
    float g = dy[r * D + c];
    float xh = (x[r * D + c] - (mean ? mean[r] : 0.f)) * rstd[r];
    sw += g * xh;
    sb += g;
  }
  if (dw) atomicAdd(dw + c, sw);
  if (db) atomicAdd(db + c, sb);
}

__global__ void softmax_fwd_k(int64_t R, int64_t D, const float* __restrict__ x, float* __restrict__ y, bool log) {
  int64_t r = blockIdx.x * (int64_t)WARPS + threadIdx.x / 32;
  int lane = threadIdx.x & 31;
  if (r >= R) return;
  const float* xr = x + r * D;
  float m = -INFINITY;
  for (int64_t i = lane; i < D; i += 32) m = fmaxf(m, xr[i]);
  m = warp_max(m);
  float s = 0.f;
  for (int64_t i = lane; i < D; i += 32) s += expf(xr[i] - m);
  s = warp_sum(s);
  float* yr = y + r * D;
  if (log) {
    float ls = logf(s);
    for (int64_t i = lane; i < D; i += 32) yr[i] = xr[i] - m - ls;
  } else {
    float inv = 1.f / s;
    for (int64_t i = lane; i < D; i += 32) yr[i] = expf(xr[i] - m) * inv;
  }
}

__global__ void softmax_bwd_k(int64_t R, int64_t D, const float* __restrict__ y, const float* __restrict__ dy,
                              float* __restrict__ dx) {
  int64_t r = blockIdx.x * (int64_t)WARPS + threadIdx.x / 32;
  int lane = threadIdx.x & 31;
  if (r >= R) return;
  const float *yr = y + r * D, *dyr = dy + r * D;
  float s = 0.f;
  for (int64_t i = lane; i < D; i += 32) s += yr[i] * dyr[i];
  s = warp_sum(s);
  float* dxr = dx + r * D;
  for (int64_t i = lane; i < D; i += 32) dxr[i] = yr[i] * (dyr[i] - s);
}

// Cross-entropy pass 1 (block per row): lse[t], losses[t]; totals in red[0] (loss sum) and the
// int at red+1 (count of rows with a label).
__global__ void xent_k(int64_t T, int64_t V, const float* __restrict__ logits, const int32_t* __restrict__ labels,
                       float* lse_out, float* losses, float* red, int* err) {
  __shared__ float sh[32];
  int64_t t = blockIdx.x;
  if (t >= T) return;
  int label = labels[t];
  const float* lr = logits + t * V;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) m = fmaxf(m, lr[i]);
  m = warp_max(m);
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = m;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < blockDim.x / 32 ? sh[threadIdx.x] : -INFINITY;
    v = warp_max(v);
    if (threadIdx.x == 0) sh[0] = v;
  }
  __syncthreads();
  m = sh[0];
  __syncthreads();
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < V; i += blockDim.x) s += expf(lr[i] - m);
  s = warp_sum(s);
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = s;
  __syncthreads();
  if (threadIdx.x < 32) {
    float v = threadIdx.x < blockDim.x / 32 ? sh[threadIdx.x] : 0.f;
    v = warp_sum(v);
    if (threadIdx.x == 0) {
      float l = m + logf(v);
      lse_out[t] = l;
      bool bad = label >= V;
      if (bad) atomicExch(err, ERR_BAD_LABEL);
      float loss = 0.f;
      if (label >= 0 && !bad) {
        loss = l - lr[label];
        atomicAdd(red, loss);
        atomicAdd(reinterpret_cast<int*>(red + 1), 1);
      }
      if (losses) losses[t] = loss;
    }
  }
}

// Pass 2: dlogits = (softmax - onehot) / count; zero rows for ignored labels.
__global__ void xent_bwd_k(int64_t T, int64_t V, const float* __restrict__ logits, const int32_t* __restrict__ labels,
                           const float* __restrict__ lse, const float* red, float* __restrict__ dlogits) {
  int cnt = *reinterpret_cast<const int*>(red + 1);
  float inv = cnt > 0 ? 1.f / float(cnt) : 0.f;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < T * V; e += (int64_t)gridDim.x * blockDim.x) {
    int64_t t = e / V, c = e % V;
    int label = labels[t];
    if (label < 0 || label >= V) {
      dlogits[e] = 0.f;
      continue;
    }
    dlogits[e] = (expf(logits[e] - lse[t]) - (c == label ? 1.f : 0.f)) * inv;
  }
}

// RoPE: one thread per (t, h, i), i < Dh/2. sign = +1 forward, -1 backward (inverse rotation).
__global__ void rope_k(int64_t T, int64_t H, int64_t Dh, int64_t ld, const int32_t* __restrict__ pos,
                       const float* __restrict__ inv_freq, float* __restrict__ x, float sign) {
  int64_t half = Dh / 2, n = T * H * half;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
    int64_t i = e % half, th = e / half, h = th % H, t = th / H;
    float ang = float(pos[t]) * inv_freq[i];
    float s, c;
    sincosf(ang, &s, &c);
    s *= sign;
    float* p = x + t * ld + h * Dh;
    float x1 = p[i], x2 = p[i + half];
    p[i] = x1 * c - x2 * s;
    p[i + half] = x2 * c + x1 * s;
  }
}

void norm_wgrad(int64_t R, int64_t D, const float* x, const float* mean, const float* rstd, const float* dy, float* dw,
                float* db) {
  if (!dw && !db) return;
  Context& c = ctx();
  int64_t rows_per = 64, chunks = (R + rows_per - 1) / rows_per;
  if (chunks > 65535) {
    rows_per = (R + 65534) / 65535;
    chunks = (R + rows_per - 1) / rows_per;
  }
  dim3 grid(unsigned((D + 255) / 256), unsigned(chunks));
  norm_wgrad_k<<<grid, 256, 0, c.stream>>>(R, D, rows_per, x, mean, rstd, dy, dw, db);
  check_launch("norm_wgrad_k");
}

unsigned row_blocks(int64_t R) { return unsigned((R + WARPS - 1) / WARPS); }

}  // namespace

void layernorm_fwd(int64_t R, int64_t D, const float* x, const float* w, const float* b, float eps, float* y,
                   float* mean, float* rstd) {
  if (R <= 0 || D <= 0) return;
  Context& c = ctx();
  layernorm_fwd_k<<<row_blocks(R), WARPS * 32, 0, c.stream>>>(R, D, x, w, b, eps, y, mean, rstd);
  check_launch("layernorm_fwd_k");
}
void layernorm_bwd(int64_t R, int64_t D, const float* x, const float* w, const float* mean, const float* rstd,
                   const float* dy, float* dx, float* dw, float* db) {
  require(mean && rstd, "layernorm_bwd needs mean and rstd from the forward");
  if (R <= 0 || D <= 0) return;
  Context& c = ctx();
  if (dx) {
    layernorm_bwd_k<<<row_blocks(R), WARPS * 32, 0, c.stream>>>(R, D, x, w, mean, rstd, dy, dx);
    check_launch("layernorm_bwd_k");
  }
  norm_wgrad(R, D, x, mean, rstd, dy, dw, db);
}
void rmsnorm_fwd(int64_t R, int64_t D, const float* x, const float* w, float eps, float* y, float* rstd) {
  if (R <= 0 || D <= 0) return;
  Context& c = ctx();
  rmsnorm_fwd_k<<<row_blocks(R), WARPS * 32, 0, c.stream>>>(R, D, x, w, eps, y, rstd);
  check_launch("rmsnorm_fwd_k");
}
void rmsnorm_bwd(int64_t R, int64_t D, const float* x, const float* w, const float* rstd, const float* dy, float* dx,
                 float* dw) {
  require(rstd != nullptr, "rmsnorm_bwd needs rstd from the forward");
  if (R <= 0 || D <= 0) return;
  Context& c = ctx();
  if (dx) {
    rmsnorm_bwd_k<<<row_blocks(R), WARPS * 32, 0, c.stream>>>(R, D, x, w, rstd, dy, dx);
    check_launch("rmsnorm_bwd_k");
  }
  norm_wgrad(R, D, x, nullptr, rstd, dy, dw, nullptr);
}
void softmax_fwd(int64_t R, int64_t D, const float* x, float* y) {
  if (R <= 0 || D <= 0) return;
  Context& c = ctx();
  softmax_fwd_k<<<row_blocks(R), WARPS * 32, 0, c.stream>>>(R, D, x, y, false);
  check_launch("softmax_fwd_k");
}
void log_softmax_fwd(int64_t R, int64_t D, const float* x, float* y) {
  if (R <= 0 || D <= 0) return;
  Context& c = ctx();
  softmax_fwd_k<<<row_blocks(R), WARPS * 32, 0, c.stream>>>(R, D, x, y, true);
  check_launch("softmax_fwd_k(log)");
}
void softmax_bwd(int64_t R, int64_t D, const float* y, const float* dy, float* dx) {
  if (R <= 0 || D <= 0) return;
  Context& c = ctx();
  softmax_bwd_k<<<row_blocks(R), WARPS * 32, 0, c.stream>>>(R, D, y, dy, dx);
  check_launch("softmax_bwd_k");
}

float cross_entropy_fwd_bwd(int64_t T, int64_t V, const float* logits, const int32_t* labels, float* dlogits,
                            float* losses) {
  require(V > 0, "cross_entropy: V must be > 0");
  if (T <= 0) return 0.f;
  require(T < (1ll << 31), "cross_entropy: T must be < 2^31");
  Context& c = ctx();
  auto* lse = static_cast<float*>(scratch(1, size_t(T) * sizeof(float)));
  check(cudaMemsetAsync(c.red, 0, 2 * sizeof(float), c.stream), "cudaMemsetAsync");
  xent_k<<<unsigned(T), 256, 0, c.stream>>>(T, V, logits, labels, lse, losses, c.red, c.err_flag);
  check_launch("xent_k");
  if (dlogits) {
    xent_bwd_k<<<grid_for(T * V, 256), 256, 0, c.stream>>>(T, V, logits, labels, lse, c.red, dlogits);
    check_launch("xent_bwd_k");
  }
  float host[2];
  to_host(host, c.red, sizeof(host));  // synchronizes; throws on a label >= V
  int cnt;
  std::memcpy(&cnt, &host[1], sizeof(int));
  return cnt > 0 ? host[0] / float(cnt) : 0.f;
}

void rope_inv_freq(int64_t Dh, float theta, const RopeScaling& s, float* inv) {
  const double pi = 3.14159265358979323846;
  for (int64_t i = 0; i < Dh / 2; i++) {
    double f = 1.0 / std::pow(double(theta), double(2 * i) / double(Dh));
    if (s.type == 2) {
      f /= s.factor;
    } else if (s.type == 1) {
      double old_ctx = s.original_max_position;
      double low_wl = old_ctx / s.low_freq_factor, high_wl = old_ctx / s.high_freq_factor;
      double wl = 2 * pi / f;
      if (wl > low_wl) {
        f = f / s.factor;
      } else if (wl >= high_wl) {  // medium band: smooth interpolation
        double smooth = (old_ctx / wl - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
        f = (1 - smooth) * f / s.factor + smooth * f;
      }
    }
    inv[i] = float(f);
  }
}

void rope_fwd(int64_t T, int64_t H, int64_t Dh, int64_t ld, const int32_t* pos, const float* inv_freq, float* x) {
  require(Dh % 2 == 0, "rope: head dim must be even");
  if (ld == 0) ld = H * Dh;
  require(ld >= H * Dh, "rope: row stride smaller than H*Dh");
  int64_t n = T * H * (Dh / 2);
  if (n <= 0) return;
  Context& c = ctx();
  rope_k<<<grid_for(n, 256), 256, 0, c.stream>>>(T, H, Dh, ld, pos, inv_freq, x, 1.f);
  check_launch("rope_k");
}
void rope_bwd(int64_t T, int64_t H, int64_t Dh, int64_t ld, const int32_t* pos, const float* inv_freq, float* dx) {
  require(Dh % 2 == 0, "rope: head dim must be even");
  if (ld == 0) ld = H * Dh;
  require(ld >= H * Dh, "rope: row stride smaller than H*Dh");
  int64_t n = T * H * (Dh / 2);
  if (n <= 0) return;
  Context& c = ctx();
  rope_k<<<grid_for(n, 256), 256, 0, c.stream>>>(T, H, Dh, ld, pos, inv_freq, dx, -1.f);
  check_launch("rope_k(bwd)");
}

}  // namespace loom::cuda
