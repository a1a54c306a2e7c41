// Neural-network ops, each with a forward and a backward (llm.c style: plain loops, shapes in
// comments). All tensors are row-major fp32 unless stated. Backward functions ACCUMULATE (+=)
// into parameter gradients (dw, db, dtable, dA, dB) and WRITE (=) input gradients (dx) unless
// stated. Every op dispatches at run time (portable / AVX2 / AVX-512) and is parallel over rows.
#pragma once
#include <cstdint>
#include "loom/core.h"

namespace loom {

// ---------------------------------------------------------------------------------------------
// Elementwise (n elements; y may alias an input)
// ---------------------------------------------------------------------------------------------
void add_fwd(int64_t n, const float* a, const float* b, float* y);   // y = a + b
void mul_fwd(int64_t n, const float* a, const float* b, float* y);   // y = a * b
void mul_bwd(int64_t n, const float* a, const float* b, const float* dy, float* da, float* db);  // da,db +=
void scale_fwd(int64_t n, const float* x, float s, float* y);        // y = s * x
void axpy(int64_t n, float a, const float* x, float* y);
// y (M rows, ldy apart) += a (M, r) · b (r, N), b f32 or bf16 (widened; a LoRA's scale·x·Aᵀ and Bᵀ): per element the
// r FMAs in order of k that r axpys y[m] += a[m, k]·b[k] make, so the same bits; on the calling thread
void lora_b_rows(int64_t M, int64_t N, int64_t r, const float* a, const float* b, float* y, int64_t ldy);
void lora_b_rows(int64_t M, int64_t N, int64_t r, const float* a, const uint16_t* b, float* y, int64_t ldy);              // y += a * x
// Broadcast bias over rows: x (R, D) += b (D)
void add_bias(int64_t R, int64_t D, float* x, const float* b);
// db (D) += sum over rows of dy (R, D)
void bias_bwd(int64_t R, int64_t D, const float* dy, float* db);

// ---------------------------------------------------------------------------------------------
// Embedding: table (V, D) fp32 / bf16, ids (T) int32 in [0, V), out (T, D)
// ---------------------------------------------------------------------------------------------
void embedding_fwd(int64_t T, int64_t D, const int32_t* ids, DType ttype, const void* table, float* out);
// dtable (V, D) += scatter-add of dout (T, D) by ids (repeated ids accumulate)
void embedding_bwd(int64_t T, int64_t D, const int32_t* ids, const float* dout, float* dtable);
// Word features (fresh GLiNER2 encoders): fids (T, K) int32, each a row of table (R, D) fp32 or -1 (none).
// out (T, D) += Σ_k table[fids[t, k]]
void word_feature_fwd(int64_t T, int64_t D, int64_t K, const int32_t* fids, const float* table, float* out);
// dtable (R, D) += scatter-add of dout (T, D) by every fids[t, k] >= 0
void word_feature_bwd(int64_t T, int64_t D, int64_t K, const int32_t* fids, const float* dout, float* dtable);
// Label bags (fresh GLiNER2 encoders, label_bag): bag (T, K) int32 rows of the word table (V, D), -1 = none; a row
// with n >= 1 entries gets their mean: out[t] += (1/n)·Σ_k table[bag[t, k]] (table fp32 / bf16 / f16, as
// embedding_fwd)
void bag_embedding_fwd(int64_t T, int64_t D, int64_t K, const int32_t* bag, DType ttype, const void* table, float* out);
// dtable (V, D) += (1/n)·dout[t] at every bag[t, k] >= 0 (fp32 table)
void bag_embedding_bwd(int64_t T, int64_t D, int64_t K, const int32_t* bag, const float* dout, float* dtable);

// ---------------------------------------------------------------------------------------------
// Normalization over the last dim: x (R, D)
// ---------------------------------------------------------------------------------------------
// y = (x - mean) * rstd * w + b ; w/b may be null (1/0). mean, rstd (R) saved for backward if non-null.
void layernorm_fwd(int64_t R, int64_t D, const float* x, const float* w, const float* b, float eps, float* y,
                   float* mean, float* rstd);
void layernorm_bwd(int64_t R, int64_t D, const float* x, const float* w, const float* mean, const float* rstd,
                   const float* dy, float* dx, float* dw, float* db);
// y = x * rstd * w, rstd = 1/sqrt(mean(x²) + eps). w may be null. (Llama: w as stored; Gemma-style
// (1+w) is not used by this family.)
void rmsnorm_fwd(int64_t R, int64_t D, const float* x, const float* w, float eps, float* y, float* rstd);
void rmsnorm_bwd(int64_t R, int64_t D, const float* x, const float* w, const float* rstd, const float* dy, float* dx,
                 float* dw);

// ---------------------------------------------------------------------------------------------
// Softmax over the last dim: x, y (R, D); numerically stable (max-subtracted).
// ---------------------------------------------------------------------------------------------
void softmax_fwd(int64_t R, int64_t D, const float* x, float* y);
void softmax_bwd(int64_t R, int64_t D, const float* y, const float* dy, float* dx);  // dx = y*(dy - sum(dy*y))
void log_softmax_fwd(int64_t R, int64_t D, const float* x, float* y);

// ---------------------------------------------------------------------------------------------
// Activations (n elements)
// ---------------------------------------------------------------------------------------------
// GELU: exact erf form (approx=false; DeBERTa "gelu") or tanh form (approx=true; "gelu_new"/"gelu_pytorch_tanh").
void gelu_fwd(int64_t n, const float* x, float* y, bool approx);
void gelu_bwd(int64_t n, const float* x, const float* dy, float* dx, bool approx);
void silu_fwd(int64_t n, const float* x, float* y);
void silu_bwd(int64_t n, const float* x, const float* dy, float* dx);
// SwiGLU: y = silu(gate) * up ; gate, up, y (n)
void swiglu_fwd(int64_t n, const float* gate, const float* up, float* y);
void swiglu_bwd(int64_t n, const float* gate, const float* up, const float* dy, float* dgate, float* dup);

// ---------------------------------------------------------------------------------------------
// Rotary position embedding, rotate-half (GPT-NeoX / Hugging Face Llama) layout:
// for a head vector x of size Dh and pair i in [0, Dh/2): (x[i], x[i+Dh/2]) rotated by pos·inv_freq[i].
// ---------------------------------------------------------------------------------------------
struct RopeScaling {
  int type = 0;                  // 0 none ("default"), 1 llama3, 2 linear
  float factor = 1.0f;           // llama3 / linear
  float low_freq_factor = 1.0f;  // llama3
  float high_freq_factor = 4.0f; // llama3
  int original_max_position = 8192;  // llama3 original_max_position_embeddings
};
// inv_freq (Dh/2) = theta^(-2i/Dh), then adjusted by the scaling rule (llama3: wavelengths above
// original/low_freq_factor are divided by factor, below original/high_freq_factor unchanged,
// smoothly interpolated in between; linear: all divided by factor).
void rope_inv_freq(int64_t Dh, float theta, const RopeScaling& scaling, float* inv_freq);
// x (T, H, Dh) with row stride `ld` between consecutive t (elements; >= H*Dh), rotated in place
// by positions pos (T).
void rope_fwd(int64_t T, int64_t H, int64_t Dh, int64_t ld, const int32_t* pos, const float* inv_freq, float* x);
// Backward = rotation by the negative angle, in place on the gradient.
void rope_bwd(int64_t T, int64_t H, int64_t Dh, int64_t ld, const int32_t* pos, const float* inv_freq, float* dx);
// rope_fwd in two halves, for a graph that rotates several tensors at the same positions (a decoder's layers): the
// cos / sin of every token's angles once, cs (T, Dh): Dh/2 cos then Dh/2 sin per token, then the rotations by them
// (the same values as rope_fwd)
void rope_table(int64_t T, int64_t Dh, const int32_t* pos, const float* inv_freq, float* cs);
void rope_fwd_table(int64_t T, int64_t H, int64_t Dh, int64_t ld, const float* cs, float* x);

// ---------------------------------------------------------------------------------------------
// Attention (tiled, online softmax: O(Tk) extra memory per query row, never the (Tq, Tk) matrix)
// ---------------------------------------------------------------------------------------------
// q (B, Tq, Hq, Dh), k/v (B, Tk, Hkv, Dh), out (B, Tq, Hq, Dh); each may have its own row stride
// (elements between consecutive t; default Hq*Dh / Hkv*Dh when 0). GQA: head h reads kv head
// h / (Hq/Hkv).
// causal: query i may see key j iff j <= i + q_offset (q_offset = Tk - Tq for a KV-cached suffix).
// key_mask (B, Tk) uint8, 1 = attend, 0 = padding; null = all.
// bias: additive scores (DeBERTa's c2p + p2c terms), element [b,h,i,j] at
//   bias[b*bias_sb + h*bias_sh + i*bias_si + j]; null = none. Added after scaling.
struct AttnParams {
  int64_t B = 1, Tq = 0, Tk = 0, Hq = 1, Hkv = 1, Dh = 0;
  int64_t ldq = 0, ldk = 0, ldv = 0, ldo = 0;  // row strides; 0 = packed
  float scale = 0.0f;                          // 0 = 1/sqrt(Dh)
  bool causal = false;
  int64_t q_offset = 0;
  const uint8_t* key_mask = nullptr;
  const float* bias = nullptr;
  int64_t bias_sb = 0, bias_sh = 0, bias_si = 0;
};
// lse (B, Hq, Tq): log-sum-exp of each query's scaled scores, saved for backward if non-null.
// Rows whose keys are all masked produce zeros.
void attention_fwd(const AttnParams& p, const float* q, const float* k, const float* v, float* out, float* lse);
// Gradients: dq (like q) written; dk, dv (like k, v) written; dbias (like bias, same strides)
// written if non-null. Uses lse from the forward to recompute probabilities tile by tile.
void attention_bwd(const AttnParams& p, const float* q, const float* k, const float* v, const float* out,
                   const float* lse, const float* dout, float* dq, float* dk, float* dv, float* dbias);

// ---------------------------------------------------------------------------------------------
// Cross-entropy: logits (T, V), labels (T) int32; label < 0 (e.g. -100) is ignored.
// Returns the mean loss over non-ignored rows (0 if none). If dlogits is non-null it is written
// with the gradient of that mean: (softmax - onehot) / count, zero rows for ignored labels.
// losses (T), if non-null, gets each row's loss (0 for ignored).
// ---------------------------------------------------------------------------------------------
float cross_entropy_fwd_bwd(int64_t T, int64_t V, const float* logits, const int32_t* labels, float* dlogits,
                            float* losses);

// Per-row log-probabilities of targets (the policy-gradient / preference losses' input):
//   logprob_fwd: logp (T) = log softmax(logits[t])[labels[t]], 0 for label < 0.
//   logprob_bwd: dlogits (T, V) = dlogp[t] · (onehot(labels[t]) − softmax(logits[t])), zero rows for
//   label < 0 (written, not accumulated). dlogits must not alias logits.
void logprob_fwd(int64_t T, int64_t V, const float* logits, const int32_t* labels, float* logp);
void logprob_bwd(int64_t T, int64_t V, const float* logits, const int32_t* labels, const float* dlogp, float* dlogits);

// ---------------------------------------------------------------------------------------------
// AdamW (decoupled weight decay, PyTorch semantics), step >= 1:
//   m = b1 m + (1-b1) g ; v = b2 v + (1-b2) g² ; p -= lr * wd * p ;
//   p -= lr * (m / (1-b1^step)) / (sqrt(v / (1-b2^step)) + eps)
// The hyper-parameters are double, as Python floats are in PyTorch: 1-b2 computed from a float
// 0.999f would be off by 5e-5 relative; scalars are rounded to float once, as PyTorch does.
// gscale: g is read as g·gscale (one fp32 product, as a clip_grad_norm_ that scaled g in place before the step
// rounds it), so a clipped step needs no pass of its own over the gradients; g itself is left as it is.
// ---------------------------------------------------------------------------------------------
void adamw_step(int64_t n, float* p, const float* g, float* m, float* v, double lr, double b1, double b2, double eps,
                double wd, int64_t step, float gscale = 1.0f);
// Global gradient-norm clipping helper: returns the L2 norm of g (n).
float l2_norm(int64_t n, const float* g);
// Greedy sampling: the index of the first largest of x (n) as a scan with `>` finds it (NaN never larger, lowest
// index on ties), -1 when no value is above -inf. Single-threaded (one row of logits).
int64_t argmax(int64_t n, const float* x);

// ---------------------------------------------------------------------------------------------
// LoRA linear: y (M, N) = x (M, K) · Wᵀ + bias + s · (x · Aᵀ) · Bᵀ
//   W (N, K) frozen (dtype wtype), A (r, K), B (N, r), s = alpha / r.
// xa (M, r) receives x·Aᵀ (kept for backward).
// ---------------------------------------------------------------------------------------------
void lora_fwd(int64_t M, int64_t N, int64_t K, int64_t r, const float* x, DType wtype, const void* w,
              const float* bias, const float* A, const float* B, float s, float* xa, float* y);
// Given dy (M, N): dA (r, K) +=, dB (N, r) +=, dx (M, K) = (written if non-null) through W and the
// adapter. W and bias get no gradient.
void lora_bwd(int64_t M, int64_t N, int64_t K, int64_t r, const float* x, DType wtype, const void* w, const float* A,
              const float* B, float s, const float* xa, const float* dy, float* dx, float* dA, float* dB);

}  // namespace loom
