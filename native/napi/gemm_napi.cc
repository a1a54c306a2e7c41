// Bindings: linear layers (fp32 / bf16 / f16 weights, bf16 compute), sgemm, batched sgemm and
// pre-packed weights. Every call has a trailing `async` flag: true returns a Promise and runs on
// the libuv pool (the typed arrays are kept alive until it settles), false runs inline (tests,
// tiny sizes). All extents are checked here, so a bad shape is a RangeError, never a bad read.
#include <memory>
#include <string>
#include "loom/gemm.h"
#include "napi_util.h"

namespace loom::napi {
namespace {

// Elements a row-major (rows, cols) view with row stride ld touches.
int64_t extent(Napi::Env env, int64_t rows, int64_t cols, int64_t ld, const char* name) {
  if (rows < 0 || cols < 0) throw_range(env, std::string(name) + ": negative dimension");
  if (ld < cols) throw_range(env, std::string(name) + ": row stride " + std::to_string(ld) + " < " + std::to_string(cols) + " columns");
  return rows == 0 || cols == 0 ? 0 : (rows - 1) * ld + cols;
}

void check_extent(Napi::Env env, size_t have, int64_t need, const char* name) {
  if (int64_t(have) < need)
    throw_range(env, std::string(name) + " has " + std::to_string(have) + " elements, needs " + std::to_string(need));
}

Napi::Value finish(Napi::Env env, bool async, std::function<void()> work, std::vector<Napi::ObjectReference> keep) {
  if (!async) {
    try {
      work();
    } catch (const std::exception& e) {
      throw Napi::Error::New(env, e.what());
    }
    return env.Undefined();
  }
  return run_async(env, std::move(work), nullptr, std::move(keep));
}

std::string str_arg(const Napi::Value& v, const char* name) {
  if (!v.IsString()) throw_type(v.Env(), std::string(name) + " must be a string");
  return v.As<Napi::String>();
}

// gemmLinear(wtype, M, N, K, x, ldx, w, ldw, bias|null, y, ldy, beta, async)
//   wtype: 'f32' (w Float32Array) | 'bf16' | 'f16' | 'bf16_bf16' (w Uint16Array of raw bits)
Napi::Value Linear(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string wt = str_arg(info[0], "wtype");
  int64_t M = int_arg(info[1], "M"), N = int_arg(info[2], "N"), K = int_arg(info[3], "K");
  bool async = info.Length() > 12 && info[12].IsBoolean() && info[12].As<Napi::Boolean>().Value();
  auto x = array_arg<float>(info[4], "x", false, async);
  int64_t ldx = int_arg(info[5], "ldx");
  int64_t ldw = int_arg(info[7], "ldw");
  auto bias = array_arg<float>(info[8], "bias", true, async);
  auto y = array_arg<float>(info[9], "y", false, async);
  int64_t ldy = int_arg(info[10], "ldy");
  float beta = float(num_arg(info[11], "beta"));
  check_extent(env, x.length, extent(env, M, K, ldx, "x"), "x");
  check_extent(env, y.length, extent(env, M, N, ldy, "y"), "y");
  if (bias.data) check_extent(env, bias.length, N, "bias");
  int64_t wneed = extent(env, N, K, ldw, "w");
  std::vector<Napi::ObjectReference> keep;
  std::function<void()> work;
  const float* bp = bias.data;
  float* yp = y.data;
  const float* xp = x.data;
  if (wt == "f32") {
    auto w = array_arg<float>(info[6], "w", false, async);
    check_extent(env, w.length, wneed, "w");
    const float* wp = w.data;
    work = [=] { linear_f32(M, N, K, xp, ldx, wp, ldw, bp, yp, ldy, beta); };
    if (async) keep.push_back(std::move(w.ref));
  } else if (wt == "bf16" || wt == "f16" || wt == "bf16_bf16") {
    auto w = array_arg<uint16_t>(info[6], "w", false, async);
    check_extent(env, w.length, wneed, "w");
    const uint16_t* wp = w.data;
    if (wt == "bf16") work = [=] { linear_bf16(M, N, K, xp, ldx, wp, ldw, bp, yp, ldy, beta); };
    else if (wt == "f16") work = [=] { linear(DType::F16, M, N, K, xp, ldx, wp, ldw, bp, yp, ldy, beta); };
    else work = [=] { linear_bf16_bf16(M, N, K, xp, ldx, wp, ldw, bp, yp, ldy, beta); };
    if (async) keep.push_back(std::move(w.ref));
  } else {
    throw_type(env, "unknown wtype '" + wt + "': expected f32 | bf16 | f16 | bf16_bf16");
  }
  if (async) {
    keep.push_back(std::move(x.ref));
    keep.push_back(std::move(y.ref));
    if (bias.data) keep.push_back(std::move(bias.ref));
  }
  return finish(env, async, std::move(work), std::move(keep));
}

// gemmSgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, async, compute?)
//   compute: 'f32' (default) | 'bf16' (operands rounded to bf16, sgemm_bf16_compute)
Napi::Value Sgemm(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  bool ta = bool_arg(info[0], "ta"), tb = bool_arg(info[1], "tb");
  int64_t M = int_arg(info[2], "M"), N = int_arg(info[3], "N"), K = int_arg(info[4], "K");
  float alpha = float(num_arg(info[5], "alpha"));
  bool async = info.Length() > 13 && info[13].IsBoolean() && info[13].As<Napi::Boolean>().Value();
  auto A = array_arg<float>(info[6], "A", false, async);
  int64_t lda = int_arg(info[7], "lda");
  auto B = array_arg<float>(info[8], "B", false, async);
  int64_t ldb = int_arg(info[9], "ldb");
  float beta = float(num_arg(info[10], "beta"));
  auto C = array_arg<float>(info[11], "C", false, async);
  int64_t ldc = int_arg(info[12], "ldc");
  check_extent(env, A.length, ta ? extent(env, K, M, lda, "A") : extent(env, M, K, lda, "A"), "A");
  check_extent(env, B.length, tb ? extent(env, N, K, ldb, "B") : extent(env, K, N, ldb, "B"), "B");
  check_extent(env, C.length, extent(env, M, N, ldc, "C"), "C");
  const std::string compute = info.Length() > 14 && !info[14].IsUndefined() ? str_arg(info[14], "compute") : "f32";
  if (compute != "f32" && compute != "bf16") throw_type(env, "unknown compute '" + compute + "': expected f32 | bf16");
  const bool bf = compute == "bf16";
  const float *ap = A.data, *bp = B.data;
  float* cp = C.data;
  std::vector<Napi::ObjectReference> keep;
  if (async) {
    keep.push_back(std::move(A.ref));
    keep.push_back(std::move(B.ref));
    keep.push_back(std::move(C.ref));
  }
  return finish(
      env, async,
      [=] {
        if (bf) sgemm_bf16_compute(ta, tb, M, N, K, alpha, ap, lda, bp, ldb, beta, cp, ldc);
        else sgemm(ta, tb, M, N, K, alpha, ap, lda, bp, ldb, beta, cp, ldc);
      },
      std::move(keep));
}

// gemmSgemmBf16(M, N, K, alpha, A Float32Array, lda, B Uint16Array (bf16 bits, stored K x N), ldb, beta, C, ldc, async,
//   compute?) compute: 'f32' (default, sgemm_bf16) | 'bf16' (A rounded too, sgemm_bf16_bf16)
Napi::Value SgemmBf16(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int64_t M = int_arg(info[0], "M"), N = int_arg(info[1], "N"), K = int_arg(info[2], "K");
  float alpha = float(num_arg(info[3], "alpha"));
  bool async = info.Length() > 11 && info[11].IsBoolean() && info[11].As<Napi::Boolean>().Value();
  auto A = array_arg<float>(info[4], "A", false, async);
  int64_t lda = int_arg(info[5], "lda");
  auto B = array_arg<uint16_t>(info[6], "B", false, async);
  int64_t ldb = int_arg(info[7], "ldb");
  float beta = float(num_arg(info[8], "beta"));
  auto C = array_arg<float>(info[9], "C", false, async);
  int64_t ldc = int_arg(info[10], "ldc");
  check_extent(env, A.length, extent(env, M, K, lda, "A"), "A");
  check_extent(env, B.length, extent(env, K, N, ldb, "B"), "B");
  check_extent(env, C.length, extent(env, M, N, ldc, "C"), "C");
  const std::string compute = info.Length() > 12 && !info[12].IsUndefined() ? str_arg(info[12], "compute") : "f32";
  if (compute != "f32" && compute != "bf16") throw_type(env, "unknown compute '" + compute + "': expected f32 | bf16");
  const bool bf = compute == "bf16";
  const float* ap = A.data;
  const uint16_t* bp = B.data;
  float* cp = C.data;
  std::vector<Napi::ObjectReference> keep;
  if (async) {
    keep.push_back(std::move(A.ref));
    keep.push_back(std::move(B.ref));
    keep.push_back(std::move(C.ref));
  }
  return finish(
      env, async,
      [=] {
        if (bf) sgemm_bf16_bf16(M, N, K, alpha, ap, lda, bp, ldb, beta, cp, ldc);
        else sgemm_bf16(M, N, K, alpha, ap, lda, bp, ldb, beta, cp, ldc);
      },
      std::move(keep));
}

// gemmSgemmBatched(ta, tb, batch, M, N, K, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc, strideC, async)
Napi::Value SgemmBatched(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  bool ta = bool_arg(info[0], "ta"), tb = bool_arg(info[1], "tb");
  int64_t batch = int_arg(info[2], "batch");
  int64_t M = int_arg(info[3], "M"), N = int_arg(info[4], "N"), K = int_arg(info[5], "K");
  float alpha = float(num_arg(info[6], "alpha"));
  bool async = info.Length() > 17 && info[17].IsBoolean() && info[17].As<Napi::Boolean>().Value();
  auto A = array_arg<float>(info[7], "A", false, async);
  int64_t lda = int_arg(info[8], "lda"), sA = int_arg(info[9], "strideA");
  auto B = array_arg<float>(info[10], "B", false, async);
  int64_t ldb = int_arg(info[11], "ldb"), sB = int_arg(info[12], "strideB");
  float beta = float(num_arg(info[13], "beta"));
  auto C = array_arg<float>(info[14], "C", false, async);
  int64_t ldc = int_arg(info[15], "ldc"), sC = int_arg(info[16], "strideC");
  if (batch < 0) throw_range(env, "batch must be >= 0");
  if (sA < 0 || sB < 0 || sC < 0) throw_range(env, "batch strides must be >= 0");
  int64_t ea = ta ? extent(env, K, M, lda, "A") : extent(env, M, K, lda, "A");
  int64_t eb = tb ? extent(env, N, K, ldb, "B") : extent(env, K, N, ldb, "B");
  int64_t ec = extent(env, M, N, ldc, "C");
  if (batch > 0) {
    check_extent(env, A.length, ea ? (batch - 1) * sA + ea : 0, "A");
    check_extent(env, B.length, eb ? (batch - 1) * sB + eb : 0, "B");
    check_extent(env, C.length, ec ? (batch - 1) * sC + ec : 0, "C");
    if (ec && sC < ec && batch > 1) throw_range(env, "strideC is smaller than one C matrix: outputs would overlap");
  }
  const float *ap = A.data, *bp = B.data;
  float* cp = C.data;
  std::vector<Napi::ObjectReference> keep;
  if (async) {
    keep.push_back(std::move(A.ref));
    keep.push_back(std::move(B.ref));
    keep.push_back(std::move(C.ref));
  }
  return finish(
      env, async,
      [=] { sgemm_batched(ta, tb, batch, M, N, K, alpha, ap, lda, sA, bp, ldb, sB, beta, cp, ldc, sC); },
      std::move(keep));
}

// Packed weights live in an External holding a shared_ptr: async work holds its own copy, so an
// early free() or garbage collection never pulls the memory from under a running kernel.
using PackedPtr = std::shared_ptr<PackedWeight>;
struct PackedHolder {
  PackedPtr p;
};

PackedPtr packed_arg(const Napi::Value& v) {
  if (!v.IsExternal()) throw_type(v.Env(), "packed must be a packed weight handle (from gemmWeightPack)");
  auto* h = v.As<Napi::External<PackedHolder>>().Data();
  if (!h || !h->p) throw_type(v.Env(), "packed weight handle has been freed");
  return h->p;
}

DType wtype_arg(const Napi::Value& v) {
  std::string s = str_arg(v, "wtype");
  if (s == "f32") return DType::F32;
  if (s == "bf16") return DType::BF16;
  if (s == "f16") return DType::F16;
  throw_type(v.Env(), "unknown wtype '" + s + "': expected f32 | bf16 | f16");
}

// gemmWeightPack(wtype, N, K, w, ldw) -> handle
Napi::Value WeightPack(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  DType wt = wtype_arg(info[0]);
  int64_t N = int_arg(info[1], "N"), K = int_arg(info[2], "K");
  int64_t ldw = int_arg(info[4], "ldw");
  if (N <= 0 || K <= 0) throw_range(env, "N and K must be positive");
  int64_t need = extent(env, N, K, ldw, "w");
  const void* wp;
  if (wt == DType::F32) {
    auto w = array_arg<float>(info[3], "w");
    check_extent(env, w.length, need, "w");
    wp = w.data;
  } else {
    auto w = array_arg<uint16_t>(info[3], "w");
    check_extent(env, w.length, need, "w");
    wp = w.data;
  }
  PackedWeight* raw;
  try {
    raw = weight_pack(wt, N, K, wp, ldw);
  } catch (const std::exception& e) {
    throw Napi::Error::New(env, e.what());
  }
  auto* h = new PackedHolder{PackedPtr(raw, weight_free)};
  size_t bytes = weight_bytes(raw);
  auto ext = Napi::External<PackedHolder>::New(env, h, [](Napi::Env env, PackedHolder* h) {
    if (h->p) Napi::MemoryManagement::AdjustExternalMemory(env, -int64_t(weight_bytes(h->p.get())));
    delete h;
  });
  Napi::MemoryManagement::AdjustExternalMemory(env, int64_t(bytes));
  return ext;
}

// gemmWeightFree(handle): releases the memory now (running calls keep their copy alive).
Napi::Value WeightFree(const Napi::CallbackInfo& info) {
  if (!info[0].IsExternal()) throw_type(info.Env(), "packed must be a packed weight handle");
  auto* h = info[0].As<Napi::External<PackedHolder>>().Data();
  if (h && h->p) {
    Napi::MemoryManagement::AdjustExternalMemory(info.Env(), -int64_t(weight_bytes(h->p.get())));
    h->p.reset();
  }
  return info.Env().Undefined();
}

// gemmWeightInfo(handle) -> { rows, cols, bytes }
Napi::Value WeightInfo(const Napi::CallbackInfo& info) {
  PackedPtr p = packed_arg(info[0]);
  Napi::Object o = Napi::Object::New(info.Env());
  o.Set("rows", double(weight_rows(p.get())));
  o.Set("cols", double(weight_cols(p.get())));
  o.Set("bytes", double(weight_bytes(p.get())));
  return o;
}

// gemmLinearPacked(M, x, ldx, handle, bias|null, y, ldy, beta, async)
Napi::Value LinearPacked(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int64_t M = int_arg(info[0], "M");
  bool async = info.Length() > 8 && info[8].IsBoolean() && info[8].As<Napi::Boolean>().Value();
  auto x = array_arg<float>(info[1], "x", false, async);
  int64_t ldx = int_arg(info[2], "ldx");
  PackedPtr p = packed_arg(info[3]);
  auto bias = array_arg<float>(info[4], "bias", true, async);
  auto y = array_arg<float>(info[5], "y", false, async);
  int64_t ldy = int_arg(info[6], "ldy");
  float beta = float(num_arg(info[7], "beta"));
  int64_t N = weight_rows(p.get()), K = weight_cols(p.get());
  check_extent(env, x.length, extent(env, M, K, ldx, "x"), "x");
  check_extent(env, y.length, extent(env, M, N, ldy, "y"), "y");
  if (bias.data) check_extent(env, bias.length, N, "bias");
  const float *xp = x.data, *bp = bias.data;
  float* yp = y.data;
  std::vector<Napi::ObjectReference> keep;
  if (async) {
    keep.push_back(std::move(x.ref));
    keep.push_back(std::move(y.ref));
    if (bias.data) keep.push_back(std::move(bias.ref));
  }
  return finish(env, async, [=] { linear_packed(M, xp, ldx, p.get(), bp, yp, ldy, beta); }, std::move(keep));
}

void Init(Napi::Env env, Napi::Object exports) {
  exports.Set("gemmLinear", Napi::Function::New(env, Linear));
  exports.Set("gemmSgemm", Napi::Function::New(env, Sgemm));
  exports.Set("gemmSgemmBf16", Napi::Function::New(env, SgemmBf16));
  exports.Set("gemmSgemmBatched", Napi::Function::New(env, SgemmBatched));
  exports.Set("gemmWeightPack", Napi::Function::New(env, WeightPack));
  exports.Set("gemmWeightFree", Napi::Function::New(env, WeightFree));
  exports.Set("gemmWeightInfo", Napi::Function::New(env, WeightInfo));
  exports.Set("gemmLinearPacked", Napi::Function::New(env, LinearPacked));
}

}  // namespace
LOOM_NAPI_REGISTER(gemm, Init);
}  // namespace loom::napi
