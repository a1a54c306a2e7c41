// GLiNER2 span-model training graph (see encoder_train.h for the math and shapes).
#include "encoder_train.h"
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include "../models/deberta_internal.h"

namespace loom::train::encoder {

using deberta::rel_index;

constexpr int64_t kCountHeads = 4;  // count_lstm_v2 attention heads (fixed by the reference module)

// ---------------------------------------------------------------------------------------------
// Construction
// ---------------------------------------------------------------------------------------------
std::unique_ptr<Model> model_create(const Config& cfg, const std::vector<std::pair<std::string, const float*>>& tensors,
                                    const LoraCfg& lc) {
  const deberta::Config& c = cfg.deb;
  if (c.D <= 0 || c.L <= 0 || c.H <= 0 || c.F <= 0 || c.V <= 0 || c.D % c.H != 0)
    throw std::invalid_argument("encoder train: bad configuration");
  auto m = std::make_unique<Model>();
  m->cfg = cfg;
  std::unordered_map<std::string, const float*> by(tensors.begin(), tensors.end());
  const int64_t D = c.D, F = c.F, S2 = 2 * c.att_span();
  const bool full = !lc.enabled;
  Rng rng(lc.seed);
  auto param = [&](const std::string& n, std::vector<int64_t> shape) -> Param* {
    auto it = by.find(n);
    if (it == by.end() || !it->second) throw std::invalid_argument("encoder train: missing tensor " + n);
    int group = n.rfind("encoder.", 0) == 0 ? 0 : 1;
    return m->ps.add(n, std::move(shape), it->second, group, full);
  };
  auto linear = [&](TLinear& l, const std::string& n, int64_t N, int64_t K) {
    l.N = N;
    l.K = K;
    l.bf16 = cfg.bf16;
    l.W = param(n + ".weight", {N, K});
    l.b = param(n + ".bias", {N});
    if (lc.enabled && lc.targets.count(n)) {
      l.lora.r = lc.r;
      l.lora.s = lc.alpha / float(lc.r);
      l.lora.dropout = lc.dropout;
      std::vector<float> A(size_t(lc.r * K));
      const float bound = 1.0f / std::sqrt(float(K));  // kaiming_uniform_(a=√5)
      for (auto& a : A) a = (rng.uniform() * 2.0f - 1.0f) * bound;
      l.lora.A = m->ps.add("base_model.model." + n + ".lora_A.weight", {lc.r, K}, A.data(), 1, true);
      l.lora.B = m->ps.add("base_model.model." + n + ".lora_B.weight", {N, lc.r}, nullptr, 1, true);
    }
  };
  auto mlp = [&](Mlp2& p, const std::string& n, int64_t in, int64_t hid, int64_t out, int ia = 0, int ib = 3) {
    linear(p.a, n + "." + std::to_string(ia), hid, in);
    linear(p.b, n + "." + std::to_string(ib), out, hid);
  };
  m->word_emb = param("encoder.embeddings.word_embeddings.weight", {c.V, D});
  if ((c.feat_rows > 0) != (c.feat_cols > 0) || c.feat_rows < 0 || c.feat_cols < 0)
    throw std::invalid_argument("encoder train: word features need both a row count and a column count");
  if (c.feat_rows > 0) m->feat_emb = param("encoder.embeddings.word_feature_embeddings.weight", {c.feat_rows, D});
  m->emb_ln_w = param("encoder.embeddings.LayerNorm.weight", {D});
  m->emb_ln_b = param("encoder.embeddings.LayerNorm.bias", {D});
  m->rel_emb = param("encoder.encoder.rel_embeddings.weight", {S2, D});  // (first 2·span rows are used)
  if (cfg.rel_ln) {
    m->rel_ln_w = param("encoder.encoder.LayerNorm.weight", {D});
    m->rel_ln_b = param("encoder.encoder.LayerNorm.bias", {D});
  }
  m->layers.resize(size_t(c.L));
  for (int64_t l = 0; l < c.L; l++) {
    std::string p = "encoder.encoder.layer." + std::to_string(l) + ".";
    Layer& L = m->layers[size_t(l)];
    linear(L.q, p + "attention.self.query_proj", D, D);
    linear(L.k, p + "attention.self.key_proj", D, D);
    linear(L.v, p + "attention.self.value_proj", D, D);
    linear(L.o, p + "attention.output.dense", D, D);
    linear(L.inter, p + "intermediate.dense", F, D);
    linear(L.out, p + "output.dense", D, F);
    L.ln1_w = param(p + "attention.output.LayerNorm.weight", {D});
    L.ln1_b = param(p + "attention.output.LayerNorm.bias", {D});
    L.ln2_w = param(p + "output.LayerNorm.weight", {D});
    L.ln2_b = param(p + "output.LayerNorm.bias", {D});
  }
  const std::string sp = "span_rep.span_rep_layer.";
  mlp(m->proj_start, sp + "project_start", D, 4 * D, D);
  mlp(m->proj_end, sp + "project_end", D, 4 * D, D);
  linear(m->out0, sp + "out_project.0", 4 * D, 2 * D);
  if (m->out0.lora.r > 0 && m->out0.lora.dropout > 0) m->out0.lora.dropout = 0;  // split path: no dropout
  linear(m->out3, sp + "out_project.3", D, 4 * D);
  mlp(m->classifier, "classifier", D, 2 * D, 1, 0, 2);
  mlp(m->count_pred, "count_pred", D, 2 * D, 20, 0, 2);
  m->pos_emb = param("count_embed.pos_embedding.weight", {20, D});
  m->gru_ih.N = m->gru_hh.N = 3 * D;
  m->gru_ih.K = m->gru_hh.K = D;
  m->gru_ih.W = param("count_embed.gru.weight_ih_l0", {3 * D, D});
  m->gru_ih.b = param("count_embed.gru.bias_ih_l0", {3 * D});
  m->gru_hh.W = param("count_embed.gru.weight_hh_l0", {3 * D, D});
  m->gru_hh.b = param("count_embed.gru.bias_hh_l0", {3 * D});
  if (cfg.counting == Counting::Lstm) {
    mlp(m->projector, "count_embed.projector", 2 * D, 4 * D, D, 0, 2);
    return m;
  }
  const int64_t T = cfg.count_T, FF = cfg.count_FF;
  if (T <= 0 || T % kCountHeads != 0 || FF <= 0) throw std::invalid_argument("encoder train: bad count_lstm_v2 widths");
  const std::string tp = "count_embed.transformer.";
  linear(m->cin, tp + "in_projector", T, D);
  for (int i = 0; i < 2; i++) {
    const std::string p = tp + "transformer.layers." + std::to_string(i) + ".";
    CountTLayer& L = m->ct[i];
    L.attn_in.N = 3 * T;  // MultiheadAttention's packed in-projection is a Parameter, not a Linear (no LoRA)
    L.attn_in.K = T;
    L.attn_in.W = param(p + "self_attn.in_proj_weight", {3 * T, T});
    L.attn_in.b = param(p + "self_attn.in_proj_bias", {3 * T});
    linear(L.attn_out, p + "self_attn.out_proj", T, T);
    linear(L.lin1, p + "linear1", FF, T);
    linear(L.lin2, p + "linear2", T, FF);
    L.n1_w = param(p + "norm1.weight", {T});
    L.n1_b = param(p + "norm1.bias", {T});
    L.n2_w = param(p + "norm2.weight", {T});
    L.n2_b = param(p + "norm2.bias", {T});
  }
  linear(m->co0, tp + "out_projector.0", D, T + D);
  linear(m->co2, tp + "out_projector.2", D, D);
  linear(m->co4, tp + "out_projector.4", D, D);
  return m;
}

// ---------------------------------------------------------------------------------------------
// Encoder forward / backward
// ---------------------------------------------------------------------------------------------
namespace {

struct LayerActs {
  std::vector<float> x_in, q, k, v, PQ, PK, probs, ctx, a_pre, ln1_mean, ln1_rstd, a, h_pre, h, f_pre, ln2_mean,
      ln2_rstd;
  std::vector<uint8_t> keep_p, keep_o, keep_f;  // dropout masks: probs (H·Σ len²), attention / FFN outputs (T*D)
  LinActs lq, lk, lv, lpq, lpk, lo, li, lout;
};
// Packing, as deberta::forward packs a served batch (deberta::batch_pack): sample b owns rows [off[b], off[b] + len[b])
// of the (T, D) activations. Right padding (mask 1…1 0…0) is dropped, so a step costs its real tokens, not B·N; a sample
// with another mask, or one whose heads read a row of its padding, keeps its N rows with the padded keys masked
// (kmask, as before packing).
struct Pack : deberta::BatchPack {
  int64_t B = 0, N = 0;                     // samples, the batch's row stride
  std::vector<int64_t> poff;                // (B+1) probability blocks: sample b's head h at poff[b] + h·len[b]²
  std::vector<int32_t> ids, feats, groups, bags;  // packed (T), (T·feat_cols), (T), (T·bag_cols)
  int64_t row(int64_t r) const {  // row r of the (B*N) layout → its packed row
    const int64_t b = r / N;
    return off[size_t(b)] + (r - b * N);
  }
};

struct EncActs {
  Pack pk;
  std::vector<float> x;  // (T, D) the hidden state between layers
  // attend_fwd: the layer's position projections per head in the kernel's layout, δ by relative position, and
  // the kernel's scratch per thread (64-byte aligned inside)
  std::vector<float> PQT, PKTr, attn_scratch, qkv_r;
  std::vector<int32_t> kdtab;
  std::vector<uint16_t> bf16_tmp;  // round_bf16's buffer
  std::vector<float> emb, emb_mean, emb_rstd, R, rel_mean, rel_rstd;
  std::vector<uint8_t> keep_emb;  // dropout mask of the embedding output (T*D)
  std::vector<LayerActs> layers;
  std::vector<int32_t> dtab;
  std::vector<int32_t> gpos;  // (T) label-isolation positions (empty: none; relative positions are i − j)
  int64_t lo = 0, ncol = 0;
  // the kernel's δ table covers |rel| < Rr (deberta::delta_table), so the position projections are formed for the
  // rel-embedding rows [pr0, pr1) only (all of them the attention reads; ncol's columns among them)
  int64_t Rr = 0, pr0 = 0, pr1 = 0;
  float inv_scale = 1.0f;
  // encoder_bwd's work buffers
  std::vector<float> dR, dtmp, dh, dhp, dctx, dq, dk, dv, dPQ, dPK, ddrop;
};

// Inverted dropout: x (n) = x ⊙ keep / (1 − p), keep ~ Bernoulli(1 − p) kept for backward, drawn per chunk of
// kDropChunk values from its own stream of `seed` (chunks over the pool; the same mask whatever the thread count)
void dropout_fwd(int64_t n, float p, uint64_t seed, float* x, std::vector<uint8_t>& keep) {
  constexpr int64_t kDropChunk = 8192;
  keep.resize(size_t(n));
  const float s = 1.0f / (1.0f - p);
  parallel_for((n + kDropChunk - 1) / kDropChunk, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; c++) {
      const int64_t i0 = c * kDropChunk, m = std::min(kDropChunk, n - i0);
      Rng r(Rng::mix(seed) + uint64_t(c));
      uint8_t* kp = keep.data() + i0;
      keep_mask(r, p, m, kp);
      mask_scale(m, kp, s, x + i0, x + i0);
    }
  });
}

