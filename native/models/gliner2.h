// GLiNER2 span-architecture heads (spec ../shared/specs/gliner2.md §4) on the native core:
// span representation (markerV0), count head, count-aware field embeddings (count_lstm,
// count_lstm_v2, count_lstm_moe), span scores, classifier. All fp32.
//
// Span scores without materializing span_rep: with ReLU(concat(S,E)) = concat(ReLU S, ReLU E),
//   hid[i,k] = ReLU(PS[i] + PE[i+k]),  PS = ReLU(S)·W1aᵀ + b1,  PE = ReLU(E)·W1bᵀ      (4D)
//   span_rep[i,k] = hid[i,k]·W2ᵀ + b2                                                 (D)
//   logit[t,m,i,k] = <span_rep[i,k], Fc[t,m]> = hid[i,k]·(Fc[t,m]·W2) + b2·Fc[t,m]
// so the (W·K, 4D)×(4D, D) product is replaced by (W·K, 4D)×(4D, c·M) (c·M = a few labels).
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>
#include "deberta.h"

namespace loom::gliner2 {

enum class Counting : int { Lstm = 0, LstmV2 = 1, Moe = 2 };

struct Heads {
  int64_t D = 0, K = 8;
  Counting counting = Counting::Lstm;
  deberta::Linear ps0, ps3, pe0, pe3;  // project_start / project_end: D→4D→D
  deberta::Linear out0a, out0b;        // out_project.0 split: columns [0,D) (with bias) and [D,2D)
  deberta::Linear out3;                // out_project.3: 4D→D (span_rep, debug path)
  deberta::Linear out3t;               // W2ᵀ (4D, D): G = Fc·W2 (span scores)
  std::vector<float> out3_b;           // (D) b2, for b2·Fc
  deberta::Linear cls0, cls2, cp0, cp2;
  std::vector<float> pos_emb;          // (20, D)
  deberta::Linear gru_ih, gru_hh;      // (3D, D) each, rows r, z, n
  std::vector<float> gru_x;            // (20, 3D) = pos_emb·W_ihᵀ + b_ih (the GRU inputs), at load
  // count_lstm
  deberta::Linear proj0, proj2;        // 2D→4D→D
  // count_lstm_v2
  deberta::Linear in_proj;             // D→128
  struct TLayer {
    deberta::Linear attn_in, attn_out, lin1, lin2;
    std::vector<float> n1w, n1b, n2w, n2b;
  } tl[2];
  deberta::Linear o0, o2, o4;          // (128+D)→D→D→D
  // count_lstm_moe: gates = softmax(router2(GELU(router0(G)))) (E); expert e: GELU(G·W1[e] + b1[e])·W2[e] + b2[e]
  int64_t experts = 0, inner = 0;
  deberta::Linear router0, router2;    // D→D, D→E
  std::vector<deberta::Linear> ex1, ex2;  // per expert: W1[e]ᵀ (inner, D), W2[e]ᵀ (D, inner), packed at load
};

// tensors: checkpoint names without prefix change (span_rep.*, classifier.*, count_pred.*, count_embed.*).
// count_lstm_moe: experts E and inner width (count_embed.w1 is (E, D, inner)).
std::unique_ptr<Heads> heads_create(int64_t D, int64_t K, Counting counting,
                                    const std::map<std::string, const float*>& tensors, int64_t experts = 0,
                                    int64_t inner = 0);

struct Segment {
  int64_t sample = 0;
  int kind = 0;   // 0: span task (entities / structure / relation), 1: classification
  int64_t M = 0;  // number of fields / labels
  const float* embs = nullptr;  // (1+M, D): [P] row then the M marker rows
};
struct SegOut {
  std::vector<float> count_logits;  // (20) span tasks
  int64_t count = 0;
  std::vector<float> count_embed;   // (count, M, D)
  std::vector<float> scores;        // (count, M, W, K) sigmoid probabilities; invalid spans 0
  std::vector<float> cls_logits;    // (M) classification
};

// words: (sum W, D) word embeddings of all samples; woff (B+1) row offsets.
// span_rep (optional, debug): per sample (W, K, D).
void heads_run(const Heads& h, int64_t B, const float* words, const int64_t* woff, const std::vector<Segment>& segs,
               std::vector<SegOut>& outs, std::vector<std::vector<float>>* span_rep);

}  // namespace loom::gliner2
