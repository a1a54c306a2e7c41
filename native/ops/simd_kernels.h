// SIMD kernels of the hot ops, written once over a vector-traits type V and instantiated by
// ops_avx2.cc (V = 8 x fp32, __m256) and ops_avx512.cc (V = 16 x fp32, __m512). The two ISA paths
// therefore run exactly the same code; only the register width and the masked tail differ. AVX2
// runs on the dev machine, so testing it tests the structure of the AVX-512 path too.
//
// Included INSIDE an anonymous namespace of each ISA translation unit (internal linkage: code
// compiled with AVX-512 flags never leaks into the other paths through the linker).
//
// V provides: R (register), W (lanes), zero, set1, load, store, loadn (n < W lanes, rest 0),
// loadn_fill (rest = fill), storen, add, sub, mul, div, fmadd(a,b,c)=a·b+c, fnmadd(a,b,c)=c-a·b,
// max, min, sqrt, round (to nearest), pow2i (2^n for integral n in [-126, 127]),
// select_lt(x, t, a, b) = x < t ? a : b, hsum, hmax.
#pragma once

namespace simd {

// ---- math -----------------------------------------------------------------------------------
// exp (Cephes expf polynomial, ~1 ulp): clamped to e^88 above; exactly 0 below -87.34 (incl. -inf).
template <class V>
inline typename V::R vexp(typename V::R x) {
  using R = typename V::R;
  const R lo = V::set1(-87.33654f);
  R xc = V::max(V::min(x, V::set1(88.0f)), lo);
  R n = V::round(V::mul(xc, V::set1(1.44269504088896341f)));
  R r = V::fnmadd(n, V::set1(0.693359375f), xc);
  r = V::fnmadd(n, V::set1(-2.12194440e-4f), r);
  R p = V::set1(1.9875691500e-4f);
  p = V::fmadd(p, r, V::set1(1.3981999507e-3f));
  p = V::fmadd(p, r, V::set1(8.3334519073e-3f));
  p = V::fmadd(p, r, V::set1(4.1665795894e-2f));
  p = V::fmadd(p, r, V::set1(1.6666665459e-1f));
  p = V::fmadd(p, r, V::set1(5.0000001201e-1f));
  p = V::fmadd(p, V::mul(r, r), V::add(r, V::set1(1.0f)));
  return V::select_lt(x, lo, V::zero(), V::mul(p, V::pow2i(n)));
}

// 1 / (1 + e^-x)
template <class V>
inline typename V::R vsigmoid(typename V::R x) {
  const typename V::R one = V::set1(1.0f);
  return V::div(one, V::add(one, vexp<V>(V::sub(V::zero(), x))));
}

// erfc(z) for z >= 0, fractional error < 1.2e-7 (Chebyshev fit of Numerical Recipes' erfcc).
template <class V>
inline typename V::R verfc_pos(typename V::R z) {
  using R = typename V::R;
  R t = V::div(V::set1(1.0f), V::fmadd(V::set1(0.5f), z, V::set1(1.0f)));
  R p = V::set1(0.17087277f);
  p = V::fmadd(p, t, V::set1(-0.82215223f));
  p = V::fmadd(p, t, V::set1(1.48851587f));
  p = V::fmadd(p, t, V::set1(-1.13520398f));
  p = V::fmadd(p, t, V::set1(0.27886807f));
  p = V::fmadd(p, t, V::set1(-0.18628806f));
  p = V::fmadd(p, t, V::set1(0.09678418f));
  p = V::fmadd(p, t, V::set1(0.37409196f));
  p = V::fmadd(p, t, V::set1(1.00002368f));
  p = V::fmadd(p, t, V::set1(-1.26551223f));
  R e = vexp<V>(V::fnmadd(z, z, p));  // exp(-z² + p)
  return V::mul(t, e);
}

// 1 + erf(x/√2) = erfc(-x/√2), without cancellation for negative x
template <class V>
inline typename V::R vone_plus_erf(typename V::R x) {
  using R = typename V::R;
  R u = V::mul(x, V::set1(0.70710678118654752f));
  R z = V::max(u, V::sub(V::zero(), u));  // |u|
  R e = verfc_pos<V>(z);
  return V::select_lt(u, V::zero(), e, V::sub(V::set1(2.0f), e));
}

// ---- loop helpers ---------------------------------------------------------------------------
template <class V, class F>
inline void map1(int64_t n, const float* x, float* y, F f) {
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) V::store(y + i, f(V::load(x + i)));
  if (i < n) V::storen(y + i, f(V::loadn(x + i, n - i)), n - i);
}
template <class V, class F>
inline void map2(int64_t n, const float* a, const float* b, float* y, F f) {
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) V::store(y + i, f(V::load(a + i), V::load(b + i)));
  if (i < n) V::storen(y + i, f(V::loadn(a + i, n - i), V::loadn(b + i, n - i)), n - i);
}
template <class V, class F>
inline void map3(int64_t n, const float* a, const float* b, const float* c, float* y, F f) {
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) V::store(y + i, f(V::load(a + i), V::load(b + i), V::load(c + i)));
  if (i < n) V::storen(y + i, f(V::loadn(a + i, n - i), V::loadn(b + i, n - i), V::loadn(c + i, n - i)), n - i);
}
// Σ f(a[i], b[i]) with two vector accumulators (f(0, 0) must be 0).
template <class V, class F>
inline float reduce2(int64_t n, const float* a, const float* b, F f) {
  using R = typename V::R;
  R s0 = V::zero(), s1 = V::zero();
  int64_t i = 0;
  for (; i + 2 * V::W <= n; i += 2 * V::W) {
    s0 = V::add(s0, f(V::load(a + i), V::load(b + i)));
    s1 = V::add(s1, f(V::load(a + i + V::W), V::load(b + i + V::W)));
  }
  for (; i + V::W <= n; i += V::W) s0 = V::add(s0, f(V::load(a + i), V::load(b + i)));
  if (i < n) s1 = V::add(s1, f(V::loadn(a + i, n - i), V::loadn(b + i, n - i)));
  return V::hsum(V::add(s0, s1));
}
template <class V>
inline float vdot(int64_t n, const float* a, const float* b) {
  return reduce2<V>(n, a, b, [](typename V::R x, typename V::R y) { return V::mul(x, y); });
}
template <class V>
inline float vmax(int64_t n, const float* x) {
  using R = typename V::R;
  const float ninf = -std::numeric_limits<float>::infinity();
  R m = V::set1(ninf);
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) m = V::max(m, V::load(x + i));
  if (i < n) m = V::max(m, V::loadn_fill(x + i, n - i, ninf));
  return V::hmax(m);
}
// y[i] = exp(x[i] - m); returns Σ y (y may alias x)
template <class V>
inline float vexp_sub_store(int64_t n, const float* x, float m, float* y) {
  using R = typename V::R;
  const R mv = V::set1(m);
  R s = V::zero();
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) {
    R e = vexp<V>(V::sub(V::load(x + i), mv));
    V::store(y + i, e);
    s = V::add(s, e);
  }
  if (i < n) {
    R e = vexp<V>(V::sub(V::loadn_fill(x + i, n - i, -std::numeric_limits<float>::infinity()), mv));
    V::storen(y + i, e, n - i);
    s = V::add(s, e);
  }
  return V::hsum(s);
}
// Σ exp(x[i] - m)
template <class V>
inline float vexp_sub_sum(int64_t n, const float* x, float m) {
  using R = typename V::R;
  const R mv = V::set1(m);
  R s = V::zero();
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) s = V::add(s, vexp<V>(V::sub(V::load(x + i), mv)));
  if (i < n) s = V::add(s, vexp<V>(V::sub(V::loadn_fill(x + i, n - i, -std::numeric_limits<float>::infinity()), mv)));
  return V::hsum(s);
}

