// GEMM: the public entry points of loom/gemm.h (run-time dispatch) and the portable reference
// implementations. The fast paths live in gemm_avx2.cc / gemm_avx512.cc.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include "gemm_internal.h"
#include "loom/dispatch.h"
#include "loom/quant.h"

namespace loom {

// ---------------------------------------------------------------------------------------------
// Portable reference path: plain loops, 4 partial sums per dot product, parallel over N.
// ---------------------------------------------------------------------------------------------
namespace portable {
namespace {

inline float widen(float v) { return v; }
struct Bf16 { uint16_t v; };
struct F16 { uint16_t v; };

template <typename LoadW>
void linear_generic(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, LoadW wrow, const float* bias,
                    float* y, int64_t ldy, float beta) {
  // y (M, N) = beta*y + x (M, K) · W (N, K)ᵀ + bias (N). wrow(n, buf) yields row n of W as floats.
  parallel_for(N, 8, [&](int64_t n0, int64_t n1) {
    std::unique_ptr<float[]> wbuf(new float[size_t(K)]);
    for (int64_t n = n0; n < n1; n++) {
      const float* wr = wrow(n, wbuf.get());
      for (int64_t m = 0; m < M; m++) {
        const float* xr = x + m * ldx;
        float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        int64_t k = 0;
        for (; k + 4 <= K; k += 4) {
          s0 += xr[k] * wr[k];
          s1 += xr[k + 1] * wr[k + 1];
          s2 += xr[k + 2] * wr[k + 2];
          s3 += xr[k + 3] * wr[k + 3];
        }
        for (; k < K; k++) s0 += xr[k] * wr[k];
        float v = (s0 + s1) + (s2 + s3);
        if (bias) v += bias[n];
        float* yp = y + m * ldy + n;
        *yp = beta == 0.0f ? v : v + beta * *yp;
      }
    }
  });
}

}  // namespace

void linear_f32(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const float* w, int64_t ldw,
                const float* bias, float* y, int64_t ldy, float beta) {
  linear_generic(M, N, K, x, ldx, [&](int64_t n, float*) { return w + n * ldw; }, bias, y, ldy, beta);
}

void linear_bf16(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const uint16_t* w, int64_t ldw,
                 const float* bias, float* y, int64_t ldy, float beta) {
  linear_generic(
      M, N, K, x, ldx,
      [&](int64_t n, float* buf) {
        const uint16_t* r = w + n * ldw;
        for (int64_t k = 0; k < K; k++) buf[k] = bf16_to_f32(r[k]);
        return (const float*)buf;
      },
      bias, y, ldy, beta);
}

void linear_f16(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const uint16_t* w, int64_t ldw,
                const float* bias, float* y, int64_t ldy, float beta) {
  linear_generic(
      M, N, K, x, ldx,
      [&](int64_t n, float* buf) {
        const uint16_t* r = w + n * ldw;
        for (int64_t k = 0; k < K; k++) buf[k] = f16_to_f32(r[k]);
        return (const float*)buf;
      },
      bias, y, ldy, beta);
}

// bf16 compute, emulated: x rounded to bf16 (round to nearest even), then exact fp32 products.
void linear_bf16_bf16(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const uint16_t* w, int64_t ldw,
                      const float* bias, float* y, int64_t ldy, float beta) {
  std::unique_ptr<float[]> xr(new float[size_t(M * K)]);
  for (int64_t m = 0; m < M; m++)
    for (int64_t k = 0; k < K; k++) xr[m * K + k] = bf16_to_f32(f32_to_bf16(x[m * ldx + k]));
  linear_bf16(M, N, K, xr.get(), K, w, ldw, bias, y, ldy, beta);
}

void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  // C (M, N) = alpha · op(A) (M, K) · op(B) (K, N) + beta · C
  parallel_for(M, 4, [&](int64_t m0, int64_t m1) {
    std::unique_ptr<float[]> acc(new float[size_t(N)]);
    for (int64_t i = m0; i < m1; i++) {
      std::fill(acc.get(), acc.get() + N, 0.0f);
      for (int64_t k = 0; k < K; k++) {
        float a = ta ? A[k * lda + i] : A[i * lda + k];
        if (tb) {
          for (int64_t j = 0; j < N; j++) acc[j] += a * B[j * ldb + k];
        } else {
          const float* br = B + k * ldb;
          for (int64_t j = 0; j < N; j++) acc[j] += a * br[j];
        }
      }
      float* c = C + i * ldc;
      for (int64_t j = 0; j < N; j++) c[j] = beta == 0.0f ? alpha * acc[j] : alpha * acc[j] + beta * c[j];
    }
  });
}

// bf16 compute, emulated: both operands rounded to bf16 (round to nearest even), then the fp32 product.
void sgemm_bf16_compute(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                        const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
  auto rounded = [](int64_t rows, int64_t cols, const float* s, int64_t ld) {
    std::unique_ptr<float[]> r(new float[size_t(rows * cols)]);
    for (int64_t i = 0; i < rows; i++)
      for (int64_t j = 0; j < cols; j++) r[size_t(i * cols + j)] = bf16_to_f32(f32_to_bf16(s[i * ld + j]));
    return r;
  };
  const int64_t ar = ta ? K : M, ac = ta ? M : K, br = tb ? N : K, bc = tb ? K : N;
  auto a = rounded(ar, ac, A, lda), b = rounded(br, bc, B, ldb);
  sgemm(ta, tb, M, N, K, alpha, a.get(), ac, b.get(), bc, beta, C, ldc);
  if (bias)
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) C[i * ldc + j] += bias[j];
}

