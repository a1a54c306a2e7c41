// BLIS-style GEMM / GEMV, written once and compiled per ISA.
//
// Included INSIDE `namespace loom::<isa>` by gemm_avx2.cc and gemm_avx512.cc (system headers
// and gemm_internal.h are included before), after they define:
//   struct V        the vector type: reg, W (floats per register), zero, loadu, bcast, fma, add,
//                   mul, set1, storeu, loadw(float* | bf16w* | f16w*) (W weights widened to fp32),
//                   to256(reg) (sum of the 256-bit halves; identity on AVX2)
//   MR, NV          micro-tile: MR rows of C × NR = NV·W columns, MR·NV accumulators in registers
//   KC, MC, NC      cache blocking: KC×NR micro-panel of B in L1, MC×KC block of A in L2,
//                   KC×NC block of B in L3
//   DOT_MR          rows of x per dot-product tile in the small-M path (DOT_MR × 4 accumulators)
// Everything here has internal linkage or lives in the ISA namespace, so the two copies never
// collide at link time.
//
// Layout of the loops (C = alpha·op(A)·op(B) + beta·C, row-major C):
//   for jc in N step NC:            (per thread: N, or M, is split across the pool first)
//     for pc in K step KC:          pack B block (kc × nc) into NR-wide panels [kc][NR]
//       for ic in M step MC:        pack A block (mc × kc) into MR-high panels [kc][MR]
//         for jr in nc step NR:
//           for ir in mc step MR:   micro-kernel: MR×NR tile, kc rank-1 updates in registers
// Pre-packed weights are already NR-wide panels over the whole K, so the pack-B step is skipped.

static constexpr int W = V::W;
static constexpr int NR = NV * W;
using reg = typename V::reg;
using ireg = typename V::ireg;

static inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }
static inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
static inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// ---------------------------------------------------------------------------------------------
// Scalar and 8-wide loads of every weight type (the packing transposes work on 8×8 blocks of
// __m256 on every ISA).
// ---------------------------------------------------------------------------------------------
static inline float load1(const float* p) { return *p; }
static inline float load1(const bf16w* p) { return bf16_to_f32(p->v); }
static inline float load1(const f16w* p) { return f16_to_f32(p->v); }
static inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }
static inline __m256 load8(const bf16w* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i*)p)), 16));
}
static inline __m256 load8(const f16w* p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p)); }

static inline void transpose8(__m256 r[8]) {
  __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// ---------------------------------------------------------------------------------------------
// Packing
// ---------------------------------------------------------------------------------------------
// Row panels of an A block: mc rows in ceil(mc/MR) panels of balanced height (32 rows with MR = 6:
// 6,6,5,5,5,5, not 6,6,6,6,6,2): a micro-kernel needs about MR·NV independent accumulators to
// cover the FMA latency, so one thin leftover tile costs nearly as much as a full one.
struct RowPanels {
  int64_t n, base, extra;
  explicit RowPanels(int64_t mc) : n((mc + MR - 1) / MR), base(n ? mc / n : 0), extra(n ? mc % n : 0) {}
  int64_t start(int64_t p) const { return p * base + (p < extra ? p : extra); }
  int64_t rows(int64_t p) const { return base + (p < extra ? 1 : 0); }
};

// One row panel of A (mr ≤ MR rows) with contiguous rows (cs == 1, the usual case): 8 rows × 8 k
// at a time through an 8×8 register transpose; each transposed vector holds one k for up to 8 rows.
static void pack_a_rows(int64_t mr, int64_t kc, const float* a, int64_t rs, float* d) {
  int64_t k = 0;
  for (; k + 8 <= kc; k += 8)
    for (int g = 0; g < MR; g += 8) {
      const int n = MR - g < 8 ? MR - g : 8;  // panel slots in this group
      __m256 r[8];
      for (int i = 0; i < 8; i++) r[i] = g + i < mr ? _mm256_loadu_ps(a + (g + i) * rs + k) : _mm256_setzero_ps();
      transpose8(r);
      for (int j = 0; j < 8; j++) {
        float* o = d + (k + j) * MR + g;
        if (n == 8) {
          _mm256_storeu_ps(o, r[j]);
        } else {
          const __m128 lo = _mm256_castps256_ps128(r[j]);
          if (n >= 4) _mm_storeu_ps(o, lo);
          if (n == 6) _mm_storel_pi(reinterpret_cast<__m64*>(o + 4), _mm256_extractf128_ps(r[j], 1));
          else if (n != 4) for (int i = 0; i < n; i++) o[i] = r[j][i];
        }
      }
    }
  for (; k < kc; k++)
    for (int64_t i = 0; i < MR; i++) d[k * MR + i] = i < mr ? a[i * rs + k] : 0.0f;
}

// A block: element (i, k) of op(A) at a[i*rs + k*cs], i < mc, k < kc  ->  RowPanels(mc) panels
// [kc][MR] (slots past a panel's rows are zero). ROUND: round to bf16 (emulated bf16 compute).
template <bool ROUND>
static void pack_a(int64_t mc, int64_t kc, const float* a, int64_t rs, int64_t cs, float* dst) {
  const RowPanels rp(mc);
  for (int64_t p = 0; p < rp.n; p++) {
    const int64_t i0 = rp.start(p), mr = rp.rows(p);
    float* d = dst + p * kc * MR;
    if (!ROUND && cs == 1) {
      pack_a_rows(mr, kc, a + i0 * rs, rs, d);
      continue;
    }
    if (!ROUND && rs == 1) {  // transposed operand (sgemm ta: dB = dyᵀ·xa of LoRA): each k's mr values are adjacent
      for (int64_t k = 0; k < kc; k++) {
        const float* s = a + i0 + k * cs;
        float* o = d + k * MR;
        for (int64_t i = 0; i < MR; i++) o[i] = i < mr ? s[i] : 0.0f;
      }
      continue;
    }
    for (int64_t i = 0; i < MR; i++) {
      if (i >= mr) {
        for (int64_t k = 0; k < kc; k++) d[k * MR + i] = 0.0f;
        continue;
      }
      const float* s = a + (i0 + i) * rs;
      for (int64_t k = 0; k < kc; k++) {
        float v = s[k * cs];
        if (ROUND) v = bf16_to_f32(f32_to_bf16(v));
        d[k * MR + i] = v;
      }
    }
  }
}

// B block from rows of W: element (k, n) at b[n*ld + k], n < nc, k < kc  ->  ceil(nc/NR)
// panels [kc][NR] (columns past nc are zero). 8×8 register transposes.
template <typename T>
static void pack_b_nk(int64_t nc, int64_t kc, const T* b, int64_t ld, float* dst) {
  for (int64_t j0 = 0; j0 < nc; j0 += NR) {
    float* d = dst + (j0 / NR) * kc * NR;
    for (int g = 0; g < NR; g += 8) {
      const int64_t rows = nc - j0 - g;
      const T* r0 = b + (j0 + g) * ld;
      if (rows >= 8) {
        int64_t k = 0;
        for (; k + 8 <= kc; k += 8) {
          __m256 r[8];
          for (int i = 0; i < 8; i++) r[i] = load8(r0 + i * ld + k);
          transpose8(r);
          for (int i = 0; i < 8; i++) _mm256_storeu_ps(d + (k + i) * NR + g, r[i]);
        }
        for (; k < kc; k++)
          for (int i = 0; i < 8; i++) d[k * NR + g + i] = load1(r0 + i * ld + k);
      } else {
        for (int64_t k = 0; k < kc; k++)
          for (int i = 0; i < 8; i++) d[k * NR + g + i] = i < rows ? load1(r0 + i * ld + k) : 0.0f;
      }
    }
  }
}

// B block from a (K, N) row-major matrix: element (k, n) at b[k*ld + n]  ->  panels [kc][NR].
// T = float, or bf16w (widened to fp32 while packing: dx = dy·W of a linear layer's bf16 weights).
template <typename T>
static void pack_b_kn(int64_t nc, int64_t kc, const T* b, int64_t ld, float* dst) {
  for (int64_t j0 = 0; j0 < nc; j0 += NR) {
    float* d = dst + (j0 / NR) * kc * NR;
    const int64_t cols = imin(NR, nc - j0);
    for (int64_t k = 0; k < kc; k++) {
      const T* s = b + k * ld + j0;
      float* o = d + k * NR;
      if (cols == NR) {
        for (int v = 0; v < NV; v++) V::storeu(o + v * W, V::loadw(s + v * W));
      } else {
        for (int64_t j = 0; j < NR; j++) o[j] = j < cols ? load1(s + j) : 0.0f;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Micro-kernel: C[0:mr, 0:nv] (= or +=) alpha · Apanel[kc][MR] · Bpanel[kc][NR] (+ bias)
// ---------------------------------------------------------------------------------------------
struct Epi {
  float alpha, beta;
  const float* bias;  // at the tile's first column, or null
};

// C tile store: alpha·acc (+ beta·C) (+ bias), full width straight from registers, a partial
// tile (N edge) through a small buffer.
template <int mr>
static inline __attribute__((always_inline)) void store_tile(reg (&acc)[mr][NV], float* c, int64_t ldc, int64_t nv,
                                                             const Epi& e) {
  if (nv == NR) {
    const reg va = V::set1(e.alpha), vb = V::set1(e.beta);
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
      for (int v = 0; v < NV; v++) {
        float* cp = c + i * ldc + v * W;
        reg r = acc[i][v];
        if (e.alpha != 1.0f) r = V::mul(va, r);
        if (e.beta != 0.0f) r = V::fma(vb, V::loadu(cp), r);
        if (e.bias) r = V::add(r, V::loadu(e.bias + v * W));
        V::storeu(cp, r);
      }
  } else {
    alignas(64) float tmp[mr][NR];
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
      for (int v = 0; v < NV; v++) V::storeu(&tmp[i][v * W], acc[i][v]);
    for (int i = 0; i < mr; i++)
      for (int64_t j = 0; j < nv; j++) {
        float r = e.alpha * tmp[i][j];
        float* cp = c + i * ldc + j;
        if (e.beta != 0.0f) r += e.beta * *cp;
        if (e.bias) r += e.bias[j];
        *cp = r;
      }
  }
}

static inline reg loadb(const float* p) { return V::loadu(p); }
static inline reg loadb(const uint16_t* p) { return V::loadw(reinterpret_cast<const bf16w*>(p)); }

// Prefetch of the next B panel, spread over the micro-kernels that use this one: each call pulls
// `lines` cache lines from `p`, one every few k steps. Issued in one burst at panel start, a 16 KiB
// panel is 256 misses against a few dozen fill buffers and the loads behind them wait; spread out,
// the stream from DRAM overlaps the FMAs (weights larger than the L3 read at about the rate of
// cache-resident ones).
struct Prefetch {
  const char* p;
  int64_t lines;
};

template <int mr, typename BT>
static void ukernel(int64_t kc, const float* __restrict a, const BT* __restrict b, float* c, int64_t ldc,
                    int64_t nv, const Epi& e, Prefetch pf) {
  // The C tile is read (later K blocks add to it) or written once the k loop ends: ask for its
  // lines now. With thousands of rows C outgrows the L3 between two K blocks, and the tile's row
  // misses at the end of every micro-kernel cost 4-18 % of a large-batch encoder GEMM.
#pragma GCC unroll 16
  for (int i = 0; i < mr; i++) {
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc), _MM_HINT_T0);
    _mm_prefetch(reinterpret_cast<const char*>(c + i * ldc + NR - 1), _MM_HINT_T0);
  }
  reg acc[mr][NV];
#pragma GCC unroll 16
  for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++) acc[i][v] = V::zero();
  auto step = [&]() __attribute__((always_inline)) {
    reg bv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++) bv[v] = loadb(b + v * W);
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++) {
      reg ai = V::bcast(a + i);
#pragma GCC unroll 8
      for (int v = 0; v < NV; v++) acc[i][v] = V::fma(ai, bv[v], acc[i][v]);
    }
    a += MR;
    b += NR;
  };
  int64_t k = 0;
  if (pf.lines > 0) {
    const int64_t per = ceil_div(pf.lines, kc);            // lines per group
    const int64_t every = imax(1, kc / ceil_div(pf.lines, per));  // k steps per group
    for (int64_t left = pf.lines; left > 0 && k + every <= kc;) {
      for (int64_t q = 0; q < per && left > 0; q++, left--, pf.p += 64) _mm_prefetch(pf.p, _MM_HINT_T0);
#pragma GCC unroll 2
      for (int64_t end = k + every; k < end; k++) step();
    }
  }
#pragma GCC unroll 2
  for (; k < kc; k++) step();
  store_tile<mr>(acc, c, ldc, nv, e);
}

