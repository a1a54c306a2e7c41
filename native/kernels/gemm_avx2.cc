// GEMM fast path for AVX2 + FMA (+F16C): 6×16 micro-kernel (12 ymm accumulators, as BLIS's
// Haswell/Zen kernel), blocking for 512 KiB L2 (Zen 3) and similar (KC below).
// The algorithm itself is gemm_impl.h, shared with the AVX-512 file.
// Measured on this dev machine (Zen 3 class, AVX2): the FMA loop reaches ~150 GFLOP/s per core
// with B loads alone, ~100 once the 6 A broadcasts per 12 FMAs are added (vbroadcastss takes an
// FP pipe slot there), and this kernel runs at ~92-95 GFLOP/s on L1-resident panels, on par with
// OpenBLAS's Zen kernel. A dot-product-along-K formulation (no broadcasts) was tried for all M
// and was slower (per-tile reductions and overheads); it is kept for M <= 16 only.
#include <immintrin.h>
#include <cstdint>
#include <utility>
#include "gemm_internal.h"
#include "loom/dispatch.h"

namespace loom::avx2 {

struct V {
  using reg = __m256;
  static constexpr int W = 8;
  static inline reg zero() { return _mm256_setzero_ps(); }
  static inline reg loadu(const float* p) { return _mm256_loadu_ps(p); }
  static inline void storeu(float* p, reg v) { _mm256_storeu_ps(p, v); }
  static inline reg bcast(const float* p) { return _mm256_broadcast_ss(p); }
  static inline reg set1(float v) { return _mm256_set1_ps(v); }
  static inline reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  static inline reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  static inline reg mul(reg a, reg b) { return _mm256_mul_ps(a, b); }
  static inline reg loadw(const float* p) { return _mm256_loadu_ps(p); }
  static inline reg loadw(const bf16w* p) {
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
  }
  static inline reg loadw(const f16w* p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p)); }
  static inline __m256 to256(reg v) { return v; }
  using ireg = __m256i;
  static inline ireg loadi(const uint32_t* p) { return _mm256_loadu_si256((const __m256i*)p); }
  static inline ireg bcast32(const uint32_t* p) { return _mm256_set1_epi32(int(*p)); }
  static inline reg lo_bf16(ireg v) { return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16)); }
  static inline reg hi_bf16(ireg v) { return _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32(int(0xffff0000u)))); }
};

static constexpr Isa ISA = Isa::Avx2;
static constexpr int MR = 6, NV = 2;                   // 6×16 tile
// KC 576: the K of a 576-wide model's layers (SmolLM2-135M) in one block, so C is written once. With KC 256
// (a 16 KiB B micro-panel in L1) K = 576 took three blocks and C (M, N) was read and written three times: the
// lm_head's (512, 49152) logits ran at 63 GFLOP/s, now 72; the layer shapes gain 0-4 % (A/B best of 5, 1 thread,
// CPU time, 2-core AMD EPYC Zen 3 class, loaded). The 36 KiB B micro-panel streams from L2 (2 loads per 12 FMAs).
static constexpr int64_t KC = 576, MC = 144, NC = 4096;  // B micro-panel 36 KiB, A block up to 324 KiB (L2)
static constexpr int DOT_MR = 3;                        // 3×4 dot tiles: 12 accumulators

#include "gemm_impl.h"

void linear_bf16_bf16(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const uint16_t* w, int64_t ldw,
                      const float* bias, float* y, int64_t ldy, float beta) {
  linear_bf16_bf16_with<DpEmul>(M, N, K, x, ldx, w, ldw, bias, y, ldy, beta);
}

void sgemm_bf16_compute(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                        const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
  sgemm_bf16_compute_with<DpEmul>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
}

void sgemm_bf16_bf16(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const uint16_t* B,
                     int64_t ldb, float beta, float* C, int64_t ldc) {
  sgemm_bf16_bf16_with<DpEmul>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace loom::avx2
