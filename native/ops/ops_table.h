// Internal: the per-ISA kernel table behind the public ops in loom/ops.h.
//
// Every public op in ops.cc is a thin driver: it validates nothing (the N-API layer does), splits
// the work over the thread pool and calls the single-threaded kernel of the active ISA through
// this table. The portable table (ops.cc) holds the reference loops; the AVX2 table
// (ops_avx2.cc) starts from the portable one and overrides what it vectorizes; the AVX-512 table
// (ops_avx512.cc) starts from the AVX2 one. So every path is always complete, and a kernel
// without a SIMD variant simply runs the next lower one.
//
// Kernel contracts (all single-threaded, over the given rows / elements only):
//   rows kernels take (R, D, ...) for a contiguous block of R rows;
//   *_bwd kernels accumulate dw / db (+=) into the buffer they are given (the driver hands each
//   thread a private zeroed buffer and sums them), and write dx.
#pragma once
#include <cstdint>
#include "loom/ops.h"

namespace loom {

struct AdamwScalars {
  float decay, omb1, b2, omb2, step_size, bc2s, eps, gscale;
};

struct OpsTable {
  // elementwise, n elements
  void (*add_fwd)(int64_t n, const float* a, const float* b, float* y);
  void (*mul_fwd)(int64_t n, const float* a, const float* b, float* y);
  void (*mul_bwd)(int64_t n, const float* a, const float* b, const float* dy, float* da, float* db);
  void (*scale_fwd)(int64_t n, const float* x, float s, float* y);
  void (*axpy)(int64_t n, float a, const float* x, float* y);
  // y (M rows, ldy apart) += a (M, r) · B (r, N): per element the r FMAs of the axpys y += a[m, k]·B[k] in order of
  // k (the same bits); B f32, or bf16 widened (a LoRA's Bᵀ)
  void (*lora_b_rows)(int64_t M, int64_t N, int64_t r, const float* a, const float* b, float* y, int64_t ldy);
  void (*lora_b_rows_bf16)(int64_t M, int64_t N, int64_t r, const float* a, const uint16_t* b, float* y, int64_t ldy);
  void (*add_bias)(int64_t R, int64_t D, float* x, const float* b);
  void (*bias_bwd)(int64_t R, int64_t D, const float* dy, float* db);
  // normalization
  void (*layernorm_fwd)(int64_t R, int64_t D, const float* x, const float* w, const float* b, float eps, float* y,
                        float* mean, float* rstd);
  void (*layernorm_bwd)(int64_t R, int64_t D, const float* x, const float* w, const float* mean, const float* rstd,
                        const float* dy, float* dx, float* dw, float* db);
  void (*rmsnorm_fwd)(int64_t R, int64_t D, const float* x, const float* w, float eps, float* y, float* rstd);
  void (*rmsnorm_bwd)(int64_t R, int64_t D, const float* x, const float* w, const float* rstd, const float* dy,
                      float* dx, float* dw);
  // softmax
  void (*softmax_fwd)(int64_t R, int64_t D, const float* x, float* y);
  void (*softmax_bwd)(int64_t R, int64_t D, const float* y, const float* dy, float* dx);
  void (*log_softmax_fwd)(int64_t R, int64_t D, const float* x, float* y);
  // activations
  void (*gelu_fwd)(int64_t n, const float* x, float* y, bool approx);
  void (*gelu_bwd)(int64_t n, const float* x, const float* dy, float* dx, bool approx);
  void (*silu_fwd)(int64_t n, const float* x, float* y);
  void (*silu_bwd)(int64_t n, const float* x, const float* dy, float* dx);
  void (*swiglu_fwd)(int64_t n, const float* gate, const float* up, float* y);
  void (*swiglu_bwd)(int64_t n, const float* gate, const float* up, const float* dy, float* dgate, float* dup);
  // RoPE: rotate the pairs of every head of one token by the angles whose cos/sin are given
  // (cs: Dh/2 cos values then Dh/2 sin values; sin already negated for the backward).
  void (*rope_rotate)(int64_t H, int64_t Dh, const float* cs, float* x);
  // cross-entropy over R rows: losses (R) written (0 for ignored), dlogits written if non-null
  // with (softmax - onehot) * inv_count (zero rows for ignored labels).
  void (*cross_entropy_rows)(int64_t R, int64_t V, const float* logits, const int32_t* labels, float inv_count,
                             float* dlogits, float* losses);
  // AdamW over n elements with the scalars precomputed in double and rounded once (PyTorch order):
  //   p *= decay ; m += omb1 (g - m) ; v = v b2 + omb2 g² ; p -= step_size m / (sqrt(v) / bc2s + eps)
  void (*adamw_step)(int64_t n, float* p, const float* g, float* m, float* v, const AdamwScalars& c);
  double (*sum_squares)(int64_t n, const float* g);
  // index of the first largest of n values (NaN never larger), -1 when none is above -inf
  int64_t (*argmax)(int64_t n, const float* x);
  // attention (whole op; these parallelize internally over (batch, head, query tile))
  void (*attention_fwd)(const AttnParams& p, const float* q, const float* k, const float* v, float* out, float* lse);
  void (*attention_bwd)(const AttnParams& p, const float* q, const float* k, const float* v, const float* out,
                        const float* lse, const float* dout, float* dq, float* dk, float* dv, float* dbias);
};

// The table of the ISA active now (for model graphs that call single-threaded kernels inside
// their own parallel loops).
const OpsTable& ops_active();

namespace portable {
const OpsTable& ops_table();
void attention_fwd(const AttnParams& p, const float* q, const float* k, const float* v, float* out, float* lse);
void attention_bwd(const AttnParams& p, const float* q, const float* k, const float* v, const float* out,
                   const float* lse, const float* dout, float* dq, float* dk, float* dv, float* dbias);
}  // namespace portable
namespace avx2 {
const OpsTable& ops_table();
void attention_fwd(const AttnParams& p, const float* q, const float* k, const float* v, float* out, float* lse);
void attention_bwd(const AttnParams& p, const float* q, const float* k, const float* v, const float* out,
                   const float* lse, const float* dout, float* dq, float* dk, float* dv, float* dbias);
}  // namespace avx2
namespace avx512 {
const OpsTable& ops_table();
void attention_fwd(const AttnParams& p, const float* q, const float* k, const float* v, float* out, float* lse);
void attention_bwd(const AttnParams& p, const float* q, const float* k, const float* v, const float* out,
                   const float* lse, const float* dout, float* dq, float* dk, float* dv, float* dbias);
}  // namespace avx512

}  // namespace loom
