// Quantized dot products, written once in 256-bit integer SIMD and compiled per ISA.
//
// Included INSIDE `namespace loom::<isa>` by quant_avx2.cc and quant_avx512.cc (<immintrin.h>, <cstring>,
// quant_internal.h and gguf_dequant.h before), after they define
//   dot_u8s8(a, b): 32 products u8 a × s8 b as 8 s32 lanes, lane i = Σ of products 4i..4i+3
//                   (AVX2: vpmaddubsw + vpmaddwd; AVX-512 VNNI: vpdpbusd on ymm)
// and, for VNNI, LOOM_QUANT_VNNI 1 (the small-batch kernels' interleaved sums then take vpdpbusd directly).
// Every weight block is unpacked to 32 unsigned (or, for Q8_0 / Q8_K / Q6_K, signed) int8 values per
// activation block j; the integer dot is scaled by the weight scale and d[j] in f32, offsets and minimums
// come from ds[j] = d[j]·Σq_x. Lane i of a dot holds values 4i..4i+3, so lanes 0-3 are the first 16
// values of a block (Q6_K's two scales per 32 values use that).

static inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

static inline int hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

static inline float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

static inline __m256i loadu256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// s8 a × s8 b: |a| (u8) × b·sign(a) (s8)
static inline __m256i dot_s8s8(__m256i a, __m256i b) { return dot_u8s8(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a)); }

// 16 bytes of nibbles → 32 u8: the low nibbles (values 0-15), then the high ones (values 16-31)
static inline __m256i nibbles_32(const uint8_t* p) {
  const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p)), m = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(v, 4), m), _mm_and_si128(v, m));
}

// bit i of qh → byte i = 0x10 (the 5th bit of Q5_0 / Q5_1 value i), else 0
static inline __m256i bits5_32(const uint8_t* p) {
  uint32_t qh;
  std::memcpy(&qh, p, 4);
  const __m256i shuf = _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202, 0x0303030303030303);
  __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32(int(qh)), shuf);  // byte i = byte i/8 of qh
  const __m256i bit = _mm256_set1_epi64x(0x8040201008040201);            // byte i: bit i%8
  b = _mm256_cmpeq_epi8(_mm256_and_si256(b, bit), bit);
  return _mm256_and_si256(b, _mm256_set1_epi8(0x10));
}

// nb blocks of 32 values of x, one at a time (the AVX-512 build's quant_act_q8 takes 16 at a time, then this)
static void quant_act_q8_blocks(int64_t nb, const float* x, int8_t* q, float* d, float* ds) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < nb; b++) {
    const float* xb = x + b * kQ8Block;
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int i = 0; i < 4; i++) {
      v[i] = _mm256_loadu_ps(xb + 8 * i);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float am = _mm_cvtss_f32(m);
    const float db = am / 127.0f, id = am > 0.0f ? 127.0f / am : 0.0f;
    const __m256 vid = _mm256_set1_ps(id);
    __m256i i32[4];
    constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
    for (int i = 0; i < 4; i++) i32[i] = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(v[i], vid), kRound));
    const int sum = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(i32[0], i32[1]), _mm256_add_epi32(i32[2], i32[3])));
    // pack 32 s32 → 32 s8 in order (packs interleave 128-bit lanes: fix with a permute)
    __m256i p16a = _mm256_packs_epi32(i32[0], i32[1]), p16b = _mm256_packs_epi32(i32[2], i32[3]);
    __m256i p8 = _mm256_packs_epi16(p16a, p16b);
    p8 = _mm256_permutevar8x32_epi32(p8, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + b * kQ8Block), p8);
    d[b] = db;
    ds[b] = db * float(sum);
  }
}
#if !LOOM_QUANT_ZMM
void quant_act_q8(int64_t K, const float* x, int8_t* q, float* d, float* ds) {
  quant_act_q8_blocks(K / kQ8Block, x, q, d, ds);
}
#endif

// Q4_0: d·(q - 8) → d·d_x·Σq·q_x - 8·d·ds
float vec_dot_q4_0_q8(int64_t K, const uint8_t* w, const int8_t* q, const float* d, const float* ds) {
  __m256 acc = _mm256_setzero_ps();
  float off = 0.0f;
  for (int64_t b = 0; b < K / kQ8Block; b++, w += kQ4_0Bytes) {
    const float dw = load_f16(w);
    const __m256i p = dot_u8s8(nibbles_32(w + 2), loadu256(q + b * kQ8Block));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * d[b]), _mm256_cvtepi32_ps(p), acc);
    off += dw * ds[b];
  }
  return hsum(acc) - 8.0f * off;
}

// Q4_1: d·q + m → d·d_x·Σq·q_x + m·ds
float vec_dot_q4_1_q8(int64_t K, const uint8_t* w, const int8_t* q, const float* d, const float* ds) {
  __m256 acc = _mm256_setzero_ps();
  float mins = 0.0f;
  for (int64_t b = 0; b < K / kQ8Block; b++, w += kQ4_1Bytes) {
    const __m256i p = dot_u8s8(nibbles_32(w + 4), loadu256(q + b * kQ8Block));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(load_f16(w) * d[b]), _mm256_cvtepi32_ps(p), acc);
    mins += load_f16(w + 2) * ds[b];
  }
  return hsum(acc) + mins;
}

// Q5_0: d·(q - 16), q = nibble | 5th bit << 4
float vec_dot_q5_0_q8(int64_t K, const uint8_t* w, const int8_t* q, const float* d, const float* ds) {
  __m256 acc = _mm256_setzero_ps();
  float off = 0.0f;
  for (int64_t b = 0; b < K / kQ8Block; b++, w += kQ5_0Bytes) {
    const float dw = load_f16(w);
    const __m256i qw = _mm256_or_si256(nibbles_32(w + 6), bits5_32(w + 2));
    const __m256i p = dot_u8s8(qw, loadu256(q + b * kQ8Block));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * d[b]), _mm256_cvtepi32_ps(p), acc);
    off += dw * ds[b];
  }
  return hsum(acc) - 16.0f * off;
}

// Q5_1: d·q + m, q = nibble | 5th bit << 4
float vec_dot_q5_1_q8(int64_t K, const uint8_t* w, const int8_t* q, const float* d, const float* ds) {
  __m256 acc = _mm256_setzero_ps();
  float mins = 0.0f;
  for (int64_t b = 0; b < K / kQ8Block; b++, w += kQ5_1Bytes) {
    const __m256i qw = _mm256_or_si256(nibbles_32(w + 8), bits5_32(w + 4));
    const __m256i p = dot_u8s8(qw, loadu256(q + b * kQ8Block));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(load_f16(w) * d[b]), _mm256_cvtepi32_ps(p), acc);
    mins += load_f16(w + 2) * ds[b];
  }
  return hsum(acc) + mins;
}

// Q8_0: d·q, two accumulators
float vec_dot_q8_0_q8(int64_t K, const uint8_t* w, const int8_t* q, const float* d, const float*) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  const int64_t nb = K / kQ8Block;
  auto block = [&](int64_t i, __m256 acc) {
    const uint8_t* wb = w + i * kQ8_0Bytes;
    const __m256i p = dot_s8s8(loadu256(wb + 2), loadu256(q + i * kQ8Block));
    return _mm256_fmadd_ps(_mm256_set1_ps(load_f16(wb) * d[i]), _mm256_cvtepi32_ps(p), acc);
  };
  int64_t b = 0;
  for (; b + 2 <= nb; b += 2) {
    acc0 = block(b, acc0);
    acc1 = block(b + 1, acc1);
  }
  if (b < nb) acc0 = block(b, acc0);
  return hsum(_mm256_add_ps(acc0, acc1));
}

// Q4_K super-block of 256: sub-block j = d·sc_j·q - dmin·m_j (j even: low nibbles of bytes 32·(j/2)..,
// j odd: the high ones)
float vec_dot_q4_K_q8(int64_t K, const uint8_t* w, const int8_t* q, const float* d, const float* ds) {
  const __m256i lo4 = _mm256_set1_epi8(0x0F);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0.0f;
  for (int64_t sb = 0; sb < K / gguf::QK_K; sb++, w += kQ4_KBytes) {
    const float dw = load_f16(w), dmin = load_f16(w + 2);
    for (int c = 0; c < 4; c++) {
      const int64_t j = sb * 8 + 2 * c;
      const __m256i qb = loadu256(w + 16 + 32 * c);
      const __m256i p0 = dot_u8s8(_mm256_and_si256(qb, lo4), loadu256(q + j * kQ8Block));
      const __m256i p1 = dot_u8s8(_mm256_and_si256(_mm256_srli_epi16(qb, 4), lo4), loadu256(q + (j + 1) * kQ8Block));
      int sc0, m0, sc1, m1;
      gguf::scale_min_k4(2 * c, w + 4, &sc0, &m0);
      gguf::scale_min_k4(2 * c + 1, w + 4, &sc1, &m1);
      acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * float(sc0) * d[j]), _mm256_cvtepi32_ps(p0), acc);
      acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * float(sc1) * d[j + 1]), _mm256_cvtepi32_ps(p1), acc);
      mins += dmin * (float(m0) * ds[j] + float(m1) * ds[j + 1]);
    }
  }
  return hsum(acc) - mins;
}

// Q5_K: as Q4_K, with the 5th bit of sub-block j's value l in bit j of qh byte l
float vec_dot_q5_K_q8(int64_t K, const uint8_t* w, const int8_t* q, const float* d, const float* ds) {
  const __m256i lo4 = _mm256_set1_epi8(0x0F), b5 = _mm256_set1_epi8(0x10);
  __m256 acc = _mm256_setzero_ps();
  float mins = 0.0f;
  for (int64_t sb = 0; sb < K / gguf::QK_K; sb++, w += kQ5_KBytes) {
    const float dw = load_f16(w), dmin = load_f16(w + 2);
    const __m256i qh = loadu256(w + 16);
    for (int c = 0; c < 4; c++) {
      const int64_t j = sb * 8 + 2 * c;
      const __m256i qb = loadu256(w + 48 + 32 * c);
      const __m256i m0b = _mm256_set1_epi8(char(1 << (2 * c))), m1b = _mm256_set1_epi8(char(1 << (2 * c + 1)));
      const __m256i h0 = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, m0b), m0b), b5);
      const __m256i h1 = _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(qh, m1b), m1b), b5);
      const __m256i q0 = _mm256_or_si256(_mm256_and_si256(qb, lo4), h0);
      const __m256i q1 = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qb, 4), lo4), h1);
      const __m256i p0 = dot_u8s8(q0, loadu256(q + j * kQ8Block));
      const __m256i p1 = dot_u8s8(q1, loadu256(q + (j + 1) * kQ8Block));
      int sc0, m0, sc1, m1;
      gguf::scale_min_k4(2 * c, w + 4, &sc0, &m0);
      gguf::scale_min_k4(2 * c + 1, w + 4, &sc1, &m1);
      acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * float(sc0) * d[j]), _mm256_cvtepi32_ps(p0), acc);
      acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * float(sc1) * d[j + 1]), _mm256_cvtepi32_ps(p1), acc);
      mins += dmin * (float(m0) * ds[j] + float(m1) * ds[j + 1]);
    }
  }
  return hsum(acc) - mins;
}

