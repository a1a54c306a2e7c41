// Attention, portable path: the tiled online-softmax algorithm of attention_impl.h over plain
// scalar loops (the reference the SIMD paths are tested against).
#include <cmath>
#include <cstdlib>
#include <limits>
#include <new>
#include <stdexcept>
#include "loom/core.h"
#include "loom/ops.h"
#include "ops_table.h"

namespace loom::portable {
namespace {

#include "attention_impl.h"

struct ScalarPrims {
  static float dot(const float* a, const float* b, int64_t n) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++) s += a[i] * b[i];
    return s;
  }
  static void axpy(float a, const float* x, float* y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
  }
  static void scal(float* x, float s, int64_t n) {
    for (int64_t i = 0; i < n; i++) x[i] *= s;
  }
  static void rows_dot(int64_t nr, const float* q, const float* K, int64_t ldk, int64_t n, float* out) {
    for (int64_t j = 0; j < nr; j++) out[j] = dot(q, K + j * ldk, n);
  }
  static void rows_axpy(int64_t nr, const float* p, const float* V, int64_t ldv, int64_t n, float* acc) {
    for (int64_t j = 0; j < nr; j++)
      if (p[j] != 0.0f) axpy(p[j], V + j * ldv, acc, n);
  }
  static float exp_sub(float x) { return std::exp(x); }
  static float exp_sub_sum(float* s, int64_t nr, float m) {
    float sum = 0.0f;
    for (int64_t j = 0; j < nr; j++) {
      float e = std::exp(s[j] - m);  // exp(-inf) = 0
      s[j] = e;
      sum += e;
    }
    return sum;
  }
};

}  // namespace

void attention_fwd(const AttnParams& p, const float* q, const float* k, const float* v, float* out, float* lse) {
  attn_detail::forward<ScalarPrims>(p, q, k, v, out, lse);
}
void attention_bwd(const AttnParams& p, const float* q, const float* k, const float* v, const float* out,
                   const float* lse, const float* dout, float* dq, float* dk, float* dv, float* dbias) {
  attn_detail::backward<ScalarPrims>(p, q, k, v, out, lse, dout, dq, dk, dv, dbias);
}

}  // namespace loom::portable
