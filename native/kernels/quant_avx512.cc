// Quantized dot products for AVX-512 with VNNI: the kernels of quant_impl.h with vpdpbusd (u8 × s8, four
// products summed into each s32 lane in one instruction, AVX512_VNNI + VL on ymm) in place of AVX2's
// vpmaddubsw + vpmaddwd pair. linear_quant (quant.cc) takes this path only where the CPU has VNNI.
#include <immintrin.h>
#include <cmath>
#include <algorithm>
#include <cstring>
#include <vector>
#include "quant_internal.h"
#include "../formats/gguf_dequant.h"

namespace loom::avx512 {

// Σ of the 32 products u8 a × s8 b as 8 s32 lanes
static inline __m256i dot_u8s8(__m256i a, __m256i b) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), a, b); }

#define LOOM_QUANT_VNNI 1  // quant_impl.h: the interleaved small-batch sums through vpdpbusd
#include "quant_impl.h"
#undef LOOM_QUANT_VNNI

// ---- Q8_0x4 against 2-32 rows of x in 512-bit lanes ----------------------------------------------------------
// The kernels above put 4 rows of W in the lanes and broadcast 8 values of x: per row of x and block 4 broadcasts,
// 8 sign fixes and 4 ymm vpdpbusd for 128 products (about 110 GMAC per CPU-second at 32 rows of x, a fifth of
// this core's VNNI peak). Here the lanes are rows of x: 16 rows' 4 consecutive values per zmm (quant_acts_lanes,
// as u8 x + 128), each 4 weight values broadcast from the packed block as vpdpbusd's signed memory operand, so
// one instruction is 64 products with nothing around it; the + 128 comes off once per block and row of W as
// 128·Σw (its 32 weights summed by vpdpbusd against ones), then one convert and two f32 products per block.

// x as lanes: xt[((b·8 + g)·Mp + m)·4 + i] = q[m·K + 32b + 4g + i] + 128 (u8; rows m >= M: 128, x = 0),
// dt[b·Mp + m] = d[m·nb + b] (0 past M); Mp = M rounded up to 16
void quant_acts_lanes(int64_t M, int64_t K, const int8_t* q, const float* d, uint8_t* xt, float* dt) {
  const int64_t nb = K / kQ8Block, Mp = (M + 15) / 16 * 16;
  const __m512i flip = _mm512_set1_epi8(char(0x80));
  for (int64_t m0 = 0; m0 < Mp; m0 += 16) {
    const int64_t rows = std::min<int64_t>(16, M - m0);
    const __mmask16 live = __mmask16((1u << rows) - 1);
    const __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                           _mm512_set1_epi32(int(K)));
    const int8_t* qm = q + m0 * K;
    for (int64_t g = 0; g < K / 4; g++) {  // g = 8b + group of 4 values within the block
      const __m512i v = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), live, idx, qm + 4 * g, 1);
      _mm512_storeu_si512(xt + (g * Mp + m0) * 4, _mm512_xor_si512(v, flip));
    }
  }
  for (int64_t b = 0; b < nb; b++)
    for (int64_t m = 0; m < Mp; m++) dt[b * Mp + m] = m < M ? d[m * nb + b] : 0.0f;
}

// A block of 4 rows of W as the lanes kernels read it when the stored type is not Q8_0 (unpacked once per tile):
// the 4 rows' 32 values as s8 in Q8_0x4's chunk order (values 8c..8c+7 of row r at 32c + 8r) and their scales
struct alignas(32) LaneBlock {
  int8_t v[128];
  float d[4];
  float pad[4];
};

