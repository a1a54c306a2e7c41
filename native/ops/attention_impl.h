// Tiled attention with online softmax (flash-attention style), written once and instantiated per
// ISA: attention.cc (portable loops), attention_avx2.cc, attention_avx512.cc. Only the inner
// vector primitives differ (struct P below), so every path runs the same algorithm.
//
// P provides (n = row length, all single-threaded):
//   float dot(const float* a, const float* b, int64_t n)
//   void  axpy(float a, const float* x, float* y, int64_t n)             // y += a x
//   void  scal(float* x, float s, int64_t n)                              // x *= s
//   void  rows_dot(int64_t nr, const float* q, const float* K, int64_t ldk, int64_t n, float* out)
//                                                                         // out[j] = q · K[j]
//   void  rows_axpy(int64_t nr, const float* p, const float* V, int64_t ldv, int64_t n, float* acc)
//                                                                         // acc += Σ_j p[j] V[j]
//   float exp_sub_sum(float* s, int64_t nr, float m)   // s[j] = exp(s[j] - m) (0 for -inf), returns Σ
//   float exp_sub(float x)                             // scalar exp, same accuracy as exp_sub_sum
//
// This file is included INSIDE an anonymous namespace of each ISA's translation unit (after
// <cmath>, <cstdlib>, <limits>, loom/core.h and loom/ops.h), so every function here has internal
// linkage: code compiled with AVX-512 flags can never be merged by the linker into the AVX2 or
// portable paths. For the same reason it uses no out-of-line std templates (no std::vector).
#pragma once

