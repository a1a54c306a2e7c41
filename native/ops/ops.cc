// Neural-network ops: the portable reference kernels (plain loops, llm.c style) and the public
// drivers of loom/ops.h, which split work over the thread pool and call the active ISA's kernel
// through the OpsTable (see ops_table.h).
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>
#include "loom/gemm.h"
#include "loom/ops.h"
#include "ops_table.h"

namespace loom {

// =============================================================================================
// Portable reference kernels
// =============================================================================================
namespace portable {
namespace {

// ---- elementwise ----------------------------------------------------------------------------
void add_fwd(int64_t n, const float* a, const float* b, float* y) {
  for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}
void mul_fwd(int64_t n, const float* a, const float* b, float* y) {
  for (int64_t i = 0; i < n; i++) y[i] = a[i] * b[i];
}
void mul_bwd(int64_t n, const float* a, const float* b, const float* dy, float* da, float* db) {
  for (int64_t i = 0; i < n; i++) {
    float g = dy[i];
    if (da) da[i] += g * b[i];
    if (db) db[i] += g * a[i];
  }
}
void scale_fwd(int64_t n, const float* x, float s, float* y) {
  for (int64_t i = 0; i < n; i++) y[i] = s * x[i];
}
void axpy(int64_t n, float a, const float* x, float* y) {
  for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}
static inline float widen(float v) { return v; }
static inline float widen(uint16_t h) { return bf16_to_f32(h); }
template <class BT>
void lora_b_rows_t(int64_t M, int64_t N, int64_t r, const float* a, const BT* b, float* y, int64_t ldy) {
  for (int64_t m = 0; m < M; m++)
    for (int64_t i = 0; i < N; i++) {
      float acc = y[m * ldy + i];
      for (int64_t k = 0; k < r; k++) acc += a[m * r + k] * widen(b[k * N + i]);
      y[m * ldy + i] = acc;
    }
}
void lora_b_rows(int64_t M, int64_t N, int64_t r, const float* a, const float* b, float* y, int64_t ldy) {
  lora_b_rows_t(M, N, r, a, b, y, ldy);
}
void lora_b_rows_bf16(int64_t M, int64_t N, int64_t r, const float* a, const uint16_t* b, float* y, int64_t ldy) {
  lora_b_rows_t(M, N, r, a, b, y, ldy);
}
// x (R, D) += b (D)
void add_bias(int64_t R, int64_t D, float* x, const float* b) {
  for (int64_t r = 0; r < R; r++)
    for (int64_t d = 0; d < D; d++) x[r * D + d] += b[d];
}
// db (D) += sum_r dy (R, D)
void bias_bwd(int64_t R, int64_t D, const float* dy, float* db) {
  for (int64_t r = 0; r < R; r++)
    for (int64_t d = 0; d < D; d++) db[d] += dy[r * D + d];
}

// ---- normalization --------------------------------------------------------------------------
// x, y (R, D); mean, rstd (R)
void layernorm_fwd(int64_t R, int64_t D, const float* x, const float* w, const float* b, float eps, float* y,
                   float* mean, float* rstd) {
  for (int64_t r = 0; r < R; r++) {
    const float* xr = x + r * D;
    float* yr = y + r * D;
    double s = 0;
    for (int64_t d = 0; d < D; d++) s += xr[d];
    float m = float(s / D);
    double v = 0;
    for (int64_t d = 0; d < D; d++) {
      double c = double(xr[d]) - m;
      v += c * c;
    }
    float rs = float(1.0 / std::sqrt(v / D + eps));
    for (int64_t d = 0; d < D; d++) {
      float o = (xr[d] - m) * rs;
      if (w) o *= w[d];
      if (b) o += b[d];
      yr[d] = o;
    }
    if (mean) mean[r] = m;
    if (rstd) rstd[r] = rs;
  }
}
// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w ; dw += dy * xhat ; db += dy
void layernorm_bwd(int64_t R, int64_t D, const float* x, const float* w, const float* mean, const float* rstd,
                   const float* dy, float* dx, float* dw, float* db) {
  for (int64_t r = 0; r < R; r++) {
    const float* xr = x + r * D;
    const float* gr = dy + r * D;
    float m = mean[r], rs = rstd[r];
    double sg = 0, sgx = 0;
    for (int64_t d = 0; d < D; d++) {
      float xh = (xr[d] - m) * rs;
      float g = w ? gr[d] * w[d] : gr[d];
      sg += g;
      sgx += double(g) * xh;
      if (dw) dw[d] += gr[d] * xh;
      if (db) db[d] += gr[d];
    }
    if (dx) {
      float mg = float(sg / D), mgx = float(sgx / D);
      float* dxr = dx + r * D;
      for (int64_t d = 0; d < D; d++) {
        float xh = (xr[d] - m) * rs;
        float g = w ? gr[d] * w[d] : gr[d];
        dxr[d] = rs * (g - mg - xh * mgx);
      }
    }
  }
}
void rmsnorm_fwd(int64_t R, int64_t D, const float* x, const float* w, float eps, float* y, float* rstd) {
  for (int64_t r = 0; r < R; r++) {
    const float* xr = x + r * D;
    float* yr = y + r * D;
    double ss = 0;
    for (int64_t d = 0; d < D; d++) ss += double(xr[d]) * xr[d];
    float rs = float(1.0 / std::sqrt(ss / D + eps));
    for (int64_t d = 0; d < D; d++) yr[d] = w ? (xr[d] * rs) * w[d] : xr[d] * rs;
    if (rstd) rstd[r] = rs;
  }
}
// y = x * rs * w: dx = rs * (g - xhat * mean(g * xhat)), g = dy * w ; dw += dy * xhat
void rmsnorm_bwd(int64_t R, int64_t D, const float* x, const float* w, const float* rstd, const float* dy, float* dx,
                 float* dw) {
  for (int64_t r = 0; r < R; r++) {
    const float* xr = x + r * D;
    const float* gr = dy + r * D;
    float rs = rstd[r];
    double sgx = 0;
    for (int64_t d = 0; d < D; d++) {
      float xh = xr[d] * rs;
      float g = w ? gr[d] * w[d] : gr[d];
      sgx += double(g) * xh;
      if (dw) dw[d] += gr[d] * xh;
    }
    if (dx) {
      float mgx = float(sgx / D);
      float* dxr = dx + r * D;
      for (int64_t d = 0; d < D; d++) {
        float xh = xr[d] * rs;
        float g = w ? gr[d] * w[d] : gr[d];
        dxr[d] = rs * (g - xh * mgx);
      }
    }
  }
}

// ---- softmax --------------------------------------------------------------------------------
void softmax_fwd(int64_t R, int64_t D, const float* x, float* y) {
  for (int64_t r = 0; r < R; r++) {
    const float* xr = x + r * D;
    float* yr = y + r * D;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t d = 0; d < D; d++) mx = std::max(mx, xr[d]);
    if (mx == -std::numeric_limits<float>::infinity()) {  // all -inf: define as zeros
      for (int64_t d = 0; d < D; d++) yr[d] = 0.0f;
      continue;
    }
    double s = 0;
    for (int64_t d = 0; d < D; d++) {
      float e = std::exp(xr[d] - mx);
      yr[d] = e;
      s += e;
    }
    float inv = float(1.0 / s);
    for (int64_t d = 0; d < D; d++) yr[d] *= inv;
  }
}
void softmax_bwd(int64_t R, int64_t D, const float* y, const float* dy, float* dx) {
  for (int64_t r = 0; r < R; r++) {
    const float* yr = y + r * D;
    const float* gr = dy + r * D;
    float* dxr = dx + r * D;
    double s = 0;
    for (int64_t d = 0; d < D; d++) s += double(yr[d]) * gr[d];
    float fs = float(s);
    for (int64_t d = 0; d < D; d++) dxr[d] = yr[d] * (gr[d] - fs);
  }
}
void log_softmax_fwd(int64_t R, int64_t D, const float* x, float* y) {
  for (int64_t r = 0; r < R; r++) {
    const float* xr = x + r * D;
    float* yr = y + r * D;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t d = 0; d < D; d++) mx = std::max(mx, xr[d]);
    double s = 0;
    for (int64_t d = 0; d < D; d++) s += std::exp(double(xr[d]) - mx);
    float lse = mx + float(std::log(s));
    for (int64_t d = 0; d < D; d++) yr[d] = xr[d] - lse;
  }
}

// ---- activations ----------------------------------------------------------------------------
constexpr double kSqrt1_2 = 0.70710678118654752440;
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1/sqrt(2π)
constexpr double kSqrt2_Pi = 0.79788456080286535588;    // sqrt(2/π)
constexpr double kGeluC = 0.044715;

// exact: 0.5 x (1 + erf(x/√2)) = 0.5 x erfc(-x/√2) (no cancellation for negative x)
// tanh:  0.5 x (1 + tanh(u)) = x · sigmoid(2u), u = √(2/π)(x + 0.044715 x³)
void gelu_fwd(int64_t n, const float* x, float* y, bool approx) {
  for (int64_t i = 0; i < n; i++) {
    double v = x[i];
    if (approx) {
      double u = kSqrt2_Pi * (v + kGeluC * v * v * v);
      y[i] = float(v / (1.0 + std::exp(-2.0 * u)));
    } else {
      y[i] = float(0.5 * v * std::erfc(-v * kSqrt1_2));
    }
  }
}
void gelu_bwd(int64_t n, const float* x, const float* dy, float* dx, bool approx) {
  for (int64_t i = 0; i < n; i++) {
    double v = x[i], g;
    if (approx) {
      double u = kSqrt2_Pi * (v + kGeluC * v * v * v);
      double s = 1.0 / (1.0 + std::exp(-2.0 * u));
      double du = kSqrt2_Pi * (1.0 + 3.0 * kGeluC * v * v);
      g = s + v * 2.0 * s * (1.0 - s) * du;
    } else {
      g = 0.5 * std::erfc(-v * kSqrt1_2) + v * kInvSqrt2Pi * std::exp(-0.5 * v * v);
    }
    dx[i] = float(dy[i] * g);
  }
}
void silu_fwd(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; i++) y[i] = x[i] / (1.0f + std::exp(-x[i]));
}
// d silu = s (1 + x (1 - s))
void silu_bwd(int64_t n, const float* x, const float* dy, float* dx) {
  for (int64_t i = 0; i < n; i++) {
    float s = 1.0f / (1.0f + std::exp(-x[i]));
    dx[i] = dy[i] * s * (1.0f + x[i] * (1.0f - s));
  }
}
void swiglu_fwd(int64_t n, const float* gate, const float* up, float* y) {
  for (int64_t i = 0; i < n; i++) y[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}
void swiglu_bwd(int64_t n, const float* gate, const float* up, const float* dy, float* dgate, float* dup) {
  for (int64_t i = 0; i < n; i++) {
    float gv = gate[i], s = 1.0f / (1.0f + std::exp(-gv));
    float si = gv * s;
    float g = dy[i];
    float dg = g * up[i] * s * (1.0f + gv * (1.0f - s));
    if (dup) dup[i] = g * si;
    if (dgate) dgate[i] = dg;
  }
}

// ---- RoPE -----------------------------------------------------------------------------------
// x (H, Dh) of one token; cs = [cos (Dh/2), sin (Dh/2)]
void rope_rotate(int64_t H, int64_t Dh, const float* cs, float* x) {
  int64_t half = Dh / 2;
  const float* c = cs;
  const float* s = cs + half;
  for (int64_t h = 0; h < H; h++) {
    float* xh = x + h * Dh;
    for (int64_t i = 0; i < half; i++) {
      float a = xh[i], b = xh[i + half];
      xh[i] = a * c[i] - b * s[i];
      xh[i + half] = b * c[i] + a * s[i];
    }
  }
}

// ---- cross-entropy --------------------------------------------------------------------------
void cross_entropy_rows(int64_t R, int64_t V, const float* logits, const int32_t* labels, float inv_count,
                        float* dlogits, float* losses) {
  for (int64_t r = 0; r < R; r++) {
    const float* xr = logits + r * V;
    int32_t lab = labels[r];
    if (lab < 0) {
      losses[r] = 0.0f;
      if (dlogits) std::fill(dlogits + r * V, dlogits + (r + 1) * V, 0.0f);
      continue;
    }
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < V; j++) mx = std::max(mx, xr[j]);
    double s = 0;
    for (int64_t j = 0; j < V; j++) s += std::exp(double(xr[j]) - mx);
    double lse = mx + std::log(s);
    losses[r] = float(lse - xr[lab]);
    if (dlogits) {
      float* dr = dlogits + r * V;
      float inv = float(1.0 / s);
      for (int64_t j = 0; j < V; j++) dr[j] = std::exp(xr[j] - mx) * inv * inv_count;
      dr[lab] -= inv_count;
    }
  }
}