template <typename BT>
using UKernel = void (*)(int64_t, const float*, const BT*, float*, int64_t, int64_t, const Epi&, Prefetch);

template <typename BT, int... I>
static inline UKernel<BT> ukernel_for(int mr, std::integer_sequence<int, I...>) {
  static const UKernel<BT> table[] = {&ukernel<I + 1, BT>...};
  return table[mr - 1];
}
template <typename BT>
static inline UKernel<BT> ukernel_for(int mr) {
  return ukernel_for<BT>(mr, std::make_integer_sequence<int, MR>{});
}

// ---------------------------------------------------------------------------------------------
// Per-thread packing buffers (grown on demand, kept for the thread's life)
// ---------------------------------------------------------------------------------------------
struct Scratch {  // 0: A block, 1: B block, 2: a B block the pool's threads share (gemm_shared_b)
  float* buf[3] = {nullptr, nullptr, nullptr};
  size_t cap[3] = {0, 0, 0};
  float* get(int which, size_t n) {
    if (cap[which] < n) {
      aligned_free(buf[which]);
      buf[which] = static_cast<float*>(aligned_malloc(n * sizeof(float) + 64));
      cap[which] = n;
    }
    return buf[which];
  }
  ~Scratch() {
    for (float* b : buf) aligned_free(b);
  }
};
static thread_local Scratch t_scratch;

// ---------------------------------------------------------------------------------------------
// B sources: block(jc, nc, pc, kc) returns the panels of B[pc:pc+kc, jc:jc+nc] and their stride.
// ---------------------------------------------------------------------------------------------
// B sources. Packed on the fly: pack(j, nv, pc, kc, dst) writes one NR-wide panel of
// B[pc:pc+kc, j:j+nv] as [kc][NR]; it runs inside the jr loop of the first row block, right
// before the micro-kernels use the panel (still in L1/L2), so packing overlaps with compute and
// W streams from memory once. Pre-packed: panel(j, pc) points into the weight_pack layout.
template <typename T>
struct BFromNK {  // (k, n) at b[n*ld + k]: linear-layer weights (N, K), or sgemm with tb
  using elem = float;
  static constexpr bool prepacked = false;
  const T* b;
  int64_t ld;
  void pack(int64_t j, int64_t nv, int64_t pc, int64_t kc, float* dst) const {
    pack_b_nk(nv, kc, b + j * ld + pc, ld, dst);
  }
  // Pulls the source of a later panel toward L2 while the micro-kernels run (NR short row
  // segments at a large stride: the hardware prefetchers do not pick them up from DRAM).
  void prefetch(int64_t j, int64_t nv, int64_t pc, int64_t kc) const {
    const int64_t step = 64 / int64_t(sizeof(T));
    for (int64_t r = 0; r < nv; r++) {
      const char* row = reinterpret_cast<const char*>(b + (j + r) * ld + pc);
      for (int64_t k = 0; k < kc; k += step) _mm_prefetch(row + k * int64_t(sizeof(T)), _MM_HINT_T1);
    }
  }
  const float* panel(int64_t, int64_t) const { return nullptr; }
};

