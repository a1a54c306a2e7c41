// Bindings for the quantized linear kernels (loom/quant.h), for tests and benches:
//   quantLinear(type 'Q8_0'|'Q4_K'|... (quant_type_names), w Uint8Array (N rows of blocks), N, K, x Float32Array (M, K), M)
//     -> Float32Array (M, N): x · Wᵀ on the active ISA (the int8 path for M <= quantSmallM, else the
//     dequantized-panel GEMM, or the int8 path 32 rows at a time where quantPrefillInt8 says so). Runs inline. packed (optional, default false): W re-laid by quant_pack first, as
//     weight_pack keeps it (Q8_0, Q5_0, Q4_K, Q6_K), so the packed kernels run. reps (optional, default 1): the
//     product runs reps times on the weights packed once (0: only the packing; bench/quant-kernels.mts times the
//     kernels and quant_pack so).
//   quantLinearParts(parts [[type, w Uint8Array, N, packed bool], ...], K, x Float32Array (M, K), M,
//     bias Float32Array (ΣN) | undefined, y Float32Array (M, ΣN) | undefined, beta)
//     -> y (M, ΣN) = beta·y + x·Wᵀ + bias, W the parts stacked by rows (a fused q/k/v or gate/up weight): x
//     quantized once, every part in one parallel region (linear_quant_acts_parts, as linear_packed runs them);
//     M <= quantSmallM. Runs inline; for tests.
//   quantPrefillInt8(type, packed bool) -> bool: whether more than quantSmallM rows of x take the int8 path too
//     on the active ISA (loom/quant.h quant_prefill_int8), so that tests hold them to the activation bound.
//   quantizeQ4K(x Float32Array, n a multiple of 256) -> Uint8Array (n/256 · 144 bytes): llama.cpp's Q4_K
//     quantizer (native/formats/gguf_quantize.h), bit for bit the TypeScript reference. Runs inline, as the
//     converter that calls it.
#include <algorithm>
#include <string>
#include <vector>
#include "loom/quant.h"
#include "../formats/gguf_quantize.h"
#include "napi_util.h"