// dx (n) = dy ⊙ keep / (1 - p) (in place when dx == dy); a no-op when the forward kept no mask.
void dropout_bwd(int64_t n, float p, const std::vector<uint8_t>& keep, const float* dy, float* dx) {
  if (keep.empty()) {
    if (dx != dy) std::memcpy(dx, dy, size_t(n) * 4);
    return;
  }
  const float s = 1.0f / (1.0f - p);
  mask_scale(n, keep.data(), s, dy, dx);
}

// Stream `what` of layer `l` for head `bh` (0 when not per head): masks depend on the step seed only.
uint64_t drop_seed(uint64_t seed, int64_t l, int what, int64_t bh) {
  return seed * 0x2545F4914F6CDD1Dull + uint64_t(l) * 0x9E3779B97F4A7C15ull + uint64_t(what) * 0xD1B54A32D192ED03ull +
         uint64_t(bh) * 0x8CB92BA72F3D8DD7ull + 0xD0D0ull;
}

// dst (n) = src rounded to bf16 precision (RNE, the bulk converters; in place when dst = src), tmp their bf16 buffer
void round_bf16(int64_t n, const float* src, float* dst, std::vector<uint16_t>& tmp) {
  tmp.resize(size_t(n));
  convert_f32_to_bf16(n, src, tmp.data());
  convert_bf16_to_f32(n, tmp.data(), dst);
}

// Packs the batch of `in` into P (see Pack). rows: the (B*N) rows the heads read (word pieces, segment rows).
void pack_build(const StepIn& in, int64_t H, int64_t KF, const std::vector<int64_t>& rows, Pack& P) {
  const int64_t B = in.B, N = in.N;
  P.B = B;
  P.N = N;
  std::vector<int64_t> need(size_t(B), 1);  // 1 + the last row the heads read, or a real token's group
  for (int64_t r : rows) need[size_t(r / N)] = std::max(need[size_t(r / N)], r % N + 1);
  for (int64_t t = 0; in.groups && t < B * N; t++)
    if (in.mask[t]) need[size_t(t / N)] = std::max<int64_t>(need[size_t(t / N)], in.groups[t] + 1);
  deberta::batch_pack(B, N, in.mask, false, need.data(), P);
  P.poff.assign(size_t(B) + 1, 0);
  for (int64_t b = 0; b < B; b++) P.poff[size_t(b) + 1] = P.poff[size_t(b)] + H * P.len[size_t(b)] * P.len[size_t(b)];
  P.ids.resize(size_t(P.T));
  deberta::pack_rows(P, N, 1, in.ids, P.ids.data());
  P.feats.resize(in.feats && KF ? size_t(P.T * KF) : 0);
  if (!P.feats.empty()) deberta::pack_rows(P, N, KF, in.feats, P.feats.data());
  P.groups.resize(in.groups ? size_t(P.T) : 0);
  if (in.groups) deberta::pack_rows(P, N, 1, in.groups, P.groups.data());
  P.bags.resize(in.bags ? size_t(P.T * in.bag_cols) : 0);
  if (in.bags) deberta::pack_rows(P, N, in.bag_cols, in.bags, P.bags.data());
}

// Zeroes the rows of x (T, D) whose token is padding (inside a sample that keeps its N rows).
void zero_padding_rows(const Pack& P, int64_t D, float* x) {
  for (int64_t b = 0; b < P.B; b++)
    if (const uint8_t* km = P.kmask[size_t(b)])
      for (int64_t p = 0; p < P.len[size_t(b)]; p++)
        if (!km[p]) std::memset(x + (P.off[size_t(b)] + p) * D, 0, size_t(D) * 4);
}

// Attention of one layer without dropout, one task per (sample, head) on the inference forward's kernel
// (deberta_attn_impl.h: fp32 products register-blocked on zero-padded copies of the head, the relative-position
// gathers and the softmax vectorized); it also writes the probabilities the backward needs. In bf16 compute its
// operands q, k, v, PQ, PK are rounded to bf16 first, so the products are the bf16 products vdpbf16ps would form
// (exact in fp32; only the summation order differs, and P·V takes P unrounded): a forward that skipped the rounding
// did not match the bf16 backward, and the intent-classification learning test (encoder-classification) fell to
// chance. At 96-token heads the pair-packed bf16 GEMMs spent as long packing their operands as multiplying them.
// pa > 0: attention dropout, the mask of (sample, head) bh = b·H + h drawn from drop_seed(seed, l, 1, bh) into
// a.keep_p. Samples packed (A.pk): the task of sample b runs its len[b] tokens.
void attend_fwd(const deberta::Config& c, bool bf16, LayerActs& a, EncActs& A, float pa, uint64_t seed, int64_t l) {
  const Pack& P = A.pk;
  const int64_t B = P.B, T = P.T, D = c.D, H = c.H, d = D / H, S2 = 2 * c.att_span(), S2P = S2 + 32;
  const float *q = a.q.data(), *k = a.k.data(), *v = a.v.data();
  deberta::rel_proj_layout(S2, D, H, S2P, a.PQ.data(), a.PK.data(), A.PQT, A.PKTr, A.pr0, A.pr1);
  if (bf16) {
    A.qkv_r.resize(size_t(3 * T * D));
    float* r = A.qkv_r.data();
    round_bf16(T * D, q, r, A.bf16_tmp);
    round_bf16(T * D, k, r + T * D, A.bf16_tmp);
    round_bf16(T * D, v, r + 2 * T * D, A.bf16_tmp);
    q = r;
    k = q + T * D;
    v = k + T * D;
    round_bf16(int64_t(A.PQT.size()), A.PQT.data(), A.PQT.data(), A.bf16_tmp);
    round_bf16(int64_t(A.PKTr.size()), A.PKTr.data(), A.PKTr.data(), A.bf16_tmp);
  }
  const int64_t Rr = A.Rr;
  const int nth = std::max(1, threads_get());
  const size_t scr = (deberta::attn_scratch_floats(P.nmax, d) + 15) / 16 * 16;
  A.attn_scratch.resize(size_t(nth) * scr + 16);
  float* scr0 = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(A.attn_scratch.data()) + 63) & ~uintptr_t(63));
  const float scale = c.attn_scale();
  std::atomic<int64_t> next{0};
  pool_run(nth, [&](int tid, int) {
    for (int64_t kt; (kt = next.fetch_add(1)) < B * H;) {  // longest samples first
      const int64_t b = P.order[size_t(kt / H)], hh = kt % H, bh = b * H + hh, N = P.len[size_t(b)];
      const int64_t off = P.off[size_t(b)] * D + hh * d, po = P.poff[size_t(b)] + hh * N * N;
      deberta::AttnTask t;
      t.n = N;
      t.d = d;
      t.q = q + off;
      t.k = k + off;
      t.v = v + off;
      t.ld = D;
      t.PQT = A.PQT.data() + hh * d * S2P;
      t.PKTr = A.PKTr.data() + hh * d * S2P;
      t.S2P = S2P;
      t.span2 = S2;
      t.dtab = A.kdtab.data();
      t.R = Rr;
      t.mask = P.kmask[size_t(b)];
      if (!P.groups.empty()) {
        t.group = P.groups.data() + P.off[size_t(b)];
        t.pos = A.gpos.data() + P.off[size_t(b)];
      }
      t.scale = scale;
      t.c2p = c.c2p;
      t.p2c = c.p2c;
      t.ctx = a.ctx.data() + off;
      t.ldc = D;
      t.probs = a.probs.data() + po;
      t.scratch = scr0 + size_t(tid) * scr;
      if (pa > 0) {
        uint8_t* kp = a.keep_p.data() + po;
        Rng r(drop_seed(seed, l, 1, bh));
        keep_mask(r, pa, N * N, kp);
        t.keep = kp;
        t.keep_scale = 1.0f / (1.0f - pa);
      }
      deberta::attn_run(t);
    }
  });
}

