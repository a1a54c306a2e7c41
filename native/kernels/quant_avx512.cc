// Quantized dot products for AVX-512 with VNNI: the kernels of quant_impl.h with vpdpbusd (u8 × s8, four
// products summed into each s32 lane in one instruction, AVX512_VNNI + VL on ymm) in place of AVX2's
// vpmaddubsw + vpmaddwd pair. linear_quant (quant.cc) takes this path only where the CPU has VNNI.
#include <immintrin.h>
#include <cmath>
#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>
#include "quant_internal.h"
#include "../formats/gguf_dequant.h"

namespace loom::avx512 {

// Σ of the 32 products u8 a × s8 b as 8 s32 lanes
static inline __m256i dot_u8s8(__m256i a, __m256i b) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), a, b); }

// one row of x against G packed groups in 512-bit vectors (below; quant_impl.h's packed kernels take them at M = 1)
template <int G>
static void gemv_q8_0x4_zmm(int64_t K, const uint8_t* w, size_t rs, const int8_t* q, const float* d, float* y);
template <int G>
static void gemv_q5_0x4_zmm(int64_t K, const uint8_t* w, size_t rs, const int8_t* q, const float* d,
                            const float* ds, float* y);
static void gemv_q4_Kx4_zmm(int64_t K, const uint8_t* w, const int8_t* q, const float* d, const float* ds, float* y);
static void gemv_q6_Kx4_zmm(int64_t K, const uint8_t* w, const int8_t* q, const float* d, const float* d16, float* y);

#define LOOM_QUANT_VNNI 1  // quant_impl.h: the interleaved small-batch sums through vpdpbusd
#define LOOM_QUANT_ZMM 1   // quant_impl.h: one row of x through the 512-bit kernels here
#include "quant_impl.h"
#undef LOOM_QUANT_ZMM

// Lane i of the result: op over the 16 lanes of v[i] (a transposing tree: 30 shuffles and 15 ops for 16 reductions,
// where one reduction alone takes 8 of each)
template <typename Op>
static inline __m512 reduce16(const __m512* v, Op op) {
  __m512 c[8], e[4], f[2];
  for (int j = 0; j < 8; j++)  // per 128-bit lane: v[2j] over positions 0 | 2 and 1 | 3 at 0, 2; v[2j + 1]'s at 1, 3
    c[j] = op(_mm512_unpacklo_ps(v[2 * j], v[2 * j + 1]), _mm512_unpackhi_ps(v[2 * j], v[2 * j + 1]));
  for (int k = 0; k < 4; k++)  // per 128-bit lane: v[4k + p]'s partial at position p
    e[k] = op(_mm512_shuffle_ps(c[2 * k], c[2 * k + 1], 0x44), _mm512_shuffle_ps(c[2 * k], c[2 * k + 1], 0xEE));
  for (int h = 0; h < 2; h++)  // 128-bit lanes 0 | 1 and 2 | 3 of e[2h] and e[2h + 1] combined
    f[h] = op(_mm512_shuffle_f32x4(e[2 * h], e[2 * h + 1], 0x88), _mm512_shuffle_f32x4(e[2 * h], e[2 * h + 1], 0xDD));
  return op(_mm512_shuffle_f32x4(f[0], f[1], 0x88), _mm512_shuffle_f32x4(f[0], f[1], 0xDD));
}

// quant_impl.h's quant_act_q8_blocks (the same arithmetic, bit for bit: d = max|x| / 127, q = x · 127 / max|x|
// rounded to nearest, ds = d·Σq) with 16 blocks' maxima and sums reduced together: the ymm kernel reduced each block
// alone, and its scalar tail per block was most of its time (3 % of a 32-stream SmolLM2-135M step, on the caller)
void quant_act_q8(int64_t K, const float* x, int8_t* q, float* d, float* ds) {
  constexpr int kNear = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
  const int64_t nb = K / kQ8Block;
  const __m512 c127 = _mm512_set1_ps(127.0f), zero = _mm512_setzero_ps();
  auto max_op = [](__m512 a, __m512 b) { return _mm512_max_ps(a, b); };
  auto add_op = [](__m512 a, __m512 b) { return _mm512_add_ps(a, b); };
  int64_t b = 0;
  for (; b + 16 <= nb; b += 16) {
    const float* xb = x + b * kQ8Block;
    __m512 m[16], s[16];
    for (int i = 0; i < 16; i++) {
      const __m512 x0 = _mm512_loadu_ps(xb + 32 * i), x1 = _mm512_loadu_ps(xb + 32 * i + 16);
      m[i] = _mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1));
    }
    const __m512 am = reduce16(m, max_op);  // lane i: block b + i
    const __m512 db = _mm512_div_ps(am, c127);
    const __m512 id = _mm512_maskz_div_ps(_mm512_cmp_ps_mask(am, zero, _CMP_GT_OQ), c127, am);
    for (int i = 0; i < 16; i++) {
      const __m512 idi = _mm512_permutexvar_ps(_mm512_set1_epi32(i), id);
      const __m512 r0 = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(xb + 32 * i), idi), kNear);
      const __m512 r1 = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(xb + 32 * i + 16), idi), kNear);
      int8_t* qb = q + (b + i) * kQ8Block;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qb), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(r0)));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(qb + 16), _mm512_cvtsepi32_epi8(_mm512_cvtps_epi32(r1)));
      s[i] = _mm512_add_ps(r0, r1);  // integers: the f32 sums are exact (|Σq| <= 32·127)
    }
    _mm512_storeu_ps(d + b, db);
    _mm512_storeu_ps(ds + b, _mm512_mul_ps(db, reduce16(s, add_op)));
  }
  // the last K/32 mod 16 blocks one at a time
  quant_act_q8_blocks(nb - b, x + b * kQ8Block, q + b * kQ8Block, d + b, ds + b);
}
#undef LOOM_QUANT_VNNI