// ---- optimizer ------------------------------------------------------------------------------
// PyTorch AdamW (single-tensor path): p *= 1 - lr wd ; m.lerp_(g, 1-b1) ; v = b2 v + (1-b2) g² ;
// denom = sqrt(v) / sqrt(bc2) + eps ; p -= (lr / bc1) m / denom
void adamw_step(int64_t n, float* p, const float* g, float* m, float* v, const AdamwScalars& c) {
  for (int64_t i = 0; i < n; i++) {
    float gi = g[i] * c.gscale;
    float mi = m[i] + c.omb1 * (gi - m[i]);
    float vi = v[i] * c.b2 + c.omb2 * (gi * gi);
    m[i] = mi;
    v[i] = vi;
    float denom = std::sqrt(vi) / c.bc2s + c.eps;
    p[i] = p[i] * c.decay - c.step_size * (mi / denom);
  }
}
double sum_squares(int64_t n, const float* g) {
  double s = 0;
  for (int64_t i = 0; i < n; i++) s += double(g[i]) * g[i];
  return s;
}
int64_t argmax(int64_t n, const float* x) {
  int64_t best = -1;
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; i++)
    if (x[i] > mx) mx = x[i], best = i;
  return best;
}

}  // namespace

const OpsTable& ops_table() {
  static const OpsTable t = [] {
    OpsTable t{};
    t.add_fwd = add_fwd;
    t.mul_fwd = mul_fwd;
    t.mul_bwd = mul_bwd;
    t.scale_fwd = scale_fwd;
    t.axpy = axpy;
    t.lora_b_rows = lora_b_rows;
    t.lora_b_rows_bf16 = lora_b_rows_bf16;
    t.add_bias = add_bias;
    t.bias_bwd = bias_bwd;
    t.layernorm_fwd = layernorm_fwd;
    t.layernorm_bwd = layernorm_bwd;
    t.rmsnorm_fwd = rmsnorm_fwd;
    t.rmsnorm_bwd = rmsnorm_bwd;
    t.softmax_fwd = softmax_fwd;
    t.softmax_bwd = softmax_bwd;
    t.log_softmax_fwd = log_softmax_fwd;
    t.gelu_fwd = gelu_fwd;
    t.gelu_bwd = gelu_bwd;
    t.silu_fwd = silu_fwd;
    t.silu_bwd = silu_bwd;
    t.swiglu_fwd = swiglu_fwd;
    t.swiglu_bwd = swiglu_bwd;
    t.rope_rotate = rope_rotate;
    t.cross_entropy_rows = cross_entropy_rows;
    t.adamw_step = adamw_step;
    t.sum_squares = sum_squares;
    t.argmax = argmax;
    t.attention_fwd = portable::attention_fwd;
    t.attention_bwd = portable::attention_bwd;
    return t;
  }();
  return t;
}

}  // namespace portable