// x_out: (T, D), the packed rows of A.pk (built by step() from `in`).
void encoder_fwd(const Model& m, const StepIn& in, float* x_out, EncActs& A, Rng* rng) {
  const deberta::Config& c = m.cfg.deb;
  const bool bf = m.cfg.bf16;
  const Pack& P = A.pk;
  const int64_t B = in.B, N = in.N, BN = B * N, T = P.T, Nm = P.nmax, D = c.D, F = c.F, S2 = 2 * c.att_span();
  for (int64_t t = 0; t < BN; t++)
    if (in.ids[t] < 0 || in.ids[t] >= c.V) throw std::out_of_range("encoder train: token id out of range");
  const int64_t KF = m.feat_emb && in.feats ? c.feat_cols : 0;
  for (int64_t t = 0; t < BN * KF; t++)
    if (in.feats[t] < -1 || in.feats[t] >= c.feat_rows) throw std::out_of_range("encoder train: word feature id out of range");
  const int64_t KB = in.bags ? in.bag_cols : 0;
  for (int64_t t = 0; t < BN * KB; t++)
    if (in.bags[t] < -1 || in.bags[t] >= c.V) throw std::out_of_range("encoder train: label bag id out of range");
  A.lo = rel_index(c, -(Nm - 1));
  A.ncol = rel_index(c, Nm - 1) - A.lo + 1;
  A.dtab.resize(size_t(2 * Nm - 1));
  for (int64_t r = -(Nm - 1); r <= Nm - 1; r++) A.dtab[size_t(r + Nm - 1)] = int32_t(rel_index(c, r) - A.lo);
  A.inv_scale = c.attn_scale();
  A.Rr = deberta::delta_table(c, Nm, A.kdtab);
  A.pr0 = rel_index(c, -(A.Rr - 1));
  A.pr1 = rel_index(c, A.Rr - 1) + 1;
  A.gpos.resize(in.groups ? size_t(T) : 0);
  for (int64_t t = 0; in.groups && t < BN; t++)
    if (in.groups[t] < 0 || in.groups[t] >= N)
      throw std::out_of_range("encoder train: label-isolation group out of range");
  for (int64_t b = 0; in.groups && b < B; b++) {
    const int64_t o = P.off[size_t(b)];
    deberta::group_positions(P.len[size_t(b)], P.groups.data() + o, P.kmask[size_t(b)], A.gpos.data() + o);
  }
  // R = LN(rel_emb[:2span])
  A.R.resize(size_t(S2 * D));
  if (m.rel_ln_w) {
    A.rel_mean.resize(static_cast<size_t>(S2));
    A.rel_rstd.resize(static_cast<size_t>(S2));
    layernorm_fwd(S2, D, m.rel_emb->w.data(), m.rel_ln_w->w.data(), m.rel_ln_b->w.data(), c.eps, A.R.data(),
                  A.rel_mean.data(), A.rel_rstd.data());
  } else {
    std::memcpy(A.R.data(), m.rel_emb->w.data(), A.R.size() * 4);
  }
  std::vector<float>& x = A.x;
  x.resize(size_t(T * D));
  A.emb.resize(size_t(T * D));
  embedding_fwd(T, D, P.ids.data(), DType::F32, m.word_emb->w.data(), A.emb.data());
  if (KF) word_feature_fwd(T, D, KF, P.feats.data(), m.feat_emb->w.data(), A.emb.data());
  if (KB) bag_embedding_fwd(T, D, KB, P.bags.data(), DType::F32, m.word_emb->w.data(), A.emb.data());
  A.emb_mean.resize(static_cast<size_t>(T));
  A.emb_rstd.resize(static_cast<size_t>(T));
  layernorm_fwd(T, D, A.emb.data(), m.emb_ln_w->w.data(), m.emb_ln_b->w.data(), c.eps, x.data(), A.emb_mean.data(),
                A.emb_rstd.data());
  zero_padding_rows(P, D, x.data());
  const float ph = in.hidden_dropout, pa = in.attention_dropout;
  A.keep_emb.clear();  // (a mask of an earlier step with dropout would read as this step's: see dropout_bwd)
  if (ph > 0) {
    dropout_fwd(T * D, ph, drop_seed(in.seed, -1, 0, 0), x.data(), A.keep_emb);
  }
  A.layers.resize(size_t(c.L));
  for (int64_t l = 0; l < c.L; l++) {
    const Layer& L = m.layers[size_t(l)];
    LayerActs& a = A.layers[size_t(l)];
    a.x_in = x;
    a.keep_p.clear();  // no mask: no dropout in this step (the buffers are kept from earlier steps)
    a.keep_o.clear();
    a.keep_f.clear();
    a.q.resize(size_t(T * D));
    a.k.resize(size_t(T * D));
    a.v.resize(size_t(T * D));
    L.q.fwd(T, x.data(), a.q.data(), &a.lq, rng);
    L.k.fwd(T, x.data(), a.k.data(), &a.lk, rng);
    L.v.fwd(T, x.data(), a.v.data(), &a.lv, rng);
    a.PQ.resize(size_t(S2 * D));  // rows [pr0, pr1) written and read
    a.PK.resize(size_t(S2 * D));
    const int64_t pr0 = A.pr0, np = A.pr1 - A.pr0;
    L.q.fwd(np, A.R.data() + pr0 * D, a.PQ.data() + pr0 * D, &a.lpq, rng);
    L.k.fwd(np, A.R.data() + pr0 * D, a.PK.data() + pr0 * D, &a.lpk, rng);
    a.probs.resize(size_t(P.poff[size_t(B)]));  // every (sample, head) writes its block in full
    if (pa > 0) a.keep_p.resize(size_t(P.poff[size_t(B)]));
    a.ctx.resize(size_t(T * D));
    attend_fwd(c, bf, a, A, pa, in.seed, l);
    a.a_pre.resize(size_t(T * D));
    L.o.fwd(T, a.ctx.data(), a.a_pre.data(), &a.lo, rng);
    if (ph > 0) {
      dropout_fwd(T * D, ph, drop_seed(in.seed, l, 2, 0), a.a_pre.data(), a.keep_o);
    }
    add_fwd(T * D, a.a_pre.data(), x.data(), a.a_pre.data());
    a.ln1_mean.resize(static_cast<size_t>(T));
    a.ln1_rstd.resize(static_cast<size_t>(T));
    a.a.resize(size_t(T * D));
    layernorm_fwd(T, D, a.a_pre.data(), L.ln1_w->w.data(), L.ln1_b->w.data(), c.eps, a.a.data(), a.ln1_mean.data(),
                  a.ln1_rstd.data());
    a.h_pre.resize(size_t(T * F));
    a.h.resize(size_t(T * F));
    L.inter.fwd(T, a.a.data(), a.h_pre.data(), &a.li, rng);
    gelu_fwd(T * F, a.h_pre.data(), a.h.data(), false);
    a.f_pre.resize(size_t(T * D));
    L.out.fwd(T, a.h.data(), a.f_pre.data(), &a.lout, rng);
    if (ph > 0) {
      dropout_fwd(T * D, ph, drop_seed(in.seed, l, 3, 0), a.f_pre.data(), a.keep_f);
    }
    add_fwd(T * D, a.f_pre.data(), a.a.data(), a.f_pre.data());
    a.ln2_mean.resize(static_cast<size_t>(T));
    a.ln2_rstd.resize(static_cast<size_t>(T));
    layernorm_fwd(T, D, a.f_pre.data(), L.ln2_w->w.data(), L.ln2_b->w.data(), c.eps, x.data(), a.ln2_mean.data(),
                  a.ln2_rstd.data());
  }
  std::memcpy(x_out, x.data(), size_t(T * D) * 4);
}