// ---- one row of x (decode) against packed Q8_0x4 / Q5_0x4 groups in 512-bit vectors -------------------------
// quant_impl.h's one-row kernels hold a group's block in 4 ymm chunks and make each operand of vpdpbusd unsigned
// with sign fixes (Q8_0: 4 vpsignb pairs and 4 broadcasts of x per block). Here a zmm holds two chunks: the low
// half chunk c, the high half chunk c' (Q8_0x4: 0 | 1 and 2 | 3 as stored; Q5_0x4: low nibbles 0 | 2, high
// nibbles 1 | 3), x's matching 8 bytes in each 64-bit lane by one vpermq per pair, the weights the unsigned operand
// (Q8_0: w + 128, its 128·Σx taken off by starting the sum from -128·Σx, formed once per block for the G groups;
// Q5_0's values are 0-31 already): the same integers as the ymm kernels in about half the instructions. Row r's
// sums sit in lanes 2r, 2r + 1 of each half.

// x's block at xb (32 int8) as the two operands of the chunk pairs (lo, hi): lane pair j of the low half values
// 8·c_lo .. + 7, of the high half 8·c_hi .. + 7, where i_lo / i_hi pick the chunks
static inline void x_pairs(const int8_t* xb, __m512i i_lo, __m512i i_hi, __m512i* lo, __m512i* hi) {
  const __m512i x = _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb)));
  *lo = _mm512_permutexvar_epi64(i_lo, x);
  *hi = _mm512_permutexvar_epi64(i_hi, x);
}

// the 4 f16 scales at p (row r at 2r) as f32 lanes 2r, 2r + 1 of both halves
static inline __m512 scales4_zmm(const uint8_t* p) {
  const __m128i h = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return _mm512_cvtph_ps(_mm256_broadcastsi128_si256(_mm_unpacklo_epi16(h, h)));
}

// y[r] (r < 4) = the sum of lanes 2r, 2r + 1 of both halves of a
static inline void store_zmm_pairs(__m512 a, float* y) {
  alignas(64) float t[16];
  _mm512_store_ps(t, a);
  for (int r = 0; r < 4; r++) y[r] = (t[2 * r] + t[2 * r + 1]) + (t[8 + 2 * r] + t[9 + 2 * r]);
}

// The G groups' sums of alternate blocks in two sets of accumulators, named (an array indexed by b & 1 stayed in
// memory: a store-to-load chain through every FMA, about 9 cycles a block)
template <int G, typename Block>
static inline void blocks_zmm(int64_t nb, const Block& block, float* y) {
  __m512 a0[G], a1[G];
  for (int g = 0; g < G; g++) a0[g] = a1[g] = _mm512_setzero_ps();
  int64_t b = 0;
  for (; b + 1 < nb; b += 2) {
    block(b, a0);
    block(b + 1, a1);
  }
  if (b < nb) block(b, a0);
  for (int g = 0; g < G; g++) store_zmm_pairs(_mm512_add_ps(a0[g], a1[g]), y + 4 * g);
}

template <int G>
static void gemv_q8_0x4_zmm(int64_t K, const uint8_t* w, size_t rs, const int8_t* q, const float* d, float* y) {
  const __m512i i01 = _mm512_setr_epi64(0, 0, 0, 0, 1, 1, 1, 1), i23 = _mm512_setr_epi64(2, 2, 2, 2, 3, 3, 3, 3);
  const __m512i flip = _mm512_set1_epi8(char(0x80)), zero = _mm512_setzero_si512();
  blocks_zmm<G>(K / kQ8Block, [&](int64_t b, __m512 (&a)[G]) {
    __m512i x01, x23;
    x_pairs(q + b * kQ8Block, i01, i23, &x01, &x23);
    const __m512i neg = _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(zero, flip, x01), flip, x23));
    const __m512 dx = _mm512_set1_ps(d[b]);
    for (int g = 0; g < G; g++) {
      const uint8_t* wb = w + g * rs + b * kQ8_0x4Bytes;
      prefetch_packed(wb);
      const __m512i w01 = _mm512_xor_si512(_mm512_loadu_si512(wb + 8), flip);
      const __m512i w23 = _mm512_xor_si512(_mm512_loadu_si512(wb + 72), flip);
      const __m512i i = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(neg, w01, x01), w23, x23);
      a[g] = _mm512_fmadd_ps(_mm512_mul_ps(scales4_zmm(wb), dx), _mm512_cvtepi32_ps(i), a[g]);
    }
  }, y);
}