// ---- elementwise ----------------------------------------------------------------------------
template <class V>
void add_fwd(int64_t n, const float* a, const float* b, float* y) {
  map2<V>(n, a, b, y, [](typename V::R x, typename V::R z) { return V::add(x, z); });
}
template <class V>
void mul_fwd(int64_t n, const float* a, const float* b, float* y) {
  map2<V>(n, a, b, y, [](typename V::R x, typename V::R z) { return V::mul(x, z); });
}
template <class V>
void mul_bwd(int64_t n, const float* a, const float* b, const float* dy, float* da, float* db) {
  using R = typename V::R;
  if (da) map3<V>(n, dy, b, da, da, [](R g, R bv, R acc) { return V::fmadd(g, bv, acc); });
  if (db) map3<V>(n, dy, a, db, db, [](R g, R av, R acc) { return V::fmadd(g, av, acc); });
}
template <class V>
void scale_fwd(int64_t n, const float* x, float s, float* y) {
  const typename V::R sv = V::set1(s);
  map1<V>(n, x, y, [sv](typename V::R v) { return V::mul(sv, v); });
}
template <class V>
void axpy(int64_t n, float a, const float* x, float* y) {
  const typename V::R av = V::set1(a);
  map2<V>(n, x, y, y, [av](typename V::R xv, typename V::R yv) { return V::fmadd(av, xv, yv); });
}
// y (M rows, ldy apart) += a (M, r) · B (r, N), B f32 or bf16 (widened): up to 8 rows of y in registers per W
// columns, each row of B read once for them, and per element the r FMAs in order of k that r axpys would make
template <class V>
inline typename V::R load_w(const float* p, int64_t n) { return n == V::W ? V::load(p) : V::loadn(p, n); }
template <class V>
inline typename V::R load_w(const uint16_t* p, int64_t n) { return n == V::W ? V::loadbf(p) : V::loadbfn(p, n); }
template <class V, int MM, class BT>
void lora_b_tile(int64_t N, int64_t r, const float* a, const BT* b, float* y, int64_t ldy) {
  using R = typename V::R;
  for (int64_t n = 0; n < N; n += V::W) {
    const int64_t w = N - n < V::W ? N - n : V::W;
    R acc[MM];
    for (int m = 0; m < MM; m++) acc[m] = w == V::W ? V::load(y + m * ldy + n) : V::loadn(y + m * ldy + n, w);
    for (int64_t k = 0; k < r; k++) {
      const R bv = load_w<V>(b + k * N + n, w);
      for (int m = 0; m < MM; m++) acc[m] = V::fmadd(V::set1(a[m * r + k]), bv, acc[m]);
    }
    for (int m = 0; m < MM; m++) {
      if (w == V::W) V::store(y + m * ldy + n, acc[m]);
      else V::storen(y + m * ldy + n, acc[m], w);
    }
  }
}
template <class V, class BT>
void lora_b_rows_t(int64_t M, int64_t N, int64_t r, const float* a, const BT* b, float* y, int64_t ldy) {
  int64_t m = 0;
  for (; m + 8 <= M; m += 8) lora_b_tile<V, 8>(N, r, a + m * r, b, y + m * ldy, ldy);
  const float* am = a + m * r;
  float* ym = y + m * ldy;
  switch (M - m) {
    case 7: return lora_b_tile<V, 7>(N, r, am, b, ym, ldy);
    case 6: return lora_b_tile<V, 6>(N, r, am, b, ym, ldy);
    case 5: return lora_b_tile<V, 5>(N, r, am, b, ym, ldy);
    case 4: return lora_b_tile<V, 4>(N, r, am, b, ym, ldy);
    case 3: return lora_b_tile<V, 3>(N, r, am, b, ym, ldy);
    case 2: return lora_b_tile<V, 2>(N, r, am, b, ym, ldy);
    case 1: return lora_b_tile<V, 1>(N, r, am, b, ym, ldy);
    default: return;
  }
}
template <class V>
void lora_b_rows(int64_t M, int64_t N, int64_t r, const float* a, const float* b, float* y, int64_t ldy) {
  lora_b_rows_t<V>(M, N, r, a, b, y, ldy);
}
template <class V>
void lora_b_rows_bf16(int64_t M, int64_t N, int64_t r, const float* a, const uint16_t* b, float* y, int64_t ldy) {
  lora_b_rows_t<V>(M, N, r, a, b, y, ldy);
}
template <class V>
void add_bias(int64_t R_, int64_t D, float* x, const float* b) {
  for (int64_t r = 0; r < R_; r++) add_fwd<V>(D, x + r * D, b, x + r * D);
}
template <class V>
void bias_bwd(int64_t R_, int64_t D, const float* dy, float* db) {
  for (int64_t r = 0; r < R_; r++) add_fwd<V>(D, db, dy + r * D, db);
}

