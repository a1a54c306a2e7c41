// GEMM on the GPU: cuBLASLt (bias fused into the epilogue), cuBLAS, or Loom's own tiled kernel.
//
// Row-major ↔ column-major: a row-major (R, C) matrix with row stride ld is, to cuBLAS, the
// column-major (C, R) matrix with leading dimension ld, i.e. its transpose. So the row-major
//   C[M,N] = op(A)·op(B)
// is computed as the column-major Cᵀ[N,M] = op(B)ᵀ·op(A)ᵀ: cuBLAS's "A" is our B (transposed
// iff tb), its "B" is our A (transposed iff ta), m = N, n = M. The linear layer
// y = x·Wᵀ (W stored (N, K)) becomes cublas(T, N, m=N, n=M, k=K, W, ldw, x, ldx, y, ldy), and the
// bias (N) is a per-row vector of the column-major result: CUBLASLT_EPILOGUE_BIAS.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstring>
#include <mutex>
#include <unordered_map>

#include "cuda_internal.h"

namespace loom::cuda {
namespace {

// ---------------------------------------------------------------------------------------------
// Fallback kernel: 64x64 output tile per block, BK = 16, 256 threads each computing 4x4.
// Any transposes, fp32 or bf16 operands, fp32 accumulate, optional bias, batched via blockIdx.z.
// ---------------------------------------------------------------------------------------------
template <typename T>
__device__ __forceinline__ float ld_elem(const T* p);
template <>
__device__ __forceinline__ float ld_elem<float>(const float* p) { return *p; }
template <>
__device__ __forceinline__ float ld_elem<__nv_bfloat16>(const __nv_bfloat16* p) { return __bfloat162float(*p); }

constexpr int TM = 64, TN = 64, TK = 16;

template <typename TA, typename TB>
__global__ void gemm_tiled_kernel(bool ta, bool tb, int M, int N, int K, float alpha, const TA* __restrict__ A,
                                  int64_t lda, int64_t sA, const TB* __restrict__ B, int64_t ldb, int64_t sB,
                                  float beta, float* __restrict__ C, int64_t ldc, int64_t sC,
                                  const float* __restrict__ bias) {
  __shared__ float As[TK][TM + 4];  // As[k][i] = op(A)[i][k]
  __shared__ float Bs[TK][TN + 4];  // Bs[k][j] = op(B)[k][j]
  const int z = blockIdx.z;
  A += z * sA;
  B += z * sB;
  C += z * sC;
  const int i0 = blockIdx.y * TM, j0 = blockIdx.x * TN;
  const int tid = threadIdx.x;
  const int ty = tid / 16, tx = tid % 16;  // 16x16 threads, each 4x4 outputs
  float acc[4][4] = {};
  for (int k0 = 0; k0 < K; k0 += TK) {
    // 64*16 = 1024 elements per operand tile, 4 per thread.
    for (int e = tid; e < TM * TK; e += 256) {
      int i, k;
      if (ta) { i = e % TM; k = e / TM; } else { k = e % TK; i = e / TK; }  // coalesce along memory rows
      int gi = i0 + i, gk = k0 + k;
      float v = 0.f;
      if (gi < M && gk < K) v = ld_elem(ta ? A + (int64_t)gk * lda + gi : A + (int64_t)gi * lda + gk);
      As[k][i] = v;
    }
    for (int e = tid; e < TN * TK; e += 256) {
      int j, k;
      if (tb) { k = e % TK; j = e / TK; } else { j = e % TN; k = e / TN; }
      int gj = j0 + j, gk = k0 + k;
      float v = 0.f;
      if (gj < N && gk < K) v = ld_elem(tb ? B + (int64_t)gj * ldb + gk : B + (int64_t)gk * ldb + gj);
      Bs[k][j] = v;
    }
    __syncthreads();
#pragma unroll
    for (int k = 0; k < TK; k++) {
      float a[4], b[4];
#pragma unroll
      for (int r = 0; r < 4; r++) a[r] = As[k][ty + 16 * r];
#pragma unroll
      for (int c = 0; c < 4; c++) b[c] = Bs[k][tx + 16 * c];
#pragma unroll
      for (int r = 0; r < 4; r++)
#pragma unroll
        for (int c = 0; c < 4; c++) acc[r][c] = fmaf(a[r], b[c], acc[r][c]);
    }
    __syncthreads();
  }
#pragma unroll
  for (int r = 0; r < 4; r++) {
    int gi = i0 + ty + 16 * r;
    if (gi >= M) continue;
#pragma unroll
    for (int c = 0; c < 4; c++) {
      int gj = j0 + tx + 16 * c;
      if (gj >= N) continue;
      float v = alpha * acc[r][c];
      if (bias) v += bias[gj];
      float* p = C + (int64_t)gi * ldc + gj;
      *p = beta == 0.f ? v : v + beta * *p;
    }
  }
}

__global__ void add_bias_rows_kernel(int64_t R, int64_t D, int64_t ld, float* __restrict__ y,
                                     const float* __restrict__ b) {
  int64_t n = R * D;
  for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
    int64_t r = e / D, c = e % D;
    y[r * ld + c] += b[c];
  }
}

// ---------------------------------------------------------------------------------------------
// cuBLASLt plan cache: descriptors + the heuristic's algorithm per problem signature.
// ---------------------------------------------------------------------------------------------
struct PlanKey {
  int opa, opb, type, compute, bias;
  int64_t m, n, k, lda, ldb, ldc, batch, sa, sb, sc;
  uint32_t align;  // packed log2 alignments of A, B, C
  bool operator==(const PlanKey& o) const { return std::memcmp(this, &o, sizeof(PlanKey)) == 0; }
};
struct PlanKeyHash {
  size_t operator()(const PlanKey& k) const {
    const unsigned char* p = reinterpret_cast<const unsigned char*>(&k);
    size_t h = 1469598103934665603ull;
    for (size_t i = 0; i < sizeof(PlanKey); i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
  }
};
struct Plan {
  bool ok = false;
  blas::LtMatmulDesc desc = nullptr;
  blas::LtLayout a = nullptr, b = nullptr, c = nullptr;
  blas::LtAlgo algo;
  size_t ws = 0;
};
std::mutex g_plan_mu;
std::unordered_map<PlanKey, Plan, PlanKeyHash> g_plans;

uint32_t align_of(const void* p) {
  uintptr_t u = reinterpret_cast<uintptr_t>(p);
  uint32_t a = 256;
  while (a > 1 && (u % a)) a >>= 1;
  return a;
}
uint32_t log2u(uint32_t a) {
  uint32_t l = 0;
  while ((1u << l) < a) l++;
  return l;
}

// Returns false when cuBLASLt has no algorithm for this problem (caller falls back).
bool lt_gemm(Context& c, int opa, int opb, int64_t m, int64_t n, int64_t k, float alpha, const void* A, int64_t lda,
             int64_t sa, const void* B, int64_t ldb, int64_t sb, int type, float beta, float* C, int64_t ldc,
             int64_t sc, int64_t batch, const float* bias) {
  const blas::Api& api = blas::api();
  uint32_t aa = align_of(A), ab = align_of(B), ac = align_of(C);
  // Strided batches must keep the alignment of every batch's pointer.
  int esz = type == blas::R_32F ? 4 : 2;
  if (batch > 1) {
    auto fold = [&](uint32_t al, int64_t stride, int es) {
      uint32_t s = stride ? align_of(reinterpret_cast<const void*>(uintptr_t(stride) * es)) : 256;
      return al < s ? al : s;
    };
    aa = fold(aa, sa, esz);
    ab = fold(ab, sb, esz);
    ac = fold(ac, sc, 4);
  }
  int compute = type == blas::R_32F && c.tf32 ? blas::COMPUTE_32F_FAST_TF32 : blas::COMPUTE_32F;
  PlanKey key{};  // zero padding for memcmp/hash
  key.opa = opa; key.opb = opb; key.type = type; key.compute = compute; key.bias = bias != nullptr;
  key.m = m; key.n = n; key.k = k; key.lda = lda; key.ldb = ldb; key.ldc = ldc;
  key.batch = batch; key.sa = sa; key.sb = sb; key.sc = sc;
  key.align = log2u(aa) | (log2u(ab) << 8) | (log2u(ac) << 16);

  Plan* plan;
  {
    std::lock_guard<std::mutex> lk(g_plan_mu);
    auto it = g_plans.find(key);
    if (it == g_plans.end()) {
      Plan p;
      auto ok = [](blas::Status s) { return s == 0; };
      bool good = ok(api.LtMatmulDescCreate(&p.desc, compute, blas::R_32F));
      int32_t ta = opa, tb = opb;
      good = good && ok(api.LtMatmulDescSetAttribute(p.desc, blas::LT_DESC_TRANSA, &ta, sizeof(ta)));
      good = good && ok(api.LtMatmulDescSetAttribute(p.desc, blas::LT_DESC_TRANSB, &tb, sizeof(tb)));
      if (bias) {
        uint32_t epi = blas::LT_EPILOGUE_BIAS;
        int32_t bt = blas::R_32F;
        good = good && ok(api.LtMatmulDescSetAttribute(p.desc, blas::LT_DESC_EPILOGUE, &epi, sizeof(epi)));
        good = good && ok(api.LtMatmulDescSetAttribute(p.desc, blas::LT_DESC_BIAS_DATA_TYPE, &bt, sizeof(bt)));
      }
      // Stored shapes (column-major view): op N → (rows, cols) = (m, k) for A, (k, n) for B.
      good = good && ok(api.LtMatrixLayoutCreate(&p.a, type, opa == blas::OP_N ? m : k, opa == blas::OP_N ? k : m, lda));
      good = good && ok(api.LtMatrixLayoutCreate(&p.b, type, opb == blas::OP_N ? k : n, opb == blas::OP_N ? n : k, ldb));
      good = good && ok(api.LtMatrixLayoutCreate(&p.c, blas::R_32F, m, n, ldc));
      if (good && batch > 1) {
        int32_t bc = int32_t(batch);
        good = ok(api.LtMatrixLayoutSetAttribute(p.a, blas::LT_LAYOUT_BATCH_COUNT, &bc, sizeof(bc))) &&
               ok(api.LtMatrixLayoutSetAttribute(p.a, blas::LT_LAYOUT_STRIDED_BATCH_OFFSET, &sa, sizeof(sa))) &&
               ok(api.LtMatrixLayoutSetAttribute(p.b, blas::LT_LAYOUT_BATCH_COUNT, &bc, sizeof(bc))) &&
               ok(api.LtMatrixLayoutSetAttribute(p.b, blas::LT_LAYOUT_STRIDED_BATCH_OFFSET, &sb, sizeof(sb))) &&
               ok(api.LtMatrixLayoutSetAttribute(p.c, blas::LT_LAYOUT_BATCH_COUNT, &bc, sizeof(bc))) &&
               ok(api.LtMatrixLayoutSetAttribute(p.c, blas::LT_LAYOUT_STRIDED_BATCH_OFFSET, &sc, sizeof(sc)));
      }
      if (good) {
        blas::LtPref pref = nullptr;
        good = ok(api.LtMatmulPreferenceCreate(&pref));
        uint64_t ws = c.workspace_bytes;
        uint32_t al[4] = {aa, ab, ac, ac};
        good = good && ok(api.LtMatmulPreferenceSetAttribute(pref, blas::LT_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
        for (int i = 0; i < 4 && good; i++)  // CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_{A,B,C,D}_BYTES = 5..8
          good = ok(api.LtMatmulPreferenceSetAttribute(pref, 5 + i, &al[i], sizeof(uint32_t)));
        blas::LtHeuristicResult res[1];
        int count = 0;
        if (good)
          good = ok(api.LtMatmulAlgoGetHeuristic(c.lt, p.desc, p.a, p.b, p.c, p.c, pref, 1, res, &count)) &&
                 count > 0 && res[0].state == 0;
        if (pref) api.LtMatmulPreferenceDestroy(pref);
        if (good) {
          p.algo = res[0].algo;
          p.ws = res[0].workspaceSize;
        }
      }
      p.ok = good;
      it = g_plans.emplace(key, p).first;
    }
    plan = &it->second;  // unordered_map nodes are stable
  }
  if (!plan->ok) return false;
  if (bias) {
    const void* bp = bias;
    blas::Status s = api.LtMatmulDescSetAttribute(plan->desc, blas::LT_DESC_BIAS_POINTER, &bp, sizeof(bp));
    if (s != 0) fail("cublasLtMatmulDescSetAttribute(bias): " + blas::status_string(s));
  }
  blas::Status s = api.LtMatmul(c.lt, plan->desc, &alpha, A, plan->a, B, plan->b, &beta, C, plan->c, C, plan->c,
                                &plan->algo, c.workspace, plan->ws, c.stream);
  if (s != 0) fail("cublasLtMatmul: " + blas::status_string(s));
  return true;
}

// Row-major C = alpha·op(A)·op(B) + beta·C (+ bias[N]); A and B both of dtype `type`
// (R_32F or R_16BF), or for the kernel backend A fp32 and B of `btype`.
void gemm_rm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const void* A, int atype, int64_t lda,
             int64_t sA, const void* B, int btype, int64_t ldb, int64_t sB, float beta, float* C, int64_t ldc,
             int64_t sC, int64_t batch, const float* bias) {
  Context& c = ctx();
  if (M == 0 || N == 0 || batch == 0) return;
  if (K == 0) {  // C = beta·C (+ bias)
    if (beta == 0.f) {
      for (int64_t z = 0; z < batch; z++)
        check(cudaMemset2DAsync(C + z * sC, ldc * 4, 0, N * 4, M, c.stream), "cudaMemset2D");
    } else if (beta != 1.f) {
      fail("gemm with K = 0 and beta not in {0, 1} is unsupported");
    }
    if (bias)
      for (int64_t z = 0; z < batch; z++)
        add_bias_rows_kernel<<<grid_for(M * N, 256), 256, 0, c.stream>>>(M, N, ldc, C + z * sC, bias);
    check_launch("gemm(K=0)");
    return;
  }
  require(M < (1ll << 31) && N < (1ll << 31) && K < (1ll << 31), "gemm dimensions must be < 2^31");
  const int opa = tb ? blas::OP_T : blas::OP_N;  // cuBLAS's A is our B
  const int opb = ta ? blas::OP_T : blas::OP_N;  // cuBLAS's B is our A
  if (c.backend != GemmBackend::Kernel && atype == btype) {
    if (c.backend == GemmBackend::Lt &&
        lt_gemm(c, opa, opb, N, M, K, alpha, B, ldb, sB, A, lda, sA, atype, beta, C, ldc, sC, batch, bias))
      return;
    if (c.cublas) {
      const blas::Api& api = blas::api();
      int compute = atype == blas::R_32F && c.tf32 ? blas::COMPUTE_32F_FAST_TF32 : blas::COMPUTE_32F;
      blas::Status s;
      if (batch == 1)
        s = api.GemmEx(c.cublas, opa, opb, int(N), int(M), int(K), &alpha, B, atype, int(ldb), A, atype, int(lda),
                       &beta, C, blas::R_32F, int(ldc), compute, blas::GEMM_DEFAULT);
      else
        s = api.GemmStridedBatchedEx(c.cublas, opa, opb, int(N), int(M), int(K), &alpha, B, atype, int(ldb), sB, A,
                                     atype, int(lda), sA, &beta, C, blas::R_32F, int(ldc), sC, int(batch), compute,
                                     blas::GEMM_DEFAULT);
      if (s != 0) fail("cublasGemmEx: " + blas::status_string(s));
      if (bias)
        for (int64_t z = 0; z < batch; z++)
          add_bias_rows_kernel<<<grid_for(M * N, 256), 256, 0, c.stream>>>(M, N, ldc, C + z * sC, bias);
      check_launch("gemm bias");
      return;
    }
  }
  require(batch < 65536, "batch must be < 65536 for the kernel backend");
  dim3 grid(unsigned((N + TN - 1) / TN), unsigned((M + TM - 1) / TM), unsigned(batch));
  require((M + TM - 1) / TM < 65536, "M too large for the kernel backend");
  if (atype == blas::R_32F && btype == blas::R_32F)
    gemm_tiled_kernel<float, float><<<grid, 256, 0, c.stream>>>(ta, tb, int(M), int(N), int(K), alpha,
                                                               (const float*)A, lda, sA, (const float*)B, ldb, sB,
                                                               beta, C, ldc, sC, bias);
  else if (atype == blas::R_32F && btype == blas::R_16BF)
    gemm_tiled_kernel<float, __nv_bfloat16><<<grid, 256, 0, c.stream>>>(
        ta, tb, int(M), int(N), int(K), alpha, (const float*)A, lda, sA, (const __nv_bfloat16*)B, ldb, sB, beta, C,
        ldc, sC, bias);
  else if (atype == blas::R_16BF && btype == blas::R_16BF)
    gemm_tiled_kernel<__nv_bfloat16, __nv_bfloat16><<<grid, 256, 0, c.stream>>>(
        ta, tb, int(M), int(N), int(K), alpha, (const __nv_bfloat16*)A, lda, sA, (const __nv_bfloat16*)B, ldb, sB,
        beta, C, ldc, sC, bias);
  else
    fail("gemm: unsupported operand types");
  check_launch("gemm_tiled_kernel");
}

// A fp32 (rows × lda extent) → bf16 copy in scratch slot `slot` (same strides).
const uint16_t* to_bf16_scratch(int slot, const float* A, int64_t rows, int64_t cols, int64_t ld) {
  int64_t n = rows == 0 ? 0 : (rows - 1) * ld + cols;
  auto* dst = static_cast<uint16_t*>(scratch(slot, size_t(n) * 2));
  convert_f32_to_bf16(n, A, dst);
  return dst;
}

}  // namespace

void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  gemm_rm(ta, tb, M, N, K, alpha, A, blas::R_32F, lda, 0, B, blas::R_32F, ldb, 0, beta, C, ldc, 0, 1, nullptr);
}

void sgemm_batched(bool ta, bool tb, int64_t batch, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                   int64_t lda, int64_t strideA, const float* B, int64_t ldb, int64_t strideB, float beta, float* C,
                   int64_t ldc, int64_t strideC) {
  gemm_rm(ta, tb, M, N, K, alpha, A, blas::R_32F, lda, strideA, B, blas::R_32F, ldb, strideB, beta, C, ldc, strideC,
          batch, nullptr);
}

void gemm_bf16w(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  Context& c = ctx();
  if (c.backend == GemmBackend::Kernel) {
    gemm_rm(ta, tb, M, N, K, alpha, A, blas::R_32F, lda, 0, B, blas::R_16BF, ldb, 0, beta, C, ldc, 0, 1, nullptr);
    return;
  }
  const uint16_t* a16 = to_bf16_scratch(0, A, ta ? K : M, ta ? M : K, lda);
  gemm_rm(ta, tb, M, N, K, alpha, a16, blas::R_16BF, lda, 0, B, blas::R_16BF, ldb, 0, beta, C, ldc, 0, 1, nullptr);
}

void linear(int wtype, int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const void* w, int64_t ldw,
            const float* bias, float* y, int64_t ldy, float beta) {
  require(wtype == W_F32 || wtype == W_BF16, "linear: weight dtype must be f32 or bf16");
  require(ldx >= K && ldw >= K && ldy >= N, "linear: row strides smaller than the rows");
  Context& c = ctx();
  if (wtype == W_F32) {
    gemm_rm(false, true, M, N, K, 1.f, x, blas::R_32F, ldx, 0, w, blas::R_32F, ldw, 0, beta, y, ldy, 0, 1, bias);
  } else if (c.backend == GemmBackend::Kernel) {
    gemm_rm(false, true, M, N, K, 1.f, x, blas::R_32F, ldx, 0, w, blas::R_16BF, ldw, 0, beta, y, ldy, 0, 1, bias);
  } else {
    const uint16_t* x16 = to_bf16_scratch(0, x, M, K, ldx);
    gemm_rm(false, true, M, N, K, 1.f, x16, blas::R_16BF, ldx, 0, w, blas::R_16BF, ldw, 0, beta, y, ldy, 0, 1, bias);
  }
}

}  // namespace loom::cuda
