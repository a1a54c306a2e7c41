// Fused ops on the GPU vs CPU references (double) on random shapes incl. odd sizes; each
// reference backward is itself validated against central finite differences of its forward.
#include <algorithm>

#include "test_util.h"

using namespace lt;
namespace lc = loom::cuda;
using VD = std::vector<double>;

static double dot(const VD& a, const VD& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); i++) s += a[i] * b[i];
  return s;
}

// ---- references ----
static VD ln_ref(int R, int D, const VD& x, const VD& w, const VD& b, double eps, VD* mean, VD* rstd, bool rms) {
  VD y(x.size());
  if (mean) mean->assign(R, 0);
  if (rstd) rstd->assign(R, 0);
  for (int r = 0; r < R; r++) {
    const double* xr = &x[size_t(r) * D];
    double mu = 0, v = 0;
    if (!rms) {
      for (int i = 0; i < D; i++) mu += xr[i];
      mu /= D;
    }
    for (int i = 0; i < D; i++) v += (xr[i] - mu) * (xr[i] - mu);
    double rs = 1 / std::sqrt(v / D + eps);
    for (int i = 0; i < D; i++) y[size_t(r) * D + i] = (xr[i] - mu) * rs * w[i] + (rms ? 0 : b[i]);
    if (mean) (*mean)[r] = mu;
    if (rstd) (*rstd)[r] = rs;
  }
  return y;
}
// dx, dw, db of sum(y * g)
static void ln_ref_bwd(int R, int D, const VD& x, const VD& w, const VD& g, double eps, bool rms, VD& dx, VD& dw,
                       VD& db) {
  VD mean, rstd;
  ln_ref(R, D, x, w, VD(D, 0), eps, &mean, &rstd, rms);
  dx.assign(x.size(), 0);
  dw.assign(D, 0);
  db.assign(D, 0);
  for (int r = 0; r < R; r++) {
    double s1 = 0, s2 = 0, rs = rstd[r], mu = mean[r];
    for (int i = 0; i < D; i++) {
      double xh = (x[size_t(r) * D + i] - mu) * rs, gi = g[size_t(r) * D + i];
      dw[i] += gi * xh;
      db[i] += gi;
      s1 += gi * w[i];
      s2 += gi * w[i] * xh;
    }
    s1 /= D;
    s2 /= D;
    for (int i = 0; i < D; i++) {
      double xh = (x[size_t(r) * D + i] - mu) * rs;
      dx[size_t(r) * D + i] = rs * (g[size_t(r) * D + i] * w[i] - (rms ? 0 : s1) - xh * s2);
    }
  }
}

static double gelu_d(double x, bool approx) {
  if (approx) return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
  return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0)));
}
static double sig(double x) { return 1 / (1 + std::exp(-x)); }