// bf16 compute with B in bf16: A rounded to bf16, then the fp32 product with B widened.
void sgemm_bf16_bf16(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const uint16_t* B,
                     int64_t ldb, float beta, float* C, int64_t ldc) {
  std::unique_ptr<float[]> a(new float[size_t(M * K)]);
  for (int64_t i = 0; i < M; i++)
    for (int64_t k = 0; k < K; k++) a[size_t(i * K + k)] = bf16_to_f32(f32_to_bf16(A[i * lda + k]));
  sgemm_bf16(M, N, K, alpha, a.get(), K, B, ldb, beta, C, ldc);
}

void sgemm_bf16(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const uint16_t* B,
                int64_t ldb, float beta, float* C, int64_t ldc) {
  // C (M, N) = alpha · A (M, K) · B (K, N) + beta · C, B widened from bf16 row by row
  parallel_for(M, 4, [&](int64_t m0, int64_t m1) {
    std::unique_ptr<float[]> acc(new float[size_t(N)]);
    for (int64_t i = m0; i < m1; i++) {
      std::fill(acc.get(), acc.get() + N, 0.0f);
      for (int64_t k = 0; k < K; k++) {
        const float a = A[i * lda + k];
        const uint16_t* br = B + k * ldb;
        for (int64_t j = 0; j < N; j++) acc[j] += a * bf16_to_f32(br[j]);
      }
      float* c = C + i * ldc;
      for (int64_t j = 0; j < N; j++) c[j] = beta == 0.0f ? alpha * acc[j] : alpha * acc[j] + beta * c[j];
    }
  });
}

PackedWeight* weight_pack(DType wtype, int64_t N, int64_t K, const void* w, int64_t ldw) {
  auto* p = new PackedWeight();
  p->isa = Isa::Portable;
  p->N = N;
  p->K = K;
  p->nr = 0;
  p->stored = wtype == DType::BF16 ? DType::BF16 : DType::F32;
  size_t es = p->stored == DType::BF16 ? 2 : 4;
  p->bytes = size_t(N) * size_t(K) * es;
  p->data = aligned_malloc(std::max<size_t>(p->bytes, 64));
  for (int64_t n = 0; n < N; n++) {
    if (wtype == DType::F32) {
      std::memcpy(static_cast<float*>(p->data) + n * K, static_cast<const float*>(w) + n * ldw, size_t(K) * 4);
    } else if (wtype == DType::BF16) {
      std::memcpy(static_cast<uint16_t*>(p->data) + n * K, static_cast<const uint16_t*>(w) + n * ldw, size_t(K) * 2);
    } else {
      const uint16_t* r = static_cast<const uint16_t*>(w) + n * ldw;
      float* d = static_cast<float*>(p->data) + n * K;
      for (int64_t k = 0; k < K; k++) d[k] = f16_to_f32(r[k]);
    }
  }
  return p;
}

void linear_packed(int64_t M, const float* x, int64_t ldx, const PackedWeight* w, const float* bias, float* y,
                   int64_t ldy, float beta) {
  const int64_t K = w->K;
  if (w->nr == 0 && w->stored == DType::F32) {
    linear_f32(M, w->N, K, x, ldx, static_cast<const float*>(w->data), K, bias, y, ldy, beta);
    return;
  }
  if (w->nr == 0 && w->stored == DType::BF16) {
    linear_bf16(M, w->N, K, x, ldx, static_cast<const uint16_t*>(w->data), K, bias, y, ldy, beta);
    return;
  }
  // Another ISA's panel layout: read it element by element.
  linear_generic(
      M, w->N, K, x, ldx,
      [&](int64_t n, float* buf) {
        for (int64_t k = 0; k < K; k++) buf[k] = w->at(n, k);
        return (const float*)buf;
      },
      bias, y, ldy, beta);
}

}  // namespace portable

