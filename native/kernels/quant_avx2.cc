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

// ---- Q8_0 against x's rows in s16 lanes (AVX2, 16 rows of x and more: batched decode, prefill) ------------
// Signed weights against signed x take three multiply-pipe operations per 32 products through vpmaddubsw (vpsignb
// for |w| × x·sign(w), vpmaddubsw, vpmaddwd by 1; on Zen 3 vpsignb shares vpmaddwd's two pipes), and each block's
// f32 scaling (convert, scale product, FMA) comes once per row of x. Here x's rows lie in the lanes instead
// (QuantActs::xw: a vector holds one pair of values of 8 rows, as s16), a pair of weights is broadcast against it,
// and one vpmaddwd does 16 products with no sign to transfer, its s32 sums added on the other pipes; the sums stay
// in registers through a block's 16 pairs, so the f32 scaling comes once per block and vector of 8 rows of x.
// bench/quant-kernels.mts (1 thread, Zen 3, GMAC per CPU-second) has the measurement in quant.cc, kWideMinM.

// 8 rows of 8 s32 → 8 columns (r[j] = element j of rows 0-7)
static inline void transpose8_epi32(__m256i r[8]) {
  __m256i t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
  }
  for (int i = 0; i < 8; i += 4) {
    u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 4; i++) {
    r[i] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x20);
    r[i + 4] = _mm256_permute2x128_si256(u[i], u[i + 4], 0x31);
  }
}

void quant_acts_wide_size(QuantActs* a) {
  const int64_t M8 = (a->M + 7) / 8 * 8;
  a->xw.resize(size_t(a->K * M8));
  a->dw.resize(size_t(a->K / kQ8Block * M8));
}

void quant_acts_wide(QuantActs* a, int64_t m0) {
  const int64_t M = a->M, K = a->K, nb = K / kQ8Block, M8 = (M + 7) / 8 * 8;
  for (int64_t r0 = m0; r0 < std::min(m0 + 16, M8); r0 += 8) {
    const int64_t rows = std::min<int64_t>(8, M - r0);
    const int8_t* q = a->q.data() + r0 * K;
    for (int64_t k = 0; k < K; k += 16) {  // pairs k/2 .. k/2 + 7 of the 8 rows
      __m256i r[8];
      for (int i = 0; i < 8; i++)
        r[i] = i < rows ? _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q + i * K + k)))
                        : _mm256_setzero_si256();
      transpose8_epi32(r);
      for (int j = 0; j < 8; j++)
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(a->xw.data() + (k / 2 + j) * M8 * 2 + r0 * 2), r[j]);
    }
    for (int64_t b = 0; b < nb; b++)
      for (int64_t i = 0; i < 8; i++)
        a->dw[size_t(b * M8 + r0 + i)] = i < rows ? a->d[size_t((r0 + i) * nb + b)] : 0.0f;
  }
}

// x-vectors v0 .. v0 + V - 1 (8 rows of x each) against rows n0 .. n0 + R - 1 of one block of the group (ws: row
// n's 16 pairs of weights, sw: its scale; xb: the block's pairs of x, dw: their scales) into acc[v][n]. Not inlined:
// inlined into the tile loop's three cases, the compiler spilled the sums there.
template <int V, int R>
__attribute__((noinline)) static void q8_0x4_wide_block(const int32_t (*ws)[16], const float* sw, const int16_t* xb,
                                                        const float* dw, int64_t M8, int64_t v0, int n0,
                                                        __m256 (*acc)[4]) {
  __m256i s[R][V];
  for (int n = 0; n < R; n++)
    for (int v = 0; v < V; v++) s[n][v] = _mm256_setzero_si256();
#pragma GCC unroll 4
  for (int p = 0; p < 16; p++) {
    __m256i x[V];
    for (int v = 0; v < V; v++)
      x[v] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb + (p * M8 + 8 * (v0 + v)) * 2));
    // the weights broadcast from memory here (left to itself the compiler hoists all 64 broadcasts of the block
    // out of the passes and spills them)
    const int32_t* wsp = &ws[n0][p];
    __asm__("" : "+r"(wsp));
    for (int n = 0; n < R; n++) {
      const __m256i wp = _mm256_set1_epi32(wsp[16 * n]);
      for (int v = 0; v < V; v++) s[n][v] = _mm256_add_epi32(s[n][v], _mm256_madd_epi16(x[v], wp));
    }
  }
  for (int v = 0; v < V; v++) {
    const __m256 dx = _mm256_loadu_ps(dw + 8 * (v0 + v));
    for (int n = 0; n < R; n++)
      acc[v0 + v][n0 + n] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[n][v]),
                                            _mm256_mul_ps(dx, _mm256_set1_ps(sw[n0 + n])), acc[v0 + v][n0 + n]);
  }
}