// dx: (T, D) gradient of the encoder output (the packed rows of A.pk); consumed.
void encoder_bwd(Model& m, const StepIn& in, EncActs& A, std::vector<float>& dx) {
  const deberta::Config& c = m.cfg.deb;
  const bool bf = m.cfg.bf16;
  const Pack& P = A.pk;
  const int64_t B = in.B, T = P.T, Nm = P.nmax, D = c.D, F = c.F, H = c.H, d = D / H, S2 = 2 * c.att_span();
  const int64_t lo = A.lo, ncol = A.ncol;
  std::vector<float> &dR = A.dR, &dtmp = A.dtmp, &dh = A.dh, &dhp = A.dhp, &dctx = A.dctx, &dq = A.dq, &dk = A.dk,
                     &dv = A.dv, &dPQ = A.dPQ, &dPK = A.dPK, &ddrop = A.ddrop;
  dR.assign(size_t(S2 * D), 0.0f);
  for (std::vector<float>* v : {&dtmp, &dctx, &dq, &dk, &dv, &ddrop}) v->resize(size_t(T * D));  // written in full
  dh.resize(size_t(T * F));
  dhp.resize(size_t(T * F));
  dPQ.resize(size_t(S2 * D));
  dPK.resize(size_t(S2 * D));
  const float ph = in.hidden_dropout, pa = in.attention_dropout;
  const int nth = std::max(1, threads_get());
  std::vector<std::vector<float>> tPQ(static_cast<size_t>(nth)), tPK(static_cast<size_t>(nth));
  for (int64_t l = c.L - 1; l >= 0; l--) {
    Layer& L = m.layers[size_t(l)];
    LayerActs& a = A.layers[size_t(l)];
    // x = LN2(f_pre), f_pre = out(h) + a
    layernorm_bwd(T, D, a.f_pre.data(), L.ln2_w->w.data(), a.ln2_mean.data(), a.ln2_rstd.data(), dx.data(),
                  dtmp.data(), L.ln2_w->g.data(), L.ln2_b->g.data());
    dropout_bwd(T * D, ph, a.keep_f, dtmp.data(), ddrop.data());  // f_pre = drop(out(h)) + a
    L.out.bwd(T, a.h.data(), ddrop.data(), dh.data(), &a.lout, false);
    gelu_bwd(T * F, a.h_pre.data(), dh.data(), dhp.data(), false);
    L.inter.bwd(T, a.a.data(), dhp.data(), dtmp.data(), &a.li, true);  // d(a) = dtmp (residual) + inter path
    // a = LN1(a_pre), a_pre = o(ctx) + x_in
    layernorm_bwd(T, D, a.a_pre.data(), L.ln1_w->w.data(), a.ln1_mean.data(), a.ln1_rstd.data(), dtmp.data(),
                  dx.data(), L.ln1_w->g.data(), L.ln1_b->g.data());  // dx = d(a_pre) (residual to x_in below)
    dropout_bwd(T * D, ph, a.keep_o, dx.data(), ddrop.data());  // a_pre = drop(o(ctx)) + x_in
    L.o.bwd(T, a.ctx.data(), ddrop.data(), dctx.data(), &a.lo, false);
    // attention, per (sample, head)
    for (int t = 0; t < nth; t++) {
      tPQ[size_t(t)].assign(size_t(ncol * D), 0.0f);
      tPK[size_t(t)].assign(size_t(ncol * D), 0.0f);
    }
    pool_run(nth, [&](int tid, int nt) {
      std::vector<float> dP(size_t(Nm * Nm)), dC(size_t(Nm * ncol)), dPc(size_t(Nm * ncol));
      std::vector<float> Pd(pa > 0 ? size_t(Nm * Nm) : 0);
      // tasks dealt round-robin, longest samples first: a fixed thread per task, so the per-thread dPQ / dPK sums
      // (and the run) are the same from one step to the next
      for (int64_t kt = tid; kt < B * H; kt += nt) {
        const int64_t b = P.order[size_t(kt / H)], hh = kt % H, N = P.len[size_t(b)];
        const int64_t off = P.off[size_t(b)] * D + hh * d, po = P.poff[size_t(b)] + hh * N * N;
        const float* Pr = a.probs.data() + po;
        const float* PV = Pr;  // what multiplied V: P, or drop(P)
        const float s_keep = pa > 0 ? 1.0f / (1.0f - pa) : 1.0f;
        const uint8_t* kp = pa > 0 ? a.keep_p.data() + po : nullptr;
        if (kp) {
          mask_scale(N * N, kp, s_keep, Pr, Pd.data());
          PV = Pd.data();
        }
        // dV = PVᵀ·dctx ; dP = (dctx·Vᵀ) ⊙ keep / (1 − pa)
        sgemm_as(bf, true, false, N, d, N, 1.0f, PV, N, dctx.data() + off, D, 0.0f, dv.data() + off, D);
        sgemm_as(bf, false, true, N, N, d, 1.0f, dctx.data() + off, D, a.v.data() + off, D, 0.0f, dP.data(), N);
        if (kp)
          mask_scale(N * N, kp, s_keep, dP.data(), dP.data());
        // dS = P ⊙ (dP − rowsum(dP ⊙ P)) · inv_scale (ops' vectorized softmax backward)
        softmax_bwd(N, N, Pr, dP.data(), dP.data());
        scale_fwd(N * N, dP.data(), A.inv_scale, dP.data());
        // dq = dS·k ; dk = dSᵀ·q
        sgemm_as(bf, false, false, N, d, N, 1.0f, dP.data(), N, a.k.data() + off, D, 0.0f, dq.data() + off, D);
        sgemm_as(bf, true, false, N, d, N, 1.0f, dP.data(), N, a.q.data() + off, D, 0.0f, dk.data() + off, D);
        // the sample's relative columns [c0, c1) of the batch's ncol
        const int64_t c0 = rel_index(c, -(N - 1)) - lo, nc = rel_index(c, N - 1) - lo + 1 - c0;
        std::fill(dC.begin(), dC.begin() + N * ncol, 0.0f);
        std::fill(dPc.begin(), dPc.begin() + N * ncol, 0.0f);
        const int32_t* gp = in.groups ? A.gpos.data() + P.off[size_t(b)] : nullptr;  // label isolation: δ of pos_i − pos_j
        for (int64_t i = 0; i < N; i++) {
          const int32_t* di = A.dtab.data() + (i + Nm - 1);
          const float* r = dP.data() + i * N;
          for (int64_t j = 0; j < N; j++) {
            const int32_t rr = gp ? A.dtab[size_t(gp[i] - gp[j] + Nm - 1)] : di[-j];
            dC[size_t(i * ncol + rr)] += r[j];   // c2p: score[i,j] += q_i·PK[δ]
            dPc[size_t(j * ncol + rr)] += r[j];  // p2c: score[i,j] += k_j·PQ[δ]
          }
        }
        float* tpk = tPK[size_t(tid)].data() + hh * d;
        float* tpq = tPQ[size_t(tid)].data() + hh * d;
        if (c.c2p) {
          sgemm_as(bf, false, false, N, d, nc, 1.0f, dC.data() + c0, ncol, a.PK.data() + (lo + c0) * D + hh * d, D,
                   1.0f, dq.data() + off, D);
          sgemm_as(bf, true, false, nc, d, N, 1.0f, dC.data() + c0, ncol, a.q.data() + off, D, 1.0f, tpk + c0 * D, D);
        }
        if (c.p2c) {
          sgemm_as(bf, false, false, N, d, nc, 1.0f, dPc.data() + c0, ncol, a.PQ.data() + (lo + c0) * D + hh * d, D,
                   1.0f, dk.data() + off, D);
          sgemm_as(bf, true, false, nc, d, N, 1.0f, dPc.data() + c0, ncol, a.k.data() + off, D, 1.0f, tpq + c0 * D, D);
        }
      }
    });
    std::fill(dPQ.begin(), dPQ.end(), 0.0f);
    std::fill(dPK.begin(), dPK.end(), 0.0f);
    for (int t = 0; t < nth; t++) {
      axpy(ncol * D, 1.0f, tPQ[size_t(t)].data(), dPQ.data() + lo * D);
      axpy(ncol * D, 1.0f, tPK[size_t(t)].data(), dPK.data() + lo * D);
    }
    // PQ = q(R), PK = k(R): parameter grads and dR
    const int64_t pr0 = A.pr0, np = A.pr1 - A.pr0;  // the rows the forward projected
    L.q.bwd(np, A.R.data() + pr0 * D, dPQ.data() + pr0 * D, dR.data() + pr0 * D, &a.lpq, true);
    L.k.bwd(np, A.R.data() + pr0 * D, dPK.data() + pr0 * D, dR.data() + pr0 * D, &a.lpk, true);
    // q, k, v = lin(x_in); dx already holds the residual d(x_in)
    L.q.bwd(T, a.x_in.data(), dq.data(), dx.data(), &a.lq, true);
    L.k.bwd(T, a.x_in.data(), dk.data(), dx.data(), &a.lk, true);
    L.v.bwd(T, a.x_in.data(), dv.data(), dx.data(), &a.lv, true);
  }
  // x0 = drop(LN(emb)·mask)
  dropout_bwd(T * D, ph, A.keep_emb, dx.data(), dx.data());
  zero_padding_rows(P, D, dx.data());
  layernorm_bwd(T, D, A.emb.data(), m.emb_ln_w->w.data(), A.emb_mean.data(), A.emb_rstd.data(), dx.data(),
                dtmp.data(), m.emb_ln_w->g.data(), m.emb_ln_b->g.data());
  if (m.word_emb->trainable) embedding_bwd(T, D, P.ids.data(), dtmp.data(), m.word_emb->g.data());
  if (m.word_emb->trainable && in.bags)
    bag_embedding_bwd(T, D, in.bag_cols, P.bags.data(), dtmp.data(), m.word_emb->g.data());
  if (m.feat_emb && in.feats && m.feat_emb->trainable)
    word_feature_bwd(T, D, c.feat_cols, P.feats.data(), dtmp.data(), m.feat_emb->g.data());
  if (m.rel_emb->trainable) {
    if (m.rel_ln_w) {
      std::vector<float> drel(size_t(S2 * D));
      layernorm_bwd(S2, D, m.rel_emb->w.data(), m.rel_ln_w->w.data(), A.rel_mean.data(), A.rel_rstd.data(), dR.data(),
                    drel.data(), m.rel_ln_w->g.data(), m.rel_ln_b->g.data());
      axpy(S2 * D, 1.0f, drel.data(), m.rel_emb->g.data());
    } else {
      axpy(S2 * D, 1.0f, dR.data(), m.rel_emb->g.data());
    }
  }
}

// dW += dyᵀ·x of one linear over the rows of several calls, formed once (flush): the count head's products have
// c·M rows per segment (a few), and per call the gradient arrays (7.1M floats for the projector at base, 1.8M for
// each GRU weight) were read and written for those few rows.
struct DwRows {
  std::vector<float> dy, x;  // (rows, N), (rows, K)
  void add(const TLinear& l, int64_t M, const float* dy_r, const float* x_r) {
    dy.insert(dy.end(), dy_r, dy_r + M * l.N);
    x.insert(x.end(), x_r, x_r + M * l.K);
  }
  void flush(const TLinear& l) {
    l.dw_add(int64_t(dy.size()) / l.N, x.data(), dy.data());
    clear();
  }
  void clear() {
    dy.clear();
    x.clear();
  }
};
// The count head's dW rows of a step: projector.a / .b (count_lstm), GRU weight_hh / weight_ih.
struct CountDw {
  DwRows pa, pb, hh, ih;
  void clear() {  // (rows left by a step that threw)
    for (DwRows* r : {&pa, &pb, &hh, &ih}) r->clear();
  }
};

// ---------------------------------------------------------------------------------------------
// count_embed: GRU over c steps from h0 = F (count_gru), then the count_lstm projector
// (count_proj) or the count_lstm_v2 transformer (count_tf). Rows are (t, m): R = c·M.
// ---------------------------------------------------------------------------------------------
struct GruActs {
  int64_t c = 0, M = 0;
  std::vector<float> gi, hprev, r, z, n, ghn;  // gi (c, 3D); the rest (c, M, D)
  LinActs lih;
  std::vector<LinActs> lhh;
};

// F (M, D), c steps → G (c, M, D): h0 = F; x_t = pos_emb[t]; G[t] = h_t.
void count_gru_fwd(const Model& m, int64_t M, const float* F, int64_t c, float* G, GruActs& A, Rng* rng) {
  const int64_t D = m.cfg.deb.D;
  A.c = c;
  A.M = M;
  A.gi.resize(size_t(c * 3 * D));
  m.gru_ih.fwd(c, m.pos_emb->w.data(), A.gi.data(), &A.lih, rng);  // (c, 3D)
  A.hprev.resize(size_t(c * M * D));
  A.r.resize(size_t(c * M * D));
  A.z.resize(size_t(c * M * D));
  A.n.resize(size_t(c * M * D));
  A.ghn.resize(size_t(c * M * D));
  A.lhh.resize(static_cast<size_t>(c));
  std::vector<float> h(F, F + M * D), gh(size_t(M * 3 * D));
  for (int64_t t = 0; t < c; t++) {
    std::memcpy(A.hprev.data() + t * M * D, h.data(), size_t(M * D) * 4);
    m.gru_hh.fwd(M, h.data(), gh.data(), &A.lhh[size_t(t)], rng);
    const float* x = A.gi.data() + t * 3 * D;
    for (int64_t mm = 0; mm < M; mm++)
      for (int64_t u = 0; u < D; u++) {
        const float* g = gh.data() + mm * 3 * D;
        size_t at = size_t((t * M + mm) * D + u);
        float r = sigmoidf(x[u] + g[u]);
        float z = sigmoidf(x[D + u] + g[D + u]);
        float n = std::tanh(x[2 * D + u] + r * g[2 * D + u]);
        A.r[at] = r;
        A.z[at] = z;
        A.n[at] = n;
        A.ghn[at] = g[2 * D + u];
        float& hv = h[size_t(mm * D + u)];
        hv = (1.0f - z) * n + z * hv;
        G[at] = hv;
      }
  }
}

