// Body of the paged-attention inner kernel, compiled once per ISA (included inside
// namespace loom::llama::<isa> by llama.cc (portable), llama_attn_avx2.cc, llama_attn_avx512.cc; the
// file's -m flags decide the vector width). Plain loops written so the compiler vectorizes them:
// fixed-width partial sums for dot products, straight axpy for the value sum.
//
// One query token, one KV head, its G query heads (GQA group):
//   q (G, Dh), keys/values: positions [start, ctx) of the sequence (start > 0 with a sliding window),
//   found through the block table. scores: (G, ctx - start) scores, then Dh floats for one widened
//   row; out (G, Dh) = softmax(q·Kᵀ·scale) · V
// The cache holds f32 or bf16 (kv.dtype): each kernel is a template over the stored element type
// KvT (float or uint16_t bf16 bits), chosen once per call; rows are widened to f32 where they are
// read, and all math is fp32.
// Must be included after <cmath>, <cstring>, <limits>, llama.h and ../ops/ops_table.h.

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

// One stored cache element as f32 (bf16: the bits shifted into the high half, exact).
static inline float kv_f32(float x) { return x; }
static inline float kv_f32(uint16_t h) { return bf16_to_f32(h); }

// A cache row of n elements as f32: an f32 row is read in place; a bf16 row is widened into buf
// (a plain loop the compiler turns into zero-extend + shift at the file's vector width).
static inline const float* kv_row_f32(const float* p, int64_t, float*) { return p; }
static inline const float* kv_row_f32(const uint16_t* p, int64_t n, float* buf) {
  for (int64_t i = 0; i < n; i++) buf[i] = bf16_to_f32(p[i]);
  return buf;
}

template <typename KvT>
static void attn_group_t(const KvCache& kv, int64_t layer, const int32_t* table, int64_t start, int64_t ctx,
                         int64_t kvh, int64_t G, const float* q, int64_t Dh, float scale, float* out, float* scores) {
  const int64_t bs = kv.block_size;
  const int64_t nblk = (ctx + bs - 1) / bs;
  const int64_t n_keys = ctx - start;
  const int64_t ld = kv.slot_elems();
  float* row = scores + G * n_keys;  // (Dh) one widened key or value row (bf16 caches)
  // scores[g, j - start] = q_g · k_j · scale   (each key widened once, shared by the G heads)
  for (int64_t bi = start / bs; bi < nblk; bi++) {
    const int64_t j0 = std::max(bi * bs, start), j1 = std::min((bi + 1) * bs, ctx);
    const KvT* kb = kv.k_at<KvT>(layer, table[bi], 0) + kvh * Dh;
    for (int64_t j = j0; j < j1; j++) {
      const float* kp = kv_row_f32(kb + (j - bi * bs) * ld, Dh, row);
      for (int64_t g = 0; g < G; g++) scores[g * n_keys + j - start] = attn_dot(q + g * Dh, kp, Dh) * scale;
    }
  }
  // softmax per head, in place: (G, n_keys) rows, the active ISA's vectorized kernel
  ops_active().softmax_fwd(G, n_keys, scores, scores);
  for (int64_t i = 0; i < G * Dh; i++) out[i] = 0.0f;
  for (int64_t bi = start / bs; bi < nblk; bi++) {
    const int64_t j0 = std::max(bi * bs, start), j1 = std::min((bi + 1) * bs, ctx);
    const KvT* vb = kv.v_at<KvT>(layer, table[bi], 0) + kvh * Dh;
    for (int64_t j = j0; j < j1; j++) {
      const float* vp = kv_row_f32(vb + (j - bi * bs) * ld, Dh, row);
      for (int64_t g = 0; g < G; g++) attn_axpy(Dh, scores[g * n_keys + j - start], vp, out + g * Dh);
    }
  }
}

void attn_group(const KvCache& kv, int64_t layer, const int32_t* table, int64_t start, int64_t ctx, int64_t kvh,
                int64_t G, const float* q, int64_t Dh, float scale, float* out, float* scores) {
  if (kv.dtype == DType::BF16)
    attn_group_t<uint16_t>(kv, layer, table, start, ctx, kvh, G, q, Dh, scale, out, scores);
  else
    attn_group_t<float>(kv, layer, table, start, ctx, kvh, G, q, Dh, scale, out, scores);
}

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