// ---- normalization --------------------------------------------------------------------------
template <class V>
void layernorm_fwd(int64_t R_, int64_t D, const float* x, const float* w, const float* b, float eps, float* y,
                   float* mean, float* rstd) {
  using R = typename V::R;
  for (int64_t r = 0; r < R_; r++) {
    const float* xr = x + r * D;
    float* yr = y + r * D;
    float m = reduce2<V>(D, xr, xr, [](R a, R) { return a; }) / float(D);
    const R mv = V::set1(m);
    R vacc = V::zero();
    int64_t j = 0;
    for (; j + V::W <= D; j += V::W) {
      R c = V::sub(V::load(xr + j), mv);
      vacc = V::fmadd(c, c, vacc);
    }
    float var = V::hsum(vacc);
    for (; j < D; j++) var += (xr[j] - m) * (xr[j] - m);  // tail in scalar: no padded lanes
    float rs = float(1.0 / std::sqrt(double(var) / double(D) + double(eps)));
    const R rsv = V::set1(rs), one = V::set1(1.0f);
    int64_t i = 0;
    auto row = [&](R xv, R wv, R bv) { return V::fmadd(V::mul(V::sub(xv, mv), rsv), wv, bv); };
    for (; i + V::W <= D; i += V::W)
      V::store(yr + i, row(V::load(xr + i), w ? V::load(w + i) : one, b ? V::load(b + i) : V::zero()));
    if (i < D) {
      int64_t k = D - i;
      V::storen(yr + i, row(V::loadn(xr + i, k), w ? V::loadn(w + i, k) : one, b ? V::loadn(b + i, k) : V::zero()), k);
    }
    if (mean) mean[r] = m;
    if (rstd) rstd[r] = rs;
  }
}
template <class V>
void layernorm_bwd(int64_t R_, int64_t D, const float* x, const float* w, const float* mean, const float* rstd,
                   const float* dy, float* dx, float* dw, float* db) {
  using R = typename V::R;
  const R one = V::set1(1.0f);
  for (int64_t r = 0; r < R_; r++) {
    const float* xr = x + r * D;
    const float* gr = dy + r * D;
    const R mv = V::set1(mean[r]), rsv = V::set1(rstd[r]);
    R sg = V::zero(), sgx = V::zero();
    int64_t i = 0;
    auto step1 = [&](int64_t k, bool full) {
      R xv = full ? V::load(xr + i) : V::loadn(xr + i, k);
      R gv = full ? V::load(gr + i) : V::loadn(gr + i, k);
      R wv = w ? (full ? V::load(w + i) : V::loadn(w + i, k)) : one;
      R xh = V::mul(V::sub(xv, mv), rsv);
      R g = V::mul(gv, wv);
      sg = V::add(sg, g);
      sgx = V::fmadd(g, xh, sgx);  // tail lanes: g = 0
      if (dw) {
        R a = full ? V::load(dw + i) : V::loadn(dw + i, k);
        a = V::fmadd(gv, xh, a);
        full ? V::store(dw + i, a) : V::storen(dw + i, a, k);
      }
      if (db) {
        R a = full ? V::load(db + i) : V::loadn(db + i, k);
        a = V::add(a, gv);
        full ? V::store(db + i, a) : V::storen(db + i, a, k);
      }
    };
    for (; i + V::W <= D; i += V::W) step1(V::W, true);
    if (i < D) step1(D - i, false);
    if (!dx) continue;
    const R mg = V::set1(V::hsum(sg) / float(D)), mgx = V::set1(V::hsum(sgx) / float(D));
    float* dxr = dx + r * D;
    i = 0;
    auto step2 = [&](int64_t k, bool full) {
      R xv = full ? V::load(xr + i) : V::loadn(xr + i, k);
      R gv = full ? V::load(gr + i) : V::loadn(gr + i, k);
      R wv = w ? (full ? V::load(w + i) : V::loadn(w + i, k)) : one;
      R xh = V::mul(V::sub(xv, mv), rsv);
      R o = V::mul(rsv, V::fnmadd(xh, mgx, V::sub(V::mul(gv, wv), mg)));
      full ? V::store(dxr + i, o) : V::storen(dxr + i, o, k);
    };
    for (; i + V::W <= D; i += V::W) step2(V::W, true);
    if (i < D) step2(D - i, false);
  }
}
template <class V>
void rmsnorm_fwd(int64_t R_, int64_t D, const float* x, const float* w, float eps, float* y, float* rstd) {
  using R = typename V::R;
  for (int64_t r = 0; r < R_; r++) {
    const float* xr = x + r * D;
    float* yr = y + r * D;
    float ss = vdot<V>(D, xr, xr);
    float rs = float(1.0 / std::sqrt(double(ss) / double(D) + double(eps)));
    const R rsv = V::set1(rs);
    if (w) map2<V>(D, xr, w, yr, [rsv](R xv, R wv) { return V::mul(V::mul(xv, rsv), wv); });
    else map1<V>(D, xr, yr, [rsv](R xv) { return V::mul(xv, rsv); });
    if (rstd) rstd[r] = rs;
  }
}
template <class V>
void rmsnorm_bwd(int64_t R_, int64_t D, const float* x, const float* w, const float* rstd, const float* dy, float* dx,
                 float* dw) {
  using R = typename V::R;
  const R one = V::set1(1.0f);
  for (int64_t r = 0; r < R_; r++) {
    const float* xr = x + r * D;
    const float* gr = dy + r * D;
    const R rsv = V::set1(rstd[r]);
    R sgx = V::zero();
    int64_t i = 0;
    auto step1 = [&](int64_t k, bool full) {
      R xv = full ? V::load(xr + i) : V::loadn(xr + i, k);
      R gv = full ? V::load(gr + i) : V::loadn(gr + i, k);
      R wv = w ? (full ? V::load(w + i) : V::loadn(w + i, k)) : one;
      R xh = V::mul(xv, rsv);
      sgx = V::fmadd(V::mul(gv, wv), xh, sgx);
      if (dw) {
        R a = full ? V::load(dw + i) : V::loadn(dw + i, k);
        a = V::fmadd(gv, xh, a);
        full ? V::store(dw + i, a) : V::storen(dw + i, a, k);
      }
    };
    for (; i + V::W <= D; i += V::W) step1(V::W, true);
    if (i < D) step1(D - i, false);
    if (!dx) continue;
    const R mgx = V::set1(V::hsum(sgx) / float(D));
    float* dxr = dx + r * D;
    i = 0;
    auto step2 = [&](int64_t k, bool full) {
      R xv = full ? V::load(xr + i) : V::loadn(xr + i, k);
      R gv = full ? V::load(gr + i) : V::loadn(gr + i, k);
      R wv = w ? (full ? V::load(w + i) : V::loadn(w + i, k)) : one;
      R o = V::mul(rsv, V::fnmadd(V::mul(xv, rsv), mgx, V::mul(gv, wv)));
      full ? V::store(dxr + i, o) : V::storen(dxr + i, o, k);
    };
    for (; i + V::W <= D; i += V::W) step2(V::W, true);
    if (i < D) step2(D - i, false);
  }
}

