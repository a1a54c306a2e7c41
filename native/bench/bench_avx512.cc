// Peak FP32 FMA and BF16 dot-product throughput with AVX-512: 12 independent zmm accumulators.
#include <immintrin.h>
#include "bench_internal.h"

namespace loom::bench {

double peak_fma_avx512(int64_t iters) {
  // distinct starting values, and every accumulator opaque to the compiler each iteration (the asm below):
  // with equal starts and only some of them opaque, gcc proved the rest equal and ran one chain for them,
  // so the loop did ~7 FMAs per iteration while 12 were counted (a peak overstated by ~1.4-1.7x)
  __m512 a0 = _mm512_set1_ps(0.10f), a1 = _mm512_set1_ps(0.11f), a2 = _mm512_set1_ps(0.12f), a3 = _mm512_set1_ps(0.13f),
         a4 = _mm512_set1_ps(0.14f), a5 = _mm512_set1_ps(0.15f), a6 = _mm512_set1_ps(0.16f), a7 = _mm512_set1_ps(0.17f),
         a8 = _mm512_set1_ps(0.18f), a9 = _mm512_set1_ps(0.19f), a10 = _mm512_set1_ps(0.20f), a11 = _mm512_set1_ps(0.21f);
  const __m512 m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; i++) {
    a0 = _mm512_fmadd_ps(a0, m, c); a1 = _mm512_fmadd_ps(a1, m, c); a2 = _mm512_fmadd_ps(a2, m, c);
    a3 = _mm512_fmadd_ps(a3, m, c); a4 = _mm512_fmadd_ps(a4, m, c); a5 = _mm512_fmadd_ps(a5, m, c);
    a6 = _mm512_fmadd_ps(a6, m, c); a7 = _mm512_fmadd_ps(a7, m, c); a8 = _mm512_fmadd_ps(a8, m, c);
    a9 = _mm512_fmadd_ps(a9, m, c); a10 = _mm512_fmadd_ps(a10, m, c); a11 = _mm512_fmadd_ps(a11, m, c);
    __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6),
                     "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
  }
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                           _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
  volatile float sink = _mm512_reduce_add_ps(s);
  (void)sink;
  return double(iters) * 12 * 16 * 2;
}

// vdpbf16ps: per fp32 lane, two bf16 products added to the accumulator (4 flops per lane).
double peak_bf16_avx512(int64_t iters) {
  // distinct starting values, and every accumulator opaque to the compiler each iteration (the asm below):
  // with equal starts and only some of them opaque, gcc proved the rest equal and ran one chain for them,
  // so the loop did ~7 FMAs per iteration while 12 were counted (a peak overstated by ~1.4-1.7x)
  __m512 a0 = _mm512_set1_ps(0.10f), a1 = _mm512_set1_ps(0.11f), a2 = _mm512_set1_ps(0.12f), a3 = _mm512_set1_ps(0.13f),
         a4 = _mm512_set1_ps(0.14f), a5 = _mm512_set1_ps(0.15f), a6 = _mm512_set1_ps(0.16f), a7 = _mm512_set1_ps(0.17f),
         a8 = _mm512_set1_ps(0.18f), a9 = _mm512_set1_ps(0.19f), a10 = _mm512_set1_ps(0.20f), a11 = _mm512_set1_ps(0.21f);
  const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3380);
  for (int64_t i = 0; i < iters; i++) {
    a0 = _mm512_dpbf16_ps(a0, x, y); a1 = _mm512_dpbf16_ps(a1, x, y); a2 = _mm512_dpbf16_ps(a2, x, y);
    a3 = _mm512_dpbf16_ps(a3, x, y); a4 = _mm512_dpbf16_ps(a4, x, y); a5 = _mm512_dpbf16_ps(a5, x, y);
    a6 = _mm512_dpbf16_ps(a6, x, y); a7 = _mm512_dpbf16_ps(a7, x, y); a8 = _mm512_dpbf16_ps(a8, x, y);
    a9 = _mm512_dpbf16_ps(a9, x, y); a10 = _mm512_dpbf16_ps(a10, x, y); a11 = _mm512_dpbf16_ps(a11, x, y);
    __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6),
                     "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11));
  }
  __m512 s = _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
                           _mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)));
  s = _mm512_add_ps(s, _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)));
  volatile float sink = _mm512_reduce_add_ps(s);
  (void)sink;
  return double(iters) * 12 * 16 * 4;
}

}  // namespace loom::bench
