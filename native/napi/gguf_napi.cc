// Bindings: dequantization of ggml block types (GGUF tensors) to float32, see native/formats/gguf_dequant.h.
//   ggmlDequantize(type, src: Uint8Array, dst: Float32Array): void         on the calling thread (+ pool)
//   ggmlDequantizeAsync(type, src, dst): Promise<void>                       on libuv's pool (+ loom's pool)
//   ggmlDequantTypes(): number[]                                             the type ids handled
// dst.length values are written; src must hold exactly dst.length / blockValues blocks.
#include <stdexcept>
#include <string>

#include "../formats/gguf_dequant.h"
#include "napi_util.h"

namespace loom::napi {
namespace {

struct DequantArgs {
  int type = 0;
  ArrayArg<uint8_t> src;
  ArrayArg<float> dst;
};

DequantArgs parse(const Napi::CallbackInfo& info, bool keep) {
  Napi::Env env = info.Env();
  DequantArgs a;
  a.type = int(int_arg(info[0], "type"));
  a.src = array_arg<uint8_t>(info[1], "src", false, keep);
  a.dst = array_arg<float>(info[2], "dst", false, keep);
  int64_t bv = 0, bb = 0;
  if (!gguf::dequant_layout(a.type, &bv, &bb)) throw_range(env, "ggml type " + std::to_string(a.type) + " has no dequantizer");
  const int64_t n = int64_t(a.dst.length);
  if (n % bv != 0)
    throw_range(env, "dst has " + std::to_string(n) + " values, not a multiple of the block size " + std::to_string(bv));
  const int64_t need = n / bv * bb;
  if (int64_t(a.src.length) != need)
    throw_range(env, "src has " + std::to_string(a.src.length) + " bytes, " + std::to_string(n) + " values need " + std::to_string(need));
  return a;
}

Napi::Value Dequantize(const Napi::CallbackInfo& info) {
  DequantArgs a = parse(info, false);
  gguf::dequantize(a.type, a.src.data, a.dst.data, int64_t(a.dst.length));
  return info.Env().Undefined();
}

Napi::Value DequantizeAsync(const Napi::CallbackInfo& info) {
  DequantArgs a = parse(info, true);
  const int type = a.type;
  const uint8_t* src = a.src.data;
  float* dst = a.dst.data;
  const int64_t n = int64_t(a.dst.length);
  std::vector<Napi::ObjectReference> keep;
  keep.push_back(std::move(a.src.ref));
  keep.push_back(std::move(a.dst.ref));
  return run_async(info.Env(), [=] { gguf::dequantize(type, src, dst, n); }, nullptr, std::move(keep));
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