// ---- softmax --------------------------------------------------------------------------------
template <class V>
void softmax_fwd(int64_t R_, int64_t D, const float* x, float* y) {
  for (int64_t r = 0; r < R_; r++) {
    const float* xr = x + r * D;
    float* yr = y + r * D;
    float m = vmax<V>(D, xr);
    if (m == -std::numeric_limits<float>::infinity()) {
      for (int64_t d = 0; d < D; d++) yr[d] = 0.0f;
      continue;
    }
    float s = vexp_sub_store<V>(D, xr, m, yr);
    scale_fwd<V>(D, yr, 1.0f / s, yr);
  }
}
template <class V>
void softmax_bwd(int64_t R_, int64_t D, const float* y, const float* dy, float* dx) {
  using R = typename V::R;
  for (int64_t r = 0; r < R_; r++) {
    const float* yr = y + r * D;
    const float* gr = dy + r * D;
    const R sv = V::set1(vdot<V>(D, yr, gr));
    map2<V>(D, yr, gr, dx + r * D, [sv](R yv, R gv) { return V::mul(yv, V::sub(gv, sv)); });
  }
}
template <class V>
void log_softmax_fwd(int64_t R_, int64_t D, const float* x, float* y) {
  using R = typename V::R;
  for (int64_t r = 0; r < R_; r++) {
    const float* xr = x + r * D;
    float m = vmax<V>(D, xr);
    float lse = m + std::log(vexp_sub_sum<V>(D, xr, m));
    const R lv = V::set1(lse);
    map1<V>(D, xr, y + r * D, [lv](R xv) { return V::sub(xv, lv); });
  }
}