static void test_elementwise() {
  int n = randint(1000, 5000) | 1;
  auto a = randn(n), b = randn(n), g = randn(n);
  Dev<float> da(a), db(b), dy(n), dg(g);
  std::vector<float> ref(n);
  lc::add_fwd(n, da.p, db.p, dy.p);
  for (int i = 0; i < n; i++) ref[i] = a[i] + b[i];
  close("add", dy.get(), ref, 0, 0);
  lc::mul_fwd(n, da.p, db.p, dy.p);
  for (int i = 0; i < n; i++) ref[i] = a[i] * b[i];
  close("mul", dy.get(), ref, 0, 0);
  lc::scale_fwd(n, da.p, 0.37f, dy.p);
  for (int i = 0; i < n; i++) ref[i] = 0.37f * a[i];
  close("scale", dy.get(), ref, 0, 0);
  dy.set(b);
  lc::axpy(n, -1.5f, da.p, dy.p);
  for (int i = 0; i < n; i++) ref[i] = b[i] + -1.5f * a[i];
  close("axpy", dy.get(), ref, 1e-6, 1e-6);
  // mul backward accumulates
  Dev<float> dda(a), ddb(b);
  lc::mul_bwd(n, da.p, db.p, dg.p, dda.p, ddb.p);
  std::vector<float> ra(n), rb(n);
  for (int i = 0; i < n; i++) ra[i] = a[i] + g[i] * b[i], rb[i] = b[i] + g[i] * a[i];
  close("mul_bwd da", dda.get(), ra, 1e-6, 1e-6);
  close("mul_bwd db", ddb.get(), rb, 1e-6, 1e-6);
  // bias add / bias backward
  int R = randint(1, 300), D = randint(1, 700);
  auto x = randn(size_t(R) * D), bias = randn(D), db0 = randn(D);
  Dev<float> dx(x), dbias(bias), dbg(db0);
  lc::add_bias(R, D, dx.p, dbias.p);
  std::vector<float> rx = x, rdb = db0;
  for (int r = 0; r < R; r++)
    for (int c = 0; c < D; c++) rx[size_t(r) * D + c] += bias[c], rdb[c] += x[size_t(r) * D + c];
  close("add_bias", dx.get(), rx, 1e-6, 1e-6);
  Dev<float> dx0(x);
  lc::bias_bwd(R, D, dx0.p, dbg.p);
  close("bias_bwd", dbg.get(), rdb, 1e-4, 1e-5);
  // conversions
  std::vector<uint16_t> h16(n);
  Dev<uint16_t> d16(n);
  lc::convert_f32_to_bf16(n, da.p, d16.p);
  auto got16 = d16.get();
  bool same = true;
  for (int i = 0; i < n; i++) same &= got16[i] == to_bf16(a[i]);
  expect(same, "convert_f32_to_bf16 rounds to nearest even");
  lc::convert_bf16_to_f32(n, d16.p, dy.p);
  for (int i = 0; i < n; i++) ref[i] = from_bf16(got16[i]);
  close("convert_bf16_to_f32", dy.get(), ref, 0, 0);
}

static void test_activations() {
  int n = 3001;
  auto x = randn(n, 2.f), g = randn(n), u = randn(n);
  Dev<float> dx(x), dg(g), du(u), dy(n), dd(n), dd2(n);
  for (int approx = 0; approx < 2; approx++) {
    std::string nm = approx ? "gelu(tanh)" : "gelu(erf)";
    lc::gelu_fwd(n, dx.p, dy.p, approx);
    std::vector<float> ref(n);
    for (int i = 0; i < n; i++) ref[i] = float(gelu_d(x[i], approx));
    close(nm + " fwd", dy.get(), ref, 1e-6, 1e-5);
    lc::gelu_bwd(n, dx.p, dg.p, dd.p, approx);
    // reference gradient: central differences of the double forward (smooth function)
    for (int i = 0; i < n; i++) {
      double h = 1e-6;
      ref[i] = float(g[i] * (gelu_d(x[i] + h, approx) - gelu_d(x[i] - h, approx)) / (2 * h));
    }
    close(nm + " bwd vs finite differences", dd.get(), ref, 1e-5, 1e-4);
  }
  lc::silu_fwd(n, dx.p, dy.p);
  std::vector<float> ref(n), ref2(n);
  for (int i = 0; i < n; i++) ref[i] = float(x[i] * sig(x[i]));
  close("silu fwd", dy.get(), ref, 1e-6, 1e-5);
  lc::silu_bwd(n, dx.p, dg.p, dd.p);
  for (int i = 0; i < n; i++) {
    double h = 1e-6, xp = x[i] + h, xm = x[i] - h;
    ref[i] = float(g[i] * (xp * sig(xp) - xm * sig(xm)) / (2 * h));
  }
  close("silu bwd vs finite differences", dd.get(), ref, 1e-5, 1e-4);
  lc::swiglu_fwd(n, dx.p, du.p, dy.p);
  for (int i = 0; i < n; i++) ref[i] = float(x[i] * sig(x[i]) * u[i]);
  close("swiglu fwd", dy.get(), ref, 1e-6, 1e-5);
  lc::swiglu_bwd(n, dx.p, du.p, dg.p, dd.p, dd2.p);
  for (int i = 0; i < n; i++) {
    double h = 1e-6, xp = x[i] + h, xm = x[i] - h;
    ref[i] = float(g[i] * u[i] * (xp * sig(xp) - xm * sig(xm)) / (2 * h));
    ref2[i] = float(g[i] * x[i] * sig(x[i]));
  }
  close("swiglu bwd dgate vs finite differences", dd.get(), ref, 1e-5, 1e-4);
  close("swiglu bwd dup", dd2.get(), ref2, 1e-6, 1e-5);
}