// one packed block's weights → ws[n][p]: pair p (values 2p, 2p + 1) of row n as two s16
static inline void widen_q8_0x4(const uint8_t* wb, int32_t (*ws)[16]) {
  for (int c = 0; c < 4; c++) {  // chunk c: values 8c..8c+7 of rows 0-3 → pairs 4c..4c+3 of each row
    const __m256i v = loadu256(wb + 8 + 32 * c);
    const __m256i r01 = _mm256_cvtepi8_epi16(_mm256_castsi256_si128(v));
    const __m256i r23 = _mm256_cvtepi8_epi16(_mm256_extracti128_si256(v, 1));
    _mm_store_si128(reinterpret_cast<__m128i*>(&ws[0][4 * c]), _mm256_castsi256_si128(r01));
    _mm_store_si128(reinterpret_cast<__m128i*>(&ws[1][4 * c]), _mm256_extracti128_si256(r01, 1));
    _mm_store_si128(reinterpret_cast<__m128i*>(&ws[2][4 * c]), _mm256_castsi256_si128(r23));
    _mm_store_si128(reinterpret_cast<__m128i*>(&ws[3][4 * c]), _mm256_extracti128_si256(r23, 1));
  }
}

// y[m·ldy + n] (n < 4) for the packed group at w against the M rows of x in a's s16 lanes
void gemm4_q8_0x4_wide(int64_t K, const uint8_t* w, const QuantActs& a, float* y, int64_t ldy) {
  const int64_t M = a.M, nb = K / kQ8Block, M8 = (M + 7) / 8 * 8, nv = M8 / 8;
  alignas(32) __m256 acc[kQuantSmallM / 8][4];
  for (int64_t v = 0; v < nv; v++)
    for (int n = 0; n < 4; n++) acc[v][n] = _mm256_setzero_ps();
  alignas(32) int32_t ws[4][16];
  alignas(16) float sw[4];
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t* wb = w + b * kQ8_0x4Bytes;
    prefetch_packed(wb);
    widen_q8_0x4(wb, ws);
    _mm_store_ps(sw, _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(wb))));
    const int16_t* xb = a.xw.data() + b * 16 * M8 * 2;
    const float* dw = a.dw.data() + b * M8;
    // all of x's vectors in one pass, 2 rows of the group at a time (2·nv sums, nv vectors of x and a broadcast in
    // registers), so that each broadcast of a weight pair serves every row of x; at 16 rows all 4 rows of the group
    switch (nv) {
      case 4:
        q8_0x4_wide_block<4, 2>(ws, sw, xb, dw, M8, 0, 0, acc);
        q8_0x4_wide_block<4, 2>(ws, sw, xb, dw, M8, 0, 2, acc);
        break;
      case 3:
        q8_0x4_wide_block<3, 2>(ws, sw, xb, dw, M8, 0, 0, acc);
        q8_0x4_wide_block<3, 2>(ws, sw, xb, dw, M8, 0, 2, acc);
        break;
      default: q8_0x4_wide_block<2, 4>(ws, sw, xb, dw, M8, 0, 0, acc);  // 2 (kWideMinM = 16 rows and more)
    }
  }
  for (int64_t v = 0; v < nv; v++)
    for (int n = 0; n < 4; n++) {
      alignas(32) float t[8];
      _mm256_store_ps(t, acc[v][n]);
      for (int64_t l = 0; l < 8 && 8 * v + l < M; l++) y[(8 * v + l) * ldy + n] = t[l];
    }
}

}  // namespace loom::avx2