template <typename T>
struct BFromKN {  // (k, n) at b[k*ld + n]: sgemm without tb (T float), sgemm_bf16 (T bf16w)
  using elem = float;
  static constexpr bool prepacked = false;
  const T* b;
  int64_t ld;
  void pack(int64_t j, int64_t nv, int64_t pc, int64_t kc, float* dst) const {
    pack_b_kn(nv, kc, b + pc * ld + j, ld, dst);
  }
  void prefetch(int64_t j, int64_t nv, int64_t pc, int64_t kc) const {
    const int64_t step = 64 / int64_t(sizeof(T));
    for (int64_t k = 0; k < kc; k++)
      for (int64_t c = 0; c < nv; c += step)
        _mm_prefetch(reinterpret_cast<const char*>(b + (pc + k) * ld + j + c), _MM_HINT_T1);
  }
  const float* panel(int64_t, int64_t) const { return nullptr; }
};

template <typename T>
struct BPrepacked {  // whole-K panels from weight_pack (j is a multiple of NR)
  using elem = T;
  static constexpr bool prepacked = true;
  const T* data;
  int64_t K;
  void pack(int64_t, int64_t, int64_t, int64_t, float*) const {}
  // (the next panel is prefetched by the micro-kernels: see Prefetch)
  const T* panel(int64_t j, int64_t pc) const { return data + (j / NR) * K * NR + pc * NR; }
};

// A: element (i, k) of op(A) at a[i*rs + k*cs].
struct ASrc {
  const float* a;
  int64_t rs, cs;
  bool round_bf16;
};

// C[m0:m1, n0:n1] on the calling thread. n0 is a multiple of NR.
template <typename BS>
static void gemm_serial(int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t K, const ASrc& A, const BS& bs,
                        float* C, int64_t ldc, const Epi& e) {
  using BT = typename BS::elem;
  const int64_t M = m1 - m0;
  const int64_t kcb = ceil_div(K, ceil_div(K, KC));                // balanced K blocks
  const int64_t mcb = round_up(ceil_div(M, ceil_div(M, MC)), MR);  // balanced M blocks
  for (int64_t jc = n0; jc < n1; jc += NC) {
    const int64_t nc = imin(NC, n1 - jc);
    for (int64_t pc = 0; pc < K; pc += kcb) {
      const int64_t kc = imin(kcb, K - pc);
      // One row block: each B panel is used right after packing, so one panel-sized buffer
      // (stays in L1/L2) does; several: the whole packed block is kept for the later blocks.
      const bool one_block = m1 - m0 <= mcb;
      float* bbuf = BS::prepacked ? nullptr : t_scratch.get(1, size_t((one_block ? NR : round_up(nc, NR)) * kc));
      for (int64_t ic = m0; ic < m1; ic += mcb) {
        const int64_t mc = imin(mcb, m1 - ic);
        float* ap = t_scratch.get(0, size_t(round_up(mc, MR) * kc));
        const float* asrc = A.a + ic * A.rs + pc * A.cs;
        if (A.round_bf16) pack_a<true>(mc, kc, asrc, A.rs, A.cs, ap);
        else pack_a<false>(mc, kc, asrc, A.rs, A.cs, ap);
        for (int64_t jr = 0; jr < nc; jr += NR) {
          const int64_t nv = imin(NR, nc - jr);
          const BT* bpanel;
          Prefetch pf{nullptr, 0};
          if constexpr (BS::prepacked) {
            bpanel = bs.panel(jc + jr, pc);
            // the panel after this one: next columns, else the next K block's first panel
            const BT* next = jr + NR < nc ? bs.panel(jc + jr + NR, pc) : pc + kc < K ? bs.panel(jc, pc + kc) : nullptr;
            if (next) pf = {reinterpret_cast<const char*>(next), ceil_div(kc * NR * int64_t(sizeof(BT)), 64)};
          } else {
            float* d = one_block ? bbuf : bbuf + (jr / NR) * kc * NR;
            if (ic == m0) {
              bs.pack(jc + jr, nv, pc, kc, d);
              if (jr + 2 * NR < nc) bs.prefetch(jc + jr + 2 * NR, imin(NR, nc - jr - 2 * NR), pc, kc);
            }
            bpanel = reinterpret_cast<const BT*>(d);
          }
          Epi ej{e.alpha, pc == 0 ? e.beta : 1.0f, pc == 0 && e.bias ? e.bias + jc + jr : nullptr};
          const RowPanels rp(mc);
          for (int64_t p = 0; p < rp.n; p++) {
            const int64_t ir = rp.start(p);
            // this call's share of the next panel's lines
            const int64_t l0 = pf.lines * p / rp.n, l1 = pf.lines * (p + 1) / rp.n;
            ukernel_for<BT>(int(rp.rows(p)))(kc, ap + p * kc * MR, bpanel, C + (ic + ir) * ldc + jc + jr, ldc, nv, ej,
                                             Prefetch{pf.p ? pf.p + l0 * 64 : nullptr, l1 - l0});
          }
        }
      }
    }
  }
}

// Splits C over the pool: by NR-aligned column ranges when there are enough panels (each thread
// packs its own B and reads all of A), else by MR-aligned row ranges. serial(m0, m1, n0, n1).
template <typename F>
static void split_parallel(int64_t M, int64_t N, int64_t K, const F& serial) {
  int nth = threads_get();
  if (double(M) * double(N) * double(K) < 1.5e5) nth = 1;
  pool_run(nth, [&](int tid, int nt) {
    const int64_t npan = ceil_div(N, NR);
    if (nt == 1) {
      serial(0, M, 0, N);
    } else if (npan >= 2 * nt || M < 2 * MR * nt) {
      const int64_t per = ceil_div(npan, nt);
      const int64_t n0 = imin(N, tid * per * NR), n1 = imin(N, (tid + 1) * per * NR);
      if (n0 < n1) serial(0, M, n0, n1);
    } else {
      const int64_t per = round_up(ceil_div(M, nt), MR);
      const int64_t m0 = imin(M, tid * per), m1 = imin(M, (tid + 1) * per);
      if (m0 < m1) serial(m0, m1, 0, N);
    }
  });
}

