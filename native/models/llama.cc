// Llama-family decoder forward over a paged KV cache (see llama.h for shapes).
#include "llama.h"
#include "loom/quant.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <vector>

#include "../ops/ops_table.h"

namespace loom::llama {

namespace portable {
#include "llama_attn_impl.h"
}  // namespace portable

static void attn_decode_dispatch(const KvCache& kv, int64_t layer, const int32_t* table, int64_t k0, int64_t k1,
                                 int64_t h0, int64_t nh, int64_t G, const float* q, int64_t Dh, float scale, float* o,
                                 float* m, float* l) {
  switch (isa_active()) {
    case Isa::Avx512: return avx512::attn_decode(kv, layer, table, k0, k1, h0, nh, G, q, Dh, scale, o, m, l);
    case Isa::Avx2: return avx2::attn_decode(kv, layer, table, k0, k1, h0, nh, G, q, Dh, scale, o, m, l);
    default: return portable::attn_decode(kv, layer, table, k0, k1, h0, nh, G, q, Dh, scale, o, m, l);
  }
}

static void attn_tile_dispatch(const KvCache& kv, int64_t layer, const int32_t* table, int64_t pos0, int64_t nq,
                               int64_t window, int64_t kvh, int64_t G, const float* q, int64_t ldq, int64_t Dh,
                               float scale, float* out, int64_t ldo, float* work) {
  switch (isa_active()) {
    case Isa::Avx512: return avx512::attn_tile(kv, layer, table, pos0, nq, window, kvh, G, q, ldq, Dh, scale, out, ldo, work);
    case Isa::Avx2: return avx2::attn_tile(kv, layer, table, pos0, nq, window, kvh, G, q, ldq, Dh, scale, out, ldo, work);
    default: return portable::attn_tile(kv, layer, table, pos0, nq, window, kvh, G, q, ldq, Dh, scale, out, ldo, work);
  }
}

// ---------------------------------------------------------------------------------------------
// KV cache
// ---------------------------------------------------------------------------------------------
KvCache::KvCache(int64_t layers_, int64_t n_blocks_, int64_t block_size_, int64_t kv_heads_, int64_t head_dim_,
                 DType dtype_)
    : layers(layers_), n_blocks(n_blocks_), block_size(block_size_), kv_heads(kv_heads_), head_dim(head_dim_),
      dtype(dtype_) {
  if (layers <= 0 || n_blocks <= 0 || block_size <= 0 || kv_heads <= 0 || head_dim <= 0)
    throw std::invalid_argument("kv cache: all dimensions must be positive");
  if (dtype != DType::F32 && dtype != DType::BF16) throw std::invalid_argument("kv cache: dtype must be f32 or bf16");
  size_t half = bytes() / 2;
  k = aligned_malloc(half);
  v = aligned_malloc(half);
  if (!k || !v) {
    aligned_free(k);
    aligned_free(v);
    throw std::bad_alloc();
  }
}

KvCache::~KvCache() {
  aligned_free(k);
  aligned_free(v);
}

void KvCache::write_slot(int64_t layer, int64_t block, int64_t slot, const float* k_row, const float* v_row) {
  const int64_t n = slot_elems();
  if (dtype == DType::BF16) {
    convert_f32_to_bf16(n, k_row, k_at<uint16_t>(layer, block, slot));  // round to nearest even
    convert_f32_to_bf16(n, v_row, v_at<uint16_t>(layer, block, slot));
  } else {
    std::memcpy(k_at<float>(layer, block, slot), k_row, size_t(n) * sizeof(float));
    std::memcpy(v_at<float>(layer, block, slot), v_row, size_t(n) * sizeof(float));
  }
}

void KvCache::copy_block(int64_t src, int64_t dst, int64_t n_slots) {
  if (src < 0 || src >= n_blocks || dst < 0 || dst >= n_blocks) throw std::out_of_range("kv cache: block id out of range");
  n_slots = std::min(n_slots, block_size);
  if (n_slots <= 0) return;
  // stored bits are copied as they are (bf16 stays bf16: a copy reads back exactly like its source)
  const size_t nbytes = size_t(n_slots * slot_elems()) * elem_bytes();
  char* kc = static_cast<char*>(k);
  char* vc = static_cast<char*>(v);
  for (int64_t l = 0; l < layers; l++) {
    const size_t s = size_t(slot_index(l, src, 0)) * elem_bytes(), d = size_t(slot_index(l, dst, 0)) * elem_bytes();
    std::memcpy(kc + d, kc + s, nbytes);
    std::memcpy(vc + d, vc + s, nbytes);
  }
}

// ---------------------------------------------------------------------------------------------
// Paged attention: work items are a prefill tile and one KV head (its G query heads), or a decode token and
// all its heads (attn_decode reads a key's slot whole) over its context or a part of it.
// ---------------------------------------------------------------------------------------------
// A decode token whose context is long and whose step has few work items (one or a few sequences) is split
// into parts of at least kDecodeMinPart keys so that every thread gets work (flash-decoding); the parts'
// partial softmax results are merged after the parallel loop.
static constexpr int64_t kDecodeMinPart = 32;

// Prefetch the K and V rows of KV heads [h0, h0 + nh) in the first cache block of keys [k0, k1): the decode kernel
// prefetches each next chunk as it goes, so the first one of every item was read cold (issued here one item ahead)
static void kv_prefetch_first_block(const KvCache& kv, int64_t layer, const int32_t* table, int64_t k0, int64_t k1,
                                    int64_t h0, int64_t nh) {
  const int64_t bs = kv.block_size, eb = int64_t(kv.elem_bytes()), row = nh * kv.head_dim * eb;
  const int64_t j1 = std::min(k1, (k0 / bs + 1) * bs);
  for (int64_t j = k0; j < j1; j++) {
    const int64_t off = (kv.slot_index(layer, table[j / bs], j % bs) + h0 * kv.head_dim) * eb;
    for (int64_t b = 0; b < row; b += 64) {
      __builtin_prefetch(static_cast<const char*>(kv.k) + off + b);
      __builtin_prefetch(static_cast<const char*>(kv.v) + off + b);
    }
  }
}
static constexpr int64_t kAttnSerialMacs = 1 << 16;

void paged_attention(const KvCache& kv, int64_t layer, const Batch& b, int64_t Hq, const float* q, int64_t ldq,
                     float* out, float* scratch, int64_t window) {
  const int64_t Hkv = kv.kv_heads, Dh = kv.head_dim, G = Hq / Hkv;
  const float scale = 1.0f / std::sqrt(float(Dh));
  const int64_t per_thread = paged_attention_scratch_floats(Hq, Hkv, Dh);
  const int nth_max = std::max(1, threads_get());
  // Work items: (first row, rows, first KV head, KV heads, key range, part slot). Runs of consecutive positions of
  // one sequence (prefill chunks) become tiles of up to kAttnQueryTile tokens that share each key/value load, one
  // item per KV head; single tokens (decode) use attn_decode over [k0, k1) for all heads, whole or in parts.
  struct Item {
    int64_t t0, nq, h0, nh, k0, k1, part;  // part: partial-result slot, -1 when the item is the whole context
  };
  struct Split {
    int64_t t0, first, n;  // parts [first, first + n) of one decode token
  };
  struct Run {
    int64_t t0, nq;
  };
  std::vector<Run> runs;
  for (const SeqSpec& s : b.seqs) {
    int64_t i = 0;
    while (i < s.n_tokens) {
      const int64_t t0 = s.first_row + i;
      int64_t nq = 1;
      while (nq < kAttnQueryTile && i + nq < s.n_tokens && b.positions[t0 + nq] == b.positions[t0] + nq) nq++;
      runs.push_back({t0, nq});
      i += nq;
    }
  }
  // parts per long decode context: enough items for ~4 per thread
  int64_t base_items = 0;
  for (const Run& r : runs) base_items += r.nq > 1 ? Hkv : 1;
  const int64_t want = (4 * nth_max + base_items - 1) / base_items;
  std::vector<Item> items;
  std::vector<Split> splits;
  items.reserve(size_t(base_items));
  int64_t n_parts = 0;
  for (const Run& r : runs) {
    if (r.nq > 1) {
      for (int64_t h = 0; h < Hkv; h++) items.push_back({r.t0, r.nq, h, 1, 0, 0, -1});
      continue;
    }
    const int64_t ctx = b.positions[r.t0] + 1, start = window > 0 ? std::max<int64_t>(0, ctx - window) : 0;
    const int64_t P = std::max<int64_t>(1, std::min(want, (ctx - start) / kDecodeMinPart));
    if (P == 1) {
      items.push_back({r.t0, 1, 0, Hkv, start, ctx, -1});
      continue;
    }
    splits.push_back({r.t0, n_parts, P});
    for (int64_t p = 0; p < P; p++)
      items.push_back(
          {r.t0, 1, 0, Hkv, start + (ctx - start) * p / P, start + (ctx - start) * (p + 1) / P, n_parts + p});
    n_parts += P;
  }
  const int64_t part_floats = Hq * (Dh + 2);  // o (Hq, Dh), m (Hq), l (Hq)
  std::vector<float> parts(size_t(n_parts * part_floats));
  const int32_t* row_seq = b.row_seq.data();  // row -> sequence index
  const int64_t n_items = int64_t(items.size());
  // single tokens over short contexts on the calling thread: below about kAttnSerialMacs products (q·k and p·v) the
  // wait on the pool costs more than splitting saves
  int64_t macs = 0;
  for (const Item& w : items) macs += w.nq > 1 ? kAttnSerialMacs : (w.k1 - w.k0) * Hq * Dh * 2;
  const int nth = macs < kAttnSerialMacs ? 1 : std::max(1, std::min<int>(nth_max, int(n_items)));
  // the items from a shared counter: a thread that loses its core (other processes on the cores) leaves its items to
  // the others instead of holding up the step (a static interleave had the caller wait for it: SmolLM2-135M Q4_K_M
  // decode, 2 threads beside two other processes, 27 % of the samples in that wait)
  std::atomic<int64_t> next{0};
  pool_run_dynamic(nth, [&](int tid, int) {
    float* work = scratch + int64_t(tid) * per_thread;
    for (int64_t it = next.fetch_add(1, std::memory_order_relaxed); it < n_items;
         it = next.fetch_add(1, std::memory_order_relaxed)) {
      const Item& w = items[size_t(it)];
      const SeqSpec& sq = b.seqs[size_t(row_seq[w.t0])];
      if (it + 1 < n_items && items[size_t(it + 1)].nq == 1) {  // the next decode item (this thread's on 1 thread)
        const Item& nx = items[size_t(it + 1)];
        kv_prefetch_first_block(kv, layer, b.seqs[size_t(row_seq[nx.t0])].block_table, nx.k0, nx.k1, nx.h0, nx.nh);
      }
      const int64_t pos0 = b.positions[w.t0];
      const float* qp = q + w.t0 * ldq + w.h0 * G * Dh;
      float* op = out + w.t0 * Hq * Dh + w.h0 * G * Dh;
      if (w.nq > 1) {
        attn_tile_dispatch(kv, layer, sq.block_table, pos0, w.nq, window, w.h0, G, qp, ldq, Dh, scale, op, Hq * Dh,
                           work);
      } else if (w.part >= 0) {
        float* pp = parts.data() + w.part * part_floats;
        attn_decode_dispatch(kv, layer, sq.block_table, w.k0, w.k1, w.h0, w.nh, G, qp, Dh, scale, pp, pp + Hq * Dh,
                             pp + Hq * Dh + Hq);
      } else {
        const int64_t H = w.nh * G;
        float *m = work, *l = work + H;
        attn_decode_dispatch(kv, layer, sq.block_table, w.k0, w.k1, w.h0, w.nh, G, qp, Dh, scale, op, m, l);
        for (int64_t g = 0; g < H; g++) {
          const float inv = 1.0f / l[g];
          for (int64_t d = 0; d < Dh; d++) op[g * Dh + d] *= inv;
        }
      }
    }
  });
  // merge the parts: out_g = Σ_p e^(m_p - M) o_p / Σ_p e^(m_p - M) l_p,  M = max_p m_p
  for (const Split& sp : splits) {
    float* op = out + sp.t0 * Hq * Dh;
    for (int64_t g = 0; g < Hq; g++) {
      float M = -std::numeric_limits<float>::infinity();
      for (int64_t p = 0; p < sp.n; p++) M = std::max(M, parts[size_t((sp.first + p) * part_floats + Hq * Dh + g)]);
      float den = 0.0f;
      for (int64_t d = 0; d < Dh; d++) op[g * Dh + d] = 0.0f;
      for (int64_t p = 0; p < sp.n; p++) {
        const float* pp = parts.data() + (sp.first + p) * part_floats;
        const float w = std::exp(pp[Hq * Dh + g] - M);
        den += w * pp[Hq * Dh + Hq + g];
        for (int64_t d = 0; d < Dh; d++) op[g * Dh + d] += w * pp[g * Dh + d];
      }
      const float inv = 1.0f / den;
      for (int64_t d = 0; d < Dh; d++) op[g * Dh + d] *= inv;
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Model
// ---------------------------------------------------------------------------------------------
Model::Model(const Config& c) : cfg_(c) {
  if (c.vocab <= 0 || c.hidden <= 0 || c.inter <= 0 || c.layers <= 0 || c.n_heads <= 0 || c.n_kv_heads <= 0 ||
      c.head_dim <= 0)
    throw std::invalid_argument("llama: config dimensions must be positive");
  if (c.n_heads % c.n_kv_heads != 0) throw std::invalid_argument("llama: num_attention_heads must be a multiple of num_key_value_heads");
  if (c.head_dim % 2 != 0) throw std::invalid_argument("llama: head_dim must be even");
  if (c.weight_dtype != DType::F32 && c.weight_dtype != DType::BF16)
    throw std::invalid_argument("llama: weight dtype must be f32 or bf16");
  layers_.resize(size_t(c.layers));
  inv_freq_.resize(size_t(c.head_dim / 2));
  rope_inv_freq(c.head_dim, c.rope_theta, c.rope, inv_freq_.data());
}

Model::~Model() {
  aligned_free(embed_);
  if (lm_head_) weight_free(lm_head_);
  for (auto& l : layers_) {
    for (PackedWeight* p : {l.qkv, l.o, l.gate_up, l.down})
      if (p) weight_free(p);
  }
  aligned_free(layer_weights_);
}

static std::vector<float> to_f32(DType t, const void* data, int64_t n) {
  std::vector<float> out(static_cast<size_t>(n));
  switch (t) {
    case DType::F32: std::memcpy(out.data(), data, size_t(n) * 4); break;
    case DType::BF16: convert_bf16_to_f32(n, static_cast<const uint16_t*>(data), out.data()); break;
    case DType::F16: convert_f16_to_f32(n, static_cast<const uint16_t*>(data), out.data()); break;
    default: throw std::invalid_argument("llama: unsupported weight dtype");
  }
  return out;
}

// Packs a (rows, cols) matrix in the model's weight dtype: bf16 stays bf16 when the model keeps
// bf16; the Q* block types are kept as they are (loom/quant.h); anything else is widened to f32
// (and rounded to bf16 when the model keeps bf16).
static PackedWeight* pack(DType keep, DType src, const void* data, int64_t rows, int64_t cols) {
  if (quant_supported(src)) return weight_pack(src, rows, cols, data, cols);  // Q* types stay block-quantized
  if (keep == DType::BF16 && src == DType::BF16) return weight_pack(DType::BF16, rows, cols, data, cols);
  if (keep == DType::F32 && src == DType::F32) return weight_pack(DType::F32, rows, cols, data, cols);
  std::vector<float> f = to_f32(src, data, rows * cols);
  if (keep == DType::F32) return weight_pack(DType::F32, rows, cols, f.data(), cols);
  std::vector<uint16_t> h(f.size());
  convert_f32_to_bf16(int64_t(f.size()), f.data(), h.data());
  return weight_pack(DType::BF16, rows, cols, h.data(), cols);
}

void Model::set_weight(const std::string& name, DType src, const void* data, int64_t rows, int64_t cols) {
  const Config& c = cfg_;
  const int64_t D = c.hidden, F = c.inter, Dh = c.head_dim, Hq = c.n_heads, Hkv = c.n_kv_heads;
  const int64_t Nqkv = (Hq + 2 * Hkv) * Dh;
  auto expect = [&](int64_t r, int64_t k) {
    if (rows != r || cols != k)
      throw std::invalid_argument("llama: tensor " + name + " has shape (" + std::to_string(rows) + ", " +
                                  std::to_string(cols) + "), expected (" + std::to_string(r) + ", " +
                                  std::to_string(k) + ")");
  };
  auto vec = [&](std::vector<float>& dst, int64_t n) {
    expect(1, n);
    dst = to_f32(src, data, n);
  };
  auto packed = [&](PackedWeight*& dst, int64_t r, int64_t k) {
    expect(r, k);
    if (dst) weight_free(dst);
    dst = pack(c.weight_dtype, src, data, r, k);
  };
  if (name == "embed") {
    expect(c.vocab, D);
    aligned_free(embed_);
    embed_ = nullptr;
    if (quant_supported(src)) {  // kept as blocks: rows are dequantized when looked up
      embed_dtype_ = src;
      const size_t n = size_t(c.vocab) * quant_row_bytes(src, D);
      embed_ = aligned_malloc(n);
      std::memcpy(embed_, data, n);
    } else if (c.weight_dtype == DType::BF16 && src == DType::BF16) {
      embed_dtype_ = DType::BF16;
      embed_ = aligned_malloc(size_t(c.vocab * D) * 2);
      std::memcpy(embed_, data, size_t(c.vocab * D) * 2);
    } else {
      std::vector<float> f = to_f32(src, data, c.vocab * D);
      if (c.weight_dtype == DType::BF16) {
        embed_dtype_ = DType::BF16;
        embed_ = aligned_malloc(size_t(c.vocab * D) * 2);
        convert_f32_to_bf16(c.vocab * D, f.data(), static_cast<uint16_t*>(embed_));
      } else {
        embed_dtype_ = DType::F32;
        embed_ = aligned_malloc(size_t(c.vocab * D) * 4);
        std::memcpy(embed_, f.data(), size_t(c.vocab * D) * 4);
      }
    }
    return;
  }
  if (name == "lm_head") return packed(lm_head_, c.vocab, D);
  if (name == "norm") return vec(norm_, D);
  if (name.rfind("layers.", 0) == 0) {
    size_t dot = name.find('.', 7);
    if (dot == std::string::npos) throw std::invalid_argument("llama: bad tensor name " + name);
    int64_t li = std::stoll(name.substr(7, dot - 7));
    if (li < 0 || li >= c.layers) throw std::invalid_argument("llama: layer index out of range in " + name);
    Layer& L = layers_[size_t(li)];
    std::string part = name.substr(dot + 1);
    if (part == "attn_norm") return vec(L.attn_norm, D);
    if (part == "mlp_norm") return vec(L.mlp_norm, D);
    if (part == "qkv") return packed(L.qkv, Nqkv, D);
    if (part == "qkv_bias") return vec(L.qkv_bias, Nqkv);
    if (part == "o") return packed(L.o, D, Hq * Dh);
    if (part == "gate_up") return packed(L.gate_up, 2 * F, D);
    if (part == "down") return packed(L.down, D, F);
  }
  throw std::invalid_argument("llama: unknown tensor " + name);
}

void Model::set_weight_parts(const std::string& name, const std::vector<Part>& parts, int64_t cols) {
  const Config& c = cfg_;
  const int64_t D = c.hidden, Nqkv = (c.n_heads + 2 * c.n_kv_heads) * c.head_dim;
  const size_t dot = name.find('.', 7);
  const std::string part = dot == std::string::npos ? "" : name.substr(dot + 1);
  if (name.rfind("layers.", 0) != 0 || (part != "qkv" && part != "gate_up"))
    throw std::invalid_argument("llama: " + name + " cannot be set from parts");
  const int64_t li = std::stoll(name.substr(7, dot - 7));
  if (li < 0 || li >= c.layers) throw std::invalid_argument("llama: layer index out of range in " + name);
  int64_t rows = 0;
  for (const Part& p : parts) rows += p.rows;
  const int64_t want = part == "qkv" ? Nqkv : 2 * c.inter;
  if (rows != want || cols != D)
    throw std::invalid_argument("llama: tensor " + name + " has shape (" + std::to_string(rows) + ", " +
                                std::to_string(cols) + "), expected (" + std::to_string(want) + ", " +
                                std::to_string(D) + ")");
  std::vector<PackedWeight*> packed;
  try {
    for (const Part& p : parts) packed.push_back(pack(c.weight_dtype, p.dtype, p.data, p.rows, cols));
  } catch (...) {
    for (PackedWeight* p : packed) weight_free(p);
    throw;
  }
  PackedWeight*& dst = part == "qkv" ? layers_[size_t(li)].qkv : layers_[size_t(li)].gate_up;
  if (dst) weight_free(dst);
  dst = weight_stack(packed);
}

void Model::finalize() {
  const Config& c = cfg_;
  if (!embed_) throw std::invalid_argument("llama: missing embed (model.embed_tokens.weight)");
  if (norm_.empty()) throw std::invalid_argument("llama: missing final norm (model.norm.weight)");
  for (int64_t i = 0; i < c.layers; i++) {
    const Layer& L = layers_[size_t(i)];
    std::string p = "layers." + std::to_string(i) + ".";
    if (L.attn_norm.empty()) throw std::invalid_argument("llama: missing " + p + "attn_norm");
    if (L.mlp_norm.empty()) throw std::invalid_argument("llama: missing " + p + "mlp_norm");
    if (!L.qkv) throw std::invalid_argument("llama: missing " + p + "qkv");
    if (!L.o) throw std::invalid_argument("llama: missing " + p + "o");
    if (!L.gate_up) throw std::invalid_argument("llama: missing " + p + "gate_up");
    if (!L.down) throw std::invalid_argument("llama: missing " + p + "down");
    if (c.qkv_bias && L.qkv_bias.empty()) throw std::invalid_argument("llama: missing " + p + "qkv_bias");
  }
  if (!lm_head_) {
    // tied embeddings: the output projection is the embedding table
    lm_head_ = weight_pack(embed_dtype_, c.vocab, c.hidden, embed_, c.hidden);
    if (quant_supported(embed_dtype_)) {  // one copy of the blocks: lookups read lm_head's rows
      aligned_free(embed_);
      embed_ = nullptr;
      embed_shared_ = true;
    }
  }
  // the layers' weights in the order a step reads them, in one buffer on huge pages (SmolLM2-135M's matrices are
  // 76-726 KB each: on their own, on 4 KiB pages)
  std::vector<PackedWeight*> ws;
  for (const Layer& L : layers_) ws.insert(ws.end(), {L.qkv, L.o, L.gate_up, L.down});
  void* old = layer_weights_;
  layer_weights_ = weight_gather(ws);
  aligned_free(old);
  finalized_ = true;
}

size_t Model::weight_bytes() const {
  const bool q = quant_supported(embed_dtype_);
  size_t n = q ? (embed_shared_ ? 0 : size_t(cfg_.vocab) * quant_row_bytes(embed_dtype_, cfg_.hidden))
               : size_t(cfg_.vocab * cfg_.hidden) * dtype_size(embed_dtype_);
  if (lm_head_) n += loom::weight_bytes(lm_head_);
  for (const auto& l : layers_)
    for (const PackedWeight* p : {l.qkv, l.o, l.gate_up, l.down})
      if (p) n += loom::weight_bytes(p);
  return n;
}

static void grow(std::vector<float>& v, int64_t n) {
  if (int64_t(v.size()) < n) v.resize(size_t(n));
}

// One adapter module over rows [r0, r0 + M): y += s·(x·Aᵀ)·Bᵀ. xa (M, r) scratch. The second product runs over
// Bᵀ's contiguous rows (K = r is too short for the dot-product path), up to 8 rows of y in registers at a time
// (lora_b_rows; r axpys per row read and wrote y r times: in a 32-stream decode over 16 rank-16 adapters on every
// module, the axpys and the bf16 rows' widening were 5.8 % of the samples).
static void lora_rows_forward(const LoraPair& p, int64_t r0, int64_t M, const float* x, int64_t ldx, float* y,
                              int64_t ldy, float* xa) {
  const int64_t K = p.in, N = p.out;
  // xa (M, r) = s·x·Aᵀ (bf16: A widened in the dot products); y += xa·Bᵀ
  if (p.bf16()) linear_bf16(M, p.r, K, x + r0 * ldx, ldx, p.A16.data(), K, nullptr, xa, p.r, 0.0f);
  else linear_f32(M, p.r, K, x + r0 * ldx, ldx, p.A.data(), K, nullptr, xa, p.r, 0.0f);
  for (int64_t i = 0; i < M * p.r; i++) xa[i] *= p.scale;
  if (p.bf16()) ops_active().lora_b_rows_bf16(M, N, p.r, xa, p.Bt16.data(), y + r0 * ldy, ldy);
  else ops_active().lora_b_rows(M, N, p.r, xa, p.Bt.data(), y + r0 * ldy, ldy);
}

// y[rows of each sequence with an adapter] += s·(x·Aᵀ)·Bᵀ for the n_mod modules that read the same x (q, k, v;
// gate, up), module i writing columns y_off[i]... of y. Consecutive sequences with the same adapter (the
// scheduler orders a step's sequences by adapter) are one run of rows: one product per run and module, so decode
// rows sharing an adapter read its A and B once. (run, module) pairs of up to kLoraSmallRows rows (decode) are
// split over the pool in one pass (each product runs on its task's thread); longer runs (prefill) each use the
// whole pool. Scratch of module i's run at row r0: lora_[(i·T + r0)·lora_stride_ ...].
static constexpr int64_t kLoraSmallRows = 16;
void Model::apply_lora(const Batch& b, int layer, const int* modules, const int64_t* y_off, int n_mod, const float* x,
                       int64_t ldx, float* y, int64_t ldy) {
  struct Task { const LoraPair* p; int64_t r0, M; float* y; float* xa; };
  std::vector<Task> small;
  for (size_t i = 0; i < b.seqs.size();) {
    const SeqSpec& s = b.seqs[i];
    size_t j = i + 1;
    int64_t M = s.n_tokens;
    while (j < b.seqs.size() && b.seqs[j].adapter == s.adapter && b.seqs[j].first_row == s.first_row + M)
      M += b.seqs[j++].n_tokens;
    for (int mi = 0; s.adapter && mi < n_mod; mi++) {
      const LoraPair& p = s.adapter->mods[size_t(layer * kNumModules + modules[mi])];
      if (p.r == 0) continue;
      const Task t{&p, s.first_row, M, y + y_off[mi], lora_.data() + (mi * b.T + s.first_row) * lora_stride_};
      if (M <= kLoraSmallRows) small.push_back(t);
      else lora_rows_forward(*t.p, t.r0, t.M, x, ldx, t.y, ldy, t.xa);
    }
    i = j;
  }
  parallel_for(int64_t(small.size()), 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; i++) {
      const Task& t = small[size_t(i)];
      lora_rows_forward(*t.p, t.r0, t.M, x, ldx, t.y, ldy, t.xa);
    }
  });
}

// A decode batch split for Model::step's per-thread attention blocks: threads_get() groups of whole sequences in
// row order, each a Batch over the step's rows (T: the group's row count; row_seq: its own sequences) of
// kGroupMinRows to kQuantSmallM rows, so that its products run the 16- and 32-row lanes kernels (with whole layers
// grouped, 8 rows a thread lost: 16-stream SmolLM2-135M Q4_K_M 2,050-2,310 -> 1,610-1,760 tok/s). Empty where the
// batch does not split so (one thread, too few or too many rows, sequences out of row order).
static constexpr int64_t kGroupMinRows = 16;
static std::vector<Batch> row_groups(const Batch& b, int nth) {
  std::vector<Batch> groups;
  if (nth < 2 || b.T < kGroupMinRows * nth || b.T > kQuantSmallM * nth) return groups;
  size_t s = 0;
  int64_t row = 0;
  for (int g = 0; g < nth; g++) {
    Batch sub;
    sub.tokens = b.tokens;
    sub.positions = b.positions;
    const int64_t end = b.T * (g + 1) / nth;  // rows before the next group's share
    while (s < b.seqs.size() && (sub.seqs.empty() || b.seqs[s].first_row < end || g == nth - 1)) {
      if (b.seqs[s].first_row != row) return {};
      row += b.seqs[s].n_tokens;
      sub.T += b.seqs[s].n_tokens;
      sub.seqs.push_back(b.seqs[s++]);
    }
    if (sub.T < kGroupMinRows || sub.T > kQuantSmallM) return {};
    sub.row_seq.assign(size_t(b.T), 0);
    for (size_t i = 0; i < sub.seqs.size(); i++)
      for (int64_t k = 0; k < sub.seqs[i].n_tokens; k++) sub.row_seq[size_t(sub.seqs[i].first_row + k)] = int32_t(i);
    groups.push_back(std::move(sub));
  }
  if (row != b.T) return {};
  return groups;
}

void Model::step(KvCache& kv, const Batch& b, float* out) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!finalized_) throw std::logic_error("llama: model not finalized");
  const Config& c = cfg_;
  const int64_t T = b.T, D = c.hidden, F = c.inter, Dh = c.head_dim, Hq = c.n_heads, Hkv = c.n_kv_heads;
  const int64_t Nq = Hq * Dh, Nkv = Hkv * Dh, Nqkv = Nq + 2 * Nkv;
  if (kv.layers != c.layers || kv.kv_heads != Hkv || kv.head_dim != Dh)
    throw std::invalid_argument("llama: kv cache shape does not match the model");
  if (T <= 0) return;

