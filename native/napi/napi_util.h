// Shared helpers for the N-API layer: module registration, argument conversion, async work.
//
// Style (as in sharp): JS values are converted into plain C++ structs on the main thread, the
// heavy part runs in a Napi::AsyncWorker on libuv's pool (and from there on loom's own thread
// pool), and the result is converted back on the main thread. Typed arrays handed to async work
// are kept alive with references until the work completes.
#pragma once
#include <napi.h>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace loom::napi {

using InitFn = void (*)(Napi::Env env, Napi::Object exports);

// Each binding file registers its exports with a static Registrar; addon.cc calls them all.
std::vector<std::pair<const char*, InitFn>>& registry();
struct Registrar {
  Registrar(const char* name, InitFn fn) { registry().emplace_back(name, fn); }
};
#define LOOM_NAPI_REGISTER(name, fn) static ::loom::napi::Registrar loom_napi_registrar_##name(#name, fn)

[[noreturn]] inline void throw_type(Napi::Env env, const std::string& msg) {
  throw Napi::TypeError::New(env, msg);
}
[[noreturn]] inline void throw_range(Napi::Env env, const std::string& msg) {
  throw Napi::RangeError::New(env, msg);
}

// A typed-array argument: pointer, element count, and a reference that keeps it alive.
template <typename T>
struct ArrayArg {
  T* data = nullptr;
  size_t length = 0;
  Napi::ObjectReference ref;
};

template <typename T>
napi_typedarray_type typed_array_kind();
template <> inline napi_typedarray_type typed_array_kind<float>() { return napi_float32_array; }
template <> inline napi_typedarray_type typed_array_kind<double>() { return napi_float64_array; }
template <> inline napi_typedarray_type typed_array_kind<int32_t>() { return napi_int32_array; }
template <> inline napi_typedarray_type typed_array_kind<uint32_t>() { return napi_uint32_array; }
template <> inline napi_typedarray_type typed_array_kind<uint16_t>() { return napi_uint16_array; }
template <> inline napi_typedarray_type typed_array_kind<uint8_t>() { return napi_uint8_array; }
template <> inline napi_typedarray_type typed_array_kind<int8_t>() { return napi_int8_array; }

inline const char* typed_array_name(napi_typedarray_type t) {
  switch (t) {
    case napi_float32_array: return "Float32Array";
    case napi_float64_array: return "Float64Array";
    case napi_int32_array: return "Int32Array";
    case napi_uint32_array: return "Uint32Array";
    case napi_uint16_array: return "Uint16Array";
    case napi_uint8_array: return "Uint8Array";
    case napi_int8_array: return "Int8Array";
    default: return "TypedArray";
  }
}

// Reads argument `v` as a typed array of T (a null/undefined value yields an empty ArrayArg when
// `optional`). Throws a TypeError naming the argument otherwise.
template <typename T>
ArrayArg<T> array_arg(const Napi::Value& v, const char* name, bool optional = false, bool keep = false) {
  ArrayArg<T> a;
  if (optional && (v.IsNull() || v.IsUndefined())) return a;
  if (!v.IsTypedArray()) throw_type(v.Env(), std::string(name) + " must be a " + typed_array_name(typed_array_kind<T>()));
  Napi::TypedArray ta = v.As<Napi::TypedArray>();
  if (ta.TypedArrayType() != typed_array_kind<T>())
    throw_type(v.Env(), std::string(name) + " must be a " + typed_array_name(typed_array_kind<T>()) + ", got " +
                            typed_array_name(ta.TypedArrayType()));
  a.data = reinterpret_cast<T*>(static_cast<uint8_t*>(ta.ArrayBuffer().Data()) + ta.ByteOffset());
  a.length = ta.ElementLength();
  if (keep) a.ref = Napi::Persistent(ta.As<Napi::Object>());
  return a;
}

inline int64_t int_arg(const Napi::Value& v, const char* name) {
  if (!v.IsNumber()) throw_type(v.Env(), std::string(name) + " must be a number");
  double d = v.As<Napi::Number>().DoubleValue();
  if (d != (double)(int64_t)d) throw_type(v.Env(), std::string(name) + " must be an integer");
  return (int64_t)d;
}

inline double num_arg(const Napi::Value& v, const char* name) {
  if (!v.IsNumber()) throw_type(v.Env(), std::string(name) + " must be a number");
  return v.As<Napi::Number>().DoubleValue();
}

inline bool bool_arg(const Napi::Value& v, const char* name) {
  if (!v.IsBoolean()) throw_type(v.Env(), std::string(name) + " must be a boolean");
  return v.As<Napi::Boolean>().Value();
}

inline void check_len(Napi::Env env, size_t have, size_t need, const char* name) {
  if (have < need)
    throw_range(env, std::string(name) + " has " + std::to_string(have) + " elements, needs " + std::to_string(need));
}

// The columns of a (rows, cols) array of `have` elements whose cols the caller does not know (cols >= 1; 0 for an
// empty array of no rows); anything else that is not a whole multiple of rows is refused.
inline int64_t cols_of(Napi::Env env, size_t have, size_t rows, const char* name) {
  if (!have && !rows) return 0;
  if (!rows || have < rows || have % rows)
    throw_range(env, std::string(name) + " must hold B*N*cols values (cols >= 1), has " + std::to_string(have));
  return int64_t(have / rows);
}

// Runs `work` on the libuv pool and resolves the returned Promise with `done(env)` (undefined
// if null). Exceptions thrown by `work` or `done` (std::bad_alloc, std::length_error, ...) reject
// it with their message; so do exceptions thrown inside loom's pool tasks (pool_run rethrows them
// on the worker's thread). Exceptions on the main thread become JS errors
// (NODE_ADDON_API_CPP_EXCEPTIONS_ALL, set in binding.gyp / CMakeLists.txt).
// `keep` holds JS objects (typed arrays) alive until completion.
class PromiseWorker : public Napi::AsyncWorker {
 public:
  PromiseWorker(Napi::Env env, std::function<void()> work, std::function<Napi::Value(Napi::Env)> done,
                std::vector<Napi::ObjectReference> keep)
      : Napi::AsyncWorker(env, "loom"), deferred_(Napi::Promise::Deferred::New(env)), work_(std::move(work)),
        done_(std::move(done)), keep_(std::move(keep)) {}
  Napi::Promise Promise() { return deferred_.Promise(); }
  void Execute() override {
    try {
      work_();
    } catch (const std::exception& e) {
      SetError(e.what());
    } catch (...) {
      SetError("unknown native error");
    }
  }
  void OnOK() override {
    Napi::Env env = Env();
    try {
      deferred_.Resolve(done_ ? done_(env) : env.Undefined());
    } catch (const Napi::Error& e) {
      deferred_.Reject(e.Value());
    } catch (const std::exception& e) {  // e.g. std::bad_alloc while building the result
      deferred_.Reject(Napi::Error::New(env, e.what()).Value());
    }
  }
  void OnError(const Napi::Error& e) override { deferred_.Reject(e.Value()); }

 private:
  Napi::Promise::Deferred deferred_;
  std::function<void()> work_;
  std::function<Napi::Value(Napi::Env)> done_;
  std::vector<Napi::ObjectReference> keep_;
};

inline Napi::Promise run_async(Napi::Env env, std::function<void()> work,
                               std::function<Napi::Value(Napi::Env)> done = nullptr,
                               std::vector<Napi::ObjectReference> keep = {}) {
  auto* w = new PromiseWorker(env, std::move(work), std::move(done), std::move(keep));
  Napi::Promise p = w->Promise();
  w->Queue();
  return p;
}

}  // namespace loom::napi
