// GEMM: the matrix products every model and training step is built from.
//
// Conventions: row-major, fp32 accumulation. `ld*` are row strides in elements.
// Linear layers store W as (N, K) (PyTorch / Hugging Face layout), so the forward is
//   y (M, N) = x (M, K) · Wᵀ + bias
// and all kernels take W in that layout; M may be anything including 1 (decode), where a
// bandwidth-bound GEMV path is used.
#pragma once
#include <cstdint>
#include <functional>
#include <vector>
#include "loom/core.h"

namespace loom {

struct QuantActs;  // loom/quant.h

// y[M,N] = beta * y + x[M,K] · W[N,K]ᵀ (+ bias[N] if non-null). beta is 0 or 1 in practice
// (0: y is write-only and may hold garbage/NaN).
void linear_f32(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const float* w, int64_t ldw,
                const float* bias, float* y, int64_t ldy, float beta = 0.0f);
// Same with bf16 weights (bf16 bits, as stored in checkpoints): the weights are widened to fp32
// in registers, so the result is fp32 math on the bf16 weights (half the memory traffic).
void linear_bf16(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const uint16_t* w, int64_t ldw,
                 const float* bias, float* y, int64_t ldy, float beta = 0.0f);
// bf16 compute: activations are rounded to bf16 too and multiplied with vdpbf16ps (AVX512_BF16),
// fp32 accumulation. Faster, looser (about 3 significant digits per product). Falls back to
// emulating the same rounding where the instruction is missing, so results agree across paths
// within accumulation-order noise.
void linear_bf16_bf16(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const uint16_t* w, int64_t ldw,
                      const float* bias, float* y, int64_t ldy, float beta = 0.0f);
// Weight dtype chosen at run time (F32, BF16, F16).
void linear(DType wtype, int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const void* w, int64_t ldw,
            const float* bias, float* y, int64_t ldy, float beta = 0.0f);

// General product: C[M,N] = alpha · op(A) · op(B) + beta · C, op(X) = X or Xᵀ.
// A is (M,K) or, with ta, stored (K,M); B is (K,N) or, with tb, stored (N,K).
// Used by backward passes: dx = dy·W (ta=0,tb=0), dW += dyᵀ·x (ta=1,tb=0, beta=1).
void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// sgemm without transposes, B in bf16 (bits): C[M,N] = alpha · A[M,K] · B[K,N] + beta · C. B is widened to
// fp32 while it is packed (fp32 math on the bf16 values). The backward of a linear layer with frozen bf16
// weights W (N, K): dx (M, K) = dy (M, N) · W, with B = W read in place (no widened copy of W).
void sgemm_bf16(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const uint16_t* B,
                int64_t ldb, float beta, float* C, int64_t ldc);

// sgemm in bf16 compute (training with precision bf16): op(A) and op(B) rounded to bf16 (round to nearest even)
// as they are packed, products with vdpbf16ps where the CPU has AVX512_BF16 (the same rounding emulated with
// fp32 FMAs elsewhere: correct but slower than sgemm, for tests), fp32 accumulation and C. Every layout of sgemm;
// training uses y = x·Wᵀ + bias (tb), dx = dy·W and dW += dyᵀ·x (ta, beta 1). bias (N), if non-null, is added
// to every row of C.
void sgemm_bf16_compute(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                        const float* B, int64_t ldb, float beta, float* C, int64_t ldc, const float* bias = nullptr);

// sgemm_bf16 in bf16 compute: A rounded to bf16, B (K, N) already bf16, products as sgemm_bf16_compute's. The
// backward of a linear layer with frozen bf16 weights trained with precision bf16: dx = dy·W.
void sgemm_bf16_bf16(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const uint16_t* B,
                     int64_t ldb, float beta, float* C, int64_t ldc);

// Batched strided sgemm (attention scores, per-head products): for b in [0, batch):
//   C_b = alpha · op(A_b) · op(B_b) + beta · C_b with A_b = A + b*strideA, etc.
void sgemm_batched(bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   int64_t lda, int64_t strideA, const float* B, int64_t ldb, int64_t strideB, float beta, float* C,
                   int64_t ldc, int64_t strideC);

// Pre-packed weights for repeated use (model weights are packed once at load time into the
// micro-kernel's panel layout; roughly the same memory as the source).
struct PackedWeight;
PackedWeight* weight_pack(DType wtype, int64_t N, int64_t K, const void* w, int64_t ldw);
void weight_free(PackedWeight* p);
// One weight from row blocks of the same K packed separately (e.g. a fused q;k;v whose parts have different
// block types): takes ownership of the parts; linear_packed runs each on its slice of y's columns.
PackedWeight* weight_stack(const std::vector<PackedWeight*>& parts);
// Moves the data of the weights (every part of a stacked one) into one new buffer, in the order given, and returns
// it: the caller frees it with aligned_free once the weights are freed. A small model's matrices are a few hundred
// KiB each, below aligned_malloc's huge-page size, so on their own they sit on 4 KiB pages (a TLB miss every 4 KiB of
// a decode step's stream, where the hardware prefetcher also stops); one buffer for them all has huge pages.
void* weight_gather(const std::vector<PackedWeight*>& ws);
int64_t weight_rows(const PackedWeight* p);  // N
int64_t weight_cols(const PackedWeight* p);  // K
size_t weight_bytes(const PackedWeight* p);
// Q* block types (wtype of weight_pack): rows of blocks kept as given (Q8_0 / Q5_0 in quant_pack's layout),
// products by linear_quant (loom/quant.h).
// The rows of blocks of such a weight (nullptr for other weights).
const void* weight_quant_data(const PackedWeight* p);
// Rows n0 .. n0 + n - 1 of a Q* weight, dequantized to f32 (n, K) whatever its layout (quant_pack).
void weight_quant_rows(const PackedWeight* p, int64_t n0, int64_t n, float* dst);
// y[M,N] = beta*y + x[M,K] · Wᵀ (+ bias)
void linear_packed(int64_t M, const float* x, int64_t ldx, const PackedWeight* w, const float* bias, float* y,
                   int64_t ldy, float beta = 0.0f);
// Whether linear_packed multiplies M rows by w from x quantized per block (QuantActs, loom/quant.h): w (or each of its
// parts) block-quantized, K a multiple of 32, M <= kQuantSmallM (a decode step's rows)
bool linear_packed_quantizes(const PackedWeight* w, int64_t M);
// y = beta·y + x·Wᵀ (+ bias) from x already quantized into a (a.M rows; linear_packed_quantizes(w, a.M))
void linear_packed_acts(const QuantActs& a, const PackedWeight* w, const float* bias, float* y, int64_t ldy,
                        float beta = 0.0f);
// The same where row(m) makes x's row m (filling x + m·ldx) on the pool first: for a block-quantized W and a decode
// step's rows each row is quantized as soon as it is made, in the same parallel region (quant_acts_rows), where
// linear_packed quantizes x on the calling thread
void linear_packed_rows(int64_t M, const std::function<void(int64_t)>& row, const float* x, int64_t ldx,
                        const PackedWeight* w, const float* bias, float* y, int64_t ldy, float beta = 0.0f);

}  // namespace loom