// Q5_0x4: the 5th bits into the values by a byte mask each: the 16 bytes at wb + 72 hold in bit c of byte i the 5th
// bit of byte i of chunk c, in bit 4 + c that of byte 16 + i; broadcast to the four 128-bit lanes, a lane tests
// the bit of its chunk (lo: chunk 0 in the low half, 2 in the high; hi: 1 and 3) and its 16 bytes
template <int G>
static void gemv_q5_0x4_zmm(int64_t K, const uint8_t* w, size_t rs, const int8_t* q, const float* d,
                            const float* ds, float* y) {
  const __m512i i02 = _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2), i13 = _mm512_setr_epi64(1, 1, 1, 1, 3, 3, 3, 3);
  const __m512i lo4 = _mm512_set1_epi8(0x0F), b5 = _mm512_set1_epi8(0x10);
  const int64_t r = 0x0101010101010101;  // a byte in every byte of a 64-bit lane
  const __m512i m02 = _mm512_setr_epi64(r, r, 0x10 * r, 0x10 * r, 0x04 * r, 0x04 * r, 0x40 * r, 0x40 * r);
  const __m512i m13 = _mm512_setr_epi64(0x02 * r, 0x02 * r, 0x20 * r, 0x20 * r, 0x08 * r, 0x08 * r,
                                        int64_t(0x80 * uint64_t(r)), int64_t(0x80 * uint64_t(r)));
  const __m512 off = _mm512_set1_ps(-4.0f);  // -16 per row, a quarter per lane
  blocks_zmm<G>(K / kQ8Block, [&](int64_t b, __m512 (&a)[G]) {
    __m512i x02, x13;
    x_pairs(q + b * kQ8Block, i02, i13, &x02, &x13);
    const __m512 dx = _mm512_set1_ps(d[b]), o = _mm512_mul_ps(_mm512_set1_ps(ds[b]), off);
    for (int g = 0; g < G; g++) {
      const uint8_t* wb = w + g * rs + b * kQ5_0x4Bytes;
      prefetch_packed(wb);
      const __m512i n = _mm512_loadu_si512(wb + 8);
      const __m512i h = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 72)));
      const __m512i vlo = _mm512_and_si512(n, lo4), vhi = _mm512_and_si512(_mm512_srli_epi16(n, 4), lo4);
      const __m512i v02 = _mm512_mask_add_epi8(vlo, _mm512_test_epi8_mask(h, m02), vlo, b5);
      const __m512i v13 = _mm512_mask_add_epi8(vhi, _mm512_test_epi8_mask(h, m13), vhi, b5);
      const __m512i i = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), v02, x02), v13, x13);
      const __m512 f = _mm512_fmadd_ps(dx, _mm512_cvtepi32_ps(i), o);
      a[g] = _mm512_fmadd_ps(scales4_zmm(wb), f, a[g]);
    }
  }, y);
}

// Q4_Kx4, one row of x: per sub-block j the nibbles of its 64 bytes (low: chunks 0 | 2, high: 1 | 3) against x's
// pairs by vpmaddubsw, summed in s16 (≤ 2·2·15·127), vpmaddwd by the 4 rows' integer scales (the same lanes in
// both halves), one FMA by d_x; the minimums per super-block as gemv_qk4x4 does (ymm, lane pairs)
static void gemv_q4_Kx4_zmm(int64_t K, const uint8_t* w, const int8_t* q, const float* d, const float* ds, float* y) {
  const __m512i i02 = _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2), i13 = _mm512_setr_epi64(1, 1, 1, 1, 3, 3, 3, 3);
  const __m512i lo4 = _mm512_set1_epi8(0x0F);
  // scale_lanes_u8's byte pattern in each 256-bit half: s16 lanes 4r..4r+3 = byte r
  const int64_t b0 = int64_t(0x8000800080008000u), r = 0x0001000100010001;
  const __m512i sidx = _mm512_setr_epi64(b0, b0 + r, b0 + 2 * r, b0 + 3 * r, b0, b0 + r, b0 + 2 * r, b0 + 3 * r);
  __m512 acc = _mm512_setzero_ps();
  __m256 accm = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < K / gguf::QK_K; sb++) {
    const uint8_t* wb = w + sb * kQ4_Kx4Bytes;
    prefetch_span(wb, int(kQ4_Kx4Bytes));
    __m256i scv, mnv;
    q4_Kx4_scales(wb, &scv, &mnv);
    alignas(32) uint8_t sc[32];
    _mm256_store_si256(reinterpret_cast<__m256i*>(sc), scv);
    const int8_t* xs = q + sb * gguf::QK_K;
    auto sub = [&](int j, __m512 t) {
      __m512i x02, x13;
      x_pairs(xs + 32 * j, i02, i13, &x02, &x13);
      const __m512i n = _mm512_loadu_si512(wb + 64 + 64 * j);
      const __m512i p = _mm512_add_epi16(_mm512_maddubs_epi16(_mm512_and_si512(n, lo4), x02),
                                         _mm512_maddubs_epi16(_mm512_and_si512(_mm512_srli_epi16(n, 4), lo4), x13));
      int32_t u;
      std::memcpy(&u, sc + 4 * j, 4);
      const __m512i i = _mm512_madd_epi16(p, _mm512_shuffle_epi8(_mm512_set1_epi32(u), sidx));
      return _mm512_fmadd_ps(_mm512_set1_ps(d[sb * 8 + j]), _mm512_cvtepi32_ps(i), t);
    };
    __m512 t0 = _mm512_setzero_ps(), t1 = _mm512_setzero_ps();
    for (int j = 0; j < 8; j += 2) {
      t0 = sub(j, t0);
      t1 = sub(j + 1, t1);
    }
    const __m256 tm = mins_dot(mnv, ds + sb * 8);
    acc = _mm512_fmadd_ps(scales4_zmm(wb), _mm512_add_ps(t0, t1), acc);
    accm = _mm256_fnmadd_ps(scales4_by_lane_pairs(wb + 8), tm, accm);
  }
  alignas(64) float t[16], m[8];
  _mm512_store_ps(t, acc);
  _mm256_store_ps(m, accm);
  for (int r = 0; r < 4; r++)
    y[r] = ((t[2 * r] + t[2 * r + 1]) + (t[8 + 2 * r] + t[9 + 2 * r])) + (m[2 * r] + m[2 * r + 1]);
}

