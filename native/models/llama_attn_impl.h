// Body of the paged-attention kernels, compiled once per ISA (included inside namespace
// loom::llama::<isa> by llama.cc (portable), llama_attn_avx2.cc, llama_attn_avx512.cc; the file's -m
// flags decide the vector width, GCC vector types at that width). Two kernels, both for one KV head
// and its G query heads (GQA group), keys/values found through the sequence's block table:
//   attn_decode: one query token over a range of keys, partial softmax results (decode steps)
//   attn_tile:   a tile of consecutive query tokens, flash-attention style (prefill chunks)
// The cache holds f32 or bf16 (kv.dtype): each kernel is a template over the stored element type
// KvT (float or uint16_t bf16 bits), chosen once per call; rows are widened to f32 where they are
// read, and all math is fp32.
// Must be included after <cmath>, <cstring>, <limits>, llama.h and ../ops/ops_table.h.

// One stored cache element as f32 (bf16: the bits shifted into the high half, exact).
static inline float kv_f32(float x) { return x; }
static inline float kv_f32(uint16_t h) { return bf16_to_f32(h); }

// ---------------------------------------------------------------------------------------------
// Prefill tile: nq consecutive query tokens of one sequence (positions pos0 .. pos0+nq-1), one KV
// head and its G query heads, flash-attention style. Keys are walked in chunks of KB: each chunk is
// gathered from the paged cache once (K transposed to (Dh, KB), V as (KB, Dh)) and used by all
// R = nq·G query vectors, with an online softmax (running max m, sum l, unnormalized output O).
// A query at position p sees keys [lo, p], lo = p - window + 1 with a sliding window, else 0.
//   q rows: q + i*ldq + g*Dh ; out rows: out + i*ldo + g*Dh   (i < nq, g < G)
//   work: attn_tile_work_floats(nq, G, Dh) floats
// The per-token kernel above re-reads every key and value once per query token, so a long prompt
// streamed its whole cache through L2 for each of its tokens.
// ---------------------------------------------------------------------------------------------
static constexpr int64_t KB = kAttnKeyChunk;

// GCC vector extensions at the native width of the file's ISA flags (wider types than the
// hardware's were compiled into stack round trips).
#if defined(__AVX512F__)
static constexpr int VW = 16;
#elif defined(__AVX2__)
static constexpr int VW = 8;
#else
static constexpr int VW = 4;
#endif
static constexpr int NVK = int(KB) / VW;  // vectors per chunk row of KB keys
typedef float vf __attribute__((vector_size(VW * 4)));
typedef float vf_u __attribute__((vector_size(VW * 4), aligned(4)));  // unaligned access
typedef int32_t vfi __attribute__((vector_size(VW * 4)));
static inline vf vload(const float* p) { return *reinterpret_cast<const vf_u*>(p); }
static inline void vstore(float* p, vf v) { *reinterpret_cast<vf_u*>(p) = v; }

// exp(x) lane-wise for x <= 0 (scores minus their running max); x < -87 (incl. -inf) gives 0.
// Cephes expf polynomial; round-to-nearest by the 1.5·2^23 trick (|x·log2e| < 2^22).
static inline vf attn_exp(vf x) {
  const vf lo = vf{} - 87.0f;
  const vf xc = x < lo ? lo : x;
  const vf fn = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  vf r = xc - fn * 0.693359375f;
  r = r + fn * 2.12194440e-4f;
  vf p = vf{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + (r + 1.0f);
  const vfi n = __builtin_convertvector(fn, vfi);
  const vf two_n = (vf)((n + 127) << 23);
  return x < lo ? vf{} : p * two_n;
}

// ---------------------------------------------------------------------------------------------
// Decode: one query token, one KV head, its G query heads, keys [k0, k1) — the whole visible context
// or one part of it (paged_attention splits long contexts across threads, flash-decoding style).
// Partial results, combined by the caller:
//   m (G) = max_j s_gj,  l (G) = Σ_j exp(s_gj - m_g),  o (G, Dh) = Σ_j exp(s_gj - m_g) · v_j
//   with s_gj = q_g · k_j · scale.  scores: attn_decode_scores_floats(G, k1 - k0) floats.
// Each key and value row is read once for up to 4 heads (vectors at the ISA's width, widened from
// bf16 on the fly); the value sum keeps its accumulators in registers across keys. (The previous
// kernel reduced a dot product per (key, head) through a 16-float array and added every value
// row into the output with a load and store per element: 12-16 tok/s at 4k context here.)
// ---------------------------------------------------------------------------------------------
static inline float vsum(vf v) {  // pairwise tree (a scalar chain of VW dependent adds was a hot spot)
#if defined(__AVX512F__)
  typedef float v8 __attribute__((vector_size(32)));
  const v8 h = __builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7) + __builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15);
