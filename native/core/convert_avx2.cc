// AVX2/F16C variants of the half-precision conversions.
#include <immintrin.h>
#include "loom/dispatch.h"

namespace loom::avx2 {

void convert_bf16_to_f32(int64_t n, const uint16_t* src, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m128i h = _mm_loadu_si128((const __m128i*)(src + i));
    __m256i w = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(w));
  }
  for (; i < n; i++) dst[i] = bf16_to_f32(src[i]);
}

void convert_f32_to_bf16(int64_t n, const float* src, uint16_t* dst) {
  portable::convert_f32_to_bf16(n, src, dst);  // rounding path: the scalar loop vectorizes well
}

void convert_f16_to_f32(int64_t n, const uint16_t* src, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)(src + i))));
  for (; i < n; i++) dst[i] = f16_to_f32(src[i]);
}

}  // namespace loom::avx2