// Q6_Kx4, one row of x: per sub-block the values (low nibbles: chunks 0 | 2, high: 1 | 3, their 2 high bits from
// the 32 bytes at + 64 broadcast to both halves) against x's pairs by vpmaddubsw, summed in s16 (≤ 2·2·63·127): the
// low half then holds chunks 0 + 1 (scale 2j), the high half 2 + 3 (scale 2j + 1), one vpmaddwd by both; the offset
// of 32 as gemv_q6_Kx4 takes it (ymm, lane pairs)
static void gemv_q6_Kx4_zmm(int64_t K, const uint8_t* w, const int8_t* q, const float* d, const float* d16, float* y) {
  const __m512i i02 = _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2), i13 = _mm512_setr_epi64(1, 1, 1, 1, 3, 3, 3, 3);
  const __m512i lo4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
  const int64_t s4 = 0x0004000400040004;  // s16 shift counts: 4 in the low half, 0 in the high
  const __m512i sh = _mm512_setr_epi64(s4, s4, s4, s4, 0, 0, 0, 0);
  // the scales of sub-block j (8 bytes: 2j of rows 0-3, then 2j + 1) as s16 lanes 4r..4r+3: scale 2j of row r in
  // the low half, 2j + 1 in the high, each byte into the high half of its s16 and shifted back (signed)
  const int64_t b0 = 0x0080008000800080, r = 0x0100010001000100;  // 64-bit lane e: byte e of the 8
  const __m512i sidx = _mm512_setr_epi64(b0, b0 + r, b0 + 2 * r, b0 + 3 * r, b0 + 4 * r, b0 + 5 * r, b0 + 6 * r,
                                         b0 + 7 * r);
  __m512 acc = _mm512_setzero_ps();
  __m256 acco = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < K / gguf::QK_K; sb++) {
    const uint8_t* wb = w + sb * kQ6_Kx4Bytes;
    prefetch_span(wb, int(kQ6_Kx4Bytes));
    const int8_t* xs = q + sb * gguf::QK_K;
    auto sub = [&](int j, __m512 t) {
      __m512i x02, x13;
      x_pairs(xs + 32 * j, i02, i13, &x02, &x13);
      const uint8_t* p = wb + 72 + 96 * j;
      const __m512i n = _mm512_loadu_si512(p);
      const __m512i h = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 64)));
      const __m512i v02 = _mm512_ternarylogic_epi32(n, lo4, _mm512_and_si512(_mm512_sllv_epi16(h, sh), m30), 0xEA);
      const __m512i h13 = _mm512_and_si512(_mm512_sllv_epi16(_mm512_srli_epi16(h, 2), sh), m30);
      const __m512i v13 = _mm512_ternarylogic_epi32(_mm512_srli_epi16(n, 4), lo4, h13, 0xEA);
      const __m512i pr = _mm512_add_epi16(_mm512_maddubs_epi16(v02, x02), _mm512_maddubs_epi16(v13, x13));
      int64_t u;
      std::memcpy(&u, wb + 8 + 8 * j, 8);
      const __m512i scl = _mm512_srai_epi16(_mm512_shuffle_epi8(_mm512_set1_epi64(u), sidx), 8);
      const __m512i i = _mm512_madd_epi16(pr, scl);
      return _mm512_fmadd_ps(_mm512_set1_ps(d[sb * 8 + j]), _mm512_cvtepi32_ps(i), t);
    };
    __m512 t0 = _mm512_setzero_ps(), t1 = _mm512_setzero_ps();
    __m256 o0 = _mm256_setzero_ps(), o1 = o0;
    for (int j = 0; j < 8; j += 2) {
      t0 = sub(j, t0);
      t1 = sub(j + 1, t1);
      const double* dp = reinterpret_cast<const double*>(d16 + sb * 16 + 2 * j);
      o0 = _mm256_fmadd_ps(scale_pairs_s8(wb + 8 + 8 * j), _mm256_castpd_ps(_mm256_broadcast_sd(dp)), o0);
      o1 = _mm256_fmadd_ps(scale_pairs_s8(wb + 16 + 8 * j), _mm256_castpd_ps(_mm256_broadcast_sd(dp + 1)), o1);
    }
    const __m512 dw = scales4_zmm(wb);
    acc = _mm512_fmadd_ps(dw, _mm512_add_ps(t0, t1), acc);
    acco = _mm256_fmadd_ps(_mm512_castps512_ps256(dw), _mm256_add_ps(o0, o1), acco);
  }
  alignas(64) float t[16], o[8];
  _mm512_store_ps(t, acc);
  _mm256_store_ps(o, acco);
  for (int k = 0; k < 4; k++)
    y[k] = ((t[2 * k] + t[2 * k + 1]) + (t[8 + 2 * k] + t[9 + 2 * k])) - 32.0f * (o[2 * k] + o[2 * k + 1]);
}

// ---- packed groups against 6-32 rows of x in 512-bit lanes ------------------------------------------------
// The kernels above put 4 rows of W in the lanes and broadcast 8 values of x: per row of x and block 4 broadcasts,
// 8 sign fixes and 4 ymm vpdpbusd for 128 products (about 110 GMAC per CPU-second at 32 rows of x, a fifth of
// this core's VNNI peak). Here the lanes are rows of x: 16 rows' 4 consecutive values per zmm (quant_acts_lanes),
// each 4 weight values broadcast from the block, so one instruction is 64 products with nothing around it. Q8_0's
// signed weights are vpdpbusd's signed memory operand against x + 128 (u8), the + 128 taken off once per block and
// row of W as 128·Σw (its 32 weights summed by vpdpbusd against ones). The other types' values are unsigned (Q5_0
// 0-31, Q4_K 0-15, Q5_K 0-31, Q6_K 0-63, unpacked per tile without their offsets): they are the unsigned operand
// against x as s8, and the offset (Q5_0 16, Q6_K 32 times Σx) is the integer sums' start, one vector per block and
// vector of x rows (the Σx of quant_acts_lanes) instead of a Σw per block and row of W. Then one convert and two f32
// products per block. 1 thread, 32 rows, GMAC per CPU-second, the + 128 for every type / this (3 pairs, load 9):
// Q5_0 1536x576 308-312 / 313-314, Q4_K 576x1536 251-255 / 259-261, Q6_K 576x1536 228-231 / 245-249.

