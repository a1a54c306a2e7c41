// Llama-family decoder training graph for LoRA (frozen base, fp32 or bf16 base weights), llm.c style:
// forward (keeping activations), the loss as its own function over the forward's logits, backward from
// the loss's gradient w.r.t. the logits into the LoRA A/B tensors only.
//
// A batch is S sequences packed as R = ΣT_s rows (attention never crosses a sequence). Shapes (R rows,
// D hidden, Hq/Hkv heads, Dh head dim, F FFN, V vocab):
//   x (R, D) = embed[tokens]
//   per layer: xn = rmsnorm(x)·w1 ; q,k,v = lin(xn) (+LoRA) ; rope(q, k) ; a = attn(q, k, v) causal
//              x1 = x + lin_o(a) ; xn2 = rmsnorm(x1)·w2 ; x' = x1 + lin_down(silu(lin_gate(xn2))·lin_up(xn2))
//   logits (R, V) = rmsnorm(x)·wf · lm_headᵀ
// Losses: SFT cross-entropy (step(): mean over rows with label >= 0), or any loss of the per-token
// log-probabilities of targets (logprob_fwd / logprob_bwd in loom/ops.h; DPO, GRPO in src/training).
// The reference model of DPO / GRPO is the same graph with the adapter switched off (FwdIn::lora).
#pragma once
#include <memory>
#include <string>
#include <vector>
#include "train_common.h"

