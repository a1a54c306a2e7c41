// Body of the paged-attention inner kernel, compiled once per ISA (included inside
// namespace loom::llama::<isa> by llama_attn.cc, llama_attn_avx2.cc, llama_attn_avx512.cc; the
// file's -m flags decide the vector width). Plain loops written so the compiler vectorizes them:
// fixed-width partial sums for dot products, straight axpy for the value sum.
//
// One query token, one KV head, its G query heads (GQA group):
//   q (G, Dh), keys/values: positions [start, ctx) of the sequence (start > 0 with a sliding window),
//   found through the block table. scores (G, ctx - start) scratch; out (G, Dh) = softmax(q·Kᵀ·scale) · V
// Must be included after <cmath> and llama.h.

static inline float attn_dot(const float* a, const float* b, int64_t n) {
  float acc[16] = {0};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int k = 0; k < 16; k++) acc[k] += a[i + k] * b[i + k];
  float s = 0.0f;
  for (int k = 0; k < 16; k++) s += acc[k];
  for (; i < n; i++) s += a[i] * b[i];
  return s;
}

static inline void attn_axpy(int64_t n, float a, const float* x, float* y) {
  for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}

void attn_group(const KvCache& kv, int64_t layer, const int32_t* table, int64_t start, int64_t ctx, int64_t kvh,
                int64_t G, const float* q, int64_t Dh, float scale, float* out, float* scores) {
  const int64_t bs = kv.block_size;
  const int64_t nblk = (ctx + bs - 1) / bs;
  const int64_t n_keys = ctx - start;
  // scores[g, j - start] = q_g · k_j · scale
  for (int64_t bi = start / bs; bi < nblk; bi++) {
    const int64_t j0 = std::max(bi * bs, start), j1 = std::min((bi + 1) * bs, ctx);
    const float* kb = kv.k_at(layer, table[bi], 0) + kvh * Dh;
    const int64_t ld = kv.slot_floats();
    for (int64_t j = j0; j < j1; j++) {
      const float* kp = kb + (j - bi * bs) * ld;
      for (int64_t g = 0; g < G; g++) scores[g * n_keys + j - start] = attn_dot(q + g * Dh, kp, Dh) * scale;
    }
  }
  // softmax per head (normalization folded into the value sum)
  float inv[64];
  float* invp = G <= 64 ? inv : nullptr;
  std::vector<float> inv_heap;
  if (!invp) {
    inv_heap.resize(size_t(G));
    invp = inv_heap.data();
  }
  for (int64_t g = 0; g < G; g++) {
    float* sg = scores + g * n_keys;
    float mx = sg[0];
    for (int64_t j = 1; j < n_keys; j++) mx = sg[j] > mx ? sg[j] : mx;
    float sum = 0.0f;
    for (int64_t j = 0; j < n_keys; j++) {
      float e = std::exp(sg[j] - mx);
      sg[j] = e;
      sum += e;
    }
    invp[g] = 1.0f / sum;
  }
  for (int64_t i = 0; i < G * Dh; i++) out[i] = 0.0f;
  for (int64_t bi = start / bs; bi < nblk; bi++) {
    const int64_t j0 = std::max(bi * bs, start), j1 = std::min((bi + 1) * bs, ctx);
    const float* vb = kv.v_at(layer, table[bi], 0) + kvh * Dh;
    const int64_t ld = kv.slot_floats();
    for (int64_t j = j0; j < j1; j++) {
      const float* vp = vb + (j - bi * bs) * ld;
      for (int64_t g = 0; g < G; g++) attn_axpy(Dh, scores[g * n_keys + j - start] * invp[g], vp, out + g * Dh);
    }
  }
}
