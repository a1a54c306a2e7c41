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
  std::vector<float>&o = m.work.o, &kb = m.work.kb, &vb = m.work.vb;
  o.resize(size_t(R * D));
  for (int64_t l = 0; l < c.layers; l++) {
    LayerW& L = m.layers[size_t(l)];
    LayerActs& la = a.layers[in.keep ? size_t(l) : 0];
    LinActs* lacts = in.keep ? la.la : nullptr;
    auto lin = [&](int mo, const float* xi, float* y) { lin_fwd(L.lin[mo], base_only, R, xi, y, lacts ? &lacts[mo] : nullptr, rp); };
    if (in.keep) la.x_in = x;
    la.rstd1.resize(static_cast<size_t>(R));
    la.xn1.resize(size_t(R * D));
    rmsnorm_fwd(R, D, x.data(), L.attn_norm->w.data(), c.eps, la.xn1.data(), la.rstd1.data());
    la.q.resize(size_t(R * Nq));
    la.k.resize(size_t(R * Nkv));
    la.v.resize(size_t(R * Nkv));
    lin(kQ, la.xn1.data(), la.q.data());
    lin(kK, la.xn1.data(), la.k.data());
    lin(kV, la.xn1.data(), la.v.data());
    rope_fwd(R, Hq, Dh, Nq, in.positions, m.inv_freq.data(), la.q.data());
    rope_fwd(R, Hkv, Dh, Nkv, in.positions, m.inv_freq.data(), la.k.data());
    la.attn.resize(size_t(R * Nq));
    la.lse.resize(size_t(R * Hq));
    for (size_t s = 0; s < S; s++) {
      int64_t r0 = in.seq_off[s];
      if (in.seq_off[s + 1] == r0) continue;
      const int64_t p = parent_of(in.seq_parent, s);
      if (p < 0) {
        attention_fwd(attn_params(in.seq_off, s, c), la.q.data() + r0 * Nq, la.k.data() + r0 * Nkv,
                      la.v.data() + r0 * Nkv, la.attn.data() + r0 * Nq, la.lse.data() + r0 * Hq);
        continue;
      }
      const AttnParams ap = attn_params_child(in.seq_off, p, s, c);
      kb.resize(size_t(ap.Tk * Nkv));
      vb.resize(size_t(ap.Tk * Nkv));
      kv_gather(in.seq_off, p, int64_t(s), Nkv, la.k.data(), la.v.data(), kb.data(), vb.data());
      attention_fwd(ap, la.q.data() + r0 * Nq, kb.data(), vb.data(), la.attn.data() + r0 * Nq, la.lse.data() + r0 * Hq);
    }
    // x1 = x + attn·Woᵀ
    lin(kO, la.attn.data(), o.data());
    add_fwd(R * D, x.data(), o.data(), x.data());
    if (in.keep) la.x1 = x;
    la.rstd2.resize(static_cast<size_t>(R));
    la.xn2.resize(size_t(R * D));
    rmsnorm_fwd(R, D, x.data(), L.mlp_norm->w.data(), c.eps, la.xn2.data(), la.rstd2.data());
    la.g.resize(size_t(R * F));
    la.u.resize(size_t(R * F));
    la.act.resize(size_t(R * F));
    lin(kGate, la.xn2.data(), la.g.data());
    lin(kUp, la.xn2.data(), la.u.data());
    swiglu_fwd(R * F, la.g.data(), la.u.data(), la.act.data());
    lin(kDown, la.act.data(), o.data());
    add_fwd(R * D, x.data(), o.data(), x.data());
  }
  a.rstdf.resize(static_cast<size_t>(R));
  a.xnf.resize(size_t(R * D));
  rmsnorm_fwd(R, D, x.data(), m.norm->w.data(), c.eps, a.xnf.data(), a.rstdf.data());
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
  const size_t S = a.seq_off.size() - 1;
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
                     &dv = sized(w.dv, R * Nkv), &dtmp = sized(w.dtmp, R * D), &kb = w.kb, &vb = w.vb, &dkb = w.dkb,
                     &dvb = w.dvb;
  const int32_t* positions = a.positions.data();
  for (int64_t l = c.layers - 1; l >= 0; l--) {
    LayerW& L = m.layers[size_t(l)];
    LayerActs& la = a.layers[size_t(l)];
    // MLP: dx holds d(x'); x' = x1 + down(swiglu(gate(xn2), up(xn2)))
    L.lin[kDown].bwd(R, la.act.data(), dx.data(), dact.data(), &la.la[kDown], false);
    std::fill(dg.begin(), dg.end(), 0.0f);
    std::fill(du.begin(), du.end(), 0.0f);
    swiglu_bwd(R * F, la.g.data(), la.u.data(), dact.data(), dg.data(), du.data());
    L.lin[kGate].bwd(R, la.xn2.data(), dg.data(), dxn.data(), &la.la[kGate], false);
    L.lin[kUp].bwd(R, la.xn2.data(), du.data(), dxn.data(), &la.la[kUp], true);
    rmsnorm_bwd(R, D, la.x1.data(), L.mlp_norm->w.data(), la.rstd2.data(), dxn.data(), dtmp.data(), nullptr);
    axpy(R * D, 1.0f, dtmp.data(), dx.data());  // dx = d(x1)
    // attention block: x1 = x_in + o(attn)
    L.lin[kO].bwd(R, la.attn.data(), dx.data(), dattn.data(), &la.la[kO], false);
    // parents come before their children: a parent's dk/dv rows are written, then its children add to them
    for (size_t s = 0; s < S; s++) {
      int64_t r0 = a.seq_off[s];
      if (a.seq_off[s + 1] == r0) continue;
      const int64_t p = parent_of(a.seq_parent, s);
      if (p < 0) {
        attention_bwd(attn_params(a.seq_off, s, c), la.q.data() + r0 * Nq, la.k.data() + r0 * Nkv,
                      la.v.data() + r0 * Nkv, la.attn.data() + r0 * Nq, la.lse.data() + r0 * Hq,
                      dattn.data() + r0 * Nq, dq.data() + r0 * Nq, dk.data() + r0 * Nkv, dv.data() + r0 * Nkv, nullptr);
        continue;
      }
      const AttnParams ap = attn_params_child(a.seq_off, p, s, c);
      const int64_t pr0 = a.seq_off[size_t(p)], Tp = ap.q_offset, Ts = ap.Tq;
      kb.resize(size_t(ap.Tk * Nkv));
      vb.resize(size_t(ap.Tk * Nkv));
      dkb.resize(size_t(ap.Tk * Nkv));
      dvb.resize(size_t(ap.Tk * Nkv));
      kv_gather(a.seq_off, p, int64_t(s), Nkv, la.k.data(), la.v.data(), kb.data(), vb.data());
      attention_bwd(ap, la.q.data() + r0 * Nq, kb.data(), vb.data(), la.attn.data() + r0 * Nq, la.lse.data() + r0 * Hq,
                    dattn.data() + r0 * Nq, dq.data() + r0 * Nq, dkb.data(), dvb.data(), nullptr);
      axpy(Tp * Nkv, 1.0f, dkb.data(), dk.data() + pr0 * Nkv);
      axpy(Tp * Nkv, 1.0f, dvb.data(), dv.data() + pr0 * Nkv);
      std::memcpy(dk.data() + r0 * Nkv, dkb.data() + Tp * Nkv, size_t(Ts * Nkv) * sizeof(float));
      std::memcpy(dv.data() + r0 * Nkv, dvb.data() + Tp * Nkv, size_t(Ts * Nkv) * sizeof(float));
    }
    rope_bwd(R, Hq, Dh, Nq, positions, m.inv_freq.data(), dq.data());
    rope_bwd(R, Hkv, Dh, Nkv, positions, m.inv_freq.data(), dk.data());
    // layer 0's input is the frozen embedding's output: its gradient is never used (LoRA grads only)
    float* dxq = l > 0 ? dxn.data() : nullptr;
    L.lin[kQ].bwd(R, la.xn1.data(), dq.data(), dxq, &la.la[kQ], false);
    L.lin[kK].bwd(R, la.xn1.data(), dk.data(), dxq, &la.la[kK], true);
    L.lin[kV].bwd(R, la.xn1.data(), dv.data(), dxq, &la.la[kV], true);
    if (l == 0) break;
    rmsnorm_bwd(R, D, la.x_in.data(), L.attn_norm->w.data(), la.rstd1.data(), dxn.data(), dtmp.data(), nullptr);
    axpy(R * D, 1.0f, dtmp.data(), dx.data());  // dx = d(x_in)
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