// ---------------------------------------------------------------------------------------------
// Public entry points
// ---------------------------------------------------------------------------------------------
namespace {
void check_dims(int64_t M, int64_t N, int64_t K) {
  if (M < 0 || N < 0 || K < 0) throw std::invalid_argument("gemm: negative dimension");
}
// y = beta*y (+ bias) when K == 0 (no products).
void linear_k0(int64_t M, int64_t N, const float* bias, float* y, int64_t ldy, float beta) {
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      float b = bias ? bias[n] : 0.0f;
      float* p = y + m * ldy + n;
      *p = beta == 0.0f ? b : b + beta * *p;
    }
}
}  // namespace

void linear_f32(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const float* w, int64_t ldw,
                const float* bias, float* y, int64_t ldy, float beta) {
  check_dims(M, N, K);
  if (M == 0 || N == 0) return;
  if (K == 0) return linear_k0(M, N, bias, y, ldy, beta);
  LOOM_DISPATCH(linear_f32, M, N, K, x, ldx, w, ldw, bias, y, ldy, beta);
}

void linear_bf16(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const uint16_t* w, int64_t ldw,
                 const float* bias, float* y, int64_t ldy, float beta) {
  check_dims(M, N, K);
  if (M == 0 || N == 0) return;
  if (K == 0) return linear_k0(M, N, bias, y, ldy, beta);
  LOOM_DISPATCH(linear_bf16, M, N, K, x, ldx, w, ldw, bias, y, ldy, beta);
}

void linear_bf16_bf16(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const uint16_t* w, int64_t ldw,
                      const float* bias, float* y, int64_t ldy, float beta) {
  check_dims(M, N, K);
  if (M == 0 || N == 0) return;
  if (K == 0) return linear_k0(M, N, bias, y, ldy, beta);
  LOOM_DISPATCH(linear_bf16_bf16, M, N, K, x, ldx, w, ldw, bias, y, ldy, beta);
}

void linear(DType wtype, int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const void* w, int64_t ldw,
            const float* bias, float* y, int64_t ldy, float beta) {
  switch (wtype) {
    case DType::F32: return linear_f32(M, N, K, x, ldx, static_cast<const float*>(w), ldw, bias, y, ldy, beta);
    case DType::BF16: return linear_bf16(M, N, K, x, ldx, static_cast<const uint16_t*>(w), ldw, bias, y, ldy, beta);
    case DType::F16:
      check_dims(M, N, K);
      if (M == 0 || N == 0) return;
      if (K == 0) return linear_k0(M, N, bias, y, ldy, beta);
      LOOM_DISPATCH(linear_f16, M, N, K, x, ldx, static_cast<const uint16_t*>(w), ldw, bias, y, ldy, beta);
    default: throw std::invalid_argument(std::string("linear: unsupported weight dtype ") + dtype_name(wtype));
  }
}

