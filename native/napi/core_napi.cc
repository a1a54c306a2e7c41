// Bindings: CPU features, ISA switch, thread pool size, conversions.
#include <atomic>
#include <new>
#include <vector>
#include "loom/core.h"
#include "napi_util.h"

namespace loom::napi {
namespace {

Napi::Value CpuInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const CpuFeatures& f = cpu_features();
  Napi::Object o = Napi::Object::New(env);
  o.Set("brand", f.brand);
  Napi::Object feat = Napi::Object::New(env);
  feat.Set("avx2", f.avx2);
  feat.Set("fma", f.fma);
  feat.Set("f16c", f.f16c);
  feat.Set("avx512f", f.avx512f);
  feat.Set("avx512bw", f.avx512bw);
  feat.Set("avx512vl", f.avx512vl);
  feat.Set("avx512dq", f.avx512dq);
  feat.Set("avx512bf16", f.avx512bf16);
  feat.Set("avx512vnni", f.avx512vnni);
  o.Set("features", feat);
  Napi::Array isas = Napi::Array::New(env);
  uint32_t k = 0;
  for (Isa i : {Isa::Portable, Isa::Avx2, Isa::Avx512})
    if (isa_supported(i)) isas.Set(k++, isa_name(i));
  o.Set("supportedIsas", isas);
  o.Set("bestIsa", isa_name(isa_best()));
  o.Set("isa", isa_name(isa_active()));
  o.Set("threads", threads_get());
  return o;
}

Napi::Value GetIsa(const Napi::CallbackInfo& info) { return Napi::String::New(info.Env(), isa_name(isa_active())); }

Napi::Value SetIsa(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsString()) throw_type(env, "isa must be a string: portable | avx2 | avx512");
  std::string s = info[0].As<Napi::String>();
  Isa isa;
  if (!isa_parse(s.c_str(), &isa)) throw_type(env, "unknown isa '" + s + "': expected portable | avx2 | avx512");
  if (!isa_supported(isa)) throw_range(env, "isa '" + s + "' is not supported by this CPU");
  isa_set(isa);
  return env.Undefined();
}

Napi::Value GetThreads(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), threads_get()); }

Napi::Value SetThreads(const Napi::CallbackInfo& info) {
  int64_t n = int_arg(info[0], "threads");
  if (n < 1 || n > 1024) throw_range(info.Env(), "threads must be in [1, 1024]");
  threads_set(int(n));
  return info.Env().Undefined();
}

// poolCheck(throwTid) → Promise<number>: runs one pool region on the libuv pool, as model calls do,
// in which the share of thread `throwTid` (-1: none) throws std::bad_alloc. Resolves with the
// number of shares that ran; a throwing share rejects the promise (the process survives and the
// pool stays usable). A health check of the pool's error path, used by the tests.
Napi::Value PoolCheck(const Napi::CallbackInfo& info) {
  int64_t throw_tid = int_arg(info[0], "throwTid");
  auto ran = std::make_shared<std::atomic<int>>(0);
  return run_async(
      info.Env(),
      [ran, throw_tid]() {
        pool_run(threads_get(), [&](int tid, int) {
          ran->fetch_add(1);
          if (tid == throw_tid) throw std::bad_alloc();
        });
      },
      [ran](Napi::Env env) { return Napi::Number::New(env, ran->load()); });
}

