// Loom native core: CPU feature detection, ISA dispatch, the thread pool, numeric helpers.
// Everything in native/ builds on this header.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>

namespace loom {

// ---------------------------------------------------------------------------------------------
// ISA dispatch
// ---------------------------------------------------------------------------------------------
// Kernels exist in up to three variants: portable C++ (any x86-64 or other CPU), AVX2+FMA and
// AVX-512 (F/BW/VL/DQ, with BF16 and VNNI used where present). Variants live in files named
// *_avx2.cc / *_avx512.cc, which are compiled with the matching -m flags; the portable file
// picks one at run time through isa_active().
enum class Isa : int { Portable = 0, Avx2 = 1, Avx512 = 2 };

struct CpuFeatures {
  bool avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512bf16 = false, avx512vnni = false;
  std::string brand;
};

const CpuFeatures& cpu_features();
Isa isa_best();                // best ISA this CPU supports
Isa isa_active();              // the ISA kernels use now: LOOM_ISA env at start-up, else isa_best()
bool isa_supported(Isa isa);   // whether this CPU can run `isa`
void isa_set(Isa isa);         // throws std::invalid_argument if unsupported
const char* isa_name(Isa isa); // "portable" | "avx2" | "avx512"
bool isa_parse(const char* s, Isa* out);

// ---------------------------------------------------------------------------------------------
// Thread pool
// ---------------------------------------------------------------------------------------------
// One persistent pool sized to the cores (LOOM_THREADS overrides). Workers spin briefly and then
// sleep, so back-to-back calls (one per layer during decode) cost a few microseconds.
// pool_run(nth, fn) runs fn(tid, nth) for tid in [0, nth) on nth threads (the caller is tid 0)
// and returns when all are done. Calls from different OS threads are serialized; a call made
// from inside a pool task runs inline on the calling thread (fn(0,1)), so kernels may nest.
// An exception thrown by any share is rethrown by pool_run on the calling thread after every
// share has finished (never on a worker thread, where it would terminate the process).
int threads_get();
void threads_set(int n);  // n >= 1; resizes the pool
void pool_run(int nth, const std::function<void(int tid, int nth)>& fn);
// pool_run for shares that take their work from a shared counter until it runs out, so that any one share may do
// all of it: a worker's share that has not started when the caller's returns is skipped instead of waited for (on
// cores shared with other processes the worker is often not running when a region starts).
void pool_run_dynamic(int nth, const std::function<void(int tid, int nth)>& fn);
// Splits [0, n) into contiguous chunks of at least `grain` items across the pool (one chunk per thread, each taken by
// whichever thread comes first: pool_run_dynamic).
void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t begin, int64_t end)>& fn);
// Runs fn(i) for i in [0, n), each index once, handed out one at a time to whichever thread is free
// (a shared counter): uneven tasks, or a thread the OS preempts, leave no share waiting on another.
// Order the tasks largest first. Kernels fn calls run inline (see pool_run).
void parallel_tasks(int64_t n, const std::function<void(int64_t i)>& fn);

// ---------------------------------------------------------------------------------------------
// Numeric helpers
// ---------------------------------------------------------------------------------------------
// Q*: ggml block-quantized rows (loom/quant.h), kept as the GGUF file stores them.
enum class DType : int {
  F32 = 0, F16 = 1, BF16 = 2, I32 = 3, I64 = 4, U8 = 5, Q8_0 = 6, Q4_K = 7,
  Q4_0 = 8, Q4_1 = 9, Q5_0 = 10, Q5_1 = 11, Q5_K = 12, Q6_K = 13, Q8_K = 14,
};
size_t dtype_size(DType t);  // bytes per element (the Q* block types are not elementwise: 0)
const char* dtype_name(DType t);

inline float bf16_to_f32(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// Round to nearest even, NaN preserved (same as PyTorch / safetensors writers).
inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);

// Bulk conversions (dispatched; n elements).
void convert_bf16_to_f32(int64_t n, const uint16_t* src, float* dst);
void convert_f32_to_bf16(int64_t n, const float* src, uint16_t* dst);
void convert_f16_to_f32(int64_t n, const uint16_t* src, float* dst);

// 64-byte aligned allocation (cache line / one AVX-512 register).
void* aligned_malloc(size_t bytes);
void aligned_free(void* p);

}  // namespace loom
