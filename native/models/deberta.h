// DeBERTa-v2/v3 encoder (the GLiNER2 backbone), forward pass on the native core.
//
// Spec: ../shared/specs/gliner2.md §2. Per layer:
//   x = LN(word_emb[ids] + Σ_k feat_emb[feats[.., k]])   (feature rows: fresh encoders with word features)
//   QKV = x · [Wq;Wk;Wv]ᵀ + b                         x: (B*N, D), QKV: (B*N, 3D)
//   PQ, PK = R · Wqᵀ + bq, R · Wkᵀ + bk               (2*span, D), precomputed at load (share_att_key)
//   A[h,i,j] = (q_i·k_j + q_i·PK[δ(i,j)] + k_j·PQ[δ(i,j)]) / sqrt(3·d), keys with mask 0 excluded
//   a = LN(softmax(A)·V · Woᵀ + bo + x) ; x' = LN(GELU(a·Wiᵀ + bi)·Woutᵀ + bout + a)   (eps 1e-7)
// δ(i,j) = clamp(bucket(i−j) + span, 0, 2·span−1), log-bucketed for |i−j| beyond span/2.
// The attention is fused per (sample, head) (deberta_attn_impl.h, one kernel per ISA): the c2p / p2c
// terms are small GEMMs against only the relative rows that occur at this length, gathered into the
// score tile, soft-maxed and multiplied with V. Padding is never computed: the tokens of all samples
// are packed into one (ΣT_b, D) matrix, so every projection is one GEMM over real tokens only.
// With `acts`, everything backward needs is retained (DebertaActs, unpacked (B*N) layout).
#pragma once
#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>
#include <cmath>
#include "loom/core.h"
#include "loom/gemm.h"