// Q6_K: value 128h + 32s + l (s < 4, l < 32) = d·scale[8h + 2s + l/16]·(q - 32), q from the nibble s/2 of
// ql[64h + 32·(s%2) + l] and bits 2s..2s+1 of qh[32h + l]. Activation block 4h + s; its lanes 0-3 take the
// first scale, lanes 4-7 the second.
float vec_dot_q6_K_q8(int64_t K, const uint8_t* w, const int8_t* q, const float* d, const float*) {
  const __m256i lo4 = _mm256_set1_epi8(0x0F), lo2 = _mm256_set1_epi8(0x03), m32 = _mm256_set1_epi8(32);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < K / gguf::QK_K; sb++, w += kQ6_KBytes) {
    const int8_t* sc = reinterpret_cast<const int8_t*>(w + 192);
    const float dw = load_f16(w + 208);
    for (int h = 0; h < 2; h++) {
      const __m256i qh = loadu256(w + 128 + 32 * h);
      const __m256i ql0 = loadu256(w + 64 * h), ql1 = loadu256(w + 64 * h + 32);
      for (int s = 0; s < 4; s++) {
        const __m256i ql = s & 1 ? ql1 : ql0;
        const __m256i lo = s < 2 ? _mm256_and_si256(ql, lo4) : _mm256_and_si256(_mm256_srli_epi16(ql, 4), lo4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * s), lo2);
        const __m256i qw = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), m32);
        const int64_t j = sb * 8 + 4 * h + s;
        const __m256i p = dot_s8s8(qw, loadu256(q + j * kQ8Block));
        const float f = dw * d[j];
        const int k = 8 * h + 2 * s;
        const __m256 scv = _mm256_set_m128(_mm_set1_ps(f * float(sc[k + 1])), _mm_set1_ps(f * float(sc[k])));
        acc = _mm256_fmadd_ps(scv, _mm256_cvtepi32_ps(p), acc);
      }
    }
  }
  return hsum(acc);
}

// Q8_K: f32 d·q over 256 values (8 activation blocks)
float vec_dot_q8_K_q8(int64_t K, const uint8_t* w, const int8_t* q, const float* d, const float*) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < K / gguf::QK_K; sb++, w += kQ8_KBytes) {
    float dw;
    std::memcpy(&dw, w, 4);
    for (int s = 0; s < 8; s++) {
      const int64_t j = sb * 8 + s;
      const __m256i p = dot_s8s8(loadu256(w + 4 + 32 * s), loadu256(q + j * kQ8Block));
      acc = _mm256_fmadd_ps(_mm256_set1_ps(dw * d[j]), _mm256_cvtepi32_ps(p), acc);
    }
  }
  return hsum(acc);
}

// ---- Four weight rows per pass (decode and small batches) ------------------------------------------------
// vec_dot4_<type>_q8 computes y[r] = Σ_k W[r][k]·x̂_k for the 4 rows at w + r·rb: each activation block (its
// int8 values and scales) is loaded once for the 4 rows, each row keeps its own accumulator register (4
// independent FMA chains instead of one), and the 4 horizontal sums finish in one pass. Offsets and minimums
// are folded into the vector accumulators (ds[b]/8 per lane sums to ds[b]), so no scalar chain remains.

static inline void hsum4(__m256 a0, __m256 a1, __m256 a2, __m256 a3, float* y) {
  const __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));  // a0..a3 per 128-bit half
  _mm_storeu_ps(y, _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1)));
}

// Four rows are four short streams that jump by 4 rows at each group: the hardware prefetcher loses them (a
// 4-row Q5_0 kernel without this ran slower than the one-row one, its time on the weight loads), so each
// block's bytes are prefetched kPrefetchGroups groups of 4 rows ahead.
constexpr int kPrefetchGroups = 2;
static inline void prefetch4(const uint8_t* wb, size_t rb, int64_t bytes) {
  const uint8_t* p = wb + kPrefetchGroups * 4 * rb;
  for (int r = 0; r < 4; r++)
    for (int64_t o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(p + r * rb + o), _MM_HINT_T0);
}

static inline __m256 set1_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _mm256_cvtph_ps(_mm_set1_epi16(short(h)));
}

// Q8_0: acc_r += d_w·d_x·Σ q_w·q_x
void vec_dot4_q8_0_q8(int64_t K, const uint8_t* w, size_t rb, const int8_t* q, const float* d, const float*,
                      float* y) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t b = 0; b < K / kQ8Block; b++) {
    const __m256i qx = loadu256(q + b * kQ8Block);
    const __m256 dx = _mm256_set1_ps(d[b]);
    auto row = [&](const uint8_t* wb, __m256 acc) {
      const __m256i p = dot_s8s8(loadu256(wb + 2), qx);
      return _mm256_fmadd_ps(_mm256_mul_ps(set1_f16(wb), dx), _mm256_cvtepi32_ps(p), acc);
    };
    const uint8_t* wb = w + b * kQ8_0Bytes;
    prefetch4(wb, rb, kQ8_0Bytes);
    a0 = row(wb, a0);
    a1 = row(wb + rb, a1);
    a2 = row(wb + 2 * rb, a2);
    a3 = row(wb + 3 * rb, a3);
  }
  hsum4(a0, a1, a2, a3, y);
}

// Q4_0 / Q5_0: acc_r += d_w·(d_x·Σ q_w·q_x - off·ds/8 per lane), off 8 / 16
template <bool kFive>
static inline void vec_dot4_q40_q50(int64_t K, const uint8_t* w, size_t rb, const int8_t* q, const float* d,
                                    const float* ds, float* y) {
  constexpr int64_t bytes = kFive ? kQ5_0Bytes : kQ4_0Bytes;
  const __m256 off = _mm256_set1_ps(kFive ? -2.0f : -1.0f);  // -16/8, -8/8
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  for (int64_t b = 0; b < K / kQ8Block; b++) {
    const __m256i qx = loadu256(q + b * kQ8Block);
    const __m256 dx = _mm256_set1_ps(d[b]), ox = _mm256_mul_ps(_mm256_set1_ps(ds[b]), off);
    auto row = [&](const uint8_t* wb, __m256 acc) {
      const __m256i qw = kFive ? _mm256_or_si256(nibbles_32(wb + 6), bits5_32(wb + 2)) : nibbles_32(wb + 2);
      const __m256 v = _mm256_fmadd_ps(dx, _mm256_cvtepi32_ps(dot_u8s8(qw, qx)), ox);
      return _mm256_fmadd_ps(set1_f16(wb), v, acc);
    };
    const uint8_t* wb = w + b * bytes;
    prefetch4(wb, rb, bytes);
    a0 = row(wb, a0);
    a1 = row(wb + rb, a1);
    a2 = row(wb + 2 * rb, a2);
    a3 = row(wb + 3 * rb, a3);
  }
  hsum4(a0, a1, a2, a3, y);
}

void vec_dot4_q4_0_q8(int64_t K, const uint8_t* w, size_t rb, const int8_t* q, const float* d, const float* ds,
                      float* y) {
  vec_dot4_q40_q50<false>(K, w, rb, q, d, ds, y);
}

void vec_dot4_q5_0_q8(int64_t K, const uint8_t* w, size_t rb, const int8_t* q, const float* d, const float* ds,
                      float* y) {
  vec_dot4_q40_q50<true>(K, w, rb, q, d, ds, y);
}

// Q4_K super-block: the 8 (scale, min) pairs of each row are unpacked once (llama.cpp's 12-byte → 8 + 8 bytes
// shuffle), widened to f32 and multiplied by d·d_x (scales) and dmin·ds (minimums, subtracted at once);
// sub-block j's scale is then broadcast from a small table.
static inline void q4k_scales(const uint8_t* w, const float* d, const float* ds, float* sf, __m256* acc) {
  uint32_t u[4];
  std::memcpy(u, w + 4, 12);
  constexpr uint32_t m1 = 0x3f3f3f3f, m2 = 0x0f0f0f0f, m3 = 0x03030303;
  u[3] = ((u[2] >> 4) & m2) | (((u[1] >> 6) & m3) << 4);  // mins 4-7
  const uint32_t mins03 = u[1] & m1;
  u[1] = (u[2] & m2) | (((u[0] >> 6) & m3) << 4);  // scales 4-7
  u[2] = mins03;
  u[0] &= m1;  // scales 0-3
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(u));
  const __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(b));
  const __m256 mn = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(b, 8)));
  _mm256_store_ps(sf, _mm256_mul_ps(_mm256_mul_ps(set1_f16(w), sc), _mm256_loadu_ps(d)));
  *acc = _mm256_fnmadd_ps(_mm256_mul_ps(set1_f16(w + 2), mn), _mm256_loadu_ps(ds), *acc);
}

void vec_dot4_q4_K_q8(int64_t K, const uint8_t* w, size_t rb, const int8_t* q, const float* d, const float* ds,
                      float* y) {
  const __m256i lo4 = _mm256_set1_epi8(0x0F);
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  alignas(32) float sf[4][8];
  for (int64_t sb = 0; sb < K / gguf::QK_K; sb++) {
    const uint8_t* wb = w + sb * kQ4_KBytes;
    prefetch4(wb, rb, kQ4_KBytes);
    q4k_scales(wb, d + sb * 8, ds + sb * 8, sf[0], &a0);
    q4k_scales(wb + rb, d + sb * 8, ds + sb * 8, sf[1], &a1);
    q4k_scales(wb + 2 * rb, d + sb * 8, ds + sb * 8, sf[2], &a2);
    q4k_scales(wb + 3 * rb, d + sb * 8, ds + sb * 8, sf[3], &a3);
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
      const int8_t* xc = q + (sb * 8 + 2 * c) * kQ8Block;
      const __m256i x0 = loadu256(xc), x1 = loadu256(xc + kQ8Block);
      auto row = [&](int r, __m256 acc) {
        const __m256i qb = loadu256(wb + r * rb + 16 + 32 * c);
        const __m256i p0 = dot_u8s8(_mm256_and_si256(qb, lo4), x0);
        const __m256i p1 = dot_u8s8(_mm256_and_si256(_mm256_srli_epi16(qb, 4), lo4), x1);
        acc = _mm256_fmadd_ps(_mm256_broadcast_ss(&sf[r][2 * c]), _mm256_cvtepi32_ps(p0), acc);
        return _mm256_fmadd_ps(_mm256_broadcast_ss(&sf[r][2 * c + 1]), _mm256_cvtepi32_ps(p1), acc);
      };
      a0 = row(0, a0);
      a1 = row(1, a1);
      a2 = row(2, a2);
      a3 = row(3, a3);
    }
  }
  hsum4(a0, a1, a2, a3, y);
}

