// Flash-style attention on the GPU vs a naive CPU reference (the full score matrix in double):
// causal and padding masks, a KV-cache query offset, GQA, additive bias (incl. broadcast over the
// batch), row strides, head dims 32..256, and fully-masked rows. The reference backward is
// validated by central finite differences on a small case.
#include <algorithm>

#include "test_util.h"

using namespace lt;
namespace lc = loom::cuda;
using VD = std::vector<double>;

struct Case {
  const char* name;
  int B, Tq, Tk, Hq, Hkv, Dh;
  bool causal;
  int q_offset;
  bool mask, bias, bias_bcast_b;
  int pad;  // extra elements per row (row strides > H*Dh)
};

struct Ref {
  const Case& c;
  int ldq, ldk, ldo;
  double scale;
  std::vector<uint8_t> mask;
  int64_t sb, sh, si;
  VD bias;
  int64_t qi(int b, int t, int h) const { return (int64_t(b) * c.Tq + t) * ldq + h * c.Dh; }
  int64_t ki(int b, int t, int h) const { return (int64_t(b) * c.Tk + t) * ldk + h * c.Dh; }
  int64_t oi(int b, int t, int h) const { return (int64_t(b) * c.Tq + t) * ldo + h * c.Dh; }
  bool visible(int b, int i, int j) const {
    if (c.causal && j > i + c.q_offset) return false;
    if (c.mask && !mask[size_t(b) * c.Tk + j]) return false;
    return true;
  }
  // P (B, Hq, Tq, Tk) probabilities
  VD probs(const VD& q, const VD& k, const VD& bias_) const {
    VD P(size_t(c.B) * c.Hq * c.Tq * c.Tk, 0);
    int G = c.Hq / c.Hkv;
    for (int b = 0; b < c.B; b++)
      for (int h = 0; h < c.Hq; h++)
        for (int i = 0; i < c.Tq; i++) {
          double* p = &P[((size_t(b) * c.Hq + h) * c.Tq + i) * c.Tk];
          double m = -1e300;
          bool any = false;
          for (int j = 0; j < c.Tk; j++) {
            if (!visible(b, i, j)) continue;
            double s = 0;
            for (int d = 0; d < c.Dh; d++) s += q[qi(b, i, h) + d] * k[ki(b, j, h / G) + d];
            s *= scale;
            if (c.bias) s += bias_[b * sb + h * sh + i * si + j];
            p[j] = s;
            m = std::max(m, s);
            any = true;
          }
          if (!any) continue;
          double z = 0;
          for (int j = 0; j < c.Tk; j++) z += visible(b, i, j) ? std::exp(p[j] - m) : 0;
          for (int j = 0; j < c.Tk; j++) p[j] = visible(b, i, j) ? std::exp(p[j] - m) / z : 0;
        }
    return P;
  }
  VD fwd(const VD& q, const VD& k, const VD& v, const VD& bias_) const {
    VD P = probs(q, k, bias_), o(size_t(c.B) * c.Tq * ldo, 0);
    int G = c.Hq / c.Hkv;
    for (int b = 0; b < c.B; b++)
      for (int h = 0; h < c.Hq; h++)
        for (int i = 0; i < c.Tq; i++)
          for (int j = 0; j < c.Tk; j++) {
            double pij = P[((size_t(b) * c.Hq + h) * c.Tq + i) * c.Tk + j];
            if (pij == 0) continue;
            for (int d = 0; d < c.Dh; d++) o[oi(b, i, h) + d] += pij * v[ki(b, j, h / G) + d];
          }
    return o;
  }
  void bwd(const VD& q, const VD& k, const VD& v, const VD& dout, VD& dq, VD& dk, VD& dv, VD& dbias) const {
    VD P = probs(q, k, bias);
    int G = c.Hq / c.Hkv;
    dq.assign(q.size(), 0);
    dk.assign(k.size(), 0);
    dv.assign(v.size(), 0);
    dbias.assign(bias.size(), 0);
    for (int b = 0; b < c.B; b++)
      for (int h = 0; h < c.Hq; h++)
        for (int i = 0; i < c.Tq; i++) {
          const double* p = &P[((size_t(b) * c.Hq + h) * c.Tq + i) * c.Tk];
          VD dp(c.Tk, 0);
          double sum = 0;
          for (int j = 0; j < c.Tk; j++) {
            for (int d = 0; d < c.Dh; d++) dp[j] += dout[oi(b, i, h) + d] * v[ki(b, j, h / G) + d];
            sum += p[j] * dp[j];
          }
          for (int j = 0; j < c.Tk; j++) {
            double ds = p[j] * (dp[j] - sum);
            for (int d = 0; d < c.Dh; d++) {
              dv[ki(b, j, h / G) + d] += p[j] * dout[oi(b, i, h) + d];
              dq[qi(b, i, h) + d] += scale * ds * k[ki(b, j, h / G) + d];
              dk[ki(b, j, h / G) + d] += scale * ds * q[qi(b, i, h) + d];
            }
            if (c.bias) dbias[b * sb + h * sh + i * si + j] += ds;
          }
        }
  }
};

