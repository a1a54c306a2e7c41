// LoRA linear on the GPU, composed from the GEMMs (llm.c style: shapes in comments).
//   y (M, N) = x (M, K) · Wᵀ + bias + s · (x · Aᵀ) · Bᵀ ; W (N, K) frozen, A (r, K), B (N, r)
#include "cuda_internal.h"

namespace loom::cuda {

void lora_fwd(int64_t M, int64_t N, int64_t K, int64_t r, const float* x, int wtype, const void* w,
              const float* bias, const float* A, const float* B, float s, float* xa, float* y) {
  require(r >= 1, "lora: rank must be >= 1");
  // xa (M, r) = x · Aᵀ
  sgemm(false, true, M, r, K, 1.f, x, K, A, K, 0.f, xa, r);
  // y (M, N) = x · Wᵀ + bias   (bias fused in the cuBLASLt epilogue)
  linear(wtype, M, N, K, x, K, w, K, bias, y, N, 0.f);
  // y += s · xa · Bᵀ
  sgemm(false, true, M, N, r, s, xa, r, B, r, 1.f, y, N);
}

void lora_bwd(int64_t M, int64_t N, int64_t K, int64_t r, const float* x, int wtype, const void* w, const float* A,
              const float* B, float s, const float* xa, const float* dy, float* dx, float* dA, float* dB) {
  require(r >= 1, "lora: rank must be >= 1");
  require(wtype == W_F32 || wtype == W_BF16, "lora: weight dtype must be f32 or bf16");
  // dB (N, r) += s · dyᵀ · xa
  sgemm(true, false, N, r, M, s, dy, N, xa, r, 1.f, dB, r);
  // dxa (M, r) = s · dy · B
  auto* dxa = static_cast<float*>(scratch(2, size_t(M) * size_t(r) * sizeof(float)));
  sgemm(false, false, M, r, N, s, dy, N, B, r, 0.f, dxa, r);
  // dA (r, K) += dxaᵀ · x
  sgemm(true, false, r, K, M, 1.f, dxa, r, x, K, 1.f, dA, K);
  if (dx) {
    // dx (M, K) = dy · W + dxa · A
    if (wtype == W_F32) sgemm(false, false, M, K, N, 1.f, dy, N, static_cast<const float*>(w), K, 0.f, dx, K);
    else gemm_bf16w(false, false, M, K, N, 1.f, dy, N, static_cast<const uint16_t*>(w), K, 0.f, dx, K);
    sgemm(false, false, M, K, r, 1.f, dxa, r, A, K, 1.f, dx, K);
  }
}

}  // namespace loom::cuda
