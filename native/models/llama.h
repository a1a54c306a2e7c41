// Llama-family decoder (Llama 2/3, Qwen2, Mistral, SmolLM) run entirely natively over a paged KV
// cache. One call of llama_step() is one scheduler step: a batch of sequences, each contributing
// n >= 1 new tokens at given positions (prefill chunks mixed with single decode tokens), through
// every layer, returning logits (or final hidden states) only for the rows asked for.
//
// Shapes (T = new tokens in the step, D = hidden, Hq/Hkv heads, Dh head dim, F = FFN size):
//   x (T, D) residual stream
//   per layer: xn = rmsnorm(x)·w ; qkv (T, (Hq+2Hkv)·Dh) = xn·Wqkvᵀ + b ; rope(q, k) ; K/V -> cache
//              attn (T, Hq·Dh) = softmax(q·Kᵀ/√Dh, causal over the sequence's cache) · V
//              x += attn·Woᵀ ; xn = rmsnorm(x) ; gu (T, 2F) = xn·[Wg;Wu]ᵀ ; x += (silu(g)·u)·Wdᵀ
//   out rows: rmsnorm(x[r]) · Wlmᵀ  (V logits), or the normed hidden state (D) for embeddings.
// LoRA (PEFT): y += s·(x·Aᵀ)·Bᵀ on q,k,v,o,gate,up,down, chosen per sequence.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>
#include "loom/core.h"
#include "loom/gemm.h"
#include "loom/ops.h"
#include "loom/quant.h"