static void run_case(const Case& c, bool fd) {
  Ref r{c, c.Hq * c.Dh + c.pad, c.Hkv * c.Dh + c.pad, c.Hq * c.Dh + c.pad, 1 / std::sqrt(double(c.Dh)), {}, 0, 0, 0, {}};
  auto q = randn(size_t(c.B) * c.Tq * r.ldq), k = randn(size_t(c.B) * c.Tk * r.ldk), v = randn(size_t(c.B) * c.Tk * r.ldk);
  auto dout = randn(size_t(c.B) * c.Tq * r.ldo);
  if (c.mask) {
    r.mask.assign(size_t(c.B) * c.Tk, 1);
    for (int b = 0; b < c.B; b++)
      for (int j = 0; j < c.Tk; j++) r.mask[size_t(b) * c.Tk + j] = (b == 1) ? 0 : (j % 5 != 2);  // batch 1: all padding
  }
  if (c.bias) {
    r.si = c.Tk + 3;
    r.sh = int64_t(c.Tq) * r.si;
    r.sb = c.bias_bcast_b ? 0 : c.Hq * r.sh;
    r.bias = to_d(randn(size_t((c.B - 1) * r.sb + c.Hq * r.sh), 0.5f));
  }
  std::string nm = c.name;
  VD o = r.fwd(to_d(q), to_d(k), to_d(v), r.bias);
  VD dq, dk, dv, db;
  r.bwd(to_d(q), to_d(k), to_d(v), to_d(dout), dq, dk, dv, db);
  if (fd) {
    auto L = [&](const VD& qq, const VD& kk, const VD& vv, const VD& bb) {
      VD oo = r.fwd(qq, kk, vv, bb);
      double s = 0;
      for (size_t i = 0; i < oo.size(); i++) s += oo[i] * dout[i];
      return s;
    };
    fd_check(nm + " ref dq", to_d(q), dq, [&](const VD& x) { return L(x, to_d(k), to_d(v), r.bias); }, 10, 1e-6, 1e-5);
    fd_check(nm + " ref dk", to_d(k), dk, [&](const VD& x) { return L(to_d(q), x, to_d(v), r.bias); }, 10, 1e-6, 1e-5);
    fd_check(nm + " ref dv", to_d(v), dv, [&](const VD& x) { return L(to_d(q), to_d(k), x, r.bias); }, 10, 1e-6, 1e-5);
    if (c.bias)
      fd_check(nm + " ref dbias", r.bias, db, [&](const VD& x) { return L(to_d(q), to_d(k), to_d(v), x); }, 10, 1e-6,
               1e-5);
  }
  Dev<float> dq_(q), dk_(k), dv_(v), dout_(dout), out(o.size()), lse(size_t(c.B) * c.Hq * c.Tq);
  Dev<float> gq(q.size()), gk(k.size()), gv(v.size());
  Dev<uint8_t> dmask(c.mask ? r.mask : std::vector<uint8_t>(1));
  Dev<float> dbias(c.bias ? to_f(r.bias) : std::vector<float>(1)), gbias(c.bias ? r.bias.size() : 1);
  // Padding columns of the outputs are left alone by the kernels: start them at the reference's 0.
  loom::cuda::dev_zero(out.p, out.n * 4);
  loom::cuda::dev_zero(gq.p, gq.n * 4);
  loom::cuda::dev_zero(gk.p, gk.n * 4);
  loom::cuda::dev_zero(gv.p, gv.n * 4);
  lc::AttnParams p;
  p.B = c.B; p.Tq = c.Tq; p.Tk = c.Tk; p.Hq = c.Hq; p.Hkv = c.Hkv; p.Dh = c.Dh;
  p.ldq = r.ldq; p.ldk = r.ldk; p.ldv = r.ldk; p.ldo = r.ldo;
  p.causal = c.causal; p.q_offset = c.q_offset;
  p.key_mask = c.mask ? dmask.p : nullptr;
  p.bias = c.bias ? dbias.p : nullptr;
  p.bias_sb = r.sb; p.bias_sh = r.sh; p.bias_si = r.si;
  lc::attention_fwd(p, dq_.p, dk_.p, dv_.p, out.p, lse.p);
  close(nm + " fwd", out.get(), to_f(o), 2e-5, 1e-4);
  lc::attention_bwd(p, dq_.p, dk_.p, dv_.p, out.p, lse.p, dout_.p, gq.p, gk.p, gv.p, c.bias ? gbias.p : nullptr);
  close(nm + " dq", gq.get(), to_f(dq), 1e-4, 1e-3);
  close(nm + " dk", gk.get(), to_f(dk), 1e-4, 1e-3);
  close(nm + " dv", gv.get(), to_f(dv), 1e-4, 1e-3);
  if (c.bias) {
    // compare only the addressed elements (the row gap si > Tk is never touched by the reference)
    std::vector<float> got = gbias.get(), want = to_f(db);
    for (int b = 0; b < c.B; b++)
      for (int h = 0; h < c.Hq; h++)
        for (int i = 0; i < c.Tq; i++)
          for (int j = c.Tk; j < r.si; j++) got[b * r.sb + h * r.sh + i * r.si + j] = 0, want[b * r.sb + h * r.sh + i * r.si + j] = 0;
    close(nm + " dbias", got, want, 1e-5, 1e-3);
  }
}

