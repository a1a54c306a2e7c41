// Quantized dot products for AVX2 (+F16C): int8 activations against the ggml weight blocks with
// vpmaddubsw (u8 × s8 → pairs of s16) and vpmaddwd (→ s32), one f32 FMA per 32 values (quant_impl.h).
#include <immintrin.h>
#include <cmath>
#include <cstring>
#include "quant_internal.h"
#include "../formats/gguf_dequant.h"

namespace loom::avx2 {

// Σ of the 32 products u8 a × s8 b as 8 s32 lanes (a ≤ 128: the s16 pair sums cannot saturate)
static inline __m256i dot_u8s8(__m256i a, __m256i b) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1));
}

#include "quant_impl.h"

}  // namespace loom::avx2
