// Training building blocks shared by the native training graphs (encoder_train.cc, llama_train.cc).
//
// llm.c style: every trainable tensor is a Param (fp32 value, gradient, AdamW moments) owned by a
// ParamStore under its checkpoint name; a graph holds raw pointers to its Params and writes its own
// forward (keeping activations) and backward by hand. TLinear is the one layer type with a
// parameter gradient that needs care: y = x·Wᵀ + b + s·(drop(x)·Aᵀ)·Bᵀ, W trainable (full) or
// frozen (LoRA, f32 or bf16 storage), A/B present only where a LoRA target matched.
#pragma once
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>
#include "loom/core.h"
#include "loom/gemm.h"
#include "loom/ops.h"

namespace loom::train {

// Deterministic RNG (splitmix64): dropout masks and negative dropping are reproducible from a seed. The seed goes
// through the mixer first: splitmix64's state advances by a constant, so a state linear in the seed made the streams
// of seeds s and s + 1 one sequence shifted by one draw (a training step's seed is the previous step's + 131).
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(mix(seed + 0x632BE59BD9B4E019ull)) {}
  static uint64_t mix(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint64_t next() { return mix(s += 0x9E3779B97F4A7C15ull); }
  float uniform() { return float(next() >> 40) * (1.0f / 16777216.0f); }  // [0, 1)
};

// Dropout masks (the encoder's hidden and attention dropout, LoRA's input dropout). keep[0 .. n) = 1 with probability
// 1 − p (to 2^-16), 0 else: four 16-bit fields of each draw of r (one draw per value, its mix two 64-bit multiplies,
// was most of a tiny model's dropout time).
void keep_mask(Rng& r, float p, int64_t n, uint8_t* keep);
// y (n) = x ⊙ keep · s, branch-free so that it vectorizes (a select per value ran scalar); x == y allowed
void mask_scale(int64_t n, const uint8_t* keep, float s, const float* x, float* y);

struct Param {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> w, g, m, v;  // m, v allocated on the first optimizer step
  std::vector<float> ema;         // exponential moving average of w (ParamStore::ema_update); empty when off
  int group = 0;                  // learning-rate group (0: encoder / LoRA, 1: heads)
  bool trainable = true;
  int64_t numel() const { return int64_t(w.size()); }
};

class ParamStore {
 public:
  Param* add(const std::string& name, std::vector<int64_t> shape, const float* init, int group, bool trainable);
  Param* find(const std::string& name) const;
  Param* need(const std::string& name) const;  // throws naming the tensor
  const std::vector<std::unique_ptr<Param>>& list() const { return list_; }
  void zero_grad();
  // Global L2 norm of the trainable gradients (double accumulation).
  double grad_norm() const;
  // Clips to max_norm (if > 0) and applies AdamW with lr[group]; step >= 1. Returns the pre-clip norm.
  double optimizer_step(const double* lr, int n_groups, double wd, double b1, double b2, double eps, double max_norm,
                        int64_t step);
  // Polyak averaging of the trainable weights: ema = decay·ema + (1 − decay)·w, started at w on the first call.
  void ema_update(double decay);
  // Exchanges w and ema of every parameter that has an average (evaluate or save the average, then swap back).
  // Returns whether any had one.
  bool ema_swap();