// x as lanes: xt[((b·8 + g)·Mp + m)·4 + i] = q[m·K + 32b + 4g + i] + 128 (u8; rows m >= M: 128, x = 0), xs the
// same values as s8 (rows m >= M: 0), dt[b·Mp + m] = d[m·nb + b], st[b·Mp + m] = ds[m·nb + b] (0 past M),
// sq[j·Mp + m] = Σ q[m·K + 16j + l] (l < 16); Mp = M rounded up to 16. Per 16 rows and 64 values: the rows' 16
// dwords loaded and transposed in registers (4 rounds of 16 vpermt2d), where a 16-lane gather per 4 values was
// 1.9 % of gemm_lanes' samples (1.4 % this way; 32-stream SmolLM2-135M Q4_K_M step, 1 thread, serial on the caller)
void quant_acts_lanes_size(QuantActs* a) {
  const int64_t M = a->M, K = a->K, nb = K / kQ8Block, Mp = (M + 15) / 16 * 16;
  a->xt.resize(size_t(K * Mp));
  a->xs.resize(size_t(K * Mp));
  a->dt.resize(size_t(nb * Mp));
  a->st.resize(size_t(nb * Mp));
  a->sq.resize(size_t(K / 16 * Mp));
}

void quant_acts_lanes(QuantActs* a, int64_t m0) {
  const int64_t M = a->M, K = a->K, nb = K / kQ8Block, Mp = (M + 15) / 16 * 16;
  const __m512i flip = _mm512_set1_epi8(char(0x80)), ones = _mm512_set1_epi8(1);
  // round j of the transpose swaps bit j of the row and the dword index: rows i (bit j clear) and i + 2^j take
  // lo[c] = c's bit j ? row i + 2^j's c - 2^j : row i's c, and hi[c] = c's bit j ? row i + 2^j's c : row i's c + 2^j
  __m512i lo[4], hi[4];
  for (int j = 0; j < 4; j++) {
    alignas(64) int32_t l[16], h[16];
    for (int c = 0; c < 16; c++) {
      const bool bit = (c >> j) & 1;
      l[c] = bit ? 16 + c - (1 << j) : c;
      h[c] = bit ? 16 + c : c + (1 << j);
    }
    lo[j] = _mm512_load_si512(l);
    hi[j] = _mm512_load_si512(h);
  }
  const int64_t rows = std::min<int64_t>(16, M - m0);
  const int8_t* qm = a->q.data() + m0 * K;
  for (int64_t c0 = 0; c0 < K; c0 += 64) {  // values c0 .. c0 + 63 (the last 32 where K is an odd multiple of 32)
    const int ng = int(std::min<int64_t>(64, K - c0) / 4);  // groups of 4 values: 16, or 8
    const __mmask16 live = __mmask16((1u << ng) - 1);
    __m512i r[16];
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++)
      r[i] = i < rows ? _mm512_maskz_loadu_epi32(live, qm + i * K + c0) : _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
#pragma GCC unroll 16
      for (int i = 0; i < 16; i++) {
        if ((i >> j) & 1) continue;
        const __m512i a0 = r[i], a1 = r[i + (1 << j)];
        r[i] = _mm512_permutex2var_epi32(a0, lo[j], a1);
        r[i + (1 << j)] = _mm512_permutex2var_epi32(a0, hi[j], a1);
      }
    // r[g]: lane m = row m0 + m's values c0 + 4g .. + 3, group c0/4 + g
    for (int g = 0; g < ng; g += 4) {
      __m512i s = _mm512_setzero_si512();
      for (int u = g; u < g + 4; u++) {
        const int64_t at = ((c0 / 4 + u) * Mp + m0) * 4;
        _mm512_storeu_si512(a->xs.data() + at, r[u]);
        _mm512_storeu_si512(a->xt.data() + at, _mm512_xor_si512(r[u], flip));
        s = _mm512_dpbusd_epi32(s, ones, r[u]);
      }
      _mm512_storeu_si512(a->sq.data() + (c0 + 4 * g) / 16 * Mp + m0, s);
    }
  }
  for (int64_t m = m0; m < m0 + 16; m++)
    for (int64_t b = 0; b < nb; b++) {
      a->dt[size_t(b * Mp + m)] = m < M ? a->d[size_t(m * nb + b)] : 0.0f;
      a->st[size_t(b * Mp + m)] = m < M ? a->ds[size_t(m * nb + b)] : 0.0f;
    }
}

// A block of 4 rows of W as the lanes kernels read it when the stored type is not Q8_0 (unpacked once per tile):
// the 4 rows' 32 values as u8 without the type's offset, in Q8_0x4's chunk order (values 8c..8c+7 of row r at
// 32c + 8r), row r's scale d[r] (Q6_K: d[r] for values 0-15, d[4 + r] for 16-31) and, for Q4_K / Q5_K,
// m[r] = -dmin·m_j (times d_x·Σq_x)
struct alignas(32) LaneBlock {
  uint8_t v[128];
  float d[8];
  float m[4];
  float pad[4];
};

// How a tile reads W: Q8_0 straight from the packed groups, else from the unpacked blocks: with one scale per row and
// an offset of 16 (Q5_0), with minimums (Q4_K, Q5_K), or with a scale per 16 values and an offset of 32 (Q6_K)
enum class LaneSrc { kQ8_0, kScale, kMin, kHalves };