void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  check_dims(M, N, K);
  if (M == 0 || N == 0) return;
  if (K == 0 || alpha == 0.0f) {
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  LOOM_DISPATCH(sgemm, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void sgemm_bf16(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const uint16_t* B,
                int64_t ldb, float beta, float* C, int64_t ldc) {
  check_dims(M, N, K);
  if (M == 0 || N == 0) return;
  if (K == 0 || alpha == 0.0f) {
    for (int64_t i = 0; i < M; i++)
      for (int64_t j = 0; j < N; j++) C[i * ldc + j] = beta == 0.0f ? 0.0f : beta * C[i * ldc + j];
    return;
  }
  LOOM_DISPATCH(sgemm_bf16, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void sgemm_bf16_compute(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                        const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
  check_dims(M, N, K);
  if (M == 0 || N == 0) return;
  if (K == 0 || alpha == 0.0f) {
    sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    if (bias)
      for (int64_t i = 0; i < M; i++)
        for (int64_t j = 0; j < N; j++) C[i * ldc + j] += bias[j];
    return;
  }
  LOOM_DISPATCH(sgemm_bf16_compute, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
}

void sgemm_bf16_bf16(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const uint16_t* B,
                     int64_t ldb, float beta, float* C, int64_t ldc) {
  check_dims(M, N, K);
  if (M == 0 || N == 0) return;
  if (K == 0 || alpha == 0.0f) return sgemm_bf16(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  LOOM_DISPATCH(sgemm_bf16_bf16, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void sgemm_batched(bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   int64_t lda, int64_t strideA, const float* B, int64_t ldb, int64_t strideB, float beta, float* C,
                   int64_t ldc, int64_t strideC) {
  check_dims(M, N, K);
  if (batch < 0) throw std::invalid_argument("sgemm_batched: negative batch");
  if (batch == 0 || M == 0 || N == 0) return;
  auto one = [&](int64_t b) {
    sgemm(ta, tb, M, N, K, alpha, A + b * strideA, lda, B + b * strideB, ldb, beta, C + b * strideC, ldc);
  };
  // Many small products (attention heads): one product per task, each single-threaded inside
  // (nested pool calls run inline). Few large ones: one after another, each parallel inside.
  if (batch >= threads_get() && M * N * K < (int64_t(1) << 24)) {
    parallel_for(batch, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; b++) one(b);
    });
  } else {
    for (int64_t b = 0; b < batch; b++) one(b);
  }
}

PackedWeight* weight_pack(DType wtype, int64_t N, int64_t K, const void* w, int64_t ldw) {
  if (N <= 0 || K <= 0) throw std::invalid_argument("weight_pack: N and K must be positive");
  if (ldw < K) throw std::invalid_argument("weight_pack: ldw < K");
  if (quant_supported(wtype)) {  // block-quantized rows are kept as they are (ldw counts values, as K)
    if (K % quant_block_values(wtype) != 0 || ldw % quant_block_values(wtype) != 0)
      throw std::invalid_argument("weight_pack: K is not a multiple of the quantization block");
    auto* p = new PackedWeight();
    p->stored = wtype;
    p->N = N;
    p->K = K;
    const size_t rb = quant_row_bytes(wtype, K), ldb = quant_row_bytes(wtype, ldw);
    p->bytes = size_t(N) * rb;
    p->data = aligned_malloc(std::max<size_t>(p->bytes, 64));
    quant_pack(wtype, N, K, w, ldb, p->data);  // Q8_0 / Q5_0 / K-quants re-laid for the small-M kernels
    p->quant_packed = quant_packs(wtype);
    return p;
  }
  if (wtype != DType::F32 && wtype != DType::BF16 && wtype != DType::F16)
    throw std::invalid_argument(std::string("weight_pack: unsupported weight dtype ") + dtype_name(wtype));
  LOOM_DISPATCH(weight_pack, wtype, N, K, w, ldw);
}

void weight_free(PackedWeight* p) { delete p; }

PackedWeight* weight_stack(const std::vector<PackedWeight*>& parts) {
  if (parts.empty()) throw std::invalid_argument("weight_stack: no parts");
  auto* p = new PackedWeight();
  p->K = parts[0]->K;
  for (PackedWeight* q : parts) {
    if (q->K != p->K) {
      delete p;
      throw std::invalid_argument("weight_stack: parts have different K");
    }
    p->N += q->N;
    p->bytes += q->bytes;
  }
  p->parts = parts;
  return p;
}
void* weight_gather(const std::vector<PackedWeight*>& ws) {
  std::vector<PackedWeight*> leaves;  // the weights that hold data, in order
  for (PackedWeight* w : ws) {
    if (!w) continue;
    if (w->parts.empty()) leaves.push_back(w);
    for (PackedWeight* p : w->parts) leaves.push_back(p);
  }
  // each leaf's slot: its bytes and 64 more (the GEMM panels' allocation has them), in whole cache lines
  auto slot = [](const PackedWeight* p) { return (p->bytes + 64 + 63) / 64 * 64; };
  size_t total = 0;
  for (const PackedWeight* p : leaves)
    if (p->data) total += slot(p);
  uint8_t* buf = static_cast<uint8_t*>(aligned_malloc(std::max<size_t>(total, 64)));
  size_t off = 0;
  for (PackedWeight* p : leaves) {
    if (!p->data) continue;
    std::memcpy(buf + off, p->data, p->bytes);
    std::memset(buf + off + p->bytes, 0, slot(p) - p->bytes);
    if (p->owns_data) aligned_free(p->data);
    p->data = buf + off;
    p->owns_data = false;
    off += slot(p);
  }
  return buf;
}

int64_t weight_rows(const PackedWeight* p) { return p->N; }
int64_t weight_cols(const PackedWeight* p) { return p->K; }
size_t weight_bytes(const PackedWeight* p) { return p->bytes; }
const void* weight_quant_data(const PackedWeight* p) { return quant_supported(p->stored) ? p->data : nullptr; }
void weight_quant_rows(const PackedWeight* p, int64_t n0, int64_t n, float* dst) {
  if (!quant_supported(p->stored)) throw std::invalid_argument("weight_quant_rows: not a block-quantized weight");
  if (p->quant_packed) return quant_dequantize_packed(p->stored, p->N, p->K, p->data, n0, n, dst);
  if (n0 < 0 || n < 0 || n0 + n > p->N) throw std::invalid_argument("weight_quant_rows: rows out of range");
  quant_dequantize_rows(p->stored, n, p->K, static_cast<const uint8_t*>(p->data) + size_t(n0) * quant_row_bytes(p->stored, p->K), dst);
}

bool linear_packed_quantizes(const PackedWeight* w, int64_t M) {
  if (M > kQuantSmallM || w->K % 32 != 0) return false;
  if (w->parts.empty()) return w->nr == 0 && quant_supported(w->stored);
  for (const PackedWeight* p : w->parts)
    if (!p->parts.empty() || !quant_supported(p->stored)) return false;
  return true;
}

void linear_packed_acts(const QuantActs& a, const PackedWeight* w, const float* bias, float* y, int64_t ldy,
                        float beta) {
  if (!linear_packed_quantizes(w, a.M) || a.K != w->K)
    throw std::invalid_argument("linear_packed_acts: not a block-quantized weight of K = " + std::to_string(a.K) +
                                " for " + std::to_string(a.M) + " rows");
  if (w->parts.empty()) return linear_quant_acts(w->stored, w->N, a, w->data, bias, y, ldy, beta, w->quant_packed);
  thread_local std::vector<QuantPart> qparts;
  qparts.clear();
  int64_t n0 = 0;
  for (const PackedWeight* p : w->parts) {
    qparts.push_back({p->stored, p->N, p->data, bias ? bias + n0 : nullptr, p->quant_packed});
    n0 += p->N;
  }
  linear_quant_acts_parts(a, qparts.data(), int(qparts.size()), y, ldy, beta);
}

void linear_packed(int64_t M, const float* x, int64_t ldx, const PackedWeight* w, const float* bias, float* y,
                   int64_t ldy, float beta) {
  if (M < 0) throw std::invalid_argument("linear_packed: negative M");
  if (M == 0) return;
  if (!w->parts.empty()) {  // stacked row blocks: each writes its columns of y
    bool quant = linear_packed_quantizes(w, std::min(M, kQuantSmallM));
    for (const PackedWeight* p : w->parts)
      quant = quant && (M <= kQuantSmallM || quant_prefill_int8(p->stored, p->quant_packed));
    if (quant) {  // block-quantized parts (q/k/v, gate/up): x quantized once for all of them, 32 rows at a time
      thread_local QuantActs a;
      for (int64_t m0 = 0; m0 < M; m0 += kQuantSmallM) {
        quant_acts(std::min(kQuantSmallM, M - m0), w->K, x + m0 * ldx, ldx, &a);
        linear_packed_acts(a, w, bias, y + m0 * ldy, ldy, beta);
      }
      return;
    }
    int64_t n0 = 0;
    for (const PackedWeight* p : w->parts) {
      linear_packed(M, x, ldx, p, bias ? bias + n0 : nullptr, y + n0, ldy, beta);
      n0 += p->N;
    }
    return;
  }
  if (w->nr == 0) {  // plain row-major copy: the unpacked kernels of the active ISA
    if (quant_supported(w->stored))
      return linear_quant(w->stored, M, w->N, w->K, x, ldx, w->data, bias, y, ldy, beta, w->quant_packed);
    if (w->stored == DType::BF16)
      return linear_bf16(M, w->N, w->K, x, ldx, static_cast<const uint16_t*>(w->data), w->K, bias, y, ldy, beta);
    return linear_f32(M, w->N, w->K, x, ldx, static_cast<const float*>(w->data), w->K, bias, y, ldy, beta);
  }
  if (w->isa != isa_active()) return portable::linear_packed(M, x, ldx, w, bias, y, ldy, beta);
  LOOM_DISPATCH(linear_packed, M, x, ldx, w, bias, y, ldy, beta);
}

void linear_packed_rows(int64_t M, const std::function<void(int64_t)>& row, const float* x, int64_t ldx,
                        const PackedWeight* w, const float* bias, float* y, int64_t ldy, float beta) {
  if (M <= 0) return;
  if (linear_packed_quantizes(w, M)) {
    thread_local QuantActs a;
    quant_acts_rows(M, w->K, x, ldx, row, &a);
    linear_packed_acts(a, w, bias, y, ldy, beta);
    return;
  }
  parallel_for(M, 1, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; m++) row(m);
  });
  linear_packed(M, x, ldx, w, bias, y, ldy, beta);
}

}  // namespace loom
