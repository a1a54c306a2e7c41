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
// Chunks are 64 keys (scores in passes of 2·VW keys); the masks, maxima and sums of a row are vector
// loops; values are summed four rows at a time, each value load serving the four. With chunks of 16,
// per-row scalar loops and one value load per FMA, a 4,096-token SmolLM2-135M Q4_K_M prompt took 13.1-13.7 s
// on 2 threads of the Zen 3 dev machine; now 10.6-10.7 (bench/decode-cpu.mts --prefill 4096, README twelfth
// session).
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
// Decode: one query token, KV heads [h0, h0 + nh) and their nh·G query heads, keys [k0, k1) — the whole
// visible context or one part of it (paged_attention splits long contexts across threads, flash-decoding
// style). Partial results, combined by the caller (query heads in order, as in q):
//   m (nh·G) = max_j s_gj,  l (nh·G) = Σ_j exp(s_gj - m_g),  o (nh·G, Dh) = Σ_j exp(s_gj - m_g) · v_j
//   with s_gj = q_g · k_j · scale.
// Keys are taken kDecodeChunk at a time: the chunk is scored, its softmax is folded into the running
// (m, l, o) online, and its values are summed while its K and V rows are still in L1; the KV heads of
// a chunk are taken one after another, so a key's slot (all its heads, contiguous) is read whole. Scores
// come four keys at a time for up to HP query heads (the four keys' sums reduced together, one shuffle
// tree for four dot products); values in passes of VP vectors of Dh for the HP heads. The previous
// kernel took one KV head per call (a third of every slot's cache lines, SmolLM2-135M), scored every key
// of the range first with one horizontal sum per (key, head), then made Dh/(2·VW) passes over all the
// values, widening bf16 through two 4-lane halves. SmolLM2-135M Q4_K_M decode on 2 threads of the Zen 3 dev
// machine, 128 tokens: 8.8-10.4 -> 8.2-9.0 ms CPU a token (bench/decode-cpu.mts, README twelfth session); at long
// contexts the K/V rows come from memory and their reads bound it.
// ---------------------------------------------------------------------------------------------
static constexpr int64_t kDecodeChunk = 16;
#if defined(__AVX512F__)
static constexpr int kVecRegs = 32, kMaxHeadsPerPass = 8;
#else
static constexpr int kVecRegs = 16, kMaxHeadsPerPass = 4;
#endif
// keys per score tile for HP heads: HP·KT accumulators, KT key rows and a query vector in registers (3 heads take 3
// keys on AVX2, where 4 spilled one; 4 heads 2 keys)
static constexpr int keys_per_tile(int hp) {
  return hp * 4 + 5 <= kVecRegs ? 4 : hp * 3 + 4 <= kVecRegs ? 3 : hp * 2 + 3 <= kVecRegs ? 2 : 1;
}
// value vectors per pass for HP heads: HP·VP accumulators, VP value rows and the weight
static constexpr int value_vectors(int hp) { return (kVecRegs - 1) / (hp + 1) < 1 ? 1 : (kVecRegs - 1) / (hp + 1); }

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