// Tall C on several threads (training: M ~ 500-800 rows of a batch), one parallel region per K block: C's row
// blocks go one at a time to whichever thread is free; each packs its A block once, and B's panels are packed
// once into one buffer all threads read, by the first thread to need each (a thread that finds a panel being
// packed waits the few microseconds it takes). split_parallel's column split packs all of A on every thread
// and ties the threads to equal halves: a thread the OS preempts keeps the other waiting at the end. The tiles
// and their K order are gemm_serial's, so C is the same to the bit.
template <typename BS>
static void gemm_shared_b(int64_t M, int64_t N, int64_t K, const ASrc& A, const BS& bs, float* C, int64_t ldc,
                          const Epi& e, int nt) {
  const int64_t kcb = ceil_div(K, ceil_div(K, KC));
  const int64_t nmb = imax(ceil_div(M, MC), 2 * nt);
  const int64_t mcb = round_up(ceil_div(M, nmb), MR);
  const int64_t nblk = ceil_div(M, mcb);
  const int64_t npan_max = ceil_div(imin(N, NC), NR);
  std::unique_ptr<std::atomic<int>[]> state(new std::atomic<int>[size_t(npan_max)]);  // 0 to pack, 1 packing, 2 packed
  for (int64_t jc = 0; jc < N; jc += NC) {
    const int64_t nc = imin(NC, N - jc), npan = ceil_div(nc, NR);
    for (int64_t pc = 0; pc < K; pc += kcb) {
      const int64_t kc = imin(kcb, K - pc);
      float* bbuf = t_scratch.get(2, size_t(npan * NR * kc));  // the caller's, read by every thread
      for (int64_t p = 0; p < npan; p++) state[size_t(p)].store(0, std::memory_order_relaxed);
      auto panel = [&](int64_t p) -> const float* {
        float* d = bbuf + p * kc * NR;
        std::atomic<int>& st = state[size_t(p)];
        int expect = 0;
        if (st.load(std::memory_order_acquire) == 0 && st.compare_exchange_strong(expect, 1)) {
          bs.pack(jc + p * NR, imin(NR, nc - p * NR), pc, kc, d);
          st.store(2, std::memory_order_release);
        } else {
          for (int spins = 0; st.load(std::memory_order_acquire) != 2; spins++)
            if (spins < 2048) _mm_pause();
            else std::this_thread::yield();  // the packer was preempted
        }
        return d;
      };
      const Epi ej0{e.alpha, pc == 0 ? e.beta : 1.0f, pc == 0 ? e.bias : nullptr};
      parallel_tasks(nblk, [&](int64_t ib) {
        const int64_t ic = ib * mcb, mc = imin(mcb, M - ic);
        float* ap = t_scratch.get(0, size_t(round_up(mc, MR) * kc));
        const float* asrc = A.a + ic * A.rs + pc * A.cs;
        if (A.round_bf16) pack_a<true>(mc, kc, asrc, A.rs, A.cs, ap);
        else pack_a<false>(mc, kc, asrc, A.rs, A.cs, ap);
        const RowPanels rp(mc);
        // the first nt blocks start at different panels, so they pack different ones instead of queueing
        const int64_t p0 = ib < nt ? ib * npan / nt : 0;
        for (int64_t q = 0; q < npan; q++) {
          const int64_t jr = ((q + p0) % npan) * NR, nv = imin(NR, nc - jr);
          const float* bpanel = panel(jr / NR);
          const Epi ej{ej0.alpha, ej0.beta, ej0.bias ? ej0.bias + jc + jr : nullptr};
          for (int64_t p = 0; p < rp.n; p++)
            ukernel_for<float>(int(rp.rows(p)))(kc, ap + p * kc * MR, bpanel, C + (ic + rp.start(p)) * ldc + jc + jr,
                                                ldc, nv, ej, Prefetch{nullptr, 0});
        }
      });
    }
  }
}

template <typename BS>
static void gemm_parallel(int64_t M, int64_t N, int64_t K, const ASrc& A, const BS& bs, float* C, int64_t ldc,
                          const Epi& e) {
  const int nt = threads_get();
  if constexpr (!BS::prepacked) {
    if (nt > 1 && M >= 4 * MR * nt && ceil_div(N, NR) >= nt && double(M) * double(N) * double(K) >= 1.5e5)
      return gemm_shared_b(M, N, K, A, bs, C, ldc, e, nt);
  }
  split_parallel(M, N, K, [&](int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    gemm_serial(m0, m1, n0, n1, K, A, bs, C, ldc, e);
  });
}

// ---------------------------------------------------------------------------------------------
// Small M on unpacked weights: dot products along K, W read once per call (4 rows of W stay in
// L1/L2 while every row of x passes over them). Parallel over N.
// ---------------------------------------------------------------------------------------------
static inline __m128 hsum4(reg a, reg b, reg c, reg d) {
  __m256 t0 = _mm256_hadd_ps(V::to256(a), V::to256(b));
  __m256 t1 = _mm256_hadd_ps(V::to256(c), V::to256(d));
  __m256 t2 = _mm256_hadd_ps(t0, t1);
  return _mm_add_ps(_mm256_castps256_ps128(t2), _mm256_extractf128_ps(t2, 1));
}

// out[i][j] = x[i, :] · w_j[:] for i < mr, j < 4
template <int mr, typename WT>
static void dot_tile(int64_t K, const float* x, int64_t ldx, const WT* const w[4], float out[][4]) {
  reg acc[mr][4];
#pragma GCC unroll 16
  for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) acc[i][j] = V::zero();
  int64_t k = 0;
  for (; k + W <= K; k += W) {
    reg xv[mr];
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++) xv[i] = V::loadu(x + i * ldx + k);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
      reg wv = V::loadw(w[j] + k);
#pragma GCC unroll 16
      for (int i = 0; i < mr; i++) acc[i][j] = V::fma(xv[i], wv, acc[i][j]);
    }
  }
  if (k < K) {  // tail: zero-padded copies
    alignas(64) float xt[mr][W];
    alignas(64) float wt[4][W];
    for (int i = 0; i < mr; i++)
      for (int t = 0; t < W; t++) xt[i][t] = k + t < K ? x[i * ldx + k + t] : 0.0f;
    for (int j = 0; j < 4; j++)
      for (int t = 0; t < W; t++) wt[j][t] = k + t < K ? load1(w[j] + k + t) : 0.0f;
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
      for (int j = 0; j < 4; j++) acc[i][j] = V::fma(V::loadu(xt[i]), V::loadu(wt[j]), acc[i][j]);
  }
#pragma GCC unroll 16
  for (int i = 0; i < mr; i++) _mm_storeu_ps(out[i], hsum4(acc[i][0], acc[i][1], acc[i][2], acc[i][3]));
}

template <typename WT, int... I>
static inline void dot_tile_n(int mr, int64_t K, const float* x, int64_t ldx, const WT* const w[4], float out[][4],
                              std::integer_sequence<int, I...>) {
  using Fn = void (*)(int64_t, const float*, int64_t, const WT* const*, float(*)[4]);
  static const Fn table[] = {&dot_tile<I + 1, WT>...};
  table[mr - 1](K, x, ldx, w, out);
}

template <typename WT>
static void linear_dot(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const WT* w, int64_t ldw,
                       const float* bias, float* y, int64_t ldy, float beta) {
  const int64_t groups = ceil_div(N, 4);
  // ~32 KiB of weights per task at least, so tiny layers stay on one thread
  const int64_t grain = imax(1, 8192 / (K + 1));
  parallel_for(groups, grain, [&](int64_t g0, int64_t g1) {
    float out[DOT_MR][4];
    for (int64_t g = g0; g < g1; g++) {
      const int64_t n = g * 4;
      const int nvalid = int(imin(4, N - n));
      const WT* wr[4];
      for (int j = 0; j < 4; j++) wr[j] = w + imin(n + j, N - 1) * ldw;
      for (int64_t m = 0; m < M; m += DOT_MR) {
        const int mr = int(imin(DOT_MR, M - m));
        dot_tile_n<WT>(mr, K, x + m * ldx, ldx, wr, out, std::make_integer_sequence<int, DOT_MR>{});
        for (int i = 0; i < mr; i++) {
          float* yp = y + (m + i) * ldy + n;
          for (int j = 0; j < nvalid; j++) {
            float v = out[i][j] + (bias ? bias[n + j] : 0.0f);
            yp[j] = beta == 0.0f ? v : v + beta * yp[j];
          }
        }
      }
    }
  });
}