// dG (c, M, D) → dF (M, D) accumulated; GRU and position-embedding gradients accumulated (the GRU's dW rows to pdw
// when not null).
void count_gru_bwd(const Model& m, GruActs& A, const float* dG, float* dF, CountDw* pdw) {
  const int64_t D = m.cfg.deb.D, c = A.c, M = A.M;
  std::vector<float> dh(size_t(M * D), 0.0f), dgh(size_t(M * 3 * D)), dgi(size_t(c * 3 * D), 0.0f),
      dhp(size_t(M * D));
  for (int64_t t = c - 1; t >= 0; t--) {
    axpy(M * D, 1.0f, dG + t * M * D, dh.data());
    float* dgit = dgi.data() + t * 3 * D;
    for (int64_t mm = 0; mm < M; mm++)
      for (int64_t u = 0; u < D; u++) {
        size_t at = size_t((t * M + mm) * D + u);
        float r = A.r[at], z = A.z[at], n = A.n[at], hp = A.hprev[at], g = dh[size_t(mm * D + u)];
        float dn = g * (1.0f - z);
        float dz = g * (hp - n);
        dhp[size_t(mm * D + u)] = g * z;
        float dnp = dn * (1.0f - n * n);
        float dr = dnp * A.ghn[at];
        float drp = dr * r * (1.0f - r);
        float dzp = dz * z * (1.0f - z);
        float* gh = dgh.data() + mm * 3 * D;
        gh[u] = drp;
        gh[D + u] = dzp;
        gh[2 * D + u] = dnp * r;
        dgit[u] += drp;
        dgit[D + u] += dzp;
        dgit[2 * D + u] += dnp;
      }
    // gh = hprev·W_hhᵀ + b_hh
    m.gru_hh.bwd(M, A.hprev.data() + t * M * D, dgh.data(), dhp.data(), &A.lhh[size_t(t)], true, !pdw);
    if (pdw) pdw->hh.add(m.gru_hh, M, dgh.data(), A.hprev.data() + t * M * D);
    dh.swap(dhp);
  }
  axpy(M * D, 1.0f, dh.data(), dF);  // h0 = F
  std::vector<float> dpos(size_t(c * D));
  m.gru_ih.bwd(c, m.pos_emb->w.data(), dgi.data(), dpos.data(), &A.lih, false, !pdw);
  if (pdw) pdw->ih.add(m.gru_ih, c, dgi.data(), m.pos_emb->w.data());
  if (m.pos_emb->trainable) axpy(c * D, 1.0f, dpos.data(), m.pos_emb->g.data());
}

// count_lstm: Fc (c, M, D) = projector(concat(G[t,m], F[m])) (2D → 4D → D, ReLU)
struct ProjActs {
  std::vector<float> cat;  // (c, M, 2D)
  Mlp2::Acts mlp;
};

void count_proj_fwd(const Model& m, int64_t M, const float* F, int64_t c, const float* G, float* Fc, ProjActs& A,
                    Rng* rng) {
  const int64_t D = m.cfg.deb.D;
  A.cat.resize(size_t(c * M * 2 * D));
  for (int64_t t = 0; t < c; t++)
    for (int64_t mm = 0; mm < M; mm++) {
      float* row = A.cat.data() + (t * M + mm) * 2 * D;
      std::memcpy(row, G + (t * M + mm) * D, size_t(D) * 4);
      std::memcpy(row + D, F + mm * D, size_t(D) * 4);
    }
  m.projector.fwd(c * M, A.cat.data(), Fc, &A.mlp, rng);
}

// dFc (c, M, D) → dG (c, M, D) written, dF (M, D) accumulated; with pdw, the projector's dW rows go there.
void count_proj_bwd(const Model& m, int64_t M, int64_t c, ProjActs& A, const float* dFc, float* dG, float* dF,
                    CountDw* pdw) {
  const int64_t D = m.cfg.deb.D, R = c * M;
  std::vector<float> dcat(size_t(R * 2 * D));
  m.projector.bwd(R, dFc, dcat.data(), A.mlp, false, !pdw);
  if (pdw) {
    pdw->pb.add(m.projector.b, R, dFc, A.mlp.h.data());
    pdw->pa.add(m.projector.a, R, A.mlp.dh.data(), A.mlp.x.data());
  }
  for (int64_t t = 0; t < c; t++)
    for (int64_t mm = 0; mm < M; mm++) {
      const float* row = dcat.data() + (t * M + mm) * 2 * D;
      std::memcpy(dG + (t * M + mm) * D, row, size_t(D) * 4);
      axpy(D, 1.0f, row + D, dF + mm * D);
    }
}

// count_lstm_v2: X (R, D) = G + F ; Y = in_projector(X) (R, T) ; 2 × [Y = LN1(Y + MHA(Y)) ;
// Y = LN2(Y + lin2(ReLU(lin1(Y))))] with attention over the M rows of each step t (4 heads, no mask) ;
// Fc = o4(ReLU(o2(ReLU(o0(concat(Y, X)))))).
struct TfLayerActs {
  std::vector<float> y_in, qkv, probs, ctx, a_pre, m1, r1, y1, f, f_pre, m2, r2;  // probs (c, 4, M, M)
  LinActs lin, lout, l1, l2;
};
struct TfActs {
  std::vector<float> X, cat, h1, h2;  // X (R, D), cat (R, T+D), h1/h2 (R, D) after ReLU
  LinActs lcin, lo0, lo2, lo4;
  TfLayerActs layers[2];
};

// Multi-head attention over the M rows of each of the c groups. qkv (R, 3T) → ctx (R, T); probs kept.
void count_attn_fwd(int64_t c, int64_t M, int64_t T, const float* qkv, float* probs, float* ctx) {
  const int64_t dh = T / kCountHeads;
  const float scale = 1.0f / std::sqrt(float(dh));
  for (int64_t t = 0; t < c; t++)
    for (int64_t hh = 0; hh < kCountHeads; hh++) {
      float* P = probs + (t * kCountHeads + hh) * M * M;
      for (int64_t i = 0; i < M; i++) {
        const float* q = qkv + (t * M + i) * 3 * T + hh * dh;
        float* row = P + i * M;
        float mx = -INFINITY;
        for (int64_t j = 0; j < M; j++) {
          const float* k = qkv + (t * M + j) * 3 * T + T + hh * dh;
          float s = 0.0f;
          for (int64_t e = 0; e < dh; e++) s += q[e] * k[e];
          row[j] = s * scale;
          mx = std::max(mx, row[j]);
        }
        float sum = 0.0f;
        for (int64_t j = 0; j < M; j++) {
          row[j] = std::exp(row[j] - mx);
          sum += row[j];
        }
        for (int64_t j = 0; j < M; j++) row[j] /= sum;
        float* o = ctx + (t * M + i) * T + hh * dh;
        std::fill(o, o + dh, 0.0f);
        for (int64_t j = 0; j < M; j++) {
          const float* v = qkv + (t * M + j) * 3 * T + 2 * T + hh * dh;
          for (int64_t e = 0; e < dh; e++) o[e] += row[j] * v[e];
        }
      }
    }
}

// dctx (R, T) → dqkv (R, 3T) written.
void count_attn_bwd(int64_t c, int64_t M, int64_t T, const float* qkv, const float* probs, const float* dctx,
                    float* dqkv) {
  const int64_t dh = T / kCountHeads;
  const float scale = 1.0f / std::sqrt(float(dh));
  std::fill(dqkv, dqkv + c * M * 3 * T, 0.0f);
  std::vector<float> dS(static_cast<size_t>(M));
  for (int64_t t = 0; t < c; t++)
    for (int64_t hh = 0; hh < kCountHeads; hh++) {
      const float* P = probs + (t * kCountHeads + hh) * M * M;
      for (int64_t i = 0; i < M; i++) {
        const float* row = P + i * M;
        const float* go = dctx + (t * M + i) * T + hh * dh;
        // dP[j] = go·v_j ; dv_j += P[i,j]·go ; dS = P ⊙ (dP − Σ dP⊙P)
        float s = 0.0f;
        for (int64_t j = 0; j < M; j++) {
          const float* v = qkv + (t * M + j) * 3 * T + 2 * T + hh * dh;
          float* dv = dqkv + (t * M + j) * 3 * T + 2 * T + hh * dh;
          float dp = 0.0f;
          for (int64_t e = 0; e < dh; e++) {
            dp += go[e] * v[e];
            dv[e] += row[j] * go[e];
          }
          dS[size_t(j)] = dp;
          s += dp * row[j];
        }
        const float* q = qkv + (t * M + i) * 3 * T + hh * dh;
        float* dq = dqkv + (t * M + i) * 3 * T + hh * dh;
        for (int64_t j = 0; j < M; j++) {
          const float ds = row[j] * (dS[size_t(j)] - s) * scale;
          const float* k = qkv + (t * M + j) * 3 * T + T + hh * dh;
          float* dk = dqkv + (t * M + j) * 3 * T + T + hh * dh;
          for (int64_t e = 0; e < dh; e++) {
            dq[e] += ds * k[e];
            dk[e] += ds * q[e];
          }
        }
      }
    }
}