static void test_norms() {
  for (int rms = 0; rms < 2; rms++) {
    for (int D : {1, 7, 64, 577, 2048}) {
      int R = randint(1, 37);
      double eps = 1e-5;
      auto x = randn(size_t(R) * D, 1.5f), w = randn(D), b = randn(D), g = randn(size_t(R) * D);
      for (auto& v : x) v += 0.3f;
      std::string nm = std::string(rms ? "rmsnorm" : "layernorm") + " D=" + std::to_string(D);
      VD mean, rstd;
      VD y = ln_ref(R, D, to_d(x), to_d(w), to_d(b), eps, &mean, &rstd, rms);
      Dev<float> dx(x), dw(w), db(b), dy(size_t(R) * D), dmean(R), drstd(R), dg(g), ddx(size_t(R) * D);
      auto dw0 = randn(D), db0 = randn(D);
      Dev<float> ddw(dw0), ddb(db0);
      if (rms) lc::rmsnorm_fwd(R, D, dx.p, dw.p, float(eps), dy.p, drstd.p);
      else lc::layernorm_fwd(R, D, dx.p, dw.p, db.p, float(eps), dy.p, dmean.p, drstd.p);
      close(nm + " fwd", dy.get(), to_f(y), 1e-5, 1e-4);
      close(nm + " rstd", drstd.get(), to_f(rstd), 1e-5, 1e-4);
      VD rdx, rdw, rdb;
      ln_ref_bwd(R, D, to_d(x), to_d(w), to_d(g), eps, rms, rdx, rdw, rdb);
      if (D > 1 || rms)
        fd_check(nm + " ref", to_d(x), rdx, [&](const VD& xx) {
          return dot(ln_ref(R, D, xx, to_d(w), to_d(b), eps, nullptr, nullptr, rms), to_d(g));
        }, 8, 1e-6, 1e-4);
      if (rms) lc::rmsnorm_bwd(R, D, dx.p, dw.p, drstd.p, dg.p, ddx.p, ddw.p);
      else lc::layernorm_bwd(R, D, dx.p, dw.p, dmean.p, drstd.p, dg.p, ddx.p, ddw.p, ddb.p);
      close(nm + " dx", ddx.get(), to_f(rdx), 1e-4, 1e-3);
      for (int i = 0; i < D; i++) rdw[i] += dw0[i], rdb[i] += db0[i];
      close(nm + " dw (accumulated)", ddw.get(), to_f(rdw), 1e-4, 1e-4);
      if (!rms) close(nm + " db (accumulated)", ddb.get(), to_f(rdb), 1e-4, 1e-4);
    }
  }
}

