// Bindings for bench/gemm.ts: peak-FLOP loops, a STREAM-style triad, and timing loops for our
// GEMM and OpenBLAS (loaded with dlopen at run time; nothing links against it). Timing runs in
// C++ so the figures carry no JavaScript call overhead. Synchronous: benchmarks only.
#include <dlfcn.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <ctime>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>
#include "bench_internal.h"
#include "loom/gemm.h"
#include "../napi/napi_util.h"

namespace loom::napi {
namespace {

using Clock = std::chrono::steady_clock;
double now_s() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }
// CPU time of the calling thread: with 1 thread on a busy machine, time lost to other processes
// is left out (a development aid; the reported figures use wall time).
double thread_cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// x += v for the pool's threads.
void add_to(std::atomic<double>& x, double v) {
  double cur = x.load();
  while (!x.compare_exchange_weak(cur, cur + v)) {
  }
}

// Restores the pool size on scope exit.
struct ThreadsScope {
  int prev;
  explicit ThreadsScope(int n) : prev(threads_get()) { threads_set(n); }
  ~ThreadsScope() { threads_set(prev); }
};

// benchPeak(kind: 'avx2' | 'avx512' | 'bf16', threads, seconds, wall = false) -> GFLOP/s over
// all threads: the best of 10 runs, each the sum of per-thread rates in thread CPU time; with
// wall, the median of 10 runs in wall-clock time over all threads (how fast the machine is for us
// right now: a shared host that takes turns on our cores, or runs its other guests on the same
// physical cores, shows here and not in CPU time).
Napi::Value Peak(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string kind = info[0].As<Napi::String>();
  int th = int(int_arg(info[1], "threads"));
  double secs = num_arg(info[2], "seconds");
  const bool wall = info.Length() > 3 && info[3].IsBoolean() && info[3].As<Napi::Boolean>().Value();
  const CpuFeatures& f = cpu_features();
  double (*fn)(int64_t) = nullptr;
  if (kind == "avx2" && f.avx2 && f.fma) fn = bench::peak_fma_avx2;
  else if (kind == "avx512" && f.avx512f) fn = bench::peak_fma_avx512;
  else if (kind == "bf16" && f.avx512bf16) fn = bench::peak_bf16_avx512;
#ifdef LOOM_EMULATE_AVX512
  if (kind != "avx2") fn = nullptr;  // the peak loops are real zmm asm: nothing to measure on an emulated build
#endif
  if (!fn) return env.Null();
  ThreadsScope ts(th);
  // calibrate: iterations for ~secs/10 on one thread; best of 10 short runs (a shared machine
  // preempts long ones)
  int64_t iters = 1 << 14;
  for (;;) {
    double t0 = now_s();
    fn(iters);
    double dt = now_s() - t0;
    if (dt > secs / 40) {
      iters = int64_t(double(iters) * secs / 10 / dt);
      break;
    }
    iters *= 4;
  }
  if (wall) {  // all threads' FMAs over the wall time of the run, median of 10
    double runs[10];
    for (double& r : runs) {
      std::atomic<double> flops{0};
      const double t0 = now_s();
      pool_run(th, [&](int, int) { add_to(flops, fn(iters)); });
      r = flops.load() / (now_s() - t0) / 1e9;
    }
    std::sort(runs, runs + 10);
    return Napi::Number::New(env, 0.5 * (runs[4] + runs[5]));
  }
  // Each thread's rate from its own CPU time, summed: the FMA loop touches no memory, so this is
  // what the cores do while running, unaffected by other processes taking turns on them.
  double best = 0;
  for (int rep = 0; rep < 10; rep++) {
    std::atomic<double> rate{0};
    pool_run(th, [&](int, int) {
      double c0 = thread_cpu_s();
      double fl = fn(iters);
      add_to(rate, fl / (thread_cpu_s() - c0) / 1e9);
    });
    best = std::max(best, rate.load());
  }
  return Napi::Number::New(env, best);
}

// benchTriad(threads, mib, reps) -> GB/s (a = b + s·c, 3 arrays of `mib` MiB, 3 transfers per
// element counted as STREAM does; best of reps)
Napi::Value Triad(const Napi::CallbackInfo& info) {
  int th = int(int_arg(info[0], "threads"));
  int64_t mib = int_arg(info[1], "mib");
  int reps = int(int_arg(info[2], "reps"));
  ThreadsScope ts(th);
  const int64_t n = mib * (1 << 20) / 4;
  float* a = static_cast<float*>(aligned_malloc(n * 4));
  float* b = static_cast<float*>(aligned_malloc(n * 4));
  float* c = static_cast<float*>(aligned_malloc(n * 4));
  parallel_for(n, 1 << 16, [&](int64_t i0, int64_t i1) {  // first touch on the threads that use it
    for (int64_t i = i0; i < i1; i++) a[i] = 0.0f, b[i] = 1.0f, c[i] = 2.0f;
  });
  double best = 0;
  const float s = 3.0f;
  for (int r = 0; r < reps; r++) {
    double t0 = now_s();
    parallel_for(n, 1 << 16, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; i++) a[i] = b[i] + s * c[i];
    });
    double dt = now_s() - t0;
    best = std::max(best, 3.0 * double(n) * 4 / dt / 1e9);
  }
  aligned_free(a);
  aligned_free(b);
  aligned_free(c);
  return Napi::Number::New(info.Env(), best);
}