namespace loom::deberta {

struct Config {
  int64_t D = 0, L = 0, H = 0, F = 0, V = 0;
  int64_t position_buckets = 256;     // <= 0: use max_relative_positions
  int64_t max_relative_positions = -1;  // < 1: max_position_embeddings (512)
  int64_t max_position_embeddings = 512;
  float eps = 1e-7f;
  bool c2p = true, p2c = true;
  // Word features (fresh encoders only; 0 = none, today's model): a (feat_rows, D) table whose rows,
  // chosen per token by feat_cols ids (-1 = none), are added to the word embedding before its LayerNorm.
  int64_t feat_rows = 0, feat_cols = 0;
  // derived
  int64_t att_span() const {  // pos_ebd_size
    int64_t mrp = max_relative_positions < 1 ? max_position_embeddings : max_relative_positions;
    return position_buckets > 0 ? position_buckets : mrp;
  }
  int64_t max_position() const { return max_relative_positions < 1 ? max_position_embeddings : max_relative_positions; }
  // the scores' scale: 1/√(d·(1 + c2p + p2c)) for head size d (the forward and the training graph's both ways)
  float attn_scale() const { return 1.0f / std::sqrt(float(D / H) * float(1 + int(c2p) + int(p2c))); }
};

// A linear layer y = x·Wᵀ + b with W packed once at load (fp32 or bf16 weights).
struct Linear {
  PackedWeight* w = nullptr;
  std::vector<float> b;  // (N) (may be empty)
  int64_t N = 0, K = 0;
  Linear() = default;
  Linear(const Linear&) = delete;
  Linear& operator=(const Linear&) = delete;
  Linear(Linear&& o) noexcept : w(o.w), b(std::move(o.b)), N(o.N), K(o.K) { o.w = nullptr; }
  ~Linear() { if (w) weight_free(w); }
  void init(DType dt, int64_t n, int64_t k, const void* weight, int64_t ldw, const float* bias);
  // y (M, N) = beta*y + x (M, K) · Wᵀ + b
  void fwd(int64_t M, const float* x, int64_t ldx, float* y, int64_t ldy, float beta = 0.0f) const;
};

struct Layer {
  Linear qkv;    // (3D, D): rows q, k, v
  Linear o;      // (D, D)
  Linear inter;  // (F, D)
  Linear out;    // (D, F)
  std::vector<float> ln1_w, ln1_b, ln2_w, ln2_b;  // attention.output.LayerNorm, output.LayerNorm
  // Position projections PQ = R·Wqᵀ + bq, PK = R·Wkᵀ + bk ((2*span, D)), stored per head transposed
  // for the attention kernels: PQT[h][e][m] = PQ[m][h*d+e], PKTr[h][e][m] = PK[2*span−1−m][h*d+e]
  // (columns reversed), m < S2P (zero past 2*span).
  std::vector<float> PQT, PKTr;  // (H, d, S2P)
};

// Raw weights handed over by the loader (pointers stay valid only during model_create).
struct LayerSrc {
  const void *wq, *wk, *wv, *wo, *wi, *wout;  // dtype = Model::wtype
  const float *bq, *bk, *bv, *bo, *bi, *bout;
  const float *ln1_w, *ln1_b, *ln2_w, *ln2_b;
};
struct ModelSrc {
  Config cfg;
  DType wtype = DType::F32;    // linear + embedding weights: F32 or BF16
  const void* word_emb = nullptr;  // (V, D)
  const float* feat_emb = nullptr;  // (feat_rows, D) fp32, when cfg.feat_rows > 0
  const float *emb_ln_w = nullptr, *emb_ln_b = nullptr;
  const float* rel_emb = nullptr;  // (rel_rows, D) fp32
  int64_t rel_rows = 0;
  const float *rel_ln_w = nullptr, *rel_ln_b = nullptr;  // null: norm_rel_ebd none
  std::vector<LayerSrc> layers;
};

struct Model {
  Config cfg;
  DType wtype = DType::F32;
  std::vector<uint8_t> word_emb;  // (V, D) in wtype
  std::vector<float> feat_emb;    // (feat_rows, D) word-feature rows (empty: none)
  std::vector<float> emb_ln_w, emb_ln_b;
  std::vector<Layer> layers;
  int64_t span = 256;  // att_span: relative rows used = 2*span
  int64_t S2P = 0;     // row stride of PQT / PKTr: 2*span + 32
  // Forward workspaces (one per concurrent forward, reused: no allocation per call in steady state).
  struct Workspace;
  mutable std::mutex ws_mu;
  mutable std::vector<std::unique_ptr<Workspace>> ws_free;
  ~Model();
};

std::unique_ptr<Model> model_create(const ModelSrc& src);

// Relative position bucket (HF make_log_bucket_position) and the rel-embedding row δ for rel = i − j.
int64_t rel_bucket(int64_t rel, int64_t bucket_size, int64_t max_position);
int64_t rel_index(const Config& cfg, int64_t rel);

// What backward needs, per layer (filled when forward is called with acts != null).
struct LayerActs {
  std::vector<float> x_in;      // (B*N, D) layer input
  std::vector<float> qkv;       // (B*N, 3D)
  std::vector<float> probs;     // (B, H, N, N) attention probabilities
  std::vector<float> ctx;       // (B*N, D) attention context (before output dense)
  std::vector<float> a_pre;     // (B*N, D) ctx·Woᵀ + bo + x (pre-LN)
  std::vector<float> ln1_mean, ln1_rstd;  // (B*N)
  std::vector<float> a;         // (B*N, D) attention block output
  std::vector<float> h_pre;     // (B*N, F) a·Wiᵀ + bi (pre-GELU)
  std::vector<float> h;         // (B*N, F) GELU output
  std::vector<float> f_pre;     // (B*N, D) h·Woutᵀ + bout + a (pre-LN)
  std::vector<float> ln2_mean, ln2_rstd;
};
struct Acts {
  int64_t B = 0, N = 0;
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
  std::vector<float> emb_pre;  // (B*N, D) word embeddings (+ word features) before LN
  std::vector<float> emb_mean, emb_rstd;
  std::vector<LayerActs> layers;
};

// Label isolation (fresh GLiNER2 models, config.json `label_isolation`): every token has a group, 0 for the text and
// every shared prompt token, g >= 1 for the `[L]` marker and words of the g-th classification label. A query of group
// 0 attends to keys of group 0 only, one of group g to keys of group 0 and g; and relative positions are taken from
// positions that do not count other groups: the real (mask 1) tokens of group 0 are numbered 0, 1, ... in order, and
// the tokens of group g continue from there (n0, n0 + 1, ... with n0 the count of real group-0 tokens), as if the
// label stood alone after the text. So group 0 is encoded as if no label were present, and a label's states depend
// only on group 0 and its own tokens, whatever other labels the prompt holds and in whatever order.
// groups, mask (n) (mask null = all real) → pos (n); masked tokens keep their index. 0 <= pos < n.
void group_positions(int64_t n, const int32_t* groups, const uint8_t* mask, int32_t* pos);

// ids, mask: (B, N); feats: (B, N, feat_cols) word-feature rows (-1 = none; null = none anywhere);
// groups: (B, N) label-isolation groups (null: none, every token attends to every real key);
// bags: (B, N, bag_cols) label bags (ops.h bag_embedding_fwd: rows of the word table whose mean a token's embedding
// adds, -1 = none; null: none);
// out: (B, N, D) last hidden state. hidden_states (optional): (L+1, B, N, D)
// (embedding output, then each layer's output). acts (optional): retained activations (train).
// Rows whose mask is 0 are 0 in out and hidden_states. A mask row of the form 1…1 0…0 (right
// padding) costs only its real tokens; other masks run the whole row with the keys masked.
void forward(const Model& m, int64_t B, int64_t N, const int32_t* ids, const uint8_t* mask, float* out,
             float* hidden_states = nullptr, Acts* acts = nullptr, const int32_t* feats = nullptr,
             const int32_t* groups = nullptr, const int32_t* bags = nullptr, int64_t bag_cols = 0);

}  // namespace loom::deberta
