// AVX-512 kernel table: exactly the AVX2 code (simd_kernels.h, attention_impl.h) over 16-lane
// fp32 vectors with mask-register tails. Tested wherever the CPU has AVX-512 (forEachIsa).
#include <immintrin.h>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <new>
#include <stdexcept>
#include "loom/core.h"
#include "loom/ops.h"
#include "ops_table.h"

namespace loom::avx512 {
namespace {

struct Vec {
  using R = __m512;
  static constexpr int64_t W = 16;
  static inline __mmask16 tail_mask(int64_t n) { return __mmask16((1u << n) - 1u); }  // lanes [0, n), n < 16
  static inline R zero() { return _mm512_setzero_ps(); }
  static inline R set1(float f) { return _mm512_set1_ps(f); }
  static inline R load(const float* p) { return _mm512_loadu_ps(p); }
  static inline void store(float* p, R v) { _mm512_storeu_ps(p, v); }
  static inline R loadn(const float* p, int64_t n) { return _mm512_maskz_loadu_ps(tail_mask(n), p); }
  static inline R loadn_fill(const float* p, int64_t n, float fill) {
    return _mm512_mask_loadu_ps(_mm512_set1_ps(fill), tail_mask(n), p);
  }
  static inline void storen(float* p, R v, int64_t n) { _mm512_mask_storeu_ps(p, tail_mask(n), v); }
  static inline R widen16(__m256i h) { return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); }
  static inline R loadbf(const uint16_t* p) { return widen16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static inline R loadbfn(const uint16_t* p, int64_t n) {  // n < 16 (a copy: the emulation build has no 16-bit mask load)
    alignas(32) uint16_t t[16] = {};
    for (int64_t i = 0; i < n; i++) t[i] = p[i];
    return loadbf(t);
  }
  static inline R add(R a, R b) { return _mm512_add_ps(a, b); }
  static inline R sub(R a, R b) { return _mm512_sub_ps(a, b); }
  static inline R mul(R a, R b) { return _mm512_mul_ps(a, b); }
  static inline R div(R a, R b) { return _mm512_div_ps(a, b); }
  static inline R fmadd(R a, R b, R c) { return _mm512_fmadd_ps(a, b, c); }
  static inline R fnmadd(R a, R b, R c) { return _mm512_fnmadd_ps(a, b, c); }
  static inline R max(R a, R b) { return _mm512_max_ps(a, b); }
  static inline R min(R a, R b) { return _mm512_min_ps(a, b); }
  static inline R sqrt(R a) { return _mm512_sqrt_ps(a); }
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
    OpsTable t = portable::ops_table();  // every SIMD entry is overridden below
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

}  // namespace loom::avx512
