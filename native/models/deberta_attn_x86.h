// S[i][j] += T[j][i] over an n × n block (n a multiple of 8), in 8 × 8 __m256 tiles. Shared by the
// AVX2 and AVX-512 builds of the DeBERTa attention (both run these exact instructions), included
// inside their anonymous namespaces.
static inline void transpose8x8(__m256 r[8]) {
  __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

static inline void transpose_add8(float* S, int64_t lds, const float* T, int64_t ldt, int64_t n) {
  for (int64_t i0 = 0; i0 < n; i0 += 8)
    for (int64_t j0 = 0; j0 < n; j0 += 8) {
      __m256 r[8];
      for (int k = 0; k < 8; k++) r[k] = _mm256_loadu_ps(T + (j0 + k) * ldt + i0);  // lanes: i
      transpose8x8(r);                                                                // lanes: j
      for (int k = 0; k < 8; k++) {
        float* s = S + (i0 + k) * lds + j0;
        _mm256_storeu_ps(s, _mm256_add_ps(_mm256_loadu_ps(s), r[k]));
      }
    }
}
