// GLiNER2 span-architecture heads (see gliner2.h).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <stdexcept>
#include "gliner2.h"
#include "loom/ops.h"

namespace loom::gliner2 {

using deberta::Linear;

namespace {

const float* need(const std::map<std::string, const float*>& t, const std::string& name) {
  auto it = t.find(name);
  if (it == t.end() || !it->second) throw std::invalid_argument("gliner2: missing tensor " + name);
  return it->second;
}

void lin(Linear& l, const std::map<std::string, const float*>& t, const std::string& prefix, int64_t N, int64_t K,
         bool bias = true) {
  l.init(DType::F32, N, K, need(t, prefix + ".weight"), K, bias ? need(t, prefix + ".bias") : nullptr);
}

void vec(std::vector<float>& v, const std::map<std::string, const float*>& t, const std::string& name, int64_t n) {
  const float* p = need(t, name);
  v.assign(p, p + n);
}

inline float sigmoidf(float x) { return 1.0f / (1.0f + std::exp(-x)); }

void relu(int64_t n, float* x) {
  for (int64_t i = 0; i < n; i++) x[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

// Linear → ReLU → Linear on (M, in) rows.
void mlp2(const Linear& a, const Linear& b, int64_t M, const float* x, int64_t ldx, float* y, int64_t ldy) {
  std::vector<float> h(size_t(M * a.N));
  a.fwd(M, x, ldx, h.data(), a.N);
  relu(int64_t(h.size()), h.data());
  b.fwd(M, h.data(), a.N, y, ldy);
}

// count_lstm / count_lstm_v2 for several segments at once (all with the same count c): the fields
// of every segment are rows of F (Mt, D), segment g owning rows [gr[g], gr[g] + gm[g]).
// Fc (c, Mt, D): row (t, m) is field m's embedding for instance t. Row-wise layers run as one GEMM
// over all segments; the v2 transformer attends within each (step, segment) group only.
void count_embed(const Heads& hd, int64_t Mt, const float* F, int64_t c, const std::vector<int64_t>& gr,
                 const std::vector<int64_t>& gm, float* Fc) {
  const int64_t D = hd.D;
  if (c <= 0 || Mt <= 0) return;
  // GRU over c steps; h0 = F; input x_t = pos_emb[t] (same for all fields: gates precomputed at load).
  std::vector<float> G(size_t(c * Mt * D)), gh(size_t(Mt * 3 * D)), h(F, F + Mt * D);
  for (int64_t t = 0; t < c; t++) {
    hd.gru_hh.fwd(Mt, h.data(), D, gh.data(), 3 * D);  // (Mt, 3D)
    const float* x = hd.gru_x.data() + t * 3 * D;
    for (int64_t m = 0; m < Mt; m++) {
      float* hm = h.data() + m * D;
      const float* g = gh.data() + m * 3 * D;
      for (int64_t u = 0; u < D; u++) {
        float r = sigmoidf(x[u] + g[u]);
        float z = sigmoidf(x[D + u] + g[D + u]);
        float n = std::tanh(x[2 * D + u] + r * g[2 * D + u]);
        hm[u] = (1.0f - z) * n + z * hm[u];
      }
    }
    std::memcpy(G.data() + t * Mt * D, h.data(), size_t(Mt * D) * 4);
  }
  const int64_t R = c * Mt;
  if (hd.counting == Counting::Moe) {
    // gates (R, E) = softmax(router2(GELU(router0(G)))); Fc = Σ_e gates[:, e] · (GELU(G·W1[e] + b1[e])·W2[e] + b2[e])
    const int64_t E = hd.experts, I = hd.inner;
    std::vector<float> r0(size_t(R * D)), gates(size_t(R * E)), x(size_t(R * I)), y(size_t(R * D));
    hd.router0.fwd(R, G.data(), D, r0.data(), D);
    gelu_fwd(R * D, r0.data(), r0.data(), false);
    hd.router2.fwd(R, r0.data(), D, gates.data(), E);
    softmax_fwd(R, E, gates.data(), gates.data());
    std::fill(Fc, Fc + R * D, 0.0f);
    for (int64_t e = 0; e < E; e++) {
      hd.ex1[size_t(e)].fwd(R, G.data(), D, x.data(), I);
      gelu_fwd(R * I, x.data(), x.data(), false);
      hd.ex2[size_t(e)].fwd(R, x.data(), I, y.data(), D);
      for (int64_t r = 0; r < R; r++) {
        const float w = gates[size_t(r * E + e)];
        for (int64_t u = 0; u < D; u++) Fc[r * D + u] += w * y[size_t(r * D + u)];
      }
    }
    return;
  }
  if (hd.counting == Counting::Lstm) {
    // Fc = proj2(ReLU(proj0(concat(G, F))))
    std::vector<float> cat(size_t(R * 2 * D));
    for (int64_t t = 0; t < c; t++)
      for (int64_t m = 0; m < Mt; m++) {
        float* row = cat.data() + (t * Mt + m) * 2 * D;
        std::memcpy(row, G.data() + (t * Mt + m) * D, size_t(D) * 4);
        std::memcpy(row + D, F + m * D, size_t(D) * 4);
      }
    mlp2(hd.proj0, hd.proj2, R, cat.data(), 2 * D, Fc, D);
    return;
  }
  // count_lstm_v2: X = G + F; Y = in_proj(X); 2 post-norm transformer layers attending across the
  // fields of one segment for each step t; Fc = o4(ReLU(o2(ReLU(o0(concat(Y, X)))))).
  const int64_t T = hd.in_proj.N, NH = 4, dh = T / NH;
  std::vector<float> X(size_t(R * D));
  for (int64_t t = 0; t < c; t++)
    for (int64_t m = 0; m < Mt; m++)
      for (int64_t u = 0; u < D; u++) X[size_t((t * Mt + m) * D + u)] = G[size_t((t * Mt + m) * D + u)] + F[m * D + u];
  std::vector<float> Y(size_t(R * T)), qkv(size_t(R * 3 * T)), ctx(size_t(R * T)), tmp(size_t(R * T)),
      ff(size_t(R * hd.tl[0].lin1.N));
  int64_t Mmax = 1;
  for (int64_t v : gm) Mmax = std::max(Mmax, v);
  std::vector<float> sc(static_cast<size_t>(Mmax));
  hd.in_proj.fwd(R, X.data(), D, Y.data(), T);
  const float scale = 1.0f / std::sqrt(float(dh));
  for (int li = 0; li < 2; li++) {
    const Heads::TLayer& L = hd.tl[li];
    L.attn_in.fwd(R, Y.data(), T, qkv.data(), 3 * T);
    for (size_t g = 0; g < gr.size(); g++) {
      const int64_t M = gm[g];
      for (int64_t t = 0; t < c; t++) {
        const int64_t r0 = t * Mt + gr[g];
        for (int64_t hh = 0; hh < NH; hh++)
          for (int64_t i = 0; i < M; i++) {
            const float* q = qkv.data() + (r0 + i) * 3 * T + hh * dh;
            float mx = -INFINITY;
            for (int64_t j = 0; j < M; j++) {
              const float* k = qkv.data() + (r0 + j) * 3 * T + T + hh * dh;
              float s = 0.0f;
              for (int64_t e = 0; e < dh; e++) s += q[e] * k[e];
              sc[size_t(j)] = s * scale;
              mx = std::max(mx, sc[size_t(j)]);
            }
            float sum = 0.0f;
            for (int64_t j = 0; j < M; j++) {
              sc[size_t(j)] = std::exp(sc[size_t(j)] - mx);
              sum += sc[size_t(j)];
            }
            float* o = ctx.data() + (r0 + i) * T + hh * dh;
            std::fill(o, o + dh, 0.0f);
            for (int64_t j = 0; j < M; j++) {
              const float* v = qkv.data() + (r0 + j) * 3 * T + 2 * T + hh * dh;
              float p = sc[size_t(j)] / sum;
              for (int64_t e = 0; e < dh; e++) o[e] += p * v[e];
            }
          }
      }
    }
    std::memcpy(tmp.data(), Y.data(), size_t(R * T) * 4);
    L.attn_out.fwd(R, ctx.data(), T, tmp.data(), T, 1.0f);
    layernorm_fwd(R, T, tmp.data(), L.n1w.data(), L.n1b.data(), 1e-5f, Y.data(), nullptr, nullptr);
    std::memcpy(tmp.data(), Y.data(), size_t(R * T) * 4);
    L.lin1.fwd(R, Y.data(), T, ff.data(), L.lin1.N);
    relu(int64_t(ff.size()), ff.data());
    L.lin2.fwd(R, ff.data(), L.lin1.N, tmp.data(), T, 1.0f);
    layernorm_fwd(R, T, tmp.data(), L.n2w.data(), L.n2b.data(), 1e-5f, Y.data(), nullptr, nullptr);
  }
  std::vector<float> cat(size_t(R * (T + D))), h1(size_t(R * D)), h2(size_t(R * D));
  for (int64_t r = 0; r < R; r++) {
    std::memcpy(cat.data() + r * (T + D), Y.data() + r * T, size_t(T) * 4);
    std::memcpy(cat.data() + r * (T + D) + T, X.data() + r * D, size_t(D) * 4);
  }
  hd.o0.fwd(R, cat.data(), T + D, h1.data(), D);
  relu(R * D, h1.data());
  hd.o2.fwd(R, h1.data(), D, h2.data(), D);
  relu(R * D, h2.data());
  hd.o4.fwd(R, h2.data(), D, Fc, D);
}

}  // namespace

std::unique_ptr<Heads> heads_create(int64_t D, int64_t K, Counting counting,
                                    const std::map<std::string, const float*>& t, int64_t experts, int64_t inner) {
  auto h = std::make_unique<Heads>();
  h->D = D;
  h->K = K;
  h->counting = counting;
  const std::string sp = "span_rep.span_rep_layer.";
  lin(h->ps0, t, sp + "project_start.0", 4 * D, D);
  lin(h->ps3, t, sp + "project_start.3", D, 4 * D);
  lin(h->pe0, t, sp + "project_end.0", 4 * D, D);
  lin(h->pe3, t, sp + "project_end.3", D, 4 * D);
  const float* o0w = need(t, sp + "out_project.0.weight");  // (4D, 2D)
  h->out0a.init(DType::F32, 4 * D, D, o0w, 2 * D, need(t, sp + "out_project.0.bias"));
  h->out0b.init(DType::F32, 4 * D, D, o0w + D, 2 * D, nullptr);
  lin(h->out3, t, sp + "out_project.3", D, 4 * D);
  {  // G = Fc·W2 as a linear layer over W2ᵀ (4D, D), packed once
    const float* w2 = need(t, sp + "out_project.3.weight");  // (D, 4D)
    std::vector<float> w2t(size_t(4 * D * D));
    for (int64_t u = 0; u < D; u++)
      for (int64_t v = 0; v < 4 * D; v++) w2t[size_t(v * D + u)] = w2[u * 4 * D + v];
    h->out3t.init(DType::F32, 4 * D, D, w2t.data(), D, nullptr);
  }
  vec(h->out3_b, t, sp + "out_project.3.bias", D);
  lin(h->cls0, t, "classifier.0", 2 * D, D);
  lin(h->cls2, t, "classifier.2", 1, 2 * D);
  lin(h->cp0, t, "count_pred.0", 2 * D, D);
  lin(h->cp2, t, "count_pred.2", 20, 2 * D);
  vec(h->pos_emb, t, "count_embed.pos_embedding.weight", 20 * D);
  h->gru_ih.init(DType::F32, 3 * D, D, need(t, "count_embed.gru.weight_ih_l0"), D, need(t, "count_embed.gru.bias_ih_l0"));
  h->gru_hh.init(DType::F32, 3 * D, D, need(t, "count_embed.gru.weight_hh_l0"), D, need(t, "count_embed.gru.bias_hh_l0"));
  h->gru_x.resize(size_t(20 * 3 * D));  // the GRU's inputs are the 20 position embeddings: gates once
  h->gru_ih.fwd(20, h->pos_emb.data(), D, h->gru_x.data(), 3 * D);
  if (counting == Counting::Moe) {
    if (experts <= 0 || inner <= 0) throw std::invalid_argument("gliner2: count_lstm_moe needs experts and inner > 0");
    h->experts = experts;
    h->inner = inner;
    lin(h->router0, t, "count_embed.router.0", D, D);
    lin(h->router2, t, "count_embed.router.2", experts, D);
    const float *w1 = need(t, "count_embed.w1"), *b1 = need(t, "count_embed.b1");  // (E, D, I), (E, I)
    const float *w2 = need(t, "count_embed.w2"), *b2 = need(t, "count_embed.b2");  // (E, I, D), (E, D)
    h->ex1.resize(size_t(experts));
    h->ex2.resize(size_t(experts));
    std::vector<float> wt(size_t(D * inner));
    for (int64_t e = 0; e < experts; e++) {
      // the checkpoint stores x·W (in, out); our linears take W as (out, in)
      const float* a = w1 + e * D * inner;
      for (int64_t d = 0; d < D; d++)
        for (int64_t i = 0; i < inner; i++) wt[size_t(i * D + d)] = a[d * inner + i];
      h->ex1[size_t(e)].init(DType::F32, inner, D, wt.data(), D, b1 + e * inner);
      const float* b = w2 + e * inner * D;
      for (int64_t i = 0; i < inner; i++)
        for (int64_t d = 0; d < D; d++) wt[size_t(d * inner + i)] = b[i * D + d];
      h->ex2[size_t(e)].init(DType::F32, D, inner, wt.data(), inner, b2 + e * D);
    }
  } else if (counting == Counting::Lstm) {
    lin(h->proj0, t, "count_embed.projector.0", 4 * D, 2 * D);
    lin(h->proj2, t, "count_embed.projector.2", D, 4 * D);
  } else {
    const int64_t T = 128, FF = 256;
    lin(h->in_proj, t, "count_embed.transformer.in_projector", T, D);
    for (int i = 0; i < 2; i++) {
      std::string p = "count_embed.transformer.transformer.layers." + std::to_string(i) + ".";
      Heads::TLayer& L = h->tl[i];
      L.attn_in.init(DType::F32, 3 * T, T, need(t, p + "self_attn.in_proj_weight"), T, need(t, p + "self_attn.in_proj_bias"));
      lin(L.attn_out, t, p + "self_attn.out_proj", T, T);
      lin(L.lin1, t, p + "linear1", FF, T);
      lin(L.lin2, t, p + "linear2", T, FF);
      vec(L.n1w, t, p + "norm1.weight", T);
      vec(L.n1b, t, p + "norm1.bias", T);
      vec(L.n2w, t, p + "norm2.weight", T);
      vec(L.n2b, t, p + "norm2.bias", T);
    }
    lin(h->o0, t, "count_embed.transformer.out_projector.0", D, T + D);
    lin(h->o2, t, "count_embed.transformer.out_projector.2", D, D);
    lin(h->o4, t, "count_embed.transformer.out_projector.4", D, D);
  }
  return h;
}

void heads_run(const Heads& hd, int64_t B, const float* words, const int64_t* woff, const std::vector<Segment>& segs,
               std::vector<SegOut>& outs, std::vector<std::vector<float>>* span_rep) {
  const int64_t D = hd.D, K = hd.K, D4 = 4 * D, S = int64_t(segs.size());
  outs.assign(size_t(S), SegOut());
  // Count head over the [P] rows of all span segments, classifier over all classification markers:
  // one batched MLP each.
  std::vector<int64_t> span_ids, cls_ids;
  int64_t ncls = 0;
  for (int64_t s = 0; s < S; s++) {
    if (segs[size_t(s)].kind == 1) cls_ids.push_back(s), ncls += segs[size_t(s)].M;
    else span_ids.push_back(s);
  }
  const bool any_span = !span_ids.empty();
  if (ncls > 0) {
    std::vector<float> x(static_cast<size_t>(ncls * D)), y(static_cast<size_t>(ncls));
    int64_t r = 0;
    for (int64_t s : cls_ids) {
      const Segment& g = segs[size_t(s)];
      std::memcpy(x.data() + r * D, g.embs + D, size_t(g.M * D) * 4);
      r += g.M;
    }
    mlp2(hd.cls0, hd.cls2, ncls, x.data(), D, y.data(), 1);
    r = 0;
    for (int64_t s : cls_ids) {
      const int64_t M = segs[size_t(s)].M;
      outs[size_t(s)].cls_logits.assign(y.begin() + r, y.begin() + r + M);
      r += M;
    }
  }
  for (int64_t s : cls_ids) outs[size_t(s)].cls_logits.resize(size_t(segs[size_t(s)].M));
  if (any_span) {
    const int64_t ns = int64_t(span_ids.size());
    std::vector<float> x(static_cast<size_t>(ns * D)), y(static_cast<size_t>(ns * 20));
    for (int64_t q = 0; q < ns; q++) std::memcpy(x.data() + q * D, segs[size_t(span_ids[size_t(q)])].embs, size_t(D) * 4);
    mlp2(hd.cp0, hd.cp2, ns, x.data(), D, y.data(), 20);
    for (int64_t q = 0; q < ns; q++) {
      SegOut& o = outs[size_t(span_ids[size_t(q)])];
      o.count_logits.assign(y.begin() + q * 20, y.begin() + q * 20 + 20);
      int64_t c = 0;
      for (int64_t i = 1; i < 20; i++)
        if (o.count_logits[size_t(i)] > o.count_logits[size_t(c)]) c = i;
      o.count = c;
    }
    // Count-aware field embeddings, one batched run per distinct count.
    for (int64_t c = 1; c < 20; c++) {
      std::vector<int64_t> ids, gr, gm;
      int64_t Mt = 0;
      for (int64_t s : span_ids)
        if (outs[size_t(s)].count == c && segs[size_t(s)].M > 0) {
          ids.push_back(s);
          gr.push_back(Mt);
          gm.push_back(segs[size_t(s)].M);
          Mt += segs[size_t(s)].M;
        }
      if (ids.empty()) continue;
      std::vector<float> F(static_cast<size_t>(Mt * D)), Fc(static_cast<size_t>(c * Mt * D));
      for (size_t g = 0; g < ids.size(); g++) std::memcpy(F.data() + gr[g] * D, segs[size_t(ids[g])].embs + D, size_t(gm[g] * D) * 4);
      count_embed(hd, Mt, F.data(), c, gr, gm, Fc.data());
      for (size_t g = 0; g < ids.size(); g++) {
        std::vector<float>& ce = outs[size_t(ids[g])].count_embed;
        ce.resize(size_t(c * gm[g] * D));
        for (int64_t t = 0; t < c; t++)
          std::memcpy(ce.data() + t * gm[g] * D, Fc.data() + (t * Mt + gr[g]) * D, size_t(gm[g] * D) * 4);
      }
    }
  }
  if (!any_span && !span_rep) return;

  // Per-word start/end projections for all samples at once.
  const int64_t TW = woff[B];
  std::vector<float> Sx(size_t(TW * D)), Ex(size_t(TW * D)), PS(size_t(TW * D4)), PE(size_t(TW * D4));
  mlp2(hd.ps0, hd.ps3, TW, words, D, Sx.data(), D);
  mlp2(hd.pe0, hd.pe3, TW, words, D, Ex.data(), D);
  relu(TW * D, Sx.data());
  relu(TW * D, Ex.data());
  hd.out0a.fwd(TW, Sx.data(), D, PS.data(), D4);  // + b1
  hd.out0b.fwd(TW, Ex.data(), D, PE.data(), D4);

  // Per sample: the span segments with count > 0 and their rows in G (R_b rows: count × M each).
  const bool want_rep = span_rep != nullptr;
  if (want_rep) span_rep->assign(size_t(B), {});
  std::vector<std::vector<int64_t>> seg_ids(static_cast<size_t>(B)), seg_row(static_cast<size_t>(B));
  std::vector<int64_t> Rb(static_cast<size_t>(B), 0), goff(static_cast<size_t>(B) + 1, 0);
  for (int64_t s = 0; s < S; s++) {
    const Segment& g = segs[size_t(s)];
    if (g.kind != 0 || outs[size_t(s)].count <= 0) continue;
    seg_ids[size_t(g.sample)].push_back(s);
    seg_row[size_t(g.sample)].push_back(Rb[size_t(g.sample)]);
    Rb[size_t(g.sample)] += outs[size_t(s)].count * g.M;
  }
  for (int64_t b = 0; b < B; b++) goff[size_t(b) + 1] = goff[size_t(b)] + Rb[size_t(b)];
  const int64_t RT = goff[size_t(B)];
  // G = Fc · W2 for every (sample, instance, field) row at once (pre-packed W2ᵀ), bb = Fc · b2.
  std::vector<float> Fc(size_t(std::max<int64_t>(RT, 1) * D)), Gall(size_t(std::max<int64_t>(RT, 1) * D4)),
      bb(size_t(std::max<int64_t>(RT, 1)));
  for (int64_t b = 0; b < B; b++)
    for (size_t q = 0; q < seg_ids[size_t(b)].size(); q++) {
      const SegOut& o = outs[size_t(seg_ids[size_t(b)][q])];
      std::memcpy(Fc.data() + (goff[size_t(b)] + seg_row[size_t(b)][q]) * D, o.count_embed.data(), o.count_embed.size() * 4);
    }
  if (RT > 0) {
    hd.out3t.fwd(RT, Fc.data(), D, Gall.data(), D4);  // (RT, 4D)
    for (int64_t r = 0; r < RT; r++) {
      float acc = 0.0f;
      for (int64_t u = 0; u < D; u++) acc += Fc[size_t(r * D + u)] * hd.out3_b[size_t(u)];
      bb[size_t(r)] = acc;
    }
  }
  // logits[b] (W·K, R_b) = hid · G_bᵀ, hid[i,k] = ReLU(PS[i] + PE[i+k]); work items of up to 32
  // starts over all samples, spread over the pool (smaller items when there are few words, so a
  // single short text still uses every thread).
  const int64_t nth = std::max(1, threads_get());
  const int64_t CH = std::max<int64_t>(4, std::min<int64_t>(32, (TW + 4 * nth - 1) / (4 * nth)));
  std::vector<std::vector<float>> logits(static_cast<size_t>(B));
  std::vector<std::pair<int64_t, int64_t>> items;  // (sample, first start)
  for (int64_t b = 0; b < B; b++) {
    const int64_t W = woff[b + 1] - woff[b];
    if ((Rb[size_t(b)] == 0 && !want_rep) || W == 0) continue;
    logits[size_t(b)].assign(size_t(W * K * std::max<int64_t>(Rb[size_t(b)], 1)), 0.0f);
    if (want_rep) (*span_rep)[size_t(b)].assign(size_t(W * K * D), 0.0f);
    for (int64_t i0 = 0; i0 < W; i0 += CH) items.emplace_back(b, i0);
  }
  int64_t Wmax = 0;
  for (int64_t b = 0; b < B; b++) Wmax = std::max(Wmax, woff[b + 1] - woff[b]);
  const size_t hid_n = size_t(std::min(CH, Wmax) * K * D4);
  parallel_for(int64_t(items.size()), 1, [&](int64_t w0, int64_t w1) {
    std::unique_ptr<float[]> hid(new float[std::max<size_t>(hid_n, 1)]);  // every row written below
    for (int64_t w = w0; w < w1; w++) {
      const int64_t b = items[size_t(w)].first, i0 = items[size_t(w)].second;
      const int64_t W = woff[b + 1] - woff[b], R = Rb[size_t(b)];
      const float* ps = PS.data() + woff[b] * D4;
      const float* pe = PE.data() + woff[b] * D4;
      const int64_t i1 = std::min(W, i0 + CH), rows = (i1 - i0) * K;
      for (int64_t i = i0; i < i1; i++)
        for (int64_t k = 0; k < K; k++) {
          float* hr = hid.get() + ((i - i0) * K + k) * D4;
          int64_t j = i + k;
          if (j >= W) {
            std::memset(hr, 0, size_t(D4) * 4);
            continue;
          }
          const float* a = ps + i * D4;
          const float* e = pe + j * D4;
          for (int64_t u = 0; u < D4; u++) {
            float v = a[u] + e[u];
            hr[u] = v > 0.0f ? v : 0.0f;
          }
        }
      if (R > 0)  // logits (rows, R) = hid · Gᵀ
        sgemm(false, true, rows, R, D4, 1.0f, hid.get(), D4, Gall.data() + goff[size_t(b)] * D4, D4, 0.0f,
              logits[size_t(b)].data() + i0 * K * R, R);
      if (want_rep) {
        float* rep = (*span_rep)[size_t(b)].data() + i0 * K * D;
        hd.out3.fwd(rows, hid.get(), D4, rep, D);
        for (int64_t i = i0; i < i1; i++)
          for (int64_t k = 0; k < K; k++)
            if (i + k >= W) std::memset(rep + ((i - i0) * K + k) * D, 0, size_t(D) * 4);
      }
    }
  });
  // Scatter to (c, M, W, K) probabilities.
  for (int64_t b = 0; b < B; b++) {
    const int64_t W = woff[b + 1] - woff[b], R = Rb[size_t(b)];
    for (size_t q = 0; q < seg_ids[size_t(b)].size(); q++) {
      SegOut& o = outs[size_t(seg_ids[size_t(b)][q])];
      const int64_t M = segs[size_t(seg_ids[size_t(b)][q])].M, rows = o.count * M;
      o.scores.assign(size_t(rows * W * K), 0.0f);
      if (W == 0) continue;
      for (int64_t r = 0; r < rows; r++) {
        const int64_t gr = seg_row[size_t(b)][q] + r;
        const float bias = bb[size_t(goff[size_t(b)] + gr)];
        const float* lg = logits[size_t(b)].data();
        float* dst = o.scores.data() + r * W * K;
        for (int64_t i = 0; i < W; i++)
          for (int64_t k = 0; k < K && i + k < W; k++) dst[i * K + k] = sigmoidf(lg[size_t((i * K + k) * R + gr)] + bias);
      }
    }
  }
}

}  // namespace loom::gliner2
