// Quantized dot products for AVX2 (+F16C): int8 activations against Q8_0 / Q4_K weight blocks with
// vpmaddubsw (u8 × s8 → pairs of s16) and vpmaddwd (→ s32), one f32 FMA per 32 values.
#include <immintrin.h>
#include <cmath>
#include <cstring>
#include "quant_internal.h"
#include "../formats/gguf_dequant.h"

namespace loom::avx2 {

static inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

static inline int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

static inline float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

// Σ of the 32 products u8 a × s8 b as 8 s32 lanes
static inline __m256i dot_u8s8(__m256i a, __m256i b) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1));
}

void quant_act_q8(int64_t K, const float* x, int8_t* q, float* d, float* ds) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < K / kQ8Block; b++) {
    const float* xb = x + b * kQ8Block;
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int i = 0; i < 4; i++) {
      v[i] = _mm256_loadu_ps(xb + 8 * i);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float am = _mm_cvtss_f32(m);
    const float db = am / 127.0f, id = am > 0.0f ? 127.0f / am : 0.0f;
    const __m256 vid = _mm256_set1_ps(id);
    __m256i i32[4];
    constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    for (int i = 0; i < 4; i++) i32[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[i], vid), kRound));
    const int sum = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(i32[0], i32[1]), _mm256_add_epi32(i32[2], i32[3])));
    // pack 32 s32 → 32 s8 in order (packs interleave 128-bit lanes: fix with a permute)
    __m256i p16a = _mm256_packs_epi32(i32[0], i32[1]), p16b = _mm256_packs_epi32(i32[2], i32[3]);
    __m256i p8 = _mm256_packs_epi16(p16a, p16b);
    p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * kQ8Block), p8);
    d[b] = db;
    ds[b] = db * float(sum);
  }
}

float vec_dot_q8_0_q8(int64_t K, const uint8_t* w, const int8_t* q, const float* d) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const int64_t nb = K / kQ8Block;
  int64_t b = 0;
  auto block = [&](int64_t i, __m256 acc) {
    const uint8_t* wb = w + i * kQ8_0Bytes;
    const __m256i qw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wb + 2));
    const __m256i qx = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + i * kQ8Block));
    // |w| (u8) × x·sign(w) (s8) = w·x
    const __m256i p = dot_u8s8(_mm256_sign_epi8(qw, qw), _mm256_sign_epi8(qx, qw));
    return _mm256_fmadd_ps(_mm256_set1_ps(load_f16(wb) * d[i]), _mm256_cvtepi32_ps(p), acc);
  };
  for (; b + 2 <= nb; b += 2) {
    acc0 = block(b, acc0);
    acc1 = block(b + 1, acc1);
  }
  if (b < nb) acc0 = block(b, acc0);
  return hsum(_mm256_add_ps(acc0, acc1));
}

float vec_dot_q4_K_q8(int64_t K, const uint8_t* w, const int8_t* q, const float* d, const float* ds) {
  const __m256i lo4 = _mm256_set1_epi8(0x0F);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0.0f;
  for (int64_t sb = 0; sb < K / gguf::QK_K; sb++, w += kQ4_KBytes) {
    const float dw = load_f16(w), dmin = load_f16(w + 2);
    for (int c = 0; c < 4; c++) {
      const int64_t j = sb * 8 + 2 * c;
      const __m256i qb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16 + 32 * c));
      const __m256i x0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + j * kQ8Block));
      const __m256i x1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + (j + 1) * kQ8Block));
      const __m256i p0 = dot_u8s8(_mm256_and_si256(qb, lo4), x0);
      const __m256i p1 = dot_u8s8(_mm256_and_si256(_mm256_srli_epi16(qb, 4), lo4), x1);
      int sc0, m0, sc1, m1;
      gguf::scale_min_k4(2 * c, w + 4, &sc0, &m0);
      gguf::scale_min_k4(2 * c + 1, w + 4, &sc1, &m1);
      acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * float(sc0) * d[j]), _mm256_cvtepi32_ps(p0), acc);
      acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * float(sc1) * d[j + 1]), _mm256_cvtepi32_ps(p1), acc);
      mins += dmin * (float(m0) * ds[j] + float(m1) * ds[j + 1]);
    }
  }
  return hsum(acc) - mins;
}

}  // namespace loom::avx2