// ---------------------------------------------------------------------------------------------
// M = 1 on pre-packed panels: y[panel] = Σ_k x[k] · P[k][0:NR], 4 k-steps in flight.
// ---------------------------------------------------------------------------------------------
template <typename BT>
static void gemv_packed(int64_t N, int64_t K, const float* x, const BT* data, const float* bias, float* y,
                        float beta) {
  const int64_t npan = ceil_div(N, NR);
  const int64_t grain = imax(1, 16384 / (K * NR / 4 + 1));
  parallel_for(npan, grain, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; p++) {
      const BT* b = data + p * K * NR;
      reg acc[4][NV];
#pragma GCC unroll 4
      for (int u = 0; u < 4; u++)
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++) acc[u][v] = V::zero();
      int64_t k = 0;
      for (; k + 4 <= K; k += 4) {
#pragma GCC unroll 4
        for (int u = 0; u < 4; u++) {
          reg xb = V::bcast(x + k + u);
#pragma GCC unroll 8
          for (int v = 0; v < NV; v++) acc[u][v] = V::fma(xb, loadb(b + (k + u) * NR + v * W), acc[u][v]);
        }
      }
      for (; k < K; k++) {
        reg xb = V::bcast(x + k);
#pragma GCC unroll 8
        for (int v = 0; v < NV; v++) acc[0][v] = V::fma(xb, loadb(b + k * NR + v * W), acc[0][v]);
      }
      alignas(64) float tmp[NR];
#pragma GCC unroll 8
      for (int v = 0; v < NV; v++)
        V::storeu(tmp + v * W, V::add(V::add(acc[0][v], acc[1][v]), V::add(acc[2][v], acc[3][v])));
      const int64_t n0 = p * NR, nv = imin(NR, N - n0);
      for (int64_t j = 0; j < nv; j++) {
        float r = tmp[j] + (bias ? bias[n0 + j] : 0.0f);
        y[n0 + j] = beta == 0.0f ? r : r + beta * y[n0 + j];
      }
    }
  });
}

// ---------------------------------------------------------------------------------------------
// bf16 compute (linear_bf16_bf16): bf16 pairs along K, one 32-bit lane per (row or column, k pair).
//   A panels [kc2][MR] of uint32: bf16(x[i][2p]) | bf16(x[i][2p+1]) << 16 (RNE rounding)
//   B panels [kc2][NR] of uint32: W[n][2p] | W[n][2p+1] << 16
// DP::dp(acc, a, b) adds lo(a)·lo(b) + hi(a)·hi(b) per lane: vdpbf16ps on AVX512_BF16, two
// FMAs on the widened halves elsewhere (DpEmul), so every ISA runs this same packing and loop.
// DP::row_pairs / DP::rows_pairs round fp32 operands into pair words (sgemm_bf16_compute's packing, below):
// DpEmul with the integer rounding of bf16_hi8, DpNative (gemm_avx512.cc) with vcvtne2ps2bf16.
// ---------------------------------------------------------------------------------------------
static void row_to_pairs(const float* s, int64_t kc, uint32_t* o);
static void rows_to_pairs(const float* r0, const float* r1, int64_t n, uint32_t* o);
struct DpEmul {
  static inline reg dp(reg acc, ireg a, ireg b) {
    acc = V::fma(V::lo_bf16(a), V::lo_bf16(b), acc);
    return V::fma(V::hi_bf16(a), V::hi_bf16(b), acc);
  }
  static void row_pairs(const float* s, int64_t kc, uint32_t* o) { row_to_pairs(s, kc, o); }
  static void rows_pairs(const float* r0, const float* r1, int64_t n, uint32_t* o) { rows_to_pairs(r0, r1, n, o); }
};

static void pack_a_pairs(int64_t mc, int64_t kc, const float* a, int64_t lda, uint32_t* dst) {
  const int64_t kc2 = (kc + 1) / 2;
  for (int64_t i0 = 0; i0 < mc; i0 += MR) {
    const int64_t mr = imin(MR, mc - i0);
    uint32_t* d = dst + (i0 / MR) * kc2 * MR;
    for (int64_t i = 0; i < MR; i++) {
      if (i >= mr) {
        for (int64_t p = 0; p < kc2; p++) d[p * MR + i] = 0;
        continue;
      }
      const float* s = a + (i0 + i) * lda;
      for (int64_t p = 0; p < kc2; p++) {
        const uint32_t lo = f32_to_bf16(s[2 * p]);
        const uint32_t hi = 2 * p + 1 < kc ? f32_to_bf16(s[2 * p + 1]) : 0u;
        d[p * MR + i] = lo | hi << 16;
      }
    }
  }
}

// One panel: rows n < nv of W (bf16, row stride ldw), k in [0, kc).
static void pack_b_pairs(int64_t nv, int64_t kc, const uint16_t* w, int64_t ldw, uint32_t* dst) {
  if (kc % 2 == 0 && ldw % 2 == 0 && (reinterpret_cast<uintptr_t>(w) & 3) == 0) {
    // pairs are aligned 32-bit words: the fp32 transpose moves them as they are
    pack_b_nk(nv, kc / 2, reinterpret_cast<const float*>(w), ldw / 2, reinterpret_cast<float*>(dst));
    return;
  }
  const int64_t kc2 = (kc + 1) / 2;
  for (int64_t n = 0; n < NR; n++) {
    const uint16_t* row = w + n * ldw;
    for (int64_t p = 0; p < kc2; p++) {
      uint32_t v = 0;
      if (n < nv) v = uint32_t(row[2 * p]) | (2 * p + 1 < kc ? uint32_t(row[2 * p + 1]) << 16 : 0u);
      dst[p * NR + n] = v;
    }
  }
}

template <int mr, typename DP>
static void ukernel_pairs(int64_t kc2, const uint32_t* __restrict a, const uint32_t* __restrict b, float* c,
                          int64_t ldc, int64_t nv, const Epi& e) {
  reg acc[mr][NV];
#pragma GCC unroll 16
  for (int i = 0; i < mr; i++)
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++) acc[i][v] = V::zero();
#pragma GCC unroll 2
  for (int64_t p = 0; p < kc2; p++) {
    ireg bv[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; v++) bv[v] = V::loadi(b + v * W);
#pragma GCC unroll 16
    for (int i = 0; i < mr; i++) {
      ireg ai = V::bcast32(a + i);
#pragma GCC unroll 8
      for (int v = 0; v < NV; v++) acc[i][v] = DP::dp(acc[i][v], ai, bv[v]);
    }
    a += MR;
    b += NR;
  }
  store_tile<mr>(acc, c, ldc, nv, e);
}

template <typename DP, int... I>
static inline void ukernel_pairs_n(int mr, int64_t kc2, const uint32_t* a, const uint32_t* b, float* c, int64_t ldc,
                                   int64_t nv, const Epi& e, std::integer_sequence<int, I...>) {
  using Fn = void (*)(int64_t, const uint32_t*, const uint32_t*, float*, int64_t, int64_t, const Epi&);
  static const Fn table[] = {&ukernel_pairs<I + 1, DP>...};
  table[mr - 1](kc2, a, b, c, ldc, nv, e);
}

