// Private to native/kernels: the per-ISA kernels behind loom/quant.h.
//
// Activations are quantized per block of 32 values: q (K int8), d (K/32 f32 scales, d = amax/127),
// ds (K/32: d·Σq of the block, for the Q4_K minimums). One dot-product kernel per (weight, activation)
// type pair, each returning Σ_k w_k·x̂_k for one row of W against one quantized row of x.
#pragma once
#include <cstdint>
#include "loom/core.h"

namespace loom {

constexpr int64_t kQ8Block = 32;    // activation block (and Q8_0 weight block)
constexpr int64_t kQ8_0Bytes = 34;  // f16 d, int8 q[32]
constexpr int64_t kQ4_KBytes = 144; // f16 d, f16 dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles

#define LOOM_QUANT_DECLS                                                                                   \
  void quant_act_q8(int64_t K, const float* x, int8_t* q, float* d, float* ds);                            \
  float vec_dot_q8_0_q8(int64_t K, const uint8_t* w, const int8_t* q, const float* d);                     \
  float vec_dot_q4_K_q8(int64_t K, const uint8_t* w, const int8_t* q, const float* d, const float* ds);

namespace portable { LOOM_QUANT_DECLS }
namespace avx2 { LOOM_QUANT_DECLS }
namespace avx512 { LOOM_QUANT_DECLS }
#undef LOOM_QUANT_DECLS

}  // namespace loom