// Q6_K super-block: the 16 scales of each row times d·d_x (two per activation block: lanes 0-3 and 4-7),
// laid out per activation block as 8 lanes once, then one load per block and row.
void vec_dot4_q6_K_q8(int64_t K, const uint8_t* w, size_t rb, const int8_t* q, const float* d, const float*,
                      float* y) {
  const __m256i lo4 = _mm256_set1_epi8(0x0F), lo2 = _mm256_set1_epi8(0x03), m32 = _mm256_set1_epi8(32);
  const __m256i lo_idx = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  alignas(32) float sf[4][8][8];  // row, activation block, lane
  for (int64_t sb = 0; sb < K / gguf::QK_K; sb++) {
    const uint8_t* wb = w + sb * kQ6_KBytes;
    prefetch4(wb, rb, kQ6_KBytes);
    for (int r = 0; r < 4; r++) {
      const uint8_t* wr = wb + r * rb;
      const __m128i s8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(wr + 192));
      const __m256 dw = set1_f16(wr + 208);
      for (int half = 0; half < 2; half++) {  // scales 8·half .. 8·half + 7 = activation blocks 4·half ..
        const __m256 sc = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(half ? _mm_srli_si128(s8, 8) : s8));
        const __m256 d4 = _mm256_castps128_ps256(_mm_loadu_ps(d + sb * 8 + 4 * half));
        const __m256 dx = _mm256_permutevar8x32_ps(d4, _mm256_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3));
        const __m256 f = _mm256_mul_ps(_mm256_mul_ps(dw, sc), dx);  // scale k·d_x(k/2), k = 8·half ..
        for (int j = 0; j < 4; j++)
          _mm256_store_ps(sf[r][4 * half + j],
                          _mm256_permutevar8x32_ps(f, _mm256_add_epi32(lo_idx, _mm256_set1_epi32(2 * j))));
      }
    }
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++) {
#pragma GCC unroll 4
      for (int s = 0; s < 4; s++) {
        const int jb = 4 * h + s;
        const __m256i qx = loadu256(q + (sb * 8 + jb) * kQ8Block);
        auto row = [&](int r, __m256 acc) {
          const uint8_t* wr = wb + r * rb;
          const __m256i ql = loadu256(wr + 64 * h + 32 * (s & 1));
          const __m256i lo = s < 2 ? _mm256_and_si256(ql, lo4) : _mm256_and_si256(_mm256_srli_epi16(ql, 4), lo4);
          const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(loadu256(wr + 128 + 32 * h), 2 * s), lo2);
          const __m256i qw = _mm256_sub_epi8(_mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)), m32);
          return _mm256_fmadd_ps(_mm256_load_ps(sf[r][jb]), _mm256_cvtepi32_ps(dot_s8s8(qw, qx)), acc);
        };
        a0 = row(0, a0);
        a1 = row(1, a1);
        a2 = row(2, a2);
        a3 = row(3, a3);
      }
    }
  }
  hsum4(a0, a1, a2, a3, y);
}

// The other types (rarer in the files people run): four single-row products (quant_internal.h).
LOOM_DOT4_BY_ROWS(q4_1)
LOOM_DOT4_BY_ROWS(q5_1)
LOOM_DOT4_BY_ROWS(q5_K)
LOOM_DOT4_BY_ROWS(q8_K)

// ---- 4 or 8 weight rows × M rows of x, each weight block unpacked once for all M (small batches) -----------
// y[m·ldy + r] = Σ_k W[r][k]·x̂_m,k for the 4 (gemm4) or 8 (gemm8) rows at w + r·rb and the M quantized rows of x
// (row m at q + m·K, d + m·K/32, ds + m·K/32), M <= kQuantSmallM. Where unpacking a block costs more than the
// dot itself (Q4_0 / Q5_0: nibbles, 5th bits), doing it once per step instead of once per row of x roughly
// halves a small batch's work.
//
// Q4_0 / Q5_0 blocks are unpacked to unsigned values (0-15 / 0-31) and interleaved across each group of 4 rows:
// vector c holds values 8c..8c+7 of rows 0, 1, 2, 3, so one vpmaddubsw against 8 bytes of x broadcast does 8
// products for each of the 4 rows at once (s16 lanes 4r..4r+3 for row r). The 4 chunks of a block are summed
// in s16 (at most 4·2·31·127 = 31496: no overflow), widened once (vpmaddwd by 1: s32 lanes 2r, 2r+1 for row r)
// and scaled in f32 by d_x and the per-lane weight scale: ~13 operations per block of x for the 4 rows instead
// of 4 × 5 with one row per register. Q4_K and Q6_K interleave their 32-value sub-blocks the same way.

// 4×4 transpose of 8-byte chunks: v[c] = bytes 8c..8c+7 of w0, w1, w2, w3 (rows in 64-bit lanes 0-3)
static inline void interleave4(__m256i w0, __m256i w1, __m256i w2, __m256i w3, __m256i* v) {
  const __m256i a01 = _mm256_unpacklo_epi64(w0, w1), b01 = _mm256_unpackhi_epi64(w0, w1);
  const __m256i a23 = _mm256_unpacklo_epi64(w2, w3), b23 = _mm256_unpackhi_epi64(w2, w3);
  v[0] = _mm256_permute2x128_si256(a01, a23, 0x20);
  v[1] = _mm256_permute2x128_si256(b01, b23, 0x20);
  v[2] = _mm256_permute2x128_si256(a01, a23, 0x31);
  v[3] = _mm256_permute2x128_si256(b01, b23, 0x31);
}

// 8 bytes of x in every 64-bit lane (vpbroadcastq from memory)
static inline __m256i bcast8(const int8_t* p) {
  return _mm256_broadcastq_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
}

// the f16 scale at the start of each of the 4 rows' blocks, row r in f32 lanes 2r and 2r + 1
static inline __m256 scales_by_lane_pairs(const uint8_t* wb, size_t rb) {
  uint16_t hs[8];
  for (int r = 0; r < 4; r++) {
    std::memcpy(&hs[2 * r], wb + r * rb, 2);
    hs[2 * r + 1] = hs[2 * r];
  }
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(hs)));
}

// y[r] = lane 2r + lane 2r + 1 of acc (r < 4)
static inline void store_lane_pairs(__m256 acc, float* y) {
  const __m256 p = _mm256_hadd_ps(acc, acc);  // lanes 0, 1: rows 0, 1; lanes 4, 5: rows 2, 3
  _mm_storel_pi(reinterpret_cast<__m64*>(y), _mm256_castps256_ps128(p));
  _mm_storel_pi(reinterpret_cast<__m64*>(y + 2), _mm256_extractf128_ps(p, 1));
}

// ---- Register tiles: 4·G rows of W × S rows of x -----------------------------------------------------------
// A small batch is bound by instructions, not by the weight bytes. Each kernel below works in two passes per
// tile of 4·G rows of W (gemm4: G = 1, gemm8: G = 2):
//   1. unpack: every block of the tile's rows once, into an L1 scratch of vectors (the 4 rows of each group
//      interleaved as above, the scales laid out per lane pair);
//   2. for each pair of rows of x (S = 2; an odd last row S = 1), all of K with the G × S accumulators in
//      registers, chunk by chunk: each weight vector loaded serves the S rows of x and each broadcast of x the
//      G groups (about 1.4 loads per vpmaddubsw where one row of x per iteration took 2), the G·S chains are
//      independent, and the horizontal sums come once, at the end of the tile.
// Measured on the AVX2 dev machine (2-core AMD EPYC, Zen 3, under load), M = 32, one thread: Q4_0 / Q5_0 / Q4_K
// about 55 → 58-63 GMAC/s (Q8_0 stayed level and keeps its one-row-of-x loop below). The same instruction mix
// with every operand in registers runs at about 100 GMAC/s there, so what is left is not the multiplies.
constexpr int kTileS = 2;

// a thread's scratch of n vectors (grows, never shrinks)
struct alignas(32) ScratchVec {
  uint8_t b[32];
};
static inline __m256i* scratch_vectors(size_t n) {
  thread_local std::vector<ScratchVec> buf;
  if (buf.size() < n) buf.resize(n);
  return reinterpret_cast<__m256i*>(buf.data());
}

// Q4_0 / Q5_0: per block and group, the 4 interleaved value vectors and the scales d (5 vectors);
// y = d_w·(d_x·Σ q_w·q_x - off·ds), off 8 / 16 (half per lane: 2 lanes per row)
// Σ over a block of 32 values for G groups of 4 interleaved rows (v + 5g: chunks 0-3) × S rows of x (x_s):
// chunk by chunk, so that each weight vector loaded serves the S rows of x and each broadcast of x the G groups
// (1 load per product instruction where the block-at-a-time order took 2); s32 lanes 2r, 2r + 1 for row r. The
// unsigned values are ≤ 31: on AVX2 the 4 chunks sum in s16 (≤ 4·2·31·127 = 31496), widened once.
template <int G, int S, int kStride>
static inline void dot_tile(const __m256i* v, const int8_t* const* xs, __m256i (&p)[S][G]) {
#pragma GCC unroll 4
  for (int c = 0; c < 4; c++) {
    __m256i xc[S];
    for (int s = 0; s < S; s++) xc[s] = bcast8(xs[s] + 8 * c);
    for (int g = 0; g < G; g++) {
      const __m256i vv = _mm256_load_si256(v + kStride * g + c);
      for (int s = 0; s < S; s++) {
#if LOOM_QUANT_VNNI
        p[s][g] = _mm256_dpbusd_epi32(c == 0 ? _mm256_setzero_si256() : p[s][g], vv, xc[s]);
#else
        const __m256i m = _mm256_maddubs_epi16(vv, xc[s]);
        p[s][g] = c == 0 ? m : _mm256_add_epi16(p[s][g], m);
#endif
      }
    }
  }
#if !LOOM_QUANT_VNNI
  for (int s = 0; s < S; s++)
    for (int g = 0; g < G; g++) p[s][g] = _mm256_madd_epi16(p[s][g], _mm256_set1_epi16(1));
#endif
}

// Q4_0 / Q5_0: per block and group, the 4 interleaved value vectors and the scales d (5 vectors);
// y = d_w·(d_x·Σ q_w·q_x - off·ds), off 8 / 16 (half per lane: 2 lanes per row)
template <bool kFive, int G, int S>
static inline void tile_q40_q50(int64_t K, const __m256i* wv, const int8_t* q, const float* d, const float* ds,
                                float* y, int64_t ldy) {
  const int64_t nb = K / kQ8Block;
  const __m256 off = _mm256_set1_ps(kFive ? -8.0f : -4.0f);
  __m256 acc[S][G];
  for (int s = 0; s < S; s++)
    for (int g = 0; g < G; g++) acc[s][g] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    const __m256i* vb = wv + b * 5 * G;
    const int8_t* xs[S];
    for (int s = 0; s < S; s++) xs[s] = q + s * K + b * kQ8Block;
    __m256i p[S][G];
    dot_tile<G, S, 5>(vb, xs, p);
    for (int s = 0; s < S; s++) {
      const __m256 dx = _mm256_set1_ps(d[s * nb + b]);
      const __m256 ox = _mm256_mul_ps(_mm256_set1_ps(ds[s * nb + b]), off);
      for (int g = 0; g < G; g++) {
        const __m256 f = _mm256_fmadd_ps(dx, _mm256_cvtepi32_ps(p[s][g]), ox);
        acc[s][g] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_load_si256(vb + 5 * g + 4)), f, acc[s][g]);
      }
    }
  }
  for (int s = 0; s < S; s++)
    for (int g = 0; g < G; g++) store_lane_pairs(acc[s][g], y + s * ldy + 4 * g);
}