void relu_inplace(int64_t n, float* x) {
  for (int64_t i = 0; i < n; i++) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void count_tf_fwd(const Model& m, int64_t M, const float* F, int64_t c, const float* G, float* Fc, TfActs& A,
                  Rng* rng) {
  const int64_t D = m.cfg.deb.D, T = m.cfg.count_T, FF = m.cfg.count_FF, R = c * M;
  A.X.resize(size_t(R * D));
  for (int64_t t = 0; t < c; t++)
    for (int64_t mm = 0; mm < M; mm++)
      for (int64_t u = 0; u < D; u++) A.X[size_t((t * M + mm) * D + u)] = G[(t * M + mm) * D + u] + F[mm * D + u];
  std::vector<float> Y(size_t(R * T));
  m.cin.fwd(R, A.X.data(), Y.data(), &A.lcin, rng);
  for (int li = 0; li < 2; li++) {
    const CountTLayer& L = m.ct[li];
    TfLayerActs& a = A.layers[li];
    a.y_in = Y;
    a.qkv.resize(size_t(R * 3 * T));
    L.attn_in.fwd(R, Y.data(), a.qkv.data(), &a.lin, rng);
    a.probs.resize(size_t(c * kCountHeads * M * M));
    a.ctx.resize(size_t(R * T));
    count_attn_fwd(c, M, T, a.qkv.data(), a.probs.data(), a.ctx.data());
    a.a_pre.resize(size_t(R * T));
    L.attn_out.fwd(R, a.ctx.data(), a.a_pre.data(), &a.lout, rng);
    add_fwd(R * T, a.a_pre.data(), Y.data(), a.a_pre.data());
    a.m1.resize(static_cast<size_t>(R));
    a.r1.resize(static_cast<size_t>(R));
    a.y1.resize(size_t(R * T));
    layernorm_fwd(R, T, a.a_pre.data(), L.n1_w->w.data(), L.n1_b->w.data(), 1e-5f, a.y1.data(), a.m1.data(),
                  a.r1.data());
    a.f.resize(size_t(R * FF));
    L.lin1.fwd(R, a.y1.data(), a.f.data(), &a.l1, rng);
    relu_inplace(R * FF, a.f.data());
    a.f_pre.resize(size_t(R * T));
    L.lin2.fwd(R, a.f.data(), a.f_pre.data(), &a.l2, rng);
    add_fwd(R * T, a.f_pre.data(), a.y1.data(), a.f_pre.data());
    a.m2.resize(static_cast<size_t>(R));
    a.r2.resize(static_cast<size_t>(R));
    layernorm_fwd(R, T, a.f_pre.data(), L.n2_w->w.data(), L.n2_b->w.data(), 1e-5f, Y.data(), a.m2.data(),
                  a.r2.data());
  }
  A.cat.resize(size_t(R * (T + D)));
  for (int64_t r = 0; r < R; r++) {
    std::memcpy(A.cat.data() + r * (T + D), Y.data() + r * T, size_t(T) * 4);
    std::memcpy(A.cat.data() + r * (T + D) + T, A.X.data() + r * D, size_t(D) * 4);
  }
  A.h1.resize(size_t(R * D));
  A.h2.resize(size_t(R * D));
  m.co0.fwd(R, A.cat.data(), A.h1.data(), &A.lo0, rng);
  relu_inplace(R * D, A.h1.data());
  m.co2.fwd(R, A.h1.data(), A.h2.data(), &A.lo2, rng);
  relu_inplace(R * D, A.h2.data());
  m.co4.fwd(R, A.h2.data(), Fc, &A.lo4, rng);
}

// dFc (c, M, D) → dG (c, M, D) written, dF (M, D) accumulated.
void count_tf_bwd(const Model& m, int64_t M, int64_t c, TfActs& A, const float* dFc, float* dG, float* dF) {
  const int64_t D = m.cfg.deb.D, T = m.cfg.count_T, FF = m.cfg.count_FF, R = c * M;
  std::vector<float> dh2(size_t(R * D)), dh1(size_t(R * D)), dcat(size_t(R * (T + D)));
  m.co4.bwd(R, A.h2.data(), dFc, dh2.data(), &A.lo4, false);
  relu_bwd(R * D, A.h2.data(), dh2.data());
  m.co2.bwd(R, A.h1.data(), dh2.data(), dh1.data(), &A.lo2, false);
  relu_bwd(R * D, A.h1.data(), dh1.data());
  m.co0.bwd(R, A.cat.data(), dh1.data(), dcat.data(), &A.lo0, false);
  std::vector<float> dY(size_t(R * T)), dX(size_t(R * D)), dtmp(size_t(R * T)), df(size_t(R * FF)),
      dqkv(size_t(R * 3 * T)), dctx(size_t(R * T));
  for (int64_t r = 0; r < R; r++) {
    std::memcpy(dY.data() + r * T, dcat.data() + r * (T + D), size_t(T) * 4);
    std::memcpy(dX.data() + r * D, dcat.data() + r * (T + D) + T, size_t(D) * 4);
  }
  for (int li = 1; li >= 0; li--) {
    const CountTLayer& L = m.ct[li];
    TfLayerActs& a = A.layers[li];
    // Y = LN2(f_pre), f_pre = lin2(f) + y1
    layernorm_bwd(R, T, a.f_pre.data(), L.n2_w->w.data(), a.m2.data(), a.r2.data(), dY.data(), dtmp.data(),
                  L.n2_w->g.data(), L.n2_b->g.data());
    L.lin2.bwd(R, a.f.data(), dtmp.data(), df.data(), &a.l2, false);
    relu_bwd(R * FF, a.f.data(), df.data());
    L.lin1.bwd(R, a.y1.data(), df.data(), dtmp.data(), &a.l1, true);  // d(y1) = residual + FFN path
    // y1 = LN1(a_pre), a_pre = attn_out(ctx) + y_in
    layernorm_bwd(R, T, a.a_pre.data(), L.n1_w->w.data(), a.m1.data(), a.r1.data(), dtmp.data(), dY.data(),
                  L.n1_w->g.data(), L.n1_b->g.data());  // dY = d(a_pre) = residual part of d(y_in)
    L.attn_out.bwd(R, a.ctx.data(), dY.data(), dctx.data(), &a.lout, false);
    count_attn_bwd(c, M, T, a.qkv.data(), a.probs.data(), dctx.data(), dqkv.data());
    L.attn_in.bwd(R, a.y_in.data(), dqkv.data(), dY.data(), &a.lin, true);
    a = TfLayerActs();
  }
  m.cin.bwd(R, A.X.data(), dY.data(), dX.data(), &A.lcin, true);
  // X = G + F (broadcast over t)
  std::memcpy(dG, dX.data(), size_t(R * D) * 4);
  for (int64_t t = 0; t < c; t++) axpy(M * D, 1.0f, dX.data() + t * M * D, dF);
}

struct CountActs {
  int64_t c = 0, M = 0;
  GruActs gru;
  ProjActs proj;
  TfActs tf;
};

// F (M, D) marker rows, c ≥ 1 → Fc (c, M, D).
void count_embed_fwd(const Model& m, int64_t M, const float* F, int64_t c, float* Fc, CountActs& A, Rng* rng) {
  const int64_t D = m.cfg.deb.D;
  A.c = c;
  A.M = M;
  std::vector<float> G(size_t(c * M * D));
  count_gru_fwd(m, M, F, c, G.data(), A.gru, rng);
  if (m.cfg.counting == Counting::LstmV2) count_tf_fwd(m, M, F, c, G.data(), Fc, A.tf, rng);
  else count_proj_fwd(m, M, F, c, G.data(), Fc, A.proj, rng);
}

// dFc (c, M, D) → dF (M, D) accumulated (the projector's and GRU's dW rows to pdw when not null).
void count_embed_bwd(const Model& m, CountActs& A, const float* dFc, float* dF, CountDw* pdw) {
  const int64_t D = m.cfg.deb.D, c = A.c, M = A.M;
  std::vector<float> dG(size_t(c * M * D));
  if (m.cfg.counting == Counting::LstmV2) count_tf_bwd(m, M, c, A.tf, dFc, dG.data(), dF);
  else count_proj_bwd(m, M, c, A.proj, dFc, dG.data(), dF, pdw);
  count_gru_bwd(m, A.gru, dG.data(), dF, pdw);
}

// ---------------------------------------------------------------------------------------------
// Word pooling (token_pooling): words (ΣW, D) from the hidden rows [r0[w], r1[w]) of each word
// ---------------------------------------------------------------------------------------------
// first: the row r0 ; mean: the mean of the rows ; max: elementwise max (argmax (ΣW, D) keeps the
// first winning row, as torch.max does, for backward).
void word_pool_fwd(Pooling pool, int64_t TW, int64_t D, const float* hidden, const int64_t* r0, const int64_t* r1,
                   float* words, int32_t* argmax) {
  for (int64_t w = 0; w < TW; w++) {
    float* o = words + w * D;
    std::memcpy(o, hidden + r0[w] * D, size_t(D) * 4);
    if (pool == Pooling::Max)
      for (int64_t u = 0; u < D; u++) argmax[w * D + u] = int32_t(r0[w]);
    if (pool == Pooling::First) continue;
    for (int64_t r = r0[w] + 1; r < r1[w]; r++) {
      const float* h = hidden + r * D;
      if (pool == Pooling::Mean) {
        for (int64_t u = 0; u < D; u++) o[u] += h[u];
      } else {
        for (int64_t u = 0; u < D; u++)
          if (h[u] > o[u]) o[u] = h[u], argmax[w * D + u] = int32_t(r);
      }
    }
    if (pool == Pooling::Mean) scale_fwd(D, o, 1.0f / float(r1[w] - r0[w]), o);
  }
}

// dwords (ΣW, D) → dhidden (B*N, D) accumulated.
void word_pool_bwd(Pooling pool, int64_t TW, int64_t D, const int64_t* r0, const int64_t* r1, const int32_t* argmax,
                   const float* dwords, float* dhidden) {
  for (int64_t w = 0; w < TW; w++) {
    const float* g = dwords + w * D;
    if (pool == Pooling::First) {
      axpy(D, 1.0f, g, dhidden + r0[w] * D);
    } else if (pool == Pooling::Mean) {
      const float s = 1.0f / float(r1[w] - r0[w]);
      for (int64_t r = r0[w]; r < r1[w]; r++) axpy(D, s, g, dhidden + r * D);
    } else {
      for (int64_t u = 0; u < D; u++) dhidden[int64_t(argmax[w * D + u]) * D + u] += g[u];
    }
  }
}

// hid = ReLU(ps + pe) of one span (n = 4D): ps, pe += (hid > 0) ⊙ dhid. Branch-free and restrict, so that it
// vectorizes: the ReLU's sign is a coin flip per value, and the branch it replaced mispredicted half the time.
void span_hid_bwd(int64_t n, const float* __restrict hid, const float* __restrict dhid, float* __restrict dps,
                  float* __restrict dpe) {
  for (int64_t u = 0; u < n; u++) {
    const float d = dhid[u];  // loaded unconditionally: a conditional load keeps GCC from if-converting the loop
    const float g = hid[u] > 0 ? d : 0.0f;
    dps[u] += g;
    dpe[u] += g;
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// One micro-batch
struct StepScratch {
  EncActs enc;
  std::vector<float> hidden, dhidden;   // (T, D) encoder output (packed rows, EncActs::pk) and its gradient
  std::vector<float> hid, dhid, dlog;   // one sample's span scores: (W*K, 4D), (W*K, 4D), (W*K, R)
  std::vector<float> PS, PE, dPS, dPE;  // (ΣW, 4D) out_project.0 of the start and end representations
  Mlp2::Acts as, ae;                    // project_start, project_end
  CountDw cdw;                          // the count head's dW rows of the step
  std::vector<uint16_t> wbf[4];         // bf16 compute: GRU weight_hh / weight_ih, projector.a / .b, this step's
};

// ---------------------------------------------------------------------------------------------
void step(Model& m, const StepIn& in, StepOut& out) {
  const deberta::Config& c = m.cfg.deb;
  const bool bf = m.cfg.bf16;
  const int64_t B = in.B, N = in.N, BN = B * N, D = c.D, D4 = 4 * D, K = m.cfg.K;
  if (B <= 0 || N <= 0) throw std::invalid_argument("encoder train: empty batch");
  if (int64_t(in.woff.size()) != B + 1 || in.woff[B] != int64_t(in.word_rows.size()))
    throw std::invalid_argument("encoder train: word offsets do not match the word rows");
  for (int64_t r : in.word_rows)
    if (r < 0 || r >= BN) throw std::out_of_range("encoder train: word row out of range");
  const Pooling pool = m.cfg.pooling;
  const int64_t TW = in.woff[B];
  // each word's pieces [r0, r1): at least its first piece, never past its sample (rows of the (B*N) layout here,
  // packed below)
  std::vector<int64_t> wrow(in.word_rows), wend(static_cast<size_t>(TW));
  if (pool != Pooling::First && int64_t(in.word_end.size()) != TW)
    throw std::invalid_argument("encoder train: mean / max pooling needs the end row of every word");
  for (int64_t b = 0; b < B; b++)
    for (int64_t w = in.woff[b]; w < in.woff[b + 1]; w++) {
      const int64_t r0 = in.word_rows[size_t(w)];
      int64_t r1 = pool == Pooling::First ? r0 + 1 : std::max(in.word_end[size_t(w)], r0 + 1);
      if (r0 < b * N || r1 > (b + 1) * N) throw std::out_of_range("encoder train: word pieces outside their sample");
      wend[size_t(w)] = r1;
    }
  for (const Seg& s : in.segs) {
    if (s.sample < 0 || s.sample >= B || int64_t(s.rows.size()) != 1 + s.M)
      throw std::invalid_argument("encoder train: bad segment");
    for (int64_t r : s.rows)
      if (r < 0 || r >= BN) throw std::out_of_range("encoder train: segment row out of range");
  }
  Rng rng(in.seed);
  Rng* rp = in.backward ? &rng : nullptr;  // LoRA dropout only when training
  const bool bw = in.backward;
  const float gs = in.grad_scale;
  if (!m.scratch) m.scratch = std::make_shared<StepScratch>();
  StepScratch& sc = *m.scratch;
  EncActs& EA = sc.enc;
  // pack the batch (Pack): the rows the heads read stay in their samples' packed rows
  std::vector<Seg> segs(in.segs);
  {
    std::vector<int64_t> read(wrow);
    for (int64_t r : wend) read.push_back(r - 1);
    for (const Seg& g : segs) read.insert(read.end(), g.rows.begin(), g.rows.end());
    pack_build(in, c.H, c.feat_cols, read, EA.pk);
    for (int64_t& r : wrow) r = EA.pk.row(r);
    for (int64_t& r : wend) r = EA.pk.row(r - 1) + 1;
    for (Seg& g : segs)
      for (int64_t& r : g.rows) r = EA.pk.row(r);
  }
  const int64_t T = EA.pk.T;
  std::vector<float>& hidden = sc.hidden;
  hidden.resize(size_t(T * D));
  encoder_fwd(m, in, hidden.data(), EA, rp);
  std::vector<float>& dhidden = sc.dhidden;
  dhidden.assign(bw ? size_t(T * D) : 0, 0.0f);
  out = StepOut();

  // ---- span heads: word representations ----
  std::vector<float> words(size_t(TW * D)), S(size_t(TW * D)), E(size_t(TW * D));
  std::vector<float>&PS = sc.PS, &PE = sc.PE;  // written in full below
  PS.resize(size_t(TW * D4));
  PE.resize(size_t(TW * D4));
  std::vector<int32_t> argmax(pool == Pooling::Max ? size_t(TW * D) : 0);
  word_pool_fwd(pool, TW, D, hidden.data(), wrow.data(), wend.data(), words.data(), argmax.data());
  Mlp2::Acts &as = sc.as, &ae = sc.ae;
  m.proj_start.fwd(TW, words.data(), S.data(), &as, rp);
  m.proj_end.fwd(TW, words.data(), E.data(), &ae, rp);
  std::vector<float> Sr(S), Er(E);
  for (auto& v : Sr) v = v > 0 ? v : 0;
  for (auto& v : Er) v = v > 0 ? v : 0;
  // out_project.0 split over the concat: PS = Sr·W1aᵀ + b1 (+ s·(Sr·Aaᵀ)·Bᵀ), PE = Er·W1bᵀ (+ LoRA)
  const TLinear& o0 = m.out0;
  const int64_t r0 = o0.lora.r;
  std::vector<float> xas(size_t(TW * std::max<int64_t>(r0, 1))), xae(xas.size());
  linear_as(bf, TW, D4, D, Sr.data(), D, o0.W->w.data(), 2 * D, o0.b->w.data(), PS.data(), D4);
  linear_as(bf, TW, D4, D, Er.data(), D, o0.W->w.data() + D, 2 * D, nullptr, PE.data(), D4);
  if (r0 > 0) {
    sgemm(false, true, TW, r0, D, 1.0f, Sr.data(), D, o0.lora.A->w.data(), 2 * D, 0.0f, xas.data(), r0);
    sgemm(false, true, TW, r0, D, 1.0f, Er.data(), D, o0.lora.A->w.data() + D, 2 * D, 0.0f, xae.data(), r0);
    sgemm(false, true, TW, D4, r0, o0.lora.s, xas.data(), r0, o0.lora.B->w.data(), r0, 1.0f, PS.data(), D4);
    sgemm(false, true, TW, D4, r0, o0.lora.s, xae.data(), r0, o0.lora.B->w.data(), r0, 1.0f, PE.data(), D4);
  }
  // out_project.3 effective weight W2 (D, 4D) (+ s·B·A with LoRA)
  const TLinear& o3 = m.out3;
  std::vector<float> W2(o3.W->w);
  if (o3.lora.r > 0)
    sgemm(false, false, D, D4, o3.lora.r, o3.lora.s, o3.lora.B->w.data(), o3.lora.r, o3.lora.A->w.data(), D4, 1.0f,
          W2.data(), D4);
  std::vector<float>&dPS = sc.dPS, &dPE = sc.dPE;
  dPS.assign(bw ? PS.size() : 0, 0.0f);
  dPE.assign(bw ? PE.size() : 0, 0.0f);
  std::vector<float> dW2(bw ? W2.size() : 0, 0.0f);

  // positives per segment
  std::vector<std::vector<int32_t>> pos_of(segs.size());
  for (size_t p = 0; p + 5 <= in.pos.size(); p += 5) {
    int32_t s = in.pos[p];
    if (s < 0 || s >= int32_t(segs.size())) throw std::out_of_range("encoder train: positive names a bad segment");
    pos_of[size_t(s)].insert(pos_of[size_t(s)].end(), in.pos.begin() + p + 1, in.pos.begin() + p + 5);
  }
  Rng neg_rng(in.seed ^ 0xA5A5A5A5ull);
  CountDw* pdw = bw ? &sc.cdw : nullptr;
  if (bf) {  // the count head's weights rounded once per step, not by each call's packing (a few rows per call)
    TLinear* ls[4] = {&m.gru_hh, &m.gru_ih, &m.projector.a, &m.projector.b};
    for (int i = 0; i < (m.cfg.counting == Counting::Lstm ? 4 : 2); i++) {
      sc.wbf[i].resize(ls[i]->W->w.size());
      convert_f32_to_bf16(ls[i]->W->numel(), ls[i]->W->w.data(), sc.wbf[i].data());
      ls[i]->wbf = sc.wbf[i].data();
    }
  }
  if (pdw) pdw->clear();

  for (int64_t b = 0; b < B; b++) {
    const int64_t W = in.woff[b + 1] - in.woff[b];
    // Segments of this sample with a positive gold count get Fc rows.
    std::vector<size_t> sids;
    std::vector<int64_t> srow;
    std::vector<CountActs> cacts;
    int64_t R = 0;
    for (size_t s = 0; s < segs.size(); s++) {
      const Seg& g = segs[s];
      if (g.sample != b || g.kind != 0 || g.M == 0) continue;
      int64_t cs = std::min<int64_t>(g.count, 19);
      if (cs <= 0) continue;
      sids.push_back(s);
      srow.push_back(R);
      R += cs * g.M;
    }
    if (R == 0 || W == 0) continue;
    std::vector<float> Fc(size_t(R * D));
    cacts.resize(sids.size());
    std::vector<std::vector<float>> Fm(sids.size());
    for (size_t q = 0; q < sids.size(); q++) {
      const Seg& g = segs[sids[q]];
      Fm[q].resize(size_t(g.M * D));
      for (int64_t mm = 0; mm < g.M; mm++)
        std::memcpy(Fm[q].data() + mm * D, hidden.data() + g.rows[size_t(1 + mm)] * D, size_t(D) * 4);
      count_embed_fwd(m, g.M, Fm[q].data(), std::min<int64_t>(g.count, 19), Fc.data() + srow[q] * D, cacts[q], rp);
    }
    // G = Fc·W2 (R, 4D), bb = Fc·b2 (R)
    std::vector<float> G(size_t(R * D4)), bb(static_cast<size_t>(R));
    sgemm_as(bf, false, false, R, D4, D, 1.0f, Fc.data(), D, W2.data(), D4, 0.0f, G.data(), D4);
    for (int64_t r = 0; r < R; r++) {
      float a = 0;
      for (int64_t u = 0; u < D; u++) a += Fc[size_t(r * D + u)] * o3.b->w[size_t(u)];
      bb[size_t(r)] = a;
    }
    // hid (W·K, 4D) = ReLU(PS[i] + PE[i+k]) for valid spans (invalid rows zero)
    const float* ps = PS.data() + in.woff[b] * D4;
    const float* pe = PE.data() + in.woff[b] * D4;
    std::vector<float>& hid = sc.hid;
    hid.assign(size_t(W * K * D4), 0.0f);
    for (int64_t i = 0; i < W; i++)
      for (int64_t k = 0; k < K && i + k < W; k++) {
        float* h = hid.data() + (i * K + k) * D4;
        const float* a = ps + i * D4;
        const float* e = pe + (i + k) * D4;
        for (int64_t u = 0; u < D4; u++) {
          float v = a[u] + e[u];
          h[u] = v > 0 ? v : 0;
        }
      }
    std::vector<float> logits(size_t(W * K * R));
    sgemm_as(bf, false, true, W * K, R, D4, 1.0f, hid.data(), D4, G.data(), D4, 0.0f, logits.data(), R);
    // targets; with neg_hard, the hard negatives, never dropped: hard: (W*K,) the spans that are a mention under some
    // label (1), or start or end where one does (2)
    std::vector<uint8_t> y(size_t(W * K * R), 0);
    const bool want_hard = in.drop_neg && in.neg_hard > 0;
    std::vector<uint8_t> hard(want_hard ? size_t(W * K) : 0, 0);
    std::vector<uint8_t> starts(want_hard ? size_t(W) : 0, 0), ends(want_hard ? size_t(W) : 0, 0);
    for (size_t q = 0; q < sids.size(); q++) {
      const Seg& g = segs[sids[q]];
      const int64_t cs = std::min<int64_t>(g.count, 19);
      const auto& P = pos_of[sids[q]];
      for (size_t p = 0; p < P.size(); p += 4) {
        int64_t t = P[p], mm = P[p + 1], i = P[p + 2], k = P[p + 3];
        if (t < 0 || t >= cs || mm < 0 || mm >= g.M || i < 0 || k < 0 || k >= K || i + k >= W) continue;
        y[size_t((i * K + k) * R + srow[q] + t * g.M + mm)] = 1;
        if (want_hard) hard[size_t(i * K + k)] = starts[size_t(i)] = ends[size_t(i + k)] = 1;
      }
    }
    if (want_hard && in.neg_hard == 2)
      for (int64_t i = 0; i < W; i++)
        for (int64_t k = 0; k < K && i + k < W; k++)
          if (starts[size_t(i)] || ends[size_t(i + k)]) hard[size_t(i * K + k)] = 1;
    std::vector<float>& dlog = sc.dlog;
    dlog.assign(bw ? logits.size() : 0, 0.0f);
    double ls = 0;
    for (int64_t i = 0; i < W; i++)
      for (int64_t k = 0; k < K && i + k < W; k++)
        for (int64_t r = 0; r < R; r++) {
          size_t at = size_t((i * K + k) * R + r);
          float yy = y[at];
          // the draw comes first, so a hard negative leaves the stream as it was
          if (!yy && in.drop_neg && neg_rng.uniform() >= in.neg_keep && (hard.empty() || !hard[size_t(i * K + k)]))
            continue;
          float dz;
          ls += bce_logits(logits[at] + bb[size_t(r)], yy, &dz);
          if (bw) dlog[at] = dz * gs;
        }
    out.span += ls;
    if (!bw) continue;
    // backward through the span scores
    std::vector<float> dG(size_t(R * D4)), dbb(size_t(R), 0.0f), dFc(size_t(R * D));
    std::vector<float>& dhid = sc.dhid;
    dhid.resize(size_t(W * K * D4));  // written in full
    sgemm_as(bf, true, false, R, D4, W * K, 1.0f, dlog.data(), R, hid.data(), D4, 0.0f, dG.data(), D4);
    for (int64_t j = 0; j < W * K; j++)
      for (int64_t r = 0; r < R; r++) dbb[size_t(r)] += dlog[size_t(j * R + r)];
    sgemm_as(bf, false, false, W * K, D4, R, 1.0f, dlog.data(), R, G.data(), D4, 0.0f, dhid.data(), D4);
    float* dps = dPS.data() + in.woff[b] * D4;
    float* dpe = dPE.data() + in.woff[b] * D4;
    for (int64_t i = 0; i < W; i++)
      for (int64_t k = 0; k < K && i + k < W; k++)
        span_hid_bwd(D4, hid.data() + (i * K + k) * D4, dhid.data() + (i * K + k) * D4, dps + i * D4,
                     dpe + (i + k) * D4);
    // G = Fc·W2, bb = Fc·b2
    sgemm_as(bf, false, true, R, D, D4, 1.0f, dG.data(), D4, W2.data(), D4, 0.0f, dFc.data(), D);
    for (int64_t r = 0; r < R; r++) axpy(D, dbb[size_t(r)], o3.b->w.data(), dFc.data() + r * D);
    sgemm_as(bf, true, false, D, D4, R, 1.0f, Fc.data(), D, dG.data(), D4, 1.0f, dW2.data(), D4);
    if (o3.b->trainable)
      for (int64_t r = 0; r < R; r++) axpy(D, dbb[size_t(r)], Fc.data() + r * D, o3.b->g.data());
    for (size_t q = 0; q < sids.size(); q++) {
      const Seg& g = segs[sids[q]];
      std::vector<float> dF(size_t(g.M * D), 0.0f);
      count_embed_bwd(m, cacts[q], dFc.data() + srow[q] * D, dF.data(), pdw);
      for (int64_t mm = 0; mm < g.M; mm++) axpy(D, 1.0f, dF.data() + mm * D, dhidden.data() + g.rows[size_t(1 + mm)] * D);
    }
  }
  if (pdw) {  // the count head's dW over the step's rows (the projector's only with count_lstm)
    if (m.cfg.counting == Counting::Lstm) {
      pdw->pa.flush(m.projector.a);
      pdw->pb.flush(m.projector.b);
    }
    pdw->hh.flush(m.gru_hh);
    pdw->ih.flush(m.gru_ih);
  }
  if (bw) {
    // W2 (effective) → W2 and its LoRA factors
    if (o3.W->trainable) axpy(int64_t(dW2.size()), 1.0f, dW2.data(), o3.W->g.data());
    if (o3.lora.r > 0) {
      const int64_t r = o3.lora.r;
      // W2eff = W2 + s·B·A: dB += s·dW2·Aᵀ (D, r), dA += s·Bᵀ·dW2 (r, 4D)
      sgemm(false, true, D, r, D4, o3.lora.s, dW2.data(), D4, o3.lora.A->w.data(), D4, 1.0f, o3.lora.B->g.data(), r);
      sgemm(true, false, r, D4, D, o3.lora.s, o3.lora.B->w.data(), r, dW2.data(), D4, 1.0f, o3.lora.A->g.data(), D4);
    }
    // out_project.0 split backward
    std::vector<float> dSr(size_t(TW * D)), dEr(size_t(TW * D));
    if (o0.W->trainable) {
      sgemm_as(bf, true, false, D4, D, TW, 1.0f, dPS.data(), D4, Sr.data(), D, 1.0f, o0.W->g.data(), 2 * D);
      sgemm_as(bf, true, false, D4, D, TW, 1.0f, dPE.data(), D4, Er.data(), D, 1.0f, o0.W->g.data() + D, 2 * D);
    }
    if (o0.b->trainable) bias_bwd(TW, D4, dPS.data(), o0.b->g.data());
    sgemm_as(bf, false, false, TW, D, D4, 1.0f, dPS.data(), D4, o0.W->w.data(), 2 * D, 0.0f, dSr.data(), D);
    sgemm_as(bf, false, false, TW, D, D4, 1.0f, dPE.data(), D4, o0.W->w.data() + D, 2 * D, 0.0f, dEr.data(), D);
    if (r0 > 0) {
      const float s = o0.lora.s;
      sgemm(true, false, D4, r0, TW, s, dPS.data(), D4, xas.data(), r0, 1.0f, o0.lora.B->g.data(), r0);
      sgemm(true, false, D4, r0, TW, s, dPE.data(), D4, xae.data(), r0, 1.0f, o0.lora.B->g.data(), r0);
      std::vector<float> dxs(size_t(TW * r0)), dxe(size_t(TW * r0));
      sgemm(false, false, TW, r0, D4, s, dPS.data(), D4, o0.lora.B->w.data(), r0, 0.0f, dxs.data(), r0);
      sgemm(false, false, TW, r0, D4, s, dPE.data(), D4, o0.lora.B->w.data(), r0, 0.0f, dxe.data(), r0);
      sgemm(true, false, r0, D, TW, 1.0f, dxs.data(), r0, Sr.data(), D, 1.0f, o0.lora.A->g.data(), 2 * D);
      sgemm(true, false, r0, D, TW, 1.0f, dxe.data(), r0, Er.data(), D, 1.0f, o0.lora.A->g.data() + D, 2 * D);
      sgemm(false, false, TW, D, r0, 1.0f, dxs.data(), r0, o0.lora.A->w.data(), 2 * D, 1.0f, dSr.data(), D);
      sgemm(false, false, TW, D, r0, 1.0f, dxe.data(), r0, o0.lora.A->w.data() + D, 2 * D, 1.0f, dEr.data(), D);
    }
    relu_bwd(TW * D, S.data(), dSr.data());
    relu_bwd(TW * D, E.data(), dEr.data());
    std::vector<float> dwords(size_t(TW * D));
    m.proj_start.bwd(TW, dSr.data(), dwords.data(), as, false);
    m.proj_end.bwd(TW, dEr.data(), dwords.data(), ae, true);
    word_pool_bwd(pool, TW, D, wrow.data(), wend.data(), argmax.data(), dwords.data(), dhidden.data());
  }

  // ---- count head and classifier ----
  size_t cls_off = 0;
  for (const Seg& g : segs) {
    if (g.kind == 0 && g.count_loss) {
      std::vector<float> x(hidden.begin() + g.rows[0] * D, hidden.begin() + (g.rows[0] + 1) * D), lg(20);
      Mlp2::Acts a;
      m.count_pred.fwd(1, x.data(), lg.data(), &a, rp);
      int32_t lab = int32_t(std::min<int64_t>(std::max<int64_t>(g.count, 0), 19));
      std::vector<float> dl(20);
      out.count += cross_entropy_fwd_bwd(1, 20, lg.data(), &lab, dl.data(), nullptr);
      if (bw) {
        scale_fwd(20, dl.data(), gs, dl.data());
        std::vector<float> dx(static_cast<size_t>(D));
        m.count_pred.bwd(1, dl.data(), dx.data(), a, false);
        axpy(D, 1.0f, dx.data(), dhidden.data() + g.rows[0] * D);
      }
    } else if (g.kind == 1) {
      if (cls_off + size_t(g.M) > in.cls_y.size()) throw std::invalid_argument("encoder train: classification targets too short");
      std::vector<float> x(size_t(g.M * D)), lg(size_t(g.M)), dl(size_t(g.M));
      for (int64_t mm = 0; mm < g.M; mm++)
        std::memcpy(x.data() + mm * D, hidden.data() + g.rows[size_t(1 + mm)] * D, size_t(D) * 4);
      Mlp2::Acts a;
      m.classifier.fwd(g.M, x.data(), lg.data(), &a, rp);
      out.cls_logits.insert(out.cls_logits.end(), lg.begin(), lg.end());
      const float* y = in.cls_y.data() + cls_off;
      float ysum = 0;
      for (int64_t mm = 0; mm < g.M; mm++) ysum += y[mm];
      if (g.softmax && ysum > 0) {
        out.cls += softmax_ce_logits(g.M, lg.data(), y, dl.data());
        for (int64_t mm = 0; mm < g.M; mm++) dl[size_t(mm)] *= gs;
      } else {
        for (int64_t mm = 0; mm < g.M; mm++) {
          float dz;
          out.cls += bce_logits(lg[size_t(mm)], y[mm], &dz);
          dl[size_t(mm)] = dz * gs;
        }
      }
      cls_off += size_t(g.M);
      if (bw) {
        std::vector<float> dx(size_t(g.M * D));
        m.classifier.bwd(g.M, dl.data(), dx.data(), a, false);
        for (int64_t mm = 0; mm < g.M; mm++) axpy(D, 1.0f, dx.data() + mm * D, dhidden.data() + g.rows[size_t(1 + mm)] * D);
      }
    }
  }
  out.loss = out.span + out.count + out.cls;
  if (bw) encoder_bwd(m, in, EA, dhidden);
}

}  // namespace loom::train::encoder