// ---- activations ----------------------------------------------------------------------------
template <class V>
void gelu_fwd(int64_t n, const float* x, float* y, bool approx) {
  using R = typename V::R;
  if (approx) {  // x · sigmoid(2u), u = √(2/π)(x + 0.044715 x³)
    map1<V>(n, x, y, [](R v) {
      R v2 = V::mul(v, v);
      R u2 = V::mul(V::mul(V::set1(2.0f * 0.79788456080286535588f), v), V::fmadd(V::set1(0.044715f), v2, V::set1(1.0f)));
      return V::mul(v, vsigmoid<V>(u2));
    });
  } else {
    map1<V>(n, x, y, [](R v) { return V::mul(V::mul(V::set1(0.5f), v), vone_plus_erf<V>(v)); });
  }
}
template <class V>
void gelu_bwd(int64_t n, const float* x, const float* dy, float* dx, bool approx) {
  using R = typename V::R;
  if (approx) {
    map2<V>(n, x, dy, dx, [](R v, R g) {
      const R k = V::set1(0.79788456080286535588f), one = V::set1(1.0f);
      R v2 = V::mul(v, v);
      R u2 = V::mul(V::mul(V::set1(2.0f), V::mul(k, v)), V::fmadd(V::set1(0.044715f), v2, one));
      R s = vsigmoid<V>(u2);
      R du = V::mul(k, V::fmadd(V::set1(3.0f * 0.044715f), v2, one));
      // s + 2 x s (1 - s) du
      R d = V::fmadd(V::mul(V::mul(V::set1(2.0f), v), V::mul(s, V::sub(one, s))), du, s);
      return V::mul(g, d);
    });
  } else {
    map2<V>(n, x, dy, dx, [](R v, R g) {
      R pdf = vexp<V>(V::mul(V::set1(-0.5f), V::mul(v, v)));
      R d = V::fmadd(V::mul(v, V::set1(0.39894228040143267794f)), pdf, V::mul(V::set1(0.5f), vone_plus_erf<V>(v)));
      return V::mul(g, d);
    });
  }
}
template <class V>
void silu_fwd(int64_t n, const float* x, float* y) {
  map1<V>(n, x, y, [](typename V::R v) { return V::mul(v, vsigmoid<V>(v)); });
}
template <class V>
void silu_bwd(int64_t n, const float* x, const float* dy, float* dx) {
  using R = typename V::R;
  map2<V>(n, x, dy, dx, [](R v, R g) {
    const R one = V::set1(1.0f);
    R s = vsigmoid<V>(v);
    return V::mul(V::mul(g, s), V::fmadd(v, V::sub(one, s), one));
  });
}
template <class V>
void swiglu_fwd(int64_t n, const float* gate, const float* up, float* y) {
  map2<V>(n, gate, up, y, [](typename V::R gv, typename V::R uv) { return V::mul(V::mul(gv, vsigmoid<V>(gv)), uv); });
}
template <class V>
void swiglu_bwd(int64_t n, const float* gate, const float* up, const float* dy, float* dgate, float* dup) {
  using R = typename V::R;
  const R one = V::set1(1.0f);
  auto step = [&](int64_t i, int64_t k, bool full) {
    R gv = full ? V::load(gate + i) : V::loadn(gate + i, k);
    R uv = full ? V::load(up + i) : V::loadn(up + i, k);
    R g = full ? V::load(dy + i) : V::loadn(dy + i, k);
    R s = vsigmoid<V>(gv);
    if (dup) {
      R o = V::mul(g, V::mul(gv, s));
      full ? V::store(dup + i, o) : V::storen(dup + i, o, k);
    }
    if (dgate) {
      R o = V::mul(V::mul(V::mul(g, uv), s), V::fmadd(gv, V::sub(one, s), one));
      full ? V::store(dgate + i, o) : V::storen(dgate + i, o, k);
    }
  };
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) step(i, V::W, true);
  if (i < n) step(i, n - i, false);
}

