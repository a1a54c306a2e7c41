// Peak FP32 FMA throughput with AVX2: 12 independent accumulators (2 FMA pipes × 4-5 cycles
// latency need at least 10), kept in registers (named variables, no arrays).
#include <immintrin.h>
#include "bench_internal.h"

namespace loom::bench {

double peak_fma_avx2(int64_t iters) {
  // distinct starting values, and every accumulator opaque to the compiler each iteration (the asm below):
  // with equal starts and only some of them opaque, gcc proved the rest equal and ran one chain for them,
  // so the loop did ~7 FMAs per iteration while 12 were counted (a peak overstated by ~1.4-1.7x)
  __m256 a0 = _mm256_set1_ps(0.10f), a1 = _mm256_set1_ps(0.11f), a2 = _mm256_set1_ps(0.12f), a3 = _mm256_set1_ps(0.13f),
         a4 = _mm256_set1_ps(0.14f), a5 = _mm256_set1_ps(0.15f), a6 = _mm256_set1_ps(0.16f), a7 = _mm256_set1_ps(0.17f),
         a8 = _mm256_set1_ps(0.18f), a9 = _mm256_set1_ps(0.19f), a10 = _mm256_set1_ps(0.20f), a11 = _mm256_set1_ps(0.21f);
  const __m256 m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; i++) {
    a0 = _mm256_fmadd_ps(a0, m, c); a1 = _mm256_fmadd_ps(a1, m, c); a2 = _mm256_fmadd_ps(a2, m, c);
    a3 = _mm256_fmadd_ps(a3, m, c); a4 = _mm256_fmadd_ps(a4, m, c); a5 = _mm256_fmadd_ps(a5, m, c);
    a6 = _mm256_fmadd_ps(a6, m, c); a7 = _mm256_fmadd_ps(a7, m, c); a8 = _mm256_fmadd_ps(a8, m, c);
    a9 = _mm256_fmadd_ps(a9, m, c); a10 = _mm256_fmadd_ps(a10, m, c); a11 = _mm256_fmadd_ps(a11, m, c);
    __asm__ volatile("" : "+x"(a0), "+x"(a1), "+x"(a2), "+x"(a3), "+x"(a4), "+x"(a5), "+x"(a6),
                     "+x"(a7), "+x"(a8), "+x"(a9), "+x"(a10), "+x"(a11));
  }
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                           _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
  volatile float sink = _mm256_cvtss_f32(s);
  (void)sink;
  return double(iters) * 12 * 8 * 2;
}

}  // namespace loom::bench
