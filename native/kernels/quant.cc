// Quantized linear layers: the public entry points of loom/quant.h (run-time dispatch) and the portable
// reference kernels. The AVX2 kernels are in quant_avx2.cc; quant_avx512.cc runs those (no VNNI path yet).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>
#include "loom/gemm.h"
#include "loom/quant.h"
#include "quant_internal.h"
#include "../formats/gguf_dequant.h"

namespace loom {

namespace portable {

// x (K) → q (K), d (K/32), ds (K/32): per block d = amax/127, q = round(x/d) (nearest even).
void quant_act_q8(int64_t K, const float* x, int8_t* q, float* d, float* ds) {
  for (int64_t b = 0; b < K / kQ8Block; b++) {
    const float* xb = x + b * kQ8Block;
    float amax = 0.0f;
    for (int i = 0; i < kQ8Block; i++) amax = std::max(amax, std::fabs(xb[i]));
    const float db = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int i = 0; i < kQ8Block; i++) {
      const int v = int(std::nearbyint(xb[i] * id));
      q[b * kQ8Block + i] = int8_t(v);
      sum += v;
    }
    d[b] = db;
    ds[b] = db * float(sum);
  }
}

// Σ over Q8_0 blocks of d_w·d_x·Σ q_w·q_x
float vec_dot_q8_0_q8(int64_t K, const uint8_t* w, const int8_t* q, const float* d) {
  float acc = 0.0f;
  for (int64_t b = 0; b < K / kQ8Block; b++, w += kQ8_0Bytes) {
    uint16_t h;
    std::memcpy(&h, w, 2);
    const int8_t* qw = reinterpret_cast<const int8_t*>(w + 2);
    int32_t isum = 0;
    for (int i = 0; i < kQ8Block; i++) isum += int32_t(qw[i]) * int32_t(q[b * kQ8Block + i]);
    acc += f16_to_f32(h) * d[b] * float(isum);
  }
  return acc;
}

// Q4_K super-block of 256: value of sub-block j = d·sc_j·q - dmin·m_j, so against activation block j
// the dot is d·sc_j·d_x·Σ q·q_x - dmin·m_j·(d_x·Σ q_x).
float vec_dot_q4_K_q8(int64_t K, const uint8_t* w, const int8_t* q, const float* d, const float* ds) {
  float acc = 0.0f;
  for (int64_t sb = 0; sb < K / gguf::QK_K; sb++, w += kQ4_KBytes) {
    uint16_t h0, h1;
    std::memcpy(&h0, w, 2);
    std::memcpy(&h1, w + 2, 2);
    const float dw = f16_to_f32(h0), dmin = f16_to_f32(h1);
    for (int c = 0; c < 4; c++) {  // sub-blocks 2c (low nibbles) and 2c+1 (high nibbles) of bytes 32c..
      const uint8_t* qw = w + 16 + 32 * c;
      const int64_t j = sb * 8 + 2 * c;  // activation block of the low nibbles
      const int8_t* x0 = q + j * kQ8Block;
      const int8_t* x1 = x0 + kQ8Block;
      int32_t s0 = 0, s1 = 0;
      for (int l = 0; l < 32; l++) {
        s0 += int32_t(qw[l] & 0x0F) * int32_t(x0[l]);
        s1 += int32_t(qw[l] >> 4) * int32_t(x1[l]);
      }
      int sc0, m0, sc1, m1;
      gguf::scale_min_k4(2 * c, w + 4, &sc0, &m0);
      gguf::scale_min_k4(2 * c + 1, w + 4, &sc1, &m1);
      acc += dw * (float(sc0) * d[j] * float(s0) + float(sc1) * d[j + 1] * float(s1));
      acc -= dmin * (float(m0) * ds[j] + float(m1) * ds[j + 1]);
    }
  }
  return acc;
}

}  // namespace portable

// AVX-512: the AVX2 kernels (an AVX-512 VNNI path is not written yet).
namespace avx512 {
void quant_act_q8(int64_t K, const float* x, int8_t* q, float* d, float* ds) { avx2::quant_act_q8(K, x, q, d, ds); }
float vec_dot_q8_0_q8(int64_t K, const uint8_t* w, const int8_t* q, const float* d) {
  return avx2::vec_dot_q8_0_q8(K, w, q, d);
}
float vec_dot_q4_K_q8(int64_t K, const uint8_t* w, const int8_t* q, const float* d, const float* ds) {
  return avx2::vec_dot_q4_K_q8(K, w, q, d, ds);
}
}  // namespace avx512

bool quant_supported(DType t) { return t == DType::Q8_0 || t == DType::Q4_K; }