// ---- RoPE -----------------------------------------------------------------------------------
template <class V>
void rope_rotate(int64_t H, int64_t Dh, const float* cs, float* x) {
  using R = typename V::R;
  const int64_t half = Dh / 2;
  const float* c = cs;
  const float* s = cs + half;
  for (int64_t h = 0; h < H; h++) {
    float* lo = x + h * Dh;
    float* hi = lo + half;
    auto step = [&](int64_t i, int64_t k, bool full) {
      R a = full ? V::load(lo + i) : V::loadn(lo + i, k);
      R b = full ? V::load(hi + i) : V::loadn(hi + i, k);
      R cv = full ? V::load(c + i) : V::loadn(c + i, k);
      R sv = full ? V::load(s + i) : V::loadn(s + i, k);
      R o1 = V::fnmadd(b, sv, V::mul(a, cv));
      R o2 = V::fmadd(a, sv, V::mul(b, cv));
      if (full) {
        V::store(lo + i, o1);
        V::store(hi + i, o2);
      } else {
        V::storen(lo + i, o1, k);
        V::storen(hi + i, o2, k);
      }
    };
    int64_t i = 0;
    for (; i + V::W <= half; i += V::W) step(i, V::W, true);
    if (i < half) step(i, half - i, false);
  }
}