static void test_softmax() {
  for (int D : {1, 5, 128, 1000, 32001}) {
    int R = randint(1, 20);
    auto x = randn(size_t(R) * D, 3.f), g = randn(size_t(R) * D);
    VD y(x.size()), ly(x.size());
    for (int r = 0; r < R; r++) {
      double m = -1e300, s = 0;
      for (int i = 0; i < D; i++) m = std::max(m, double(x[size_t(r) * D + i]));
      for (int i = 0; i < D; i++) s += std::exp(x[size_t(r) * D + i] - m);
      for (int i = 0; i < D; i++) {
        y[size_t(r) * D + i] = std::exp(x[size_t(r) * D + i] - m) / s;
        ly[size_t(r) * D + i] = x[size_t(r) * D + i] - m - std::log(s);
      }
    }
    std::string nm = "softmax D=" + std::to_string(D);
    Dev<float> dx(x), dy(x.size()), dg(g), ddx(x.size());
    lc::softmax_fwd(R, D, dx.p, dy.p);
    close(nm + " fwd", dy.get(), to_f(y), 1e-7, 1e-5);
    lc::log_softmax_fwd(R, D, dx.p, ddx.p);
    close("log_" + nm, ddx.get(), to_f(ly), 1e-5, 1e-5);
    lc::softmax_bwd(R, D, dy.p, dg.p, ddx.p);
    VD rdx(x.size());
    for (int r = 0; r < R; r++) {
      double s = 0;
      for (int i = 0; i < D; i++) s += y[size_t(r) * D + i] * g[size_t(r) * D + i];
      for (int i = 0; i < D; i++) rdx[size_t(r) * D + i] = y[size_t(r) * D + i] * (g[size_t(r) * D + i] - s);
    }
    close(nm + " bwd", ddx.get(), to_f(rdx), 1e-6, 1e-4);
  }
}

static void test_embedding() {
  int V = 1003, D = 67, T = 301;
  auto table = randn(size_t(V) * D), dout = randn(size_t(T) * D);
  std::vector<int32_t> ids(T);
  for (auto& i : ids) i = randint(0, 40);  // many repeats: exercises the scatter-add
  Dev<float> dtab(table), dout_d(dout), dy(size_t(T) * D);
  Dev<int32_t> dids(ids);
  lc::embedding_fwd(T, D, V, dids.p, lc::W_F32, dtab.p, dy.p);
  std::vector<float> ref(size_t(T) * D);
  for (int t = 0; t < T; t++)
    for (int c = 0; c < D; c++) ref[size_t(t) * D + c] = table[size_t(ids[t]) * D + c];
  close("embedding fwd f32", dy.get(), ref, 0, 0);
  std::vector<uint16_t> t16(table.size());
  for (size_t i = 0; i < table.size(); i++) t16[i] = to_bf16(table[i]);
  Dev<uint16_t> dt16(t16);
  lc::embedding_fwd(T, D, V, dids.p, lc::W_BF16, dt16.p, dy.p);
  for (int t = 0; t < T; t++)
    for (int c = 0; c < D; c++) ref[size_t(t) * D + c] = from_bf16(t16[size_t(ids[t]) * D + c]);
  close("embedding fwd bf16", dy.get(), ref, 0, 0);
  lc::embedding_bwd(T, D, V, dids.p, dout_d.p, dtab.p);
  std::vector<double> acc(table.begin(), table.end());
  for (int t = 0; t < T; t++)
    for (int c = 0; c < D; c++) acc[size_t(ids[t]) * D + c] += dout[size_t(t) * D + c];
  close("embedding bwd (scatter-add)", dtab.get(), to_f(acc), 1e-5, 1e-5);
  // out-of-range id: reported, not a crash
  ids[5] = V;
  dids.set(ids);
  lc::embedding_fwd(T, D, V, dids.p, lc::W_F32, dtab.p, dy.p);
  bool threw = false;
  try {
    lc::synchronize();
  } catch (const std::invalid_argument&) {
    threw = true;
  }
  expect(threw, "embedding with an out-of-range id throws");
}