  int64_t max_r = 0;
  for (const SeqSpec& s : b.seqs)
    if (s.adapter) max_r = std::max(max_r, s.adapter->max_r);

  grow(x_, T * D);
  grow(xn_, T * D);
  grow(qkv_, T * Nqkv);
  grow(attn_, T * Nq);
  grow(gu_, T * 2 * F);
  grow(act_, T * F);
  lora_stride_ = std::max<int64_t>(max_r, 1);
  grow(lora_, 3 * T * lora_stride_);  // up to 3 modules (q, k, v) at once
  const bool any_lora = max_r > 0;
  grow(scratch_, int64_t(threads_get()) * paged_attention_scratch_floats(Hq, Hkv, Dh));
  if (int64_t(b.row_seq.size()) != T) throw std::invalid_argument("llama: batch row map not built");

  float* x = x_.data();
  float* xn = xn_.data();
  float* qkv = qkv_.data();
  float* attn = attn_.data();
  float* gu = gu_.data();
  float* act = act_.data();

  if (quant_supported(embed_dtype_)) {  // x (T, D): rows of the block-quantized table, dequantized
    const void* table = embed_shared_ ? weight_quant_data(lm_head_) : embed_;
    const size_t rb = quant_row_bytes(embed_dtype_, D);
    for (int64_t t = 0; t < T; t++) {
      const int64_t id = b.tokens[t];
      if (id < 0 || id >= c.vocab)
        throw std::invalid_argument("llama: token id " + std::to_string(id) + " out of range");
      if (embed_shared_) weight_quant_rows(lm_head_, id, 1, x + t * D);  // lm_head's layout (quant_pack)
      else quant_dequantize_rows(embed_dtype_, 1, D, static_cast<const uint8_t*>(table) + size_t(id) * rb, x + t * D);
    }
  } else {
    embedding_fwd(T, D, b.tokens, embed_dtype_, embed_, x);  // x (T, D)
  }