#elif defined(__AVX2__)
  const vf h = v;
#endif
#if defined(__AVX2__)
  typedef float v4 __attribute__((vector_size(16)));
  const v4 a = __builtin_shufflevector(h, h, 0, 1, 2, 3) + __builtin_shufflevector(h, h, 4, 5, 6, 7);
#else
  const vf a = v;
#endif
  return (a[0] + a[2]) + (a[1] + a[3]);
}

// Prefetch one KV head's rows of a cache block (rows are ld elements apart; the blocks of a sequence
// are scattered, so the hardware prefetchers lose the stream at every block boundary).
template <typename KvT>
static inline void kv_prefetch_block(const KvT* rows, int64_t n, int64_t ld, int64_t Dh) {
  for (int64_t r = 0; r < n; r++)
    for (int64_t b = 0; b < Dh * int64_t(sizeof(KvT)); b += 64)
      __builtin_prefetch(reinterpret_cast<const char*>(rows + r * ld) + b);
}
static inline float vmax(vf v) {
  float m = v[0];
  for (int i = 1; i < VW; i++) m = v[i] > m ? v[i] : m;
  return m;
}
// VW stored elements as f32 (bf16: zero-extend and shift into the high half, exact)
typedef uint16_t vh __attribute__((vector_size(VW * 2), aligned(2)));
static inline vf kv_vload(const float* p) { return vload(p); }
static inline vf kv_vload(const uint16_t* p) {
#if defined(__AVX512F__)  // one vpmovzxwd from memory (the generic form compiled to two halves and an insert)
  return (vf)_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))), 16);
#else
  const vh h = *reinterpret_cast<const vh*>(p);
  return (vf)(__builtin_convertvector(h, vfi) << 16);
#endif
}

static constexpr int64_t kHeadsPerPass = 4;

// Scores of GN heads (GN a compile-time count, so the accumulators live in registers):
//   s[g][j - k0] = q_g · k_j · scale, rows of np floats
template <typename KvT, int GN>
static void attn_decode_scores(const KvCache& kv, int64_t layer, const int32_t* table, int64_t k0, int64_t k1,
                               int64_t kvh, const float* qg, int64_t Dh, float scale, float* s, int64_t np) {
  const int64_t bs = kv.block_size, ld = kv.slot_elems(), nc = Dh / VW, dv = nc * VW;
  for (int64_t bi = k0 / bs; bi * bs < k1; bi++) {
    const int64_t j0 = std::max(bi * bs, k0), j1 = std::min((bi + 1) * bs, k1);
    const KvT* kb = kv.k_at<KvT>(layer, table[bi], 0) + kvh * Dh;
    // keys two blocks ahead (one block of scores is shorter than a miss to memory; the first block also issues the
    // second, and paged_attention the first one item ahead)
    for (int64_t ba = bi == k0 / bs ? bi + 1 : bi + 2; ba <= bi + 2 && ba * bs < k1; ba++)
      kv_prefetch_block(kv.k_at<KvT>(layer, table[ba], 0) + kvh * Dh, std::min(bs, k1 - ba * bs), ld, Dh);
    // this block's values, needed after the softmax: in flight while its keys are scored
    kv_prefetch_block(kv.v_at<KvT>(layer, table[bi], 0) + kvh * Dh + (j0 - bi * bs) * ld, j1 - j0, ld, Dh);
    for (int64_t j = j0; j < j1; j++) {
      const KvT* kp = kb + (j - bi * bs) * ld;
      vf acc[GN] = {};
      for (int64_t c = 0; c < nc; c++) {
        const vf kx = kv_vload(kp + c * VW);
        for (int g = 0; g < GN; g++) acc[g] += vload(qg + g * Dh + c * VW) * kx;
      }
      for (int g = 0; g < GN; g++) {
        float x = vsum(acc[g]);
        for (int64_t d = dv; d < Dh; d++) x += qg[g * Dh + d] * kv_f32(kp[d]);
        s[g * np + (j - k0)] = x * scale;
      }
    }
  }
}

