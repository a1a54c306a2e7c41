// Loom CUDA core: device context, GEMM through cuBLASLt / cuBLAS (loaded with dlopen), and the
// fused kernels of loom/ops.h on the GPU.
//
// This header is plain C++ (no CUDA headers), so host code compiled by g++ (the N-API binding,
// test programs) can include it. Every pointer argument of the kernels below is DEVICE memory
// (from dev_alloc) unless it says "host". Shapes, conventions and accumulate-vs-write rules are
// exactly those of loom/ops.h and loom/gemm.h: backward functions ACCUMULATE (+=) into parameter
// gradients (dw, db, dtable, dA, dB) and WRITE (=) input gradients (dx).
//
// All work is queued on the context's stream (one per process); functions return once queued,
// except those returning a host value (cross_entropy_fwd_bwd, l2_norm), which synchronize.
// Errors (bad arguments, CUDA or cuBLAS failures) throw std::runtime_error / std::invalid_argument
// with a message naming the call. The context is not thread-safe: callers serialize (the N-API
// binding holds a mutex around each call).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace loom::cuda {

// ---------------------------------------------------------------------------------------------
// Availability and devices
// ---------------------------------------------------------------------------------------------
struct DeviceInfo {
  int index = 0;
  std::string name;
  int cc_major = 0, cc_minor = 0;
  size_t total_mem = 0;
  int sm_count = 0;
};
struct Info {
  bool available = false;       // a usable device and driver
  std::string reason;           // why not (empty when available)
  int runtime_version = 0;      // CUDA runtime this build links (e.g. 13000)
  int driver_version = 0;       // 0 when no driver
  std::vector<DeviceInfo> devices;
  bool cublas = false;          // cuBLAS / cuBLASLt could be loaded (probed only when available)
  std::string cublas_reason;    // why not
  std::string gemm_backend;     // "cublaslt" | "cublas" | "kernel"
};
// Never throws. The first call probes the driver (cudaGetDeviceCount: error 35 = no/old driver,
// 100 = no device) and caches the result.
Info info();
bool available();

// Throws std::runtime_error("CUDA unavailable: <reason>") when no device is usable.
void ensure_available();

// GEMM backend: cuBLASLt when it loads, else cuBLAS, else Loom's own tiled kernel. LOOM_CUDA_GEMM
// (lt | cublas | kernel) at start-up or gemm_backend_set() forces one (throws if unavailable).
enum class GemmBackend : int { Lt = 0, Cublas = 1, Kernel = 2 };
GemmBackend gemm_backend();
void gemm_backend_set(GemmBackend b);
const char* gemm_backend_name(GemmBackend b);
bool gemm_backend_supported(GemmBackend b);
// TF32 tensor-core math for fp32 GEMMs (off by default: full fp32). LOOM_CUDA_TF32=1 sets it.
void tf32_set(bool on);
bool tf32_get();

// ---------------------------------------------------------------------------------------------
// Memory (device) and transfers; all stream-ordered on the context stream.
// ---------------------------------------------------------------------------------------------
void* dev_alloc(size_t bytes);  // throws on failure; 0 bytes gives a valid 256-byte block
void dev_free(void* p);
void to_device(void* dst, const void* host_src, size_t bytes);    // synchronous w.r.t. host memory
void to_host(void* host_dst, const void* src, size_t bytes);      // waits for queued work
void dev_zero(void* p, size_t bytes);
void dev_copy(void* dst, const void* src, size_t bytes);
void synchronize();  // waits for the stream; throws on a kernel fault

// ---------------------------------------------------------------------------------------------
// GEMM (row-major; ld* are row strides in elements). Weight dtype codes as in loom::DType:
// 0 = F32, 2 = BF16 (bf16 bits). Mirrors loom/gemm.h.
// ---------------------------------------------------------------------------------------------
enum WType : int { W_F32 = 0, W_BF16 = 2 };
// y[M,N] = beta*y + x[M,K] · W[N,K]ᵀ (+ bias[N], fused into the cuBLASLt epilogue).
// bf16 W: x is rounded to bf16 on the device and multiplied on bf16 tensor cores with fp32
// accumulation (the CPU's linear_bf16_bf16 semantics).
void linear(int wtype, int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const void* w, int64_t ldw,
            const float* bias, float* y, int64_t ldy, float beta = 0.0f);
// C[M,N] = alpha·op(A)·op(B) + beta·C; A is (M,K) or with ta stored (K,M); B is (K,N) or with tb
// stored (N,K). Used by backward passes: dx = dy·W (0,0), dW += dyᵀ·x (1,0, beta 1).
void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
// Same with B in bf16 (weights): A is rounded to bf16 (dx = dy·W for bf16 W).
void gemm_bf16w(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc);
void sgemm_batched(bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   int64_t lda, int64_t strideA, const float* B, int64_t ldb, int64_t strideB, float beta, float* C,
                   int64_t ldc, int64_t strideC);

// ---------------------------------------------------------------------------------------------
// Elementwise and conversions (n elements)
// ---------------------------------------------------------------------------------------------
void add_fwd(int64_t n, const float* a, const float* b, float* y);
void mul_fwd(int64_t n, const float* a, const float* b, float* y);
void mul_bwd(int64_t n, const float* a, const float* b, const float* dy, float* da, float* db);  // da,db +=
void scale_fwd(int64_t n, const float* x, float s, float* y);
void axpy(int64_t n, float a, const float* x, float* y);
void add_bias(int64_t R, int64_t D, float* x, const float* b);
void bias_bwd(int64_t R, int64_t D, const float* dy, float* db);  // db +=
void convert_f32_to_bf16(int64_t n, const float* src, uint16_t* dst);
void convert_bf16_to_f32(int64_t n, const uint16_t* src, float* dst);

