// CPU feature detection (CPUID + XGETBV) and the run-time ISA switch.
#include <cstdlib>
#include <atomic>
#include <cstring>
#include <sys/mman.h>
#include "loom/core.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#define LOOM_X86 1
#endif

namespace loom {

namespace {

#ifdef LOOM_X86
uint64_t xgetbv0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (uint64_t(edx) << 32) | eax;
}
#endif

CpuFeatures detect() {
  CpuFeatures f;
#ifdef LOOM_X86
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  bool osxsave = (c >> 27) & 1;
  bool avx = (c >> 28) & 1;
  f.fma = (c >> 12) & 1;
  f.f16c = (c >> 29) & 1;
  uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  bool ymm_os = (xcr0 & 0x6) == 0x6;
  bool zmm_os = (xcr0 & 0xe6) == 0xe6;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = avx && ymm_os && ((b >> 5) & 1);
    f.avx512f = zmm_os && ((b >> 16) & 1);
    f.avx512dq = zmm_os && ((b >> 17) & 1);
    f.avx512bw = zmm_os && ((b >> 30) & 1);
    f.avx512vl = zmm_os && ((b >> 31) & 1);
    f.avx512vnni = zmm_os && ((c >> 11) & 1);
    unsigned a1, b1, c1, d1;
    if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) f.avx512bf16 = zmm_os && ((a1 >> 5) & 1);
  }
  if (!ymm_os) f.fma = f.f16c = false;
  char brand[49] = {0};
  unsigned maxext = __get_cpuid_max(0x80000000, nullptr);
  if (maxext >= 0x80000004) {
    for (unsigned i = 0; i < 3; i++) {
      __get_cpuid(0x80000002 + i, &a, &b, &c, &d);
      std::memcpy(brand + i * 16 + 0, &a, 4);
      std::memcpy(brand + i * 16 + 4, &b, 4);
      std::memcpy(brand + i * 16 + 8, &c, 4);
      std::memcpy(brand + i * 16 + 12, &d, 4);
    }
  }
  f.brand = brand;
  while (!f.brand.empty() && f.brand.back() == ' ') f.brand.pop_back();
#ifdef LOOM_EMULATE_AVX512
  // Test build (scripts/build-avx512-emu.mjs): the *_avx512.cc sources were compiled against SIMDe's
  // portable AVX-512, which runs on any AVX2 CPU, so report the AVX-512 features to let every AVX-512 path run.
  if (f.avx2 && f.fma && f.f16c && !f.avx512f) {
    f.avx512f = f.avx512dq = f.avx512bw = f.avx512vl = f.avx512vnni = f.avx512bf16 = true;
    f.brand += " (AVX-512 emulated)";
  }
#endif
#endif
  return f;
}

std::atomic<int> g_isa{-1};

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures f = detect();
  return f;
}

bool isa_supported(Isa isa) {
  const CpuFeatures& f = cpu_features();
  switch (isa) {
    case Isa::Portable: return true;
    case Isa::Avx2: return f.avx2 && f.fma && f.f16c;
    case Isa::Avx512:
      return f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx2 && f.fma && f.f16c;
  }
  return false;
}

Isa isa_best() {
  if (isa_supported(Isa::Avx512)) return Isa::Avx512;
  if (isa_supported(Isa::Avx2)) return Isa::Avx2;
  return Isa::Portable;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Portable: return "portable";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

bool isa_parse(const char* s, Isa* out) {
  if (!s) return false;
  if (!std::strcmp(s, "portable") || !std::strcmp(s, "generic")) { *out = Isa::Portable; return true; }
  if (!std::strcmp(s, "avx2")) { *out = Isa::Avx2; return true; }
  if (!std::strcmp(s, "avx512")) { *out = Isa::Avx512; return true; }
  return false;
}

Isa isa_active() {
  int v = g_isa.load(std::memory_order_relaxed);
  if (v >= 0) return Isa(v);
  Isa isa = isa_best();
  Isa want;
  // LOOM_ISA forces a path; a request above what the CPU has falls back to the best supported.
  if (isa_parse(std::getenv("LOOM_ISA"), &want) && isa_supported(want)) isa = want;
  g_isa.store(int(isa));
  return isa;
}

void isa_set(Isa isa) {
  if (!isa_supported(isa))
    throw std::invalid_argument(std::string("ISA '") + isa_name(isa) + "' is not supported by this CPU");
  g_isa.store(int(isa));
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: case DType::I32: return 4;
    case DType::F16: case DType::BF16: return 2;
    case DType::I64: return 8;
    case DType::U8: return 1;
    case DType::Q8_0: case DType::Q4_K: case DType::Q4_0: case DType::Q4_1: case DType::Q5_0: case DType::Q5_1:
    case DType::Q5_K: case DType::Q6_K: case DType::Q8_K: return 0;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    case DType::I32: return "i32";
    case DType::I64: return "i64";
    case DType::U8: return "u8";
    case DType::Q8_0: return "q8_0";
    case DType::Q4_K: return "q4_k";
    case DType::Q4_0: return "q4_0";
    case DType::Q4_1: return "q4_1";
    case DType::Q5_0: return "q5_0";
    case DType::Q5_1: return "q5_1";
    case DType::Q5_K: return "q5_k";
    case DType::Q6_K: return "q6_k";
    case DType::Q8_K: return "q8_k";
  }
  return "?";
}

void* aligned_malloc(size_t bytes) {
  void* p = nullptr;
  // Large buffers (packed weights, KV cache, activations of long prompts) are 2 MiB aligned and
  // asked to be backed by transparent huge pages: GEMM walks weight panels kilobytes apart, and
  // with 4 KiB pages nearly every panel is a TLB miss once the weights outgrow the TLB's reach
  // (measured: M=32 bf16 GEMM on 56 MB of weights ran at 82 % of its cache-resident speed).
  constexpr size_t kHuge = size_t(2) << 20;
  if (bytes >= 2 * kHuge) {
    const size_t n = (bytes + kHuge - 1) & ~(kHuge - 1);
    if (posix_memalign(&p, kHuge, n) != 0) throw std::bad_alloc();
#ifdef MADV_HUGEPAGE
    madvise(p, n, MADV_HUGEPAGE);  // advisory: ignored where THP is off
#endif
    return p;
  }
  if (posix_memalign(&p, 64, bytes ? (bytes + 63) & ~size_t(63) : 64) != 0) throw std::bad_alloc();
  return p;
}

void aligned_free(void* p) { std::free(p); }

}  // namespace loom