template <typename DP>
static void pairs_serial(int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t K, const float* x, int64_t ldx,
                         const uint16_t* w, int64_t ldw, const float* bias, float* y, int64_t ldy, float beta) {
  const int64_t M = m1 - m0;
  const int64_t kcb = round_up(ceil_div(K, ceil_div(K, 2 * KC)), 2);  // bf16: twice the k per byte
  const int64_t mcb = round_up(ceil_div(M, ceil_div(M, MC)), MR);
  for (int64_t jc = n0; jc < n1; jc += NC) {
    const int64_t nc = imin(NC, n1 - jc);
    for (int64_t pc = 0; pc < K; pc += kcb) {
      const int64_t kc = imin(kcb, K - pc), kc2 = (kc + 1) / 2;
      const bool one_block = m1 - m0 <= mcb;
      uint32_t* bbuf = reinterpret_cast<uint32_t*>(t_scratch.get(1, size_t((one_block ? NR : round_up(nc, NR)) * kc2)));
      for (int64_t ic = m0; ic < m1; ic += mcb) {
        const int64_t mc = imin(mcb, m1 - ic);
        uint32_t* ap = reinterpret_cast<uint32_t*>(t_scratch.get(0, size_t(round_up(mc, MR) * kc2)));
        pack_a_pairs(mc, kc, x + ic * ldx + pc, ldx, ap);
        for (int64_t jr = 0; jr < nc; jr += NR) {
          const int64_t nv = imin(NR, nc - jr);
          uint32_t* d = one_block ? bbuf : bbuf + (jr / NR) * kc2 * NR;
          if (ic == m0) pack_b_pairs(nv, kc, w + (jc + jr) * ldw + pc, ldw, d);
          Epi ej{1.0f, pc == 0 ? beta : 1.0f, pc == 0 && bias ? bias + jc + jr : nullptr};
          for (int64_t ir = 0; ir < mc; ir += MR) {
            const int mr = int(imin(MR, mc - ir));
            ukernel_pairs_n<DP>(mr, kc2, ap + (ir / MR) * kc2 * MR, d, y + (ic + ir) * ldy + jc + jr, ldy, nv, ej,
                                std::make_integer_sequence<int, MR>{});
          }
        }
      }
    }
  }
}

template <typename DP>
static void linear_bf16_pairs(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const uint16_t* w,
                              int64_t ldw, const float* bias, float* y, int64_t ldy, float beta) {
  split_parallel(M, N, K, [&](int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    pairs_serial<DP>(m0, m1, n0, n1, K, x, ldx, w, ldw, bias, y, ldy, beta);
  });
}

// ---------------------------------------------------------------------------------------------
// bf16 compute for training (sgemm_bf16_compute): fp32 operands in sgemm's layouts, rounded to
// bf16 (RNE) while they are packed into the pair panels above, fp32 accumulation, fp32 C.
// The three products of a linear layer's training step, and how each operand is packed:
//   y  = x·Wᵀ    A = x  (M, K) rows           -> row pairs, 8×8 word transpose
//                B = W  (N, K) (tb)           -> the same, per panel
//   dx = dy·W    A = dy (M, N) rows           -> row pairs, 8×8 word transpose
//                B = W  (N, K) read as (k, n) -> two rows, lane-wise
//   dW = dyᵀ·x   A = dy stored (M, N) (ta)    -> two rows, lane-wise
//                B = x  (M, K) read as (k, n) -> two rows, lane-wise
// "Row pairs": along a contiguous row, (v[2p], v[2p+1]) -> one 32-bit word; "two rows": k = 2p and 2p+1 are two
// source rows, word i = bf16(r0[i]) | bf16(r1[i]) << 16, with no shuffle at all.
// ---------------------------------------------------------------------------------------------
// 8 fp32 -> their bf16 (round to nearest even, NaN kept quiet) in the high 16 bits of each lane, low bits zero.
static inline __m256i bf16_hi8(__m256 v) {
  const __m256i u = _mm256_castps_si256(v);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
  const __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
  const __m256i mag = _mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff));
  const __m256i nan = _mm256_cmpgt_epi32(mag, _mm256_set1_epi32(0x7f800000));
  const __m256i q = _mm256_or_si256(u, _mm256_set1_epi32(0x400000));
  return _mm256_and_si256(_mm256_blendv_epi8(r, q, nan), _mm256_set1_epi32(int(0xffff0000u)));
}
static inline uint32_t bf16_bits(float v) { return f32_to_bf16(v); }

// One contiguous row s[0:kc] -> kc2 = ceil(kc/2) words bf16(s[2p]) | bf16(s[2p+1]) << 16 (zero past kc).
static void row_to_pairs(const float* s, int64_t kc, uint32_t* o) {
  int64_t k = 0;
  for (; k + 16 <= kc; k += 16) {
    const __m256i a = _mm256_srli_epi32(bf16_hi8(_mm256_loadu_ps(s + k)), 16);
    const __m256i b = _mm256_srli_epi32(bf16_hi8(_mm256_loadu_ps(s + k + 8)), 16);
    // 16-bit values in order: packus interleaves 128-bit halves (a0-3 b0-3 a4-7 b4-7), the permute restores a, b
    const __m256i p = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, b), 0xD8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + k / 2), p);
  }
  for (; k < kc; k += 2) o[k / 2] = bf16_bits(s[k]) | (k + 1 < kc ? bf16_bits(s[k + 1]) << 16 : 0u);
}

// Two rows (k = 2p, 2p+1) of n values each -> n words; r1 null: the odd k past the end (zero).
static void rows_to_pairs(const float* r0, const float* r1, int64_t n, uint32_t* o) {
  int64_t i = 0;
  if (r1) {
    for (; i + 8 <= n; i += 8) {
      const __m256i lo = _mm256_srli_epi32(bf16_hi8(_mm256_loadu_ps(r0 + i)), 16);
      const __m256i hi = bf16_hi8(_mm256_loadu_ps(r1 + i));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + i), _mm256_or_si256(lo, hi));
    }
    for (; i < n; i++) o[i] = bf16_bits(r0[i]) | bf16_bits(r1[i]) << 16;
  } else {
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + i), _mm256_srli_epi32(bf16_hi8(_mm256_loadu_ps(r0 + i)), 16));
    for (; i < n; i++) o[i] = bf16_bits(r0[i]);
  }
}

// Words of up to MR (A) or NR (B) contiguous rows, before the transpose into a panel; of two whole rows of a
// transposed A block (pack_a_pairs_f32), or of B's (t_block_words: BPairsKN::pack_block).
static thread_local std::vector<uint32_t> t_pair_rows, t_block_words;