int64_t quant_block_values(DType t) {
  return t == DType::Q8_0 ? kQ8Block : t == DType::Q4_K ? gguf::QK_K : 0;
}

size_t quant_row_bytes(DType t, int64_t K) {
  if (t == DType::Q8_0) return size_t(K / kQ8Block * kQ8_0Bytes);
  if (t == DType::Q4_K) return size_t(K / gguf::QK_K * kQ4_KBytes);
  throw std::invalid_argument(std::string("quant: unsupported type ") + dtype_name(t));
}

static void check(DType t, int64_t K) {
  if (!quant_supported(t)) throw std::invalid_argument(std::string("quant: unsupported type ") + dtype_name(t));
  if (K <= 0 || K % quant_block_values(t) != 0)
    throw std::invalid_argument("quant: K = " + std::to_string(K) + " is not a positive multiple of the block size " +
                                std::to_string(quant_block_values(t)));
}

static void dequant_rows(DType t, int64_t rows, int64_t K, const uint8_t* src, float* dst) {
  if (t == DType::Q8_0) gguf::dequant_q8_0(src, dst, rows * K);
  else gguf::dequant_q4_k(src, dst, rows * K);
}

void quant_dequantize_rows(DType t, int64_t rows, int64_t K, const void* src, float* dst) {
  check(t, K);
  dequant_rows(t, rows, K, static_cast<const uint8_t*>(src), dst);
}

void linear_quant(DType t, int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const void* w,
                  const float* bias, float* y, int64_t ldy, float beta) {
  check(t, K);
  if (M <= 0 || N <= 0) return;
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const size_t rb = quant_row_bytes(t, K);
  if (M > kQuantSmallM) {
    // prefill: panels of 64 rows of W dequantized to f32, each multiplied by the f32 GEMM (the nested
    // GEMM runs on the calling pool thread)
    constexpr int64_t P = 64;
    parallel_for((N + P - 1) / P, 1, [&](int64_t p0, int64_t p1) {
      std::vector<float> panel(size_t(P * K));
      for (int64_t p = p0; p < p1; p++) {
        const int64_t n0 = p * P, n = std::min(P, N - n0);
        dequant_rows(t, n, K, wb + size_t(n0) * rb, panel.data());
        linear_f32(M, n, K, x, ldx, panel.data(), K, bias ? bias + n0 : nullptr, y + n0, ldy, beta);
      }
    });
    return;
  }
  // decode / small batches: int8 activations, integer dot products per block
  using ActFn = void (*)(int64_t, const float*, int8_t*, float*, float*);
  using DotQ8 = float (*)(int64_t, const uint8_t*, const int8_t*, const float*);
  using DotQ4K = float (*)(int64_t, const uint8_t*, const int8_t*, const float*, const float*);
  ActFn act = portable::quant_act_q8;
  DotQ8 dot8 = portable::vec_dot_q8_0_q8;
  DotQ4K dot4 = portable::vec_dot_q4_K_q8;
  if (isa_active() == Isa::Avx512) {
    act = avx512::quant_act_q8, dot8 = avx512::vec_dot_q8_0_q8, dot4 = avx512::vec_dot_q4_K_q8;
  } else if (isa_active() == Isa::Avx2) {
    act = avx2::quant_act_q8, dot8 = avx2::vec_dot_q8_0_q8, dot4 = avx2::vec_dot_q4_K_q8;
  }
  const int64_t nb = K / kQ8Block;
  thread_local std::vector<int8_t> q;
  thread_local std::vector<float> d, ds;
  q.resize(size_t(M * K));
  d.resize(size_t(M * nb));
  ds.resize(size_t(M * nb));
  for (int64_t m = 0; m < M; m++) act(K, x + m * ldx, q.data() + m * K, d.data() + m * nb, ds.data() + m * nb);
  const int8_t* qp = q.data();
  const float* dp = d.data();
  const float* dsp = ds.data();
  parallel_for(N, 16, [&](int64_t n0, int64_t n1) {
    for (int64_t n = n0; n < n1; n++) {
      const uint8_t* wr = wb + size_t(n) * rb;
      for (int64_t m = 0; m < M; m++) {
        float v = t == DType::Q8_0 ? dot8(K, wr, qp + m * K, dp + m * nb)
                                   : dot4(K, wr, qp + m * K, dp + m * nb, dsp + m * nb);
        if (bias) v += bias[n];
        float* yp = y + m * ldy + n;
        *yp = beta == 0.0f ? v : v + beta * *yp;
      }
    }
  });
}

}  // namespace loom
