// Attention on the GPU (flash-style): q (B, Tq, Hq, Dh), k/v (B, Tk, Hkv, Dh), row strides ld*.
//
// Forward: a block owns NW = 8 consecutive queries of one (b, h), one warp per query. Key and
// value tiles of KT = 32 rows are staged in shared memory; in a tile each lane scores one key
// (full dot product against the warp's query row in shared memory), the warp does the online
// softmax update (running max m, running sum l), and each lane accumulates its Dh/32 output dims
// from the tile's values. Memory: O(Tk) per query; the (Tq, Tk) matrix never exists.
//
// Backward (no atomics except a broadcast bias gradient):
//   D_i = sum_d dout_i·out_i; p_ij = exp(s_ij - lse_i); dp_ij = dout_i·v_j; ds_ij = p_ij (dp_ij - D_i)
//   dq_i = scale Σ_j ds_ij k_j           (query-major kernel, same tiling as the forward)
//   dk_j = scale Σ_{h in group, i} ds_ij q_i ; dv_j = Σ p_ij dout_i  (key-major kernel: one warp per
//   key, looping over the query heads that share it (GQA) and over query tiles)
//   dbias_ij = ds_ij
#include <cuda_runtime.h>

#include <cmath>

#include "cuda_internal.h"

namespace loom::cuda {
namespace {

constexpr int NW = 8;   // warps (query or key rows) per block
constexpr int KT = 32;  // tile rows (one per lane)

struct Dev {
  int64_t B, Tq, Tk, Hq, Hkv, Dh, ldq, ldk, ldv, ldo, q_offset, sb, sh, si;
  float scale;
  bool causal;
  const uint8_t* key_mask;
  const float* bias;
};

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

// Scaled, biased score of (b, h, i, j), or -inf when masked.
__device__ __forceinline__ float score_of(const Dev& p, float dot, int64_t b, int64_t h, int64_t i, int64_t j) {
  if (j >= p.Tk) return -INFINITY;
  if (p.causal && j > i + p.q_offset) return -INFINITY;
  if (p.key_mask && !p.key_mask[b * p.Tk + j]) return -INFINITY;
  float s = dot * p.scale;
  if (p.bias) s += p.bias[b * p.sb + h * p.sh + i * p.si + j];
  return s;
}

// Loads rows [r0, r0 + KT) of a (T, ·, Dh) tensor (row stride ld, head offset) into sm[KT][Dh+1].
__device__ __forceinline__ void load_tile(float* sm, const float* src, int64_t r0, int64_t T, int64_t ld, int64_t Dh) {
  for (int e = threadIdx.x; e < KT * Dh; e += blockDim.x) {
    int r = e / int(Dh), d = e % int(Dh);
    int64_t row = r0 + r;
    sm[r * (Dh + 1) + d] = row < T ? src[row * ld + d] : 0.f;
  }
}

template <int DPL>  // output dims per lane: Dh <= 32 * DPL
__global__ void attn_fwd_k(Dev p, const float* __restrict__ q, const float* __restrict__ k,
                           const float* __restrict__ v, float* __restrict__ out, float* __restrict__ lse) {
  extern __shared__ float sm[];
  const int Dh = int(p.Dh), P = Dh + 1;
  float* Ks = sm;                 // [KT][P]
  float* Vs = Ks + KT * P;        // [KT][P]
  float* Qs = Vs + KT * P;        // [NW][Dh]
  const int w = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int64_t b = blockIdx.z, h = blockIdx.y, hk = h / (p.Hq / p.Hkv);
  const int64_t i0 = int64_t(blockIdx.x) * NW, i = i0 + w;
  const bool valid = i < p.Tq;
  const float* qrow = q + b * p.Tq * p.ldq + i * p.ldq + h * Dh;
  const float* kb = k + b * p.Tk * p.ldk + hk * Dh;
  const float* vb = v + b * p.Tk * p.ldv + hk * Dh;
  for (int d = lane; d < Dh; d += 32) Qs[w * Dh + d] = valid ? qrow[d] : 0.f;

  int64_t kend = p.Tk;
  if (p.causal) {
    int64_t ilast = min(p.Tq - 1, i0 + NW - 1);
    kend = min(p.Tk, ilast + p.q_offset + 1);
  }
  float m = -INFINITY, l = 0.f, acc[DPL];
#pragma unroll
  for (int jj = 0; jj < DPL; jj++) acc[jj] = 0.f;

  for (int64_t t0 = 0; t0 < kend; t0 += KT) {
    __syncthreads();  // previous tile consumed (and Qs written, first time)
    load_tile(Ks, kb, t0, p.Tk, p.ldk, Dh);
    load_tile(Vs, vb, t0, p.Tk, p.ldv, Dh);
    __syncthreads();
    if (!valid) continue;
    const float* kr = Ks + lane * P;
    const float* qr = Qs + w * Dh;
    float dot = 0.f;
    for (int d = 0; d < Dh; d++) dot = fmaf(qr[d], kr[d], dot);
    float s = score_of(p, dot, b, h, i, t0 + lane);
    float mt = warp_max(s);
    float mn = fmaxf(m, mt);
    if (mn == -INFINITY) continue;  // everything so far masked
    float pj = s == -INFINITY ? 0.f : expf(s - mn);
    float corr = m == -INFINITY ? 0.f : expf(m - mn);
    l = l * corr + warp_sum(pj);
    m = mn;
#pragma unroll
    for (int jj = 0; jj < DPL; jj++) acc[jj] *= corr;
    for (int r = 0; r < KT; r++) {
      float pr = __shfl_sync(0xffffffffu, pj, r);
      if (pr == 0.f) continue;  // uniform across the warp
      const float* vr = Vs + r * P;
#pragma unroll
      for (int jj = 0; jj < DPL; jj++) {
        int d = lane + 32 * jj;
        if (d < Dh) acc[jj] = fmaf(pr, vr[d], acc[jj]);
      }
    }
  }
  if (!valid) return;
  float inv = l > 0.f ? 1.f / l : 0.f;
  float* orow = out + b * p.Tq * p.ldo + i * p.ldo + h * Dh;
#pragma unroll
  for (int jj = 0; jj < DPL; jj++) {
    int d = lane + 32 * jj;
    if (d < Dh) orow[d] = acc[jj] * inv;
  }
  if (lse && lane == 0) lse[(b * p.Hq + h) * p.Tq + i] = l > 0.f ? m + logf(l) : -INFINITY;
}

// D[b, h, i] = dout_i · out_i (warp per row)
__global__ void attn_dot_k(Dev p, const float* __restrict__ out, const float* __restrict__ dout, float* __restrict__ D) {
  int64_t row = int64_t(blockIdx.x) * NW + threadIdx.x / 32;  // over B*Hq*Tq, ordered (b, h, i)
  int lane = threadIdx.x & 31;
  if (row >= p.B * p.Hq * p.Tq) return;
  int64_t i = row % p.Tq, h = (row / p.Tq) % p.Hq, b = row / (p.Tq * p.Hq);
  const float* o = out + b * p.Tq * p.ldo + i * p.ldo + h * p.Dh;
  const float* g = dout + b * p.Tq * p.ldo + i * p.ldo + h * p.Dh;
  float s = 0.f;
  for (int64_t d = lane; d < p.Dh; d += 32) s += o[d] * g[d];
  s = warp_sum(s);
  if (lane == 0) D[row] = s;
}

// dq (and dbias): query-major, like the forward.
template <int DPL>
__global__ void attn_dq_k(Dev p, const float* __restrict__ q, const float* __restrict__ k, const float* __restrict__ v,
                          const float* __restrict__ dout, const float* __restrict__ lse, const float* __restrict__ Dv,
                          float* __restrict__ dq, float* __restrict__ dbias, bool dbias_atomic) {
  extern __shared__ float sm[];
  const int Dh = int(p.Dh), P = Dh + 1;
  float* Ks = sm;
  float* Vs = Ks + KT * P;
  float* Qs = Vs + KT * P;   // [NW][Dh]
  float* Gs = Qs + NW * Dh;  // [NW][Dh] dout rows
  const int w = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int64_t b = blockIdx.z, h = blockIdx.y, hk = h / (p.Hq / p.Hkv);
  const int64_t i0 = int64_t(blockIdx.x) * NW, i = i0 + w;
  const bool valid = i < p.Tq;
  const float* qrow = q + b * p.Tq * p.ldq + i * p.ldq + h * Dh;
  const float* grow = dout + b * p.Tq * p.ldo + i * p.ldo + h * Dh;
  for (int d = lane; d < Dh; d += 32) {
    Qs[w * Dh + d] = valid ? qrow[d] : 0.f;
    Gs[w * Dh + d] = valid ? grow[d] : 0.f;
  }
  const int64_t row = (b * p.Hq + h) * p.Tq + i;
  const float li = valid ? lse[row] : -INFINITY, Di = valid ? Dv[row] : 0.f;
  const float* kb = k + b * p.Tk * p.ldk + hk * Dh;
  const float* vb = v + b * p.Tk * p.ldv + hk * Dh;
  int64_t kend = p.Tk;
  if (p.causal) kend = min(p.Tk, min(p.Tq - 1, i0 + NW - 1) + p.q_offset + 1);
  float acc[DPL];
#pragma unroll
  for (int jj = 0; jj < DPL; jj++) acc[jj] = 0.f;
  for (int64_t t0 = 0; t0 < kend; t0 += KT) {
    __syncthreads();
    load_tile(Ks, kb, t0, p.Tk, p.ldk, Dh);
    load_tile(Vs, vb, t0, p.Tk, p.ldv, Dh);
    __syncthreads();
    if (!valid) continue;
    const float *kr = Ks + lane * P, *vr = Vs + lane * P, *qr = Qs + w * Dh, *gr = Gs + w * Dh;
    float dot = 0.f, dp = 0.f;
    for (int d = 0; d < Dh; d++) {
      dot = fmaf(qr[d], kr[d], dot);
      dp = fmaf(gr[d], vr[d], dp);
    }
    int64_t j = t0 + lane;
    float s = score_of(p, dot, b, h, i, j);
    float pj = (s == -INFINITY || li == -INFINITY) ? 0.f : expf(s - li);
    float ds = pj * (dp - Di);
    if (dbias && j < p.Tk) {
      float* db = dbias + b * p.sb + h * p.sh + i * p.si + j;
      if (dbias_atomic) atomicAdd(db, ds);
      else *db = ds;
    }
    for (int r = 0; r < KT; r++) {
      float dr = __shfl_sync(0xffffffffu, ds, r);
      if (dr == 0.f) continue;
      const float* kk = Ks + r * P;
#pragma unroll
      for (int jj = 0; jj < DPL; jj++) {
        int d = lane + 32 * jj;
        if (d < Dh) acc[jj] = fmaf(dr, kk[d], acc[jj]);
      }
    }
  }
  if (!valid) return;
  float* dqrow = dq + b * p.Tq * p.ldq + i * p.ldq + h * Dh;
#pragma unroll
  for (int jj = 0; jj < DPL; jj++) {
    int d = lane + 32 * jj;
    if (d < Dh) dqrow[d] = acc[jj] * p.scale;
  }
}

// dk, dv: key-major. Block = NW keys of one (b, hk); query tiles of KT rows per head in the group.
template <int DPL>
__global__ void attn_dkv_k(Dev p, const float* __restrict__ q, const float* __restrict__ k,
                           const float* __restrict__ v, const float* __restrict__ dout, const float* __restrict__ lse,
                           const float* __restrict__ Dv, float* __restrict__ dk, float* __restrict__ dv) {
  extern __shared__ float sm[];
  const int Dh = int(p.Dh), P = Dh + 1;
  float* Qs = sm;               // [KT][P]
  float* Gs = Qs + KT * P;      // [KT][P]
  float* Ls = Gs + KT * P;      // [KT] lse
  float* Ds = Ls + KT;          // [KT] D
  float* Kw = Ds + KT;          // [NW][Dh]
  float* Vw = Kw + NW * Dh;     // [NW][Dh]
  const int w = threadIdx.x / 32, lane = threadIdx.x & 31;
  const int64_t b = blockIdx.z, hk = blockIdx.y, G = p.Hq / p.Hkv;
  const int64_t j0 = int64_t(blockIdx.x) * NW, j = j0 + w;
  const bool valid = j < p.Tk;
  const float* krow = k + b * p.Tk * p.ldk + j * p.ldk + hk * Dh;
  const float* vrow = v + b * p.Tk * p.ldv + j * p.ldv + hk * Dh;
  for (int d = lane; d < Dh; d += 32) {
    Kw[w * Dh + d] = valid ? krow[d] : 0.f;
    Vw[w * Dh + d] = valid ? vrow[d] : 0.f;
  }
  // Causal: query i sees key j iff i >= j - q_offset; the block's first key bounds the start.
  int64_t istart = 0;
  if (p.causal) istart = max(int64_t(0), j0 - p.q_offset) / KT * KT;
  float acck[DPL], accv[DPL];
#pragma unroll
  for (int jj = 0; jj < DPL; jj++) acck[jj] = accv[jj] = 0.f;
  for (int64_t hq = hk * G; hq < (hk + 1) * G; hq++) {
    const float* qb = q + b * p.Tq * p.ldq + hq * Dh;
    const float* gb = dout + b * p.Tq * p.ldo + hq * Dh;
    for (int64_t t0 = istart; t0 < p.Tq; t0 += KT) {
      __syncthreads();
      load_tile(Qs, qb, t0, p.Tq, p.ldq, Dh);
      load_tile(Gs, gb, t0, p.Tq, p.ldo, Dh);
      if (threadIdx.x < KT) {
        int64_t ii = t0 + threadIdx.x;
        int64_t row = (b * p.Hq + hq) * p.Tq + ii;
        Ls[threadIdx.x] = ii < p.Tq ? lse[row] : -INFINITY;
        Ds[threadIdx.x] = ii < p.Tq ? Dv[row] : 0.f;
      }
      __syncthreads();
      if (!valid) continue;
      int64_t i = t0 + lane;
      const float *qr = Qs + lane * P, *gr = Gs + lane * P, *kr = Kw + w * Dh, *vr = Vw + w * Dh;
      float dot = 0.f, dp = 0.f;
      for (int d = 0; d < Dh; d++) {
        dot = fmaf(qr[d], kr[d], dot);
        dp = fmaf(gr[d], vr[d], dp);
      }
      float pj = 0.f, ds = 0.f;
      if (i < p.Tq) {
        float s = score_of(p, dot, b, hq, i, j);
        float li = Ls[lane];
        pj = (s == -INFINITY || li == -INFINITY) ? 0.f : expf(s - li);
        ds = pj * (dp - Ds[lane]);
      }
      for (int r = 0; r < KT; r++) {
        float pr = __shfl_sync(0xffffffffu, pj, r);
        float dr = __shfl_sync(0xffffffffu, ds, r);
        if (pr == 0.f && dr == 0.f) continue;
        const float *qq = Qs + r * P, *gg = Gs + r * P;
#pragma unroll
        for (int jj = 0; jj < DPL; jj++) {
          int d = lane + 32 * jj;
          if (d < Dh) {
            accv[jj] = fmaf(pr, gg[d], accv[jj]);
            acck[jj] = fmaf(dr, qq[d], acck[jj]);
          }
        }
      }
    }
  }
  if (!valid) return;
  float* dkrow = dk + b * p.Tk * p.ldk + j * p.ldk + hk * Dh;
  float* dvrow = dv + b * p.Tk * p.ldv + j * p.ldv + hk * Dh;
#pragma unroll
  for (int jj = 0; jj < DPL; jj++) {
    int d = lane + 32 * jj;
    if (d < Dh) {
      dkrow[d] = acck[jj] * p.scale;
      dvrow[d] = accv[jj];
    }
  }
}

Dev make_dev(const AttnParams& a) {
  Dev p;
  p.B = a.B; p.Tq = a.Tq; p.Tk = a.Tk; p.Hq = a.Hq; p.Hkv = a.Hkv; p.Dh = a.Dh;
  p.ldq = a.ldq ? a.ldq : a.Hq * a.Dh;
  p.ldk = a.ldk ? a.ldk : a.Hkv * a.Dh;
  p.ldv = a.ldv ? a.ldv : a.Hkv * a.Dh;
  p.ldo = a.ldo ? a.ldo : a.Hq * a.Dh;
  p.scale = a.scale != 0.f ? a.scale : 1.f / std::sqrt(float(a.Dh));
  p.causal = a.causal;
  p.q_offset = a.q_offset;
  p.key_mask = a.key_mask;
  p.bias = a.bias;
  p.sb = a.bias_sb; p.sh = a.bias_sh; p.si = a.bias_si;
  require(p.B >= 0 && p.Tq >= 0 && p.Tk >= 0, "attention: negative size");
  require(p.Hq >= 1 && p.Hkv >= 1 && p.Hq % p.Hkv == 0, "attention: Hq must be a multiple of Hkv");
  require(p.Dh >= 1 && p.Dh <= 256, "attention: head dim must be in [1, 256]");
  require(p.ldq >= p.Hq * p.Dh && p.ldk >= p.Hkv * p.Dh && p.ldv >= p.Hkv * p.Dh && p.ldo >= p.Hq * p.Dh,
          "attention: row stride smaller than heads*Dh");
  require(p.Hq <= 65535 && p.B <= 65535, "attention: B and heads must be <= 65535");
  return p;
}

template <typename K>
void set_smem(K kernel, size_t bytes) {
  if (bytes > 48 * 1024) {
    require(bytes <= ctx().smem_optin, "attention: head dim needs more shared memory than the device has");
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)),
          "cudaFuncSetAttribute");
  }
}

}  // namespace