// A block, op(A)(i, k) at a[i*rs + k*cs], i < mc, k < kc  ->  RowPanels(mc) panels [kc2][MR] of pair words.
template <typename DP>
static void pack_a_pairs_f32(int64_t mc, int64_t kc, const float* a, int64_t rs, int64_t cs, uint32_t* dst) {
  const int64_t kc2 = (kc + 1) / 2;
  const RowPanels rp(mc);
  if (cs != 1 && rs == 1) {
    // transposed (dyᵀ): k = 2q and 2q+1 are two rows of mc adjacent values: both converted whole (16 values per
    // step), then dealt out to the panels MR words at a time
    t_pair_rows.resize(size_t(mc + 16));
    uint32_t* words = t_pair_rows.data();
    for (int64_t q = 0; q < kc2; q++) {
      const float* r0 = a + 2 * q * cs;
      DP::rows_pairs(r0, 2 * q + 1 < kc ? r0 + cs : nullptr, mc, words);
      for (int64_t p = 0; p < rp.n; p++) {
        const int64_t i0 = rp.start(p), mr = rp.rows(p);
        uint32_t* d = dst + p * kc2 * MR + q * MR;
        std::memcpy(d, words + i0, size_t(mr) * sizeof(uint32_t));
        for (int64_t i = mr; i < MR; i++) d[i] = 0;
      }
    }
    return;
  }
  for (int64_t p = 0; p < rp.n; p++) {
    const int64_t i0 = rp.start(p), mr = rp.rows(p);
    uint32_t* d = dst + p * kc2 * MR;
    if (cs == 1) {  // rows: pairs per row, then the fp32 8×8 transpose moves the words into the panel
      t_pair_rows.resize(size_t(MR * kc2));
      for (int64_t i = 0; i < mr; i++) DP::row_pairs(a + (i0 + i) * rs, kc, t_pair_rows.data() + i * kc2);
      pack_a_rows(mr, kc2, reinterpret_cast<const float*>(t_pair_rows.data()), kc2, reinterpret_cast<float*>(d));
    } else {
      for (int64_t q = 0; q < kc2; q++)
        for (int64_t i = 0; i < MR; i++) {
          const float* s = a + (i0 + i) * rs + 2 * q * cs;
          d[q * MR + i] = i >= mr ? 0u : bf16_bits(s[0]) | (2 * q + 1 < kc ? bf16_bits(s[cs]) << 16 : 0u);
        }
    }
  }
}

// B from fp32 sources, one NR-wide panel [kc2][NR] of B[pc:pc+kc, j:j+nv] per pack() call.
template <typename DP>
struct BPairsNK {  // (k, n) at b[n*ld + k]: W (N, K) of y = x·Wᵀ
  const float* b;
  int64_t ld;
  void pack_block(int64_t j, int64_t nc, int64_t pc, int64_t kc, uint32_t* dst) const;  // every panel, one by one
  void pack(int64_t j, int64_t nv, int64_t pc, int64_t kc, uint32_t* dst) const {
    const int64_t kc2 = (kc + 1) / 2;
    t_pair_rows.resize(size_t(NR * kc2));
    for (int64_t n = 0; n < nv; n++) DP::row_pairs(b + (j + n) * ld + pc, kc, t_pair_rows.data() + n * kc2);
    pack_b_nk(nv, kc2, reinterpret_cast<const float*>(t_pair_rows.data()), kc2, reinterpret_cast<float*>(dst));
  }
};
// Two rows of n bf16 values (k = 2p, 2p+1; r1 null past the end) -> n pair words r0[i] | r1[i] << 16.
static void rows_to_pairs(const uint16_t* r0, const uint16_t* r1, int64_t n, uint32_t* o) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i lo = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r0 + i)));
    const __m256i h16 = r1 ? _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(r1 + i)))
                           : _mm256_setzero_si256();
    const __m256i hi = _mm256_slli_epi32(h16, 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + i), _mm256_or_si256(lo, hi));
  }
  for (; i < n; i++) o[i] = uint32_t(r0[i]) | (r1 ? uint32_t(r1[i]) << 16 : 0u);
}

// fp32 rows rounded by DP's converter; bf16 rows as they are
template <typename DP>
static void kn_pairs(const float* r0, const float* r1, int64_t n, uint32_t* o) { DP::rows_pairs(r0, r1, n, o); }
template <typename DP>
static void kn_pairs(const uint16_t* r0, const uint16_t* r1, int64_t n, uint32_t* o) { rows_to_pairs(r0, r1, n, o); }

// (k, n) at b[k*ld + n]: W (N, K) of dx = dy·W (T float: rounded; T uint16_t: bf16 weights, as they are), x (M, K)
// of dW = dyᵀ·x
template <typename DP, typename T>
struct BPairsKN {
  const T* b;
  int64_t ld;
  void pack(int64_t j, int64_t nv, int64_t pc, int64_t kc, uint32_t* dst) const {
    const int64_t kc2 = (kc + 1) / 2;
    for (int64_t q = 0; q < kc2; q++) {
      const T* r0 = b + (pc + 2 * q) * ld + j;
      kn_pairs<DP>(r0, 2 * q + 1 < kc ? r0 + ld : nullptr, nv, dst + q * NR);
      for (int64_t n = nv; n < NR; n++) dst[q * NR + n] = 0;
    }
  }
  // every panel of B[pc:pc+kc, j:j+nc] (dst: panel p at p·kc2·NR): rows 2q and 2q+1 converted whole, then dealt out
  // NR words at a time, instead of panel by panel (each panel walking all kc rows for its NR values of each)
  void pack_block(int64_t j, int64_t nc, int64_t pc, int64_t kc, uint32_t* dst) const {
    const int64_t kc2 = (kc + 1) / 2, npan = ceil_div(nc, NR);
    t_block_words.resize(size_t(npan * NR));
    uint32_t* words = t_block_words.data();
    for (int64_t q = 0; q < kc2; q++) {
      const T* r0 = b + (pc + 2 * q) * ld + j;
      kn_pairs<DP>(r0, 2 * q + 1 < kc ? r0 + ld : nullptr, nc, words);
      for (int64_t n = nc; n < npan * NR; n++) words[n] = 0;
      for (int64_t p = 0; p < npan; p++) std::memcpy(dst + (p * kc2 + q) * NR, words + p * NR, NR * sizeof(uint32_t));
    }
  }
};
template <typename DP>
void BPairsNK<DP>::pack_block(int64_t j, int64_t nc, int64_t pc, int64_t kc, uint32_t* dst) const {
  const int64_t kc2 = (kc + 1) / 2;
  for (int64_t jr = 0; jr < nc; jr += NR) pack(j + jr, imin(NR, nc - jr), pc, kc, dst + (jr / NR) * kc2 * NR);
}

// C[m0:m1, n0:n1] on the calling thread (n0 a multiple of NR); the loops of gemm_serial over pair panels.
template <typename DP, typename BS>
static void bf16c_serial(int64_t m0, int64_t m1, int64_t n0, int64_t n1, int64_t K, const ASrc& A, const BS& bs,
                         float* C, int64_t ldc, const Epi& e) {
  const int64_t M = m1 - m0;
  const int64_t kcb = round_up(ceil_div(K, ceil_div(K, 2 * KC)), 2);  // even: a pair never straddles two blocks
  const int64_t mcb = round_up(ceil_div(M, ceil_div(M, MC)), MR);
  for (int64_t jc = n0; jc < n1; jc += NC) {
    const int64_t nc = imin(NC, n1 - jc);
    for (int64_t pc = 0; pc < K; pc += kcb) {
      const int64_t kc = imin(kcb, K - pc), kc2 = (kc + 1) / 2;
      const bool one_block = M <= mcb;
      uint32_t* bbuf = reinterpret_cast<uint32_t*>(t_scratch.get(1, size_t((one_block ? NR : round_up(nc, NR)) * kc2)));
      for (int64_t ic = m0; ic < m1; ic += mcb) {
        const int64_t mc = imin(mcb, m1 - ic);
        uint32_t* ap = reinterpret_cast<uint32_t*>(t_scratch.get(0, size_t(round_up(mc, MR) * kc2)));
        pack_a_pairs_f32<DP>(mc, kc, A.a + ic * A.rs + pc * A.cs, A.rs, A.cs, ap);
        const RowPanels rp(mc);
        // one row block: each panel packed right before its products (in L1 still); several: the whole block first
        if (!one_block && ic == m0) bs.pack_block(jc, nc, pc, kc, bbuf);
        for (int64_t jr = 0; jr < nc; jr += NR) {
          const int64_t nv = imin(NR, nc - jr);
          uint32_t* d = one_block ? bbuf : bbuf + (jr / NR) * kc2 * NR;
          if (one_block) bs.pack(jc + jr, nv, pc, kc, d);
          const Epi ej{e.alpha, pc == 0 ? e.beta : 1.0f, pc == 0 && e.bias ? e.bias + jc + jr : nullptr};
          for (int64_t p = 0; p < rp.n; p++)
            ukernel_pairs_n<DP>(int(rp.rows(p)), kc2, ap + p * kc2 * MR, d, C + (ic + rp.start(p)) * ldc + jc + jr, ldc,
                                nv, ej, std::make_integer_sequence<int, MR>{});
        }
      }
    }
  }
}

