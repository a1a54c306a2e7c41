// Internal to native/cuda: the device context and launch helpers shared by the .cu files.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "cublas_loader.h"
#include "loom_cuda.h"

namespace loom::cuda {

// One context per process (device LOOM_CUDA_DEVICE, default 0): a non-blocking stream, a 32 MiB
// cuBLASLt workspace, the cuBLAS handles, scratch buffers for temporaries, and a device error flag
// that kernels set on bad input (out-of-range ids / labels).
struct Context {
  int device = 0;
  cudaStream_t stream = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  blas::Handle cublas = nullptr;
  blas::LtHandle lt = nullptr;
  GemmBackend backend = GemmBackend::Kernel;
  bool tf32 = false;
  int sm_count = 0;
  size_t smem_optin = 0;  // max dynamic shared memory per block (opt-in)
  int* err_flag = nullptr;      // device int
  float* red = nullptr;         // device scratch for small reductions (64 floats)
  void* scratch[3] = {nullptr, nullptr, nullptr};
  size_t scratch_bytes[3] = {0, 0, 0};
};

Context& ctx();  // initializes on first use; throws when CUDA is unavailable
// A device buffer of at least `bytes` reused across calls (slot 0..2; contents undefined).
void* scratch(int slot, size_t bytes);

[[noreturn]] void fail(const std::string& what);
inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fail(std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}
inline void check_launch(const char* what) { check(cudaGetLastError(), what); }
inline void require(bool ok, const char* what) {
  if (!ok) throw std::invalid_argument(std::string("loom.cuda: ") + what);
}

// Error flag codes set by kernels.
enum : int { ERR_NONE = 0, ERR_BAD_ID = 1, ERR_BAD_LABEL = 2 };

inline unsigned grid_for(int64_t n, int block, int64_t cap = 65535LL * 16) {
  int64_t g = (n + block - 1) / block;
  if (g < 1) g = 1;
  return unsigned(g > cap ? cap : g);
}

}  // namespace loom::cuda