// benchRead(threads, mib, reps) -> GB/s read: loads and a sum over one buffer of `mib` MiB (make it far
// larger than the L3), split across the threads; nothing is written, so this is the bandwidth a decode step
// that streams its weights once can use (a copy or triad also writes, and can read less than the bus
// allows). Best of reps.
Napi::Value ReadBandwidth(const Napi::CallbackInfo& info) {
  int th = int(int_arg(info[0], "threads"));
  int64_t mib = int_arg(info[1], "mib");
  int reps = int(int_arg(info[2], "reps"));
  ThreadsScope ts(th);
  const int64_t n = mib * (1 << 20) / 8;
  uint64_t* a = static_cast<uint64_t*>(aligned_malloc(size_t(n) * 8));
  parallel_for(n, 1 << 16, [&](int64_t i0, int64_t i1) {  // first touch on the threads that read it
    for (int64_t i = i0; i < i1; i++) a[i] = uint64_t(i);
  });
  double best = 0;
  std::atomic<uint64_t> sink{0};
  for (int r = 0; r < reps; r++) {
    double t0 = now_s();
    parallel_for(n, 1 << 16, [&](int64_t i0, int64_t i1) {
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;  // integer sums: the compiler vectorizes them (associative)
      int64_t i = i0;
      for (; i + 4 <= i1; i += 4) s0 += a[i], s1 += a[i + 1], s2 += a[i + 2], s3 += a[i + 3];
      for (; i < i1; i++) s0 += a[i];
      sink += s0 + s1 + s2 + s3;
    });
    double dt = now_s() - t0;
    best = std::max(best, double(n) * 8 / dt / 1e9);
  }
  aligned_free(a);
  return Napi::Number::New(info.Env(), best);
}

// ---- OpenBLAS, resolved at run time ----
using sgemm_fn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
struct OpenBlas {
  void* h = nullptr;
  sgemm_fn sgemm = nullptr;
  void (*set_threads)(int) = nullptr;
  char* (*get_config)() = nullptr;
  char* (*get_corename)() = nullptr;
  std::string path, error;
};
OpenBlas& openblas() {
  static OpenBlas ob = [] {
    OpenBlas o;
    // OpenBLAS 0.3.21 takes Zen 4/5 for Haswell (AVX2 kernels); tell it the AVX-512 truth.
    if (cpu_features().avx512f && !std::getenv("OPENBLAS_CORETYPE")) setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
    for (const char* p : {"libopenblas.so.0", "libopenblas.so", "libopenblasp.so.0"}) {
      o.h = dlopen(p, RTLD_NOW | RTLD_LOCAL);
      if (o.h) {
        o.path = p;
        break;
      }
    }
    if (!o.h) {
      const char* e = dlerror();
      o.error = e ? e : "libopenblas not found";
      return o;
    }
    o.sgemm = reinterpret_cast<sgemm_fn>(dlsym(o.h, "cblas_sgemm"));
    o.set_threads = reinterpret_cast<void (*)(int)>(dlsym(o.h, "openblas_set_num_threads"));
    o.get_config = reinterpret_cast<char* (*)()>(dlsym(o.h, "openblas_get_config"));
    o.get_corename = reinterpret_cast<char* (*)()>(dlsym(o.h, "openblas_get_corename"));
    if (!o.sgemm) o.error = "cblas_sgemm not found in " + o.path;
    return o;
  }();
  return ob;
}

