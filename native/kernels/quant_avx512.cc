// Quantized dot products for AVX-512 with VNNI: the kernels of quant_impl.h with vpdpbusd (u8 × s8, four
// products summed into each s32 lane in one instruction, AVX512_VNNI + VL on ymm) in place of AVX2's
// vpmaddubsw + vpmaddwd pair. linear_quant (quant.cc) takes this path only where the CPU has VNNI.
#include <immintrin.h>
#include <cmath>
#include <cstring>
#include "quant_internal.h"
#include "../formats/gguf_dequant.h"

namespace loom::avx512 {

// Σ of the 32 products u8 a × s8 b as 8 s32 lanes
static inline __m256i dot_u8s8(__m256i a, __m256i b) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), a, b); }

#define LOOM_QUANT_VNNI 1  // quant_impl.h: the interleaved small-batch sums through vpdpbusd
#include "quant_impl.h"
#undef LOOM_QUANT_VNNI

}  // namespace loom::avx512