  // the cos / sin of every token's rotary angles, once for all layers (T, Dh)
  grow(rope_cs_, T * Dh);
  rope_table(T, Dh, b.positions, inv_freq_.data(), rope_cs_.data());

  const int64_t bs = kv.block_size;
  // Decode batches of 16-32 rows per thread without adapters: each thread runs a layer's attention block (norm,
  // q/k/v, rope, the KV write, attention, o, the residual, then the MLP's norm) over the rows of its own sequences,
  // one task per group (both threads read the block's weights, the second mostly from the L3). Split by weight
  // columns instead, the block's four regions each ended with its outputs crossing between the threads' caches, and
  // the norms, rope and KV writes ran on the caller alone. 32-stream decode on 2 threads, 3 alternated triples:
  // SmolLM2-135M Q4_K_M 21.9 -> 20.7 ms CPU a step (median), 2,850 -> 2,938 tok/s; Qwen2.5-0.5B Q4_K_M level
  // (1,001-1,007 -> 988-1,019). The MLP's products stay split by columns: grouped too, SmolLM2 read 2,982 but Qwen
  // fell 9 % (its MLP weights, 9 MB a layer, read on both threads). The same kernels per row, so the same logits
  // (test/decoder/row-groups.test.ts).
  const std::vector<Batch> groups = any_lora ? std::vector<Batch>() : row_groups(b, threads_get());
  const int64_t per_thread = paged_attention_scratch_floats(Hq, Hkv, Dh);
  // layer l's attention block over sb's rows [r0, r0 + n): the whole batch (work: the pool's attention scratch), or
  // one group on its task's thread (work: that group's share); adapters only over the whole batch (no groups then)
  auto attention_block = [&](int64_t l, const Batch& sb, int64_t r0, int64_t n, float* work) {
    const Layer& L = layers_[size_t(l)];
    rmsnorm_fwd(n, D, x + r0 * D, L.attn_norm.data(), c.eps, xn + r0 * D, nullptr);
    linear_packed(n, xn + r0 * D, D, L.qkv, L.qkv_bias.empty() ? nullptr : L.qkv_bias.data(), qkv + r0 * Nqkv,
                  Nqkv);  // (n, Nqkv)
    if (any_lora) {
      const int m[3] = {kQ, kK, kV};
      const int64_t off[3] = {0, Nq, Nq + Nkv};
      apply_lora(b, int(l), m, off, 3, xn, D, qkv, Nqkv);
    }
    // the q heads and the k heads follow each other in a row of qkv: one pass rotates both, by the step's table
    rope_fwd_table(n, Hq + Hkv, Dh, Nqkv, rope_cs_.data() + r0 * Dh, qkv + r0 * Nqkv);
    // write K, V of the new tokens into their cache slots (rounded to bf16 for a bf16 cache)
    for (const SeqSpec& s : sb.seqs)
      for (int64_t i = 0; i < s.n_tokens; i++) {
        const int64_t t = s.first_row + i, pos = b.positions[t];
        kv.write_slot(l, s.block_table[pos / bs], pos % bs, qkv + t * Nqkv + Nq, qkv + t * Nqkv + Nq + Nkv);
      }
    paged_attention(kv, l, sb, Hq, qkv, Nqkv, attn, work, c.sliding_window);  // attn (rows, Nq)
    linear_packed(n, attn + r0 * Nq, Nq, L.o, nullptr, x + r0 * D, D, 1.0f);  // x += attn·Woᵀ
    if (any_lora) {
      const int m[1] = {kO};
      const int64_t off[1] = {0};
      apply_lora(b, int(l), m, off, 1, attn, Nq, x, D);
    }
    rmsnorm_fwd(n, D, x + r0 * D, L.mlp_norm.data(), c.eps, xn + r0 * D, nullptr);  // the MLP block's input
  };
  for (int64_t l = 0; l < c.layers; l++) {
    const Layer& L = layers_[size_t(l)];
    // grouped, each group also quantizes its own rows of the MLP's input for gate / up, which the caller did alone
    // between the two parallel regions
    const bool group_acts = !groups.empty() && linear_packed_quantizes(L.gate_up, T);
    if (groups.empty()) {
      attention_block(l, b, 0, T, scratch_.data());
    } else {
      if (group_acts) quant_acts_begin(T, D, &mlp_acts_);
      parallel_tasks(int64_t(groups.size()), [&](int64_t g) {
        const Batch& sb = groups[size_t(g)];
        const int64_t r0 = sb.seqs.front().first_row;
        attention_block(l, sb, r0, sb.T, scratch_.data() + g * per_thread);
        if (group_acts)
          for (int64_t r = r0; r < r0 + sb.T; r++) quant_acts_row(&mlp_acts_, r, xn + r * D);
      });
    }
    // --- MLP block
    if (group_acts) linear_packed_acts(mlp_acts_, L.gate_up, nullptr, gu, 2 * F);  // gu (T, 2F)
    else linear_packed(T, xn, D, L.gate_up, nullptr, gu, 2 * F);
    if (any_lora) {
      const int m[2] = {kGate, kUp};
      const int64_t off[2] = {0, F};
      apply_lora(b, int(l), m, off, 2, xn, D, gu, 2 * F);
    }
    const auto swiglu = ops_active().swiglu_fwd;  // act = silu(gate) · up, rows of gu = [gate | up]
    // x += act·Wdᵀ, each row of act made on the pool and (a decode step's rows, block-quantized W) quantized in the
    // same parallel region: the quantization of the down projection's input (K = F) does not run alone on the caller
    linear_packed_rows(T, [&](int64_t t) { swiglu(F, gu + t * 2 * F, gu + t * 2 * F + F, act + t * F); }, act, F,
                       L.down, nullptr, x, D, 1.0f);
    if (any_lora) {
      const int m[1] = {kDown};
      const int64_t off[1] = {0};
      apply_lora(b, int(l), m, off, 1, act, F, x, D);
    }
  }

  // --- output rows
  const int64_t R = b.n_out;
  if (R == 0) return;
  grow(rows_, R * D);
  for (int64_t r = 0; r < R; r++) std::memcpy(rows_.data() + r * D, x + int64_t(b.out_rows[r]) * D, size_t(D) * 4);
  if (b.hidden) {
    rmsnorm_fwd(R, D, rows_.data(), norm_.data(), c.eps, out, nullptr);
    return;
  }
  rmsnorm_fwd(R, D, rows_.data(), norm_.data(), c.eps, xn, nullptr);
  linear_packed(R, xn, D, lm_head_, nullptr, out, c.vocab);  // logits (R, V)
  // the sampler's argmax of each row, split over the pool: on the caller between steps (JS) it held both threads
  // idle, 0.19-0.21 ms a 32-stream SmolLM2-135M step (49,152 tokens), 2 threads
  if (b.argmax)
    parallel_for(R, 1, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; r++) b.argmax[r] = int32_t(argmax(c.vocab, out + r * c.vocab));
    });
}

}  // namespace loom::llama
