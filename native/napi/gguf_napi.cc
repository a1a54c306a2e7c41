// Bindings: dequantization of ggml block types (GGUF tensors) to float32, see native/formats/gguf_dequant.h.
//   ggmlDequantize(type, src: Uint8Array, dst: Float32Array): void   on the calling thread (+ loom's pool);
//       dst.length values are written, src must hold exactly dst.length / blockValues blocks
//   ggmlDequantizeAsync(type, src: Uint8Array, n): Promise<Float32Array>   on libuv's pool (+ loom's pool);
//       the n-value result is allocated there too and handed to JS as an external ArrayBuffer, so neither
//       zero-filling nor first-touch page faults of a multi-GB output land on the event loop
//   ggmlDequantTypes(): number[]                                     the type ids handled
#include <algorithm>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "../formats/gguf_dequant.h"
#include "napi_util.h"

namespace loom::napi {
namespace {

// Finalizer of an async result: the garbage collector calls it on the JS thread, where returning a large
// block to the OS (unmapping GBs of touched pages) would stall the event loop for tens of ms, so large
// blocks are freed on a short-lived thread of their own.
void free_small(Napi::Env, void* p) { std::free(p); }
void free_large(Napi::Env, void* p) {
  try {
    std::thread([p] { std::free(p); }).detach();
  } catch (const std::exception&) {  // no thread to be had: free it here
    std::free(p);
  }
}

// Checks type / value count / source size.
void check(Napi::Env env, int type, int64_t n, size_t src_bytes) {
  int64_t bv = 0, bb = 0;
  if (!gguf::dequant_layout(type, &bv, &bb)) throw_range(env, "ggml type " + std::to_string(type) + " has no dequantizer");
  if (n < 0 || n % bv != 0)
    throw_range(env, std::to_string(n) + " values is not a multiple of the block size " + std::to_string(bv));
  const int64_t need = n / bv * bb;
  if (int64_t(src_bytes) != need)
    throw_range(env, "src has " + std::to_string(src_bytes) + " bytes, " + std::to_string(n) + " values need " + std::to_string(need));
}

Napi::Value Dequantize(const Napi::CallbackInfo& info) {
  const int type = int(int_arg(info[0], "type"));
  auto src = array_arg<uint8_t>(info[1], "src");
  auto dst = array_arg<float>(info[2], "dst");
  check(info.Env(), type, int64_t(dst.length), src.length);
  gguf::dequantize(type, src.data, dst.data, int64_t(dst.length));
  return info.Env().Undefined();
}

Napi::Value DequantizeAsync(const Napi::CallbackInfo& info) {
  const int type = int(int_arg(info[0], "type"));
  auto src = array_arg<uint8_t>(info[1], "src", false, true);
  const int64_t n = int_arg(info[2], "n");
  check(info.Env(), type, n, src.length);
  const uint8_t* sp = src.data;
  auto out = std::make_shared<float*>(nullptr);  // owned here until handed to the ArrayBuffer
  std::vector<Napi::ObjectReference> keep;
  keep.push_back(std::move(src.ref));
  auto work = [=] {
    float* p = static_cast<float*>(std::malloc(size_t(std::max<int64_t>(n, 1)) * sizeof(float)));
    if (!p) throw std::runtime_error("out of memory: " + std::to_string(n) + " float32 values");
    try {
      gguf::dequantize(type, sp, p, n);
    } catch (...) {
      std::free(p);
      throw;
    }
    *out = p;
  };
  auto done = [=](Napi::Env env) -> Napi::Value {
    float* p = *out;
    *out = nullptr;
    const size_t bytes = size_t(n) * sizeof(float);
    Napi::ArrayBuffer ab = Napi::ArrayBuffer::New(env, p, bytes, bytes >= (size_t(16) << 20) ? free_large : free_small);
    return Napi::Float32Array::New(env, size_t(n), ab, 0);
  };
  return run_async(info.Env(), work, done, std::move(keep));
}

Napi::Value DequantTypes(const Napi::CallbackInfo& info) {
  int count = 0;
  const int* ids = gguf::dequant_types(&count);
  Napi::Array out = Napi::Array::New(info.Env(), size_t(count));
  for (int i = 0; i < count; i++) out.Set(uint32_t(i), ids[i]);
  return out;
}

void Init(Napi::Env env, Napi::Object exports) {
  exports.Set("ggmlDequantize", Napi::Function::New(env, Dequantize));
  exports.Set("ggmlDequantizeAsync", Napi::Function::New(env, DequantizeAsync));
  exports.Set("ggmlDequantTypes", Napi::Function::New(env, DequantTypes));
}

}  // namespace
LOOM_NAPI_REGISTER(gguf, Init);
}  // namespace loom::napi
