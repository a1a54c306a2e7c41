// Disentangled attention of one (sample, head), written once over a vector-traits type V and
// compiled per ISA: deberta.cc (portable, V = 1 scalar lane), deberta_attn_avx2.cc (8 × fp32),
// deberta_attn_avx512.cc (16 × fp32). Every path runs the same algorithm, tile sizes and
// summation order per lane; only the register width differs, so the AVX2 path (tested on the dev
// machine) tests the structure of the AVX-512 one. Included INSIDE an anonymous namespace of the
// ISA's translation unit (internal linkage), after deberta_internal.h and V.
//
// V provides: W (lanes), R (register), zero, set1, load, store, add, mul, fmadd(a,b,c)=a·b+c,
// max, hmax, hsum, exp (|err| ~1 ulp, exactly 0 for -inf), gather(base, idx) = base[idx[0..W)]
// (idx: W int32 in memory), and transpose_add(S, lds, T, ldt, n) (S[i][j] += T[j][i] for the
// n × n block, n a multiple of W).
//
// Math (spec §2; n tokens, head dim d, rows padded to Np = round_up(n, W)):
//   S[i,j] = q_i·k_j + q_i·PK[δ(i,j)] + k_j·PQ[δ(i,j)]         δ = rel-embedding row of i − j
//   c2p:  C[i,t] = q_i · PK[hi − t]       t = hi − δ(i,j) increases with j: row-local gather
//   p2c:  P[j,m] = k_j · PQ[lo + m]       m = δ(i,j) − lo increases with i: gathered into
//         T[j,i] = P[j, m(i,j)] along i, then added transposed (S += Tᵀ)
//   A = softmax((S·scale) + mask) ;  ctx = A · V
// With label isolation (t.group, t.pos) the relative position of (i, j) is pos_i − pos_j, so the gathers take a
// per-row index table instead of one per diagonal, C and P are formed over every relative column, and each row's
// mask also excludes the keys of other groups (deberta_internal.h). A row's table is written only where its keys are
// seen (group 0 and its own group, found through the tokens sorted by group); the other entries keep an earlier
// row's in-range column, which the mask discards.
// Every product is a register-blocked small GEMM (4 rows × 2 vectors, 8 accumulators) on
// zero-padded, contiguous copies of the head's q, kᵀ and v, so no edge cases reach the kernels.

static inline int64_t rup(int64_t a, int64_t b) { return (a + b - 1) / b * b; }

