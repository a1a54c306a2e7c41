// Private to native/kernels: the per-ISA kernels behind loom/quant.h.
//
// Activations are quantized per block of 32 values: q (K int8), d (K/32 f32 scales, d = amax/127),
// ds (K/32: d·Σq of the block, for the weight types with an offset or a minimum; Q6_K's kernels take K/16 sums
// d·Σq per 16 values there, linear_quant_acts). One dot-product kernel
// per (weight, activation) type pair, each returning Σ_k w_k·x̂_k for one row of W against one quantized
// row of x; all share one signature so the dispatcher can keep them in a table.
#pragma once
#include <cstddef>
#include <cstdint>
#include "loom/core.h"
#include "loom/quant.h"

namespace loom {

constexpr int64_t kQ8Block = 32;     // activation block (and the 32-value weight blocks)
constexpr int64_t kQ4_0Bytes = 18;   // f16 d, 16 bytes of nibbles
constexpr int64_t kQ4_1Bytes = 20;   // f16 d, f16 m, 16 bytes of nibbles
constexpr int64_t kQ5_0Bytes = 22;   // f16 d, u32 qh, 16 bytes of nibbles
constexpr int64_t kQ5_1Bytes = 24;   // f16 d, f16 m, u32 qh, 16 bytes of nibbles
constexpr int64_t kQ8_0Bytes = 34;   // f16 d, int8 q[32]
constexpr int64_t kQ4_KBytes = 144;  // f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles
constexpr int64_t kQ5_KBytes = 176;  // as Q4_K + 32 bytes of 5th bits before the nibbles
constexpr int64_t kQ6_KBytes = 210;  // 128 bytes ql, 64 bytes qh, 16 int8 scales, f16 d
constexpr int64_t kQ8_KBytes = 292;  // f32 d, int8 q[256], 16 int16 sums
// quant_pack's layouts: per block of 32 values of a group of 4 rows, the 4 f16 scales (row r at byte 2r), then
//   Q8_0x4: the values interleaved in 8-byte chunks, values 8c..8c+7 of row r at 8 + 32c + 8r (c < 4);
//   Q5_0x4: the low nibbles of those chunks, c = 0, 1 at 8 + 32·0 + 8r + i (c = 0 low, c = 1 high nibble of
//           byte i), c = 2, 3 at 40 + 8r + i; then the 5th bits, byte i of chunk c (8r + i) as bit c of the
//           nibble at 72 + (8r + i) % 16, low nibble for 8r + i < 16, else the high one
//   Q4_Kx4 (per super-block of 256 values): the 4 f16 d, the 4 f16 dmin (8 + 2r), the 64 6-bit scales and
//           minimums (value e = 4j + r: row r's scale of sub-block j, e = 32 + 8·(j/2) + 2r + j%2: its minimum) as
//           low 4 bits, nibble e/32 of byte 16 + e%32, and high 2 bits, bits 2·(e/16) of byte 48 + e%16; then
//           sub-block j's values (0-15) at 64 + 64j as Q5_0x4's nibbles: chunks 0 | 1 at 8r + i, 2 | 3 at 32 + 8r + i;
//   Q5_Kx4 (per super-block): as Q4_Kx4, each sub-block's values (0-31) 80 bytes at 64 + 80j: the nibbles, then
//           the 5th bits as Q5_0x4's (bit c of the nibble at 64 + (8r + i) % 16, low nibble for 8r + i < 16);
//   Q6_Kx4 (per super-block): the 4 f16 d, the int8 scales (row r's scale k at 8 + 8·(k/2) + 4·(k%2) + r), then
//           sub-block j's values (0-63, value 32j + l of the super-block) at 72 + 96j: the low nibbles as Q4_Kx4's,
//           the high 2 bits of chunk c's value i of row r at bits 2c of byte 64 + 8r + i.
constexpr int64_t kQ8_0x4Bytes = 4 * kQ8_0Bytes;
constexpr int64_t kQ5_0x4Bytes = 4 * kQ5_0Bytes;
constexpr int64_t kQ4_Kx4Bytes = 4 * kQ4_KBytes;  // 16 + 48 + 512
constexpr int64_t kQ5_Kx4Bytes = 4 * kQ5_KBytes;  // 16 + 48 + 640
constexpr int64_t kQ6_Kx4Bytes = 4 * kQ6_KBytes;  // 8 + 64 + 768

using QuantDotFn = float (*)(int64_t K, const uint8_t* w, const int8_t* q, const float* d, const float* ds);
// y[r] (r < 4) = the products of the 4 rows at w + r·rb (rb bytes apart) with one quantized row of x
using QuantDot4Fn = void (*)(int64_t K, const uint8_t* w, size_t rb, const int8_t* q, const float* d, const float* ds,
                             float* y);
// y[m·ldy + r] (r < 4, m < M) = the products of the 4 rows at w + r·rb with M quantized rows of x, each weight
// block unpacked once for the M rows (Q4_0, Q5_0, Q8_0, Q4_K, Q6_K: where the unpacking is a large part of the work);
// the gemm8 kernels (the same types but Q8_0) take 8 rows (r < 8) with the same signature
using QuantGemm4Fn = void (*)(int64_t K, const uint8_t* w, size_t rb, int64_t M, const int8_t* q, const float* d,
                              const float* ds, float* y, int64_t ldy);
using QuantActFn = void (*)(int64_t K, const float* x, int8_t* q, float* d, float* ds);
// y[r·ldy + k] (r < 4, k < K) = the 4 rows of the packed group at w (quant_pack's layout) as f32
using QuantDequant4Fn = void (*)(int64_t K, const uint8_t* w, float* y, int64_t ldy);

// One row (vec_dot) and four rows (vec_dot4) per weight type T
#define LOOM_QUANT_DOTS(T)                                                                                  \
  float vec_dot_##T##_q8(int64_t K, const uint8_t* w, const int8_t* q, const float* d, const float* ds);     \
  void vec_dot4_##T##_q8(int64_t K, const uint8_t* w, size_t rb, const int8_t* q, const float* d, const float* ds, \
                         float* y);