template <bool kFive, int G>
static inline void gemm_q40_q50(int64_t K, const uint8_t* w, size_t rb, int64_t M, const int8_t* q, const float* d,
                                const float* ds, float* y, int64_t ldy) {
  constexpr int64_t bytes = kFive ? kQ5_0Bytes : kQ4_0Bytes;
  const int64_t nb = K / kQ8Block;
  __m256i* wv = scratch_vectors(size_t(nb * 5 * G));
  auto unpack = [&](const uint8_t* p) {
    return kFive ? _mm256_or_si256(nibbles_32(p + 6), bits5_32(p + 2)) : nibbles_32(p + 2);
  };
  for (int64_t b = 0; b < nb; b++)
    for (int g = 0; g < G; g++) {
      const uint8_t* wb = w + 4 * g * rb + b * bytes;
      prefetch4(wb, rb, bytes);
      __m256i* v = wv + (b * G + g) * 5;
      interleave4(unpack(wb), unpack(wb + rb), unpack(wb + 2 * rb), unpack(wb + 3 * rb), v);
      v[4] = _mm256_castps_si256(scales_by_lane_pairs(wb, rb));
    }
  int64_t m = 0;
  for (; m + kTileS <= M; m += kTileS)
    tile_q40_q50<kFive, G, kTileS>(K, wv, q + m * K, d + m * nb, ds + m * nb, y + m * ldy, ldy);
  for (; m < M; m++) tile_q40_q50<kFive, G, 1>(K, wv, q + m * K, d + m * nb, ds + m * nb, y + m * ldy, ldy);
}

// Q8_0 (gemm4 only): the 4 rows interleaved as above, |w| and the weight scales once per block, kept in
// registers while every row of x passes (the register tile above gained nothing here at 32 rows of x and lost
// ~15% at 8 in the decode: a block's 9 vectors go through the scratch for no saving in multiplies); per row of
// x and chunk of 8 values one broadcast, x·sign(w) and dot_u8s8 (the s16 pair sums reach 2·128·127: no room to
// sum chunks in s16), one convert and one FMA per block of x for the 4 rows.
void gemm4_q8_0_q8(int64_t K, const uint8_t* w, size_t rb, int64_t M, const int8_t* q, const float* d, const float*,
                   float* y, int64_t ldy) {
  const int64_t nb = K / kQ8Block;
  alignas(32) __m256 acc[kQuantSmallM];
  for (int64_t m = 0; m < M; m++) acc[m] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t* wb = w + b * kQ8_0Bytes;
    prefetch4(wb, rb, kQ8_0Bytes);
    __m256i v[4], u[4];
    interleave4(loadu256(wb + 2), loadu256(wb + rb + 2), loadu256(wb + 2 * rb + 2), loadu256(wb + 3 * rb + 2), v);
    for (int c = 0; c < 4; c++) u[c] = _mm256_sign_epi8(v[c], v[c]);
    const __m256 sw = scales_by_lane_pairs(wb, rb);
    for (int64_t m = 0; m < M; m++) {
      const int8_t* xb = q + m * K + b * kQ8Block;
      auto chunk = [&](int c) { return dot_u8s8(u[c], _mm256_sign_epi8(bcast8(xb + 8 * c), v[c])); };
      const __m256i i = _mm256_add_epi32(_mm256_add_epi32(chunk(0), chunk(1)), _mm256_add_epi32(chunk(2), chunk(3)));
      acc[m] = _mm256_fmadd_ps(_mm256_mul_ps(sw, _mm256_set1_ps(d[m * nb + b])), _mm256_cvtepi32_ps(i), acc[m]);
    }
  }
  for (int64_t m = 0; m < M; m++) store_lane_pairs(acc[m], y + m * ldy);
}

// ---- Q4_K / Q6_K: each super-block of the tile's rows unpacked once for all M rows of x ------------------
// Q4_K: per super-block and group, the 8 sub-blocks' values interleaved as Q4_0 / Q5_0's blocks above (values
// 0-15, 32 vectors), the integer scale of row r's sub-block j in s16 lanes 4r..4r+3 (8 vectors: vpmaddwd by it
// gives sc·Σ in s32 lanes 2r, 2r+1, the scale applied in integers), d of row r in lanes 2r, 2r+1 (1) and the
// minimums -dmin·m_j of row r in lanes 2r (j even) and 2r+1 (j odd) for the sub-block pairs (4): against the
// pair (ds_2i, ds_2i+1) broadcast, one FMA per pair folds Σ_j -dmin·m_j·ds_j into the same accumulator.
constexpr int kQ4KVecs = 32 + 8 + 1 + 4;
static inline void q4k_scales_mins(const uint8_t* wr, uint8_t* b) {  // 12 bytes → scales 0-7, mins 0-7
  uint32_t u[4];
  std::memcpy(u, wr + 4, 12);
  constexpr uint32_t m1 = 0x3f3f3f3f, m2 = 0x0f0f0f0f, m3 = 0x03030303;
  u[3] = ((u[2] >> 4) & m2) | (((u[1] >> 6) & m3) << 4);
  const uint32_t mins03 = u[1] & m1;
  u[1] = (u[2] & m2) | (((u[0] >> 6) & m3) << 4);
  u[2] = mins03;
  u[0] &= m1;
  std::memcpy(b, u, 16);
}

template <int G, int S>
static inline void tile_q4_K(int64_t K, const __m256i* wv, const int8_t* q, const float* d, const float* ds,
                             float* y, int64_t ldy) {
  const int64_t nb = K / kQ8Block;
  __m256 acc[S][G];
  for (int s = 0; s < S; s++)
    for (int g = 0; g < G; g++) acc[s][g] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < K / gguf::QK_K; sb++) {
    const __m256i* vb = wv + sb * kQ4KVecs * G;
    __m256 t[S][G];
    for (int s = 0; s < S; s++)
      for (int g = 0; g < G; g++) t[s][g] = _mm256_setzero_ps();
#pragma GCC unroll 1
    for (int j = 0; j < 8; j++) {
      const int8_t* xs[S];
      for (int s = 0; s < S; s++) xs[s] = q + s * K + sb * gguf::QK_K + 32 * j;
      __m256i p[S][G];
      // (VNNI too: the integer scale needs the s16 sums, so vpmaddubsw + vpmaddwd here as on AVX2)
#pragma GCC unroll 4
      for (int c = 0; c < 4; c++) {
        __m256i xc[S];
        for (int s = 0; s < S; s++) xc[s] = bcast8(xs[s] + 8 * c);
        for (int g = 0; g < G; g++) {
          const __m256i vv = _mm256_load_si256(vb + kQ4KVecs * g + 4 * j + c);
          for (int s = 0; s < S; s++) {
            const __m256i m = _mm256_maddubs_epi16(vv, xc[s]);
            p[s][g] = c == 0 ? m : _mm256_add_epi16(p[s][g], m);
          }
        }
      }
      for (int s = 0; s < S; s++) {
        const __m256 dxj = _mm256_set1_ps(d[s * nb + sb * 8 + j]);
        for (int g = 0; g < G; g++) {
          const __m256i i = _mm256_madd_epi16(p[s][g], _mm256_load_si256(vb + kQ4KVecs * g + 32 + j));
          t[s][g] = _mm256_fmadd_ps(dxj, _mm256_cvtepi32_ps(i), t[s][g]);
        }
      }
    }
    for (int s = 0; s < S; s++) {
      const float* dsp = ds + s * nb + sb * 8;
      for (int g = 0; g < G; g++) {
        const __m256i* v = vb + kQ4KVecs * g;
        __m256 a = _mm256_fmadd_ps(_mm256_castsi256_ps(v[40]), t[s][g], acc[s][g]);
        for (int i = 0; i < 4; i++) {
          const __m256 dsi = _mm256_castpd_ps(_mm256_broadcast_sd(reinterpret_cast<const double*>(dsp + 2 * i)));
          a = _mm256_fmadd_ps(_mm256_castsi256_ps(v[41 + i]), dsi, a);
        }
        acc[s][g] = a;
      }
    }
  }
  for (int s = 0; s < S; s++)
    for (int g = 0; g < G; g++) store_lane_pairs(acc[s][g], y + s * ldy + 4 * g);
}

template <int G>
static inline void gemm_q4_K(int64_t K, const uint8_t* w, size_t rb, int64_t M, const int8_t* q, const float* d,
                             const float* ds, float* y, int64_t ldy) {
  const int64_t nb = K / kQ8Block;
  const __m256i lo4 = _mm256_set1_epi8(0x0F);
  constexpr int64_t kRep = 0x0001000100010001;  // an s16 in 4 lanes
  __m256i* wv = scratch_vectors(size_t(K / gguf::QK_K * kQ4KVecs * G));
  for (int64_t sb = 0; sb < K / gguf::QK_K; sb++)
    for (int g = 0; g < G; g++) {
      const uint8_t* wb = w + 4 * g * rb + sb * kQ4_KBytes;
      prefetch4(wb, rb, kQ4_KBytes);
      __m256i* v = wv + (sb * G + g) * kQ4KVecs;
      alignas(16) uint8_t sm[4][16];
      alignas(32) float mn[4 * 8];  // row r at 8r: dmin·m_j
      for (int r = 0; r < 4; r++) {
        const uint8_t* wr = wb + r * rb;
        q4k_scales_mins(wr, sm[r]);
        const __m128i m8 = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(sm[r] + 8));
        _mm256_store_ps(mn + 8 * r, _mm256_mul_ps(set1_f16(wr + 2), _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(m8))));
      }
      for (int c = 0; c < 4; c++) {  // bytes 32c.. hold sub-block 2c (low nibbles) and 2c + 1 (high)
        __m256i lo[4], hi[4];
        for (int r = 0; r < 4; r++) {
          const __m256i qb = loadu256(wb + r * rb + 16 + 32 * c);
          lo[r] = _mm256_and_si256(qb, lo4);
          hi[r] = _mm256_and_si256(_mm256_srli_epi16(qb, 4), lo4);
        }
        interleave4(lo[0], lo[1], lo[2], lo[3], v + 8 * c);
        interleave4(hi[0], hi[1], hi[2], hi[3], v + 8 * c + 4);
      }
      for (int j = 0; j < 8; j++)
        v[32 + j] = _mm256_setr_epi64x(sm[0][j] * kRep, sm[1][j] * kRep, sm[2][j] * kRep, sm[3][j] * kRep);
      v[40] = _mm256_castps_si256(scales_by_lane_pairs(wb, rb));
      for (int i = 0; i < 4; i++) {
        const float* p = mn + 2 * i;  // row r's minimums 2i, 2i + 1 at p + 8r
        v[41 + i] = _mm256_castps_si256(_mm256_setr_ps(-p[0], -p[1], -p[8], -p[9], -p[16], -p[17], -p[24], -p[25]));
      }
    }
  int64_t m = 0;
  for (; m + kTileS <= M; m += kTileS)
    tile_q4_K<G, kTileS>(K, wv, q + m * K, d + m * nb, ds + m * nb, y + m * ldy, ldy);
  for (; m < M; m++) tile_q4_K<G, 1>(K, wv, q + m * K, d + m * nb, ds + m * nb, y + m * ldy, ldy);
}

// gemm4 / gemm8 of Q4_0, Q5_0 and Q4_K: one tile kernel each, 1 or 2 groups of 4 rows
#define LOOM_QUANT_GEMM_DEF(R, T, impl)                                                                        \
  void gemm##R##_##T##_q8(int64_t K, const uint8_t* w, size_t rb, int64_t M, const int8_t* q, const float* d, \
                          const float* ds, float* y, int64_t ldy) {                                            \
    impl(K, w, rb, M, q, d, ds, y, ldy);                                                                      \
  }
