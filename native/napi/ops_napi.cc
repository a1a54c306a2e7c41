// Bindings for loom/ops.h. Every function takes plain typed arrays plus dimensions; lengths are
// checked here (a wrong size is a RangeError, never an out-of-bounds access). The typed wrappers
// in src/native/ops.ts check shapes first and give the friendlier messages.
// Heavy ops (attention, LoRA, cross-entropy) also have *Async variants returning a Promise; the
// work runs on libuv's pool (and from there on loom's thread pool), off the event loop.
#include <cmath>
#include <string>
#include <vector>
#include "loom/ops.h"
#include "napi_util.h"

namespace loom::napi {
namespace {

using std::string;

// C++ errors from the kernels (std::invalid_argument etc.) become JS errors, never aborts.
template <Napi::Value (*F)(const Napi::CallbackInfo&)>
Napi::Value Guard(const Napi::CallbackInfo& info) {
  try {
    return F(info);
  } catch (const Napi::Error&) {
    throw;
  } catch (const std::exception& e) {
    throw Napi::Error::New(info.Env(), e.what());
  }
}

// Optional array: null/undefined -> null pointer; else must hold `need` elements.
template <typename T>
ArrayArg<T> opt_arr(const Napi::Value& v, const char* name, size_t need, bool keep = false) {
  ArrayArg<T> a = array_arg<T>(v, name, true, keep);
  if (!(v.IsNull() || v.IsUndefined())) check_len(v.Env(), a.length, need, name);
  return a;
}
template <typename T>
ArrayArg<T> req_arr(const Napi::Value& v, const char* name, size_t need, bool keep = false) {
  ArrayArg<T> a = array_arg<T>(v, name, false, keep);
  check_len(v.Env(), a.length, need, name);
  return a;
}

int64_t dim_arg(const Napi::Value& v, const char* name, int64_t min = 0) {
  int64_t d = int_arg(v, name);
  if (d < min) throw_range(v.Env(), string(name) + " must be >= " + std::to_string(min));
  if (d > (int64_t(1) << 40)) throw_range(v.Env(), string(name) + " is too large");
  return d;
}

void check_args(const Napi::CallbackInfo& info, size_t n, const char* fn) {
  if (info.Length() < n)
    throw_type(info.Env(), string(fn) + ": expected " + std::to_string(n) + " arguments, got " +
                               std::to_string(info.Length()));
}

// ---- elementwise ----------------------------------------------------------------------------
// addFwd(a, b, y) / mulFwd(a, b, y): n = y.length
Napi::Value AddFwd(const Napi::CallbackInfo& info) {
  check_args(info, 3, "addFwd");
  auto y = array_arg<float>(info[2], "y");
  auto a = req_arr<float>(info[0], "a", y.length);
  auto b = req_arr<float>(info[1], "b", y.length);
  add_fwd(int64_t(y.length), a.data, b.data, y.data);
  return info.Env().Undefined();
}
Napi::Value MulFwd(const Napi::CallbackInfo& info) {
  check_args(info, 3, "mulFwd");
  auto y = array_arg<float>(info[2], "y");
  auto a = req_arr<float>(info[0], "a", y.length);
  auto b = req_arr<float>(info[1], "b", y.length);
  mul_fwd(int64_t(y.length), a.data, b.data, y.data);
  return info.Env().Undefined();
}
// mulBwd(a, b, dy, da|null, db|null): n = dy.length
Napi::Value MulBwd(const Napi::CallbackInfo& info) {
  check_args(info, 5, "mulBwd");
  auto dy = array_arg<float>(info[2], "dy");
  size_t n = dy.length;
  auto a = req_arr<float>(info[0], "a", n);
  auto b = req_arr<float>(info[1], "b", n);
  auto da = opt_arr<float>(info[3], "da", n);
  auto db = opt_arr<float>(info[4], "db", n);
  mul_bwd(int64_t(n), a.data, b.data, dy.data, da.data, db.data);
  return info.Env().Undefined();
}
// scaleFwd(x, s, y)
Napi::Value ScaleFwd(const Napi::CallbackInfo& info) {
  check_args(info, 3, "scaleFwd");
  auto y = array_arg<float>(info[2], "y");
  auto x = req_arr<float>(info[0], "x", y.length);
  scale_fwd(int64_t(y.length), x.data, float(num_arg(info[1], "s")), y.data);
  return info.Env().Undefined();
}
// axpy(a, x, y): y += a x
Napi::Value Axpy(const Napi::CallbackInfo& info) {
  check_args(info, 3, "axpy");
  auto y = array_arg<float>(info[2], "y");
  auto x = req_arr<float>(info[1], "x", y.length);
  axpy(int64_t(y.length), float(num_arg(info[0], "a")), x.data, y.data);
  return info.Env().Undefined();
}
// loraBRows(M, N, r, a, b, y): y (M, N) += a (M, r) · b (r, N), b a Float32Array or a Uint16Array of bf16
Napi::Value LoraBRows(const Napi::CallbackInfo& info) {
  check_args(info, 6, "loraBRows");
  const int64_t M = int_arg(info[0], "M"), N = int_arg(info[1], "N"), r = int_arg(info[2], "r");
  if (M < 0 || N < 0 || r < 0) throw_range(info.Env(), "loraBRows: M, N and r must be >= 0");
  auto a = req_arr<float>(info[3], "a", size_t(M * r));
  auto y = req_arr<float>(info[5], "y", size_t(M * N));
  if (info[4].IsTypedArray() && info[4].As<Napi::TypedArray>().TypedArrayType() == napi_uint16_array) {
    auto b = req_arr<uint16_t>(info[4], "b", size_t(r * N));
    lora_b_rows(M, N, r, a.data, b.data, y.data, N);
  } else {
    auto b = req_arr<float>(info[4], "b", size_t(r * N));
    lora_b_rows(M, N, r, a.data, b.data, y.data, N);
  }
  return info.Env().Undefined();
}
// addBias(R, D, x, b)
Napi::Value AddBias(const Napi::CallbackInfo& info) {
  check_args(info, 4, "addBias");
  int64_t R = dim_arg(info[0], "R"), D = dim_arg(info[1], "D");
  auto x = req_arr<float>(info[2], "x", size_t(R * D));
  auto b = req_arr<float>(info[3], "b", size_t(D));
  add_bias(R, D, x.data, b.data);
  return info.Env().Undefined();
}
// biasBwd(R, D, dy, db)
Napi::Value BiasBwd(const Napi::CallbackInfo& info) {
  check_args(info, 4, "biasBwd");
  int64_t R = dim_arg(info[0], "R"), D = dim_arg(info[1], "D");
  auto dy = req_arr<float>(info[2], "dy", size_t(R * D));
  auto db = req_arr<float>(info[3], "db", size_t(D));
  bias_bwd(R, D, dy.data, db.data);
  return info.Env().Undefined();
}

// ---- embedding ------------------------------------------------------------------------------
DType dtype_arg(const Napi::Value& v, const char* name) {
  if (!v.IsString()) throw_type(v.Env(), string(name) + " must be 'f32' | 'bf16' | 'f16'");
  string s = v.As<Napi::String>();
  if (s == "f32") return DType::F32;
  if (s == "bf16") return DType::BF16;
  if (s == "f16") return DType::F16;
  throw_type(v.Env(), string(name) + " must be 'f32' | 'bf16' | 'f16', got '" + s + "'");
}

// A weight / table argument of dtype `t`: Float32Array for f32, Uint16Array (raw bits) otherwise.
struct WeightArg {
  const void* data = nullptr;
  size_t length = 0;
  Napi::ObjectReference ref;
};
WeightArg weight_arg(const Napi::Value& v, DType t, const char* name, bool keep = false) {
  WeightArg w;
  if (t == DType::F32) {
    auto a = array_arg<float>(v, name, false, keep);
    w.data = a.data, w.length = a.length, w.ref = std::move(a.ref);
  } else {
    auto a = array_arg<uint16_t>(v, name, false, keep);
    w.data = a.data, w.length = a.length, w.ref = std::move(a.ref);
  }
  return w;
}

void check_ids(Napi::Env env, const int32_t* ids, int64_t T, int64_t V, const char* name) {
  for (int64_t t = 0; t < T; t++)
    if (ids[t] < 0 || ids[t] >= V)
      throw_range(env, string(name) + "[" + std::to_string(t) + "] = " + std::to_string(ids[t]) +
                           " is out of range [0, " + std::to_string(V) + ")");
}

// embeddingFwd(T, D, ids, table, dtype, out)
Napi::Value EmbeddingFwd(const Napi::CallbackInfo& info) {
  check_args(info, 6, "embeddingFwd");
  Napi::Env env = info.Env();
  int64_t T = dim_arg(info[0], "T"), D = dim_arg(info[1], "D", 1);
  auto ids = req_arr<int32_t>(info[2], "ids", size_t(T));
  DType t = dtype_arg(info[4], "dtype");
  WeightArg table = weight_arg(info[3], t, "table");
  int64_t V = int64_t(table.length) / D;
  check_ids(env, ids.data, T, V, "ids");
  auto out = req_arr<float>(info[5], "out", size_t(T * D));
  embedding_fwd(T, D, ids.data, t, table.data, out.data);
  return env.Undefined();
}
// embeddingBwd(T, D, ids, dout, dtable)
Napi::Value EmbeddingBwd(const Napi::CallbackInfo& info) {
  check_args(info, 5, "embeddingBwd");
  Napi::Env env = info.Env();
  int64_t T = dim_arg(info[0], "T"), D = dim_arg(info[1], "D", 1);
  auto ids = req_arr<int32_t>(info[2], "ids", size_t(T));
  auto dout = req_arr<float>(info[3], "dout", size_t(T * D));
  auto dtable = array_arg<float>(info[4], "dtable");
  check_ids(env, ids.data, T, int64_t(dtable.length) / D, "ids");
  embedding_bwd(T, D, ids.data, dout.data, dtable.data);
  return env.Undefined();
}

// ---- normalization --------------------------------------------------------------------------
// layernormFwd(R, D, x, w|null, b|null, eps, y, mean|null, rstd|null)
Napi::Value LayernormFwd(const Napi::CallbackInfo& info) {
  check_args(info, 9, "layernormFwd");
  int64_t R = dim_arg(info[0], "R"), D = dim_arg(info[1], "D", 1);
  auto x = req_arr<float>(info[2], "x", size_t(R * D));
  auto w = opt_arr<float>(info[3], "w", size_t(D));
  auto b = opt_arr<float>(info[4], "b", size_t(D));
  float eps = float(num_arg(info[5], "eps"));
  auto y = req_arr<float>(info[6], "y", size_t(R * D));
  auto mean = opt_arr<float>(info[7], "mean", size_t(R));
  auto rstd = opt_arr<float>(info[8], "rstd", size_t(R));
  layernorm_fwd(R, D, x.data, w.data, b.data, eps, y.data, mean.data, rstd.data);
  return info.Env().Undefined();
}
// layernormBwd(R, D, x, w|null, mean, rstd, dy, dx|null, dw|null, db|null)
Napi::Value LayernormBwd(const Napi::CallbackInfo& info) {
  check_args(info, 10, "layernormBwd");
  int64_t R = dim_arg(info[0], "R"), D = dim_arg(info[1], "D", 1);
  auto x = req_arr<float>(info[2], "x", size_t(R * D));
  auto w = opt_arr<float>(info[3], "w", size_t(D));
  auto mean = req_arr<float>(info[4], "mean", size_t(R));
  auto rstd = req_arr<float>(info[5], "rstd", size_t(R));
  auto dy = req_arr<float>(info[6], "dy", size_t(R * D));
  auto dx = opt_arr<float>(info[7], "dx", size_t(R * D));
  auto dw = opt_arr<float>(info[8], "dw", size_t(D));
  auto db = opt_arr<float>(info[9], "db", size_t(D));
  layernorm_bwd(R, D, x.data, w.data, mean.data, rstd.data, dy.data, dx.data, dw.data, db.data);
  return info.Env().Undefined();
}
// rmsnormFwd(R, D, x, w|null, eps, y, rstd|null)
Napi::Value RmsnormFwd(const Napi::CallbackInfo& info) {
  check_args(info, 7, "rmsnormFwd");
  int64_t R = dim_arg(info[0], "R"), D = dim_arg(info[1], "D", 1);
  auto x = req_arr<float>(info[2], "x", size_t(R * D));
  auto w = opt_arr<float>(info[3], "w", size_t(D));
  float eps = float(num_arg(info[4], "eps"));
  auto y = req_arr<float>(info[5], "y", size_t(R * D));
  auto rstd = opt_arr<float>(info[6], "rstd", size_t(R));
  rmsnorm_fwd(R, D, x.data, w.data, eps, y.data, rstd.data);
  return info.Env().Undefined();
}
// rmsnormBwd(R, D, x, w|null, rstd, dy, dx|null, dw|null)
Napi::Value RmsnormBwd(const Napi::CallbackInfo& info) {
  check_args(info, 8, "rmsnormBwd");
  int64_t R = dim_arg(info[0], "R"), D = dim_arg(info[1], "D", 1);
  auto x = req_arr<float>(info[2], "x", size_t(R * D));
  auto w = opt_arr<float>(info[3], "w", size_t(D));
  auto rstd = req_arr<float>(info[4], "rstd", size_t(R));
  auto dy = req_arr<float>(info[5], "dy", size_t(R * D));
  auto dx = opt_arr<float>(info[6], "dx", size_t(R * D));
  auto dw = opt_arr<float>(info[7], "dw", size_t(D));
  rmsnorm_bwd(R, D, x.data, w.data, rstd.data, dy.data, dx.data, dw.data);
  return info.Env().Undefined();
}

// ---- softmax --------------------------------------------------------------------------------
// softmaxFwd(R, D, x, y) / logSoftmaxFwd(R, D, x, y) / softmaxBwd(R, D, y, dy, dx)
Napi::Value SoftmaxFwd(const Napi::CallbackInfo& info) {
  check_args(info, 4, "softmaxFwd");
  int64_t R = dim_arg(info[0], "R"), D = dim_arg(info[1], "D", 1);
  auto x = req_arr<float>(info[2], "x", size_t(R * D));
  auto y = req_arr<float>(info[3], "y", size_t(R * D));
  softmax_fwd(R, D, x.data, y.data);
  return info.Env().Undefined();
}
Napi::Value LogSoftmaxFwd(const Napi::CallbackInfo& info) {
  check_args(info, 4, "logSoftmaxFwd");
  int64_t R = dim_arg(info[0], "R"), D = dim_arg(info[1], "D", 1);
  auto x = req_arr<float>(info[2], "x", size_t(R * D));
  auto y = req_arr<float>(info[3], "y", size_t(R * D));
  log_softmax_fwd(R, D, x.data, y.data);
  return info.Env().Undefined();
}
Napi::Value SoftmaxBwd(const Napi::CallbackInfo& info) {
  check_args(info, 5, "softmaxBwd");
  int64_t R = dim_arg(info[0], "R"), D = dim_arg(info[1], "D", 1);
  auto y = req_arr<float>(info[2], "y", size_t(R * D));
  auto dy = req_arr<float>(info[3], "dy", size_t(R * D));
  auto dx = req_arr<float>(info[4], "dx", size_t(R * D));
  softmax_bwd(R, D, y.data, dy.data, dx.data);
  return info.Env().Undefined();
}

// ---- activations ----------------------------------------------------------------------------
// geluFwd(x, y, approx) / geluBwd(x, dy, dx, approx)
Napi::Value GeluFwd(const Napi::CallbackInfo& info) {
  check_args(info, 3, "geluFwd");
  auto y = array_arg<float>(info[1], "y");
  auto x = req_arr<float>(info[0], "x", y.length);
  gelu_fwd(int64_t(y.length), x.data, y.data, bool_arg(info[2], "approx"));
  return info.Env().Undefined();
}
Napi::Value GeluBwd(const Napi::CallbackInfo& info) {
  check_args(info, 4, "geluBwd");
  auto dx = array_arg<float>(info[2], "dx");
  auto x = req_arr<float>(info[0], "x", dx.length);
  auto dy = req_arr<float>(info[1], "dy", dx.length);
  gelu_bwd(int64_t(dx.length), x.data, dy.data, dx.data, bool_arg(info[3], "approx"));
  return info.Env().Undefined();
}
// siluFwd(x, y) / siluBwd(x, dy, dx)
Napi::Value SiluFwd(const Napi::CallbackInfo& info) {
  check_args(info, 2, "siluFwd");
  auto y = array_arg<float>(info[1], "y");
  auto x = req_arr<float>(info[0], "x", y.length);
  silu_fwd(int64_t(y.length), x.data, y.data);
  return info.Env().Undefined();
}
Napi::Value SiluBwd(const Napi::CallbackInfo& info) {
  check_args(info, 3, "siluBwd");
  auto dx = array_arg<float>(info[2], "dx");
  auto x = req_arr<float>(info[0], "x", dx.length);
  auto dy = req_arr<float>(info[1], "dy", dx.length);
  silu_bwd(int64_t(dx.length), x.data, dy.data, dx.data);
  return info.Env().Undefined();
}
// swigluFwd(gate, up, y) / swigluBwd(gate, up, dy, dgate|null, dup|null)
Napi::Value SwigluFwd(const Napi::CallbackInfo& info) {
  check_args(info, 3, "swigluFwd");
  auto y = array_arg<float>(info[2], "y");
  auto gate = req_arr<float>(info[0], "gate", y.length);
  auto up = req_arr<float>(info[1], "up", y.length);
  swiglu_fwd(int64_t(y.length), gate.data, up.data, y.data);
  return info.Env().Undefined();
}
Napi::Value SwigluBwd(const Napi::CallbackInfo& info) {
  check_args(info, 5, "swigluBwd");
  auto dy = array_arg<float>(info[2], "dy");
  size_t n = dy.length;
  auto gate = req_arr<float>(info[0], "gate", n);
  auto up = req_arr<float>(info[1], "up", n);
  auto dg = opt_arr<float>(info[3], "dgate", n);
  auto du = opt_arr<float>(info[4], "dup", n);
  swiglu_bwd(int64_t(n), gate.data, up.data, dy.data, dg.data, du.data);
  return info.Env().Undefined();
}

// ---- RoPE -----------------------------------------------------------------------------------
// ropeInvFreq(Dh, theta, scaling|null, out) ; scaling = { type: 'default'|'llama3'|'linear',
//   factor, lowFreqFactor, highFreqFactor, originalMaxPositionEmbeddings }
Napi::Value RopeInvFreq(const Napi::CallbackInfo& info) {
  check_args(info, 4, "ropeInvFreq");
  Napi::Env env = info.Env();
  int64_t Dh = dim_arg(info[0], "Dh", 2);
  if (Dh % 2) throw_range(env, "Dh must be even");
  float theta = float(num_arg(info[1], "theta"));
  if (!(theta > 0)) throw_range(env, "theta must be > 0");
  RopeScaling sc;
  if (info[2].IsObject()) {
    Napi::Object o = info[2].As<Napi::Object>();
    string type = o.Has("type") && o.Get("type").IsString() ? o.Get("type").As<Napi::String>().Utf8Value() : "default";
    if (type == "default") sc.type = 0;
    else if (type == "llama3") sc.type = 1;
    else if (type == "linear") sc.type = 2;
    else throw_type(env, "rope scaling type must be 'default' | 'llama3' | 'linear', got '" + type + "'");
    auto num = [&](const char* k, double def) { return o.Has(k) && o.Get(k).IsNumber() ? o.Get(k).As<Napi::Number>().DoubleValue() : def; };
    sc.factor = float(num("factor", 1.0));
    sc.low_freq_factor = float(num("lowFreqFactor", 1.0));
    sc.high_freq_factor = float(num("highFreqFactor", 4.0));
    sc.original_max_position = int(num("originalMaxPositionEmbeddings", 8192));
    if (!(sc.factor > 0)) throw_range(env, "rope scaling factor must be > 0");
    if (sc.type == 1 && !(sc.high_freq_factor > sc.low_freq_factor))
      throw_range(env, "llama3 rope scaling needs highFreqFactor > lowFreqFactor");
  } else if (!(info[2].IsNull() || info[2].IsUndefined())) {
    throw_type(env, "scaling must be an object or null");
  }
  auto out = req_arr<float>(info[3], "out", size_t(Dh / 2));
  rope_inv_freq(Dh, theta, sc, out.data);
  return env.Undefined();
}
// ropeFwd(T, H, Dh, ld, pos, invFreq, x) / ropeBwd(...): x rotated in place
Napi::Value RopeApply(const Napi::CallbackInfo& info, bool bwd) {
  check_args(info, 7, bwd ? "ropeBwd" : "ropeFwd");
  Napi::Env env = info.Env();
  int64_t T = dim_arg(info[0], "T"), H = dim_arg(info[1], "H", 1), Dh = dim_arg(info[2], "Dh", 2);
  int64_t ld = dim_arg(info[3], "ld");
  if (Dh % 2) throw_range(env, "Dh must be even");
  if (ld == 0) ld = H * Dh;
  if (ld < H * Dh) throw_range(env, "ld must be >= H*Dh");
  auto pos = req_arr<int32_t>(info[4], "pos", size_t(T));
  auto inv = req_arr<float>(info[5], "invFreq", size_t(Dh / 2));
  auto x = req_arr<float>(info[6], "x", T > 0 ? size_t((T - 1) * ld + H * Dh) : 0);
  (bwd ? rope_bwd : rope_fwd)(T, H, Dh, ld, pos.data, inv.data, x.data);
  return env.Undefined();
}
Napi::Value RopeFwd(const Napi::CallbackInfo& info) { return RopeApply(info, false); }
Napi::Value RopeBwd(const Napi::CallbackInfo& info) { return RopeApply(info, true); }

// ---- attention ------------------------------------------------------------------------------
// params: { B, Tq, Tk, Hq, Hkv, Dh, ldq?, ldk?, ldv?, ldo?, scale?, causal?, qOffset?,
//           biasStrides?: [sb, sh, si] }
struct AttnArgs {
  AttnParams p;
  std::vector<Napi::ObjectReference> keep;
};

size_t rows_extent(int64_t B, int64_t T, int64_t ld, int64_t width) {
  return (B * T == 0) ? 0 : size_t((B * T - 1) * ld + width);
}

AttnParams attn_params(const Napi::Value& v) {
  Napi::Env env = v.Env();
  if (!v.IsObject()) throw_type(env, "attention params must be an object");
  Napi::Object o = v.As<Napi::Object>();
  auto get_int = [&](const char* k, int64_t def, int64_t min) {
    if (!o.Has(k) || o.Get(k).IsUndefined()) return def;
    return dim_arg(o.Get(k), k, min);
  };
  AttnParams p;
  p.B = get_int("B", 1, 1);
  p.Tq = get_int("Tq", 0, 0);
  p.Tk = get_int("Tk", 0, 0);
  p.Hq = get_int("Hq", 1, 1);
  p.Hkv = get_int("Hkv", p.Hq, 1);
  p.Dh = get_int("Dh", 0, 1);
  if (p.Hq % p.Hkv) throw_range(env, "Hq (" + std::to_string(p.Hq) + ") must be a multiple of Hkv (" + std::to_string(p.Hkv) + ")");
  p.ldq = get_int("ldq", 0, 0);
  p.ldk = get_int("ldk", 0, 0);
  p.ldv = get_int("ldv", 0, 0);
  p.ldo = get_int("ldo", 0, 0);
  if (p.ldq && p.ldq < p.Hq * p.Dh) throw_range(env, "ldq must be >= Hq*Dh");
  if (p.ldo && p.ldo < p.Hq * p.Dh) throw_range(env, "ldo must be >= Hq*Dh");
  if (p.ldk && p.ldk < p.Hkv * p.Dh) throw_range(env, "ldk must be >= Hkv*Dh");
  if (p.ldv && p.ldv < p.Hkv * p.Dh) throw_range(env, "ldv must be >= Hkv*Dh");
  if (o.Has("scale") && !o.Get("scale").IsUndefined()) p.scale = float(num_arg(o.Get("scale"), "scale"));
  if (o.Has("causal") && !o.Get("causal").IsUndefined()) p.causal = bool_arg(o.Get("causal"), "causal");
  if (o.Has("qOffset") && !o.Get("qOffset").IsUndefined()) p.q_offset = int_arg(o.Get("qOffset"), "qOffset");
  if (o.Has("biasStrides") && o.Get("biasStrides").IsArray()) {
    Napi::Array a = o.Get("biasStrides").As<Napi::Array>();
    if (a.Length() != 3) throw_type(env, "biasStrides must be [sb, sh, si]");
    p.bias_sb = dim_arg(a.Get(0u), "biasStrides[0]");
    p.bias_sh = dim_arg(a.Get(1u), "biasStrides[1]");
    p.bias_si = dim_arg(a.Get(2u), "biasStrides[2]");
  }
  return p;
}

size_t bias_extent(const AttnParams& p) {
  if (p.B * p.Hq * p.Tq * p.Tk == 0) return 0;
  return size_t((p.B - 1) * p.bias_sb + (p.Hq - 1) * p.bias_sh + (p.Tq - 1) * p.bias_si + p.Tk);
}

struct AttnFwdJob {
  AttnParams p;
  const float *q, *k, *v;
  float *out, *lse;
  std::vector<Napi::ObjectReference> keep;
};

// attentionFwd(params, q, k, v, out, lse|null, keyMask|null, bias|null)
AttnFwdJob attn_fwd_args(const Napi::CallbackInfo& info, bool keep) {
  check_args(info, 5, "attentionFwd");
  AttnFwdJob j;
  j.p = attn_params(info[0]);
  const AttnParams& p = j.p;
  int64_t ldq = p.ldq ? p.ldq : p.Hq * p.Dh, ldk = p.ldk ? p.ldk : p.Hkv * p.Dh;
  int64_t ldv = p.ldv ? p.ldv : p.Hkv * p.Dh, ldo = p.ldo ? p.ldo : p.Hq * p.Dh;
  auto q = req_arr<float>(info[1], "q", rows_extent(p.B, p.Tq, ldq, p.Hq * p.Dh), keep);
  auto k = req_arr<float>(info[2], "k", rows_extent(p.B, p.Tk, ldk, p.Hkv * p.Dh), keep);
  auto v = req_arr<float>(info[3], "v", rows_extent(p.B, p.Tk, ldv, p.Hkv * p.Dh), keep);
  auto out = req_arr<float>(info[4], "out", rows_extent(p.B, p.Tq, ldo, p.Hq * p.Dh), keep);
  auto lse = opt_arr<float>(info[5], "lse", size_t(p.B * p.Hq * p.Tq), keep);
  auto mask = opt_arr<uint8_t>(info[6], "keyMask", size_t(p.B * p.Tk), keep);
  auto bias = opt_arr<float>(info[7], "bias", bias_extent(p), keep);
  j.p.key_mask = mask.data;
  j.p.bias = bias.data;
  j.q = q.data, j.k = k.data, j.v = v.data, j.out = out.data, j.lse = lse.data;
  if (keep)
    for (auto* r : {&q.ref, &k.ref, &v.ref, &out.ref, &lse.ref, &bias.ref})
      if (!r->IsEmpty()) j.keep.push_back(std::move(*r));
  if (keep && !mask.ref.IsEmpty()) j.keep.push_back(std::move(mask.ref));
  return j;
}
Napi::Value AttentionFwd(const Napi::CallbackInfo& info) {
  AttnFwdJob j = attn_fwd_args(info, false);
  attention_fwd(j.p, j.q, j.k, j.v, j.out, j.lse);
  return info.Env().Undefined();
}
Napi::Value AttentionFwdAsync(const Napi::CallbackInfo& info) {
  auto j = std::make_shared<AttnFwdJob>(attn_fwd_args(info, true));
  std::vector<Napi::ObjectReference> keep = std::move(j->keep);
  return run_async(info.Env(), [j] { attention_fwd(j->p, j->q, j->k, j->v, j->out, j->lse); }, nullptr, std::move(keep));
}

struct AttnBwdJob {
  AttnParams p;
  const float *q, *k, *v, *out, *lse, *dout;
  float *dq, *dk, *dv, *dbias;
  std::vector<Napi::ObjectReference> keep;
};
// attentionBwd(params, q, k, v, out, lse, dout, dq, dk, dv, keyMask|null, bias|null, dbias|null)
AttnBwdJob attn_bwd_args(const Napi::CallbackInfo& info, bool keep) {
  check_args(info, 10, "attentionBwd");
  AttnBwdJob j;
  j.p = attn_params(info[0]);
  const AttnParams& p = j.p;
  int64_t ldq = p.ldq ? p.ldq : p.Hq * p.Dh, ldk = p.ldk ? p.ldk : p.Hkv * p.Dh;
  int64_t ldv = p.ldv ? p.ldv : p.Hkv * p.Dh, ldo = p.ldo ? p.ldo : p.Hq * p.Dh;
  size_t nq = rows_extent(p.B, p.Tq, ldq, p.Hq * p.Dh), nk = rows_extent(p.B, p.Tk, ldk, p.Hkv * p.Dh);
  size_t nv = rows_extent(p.B, p.Tk, ldv, p.Hkv * p.Dh), no = rows_extent(p.B, p.Tq, ldo, p.Hq * p.Dh);
  auto q = req_arr<float>(info[1], "q", nq, keep);
  auto k = req_arr<float>(info[2], "k", nk, keep);
  auto v = req_arr<float>(info[3], "v", nv, keep);
  auto out = req_arr<float>(info[4], "out", no, keep);
  auto lse = req_arr<float>(info[5], "lse", size_t(p.B * p.Hq * p.Tq), keep);
  auto dout = req_arr<float>(info[6], "dout", no, keep);
  auto dq = req_arr<float>(info[7], "dq", nq, keep);
  auto dk = req_arr<float>(info[8], "dk", nk, keep);
  auto dv = req_arr<float>(info[9], "dv", nv, keep);
  auto mask = opt_arr<uint8_t>(info[10], "keyMask", size_t(p.B * p.Tk), keep);
  auto bias = opt_arr<float>(info[11], "bias", bias_extent(p), keep);
  auto dbias = opt_arr<float>(info[12], "dbias", bias_extent(p), keep);
  if (dbias.data && !bias.data) throw_type(info.Env(), "dbias needs bias (it uses the same strides)");
  j.p.key_mask = mask.data;
  j.p.bias = bias.data;
  j.q = q.data, j.k = k.data, j.v = v.data, j.out = out.data, j.lse = lse.data, j.dout = dout.data;
  j.dq = dq.data, j.dk = dk.data, j.dv = dv.data, j.dbias = dbias.data;
  if (keep)
    for (auto* r : {&q.ref, &k.ref, &v.ref, &out.ref, &lse.ref, &dout.ref, &dq.ref, &dk.ref, &dv.ref, &bias.ref, &dbias.ref})
      if (!r->IsEmpty()) j.keep.push_back(std::move(*r));
  if (keep && !mask.ref.IsEmpty()) j.keep.push_back(std::move(mask.ref));
  return j;
}
Napi::Value AttentionBwd(const Napi::CallbackInfo& info) {
  AttnBwdJob j = attn_bwd_args(info, false);
  attention_bwd(j.p, j.q, j.k, j.v, j.out, j.lse, j.dout, j.dq, j.dk, j.dv, j.dbias);
  return info.Env().Undefined();
}
Napi::Value AttentionBwdAsync(const Napi::CallbackInfo& info) {
  auto j = std::make_shared<AttnBwdJob>(attn_bwd_args(info, true));
  std::vector<Napi::ObjectReference> keep = std::move(j->keep);
  return run_async(
      info.Env(), [j] { attention_bwd(j->p, j->q, j->k, j->v, j->out, j->lse, j->dout, j->dq, j->dk, j->dv, j->dbias); },
      nullptr, std::move(keep));
}

// ---- cross-entropy --------------------------------------------------------------------------
struct CeJob {
  int64_t T, V;
  const float* logits;
  const int32_t* labels;
  float *dlogits, *losses;
  float loss = 0;
  std::vector<Napi::ObjectReference> keep;
};
// crossEntropy(T, V, logits, labels, dlogits|null, losses|null) -> mean loss
CeJob ce_args(const Napi::CallbackInfo& info, bool keep) {
  check_args(info, 4, "crossEntropy");
  CeJob j;
  j.T = dim_arg(info[0], "T");
  j.V = dim_arg(info[1], "V", 1);
  auto logits = req_arr<float>(info[2], "logits", size_t(j.T * j.V), keep);
  auto labels = req_arr<int32_t>(info[3], "labels", size_t(j.T), keep);
  for (int64_t t = 0; t < j.T; t++)
    if (labels.data[t] >= j.V)
      throw_range(info.Env(), "labels[" + std::to_string(t) + "] = " + std::to_string(labels.data[t]) +
                                  " is out of range [0, " + std::to_string(j.V) + ") (negative labels are ignored)");
  auto dl = opt_arr<float>(info[4], "dlogits", size_t(j.T * j.V), keep);
  auto losses = opt_arr<float>(info[5], "losses", size_t(j.T), keep);
  j.logits = logits.data, j.labels = labels.data, j.dlogits = dl.data, j.losses = losses.data;
  if (keep)
    for (auto* r : {&logits.ref, &dl.ref, &losses.ref})
      if (!r->IsEmpty()) j.keep.push_back(std::move(*r));
  if (keep) j.keep.push_back(std::move(labels.ref));
  return j;
}
Napi::Value CrossEntropy(const Napi::CallbackInfo& info) {
  CeJob j = ce_args(info, false);
  return Napi::Number::New(info.Env(), cross_entropy_fwd_bwd(j.T, j.V, j.logits, j.labels, j.dlogits, j.losses));
}
Napi::Value CrossEntropyAsync(const Napi::CallbackInfo& info) {
  auto j = std::make_shared<CeJob>(ce_args(info, true));
  std::vector<Napi::ObjectReference> keep = std::move(j->keep);
  return run_async(
      info.Env(), [j] { j->loss = cross_entropy_fwd_bwd(j->T, j->V, j->logits, j->labels, j->dlogits, j->losses); },
      [j](Napi::Env env) { return Napi::Number::New(env, j->loss); }, std::move(keep));
}

// ---- optimizer ------------------------------------------------------------------------------
// adamwStep(p, g, m, v, lr, b1, b2, eps, wd, step[, gradScale])
Napi::Value AdamwStep(const Napi::CallbackInfo& info) {
  check_args(info, 10, "adamwStep");
  auto p = array_arg<float>(info[0], "p");
  size_t n = p.length;
  auto g = req_arr<float>(info[1], "g", n);
  auto m = req_arr<float>(info[2], "m", n);
  auto v = req_arr<float>(info[3], "v", n);
  int64_t step = int_arg(info[9], "step");
  if (step < 1) throw_range(info.Env(), "step must be >= 1");
  adamw_step(int64_t(n), p.data, g.data, m.data, v.data, num_arg(info[4], "lr"), num_arg(info[5], "beta1"),
             num_arg(info[6], "beta2"), num_arg(info[7], "eps"), num_arg(info[8], "weightDecay"), step,
             info.Length() > 10 ? float(num_arg(info[10], "gradScale")) : 1.0f);
  return info.Env().Undefined();
}
// l2Norm(g)
Napi::Value L2Norm(const Napi::CallbackInfo& info) {
  check_args(info, 1, "l2Norm");
  auto g = array_arg<float>(info[0], "g");
  return Napi::Number::New(info.Env(), l2_norm(int64_t(g.length), g.data));
}

// argmax(x) -> index of the first largest value of x (Float32Array), -1 when none is above -inf
Napi::Value Argmax(const Napi::CallbackInfo& info) {
  check_args(info, 1, "argmax");
  auto x = array_arg<float>(info[0], "x");
  return Napi::Number::New(info.Env(), double(argmax(int64_t(x.length), x.data)));
}

// ---- LoRA -----------------------------------------------------------------------------------
struct LoraJob {
  int64_t M, N, K, r;
  DType wtype;
  const float* x;
  const void* w;
  const float *bias, *A, *B, *xa_in, *dy;
  float s;
  float *xa, *y, *dx, *dA, *dB;
  std::vector<Napi::ObjectReference> keep;
};
template <typename T>
void keep_ref(std::vector<Napi::ObjectReference>& keep, ArrayArg<T>& a) {
  if (!a.ref.IsEmpty()) keep.push_back(std::move(a.ref));
}
// loraFwd(M, N, K, r, x, wtype, w, bias|null, A, B, s, xa, y)
LoraJob lora_fwd_args(const Napi::CallbackInfo& info, bool keep) {
  check_args(info, 13, "loraFwd");
  LoraJob j{};
  j.M = dim_arg(info[0], "M"), j.N = dim_arg(info[1], "N", 1), j.K = dim_arg(info[2], "K", 1), j.r = dim_arg(info[3], "r");
  auto x = req_arr<float>(info[4], "x", size_t(j.M * j.K), keep);
  j.wtype = dtype_arg(info[5], "wtype");
  WeightArg w = weight_arg(info[6], j.wtype, "w", keep);
  check_len(info.Env(), w.length, size_t(j.N * j.K), "w");
  auto bias = opt_arr<float>(info[7], "bias", size_t(j.N), keep);
  auto A = req_arr<float>(info[8], "A", size_t(j.r * j.K), keep);
  auto B = req_arr<float>(info[9], "B", size_t(j.N * j.r), keep);
  j.s = float(num_arg(info[10], "s"));
  auto xa = req_arr<float>(info[11], "xa", size_t(j.M * j.r), keep);
  auto y = req_arr<float>(info[12], "y", size_t(j.M * j.N), keep);
  j.x = x.data, j.w = w.data, j.bias = bias.data, j.A = A.data, j.B = B.data, j.xa = xa.data, j.y = y.data;
  if (keep) {
    keep_ref(j.keep, x), keep_ref(j.keep, bias), keep_ref(j.keep, A), keep_ref(j.keep, B), keep_ref(j.keep, xa),
        keep_ref(j.keep, y);
    if (!w.ref.IsEmpty()) j.keep.push_back(std::move(w.ref));
  }
  return j;
}
Napi::Value LoraFwd(const Napi::CallbackInfo& info) {
  LoraJob j = lora_fwd_args(info, false);
  lora_fwd(j.M, j.N, j.K, j.r, j.x, j.wtype, j.w, j.bias, j.A, j.B, j.s, j.xa, j.y);
  return info.Env().Undefined();
}
Napi::Value LoraFwdAsync(const Napi::CallbackInfo& info) {
  auto j = std::make_shared<LoraJob>(lora_fwd_args(info, true));
  std::vector<Napi::ObjectReference> keep = std::move(j->keep);
  return run_async(
      info.Env(), [j] { lora_fwd(j->M, j->N, j->K, j->r, j->x, j->wtype, j->w, j->bias, j->A, j->B, j->s, j->xa, j->y); },
      nullptr, std::move(keep));
}
// loraBwd(M, N, K, r, x, wtype, w, A, B, s, xa, dy, dx|null, dA|null, dB|null)
LoraJob lora_bwd_args(const Napi::CallbackInfo& info, bool keep) {
  check_args(info, 15, "loraBwd");
  LoraJob j{};
  j.M = dim_arg(info[0], "M"), j.N = dim_arg(info[1], "N", 1), j.K = dim_arg(info[2], "K", 1), j.r = dim_arg(info[3], "r");
  auto x = req_arr<float>(info[4], "x", size_t(j.M * j.K), keep);
  j.wtype = dtype_arg(info[5], "wtype");
  WeightArg w = weight_arg(info[6], j.wtype, "w", keep);
  check_len(info.Env(), w.length, size_t(j.N * j.K), "w");
  auto A = req_arr<float>(info[7], "A", size_t(j.r * j.K), keep);
  auto B = req_arr<float>(info[8], "B", size_t(j.N * j.r), keep);
  j.s = float(num_arg(info[9], "s"));
  auto xa = req_arr<float>(info[10], "xa", size_t(j.M * j.r), keep);
  auto dy = req_arr<float>(info[11], "dy", size_t(j.M * j.N), keep);
  auto dx = opt_arr<float>(info[12], "dx", size_t(j.M * j.K), keep);
  auto dA = opt_arr<float>(info[13], "dA", size_t(j.r * j.K), keep);
  auto dB = opt_arr<float>(info[14], "dB", size_t(j.N * j.r), keep);
  j.x = x.data, j.w = w.data, j.A = A.data, j.B = B.data, j.xa_in = xa.data, j.dy = dy.data;
  j.dx = dx.data, j.dA = dA.data, j.dB = dB.data;
  if (keep) {
    keep_ref(j.keep, x), keep_ref(j.keep, A), keep_ref(j.keep, B), keep_ref(j.keep, xa), keep_ref(j.keep, dy);
    keep_ref(j.keep, dx), keep_ref(j.keep, dA), keep_ref(j.keep, dB);
    if (!w.ref.IsEmpty()) j.keep.push_back(std::move(w.ref));
  }
  return j;
}
Napi::Value LoraBwd(const Napi::CallbackInfo& info) {
  LoraJob j = lora_bwd_args(info, false);
  lora_bwd(j.M, j.N, j.K, j.r, j.x, j.wtype, j.w, j.A, j.B, j.s, j.xa_in, j.dy, j.dx, j.dA, j.dB);
  return info.Env().Undefined();
}
Napi::Value LoraBwdAsync(const Napi::CallbackInfo& info) {
  auto j = std::make_shared<LoraJob>(lora_bwd_args(info, true));
  std::vector<Napi::ObjectReference> keep = std::move(j->keep);
  return run_async(
      info.Env(),
      [j] { lora_bwd(j->M, j->N, j->K, j->r, j->x, j->wtype, j->w, j->A, j->B, j->s, j->xa_in, j->dy, j->dx, j->dA, j->dB); },
      nullptr, std::move(keep));
}

void Init(Napi::Env env, Napi::Object exports) {
  Napi::Object o = Napi::Object::New(env);
  auto def = [&](const char* name, Napi::Value (*fn)(const Napi::CallbackInfo&)) {
    o.Set(name, Napi::Function::New(env, fn, name));
  };
  def("addFwd", Guard<AddFwd>);
  def("mulFwd", Guard<MulFwd>);
  def("mulBwd", Guard<MulBwd>);
  def("scaleFwd", Guard<ScaleFwd>);
  def("axpy", Guard<Axpy>);
  def("loraBRows", Guard<LoraBRows>);
  def("addBias", Guard<AddBias>);
  def("biasBwd", Guard<BiasBwd>);
  def("embeddingFwd", Guard<EmbeddingFwd>);
  def("embeddingBwd", Guard<EmbeddingBwd>);
  def("layernormFwd", Guard<LayernormFwd>);
  def("layernormBwd", Guard<LayernormBwd>);
  def("rmsnormFwd", Guard<RmsnormFwd>);
  def("rmsnormBwd", Guard<RmsnormBwd>);
  def("softmaxFwd", Guard<SoftmaxFwd>);
  def("softmaxBwd", Guard<SoftmaxBwd>);
  def("logSoftmaxFwd", Guard<LogSoftmaxFwd>);
  def("geluFwd", Guard<GeluFwd>);
  def("geluBwd", Guard<GeluBwd>);
  def("siluFwd", Guard<SiluFwd>);
  def("siluBwd", Guard<SiluBwd>);
  def("swigluFwd", Guard<SwigluFwd>);
  def("swigluBwd", Guard<SwigluBwd>);
  def("ropeInvFreq", Guard<RopeInvFreq>);
  def("ropeFwd", Guard<RopeFwd>);
  def("ropeBwd", Guard<RopeBwd>);
  def("attentionFwd", Guard<AttentionFwd>);
  def("attentionFwdAsync", Guard<AttentionFwdAsync>);
  def("attentionBwd", Guard<AttentionBwd>);
  def("attentionBwdAsync", Guard<AttentionBwdAsync>);
  def("crossEntropy", Guard<CrossEntropy>);
  def("crossEntropyAsync", Guard<CrossEntropyAsync>);
  def("adamwStep", Guard<AdamwStep>);
  def("l2Norm", Guard<L2Norm>);
  def("argmax", Guard<Argmax>);
  def("loraFwd", Guard<LoraFwd>);
  def("loraFwdAsync", Guard<LoraFwdAsync>);
  def("loraBwd", Guard<LoraBwd>);
  def("loraBwdAsync", Guard<LoraBwdAsync>);
  exports.Set("ops", o);
}

}  // namespace
LOOM_NAPI_REGISTER(ops, Init);
}  // namespace loom::napi
