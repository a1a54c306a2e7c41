// DeBERTa-v2/v3 encoder forward (see deberta.h for the math and shapes).
#include "deberta.h"
#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include "loom/ops.h"

namespace loom::deberta {

void Linear::init(DType dt, int64_t n, int64_t k, const void* weight, int64_t ldw, const float* bias) {
  N = n;
  K = k;
  w = weight_pack(dt, n, k, weight, ldw);
  if (bias) b.assign(bias, bias + n);
}

void Linear::fwd(int64_t M, const float* x, int64_t ldx, float* y, int64_t ldy, float beta) const {
  if (M <= 0) return;
  linear_packed(M, x, ldx, w, b.empty() ? nullptr : b.data(), y, ldy, beta);
}

int64_t rel_bucket(int64_t rel, int64_t bucket_size, int64_t max_position) {
  // HF make_log_bucket_position, float32 arithmetic as in the reference.
  int64_t mid = bucket_size / 2;
  int64_t abs_pos = (rel < mid && rel > -mid) ? mid - 1 : (rel < 0 ? -rel : rel);
  if (abs_pos <= mid) return rel;
  float lp = std::ceil(std::log(float(abs_pos) / float(mid)) / std::log(float(double(max_position - 1) / double(mid))) *
                       float(mid - 1)) + float(mid);
  int64_t l = int64_t(lp);
  return rel < 0 ? -l : l;
}

int64_t rel_index(const Config& cfg, int64_t rel) {
  int64_t span = cfg.att_span();
  int64_t b = cfg.position_buckets > 0 ? rel_bucket(rel, cfg.position_buckets, cfg.max_position()) : rel;
  int64_t idx = b + span;
  return std::min<int64_t>(std::max<int64_t>(idx, 0), 2 * span - 1);
}

static size_t wbytes(DType t) { return t == DType::F32 ? 4 : 2; }

std::unique_ptr<Model> model_create(const ModelSrc& src) {
  const Config& c = src.cfg;
  if (c.D <= 0 || c.L <= 0 || c.H <= 0 || c.F <= 0 || c.V <= 0 || c.D % c.H != 0)
    throw std::invalid_argument("deberta: bad configuration (hidden size must be a multiple of the head count)");
  if (src.wtype != DType::F32 && src.wtype != DType::BF16) throw std::invalid_argument("deberta: weights must be f32 or bf16");
  if ((int64_t)src.layers.size() != c.L) throw std::invalid_argument("deberta: layer count mismatch");
  auto m = std::make_unique<Model>();
  m->cfg = c;
  m->wtype = src.wtype;
  m->span = c.att_span();
  const int64_t D = c.D, F = c.F, S2 = 2 * m->span;
  if (src.rel_rows < S2) throw std::invalid_argument("deberta: rel_embeddings has fewer rows than 2*position_buckets");
  size_t eb = wbytes(src.wtype);
  m->word_emb.resize(size_t(c.V * D) * eb);
  std::memcpy(m->word_emb.data(), src.word_emb, m->word_emb.size());
  m->emb_ln_w.assign(src.emb_ln_w, src.emb_ln_w + D);
  m->emb_ln_b.assign(src.emb_ln_b, src.emb_ln_b + D);

  // R = LayerNorm(rel_embeddings[:2*span])
  std::vector<float> R(size_t(S2 * D));
  if (src.rel_ln_w)
    layernorm_fwd(S2, D, src.rel_emb, src.rel_ln_w, src.rel_ln_b, c.eps, R.data(), nullptr, nullptr);
  else
    std::memcpy(R.data(), src.rel_emb, R.size() * 4);

  m->layers.resize(size_t(c.L));
  std::vector<uint8_t> qkvw(size_t(3 * D * D) * eb);
  std::vector<float> qkvb(size_t(3 * D));
  for (int64_t l = 0; l < c.L; l++) {
    const LayerSrc& s = src.layers[size_t(l)];
    Layer& L = m->layers[size_t(l)];
    std::memcpy(qkvw.data(), s.wq, size_t(D * D) * eb);
    std::memcpy(qkvw.data() + size_t(D * D) * eb, s.wk, size_t(D * D) * eb);
    std::memcpy(qkvw.data() + size_t(2 * D * D) * eb, s.wv, size_t(D * D) * eb);
    std::memcpy(qkvb.data(), s.bq, size_t(D) * 4);
    std::memcpy(qkvb.data() + D, s.bk, size_t(D) * 4);
    std::memcpy(qkvb.data() + 2 * D, s.bv, size_t(D) * 4);
    L.qkv.init(src.wtype, 3 * D, D, qkvw.data(), D, qkvb.data());
    L.o.init(src.wtype, D, D, s.wo, D, s.bo);
    L.inter.init(src.wtype, F, D, s.wi, D, s.bi);
    L.out.init(src.wtype, D, F, s.wout, F, s.bout);
    L.ln1_w.assign(s.ln1_w, s.ln1_w + D);
    L.ln1_b.assign(s.ln1_b, s.ln1_b + D);
    L.ln2_w.assign(s.ln2_w, s.ln2_w + D);
    L.ln2_b.assign(s.ln2_b, s.ln2_b + D);
    // Position projections depend only on weights: PQ = R·Wqᵀ + bq, PK = R·Wkᵀ + bk.
    L.PQ.resize(size_t(S2 * D));
    L.PK.resize(size_t(S2 * D));
    linear(src.wtype, S2, D, D, R.data(), D, s.wq, D, s.bq, L.PQ.data(), D);
    linear(src.wtype, S2, D, D, R.data(), D, s.wk, D, s.bk, L.PK.data(), D);
  }
  return m;
}

namespace {

// Fused disentangled attention for one (sample, head).
//   q, k, v: rows of the QKV buffer (stride ld = 3D), head slice already applied
//   PQ, PK:  (2*span, D) with the head slice applied (stride D)
//   dtab:    δ(i,j) − lo indexed by (i − j + N − 1); ncol = number of relative rows in use
//   ctx:     (N, d) output with stride ldc; probs (N, N) optional (train)
struct AttnScratch {
  std::vector<float> c2p, p2c, s;
};

void attend_one(int64_t N, int64_t d, int64_t ld, const float* q, const float* k, const float* v, const float* PQ,
                const float* PK, int64_t D, int64_t lo, int64_t ncol, const int32_t* dtab, const uint8_t* mask,
                float inv_scale, bool c2p, bool p2c, float* ctx, int64_t ldc, float* probs, AttnScratch& sc) {
  sc.s.resize(size_t(N * N));
  float* S = sc.s.data();
  // S = q·kᵀ                                                      (N, N)
  sgemm(false, true, N, N, d, 1.0f, q, ld, k, ld, 0.0f, S, N);
  if (c2p) {  // C2P[i, c] = q_i · PK[lo + c]                        (N, ncol)
    sc.c2p.resize(size_t(N * ncol));
    sgemm(false, true, N, ncol, d, 1.0f, q, ld, PK + lo * D, D, 0.0f, sc.c2p.data(), ncol);
  }
  if (p2c) {  // P2C[j, c] = k_j · PQ[lo + c]                        (N, ncol)
    sc.p2c.resize(size_t(N * ncol));
    sgemm(false, true, N, ncol, d, 1.0f, k, ld, PQ + lo * D, D, 0.0f, sc.p2c.data(), ncol);
  }
  const float* C = sc.c2p.data();
  const float* P = sc.p2c.data();
  for (int64_t i = 0; i < N; i++) {
    float* row = S + i * N;
    const int32_t* di = dtab + (i + N - 1);  // δ(i, j) − lo = di[-j]
    const float* ci = C + i * ncol;
    float mx = -INFINITY;
    for (int64_t j = 0; j < N; j++) {
      if (mask && !mask[j]) {
        row[j] = -INFINITY;
        continue;
      }
      int32_t r = di[-j];
      float a = row[j];
      if (c2p) a += ci[r];
      if (p2c) a += P[j * ncol + r];
      a *= inv_scale;
      row[j] = a;
      mx = std::max(mx, a);
    }
    if (mx == -INFINITY) {
      std::memset(row, 0, size_t(N) * 4);
      continue;
    }
    float sum = 0.0f;
    for (int64_t j = 0; j < N; j++) {
      float e = std::exp(row[j] - mx);
      row[j] = e;
      sum += e;
    }
    float inv = 1.0f / sum;
    for (int64_t j = 0; j < N; j++) row[j] *= inv;
  }
  if (probs) std::memcpy(probs, S, size_t(N * N) * 4);
  // ctx = P·V                                                        (N, d)
  sgemm(false, false, N, d, N, 1.0f, S, N, v, ld, 0.0f, ctx, ldc);
}

}  // namespace

void forward(const Model& m, int64_t B, int64_t N, const int32_t* ids, const uint8_t* mask, float* out,
             float* hidden_states, Acts* acts) {
  const Config& c = m.cfg;
  const int64_t D = c.D, F = c.F, H = c.H, d = D / H, BN = B * N;
  if (B <= 0 || N <= 0) return;
  for (int64_t t = 0; t < BN; t++)
    if (ids[t] < 0 || ids[t] >= c.V) throw std::out_of_range("deberta: token id " + std::to_string(ids[t]) + " out of range");

  // Relative index table: dtab[r + N − 1] = δ(rel = r) − lo for r in [−(N−1), N−1].
  const int64_t lo = rel_index(c, -(N - 1)), hi = rel_index(c, N - 1), ncol = hi - lo + 1;
  std::vector<int32_t> dtab(size_t(2 * N - 1));
  for (int64_t r = -(N - 1); r <= N - 1; r++) dtab[size_t(r + N - 1)] = int32_t(rel_index(c, r) - lo);
  const float inv_scale = 1.0f / std::sqrt(float(d) * float(1 + int(c.c2p) + int(c.p2c)));

  if (acts) {
    acts->B = B;
    acts->N = N;
    acts->ids.assign(ids, ids + BN);
    acts->mask.assign(mask, mask + BN);
    acts->layers.resize(size_t(c.L));
  }

  // Embeddings: x = LN(word_emb[ids]) * mask                          (B*N, D)
  std::vector<float> x(size_t(BN * D)), tmp(size_t(BN * D));
  embedding_fwd(BN, D, ids, m.wtype, m.word_emb.data(), tmp.data());
  if (acts) {
    acts->emb_pre = tmp;
    acts->emb_mean.resize(size_t(BN));
    acts->emb_rstd.resize(size_t(BN));
  }
  layernorm_fwd(BN, D, tmp.data(), m.emb_ln_w.data(), m.emb_ln_b.data(), c.eps, x.data(),
                acts ? acts->emb_mean.data() : nullptr, acts ? acts->emb_rstd.data() : nullptr);
  for (int64_t t = 0; t < BN; t++)
    if (!mask[t]) std::memset(x.data() + t * D, 0, size_t(D) * 4);
  if (hidden_states) std::memcpy(hidden_states, x.data(), size_t(BN * D) * 4);

  std::vector<float> qkv(size_t(BN * 3 * D)), ctx(size_t(BN * D)), a(size_t(BN * D)), h(size_t(BN * F)),
      hg(size_t(BN * F));
  int nth = threads_get();
  std::vector<AttnScratch> scratch(size_t(std::max(nth, 1)));

  for (int64_t l = 0; l < c.L; l++) {
    const Layer& L = m.layers[size_t(l)];
    LayerActs* la = acts ? &acts->layers[size_t(l)] : nullptr;
    if (la) {
      la->x_in = x;
      la->probs.resize(size_t(B * H * N * N));
    }
    // QKV = x·Wqkvᵀ + b                                              (B*N, 3D)
    L.qkv.fwd(BN, x.data(), D, qkv.data(), 3 * D);
    // Attention, one task per (sample, head).
    pool_run(nth, [&](int tid, int nt) {
      for (int64_t bh = tid; bh < B * H; bh += nt) {
        int64_t b = bh / H, hh = bh % H;
        const float* base = qkv.data() + b * N * 3 * D + hh * d;
        attend_one(N, d, 3 * D, base, base + D, base + 2 * D, L.PQ.data() + hh * d, L.PK.data() + hh * d, D, lo, ncol,
                   dtab.data(), mask + b * N, inv_scale, c.c2p, c.p2c, ctx.data() + b * N * D + hh * d, D,
                   la ? la->probs.data() + (b * H + hh) * N * N : nullptr, scratch[size_t(tid)]);
      }
    });
    // a = LN(ctx·Woᵀ + bo + x)
    std::memcpy(tmp.data(), x.data(), size_t(BN * D) * 4);
    L.o.fwd(BN, ctx.data(), D, tmp.data(), D, 1.0f);
    if (la) {
      la->qkv = qkv;
      la->ctx = ctx;
      la->a_pre = tmp;
      la->ln1_mean.resize(size_t(BN));
      la->ln1_rstd.resize(size_t(BN));
    }
    layernorm_fwd(BN, D, tmp.data(), L.ln1_w.data(), L.ln1_b.data(), c.eps, a.data(), la ? la->ln1_mean.data() : nullptr,
                  la ? la->ln1_rstd.data() : nullptr);
    // FFN: x' = LN(GELU(a·Wiᵀ + bi)·Woutᵀ + bout + a)
    L.inter.fwd(BN, a.data(), D, h.data(), F);
    gelu_fwd(BN * F, h.data(), hg.data(), false);
    std::memcpy(tmp.data(), a.data(), size_t(BN * D) * 4);
    L.out.fwd(BN, hg.data(), F, tmp.data(), D, 1.0f);
    if (la) {
      la->a = a;
      la->h_pre = h;
      la->h = hg;
      la->f_pre = tmp;
      la->ln2_mean.resize(size_t(BN));
      la->ln2_rstd.resize(size_t(BN));
    }
    layernorm_fwd(BN, D, tmp.data(), L.ln2_w.data(), L.ln2_b.data(), c.eps, x.data(), la ? la->ln2_mean.data() : nullptr,
                  la ? la->ln2_rstd.data() : nullptr);
    if (hidden_states) std::memcpy(hidden_states + (l + 1) * BN * D, x.data(), size_t(BN * D) * 4);
  }
  // Padded positions are zeroed (they carry no meaning; keeps outputs deterministic).
  for (int64_t t = 0; t < BN; t++)
    if (!mask[t]) std::memset(x.data() + t * D, 0, size_t(D) * 4);
  std::memcpy(out, x.data(), size_t(BN * D) * 4);
}

}  // namespace loom::deberta