// ---- cross-entropy --------------------------------------------------------------------------
template <class V>
void cross_entropy_rows(int64_t R_, int64_t Vn, const float* logits, const int32_t* labels, float inv_count,
                        float* dlogits, float* losses) {
  for (int64_t r = 0; r < R_; r++) {
    const float* xr = logits + r * Vn;
    int32_t lab = labels[r];
    if (lab < 0) {
      losses[r] = 0.0f;
      if (dlogits)
        for (int64_t j = 0; j < Vn; j++) dlogits[r * Vn + j] = 0.0f;
      continue;
    }
    float m = vmax<V>(Vn, xr);
    float s;
    if (dlogits) {
      float* dr = dlogits + r * Vn;
      s = vexp_sub_store<V>(Vn, xr, m, dr);
      scale_fwd<V>(Vn, dr, inv_count / s, dr);
      dr[lab] -= inv_count;
    } else {
      s = vexp_sub_sum<V>(Vn, xr, m);
    }
    losses[r] = float(double(m) + std::log(double(s)) - double(xr[lab]));
  }
}

// ---- optimizer ------------------------------------------------------------------------------
template <class V>
void adamw_step(int64_t n, float* p, const float* g, float* m, float* v, const loom::AdamwScalars& c) {
  using R = typename V::R;
  const R decay = V::set1(c.decay), omb1 = V::set1(c.omb1), b2 = V::set1(c.b2), omb2 = V::set1(c.omb2);
  const R step = V::set1(c.step_size), bc2s = V::set1(c.bc2s), eps = V::set1(c.eps), gscale = V::set1(c.gscale);
  auto body = [&](int64_t i, int64_t k, bool full) {
    R gv = V::mul(full ? V::load(g + i) : V::loadn(g + i, k), gscale);
    R mv = full ? V::load(m + i) : V::loadn(m + i, k);
    R vv = full ? V::load(v + i) : V::loadn(v + i, k);
    R pv = full ? V::load(p + i) : V::loadn(p + i, k);
    mv = V::add(mv, V::mul(omb1, V::sub(gv, mv)));
    vv = V::add(V::mul(vv, b2), V::mul(omb2, V::mul(gv, gv)));
    R denom = V::add(V::div(V::sqrt(vv), bc2s), eps);
    pv = V::sub(V::mul(pv, decay), V::mul(step, V::div(mv, denom)));
    if (full) {
      V::store(m + i, mv), V::store(v + i, vv), V::store(p + i, pv);
    } else {
      V::storen(m + i, mv, k), V::storen(v + i, vv, k), V::storen(p + i, pv, k);
    }
  };
  int64_t i = 0;
  for (; i + V::W <= n; i += V::W) body(i, V::W, true);
  if (i < n) body(i, n - i, false);
}
template <class V>
double sum_squares(int64_t n, const float* g) {
  double s = 0;
  for (int64_t i = 0; i < n; i += 4096) {
    int64_t k = n - i < 4096 ? n - i : 4096;
    s += double(vdot<V>(k, g + i, g + i));
  }
  return s;
}
// The first largest value's index (ops_table.h): the running maximum per lane over chunks of 256 values, the chunk
// that first raised it kept, then the first index in that chunk holding the maximum (what a scan with `>` finds:
// V::max(x, m) keeps m where x is NaN)
template <class V>
int64_t argmax(int64_t n, const float* x) {
  constexpr int64_t kChunk = 256;
  float mx = -std::numeric_limits<float>::infinity();
  int64_t chunk = -1;
  for (int64_t c = 0; c < n; c += kChunk) {
    const int64_t e = n - c < kChunk ? n - c : kChunk;
    typename V::R m = V::set1(mx);
    int64_t i = 0;
    for (; i + V::W <= e; i += V::W) m = V::max(V::load(x + c + i), m);
    if (i < e) m = V::max(V::loadn_fill(x + c + i, e - i, mx), m);
    const float cm = V::hmax(m);
    if (cm > mx) mx = cm, chunk = c;
  }
  if (chunk < 0) return -1;
  for (int64_t i = chunk;; i++)
    if (x[i] == mx) return i;
}

