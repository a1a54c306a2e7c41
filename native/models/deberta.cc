// DeBERTa-v2/v3 encoder forward (see deberta.h for the math and shapes).
#include "deberta.h"
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <stdexcept>
#include "deberta_internal.h"
#include "loom/dispatch.h"
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
  // an unloaded layer is a bug in a model builder: fail the call (the worker reports it) instead of crashing
  if (!w) throw std::logic_error("linear layer used before its weights were loaded");
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

struct Model::Workspace {
  float* buf = nullptr;
  size_t cap = 0;
  float* get(size_t n) {
    if (n > cap) {
      // Free first, and leave the workspace empty (not pointing at freed memory) if the new
      // allocation fails: the lease returns it to the pool and the next call must not reuse it.
      aligned_free(buf);
      buf = nullptr;
      cap = 0;
      buf = static_cast<float*>(aligned_malloc(n * sizeof(float)));
      if (!buf) throw std::bad_alloc();
      cap = n;
    }
    return buf;
  }
  ~Workspace() { aligned_free(buf); }
};
Model::~Model() = default;

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
  const int64_t D = c.D, F = c.F, H = c.H, S2 = 2 * m->span, S2P = S2 + 32;
  m->S2P = S2P;
  if (src.rel_rows < S2) throw std::invalid_argument("deberta: rel_embeddings has fewer rows than 2*position_buckets");
  size_t eb = wbytes(src.wtype);
  m->word_emb.resize(size_t(c.V * D) * eb);
  std::memcpy(m->word_emb.data(), src.word_emb, m->word_emb.size());
  if (c.feat_rows < 0 || c.feat_cols < 0 || (c.feat_rows > 0) != (c.feat_cols > 0) || (c.feat_rows > 0 && !src.feat_emb))
    throw std::invalid_argument("deberta: word features need both a row count and a column count, and their table");
  if (c.feat_rows > 0) m->feat_emb.assign(src.feat_emb, src.feat_emb + c.feat_rows * D);
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
  std::vector<float> qkvb(size_t(3 * D)), PQ(size_t(S2 * D)), PK(size_t(S2 * D));
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
    // Position projections depend only on weights: PQ = R·Wqᵀ + bq, PK = R·Wkᵀ + bk, stored per
    // head transposed (PK with reversed columns) for the attention kernels.
    linear(src.wtype, S2, D, D, R.data(), D, s.wq, D, s.bq, PQ.data(), D);
    linear(src.wtype, S2, D, D, R.data(), D, s.wk, D, s.bk, PK.data(), D);
    rel_proj_layout(S2, D, H, S2P, PQ.data(), PK.data(), L.PQT, L.PKTr);
  }
  return m;
}

// ---------------------------------------------------------------------------------------------
// Portable attention kernel: deberta_attn_impl.h over one scalar lane.
// ---------------------------------------------------------------------------------------------
}  // namespace loom::deberta

namespace loom::portable {
namespace {
struct Vec {
  using R = float;
  static constexpr int64_t W = 1;
  static inline R zero() { return 0.0f; }
  static inline R set1(float f) { return f; }
  static inline R load(const float* p) { return *p; }
  static inline void store(float* p, R v) { *p = v; }
  static inline R add(R a, R b) { return a + b; }
  static inline R sub(R a, R b) { return a - b; }
  static inline R mul(R a, R b) { return a * b; }
  static inline R fmadd(R a, R b, R c) { return a * b + c; }
  static inline R max(R a, R b) { return a > b ? a : b; }
  static inline float hmax(R v) { return v; }
  static inline float hsum(R v) { return v; }
  static inline R exp(R x) { return std::exp(x); }
  static inline R gather(const float* base, const int32_t* idx) { return base[idx[0]]; }
  static inline void transpose_add(float* S, int64_t lds, const float* T, int64_t ldt, int64_t n) {
    for (int64_t i = 0; i < n; i++)
      for (int64_t j = 0; j < n; j++) S[i * lds + j] += T[j * ldt + i];
  }
};
using V = Vec;
#include "deberta_attn_impl.h"
}  // namespace
void deberta_attend(const deberta::AttnTask& t) { attend(t); }
}  // namespace loom::portable