LOOM_QUANT_GEMM_DEF(4, q4_0, (gemm_q40_q50<false, 1>))
LOOM_QUANT_GEMM_DEF(8, q4_0, (gemm_q40_q50<false, 2>))
LOOM_QUANT_GEMM_DEF(4, q5_0, (gemm_q40_q50<true, 1>))
LOOM_QUANT_GEMM_DEF(8, q5_0, (gemm_q40_q50<true, 2>))
LOOM_QUANT_GEMM_DEF(4, q4_K, gemm_q4_K<1>)
LOOM_QUANT_GEMM_DEF(8, q4_K, gemm_q4_K<2>)

// Q6_K: per super-block and group, the 8 sub-blocks' values (0-63) interleaved as above (32 vectors), the two
// integer scales of row r's sub-block j in s16 lanes 4r..4r+3 (16 vectors: A for its values 0-15 = chunks 0-1,
// B for 16-31 = chunks 2-3) and d of row r in lanes 2r, 2r+1 (1). Per sub-block and row of x: chunks 0-1 and
// 2-3 summed in s16 (≤ 2·2·63·127 = 32004), the offset of 32 taken off (32·Σx over the same lanes, from the
// same broadcasts: one vpmaddubsw by 32 per chunk, shared by the G groups; the difference is ≤ 4·32·127 in
// magnitude, so the wrapping s16 subtraction is exact), vpmaddwd by the scales A and B, one convert and one FMA
// by d_x; d once per super-block. kSums (the packed layout's tiles): the offset instead once per super-block from
// d16 (d_x·Σq per 16 values of x, linear_quant_acts) and the scales as f32 lane pairs (8 more vectors: sub-block
// j's scales 2j, 2j + 1 of row r in lanes 2r, 2r + 1), 8 FMAs per tile row in place of 4 vpmaddubsw, 2 adds and
// 2 subtractions per sub-block.
constexpr int kQ6KVecs = 32 + 16 + 1, kQ6KSumVecs = kQ6KVecs + 8;

template <int G, int S, bool kSums = false>
static inline void tile_q6_K(int64_t K, const __m256i* wv, const int8_t* q, const float* d, float* y, int64_t ldy,
                             const float* d16 = nullptr) {
  constexpr int kVecs = kSums ? kQ6KSumVecs : kQ6KVecs;
  const int64_t nb = K / kQ8Block;
  const __m256i c32 = _mm256_set1_epi8(32);
  __m256 acc[S][G];
  for (int s = 0; s < S; s++)
    for (int g = 0; g < G; g++) acc[s][g] = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < K / gguf::QK_K; sb++) {
    const __m256i* vb = wv + sb * kVecs * G;
    __m256 t[S][G];
    for (int s = 0; s < S; s++)
      for (int g = 0; g < G; g++) t[s][g] = _mm256_setzero_ps();
#pragma GCC unroll 1
    for (int j = 0; j < 8; j++) {
      __m256i p[2][S][G], bx[2][S];  // [half]: chunks 0-1, 2-3
#pragma GCC unroll 4
      for (int c = 0; c < 4; c++) {
        const int h = c >> 1;
        __m256i xc[S];
        for (int s = 0; s < S; s++) {
          xc[s] = bcast8(q + s * K + sb * gguf::QK_K + 32 * j + 8 * c);
          if (kSums) continue;
          const __m256i b = _mm256_maddubs_epi16(c32, xc[s]);
          bx[h][s] = c & 1 ? _mm256_add_epi16(bx[h][s], b) : b;
        }
        for (int g = 0; g < G; g++) {
          const __m256i vv = _mm256_load_si256(vb + kVecs * g + 4 * j + c);
          for (int s = 0; s < S; s++) {
            const __m256i m = _mm256_maddubs_epi16(vv, xc[s]);
            p[h][s][g] = c & 1 ? _mm256_add_epi16(p[h][s][g], m) : m;
          }
        }
      }
      for (int s = 0; s < S; s++) {
        const __m256 dxj = _mm256_set1_ps(d[s * nb + sb * 8 + j]);
        for (int g = 0; g < G; g++) {
          const __m256i* sc = vb + kVecs * g + 32 + 2 * j;
          const __m256i p0 = kSums ? p[0][s][g] : _mm256_sub_epi16(p[0][s][g], bx[0][s]);
          const __m256i p1 = kSums ? p[1][s][g] : _mm256_sub_epi16(p[1][s][g], bx[1][s]);
          const __m256i i = _mm256_add_epi32(_mm256_madd_epi16(p0, _mm256_load_si256(sc)),
                                             _mm256_madd_epi16(p1, _mm256_load_si256(sc + 1)));
          t[s][g] = _mm256_fmadd_ps(dxj, _mm256_cvtepi32_ps(i), t[s][g]);
        }
      }
    }
    if (kSums)  // t -= 32·Σ_j (scale 2j·d16[2j] + scale 2j + 1·d16[2j + 1]) per row, over lane pairs
      for (int s = 0; s < S; s++)
        for (int g = 0; g < G; g++) {
          __m256 o = _mm256_setzero_ps();
          for (int j = 0; j < 8; j++) {
            const double* dp = reinterpret_cast<const double*>(d16 + s * (K / 16) + sb * 16 + 2 * j);
            o = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_load_si256(vb + kVecs * g + 49 + j)),
                                _mm256_castpd_ps(_mm256_broadcast_sd(dp)), o);
          }
          t[s][g] = _mm256_fnmadd_ps(_mm256_set1_ps(32.0f), o, t[s][g]);
        }
    for (int s = 0; s < S; s++)
      for (int g = 0; g < G; g++)
        acc[s][g] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_load_si256(vb + kVecs * g + 48)), t[s][g], acc[s][g]);
  }
  for (int s = 0; s < S; s++)
    for (int g = 0; g < G; g++) store_lane_pairs(acc[s][g], y + s * ldy + 4 * g);
}

template <int G>
static inline void gemm_q6_K(int64_t K, const uint8_t* w, size_t rb, int64_t M, const int8_t* q, const float* d,
                             float* y, int64_t ldy) {
  const int64_t nb = K / kQ8Block;
  const __m256i lo4 = _mm256_set1_epi8(0x0F), lo2 = _mm256_set1_epi8(0x03);
  constexpr uint64_t kRep = 0x0001000100010001;  // an s16 in 4 lanes
  __m256i* wv = scratch_vectors(size_t(K / gguf::QK_K * kQ6KVecs * G));
  for (int64_t sb = 0; sb < K / gguf::QK_K; sb++)
    for (int g = 0; g < G; g++) {
      const uint8_t* wb = w + 4 * g * rb + sb * kQ6_KBytes;
      prefetch4(wb, rb, kQ6_KBytes);
      __m256i* v = wv + (sb * G + g) * kQ6KVecs;
      __m256i wq[4][8];  // row, sub-block: values 0-63 (value 128h + 32s + l of the super-block: sub-block 4h + s)
      for (int r = 0; r < 4; r++) {
        const uint8_t* wr = wb + r * rb;
        for (int h = 0; h < 2; h++) {
          const __m256i qh = loadu256(wr + 128 + 32 * h);
          for (int s = 0; s < 4; s++) {
            const __m256i ql = loadu256(wr + 64 * h + 32 * (s & 1));
            const __m256i lo = s < 2 ? _mm256_and_si256(ql, lo4) : _mm256_and_si256(_mm256_srli_epi16(ql, 4), lo4);
            const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * s), lo2);
            wq[r][4 * h + s] = _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4));
          }
        }
      }
      for (int j = 0; j < 8; j++) {
        interleave4(wq[0][j], wq[1][j], wq[2][j], wq[3][j], v + 4 * j);
        for (int h = 0; h < 2; h++) {  // scale 2j + h of each row (int8) in its 4 s16 lanes
          uint64_t l[4];
          for (int r = 0; r < 4; r++)
            l[r] = uint64_t(uint16_t(int16_t(int8_t(wb[r * rb + 192 + 2 * j + h])))) * kRep;
          v[32 + 2 * j + h] = _mm256_setr_epi64x(int64_t(l[0]), int64_t(l[1]), int64_t(l[2]), int64_t(l[3]));
        }
      }
      v[48] = _mm256_castps_si256(scales_by_lane_pairs(wb + 208, rb));
    }
  int64_t m = 0;
  for (; m + kTileS <= M; m += kTileS) tile_q6_K<G, kTileS>(K, wv, q + m * K, d + m * nb, y + m * ldy, ldy);
  for (; m < M; m++) tile_q6_K<G, 1>(K, wv, q + m * K, d + m * nb, y + m * ldy, ldy);
}

void gemm4_q6_K_q8(int64_t K, const uint8_t* w, size_t rb, int64_t M, const int8_t* q, const float* d, const float*,
                   float* y, int64_t ldy) {
  gemm_q6_K<1>(K, w, rb, M, q, d, y, ldy);
}
void gemm8_q6_K_q8(int64_t K, const uint8_t* w, size_t rb, int64_t M, const int8_t* q, const float* d, const float*,
                   float* y, int64_t ldy) {
  gemm_q6_K<2>(K, w, rb, M, q, d, y, ldy);
}

// ---- Rows repacked at load (quant_pack): groups of 4 rows, one sequential stream -------------------------
// The file's layout makes a 4-row group four streams 1 row apart and costs the interleaving shuffles above on
// every pass; quant_pack lays each group out once as the kernels read it, in the file's own byte count
// (quant_internal.h: kQ8_0x4Bytes, kQ5_0x4Bytes).

// the 4 f16 scales at p (row r at 2r) in f32 lanes 2r and 2r + 1
static inline __m256 scales4_by_lane_pairs(const uint8_t* p) {
  const __m128i h = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return _mm256_cvtph_ps(_mm_unpacklo_epi16(h, h));
}

// Σ over the 4 chunks of an interleaved block (v[c]: values 8c..8c+7 of rows 0-3, signed) against one row of x
// (xb: 32 int8): s32 lanes 2r, 2r + 1 for row r; |w| × x·sign(w), as dot_s8s8
static inline __m256i dot_q8x4(const __m256i* u, const __m256i* v, const int8_t* xb) {
  __m256i i = dot_u8s8(u[0], _mm256_sign_epi8(bcast8(xb), v[0]));
  for (int c = 1; c < 4; c++) i = _mm256_add_epi32(i, dot_u8s8(u[c], _mm256_sign_epi8(bcast8(xb + 8 * c), v[c])));
  return i;
}

// The packed stream kPackedAhead bytes ahead of block wb into L1 (3 lines cover a block of up to 136 bytes;
// groups follow each other, so this runs on into the next group). Without it the hardware prefetcher left the
// Q8_0 lm_head (49,152 × 576, 30 MB) at 7.3-8.9 GB/s at one row of x; with 1, 2 or 4 KiB ahead 9.5-11.5
// (standalone harness, 1 thread, AVX2 dev machine under load: ranges over alternated runs). On the Zen 5 (AVX-512)
// 8 KiB beat 2 at one row of x from DRAM (quant-kernels.mts, 1 thread, GMAC per CPU-second, 3 and 2 alternations):
// Q8_0 151936 × 896 29-32 → 34-38 (AVX2 kernels there 32 → 37-39), Q4_K 37888 × 4096 49-54 → 62-64, Q6_K 37-38 →
// 43-47; 16 KiB measured like 8.
constexpr int kPackedAhead = 8192;
static inline void prefetch_packed(const uint8_t* wb) {
  for (int o = 0; o < 192; o += 64) _mm_prefetch(reinterpret_cast<const char*>(wb + kPackedAhead + o), _MM_HINT_T0);
}

