// Device detection, the per-process context, memory helpers and backend selection.
#include <cuda_runtime_api.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

#include "cuda_internal.h"

namespace loom::cuda {

void fail(const std::string& what) { throw std::runtime_error("loom.cuda: " + what); }

namespace {

std::once_flag g_info_once;
Info g_info;

void probe() {
  Info& in = g_info;
  cudaRuntimeGetVersion(&in.runtime_version);
  int drv = 0;
  if (cudaDriverGetVersion(&drv) == cudaSuccess) in.driver_version = drv;
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls are not confused
    if (e == cudaErrorInsufficientDriver)
      in.reason = in.driver_version == 0 ? "no CUDA driver installed (cudaErrorInsufficientDriver)"
                                         : "CUDA driver " + std::to_string(in.driver_version) +
                                               " is older than the runtime " + std::to_string(in.runtime_version);
    else if (e == cudaErrorNoDevice)
      in.reason = "no CUDA device (cudaErrorNoDevice)";
    else
      in.reason = std::string("cudaGetDeviceCount failed: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
    return;
  }
  if (n == 0) {
    in.reason = "no CUDA device";
    return;
  }
  for (int i = 0; i < n; i++) {
    cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    DeviceInfo d;
    d.index = i;
    d.name = p.name;
    d.cc_major = p.major;
    d.cc_minor = p.minor;
    d.total_mem = p.totalGlobalMem;
    d.sm_count = p.multiProcessorCount;
    in.devices.push_back(d);
  }
  if (in.devices.empty()) {
    in.reason = "no usable CUDA device";
    return;
  }
  // The kernels are built for sm_80+ (bf16 tensor cores, cp.async era); refuse older devices.
  int dev = 0;
  if (const char* s = std::getenv("LOOM_CUDA_DEVICE")) dev = std::atoi(s);
  if (dev < 0 || dev >= (int)in.devices.size()) {
    in.reason = "LOOM_CUDA_DEVICE=" + std::to_string(dev) + " but " + std::to_string(in.devices.size()) +
                " device(s) present";
    return;
  }
  if (in.devices[dev].cc_major < 8) {
    in.reason = "device " + in.devices[dev].name + " has compute capability " +
                std::to_string(in.devices[dev].cc_major) + "." + std::to_string(in.devices[dev].cc_minor) +
                "; Loom's CUDA kernels need 8.0 or newer";
    return;
  }
  in.available = true;
  const blas::Api& a = blas::api();
  in.cublas = a.has_lt() || a.has_cublas();
  if (!in.cublas)
    in.cublas_reason = "cuBLASLt: " + a.lt_error + "; cuBLAS: " + a.lib_error +
                       " (set LOOM_CUBLAS_DIR or LD_LIBRARY_PATH; using Loom's own GEMM kernel)";
  else if (!a.has_lt())
    in.cublas_reason = "cuBLASLt: " + a.lt_error;
  in.gemm_backend = a.has_lt() ? "cublaslt" : a.has_cublas() ? "cublas" : "kernel";
}

std::mutex g_ctx_mu;
Context* g_ctx = nullptr;

void blas_check(blas::Status s, const char* what) {
  if (s != 0) fail(std::string(what) + ": " + blas::status_string(s));
}

Context* create() {
  const Info& in = info();
  if (!in.available) fail("CUDA unavailable: " + in.reason);
  auto* c = new Context();
  if (const char* s = std::getenv("LOOM_CUDA_DEVICE")) c->device = std::atoi(s);
  check(cudaSetDevice(c->device), "cudaSetDevice");
  check(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  c->sm_count = in.devices[c->device].sm_count;
  int optin = 0;
  cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, c->device);
  c->smem_optin = size_t(optin);
  c->workspace_bytes = size_t(32) << 20;
  check(cudaMalloc(&c->workspace, c->workspace_bytes), "cudaMalloc(workspace)");
  check(cudaMalloc((void**)&c->err_flag, sizeof(int)), "cudaMalloc(err_flag)");
  check(cudaMemset(c->err_flag, 0, sizeof(int)), "cudaMemset");
  check(cudaMalloc((void**)&c->red, 64 * sizeof(float)), "cudaMalloc(red)");
  const blas::Api& a = blas::api();
  if (a.has_lt()) blas_check(a.LtCreate(&c->lt), "cublasLtCreate");
  if (a.has_cublas()) {
    blas_check(a.Create(&c->cublas), "cublasCreate");
    blas_check(a.SetStream(c->cublas, c->stream), "cublasSetStream");
    if (a.SetWorkspace) a.SetWorkspace(c->cublas, c->workspace, c->workspace_bytes);
  }
  c->backend = c->lt ? GemmBackend::Lt : c->cublas ? GemmBackend::Cublas : GemmBackend::Kernel;
  if (const char* s = std::getenv("LOOM_CUDA_GEMM")) {
    if (!std::strcmp(s, "lt") && c->lt) c->backend = GemmBackend::Lt;
    else if (!std::strcmp(s, "cublas") && c->cublas) c->backend = GemmBackend::Cublas;
    else if (!std::strcmp(s, "kernel")) c->backend = GemmBackend::Kernel;
  }
  if (const char* s = std::getenv("LOOM_CUDA_TF32")) c->tf32 = std::atoi(s) != 0;
  if (c->cublas) a.SetMathMode(c->cublas, c->tf32 ? blas::TF32_TENSOR_OP_MATH : blas::DEFAULT_MATH);
  return c;
}

}  // namespace

Info info() {
  std::call_once(g_info_once, probe);
  return g_info;
}
bool available() { return info().available; }
void ensure_available() {
  Info in = info();
  if (!in.available) fail("CUDA unavailable: " + in.reason);
}

Context& ctx() {
  std::lock_guard<std::mutex> lk(g_ctx_mu);
  if (!g_ctx) g_ctx = create();
  else cudaSetDevice(g_ctx->device);  // the calling thread may be new (libuv pool)
  return *g_ctx;
}

void* scratch(int slot, size_t bytes) {
  Context& c = ctx();
  if (bytes == 0) bytes = 256;
  if (c.scratch_bytes[slot] < bytes) {
    if (c.scratch[slot]) {
      check(cudaStreamSynchronize(c.stream), "cudaStreamSynchronize");
      cudaFree(c.scratch[slot]);
      c.scratch[slot] = nullptr;
      c.scratch_bytes[slot] = 0;
    }
    size_t sz = bytes + bytes / 4;
    check(cudaMalloc(&c.scratch[slot], sz), "cudaMalloc(scratch)");
    c.scratch_bytes[slot] = sz;
  }
  return c.scratch[slot];
}

GemmBackend gemm_backend() { return ctx().backend; }
const char* gemm_backend_name(GemmBackend b) {
  return b == GemmBackend::Lt ? "cublaslt" : b == GemmBackend::Cublas ? "cublas" : "kernel";
}
bool gemm_backend_supported(GemmBackend b) {
  Context& c = ctx();
  return b == GemmBackend::Kernel || (b == GemmBackend::Lt && c.lt) || (b == GemmBackend::Cublas && c.cublas);
}
void gemm_backend_set(GemmBackend b) {
  if (!gemm_backend_supported(b))
    fail(std::string("GEMM backend ") + gemm_backend_name(b) + " unavailable (cuBLAS libraries not loaded)");
  ctx().backend = b;
}
void tf32_set(bool on) {
  Context& c = ctx();
  c.tf32 = on;
  if (c.cublas) blas::api().SetMathMode(c.cublas, on ? blas::TF32_TENSOR_OP_MATH : blas::DEFAULT_MATH);
}
bool tf32_get() { return ctx().tf32; }

void* dev_alloc(size_t bytes) {
  ctx();
  void* p = nullptr;
  check(cudaMalloc(&p, bytes ? bytes : 256), "cudaMalloc");
  return p;
}
void dev_free(void* p) {
  if (p) cudaFree(p);
}
void to_device(void* dst, const void* src, size_t bytes) {
  Context& c = ctx();
  if (!bytes) return;
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, c.stream), "cudaMemcpy(H2D)");
  check(cudaStreamSynchronize(c.stream), "cudaStreamSynchronize");  // pageable host memory may be reused at once
}
void to_host(void* dst, const void* src, size_t bytes) {
  Context& c = ctx();
  if (!bytes) return;
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, c.stream), "cudaMemcpy(D2H)");
  synchronize();
}
void dev_zero(void* p, size_t bytes) {
  if (bytes) check(cudaMemsetAsync(p, 0, bytes, ctx().stream), "cudaMemsetAsync");
}
void dev_copy(void* dst, const void* src, size_t bytes) {
  if (bytes) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx().stream), "cudaMemcpy(D2D)");
}
void synchronize() {
  Context& c = ctx();
  check(cudaStreamSynchronize(c.stream), "cudaStreamSynchronize");
  int flag = 0;
  check(cudaMemcpy(&flag, c.err_flag, sizeof(int), cudaMemcpyDeviceToHost), "cudaMemcpy(err_flag)");
  if (flag != ERR_NONE) {
    cudaMemset(c.err_flag, 0, sizeof(int));
    throw std::invalid_argument(flag == ERR_BAD_ID      ? "loom.cuda: embedding id out of range [0, V)"
                                : flag == ERR_BAD_LABEL ? "loom.cuda: cross-entropy label >= V"
                                                        : "loom.cuda: kernel reported bad input");
  }
}

}  // namespace loom::cuda
