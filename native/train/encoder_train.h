// GLiNER2 span-model training graph (spec ../shared/specs/gliner2.md §2, §4, §5): DeBERTa-v2/v3
// encoder + span / count / classification heads, fp32, full fine-tuning or LoRA.
//
// One call of step() is one micro-batch: forward keeping activations, the §5.4 losses, backward
// into every trainable Param. Shapes (B samples, N sub-words, D hidden, H heads, d = D/H, W words
// of a sample incl. the choice prefix, K max span width, M fields of a segment, c count):
//   the batch packed first (encoder_train.cc, Pack): a right-padded sample runs its own len tokens, so the encoder's
//   activations are (T, D) with T = Σ len, not (B*N, D); the rows below are written for one unpadded sample
//   x0 (B*N, D) = LN(word_emb[ids] + Σ_k feat_emb[feats[.., k]] + mean_k word_emb[bags[.., k]])·mask
//     (feature rows and bag ids -1 = none; fresh encoders: word features, label bags)
//   per layer: q,k,v = lin(x) ; PQ, PK (2·span, D) = lin_q(R), lin_k(R) with R = LN(rel_emb)
//     A[b,h,i,j] = (q_i·k_j + q_i·PK[δ(i,j)] + k_j·PQ[δ(i,j)]) / sqrt(3d), softmax over keys j
//     a = LN(softmax(A)·V·Woᵀ + bo + x) ; x' = LN(GELU(a·Wiᵀ + bi)·Woutᵀ + bout + a)
//   heads: words (ΣW, D) = pool(x[pieces of each word]): first piece, mean or elementwise max (token_pooling)
//     S = ReLU(MLP_s(words)), E = ReLU(MLP_e(words)) ; PS = S·W1aᵀ + b1, PE = E·W1bᵀ   (ΣW, 4D)
//     hid[i,k] = ReLU(PS[i] + PE[i+k]) ; span_rep[i,k] = hid[i,k]·W2ᵀ + b2            (W, K, D)
//     G (c, M, D) = GRU_c(F) over the segment's marker rows F
//     Fc (c, M, D) = projector(concat(G, F))                                          (count_lstm)
//     Fc (c, M, D) = out_projector(concat(TF(in_projector(X)), X)), X = G + F          (count_lstm_v2)
//       TF: 2 post-norm transformer layers (4 heads, ReLU FFN) attending across the M fields of each step t
//     logit[t,m,i,k] = span_rep[i,k]·Fc[t,m] = hid[i,k]·(Fc[t,m]·W2) + b2·Fc[t,m]
//   dropout (DeBERTa's StableDropout, inverted, only when p > 0): x0 = drop_h(x0); probs = drop_a(softmax(A));
//     a_pre = drop_h(ctx·Woᵀ + bo) + x ; f_pre = drop_h(GELU(..)·Woutᵀ + bout) + a. Masks come from
//     StepIn::seed alone (an Rng per use), so a forward without backward reproduces a training forward.
//   losses (summed, §5.4): span BCE over valid spans (negatives kept with p = neg_keep, 0.5, when drop_neg),
//     count CE on count_pred([P] row) for tasks with count_loss, classification BCE on classifier(markers)
//     (or softmax cross-entropy over a segment's markers, Seg::softmax: single-label tasks).
#pragma once
#include <memory>
#include <set>
#include <string>
#include <vector>
#include "../models/deberta.h"
#include "train_common.h"