// Embedding: table (V, D) fp32 or bf16 (wtype), ids (T) in [0, V) (out-of-range ids give a zero row
// and set the error flag checked by synchronize()), out (T, D). dtable += scatter of dout.
void embedding_fwd(int64_t T, int64_t D, int64_t V, const int32_t* ids, int wtype, const void* table, float* out);
void embedding_bwd(int64_t T, int64_t D, int64_t V, const int32_t* ids, const float* dout, float* dtable);

// Normalization over the last dim: x (R, D)
void layernorm_fwd(int64_t R, int64_t D, const float* x, const float* w, const float* b, float eps, float* y,
                   float* mean, float* rstd);
void layernorm_bwd(int64_t R, int64_t D, const float* x, const float* w, const float* mean, const float* rstd,
                   const float* dy, float* dx, float* dw, float* db);
void rmsnorm_fwd(int64_t R, int64_t D, const float* x, const float* w, float eps, float* y, float* rstd);
void rmsnorm_bwd(int64_t R, int64_t D, const float* x, const float* w, const float* rstd, const float* dy, float* dx,
                 float* dw);

void softmax_fwd(int64_t R, int64_t D, const float* x, float* y);
void softmax_bwd(int64_t R, int64_t D, const float* y, const float* dy, float* dx);
void log_softmax_fwd(int64_t R, int64_t D, const float* x, float* y);

// Activations
void gelu_fwd(int64_t n, const float* x, float* y, bool approx);
void gelu_bwd(int64_t n, const float* x, const float* dy, float* dx, bool approx);
void silu_fwd(int64_t n, const float* x, float* y);
void silu_bwd(int64_t n, const float* x, const float* dy, float* dx);
void swiglu_fwd(int64_t n, const float* gate, const float* up, float* y);
void swiglu_bwd(int64_t n, const float* gate, const float* up, const float* dy, float* dgate, float* dup);

// RoPE (rotate-half layout). inv_freq is computed on the HOST (rope_inv_freq, same rule as the CPU)
// and uploaded; x (T, H, Dh) with row stride ld, rotated in place by pos (T).
struct RopeScaling {
  int type = 0;  // 0 none, 1 llama3, 2 linear
  float factor = 1.0f, low_freq_factor = 1.0f, high_freq_factor = 4.0f;
  int original_max_position = 8192;
};
void rope_inv_freq(int64_t Dh, float theta, const RopeScaling& s, float* inv_freq_host);
void rope_fwd(int64_t T, int64_t H, int64_t Dh, int64_t ld, const int32_t* pos, const float* inv_freq, float* x);
void rope_bwd(int64_t T, int64_t H, int64_t Dh, int64_t ld, const int32_t* pos, const float* inv_freq, float* dx);

// Attention: same parameters as loom::AttnParams (device pointers for key_mask / bias).
// Forward is flash-style: key/value tiles in shared memory, online softmax, O(Tk) memory.
// Dh <= 256.
struct AttnParams {
  int64_t B = 1, Tq = 0, Tk = 0, Hq = 1, Hkv = 1, Dh = 0;
  int64_t ldq = 0, ldk = 0, ldv = 0, ldo = 0;
  float scale = 0.0f;
  bool causal = false;
  int64_t q_offset = 0;
  const uint8_t* key_mask = nullptr;
  const float* bias = nullptr;
  int64_t bias_sb = 0, bias_sh = 0, bias_si = 0;
};
// lse (B, Hq, Tq) saved if non-null (-inf for rows with every key masked; their output is 0).
void attention_fwd(const AttnParams& p, const float* q, const float* k, const float* v, float* out, float* lse);
// dq, dk, dv written; dbias written if non-null (accumulated over broadcast dims when the bias
// strides broadcast: bias_sb == 0 or bias_sh == 0).
void attention_bwd(const AttnParams& p, const float* q, const float* k, const float* v, const float* out,
                   const float* lse, const float* dout, float* dq, float* dk, float* dv, float* dbias);

// Cross-entropy over logits (T, V), labels (T), label < 0 ignored; labels >= V throw. Returns the
// mean loss (synchronizes). dlogits / losses written if non-null.
float cross_entropy_fwd_bwd(int64_t T, int64_t V, const float* logits, const int32_t* labels, float* dlogits,
                            float* losses);

// AdamW (PyTorch semantics), step >= 1.
void adamw_step(int64_t n, float* p, const float* g, float* m, float* v, float lr, float b1, float b2, float eps,
                float wd, int64_t step);
float l2_norm(int64_t n, const float* g);  // synchronizes

// LoRA: y (M, N) = x·Wᵀ + bias + s·(x·Aᵀ)·Bᵀ; W (N, K) f32/bf16, A (r, K), B (N, r); xa (M, r) saved.
void lora_fwd(int64_t M, int64_t N, int64_t K, int64_t r, const float* x, int wtype, const void* w,
              const float* bias, const float* A, const float* B, float s, float* xa, float* y);
// dA +=, dB +=, dx written if non-null.
void lora_bwd(int64_t M, int64_t N, int64_t K, int64_t r, const float* x, int wtype, const void* w, const float* A,
              const float* B, float s, const float* xa, const float* dy, float* dx, float* dA, float* dB);

}  // namespace loom::cuda