namespace loom::napi {
namespace {

Napi::Value QuantLinear(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsString()) throw_type(env, "type must be a string");
  const std::string ts = info[0].As<Napi::String>();
  DType t;
  if (!quant_type_parse(ts, &t)) throw_type(env, "type: unsupported " + ts + " (" + quant_type_names() + ")");
  auto w = array_arg<uint8_t>(info[1], "w");
  const int64_t N = int_arg(info[2], "N"), K = int_arg(info[3], "K");
  auto x = array_arg<float>(info[4], "x");
  const int64_t M = int_arg(info[5], "M");
  if (N <= 0 || M <= 0 || K <= 0 || K % quant_block_values(t) != 0)
    throw_range(env, "quantLinear: M, N must be positive and K a positive multiple of the block size");
  if (w.length != size_t(N) * quant_row_bytes(t, K)) throw_range(env, "quantLinear: w has the wrong byte length");
  check_len(env, x.length, size_t(M * K), "x");
  const bool packed = info.Length() > 6 && info[6].ToBoolean();
  const int64_t reps = info.Length() > 7 && !info[7].IsUndefined() ? int_arg(info[7], "reps") : 1;
  if (reps < 0) throw_range(env, "quantLinear: reps must not be negative");
  Napi::Float32Array y = Napi::Float32Array::New(env, size_t(M * N));
  try {
    std::vector<uint8_t> wp(packed ? w.length : 0);
    if (packed) quant_pack(t, N, K, w.data, quant_row_bytes(t, K), wp.data());
    for (int64_t r = 0; r < reps; r++)
      linear_quant(t, M, N, K, x.data, K, packed ? wp.data() : w.data, nullptr, y.Data(), N, 0.0f, packed);
  } catch (const std::exception& e) {
    throw Napi::Error::New(env, e.what());
  }
  return y;
}

Napi::Value QuantLinearParts(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (!info[0].IsArray()) throw_type(env, "parts must be an array of [type, w, N, packed]");
  Napi::Array list = info[0].As<Napi::Array>();
  const int64_t K = int_arg(info[1], "K");
  auto x = array_arg<float>(info[2], "x");
  const int64_t M = int_arg(info[3], "M");
  if (M <= 0 || M > kQuantSmallM || K <= 0 || K % 256 != 0)
    throw_range(env, "quantLinearParts: 0 < M <= quantSmallM and K a positive multiple of 256");
  check_len(env, x.length, size_t(M * K), "x");
  std::vector<std::vector<uint8_t>> packed(list.Length());
  std::vector<QuantPart> parts;
  int64_t Nt = 0;
  for (uint32_t i = 0; i < list.Length(); i++) {
    Napi::Value v = list.Get(i);
    if (!v.IsArray() || v.As<Napi::Array>().Length() != 4) throw_type(env, "a part is [type, w, N, packed]");
    Napi::Array e = v.As<Napi::Array>();
    DType t;
    if (!e.Get(0u).IsString() || !quant_type_parse(e.Get(0u).As<Napi::String>(), &t)) throw_type(env, "part type");
    auto w = array_arg<uint8_t>(e.Get(1u), "w");
    const int64_t N = int_arg(e.Get(2u), "N");
    if (N < 0 || K % quant_block_values(t) != 0) throw_range(env, "quantLinearParts: bad part shape");
    if (w.length != size_t(N) * quant_row_bytes(t, K))
      throw_range(env, "quantLinearParts: w has the wrong byte length");
    const bool pk = e.Get(3u).ToBoolean();
    if (pk) {
      packed[i].resize(w.length);
      quant_pack(t, N, K, w.data, quant_row_bytes(t, K), packed[i].data());
    }
    parts.push_back({t, N, pk ? packed[i].data() : w.data, nullptr, pk});
    Nt += N;
  }
  const bool has_bias = info.Length() > 4 && !info[4].IsUndefined();
  std::vector<float> bias;
  if (has_bias) {
    auto b = array_arg<float>(info[4], "bias");
    check_len(env, b.length, size_t(Nt), "bias");
    bias.assign(b.data, b.data + b.length);
    int64_t n0 = 0;
    for (QuantPart& p : parts) { p.bias = bias.data() + n0; n0 += p.N; }
  }
  Napi::Float32Array y = Napi::Float32Array::New(env, size_t(M * Nt));
  float beta = 0.0f;
  if (info.Length() > 5 && !info[5].IsUndefined()) {
    auto y0 = array_arg<float>(info[5], "y");
    check_len(env, y0.length, size_t(M * Nt), "y");
    std::copy(y0.data, y0.data + y0.length, y.Data());
    beta = float(info[6].ToNumber().DoubleValue());
  }
  try {
    QuantActs a;
    quant_acts(M, K, x.data, K, &a);
    linear_quant_acts_parts(a, parts.data(), int(parts.size()), y.Data(), Nt, beta);
  } catch (const std::exception& e) {
    throw Napi::Error::New(env, e.what());
  }
  return y;
}

Napi::Value QuantPrefillInt8(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  DType t;
  if (!info[0].IsString() || !quant_type_parse(info[0].As<Napi::String>(), &t)) throw_type(env, "type");
  return Napi::Boolean::New(env, quant_prefill_int8(t, info[1].ToBoolean().Value()));
}

Napi::Value QuantizeQ4K(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  auto x = array_arg<float>(info[0], "x");
  if (x.length % 256 != 0) throw_range(env, "quantizeQ4K: the length must be a multiple of 256");
  Napi::Uint8Array out = Napi::Uint8Array::New(env, x.length / 256 * 144);
  gguf::quantize_q4_K(x.data, out.Data(), int64_t(x.length));
  return out;
}

void Init(Napi::Env env, Napi::Object exports) {
  exports.Set("quantizeQ4K", Napi::Function::New(env, QuantizeQ4K));
  exports.Set("quantLinear", Napi::Function::New(env, QuantLinear));
  exports.Set("quantLinearParts", Napi::Function::New(env, QuantLinearParts));
  exports.Set("quantSmallM", Napi::Number::New(env, double(kQuantSmallM)));
  exports.Set("quantPrefillInt8", Napi::Function::New(env, QuantPrefillInt8));
}

}  // namespace
LOOM_NAPI_REGISTER(quant, Init);
}  // namespace loom::napi
