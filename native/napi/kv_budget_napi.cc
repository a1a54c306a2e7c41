// The process-wide KV-cache budget: one accountant per process (the addon is loaded once per process,
// so every worker thread's decoder engines see the same counters). Each KV pool reserves the bytes of
// the blocks it holds before it uses them and gives them back when it frees them (src/runtime/kv-budget.ts,
// src/runtime/kv-cache.ts); a reservation that would pass the capacity is refused, never granted in part.
//
//   kvBudgetCapacity(bytes?) -> bytes   set the capacity (when given), return it
//   kvBudgetReserve(bytes) -> boolean    all of `bytes`, or nothing when used + bytes > capacity
//   kvBudgetRelease(bytes)
//   kvBudgetStats() -> { capacity, used, peak }   peak: the highest `used` since the last kvBudgetResetPeak()
//   kvBudgetResetPeak()
#include <atomic>
#include <cstdint>

#include "napi_util.h"

namespace {

struct KvBudget {
  std::atomic<int64_t> capacity{0};
  std::atomic<int64_t> used{0};
  std::atomic<int64_t> peak{0};
};

KvBudget& kv_budget() {
  static KvBudget b;
  return b;
}

bool kv_budget_reserve(int64_t bytes) {
  KvBudget& b = kv_budget();
  int64_t cur = b.used.load();
  for (;;) {
    if (cur + bytes > b.capacity.load()) return false;
    if (b.used.compare_exchange_weak(cur, cur + bytes)) break;
  }
  int64_t now = cur + bytes;
  int64_t pk = b.peak.load();
  while (now > pk && !b.peak.compare_exchange_weak(pk, now)) {
  }
  return true;
}

void kv_budget_release(int64_t bytes) { kv_budget().used.fetch_sub(bytes); }

int64_t bytes_arg(const Napi::CallbackInfo& info, const char* fn) {
  if (info.Length() < 1 || !info[0].IsNumber())
    ::loom::napi::throw_type(info.Env(), std::string(fn) + ": bytes must be a number");
  double v = info[0].As<Napi::Number>().DoubleValue();
  if (!(v >= 0) || v > 9.0e15)
    ::loom::napi::throw_range(info.Env(), std::string(fn) + ": bytes must be a non-negative integer");
  return static_cast<int64_t>(v);
}

Napi::Value KvBudgetCapacity(const Napi::CallbackInfo& info) {
  if (info.Length() >= 1 && !info[0].IsUndefined()) kv_budget().capacity.store(bytes_arg(info, "kvBudgetCapacity"));
  return Napi::Number::New(info.Env(), static_cast<double>(kv_budget().capacity.load()));
}

Napi::Value KvBudgetReserve(const Napi::CallbackInfo& info) {
  return Napi::Boolean::New(info.Env(), kv_budget_reserve(bytes_arg(info, "kvBudgetReserve")));
}

Napi::Value KvBudgetRelease(const Napi::CallbackInfo& info) {
  kv_budget_release(bytes_arg(info, "kvBudgetRelease"));
  return info.Env().Undefined();
}

Napi::Value KvBudgetStats(const Napi::CallbackInfo& info) {
  Napi::Object o = Napi::Object::New(info.Env());
  o.Set("capacity", static_cast<double>(kv_budget().capacity.load()));
  o.Set("used", static_cast<double>(kv_budget().used.load()));
  o.Set("peak", static_cast<double>(kv_budget().peak.load()));
  return o;
}

Napi::Value KvBudgetResetPeak(const Napi::CallbackInfo& info) {
  kv_budget().peak.store(kv_budget().used.load());
  return info.Env().Undefined();
}

void Init(Napi::Env env, Napi::Object exports) {
  exports.Set("kvBudgetCapacity", Napi::Function::New(env, KvBudgetCapacity));
  exports.Set("kvBudgetReserve", Napi::Function::New(env, KvBudgetReserve));
  exports.Set("kvBudgetRelease", Napi::Function::New(env, KvBudgetRelease));
  exports.Set("kvBudgetStats", Napi::Function::New(env, KvBudgetStats));
  exports.Set("kvBudgetResetPeak", Napi::Function::New(env, KvBudgetResetPeak));
}

}  // namespace

LOOM_NAPI_REGISTER(kv_budget, Init);