// the lane sums of a0..a3, times scale, into s[0..nk) (nk <= 4; one transpose-and-add tree for the four)
typedef float v4f __attribute__((vector_size(16)));
static inline void vsum4(vf a0, vf a1, vf a2, vf a3, float scale, float* s, int nk) {
#if defined(__AVX512F__)
  typedef float v8 __attribute__((vector_size(32)));
  const auto fold = [](vf a) {
    return __builtin_shufflevector(a, a, 0, 1, 2, 3, 4, 5, 6, 7) +
           __builtin_shufflevector(a, a, 8, 9, 10, 11, 12, 13, 14, 15);
  };
  const v8 b0 = fold(a0), b1 = fold(a1), b2 = fold(a2), b3 = fold(a3);
#elif defined(__AVX2__)
  const vf b0 = a0, b1 = a1, b2 = a2, b3 = a3;
#endif
#if defined(__AVX2__)
  // 8 lanes each: [b0 halves folded | b1 halves folded], then pairs, then the four sums
  const auto h01 = __builtin_shufflevector(b0, b1, 0, 1, 2, 3, 8, 9, 10, 11) +
                   __builtin_shufflevector(b0, b1, 4, 5, 6, 7, 12, 13, 14, 15);
  const auto h23 = __builtin_shufflevector(b2, b3, 0, 1, 2, 3, 8, 9, 10, 11) +
                   __builtin_shufflevector(b2, b3, 4, 5, 6, 7, 12, 13, 14, 15);
  const auto i = __builtin_shufflevector(h01, h23, 0, 2, 4, 6, 8, 10, 12, 14) +
                 __builtin_shufflevector(h01, h23, 1, 3, 5, 7, 9, 11, 13, 15);
  const v4f r = (__builtin_shufflevector(i, i, 0, 2, 4, 6) + __builtin_shufflevector(i, i, 1, 3, 5, 7)) * scale;
#else
  const vf i01 = __builtin_shufflevector(a0, a1, 0, 4, 2, 6) + __builtin_shufflevector(a0, a1, 1, 5, 3, 7);
  const vf i23 = __builtin_shufflevector(a2, a3, 0, 4, 2, 6) + __builtin_shufflevector(a2, a3, 1, 5, 3, 7);
  const v4f r = (__builtin_shufflevector(i01, i23, 0, 1, 4, 5) + __builtin_shufflevector(i01, i23, 2, 3, 6, 7)) * scale;
#endif
  if (nk == 4) std::memcpy(s, &r, sizeof(r));
  else
    for (int t = 0; t < nk; t++) s[t] = r[t];
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
#elif defined(__AVX2__)  // the same at 8 lanes (the generic form: two 4-lane halves, a byte shift and an insert)
  return (vf)_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))), 16);
#else
  const vh h = *reinterpret_cast<const vh*>(p);
  return (vf)(__builtin_convertvector(h, vfi) << 16);
#endif
}

// s[g·kDecodeChunk + j] = scale · q_g · k_j for HP heads and the n keys of a chunk (rows kr[j]), KT keys at a time
template <typename KvT, int HP>
static void attn_chunk_scores(const KvT* const* kr, int64_t n, const float* qg, int64_t Dh, float scale, float* s) {
  constexpr int KT = keys_per_tile(HP);
  const int64_t nc = Dh / VW, dv = nc * VW;
  int64_t j = 0;
  for (; j + KT <= n; j += KT) {
    vf acc[HP][4] = {};
    for (int64_t c = 0; c < nc; c++) {
      vf kx[KT];
      for (int t = 0; t < KT; t++) kx[t] = kv_vload(kr[j + t] + c * VW);
      for (int g = 0; g < HP; g++) {
        const vf qv = vload(qg + g * Dh + c * VW);
        for (int t = 0; t < KT; t++) acc[g][t] += qv * kx[t];
      }
    }
    for (int g = 0; g < HP; g++) vsum4(acc[g][0], acc[g][1], acc[g][2], acc[g][3], scale, s + g * kDecodeChunk + j, KT);
  }
  for (; j < n; j++) {
    vf acc[HP] = {};
    for (int64_t c = 0; c < nc; c++) {
      const vf kx = kv_vload(kr[j] + c * VW);
      for (int g = 0; g < HP; g++) acc[g] += vload(qg + g * Dh + c * VW) * kx;
    }
    for (int g = 0; g < HP; g++) s[g * kDecodeChunk + j] = vsum(acc[g]) * scale;
  }
  if (dv < Dh)  // scalar tail of Dh
    for (j = 0; j < n; j++)
      for (int g = 0; g < HP; g++) {
        float x = 0.0f;
        for (int64_t d = dv; d < Dh; d++) x += qg[g * Dh + d] * kv_f32(kr[j][d]);
        s[g * kDecodeChunk + j] += x * scale;
      }
}