// 4·G rows of W × 16·V rows of x (a's lanes, Mp rows): out[n·16V + m]. W: G packed Q8_0 groups at w (rs bytes
// apart), or the unpacked blocks at sc (block b of group g at sc[b·G + g])
template <int G, int V, LaneSrc kSrc>
static inline void tile_lanes(int64_t nb, const uint8_t* w, size_t rs, const LaneBlock* sc, const QuantActs& a,
                              int64_t Mp, float* out) {
  constexpr int R = 4 * G;
  constexpr bool kQ8 = kSrc == LaneSrc::kQ8_0, kHalves = kSrc == LaneSrc::kHalves;
  constexpr int kOffShift = kSrc == LaneSrc::kScale ? 4 : 5;  // the offset 16 or 32 (kScale, kHalves)
  const uint8_t* xl = kQ8 ? a.xt.data() : reinterpret_cast<const uint8_t*>(a.xs.data());
  const float* dt = a.dt.data();
  const float* st = a.st.data();
  const int32_t* sq = a.sq.data();
  const __m512i ones = _mm512_set1_epi8(1);
  __m512 acc[V][R];
  for (int v = 0; v < V; v++)
    for (int n = 0; n < R; n++) acc[v][n] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    // the values of group g in this block and its scales; Q8_0: per row n of the tile 128·Σ of its 32 weights (lanes
    // 2r, 2r + 1 hold row r's sums of 4)
    const uint8_t* vals[G];
    alignas(64) int32_t corr[G][8];
    alignas(64) float dw[2][R], mw[R];
    for (int g = 0; g < G; g++) {
      if (kQ8) {
        const uint8_t* wb = w + g * rs + b * kQ8_0x4Bytes;
        prefetch_packed(wb);
        vals[g] = wb + 8;
        _mm_store_ps(dw[0] + 4 * g, _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(wb))));
        const __m512i s0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_loadu_si512(vals[g]));
        const __m512i s = _mm512_dpbusd_epi32(s0, ones, _mm512_loadu_si512(vals[g] + 64));
        __m256i t = _mm256_add_epi32(_mm512_castsi512_si256(s), _mm512_extracti64x4_epi64(s, 1));
        t = _mm256_add_epi32(t, _mm256_shuffle_epi32(t, 0xB1));  // row r's sum in lanes 2r and 2r + 1
        _mm256_store_si256(reinterpret_cast<__m256i*>(corr[g]), _mm256_slli_epi32(t, 7));
      } else {
        const LaneBlock& lb = sc[b * G + g];
        vals[g] = lb.v;
        _mm_store_ps(dw[0] + 4 * g, _mm_load_ps(lb.d));
        if (kHalves) _mm_store_ps(dw[1] + 4 * g, _mm_load_ps(lb.d + 4));
        if (kSrc == LaneSrc::kMin) _mm_store_ps(mw + 4 * g, _mm_load_ps(lb.m));
      }
    }
    // the integer sums over values 4k..4k+3 for k in [k0, k1), then scaled into acc (halves: scale h of each row)
    auto part = [&](int k0, int k1, int h) {
      // the sums' start: 0, or -offset·Σx over the values k0..k1 cover (block b, or its half h)
      __m512i p0[V];
      for (int v = 0; v < V; v++) {
        if (kQ8 || kSrc == LaneSrc::kMin) {
          p0[v] = _mm512_setzero_si512();
          continue;
        }
        const int32_t* sv = sq + (2 * b + h) * Mp + 16 * v;
        __m512i sx = _mm512_loadu_si512(sv);
        if (!kHalves) sx = _mm512_add_epi32(sx, _mm512_loadu_si512(sv + Mp));
        p0[v] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(sx, kOffShift));
      }
      __m512i p[V][R];
      for (int v = 0; v < V; v++)
        for (int n = 0; n < R; n++) p[v][n] = p0[v];
#pragma GCC unroll 8
      for (int k = k0; k < k1; k++) {  // values 4k..4k+3 of the block: chunk k/2, half k%2 of each row's 8 bytes
        __m512i x[V];
        for (int v = 0; v < V; v++) x[v] = _mm512_loadu_si512(xl + ((b * 8 + k) * Mp + 16 * v) * 4);
        for (int n = 0; n < R; n++) {
          int32_t wv;
          std::memcpy(&wv, vals[n / 4] + 32 * (k / 2) + 8 * (n % 4) + 4 * (k % 2), 4);
          const __m512i wb = _mm512_set1_epi32(wv);
          for (int v = 0; v < V; v++)
            p[v][n] = kQ8 ? _mm512_dpbusd_epi32(p[v][n], x[v], wb) : _mm512_dpbusd_epi32(p[v][n], wb, x[v]);
        }
      }
      for (int v = 0; v < V; v++) {
        const __m512 dx = _mm512_loadu_ps(dt + b * Mp + 16 * v);
        for (int n = 0; n < R; n++) {
          const __m512i pi = kQ8 ? _mm512_sub_epi32(p[v][n], _mm512_set1_epi32(corr[n / 4][2 * (n % 4)])) : p[v][n];
          const __m512 f = _mm512_cvtepi32_ps(pi);
          acc[v][n] = _mm512_fmadd_ps(_mm512_mul_ps(dx, _mm512_set1_ps(dw[h][n])), f, acc[v][n]);
        }
      }
    };
    if (kHalves) {
      part(0, 4, 0);
      part(4, 8, 1);
    } else {
      part(0, 8, 0);
    }
    if (kSrc == LaneSrc::kMin)
      for (int v = 0; v < V; v++) {
        const __m512 sx = _mm512_loadu_ps(st + b * Mp + 16 * v);
        for (int n = 0; n < R; n++) acc[v][n] = _mm512_fmadd_ps(_mm512_set1_ps(mw[n]), sx, acc[v][n]);
      }
  }
  for (int v = 0; v < V; v++)
    for (int n = 0; n < R; n++) _mm512_storeu_ps(out + n * 16 * V + 16 * v, acc[v][n]);
}

static inline void store_values(LaneBlock& lb, const __m256i* v) {
  for (int c = 0; c < 4; c++) _mm256_store_si256(reinterpret_cast<__m256i*>(lb.v + 32 * c), v[c]);
}