template <typename DP>
static void sgemm_bf16_compute_with(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                                    int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
                                    const float* bias) {
  const ASrc a{A, ta ? 1 : lda, ta ? lda : 1, false};
  const Epi e{alpha, beta, bias};
  split_parallel(M, N, K, [&](int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    if (tb) bf16c_serial<DP>(m0, m1, n0, n1, K, a, BPairsNK<DP>{B, ldb}, C, ldc, e);
    else bf16c_serial<DP>(m0, m1, n0, n1, K, a, BPairsKN<DP, float>{B, ldb}, C, ldc, e);
  });
}

// C (M, N) = alpha·A (M, K)·B (K, N) + beta·C, B in bf16 bits (frozen bf16 weights: dx = dy·W), A rounded.
template <typename DP>
static void sgemm_bf16_bf16_with(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                                 const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const ASrc a{A, lda, 1, false};
  const Epi e{alpha, beta, nullptr};
  split_parallel(M, N, K, [&](int64_t m0, int64_t m1, int64_t n0, int64_t n1) {
    bf16c_serial<DP>(m0, m1, n0, n1, K, a, BPairsKN<DP, uint16_t>{B, ldb}, C, ldc, e);
  });
}

// ---------------------------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------------------------
// Below this many rows, the dot-product path (no packing) beats packing W for the micro-kernel.
static constexpr int64_t SMALL_M = 16;

template <typename WT>
static void linear_any(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const WT* w, int64_t ldw,
                       const float* bias, float* y, int64_t ldy, float beta, bool round_x) {
  if (M <= SMALL_M && !round_x) return linear_dot(M, N, K, x, ldx, w, ldw, bias, y, ldy, beta);
  gemm_parallel(M, N, K, ASrc{x, ldx, 1, round_x}, BFromNK<WT>{w, ldw}, y, ldy, Epi{1.0f, beta, bias});
}

void linear_f32(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const float* w, int64_t ldw,
                const float* bias, float* y, int64_t ldy, float beta) {
  linear_any(M, N, K, x, ldx, w, ldw, bias, y, ldy, beta, false);
}

void linear_bf16(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const uint16_t* w, int64_t ldw,
                 const float* bias, float* y, int64_t ldy, float beta) {
  linear_any(M, N, K, x, ldx, reinterpret_cast<const bf16w*>(w), ldw, bias, y, ldy, beta, false);
}

void linear_f16(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const uint16_t* w, int64_t ldw,
                const float* bias, float* y, int64_t ldy, float beta) {
  linear_any(M, N, K, x, ldx, reinterpret_cast<const f16w*>(w), ldw, bias, y, ldy, beta, false);
}

// bf16 compute. Small M: x rounded to bf16, then the dot-product path on the bf16 weights
// (exact products, fp32 sums: the same numbers as vdpbf16ps up to summation order). Larger M:
// the pair-packed path with the given DP.
template <typename DP>
static void linear_bf16_bf16_with(int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const uint16_t* w,
                                  int64_t ldw, const float* bias, float* y, int64_t ldy, float beta) {
  if (M <= SMALL_M) {
    float* xr = static_cast<float*>(aligned_malloc(size_t(M * K) * sizeof(float) + 64));
    for (int64_t m = 0; m < M; m++)
      for (int64_t k = 0; k < K; k++) xr[m * K + k] = bf16_to_f32(f32_to_bf16(x[m * ldx + k]));
    linear_dot(M, N, K, xr, K, reinterpret_cast<const bf16w*>(w), ldw, bias, y, ldy, beta);
    aligned_free(xr);
    return;
  }
  linear_bf16_pairs<DP>(M, N, K, x, ldx, w, ldw, bias, y, ldy, beta);
}

void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  const ASrc a{A, ta ? 1 : lda, ta ? lda : 1, false};
  const Epi e{alpha, beta, nullptr};
  if (tb) gemm_parallel(M, N, K, a, BFromNK<float>{B, ldb}, C, ldc, e);
  else gemm_parallel(M, N, K, a, BFromKN<float>{B, ldb}, C, ldc, e);
}

void sgemm_bf16(int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const uint16_t* B,
                int64_t ldb, float beta, float* C, int64_t ldc) {
  gemm_parallel(M, N, K, ASrc{A, lda, 1, false}, BFromKN<bf16w>{reinterpret_cast<const bf16w*>(B), ldb}, C, ldc,
                Epi{alpha, beta, nullptr});
}

PackedWeight* weight_pack(DType wtype, int64_t N, int64_t K, const void* w, int64_t ldw) {
  auto* p = new PackedWeight();
  p->isa = ISA;
  p->N = N;
  p->K = K;
  p->nr = NR;
  p->stored = wtype == DType::BF16 ? DType::BF16 : DType::F32;
  const int64_t npan = ceil_div(N, NR);
  const size_t elems = size_t(npan * K * NR);
  p->bytes = elems * (p->stored == DType::BF16 ? 2 : 4);
  p->data = aligned_malloc(p->bytes + 64);
  if (wtype == DType::BF16) {
    const uint16_t* src = static_cast<const uint16_t*>(w);
    uint16_t* d = static_cast<uint16_t*>(p->data);
    parallel_for(npan, 1, [&](int64_t p0, int64_t p1) {
      for (int64_t pp = p0; pp < p1; pp++)
        for (int64_t k = 0; k < K; k++)
          for (int j = 0; j < NR; j++) {
            const int64_t n = pp * NR + j;
            d[(pp * K + k) * NR + j] = n < N ? src[n * ldw + k] : uint16_t(0);
          }
    });
  } else {
    float* d = static_cast<float*>(p->data);
    parallel_for(npan, 1, [&](int64_t p0, int64_t p1) {
      const int64_t n0 = p0 * NR, n1 = imin(N, p1 * NR);
      if (wtype == DType::F32)
        pack_b_nk(n1 - n0, K, static_cast<const float*>(w) + n0 * ldw, ldw, d + p0 * K * NR);
      else
        pack_b_nk(n1 - n0, K, static_cast<const f16w*>(w) + n0 * ldw, ldw, d + p0 * K * NR);
    });
  }
  return p;
}

void linear_packed(int64_t M, const float* x, int64_t ldx, const PackedWeight* w, const float* bias, float* y,
                   int64_t ldy, float beta) {
  const int64_t N = w->N, K = w->K;
  const Epi e{1.0f, beta, bias};
  if (w->stored == DType::BF16) {
    const uint16_t* d = static_cast<const uint16_t*>(w->data);
    if (M == 1) return gemv_packed(N, K, x, d, bias, y, beta);
    gemm_parallel(M, N, K, ASrc{x, ldx, 1, false}, BPrepacked<uint16_t>{d, K}, y, ldy, e);
  } else {
    const float* d = static_cast<const float*>(w->data);
    if (M == 1) return gemv_packed(N, K, x, d, bias, y, beta);
    gemm_parallel(M, N, K, ASrc{x, ldx, 1, false}, BPrepacked<float>{d, K}, y, ldy, e);
  }
}