// one packed Q8_0x4 block's 4 chunks of 32 weights: v the signed values, u = |v| (vpmaddubsw's unsigned side)
static inline void load_q8_0x4(const uint8_t* wb, __m256i v[4], __m256i u[4]) {
  for (int c = 0; c < 4; c++) {
    v[c] = loadu256(wb + 8 + 32 * c);
    u[c] = _mm256_sign_epi8(v[c], v[c]);
  }
}

// Q8_0x4: y[m·ldy + r] (r < 4) for one group of 4 packed rows at w (rb unused: the group is contiguous) and M
// rows of x; one row of x (decode) with two accumulators over alternate blocks, more with |w| once per block.
void gemm4_q8_0x4_q8(int64_t K, const uint8_t* w, size_t, int64_t M, const int8_t* q, const float* d, const float*,
                     float* y, int64_t ldy) {
  const int64_t nb = K / kQ8Block;
#if LOOM_QUANT_ZMM
  if (M == 1) return gemv_q8_0x4_zmm<1>(K, w, 0, q, d, y);
#endif
  if (M == 1) {
    __m256 a[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t b = 0; b < nb; b++) {
      const uint8_t* wb = w + b * kQ8_0x4Bytes;
      prefetch_packed(wb);
      __m256i v[4], u[4];
      load_q8_0x4(wb, v, u);
      const __m256i i = dot_q8x4(u, v, q + b * kQ8Block);
      const __m256 f = _mm256_mul_ps(scales4_by_lane_pairs(wb), _mm256_set1_ps(d[b]));
      a[b & 1] = _mm256_fmadd_ps(f, _mm256_cvtepi32_ps(i), a[b & 1]);
    }
    store_lane_pairs(_mm256_add_ps(a[0], a[1]), y);
    return;
  }
  alignas(32) __m256 acc[kQuantSmallM];
  for (int64_t m = 0; m < M; m++) acc[m] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; b++) {
    const uint8_t* wb = w + b * kQ8_0x4Bytes;
    prefetch_packed(wb);
    __m256i v[4], u[4];
    load_q8_0x4(wb, v, u);
    const __m256 sw = scales4_by_lane_pairs(wb);
    for (int64_t m = 0; m < M; m++) {
      const __m256i i = dot_q8x4(u, v, q + m * K + b * kQ8Block);
      acc[m] = _mm256_fmadd_ps(_mm256_mul_ps(sw, _mm256_set1_ps(d[m * nb + b])), _mm256_cvtepi32_ps(i), acc[m]);
    }
  }
  for (int64_t m = 0; m < M; m++) store_lane_pairs(acc[m], y + m * ldy);
}

// The 5th bit of chunk c's values from h (byte i: bit c = the 5th bit of byte i of chunk c, h < 16) as 0x10: one
// vpshufb from a 16-entry table, where a shift and a mask took two operations (AVX2, `bench/quant-kernels.mts
// --m 1 --layouts packed`, 1 thread, two alternated runs, GMAC per CPU-second: Q5_0 23.3-24.3 → 24.9-26.2 over
// 1536 x 576, 576 x 1536 and 49152 x 576; Q5_K 26.2-26.7 → 27.4-28.1 over 2048 x 1536 and 576 x 1536)
static inline __m256i fifth_bits(__m256i h, int c) {
  alignas(32) static const uint8_t t[4][32] = {
    {0, 16, 0, 16, 0, 16, 0, 16, 0, 16, 0, 16, 0, 16, 0, 16, 0, 16, 0, 16, 0, 16, 0, 16, 0, 16, 0, 16, 0, 16, 0, 16},
    {0, 0, 16, 16, 0, 0, 16, 16, 0, 0, 16, 16, 0, 0, 16, 16, 0, 0, 16, 16, 0, 0, 16, 16, 0, 0, 16, 16, 0, 0, 16, 16},
    {0, 0, 0, 0, 16, 16, 16, 16, 0, 0, 0, 0, 16, 16, 16, 16, 0, 0, 0, 0, 16, 16, 16, 16, 0, 0, 0, 0, 16, 16, 16, 16},
    {0, 0, 0, 0, 0, 0, 0, 0, 16, 16, 16, 16, 16, 16, 16, 16, 0, 0, 0, 0, 0, 0, 0, 0, 16, 16, 16, 16, 16, 16, 16, 16},
  };
  return _mm256_shuffle_epi8(_mm256_load_si256(reinterpret_cast<const __m256i*>(t[c])), h);
}

// Q5_0x4 block (88 bytes) → the 4 interleaved value vectors (0-31) of interleave4's layout
static inline void unpack_q5_0x4(const uint8_t* wb, __m256i* v) {
  const __m256i lo4 = _mm256_set1_epi8(0x0F);
  const __m256i n01 = loadu256(wb + 8), n23 = loadu256(wb + 40);
  const __m256i h = nibbles_32(wb + 72);  // byte i: bit c = the 5th bit of byte i of chunk c
  v[0] = _mm256_or_si256(_mm256_and_si256(n01, lo4), fifth_bits(h, 0));
  v[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(n01, 4), lo4), fifth_bits(h, 1));
  v[2] = _mm256_or_si256(_mm256_and_si256(n23, lo4), fifth_bits(h, 2));
  v[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(n23, 4), lo4), fifth_bits(h, 3));
}

// Q5_0x4, one row of x: y[r] = d_w·(d_x·Σ q_w·q_x - 16·ds) for the 4 rows of the group at w
static inline void gemv_q5_0x4(int64_t K, const uint8_t* w, const int8_t* q, const float* d, const float* ds,
                               float* y) {
  const __m256 off = _mm256_set1_ps(-8.0f);  // -16 per row, half per lane
  __m256 a[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
  for (int64_t b = 0; b < K / kQ8Block; b++) {
    const uint8_t* wb = w + b * kQ5_0x4Bytes;
    prefetch_packed(wb);
    __m256i v[4];
    unpack_q5_0x4(wb, v);
    const int8_t* xs[1] = {q + b * kQ8Block};
    __m256i p[1][1];
    dot_tile<1, 1, 1>(v, xs, p);
    const __m256 f = _mm256_fmadd_ps(_mm256_set1_ps(d[b]), _mm256_cvtepi32_ps(p[0][0]),
                                     _mm256_mul_ps(_mm256_set1_ps(ds[b]), off));
    a[b & 1] = _mm256_fmadd_ps(scales4_by_lane_pairs(wb), f, a[b & 1]);
  }
  store_lane_pairs(_mm256_add_ps(a[0], a[1]), y);
}

// Q5_0x4, G groups of 4 packed rows (consecutive: group g at w + g·rb) × M rows of x: one row of x straight from
// the blocks, more through the register tiles of Q4_0 / Q5_0 above (the blocks unpacked once into the scratch)
template <int G>
static inline void gemm_q5_0x4(int64_t K, const uint8_t* w, size_t rb, int64_t M, const int8_t* q, const float* d,
                               const float* ds, float* y, int64_t ldy) {
  const int64_t nb = K / kQ8Block;
  if (M == 1) {
#if LOOM_QUANT_ZMM
    return gemv_q5_0x4_zmm<G>(K, w, rb, q, d, ds, y);
#endif
    for (int g = 0; g < G; g++) gemv_q5_0x4(K, w + g * rb, q, d, ds, y + 4 * g);
    return;
  }
  __m256i* wv = scratch_vectors(size_t(nb * 5 * G));
  for (int64_t b = 0; b < nb; b++)
    for (int g = 0; g < G; g++) {
      const uint8_t* wb = w + g * rb + b * kQ5_0x4Bytes;
      prefetch_packed(wb);
      __m256i* v = wv + (b * G + g) * 5;
      unpack_q5_0x4(wb, v);
      v[4] = _mm256_castps_si256(scales4_by_lane_pairs(wb));
    }
  int64_t m = 0;
  for (; m + kTileS <= M; m += kTileS)
    tile_q40_q50<true, G, kTileS>(K, wv, q + m * K, d + m * nb, ds + m * nb, y + m * ldy, ldy);
  for (; m < M; m++) tile_q40_q50<true, G, 1>(K, wv, q + m * K, d + m * nb, ds + m * nb, y + m * ldy, ldy);
}

void gemm4_q5_0x4_q8(int64_t K, const uint8_t* w, size_t rb, int64_t M, const int8_t* q, const float* d,
                     const float* ds, float* y, int64_t ldy) {
  gemm_q5_0x4<1>(K, w, rb, M, q, d, ds, y, ldy);
}
void gemm8_q5_0x4_q8(int64_t K, const uint8_t* w, size_t rb, int64_t M, const int8_t* q, const float* d,
                     const float* ds, float* y, int64_t ldy) {
  gemm_q5_0x4<2>(K, w, rb, M, q, d, ds, y, ldy);
}

// ---- Packed groups back to f32 (prefill panels): y (4, K), row r at y + r·ldy --------------------------------
// 32 values of one row (u8 a, minus off) times the row's scale f → f32 at y
static inline void store_values(__m256i a, __m256i off, __m256 f, float* y) {
  const __m128i lo = _mm256_castsi256_si128(a), hi = _mm256_extracti128_si256(a, 1);
  const __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  for (int k = 0; k < 4; k++) {
    const __m256i i = _mm256_sub_epi32(_mm256_cvtepu8_epi32(part[k]), off);
    _mm256_storeu_ps(y + 8 * k, _mm256_mul_ps(f, _mm256_cvtepi32_ps(i)));
  }
}

void dequant4_q5_0x4(int64_t K, const uint8_t* w, float* y, int64_t ldy) {
  const __m256i off = _mm256_set1_epi32(16);
  for (int64_t b = 0; b < K / kQ8Block; b++) {
    const uint8_t* wb = w + b * kQ5_0x4Bytes;
    __m256i v[4], rows[4];
    unpack_q5_0x4(wb, v);
    interleave4(v[0], v[1], v[2], v[3], rows);  // the 4×4 chunk transpose is its own inverse: row r's 32 values
    for (int r = 0; r < 4; r++) store_values(rows[r], off, _mm256_set1_ps(load_f16(wb + 2 * r)), y + r * ldy + b * 32);
  }
}

void dequant4_q8_0x4(int64_t K, const uint8_t* w, float* y, int64_t ldy) {
  for (int64_t b = 0; b < K / kQ8Block; b++) {
    const uint8_t* wb = w + b * kQ8_0x4Bytes;
    __m256i rows[4];
    interleave4(loadu256(wb + 8), loadu256(wb + 40), loadu256(wb + 72), loadu256(wb + 104), rows);
    for (int r = 0; r < 4; r++) {
      const __m256 f = _mm256_set1_ps(load_f16(wb + 2 * r));
      const __m128i lo = _mm256_castsi256_si128(rows[r]), hi = _mm256_extracti128_si256(rows[r], 1);
      const __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
      for (int k = 0; k < 4; k++)
        _mm256_storeu_ps(y + r * ldy + b * 32 + 8 * k, _mm256_mul_ps(f, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(part[k]))));
    }
  }
}