Napi::Value OpenBlasInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  OpenBlas& o = openblas();
  Napi::Object r = Napi::Object::New(env);
  r.Set("available", o.sgemm != nullptr);
  if (!o.sgemm) {
    r.Set("error", o.error);
    return r;
  }
  r.Set("path", o.path);
  if (o.get_config) r.Set("config", std::string(o.get_config()));
  if (o.get_corename) r.Set("core", std::string(o.get_corename()));
  const char* ct = std::getenv("OPENBLAS_CORETYPE");
  r.Set("coretype", ct ? Napi::Value(Napi::String::New(env, ct)) : env.Null());
  return r;
}

// benchGemm(impl, M, N, K, threads, minSeconds, cpuClock?) -> { best, median, iters } seconds per call.
//   impl: 'f32' (linear_f32), 'f32_packed' (linear_packed on f32), 'bf16' (linear_bf16),
//         'bf16_packed', 'bf16c' (linear_bf16_bf16), 'openblas' (cblas_sgemm, x·Wᵀ)
// Inputs are random; packing happens before the clock starts.
Napi::Value Gemm(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string impl = info[0].As<Napi::String>();
  int64_t M = int_arg(info[1], "M"), N = int_arg(info[2], "N"), K = int_arg(info[3], "K");
  int th = int(int_arg(info[4], "threads"));
  double min_s = num_arg(info[5], "minSeconds");
  const bool cpu_clock = info.Length() > 6 && info[6].IsBoolean() && info[6].As<Napi::Boolean>().Value() && th == 1;
  auto clock = cpu_clock ? thread_cpu_s : now_s;
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> U(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(M * K)), y(static_cast<size_t>(M * N)), bias(static_cast<size_t>(N));
  for (auto& v : x) v = U(rng);
  for (auto& v : bias) v = U(rng);
  std::vector<float> wf;
  std::vector<uint16_t> wb;
  bool bf = impl.rfind("bf16", 0) == 0;
  if (bf) {
    wb.resize(size_t(N * K));
    for (auto& v : wb) v = f32_to_bf16(U(rng));
  } else {
    wf.resize(size_t(N * K));
    for (auto& v : wf) v = U(rng);
  }
  ThreadsScope ts(th);
  PackedWeight* pw = nullptr;
  std::function<void()> call;
  if (impl == "f32") {
    call = [&] { linear_f32(M, N, K, x.data(), K, wf.data(), K, nullptr, y.data(), N); };
  } else if (impl == "bf16") {
    call = [&] { linear_bf16(M, N, K, x.data(), K, wb.data(), K, nullptr, y.data(), N); };
  } else if (impl == "bf16c") {
    call = [&] { linear_bf16_bf16(M, N, K, x.data(), K, wb.data(), K, nullptr, y.data(), N); };
  } else if (impl == "f32_packed" || impl == "bf16_packed") {
    pw = bf ? weight_pack(DType::BF16, N, K, wb.data(), K) : weight_pack(DType::F32, N, K, wf.data(), K);
    call = [&] { linear_packed(M, x.data(), K, pw, nullptr, y.data(), N); };
  } else if (impl == "openblas") {
    OpenBlas& o = openblas();
    if (!o.sgemm) return env.Null();
    if (o.set_threads) o.set_threads(th);
    // CblasRowMajor = 101, CblasNoTrans = 111, CblasTrans = 112
    call = [&] { o.sgemm(101, 111, 112, int(M), int(N), int(K), 1.0f, x.data(), int(K), wf.data(), int(K), 0.0f, y.data(), int(N)); };
  } else {
    throw_type(env, "unknown impl " + impl);
  }
  call();  // warm-up (page faults, pool wake-up, OpenBLAS buffers)
  std::vector<double> times;
  double start = now_s();
  while (times.size() < 3 || (now_s() - start < min_s && times.size() < 100000)) {
    double t0 = clock();
    call();
    times.push_back(clock() - t0);
  }
  if (pw) weight_free(pw);
  std::sort(times.begin(), times.end());
  Napi::Object r = Napi::Object::New(env);
  r.Set("best", times.front());
  r.Set("median", times[times.size() / 2]);
  r.Set("iters", double(times.size()));
  return r;
}

void Init(Napi::Env env, Napi::Object exports) {
  exports.Set("benchPeak", Napi::Function::New(env, Peak));
  exports.Set("benchTriad", Napi::Function::New(env, Triad));
  exports.Set("benchRead", Napi::Function::New(env, ReadBandwidth));
  exports.Set("benchGemm", Napi::Function::New(env, Gemm));
  exports.Set("benchOpenBlasInfo", Napi::Function::New(env, OpenBlasInfo));
}

}  // namespace
LOOM_NAPI_REGISTER(bench, Init);
}  // namespace loom::napi
