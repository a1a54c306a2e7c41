// Llama LoRA training graph: forward keeping activations, losses over its logits, backward (see llama_train.h).
#include "llama_train.h"
#include <algorithm>
#include <cstring>
#include <stdexcept>

namespace loom::train::llama {

const char* const kModuleNames[kNumModules] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                               "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                               "mlp.down_proj"};

std::unique_ptr<Model> model_create(const Config& c, const std::vector<TensorSrc>& tensors,
                                    const std::vector<LoraSrc>& loras) {
  if (c.hidden <= 0 || c.layers <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 || c.head_dim <= 0 || c.vocab <= 0 ||
      c.inter <= 0 || c.n_heads % c.n_kv_heads != 0)
    throw std::invalid_argument("llama train: bad configuration");
  auto m = std::make_unique<Model>();
  m->cfg = c;
  const int64_t D = c.hidden, Nq = c.n_heads * c.head_dim, Nkv = c.n_kv_heads * c.head_dim;
  std::unordered_map<std::string, const TensorSrc*> by;
  for (auto& t : tensors) by[t.name] = &t;
  auto get = [&](const std::string& n, int64_t numel, bool required = true) -> const TensorSrc* {
    auto it = by.find(n);
    if (it == by.end()) {
      if (required) throw std::invalid_argument("llama train: missing tensor " + n);
      return nullptr;
    }
    if (it->second->numel != numel)
      throw std::invalid_argument("llama train: tensor " + n + " has " + std::to_string(it->second->numel) +
                                  " elements, expected " + std::to_string(numel));
    return it->second;
  };
  auto f32 = [&](const std::string& n, int64_t numel) -> Param* {
    const TensorSrc* t = get(n, numel);
    if (t->dtype != DType::F32) throw std::invalid_argument("llama train: " + n + " must be f32");
    return m->ps.add(n, {numel}, static_cast<const float*>(t->data), 0, false);
  };
  auto linear = [&](TLinear& l, const std::string& n, int64_t N, int64_t K, bool bias) {
    l.N = N;
    l.K = K;
    const TensorSrc* t = get(n + ".weight", N * K);
    if (t->dtype == DType::BF16) {
      m->bf16.emplace_back(static_cast<const uint16_t*>(t->data), static_cast<const uint16_t*>(t->data) + N * K);
      l.wbf = m->bf16.back().data();
    } else {
      l.W = m->ps.add(n + ".weight", {N, K}, static_cast<const float*>(t->data), 0, false);
    }
    if (bias) l.b = f32(n + ".bias", N);
  };
  m->bf16.reserve(size_t(c.layers * kNumModules + 2));  // stable pointers
  // Embedding (and tied head).
  const TensorSrc* emb = get("model.embed_tokens.weight", c.vocab * D, false);
  if (!emb) emb = get("lm_head.weight", c.vocab * D);
  m->embed_type = emb->dtype;
  if (emb->dtype == DType::BF16) {
    m->bf16.emplace_back(static_cast<const uint16_t*>(emb->data), static_cast<const uint16_t*>(emb->data) + c.vocab * D);
    m->embed = m->bf16.back().data();
  } else {
    m->embed = m->ps.add("model.embed_tokens.weight", {c.vocab, D}, static_cast<const float*>(emb->data), 0, false)->w.data();
  }
  m->lm_head.N = c.vocab;
  m->lm_head.K = D;
  if (by.count("lm_head.weight") && by.at("lm_head.weight") != emb) {
    linear(m->lm_head, "lm_head", c.vocab, D, false);
  } else if (emb->dtype == DType::BF16) {
    m->lm_head.wbf = static_cast<const uint16_t*>(m->embed);
  } else {
    m->lm_head.W = m->ps.find("model.embed_tokens.weight");
  }
  m->norm = f32("model.norm.weight", D);
  m->layers.resize(size_t(c.layers));
  const int64_t outs[kNumModules] = {Nq, Nkv, Nkv, D, c.inter, c.inter, D};
  const int64_t ins[kNumModules] = {D, D, D, Nq, D, D, c.inter};
  for (int64_t i = 0; i < c.layers; i++) {
    std::string p = "model.layers." + std::to_string(i) + ".";
    LayerW& L = m->layers[size_t(i)];
    L.attn_norm = f32(p + "input_layernorm.weight", D);
    L.mlp_norm = f32(p + "post_attention_layernorm.weight", D);
    for (int mo = 0; mo < kNumModules; mo++)
      linear(L.lin[mo], p + kModuleNames[mo], outs[mo], ins[mo], c.qkv_bias && mo <= kV);
  }
  for (const LoraSrc& s : loras) {
    if (s.layer < 0 || s.layer >= c.layers || s.module < 0 || s.module >= kNumModules || s.r <= 0)
      throw std::invalid_argument("llama train: bad LoRA target");
    TLinear& l = m->layers[size_t(s.layer)].lin[s.module];
    if ((s.a_len >= 0 && s.a_len != s.r * l.K) || (s.b_len >= 0 && s.b_len != l.N * s.r))
      throw std::invalid_argument("llama train: LoRA layer " + std::to_string(s.layer) + " " + kModuleNames[s.module] +
                                  ": A must be (r, " + std::to_string(l.K) + ") and B (" + std::to_string(l.N) + ", r)");
    std::string p = "base_model.model.model.layers." + std::to_string(s.layer) + "." + kModuleNames[s.module];
    l.lora.A = m->ps.add(p + ".lora_A.weight", {s.r, l.K}, s.A, 0, true);
    l.lora.B = m->ps.add(p + ".lora_B.weight", {l.N, s.r}, s.B, 0, true);
    l.lora.r = s.r;
    l.lora.s = s.scale;
    l.lora.dropout = s.dropout;
  }
  m->inv_freq.resize(size_t(c.head_dim / 2));
  rope_inv_freq(c.head_dim, c.rope_theta, c.rope, m->inv_freq.data());
  return m;
}

Model::~Model() = default;

Acts& spare_acts(Model& m) {
  if (!m.spare) m.spare = std::make_unique<Acts>();
  return *m.spare;
}

namespace {
AttnParams attn_params(const std::vector<int64_t>& off, size_t s, const Config& c) {
  AttnParams p;
  p.B = 1;
  p.Tq = p.Tk = off[s + 1] - off[s];
  p.Hq = c.n_heads;
  p.Hkv = c.n_kv_heads;
  p.Dh = c.head_dim;
  p.causal = true;
  return p;
}
// Rows [0, Tp) of kb/vb (Tp + Ts, Nkv) = the parent segment's k/v rows, rows [Tp, Tp + Ts) = segment s's.
void kv_gather(const std::vector<int64_t>& off, int64_t p, int64_t s, int64_t Nkv, const float* k, const float* v,
               float* kb, float* vb) {
  const int64_t pr0 = off[size_t(p)], Tp = off[size_t(p) + 1] - pr0, r0 = off[size_t(s)], Ts = off[size_t(s) + 1] - r0;
  std::memcpy(kb, k + pr0 * Nkv, size_t(Tp * Nkv) * sizeof(float));
  std::memcpy(vb, v + pr0 * Nkv, size_t(Tp * Nkv) * sizeof(float));
  std::memcpy(kb + Tp * Nkv, k + r0 * Nkv, size_t(Ts * Nkv) * sizeof(float));
  std::memcpy(vb + Tp * Nkv, v + r0 * Nkv, size_t(Ts * Nkv) * sizeof(float));
}
// Segment s continuing segment p: its Ts queries see the parent's Tp keys, then their own causally.
AttnParams attn_params_child(const std::vector<int64_t>& off, int64_t p, size_t s, const Config& c) {
  AttnParams a = attn_params(off, s, c);
  const int64_t Tp = off[size_t(p) + 1] - off[size_t(p)];
  a.Tk = a.Tq + Tp;
  a.q_offset = Tp;
  return a;
}
int64_t parent_of(const std::vector<int64_t>& parent, size_t s) { return parent.empty() ? -1 : parent[s]; }

// Attention of every sequence of the batch in one parallel region, one task per (sequence, kv head) (the rep =
// Hq / Hkv query heads reading that kv head), handed out largest first: one region per layer and pass instead of
// one per sequence, and even shares (a sequence alone has Hkv = 3 tasks for 2 threads, its backward ran 2:1).
// A child sequence reads its parent's k/v rows and then its own, gathered into kv (2 x Tk x Nkv per child);
// its backward writes dk/dv for those rows there, and they are added to the parent's rows afterwards, parents
// first and children in order (the sums and their order are those of one call per sequence).
struct SeqAttn {
  std::vector<AttnParams> p;     // per sequence (Tq = 0: empty)
  std::vector<int64_t> kv_off;   // per sequence: offset of its gathered k rows in kv (-1: reads k/v in place)
  std::vector<int64_t> tasks;    // s * Hkv + kvh, largest first
};

SeqAttn seq_attn_plan(const std::vector<int64_t>& off, const std::vector<int64_t>& parent, const Config& c) {
  const size_t S = off.size() - 1;
  const int64_t Nkv = c.n_kv_heads * c.head_dim;
  SeqAttn a;
  a.p.resize(S);
  a.kv_off.assign(S, -1);
  int64_t kv = 0;
  std::vector<int64_t> cost;
  for (size_t s = 0; s < S; s++) {
    const int64_t p = parent_of(parent, s);
    a.p[s] = p < 0 ? attn_params(off, s, c) : attn_params_child(off, p, s, c);
    if (a.p[s].Tq == 0) continue;
    if (p >= 0) {
      a.kv_off[s] = kv;
      kv += 2 * a.p[s].Tk * Nkv;
    }
    for (int64_t h = 0; h < c.n_kv_heads; h++) a.tasks.push_back(int64_t(s) * c.n_kv_heads + h);
  }
  // causal work of a task ~ Tq x (keys seen on average)
  auto work = [&](int64_t t) {
    const AttnParams& p = a.p[size_t(t / c.n_kv_heads)];
    return p.Tq * (p.q_offset + (p.Tq + 1) / 2);
  };
  std::stable_sort(a.tasks.begin(), a.tasks.end(), [&](int64_t x, int64_t y) { return work(x) > work(y); });
  return a;
}

// The part of sequence s's problem that kv head h answers: its rep query heads, in place in the (R, N) rows.
AttnParams seq_attn_head(const AttnParams& p, const Config& c) {
  AttnParams h = p;
  h.Hq = c.n_heads / c.n_kv_heads;
  h.Hkv = 1;
  h.ldq = h.ldo = c.n_heads * c.head_dim;
  h.ldk = h.ldv = c.n_kv_heads * c.head_dim;
  return h;
}

// kv: every child sequence's gathered k and v rows (its parent's prefix, then its own), at a.kv_off[s]; returns
// kv's length
size_t kv_gather_seqs(const SeqAttn& a, const std::vector<int64_t>& off, const std::vector<int64_t>& parent,
                      int64_t Nkv, const float* k, const float* v, std::vector<float>& kv) {
  int64_t kv_n = 0;
  for (size_t s = 0; s < a.p.size(); s++)
    if (a.kv_off[s] >= 0) kv_n = a.kv_off[s] + 2 * a.p[s].Tk * Nkv;
  kv.resize(size_t(kv_n));
  for (size_t s = 0; s < a.p.size(); s++)
    if (a.kv_off[s] >= 0) {
      float* kb = kv.data() + a.kv_off[s];
      kv_gather(off, parent[s], int64_t(s), Nkv, k, v, kb, kb + a.p[s].Tk * Nkv);
    }
  return size_t(kv_n);
}

// out (R, Nq), lse (R·Hq: per sequence [head][row]) for every sequence of the batch
void attention_fwd_seqs(const Config& c, const std::vector<int64_t>& off, const std::vector<int64_t>& parent,
                        const float* q, const float* k, const float* v, float* out, float* lse, std::vector<float>& kv) {
  const SeqAttn a = seq_attn_plan(off, parent, c);
  const int64_t Hkv = c.n_kv_heads, Dh = c.head_dim, rep = c.n_heads / Hkv, Nq = c.n_heads * Dh, Nkv = Hkv * Dh;
  kv_gather_seqs(a, off, parent, Nkv, k, v, kv);
  parallel_tasks(int64_t(a.tasks.size()), [&](int64_t i) {
    const int64_t t = a.tasks[size_t(i)], h = t % Hkv;
    const size_t s = size_t(t / Hkv);
    const AttnParams& p = a.p[s];
    const int64_t r0 = off[s];
    const float* kb = a.kv_off[s] >= 0 ? kv.data() + a.kv_off[s] : k + r0 * Nkv;
    const float* vb = a.kv_off[s] >= 0 ? kb + p.Tk * Nkv : v + r0 * Nkv;
    attention_fwd(seq_attn_head(p, c), q + r0 * Nq + h * rep * Dh, kb + h * Dh, vb + h * Dh,
                  out + r0 * Nq + h * rep * Dh, lse + r0 * c.n_heads + h * rep * p.Tq);
  });
}

// dq (R, Nq), dk and dv (R, Nkv) written for every sequence of the batch; dkv: the children's gathered rows' dk/dv
void attention_bwd_seqs(const Config& c, const std::vector<int64_t>& off, const std::vector<int64_t>& parent,
                        const float* q, const float* k, const float* v, const float* out, const float* lse,
                        const float* dout, float* dq, float* dk, float* dv, std::vector<float>& kv,
                        std::vector<float>& dkv) {
  const SeqAttn a = seq_attn_plan(off, parent, c);
  const int64_t Hkv = c.n_kv_heads, Dh = c.head_dim, rep = c.n_heads / Hkv, Nq = c.n_heads * Dh, Nkv = Hkv * Dh;
  dkv.resize(kv_gather_seqs(a, off, parent, Nkv, k, v, kv));
  parallel_tasks(int64_t(a.tasks.size()), [&](int64_t i) {
    const int64_t t = a.tasks[size_t(i)], h = t % Hkv;
    const size_t s = size_t(t / Hkv);
    const AttnParams& p = a.p[s];
    const int64_t r0 = off[s], qo = r0 * Nq + h * rep * Dh;
    const bool child = a.kv_off[s] >= 0;
    const float* kb = child ? kv.data() + a.kv_off[s] : k + r0 * Nkv;
    const float* vb = child ? kb + p.Tk * Nkv : v + r0 * Nkv;
    float* dkb = child ? dkv.data() + a.kv_off[s] : dk + r0 * Nkv;
    float* dvb = child ? dkb + p.Tk * Nkv : dv + r0 * Nkv;
    attention_bwd(seq_attn_head(p, c), q + qo, kb + h * Dh, vb + h * Dh, out + qo, lse + r0 * c.n_heads + h * rep * p.Tq,
                  dout + qo, dq + qo, dkb + h * Dh, dvb + h * Dh, nullptr);
  });
  for (size_t s = 0; s < a.p.size(); s++) {
    if (a.kv_off[s] < 0) continue;
    const int64_t pr0 = off[size_t(parent[s])], Tp = a.p[s].q_offset, Ts = a.p[s].Tq, r0 = off[s];
    const float* dkb = dkv.data() + a.kv_off[s];
    const float* dvb = dkb + a.p[s].Tk * Nkv;
    axpy(Tp * Nkv, 1.0f, dkb, dk + pr0 * Nkv);
    axpy(Tp * Nkv, 1.0f, dvb, dv + pr0 * Nkv);
    std::memcpy(dk + r0 * Nkv, dkb + Tp * Nkv, size_t(Ts * Nkv) * sizeof(float));
    std::memcpy(dv + r0 * Nkv, dvb + Tp * Nkv, size_t(Ts * Nkv) * sizeof(float));
  }
}

// Row-wise steps that run back to back share one parallel region (the ops called inside run inline on the
// calling thread, row by row as they would across the pool, so the results are the same to the bit).
constexpr int64_t kRowGrain = 16;

// x += o (o may be null), kept = x (when kept), xn = rmsnorm(x)·w, rstd per row
void residual_norm_fwd(int64_t R, int64_t D, float* x, const float* o, float* kept, const float* w, float eps,
                       float* xn, float* rstd) {
  parallel_for(R, kRowGrain, [&](int64_t r0, int64_t r1) {
    const int64_t n = (r1 - r0) * D;
    if (o) add_fwd(n, x + r0 * D, o + r0 * D, x + r0 * D);
    if (kept) std::memcpy(kept + r0 * D, x + r0 * D, size_t(n) * sizeof(float));
    rmsnorm_fwd(r1 - r0, D, x + r0 * D, w, eps, xn + r0 * D, rstd + r0);
  });
}

// dx += d(rmsnorm(x)·w)/dx given dxn (the norm's weight is frozen); tmp: (R, D) scratch
void norm_bwd_acc(int64_t R, int64_t D, const float* x, const float* w, const float* rstd, const float* dxn,
                  float* tmp, float* dx) {
  parallel_for(R, kRowGrain, [&](int64_t r0, int64_t r1) {
    rmsnorm_bwd(r1 - r0, D, x + r0 * D, w, rstd + r0, dxn + r0 * D, tmp + r0 * D, nullptr);
    axpy((r1 - r0) * D, 1.0f, tmp + r0 * D, dx + r0 * D);
  });
}

// RoPE on q (R, Hq·Dh) and k (R, Hkv·Dh), forward or backward (the inverse rotation)
void rope_qk(bool bwd, int64_t R, const Config& c, const int32_t* pos, const float* inv_freq, float* q, float* k) {
  const int64_t Dh = c.head_dim, Nq = c.n_heads * Dh, Nkv = c.n_kv_heads * Dh;
  parallel_for(R, kRowGrain, [&](int64_t r0, int64_t r1) {
    auto f = bwd ? rope_bwd : rope_fwd;
    f(r1 - r0, c.n_heads, Dh, Nq, pos + r0, inv_freq, q + r0 * Nq);
    f(r1 - r0, c.n_kv_heads, Dh, Nkv, pos + r0, inv_freq, k + r0 * Nkv);
  });
}

// y (M, N) = x·Wᵀ (+ LoRA unless base_only)
void lin_fwd(const TLinear& l, bool base_only, int64_t M, const float* x, float* y, LinActs* acts, Rng* rng) {
  if (!base_only || !l.has_lora()) return l.fwd(M, x, y, acts, rng);
  TLinear b = l;
  b.lora = Lora();
  b.fwd(M, x, y, nullptr, nullptr);
}
}  // namespace

void forward(Model& m, const FwdIn& in, Acts& a) {
  const Config& c = m.cfg;
  const int64_t R = in.R, D = c.hidden, F = c.inter, V = c.vocab, Hq = c.n_heads, Hkv = c.n_kv_heads,
                Dh = c.head_dim, Nq = Hq * Dh, Nkv = Hkv * Dh;
  if (R <= 0) throw std::invalid_argument("llama train: empty batch");
  if (in.seq_off.size() < 2 || in.seq_off.front() != 0 || in.seq_off.back() != R)
    throw std::invalid_argument("llama train: sequence offsets must go from 0 to R");
  for (size_t s = 0; s + 1 < in.seq_off.size(); s++)
    if (in.seq_off[s + 1] < in.seq_off[s]) throw std::invalid_argument("llama train: sequence offsets must not decrease");
  const size_t S = in.seq_off.size() - 1;
  if (!in.seq_parent.empty()) {
    if (in.seq_parent.size() != S) throw std::invalid_argument("llama train: one parent per sequence");
    for (size_t s = 0; s < S; s++) {
      const int64_t p = in.seq_parent[s];
      if (p != -1 && (p < 0 || p >= int64_t(s) || in.seq_parent[size_t(p)] != -1))
        throw std::invalid_argument("llama train: a sequence's parent must be an earlier sequence without a parent");
    }
  }
  for (int64_t t = 0; t < R; t++) {
    if (in.tokens[t] < 0 || in.tokens[t] >= V) throw std::out_of_range("llama train: token id out of range");
    if (in.labels[t] >= V) throw std::out_of_range("llama train: label id out of range");
  }
  // a's buffers are reused: every one below is written in full before it is read
  a.R = R;
  a.kept = false;
  a.logit_scale = 1.0f;
  a.positions.assign(in.positions, in.positions + R);
  a.labels.assign(in.labels, in.labels + R);
  a.seq_off = in.seq_off;
  a.seq_parent = in.seq_parent;
  Rng rng(in.seed);
  Rng* rp = in.dropout ? &rng : nullptr;
  const bool base_only = !in.lora;
  a.layers.resize(in.keep ? size_t(c.layers) : std::max<size_t>(a.layers.size(), 1));
  std::vector<float>& x = a.x;  // the residual stream (R, D)
  x.resize(size_t(R * D));
  embedding_fwd(R, D, in.tokens, m.embed_type, m.embed, x.data());
  std::vector<float>&o = m.work.o, &kb = m.work.kb;
  o.resize(size_t(R * D));
  for (int64_t l = 0; l < c.layers; l++) {
    LayerW& L = m.layers[size_t(l)];
    LayerActs& la = a.layers[in.keep ? size_t(l) : 0];
    LinActs* lacts = in.keep ? la.la : nullptr;
    auto lin = [&](int mo, const float* xi, float* y) { lin_fwd(L.lin[mo], base_only, R, xi, y, lacts ? &lacts[mo] : nullptr, rp); };
    // x += the previous layer's MLP output, then the attention norm
    if (in.keep) la.x_in.resize(size_t(R * D));
    la.rstd1.resize(static_cast<size_t>(R));
    la.xn1.resize(size_t(R * D));
    residual_norm_fwd(R, D, x.data(), l > 0 ? o.data() : nullptr, in.keep ? la.x_in.data() : nullptr,
                      L.attn_norm->w.data(), c.eps, la.xn1.data(), la.rstd1.data());
    la.q.resize(size_t(R * Nq));
    la.k.resize(size_t(R * Nkv));
    la.v.resize(size_t(R * Nkv));
    lin(kQ, la.xn1.data(), la.q.data());
    lin(kK, la.xn1.data(), la.k.data());
    lin(kV, la.xn1.data(), la.v.data());
    rope_qk(false, R, c, in.positions, m.inv_freq.data(), la.q.data(), la.k.data());
    la.attn.resize(size_t(R * Nq));
    la.lse.resize(size_t(R * Hq));
    attention_fwd_seqs(c, in.seq_off, in.seq_parent, la.q.data(), la.k.data(), la.v.data(), la.attn.data(),
                       la.lse.data(), kb);
    // x1 = x + attn·Woᵀ
    lin(kO, la.attn.data(), o.data());
    if (in.keep) la.x1.resize(size_t(R * D));
    la.rstd2.resize(static_cast<size_t>(R));
    la.xn2.resize(size_t(R * D));
    residual_norm_fwd(R, D, x.data(), o.data(), in.keep ? la.x1.data() : nullptr, L.mlp_norm->w.data(), c.eps,
                      la.xn2.data(), la.rstd2.data());
    la.g.resize(size_t(R * F));
    la.u.resize(size_t(R * F));
    la.act.resize(size_t(R * F));
    lin(kGate, la.xn2.data(), la.g.data());
    lin(kUp, la.xn2.data(), la.u.data());
    swiglu_fwd(R * F, la.g.data(), la.u.data(), la.act.data());
    lin(kDown, la.act.data(), o.data());  // added to x by the next norm
  }
  a.rstdf.resize(static_cast<size_t>(R));
  a.xnf.resize(size_t(R * D));
  residual_norm_fwd(R, D, x.data(), o.data(), nullptr, m.norm->w.data(), c.eps, a.xnf.data(), a.rstdf.data());
  // lm_head over the rows a loss reads (label >= 0; every row with all_logits): a prompt row's logits
  // (V = 49,152 columns for SmolLM2) would cost as much as a layer and be thrown away.
  a.head_rows.clear();
  a.head_labels.clear();
  for (int64_t t = 0; t < R; t++)
    if (in.all_logits || in.labels[t] >= 0) {
      a.head_rows.push_back(t);
      a.head_labels.push_back(in.labels[t]);
    }
  const int64_t H = int64_t(a.head_rows.size());
  a.logits.resize(size_t(H * V));
  if (H == R) {
    m.lm_head.fwd(R, a.xnf.data(), a.logits.data(), nullptr, nullptr);
  } else {
    std::vector<float>& xh = m.work.xh;  // (H, D) the head rows of xnf
    xh.resize(size_t(H * D));
    for (int64_t h = 0; h < H; h++)
      std::memcpy(xh.data() + h * D, a.xnf.data() + a.head_rows[size_t(h)] * D, size_t(D) * sizeof(float));
    m.lm_head.fwd(H, xh.data(), a.logits.data(), nullptr, nullptr);
  }
  a.kept = in.keep;
}

void head_logprob_fwd(const Acts& a, int64_t V, float* logp) {
  const int64_t H = int64_t(a.head_rows.size());
  std::vector<float> lh(static_cast<size_t>(H));
  logprob_fwd(H, V, a.logits.data(), a.head_labels.data(), lh.data());
  std::fill(logp, logp + a.R, 0.0f);
  for (int64_t h = 0; h < H; h++) logp[a.head_rows[size_t(h)]] = lh[size_t(h)];
}

void head_logprob_bwd(const Acts& a, int64_t V, const float* dlogp, float* dlogits) {
  const int64_t H = int64_t(a.head_rows.size());
  std::vector<float> dh(static_cast<size_t>(H));
  for (int64_t h = 0; h < H; h++) dh[size_t(h)] = dlogp[a.head_rows[size_t(h)]];
  logprob_bwd(H, V, a.logits.data(), a.head_labels.data(), dh.data(), dlogits);
}

void backward(Model& m, Acts& a, const float* dlogits) {
  const Config& c = m.cfg;
  const int64_t R = a.R, D = c.hidden, F = c.inter, Hq = c.n_heads, Hkv = c.n_kv_heads, Dh = c.head_dim,
                Nq = Hq * Dh, Nkv = Hkv * Dh;
  if (!a.kept || a.layers.size() != size_t(c.layers))
    throw std::logic_error("llama train: backward needs a forward that kept its activations");
  Work& w = m.work;
  auto sized = [](std::vector<float>& v, int64_t n) -> std::vector<float>& {
    v.resize(size_t(n));  // reused between calls: contents are stale until written
    return v;
  };
  std::vector<float>&dxn = sized(w.dxn, R * D), &dx = sized(w.dx, R * D);
  const int64_t H = int64_t(a.head_rows.size());
  if (H == R) {
    m.lm_head.bwd(R, a.xnf.data(), dlogits, dxn.data(), nullptr, false);
  } else {  // rows without logits get no gradient from the head (dxn is 0 there)
    std::fill(dxn.begin(), dxn.end(), 0.0f);
    std::vector<float>& dxh = sized(w.dxh, H * D);
    m.lm_head.bwd(H, nullptr, dlogits, dxh.data(), nullptr, false);  // (no dW, no LoRA on the head: x unused)
    for (int64_t h = 0; h < H; h++)
      std::memcpy(dxn.data() + a.head_rows[size_t(h)] * D, dxh.data() + h * D, size_t(D) * sizeof(float));
  }
  // the norms' weights are frozen: dx only (no dw, whose row reduction is serial)
  rmsnorm_bwd(R, D, a.x.data(), m.norm->w.data(), a.rstdf.data(), dxn.data(), dx.data(), nullptr);
  std::vector<float>&dact = sized(w.dact, R * F), &dg = sized(w.dg, R * F), &du = sized(w.du, R * F),
                     &dattn = sized(w.dattn, R * Nq), &dq = sized(w.dq, R * Nq), &dk = sized(w.dk, R * Nkv),
                     &dv = sized(w.dv, R * Nkv), &dtmp = sized(w.dtmp, R * D), &kb = w.kb, &dkb = w.dkb;
  const int32_t* positions = a.positions.data();
  for (int64_t l = c.layers - 1; l >= 0; l--) {
    LayerW& L = m.layers[size_t(l)];
    LayerActs& la = a.layers[size_t(l)];
    // MLP: dx holds d(x'); x' = x1 + down(swiglu(gate(xn2), up(xn2)))
    L.lin[kDown].bwd(R, la.act.data(), dx.data(), dact.data(), &la.la[kDown], false);
    swiglu_bwd(R * F, la.g.data(), la.u.data(), dact.data(), dg.data(), du.data());
    L.lin[kGate].bwd(R, la.xn2.data(), dg.data(), dxn.data(), &la.la[kGate], false);
    L.lin[kUp].bwd(R, la.xn2.data(), du.data(), dxn.data(), &la.la[kUp], true);
    norm_bwd_acc(R, D, la.x1.data(), L.mlp_norm->w.data(), la.rstd2.data(), dxn.data(), dtmp.data(), dx.data());
    // dx = d(x1)
    // attention block: x1 = x_in + o(attn)
    L.lin[kO].bwd(R, la.attn.data(), dx.data(), dattn.data(), &la.la[kO], false);
    attention_bwd_seqs(c, a.seq_off, a.seq_parent, la.q.data(), la.k.data(), la.v.data(), la.attn.data(),
                       la.lse.data(), dattn.data(), dq.data(), dk.data(), dv.data(), kb, dkb);
    rope_qk(true, R, c, positions, m.inv_freq.data(), dq.data(), dk.data());
    // layer 0's input is the frozen embedding's output: its gradient is never used (LoRA grads only)
    float* dxq = l > 0 ? dxn.data() : nullptr;
    L.lin[kQ].bwd(R, la.xn1.data(), dq.data(), dxq, &la.la[kQ], false);
    L.lin[kK].bwd(R, la.xn1.data(), dk.data(), dxq, &la.la[kK], true);
    L.lin[kV].bwd(R, la.xn1.data(), dv.data(), dxq, &la.la[kV], true);
    if (l == 0) break;
    norm_bwd_acc(R, D, la.x_in.data(), L.attn_norm->w.data(), la.rstd1.data(), dxn.data(), dtmp.data(), dx.data());
    // dx = d(x_in)
  }
  a.kept = false;  // used up; the buffers stay for the next forward
}

void step(Model& m, const StepIn& in, StepOut& out, bool want_logits) {
  FwdIn f;
  f.R = in.R;
  f.tokens = in.tokens;
  f.positions = in.positions;
  f.labels = in.labels;
  f.seq_off = in.seq_off;
  f.keep = in.backward;
  f.seed = in.seed;
  f.all_logits = want_logits;
  Acts& a = spare_acts(m);
  forward(m, f, a);
  const int64_t R = in.R, V = m.cfg.vocab, H = int64_t(a.head_rows.size());
  std::vector<float>& dlogits = m.work.dlogits;
  dlogits.resize(in.backward ? size_t(H * V) : 0);
  out.loss = cross_entropy_fwd_bwd(H, V, a.logits.data(), a.head_labels.data(), in.backward ? dlogits.data() : nullptr,
                                   nullptr);
  out.counted = 0;
  for (int64_t t = 0; t < R; t++) out.counted += in.labels[t] >= 0;
  if (want_logits) out.logits = std::move(a.logits);
  if (!in.backward || out.counted == 0) return;
  if (in.grad_scale != 1.0f) scale_fwd(H * V, dlogits.data(), in.grad_scale, dlogits.data());
  backward(m, a, dlogits.data());
}

}  // namespace loom::train::llama