int main() {
  require_gpu("test_attention");
  const Case cases[] = {
      {"tiny causal+bias+mask (fd)", 2, 5, 6, 2, 1, 8, true, 1, true, true, false, 0},
      {"causal GQA Dh=64", 2, 37, 37, 4, 2, 64, true, 0, false, false, false, 0},
      {"kv-cache suffix Dh=80 mask", 2, 5, 70, 2, 1, 80, true, 65, true, false, false, 0},
      {"bias+mask Dh=128", 2, 33, 41, 3, 3, 128, false, 0, true, true, false, 0},
      {"bias broadcast over batch", 3, 17, 19, 2, 2, 64, false, 0, false, true, true, 0},
      {"Dh=256 GQA", 1, 9, 100, 2, 1, 256, false, 0, false, false, false, 0},
      {"row strides Dh=32", 2, 31, 45, 4, 2, 32, true, 14, false, false, false, 5},
      {"decode M=1", 3, 1, 130, 8, 2, 64, true, 129, false, false, false, 0},
  };
  try {
    bool first = true;
    for (const Case& c : cases) {
      run_case(c, first);
      first = false;
    }
    lc::synchronize();
  } catch (const std::exception& e) {
    std::printf("FAIL: exception: %s\n", e.what());
    return 1;
  }
  return finish("test_attention");
}