// =============================================================================================
// Public drivers
// =============================================================================================
namespace {

const OpsTable& K() {
  switch (isa_active()) {
    case Isa::Avx512: return avx512::ops_table();
    case Isa::Avx2: return avx2::ops_table();
    default: return portable::ops_table();
  }
}

}  // namespace

const OpsTable& ops_active() { return K(); }

namespace {

constexpr int64_t kElemGrain = 1 << 14;  // elements per task for elementwise ops
inline int64_t row_grain(int64_t D) { return std::max<int64_t>(1, (1 << 13) / std::max<int64_t>(D, 1)); }

template <typename F>
void elementwise(int64_t n, F&& f) {
  if (n <= 0) return;
  if (n <= kElemGrain) return f(int64_t(0), n);
  parallel_for(n, kElemGrain, [&](int64_t b, int64_t e) { f(b, e); });
}

// Runs f(r0, r1, acc) over row blocks, each thread with a private zeroed accumulator of `nacc`
// floats (thread 0 uses `out` directly), then adds the private accumulators into `out`.
// With out == nullptr, f gets nullptr.
template <typename F>
void rows_reduce(int64_t R, int64_t grain, int64_t nacc, float* out, F&& f) {
  if (R <= 0) return;
  int64_t maxtasks = (R + grain - 1) / grain;
  int nth = int(std::min<int64_t>(threads_get(), maxtasks));
  if (nth <= 1) return f(int64_t(0), R, out);
  std::vector<float> part(out ? size_t(nth - 1) * size_t(nacc) : 0, 0.0f);
  pool_run(nth, [&](int tid, int n) {
    int64_t r0 = R * tid / n, r1 = R * (tid + 1) / n;
    float* acc = out ? (tid == 0 ? out : part.data() + size_t(tid - 1) * nacc) : nullptr;
    if (r1 > r0) f(r0, r1, acc);
  });
  if (out)
    for (int t = 0; t < nth - 1; t++)
      for (int64_t i = 0; i < nacc; i++) out[i] += part[size_t(t) * nacc + i];
}

}  // namespace