// poolStress(regions, seed) → Promise<number>: on the libuv pool, as model calls do, runs `regions` short pool regions
// of every kind (parallel_tasks, parallel_for, a static pool_run, pool_run_dynamic over a shared counter) over 1-300
// items each, some items spinning a while so that shares overlap and arrive late; resolves with the number of items
// that did not run exactly once (0). Several calls at once put regions from several OS threads on the pool.
Napi::Value PoolStress(const Napi::CallbackInfo& info) {
  const int64_t regions = int_arg(info[0], "regions");
  const uint64_t seed = uint64_t(int_arg(info[1], "seed"));
  auto bad = std::make_shared<std::atomic<int64_t>>(0);
  return run_async(
      info.Env(),
      [bad, regions, seed]() {
        uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
        auto rnd = [&s]() {  // xorshift64
          s ^= s << 13;
          s ^= s >> 7;
          s ^= s << 17;
          return s;
        };
        std::vector<std::atomic<int>> hits(300);
        for (int64_t r = 0; r < regions; r++) {
          const int64_t n = 1 + int64_t(rnd() % 300), spin = rnd() % 4 == 0 ? int64_t(rnd() % 2000) : 0;
          for (int64_t i = 0; i < n; i++) hits[size_t(i)].store(0, std::memory_order_relaxed);
          auto hit = [&](int64_t i) {
            for (volatile int64_t k = 0; k < spin; k = k + 1) {
            }
            hits[size_t(i)].fetch_add(1, std::memory_order_relaxed);
          };
          switch (rnd() % 4) {
            case 0: parallel_tasks(n, hit); break;
            case 1: {
              const int64_t grain = 1 + int64_t(rnd() % 64);
              parallel_for(n, grain, [&](int64_t b, int64_t e) {
                for (int64_t i = b; i < e; i++) hit(i);
              });
              break;
            }
            case 2:  // static shares: tid takes items tid, tid + nth, ...
              pool_run(threads_get(), [&](int tid, int nt) {
                for (int64_t i = tid; i < n; i += nt) hit(i);
              });
              break;
            default: {
              std::atomic<int64_t> next{0};
              pool_run_dynamic(threads_get(), [&](int, int) {
                for (int64_t i = next.fetch_add(1); i < n; i = next.fetch_add(1)) hit(i);
              });
            }
          }
          for (int64_t i = 0; i < n; i++)
            if (hits[size_t(i)].load(std::memory_order_relaxed) != 1) bad->fetch_add(1);
        }
      },
      [bad](Napi::Env env) { return Napi::Number::New(env, double(bad->load())); });
}

// convertBf16ToF32(src: Uint16Array, dst: Float32Array)
Napi::Value ConvertBf16ToF32(const Napi::CallbackInfo& info) {
  auto src = array_arg<uint16_t>(info[0], "src");
  auto dst = array_arg<float>(info[1], "dst");
  check_len(info.Env(), dst.length, src.length, "dst");
  convert_bf16_to_f32(int64_t(src.length), src.data, dst.data);
  return info.Env().Undefined();
}

Napi::Value ConvertF32ToBf16(const Napi::CallbackInfo& info) {
  auto src = array_arg<float>(info[0], "src");
  auto dst = array_arg<uint16_t>(info[1], "dst");
  check_len(info.Env(), dst.length, src.length, "dst");
  convert_f32_to_bf16(int64_t(src.length), src.data, dst.data);
  return info.Env().Undefined();
}

Napi::Value ConvertF16ToF32(const Napi::CallbackInfo& info) {
  auto src = array_arg<uint16_t>(info[0], "src");
  auto dst = array_arg<float>(info[1], "dst");
  check_len(info.Env(), dst.length, src.length, "dst");
  convert_f16_to_f32(int64_t(src.length), src.data, dst.data);
  return info.Env().Undefined();
}

void Init(Napi::Env env, Napi::Object exports) {
  exports.Set("cpuInfo", Napi::Function::New(env, CpuInfo));
  exports.Set("getIsa", Napi::Function::New(env, GetIsa));
  exports.Set("setIsa", Napi::Function::New(env, SetIsa));
  exports.Set("getThreads", Napi::Function::New(env, GetThreads));
  exports.Set("setThreads", Napi::Function::New(env, SetThreads));
  exports.Set("poolCheck", Napi::Function::New(env, PoolCheck));
  exports.Set("poolStress", Napi::Function::New(env, PoolStress));
  exports.Set("convertBf16ToF32", Napi::Function::New(env, ConvertBf16ToF32));
  exports.Set("convertF32ToBf16", Napi::Function::New(env, ConvertF32ToBf16));
  exports.Set("convertF16ToF32", Napi::Function::New(env, ConvertF16ToF32));
}

}  // namespace
LOOM_NAPI_REGISTER(core, Init);
}  // namespace loom::napi
