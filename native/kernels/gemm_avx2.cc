// GEMM fast path for avx2 (phase 1: forwards to the portable reference).
#include "gemm_internal.h"

namespace loom::avx2 {

void linear_f32(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const float* w, int64_t ldw,
                const float* bias, float* y, int64_t ldy, float beta) {
  portable::linear_f32(M, N, K, x, ldx, w, ldw, bias, y, ldy, beta);
}
void linear_bf16(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const uint16_t* w, int64_t ldw,
                 const float* bias, float* y, int64_t ldy, float beta) {
  portable::linear_bf16(M, N, K, x, ldx, w, ldw, bias, y, ldy, beta);
}
void linear_f16(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const uint16_t* w, int64_t ldw,
                const float* bias, float* y, int64_t ldy, float beta) {
  portable::linear_f16(M, N, K, x, ldx, w, ldw, bias, y, ldy, beta);
}
void linear_bf16_bf16(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const uint16_t* w, int64_t ldw,
                      const float* bias, float* y, int64_t ldy, float beta) {
  portable::linear_bf16_bf16(M, N, K, x, ldx, w, ldw, bias, y, ldy, beta);
}
void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  portable::sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
PackedWeight* weight_pack(DType wtype, int64_t N, int64_t K, const void* w, int64_t ldw) {
  return portable::weight_pack(wtype, N, K, w, ldw);
}
void linear_packed(int64_t M, const float* x, int64_t ldx, const PackedWeight* w, const float* bias, float* y,
                   int64_t ldy, float beta) {
  portable::linear_packed(M, x, ldx, w, bias, y, ldy, beta);
}

}  // namespace loom::avx2