// ---- elementwise ----------------------------------------------------------------------------
void add_fwd(int64_t n, const float* a, const float* b, float* y) {
  auto f = K().add_fwd;
  elementwise(n, [&](int64_t i, int64_t e) { f(e - i, a + i, b + i, y + i); });
}
void mul_fwd(int64_t n, const float* a, const float* b, float* y) {
  auto f = K().mul_fwd;
  elementwise(n, [&](int64_t i, int64_t e) { f(e - i, a + i, b + i, y + i); });
}
void mul_bwd(int64_t n, const float* a, const float* b, const float* dy, float* da, float* db) {
  auto f = K().mul_bwd;
  elementwise(n, [&](int64_t i, int64_t e) { f(e - i, a + i, b + i, dy + i, da ? da + i : nullptr, db ? db + i : nullptr); });
}
void scale_fwd(int64_t n, const float* x, float s, float* y) {
  auto f = K().scale_fwd;
  elementwise(n, [&](int64_t i, int64_t e) { f(e - i, x + i, s, y + i); });
}
void lora_b_rows(int64_t M, int64_t N, int64_t r, const float* a, const float* b, float* y, int64_t ldy) {
  K().lora_b_rows(M, N, r, a, b, y, ldy);
}
void lora_b_rows(int64_t M, int64_t N, int64_t r, const float* a, const uint16_t* b, float* y, int64_t ldy) {
  K().lora_b_rows_bf16(M, N, r, a, b, y, ldy);
}
void axpy(int64_t n, float a, const float* x, float* y) {
  auto f = K().axpy;
  elementwise(n, [&](int64_t i, int64_t e) { f(e - i, a, x + i, y + i); });
}
void add_bias(int64_t R, int64_t D, float* x, const float* b) {
  auto f = K().add_bias;
  if (R * D <= kElemGrain) return f(R, D, x, b);
  parallel_for(R, row_grain(D), [&](int64_t r0, int64_t r1) { f(r1 - r0, D, x + r0 * D, b); });
}
void bias_bwd(int64_t R, int64_t D, const float* dy, float* db) {
  auto f = K().bias_bwd;
  if (R * D <= kElemGrain) return f(R, D, dy, db);
  rows_reduce(R, row_grain(D), D, db, [&](int64_t r0, int64_t r1, float* acc) { f(r1 - r0, D, dy + r0 * D, acc); });
}

// ---- embedding ------------------------------------------------------------------------------
namespace {
// The table dtypes an embedding reads (fp32, bf16, f16); `op` names the caller in the error.
void table_dtype_check(const char* op, DType ttype) {
  if (ttype != DType::F32 && ttype != DType::BF16 && ttype != DType::F16)
    throw std::invalid_argument(std::string(op) + ": unsupported table dtype " + dtype_name(ttype));
}
// dst (D) = row id of table (V, D) in fp32
void table_row(DType ttype, const void* table, int64_t id, int64_t D, float* dst) {
  if (ttype == DType::F32) std::memcpy(dst, static_cast<const float*>(table) + id * D, size_t(D) * 4);
  else if (ttype == DType::BF16) convert_bf16_to_f32(D, static_cast<const uint16_t*>(table) + id * D, dst);
  else convert_f16_to_f32(D, static_cast<const uint16_t*>(table) + id * D, dst);
}
// The column grain of a scatter-add into a table: parallel over column slices of D, so repeated ids never race.
int64_t scatter_grain(int64_t T, int64_t D) {
  return T * D < kElemGrain ? D : std::max<int64_t>(16, D / std::max(1, threads_get()));
}
}  // namespace

