// Private to native/kernels: the per-ISA GEMM entry points behind loom/gemm.h and the packed
// weight representation they share.
//
// Every ISA namespace (portable, avx2, avx512) implements the same set; loom::<fn> in gemm.cc
// selects one with LOOM_DISPATCH. Packed weights remember the ISA (panel layout) they were packed
// for: linear_packed uses that ISA's kernel when it is the active one and otherwise falls back
// to the portable path, which can read every layout (slow but correct; only tests switch ISA
// between packing and use).
#pragma once
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>
#include "loom/core.h"
#include "loom/gemm.h"

namespace loom {

// Layout of PackedWeight::data:
//   nr == 0: plain row-major copy (N, K)                         (portable)
//   nr  > 0: ceil(N / nr) panels; panel p holds W[p*nr + j, k] at data[(p*K + k)*nr + j]
//            (K-major inside the panel, zero-padded past N), so any k-range of a panel is
//            contiguous: the micro-kernels stream it directly, and KC blocking is just an offset.
struct PackedWeight {
  Isa isa = Isa::Portable;
  DType stored = DType::F32;  // element type of data: F32 or BF16, or Q* rows of blocks (nr == 0)
  bool quant_packed = false;  // Q* rows laid out by quant_pack (loom/quant.h)
  int64_t N = 0, K = 0;
  int nr = 0;
  void* data = nullptr;
  size_t bytes = 0;
  bool owns_data = true;  // false once weight_gather moved data into its shared buffer
  // weight_stack: row blocks packed on their own (data == nullptr); W is their rows in order
  std::vector<PackedWeight*> parts;
  ~PackedWeight() {
    if (owns_data) aligned_free(data);
    for (PackedWeight* p : parts) delete p;
  }
  // W[n, k] as float (any layout; used by the portable fallback).
  float at(int64_t n, int64_t k) const {
    int64_t idx = nr == 0 ? n * K + k : ((n / nr) * K + k) * nr + (n % nr);
    return stored == DType::BF16 ? bf16_to_f32(static_cast<const uint16_t*>(data)[idx])
                                 : static_cast<const float*>(data)[idx];
  }
};

// Tag types for 16-bit weights (raw bits), so kernels can overload on the format.
struct bf16w { uint16_t v; };
struct f16w { uint16_t v; };

#define LOOM_GEMM_DECLS                                                                                        \
  void linear_f32(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const float* w, int64_t ldw,   \
                  const float* bias, float* y, int64_t ldy, float beta);                                       \
  void linear_bf16(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const uint16_t* w,            \
                   int64_t ldw, const float* bias, float* y, int64_t ldy, float beta);                         \
  void linear_f16(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const uint16_t* w,             \
                  int64_t ldw, const float* bias, float* y, int64_t ldy, float beta);                          \
  void linear_bf16_bf16(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const uint16_t* w,       \
                        int64_t ldw, const float* bias, float* y, int64_t ldy, float beta);                    \
  void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,       \
             const float* B, int64_t ldb, float beta, float* C, int64_t ldc);                                  \
  void sgemm_bf16(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const uint16_t* B, \
                  int64_t ldb, float beta, float* C, int64_t ldc);                                             \
  void sgemm_bf16_compute(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,       \
                          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,         \
                          const float* bias);                                                                  \
  void sgemm_bf16_bf16(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,               \
                       const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc);                     \
  PackedWeight* weight_pack(DType wtype, int64_t N, int64_t K, const void* w, int64_t ldw);                    \
  void linear_packed(int64_t M, const float* x, int64_t ldx, const PackedWeight* w, const float* bias, float* y, \
                     int64_t ldy, float beta);

namespace portable { LOOM_GEMM_DECLS }
namespace avx2 { LOOM_GEMM_DECLS }
namespace avx512 { LOOM_GEMM_DECLS }

}  // namespace loom