// o[g][c·VW ..] += Σ_j p[g·kDecodeChunk + j] · v_j[c·VW ..] over NV vectors from vector c, HP heads
template <typename KvT, int HP, int NV>
static inline void attn_chunk_values_pass(const KvT* const* vr, int64_t n, const float* p, int64_t Dh, int64_t c,
                                          float* o) {
  vf acc[HP][NV] = {};
  for (int64_t j = 0; j < n; j++) {
    vf vx[NV];
    for (int v = 0; v < NV; v++) vx[v] = kv_vload(vr[j] + (c + v) * VW);
    for (int g = 0; g < HP; g++) {
      const float w = p[g * kDecodeChunk + j];
      for (int v = 0; v < NV; v++) acc[g][v] += w * vx[v];
    }
  }
  for (int g = 0; g < HP; g++)
    for (int v = 0; v < NV; v++) vstore(o + g * Dh + (c + v) * VW, vload(o + g * Dh + (c + v) * VW) + acc[g][v]);
}

template <typename KvT, int HP>
static void attn_chunk_values(const KvT* const* vr, int64_t n, const float* p, int64_t Dh, float* o) {
  constexpr int VP = value_vectors(HP);
  const int64_t nc = Dh / VW, dv = nc * VW;
  int64_t c = 0;
  for (; c + VP <= nc; c += VP) attn_chunk_values_pass<KvT, HP, VP>(vr, n, p, Dh, c, o);
  for (; c < nc; c++) attn_chunk_values_pass<KvT, HP, 1>(vr, n, p, Dh, c, o);
  for (int64_t d = dv; d < Dh; d++)  // scalar tail of Dh
    for (int g = 0; g < HP; g++) {
      float acc = 0.0f;
      for (int64_t j = 0; j < n; j++) acc += p[g * kDecodeChunk + j] * kv_f32(vr[j][d]);
      o[g * Dh + d] += acc;
    }
}

// Online softmax, one row: n scores s (n a multiple of VW; -inf where masked, and at least one not) become
// p = exp(s - m'), m' = max(m, max s), folded into the running max m and sum l; the row's output o (Dh) is scaled by
// exp(m - m'). Decode chunks and prefill tiles both fold their rows here.
static inline void softmax_fold(float* s, int64_t n, float& m, float& l, float* o, int64_t Dh) {
  const float ninf = -std::numeric_limits<float>::infinity();
  vf mv = vf{} + ninf;
  for (int64_t c = 0; c < n; c += VW) {
    const vf x = vload(s + c);
    mv = x > mv ? x : mv;
  }
  const float cmax = vmax(mv), mn = m > cmax ? m : cmax;
  vf sum = {};
  for (int64_t c = 0; c < n; c += VW) {
    const vf e = attn_exp(vload(s + c) - mn);  // masked: -inf -> 0
    vstore(s + c, e);
    sum += e;
  }
  const float corr = m == ninf ? 0.0f : std::exp(m - mn);
  l = l * corr + vsum(sum);
  m = mn;
  if (corr != 1.0f)
    for (int64_t d = 0; d < Dh; d++) o[d] *= corr;
}

// One chunk of n keys for HP query heads of one KV head (rows kr[j], vr[j]): scores, the online softmax, the values.
// q, o: HP rows of Dh; m, l: HP.
template <typename KvT, int HP>
static void attn_chunk_heads(const KvT* const* kr, const KvT* const* vr, int64_t n, const float* q, int64_t Dh,
                             float scale, float* o, float* m, float* l) {
  alignas(64) float s[HP * kDecodeChunk];
  attn_chunk_scores<KvT, HP>(kr, n, q, Dh, scale, s);
  const int64_t np = (n + VW - 1) / VW * VW;
  for (int g = 0; g < HP; g++) {
    float* sg = s + g * kDecodeChunk;
    for (int64_t j = n; j < np; j++) sg[j] = -std::numeric_limits<float>::infinity();  // padding
    softmax_fold(sg, np, m[g], l[g], o + g * Dh, Dh);
  }
  attn_chunk_values<KvT, HP>(vr, n, s, Dh, o);
}