// c (M, Nc) = a (M, K) · b (K, Nc) [· rowscale]; a(i, e) at a[i*rs + e*cs], b row-major (ldb).
// M % 4 == 0, Nc % W == 0. Rows >= mvalid are not stored; columns >= nvalid are not stored.
template <int NV>
static inline void mm_tile(int64_t K, const float* a, int64_t rs, int64_t cs, const float* b, int64_t ldb, float* c,
                           int64_t ldc, int64_t rows, int64_t cols, const float* rowscale) {
  using R = typename V::R;
  R acc[4][NV];
#pragma GCC unroll 4
  for (int r = 0; r < 4; r++)
#pragma GCC unroll 2
    for (int v = 0; v < NV; v++) acc[r][v] = V::zero();
  const float* a0 = a;
  const float* a1 = a + rs;
  const float* a2 = a + 2 * rs;
  const float* a3 = a + 3 * rs;
  for (int64_t e = 0; e < K; e++) {
    R bv[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; v++) bv[v] = V::load(b + e * ldb + v * V::W);
    const int64_t o = e * cs;
    const R x0 = V::set1(a0[o]), x1 = V::set1(a1[o]), x2 = V::set1(a2[o]), x3 = V::set1(a3[o]);
#pragma GCC unroll 2
    for (int v = 0; v < NV; v++) {
      acc[0][v] = V::fmadd(x0, bv[v], acc[0][v]);
      acc[1][v] = V::fmadd(x1, bv[v], acc[1][v]);
      acc[2][v] = V::fmadd(x2, bv[v], acc[2][v]);
      acc[3][v] = V::fmadd(x3, bv[v], acc[3][v]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < 4; r++) {
    if (r >= rows) break;
    const R s = rowscale ? V::set1(rowscale[r]) : V::set1(1.0f);
#pragma GCC unroll 2
    for (int v = 0; v < NV; v++) {
      const R o = rowscale ? V::mul(acc[r][v], s) : acc[r][v];
      float* cp = c + r * ldc + v * V::W;
      if (cols >= (v + 1) * V::W) {
        V::store(cp, o);
      } else if (cols > v * V::W) {
        alignas(64) float tmp[V::W];
        V::store(tmp, o);
        for (int64_t t = 0; t < cols - v * V::W; t++) cp[t] = tmp[t];
      }
    }
  }
}

static void mm(int64_t M, int64_t Nc, int64_t K, const float* a, int64_t rs, int64_t cs, const float* b, int64_t ldb,
               float* c, int64_t ldc, int64_t mvalid, int64_t nvalid, const float* rowscale) {
  for (int64_t i = 0; i < M; i += 4) {
    const int64_t rows = mvalid - i;
    if (rows <= 0) break;
    const float* ai = a + i * rs;
    float* ci = c + i * ldc;
    const float* si = rowscale ? rowscale + i : nullptr;
    int64_t j = 0;
    for (; j + 2 * V::W <= Nc; j += 2 * V::W) mm_tile<2>(K, ai, rs, cs, b + j, ldb, ci + j, ldc, rows, nvalid - j, si);
    if (j < Nc) mm_tile<1>(K, ai, rs, cs, b + j, ldb, ci + j, ldc, rows, nvalid - j, si);
  }
}

// Banded product for the relative terms: row block [i, i+4) of c = a · b needs only columns
// [c0(i), c1(i)) (the relative rows its gathers read: about Np of the ncol ≈ 2n columns), c0, c1
// multiples of W; band(i) returns them.
template <class Band>
static void mm_band(int64_t M, int64_t K, const float* a, int64_t rs, int64_t cs, const float* b, int64_t ldb, float* c,
                    int64_t ldc, Band band) {
  for (int64_t i = 0; i < M; i += 4) {
    int64_t c0, c1;
    band(i, c0, c1);
    const float* ai = a + i * rs;
    float* ci = c + i * ldc;
    int64_t j = c0;
    for (; j + 2 * V::W <= c1; j += 2 * V::W) mm_tile<2>(K, ai, rs, cs, b + j, ldb, ci + j, ldc, 4, 2 * V::W, nullptr);
    if (j < c1) mm_tile<1>(K, ai, rs, cs, b + j, ldb, ci + j, ldc, 4, V::W, nullptr);
  }
}

// One (sample, head). Scratch: attn_scratch_floats(n, d, ncol) floats, 64-byte aligned.
static void attend(const deberta::AttnTask& t) {
  using R = typename V::R;
  const int64_t W = V::W, n = t.n, d = t.d;
  const int64_t Np = rup(n, W < 4 ? 4 : W), dp = rup(d, W);  // rows: 4-row blocks; columns: vectors
  const int64_t lo = t.delta(-(n - 1)), hi = t.delta(n - 1), ncol = hi - lo + 1, ncolp = rup(ncol, W);
  float* base = t.scratch;
  auto take = [&](int64_t cnt) {
    float* p = base;
    base += rup(cnt, 16);
    return p;
  };
  float* Q = take(Np * d);       // (Np, d)
  float* KT = take(d * Np);      // (d, Np)
  float* Vh = take(Np * dp);     // (Np, dp)
  float* S = take(Np * Np);      // scores, then unnormalized probabilities
  float* C = t.c2p ? take(Np * ncolp) : nullptr;
  float* P = t.p2c ? take(Np * ncolp) : nullptr;
  float* T = t.p2c ? take(Np * Np) : nullptr;
  float* mb = take(Np);   // additive mask: 0 or -inf
  float* inv = take(Np);  // 1 / row sums
  float* mr = take(Np);   // label isolation: one row's additive mask
  float* m0 = take(Np);   // label isolation: the additive mask of group-0 keys
  int32_t* gbeg = reinterpret_cast<int32_t*>(take(Np + 16));  // label isolation: group g's tokens at gord[gbeg[g]..)
  int32_t* ic = reinterpret_cast<int32_t*>(take(2 * Np));  // c2p column of (i, j) at ic[j − i + Np − 1]
  int32_t* ip = reinterpret_cast<int32_t*>(take(2 * Np));  // p2c column of (i, j) at ip[i − j + Np − 1]

  // Contiguous zero-padded copies of the head's q, kᵀ, v.
  for (int64_t i = 0; i < Np; i++) {
    float* qr = Q + i * d;
    float* vr = Vh + i * dp;
    if (i < n) {
      const float* qs = t.q + i * t.ld;
      const float* ks = t.k + i * t.ld;
      const float* vs = t.v + i * t.ld;
      for (int64_t e = 0; e < d; e++) {
        qr[e] = qs[e];
        KT[e * Np + i] = ks[e];
        vr[e] = vs[e];
      }
      for (int64_t e = d; e < dp; e++) vr[e] = 0.0f;
    } else {
      for (int64_t e = 0; e < d; e++) qr[e] = 0.0f, KT[e * Np + i] = 0.0f;
      for (int64_t e = 0; e < dp; e++) vr[e] = 0.0f;
    }
  }
  const float ninf = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < Np; j++) mb[j] = (j < n && (!t.mask || t.mask[j])) ? 0.0f : ninf;
  const int32_t* gp = t.group;
  const int32_t* ps = t.pos;
  int32_t* gord = ic + Np;  // label isolation: token indices sorted by group (ic's second half is unused then)
  if (gp) {  // counting sort (groups < n: deberta.cc / encoder_train.cc check it)
    for (int64_t g = 0; g <= n; g++) gbeg[g] = 0;
    for (int64_t i = 0; i < n; i++) gbeg[gp[i] + 1]++;
    for (int64_t g = 0; g < n; g++) gbeg[g + 1] += gbeg[g];
    for (int64_t i = 0; i < n; i++) gord[gbeg[gp[i]]++] = int32_t(i);
    for (int64_t g = n; g > 0; g--) gbeg[g] = gbeg[g - 1];
    gbeg[0] = 0;
    for (int64_t j = 0; j < Np; j++) m0[j] = j < n && gp[j] == 0 ? mb[j] : ninf;
    for (int64_t j = 0; j < Np; j++) ic[j] = 0, ip[j] = 0;
  }
  // Relative columns, clamped so that padded pairs read inside the buffers (they are masked).
  for (int64_t m = 0; m < 2 * Np - 1 && !gp; m++) {
    const int64_t r = m - (Np - 1);
    int64_t c = hi - t.delta(-r);  // (j − i) = r  →  rel = i − j = −r
    int64_t p = t.delta(r) - lo;   // (i − j) = r
    ic[m] = int32_t(c < 0 ? 0 : c >= ncol ? ncol - 1 : c);
    ip[m] = int32_t(p < 0 ? 0 : p >= ncol ? ncol - 1 : p);
  }
  if (!gp) {  // (with groups the second half of ic holds gord)
    ic[2 * Np - 1] = ic[2 * Np - 2];
    ip[2 * Np - 1] = ip[2 * Np - 2];
  }

  auto band = [&](int64_t lo_c, int64_t hi_c, int64_t& c0, int64_t& c1) {  // [lo_c, hi_c] → W-aligned
    c0 = lo_c / W * W;
    c1 = std::min(ncolp, rup(hi_c + 1, W));
  };
  // S = Q·Kᵀ                                                        (Np, Np)
  mm(Np, Np, d, Q, d, 1, KT, Np, S, Np, Np, Np, nullptr);
  if (t.c2p && gp)  // label isolation: every column (a row's columns follow its keys' positions, not a band)
    mm(Np, ncolp, d, Q, d, 1, t.PKTr + (t.span2 - 1 - hi), t.S2P, C, ncolp, Np, ncolp, nullptr);
  else if (t.c2p)  // C[i, c] = q_i · PK[hi − c]: columns [span2−1−hi, +ncolp) of the reversed PKᵀ  (Np, ncolp)
    // rows i..i+3 read c = ic(j − i) for j in [0, Np): from ic(−(i+3)) to ic(Np−1−i)
    mm_band(Np, d, Q, d, 1, t.PKTr + (t.span2 - 1 - hi), t.S2P, C, ncolp, [&](int64_t i, int64_t& c0, int64_t& c1) {
      band(ic[Np - 1 - (i + 3)], ic[2 * Np - 2 - i], c0, c1);
    });
  if (t.p2c && gp) {  // label isolation: every column; T[j, i] = P[j, δ(pos_i − pos_j) − lo] for the queries that
    // see key j (every query for a group-0 key, its own group's for a label key); padding keys: 0
    mm(Np, ncolp, d, KT, 1, Np, t.PQT + lo, t.S2P, P, ncolp, Np, ncolp, nullptr);
    for (int64_t j = 0; j < Np; j++) {
      float* tj = T + j * Np;
      if (j >= n) {
        for (int64_t i0 = 0; i0 < Np; i0 += W) V::store(tj + i0, V::zero());
        continue;
      }
      const int32_t gj = gp[j];
      const int32_t* gi0 = gord + gbeg[gj];
      const int32_t* gi1 = gord + gbeg[gj + 1];
      if (gj == 0)
        for (int64_t i = 0; i < n; i++) ip[i] = int32_t(t.delta(ps[i] - ps[j]) - lo);
      else
        for (const int32_t* q = gi0; q < gi1; q++) ip[*q] = int32_t(t.delta(ps[*q] - ps[j]) - lo);
      const float* pj = P + j * ncolp;
      for (int64_t i0 = 0; i0 < Np; i0 += W) V::store(tj + i0, V::gather(pj, ip + i0));
    }
    V::transpose_add(S, Np, T, Np, Np);
  } else if (t.p2c) {  // P[j, m] = k_j · PQ[lo + m]                       (Np, ncolp)
    // rows j..j+3 read m = ip(i − j) for i in [0, Np): from ip(−(j+3)) to ip(Np−1−j)
    mm_band(Np, d, KT, 1, Np, t.PQT + lo, t.S2P, P, ncolp, [&](int64_t j, int64_t& c0, int64_t& c1) {
      band(ip[Np - 1 - (j + 3)], ip[2 * Np - 2 - j], c0, c1);
    });
    // T[j, i] = P[j, ip(i − j)], contiguous along i; then S += Tᵀ
    for (int64_t j = 0; j < Np; j++) {
      const float* pj = P + j * ncolp;
      float* tj = T + j * Np;
      for (int64_t i0 = 0; i0 < Np; i0 += W) V::store(tj + i0, V::gather(pj, ip + (i0 - j + Np - 1)));
    }
    V::transpose_add(S, Np, T, Np, Np);
  }
  // Row softmax with the c2p term, scale and mask folded into the first pass.
  const R sc = V::set1(t.scale);
  for (int64_t i = 0; i < Np; i++) {
    float* row = S + i * Np;
    if (i >= n) {
      inv[i] = 0.0f;
      continue;
    }
    R mx = V::set1(ninf);
    const float* ci = t.c2p ? C + i * ncolp : nullptr;
    const int32_t* ii = ic + (Np - 1 - i);
    const float* mi = mb;
    if (gp) {  // this row's keys: group 0 and its own group; their c2p columns hi − δ(pos_i − pos_j)
      const int32_t gi = gp[i];
      for (int32_t g : {0, gi}) {
        for (const int32_t* q = gord + gbeg[g]; q < gord + gbeg[g + 1]; q++)
          ic[*q] = int32_t(hi - t.delta(ps[i] - ps[*q]));
        if (gi == 0) break;
      }
      ii = ic;
      mi = m0;
      if (gi != 0) {
        for (int64_t j0 = 0; j0 < Np; j0 += W) V::store(mr + j0, V::load(m0 + j0));
        for (const int32_t* q = gord + gbeg[gi]; q < gord + gbeg[gi + 1]; q++) mr[*q] = mb[*q];
        mi = mr;
      }
    }
    for (int64_t j0 = 0; j0 < Np; j0 += W) {
      R s = V::load(row + j0);
      if (ci) s = V::add(s, V::gather(ci, ii + j0));
      s = V::fmadd(s, sc, V::load(mi + j0));
      V::store(row + j0, s);
      mx = V::max(mx, s);
    }
    const float m = V::hmax(mx);
    if (m == ninf) {  // every key masked: zeros, as the reference's masked softmax
      for (int64_t j0 = 0; j0 < Np; j0 += W) V::store(row + j0, V::zero());
      if (t.probs)
        for (int64_t j = 0; j < n; j++) t.probs[i * n + j] = 0.0f;
      inv[i] = 0.0f;
      continue;
    }
    const R mv = V::set1(m);
    R sum = V::zero();
    for (int64_t j0 = 0; j0 < Np; j0 += W) {
      const R e = V::exp(V::sub(V::load(row + j0), mv));
      V::store(row + j0, e);
      sum = V::add(sum, e);
    }
    inv[i] = 1.0f / V::hsum(sum);
    if (t.probs) {
      float* pr = t.probs + i * n;
      for (int64_t j = 0; j < n; j++) pr[j] = row[j] * inv[i];
    }
  }
  if (t.keep)  // attention dropout: the dropped probabilities out of S, the kept ones scaled by 1 / (1 − p)
    for (int64_t i = 0; i < n; i++) {
      float* row = S + i * Np;
      const uint8_t* kp = t.keep + i * n;
      for (int64_t j = 0; j < n; j++) row[j] = kp[j] ? row[j] : 0.0f;
      inv[i] *= t.keep_scale;
    }
  // ctx = (S · V) / rowsum                                          (n, d)
  mm(Np, dp, Np, S, Np, 1, Vh, dp, t.ctx, t.ldc, n, d, inv);
}
