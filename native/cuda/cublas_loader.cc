// dlopen loader for cuBLAS / cuBLASLt (see cublas_loader.h).
#include "cublas_loader.h"

#include <dlfcn.h>
#include <cstdlib>
#include <mutex>

namespace loom::cuda::blas {
namespace {

void* open_first(const char* const* names, std::string* opened, std::string* error) {
  std::string errs;
  const char* dir = std::getenv("LOOM_CUBLAS_DIR");
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 0 && (!dir || !*dir)) continue;
    for (const char* const* n = names; *n; n++) {
      std::string path = pass == 0 ? std::string(dir) + "/" + *n : std::string(*n);
      void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (h) {
        *opened = path;
        return h;
      }
      const char* e = dlerror();
      if (errs.empty() && e) errs = e;
    }
  }
  *error = errs.empty() ? "not found" : errs;
  return nullptr;
}

template <typename F>
bool sym(void* lib, const char* name, F* out, std::string* error) {
  void* p = dlsym(lib, name);
  if (!p) {
    if (error->empty()) *error = std::string("missing symbol ") + name;
    return false;
  }
  *out = reinterpret_cast<F>(p);
  return true;
}

Api load() {
  Api a;
  static const char* const lt_names[] = {"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so", nullptr};
  static const char* const names[] = {"libcublas.so.13", "libcublas.so.12", "libcublas.so", nullptr};

  a.lt_lib = open_first(lt_names, &a.lt_name, &a.lt_error);
  if (a.lt_lib) {
    std::string e;
    bool ok = sym(a.lt_lib, "cublasLtCreate", &a.LtCreate, &e) & sym(a.lt_lib, "cublasLtDestroy", &a.LtDestroy, &e) &
              sym(a.lt_lib, "cublasLtMatmulDescCreate", &a.LtMatmulDescCreate, &e) &
              sym(a.lt_lib, "cublasLtMatmulDescDestroy", &a.LtMatmulDescDestroy, &e) &
              sym(a.lt_lib, "cublasLtMatmulDescSetAttribute", &a.LtMatmulDescSetAttribute, &e) &
              sym(a.lt_lib, "cublasLtMatrixLayoutCreate", &a.LtMatrixLayoutCreate, &e) &
              sym(a.lt_lib, "cublasLtMatrixLayoutDestroy", &a.LtMatrixLayoutDestroy, &e) &
              sym(a.lt_lib, "cublasLtMatrixLayoutSetAttribute", &a.LtMatrixLayoutSetAttribute, &e) &
              sym(a.lt_lib, "cublasLtMatmulPreferenceCreate", &a.LtMatmulPreferenceCreate, &e) &
              sym(a.lt_lib, "cublasLtMatmulPreferenceDestroy", &a.LtMatmulPreferenceDestroy, &e) &
              sym(a.lt_lib, "cublasLtMatmulPreferenceSetAttribute", &a.LtMatmulPreferenceSetAttribute, &e) &
              sym(a.lt_lib, "cublasLtMatmulAlgoGetHeuristic", &a.LtMatmulAlgoGetHeuristic, &e) &
              sym(a.lt_lib, "cublasLtMatmul", &a.LtMatmul, &e);
    if (!ok) {
      a.lt_error = a.lt_name + ": " + e;
      a.LtMatmul = nullptr;
    }
  }

  a.lib = open_first(names, &a.lib_name, &a.lib_error);
  if (a.lib) {
    std::string e;
    bool ok = sym(a.lib, "cublasCreate_v2", &a.Create, &e) & sym(a.lib, "cublasDestroy_v2", &a.Destroy, &e) &
              sym(a.lib, "cublasSetStream_v2", &a.SetStream, &e) & sym(a.lib, "cublasSetMathMode", &a.SetMathMode, &e) &
              sym(a.lib, "cublasGemmStridedBatchedEx", &a.GemmStridedBatchedEx, &e) &
              sym(a.lib, "cublasGemmEx", &a.GemmEx, &e);
    std::string ignore;
    sym(a.lib, "cublasSetWorkspace_v2", &a.SetWorkspace, &ignore);
    sym(a.lib, "cublasGetStatusString", &a.GetStatusString, &ignore);
    if (!ok) {
      a.lib_error = a.lib_name + ": " + e;
      a.GemmEx = nullptr;
    }
  }
  return a;
}

}  // namespace

const Api& api() {
  static Api a = load();  // C++11 magic static: thread-safe, once
  return a;
}

std::string status_string(Status s) {
  const Api& a = api();
  if (a.GetStatusString) {
    const char* t = a.GetStatusString(s);
    if (t) return t;
  }
  switch (s) {
    case 0: return "CUBLAS_STATUS_SUCCESS";
    case 1: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case 3: return "CUBLAS_STATUS_ALLOC_FAILED";
    case 7: return "CUBLAS_STATUS_INVALID_VALUE";
    case 8: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case 11: return "CUBLAS_STATUS_MAPPING_ERROR";
    case 13: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case 14: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case 15: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "cuBLAS status " + std::to_string(s);
  }
}

}  // namespace loom::cuda::blas