void embedding_fwd(int64_t T, int64_t D, const int32_t* ids, DType ttype, const void* table, float* out) {
  table_dtype_check("embedding_fwd", ttype);
  parallel_for(T, row_grain(D), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; t++) table_row(ttype, table, ids[t], D, out + t * D);
  });
}
void embedding_bwd(int64_t T, int64_t D, const int32_t* ids, const float* dout, float* dtable) {
  parallel_for(D, scatter_grain(T, D), [&](int64_t d0, int64_t d1) {
    for (int64_t t = 0; t < T; t++) {
      const float* g = dout + t * D;
      float* o = dtable + int64_t(ids[t]) * D;
      for (int64_t d = d0; d < d1; d++) o[d] += g[d];
    }
  });
}

// ---- word features (rows added to the token embeddings) ------------------------------------
void word_feature_fwd(int64_t T, int64_t D, int64_t K, const int32_t* fids, const float* table, float* out) {
  parallel_for(T, row_grain(D), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; t++)
      for (int64_t k = 0; k < K; k++) {
        const int32_t r = fids[t * K + k];
        if (r < 0) continue;
        const float* w = table + int64_t(r) * D;
        float* o = out + t * D;
        for (int64_t d = 0; d < D; d++) o[d] += w[d];
      }
  });
}
void word_feature_bwd(int64_t T, int64_t D, int64_t K, const int32_t* fids, const float* dout, float* dtable) {
  parallel_for(D, scatter_grain(T, D), [&](int64_t d0, int64_t d1) {
    for (int64_t t = 0; t < T; t++)
      for (int64_t k = 0; k < K; k++) {
        const int32_t r = fids[t * K + k];
        if (r < 0) continue;
        const float* g = dout + t * D;
        float* o = dtable + int64_t(r) * D;
        for (int64_t d = d0; d < d1; d++) o[d] += g[d];
      }
  });
}

// ---- label bags (the mean of a label's piece embeddings added to its [L] row) -----------------------
namespace {
int64_t bag_count(int64_t K, const int32_t* b) {
  int64_t n = 0;
  for (int64_t k = 0; k < K; k++) n += b[k] >= 0;
  return n;
}
}  // namespace
void bag_embedding_fwd(int64_t T, int64_t D, int64_t K, const int32_t* bag, DType ttype, const void* table,
                       float* out) {
  table_dtype_check("bag_embedding_fwd", ttype);
  parallel_for(T, row_grain(D), [&](int64_t t0, int64_t t1) {
    std::vector<float> row(ttype == DType::F32 ? 0 : size_t(D));
    for (int64_t t = t0; t < t1; t++) {
      const int32_t* b = bag + t * K;
      const int64_t n = bag_count(K, b);
      if (!n) continue;
      const float s = 1.0f / float(n);
      float* o = out + t * D;
      for (int64_t k = 0; k < K; k++) {
        if (b[k] < 0) continue;
        const float* w = row.data();  // an fp32 table is read in place, others converted a row at a time
        if (ttype == DType::F32) w = static_cast<const float*>(table) + int64_t(b[k]) * D;
        else table_row(ttype, table, b[k], D, row.data());
        for (int64_t d = 0; d < D; d++) o[d] += s * w[d];
      }
    }
  });
}
void bag_embedding_bwd(int64_t T, int64_t D, int64_t K, const int32_t* bag, const float* dout, float* dtable) {
  parallel_for(D, scatter_grain(T, D), [&](int64_t d0, int64_t d1) {
    for (int64_t t = 0; t < T; t++) {
      const int32_t* b = bag + t * K;
      const int64_t n = bag_count(K, b);
      if (!n) continue;
      const float s = 1.0f / float(n);
      const float* g = dout + t * D;
      for (int64_t k = 0; k < K; k++) {
        if (b[k] < 0) continue;
        float* o = dtable + int64_t(b[k]) * D;
        for (int64_t d = d0; d < d1; d++) o[d] += s * g[d];
      }
    }
  });
}