static void test_rope() {
  for (int type = 0; type < 3; type++) {
    int T = 37, H = 3, Dh = 64, ld = H * Dh + 8;
    lc::RopeScaling sc;
    sc.type = type;
    sc.factor = type == 1 ? 8.f : 2.f;
    sc.original_max_position = 8192;
    std::vector<float> inv(Dh / 2);
    lc::rope_inv_freq(Dh, 500000.f, sc, inv.data());
    // llama3 rule, independent spelling: high frequencies kept, low ones divided by factor.
    if (type == 1) {
      double f0 = 1.0, flast = 1.0 / std::pow(500000.0, double(Dh - 2) / Dh);
      expect(std::fabs(inv[0] - f0) < 1e-6, "llama3 inv_freq keeps the highest frequency");
      expect(std::fabs(inv[Dh / 2 - 1] - flast / 8.0) < 1e-9 + 1e-6 * flast, "llama3 inv_freq divides the lowest");
    }
    std::vector<int32_t> pos(T);
    for (int t = 0; t < T; t++) pos[t] = t * 211 + 5;  // angles up to thousands of radians
    auto x = randn(size_t(T) * ld);
    Dev<float> dx(x), dinv(inv);
    Dev<int32_t> dpos(pos);
    lc::rope_fwd(T, H, Dh, ld, dpos.p, dinv.p, dx.p);
    std::vector<float> ref = x;
    for (int t = 0; t < T; t++)
      for (int h = 0; h < H; h++)
        for (int i = 0; i < Dh / 2; i++) {
          float ang = float(pos[t]) * inv[i];  // fp32 angle, as Hugging Face computes it
          double c = std::cos(double(ang)), s = std::sin(double(ang));
          size_t o = size_t(t) * ld + h * Dh;
          double x1 = x[o + i], x2 = x[o + i + Dh / 2];
          ref[o + i] = float(x1 * c - x2 * s);
          ref[o + i + Dh / 2] = float(x2 * c + x1 * s);
        }
    close("rope fwd type " + std::to_string(type), dx.get(), ref, 2e-5, 1e-5);
    // backward of a rotation is the inverse rotation: rope_bwd(rope_fwd(x)) == x
    lc::rope_bwd(T, H, Dh, ld, dpos.p, dinv.p, dx.p);
    close("rope bwd inverts fwd type " + std::to_string(type), dx.get(), x, 2e-5, 1e-5);
  }
}

static void test_xent() {
  for (int V : {3, 1000, 50257}) {
    int T = randint(1, 40);
    auto logits = randn(size_t(T) * V, 2.f);
    std::vector<int32_t> labels(T);
    for (int t = 0; t < T; t++) labels[t] = (t % 4 == 3) ? -100 : randint(0, V - 1);
    VD lse(T), dl(size_t(T) * V, 0), losses(T, 0);
    int cnt = 0;
    double total = 0;
    for (int t = 0; t < T; t++) {
      double m = -1e300, s = 0;
      for (int i = 0; i < V; i++) m = std::max(m, double(logits[size_t(t) * V + i]));
      for (int i = 0; i < V; i++) s += std::exp(logits[size_t(t) * V + i] - m);
      lse[t] = m + std::log(s);
      if (labels[t] >= 0) {
        losses[t] = lse[t] - logits[size_t(t) * V + labels[t]];
        total += losses[t];
        cnt++;
      }
    }
    for (int t = 0; t < T; t++)
      if (labels[t] >= 0)
        for (int i = 0; i < V; i++)
          dl[size_t(t) * V + i] = (std::exp(logits[size_t(t) * V + i] - lse[t]) - (i == labels[t])) / cnt;
    std::string nm = "cross_entropy V=" + std::to_string(V);
    if (V == 3) {  // validate the reference gradient by finite differences
      auto lossf = [&](const VD& lg) {
        double tot = 0;
        for (int t = 0; t < T; t++) {
          if (labels[t] < 0) continue;
          double m = -1e300, s = 0;
          for (int i = 0; i < V; i++) m = std::max(m, lg[size_t(t) * V + i]);
          for (int i = 0; i < V; i++) s += std::exp(lg[size_t(t) * V + i] - m);
          tot += m + std::log(s) - lg[size_t(t) * V + labels[t]];
        }
        return cnt ? tot / cnt : 0.0;
      };
      fd_check(nm + " ref", to_d(logits), dl, lossf, 12, 1e-6, 1e-5);
    }
    Dev<float> dlog(logits), ddl(size_t(T) * V), dloss(T);
    Dev<int32_t> dlab(labels);
    float mean = lc::cross_entropy_fwd_bwd(T, V, dlog.p, dlab.p, ddl.p, dloss.p);
    expect(std::fabs(mean - (cnt ? total / cnt : 0.0)) < 1e-4 * (1 + std::fabs(total / std::max(cnt, 1))),
           nm + " mean loss");
    close(nm + " losses", dloss.get(), to_f(losses), 1e-4, 1e-5);
    close(nm + " dlogits", ddl.get(), to_f(dl), 1e-7, 1e-4);
  }
  // all labels ignored → 0 and zero gradient; a label >= V throws
  {
    int T = 4, V = 10;
    auto logits = randn(size_t(T) * V);
    std::vector<int32_t> labels(T, -100);
    Dev<float> dlog(logits), ddl(size_t(T) * V);
    Dev<int32_t> dlab(labels);
    float mean = lc::cross_entropy_fwd_bwd(T, V, dlog.p, dlab.p, ddl.p, nullptr);
    expect(mean == 0.f, "cross_entropy with every label ignored is 0");
    close("cross_entropy ignored rows have zero gradient", ddl.get(), std::vector<float>(size_t(T) * V, 0.f), 0, 0);
    labels[1] = V;
    dlab.set(labels);
    bool threw = false;
    try {
      lc::cross_entropy_fwd_bwd(T, V, dlog.p, dlab.p, ddl.p, nullptr);
    } catch (const std::invalid_argument&) {
      threw = true;
    }
    expect(threw, "cross_entropy with a label >= V throws");
  }
}