// 4·G rows of W × 16·V rows of x (the lanes at xt, dt): out[n·16V + m]. W: G packed Q8_0 groups at w (rs bytes
// apart), or with kScratch the unpacked blocks at sc (block b of group g at sc[b·G + g])
template <int G, int V, bool kScratch>
static inline void tile_lanes(int64_t nb, const uint8_t* w, size_t rs, const LaneBlock* sc, int64_t Mp,
                              const uint8_t* xt, const float* dt, float* out) {
  constexpr int R = 4 * G;
  const __m512i ones = _mm512_set1_epi8(1);
  __m512 acc[V][R];
  for (int v = 0; v < V; v++)
    for (int n = 0; n < R; n++) acc[v][n] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    // the values of group g in this block, and per row n of the tile 128·Σ of its 32 weights (lanes 2r, 2r + 1 of
    // each 256-bit half hold row r's sums of 4) and its scale
    const int8_t* vals[G];
    alignas(64) int32_t corr[G][8];
    alignas(64) float dw[R];
    for (int g = 0; g < G; g++) {
      if (kScratch) {
        const LaneBlock& lb = sc[b * G + g];
        vals[g] = lb.v;
        _mm_store_ps(dw + 4 * g, _mm_load_ps(lb.d));
      } else {
        const uint8_t* wb = w + g * rs + b * kQ8_0x4Bytes;
        prefetch_packed(wb);
        vals[g] = reinterpret_cast<const int8_t*>(wb + 8);
        _mm_store_ps(dw + 4 * g, _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(wb))));
      }
      __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_loadu_si512(vals[g]));
      s = _mm512_dpbusd_epi32(s, ones, _mm512_loadu_si512(vals[g] + 64));
      __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
      h = _mm256_add_epi32(h, _mm256_shuffle_epi32(h, 0xB1));  // row r's sum in lanes 2r and 2r + 1
      _mm256_store_si256(reinterpret_cast<__m256i*>(corr[g]), _mm256_slli_epi32(h, 7));
    }
    __m512i p[V][R];
    for (int v = 0; v < V; v++)
      for (int n = 0; n < R; n++) p[v][n] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {  // values 4k..4k+3 of the block: chunk k/2, half k%2 of each row's 8 bytes
      __m512i x[V];
      for (int v = 0; v < V; v++) x[v] = _mm512_loadu_si512(xt + ((b * 8 + k) * Mp + 16 * v) * 4);
      for (int n = 0; n < R; n++) {
        int32_t wv;
        std::memcpy(&wv, vals[n / 4] + 32 * (k / 2) + 8 * (n % 4) + 4 * (k % 2), 4);
        const __m512i wb = _mm512_set1_epi32(wv);
        for (int v = 0; v < V; v++) p[v][n] = _mm512_dpbusd_epi32(p[v][n], x[v], wb);
      }
    }
    for (int v = 0; v < V; v++) {
      const __m512 dx = _mm512_loadu_ps(dt + b * Mp + 16 * v);
      for (int n = 0; n < R; n++) {
        const __m512 f = _mm512_cvtepi32_ps(_mm512_sub_epi32(p[v][n], _mm512_set1_epi32(corr[n / 4][2 * (n % 4)])));
        acc[v][n] = _mm512_fmadd_ps(_mm512_mul_ps(dx, _mm512_set1_ps(dw[n])), f, acc[v][n]);
      }
    }
  }
  for (int v = 0; v < V; v++)
    for (int n = 0; n < R; n++) _mm512_storeu_ps(out + n * 16 * V + 16 * v, acc[v][n]);
}

// Q5_0x4 blocks of G groups (rs bytes apart) → sc[b·G + g]: the values - 16 as s8, d as f32
static void lanes_unpack_q5_0x4(int64_t nb, const uint8_t* w, size_t rs, int G, LaneBlock* sc) {
  const __m256i off = _mm256_set1_epi8(16);
  for (int64_t b = 0; b < nb; b++)
    for (int g = 0; g < G; g++) {
      const uint8_t* wb = w + g * rs + b * kQ5_0x4Bytes;
      prefetch_packed(wb);
      __m256i v[4];
      unpack_q5_0x4(wb, v);
      LaneBlock& lb = sc[b * G + g];
      for (int c = 0; c < 4; c++)
        _mm256_store_si256(reinterpret_cast<__m256i*>(lb.v + 32 * c), _mm256_sub_epi8(v[c], off));
      _mm_store_ps(lb.d, _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(wb))));
    }
}

// y[m·ldy + n] (m < M, n < 4·G) for the G packed groups of type t (Q8_0, Q5_0) at w (rs bytes apart) and the lanes
// of M rows of x
void gemm_lanes(DType t, int64_t K, const uint8_t* w, size_t rs, int64_t G, int64_t M, const uint8_t* xt,
                const float* dt, float* y, int64_t ldy) {
  const int64_t nb = K / kQ8Block, Mp = (M + 15) / 16 * 16;
  alignas(64) float out[8 * 32];  // (up to 8 rows of W, Mp)
  thread_local std::vector<LaneBlock> scratch;
  const bool q8 = t == DType::Q8_0;
  if (!q8 && scratch.size() < size_t(2 * nb)) scratch.resize(size_t(2 * nb));
  LaneBlock* sc = scratch.data();
  // one tile of Tg groups from group g: unpacked (not Q8_0), multiplied, stored
  auto tile = [&](int64_t g, int Tg, auto q8_tile, auto sc_tile) {
    const uint8_t* wg = w + g * rs;
    if (q8) {
      q8_tile(nb, wg, rs, nullptr, Mp, xt, dt, out);
    } else {
      lanes_unpack_q5_0x4(nb, wg, rs, Tg, sc);
      sc_tile(nb, nullptr, rs, sc, Mp, xt, dt, out);
    }
    for (int64_t m = 0; m < M; m++)
      for (int n = 0; n < 4 * Tg; n++) y[m * ldy + 4 * g + n] = out[n * Mp + m];
  };
  int64_t g = 0;
  if (Mp == 16) {  // one vector of x: two groups per tile for 8 independent sums
    for (; g + 2 <= G; g += 2) tile(g, 2, tile_lanes<2, 1, false>, tile_lanes<2, 1, true>);
    for (; g < G; g++) tile(g, 1, tile_lanes<1, 1, false>, tile_lanes<1, 1, true>);
    return;
  }
  for (; g < G; g++) tile(g, 1, tile_lanes<1, 2, false>, tile_lanes<1, 2, true>);
}

}  // namespace loom::avx512
