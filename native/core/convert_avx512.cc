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

void convert_f32_to_bf16(int64_t n, const float* src, uint16_t* dst) {
  portable::convert_f32_to_bf16(n, src, dst);
}

void convert_f16_to_f32(int64_t n, const uint16_t* src, float* dst) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)(src + i))));
  for (; i < n; i++) dst[i] = f16_to_f32(src[i]);
}

}  // namespace loom::avx512