static void test_adamw() {
  int n = 4099;
  auto p = randn(n), g = randn(n), m = randn(n, 0.1f), v = randn(n, 0.1f);
  for (auto& x : v) x = std::fabs(x);
  Dev<float> dp(p), dg(g), dm(m), dv(v);
  float lr = 1e-3f, b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f;
  for (int step = 1; step <= 3; step++) {
    lc::adamw_step(n, dp.p, dg.p, dm.p, dv.p, lr, b1, b2, eps, wd, step);
    double bc1 = 1 - std::pow(b1, step), bc2 = 1 - std::pow(b2, step);
    for (int i = 0; i < n; i++) {
      m[i] = b1 * m[i] + (1 - b1) * g[i];
      v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
      double pi = p[i];
      pi -= lr * wd * pi;
      pi -= lr * (m[i] / bc1) / (std::sqrt(v[i] / bc2) + eps);
      p[i] = float(pi);
    }
  }
  close("adamw p", dp.get(), p, 1e-6, 1e-5);
  close("adamw m", dm.get(), m, 1e-6, 1e-5);
  close("adamw v", dv.get(), v, 1e-7, 1e-5);
  double s = 0;
  for (float x : g) s += double(x) * x;
  float nrm = lc::l2_norm(n, dg.p);
  expect(std::fabs(nrm - std::sqrt(s)) < 1e-4 * std::sqrt(s), "l2_norm");
}