// ---- Q4_K / Q6_K re-laid at load (quant_pack): each super-block of a group of 4 rows one run of bytes -----------
// quant_internal.h gives the layouts (kQ4_Kx4Bytes, kQ6_Kx4Bytes): per sub-block of 32 values the 4 rows' values
// as interleave4 leaves them (chunk c: values 8c..8c+7 of rows 0-3), two AND / shift pairs from 64 bytes of
// nibbles (Q6_K: its high 2 bits from 32 more), the 6-bit scales and minimums of Q4_K one shift and mask per
// 32 instead of llama.cpp's 12-byte shuffle per row, Q6_K's int8 scales in the order the kernels broadcast them.
// One row of x (decode) reads the stream once with its accumulators in registers; more go through the register
// tiles of the file's layout (tile_q4_K, tile_q6_K), the super-blocks unpacked once into the L1 scratch.

// the bytes [wb + kPackedAhead, + n) into L1 (a packed super-block: 9 lines for Q4_K, 14 for Q6_K)
static inline void prefetch_span(const uint8_t* wb, int n) {
  for (int o = 0; o < n; o += 64) _mm_prefetch(reinterpret_cast<const char*>(wb + kPackedAhead + o), _MM_HINT_T0);
}

// sub-block values from 64 bytes of interleaved nibbles at p: v[c] = values 8c..8c+7 of rows 0-3 (0-15)
static inline void unpack_nibbles_x4(const uint8_t* p, __m256i* v) {
  const __m256i lo4 = _mm256_set1_epi8(0x0F);
  const __m256i a = loadu256(p), b = loadu256(p + 32);
  v[0] = _mm256_and_si256(a, lo4);
  v[1] = _mm256_and_si256(_mm256_srli_epi16(a, 4), lo4);
  v[2] = _mm256_and_si256(b, lo4);
  v[3] = _mm256_and_si256(_mm256_srli_epi16(b, 4), lo4);
}

// Q6_Kx4 sub-block at p: the nibbles, then the high 2 bits of chunk c in bits 2c of the 32 bytes at p + 64 (0-63)
static inline void unpack_q6_Kx4(const uint8_t* p, __m256i* v) {
  unpack_nibbles_x4(p, v);
  const __m256i h = loadu256(p + 64), m = _mm256_set1_epi8(0x30);
  v[0] = _mm256_or_si256(v[0], _mm256_and_si256(_mm256_slli_epi16(h, 4), m));
  v[1] = _mm256_or_si256(v[1], _mm256_and_si256(_mm256_slli_epi16(h, 2), m));
  v[2] = _mm256_or_si256(v[2], _mm256_and_si256(h, m));
  v[3] = _mm256_or_si256(v[3], _mm256_and_si256(_mm256_srli_epi16(h, 2), m));
}

// Q5_Kx4 sub-block at p: the nibbles, then the 5th bits of the 16 bytes at p + 64 as Q5_0x4's (0-31)
static inline void unpack_q5_Kx4(const uint8_t* p, __m256i* v) {
  unpack_nibbles_x4(p, v);
  const __m256i h = nibbles_32(p + 64);  // byte i: bit c = the 5th bit of byte i of chunk c
  for (int c = 0; c < 4; c++) v[c] = _mm256_or_si256(v[c], fifth_bits(h, c));
}

// Q4_Kx4 / Q5_Kx4 sub-block j of the super-block at wb
template <bool kFive>
static inline void unpack_qk4x4(const uint8_t* wb, int j, __m256i* v) {
  if (kFive) unpack_q5_Kx4(wb + 64 + 80 * j, v);
  else unpack_nibbles_x4(wb + 64 + 64 * j, v);
}

// Q4_Kx4 (and Q5_Kx4) super-block at wb → sc (byte 4j + r: row r's scale of sub-block j), mn (byte
// 8·(j/2) + 2r + j%2: its minimum), 6 bits each
static inline void q4_Kx4_scales(const uint8_t* wb, __m256i* sc, __m256i* mn) {
  const __m256i lo4 = _mm256_set1_epi8(0x0F), lo2 = _mm256_set1_epi8(0x03);
  const __m256i l = loadu256(wb + 16);
  const __m256i h = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(wb + 48)));
  const __m256i hs = _mm256_srlv_epi32(h, _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2));  // values 0-15, 16-31
  const __m256i hm = _mm256_srlv_epi32(h, _mm256_setr_epi32(4, 4, 4, 4, 6, 6, 6, 6));  // 32-47, 48-63
  *sc = _mm256_or_si256(_mm256_and_si256(l, lo4), _mm256_slli_epi16(_mm256_and_si256(hs, lo2), 4));
  *mn = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l, 4), lo4),
                        _mm256_slli_epi16(_mm256_and_si256(hm, lo2), 4));
}

// the 4 unsigned bytes at p (one per row) → s16 lanes 4r..4r+3 = byte r (vpmaddwd's scale vector)
static inline __m256i scale_lanes_u8(const uint8_t* p) {
  const __m256i idx = _mm256_setr_epi8(0, -128, 0, -128, 0, -128, 0, -128, 1, -128, 1, -128, 1, -128, 1, -128,
                                       2, -128, 2, -128, 2, -128, 2, -128, 3, -128, 3, -128, 3, -128, 3, -128);
  int32_t u;
  std::memcpy(&u, p, 4);
  return _mm256_shuffle_epi8(_mm256_set1_epi32(u), idx);
}

// Q6_Kx4 sub-block j's scales at p (8 bytes: scale 2j of rows 0-3, then 2j + 1) → s16 lanes 4r..4r+3, signed
static inline void scale_lanes_s8(const uint8_t* p, __m256i* a, __m256i* b) {
  const __m256i idx = _mm256_setr_epi8(-128, 0, -128, 0, -128, 0, -128, 0, -128, 1, -128, 1, -128, 1, -128, 1,
                                       -128, 2, -128, 2, -128, 2, -128, 2, -128, 3, -128, 3, -128, 3, -128, 3);
  int64_t u;
  std::memcpy(&u, p, 8);
  const __m256i s = _mm256_set1_epi64x(u);  // the byte into the high half of each s16, then an arithmetic shift
  *a = _mm256_srai_epi16(_mm256_shuffle_epi8(s, idx), 8);
  *b = _mm256_srai_epi16(_mm256_shuffle_epi8(s, _mm256_add_epi8(idx, _mm256_set1_epi8(4))), 8);
}

// the 8 minimums of pair i (8 bytes at mn + 8i) as f32 lanes 2r, 2r + 1
static inline __m256 mins_pair(__m256i mn, int i) {
  const __m128i h = i < 2 ? _mm256_castsi256_si128(mn) : _mm256_extracti128_si256(mn, 1);
  return _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(i % 2 ? _mm_srli_si128(h, 8) : h));
}

// Σ_j m_j·ds_j of one super-block over lane pairs: the minimums of pair i times x's block sums ds8[2i], ds8[2i + 1]
// (one 8-byte broadcast each); the one-row Q4_K / Q5_K kernels of every width share it
static inline __m256 mins_dot(__m256i mn, const float* ds8) {
  __m256 tm = _mm256_setzero_ps();
  for (int i = 0; i < 4; i++) {
    const __m256 dsi = _mm256_castpd_ps(_mm256_broadcast_sd(reinterpret_cast<const double*>(ds8 + 2 * i)));
    tm = _mm256_fmadd_ps(mins_pair(mn, i), dsi, tm);
  }
  return tm;
}

// Q4_Kx4 / Q5_Kx4, one row of x: per sub-block the 4 chunks summed in s16 (≤ 4·2·31·127), vpmaddwd by the
// integer scales, one FMA by d_x; per super-block d and the minimums' Σ_j m_j·ds_j (4 FMAs over lane pairs) times
// dmin
template <bool kFive>
static inline void gemv_qk4x4(int64_t K, const uint8_t* w, const int8_t* q, const float* d, const float* ds,
                              float* y) {
  constexpr int64_t bytes = kFive ? kQ5_Kx4Bytes : kQ4_Kx4Bytes;
  __m256 acc = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < K / gguf::QK_K; sb++) {
    const uint8_t* wb = w + sb * bytes;
    prefetch_span(wb, int(bytes));
    __m256i scv, mnv;
    q4_Kx4_scales(wb, &scv, &mnv);
    alignas(32) uint8_t sc[32];
    _mm256_store_si256(reinterpret_cast<__m256i*>(sc), scv);
    const int8_t* xs = q + sb * gguf::QK_K;
    // two named accumulators over alternate sub-blocks (an array indexed by j & 1 stayed in memory: a store-to-load
    // chain through every FMA)
    auto sub = [&](int j, __m256 t) {
      __m256i v[4];
      unpack_qk4x4<kFive>(wb, j, v);
      __m256i p = _mm256_maddubs_epi16(v[0], bcast8(xs + 32 * j));
      for (int c = 1; c < 4; c++) p = _mm256_add_epi16(p, _mm256_maddubs_epi16(v[c], bcast8(xs + 32 * j + 8 * c)));
      const __m256i i = _mm256_madd_epi16(p, scale_lanes_u8(sc + 4 * j));
      return _mm256_fmadd_ps(_mm256_set1_ps(d[sb * 8 + j]), _mm256_cvtepi32_ps(i), t);
    };
    __m256 t0 = _mm256_setzero_ps(), t1 = _mm256_setzero_ps();
    for (int j = 0; j < 8; j += 2) {
      t0 = sub(j, t0);
      t1 = sub(j + 1, t1);
    }
    const __m256 tm = mins_dot(mnv, ds + sb * 8);
    acc = _mm256_fmadd_ps(scales4_by_lane_pairs(wb), _mm256_add_ps(t0, t1), acc);
    acc = _mm256_fnmadd_ps(scales4_by_lane_pairs(wb + 8), tm, acc);
  }
  store_lane_pairs(acc, y);
}

// Q4_Kx4 / Q5_Kx4, G groups (group g at w + g·rb) × M rows of x: one row of x straight from the stream, more
// through tile_q4_K (values up to 31 sum in s16 as Q5_0's) with each super-block unpacked once into its scratch
// layout (kQ4KVecs)
template <bool kFive, int G>
static inline void gemm_qk4x4(int64_t K, const uint8_t* w, size_t rb, int64_t M, const int8_t* q, const float* d,
                              const float* ds, float* y, int64_t ldy) {
  constexpr int64_t bytes = kFive ? kQ5_Kx4Bytes : kQ4_Kx4Bytes;
  const int64_t nb = K / kQ8Block;
  if (M == 1) {
    for (int g = 0; g < G; g++) {
#if LOOM_QUANT_ZMM
      if (!kFive) {
        gemv_q4_Kx4_zmm(K, w + g * rb, q, d, ds, y + 4 * g);
        continue;
      }
#endif
      gemv_qk4x4<kFive>(K, w + g * rb, q, d, ds, y + 4 * g);
    }
    return;
  }
  __m256i* wv = scratch_vectors(size_t(K / gguf::QK_K * kQ4KVecs * G));
  for (int64_t sb = 0; sb < K / gguf::QK_K; sb++)
    for (int g = 0; g < G; g++) {
      const uint8_t* wb = w + g * rb + sb * bytes;
      prefetch_span(wb, int(bytes));
      __m256i* v = wv + (sb * G + g) * kQ4KVecs;
      for (int j = 0; j < 8; j++) unpack_qk4x4<kFive>(wb, j, v + 4 * j);
      __m256i scv, mnv;
      q4_Kx4_scales(wb, &scv, &mnv);
      alignas(32) uint8_t sc[32];
      _mm256_store_si256(reinterpret_cast<__m256i*>(sc), scv);
      for (int j = 0; j < 8; j++) v[32 + j] = scale_lanes_u8(sc + 4 * j);
      v[40] = _mm256_castps_si256(scales4_by_lane_pairs(wb));
      const __m256 ndmin = _mm256_sub_ps(_mm256_setzero_ps(), scales4_by_lane_pairs(wb + 8));
      for (int i = 0; i < 4; i++) v[41 + i] = _mm256_castps_si256(_mm256_mul_ps(ndmin, mins_pair(mnv, i)));
    }
  int64_t m = 0;
  for (; m + kTileS <= M; m += kTileS)
    tile_q4_K<G, kTileS>(K, wv, q + m * K, d + m * nb, ds + m * nb, y + m * ldy, ldy);
  for (; m < M; m++) tile_q4_K<G, 1>(K, wv, q + m * K, d + m * nb, ds + m * nb, y + m * ldy, ldy);
}