void attention_fwd(const AttnParams& a, const float* q, const float* k, const float* v, float* out, float* lse) {
  Dev p = make_dev(a);
  if (p.B == 0 || p.Tq == 0) return;
  Context& c = ctx();
  const int Dh = int(p.Dh);
  size_t smem = (size_t(2) * KT * (Dh + 1) + size_t(NW) * Dh) * sizeof(float);
  dim3 grid(unsigned((p.Tq + NW - 1) / NW), unsigned(p.Hq), unsigned(p.B));
#define FWD(DPL)                                                                 \
  {                                                                              \
    set_smem(attn_fwd_k<DPL>, smem);                                             \
    attn_fwd_k<DPL><<<grid, NW * 32, smem, c.stream>>>(p, q, k, v, out, lse);    \
  }
  if (Dh <= 64) FWD(2) else if (Dh <= 128) FWD(4) else FWD(8)
#undef FWD
  check_launch("attn_fwd_k");
}

void attention_bwd(const AttnParams& a, const float* q, const float* k, const float* v, const float* out,
                   const float* lse, const float* dout, float* dq, float* dk, float* dv, float* dbias) {
  Dev p = make_dev(a);
  require(lse != nullptr, "attention_bwd needs lse from the forward");
  if (p.B == 0) return;
  Context& c = ctx();
  const int Dh = int(p.Dh);
  if (p.Tq == 0) {  // no queries: zero key gradients
    for (int64_t b = 0; b < p.B; b++) {
      check(cudaMemset2DAsync(dk + b * p.Tk * p.ldk, p.ldk * 4, 0, p.Hkv * Dh * 4, p.Tk, c.stream), "memset");
      check(cudaMemset2DAsync(dv + b * p.Tk * p.ldv, p.ldv * 4, 0, p.Hkv * Dh * 4, p.Tk, c.stream), "memset");
    }
    return;
  }
  int64_t rows = p.B * p.Hq * p.Tq;
  auto* D = static_cast<float*>(scratch(1, size_t(rows) * sizeof(float)));
  attn_dot_k<<<unsigned((rows + NW - 1) / NW), NW * 32, 0, c.stream>>>(p, out, dout, D);
  check_launch("attn_dot_k");

  bool dbias_atomic = false;
  if (dbias) {
    require(p.bias != nullptr, "attention_bwd: dbias given without a bias");
    dbias_atomic = (p.sb == 0 && p.B > 1) || (p.sh == 0 && p.Hq > 1) || (p.si == 0 && p.Tq > 1);
    // Zero the whole extent first: causal tiles past the diagonal are never visited.
    int64_t extent = (p.B - 1) * p.sb + (p.Hq - 1) * p.sh + (p.Tq - 1) * p.si + p.Tk;
    dev_zero(dbias, size_t(extent) * sizeof(float));
  }
  {
    size_t smem = (size_t(2) * KT * (Dh + 1) + size_t(2) * NW * Dh) * sizeof(float);
    dim3 grid(unsigned((p.Tq + NW - 1) / NW), unsigned(p.Hq), unsigned(p.B));
#define DQ(DPL)                                                                                             \
  {                                                                                                         \
    set_smem(attn_dq_k<DPL>, smem);                                                                         \
    attn_dq_k<DPL><<<grid, NW * 32, smem, c.stream>>>(p, q, k, v, dout, lse, D, dq, dbias, dbias_atomic);   \
  }
    if (Dh <= 64) DQ(2) else if (Dh <= 128) DQ(4) else DQ(8)
#undef DQ
    check_launch("attn_dq_k");
  }
  if (p.Tk > 0) {
    size_t smem = (size_t(2) * KT * (Dh + 1) + 2 * KT + size_t(2) * NW * Dh) * sizeof(float);
    dim3 grid(unsigned((p.Tk + NW - 1) / NW), unsigned(p.Hkv), unsigned(p.B));
#define DKV(DPL)                                                                           \
  {                                                                                        \
    set_smem(attn_dkv_k<DPL>, smem);                                                       \
    attn_dkv_k<DPL><<<grid, NW * 32, smem, c.stream>>>(p, q, k, v, dout, lse, D, dk, dv);  \
  }
    if (Dh <= 64) DKV(2) else if (Dh <= 128) DKV(4) else DKV(8)
#undef DKV
    check_launch("attn_dkv_k");
  }
}

}  // namespace loom::cuda
