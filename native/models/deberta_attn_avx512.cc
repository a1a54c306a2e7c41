// DeBERTa disentangled attention, AVX-512 build (16 × fp32; algorithm in deberta_attn_impl.h,
// the same code as the AVX2 build over wider registers; the S += Tᵀ pass uses the same 8 × 8
// __m256 tiles as AVX2, deberta_attn_x86.h).
#include <immintrin.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include "deberta_internal.h"
#include "loom/ops.h"
#include "../ops/ops_table.h"

namespace loom::avx512 {
namespace {

struct Vec {
  using R = __m512;
  static constexpr int64_t W = 16;
  static inline R zero() { return _mm512_setzero_ps(); }
  static inline R set1(float f) { return _mm512_set1_ps(f); }
  static inline R load(const float* p) { return _mm512_loadu_ps(p); }
  static inline void store(float* p, R v) { _mm512_storeu_ps(p, v); }
  static inline R add(R a, R b) { return _mm512_add_ps(a, b); }
  static inline R sub(R a, R b) { return _mm512_sub_ps(a, b); }
  static inline R mul(R a, R b) { return _mm512_mul_ps(a, b); }
  static inline R fmadd(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
  static inline R fnmadd(R a, R b, R c) { return _mm512_fnmadd_ps(a, b, c); }
  static inline R max(R a, R b) { return _mm512_max_ps(a, b); }
  static inline R min(R a, R b) { return _mm512_min_ps(a, b); }
  static inline R round(R a) { return _mm512_roundscale_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static inline R pow2i(R n) {
    __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
  }
  static inline R select_lt(R x, R t, R a, R b) { return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, t, _CMP_LT_OQ), b, a); }
  static inline float hsum(R v) {
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static inline float hmax(R v) {
    __m256 h = _mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static inline R gather(const float* base, const int32_t* idx) {
    return _mm512_i32gather_ps(_mm512_loadu_si512(static_cast<const void*>(idx)), base, 4);
  }
  static R exp(R x);
  static void transpose_add(float* S, int64_t lds, const float* T, int64_t ldt, int64_t n);
};

#include "deberta_attn_x86.h"
#include "../ops/simd_kernels.h"
inline Vec::R Vec::exp(R x) { return simd::vexp<Vec>(x); }
inline void Vec::transpose_add(float* S, int64_t lds, const float* T, int64_t ldt, int64_t n) {
  transpose_add8(S, lds, T, ldt, n);
}

using V = Vec;
#include "deberta_attn_impl.h"

}  // namespace

void deberta_attend(const deberta::AttnTask& t) { attend(t); }

}  // namespace loom::avx512