template <typename KvT>
static void attn_decode_t(const KvCache& kv, int64_t layer, const int32_t* table, int64_t k0, int64_t k1, int64_t h0,
                          int64_t nh, int64_t G, const float* q, int64_t Dh, float scale, float* o, float* m,
                          float* l) {
  const int64_t bs = kv.block_size, ld = kv.slot_elems(), H = nh * G;
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t g = 0; g < H; g++) {
    m[g] = ninf;
    l[g] = 0.0f;
  }
  for (int64_t i = 0; i < H * Dh; i++) o[i] = 0.0f;
  // rows of keys [j0, j1): pointers to their first KV head's K and V (walking the block table, no division per key)
  const auto rows = [&](int64_t j0, int64_t j1, const KvT** kr, const KvT** vr) {
    for (int64_t j = j0, i = 0; j < j1;) {
      const int64_t blk = table[j / bs], slot = j % bs, n = std::min(bs - slot, j1 - j);
      const KvT* kb = kv.k_at<KvT>(layer, blk, slot) + h0 * Dh;
      const KvT* vb = kv.v_at<KvT>(layer, blk, slot) + h0 * Dh;
      for (int64_t r = 0; r < n; r++, i++) {
        kr[i] = kb + r * ld;
        vr[i] = vb + r * ld;
      }
      j += n;
    }
  };
  // this chunk's rows (buffer cur) and the next one's (cur ^ 1)
  const KvT* kr[2][kDecodeChunk];
  const KvT* vr[2][kDecodeChunk];
  int cur = 0;
  rows(k0, std::min(k0 + kDecodeChunk, k1), kr[cur], vr[cur]);
  // query heads in passes of at most kMaxHeadsPerPass, as even as the count allows (7 heads: 4 and 3 on AVX2)
  const int64_t passes = (G + kMaxHeadsPerPass - 1) / kMaxHeadsPerPass;
  for (int64_t c0 = k0; c0 < k1; c0 += kDecodeChunk, cur ^= 1) {
    const int64_t n = std::min(kDecodeChunk, k1 - c0), pn = std::min(kDecodeChunk, k1 - c0 - n);
    if (pn > 0) rows(c0 + n, c0 + n + pn, kr[cur ^ 1], vr[cur ^ 1]);
    for (int64_t h = 0; h < nh; h++) {
      // the next chunk's rows of this KV head, in flight while this chunk's are computed (a chunk's blocks are
      // scattered: the hardware prefetchers lose the stream at every block boundary; the whole next chunk at once
      // queued more misses than the core keeps in flight)
      for (int64_t j = 0; j < pn; j++) {
        kv_prefetch_block(kr[cur ^ 1][j] + h * Dh, 1, 0, Dh);
        kv_prefetch_block(vr[cur ^ 1][j] + h * Dh, 1, 0, Dh);
      }
      const KvT* kh[kDecodeChunk];
      const KvT* vh[kDecodeChunk];
      for (int64_t j = 0; j < n; j++) {
        kh[j] = kr[cur][j] + h * Dh;
        vh[j] = vr[cur][j] + h * Dh;
      }
      for (int64_t p = 0, g0 = h * G, g1 = (h + 1) * G; p < passes; p++) {
        const int64_t hp = (g1 - g0) / (passes - p);
        const float* qg = q + g0 * Dh;
        float *og = o + g0 * Dh, *mg = m + g0, *lg = l + g0;
        switch (hp) {
          case 1: attn_chunk_heads<KvT, 1>(kh, vh, n, qg, Dh, scale, og, mg, lg); break;
          case 2: attn_chunk_heads<KvT, 2>(kh, vh, n, qg, Dh, scale, og, mg, lg); break;
          case 3: attn_chunk_heads<KvT, 3>(kh, vh, n, qg, Dh, scale, og, mg, lg); break;
#if defined(__AVX512F__)
          case 4: attn_chunk_heads<KvT, 4>(kh, vh, n, qg, Dh, scale, og, mg, lg); break;
          case 5: attn_chunk_heads<KvT, 5>(kh, vh, n, qg, Dh, scale, og, mg, lg); break;
          case 6: attn_chunk_heads<KvT, 6>(kh, vh, n, qg, Dh, scale, og, mg, lg); break;
          case 7: attn_chunk_heads<KvT, 7>(kh, vh, n, qg, Dh, scale, og, mg, lg); break;
          default: attn_chunk_heads<KvT, 8>(kh, vh, n, qg, Dh, scale, og, mg, lg); break;
#else
          default: attn_chunk_heads<KvT, 4>(kh, vh, n, qg, Dh, scale, og, mg, lg); break;
#endif
        }
        g0 += hp;
      }
    }
  }
}