namespace loom::train::llama {

struct Config {
  int64_t vocab = 0, hidden = 0, inter = 0, layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float eps = 1e-6f;
  float rope_theta = 10000.0f;
  RopeScaling rope;
  bool qkv_bias = false;
};

enum Module : int { kQ = 0, kK = 1, kV = 2, kO = 3, kGate = 4, kUp = 5, kDown = 6, kNumModules = 7 };
extern const char* const kModuleNames[kNumModules];  // "self_attn.q_proj", ..., "mlp.down_proj"

struct LayerW {
  Param *attn_norm = nullptr, *mlp_norm = nullptr;
  TLinear lin[kNumModules];
};

struct Acts;

// Buffers a forward or backward needs only while it runs, kept on the model between calls: a step
// touches hundreds of MB of activations, and fresh allocations of that size are page faults and zero
// fills (about a tenth of a GRPO step's CPU time) that the next step would pay again.
struct Work {
  std::vector<float> o, kb, xh;  // forward (kb: the child sequences' gathered k/v rows, backward too)
  std::vector<float> dxn, dx, dact, dg, du, dattn, dq, dk, dv, dtmp, dkb, dxh, dlogits;  // backward
};

struct Model {
  Config cfg;
  ParamStore ps;                               // frozen fp32 base tensors + trainable LoRA tensors
  std::vector<std::vector<uint16_t>> bf16;     // frozen bf16 base tensors (owned)
  DType embed_type = DType::F32;
  const void* embed = nullptr;                 // (V, D)
  Param* norm = nullptr;
  TLinear lm_head;
  std::vector<LayerW> layers;
  std::vector<float> inv_freq;                 // (Dh/2)
  Work work;                                   // scratch buffers of forward / backward (see Work)
  std::unique_ptr<Acts> spare;                 // activations of forwards that keep nothing (reused)
  ~Model();
};

// A base tensor handed over by name (HF names: model.embed_tokens.weight, model.layers.i.*, model.norm.weight,
// lm_head.weight). bf16 data is kept as bf16 for the linear layers and the embedding.
struct TensorSrc {
  std::string name;
  DType dtype = DType::F32;  // F32 or BF16
  const void* data = nullptr;
  int64_t numel = 0;
};
struct LoraSrc {
  int64_t layer = 0;
  int module = 0;
  int64_t r = 0;
  float scale = 0.0f, dropout = 0.0f;
  const float* A = nullptr;  // (r, in)
  const float* B = nullptr;  // (out, r)
  int64_t a_len = -1, b_len = -1;  // element counts when known (validated)
};

std::unique_ptr<Model> model_create(const Config& cfg, const std::vector<TensorSrc>& tensors,
                                    const std::vector<LoraSrc>& loras);

// Activations of a forward, kept for its backward.
struct LayerActs {
  std::vector<float> x_in, rstd1, xn1, q, k, v, attn, lse, x1, rstd2, xn2, g, u, act;
  LinActs la[kNumModules];
};
struct Acts {
  int64_t R = 0;
  std::vector<int32_t> positions, labels;  // (R)
  std::vector<int64_t> seq_off;            // (S+1)
  std::vector<int64_t> seq_parent;         // (S) or empty (FwdIn::seq_parent)
  std::vector<LayerActs> layers;           // one per layer when the forward kept its activations
  bool kept = false;                       // a forward kept its activations and no backward used them yet
  std::vector<float> x, rstdf, xnf;        // final hidden (R, D), its rstd (R), normed (R, D)
  std::vector<int64_t> head_rows;           // (H) rows whose logits were computed, ascending
  std::vector<int32_t> head_labels;        // (H) their labels
  std::vector<float> logits;               // (H, V) of the head rows
  float logit_scale = 1.0f;                // logits were multiplied by it (1 / sampling temperature)
};

struct FwdIn {
  int64_t R = 0;
  const int32_t* tokens = nullptr;     // (R)
  const int32_t* positions = nullptr;  // (R)
  const int32_t* labels = nullptr;     // (R) target of each row (the next token), < 0 = none
  std::vector<int64_t> seq_off;        // (S+1) row offsets of the packed sequences
  // (S) or empty: sequence s continues the earlier sequence seq_parent[s] (itself without a parent; -1 = none):
  // its rows attend to all of the parent's rows, then causally to their own (a prompt shared by several
  // completions is computed once; the caller gives the completion rows their positions after the prompt).
  std::vector<int64_t> seq_parent;
  bool keep = true;                    // keep activations for backward
  bool lora = true;                    // false: the base model alone (the reference policy)
  bool dropout = true;                 // LoRA dropout (training forwards)
  uint64_t seed = 0;                   // LoRA dropout masks
  bool all_logits = false;             // logits of every row (else only of rows with a label >= 0)
};
// Writes a.logits (H, V) of the head rows (a.head_rows); with in.keep, everything backward needs. a's buffers
// are reused (a forward into the same Acts allocates nothing once the batch shape has been seen).
void forward(Model& m, const FwdIn& in, Acts& a);
// m.spare, created on first use: the Acts of a forward whose activations are not kept (reference scoring).
Acts& spare_acts(Model& m);
// Given dlogits (H, V) of the loss w.r.t. a's logits: LoRA gradients accumulate. a's activations are used up
// (a.kept false), their buffers stay for the next forward.
void backward(Model& m, Acts& a, const float* dlogits);
// logp (R) = log softmax(a.logits)[label] per row, 0 for rows without a label (logprob_fwd on the head rows).
void head_logprob_fwd(const Acts& a, int64_t V, float* logp);
// dlogits (H, V) of a loss whose gradient w.r.t. those log-probabilities is dlogp (R).
void head_logprob_bwd(const Acts& a, int64_t V, const float* dlogp, float* dlogits);

// SFT: forward, masked mean cross-entropy, backward (scaled by grad_scale) in one call.
struct StepIn {
  int64_t R = 0;
  const int32_t* tokens = nullptr;     // (R)
  const int32_t* positions = nullptr;  // (R)
  const int32_t* labels = nullptr;     // (R) target of each row (the next token), < 0 = ignored
  std::vector<int64_t> seq_off;        // (S+1) row offsets of the packed sequences
  bool backward = true;
  float grad_scale = 1.0f;             // gradients of grad_scale · mean loss (1/accumulation steps)
  uint64_t seed = 0;                   // LoRA dropout masks
};
struct StepOut {
  double loss = 0.0;       // mean CE over counted rows
  int64_t counted = 0;     // rows with a label
  std::vector<float> logits;  // (R, V) when want_logits
};

void step(Model& m, const StepIn& in, StepOut& out, bool want_logits);

}  // namespace loom::train::llama