static void test_lora() {
  for (int wt = 0; wt < 2; wt++) {
    int M = 13, N = 37, K = 29, r = 4;
    float s = 2.f;
    auto x = randn(size_t(M) * K), w = randn(size_t(N) * K, 0.2f), bias = randn(N), A = randn(size_t(r) * K, 0.2f),
         B = randn(size_t(N) * r, 0.2f), dy = randn(size_t(M) * N);
    std::vector<uint16_t> w16(w.size());
    if (wt) {
      for (size_t i = 0; i < w.size(); i++) w[i] = from_bf16(w16[i] = to_bf16(w[i]));
    }
    // reference forward: y = x Wᵀ + b + s (x Aᵀ) Bᵀ; the bf16 path may round x (and dy) to bf16
    // for the frozen product on cuBLAS, so its tolerance is looser.
    auto fwd = [&](const VD& xx, const VD& AA, const VD& BB) {
      VD y(size_t(M) * N);
      for (int i = 0; i < M; i++) {
        VD xa(r, 0);
        for (int q = 0; q < r; q++)
          for (int k = 0; k < K; k++) xa[q] += xx[size_t(i) * K + k] * AA[size_t(q) * K + k];
        for (int j = 0; j < N; j++) {
          double acc = bias[j];
          for (int k = 0; k < K; k++) acc += xx[size_t(i) * K + k] * w[size_t(j) * K + k];
          for (int q = 0; q < r; q++) acc += s * xa[q] * BB[size_t(j) * r + q];
          y[size_t(i) * N + j] = acc;
        }
      }
      return y;
    };
    VD y = fwd(to_d(x), to_d(A), to_d(B));
    // analytic reference gradients of sum(y * dy)
    VD dxr(size_t(M) * K, 0), dAr(size_t(r) * K, 0), dBr(size_t(N) * r, 0);
    for (int i = 0; i < M; i++) {
      VD xa(r, 0), dxa(r, 0);
      for (int q = 0; q < r; q++)
        for (int k = 0; k < K; k++) xa[q] += double(x[size_t(i) * K + k]) * A[size_t(q) * K + k];
      for (int j = 0; j < N; j++) {
        double g = dy[size_t(i) * N + j];
        for (int q = 0; q < r; q++) dBr[size_t(j) * r + q] += s * g * xa[q], dxa[q] += s * g * B[size_t(j) * r + q];
        for (int k = 0; k < K; k++) dxr[size_t(i) * K + k] += g * w[size_t(j) * K + k];
      }
      for (int q = 0; q < r; q++)
        for (int k = 0; k < K; k++) {
          dAr[size_t(q) * K + k] += dxa[q] * x[size_t(i) * K + k];
          dxr[size_t(i) * K + k] += dxa[q] * A[size_t(q) * K + k];
        }
    }
    if (!wt) {
      fd_check("lora ref dA", to_d(A), dAr, [&](const VD& AA) { return dot(fwd(to_d(x), AA, to_d(B)), to_d(dy)); });
      fd_check("lora ref dB", to_d(B), dBr, [&](const VD& BB) { return dot(fwd(to_d(x), to_d(A), BB), to_d(dy)); });
      fd_check("lora ref dx", to_d(x), dxr, [&](const VD& xx) { return dot(fwd(xx, to_d(A), to_d(B)), to_d(dy)); });
    }
    Dev<float> dx(x), dw(w), dbias(bias), dA(A), dB(B), dxa(size_t(M) * r), dyo(size_t(M) * N), ddy(dy),
        ddx(size_t(M) * K);
    Dev<uint16_t> dw16(w16.empty() ? std::vector<uint16_t>(1) : w16);
    const void* wp = wt ? (const void*)dw16.p : (const void*)dw.p;
    int wtype = wt ? lc::W_BF16 : lc::W_F32;
    double tol = wt ? 2e-2 : 1e-4;
    lc::lora_fwd(M, N, K, r, dx.p, wtype, wp, dbias.p, dA.p, dB.p, s, dxa.p, dyo.p);
    std::string nm = wt ? "lora(bf16 W)" : "lora(f32 W)";
    close(nm + " fwd", dyo.get(), to_f(y), tol, tol);
    auto dA0 = randn(size_t(r) * K), dB0 = randn(size_t(N) * r);
    Dev<float> gA(dA0), gB(dB0);
    lc::lora_bwd(M, N, K, r, dx.p, wtype, wp, dA.p, dB.p, s, dxa.p, ddy.p, ddx.p, gA.p, gB.p);
    for (size_t i = 0; i < dAr.size(); i++) dAr[i] += dA0[i];
    for (size_t i = 0; i < dBr.size(); i++) dBr[i] += dB0[i];
    close(nm + " dA (accumulated)", gA.get(), to_f(dAr), 1e-4, 1e-4);
    close(nm + " dB (accumulated)", gB.get(), to_f(dBr), 1e-4, 1e-4);
    close(nm + " dx", ddx.get(), to_f(dxr), tol, tol);
  }
}

int main() {
  require_gpu("test_ops");
  try {
    test_elementwise();
    test_activations();
    test_norms();
    test_softmax();
    test_embedding();
    test_rope();
    test_xent();
    test_adamw();
    test_lora();
    lc::synchronize();
  } catch (const std::exception& e) {
    std::printf("FAIL: exception: %s\n", e.what());
    return 1;
  }
  return finish("test_ops");
}