// o[g] = Σ_j p[g][j] · v_j for GN heads: two vectors of Dh per pass, accumulators in registers
template <typename KvT, int GN>
static void attn_decode_values(const KvCache& kv, int64_t layer, const int32_t* table, int64_t k0, int64_t k1,
                               int64_t kvh, int64_t Dh, const float* p, int64_t np, float* o) {
  const int64_t bs = kv.block_size, ld = kv.slot_elems(), nc = Dh / VW, dv = nc * VW;
  for (int64_t c = 0; c < nc; c += 2) {
    const bool two = c + 1 < nc;
    vf acc0[GN] = {}, acc1[GN] = {};
    for (int64_t bi = k0 / bs; bi * bs < k1; bi++) {
      const int64_t j0 = std::max(bi * bs, k0), j1 = std::min((bi + 1) * bs, k1);
      const KvT* vb = kv.v_at<KvT>(layer, table[bi], 0) + kvh * Dh + c * VW;
      if (c == 0 && (bi + 1) * bs < k1)  // (long ranges: the score pass's prefetch has left L2 by now)
        kv_prefetch_block(kv.v_at<KvT>(layer, table[bi + 1], 0) + kvh * Dh, std::min(bs, k1 - (bi + 1) * bs), ld, Dh);
      for (int64_t j = j0; j < j1; j++) {
        const KvT* vp = vb + (j - bi * bs) * ld;
        const vf v0 = kv_vload(vp), v1 = two ? kv_vload(vp + VW) : vf{};
        for (int g = 0; g < GN; g++) {
          const float w = p[g * np + (j - k0)];
          acc0[g] += w * v0;
          acc1[g] += w * v1;
        }
      }
    }
    for (int g = 0; g < GN; g++) {
      vstore(o + g * Dh + c * VW, acc0[g]);
      if (two) vstore(o + g * Dh + (c + 1) * VW, acc1[g]);
    }
  }
  for (int64_t d = dv; d < Dh; d++)  // scalar tail of Dh
    for (int g = 0; g < GN; g++) {
      float acc = 0.0f;
      for (int64_t j = k0; j < k1; j++)
        acc += p[g * np + (j - k0)] * kv_f32(kv.v_at<KvT>(layer, table[j / bs], j % bs)[kvh * Dh + d]);
      o[g * Dh + d] = acc;
    }
}

template <typename KvT>
static void attn_decode_t(const KvCache& kv, int64_t layer, const int32_t* table, int64_t k0, int64_t k1, int64_t kvh,
                          int64_t G, const float* q, int64_t Dh, float scale, float* o, float* m, float* l,
                          float* scores) {
  const int64_t n = k1 - k0, np = (n + VW - 1) / VW * VW;
  // 1. scores (G, np), up to 4 heads per pass over the keys
  for (int64_t g0 = 0; g0 < G; g0 += kHeadsPerPass) {
    const float* qg = q + g0 * Dh;
    float* s = scores + g0 * np;
    switch (std::min(kHeadsPerPass, G - g0)) {
      case 1: attn_decode_scores<KvT, 1>(kv, layer, table, k0, k1, kvh, qg, Dh, scale, s, np); break;
      case 2: attn_decode_scores<KvT, 2>(kv, layer, table, k0, k1, kvh, qg, Dh, scale, s, np); break;
      case 3: attn_decode_scores<KvT, 3>(kv, layer, table, k0, k1, kvh, qg, Dh, scale, s, np); break;
      default: attn_decode_scores<KvT, 4>(kv, layer, table, k0, k1, kvh, qg, Dh, scale, s, np); break;
    }
  }
  // 2. per head: m = max, p = exp(s - m) (padding lanes -inf -> 0), l = Σ p
  for (int64_t g = 0; g < G; g++) {
    float* s = scores + g * np;
    for (int64_t j = n; j < np; j++) s[j] = -std::numeric_limits<float>::infinity();
    vf mv = vload(s);
    for (int64_t c = VW; c < np; c += VW) {
      const vf x = vload(s + c);
      mv = x > mv ? x : mv;
    }
    const float mx = vmax(mv);
    vf sum = {};
    for (int64_t c = 0; c < np; c += VW) {
      const vf e = attn_exp(vload(s + c) - mx);
      vstore(s + c, e);
      sum += e;
    }
    m[g] = mx;
    l[g] = vsum(sum);
  }
  // 3. o (G, Dh) = p · V, up to 4 heads per pass
  for (int64_t g0 = 0; g0 < G; g0 += kHeadsPerPass) {
    const float* p = scores + g0 * np;
    float* og = o + g0 * Dh;
    switch (std::min(kHeadsPerPass, G - g0)) {
      case 1: attn_decode_values<KvT, 1>(kv, layer, table, k0, k1, kvh, Dh, p, np, og); break;
      case 2: attn_decode_values<KvT, 2>(kv, layer, table, k0, k1, kvh, Dh, p, np, og); break;
      case 3: attn_decode_values<KvT, 3>(kv, layer, table, k0, k1, kvh, Dh, p, np, og); break;
      default: attn_decode_values<KvT, 4>(kv, layer, table, k0, k1, kvh, Dh, p, np, og); break;
    }
  }
}

