// AVX-512 variants of the half-precision conversions.
#include <immintrin.h>
#include "loom/dispatch.h"

namespace loom::avx512 {

void convert_bf16_to_f32(int64_t n, const uint16_t* src, float* dst) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i h = _mm256_loadu_si256((const __m256i*)(src + i));
    __m512i w = _mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16);
    _mm512_storeu_ps(dst + i, _mm512_castsi512_ps(w));
  }
  for (; i < n; i++) dst[i] = bf16_to_f32(src[i]);
}

// f32_to_bf16 (round to nearest even, NaN kept quiet) on 16 lanes: the same integer steps, so the same bits. The
// portable loop this called compiled to SSE2 (~1 % of a 32-stream SmolLM2-135M step: its KV-cache writes).
void convert_f32_to_bf16(int64_t n, const float* src, uint16_t* dst) {
  const __m512i abs = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i half = _mm512_set1_epi32(0x7fff), one = _mm512_set1_epi32(1), quiet = _mm512_set1_epi32(0x40);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i u = _mm512_loadu_si512(src + i);
    const __mmask16 nan = _mm512_cmpgt_epi32_mask(_mm512_and_si512(u, abs), inf);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(u, 16), one);
    const __m512i r = _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(half, odd)), 16);
    const __m512i h = _mm512_mask_or_epi32(r, nan, _mm512_srli_epi32(u, 16), quiet);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtepi32_epi16(h));
  }
  for (; i < n; i++) dst[i] = f32_to_bf16(src[i]);
}

void convert_f16_to_f32(int64_t n, const uint16_t* src, float* dst) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(src + i))));
  for (; i < n; i++) dst[i] = f16_to_f32(src[i]);
}

}  // namespace loom::avx512
