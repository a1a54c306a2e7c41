// GEMM on the GPU vs a CPU reference (double accumulation), on every backend this machine has
// (cuBLASLt, cuBLAS, Loom's kernel): the linear layout y = x·Wᵀ + b with fp32 and bf16 weights,
// all four transposes of sgemm with alpha/beta, strided batches, odd sizes and M = 1.
#include "test_util.h"

using namespace lt;
namespace lc = loom::cuda;

// C = alpha op(A) op(B) + beta C (row-major), reference.
static void ref_gemm(bool ta, bool tb, int M, int N, int K, float alpha, const std::vector<float>& A, int lda,
                     const std::vector<float>& B, int ldb, float beta, std::vector<float>& C, int ldc,
                     const float* bias = nullptr) {
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double s = 0;
      for (int k = 0; k < K; k++) {
        double a = ta ? A[size_t(k) * lda + i] : A[size_t(i) * lda + k];
        double b = tb ? B[size_t(j) * ldb + k] : B[size_t(k) * ldb + j];
        s += a * b;
      }
      double c = alpha * s + (bias ? bias[j] : 0.0);
      if (beta != 0.f) c += double(beta) * C[size_t(i) * ldc + j];
      C[size_t(i) * ldc + j] = float(c);
    }
}

static void run_backend(lc::GemmBackend be) {
  lc::gemm_backend_set(be);
  const std::string tag = std::string("[") + lc::gemm_backend_name(be) + "] ";
  struct S { int M, N, K; };
  const S shapes[] = {{1, 576, 576}, {7, 33, 19}, {128, 130, 67}, {3, 1, 5}, {64, 1536, 576}, {1, 4097, 31},
                      {33, 8, 1}};
  for (const S& s : shapes) {
    for (int variant = 0; variant < 4; variant++) {
      bool with_bias = variant & 1, beta1 = variant & 2;
      int ldx = s.K + (variant == 3 ? 3 : 0), ldy = s.N + (variant == 3 ? 5 : 0);
      auto x = randn(size_t(s.M) * ldx), w = randn(size_t(s.N) * s.K, 0.1f), b = randn(s.N);
      auto y0 = randn(size_t(s.M) * ldy);
      std::string name = tag + "linear f32 M=" + std::to_string(s.M) + " N=" + std::to_string(s.N) +
                         " K=" + std::to_string(s.K) + (with_bias ? " bias" : "") + (beta1 ? " beta=1" : "");
      // fp32
      {
        Dev<float> dx(x), dw(w), db(b), dy(y0);
        lc::linear(lc::W_F32, s.M, s.N, s.K, dx.p, ldx, dw.p, s.K, with_bias ? db.p : nullptr, dy.p, ldy,
                   beta1 ? 1.f : 0.f);
        std::vector<float> ref = y0;
        ref_gemm(false, true, s.M, s.N, s.K, 1.f, x, ldx, w, s.K, beta1 ? 1.f : 0.f, ref, ldy,
                 with_bias ? b.data() : nullptr);
        close(name, dy.get(), ref, 1e-4 * std::sqrt(double(s.K)), 1e-4);
      }
      // bf16 weights
      {
        std::vector<uint16_t> w16(w.size());
        std::vector<float> wr(w.size());
        for (size_t i = 0; i < w.size(); i++) wr[i] = from_bf16(w16[i] = to_bf16(w[i]));
        // cuBLAS paths round x to bf16 too; Loom's kernel widens the weights and keeps x in fp32.
        std::vector<float> xr = x;
        if (be != lc::GemmBackend::Kernel)
          for (auto& v : xr) v = round_bf16(v);
        Dev<float> dx(x), db(b), dy(y0);
        Dev<uint16_t> dw(w16);
        lc::linear(lc::W_BF16, s.M, s.N, s.K, dx.p, ldx, dw.p, s.K, with_bias ? db.p : nullptr, dy.p, ldy,
                   beta1 ? 1.f : 0.f);
        std::vector<float> ref = y0;
        ref_gemm(false, true, s.M, s.N, s.K, 1.f, xr, ldx, wr, s.K, beta1 ? 1.f : 0.f, ref, ldy,
                 with_bias ? b.data() : nullptr);
        close(name + " (bf16 W)", dy.get(), ref, 2e-4 * std::sqrt(double(s.K)), 1e-3);
      }
    }
  }
  // sgemm: all transposes, alpha and beta.
  for (int t = 0; t < 4; t++) {
    bool ta = t & 1, tb = t & 2;
    int M = randint(1, 70), N = randint(1, 90), K = randint(1, 150);
    int lda = (ta ? M : K) + randint(0, 3), ldb = (tb ? K : N) + randint(0, 3), ldc = N + randint(0, 3);
    auto A = randn(size_t(ta ? K : M) * lda), B = randn(size_t(tb ? N : K) * ldb), C = randn(size_t(M) * ldc);
    Dev<float> dA(A), dB(B), dC(C);
    lc::sgemm(ta, tb, M, N, K, 0.7f, dA.p, lda, dB.p, ldb, 1.f, dC.p, ldc);
    std::vector<float> ref = C;
    ref_gemm(ta, tb, M, N, K, 0.7f, A, lda, B, ldb, 1.f, ref, ldc);
    close(tag + "sgemm ta=" + std::to_string(ta) + " tb=" + std::to_string(tb), dC.get(), ref,
          1e-4 * std::sqrt(double(K)), 1e-4);
    // the same with bf16 B
    std::vector<uint16_t> B16(B.size());
    std::vector<float> Br(B.size()), Ar = A;
    for (size_t i = 0; i < B.size(); i++) Br[i] = from_bf16(B16[i] = to_bf16(B[i]));
    if (be != lc::GemmBackend::Kernel)
      for (auto& v : Ar) v = round_bf16(v);
    Dev<uint16_t> dB16(B16);
    dC.set(C);
    lc::gemm_bf16w(ta, tb, M, N, K, 0.7f, dA.p, lda, dB16.p, ldb, 1.f, dC.p, ldc);
    ref = C;
    ref_gemm(ta, tb, M, N, K, 0.7f, Ar, lda, Br, ldb, 1.f, ref, ldc);
    close(tag + "gemm_bf16w ta=" + std::to_string(ta) + " tb=" + std::to_string(tb), dC.get(), ref,
          2e-4 * std::sqrt(double(K)), 1e-3);
  }
  // strided batches (attention-style per-head products)
  for (int t = 0; t < 4; t++) {
    bool ta = t & 1, tb = t & 2;
    int batch = 5, M = 17, N = 23, K = 40;
    int lda = ta ? M : K, ldb = tb ? K : N, ldc = N;
    int64_t sA = int64_t(ta ? K : M) * lda + 7, sB = int64_t(tb ? N : K) * ldb + 3, sC = int64_t(M) * ldc + 1;
    auto A = randn(size_t(sA * batch)), B = randn(size_t(sB * batch)), C = randn(size_t(sC * batch));
    Dev<float> dA(A), dB(B), dC(C);
    lc::sgemm_batched(ta, tb, batch, M, N, K, 1.f, dA.p, lda, sA, dB.p, ldb, sB, 0.f, dC.p, ldc, sC);
    std::vector<float> got = dC.get(), ref = C;
    for (int z = 0; z < batch; z++) {
      std::vector<float> Az(A.begin() + z * sA, A.begin() + (z + 1) * sA), Bz(B.begin() + z * sB, B.begin() + (z + 1) * sB);
      std::vector<float> Cz(size_t(sC), 0.f);
      ref_gemm(ta, tb, M, N, K, 1.f, Az, lda, Bz, ldb, 0.f, Cz, ldc);
      for (int i = 0; i < M * ldc; i++) ref[z * sC + i] = Cz[i];
    }
    close(tag + "sgemm_batched ta=" + std::to_string(ta) + " tb=" + std::to_string(tb), got, ref, 1e-3, 1e-4);
  }
  // TF32 (looser): only meaningful on the cuBLAS paths; checks it runs and stays close.
  if (be != lc::GemmBackend::Kernel) {
    lc::tf32_set(true);
    int M = 96, N = 80, K = 256;
    auto x = randn(size_t(M) * K), w = randn(size_t(N) * K, 0.1f);
    Dev<float> dx(x), dw(w), dy(size_t(M) * N);
    lc::linear(lc::W_F32, M, N, K, dx.p, K, dw.p, K, nullptr, dy.p, N);
    std::vector<float> ref(size_t(M) * N);
    ref_gemm(false, true, M, N, K, 1.f, x, K, w, K, 0.f, ref, N);
    close(tag + "linear tf32", dy.get(), ref, 2e-2, 1e-2);
    lc::tf32_set(false);
  }
}

int main() {
  require_gpu("test_gemm");
  for (lc::GemmBackend be : {lc::GemmBackend::Lt, lc::GemmBackend::Cublas, lc::GemmBackend::Kernel}) {
    if (!lc::gemm_backend_supported(be)) {
      std::printf("test_gemm: backend %s not available, skipped\n", lc::gemm_backend_name(be));
      continue;
    }
    run_backend(be);
  }
  lc::synchronize();
  return finish("test_gemm");
}