namespace attn_detail {

inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
inline int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

// A zero-initialized float scratch buffer (malloc/free, no std templates).
struct Buf {
  float* p;
  explicit Buf(int64_t n) : p(static_cast<float*>(std::calloc(size_t(n > 0 ? n : 1), sizeof(float)))) {
    if (!p) throw std::bad_alloc();
  }
  ~Buf() { std::free(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  float& operator[](int64_t i) { return p[i]; }
  float* data() { return p; }
};
inline void fill(float* p, int64_t n, float v) {
  for (int64_t i = 0; i < n; i++) p[i] = v;
}

constexpr int64_t kTileQ = 16;   // query rows per task (forward) / per block (backward)
constexpr int64_t kTileK = 128;  // keys per tile: scores of one tile row stay in L1

struct Geometry {
  int64_t B, Tq, Tk, Hq, Hkv, Dh, rep, ldq, ldk, ldv, ldo;
  float scale;
  explicit Geometry(const AttnParams& p) {
    B = p.B, Tq = p.Tq, Tk = p.Tk, Hq = p.Hq, Hkv = p.Hkv, Dh = p.Dh;
    if (Hkv <= 0 || Hq % Hkv != 0) throw std::invalid_argument("attention: Hq must be a multiple of Hkv");
    rep = Hq / Hkv;
    ldq = p.ldq ? p.ldq : Hq * Dh;
    ldk = p.ldk ? p.ldk : Hkv * Dh;
    ldv = p.ldv ? p.ldv : Hkv * Dh;
    ldo = p.ldo ? p.ldo : Hq * Dh;
    scale = p.scale != 0.0f ? p.scale : float(1.0 / std::sqrt(double(Dh)));
  }
};

// Number of keys query i may see (causal: j <= i + q_offset), in [0, Tk].
inline int64_t key_limit(const AttnParams& p, int64_t i) {
  if (!p.causal) return p.Tk;
  return imin(imax(i + p.q_offset + 1, 0), p.Tk);
}

// Fills s[0, n) for query row i, keys [j0, j0+n): scale·q·k + bias, -inf where masked.
template <class P>
inline void scores_row(const AttnParams& p, const Geometry& g, int64_t b, int64_t h, int64_t i, const float* qi,
                       const float* kbase, int64_t j0, int64_t n, float* s) {
  P::rows_dot(n, qi, kbase + j0 * g.ldk, g.ldk, g.Dh, s);
  const float* bias = p.bias ? p.bias + b * p.bias_sb + h * p.bias_sh + i * p.bias_si + j0 : nullptr;
  const uint8_t* mask = p.key_mask ? p.key_mask + b * g.Tk + j0 : nullptr;
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; j++) {
    float v = s[j] * g.scale;
    if (bias) v += bias[j];
    if (mask && !mask[j]) v = ninf;
    s[j] = v;
  }
}

template <class P>
void forward(const AttnParams& p, const float* q, const float* k, const float* v, float* out, float* lse) {
  Geometry g(p);
  if (g.B <= 0 || g.Tq <= 0 || g.Hq <= 0) return;
  const int64_t nqt = (g.Tq + kTileQ - 1) / kTileQ;
  const int64_t ntasks = g.B * g.Hq * nqt;
  const float ninf = -std::numeric_limits<float>::infinity();
  parallel_for(ntasks, 1, [&](int64_t t0, int64_t t1) {
    Buf acc(kTileQ * g.Dh), s(kTileK), m(kTileQ), l(kTileQ);
    for (int64_t task = t0; task < t1; task++) {
      const int64_t qt = task % nqt, bh = task / nqt, h = bh % g.Hq, b = bh / g.Hq, kvh = h / g.rep;
      const int64_t i0 = qt * kTileQ, i1 = imin(g.Tq, i0 + kTileQ), nq = i1 - i0;
      const float* kb = k + b * g.Tk * g.ldk + kvh * g.Dh;
      const float* vb = v + b * g.Tk * g.ldv + kvh * g.Dh;
      fill(acc.data(), nq * g.Dh, 0.0f);
      fill(m.data(), kTileQ, ninf);
      fill(l.data(), kTileQ, 0.0f);
      const int64_t jend = key_limit(p, i1 - 1);  // limits grow with i
      for (int64_t j0 = 0; j0 < jend; j0 += kTileK) {
        const int64_t j1 = imin(jend, j0 + kTileK);
        for (int64_t r = 0; r < nq; r++) {
          const int64_t i = i0 + r;
          const int64_t lim = imin(j1, key_limit(p, i));
          if (lim <= j0) continue;
          const int64_t n = lim - j0;
          const float* qi = q + (b * g.Tq + i) * g.ldq + h * g.Dh;
          scores_row<P>(p, g, b, h, i, qi, kb, j0, n, s.data());
          float mt = ninf;
          for (int64_t j = 0; j < n; j++) mt = s[j] > mt ? s[j] : mt;
          if (mt == ninf) continue;  // every key of this tile masked
          float* ai = acc.data() + r * g.Dh;
          if (mt > m[r]) {
            if (m[r] != ninf) {
              float corr = P::exp_sub(m[r] - mt);
              l[r] *= corr;
              P::scal(ai, corr, g.Dh);
            }
            m[r] = mt;
          }
          l[r] += P::exp_sub_sum(s.data(), n, m[r]);
          P::rows_axpy(n, s.data(), vb + j0 * g.ldv, g.ldv, g.Dh, ai);
        }
      }
      for (int64_t r = 0; r < nq; r++) {
        const int64_t i = i0 + r;
        float* oi = out + (b * g.Tq + i) * g.ldo + h * g.Dh;
        const float* ai = acc.data() + r * g.Dh;
        if (l[r] > 0.0f) {
          float inv = 1.0f / l[r];
          for (int64_t d = 0; d < g.Dh; d++) oi[d] = ai[d] * inv;
          if (lse) lse[(b * g.Hq + h) * g.Tq + i] = m[r] + std::log(l[r]);
        } else {  // no visible key: zeros, lse = -inf
          fill(oi, g.Dh, 0.0f);
          if (lse) lse[(b * g.Hq + h) * g.Tq + i] = ninf;
        }
      }
    }
  });
}

// Backward (FlashAttention-2 style recomputation). One task per (batch, kv head): it owns the
// dk / dv rows of that kv head and the dq rows of the query heads that read it, so no two tasks
// write the same memory (unless dbias is broadcast over batch or heads: then tasks run in turn).
//   p = exp(s - lse) ; dv_j += p dout_i ; dp = dout_i · v_j ; ds = p (dp - D_i),
//   D_i = dout_i · out_i ; dbias = ds ; dq_i = scale Σ_j ds k_j ; dk_j += scale ds q_i
template <class P>
void backward(const AttnParams& p, const float* q, const float* k, const float* v, const float* out,
              const float* lse, const float* dout, float* dq, float* dk, float* dv, float* dbias) {
  Geometry g(p);
  if (g.B <= 0 || g.Hq <= 0) return;
  const float ninf = -std::numeric_limits<float>::infinity();
  const bool bias_shared = dbias && ((p.bias_sb == 0 && g.B > 1) || (p.bias_sh == 0 && g.Hkv > 1));
  auto zero_dbias = [&](int64_t b, int64_t h) {
    for (int64_t i = 0; i < g.Tq; i++) {
      float* row = dbias + b * p.bias_sb + h * p.bias_sh + i * p.bias_si;
      fill(row, g.Tk, 0.0f);
    }
  };
  if (bias_shared)
    for (int64_t b = 0; b < g.B; b++)
      for (int64_t h = 0; h < g.Hq; h++) zero_dbias(b, h);

  auto task_fn = [&](int64_t task) {
    const int64_t b = task / g.Hkv, kvh = task % g.Hkv;
    const float* kb = k + b * g.Tk * g.ldk + kvh * g.Dh;
    const float* vb = v + b * g.Tk * g.ldv + kvh * g.Dh;
    float* dkb = dk + b * g.Tk * g.ldk + kvh * g.Dh;
    float* dvb = dv + b * g.Tk * g.ldv + kvh * g.Dh;
    for (int64_t j = 0; j < g.Tk; j++) {
      fill(dkb + j * g.ldk, g.Dh, 0.0f);
      fill(dvb + j * g.ldv, g.Dh, 0.0f);
    }
    // pt / dst: the tile's p and scaled ds, key-major ([j][r]), for the dv / dk sums after the tile's rows
    Buf s(kTileK), dp(kTileK), dqa(kTileQ * g.Dh), Di(kTileQ), pt(kTileK * kTileQ), dst(kTileK * kTileQ);
    for (int64_t h = kvh * g.rep; h < (kvh + 1) * g.rep; h++) {
      if (dbias && !bias_shared) zero_dbias(b, h);
      for (int64_t i0 = 0; i0 < g.Tq; i0 += kTileQ) {
        const int64_t i1 = imin(g.Tq, i0 + kTileQ), nq = i1 - i0;
        fill(dqa.data(), nq * g.Dh, 0.0f);
        for (int64_t r = 0; r < nq; r++) {
          const int64_t i = i0 + r;
          Di[r] = P::dot(dout + (b * g.Tq + i) * g.ldo + h * g.Dh, out + (b * g.Tq + i) * g.ldo + h * g.Dh, g.Dh);
        }
        const int64_t jend = key_limit(p, i1 - 1);
        const float* q0 = q + (b * g.Tq + i0) * g.ldq + h * g.Dh;     // the tile's query rows
        const float* do0 = dout + (b * g.Tq + i0) * g.ldo + h * g.Dh;  // and their output gradients
        for (int64_t j0 = 0; j0 < jend; j0 += kTileK) {
          const int64_t j1 = imin(jend, j0 + kTileK), nk = j1 - j0;
          fill(pt.data(), nk * kTileQ, 0.0f);  // masked (i, j) pairs add nothing below
          fill(dst.data(), nk * kTileQ, 0.0f);
          for (int64_t r = 0; r < nq; r++) {
            const int64_t i = i0 + r;
            const float li = lse[(b * g.Hq + h) * g.Tq + i];
            if (li == ninf) continue;
            const int64_t lim = imin(j1, key_limit(p, i));
            if (lim <= j0) continue;
            const int64_t n = lim - j0;
            const float* qi = q0 + r * g.ldq;
            const float* doi = do0 + r * g.ldo;
            scores_row<P>(p, g, b, h, i, qi, kb, j0, n, s.data());
            P::exp_sub_sum(s.data(), n, li);                            // s := p
            P::rows_dot(n, doi, vb + j0 * g.ldv, g.ldv, g.Dh, dp.data());  // dp_j = dout_i · v_j
            float* dbr = dbias ? dbias + b * p.bias_sb + h * p.bias_sh + i * p.bias_si + j0 : nullptr;
            for (int64_t j = 0; j < n; j++) {
              const float pj = s[j];
              const float ds = pj * (dp[j] - Di[r]);
              if (dbr) dbr[j] += ds;
              dp[j] = ds * g.scale;  // dp := scaled ds
              pt[j * kTileQ + r] = pj;
              dst[j * kTileQ + r] = dp[j];
            }
            P::rows_axpy(n, dp.data(), kb + j0 * g.ldk, g.ldk, g.Dh, dqa.data() + r * g.Dh);
          }
          // dv_j += Σ_r p_rj dout_r ; dk_j += Σ_r ds_rj q_r: each key's rows accumulate in registers over the
          // tile's queries (one load and store of dv_j / dk_j per tile, not per query), rows in the same order
          for (int64_t j = 0; j < nk; j++) {
            P::rows_axpy(nq, pt.data() + j * kTileQ, do0, g.ldo, g.Dh, dvb + (j0 + j) * g.ldv);
            P::rows_axpy(nq, dst.data() + j * kTileQ, q0, g.ldq, g.Dh, dkb + (j0 + j) * g.ldk);
          }
        }
        for (int64_t r = 0; r < nq; r++) {
          float* dqi = dq + (b * g.Tq + i0 + r) * g.ldq + h * g.Dh;
          for (int64_t d = 0; d < g.Dh; d++) dqi[d] = dqa[r * g.Dh + d];
        }
      }
    }
  };
  const int64_t ntasks = g.B * g.Hkv;
  if (bias_shared) {
    for (int64_t t = 0; t < ntasks; t++) task_fn(t);
  } else {
    parallel_for(ntasks, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; t++) task_fn(t);
    });
  }
}

}  // namespace attn_detail