// ---- normalization --------------------------------------------------------------------------
void layernorm_fwd(int64_t R, int64_t D, const float* x, const float* w, const float* b, float eps, float* y,
                   float* mean, float* rstd) {
  auto f = K().layernorm_fwd;
  parallel_for(R, row_grain(D), [&](int64_t r0, int64_t r1) {
    f(r1 - r0, D, x + r0 * D, w, b, eps, y + r0 * D, mean ? mean + r0 : nullptr, rstd ? rstd + r0 : nullptr);
  });
}
void layernorm_bwd(int64_t R, int64_t D, const float* x, const float* w, const float* mean, const float* rstd,
                   const float* dy, float* dx, float* dw, float* db) {
  auto f = K().layernorm_bwd;
  if (!dw && !db) {
    parallel_for(R, row_grain(D), [&](int64_t r0, int64_t r1) {
      f(r1 - r0, D, x + r0 * D, w, mean + r0, rstd + r0, dy + r0 * D, dx ? dx + r0 * D : nullptr, nullptr, nullptr);
    });
    return;
  }
  // one accumulator of 2D floats per thread: [dw | db]
  std::vector<float> acc0(size_t(2 * D), 0.0f);
  rows_reduce(R, row_grain(D), 2 * D, acc0.data(), [&](int64_t r0, int64_t r1, float* acc) {
    f(r1 - r0, D, x + r0 * D, w, mean + r0, rstd + r0, dy + r0 * D, dx ? dx + r0 * D : nullptr, dw ? acc : nullptr,
      db ? acc + D : nullptr);
  });
  for (int64_t d = 0; d < D; d++) {
    if (dw) dw[d] += acc0[d];
    if (db) db[d] += acc0[D + d];
  }
}
void rmsnorm_fwd(int64_t R, int64_t D, const float* x, const float* w, float eps, float* y, float* rstd) {
  auto f = K().rmsnorm_fwd;
  // a decode step's norms (32 streams × 896: a few µs) on the calling thread: split, their waits in the pool took
  // 2.3 % of a 32-stream Qwen2.5-0.5B decode's CPU samples (2 threads, load 2.7)
  if (R * D <= 4 * kElemGrain) return f(R, D, x, w, eps, y, rstd);
  parallel_for(R, row_grain(D), [&](int64_t r0, int64_t r1) {
    f(r1 - r0, D, x + r0 * D, w, eps, y + r0 * D, rstd ? rstd + r0 : nullptr);
  });
}
void rmsnorm_bwd(int64_t R, int64_t D, const float* x, const float* w, const float* rstd, const float* dy, float* dx,
                 float* dw) {
  auto f = K().rmsnorm_bwd;
  if (!dw) {
    parallel_for(R, row_grain(D), [&](int64_t r0, int64_t r1) {
      f(r1 - r0, D, x + r0 * D, w, rstd + r0, dy + r0 * D, dx ? dx + r0 * D : nullptr, nullptr);
    });
    return;
  }
  std::vector<float> acc0(size_t(D), 0.0f);
  rows_reduce(R, row_grain(D), D, acc0.data(), [&](int64_t r0, int64_t r1, float* acc) {
    f(r1 - r0, D, x + r0 * D, w, rstd + r0, dy + r0 * D, dx ? dx + r0 * D : nullptr, acc);
  });
  for (int64_t d = 0; d < D; d++) dw[d] += acc0[d];
}

// ---- softmax --------------------------------------------------------------------------------
void softmax_fwd(int64_t R, int64_t D, const float* x, float* y) {
  auto f = K().softmax_fwd;
  parallel_for(R, row_grain(D), [&](int64_t r0, int64_t r1) { f(r1 - r0, D, x + r0 * D, y + r0 * D); });
}
void softmax_bwd(int64_t R, int64_t D, const float* y, const float* dy, float* dx) {
  auto f = K().softmax_bwd;
  parallel_for(R, row_grain(D), [&](int64_t r0, int64_t r1) { f(r1 - r0, D, y + r0 * D, dy + r0 * D, dx + r0 * D); });
}
void log_softmax_fwd(int64_t R, int64_t D, const float* x, float* y) {
  auto f = K().log_softmax_fwd;
  parallel_for(R, row_grain(D), [&](int64_t r0, int64_t r1) { f(r1 - r0, D, x + r0 * D, y + r0 * D); });
}

// ---- activations ----------------------------------------------------------------------------
void gelu_fwd(int64_t n, const float* x, float* y, bool approx) {
  auto f = K().gelu_fwd;
  elementwise(n, [&](int64_t i, int64_t e) { f(e - i, x + i, y + i, approx); });
}
void gelu_bwd(int64_t n, const float* x, const float* dy, float* dx, bool approx) {
  auto f = K().gelu_bwd;
  elementwise(n, [&](int64_t i, int64_t e) { f(e - i, x + i, dy + i, dx + i, approx); });
}
void silu_fwd(int64_t n, const float* x, float* y) {
  auto f = K().silu_fwd;
  elementwise(n, [&](int64_t i, int64_t e) { f(e - i, x + i, y + i); });
}
void silu_bwd(int64_t n, const float* x, const float* dy, float* dx) {
  auto f = K().silu_bwd;
  elementwise(n, [&](int64_t i, int64_t e) { f(e - i, x + i, dy + i, dx + i); });
}
void swiglu_fwd(int64_t n, const float* gate, const float* up, float* y) {
  auto f = K().swiglu_fwd;
  elementwise(n, [&](int64_t i, int64_t e) { f(e - i, gate + i, up + i, y + i); });
}
void swiglu_bwd(int64_t n, const float* gate, const float* up, const float* dy, float* dgate, float* dup) {
  auto f = K().swiglu_bwd;
  elementwise(n, [&](int64_t i, int64_t e) {
    f(e - i, gate + i, up + i, dy + i, dgate ? dgate + i : nullptr, dup ? dup + i : nullptr);
  });
}

