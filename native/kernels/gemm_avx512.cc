// GEMM fast path for AVX-512 (F/BW/VL/DQ): the same algorithm as the AVX2 file (gemm_impl.h),
// with a 12×32 micro-kernel (24 zmm accumulators, as BLIS's SkylakeX 32×12 kernel transposed
// for row-major C) and blocking for 48 KiB L1 / 1 MiB L2 (Zen 5); bf16 compute uses vdpbf16ps
// in the same pair-packed loop where the CPU has AVX512_BF16.
#include <immintrin.h>
#include <cstdint>
#include <utility>
#include "gemm_internal.h"
#include "loom/dispatch.h"

namespace loom::avx512 {

struct V {
  using reg = __m512;
  static constexpr int W = 16;
  static inline reg zero() { return _mm512_setzero_ps(); }
  static inline reg loadu(const float* p) { return _mm512_loadu_ps(p); }
  static inline void storeu(float* p, reg v) { _mm512_storeu_ps(p, v); }
  static inline reg bcast(const float* p) { return _mm512_set1_ps(*p); }
  static inline reg set1(float v) { return _mm512_set1_ps(v); }
  static inline reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  static inline reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  static inline reg mul(reg a, reg b) { return _mm512_mul_ps(a, b); }
  static inline reg loadw(const float* p) { return _mm512_loadu_ps(p); }
  static inline reg loadw(const bf16w* p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i*)p)), 16));
  }
  static inline reg loadw(const f16w* p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)p)); }
  static inline __m256 to256(reg v) { return _mm256_add_ps(_mm512_extractf32x8_ps(v, 0), _mm512_extractf32x8_ps(v, 1)); }
  using ireg = __m512i;
  static inline ireg loadi(const uint32_t* p) { return _mm512_loadu_si512((const void*)p); }
  static inline ireg bcast32(const uint32_t* p) { return _mm512_set1_epi32(int(*p)); }
  static inline reg lo_bf16(ireg v) { return _mm512_castsi512_ps(_mm512_slli_epi32(v, 16)); }
  static inline reg hi_bf16(ireg v) { return _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32(int(0xffff0000u)))); }
};

static constexpr Isa ISA = Isa::Avx512;
static constexpr int MR = 12, NV = 2;                   // 12×32 tile
static constexpr int64_t KC = 256, MC = 192, NC = 4096;  // B micro-panel 32 KiB, A block 192 KiB
static constexpr int DOT_MR = 6;                        // 6×4 dot tiles: 24 accumulators

#include "gemm_impl.h"

// vdpbf16ps: per fp32 lane, acc += a.lo·b.lo + a.hi·b.hi on bf16 inputs (AVX512_BF16: Zen 4/5,
// Cooper Lake, Sapphire Rapids and later). Inputs and outputs denormal-flushed, RNE.
// Operands are rounded with vcvtne2ps2bf16 (RNE, NaN quieted as f32_to_bf16 does; denormal inputs become zero,
// which is what vdpbf16ps reads a bf16 denormal as): one instruction per 32 values instead of bf16_hi8's integer
// rounding, which cost as much as the products themselves at the encoder's shapes (D = 256, 96-token heads).
struct DpNative {
  static inline reg dp(reg acc, ireg a, ireg b) { return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)b); }
  static void row_pairs(const float* s, int64_t kc, uint32_t* o);
  static void rows_pairs(const float* r0, const float* r1, int64_t n, uint32_t* o);
};

static inline __mmask16 lanes16(int64_t n) {  // lanes [0, n)
  return n >= 16 ? __mmask16(0xFFFF) : n <= 0 ? __mmask16(0) : __mmask16((1u << n) - 1u);
}

// One contiguous row s[0:kc] -> ceil(kc/2) words bf16(s[2p]) | bf16(s[2p+1]) << 16: the bf16 row itself, read as
// 32-bit words (zero past kc).
void DpNative::row_pairs(const float* s, int64_t kc, uint32_t* o) {
  int64_t k = 0;
  for (; k + 32 <= kc; k += 32) {
    const __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(s + k + 16), _mm512_loadu_ps(s + k));
    _mm512_storeu_si512(o + k / 2, (__m512i)v);
  }
  if (k < kc) {
    const int64_t r = kc - k;  // 1 .. 31 values
    const __m512 lo = _mm512_maskz_loadu_ps(lanes16(r), s + k), hi = _mm512_maskz_loadu_ps(lanes16(r - 16), s + k + 16);
    _mm512_mask_storeu_epi32(o + k / 2, lanes16((r + 1) / 2), (__m512i)_mm512_cvtne2ps_pbh(hi, lo));
  }
}

// Two rows (k = 2p, 2p+1; r1 null: zero) of n values -> n words bf16(r0[i]) | bf16(r1[i]) << 16.
void DpNative::rows_pairs(const float* r0, const float* r1, int64_t n, uint32_t* o) {
  // 16-bit lane e of the result takes lane e/2 of r0's bf16 (words 0-15 of the conversion), or of r1's (16-31)
  alignas(64) static const uint16_t interleave[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                                      8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
  const __m512i idx = _mm512_load_si512(interleave);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = lanes16(n - i);
    const __m512 lo = _mm512_maskz_loadu_ps(m, r0 + i);
    const __m512 hi = r1 ? _mm512_maskz_loadu_ps(m, r1 + i) : _mm512_setzero_ps();
    _mm512_mask_storeu_epi32(o + i, m, _mm512_permutexvar_epi16(idx, (__m512i)_mm512_cvtne2ps_pbh(hi, lo)));
  }
}

void linear_bf16_bf16(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const uint16_t* w, int64_t ldw,
                      const float* bias, float* y, int64_t ldy, float beta) {
  if (cpu_features().avx512bf16) linear_bf16_bf16_with<DpNative>(M, N, K, x, ldx, w, ldw, bias, y, ldy, beta);
  else linear_bf16_bf16_with<DpEmul>(M, N, K, x, ldx, w, ldw, bias, y, ldy, beta);
}

void sgemm_bf16_compute(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                        const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias) {
  if (cpu_features().avx512bf16)
    sgemm_bf16_compute_with<DpNative>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
  else
    sgemm_bf16_compute_with<DpEmul>(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, bias);
}

void sgemm_bf16_bf16(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const uint16_t* B,
                     int64_t ldb, float beta, float* C, int64_t ldc) {
  if (cpu_features().avx512bf16) sgemm_bf16_bf16_with<DpNative>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  else sgemm_bf16_bf16_with<DpEmul>(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

}  // namespace loom::avx512