// The packed blocks of G groups (rs bytes apart) → sc[b·G + g] (b < K/32)
// Q5_0x4: the values (0-31), d
// in 512-bit vectors as gemv_q5_0x4_zmm unpacks them: the nibbles of chunks 0 | 2 and 1 | 3, 16 added where a
// byte's 5th bit is set (one masked add), the halves put in chunk order by one permute per pair (ymm: 4 vectors of
// or / and / shift and 4 subtracts a block; 32-stream SmolLM2-135M Q4_K_M step, 1 thread: 4.8 % of the samples here)
static void lanes_unpack_q5_0x4(int64_t nb, const uint8_t* w, size_t rs, int G, LaneBlock* sc) {
  const __m512i lo4 = _mm512_set1_epi8(0x0F), b5 = _mm512_set1_epi8(0x10);
  const int64_t r = 0x0101010101010101;  // a byte in every byte of a 64-bit lane
  const __m512i m02 = _mm512_setr_epi64(r, r, 0x10 * r, 0x10 * r, 0x04 * r, 0x04 * r, 0x40 * r, 0x40 * r);
  const __m512i m13 = _mm512_setr_epi64(0x02 * r, 0x02 * r, 0x20 * r, 0x20 * r, 0x08 * r, 0x08 * r,
                                        int64_t(0x80 * uint64_t(r)), int64_t(0x80 * uint64_t(r)));
  const __m512i i01 = _mm512_setr_epi64(0, 1, 2, 3, 8, 9, 10, 11), i23 = _mm512_setr_epi64(4, 5, 6, 7, 12, 13, 14, 15);
  for (int64_t b = 0; b < nb; b++)
    for (int g = 0; g < G; g++) {
      const uint8_t* wb = w + g * rs + b * kQ5_0x4Bytes;
      prefetch_packed(wb);
      const __m512i n = _mm512_loadu_si512(wb + 8);
      const __m512i h = _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 72)));
      const __m512i vlo = _mm512_and_si512(n, lo4), vhi = _mm512_and_si512(_mm512_srli_epi16(n, 4), lo4);
      const __m512i v02 = _mm512_mask_add_epi8(vlo, _mm512_test_epi8_mask(h, m02), vlo, b5);  // chunks 0 | 2
      const __m512i v13 = _mm512_mask_add_epi8(vhi, _mm512_test_epi8_mask(h, m13), vhi, b5);  // chunks 1 | 3
      LaneBlock& lb = sc[b * G + g];
      _mm512_storeu_si512(lb.v, _mm512_permutex2var_epi64(v02, i01, v13));
      _mm512_storeu_si512(lb.v + 64, _mm512_permutex2var_epi64(v02, i23, v13));
      _mm_store_ps(lb.d, _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(wb))));
    }
}

// Q4_Kx4 / Q5_Kx4: sub-block j of super-block i is block 8i + j: the values, d·sc_j, -dmin·m_j
template <bool kFive>
static void lanes_unpack_qk4x4(int64_t nb, const uint8_t* w, size_t rs, int G, LaneBlock* sc) {
  constexpr int64_t bytes = kFive ? kQ5_Kx4Bytes : kQ4_Kx4Bytes;
  // byte 4j + r of each 128-bit half (sub-blocks j, j + 4 of the half) ← byte 8·(j/2) + 2r + j%2
  const __m256i mn_order = _mm256_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15,
                                            0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15);
  for (int64_t i = 0; i < nb / 8; i++)
    for (int g = 0; g < G; g++) {
      const uint8_t* wb = w + g * rs + i * bytes;
      prefetch_span(wb, int(bytes));
      __m256i scv, mnv;
      q4_Kx4_scales(wb, &scv, &mnv);
      // the minimums in the scales' order (byte 4j + r), per 128-bit half: from byte 8·(j/2) + 2r + j%2
      mnv = _mm256_shuffle_epi8(mnv, mn_order);
      // ds[4j + r] = d_r·sc, ms[4j + r] = -dmin_r·m of sub-block j (4 sub-blocks per vector)
      const __m512 d = _mm512_broadcast_f32x4(_mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(wb))));
      const __m512 nm = _mm512_sub_ps(_mm512_setzero_ps(), _mm512_broadcast_f32x4(
          _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(wb + 8)))));
      alignas(64) float ds[32], ms[32];
      for (int h = 0; h < 2; h++) {
        const __m128i sh = h ? _mm256_extracti128_si256(scv, 1) : _mm256_castsi256_si128(scv);
        const __m128i mh = h ? _mm256_extracti128_si256(mnv, 1) : _mm256_castsi256_si128(mnv);
        _mm512_store_ps(ds + 16 * h, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(sh))));
        _mm512_store_ps(ms + 16 * h, _mm512_mul_ps(nm, _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(mh))));
      }
      for (int j = 0; j < 8; j++) {
        __m256i v[4];
        unpack_qk4x4<kFive>(wb, j, v);
        LaneBlock& lb = sc[(8 * i + j) * G + g];
        store_values(lb, v);
        _mm_store_ps(lb.d, _mm_load_ps(ds + 4 * j));
        _mm_store_ps(lb.m, _mm_load_ps(ms + 4 * j));
      }
    }
}

// Q6_Kx4: sub-block j of super-block i is block 8i + j: the values (0-63), d·scale for values 0-15 and 16-31
static void lanes_unpack_q6_Kx4(int64_t nb, const uint8_t* w, size_t rs, int G, LaneBlock* sc) {
  for (int64_t i = 0; i < nb / 8; i++)
    for (int g = 0; g < G; g++) {
      const uint8_t* wb = w + g * rs + i * kQ6_Kx4Bytes;
      prefetch_span(wb, int(kQ6_Kx4Bytes));
      // row r's scale k at 8·(k/2) + 4·(k%2) + r: ds[8j .. 8j + 7] = d_r·scale is sub-block j's lb.d as it stands
      const __m512 d = _mm512_broadcast_f32x4(_mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(wb))));
      alignas(64) float ds[64];
      for (int q = 0; q < 4; q++) {
        const __m128i s8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 8 + 16 * q));
        _mm512_store_ps(ds + 16 * q, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(s8))));
      }
      for (int j = 0; j < 8; j++) {
        __m256i v[4];
        unpack_q6_Kx4(wb + 72 + 96 * j, v);
        LaneBlock& lb = sc[(8 * i + j) * G + g];
        store_values(lb, v);
        _mm256_store_ps(lb.d, _mm256_load_ps(ds + 8 * j));
      }
    }
}