// ---- attention primitives (see attention_impl.h) --------------------------------------------
template <class V>
struct AttnPrims {
  using R = typename V::R;
  static float dot(const float* a, const float* b, int64_t n) { return vdot<V>(n, a, b); }
  static void axpy(float a, const float* x, float* y, int64_t n) { simd::axpy<V>(n, a, x, y); }
  static void scal(float* x, float s, int64_t n) { scale_fwd<V>(n, x, s, x); }
  // out[j] = q · K[j], four keys at a time (one q load feeds four FMAs)
  static void rows_dot(int64_t nr, const float* q, const float* K, int64_t ldk, int64_t n, float* out) {
    int64_t j = 0;
    for (; j + 4 <= nr; j += 4) {
      const float* k0 = K + j * ldk;
      const float* k1 = k0 + ldk;
      const float* k2 = k1 + ldk;
      const float* k3 = k2 + ldk;
      R a0 = V::zero(), a1 = V::zero(), a2 = V::zero(), a3 = V::zero();
      int64_t d = 0;
      for (; d + V::W <= n; d += V::W) {
        R qv = V::load(q + d);
        a0 = V::fmadd(qv, V::load(k0 + d), a0);
        a1 = V::fmadd(qv, V::load(k1 + d), a1);
        a2 = V::fmadd(qv, V::load(k2 + d), a2);
        a3 = V::fmadd(qv, V::load(k3 + d), a3);
      }
      if (d < n) {
        int64_t k = n - d;
        R qv = V::loadn(q + d, k);
        a0 = V::fmadd(qv, V::loadn(k0 + d, k), a0);
        a1 = V::fmadd(qv, V::loadn(k1 + d, k), a1);
        a2 = V::fmadd(qv, V::loadn(k2 + d, k), a2);
        a3 = V::fmadd(qv, V::loadn(k3 + d, k), a3);
      }
      out[j] = V::hsum(a0), out[j + 1] = V::hsum(a1), out[j + 2] = V::hsum(a2), out[j + 3] = V::hsum(a3);
    }
    for (; j < nr; j++) out[j] = vdot<V>(n, q, K + j * ldk);
  }
  // acc (n) += Σ_j p[j] V[j]; acc held in registers over all keys, 4 vectors at a time
  static void rows_axpy(int64_t nr, const float* p, const float* Vm, int64_t ldv, int64_t n, float* acc) {
    int64_t d = 0;
    for (; d + 4 * V::W <= n; d += 4 * V::W) {
      R a0 = V::load(acc + d), a1 = V::load(acc + d + V::W), a2 = V::load(acc + d + 2 * V::W), a3 = V::load(acc + d + 3 * V::W);
      for (int64_t j = 0; j < nr; j++) {
        if (p[j] == 0.0f) continue;
        const R pj = V::set1(p[j]);
        const float* vr = Vm + j * ldv + d;
        a0 = V::fmadd(pj, V::load(vr), a0);
        a1 = V::fmadd(pj, V::load(vr + V::W), a1);
        a2 = V::fmadd(pj, V::load(vr + 2 * V::W), a2);
        a3 = V::fmadd(pj, V::load(vr + 3 * V::W), a3);
      }
      V::store(acc + d, a0), V::store(acc + d + V::W, a1), V::store(acc + d + 2 * V::W, a2), V::store(acc + d + 3 * V::W, a3);
    }
    for (; d < n; d += V::W) {
      const int64_t k = n - d < V::W ? n - d : V::W;
      const bool full = k == V::W;
      R a = full ? V::load(acc + d) : V::loadn(acc + d, k);
      for (int64_t j = 0; j < nr; j++) {
        if (p[j] == 0.0f) continue;
        const float* vr = Vm + j * ldv + d;
        a = V::fmadd(V::set1(p[j]), full ? V::load(vr) : V::loadn(vr, k), a);
      }
      full ? V::store(acc + d, a) : V::storen(acc + d, a, k);
    }
  }
  static float exp_sub(float x) { return std::exp(x); }
  static float exp_sub_sum(float* s, int64_t nr, float m) { return vexp_sub_store<V>(nr, s, m, s); }
};

}  // namespace simd