 private:
  std::vector<std::unique_ptr<Param>> list_;
  std::unordered_map<std::string, Param*> by_name_;
};

struct Lora {
  Param* A = nullptr;  // (r, K)
  Param* B = nullptr;  // (N, r)
  int64_t r = 0;
  float s = 0.0f;      // alpha / r
  float dropout = 0.0f;
};

// What TLinear::bwd needs from its forward.
struct LinActs {
  std::vector<float> xa;  // (M, r) drop(x)·Aᵀ
  std::vector<float> xd;      // (M, K) drop(x) (only with dropout > 0)
  std::vector<uint8_t> keep; // (M, K) dropout mask (only with dropout > 0)
};

// Products in a graph's compute precision: fp32 (sgemm, linear_f32), or bf16 (precision bf16: operands rounded to
// bf16, fp32 accumulation; sgemm_bf16_compute). Master weights, gradients and optimizer state are fp32 either way.
inline void sgemm_as(bool bf16, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                     int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (bf16) sgemm_bf16_compute(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  else sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
// y (M, N) = x (M, K)·Wᵀ + bias, W (N, K) fp32
inline void linear_as(bool bf16, int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const float* w,
                      int64_t ldw, const float* bias, float* y, int64_t ldy) {
  if (bf16) sgemm_bf16_compute(false, true, M, N, K, 1.0f, x, ldx, w, ldw, 0.0f, y, ldy, bias);
  else linear_f32(M, N, K, x, ldx, w, ldw, bias, y, ldy, 0.0f);
}

struct TLinear {
  int64_t N = 0, K = 0;
  bool bf16 = false;            // the products with W (or wbf) in bf16 compute (LoRA's rank-r products stay fp32)
  Param* W = nullptr;           // (N, K) fp32 (trainable or frozen)
  const uint16_t* wbf = nullptr;  // frozen bf16 weights instead of W (decoder base), or with bf16 a bf16 copy of W
                                  // that the graph refreshes each step (encoder count head); dW still goes to W
  Param* b = nullptr;           // (N) or null
  Lora lora;
  bool has_lora() const { return lora.r > 0; }
  // y (M, N) = x (M, K)·Wᵀ + b + s·(drop(x)·Aᵀ)·Bᵀ ; acts may be null (no backward).
  void fwd(int64_t M, const float* x, float* y, LinActs* acts, Rng* rng) const;
  // Given dy (M, N): dW, db (if trainable), dA, dB accumulate; dx (M, K) written (or added with
  // accumulate_dx) if non-null. dw false: no dW here (the caller forms dyᵀ·x over the rows of several calls).
  void bwd(int64_t M, const float* x, const float* dy, float* dx, const LinActs* acts, bool accumulate_dx,
           bool dw = true) const;
  // W.g += dyᵀ·x over M rows (bwd's dW; callers that gather rows over several calls form it once)
  void dw_add(int64_t M, const float* x, const float* dy) const;
};

// g (n) = (h > 0) ⊙ g in place: a ReLU's backward from its output h. Branch-free, so that it vectorizes (the sign
// is a coin flip per value, and a branch mispredicts half the time).
void relu_bwd(int64_t n, const float* h, float* g);

// Linear → ReLU → Linear, with activations kept for backward.
struct Mlp2 {
  TLinear a, b;
  struct Acts {
    LinActs la, lb;
    std::vector<float> x, h;  // input copy, ReLU output
    std::vector<float> dh;    // bwd's gradient of h (kept with the rest: a graph may keep its Acts between steps)
  };
  void fwd(int64_t M, const float* x, float* y, Acts* acts, Rng* rng) const;
  // dw false: a.W's and b.W's dW left to the caller (acts.x, acts.h and acts.dh hold the rows it needs)
  void bwd(int64_t M, const float* dy, float* dx, Acts& acts, bool accumulate_dx, bool dw = true) const;
};

inline float sigmoidf(float x) { return 1.0f / (1.0f + std::exp(-x)); }
// BCE with logits, numerically stable; returns loss, writes dloss/dz.
inline float bce_logits(float z, float y, float* dz) {
  if (dz) *dz = sigmoidf(z) - y;
  return std::max(z, 0.0f) - z * y + std::log1p(std::exp(-std::fabs(z)));
}

// Softmax cross-entropy of M logits against the target distribution y / Σy (y: multi-hot, Σy > 0);
// returns the loss, writes dloss/dz = softmax(z) - y / Σy.
// z, y, dz: (M)
inline float softmax_ce_logits(int64_t M, const float* z, const float* y, float* dz) {
  float zmax = z[0], ysum = 0;
  for (int64_t m = 0; m < M; m++) zmax = std::max(zmax, z[m]), ysum += y[m];
  double se = 0;
  for (int64_t m = 0; m < M; m++) se += std::exp(double(z[m] - zmax));
  const double lse = double(zmax) + std::log(se);
  double loss = 0;
  for (int64_t m = 0; m < M; m++) {
    const double t = y[m] / ysum;
    loss -= t * (double(z[m]) - lse);
    dz[m] = float(std::exp(double(z[m]) - lse) - t);
  }
  return float(loss);
}

}  // namespace loom::train