// One tile of G groups (rs bytes apart) of type t at w against V vectors of x: the blocks unpacked into sc (not Q8_0,
// which is read straight from its groups), multiplied into out (4G rows of W, 16V)
template <int G, int V>
static void lanes_tile(DType t, int64_t nb, const uint8_t* w, size_t rs, LaneBlock* sc, const QuantActs& a, int64_t Mp,
                       float* out) {
  switch (t) {
    case DType::Q8_0: return tile_lanes<G, V, LaneSrc::kQ8_0>(nb, w, rs, nullptr, a, Mp, out);
    case DType::Q5_0:
      lanes_unpack_q5_0x4(nb, w, rs, G, sc);
      return tile_lanes<G, V, LaneSrc::kScale>(nb, nullptr, rs, sc, a, Mp, out);
    case DType::Q4_K:
    case DType::Q5_K:
      if (t == DType::Q4_K) lanes_unpack_qk4x4<false>(nb, w, rs, G, sc);
      else lanes_unpack_qk4x4<true>(nb, w, rs, G, sc);
      return tile_lanes<G, V, LaneSrc::kMin>(nb, nullptr, rs, sc, a, Mp, out);
    case DType::Q6_K:
      lanes_unpack_q6_Kx4(nb, w, rs, G, sc);
      return tile_lanes<G, V, LaneSrc::kHalves>(nb, nullptr, rs, sc, a, Mp, out);
    default: throw std::logic_error("gemm_lanes: no rows-in-lanes kernel for this type");
  }
}

// y[m·ldy + n] (m < a.M, n < 4·G) for the G packed groups of type t (Q8_0, Q5_0, Q4_K, Q5_K, Q6_K) at w (rs bytes
// apart) and the lanes of a (quant_acts_lanes)
void gemm_lanes(DType t, const QuantActs& a, const uint8_t* w, size_t rs, int64_t G, float* y, int64_t ldy) {
  const int64_t M = a.M, nb = a.K / kQ8Block, Mp = (M + 15) / 16 * 16;
  alignas(64) float out[8 * 32];  // (up to 8 rows of W, Mp)
  thread_local std::vector<LaneBlock> scratch;
  if (t != DType::Q8_0 && scratch.size() < size_t(2 * nb)) scratch.resize(size_t(2 * nb));
  LaneBlock* sc = scratch.data();
  auto store = [&](int64_t g, int Tg) {  // the tile's 4·Tg rows of W from group g into y
    for (int h = 0; h < Tg; h++) {  // rows 4h..4h+3 of the tile: (4, Mp) transposed to 4 columns of y
      const float* o = out + 4 * h * Mp;
      float* yh = y + 4 * (g + h);
      int64_t m0 = 0;
      for (; m0 + 16 <= M; m0 += 16) {  // 16 rows of x: a 4 × 16 transpose, 4 values per row of y
        const __m512 r0 = _mm512_load_ps(o + m0), r1 = _mm512_load_ps(o + Mp + m0);
        const __m512 r2 = _mm512_load_ps(o + 2 * Mp + m0), r3 = _mm512_load_ps(o + 3 * Mp + m0);
        const __m512 t0 = _mm512_unpacklo_ps(r0, r1), t1 = _mm512_unpackhi_ps(r0, r1);
        const __m512 t2 = _mm512_unpacklo_ps(r2, r3), t3 = _mm512_unpackhi_ps(r2, r3);
        // u[i]: 128-bit lane k holds row m0 + 4k + i of y
        const __m512 u[4] = {_mm512_shuffle_ps(t0, t2, 0x44), _mm512_shuffle_ps(t0, t2, 0xEE),
                             _mm512_shuffle_ps(t1, t3, 0x44), _mm512_shuffle_ps(t1, t3, 0xEE)};
        for (int i = 0; i < 4; i++) {
          _mm_storeu_ps(yh + (m0 + i) * ldy, _mm512_castps512_ps128(u[i]));
          _mm_storeu_ps(yh + (m0 + 4 + i) * ldy, _mm512_extractf32x4_ps(u[i], 1));
          _mm_storeu_ps(yh + (m0 + 8 + i) * ldy, _mm512_extractf32x4_ps(u[i], 2));
          _mm_storeu_ps(yh + (m0 + 12 + i) * ldy, _mm512_extractf32x4_ps(u[i], 3));
        }
      }
      for (int64_t m = m0; m < M; m++)
        for (int n = 0; n < 4; n++) yh[m * ldy + n] = o[n * Mp + m];
    }
  };
  int64_t g = 0;
  if (Mp == 16) {  // one vector of x: two groups per tile for 8 independent sums
    for (; g + 2 <= G; g += 2) {
      lanes_tile<2, 1>(t, nb, w + g * rs, rs, sc, a, Mp, out);
      store(g, 2);
    }
    for (; g < G; g++) {
      lanes_tile<1, 1>(t, nb, w + g * rs, rs, sc, a, Mp, out);
      store(g, 1);
    }
    return;
  }
  for (; g < G; g++) {
    lanes_tile<1, 2>(t, nb, w + g * rs, rs, sc, a, Mp, out);
    store(g, 1);
  }
}

}  // namespace loom::avx512