// Q6_Kx4 sub-block j's scales (8 bytes at p: scale 2j of rows 0-3, then 2j + 1) as f32 lanes 2r, 2r + 1
static inline __m256 scale_pairs_s8(const uint8_t* p) {
  const __m256i s = _mm256_cvtepi8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_cvtepi32_ps(_mm256_permutevar8x32_epi32(s, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

// Q6_Kx4, one row of x: per sub-block chunks 0-1 and 2-3 summed in s16 (≤ 2·2·63·127: scales 2j and 2j + 1),
// vpmaddwd by the signed scales, one FMA by d_x; the offset of 32 once per super-block from d16 (d_x·Σq per 16
// values of x) against the scales as f32 lane pairs
static inline void gemv_q6_Kx4(int64_t K, const uint8_t* w, const int8_t* q, const float* d, const float* d16,
                               float* y) {
  __m256 acc = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < K / gguf::QK_K; sb++) {
    const uint8_t* wb = w + sb * kQ6_Kx4Bytes;
    prefetch_span(wb, int(kQ6_Kx4Bytes));
    const int8_t* xs = q + sb * gguf::QK_K;
    auto sub = [&](int j, __m256 t) {
      __m256i v[4], x[4];
      unpack_q6_Kx4(wb + 72 + 96 * j, v);
      for (int c = 0; c < 4; c++) x[c] = bcast8(xs + 32 * j + 8 * c);
      const __m256i p0 = _mm256_add_epi16(_mm256_maddubs_epi16(v[0], x[0]), _mm256_maddubs_epi16(v[1], x[1]));
      const __m256i p1 = _mm256_add_epi16(_mm256_maddubs_epi16(v[2], x[2]), _mm256_maddubs_epi16(v[3], x[3]));
      __m256i sa, sbv;
      scale_lanes_s8(wb + 8 + 8 * j, &sa, &sbv);
      const __m256i i = _mm256_add_epi32(_mm256_madd_epi16(p0, sa), _mm256_madd_epi16(p1, sbv));
      return _mm256_fmadd_ps(_mm256_set1_ps(d[sb * 8 + j]), _mm256_cvtepi32_ps(i), t);
    };
    __m256 t0 = _mm256_setzero_ps(), t1 = _mm256_setzero_ps(), o0 = t0, o1 = t0;
    for (int j = 0; j < 8; j += 2) {
      t0 = sub(j, t0);
      t1 = sub(j + 1, t1);
      const double* dp = reinterpret_cast<const double*>(d16 + sb * 16 + 2 * j);
      o0 = _mm256_fmadd_ps(scale_pairs_s8(wb + 8 + 8 * j), _mm256_castpd_ps(_mm256_broadcast_sd(dp)), o0);
      o1 = _mm256_fmadd_ps(scale_pairs_s8(wb + 16 + 8 * j), _mm256_castpd_ps(_mm256_broadcast_sd(dp + 1)), o1);
    }
    const __m256 t = _mm256_fnmadd_ps(_mm256_set1_ps(32.0f), _mm256_add_ps(o0, o1), _mm256_add_ps(t0, t1));
    acc = _mm256_fmadd_ps(scales4_by_lane_pairs(wb), t, acc);
  }
  store_lane_pairs(acc, y);
}

// Q6_Kx4, G groups × M rows of x: as Q4_Kx4, the tiles of tile_q6_K with the offset from d16 (kQ6KSumVecs)
template <int G>
static inline void gemm_q6_Kx4(int64_t K, const uint8_t* w, size_t rb, int64_t M, const int8_t* q, const float* d,
                               const float* d16, float* y, int64_t ldy) {
  const int64_t nb = K / kQ8Block;
  if (M == 1) {
#if LOOM_QUANT_ZMM
    for (int g = 0; g < G; g++) gemv_q6_Kx4_zmm(K, w + g * rb, q, d, d16, y + 4 * g);
    return;
#endif
    for (int g = 0; g < G; g++) gemv_q6_Kx4(K, w + g * rb, q, d, d16, y + 4 * g);
    return;
  }
  __m256i* wv = scratch_vectors(size_t(K / gguf::QK_K * kQ6KSumVecs * G));
  for (int64_t sb = 0; sb < K / gguf::QK_K; sb++)
    for (int g = 0; g < G; g++) {
      const uint8_t* wb = w + g * rb + sb * kQ6_Kx4Bytes;
      prefetch_span(wb, int(kQ6_Kx4Bytes));
      __m256i* v = wv + (sb * G + g) * kQ6KSumVecs;
      for (int j = 0; j < 8; j++) {
        unpack_q6_Kx4(wb + 72 + 96 * j, v + 4 * j);
        scale_lanes_s8(wb + 8 + 8 * j, v + 32 + 2 * j, v + 33 + 2 * j);
        v[49 + j] = _mm256_castps_si256(scale_pairs_s8(wb + 8 + 8 * j));
      }
      v[48] = _mm256_castps_si256(scales4_by_lane_pairs(wb));
    }
  const int64_t n16 = K / 16;
  int64_t m = 0;
  for (; m + kTileS <= M; m += kTileS)
    tile_q6_K<G, kTileS, true>(K, wv, q + m * K, d + m * nb, y + m * ldy, ldy, d16 + m * n16);
  for (; m < M; m++) tile_q6_K<G, 1, true>(K, wv, q + m * K, d + m * nb, y + m * ldy, ldy, d16 + m * n16);
}

LOOM_QUANT_GEMM_DEF(4, q4_Kx4, (gemm_qk4x4<false, 1>))
LOOM_QUANT_GEMM_DEF(8, q4_Kx4, (gemm_qk4x4<false, 2>))
LOOM_QUANT_GEMM_DEF(4, q5_Kx4, (gemm_qk4x4<true, 1>))
LOOM_QUANT_GEMM_DEF(8, q5_Kx4, (gemm_qk4x4<true, 2>))
#undef LOOM_QUANT_GEMM_DEF
// (ds: d16, the sums per 16 values linear_quant_acts passes to Q6_K's kernels)
void gemm4_q6_Kx4_q8(int64_t K, const uint8_t* w, size_t rb, int64_t M, const int8_t* q, const float* d,
                     const float* ds, float* y, int64_t ldy) {
  gemm_q6_Kx4<1>(K, w, rb, M, q, d, ds, y, ldy);
}
void gemm8_q6_Kx4_q8(int64_t K, const uint8_t* w, size_t rb, int64_t M, const int8_t* q, const float* d,
                     const float* ds, float* y, int64_t ldy) {
  gemm_q6_Kx4<2>(K, w, rb, M, q, d, ds, y, ldy);
}

// 32 values of one row (u8 a) → f32 at y: f_lo·(a - off) - m for values 0-15, f_hi·(a - off) - m for 16-31
// (a product, then a difference: the roundings of gguf_dequant.cc's d·q - m)
static inline void store_affine(__m256i a, __m256i off, __m256 flo, __m256 fhi, __m256 m, float* y) {
  const __m128i lo = _mm256_castsi256_si128(a), hi = _mm256_extracti128_si256(a, 1);
  const __m128i part[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
  for (int k = 0; k < 4; k++) {
    const __m256 v = _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(part[k]), off));
    _mm256_storeu_ps(y + 8 * k, _mm256_sub_ps(_mm256_mul_ps(k < 2 ? flo : fhi, v), m));
  }
}

template <bool kFive>
static inline void dequant4_qk4x4(int64_t K, const uint8_t* w, float* y, int64_t ldy) {
  const __m256i zero = _mm256_setzero_si256();
  for (int64_t sb = 0; sb < K / gguf::QK_K; sb++) {
    const uint8_t* wb = w + sb * (kFive ? kQ5_Kx4Bytes : kQ4_Kx4Bytes);
    __m256i scv, mnv;
    q4_Kx4_scales(wb, &scv, &mnv);
    alignas(32) uint8_t sc[32], mn[32];
    _mm256_store_si256(reinterpret_cast<__m256i*>(sc), scv);
    _mm256_store_si256(reinterpret_cast<__m256i*>(mn), mnv);
    for (int j = 0; j < 8; j++) {
      __m256i v[4], rows[4];
      unpack_qk4x4<kFive>(wb, j, v);
      interleave4(v[0], v[1], v[2], v[3], rows);  // the 4×4 chunk transpose is its own inverse
      for (int r = 0; r < 4; r++) {
        const __m256 f = _mm256_set1_ps(load_f16(wb + 2 * r) * float(sc[4 * j + r]));
        const __m256 m = _mm256_set1_ps(load_f16(wb + 8 + 2 * r) * float(mn[8 * (j / 2) + 2 * r + j % 2]));
        store_affine(rows[r], zero, f, f, m, y + r * ldy + sb * gguf::QK_K + 32 * j);
      }
    }
  }
}

void dequant4_q4_Kx4(int64_t K, const uint8_t* w, float* y, int64_t ldy) { dequant4_qk4x4<false>(K, w, y, ldy); }
void dequant4_q5_Kx4(int64_t K, const uint8_t* w, float* y, int64_t ldy) { dequant4_qk4x4<true>(K, w, y, ldy); }

void dequant4_q6_Kx4(int64_t K, const uint8_t* w, float* y, int64_t ldy) {
  const __m256i off = _mm256_set1_epi32(32);
  const __m256 zero = _mm256_setzero_ps();
  for (int64_t sb = 0; sb < K / gguf::QK_K; sb++) {
    const uint8_t* wb = w + sb * kQ6_Kx4Bytes;
    const int8_t* sc = reinterpret_cast<const int8_t*>(wb + 8);
    for (int j = 0; j < 8; j++) {
      __m256i v[4], rows[4];
      unpack_q6_Kx4(wb + 72 + 96 * j, v);
      interleave4(v[0], v[1], v[2], v[3], rows);
      for (int r = 0; r < 4; r++) {
        const float dr = load_f16(wb + 2 * r);
        const __m256 flo = _mm256_set1_ps(dr * float(sc[8 * j + r]));
        const __m256 fhi = _mm256_set1_ps(dr * float(sc[8 * j + 4 + r]));
        store_affine(rows[r], off, flo, fhi, zero, y + r * ldy + sb * gguf::QK_K + 32 * j);
      }
    }
  }
}
