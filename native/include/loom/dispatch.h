// Run-time dispatch between the portable, AVX2 and AVX-512 variants of a kernel.
//
// Convention: a kernel `foo` has a reference implementation loom::portable::foo and, optionally,
// loom::avx2::foo (in a *_avx2.cc file) and loom::avx512::foo (in a *_avx512.cc file), all with
// the same signature. The public loom::foo forwards with LOOM_DISPATCH(foo, args...). A variant
// that does not exist for an ISA is declared to forward to the next lower one by the file that
// declares the kernel (see LOOM_DECLARE_KERNEL_*), so every path is always callable and the
// tests can force each with LOOM_ISA / isa_set().
#pragma once
#include "loom/core.h"

#define LOOM_DISPATCH(fn, ...)                                  \
  do {                                                          \
    switch (::loom::isa_active()) {                             \
      case ::loom::Isa::Avx512: return ::loom::avx512::fn(__VA_ARGS__); \
      case ::loom::Isa::Avx2: return ::loom::avx2::fn(__VA_ARGS__);     \
      default: return ::loom::portable::fn(__VA_ARGS__);        \
    }                                                           \
  } while (0)

namespace loom {
namespace portable {
void convert_bf16_to_f32(int64_t n, const uint16_t* src, float* dst);
void convert_f32_to_bf16(int64_t n, const float* src, uint16_t* dst);
void convert_f16_to_f32(int64_t n, const uint16_t* src, float* dst);
}  // namespace portable
namespace avx2 {
void convert_bf16_to_f32(int64_t n, const uint16_t* src, float* dst);
void convert_f32_to_bf16(int64_t n, const float* src, uint16_t* dst);
void convert_f16_to_f32(int64_t n, const uint16_t* src, float* dst);
}  // namespace avx2
namespace avx512 {
void convert_bf16_to_f32(int64_t n, const uint16_t* src, float* dst);
void convert_f32_to_bf16(int64_t n, const float* src, uint16_t* dst);
void convert_f16_to_f32(int64_t n, const uint16_t* src, float* dst);
}  // namespace avx512
}  // namespace loom