// R weight rows (gemm4, gemm8) against M quantized rows of x, per weight type T
#define LOOM_QUANT_GEMM(R, T)                                                                                    \
  void gemm##R##_##T##_q8(int64_t K, const uint8_t* w, size_t rb, int64_t M, const int8_t* q, const float* d,   \
                          const float* ds, float* y, int64_t ldy);
#define LOOM_QUANT_DECLS                                                                  \
  void quant_act_q8(int64_t K, const float* x, int8_t* q, float* d, float* ds);           \
  LOOM_QUANT_DOTS(q4_0) LOOM_QUANT_DOTS(q4_1) LOOM_QUANT_DOTS(q5_0) LOOM_QUANT_DOTS(q5_1) \
  LOOM_QUANT_DOTS(q8_0) LOOM_QUANT_DOTS(q4_K) LOOM_QUANT_DOTS(q5_K) LOOM_QUANT_DOTS(q6_K) LOOM_QUANT_DOTS(q8_K) \
  LOOM_QUANT_GEMM(4, q4_0) LOOM_QUANT_GEMM(4, q5_0) LOOM_QUANT_GEMM(4, q8_0) LOOM_QUANT_GEMM(4, q4_K)          \
  LOOM_QUANT_GEMM(4, q6_K) LOOM_QUANT_GEMM(8, q4_0) LOOM_QUANT_GEMM(8, q5_0) LOOM_QUANT_GEMM(8, q4_K)          \
  LOOM_QUANT_GEMM(8, q6_K) LOOM_QUANT_GEMM(4, q8_0x4) LOOM_QUANT_GEMM(4, q5_0x4) LOOM_QUANT_GEMM(8, q5_0x4) \
  LOOM_QUANT_GEMM(4, q4_Kx4) LOOM_QUANT_GEMM(8, q4_Kx4) LOOM_QUANT_GEMM(4, q6_Kx4) LOOM_QUANT_GEMM(8, q6_Kx4) \
  LOOM_QUANT_GEMM(4, q5_Kx4) LOOM_QUANT_GEMM(8, q5_Kx4) void dequant4_q5_Kx4(int64_t K, const uint8_t* w, float* y, \
                                                                             int64_t ldy);                      \
  void dequant4_q8_0x4(int64_t K, const uint8_t* w, float* y, int64_t ldy);                                     \
  void dequant4_q5_0x4(int64_t K, const uint8_t* w, float* y, int64_t ldy);                                     \
  void dequant4_q4_Kx4(int64_t K, const uint8_t* w, float* y, int64_t ldy);                                     \
  void dequant4_q6_Kx4(int64_t K, const uint8_t* w, float* y, int64_t ldy);

// vec_dot4 as four single-row products, for the types without a four-row kernel (defined inside each ISA's
// namespace: LOOM_DOT4_BY_ROWS(q5_K) defines <isa>::vec_dot4_q5_K_q8 from <isa>::vec_dot_q5_K_q8)
#define LOOM_DOT4_BY_ROWS(T)                                                                                  \
  void vec_dot4_##T##_q8(int64_t K, const uint8_t* w, size_t rb, const int8_t* q, const float* d, const float* ds, \
                         float* y) {                                                                          \
    for (int r = 0; r < 4; r++) y[r] = vec_dot_##T##_q8(K, w + r * rb, q, d, ds);                           \
  }

namespace portable { LOOM_QUANT_DECLS }
namespace avx2 {
LOOM_QUANT_DECLS
// AVX2 only (quant_avx2.cc): a's s16 lanes for packed Q8_0 (xw, dw: M8 = M rounded up to 8), sized, then rows
// m0 .. m0 + 15 laid out in them (m0 a multiple of 16); and y[m·ldy + n] (n < 4) of one packed Q8_0 group against
// them
void quant_acts_wide_size(QuantActs* a);
void quant_acts_wide(QuantActs* a, int64_t m0);
void gemm4_q8_0x4_wide(int64_t K, const uint8_t* w, const QuantActs& a, float* y, int64_t ldy);
}  // namespace avx2
namespace avx512 {
LOOM_QUANT_DECLS
// AVX-512 VNNI only (quant_avx512.cc): a's lanes sized for its M (2-32) rows (xt, xs, dt, st, sq; Mp = M rounded up to
// 16), then the quantized rows m0 .. m0 + 15 (q, d, ds) laid out in them (m0 a multiple of 16); and y[m·ldy + n]
// (n < 4G) of G packed groups (rs bytes apart) of Q8_0, Q5_0, Q4_K, Q5_K or Q6_K against them
void quant_acts_lanes_size(QuantActs* a);
void quant_acts_lanes(QuantActs* a, int64_t m0);
void gemm_lanes(DType t, const QuantActs& a, const uint8_t* w, size_t rs, int64_t G, float* y, int64_t ldy);
}  // namespace avx512
#undef LOOM_QUANT_DECLS
#undef LOOM_QUANT_DOTS

}  // namespace loom
