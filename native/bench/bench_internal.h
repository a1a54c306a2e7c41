// Private to native/bench: peak-FLOP loops per ISA (defined in bench_avx2.cc / bench_avx512.cc).
#pragma once
#include <cstdint>

namespace loom::bench {
// Runs `iters` iterations of independent FMAs on one thread; returns the flops performed.
double peak_fma_avx2(int64_t iters);    // 12 ymm accumulators: 12·8·2 flops per iteration
double peak_fma_avx512(int64_t iters);  // 12 zmm accumulators
double peak_bf16_avx512(int64_t iters); // 12 zmm vdpbf16ps: 12·16·4 flops per iteration
}  // namespace loom::bench
