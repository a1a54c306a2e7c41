// N-API binding of the CUDA core. Compiled only into the CMake build (`npm run build:cuda`);
// the default node-gyp addon has none of these functions and src/native/cuda.ts reports CUDA as
// unavailable there.
//
// cudaInfo() is synchronous and never throws. The op functions take host typed arrays, upload
// them, run on the GPU and download the result, as a Promise (AsyncWorker); they exist to check
// the GPU against the CPU from JS and for small jobs. Calls are serialized by one mutex (the CUDA
// context has one stream).
#include <memory>
#include <mutex>

#include "../napi/napi_util.h"
#include "loom_cuda.h"

namespace loom::napi {
namespace {

namespace lc = loom::cuda;
std::mutex g_mu;

// Device copy of a host array, freed on scope exit.
struct DBuf {
  void* p = nullptr;
  DBuf(const void* host, size_t bytes) {
    p = lc::dev_alloc(bytes);
    if (host && bytes) lc::to_device(p, host, bytes);
  }
  explicit DBuf(size_t bytes) : DBuf(nullptr, bytes) {}
  ~DBuf() { lc::dev_free(p); }
  template <typename T>
  T* as() const { return static_cast<T*>(p); }
};

void need_cuda(Napi::Env env) {
  lc::Info in = lc::info();
  if (!in.available) throw Napi::Error::New(env, "CUDA unavailable: " + in.reason);
}

Napi::Value CudaInfo(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  lc::Info in = lc::info();
  Napi::Object o = Napi::Object::New(env);
  o.Set("available", in.available);
  o.Set("reason", in.reason);
  o.Set("built", true);
  o.Set("runtimeVersion", in.runtime_version);
  o.Set("driverVersion", in.driver_version);
  Napi::Array devs = Napi::Array::New(env);
  for (size_t i = 0; i < in.devices.size(); i++) {
    const lc::DeviceInfo& d = in.devices[i];
    Napi::Object x = Napi::Object::New(env);
    x.Set("index", d.index);
    x.Set("name", d.name);
    x.Set("computeCapability", std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor));
    x.Set("totalMemory", double(d.total_mem));
    x.Set("smCount", d.sm_count);
    devs.Set(uint32_t(i), x);
  }
  o.Set("devices", devs);
  o.Set("cublas", in.cublas);
  o.Set("cublasReason", in.cublas_reason);
  o.Set("gemmBackend", in.gemm_backend);
  return o;
}

Napi::Value CudaSetGemmBackend(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  need_cuda(env);
  if (!info[0].IsString()) throw_type(env, "backend must be a string: cublaslt | cublas | kernel");
  std::string s = info[0].As<Napi::String>();
  lc::GemmBackend b;
  if (s == "cublaslt") b = lc::GemmBackend::Lt;
  else if (s == "cublas") b = lc::GemmBackend::Cublas;
  else if (s == "kernel") b = lc::GemmBackend::Kernel;
  else throw_range(env, "unknown GEMM backend: " + s);
  std::lock_guard<std::mutex> lk(g_mu);
  try {
    lc::gemm_backend_set(b);
    if (info.Length() > 1 && info[1].IsBoolean()) lc::tf32_set(info[1].As<Napi::Boolean>().Value());
  } catch (const std::exception& e) {
    throw Napi::Error::New(env, e.what());
  }
  return env.Undefined();
}

// cudaLinear(x Float32Array (M*K), w Float32Array | Uint16Array(bf16) (N*K), bias Float32Array|null, M, N, K)
//   → Promise<Float32Array (M*N)>
Napi::Value CudaLinear(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  need_cuda(env);
  auto x = array_arg<float>(info[0], "x", false, true);
  bool bf16 = info[1].IsTypedArray() && info[1].As<Napi::TypedArray>().TypedArrayType() == napi_uint16_array;
  ArrayArg<float> wf;
  ArrayArg<uint16_t> wh;
  if (bf16) wh = array_arg<uint16_t>(info[1], "w", false, true);
  else wf = array_arg<float>(info[1], "w", false, true);
  auto bias = array_arg<float>(info[2], "bias", true, true);
  int64_t M = int_arg(info[3], "M"), N = int_arg(info[4], "N"), K = int_arg(info[5], "K");
  if (M < 0 || N < 0 || K < 0) throw_range(env, "M, N, K must be >= 0");
  check_len(env, x.length, size_t(M * K), "x");
  check_len(env, bf16 ? wh.length : wf.length, size_t(N * K), "w");
  if (bias.data) check_len(env, bias.length, size_t(N), "bias");
  Napi::Float32Array y = Napi::Float32Array::New(env, size_t(M * N));
  float* yp = y.Data();
  auto yref = std::make_shared<Napi::ObjectReference>(Napi::Persistent(y.As<Napi::Object>()));
  const float* xp = x.data;
  const void* wp = bf16 ? (const void*)wh.data : (const void*)wf.data;
  const float* bp = bias.data;
  std::vector<Napi::ObjectReference> keep;
  keep.push_back(std::move(x.ref));
  keep.push_back(bf16 ? std::move(wh.ref) : std::move(wf.ref));
  if (bias.data) keep.push_back(std::move(bias.ref));
  return run_async(
      env,
      [=]() {
        std::lock_guard<std::mutex> lk(g_mu);
        DBuf dx(xp, size_t(M * K) * 4), dw(wp, size_t(N * K) * (bf16 ? 2 : 4)), dy(size_t(M * N) * 4);
        std::unique_ptr<DBuf> db(bp ? new DBuf(bp, size_t(N) * 4) : nullptr);
        lc::linear(bf16 ? lc::W_BF16 : lc::W_F32, M, N, K, dx.as<float>(), K, dw.p, K, db ? db->as<float>() : nullptr,
                   dy.as<float>(), N, 0.f);
        lc::to_host(yp, dy.p, size_t(M * N) * 4);
      },
      [yref](Napi::Env) { return yref->Value(); }, std::move(keep));
}

// cudaRmsnorm(x (R*D), w (D) | null, R, D, eps) → Promise<Float32Array>
// cudaLayernorm(x, w | null, b | null, R, D, eps) → Promise<Float32Array>
Napi::Value Norm(const Napi::CallbackInfo& info, bool rms) {
  Napi::Env env = info.Env();
  need_cuda(env);
  int a = 0;
  auto x = array_arg<float>(info[a++], "x", false, true);
  auto w = array_arg<float>(info[a++], "w", true, true);
  ArrayArg<float> b;
  if (!rms) b = array_arg<float>(info[a++], "b", true, true);
  int64_t R = int_arg(info[a], "R"), D = int_arg(info[a + 1], "D");
  float eps = float(num_arg(info[a + 2], "eps"));
  if (R < 0 || D < 1) throw_range(env, "R must be >= 0 and D >= 1");
  check_len(env, x.length, size_t(R * D), "x");
  if (w.data) check_len(env, w.length, size_t(D), "w");
  if (b.data) check_len(env, b.length, size_t(D), "b");
  Napi::Float32Array y = Napi::Float32Array::New(env, size_t(R * D));
  float* yp = y.Data();
  auto yref = std::make_shared<Napi::ObjectReference>(Napi::Persistent(y.As<Napi::Object>()));
  const float *xp = x.data, *wp = w.data, *bp = b.data;
  std::vector<Napi::ObjectReference> keep;
  keep.push_back(std::move(x.ref));
  if (w.data) keep.push_back(std::move(w.ref));
  if (b.data) keep.push_back(std::move(b.ref));
  return run_async(
      env,
      [=]() {
        std::lock_guard<std::mutex> lk(g_mu);
        DBuf dx(xp, size_t(R * D) * 4), dy(size_t(R * D) * 4), dw(wp, wp ? size_t(D) * 4 : 4),
            db(bp, bp ? size_t(D) * 4 : 4);
        if (rms) lc::rmsnorm_fwd(R, D, dx.as<float>(), wp ? dw.as<float>() : nullptr, eps, dy.as<float>(), nullptr);
        else
          lc::layernorm_fwd(R, D, dx.as<float>(), wp ? dw.as<float>() : nullptr, bp ? db.as<float>() : nullptr, eps,
                            dy.as<float>(), nullptr, nullptr);
        lc::to_host(yp, dy.p, size_t(R * D) * 4);
      },
      [yref](Napi::Env) { return yref->Value(); }, std::move(keep));
}
Napi::Value CudaRmsnorm(const Napi::CallbackInfo& info) { return Norm(info, true); }
Napi::Value CudaLayernorm(const Napi::CallbackInfo& info) { return Norm(info, false); }

// cudaSoftmax(x (R*D), R, D) → Promise<Float32Array>
Napi::Value CudaSoftmax(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  need_cuda(env);
  auto x = array_arg<float>(info[0], "x", false, true);
  int64_t R = int_arg(info[1], "R"), D = int_arg(info[2], "D");
  if (R < 0 || D < 1) throw_range(env, "R must be >= 0 and D >= 1");
  check_len(env, x.length, size_t(R * D), "x");
  Napi::Float32Array y = Napi::Float32Array::New(env, size_t(R * D));
  float* yp = y.Data();
  auto yref = std::make_shared<Napi::ObjectReference>(Napi::Persistent(y.As<Napi::Object>()));
  const float* xp = x.data;
  std::vector<Napi::ObjectReference> keep;
  keep.push_back(std::move(x.ref));
  return run_async(
      env,
      [=]() {
        std::lock_guard<std::mutex> lk(g_mu);
        DBuf dx(xp, size_t(R * D) * 4), dy(size_t(R * D) * 4);
        lc::softmax_fwd(R, D, dx.as<float>(), dy.as<float>());
        lc::to_host(yp, dy.p, size_t(R * D) * 4);
      },
      [yref](Napi::Env) { return yref->Value(); }, std::move(keep));
}

// cudaAttention(q, k, v, {B, Tq, Tk, Hq, Hkv, Dh, causal?, qOffset?, scale?}) → Promise<Float32Array>
// (packed layouts; q (B,Tq,Hq,Dh), k/v (B,Tk,Hkv,Dh))
Napi::Value CudaAttention(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  need_cuda(env);
  auto q = array_arg<float>(info[0], "q", false, true);
  auto k = array_arg<float>(info[1], "k", false, true);
  auto v = array_arg<float>(info[2], "v", false, true);
  if (!info[3].IsObject()) throw_type(env, "params must be an object");
  Napi::Object o = info[3].As<Napi::Object>();
  lc::AttnParams p;
  p.B = int_arg(o.Get("B"), "B");
  p.Tq = int_arg(o.Get("Tq"), "Tq");
  p.Tk = int_arg(o.Get("Tk"), "Tk");
  p.Hq = int_arg(o.Get("Hq"), "Hq");
  p.Hkv = int_arg(o.Get("Hkv"), "Hkv");
  p.Dh = int_arg(o.Get("Dh"), "Dh");
  if (o.Has("causal")) p.causal = bool_arg(o.Get("causal"), "causal");
  if (o.Has("qOffset")) p.q_offset = int_arg(o.Get("qOffset"), "qOffset");
  if (o.Has("scale")) p.scale = float(num_arg(o.Get("scale"), "scale"));
  if (p.B < 0 || p.Tq < 0 || p.Tk < 0 || p.Hq < 1 || p.Hkv < 1 || p.Hq % p.Hkv || p.Dh < 1 || p.Dh > 256)
    throw_range(env, "attention: need B, Tq, Tk >= 0, Hq a multiple of Hkv, 1 <= Dh <= 256");
  size_t nq = size_t(p.B * p.Tq * p.Hq * p.Dh), nk = size_t(p.B * p.Tk * p.Hkv * p.Dh);
  check_len(env, q.length, nq, "q");
  check_len(env, k.length, nk, "k");
  check_len(env, v.length, nk, "v");
  Napi::Float32Array out = Napi::Float32Array::New(env, nq);
  float* op = out.Data();
  auto oref = std::make_shared<Napi::ObjectReference>(Napi::Persistent(out.As<Napi::Object>()));
  const float *qp = q.data, *kp = k.data, *vp = v.data;
  std::vector<Napi::ObjectReference> keep;
  keep.push_back(std::move(q.ref));
  keep.push_back(std::move(k.ref));
  keep.push_back(std::move(v.ref));
  return run_async(
      env,
      [=]() {
        std::lock_guard<std::mutex> lk(g_mu);
        DBuf dq(qp, nq * 4), dk(kp, nk * 4), dv(vp, nk * 4), dout(nq * 4);
        lc::attention_fwd(p, dq.as<float>(), dk.as<float>(), dv.as<float>(), dout.as<float>(), nullptr);
        lc::to_host(op, dout.p, nq * 4);
      },
      [oref](Napi::Env) { return oref->Value(); }, std::move(keep));
}

// cudaCrossEntropy(logits (T*V), labels Int32Array (T), T, V) → Promise<{loss, dlogits}>
Napi::Value CudaCrossEntropy(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  need_cuda(env);
  auto lg = array_arg<float>(info[0], "logits", false, true);
  auto lb = array_arg<int32_t>(info[1], "labels", false, true);
  int64_t T = int_arg(info[2], "T"), V = int_arg(info[3], "V");
  if (T < 0 || V < 1) throw_range(env, "T must be >= 0 and V >= 1");
  check_len(env, lg.length, size_t(T * V), "logits");
  check_len(env, lb.length, size_t(T), "labels");
  Napi::Float32Array d = Napi::Float32Array::New(env, size_t(T * V));
  float* dp = d.Data();
  auto dref = std::make_shared<Napi::ObjectReference>(Napi::Persistent(d.As<Napi::Object>()));
  auto loss = std::make_shared<float>(0.f);
  const float* lp = lg.data;
  const int32_t* bp = lb.data;
  std::vector<Napi::ObjectReference> keep;
  keep.push_back(std::move(lg.ref));
  keep.push_back(std::move(lb.ref));
  return run_async(
      env,
      [=]() {
        std::lock_guard<std::mutex> lk(g_mu);
        DBuf dl(lp, size_t(T * V) * 4), dlab(bp, size_t(T) * 4), dd(size_t(T * V) * 4);
        *loss = lc::cross_entropy_fwd_bwd(T, V, dl.as<float>(), dlab.as<int32_t>(), dd.as<float>(), nullptr);
        lc::to_host(dp, dd.p, size_t(T * V) * 4);
      },
      [dref, loss](Napi::Env env) {
        Napi::Object r = Napi::Object::New(env);
        r.Set("loss", *loss);
        r.Set("dlogits", dref->Value());
        return r;
      },
      std::move(keep));
}

void Init(Napi::Env env, Napi::Object exports) {
  exports.Set("cudaInfo", Napi::Function::New(env, CudaInfo));
  exports.Set("cudaSetGemmBackend", Napi::Function::New(env, CudaSetGemmBackend));
  exports.Set("cudaLinear", Napi::Function::New(env, CudaLinear));
  exports.Set("cudaRmsnorm", Napi::Function::New(env, CudaRmsnorm));
  exports.Set("cudaLayernorm", Napi::Function::New(env, CudaLayernorm));
  exports.Set("cudaSoftmax", Napi::Function::New(env, CudaSoftmax));
  exports.Set("cudaAttention", Napi::Function::New(env, CudaAttention));
  exports.Set("cudaCrossEntropy", Napi::Function::New(env, CudaCrossEntropy));
}

}  // namespace
LOOM_NAPI_REGISTER(cuda, Init);
}  // namespace loom::napi