// ---- RoPE -----------------------------------------------------------------------------------
// Follows transformers' rope_init_fn: default inv_freq = 1 / theta^(2i/Dh); llama3
// (_compute_llama3_parameters) and linear scaling applied on top. Computed in double, rounded once.
void rope_inv_freq(int64_t Dh, float theta, const RopeScaling& sc, float* inv_freq) {
  const double pi = 3.14159265358979323846;
  int64_t half = Dh / 2;
  for (int64_t i = 0; i < half; i++) {
    double f = 1.0 / std::pow(double(theta), double(2 * i) / double(Dh));
    if (sc.type == 2) {
      f /= sc.factor;
    } else if (sc.type == 1) {
      double low_wl = sc.original_max_position / double(sc.low_freq_factor);
      double high_wl = sc.original_max_position / double(sc.high_freq_factor);
      double wl = 2 * pi / f;
      if (wl > low_wl) {
        f = f / sc.factor;
      } else if (wl >= high_wl) {  // medium band: smooth interpolation
        double smooth = (sc.original_max_position / wl - sc.low_freq_factor) /
                        (double(sc.high_freq_factor) - double(sc.low_freq_factor));
        f = (1.0 - smooth) * f / sc.factor + smooth * f;
      }
    }
    inv_freq[i] = float(f);
  }
}

namespace {
// the cos and sin of one token's angles into cs (Dh): as in transformers, the fp32 product pos · inv_freq, then the
// cos / sin of that float (the sin negated for the inverse rotation)
void rope_angles(int64_t Dh, int32_t pos, const float* inv_freq, bool inverse, float* cs) {
  const int64_t half = Dh / 2;
  for (int64_t i = 0; i < half; i++) {
    float ang = float(pos) * inv_freq[i];
    cs[i] = float(std::cos(double(ang)));
    float s = float(std::sin(double(ang)));
    cs[half + i] = inverse ? -s : s;
  }
}

void rope_check(int64_t Dh) {
  if (Dh % 2 != 0) throw std::invalid_argument("rope: head dim must be even");
}

// tokens per task of the rotations: about 64K values of x (a decode step's few tokens on the calling thread)
int64_t rope_grain(int64_t H, int64_t Dh) { return std::max<int64_t>(1, 65536 / std::max<int64_t>(H * Dh, 1)); }

void rope_apply(int64_t T, int64_t H, int64_t Dh, int64_t ld, const int32_t* pos, const float* inv_freq, float* x,
                bool inverse) {
  rope_check(Dh);
  if (ld == 0) ld = H * Dh;
  auto f = K().rope_rotate;
  parallel_for(T, std::max<int64_t>(1, 256 / std::max<int64_t>(H, 1)), [&](int64_t t0, int64_t t1) {
    std::vector<float> cs(static_cast<size_t>(Dh));
    for (int64_t t = t0; t < t1; t++) {
      rope_angles(Dh, pos[t], inv_freq, inverse, cs.data());
      f(H, Dh, cs.data(), x + t * ld);
    }
  });
}
}  // namespace

void rope_fwd(int64_t T, int64_t H, int64_t Dh, int64_t ld, const int32_t* pos, const float* inv_freq, float* x) {
  rope_apply(T, H, Dh, ld, pos, inv_freq, x, false);
}
void rope_bwd(int64_t T, int64_t H, int64_t Dh, int64_t ld, const int32_t* pos, const float* inv_freq, float* dx) {
  rope_apply(T, H, Dh, ld, pos, inv_freq, dx, true);
}
void rope_table(int64_t T, int64_t Dh, const int32_t* pos, const float* inv_freq, float* cs) {
  rope_check(Dh);
  parallel_for(T, 64, [&](int64_t t0, int64_t t1) {  // 64 tokens a task: a decode step's on the calling thread
    for (int64_t t = t0; t < t1; t++) rope_angles(Dh, pos[t], inv_freq, false, cs + t * Dh);
  });
}
void rope_fwd_table(int64_t T, int64_t H, int64_t Dh, int64_t ld, const float* cs, float* x) {
  rope_check(Dh);
  if (ld == 0) ld = H * Dh;
  auto f = K().rope_rotate;
  parallel_for(T, rope_grain(H, Dh), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; t++) f(H, Dh, cs + t * Dh, x + t * ld);
  });
}

// ---- attention ------------------------------------------------------------------------------
void attention_fwd(const AttnParams& p, const float* q, const float* k, const float* v, float* out, float* lse) {
  K().attention_fwd(p, q, k, v, out, lse);
}
void attention_bwd(const AttnParams& p, const float* q, const float* k, const float* v, const float* out,
                   const float* lse, const float* dout, float* dq, float* dk, float* dv, float* dbias) {
  K().attention_bwd(p, q, k, v, out, lse, dout, dq, dk, dv, dbias);
}

// ---- cross-entropy --------------------------------------------------------------------------
float cross_entropy_fwd_bwd(int64_t T, int64_t V, const float* logits, const int32_t* labels, float* dlogits,
                            float* losses) {
  int64_t count = 0;
  for (int64_t t = 0; t < T; t++) count += labels[t] >= 0;
  float inv_count = count > 0 ? 1.0f / float(count) : 0.0f;
  std::vector<float> tmp;
  if (!losses) {
    tmp.resize(size_t(T));
    losses = tmp.data();
  }
  auto f = K().cross_entropy_rows;
  parallel_for(T, row_grain(V), [&](int64_t r0, int64_t r1) {
    f(r1 - r0, V, logits + r0 * V, labels + r0, inv_count, dlogits ? dlogits + r0 * V : nullptr, losses + r0);
  });
  if (count == 0) return 0.0f;
  double s = 0;
  for (int64_t t = 0; t < T; t++) s += losses[t];
  return float(s / double(count));
}