void attn_decode(const KvCache& kv, int64_t layer, const int32_t* table, int64_t k0, int64_t k1, int64_t kvh,
                 int64_t G, const float* q, int64_t Dh, float scale, float* o, float* m, float* l, float* scores) {
  if (kv.dtype == DType::BF16)
    attn_decode_t<uint16_t>(kv, layer, table, k0, k1, kvh, G, q, Dh, scale, o, m, l, scores);
  else
    attn_decode_t<float>(kv, layer, table, k0, k1, kvh, G, q, Dh, scale, o, m, l, scores);
}

template <typename KvT>
static void attn_tile_t(const KvCache& kv, int64_t layer, const int32_t* table, int64_t pos0, int64_t nq,
                        int64_t window, int64_t kvh, int64_t G, const float* q, int64_t ldq, int64_t Dh, float scale,
                        float* out, int64_t ldo, float* work) {
  const int64_t bs = kv.block_size, R = nq * G;
  float* kt = work;          // (Dh, KB) keys of the chunk, transposed
  float* vc = kt + Dh * KB;  // (KB, Dh) values of the chunk
  float* o = vc + KB * Dh;   // (R, Dh) unnormalized output; row r = query token r / G, head r % G
  float* m = o + R * Dh;     // (R) running max
  float* l = m + R;          // (R) running sum
  float* sc = l + R;         // (R, KB) scores of the chunk
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < R; r++) {
    m[r] = ninf;
    l[r] = 0.0f;
  }
  for (int64_t i = 0; i < R * Dh; i++) o[i] = 0.0f;
  const int64_t last = pos0 + nq - 1;
  // first key a query at position p sees
  const auto first_key = [window](int64_t p) { return window > 0 ? std::max<int64_t>(0, p - window + 1) : int64_t(0); };
  const int64_t kmin = first_key(pos0);
  for (int64_t c = kmin; c <= last; c += KB) {
    const int64_t nk = std::min<int64_t>(KB, last + 1 - c);
    // gather (and widen, for bf16) the chunk: K transposed to kt (Dh, KB), V to vc (KB, Dh)
    for (int64_t jj = 0; jj < nk; jj++) {
      const int64_t j = c + jj, blk = table[j / bs], slot = j % bs;
      const KvT* kp = kv.k_at<KvT>(layer, blk, slot) + kvh * Dh;
      const KvT* vp = kv.v_at<KvT>(layer, blk, slot) + kvh * Dh;
      for (int64_t d = 0; d < Dh; d++) kt[d * KB + jj] = kv_f32(kp[d]);
      for (int64_t d = 0; d < Dh; d++) vc[jj * Dh + d] = kv_f32(vp[d]);
    }
    for (int64_t jj = nk; jj < KB; jj++)
      for (int64_t d = 0; d < Dh; d++) kt[d * KB + jj] = 0.0f;
    // prefetch the next chunk's rows (scattered blocks) while this one is computed
    for (int64_t j = c + KB; j < std::min(c + 2 * KB, last + 1); j++) {
      const int64_t blk = table[j / bs], slot = j % bs;
      kv_prefetch_block(kv.k_at<KvT>(layer, blk, slot) + kvh * Dh, 1, 0, Dh);
      kv_prefetch_block(kv.v_at<KvT>(layer, blk, slot) + kvh * Dh, 1, 0, Dh);
    }
    // rows whose query sees a key of this chunk: [r_lo, r_hi) (positions grow with the row)
    int64_t r_lo = R, r_hi = 0;
    for (int64_t i = 0; i < nq; i++) {
      const int64_t pos = pos0 + i, lo = first_key(pos);
      if (c > pos || c + nk <= lo) continue;
      r_lo = std::min(r_lo, i * G);
      r_hi = i * G + G;
    }
    // scores, four query vectors at a time (independent accumulator chains share each key load)
    for (int64_t r0 = r_lo; r0 < r_hi; r0 += 4) {
      const float* qp[4];
      for (int k = 0; k < 4; k++) {
        const int64_t rr = std::min(r0 + k, r_hi - 1);
        qp[k] = q + (rr / G) * ldq + (rr % G) * Dh;
      }
      vf acc[4][NVK];
      for (int k = 0; k < 4; k++)
        for (int v = 0; v < NVK; v++) acc[k][v] = vf{};
      for (int64_t d = 0; d < Dh; d++) {
        for (int v = 0; v < NVK; v++) {
          const vf kd = vload(kt + d * KB + v * VW);
          for (int k = 0; k < 4; k++) acc[k][v] += qp[k][d] * kd;
        }
      }
      for (int k = 0; k < 4 && r0 + k < r_hi; k++)
        for (int v = 0; v < NVK; v++) vstore(sc + (r0 + k) * KB + v * VW, acc[k][v] * scale);
    }
    for (int64_t r = r_lo; r < r_hi; r++) {
      const int64_t pos = pos0 + r / G, lo = first_key(pos);
      if (c > pos || c + nk <= lo) continue;
      float* s = sc + r * KB;
      float cmax = ninf;
      for (int64_t jj = 0; jj < KB; jj++) {
        const int64_t j = c + jj;
        if (jj >= nk || j > pos || j < lo) s[jj] = ninf;
        cmax = s[jj] > cmax ? s[jj] : cmax;
      }
      const float mn = m[r] > cmax ? m[r] : cmax;
      for (int v = 0; v < NVK; v++) vstore(s + v * VW, attn_exp(vload(s + v * VW) - mn));  // masked: -inf -> 0
      const float corr = m[r] == ninf ? 0.0f : std::exp(m[r] - mn);
      float sum = 0.0f;
      for (int64_t jj = 0; jj < KB; jj++) sum += s[jj];
      l[r] = l[r] * corr + sum;
      m[r] = mn;
      // O_r = O_r·corr + Σ_j p_j·V_j over 4·VW output lanes at a time (independent chains per key)
      float* orow = o + r * Dh;
      int64_t d0 = 0;
      for (; d0 + 4 * VW <= Dh; d0 += 4 * VW) {
        vf o0 = vload(orow + d0) * corr, o1 = vload(orow + d0 + VW) * corr;
        vf o2 = vload(orow + d0 + 2 * VW) * corr, o3 = vload(orow + d0 + 3 * VW) * corr;
        for (int64_t jj = 0; jj < nk; jj++) {
          const float p = s[jj];
          const float* vr = vc + jj * Dh + d0;
          o0 += p * vload(vr);
          o1 += p * vload(vr + VW);
          o2 += p * vload(vr + 2 * VW);
          o3 += p * vload(vr + 3 * VW);
        }
        vstore(orow + d0, o0);
        vstore(orow + d0 + VW, o1);
        vstore(orow + d0 + 2 * VW, o2);
        vstore(orow + d0 + 3 * VW, o3);
      }
      for (; d0 < Dh; d0++) {
        float a = orow[d0] * corr;
        for (int64_t jj = 0; jj < nk; jj++) a += s[jj] * vc[jj * Dh + d0];
        orow[d0] = a;
      }
    }
  }
  for (int64_t r = 0; r < R; r++) {
    const float inv = l[r] > 0.0f ? 1.0f / l[r] : 0.0f;
    float* dst = out + (r / G) * ldo + (r % G) * Dh;
    for (int64_t d = 0; d < Dh; d++) dst[d] = o[r * Dh + d] * inv;
  }
}

void attn_tile(const KvCache& kv, int64_t layer, const int32_t* table, int64_t pos0, int64_t nq, int64_t window,
               int64_t kvh, int64_t G, const float* q, int64_t ldq, int64_t Dh, float scale, float* out, int64_t ldo,
               float* work) {
  if (kv.dtype == DType::BF16)
    attn_tile_t<uint16_t>(kv, layer, table, pos0, nq, window, kvh, G, q, ldq, Dh, scale, out, ldo, work);
  else
    attn_tile_t<float>(kv, layer, table, pos0, nq, window, kvh, G, q, ldq, Dh, scale, out, ldo, work);
}
