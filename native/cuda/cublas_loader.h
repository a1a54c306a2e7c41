// cuBLAS / cuBLASLt loaded with dlopen at run time, so builds never need the libraries (they are
// not part of the CUDA toolkit on the build machines) and the addon loads where they are absent.
// Only the handful of entry points Loom uses are declared here, with the ABI of cuBLAS 12/13
// (enum values and struct layouts as in cublas_api.h / cublasLt.h).
//
// Search order: $LOOM_CUBLAS_DIR/<name>, then the plain sonames (LD_LIBRARY_PATH, ldconfig):
// libcublasLt.so.13, libcublasLt.so.12, libcublasLt.so and libcublas.so.13, .12, .so.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

namespace loom::cuda::blas {

using Status = int;  // cublasStatus_t; 0 = success
using Stream = void*;  // cudaStream_t
using Handle = void*;  // cublasHandle_t
using LtHandle = void*;
using LtMatmulDesc = void*;
using LtLayout = void*;
using LtPref = void*;

enum : int { OP_N = 0, OP_T = 1 };
// cudaDataType
enum : int { R_32F = 0, R_16F = 2, R_16BF = 14 };
// cublasComputeType_t
enum : int { COMPUTE_32F = 68, COMPUTE_32F_PEDANTIC = 69, COMPUTE_32F_FAST_16BF = 75, COMPUTE_32F_FAST_TF32 = 77 };
enum : int { GEMM_DEFAULT = -1 };
// cublasMath_t
enum : int { DEFAULT_MATH = 0, TF32_TENSOR_OP_MATH = 3 };
// cublasLtMatmulDescAttributes_t
enum : int {
  LT_DESC_COMPUTE_TYPE = 0, LT_DESC_SCALE_TYPE = 1, LT_DESC_POINTER_MODE = 2, LT_DESC_TRANSA = 3,
  LT_DESC_TRANSB = 4, LT_DESC_EPILOGUE = 7, LT_DESC_BIAS_POINTER = 8, LT_DESC_BIAS_DATA_TYPE = 26
};
// cublasLtMatrixLayoutAttribute_t
enum : int { LT_LAYOUT_BATCH_COUNT = 5, LT_LAYOUT_STRIDED_BATCH_OFFSET = 6 };
// cublasLtMatmulPreferenceAttributes_t
enum : int { LT_PREF_MAX_WORKSPACE_BYTES = 1 };
// cublasLtEpilogue_t
enum : uint32_t { LT_EPILOGUE_DEFAULT = 1, LT_EPILOGUE_BIAS = 4 };

struct LtAlgo { uint64_t data[8]; };
struct LtHeuristicResult {
  LtAlgo algo;
  size_t workspaceSize;
  Status state;
  float wavesCount;
  int reserved[4];
};
static_assert(sizeof(LtHeuristicResult) == 96, "cublasLtMatmulHeuristicResult_t layout");

struct Api {
  // cuBLAS (libcublas)
  void* lib = nullptr;
  std::string lib_name, lib_error;
  Status (*Create)(Handle*) = nullptr;                           // cublasCreate_v2
  Status (*Destroy)(Handle) = nullptr;                           // cublasDestroy_v2
  Status (*SetStream)(Handle, Stream) = nullptr;                 // cublasSetStream_v2
  Status (*SetWorkspace)(Handle, void*, size_t) = nullptr;       // cublasSetWorkspace_v2 (optional)
  Status (*SetMathMode)(Handle, int) = nullptr;                  // cublasSetMathMode
  Status (*GemmEx)(Handle, int, int, int, int, int, const void*, const void*, int, int, const void*, int, int,
                   const void*, void*, int, int, int, int) = nullptr;  // cublasGemmEx
  Status (*GemmStridedBatchedEx)(Handle, int, int, int, int, int, const void*, const void*, int, int, long long,
                                 const void*, int, int, long long, const void*, void*, int, int, long long, int, int,
                                 int) = nullptr;  // cublasGemmStridedBatchedEx
  const char* (*GetStatusString)(Status) = nullptr;  // optional

  // cuBLASLt (libcublasLt)
  void* lt_lib = nullptr;
  std::string lt_name, lt_error;
  Status (*LtCreate)(LtHandle*) = nullptr;
  Status (*LtDestroy)(LtHandle) = nullptr;
  Status (*LtMatmulDescCreate)(LtMatmulDesc*, int compute, int scale_type) = nullptr;
  Status (*LtMatmulDescDestroy)(LtMatmulDesc) = nullptr;
  Status (*LtMatmulDescSetAttribute)(LtMatmulDesc, int, const void*, size_t) = nullptr;
  Status (*LtMatrixLayoutCreate)(LtLayout*, int type, uint64_t rows, uint64_t cols, int64_t ld) = nullptr;
  Status (*LtMatrixLayoutDestroy)(LtLayout) = nullptr;
  Status (*LtMatrixLayoutSetAttribute)(LtLayout, int, const void*, size_t) = nullptr;
  Status (*LtMatmulPreferenceCreate)(LtPref*) = nullptr;
  Status (*LtMatmulPreferenceDestroy)(LtPref) = nullptr;
  Status (*LtMatmulPreferenceSetAttribute)(LtPref, int, const void*, size_t) = nullptr;
  Status (*LtMatmulAlgoGetHeuristic)(LtHandle, LtMatmulDesc, LtLayout, LtLayout, LtLayout, LtLayout, LtPref, int,
                                     LtHeuristicResult*, int*) = nullptr;
  Status (*LtMatmul)(LtHandle, LtMatmulDesc, const void* alpha, const void* A, LtLayout, const void* B, LtLayout,
                     const void* beta, const void* C, LtLayout, void* D, LtLayout, const LtAlgo*, void* ws,
                     size_t ws_bytes, Stream) = nullptr;

  bool has_cublas() const { return GemmEx != nullptr; }
  bool has_lt() const { return LtMatmul != nullptr; }
};

// Loads both libraries once (thread-safe); never throws. Check has_cublas() / has_lt() and the
// *_error strings.
const Api& api();
// "CUBLAS_STATUS_..." text for a status (uses cublasGetStatusString when loaded).
std::string status_string(Status s);

}  // namespace loom::cuda::blas