namespace loom::llama {

struct Config {
  int64_t vocab = 0, hidden = 0, inter = 0, layers = 0, n_heads = 0, n_kv_heads = 0, head_dim = 0;
  float eps = 1e-6f;
  float rope_theta = 10000.0f;
  RopeScaling rope;
  bool qkv_bias = false;
  int64_t sliding_window = 0;       // > 0: a query at position p sees keys (p - window, p] (Mistral)
  DType weight_dtype = DType::F32;  // F32 or BF16: how linear weights are kept (packed)
};

// Module slots a LoRA adapter can target.
enum LoraModule : int { kQ = 0, kK = 1, kV = 2, kO = 3, kGate = 4, kUp = 5, kDown = 6, kNumModules = 7 };

struct LoraPair {
  int64_t r = 0, in = 0, out = 0;
  float scale = 0.0f;
  // f32, or bf16 (rounded to nearest even at load; half the bytes a decode step reads, fp32 math): one of each pair
  std::vector<float> A;  // (r, in)
  std::vector<float> Bt;  // (r, out): PEFT's lora_B (out, r) transposed, rows contiguous for the axpys
  std::vector<uint16_t> A16, Bt16;
  bool bf16() const { return !A16.empty(); }
};

struct Adapter {
  std::vector<LoraPair> mods;  // layers * kNumModules (r = 0 where absent)
  int64_t max_r = 0;
};

struct Layer {
  std::vector<float> attn_norm, mlp_norm;  // (D)
  PackedWeight* qkv = nullptr;             // ((Hq+2Hkv)·Dh, D)
  std::vector<float> qkv_bias;             // ((Hq+2Hkv)·Dh) or empty
  PackedWeight* o = nullptr;               // (D, Hq·Dh)
  PackedWeight* gate_up = nullptr;         // (2F, D): gate rows then up rows
  PackedWeight* down = nullptr;            // (D, F)
};

// Paged KV storage: per layer, n_blocks blocks of block_size token slots, each slot Hkv·Dh
// elements for K and the same for V. Block ids are assigned by the (TypeScript) block manager.
// dtype is the storage type only: F32, or BF16 (half the bytes per slot: K/V rows are rounded to
// bf16, nearest even, when written, and widened back to f32 by the attention kernels; all math is
// fp32). Element (layer, block, slot, kv head h, d) of K is k[((layer·n_blocks + block)·block_size
// + slot)·Hkv·Dh + h·Dh + d], the same for V.
struct KvCache {
  int64_t layers = 0, n_blocks = 0, block_size = 0, kv_heads = 0, head_dim = 0;
  DType dtype = DType::F32;
  void* k = nullptr;  // float* (F32) or uint16_t* of bf16 bits (BF16)
  void* v = nullptr;
  KvCache(int64_t layers, int64_t n_blocks, int64_t block_size, int64_t kv_heads, int64_t head_dim,
          DType dtype = DType::F32);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;
  int64_t slot_elems() const { return kv_heads * head_dim; }
  size_t elem_bytes() const { return dtype_size(dtype); }
  int64_t slot_index(int64_t layer, int64_t block, int64_t slot) const {
    return ((layer * n_blocks + block) * block_size + slot) * slot_elems();
  }
  // Pointer to slot `slot` of block `block` in `layer`; T is float for F32 caches, uint16_t for BF16.
  template <typename T>
  T* k_at(int64_t layer, int64_t block, int64_t slot) const {
    return static_cast<T*>(k) + slot_index(layer, block, slot);
  }
  template <typename T>
  T* v_at(int64_t layer, int64_t block, int64_t slot) const {
    return static_cast<T*>(v) + slot_index(layer, block, slot);
  }
  size_t bytes() const { return size_t(layers * n_blocks * block_size * slot_elems()) * 2 * elem_bytes(); }
  // Stores one token's K and V rows (Hkv·Dh floats each) in a slot, converted to the cache dtype.
  void write_slot(int64_t layer, int64_t block, int64_t slot, const float* k_row, const float* v_row);
  // Copies the first n_slots slots of block src to block dst in every layer (copy-on-write of a
  // partially filled shared block).
  void copy_block(int64_t src, int64_t dst, int64_t n_slots);
};

// One sequence's part of a step: rows [first_row, first_row + n_tokens) of the batch.
struct SeqSpec {
  int64_t first_row = 0, n_tokens = 0;
  const int32_t* block_table = nullptr;  // block ids covering positions [0, n_table·block_size)
  int64_t n_table = 0;
  const Adapter* adapter = nullptr;
};

struct Batch {
  int64_t T = 0;
  const int32_t* tokens = nullptr;     // (T)
  const int32_t* positions = nullptr;  // (T): absolute position of each new token in its sequence
  std::vector<SeqSpec> seqs;
  const int32_t* out_rows = nullptr;   // rows to return
  int64_t n_out = 0;
  bool hidden = false;                 // return final normed hidden states (D) instead of logits (V)
  int32_t* argmax = nullptr;           // (n_out), optional: each logits row's argmax (loom::argmax), on the pool
  std::vector<int32_t> row_seq;        // (T): sequence index of each row (build_row_map)
  void build_row_map() {
    row_seq.assign(size_t(T), 0);
    for (size_t s = 0; s < seqs.size(); s++)
      for (int64_t i = 0; i < seqs[s].n_tokens; i++) row_seq[size_t(seqs[s].first_row + i)] = int32_t(s);
  }
};

class Model {
 public:
  explicit Model(const Config& c);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const Config& config() const { return cfg_; }
  // Sets one tensor. Names: embed (V,D), lm_head (V,D), norm (D), and per layer i:
  // layers.i.{attn_norm, mlp_norm} (D), layers.i.qkv (q;k;v rows), layers.i.qkv_bias,
  // layers.i.o, layers.i.gate_up (gate;up rows), layers.i.down.
  // src_dtype: F32 / F16 / BF16 raw data of rows x cols, or Q* rows of blocks (kept quantized).
  void set_weight(const std::string& name, DType src_dtype, const void* data, int64_t rows, int64_t cols);
  // A fused weight (qkv, gate_up) from row blocks of different types (a Q4_K_M file's q, k in Q4_K and v in
  // Q6_K): each block packed as set_weight would, the blocks stacked by rows (weight_stack).
  struct Part {
    DType dtype;
    const void* data;
    int64_t rows;
  };
  void set_weight_parts(const std::string& name, const std::vector<Part>& parts, int64_t cols);
  // Throws if a required tensor is missing; ties lm_head to embed when absent.
  void finalize();
  size_t weight_bytes() const;