// log-probabilities of targets: one cross-entropy row each (loss = −logp; its gradient scaled by −dlogp)
void logprob_fwd(int64_t T, int64_t V, const float* logits, const int32_t* labels, float* logp) {
  auto f = K().cross_entropy_rows;
  parallel_for(T, row_grain(V), [&](int64_t r0, int64_t r1) {
    f(r1 - r0, V, logits + r0 * V, labels + r0, 0.0f, nullptr, logp + r0);
    for (int64_t t = r0; t < r1; t++) logp[t] = -logp[t];
  });
}
void logprob_bwd(int64_t T, int64_t V, const float* logits, const int32_t* labels, const float* dlogp, float* dlogits) {
  auto f = K().cross_entropy_rows;
  parallel_for(T, row_grain(V), [&](int64_t r0, int64_t r1) {
    float loss;
    for (int64_t t = r0; t < r1; t++) f(1, V, logits + t * V, labels + t, -dlogp[t], dlogits + t * V, &loss);
  });
}

// ---- optimizer ------------------------------------------------------------------------------
void adamw_step(int64_t n, float* p, const float* g, float* m, float* v, double lr, double b1, double b2, double eps,
                double wd, int64_t step, float gscale) {
  if (step < 1) throw std::invalid_argument("adamw_step: step must be >= 1");
  AdamwScalars c;
  c.decay = float(1.0 - lr * wd);
  c.omb1 = float(1.0 - b1);
  c.b2 = float(b2);
  c.omb2 = float(1.0 - b2);
  c.step_size = float(lr / (1.0 - std::pow(b1, double(step))));
  c.bc2s = float(std::sqrt(1.0 - std::pow(b2, double(step))));
  c.eps = float(eps);
  c.gscale = gscale;
  auto f = K().adamw_step;
  elementwise(n, [&](int64_t i, int64_t e) { f(e - i, p + i, g + i, m + i, v + i, c); });
}
int64_t argmax(int64_t n, const float* x) { return n > 0 ? K().argmax(n, x) : -1; }
float l2_norm(int64_t n, const float* g) {
  if (n <= 0) return 0.0f;
  auto f = K().sum_squares;
  int64_t maxtasks = (n + kElemGrain - 1) / kElemGrain;
  int nth = int(std::min<int64_t>(threads_get(), maxtasks));
  std::vector<double> part(size_t(std::max(nth, 1)), 0.0);
  if (nth <= 1) {
    part[0] = f(n, g);
  } else {
    pool_run(nth, [&](int tid, int nt) {
      int64_t i0 = n * tid / nt, i1 = n * (tid + 1) / nt;
      part[size_t(tid)] = f(i1 - i0, g + i0);
    });
  }
  double s = 0;
  for (double x : part) s += x;
  return float(std::sqrt(s));
}

// ---- LoRA -----------------------------------------------------------------------------------
// y (M, N) = x (M, K) · Wᵀ + bias + s · xa · Bᵀ,  xa (M, r) = x · Aᵀ
void lora_fwd(int64_t M, int64_t N, int64_t K, int64_t r, const float* x, DType wtype, const void* w,
              const float* bias, const float* A, const float* B, float s, float* xa, float* y) {
  linear(wtype, M, N, K, x, K, w, K, bias, y, N, 0.0f);
  if (r <= 0) return;
  sgemm(false, true, M, r, K, 1.0f, x, K, A, K, 0.0f, xa, r);   // xa = x · Aᵀ
  sgemm(false, true, M, N, r, s, xa, r, B, r, 1.0f, y, N);      // y += s · xa · Bᵀ
}
// dB (N, r) += s · dyᵀ · xa ; dxa (M, r) = s · dy · B ; dA (r, K) += dxaᵀ · x ;
// dx (M, K) = dy · W + dxa · A
void lora_bwd(int64_t M, int64_t N, int64_t K, int64_t r, const float* x, DType wtype, const void* w, const float* A,
              const float* B, float s, const float* xa, const float* dy, float* dx, float* dA, float* dB) {
  std::vector<float> dxa(size_t(M * std::max<int64_t>(r, 0)));
  if (r > 0) {
    if (dB) sgemm(true, false, N, r, M, s, dy, N, xa, r, 1.0f, dB, r);
    sgemm(false, false, M, r, N, s, dy, N, B, r, 0.0f, dxa.data(), r);
    if (dA) sgemm(true, false, r, K, M, 1.0f, dxa.data(), r, x, K, 1.0f, dA, K);
  }
  if (dx) {
    // dx = dy (M, N) · W (N, K)
    if (wtype == DType::F32) {
      sgemm(false, false, M, K, N, 1.0f, dy, N, static_cast<const float*>(w), K, 0.0f, dx, K);
    } else {
      // widen W once (bf16/f16 frozen weights); training-time cost, K·N floats
      std::vector<float> wf(size_t(N * K));
      if (wtype == DType::BF16) convert_bf16_to_f32(N * K, static_cast<const uint16_t*>(w), wf.data());
      else if (wtype == DType::F16) convert_f16_to_f32(N * K, static_cast<const uint16_t*>(w), wf.data());
      else throw std::invalid_argument(std::string("lora_bwd: unsupported weight dtype ") + dtype_name(wtype));
      sgemm(false, false, M, K, N, 1.0f, dy, N, wf.data(), K, 0.0f, dx, K);
    }
    if (r > 0) sgemm(false, false, M, K, r, 1.0f, dxa.data(), r, A, K, 1.0f, dx, K);
  }
}

}  // namespace loom