void attn_decode(const KvCache& kv, int64_t layer, const int32_t* table, int64_t k0, int64_t k1, int64_t h0,
                 int64_t nh, int64_t G, const float* q, int64_t Dh, float scale, float* o, float* m, float* l) {
  if (kv.dtype == DType::BF16)
    attn_decode_t<uint16_t>(kv, layer, table, k0, k1, h0, nh, G, q, Dh, scale, o, m, l);
  else
    attn_decode_t<float>(kv, layer, table, k0, k1, h0, nh, G, q, Dh, scale, o, m, l);
}

// o[rows] += Σ_j p[row][j] · v_j over the chunk's nk keys for NR rows at once (prow[k], orow[k]: the rows' p over the
// chunk and output), 2·VW lanes of Dh at a time: each value load serves NR rows (the per-row form loaded a value
// vector per FMA)
template <int NR>
static inline void tile_values(const float* const* prow, float* const* orow, const float* vc, int64_t nk, int64_t Dh) {
  int64_t d0 = 0;
  for (; d0 + 2 * VW <= Dh; d0 += 2 * VW) {
    vf a0[NR] = {}, a1[NR] = {};
    for (int64_t jj = 0; jj < nk; jj++) {
      const vf v0 = vload(vc + jj * Dh + d0), v1 = vload(vc + jj * Dh + d0 + VW);
      for (int k = 0; k < NR; k++) {
        const float p = prow[k][jj];
        a0[k] += p * v0;
        a1[k] += p * v1;
      }
    }
    for (int k = 0; k < NR; k++) {
      vstore(orow[k] + d0, vload(orow[k] + d0) + a0[k]);
      vstore(orow[k] + d0 + VW, vload(orow[k] + d0 + VW) + a1[k]);
    }
  }
  for (; d0 + VW <= Dh; d0 += VW) {
    vf a0[NR] = {};
    for (int64_t jj = 0; jj < nk; jj++) {
      const vf v0 = vload(vc + jj * Dh + d0);
      for (int k = 0; k < NR; k++) a0[k] += prow[k][jj] * v0;
    }
    for (int k = 0; k < NR; k++) vstore(orow[k] + d0, vload(orow[k] + d0) + a0[k]);
  }
  for (; d0 < Dh; d0++)
    for (int k = 0; k < NR; k++) {
      float a = 0.0f;
      for (int64_t jj = 0; jj < nk; jj++) a += prow[k][jj] * vc[jj * Dh + d0];
      orow[k][d0] += a;
    }
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
  float* zero = sc + R * KB;  // (KB) zeros: p of a value pass's padding rows
  float* sink = zero + KB;    // (Dh) their output, discarded
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < R; r++) {
    m[r] = ninf;
    l[r] = 0.0f;
  }
  for (int64_t i = 0; i < R * Dh; i++) o[i] = 0.0f;
  for (int64_t j = 0; j < KB; j++) zero[j] = 0.0f;
  const int64_t last = pos0 + nq - 1;
  // first key a query at position p sees
  const auto first_key = [window](int64_t p) { return window > 0 ? std::max<int64_t>(0, p - window + 1) : int64_t(0); };
  const int64_t kmin = first_key(pos0);
  constexpr int64_t SUB = 2 * VW;  // keys per score pass: two vectors of each transposed key row
  for (int64_t c = kmin; c <= last; c += KB) {
    const int64_t nk = std::min<int64_t>(KB, last + 1 - c);
    // gather (and widen, for bf16) the chunk: K transposed to kt (Dh, KB), V to vc (KB, Dh)
    for (int64_t jj = 0; jj < nk; jj++) {
      const int64_t j = c + jj, blk = table[j / bs], slot = j % bs;
      const KvT* kp = kv.k_at<KvT>(layer, blk, slot) + kvh * Dh;
      const KvT* vp = kv.v_at<KvT>(layer, blk, slot) + kvh * Dh;
      for (int64_t d = 0; d < Dh; d++) kt[d * KB + jj] = kv_f32(kp[d]);
      int64_t d = 0;
      for (; d + VW <= Dh; d += VW) vstore(vc + jj * Dh + d, kv_vload(vp + d));
      for (; d < Dh; d++) vc[jj * Dh + d] = kv_f32(vp[d]);
    }
    const int64_t nkp = (nk + SUB - 1) / SUB * SUB;  // keys the score passes cover
    for (int64_t jj = nk; jj < nkp; jj++)
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
    // scores, four query vectors at a time (independent accumulator chains share each key load), SUB keys a pass
    for (int64_t r0 = r_lo; r0 < r_hi; r0 += 4) {
      const float* qp[4];
      for (int k = 0; k < 4; k++) {
        const int64_t rr = std::min(r0 + k, r_hi - 1);
        qp[k] = q + (rr / G) * ldq + (rr % G) * Dh;
      }
      for (int64_t j0 = 0; j0 < nkp; j0 += SUB) {
        vf acc[4][2] = {};
        for (int64_t d = 0; d < Dh; d++) {
          const vf k0 = vload(kt + d * KB + j0), k1 = vload(kt + d * KB + j0 + VW);
          for (int k = 0; k < 4; k++) {
            acc[k][0] += qp[k][d] * k0;
            acc[k][1] += qp[k][d] * k1;
          }
        }
        for (int k = 0; k < 4 && r0 + k < r_hi; k++) {
          vstore(sc + (r0 + k) * KB + j0, acc[k][0] * scale);
          vstore(sc + (r0 + k) * KB + j0 + VW, acc[k][1] * scale);
        }
      }
    }
    // per row: mask the keys it does not see, fold the chunk into its running max and sum, scale its output
    for (int64_t r = r_lo; r < r_hi; r++) {
      const int64_t pos = pos0 + r / G, lo = first_key(pos);
      float* s = sc + r * KB;
      for (int64_t j0 = 0; j0 < nkp; j0 += VW) {
        vfi idx = {};
        for (int i = 0; i < VW; i++) idx[i] = int32_t(c + j0 + i);
        const vf x = vload(s + j0);
        vstore(s + j0, (idx > int32_t(pos)) | (idx < int32_t(lo)) | (idx >= int32_t(c + nk)) ? vf{} + ninf : x);
      }
      softmax_fold(s, nkp, m[r], l[r], o + r * Dh, Dh);
    }
    // O_r += Σ_j p_j·V_j, four rows at a time (padding rows: p of zeros into a sink)
    for (int64_t r0 = r_lo; r0 < r_hi; r0 += 4) {
      const float* prow[4];
      float* orow[4];
      for (int k = 0; k < 4; k++) {
        const bool in = r0 + k < r_hi;
        prow[k] = in ? sc + (r0 + k) * KB : zero;
        orow[k] = in ? o + (r0 + k) * Dh : sink;
      }
      tile_values<4>(prow, orow, vc, nk, Dh);
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