  // Runs the step; out has n_out·V (or n_out·D with hidden) floats.
  void step(KvCache& kv, const Batch& b, float* out);

 private:
  Config cfg_;
  DType embed_dtype_ = DType::F32;
  void* embed_ = nullptr;  // (V, D) aligned, F32 or BF16, or rows of Q* blocks
  bool embed_shared_ = false;  // tied and block-quantized: the table is lm_head_'s rows (embed_ is null)
  PackedWeight* lm_head_ = nullptr;
  void* layer_weights_ = nullptr;  // the layers' weight data, gathered into one buffer by finalize (weight_gather)
  std::vector<float> norm_;
  std::vector<float> inv_freq_;  // (Dh/2) RoPE frequencies, scaling applied
  std::vector<Layer> layers_;
  bool finalized_ = false;
  std::mutex mu_;
  // step workspace (grown, never shrunk: no per-token allocation in steady state)
  std::vector<float> x_, xn_, qkv_, attn_, gu_, act_, lora_, rows_, scratch_, rope_cs_;
  QuantActs mlp_acts_;  // a grouped decode step's MLP input, quantized by the groups (step)
  int64_t lora_stride_ = 1;  // floats per row of lora_ (the step's largest adapter rank)
  void apply_lora(const Batch& b, int layer, const int* modules, const int64_t* y_off, int n_mod, const float* x,
                  int64_t ldx, float* y, int64_t ldy);
};

// Paged attention for one layer of a step. q (T, Hq, Dh) with row stride ldq; out (T, Hq, Dh)
// packed. Token t of sequence s attends to positions [0, positions[t]] of s's cache.
// scratch: at least threads_get() · paged_attention_scratch_floats(Hq, Hkv, Dh) floats.
void paged_attention(const KvCache& kv, int64_t layer, const Batch& b, int64_t Hq, const float* q, int64_t ldq,
                     float* out, float* scratch, int64_t window = 0);

// Prefill tiles: a sequence's chunk of new tokens is cut into tiles of kAttnQueryTile tokens, and
// keys are visited kAttnKeyChunk at a time (see attn_tile in llama_attn_impl.h).
constexpr int64_t kAttnQueryTile = 16, kAttnKeyChunk = 64;
inline int64_t attn_tile_work_floats(int64_t nq, int64_t G, int64_t Dh) {
  return 2 * Dh * kAttnKeyChunk + nq * G * (Dh + 2 + kAttnKeyChunk) + kAttnKeyChunk + Dh;
}
// Scratch floats per thread that paged_attention needs: a decode token's running max and sum (2·Hq), or
// attn_tile's work.
inline int64_t paged_attention_scratch_floats(int64_t Hq, int64_t Hkv, int64_t Dh) {
  const int64_t a = 2 * Hq, b = attn_tile_work_floats(kAttnQueryTile, Hq / Hkv, Dh);
  return a > b ? a : b;
}

#define LOOM_LLAMA_ATTN_DECLS                                                                                  \
  void attn_decode(const KvCache& kv, int64_t layer, const int32_t* table, int64_t k0, int64_t k1,          \
                   int64_t h0, int64_t nh, int64_t G, const float* q, int64_t Dh, float scale, float* o,     \
                   float* m, float* l);                                                                       \
  void attn_tile(const KvCache& kv, int64_t layer, const int32_t* table, int64_t pos0, int64_t nq,             \
                 int64_t window, int64_t kvh, int64_t G, const float* q, int64_t ldq, int64_t Dh, float scale, \
                 float* out, int64_t ldo, float* work);
namespace portable { LOOM_LLAMA_ATTN_DECLS }
namespace avx2 { LOOM_LLAMA_ATTN_DECLS }
namespace avx512 { LOOM_LLAMA_ATTN_DECLS }
#undef LOOM_LLAMA_ATTN_DECLS

}  // namespace loom::llama