namespace loom::train::encoder {

enum class Counting : int { Lstm = 0, LstmV2 = 1 };
enum class Pooling : int { First = 0, Mean = 1, Max = 2 };

struct Config {
  deberta::Config deb;
  int64_t K = 8;
  bool rel_ln = true;  // norm_rel_ebd == "layer_norm"
  Counting counting = Counting::Lstm;
  Pooling pooling = Pooling::First;
  int64_t count_T = 128, count_FF = 256;  // count_lstm_v2 transformer width and FFN width
  bool bf16 = false;  // precision bf16: the encoder's and span head's products in bf16 compute (sgemm_bf16_compute)
};

// count_lstm_v2 transformer layer (torch.nn.TransformerEncoderLayer, post-norm, ReLU, eps 1e-5)
struct CountTLayer {
  TLinear attn_in;   // self_attn.in_proj (3T, T): rows q, k, v
  TLinear attn_out;  // self_attn.out_proj (T, T)
  TLinear lin1, lin2;  // (FF, T), (T, FF)
  Param *n1_w = nullptr, *n1_b = nullptr, *n2_w = nullptr, *n2_b = nullptr;
};

struct LoraCfg {
  bool enabled = false;   // false: full fine-tuning
  int64_t r = 8;
  float alpha = 16.0f, dropout = 0.0f;
  std::set<std::string> targets;  // full module names (e.g. encoder.encoder.layer.0.attention.self.query_proj)
  uint64_t seed = 42;             // A init (Kaiming-uniform, as PEFT); B = 0
};

struct Layer {
  TLinear q, k, v, o, inter, out;
  Param *ln1_w = nullptr, *ln1_b = nullptr, *ln2_w = nullptr, *ln2_b = nullptr;
};

struct StepScratch;  // encoder_train.cc: step()'s activations and work buffers

struct Model {
  Config cfg;
  ParamStore ps;
  Param *word_emb = nullptr, *emb_ln_w = nullptr, *emb_ln_b = nullptr;
  Param* feat_emb = nullptr;  // (cfg.deb.feat_rows, D) word-feature rows; null when the model has none
  Param *rel_emb = nullptr, *rel_ln_w = nullptr, *rel_ln_b = nullptr;
  std::vector<Layer> layers;
  Mlp2 proj_start, proj_end, classifier, count_pred, projector;  // projector: count_lstm only
  TLinear out0;   // span_rep out_project.0 (4D, 2D), applied split over [S | E]
  TLinear out3;   // span_rep out_project.3 (D, 4D)
  TLinear gru_ih, gru_hh;  // (3D, D), rows r, z, n
  Param* pos_emb = nullptr;  // (20, D)
  // count_lstm_v2
  TLinear cin;                // transformer.in_projector (T, D)
  CountTLayer ct[2];
  TLinear co0, co2, co4;      // transformer.out_projector: (D, T+D), (D, D), (D, D)
  // step()'s large buffers, kept from one step to the next (calls on a model are serialized): allocated afresh,
  // their pages were faulted in and zeroed by the kernel every step (hundreds of MB at D = 768).
  std::shared_ptr<StepScratch> scratch;
};

// tensors: every tensor of a count_lstm / count_lstm_v2 GLiNER2 checkpoint (fp32), by its checkpoint name.
std::unique_ptr<Model> model_create(const Config& cfg, const std::vector<std::pair<std::string, const float*>>& tensors,
                                    const LoraCfg& lora);

struct Seg {
  int64_t sample = 0;
  int kind = 0;           // 0 span task, 1 classification
  int64_t M = 0;
  int64_t count = 0;      // gold instance count (span tasks; entities: 1)
  bool count_loss = false;
  bool softmax = false;   // classification: softmax cross-entropy over the M labels instead of a BCE per label
  std::vector<int64_t> rows;  // (1+M) rows into the (B*N) hidden states: [P], then the markers
};

struct StepIn {
  int64_t B = 0, N = 0;
  const int32_t* ids = nullptr;   // (B*N)
  const uint8_t* mask = nullptr;  // (B*N)
  const int32_t* feats = nullptr; // (B*N*feat_cols) word-feature rows, -1 = none (null: none anywhere)
  const int32_t* groups = nullptr; // (B*N) label-isolation groups (deberta.h group_positions; null: none)
  const int32_t* bags = nullptr;   // (B*N*bag_cols) label bags: word-table rows whose mean a row adds (-1 = none)
  int64_t bag_cols = 0;
  std::vector<int64_t> woff;      // (B+1) word offsets
  std::vector<int64_t> word_rows; // (ΣW) rows into the hidden states: each word's first piece
  std::vector<int64_t> word_end;  // (ΣW) exclusive end row of each word's pieces (mean / max pooling)
  std::vector<Seg> segs;
  std::vector<int32_t> pos;       // positives: 5-tuples (seg, t, m, i, k)
  std::vector<float> cls_y;       // concatenated multi-hot targets of the classification segments
  bool backward = true, drop_neg = true;
  float neg_keep = 0.5f;           // with drop_neg: the probability that a negative span enters the span loss
  // with drop_neg, negatives never dropped: 0 none; 1 a span that is a mention under another label of its text;
  // 2 also any span that starts or ends where a mention does (boundary negatives)
  int neg_hard = 0;
  float grad_scale = 1.0f;
  float hidden_dropout = 0.0f;     // DeBERTa hidden_dropout_prob (embeddings, attention output, FFN output)
  float attention_dropout = 0.0f;  // DeBERTa attention_probs_dropout_prob (softmax probabilities)
  uint64_t seed = 0;
};
struct StepOut {
  double loss = 0, span = 0, count = 0, cls = 0;
  // the classifier's logits, (Σ M of the classification segments,) in segment order (what cls_y holds targets for)
  std::vector<float> cls_logits;
};

void step(Model& m, const StepIn& in, StepOut& out);

}  // namespace loom::train::encoder
