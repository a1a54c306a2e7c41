// Minimal harness for the CUDA kernel tests: device buffers, random data, comparisons against a
// CPU reference in the same program, and central finite differences (in double) to validate the
// reference backward passes. A program exits 77 (ctest: skipped) when no GPU is usable.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "loom_cuda.h"

namespace lt {

inline int g_fail = 0, g_checks = 0;

inline void require_gpu(const char* prog) {
  loom::cuda::Info in = loom::cuda::info();
  if (!in.available) {
    std::printf("%s: SKIP (CUDA unavailable: %s)\n", prog, in.reason.c_str());
    std::exit(77);
  }
  std::printf("%s: device %s (cc %d.%d), runtime %d, driver %d, gemm backend %s%s%s\n", prog,
              in.devices[0].name.c_str(), in.devices[0].cc_major, in.devices[0].cc_minor, in.runtime_version,
              in.driver_version, in.gemm_backend.c_str(), in.cublas_reason.empty() ? "" : " — ",
              in.cublas_reason.c_str());
}

inline int finish(const char* prog) {
  std::printf("%s: %d checks, %d failed\n", prog, g_checks, g_fail);
  return g_fail ? 1 : 0;
}

inline std::mt19937& rng() {
  static std::mt19937 r(12345);
  return r;
}
inline std::vector<float> randn(size_t n, float s = 1.f) {
  std::normal_distribution<float> d(0.f, s);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng());
  return v;
}
inline int randint(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng()); }

inline uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}
inline float from_bf16(uint16_t h) {
  uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float round_bf16(float f) { return from_bf16(to_bf16(f)); }

// Device buffer of T, RAII.
template <typename T>
struct Dev {
  T* p = nullptr;
  size_t n = 0;
  Dev() = default;
  explicit Dev(size_t n_) : n(n_) { p = static_cast<T*>(loom::cuda::dev_alloc(n * sizeof(T))); }
  explicit Dev(const std::vector<T>& h) : Dev(h.size()) { loom::cuda::to_device(p, h.data(), n * sizeof(T)); }
  Dev(const Dev&) = delete;
  Dev& operator=(const Dev&) = delete;
  Dev(Dev&& o) noexcept : p(o.p), n(o.n) { o.p = nullptr; }
  ~Dev() { loom::cuda::dev_free(p); }
  std::vector<T> get() const {
    std::vector<T> h(n);
    loom::cuda::to_host(h.data(), p, n * sizeof(T));
    return h;
  }
  void set(const std::vector<T>& h) { loom::cuda::to_device(p, h.data(), h.size() * sizeof(T)); }
};

// Passes when |got - want| <= atol + rtol * |want| everywhere; prints the worst element otherwise.
inline bool close(const std::string& what, const std::vector<float>& got, const std::vector<float>& want,
                  double atol, double rtol) {
  g_checks++;
  if (got.size() != want.size()) {
    std::printf("FAIL %s: size %zu vs %zu\n", what.c_str(), got.size(), want.size());
    g_fail++;
    return false;
  }
  size_t worst = 0;
  double worst_ex = -1;
  for (size_t i = 0; i < got.size(); i++) {
    double d = std::fabs(double(got[i]) - double(want[i]));
    double ex = d - (atol + rtol * std::fabs(double(want[i])));
    if (!(std::isfinite(got[i]) || !std::isfinite(want[i]))) ex = 1e30;
    if (std::isnan(got[i]) != std::isnan(want[i])) ex = 1e30;
    if (ex > worst_ex) {
      worst_ex = ex;
      worst = i;
    }
  }
  if (worst_ex > 0) {
    std::printf("FAIL %s: [%zu] got %.7g want %.7g (atol %g rtol %g)\n", what.c_str(), worst, got[worst],
                want[worst], atol, rtol);
    g_fail++;
    return false;
  }
  return true;
}
inline void expect(bool ok, const std::string& what) {
  g_checks++;
  if (!ok) {
    std::printf("FAIL %s\n", what.c_str());
    g_fail++;
  }
}

// Checks an analytic gradient of a scalar function f(x) at a few coordinates against central
// differences (double precision).
inline void fd_check(const std::string& what, std::vector<double> x, const std::vector<double>& grad,
                     const std::function<double(const std::vector<double>&)>& f, int samples = 12,
                     double h = 1e-5, double tol = 1e-5) {
  g_checks++;
  for (int s = 0; s < samples && !x.empty(); s++) {
    size_t i = size_t(randint(0, int(x.size()) - 1));
    double x0 = x[i];
    x[i] = x0 + h;
    double fp = f(x);
    x[i] = x0 - h;
    double fm = f(x);
    x[i] = x0;
    double num = (fp - fm) / (2 * h);
    if (std::fabs(num - grad[i]) > tol * (1 + std::fabs(num))) {
      std::printf("FAIL %s (reference gradient vs finite differences) [%zu]: analytic %.9g numeric %.9g\n",
                  what.c_str(), i, grad[i], num);
      g_fail++;
      return;
    }
  }
}

inline std::vector<double> to_d(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }
inline std::vector<float> to_f(const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); }

}  // namespace lt
