// AVX2+FMA kernel table: the SIMD kernels of simd_kernels.h and the attention of
// attention_impl.h over 8-lane fp32 vectors. Kernels without a SIMD variant (embedding gather
// uses the dispatched conversions) keep the portable entry.
#include <immintrin.h>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <new>
#include <stdexcept>
#include "loom/core.h"
#include "loom/ops.h"
#include "ops_table.h"

namespace loom::avx2 {
namespace {

struct Vec {
  using R = __m256;
  static constexpr int64_t W = 8;
  static inline __m256i tail_mask(int64_t n) {  // lanes [0, n) set
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(int(n)), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
  }
  static inline R zero() { return _mm256_setzero_ps(); }
  static inline R set1(float f) { return _mm256_set1_ps(f); }
  static inline R load(const float* p) { return _mm256_loadu_ps(p); }
  static inline void store(float* p, R v) { _mm256_storeu_ps(p, v); }
  static inline R loadn(const float* p, int64_t n) { return _mm256_maskload_ps(p, tail_mask(n)); }
  static inline R loadbf(const uint16_t* p) {
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16));
  }
  static inline R loadbfn(const uint16_t* p, int64_t n) {  // n < 8
    alignas(16) uint16_t t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    for (int64_t i = 0; i < n; i++) t[i] = p[i];
    return loadbf(t);
  }
  static inline R loadn_fill(const float* p, int64_t n, float fill) {
    __m256i m = tail_mask(n);
    return _mm256_blendv_ps(_mm256_set1_ps(fill), _mm256_maskload_ps(p, m), _mm256_castsi256_ps(m));
  }
  static inline void storen(float* p, R v, int64_t n) { _mm256_maskstore_ps(p, tail_mask(n), v); }
  static inline R add(R a, R b) { return _mm256_add_ps(a, b); }
  static inline R sub(R a, R b) { return _mm256_sub_ps(a, b); }
  static inline R mul(R a, R b) { return _mm256_mul_ps(a, b); }
  static inline R div(R a, R b) { return _mm256_div_ps(a, b); }
  static inline R fmadd(R a, R b, R c) { return _mm256_fmadd_ps(a, b, c); }
  static inline R fnmadd(R a, R b, R c) { return _mm256_fnmadd_ps(a, b, c); }
  static inline R max(R a, R b) { return _mm256_max_ps(a, b); }
  static inline R min(R a, R b) { return _mm256_min_ps(a, b); }
  static inline R sqrt(R a) { return _mm256_sqrt_ps(a); }
  static inline R round(R a) { return _mm256_round_ps(a, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC); }
  static inline R pow2i(R n) {
    __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  }
  static inline R select_lt(R x, R t, R a, R b) { return _mm256_blendv_ps(b, a, _mm256_cmp_ps(x, t, _CMP_LT_OQ)); }
  static inline float hsum(R v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static inline float hmax(R v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
};

#include "simd_kernels.h"
#include "attention_impl.h"

}  // namespace

void attention_fwd(const AttnParams& p, const float* q, const float* k, const float* v, float* out, float* lse) {
  attn_detail::forward<simd::AttnPrims<Vec>>(p, q, k, v, out, lse);
}
void attention_bwd(const AttnParams& p, const float* q, const float* k, const float* v, const float* out,
                   const float* lse, const float* dout, float* dq, float* dk, float* dv, float* dbias) {
  attn_detail::backward<simd::AttnPrims<Vec>>(p, q, k, v, out, lse, dout, dq, dk, dv, dbias);
}

const OpsTable& ops_table() {
  static const OpsTable t = [] {
    OpsTable t = portable::ops_table();
#define LOOM_SET(name) t.name = simd::name<Vec>
    LOOM_SET(add_fwd);
    LOOM_SET(mul_fwd);
    LOOM_SET(mul_bwd);
    LOOM_SET(scale_fwd);
    LOOM_SET(axpy);
    LOOM_SET(lora_b_rows);
    LOOM_SET(lora_b_rows_bf16);
    LOOM_SET(add_bias);
    LOOM_SET(bias_bwd);
    LOOM_SET(layernorm_fwd);
    LOOM_SET(layernorm_bwd);
    LOOM_SET(rmsnorm_fwd);
    LOOM_SET(rmsnorm_bwd);
    LOOM_SET(softmax_fwd);
    LOOM_SET(softmax_bwd);
    LOOM_SET(log_softmax_fwd);
    LOOM_SET(gelu_fwd);
    LOOM_SET(gelu_bwd);
    LOOM_SET(silu_fwd);
    LOOM_SET(silu_bwd);
    LOOM_SET(swiglu_fwd);
    LOOM_SET(swiglu_bwd);
    LOOM_SET(rope_rotate);
    LOOM_SET(cross_entropy_rows);
    LOOM_SET(adamw_step);
    LOOM_SET(sum_squares);
    LOOM_SET(argmax);
#undef LOOM_SET
    t.attention_fwd = attention_fwd;
    t.attention_bwd = attention_bwd;
    return t;
  }();
  return t;
}

}  // namespace loom::avx2