namespace loom::deberta {

void attn_run(const AttnTask& t) { LOOM_DISPATCH(deberta_attend, t); }

int64_t delta_table(const Config& c, int64_t nmax, std::vector<int32_t>& dtab) {
  const int64_t R = (nmax + 15) / 16 * 16 + 16;
  dtab.resize(size_t(2 * R - 1));
  for (int64_t r = -(R - 1); r <= R - 1; r++) dtab[size_t(r + R - 1)] = int32_t(rel_index(c, r));
  return R;
}

void rel_proj_layout(int64_t S2, int64_t D, int64_t H, int64_t S2P, const float* PQ, const float* PK,
                     std::vector<float>& PQT, std::vector<float>& PKTr, int64_t r0, int64_t r1) {
  const int64_t d = D / H;
  if (r1 < 0) r1 = S2;
  PQT.assign(size_t(H * d * S2P), 0.0f);
  PKTr.assign(size_t(H * d * S2P), 0.0f);
  for (int64_t u = 0; u < D; u++) {  // u = h·d + e: row u of the (D, S2P) tables is head h's row e
    float* pq = PQT.data() + u * S2P;
    float* pk = PKTr.data() + u * S2P;
    for (int64_t r = r0; r < r1; r++) {
      pq[r] = PQ[r * D + u];
      pk[S2 - 1 - r] = PK[r * D + u];
    }
  }
}

void batch_pack(int64_t B, int64_t N, const uint8_t* mask, bool whole_rows, const int64_t* need, BatchPack& p) {
  p.len.assign(size_t(B), 0);
  p.off.assign(size_t(B) + 1, 0);
  p.kmask.assign(size_t(B), nullptr);
  for (int64_t b = 0; b < B; b++) {
    const uint8_t* mb = mask + b * N;
    int64_t k = 0;
    while (k < N && mb[k]) k++;
    int64_t z = k;
    while (z < N && !mb[z]) z++;
    if (whole_rows || z != N || (need && k < need[b])) {
      p.len[size_t(b)] = N;
      p.kmask[size_t(b)] = k == N ? nullptr : mb;
    } else {
      p.len[size_t(b)] = k;
    }
    p.off[size_t(b) + 1] = p.off[size_t(b)] + p.len[size_t(b)];
  }
  p.T = p.off[size_t(B)];
  p.nmax = B > 0 ? *std::max_element(p.len.begin(), p.len.end()) : 0;
  p.order.resize(size_t(B));
  std::iota(p.order.begin(), p.order.end(), 0);
  std::stable_sort(p.order.begin(), p.order.end(),
                   [&](int64_t a, int64_t q) { return p.len[size_t(a)] > p.len[size_t(q)]; });
}

void group_positions(int64_t n, const int32_t* groups, const uint8_t* mask, int32_t* pos) {
  int32_t n0 = 0;
  for (int64_t i = 0; i < n; i++)
    if (groups[i] == 0 && (!mask || mask[i])) pos[i] = n0++;
  std::vector<int32_t> next;  // next position of each group >= 1
  for (int64_t i = 0; i < n; i++) {
    if (mask && !mask[i]) {
      pos[i] = int32_t(i);
      continue;
    }
    const int32_t g = groups[i];
    if (g == 0) continue;
    if (size_t(g) >= next.size()) next.resize(size_t(g) + 1, n0);
    pos[i] = next[size_t(g)]++;
  }
}

namespace {

void attend(const AttnTask& t) { attn_run(t); }

struct WsLease {
  const Model& m;
  std::unique_ptr<Model::Workspace> w;
  explicit WsLease(const Model& mm) : m(mm) {
    std::lock_guard<std::mutex> g(m.ws_mu);
    if (!m.ws_free.empty()) {
      w = std::move(m.ws_free.back());
      m.ws_free.pop_back();
    }
    if (!w) w = std::make_unique<Model::Workspace>();
  }
  ~WsLease() {
    std::lock_guard<std::mutex> g(m.ws_mu);
    if (m.ws_free.size() < 2) m.ws_free.push_back(std::move(w));  // keep two; more are freed
  }
};

inline size_t r16(size_t n) { return (n + 15) / 16 * 16; }

}  // namespace

void forward(const Model& m, int64_t B, int64_t N, const int32_t* ids, const uint8_t* mask, float* out,
             float* hidden_states, Acts* acts, const int32_t* feats, const int32_t* groups, const int32_t* bags,
             int64_t bag_cols) {
  const Config& c = m.cfg;
  const int64_t D = c.D, F = c.F, H = c.H, d = D / H, BN = B * N;
  if (B <= 0 || N <= 0) return;
  for (int64_t t = 0; t < BN; t++)
    if (ids[t] < 0 || ids[t] >= c.V) throw std::out_of_range("deberta: token id " + std::to_string(ids[t]) + " out of range");
  const int64_t KF = c.feat_rows > 0 ? c.feat_cols : 0;
  if (feats && KF)
    for (int64_t t = 0; t < BN * KF; t++)
      if (feats[t] < -1 || feats[t] >= c.feat_rows)
        throw std::out_of_range("deberta: word feature id " + std::to_string(feats[t]) + " out of range");
  const int64_t KB = bags ? bag_cols : 0;
  for (int64_t t = 0; t < BN * KB; t++)
    if (bags[t] < -1 || bags[t] >= c.V)
      throw std::out_of_range("deberta: label bag id " + std::to_string(bags[t]) + " out of range");

  // Packing: sample b owns rows [off[b], off[b] + len[b]) of the (T, D) activations, positions
  // 0..len[b)−1. Right padding (mask 1…1 0…0) is dropped; other masks keep the row whole and mask
  // the keys in attention (the training path, acts, always keeps the (B*N) layout).
  BatchPack pk;
  batch_pack(B, N, mask, acts != nullptr, nullptr, pk);
  const std::vector<int64_t>&len = pk.len, &off = pk.off;
  const std::vector<const uint8_t*>& kmask = pk.kmask;
  const int64_t T = pk.T, Nmax = pk.nmax;
  // Scatter of (T, D) rows back to (B, N, D); rows with mask 0 are zero.
  auto scatter = [&](const float* x, float* dst) {
    for (int64_t b = 0; b < B; b++)
      for (int64_t p = 0; p < N; p++) {
        float* o = dst + (b * N + p) * D;
        if (p < len[size_t(b)] && mask[b * N + p]) std::memcpy(o, x + (off[size_t(b)] + p) * D, size_t(D) * 4);
        else std::memset(o, 0, size_t(D) * 4);
      }
  };
  if (T == 0) {
    std::memset(out, 0, size_t(BN * D) * 4);
    if (hidden_states) std::memset(hidden_states, 0, size_t((c.L + 1) * BN * D) * 4);
    return;
  }
  if (groups)  // a group is below its sample's token count (a label has at least its [L])
    for (int64_t t = 0; t < BN; t++)
      if (groups[t] < 0 || groups[t] >= N)
        throw std::out_of_range("deberta: label-isolation group " + std::to_string(groups[t]) + " out of range");
  std::vector<int32_t> pids(static_cast<size_t>(T));
  pack_rows(pk, N, 1, ids, pids.data());
  std::vector<int32_t> pfeats(feats && KF ? size_t(T * KF) : 0);
  if (!pfeats.empty()) pack_rows(pk, N, KF, feats, pfeats.data());
  std::vector<int32_t> pbags(size_t(T * KB));
  if (KB) pack_rows(pk, N, KB, bags, pbags.data());

  // Label isolation: groups and positions of the packed tokens (per sample, over its len[b] tokens).
  std::vector<int32_t> pgrp(groups ? size_t(T) : 0), ppos(groups ? size_t(T) : 0);
  for (int64_t b = 0; b < B && groups; b++) {
    for (int64_t p = 0; p < len[size_t(b)]; p++)
      if (groups[b * N + p] >= len[size_t(b)]) throw std::out_of_range("deberta: label-isolation group out of range");
    std::memcpy(pgrp.data() + off[size_t(b)], groups + b * N, size_t(len[size_t(b)]) * 4);
    group_positions(len[size_t(b)], groups + b * N, kmask[size_t(b)], ppos.data() + off[size_t(b)]);
  }

  std::vector<int32_t> dtab;
  const int64_t Rr = delta_table(c, Nmax, dtab);
  const float scale = c.attn_scale();

  if (acts) {
    acts->B = B;
    acts->N = N;
    acts->ids.assign(ids, ids + BN);
    acts->mask.assign(mask, mask + BN);
    acts->layers.resize(size_t(c.L));
  }

  // Workspace: x, a, ctx (T, D), qkv (T, 3D), h (FC, F), attention scratch per thread.
  const int nth = std::max(1, threads_get());
  const int64_t FC = std::min<int64_t>(T, 512);  // FFN rows per chunk (h stays cache-sized)
  const size_t scr = r16(attn_scratch_floats(Nmax, d));
  WsLease lease(m);
  float* base = lease.w->get(3 * r16(size_t(T * D)) + r16(size_t(T * 3 * D)) + r16(size_t(FC * F)) + size_t(nth) * scr);
  float* x = base;
  float* a = x + r16(size_t(T * D));
  float* ctx = a + r16(size_t(T * D));
  float* qkv = ctx + r16(size_t(T * D));
  float* h = qkv + r16(size_t(T * 3 * D));
  float* ascr = h + r16(size_t(FC * F));

  // Embeddings: x = LN(word_emb[ids] + Σ_k feat_emb[feats[:, k]] + mean_k word_emb[bags[:, k]]) * mask   (T, D)
  embedding_fwd(T, D, pids.data(), m.wtype, m.word_emb.data(), ctx);
  if (!pfeats.empty()) word_feature_fwd(T, D, KF, pfeats.data(), m.feat_emb.data(), ctx);
  if (KB) bag_embedding_fwd(T, D, KB, pbags.data(), m.wtype, m.word_emb.data(), ctx);
  if (acts) {
    acts->emb_pre.assign(ctx, ctx + T * D);
    acts->emb_mean.resize(size_t(T));
    acts->emb_rstd.resize(size_t(T));
  }
  layernorm_fwd(T, D, ctx, m.emb_ln_w.data(), m.emb_ln_b.data(), c.eps, x, acts ? acts->emb_mean.data() : nullptr,
                acts ? acts->emb_rstd.data() : nullptr);
  for (int64_t b = 0; b < B; b++)
    if (kmask[size_t(b)])
      for (int64_t p = 0; p < len[size_t(b)]; p++)
        if (!kmask[size_t(b)][p]) std::memset(x + (off[size_t(b)] + p) * D, 0, size_t(D) * 4);
  if (hidden_states) scatter(x, hidden_states);

  // Attention tasks, longest samples first (dynamic scheduling over the pool).
  const std::vector<int64_t>& order = pk.order;
  const int64_t ntask = B * H;

  for (int64_t l = 0; l < c.L; l++) {
    const Layer& L = m.layers[size_t(l)];
    LayerActs* la = acts ? &acts->layers[size_t(l)] : nullptr;
    if (la) {
      la->x_in.assign(x, x + T * D);
      la->probs.assign(size_t(B * H * N * N), 0.0f);
    }
    // QKV = x·Wqkvᵀ + b                                              (T, 3D)
    L.qkv.fwd(T, x, D, qkv, 3 * D);
    // Attention, one task per (sample, head).
    std::atomic<int64_t> next{0};
    pool_run(nth, [&](int tid, int) {
      float* scratch = ascr + size_t(tid) * scr;
      for (int64_t k; (k = next.fetch_add(1)) < ntask;) {
        const int64_t b = order[size_t(k / H)], hh = k % H, n = len[size_t(b)];
        if (n == 0) continue;
        AttnTask t;
        t.n = n;
        t.d = d;
        t.q = qkv + off[size_t(b)] * 3 * D + hh * d;
        t.k = t.q + D;
        t.v = t.q + 2 * D;
        t.ld = 3 * D;
        t.PQT = L.PQT.data() + hh * d * m.S2P;
        t.PKTr = L.PKTr.data() + hh * d * m.S2P;
        t.S2P = m.S2P;
        t.span2 = 2 * m.span;
        t.dtab = dtab.data();
        t.R = Rr;
        t.mask = kmask[size_t(b)];
        if (groups) {
          t.group = pgrp.data() + off[size_t(b)];
          t.pos = ppos.data() + off[size_t(b)];
        }
        t.scale = scale;
        t.c2p = c.c2p;
        t.p2c = c.p2c;
        t.ctx = ctx + off[size_t(b)] * D + hh * d;
        t.ldc = D;
        t.probs = la ? la->probs.data() + (b * H + hh) * N * N : nullptr;
        t.scratch = scratch;
        attend(t);
      }
    });
    if (la) {
      la->qkv.assign(qkv, qkv + T * 3 * D);
      la->ctx.assign(ctx, ctx + T * D);
    }
    // a = LN(x + ctx·Woᵀ + bo)
    L.o.fwd(T, ctx, D, x, D, 1.0f);
    if (la) {
      la->a_pre.assign(x, x + T * D);
      la->ln1_mean.resize(size_t(T));
      la->ln1_rstd.resize(size_t(T));
    }
    layernorm_fwd(T, D, x, L.ln1_w.data(), L.ln1_b.data(), c.eps, a, la ? la->ln1_mean.data() : nullptr,
                  la ? la->ln1_rstd.data() : nullptr);
    if (la) {
      la->a.assign(a, a + T * D);
      la->h_pre.resize(size_t(T * F));
      la->h.resize(size_t(T * F));
    }
    // FFN in row chunks: a += GELU(a·Wiᵀ + bi)·Woutᵀ + bout ; x' = LN(a)
    for (int64_t r0 = 0; r0 < T; r0 += FC) {
      const int64_t rows = std::min(FC, T - r0);
      L.inter.fwd(rows, a + r0 * D, D, h, F);
      if (la) std::memcpy(la->h_pre.data() + r0 * F, h, size_t(rows * F) * 4);
      gelu_fwd(rows * F, h, h, false);
      if (la) std::memcpy(la->h.data() + r0 * F, h, size_t(rows * F) * 4);
      L.out.fwd(rows, h, F, a + r0 * D, D, 1.0f);
    }
    if (la) {
      la->f_pre.assign(a, a + T * D);
      la->ln2_mean.resize(size_t(T));
      la->ln2_rstd.resize(size_t(T));
    }
    layernorm_fwd(T, D, a, L.ln2_w.data(), L.ln2_b.data(), c.eps, x, la ? la->ln2_mean.data() : nullptr,
                  la ? la->ln2_rstd.data() : nullptr);
    if (hidden_states) scatter(x, hidden_states + (l + 1) * BN * D);
  }
  scatter(x, out);
}

}  // namespace loom::deberta
