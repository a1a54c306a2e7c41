// Quantized linear layers: the public entry points of loom/quant.h (run-time dispatch) and the portable
// reference kernels, one per weight type against the int8 activations. The SIMD kernels are written once
// in quant_impl.h and compiled for AVX2 (quant_avx2.cc) and AVX-512 VNNI (quant_avx512.cc).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>
#include "loom/gemm.h"
#include "loom/quant.h"
#include "quant_internal.h"
#include "../formats/gguf_dequant.h"
#if defined(__SSE2__)
#include <immintrin.h>  // _mm_stream_ps (x86-64's baseline)
#endif

namespace loom {

namespace portable {

static inline float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// x (K) → q (K), d (K/32), ds (K/32): per block d = amax/127, q = round(x/d) (nearest even).
void quant_act_q8(int64_t K, const float* x, int8_t* q, float* d, float* ds) {
  for (int64_t b = 0; b < K / kQ8Block; b++) {
    const float* xb = x + b * kQ8Block;
    float amax = 0.0f;
    for (int i = 0; i < kQ8Block; i++) amax = std::max(amax, std::fabs(xb[i]));
    const float db = amax / 127.0f, id = amax > 0.0f ? 127.0f / amax : 0.0f;
    int sum = 0;
    for (int i = 0; i < kQ8Block; i++) {
      const int v = int(std::nearbyint(xb[i] * id));
      q[b * kQ8Block + i] = int8_t(v);
      sum += v;
    }
    d[b] = db;
    ds[b] = db * float(sum);
  }
}

// Σ q_w·q_x over 32 values, q_w the nibbles of 16 bytes (values 0-15 low, 16-31 high) | 5th bits of qh
static inline int32_t dot_nibbles(const uint8_t* qs, uint32_t qh, const int8_t* x) {
  int32_t s = 0;
  for (int l = 0; l < 16; l++) {
    s += int32_t((qs[l] & 0x0F) | (((qh >> l) & 1) << 4)) * x[l];
    s += int32_t((qs[l] >> 4) | (((qh >> (l + 16)) & 1) << 4)) * x[l + 16];
  }
  return s;
}

// Q4_0: d·(q - 8)
float vec_dot_q4_0_q8(int64_t K, const uint8_t* w, const int8_t* q, const float* d, const float* ds) {
  float acc = 0.0f;
  for (int64_t b = 0; b < K / kQ8Block; b++, w += kQ4_0Bytes) {
    const float dw = load_f16(w);
    acc += dw * (d[b] * float(dot_nibbles(w + 2, 0, q + b * kQ8Block)) - 8.0f * ds[b]);
  }
  return acc;
}

// Q4_1: d·q + m
float vec_dot_q4_1_q8(int64_t K, const uint8_t* w, const int8_t* q, const float* d, const float* ds) {
  float acc = 0.0f;
  for (int64_t b = 0; b < K / kQ8Block; b++, w += kQ4_1Bytes)
    acc += load_f16(w) * d[b] * float(dot_nibbles(w + 4, 0, q + b * kQ8Block)) + load_f16(w + 2) * ds[b];
  return acc;
}

// Q5_0: d·(q - 16)
float vec_dot_q5_0_q8(int64_t K, const uint8_t* w, const int8_t* q, const float* d, const float* ds) {
  float acc = 0.0f;
  for (int64_t b = 0; b < K / kQ8Block; b++, w += kQ5_0Bytes) {
    uint32_t qh;
    std::memcpy(&qh, w + 2, 4);
    acc += load_f16(w) * (d[b] * float(dot_nibbles(w + 6, qh, q + b * kQ8Block)) - 16.0f * ds[b]);
  }
  return acc;
}

// Q5_1: d·q + m
float vec_dot_q5_1_q8(int64_t K, const uint8_t* w, const int8_t* q, const float* d, const float* ds) {
  float acc = 0.0f;
  for (int64_t b = 0; b < K / kQ8Block; b++, w += kQ5_1Bytes) {
    uint32_t qh;
    std::memcpy(&qh, w + 4, 4);
    acc += load_f16(w) * d[b] * float(dot_nibbles(w + 8, qh, q + b * kQ8Block)) + load_f16(w + 2) * ds[b];
  }
  return acc;
}

// Σ over Q8_0 blocks of d_w·d_x·Σ q_w·q_x
float vec_dot_q8_0_q8(int64_t K, const uint8_t* w, const int8_t* q, const float* d, const float*) {
  float acc = 0.0f;
  for (int64_t b = 0; b < K / kQ8Block; b++, w += kQ8_0Bytes) {
    const int8_t* qw = reinterpret_cast<const int8_t*>(w + 2);
    int32_t isum = 0;
    for (int i = 0; i < kQ8Block; i++) isum += int32_t(qw[i]) * int32_t(q[b * kQ8Block + i]);
    acc += load_f16(w) * d[b] * float(isum);
  }
  return acc;
}

// Q4_K / Q5_K super-block of 256: value of sub-block j = d·sc_j·q - dmin·m_j, so against activation block j
// the dot is d·sc_j·d_x·Σ q·q_x - dmin·m_j·(d_x·Σ q_x). Q5_K adds bit j of qh byte l as the 5th bit.
static float vec_dot_qk4(int64_t K, const uint8_t* w, int64_t bytes, bool five, const int8_t* q, const float* d,
                         const float* ds) {
  float acc = 0.0f;
  for (int64_t sb = 0; sb < K / gguf::QK_K; sb++, w += bytes) {
    const float dw = load_f16(w), dmin = load_f16(w + 2);
    const uint8_t* qh = w + 16;
    const uint8_t* qs = w + (five ? 48 : 16);
    for (int j = 0; j < 8; j++) {  // sub-block j: nibble j%2 of bytes 32·(j/2)..
      const int8_t* xj = q + (sb * 8 + j) * kQ8Block;
      int32_t s = 0;
      for (int l = 0; l < 32; l++) {
        int v = (qs[32 * (j / 2) + l] >> (4 * (j % 2))) & 0x0F;
        if (five) v |= ((qh[l] >> j) & 1) << 4;
        s += v * int32_t(xj[l]);
      }
      int sc, m;
      gguf::scale_min_k4(j, w + 4, &sc, &m);
      acc += dw * float(sc) * d[sb * 8 + j] * float(s) - dmin * float(m) * ds[sb * 8 + j];
    }
  }
  return acc;
}

float vec_dot_q4_K_q8(int64_t K, const uint8_t* w, const int8_t* q, const float* d, const float* ds) {
  return vec_dot_qk4(K, w, kQ4_KBytes, false, q, d, ds);
}

float vec_dot_q5_K_q8(int64_t K, const uint8_t* w, const int8_t* q, const float* d, const float* ds) {
  return vec_dot_qk4(K, w, kQ5_KBytes, true, q, d, ds);
}

// Q6_K: value i = d·scale[i/16]·(q - 32); see gguf_dequant.cc for where the 6 bits of value i live
float vec_dot_q6_K_q8(int64_t K, const uint8_t* w, const int8_t* q, const float* d, const float*) {
  float acc = 0.0f;
  for (int64_t sb = 0; sb < K / gguf::QK_K; sb++, w += kQ6_KBytes) {
    const int8_t* sc = reinterpret_cast<const int8_t*>(w + 192);
    const float dw = load_f16(w + 208);
    for (int g = 0; g < 16; g++) {  // 16 values sharing scale g
      int32_t s = 0;
      for (int l = 0; l < 16; l++) {
        const int i = 16 * g + l, h = i / 128, r = i % 128;
        const int lo = (w[64 * h + r % 64] >> (4 * (r / 64))) & 0x0F;
        const int hi = (w[128 + 32 * h + r % 32] >> (2 * (r / 32))) & 3;
        s += ((lo | hi << 4) - 32) * int32_t(q[sb * gguf::QK_K + i]);
      }
      acc += dw * float(sc[g]) * d[sb * 8 + g / 2] * float(s);
    }
  }
  return acc;
}

// Q8_K: f32 d·q
float vec_dot_q8_K_q8(int64_t K, const uint8_t* w, const int8_t* q, const float* d, const float*) {
  float acc = 0.0f;
  for (int64_t sb = 0; sb < K / gguf::QK_K; sb++, w += kQ8_KBytes) {
    float dw;
    std::memcpy(&dw, w, 4);
    const int8_t* qw = reinterpret_cast<const int8_t*>(w + 4);
    for (int s = 0; s < 8; s++) {
      int32_t isum = 0;
      for (int l = 0; l < 32; l++) isum += int32_t(qw[32 * s + l]) * int32_t(q[sb * gguf::QK_K + 32 * s + l]);
      acc += dw * d[sb * 8 + s] * float(isum);
    }
  }
  return acc;
}

// Four rows: four single-row products (the portable path stays the plain reference)
LOOM_DOT4_BY_ROWS(q4_0)
LOOM_DOT4_BY_ROWS(q4_1)
LOOM_DOT4_BY_ROWS(q5_0)
LOOM_DOT4_BY_ROWS(q5_1)
LOOM_DOT4_BY_ROWS(q8_0)
LOOM_DOT4_BY_ROWS(q4_K)
LOOM_DOT4_BY_ROWS(q5_K)
LOOM_DOT4_BY_ROWS(q6_K)
LOOM_DOT4_BY_ROWS(q8_K)

// Four rows × M rows of x: the four-row products per row of x
#define LOOM_GEMM4_BY_ROWS(T)                                                                                     \
  void gemm4_##T##_q8(int64_t K, const uint8_t* w, size_t rb, int64_t M, const int8_t* q, const float* d,         \
                      const float* ds, float* y, int64_t ldy) {                                                   \
    const int64_t nb = K / kQ8Block;                                                                              \
    for (int64_t m = 0; m < M; m++) vec_dot4_##T##_q8(K, w, rb, q + m * K, d + m * nb, ds + m * nb, y + m * ldy); \
  }
LOOM_GEMM4_BY_ROWS(q4_0)
LOOM_GEMM4_BY_ROWS(q5_0)
LOOM_GEMM4_BY_ROWS(q8_0)
LOOM_GEMM4_BY_ROWS(q4_K)
LOOM_GEMM4_BY_ROWS(q6_K)
#undef LOOM_GEMM4_BY_ROWS

// Eight rows × M rows of x: two four-row passes
#define LOOM_GEMM8_BY_GEMM4(T)                                                                                 \
  void gemm8_##T##_q8(int64_t K, const uint8_t* w, size_t rb, int64_t M, const int8_t* q, const float* d,      \
                      const float* ds, float* y, int64_t ldy) {                                                \
    gemm4_##T##_q8(K, w, rb, M, q, d, ds, y, ldy);                                                             \
    gemm4_##T##_q8(K, w + 4 * rb, rb, M, q, d, ds, y + 4, ldy);                                                \
  }
LOOM_GEMM8_BY_GEMM4(q4_0)
LOOM_GEMM8_BY_GEMM4(q5_0)
LOOM_GEMM8_BY_GEMM4(q4_K)
LOOM_GEMM8_BY_GEMM4(q6_K)
#undef LOOM_GEMM8_BY_GEMM4

}  // namespace portable

// ---- quant_pack's layouts (quant_internal.h): a group of 4 rows, plain ↔ packed, block by block ------------

namespace {

// Q4_Kx4's byte of 6-bit value e (e < 64: scales 4j + r, minimums 32 + 8·(j/2) + 2r + j%2): its low 4 bits are
// nibble e / 32 of byte 16 + e % 32, its high 2 bits bits 2·(e / 16) of byte 48 + e % 16
int q4kx4_scale_index(int j, int r, bool min) { return min ? 32 + 8 * (j / 2) + 2 * r + j % 2 : 4 * j + r; }

// the 4 rows' K-quant values of a super-block, v[r][32j + l] (Q4_K 0-15, Q5_K 0-31, Q6_K 0-63; hb the bits
// above the nibble: 0, 1, 2) → the interleaved nibbles and high-bit planes of quant_internal.h's layouts, sub-block j
// at out + (64 + 16·hb)·j
template <int hb>
void pack_values_k(const uint8_t (*v)[256], uint8_t* out) {
  for (int j = 0; j < 8; j++) {
    uint8_t* o = out + (64 + 16 * hb) * j;
    if (hb == 1) std::memset(o + 64, 0, 16);
    for (int r = 0; r < 4; r++)
      for (int i = 0; i < 8; i++) {  // byte 8r + i of each chunk c: value 8c + i of row r
        const int idx = 8 * r + i;
        const uint8_t* vr = v[r] + 32 * j + i;
        o[idx] = uint8_t((vr[0] & 0x0F) | (vr[8] & 0x0F) << 4);
        o[32 + idx] = uint8_t((vr[16] & 0x0F) | (vr[24] & 0x0F) << 4);
        const int h = vr[0] >> 4 | (vr[8] >> 4) << hb | (vr[16] >> 4) << 2 * hb | (vr[24] >> 4) << 3 * hb;
        if (hb == 2) o[64 + idx] = uint8_t(h);
        if (hb == 1) o[64 + idx % 16] |= uint8_t(h << (idx < 16 ? 0 : 4));
      }
  }
}

// the inverse: v[r][32j + l] from the packed values at in
void unpack_values_k(const uint8_t* in, int hb, uint8_t (*v)[256]) {
  for (int j = 0; j < 8; j++) {
    const uint8_t* o = in + (64 + 16 * hb) * j;
    const int mask = (1 << hb) - 1;
    for (int idx = 0; idx < 32; idx++) {
      uint8_t* vr = v[idx / 8] + 32 * j + idx % 8;
      const int h = hb == 2 ? o[64 + idx] : hb == 1 ? o[64 + idx % 16] >> (idx < 16 ? 0 : 4) : 0;
      vr[0] = uint8_t((o[idx] & 0x0F) | (h & mask) << 4);
      vr[8] = uint8_t((o[idx] >> 4) | ((h >> hb) & mask) << 4);
      vr[16] = uint8_t((o[32 + idx] & 0x0F) | ((h >> 2 * hb) & mask) << 4);
      vr[24] = uint8_t((o[32 + idx] >> 4) | ((h >> 3 * hb) & mask) << 4);
    }
  }
}

// block b of the 4 plain rows at src (rb bytes apart) → one packed block at out
void pack_block(DType t, const uint8_t* src, size_t rb, uint8_t* out) {
  if (t == DType::Q4_K || t == DType::Q5_K) {
    const bool five = t == DType::Q5_K;
    uint8_t v[4][256];
    std::memset(out + 16, 0, 48);
    for (int r = 0; r < 4; r++) {
      const uint8_t* w = src + r * rb;
      std::memcpy(out + 2 * r, w, 2);          // d
      std::memcpy(out + 8 + 2 * r, w + 2, 2);  // dmin
      for (int j = 0; j < 8; j++) {
        int sm[2];
        gguf::scale_min_k4(j, w + 4, &sm[0], &sm[1]);
        for (int k = 0; k < 2; k++) {
          const int e = q4kx4_scale_index(j, r, k == 1);
          out[16 + e % 32] |= uint8_t((sm[k] & 0x0F) << (4 * (e / 32)));
          out[48 + e % 16] |= uint8_t((sm[k] >> 4) << (2 * (e / 16)));
        }
      }
      // sub-blocks 2c and 2c + 1: the low and high nibbles of bytes 32c..; Q5_K: the 5th bit of value l of
      // sub-block j is bit j of byte 16 + l
      const uint8_t* qs = w + (five ? 48 : 16);
      for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++) {
          const int b = qs[32 * c + l], h = five ? w[16 + l] >> (2 * c) : 0;
          v[r][64 * c + l] = uint8_t((b & 0x0F) | (h & 1) << 4);
          v[r][64 * c + 32 + l] = uint8_t((b >> 4) | (h & 2) << 3);
        }
    }
    if (five) pack_values_k<1>(v, out + 64);
    else pack_values_k<0>(v, out + 64);
    return;
  }
  if (t == DType::Q6_K) {
    uint8_t v[4][256];
    for (int r = 0; r < 4; r++) {
      const uint8_t* w = src + r * rb;
      std::memcpy(out + 2 * r, w + 208, 2);  // d
      for (int k = 0; k < 16; k++) out[8 + 8 * (k / 2) + 4 * (k % 2) + r] = w[192 + k];  // scale k
      for (int h = 0; h < 2; h++)  // value 128h + 32s + l (gguf_dequant.cc): nibble s/2 of ql, bits 2s of qh
        for (int l = 0; l < 32; l++) {
          const uint8_t* ql = w + 64 * h;
          const int qh = w[128 + 32 * h + l];
          uint8_t* vh = v[r] + 128 * h;
          vh[l] = uint8_t((ql[l] & 0x0F) | (qh & 3) << 4);
          vh[32 + l] = uint8_t((ql[32 + l] & 0x0F) | ((qh >> 2) & 3) << 4);
          vh[64 + l] = uint8_t((ql[l] >> 4) | ((qh >> 4) & 3) << 4);
          vh[96 + l] = uint8_t((ql[32 + l] >> 4) | ((qh >> 6) & 3) << 4);
        }
    }
    pack_values_k<2>(v, out + 72);
    return;
  }
  if (t == DType::Q8_0) {
    for (int r = 0; r < 4; r++) {
      const uint8_t* w = src + r * rb;
      std::memcpy(out + 2 * r, w, 2);
      for (int c = 0; c < 4; c++) std::memcpy(out + 8 + 32 * c + 8 * r, w + 2 + 8 * c, 8);
    }
    return;
  }
  uint8_t v[4][32];  // Q5_0: the 4 rows' values (0-31)
  for (int r = 0; r < 4; r++) {
    const uint8_t* w = src + r * rb;
    std::memcpy(out + 2 * r, w, 2);
    uint32_t qh;
    std::memcpy(&qh, w + 2, 4);
    for (int j = 0; j < 16; j++) {
      v[r][j] = uint8_t((w[6 + j] & 0x0F) | ((qh >> j) & 1) << 4);
      v[r][j + 16] = uint8_t((w[6 + j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
    }
  }
  std::memset(out + 72, 0, 16);
  for (int idx = 0; idx < 32; idx++) {  // byte idx of each chunk c: value 8c + i of row r
    const int r = idx / 8, i = idx % 8;
    const uint8_t* vr = v[r];
    out[8 + idx] = uint8_t((vr[i] & 0x0F) | (vr[8 + i] & 0x0F) << 4);
    out[40 + idx] = uint8_t((vr[16 + i] & 0x0F) | (vr[24 + i] & 0x0F) << 4);
    const int h = (vr[i] >> 4) | (vr[8 + i] >> 4) << 1 | (vr[16 + i] >> 4) << 2 | (vr[24 + i] >> 4) << 3;
    out[72 + idx % 16] |= uint8_t(h << (idx < 16 ? 0 : 4));
  }
}

// one packed block at in → block b of the 4 plain rows at dst (rb bytes apart)
void unpack_block(DType t, const uint8_t* in, uint8_t* dst, size_t rb) {
  if (t == DType::Q4_K || t == DType::Q5_K) {
    const bool five = t == DType::Q5_K;
    uint8_t v[4][256];
    unpack_values_k(in + 64, five ? 1 : 0, v);
    for (int r = 0; r < 4; r++) {
      uint8_t* w = dst + r * rb;
      std::memcpy(w, in + 2 * r, 2);
      std::memcpy(w + 2, in + 8 + 2 * r, 2);
      int sm[2][8];  // scales, minimums (6 bits)
      for (int j = 0; j < 8; j++)
        for (int k = 0; k < 2; k++) {
          const int e = q4kx4_scale_index(j, r, k == 1);
          sm[k][j] = ((in[16 + e % 32] >> (4 * (e / 32))) & 0x0F) | ((in[48 + e % 16] >> (2 * (e / 16))) & 3) << 4;
        }
      uint8_t* s = w + 4;  // llama.cpp's 12-byte packing (the inverse of scale_min_k4)
      for (int j = 0; j < 4; j++) {
        s[j] = uint8_t(sm[0][j] | (sm[0][j + 4] >> 4) << 6);
        s[j + 4] = uint8_t(sm[1][j] | (sm[1][j + 4] >> 4) << 6);
        s[j + 8] = uint8_t((sm[0][j + 4] & 0x0F) | (sm[1][j + 4] & 0x0F) << 4);
      }
      uint8_t* qs = w + (five ? 48 : 16);
      for (int c = 0; c < 4; c++)
        for (int l = 0; l < 32; l++)
          qs[32 * c + l] = uint8_t((v[r][64 * c + l] & 0x0F) | (v[r][64 * c + 32 + l] & 0x0F) << 4);
      if (five)
        for (int l = 0; l < 32; l++) {
          int h = 0;
          for (int j = 0; j < 8; j++) h |= (v[r][32 * j + l] >> 4) << j;
          w[16 + l] = uint8_t(h);
        }
    }
    return;
  }
  if (t == DType::Q6_K) {
    uint8_t v[4][256];
    unpack_values_k(in + 72, 2, v);
    for (int r = 0; r < 4; r++) {
      uint8_t* w = dst + r * rb;
      std::memcpy(w + 208, in + 2 * r, 2);
      for (int k = 0; k < 16; k++) w[192 + k] = in[8 + 8 * (k / 2) + 4 * (k % 2) + r];
      for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++) {
          const uint8_t* vh = v[r] + 128 * h;
          w[64 * h + l] = uint8_t((vh[l] & 0x0F) | (vh[64 + l] & 0x0F) << 4);
          w[64 * h + 32 + l] = uint8_t((vh[32 + l] & 0x0F) | (vh[96 + l] & 0x0F) << 4);
          w[128 + 32 * h + l] =
              uint8_t(vh[l] >> 4 | (vh[32 + l] >> 4) << 2 | (vh[64 + l] >> 4) << 4 | (vh[96 + l] >> 4) << 6);
        }
    }
    return;
  }
  if (t == DType::Q8_0) {
    for (int r = 0; r < 4; r++) {
      uint8_t* w = dst + r * rb;
      std::memcpy(w, in + 2 * r, 2);
      for (int c = 0; c < 4; c++) std::memcpy(w + 2 + 8 * c, in + 8 + 32 * c + 8 * r, 8);
    }
    return;
  }
  uint8_t v[4][32];  // Q5_0: the 4 rows' values (0-31), from byte idx of each chunk c (value 8c + i of row r)
  for (int idx = 0; idx < 32; idx++) {
    const int r = idx / 8, i = idx % 8, n01 = in[8 + idx], n23 = in[40 + idx];
    const int h = in[72 + idx % 16] >> (idx < 16 ? 0 : 4);
    v[r][i] = uint8_t((n01 & 0x0F) | (h & 1) << 4);
    v[r][8 + i] = uint8_t((n01 >> 4) | (h & 2) << 3);
    v[r][16 + i] = uint8_t((n23 & 0x0F) | (h & 4) << 2);
    v[r][24 + i] = uint8_t((n23 >> 4) | (h & 8) << 1);
  }
  for (int r = 0; r < 4; r++) {
    uint8_t* w = dst + r * rb;
    std::memcpy(w, in + 2 * r, 2);
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
      w[6 + j] = uint8_t((v[r][j] & 0x0F) | (v[r][j + 16] & 0x0F) << 4);
      qh |= uint32_t(v[r][j] >> 4) << j | uint32_t(v[r][j + 16] >> 4) << (j + 16);
    }
    std::memcpy(w + 2, &qh, 4);
  }
}

// bytes of one packed block of a group (4 rows' blocks of 32 or 256 values), 0 for a type not re-laid
int64_t packed_block_bytes(DType t) {
  switch (t) {
    case DType::Q8_0: return kQ8_0x4Bytes;
    case DType::Q5_0: return kQ5_0x4Bytes;
    case DType::Q4_K: return kQ4_Kx4Bytes;
    case DType::Q5_K: return kQ5_Kx4Bytes;
    case DType::Q6_K: return kQ6_Kx4Bytes;
    default: return 0;
  }
}
int64_t packed_block_values(DType t) { return quant_block_values(t); }

// the group of 4 packed rows at w (K values each) → 4 plain rows at dst (rb bytes each)
void unpack_group(DType t, int64_t K, const uint8_t* w, uint8_t* dst) {
  const int64_t pb = packed_block_bytes(t), bytes = pb / 4, nb = K / packed_block_values(t);
  const size_t rb = size_t(nb * bytes);
  for (int64_t b = 0; b < nb; b++) unpack_block(t, w + b * pb, dst + b * bytes, rb);
}

}  // namespace

namespace portable {

// The packed kernels: each group unpacked to its 4 plain rows, then the plain kernels (the reference path)
template <DType T>
static void gemm_packed(int64_t K, const uint8_t* w, size_t rs, int G, int64_t M, const int8_t* q, const float* d,
                        const float* ds, float* y, int64_t ldy) {
  thread_local std::vector<uint8_t> rows;
  const size_t rb = quant_row_bytes(T, K);
  rows.resize(4 * rb);
  for (int g = 0; g < G; g++) {
    unpack_group(T, K, w + g * rs, rows.data());
    if (T == DType::Q8_0) gemm4_q8_0_q8(K, rows.data(), rb, M, q, d, ds, y + 4 * g, ldy);
    else if (T == DType::Q5_0) gemm4_q5_0_q8(K, rows.data(), rb, M, q, d, ds, y + 4 * g, ldy);
    else if (T == DType::Q4_K) gemm4_q4_K_q8(K, rows.data(), rb, M, q, d, ds, y + 4 * g, ldy);
    else if (T == DType::Q5_K)
      for (int64_t m = 0; m < M; m++)
        vec_dot4_q5_K_q8(K, rows.data(), rb, q + m * K, d + m * (K / kQ8Block), ds + m * (K / kQ8Block),
                         y + 4 * g + m * ldy);
    else gemm4_q6_K_q8(K, rows.data(), rb, M, q, d, ds, y + 4 * g, ldy);
  }
}
void gemm4_q8_0x4_q8(int64_t K, const uint8_t* w, size_t rs, int64_t M, const int8_t* q, const float* d,
                     const float* ds, float* y, int64_t ldy) {
  gemm_packed<DType::Q8_0>(K, w, rs, 1, M, q, d, ds, y, ldy);
}
void gemm4_q5_0x4_q8(int64_t K, const uint8_t* w, size_t rs, int64_t M, const int8_t* q, const float* d,
                     const float* ds, float* y, int64_t ldy) {
  gemm_packed<DType::Q5_0>(K, w, rs, 1, M, q, d, ds, y, ldy);
}
void gemm8_q5_0x4_q8(int64_t K, const uint8_t* w, size_t rs, int64_t M, const int8_t* q, const float* d,
                     const float* ds, float* y, int64_t ldy) {
  gemm_packed<DType::Q5_0>(K, w, rs, 2, M, q, d, ds, y, ldy);
}
#define LOOM_GEMM_PACKED_K(T, D)                                                                              \
  void gemm4_##T##x4_q8(int64_t K, const uint8_t* w, size_t rs, int64_t M, const int8_t* q, const float* d,   \
                        const float* ds, float* y, int64_t ldy) {                                             \
    gemm_packed<D>(K, w, rs, 1, M, q, d, ds, y, ldy);                                                         \
  }                                                                                                           \
  void gemm8_##T##x4_q8(int64_t K, const uint8_t* w, size_t rs, int64_t M, const int8_t* q, const float* d,   \
                        const float* ds, float* y, int64_t ldy) {                                             \
    gemm_packed<D>(K, w, rs, 2, M, q, d, ds, y, ldy);                                                         \
  }
LOOM_GEMM_PACKED_K(q4_K, DType::Q4_K)
LOOM_GEMM_PACKED_K(q5_K, DType::Q5_K)
LOOM_GEMM_PACKED_K(q6_K, DType::Q6_K)
#undef LOOM_GEMM_PACKED_K

template <DType T>
static void dequant_packed(int64_t K, const uint8_t* w, float* y, int64_t ldy) {
  thread_local std::vector<uint8_t> rows;
  const size_t rb = quant_row_bytes(T, K);
  rows.resize(4 * rb);
  unpack_group(T, K, w, rows.data());
  for (int r = 0; r < 4; r++) quant_dequantize_rows(T, 1, K, rows.data() + r * rb, y + r * ldy);
}
void dequant4_q8_0x4(int64_t K, const uint8_t* w, float* y, int64_t ldy) { dequant_packed<DType::Q8_0>(K, w, y, ldy); }
void dequant4_q5_0x4(int64_t K, const uint8_t* w, float* y, int64_t ldy) { dequant_packed<DType::Q5_0>(K, w, y, ldy); }
void dequant4_q4_Kx4(int64_t K, const uint8_t* w, float* y, int64_t ldy) { dequant_packed<DType::Q4_K>(K, w, y, ldy); }
void dequant4_q6_Kx4(int64_t K, const uint8_t* w, float* y, int64_t ldy) { dequant_packed<DType::Q6_K>(K, w, y, ldy); }
void dequant4_q5_Kx4(int64_t K, const uint8_t* w, float* y, int64_t ldy) { dequant_packed<DType::Q5_K>(K, w, y, ldy); }

}  // namespace portable

namespace {

// One row per kept type: ggml id (for the dequantizer), block values / bytes, and its kernel per ISA.
struct QuantType {
  DType dtype;
  const char* name;
  int ggml;
  int64_t values, bytes;
  QuantDotFn dot[3];    // portable, avx2, avx512 (Isa order)
  QuantDot4Fn dot4[3];  // the same, four rows per pass
  QuantGemm4Fn gemm4[3];  // four rows × M rows of x, blocks unpacked once (nullptr: dot4 per row of x)
  QuantGemm4Fn gemm8[3];  // eight rows × M rows of x (nullptr: gemm4 per four rows)
  QuantGemm4Fn packed4[3], packed8[3];  // the same over quant_pack's layout, any M (nullptr: not packed)
  QuantDequant4Fn dequant4[3];          // a packed group to f32 (prefill panels)
};

#define LOOM_QT(T, id, n, bytes, fn)                                                                 \
  {DType::T, #T, gguf::id, n, bytes, {portable::vec_dot_##fn, avx2::vec_dot_##fn, avx512::vec_dot_##fn}, \
   {portable::vec_dot4_##fn, avx2::vec_dot4_##fn, avx512::vec_dot4_##fn}, {}, {}, {}, {}, {}}
#define LOOM_QT_GEMM8(T, id, n, bytes, fn)                                                                         \
  {DType::T, #T, gguf::id, n, bytes, {portable::vec_dot_##fn, avx2::vec_dot_##fn, avx512::vec_dot_##fn},           \
   {portable::vec_dot4_##fn, avx2::vec_dot4_##fn, avx512::vec_dot4_##fn},                                        \
   {portable::gemm4_##fn, avx2::gemm4_##fn, avx512::gemm4_##fn},                                                 \
   {portable::gemm8_##fn, avx2::gemm8_##fn, avx512::gemm8_##fn}, {}, {}, {}}
#define LOOM_QUANT_ISAS(f) {portable::f, avx2::f, avx512::f}
// the K-quants quant_pack re-lays (super-blocks of 256): file-layout kernels and the packed ones
#define LOOM_QT_PACKED(T, id, bytes, t)                                                                           \
  {DType::T, #T, gguf::id, gguf::QK_K, bytes, LOOM_QUANT_ISAS(vec_dot_##t##_q8), LOOM_QUANT_ISAS(vec_dot4_##t##_q8), \
   LOOM_QUANT_ISAS(gemm4_##t##_q8), LOOM_QUANT_ISAS(gemm8_##t##_q8), LOOM_QUANT_ISAS(gemm4_##t##x4_q8),           \
   LOOM_QUANT_ISAS(gemm8_##t##x4_q8), LOOM_QUANT_ISAS(dequant4_##t##x4)}
const QuantType kTypes[] = {
    LOOM_QT_GEMM8(Q4_0, GGML_Q4_0, kQ8Block, kQ4_0Bytes, q4_0_q8),
    LOOM_QT(Q4_1, GGML_Q4_1, kQ8Block, kQ4_1Bytes, q4_1_q8),
    {DType::Q5_0, "Q5_0", gguf::GGML_Q5_0, kQ8Block, kQ5_0Bytes, LOOM_QUANT_ISAS(vec_dot_q5_0_q8),
     LOOM_QUANT_ISAS(vec_dot4_q5_0_q8), LOOM_QUANT_ISAS(gemm4_q5_0_q8), LOOM_QUANT_ISAS(gemm8_q5_0_q8),
     LOOM_QUANT_ISAS(gemm4_q5_0x4_q8), LOOM_QUANT_ISAS(gemm8_q5_0x4_q8), LOOM_QUANT_ISAS(dequant4_q5_0x4)},
    LOOM_QT(Q5_1, GGML_Q5_1, kQ8Block, kQ5_1Bytes, q5_1_q8),
    {DType::Q8_0, "Q8_0", gguf::GGML_Q8_0, kQ8Block, kQ8_0Bytes, LOOM_QUANT_ISAS(vec_dot_q8_0_q8),
     LOOM_QUANT_ISAS(vec_dot4_q8_0_q8), LOOM_QUANT_ISAS(gemm4_q8_0_q8), {}, LOOM_QUANT_ISAS(gemm4_q8_0x4_q8), {},
     LOOM_QUANT_ISAS(dequant4_q8_0x4)},
    LOOM_QT_PACKED(Q4_K, GGML_Q4_K, kQ4_KBytes, q4_K),
    {DType::Q5_K, "Q5_K", gguf::GGML_Q5_K, gguf::QK_K, kQ5_KBytes, LOOM_QUANT_ISAS(vec_dot_q5_K_q8),
     LOOM_QUANT_ISAS(vec_dot4_q5_K_q8), {}, {}, LOOM_QUANT_ISAS(gemm4_q5_Kx4_q8), LOOM_QUANT_ISAS(gemm8_q5_Kx4_q8),
     LOOM_QUANT_ISAS(dequant4_q5_Kx4)},
    LOOM_QT_PACKED(Q6_K, GGML_Q6_K, kQ6_KBytes, q6_K),
    LOOM_QT(Q8_K, GGML_Q8_K, gguf::QK_K, kQ8_KBytes, q8_K_q8),
};
#undef LOOM_QT
#undef LOOM_QT_GEMM8
#undef LOOM_QT_PACKED
#undef LOOM_QUANT_ISAS

const QuantType* find(DType t) {
  for (const QuantType& e : kTypes)
    if (e.dtype == t) return &e;
  return nullptr;
}

const QuantType& check(DType t, int64_t K) {
  const QuantType* e = find(t);
  if (!e) throw std::invalid_argument(std::string("quant: unsupported type ") + dtype_name(t));
  if (K <= 0 || K % e->values != 0)
    throw std::invalid_argument("quant: K = " + std::to_string(K) + " is not a positive multiple of the block size " +
                                std::to_string(e->values));
  return *e;
}

// The ISA whose int8 kernels run: the AVX-512 ones need VNNI (vpdpbusd), else AVX2's serve.
int quant_isa() {
  const Isa isa = isa_active();
  if (isa == Isa::Avx512) return cpu_features().avx512vnni ? 2 : 1;
  return isa == Isa::Avx2 ? 1 : 0;
}

}  // namespace

bool quant_supported(DType t) { return find(t) != nullptr; }

bool quant_type_parse(const std::string& name, DType* out) {
  for (const QuantType& e : kTypes)
    if (name == e.name) {
      *out = e.dtype;
      return true;
    }
  return false;
}

std::string quant_type_names() {
  std::string s;
  for (const QuantType& e : kTypes) s += std::string(s.empty() ? "" : ", ") + e.name;
  return s;
}

int64_t quant_block_values(DType t) {
  const QuantType* e = find(t);
  return e ? e->values : 0;
}

size_t quant_row_bytes(DType t, int64_t K) {
  const QuantType* e = find(t);
  if (!e) throw std::invalid_argument(std::string("quant: unsupported type ") + dtype_name(t));
  return size_t(K / e->values * e->bytes);
}

void quant_dequantize_rows(DType t, int64_t rows, int64_t K, const void* src, float* dst) {
  const QuantType& e = check(t, K);
  gguf::dequantize_serial(e.ggml, static_cast<const uint8_t*>(src), dst, rows * K);
}

bool quant_packs(DType t) { return packed_block_bytes(t) != 0; }

void quant_pack(DType t, int64_t N, int64_t K, const void* src, size_t ldb, void* dst) {
  check(t, K);
  const uint8_t* s = static_cast<const uint8_t*>(src);
  uint8_t* o = static_cast<uint8_t*>(dst);
  const size_t rb = quant_row_bytes(t, K);
  const int64_t pb = packed_block_bytes(t), N4 = pb ? N / 4 * 4 : 0;
  const int64_t nb = K / packed_block_values(t);
  parallel_for(N4 / 4, 64, [&](int64_t g0, int64_t g1) {  // group g at 4g·rb, its blocks in order
    for (int64_t n = 4 * g0; n < 4 * g1; n += 4)
      for (int64_t b = 0; b < nb; b++) pack_block(t, s + size_t(n) * ldb + b * (pb / 4), ldb, o + n * rb + b * pb);
  });
  for (int64_t n = N4; n < N; n++) std::memcpy(o + n * rb, s + size_t(n) * ldb, rb);  // the rest as they are
}

void quant_dequantize_packed(DType t, int64_t N, int64_t K, const void* w, int64_t n0, int64_t n, float* dst) {
  const QuantType& e = check(t, K);
  if (n0 < 0 || n < 0 || n0 + n > N) throw std::invalid_argument("quant_dequantize_packed: rows out of range");
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const size_t rb = quant_row_bytes(t, K);
  const int64_t N4 = quant_packs(t) ? N / 4 * 4 : 0;
  thread_local std::vector<uint8_t> rows;
  rows.resize(4 * rb);
  for (int64_t r = n0; r < n0 + n;) {
    if (r >= N4) {  // plain rows
      gguf::dequantize_serial(e.ggml, wb + size_t(r) * rb, dst + (r - n0) * K, (n0 + n - r) * K);
      return;
    }
    const int64_t g = r / 4 * 4, r1 = std::min(g + 4, n0 + n);  // rows r .. r1 - 1 of the group at g
    if (r == g && r1 == g + 4) {  // a whole group: the ISA's kernel
      e.dequant4[quant_isa()](K, wb + size_t(g) * rb, dst + (r - n0) * K, K);
      r = r1;
      continue;
    }
    unpack_group(t, K, wb + size_t(g) * rb, rows.data());
    gguf::dequantize_serial(e.ggml, rows.data() + (r - g) * rb, dst + (r - n0) * K, (r1 - r) * K);
    r = r1;
  }
}

// From how many rows of x the packed products of type t take the rows-in-lanes kernels (AVX-512 VNNI; 0: never):
// a 16-lane vector of rows half empty still beats 4 rows of W in the lanes from 6 rows for Q8_0, from 8 for the
// others (whose blocks are unpacked per tile first). 1 thread, GMAC per CPU-second, lanes / the other kernels:
// 9728 x 896 Q8_0 M = 4 79 / 94, 5 100 / 95, 6 119 / 97, 8 157 / 100, 16 298 / 104, 32 335 / 108; Q5_0 M = 6
// 100 / 115, 8 131 / 124, 16 249-253 / 138, 32 290-315 / 146; 896 x 4864 Q4_K M = 8 103-106 / 102-104, 16 202-205
// / 115-118, 32 254-259 / 123-125 (Q5_K the same), Q6_K 8 95 / 76-78, 16 182 / 90, 32 236 / 96-98.
constexpr int64_t kLanesMinM = 6;  // the least of lanes_min_m: quant_acts lays the lanes out from here
// From how many rows of x packed Q8_0 takes the s16 lanes on AVX2 (quant_acts lays them out from here). 1 thread,
// Zen 3, GMAC per CPU-second, two alternated runs of bench/quant-kernels.mts, the 4-row tiles (gemm4_q8_0x4_q8)
// against the lanes: M = 32: 4864 x 896 51.0-51.3 / 54.5-58.5, 896 x 4864 49.7-50.8 / 54.0-58.3, 1536 x 576 49.1-49.9
// / 53.1-56.8, 576 x 1536 49.5-49.7 / 54.1-57.9; M = 512 (prefill) 4864 x 896 50.1-50.4 / 53.9-56.2, 896 x 4864
// 49.4-50.2 / 53.8-58.0; M = 16 about 51.5 / 54. Below 16 rows a vector of 8 rows is too few for each broadcast
// weight pair: from 8 rows the lanes read 39-41 (M = 9: 31) where the tiles read 48-51.
constexpr int64_t kWideMinM = 16;
static int64_t lanes_min_m(DType t) {
  switch (t) {
    case DType::Q8_0: return kLanesMinM;
    case DType::Q5_0: case DType::Q4_K: case DType::Q5_K: case DType::Q6_K: return 8;
    default: return 0;
  }
}

void linear_quant(DType t, int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const void* w,
                  const float* bias, float* y, int64_t ldy, float beta, bool packed) {
  packed = packed && quant_packs(t);
  const QuantType& e = check(t, K);
  if (M <= 0 || N <= 0) return;
  const uint8_t* wb = static_cast<const uint8_t*>(w);
  const size_t rb = quant_row_bytes(t, K);
  thread_local QuantActs a;
  // prefill (quant_prefill_int8): kQuantSmallM rows of x at a time through the int8 kernels. On VNNI the lanes kernels
  // (335 GMAC per CPU-second and thread for Q8_0 against about 130 for the f32 GEMM; Qwen2.5-0.5B Q8_0, one 512-token
  // prompt, 2 threads, load about 6: 2,150 -> 892 ms CPU, the dequantized panels below -> this). On AVX2 decode's
  // 32-row tiles (bench/quant-kernels.mts --m 512 --layouts packed, 1 thread, Zen 3, two alternated runs: Q8_0 41 ->
  // 49, Q5_0 41 -> 61, Q4_K 41 -> 65, Q5_K 41 -> 64, Q6_K 41 -> 55 GMAC per CPU-second; 512-token prefill, 2 threads:
  // Qwen2.5-0.5B Q8_0 199 -> 231 tok/s, Q4_K_M 204 -> 279, SmolLM2-135M Q8_0 574 -> 697, Q4_K_M 589 -> 749), Q8_0
  // through the s16 lanes there (kWideMinM)
  if (M > kQuantSmallM && quant_prefill_int8(t, packed)) {
    for (int64_t m0 = 0; m0 < M; m0 += kQuantSmallM) {
      quant_acts(std::min(kQuantSmallM, M - m0), K, x + m0 * ldx, ldx, &a);
      linear_quant_acts(t, N, a, w, bias, y + m0 * ldy, ldy, beta, packed);
    }
    return;
  }
  if (M > kQuantSmallM) {
    // prefill: panels of 64 rows of W dequantized to f32, each multiplied by the f32 GEMM (the nested
    // GEMM runs on the calling pool thread)
    constexpr int64_t P = 64;
    parallel_for((N + P - 1) / P, 1, [&](int64_t p0, int64_t p1) {
      std::vector<float> panel(size_t(P * K));
      for (int64_t p = p0; p < p1; p++) {
        const int64_t n0 = p * P, n = std::min(P, N - n0);
        if (packed) quant_dequantize_packed(t, N, K, wb, n0, n, panel.data());
        else gguf::dequantize_serial(e.ggml, wb + size_t(n0) * rb, panel.data(), n * K);
        linear_f32(M, n, K, x, ldx, panel.data(), K, bias ? bias + n0 : nullptr, y + n0, ldy, beta);
      }
    });
    return;
  }
  // decode / small batches: int8 activations, integer dot products per block
  quant_acts(M, K, x, ldx, &a);
  linear_quant_acts(t, N, a, w, bias, y, ldy, beta, packed);
}

bool quant_prefill_int8(DType t, bool packed) {
  return packed && quant_packs(t) && quant_isa() >= 1 && lanes_min_m(t) > 0;
}

// the ISA's row quantizer
static QuantActFn quant_act_fn() {
  const int isa = quant_isa();
  return isa == 2 ? avx512::quant_act_q8 : isa == 1 ? avx2::quant_act_q8 : portable::quant_act_q8;
}

// a sized for M rows of K values (the lanes too where the kernels take them), no row yet
void quant_acts_begin(int64_t M, int64_t K, QuantActs* a) {
  if (M < 0 || M > kQuantSmallM || K <= 0 || K % kQ8Block != 0)
    throw std::invalid_argument("quant_acts: M = " + std::to_string(M) + ", K = " + std::to_string(K) +
                                " (M <= " + std::to_string(kQuantSmallM) + ", K a positive multiple of 32)");
  const int64_t nb = K / kQ8Block;
  a->M = M;
  a->K = K;
  a->q.resize(size_t(M * K));
  a->d.resize(size_t(M * nb));
  a->ds.resize(size_t(M * nb));
  a->xt.clear();
  a->xs.clear();
  a->dt.clear();
  a->st.clear();
  a->sq.clear();
  a->lanes = quant_isa() == 2 && M >= kLanesMinM;
  if (a->lanes) avx512::quant_acts_lanes_size(a);
  a->wide = quant_isa() == 1 && M >= kWideMinM;
  a->xw.clear();
  a->dw.clear();
  if (a->wide) avx2::quant_acts_wide_size(a);
  for (int64_t g = 0; g < (M + 15) / 16; g++) a->left[g].store(int32_t(std::min<int64_t>(16, M - 16 * g)));
}

void quant_acts_row(QuantActs* a, int64_t m, const float* x_row) {
  const int64_t K = a->K, nb = K / kQ8Block;
  quant_act_fn()(K, x_row, a->q.data() + m * K, a->d.data() + m * nb, a->ds.data() + m * nb);
  if ((a->lanes || a->wide) && a->left[m / 16].fetch_sub(1, std::memory_order_acq_rel) == 1) {
    if (a->lanes) avx512::quant_acts_lanes(a, m / 16 * 16);
    else avx2::quant_acts_wide(a, m / 16 * 16);
  }
}

void quant_acts(int64_t M, int64_t K, const float* x, int64_t ldx, QuantActs* a) {
  quant_acts_begin(M, K, a);
  for (int64_t m = 0; m < M; m++) quant_acts_row(a, m, x + m * ldx);
}

void quant_acts_rows(int64_t M, int64_t K, const float* x, int64_t ldx, const std::function<void(int64_t)>& row,
                     QuantActs* a) {
  quant_acts_begin(M, K, a);
  // rows in chunks over the pool; a vector of 16 rows goes into the lanes on the thread that quantizes its last row
  parallel_for(M, 2, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; m++) {
      row(m);
      quant_acts_row(a, m, x + m * ldx);
    }
  });
}

void linear_quant_acts(DType t, int64_t N, const QuantActs& a, const void* w, const float* bias, float* y,
                       int64_t ldy, float beta, bool packed) {
  const QuantPart part{t, N, w, bias, packed};
  linear_quant_acts_parts(a, &part, 1, y, ldy, beta);
}

// y[0 .. n) = v[0 .. n) by non-temporal stores (n a multiple of 4, y 16-byte aligned), and the fence that orders
// them before later stores
static inline void stream_floats(int64_t n, const float* v, float* y) {
#if defined(__SSE2__)
  for (int64_t c = 0; c < n; c += 4) _mm_stream_ps(y + c, _mm_loadu_ps(v + c));
#else
  std::memcpy(y, v, size_t(n) * sizeof(float));
#endif
}
static inline void stream_fence() {
#if defined(__SSE2__)
  _mm_sfence();
#endif
}

void linear_quant_acts_parts(const QuantActs& a, const QuantPart* parts, int n_parts, float* y, int64_t ldy,
                             float beta) {
  const int64_t M = a.M, K = a.K;
  if (M <= 0) return;
  const int isa = quant_isa();
  const int64_t nb = K / kQ8Block;
  const int8_t* qp = a.q.data();
  const float* dp = a.d.data();
  // per part: its kernels, where its columns of y start, its spans (below) and the index of its first span
  struct Plan {
    const QuantPart* part;
    const uint8_t* wb;
    size_t rb, rs;
    QuantDotFn dot;
    QuantDot4Fn dot4;
    QuantGemm4Fn gemm4, gemm8;
    bool lanes, wide;
    const float* dsp;
    int64_t col0;
  };
  struct Span {  // a task: columns c0 .. c1 - 1 of part p
    int p;
    int64_t c0, c1;
  };
  // The threads take spans of about N/8 per thread (whole chunks) from a shared counter rather than one fixed half
  // each: on cores shared with other processes a thread that loses its core for a while leaves its spans to the
  // others instead of holding up the step (a static split measured 16 % of the CPU time of a 32-stream decode in
  // the two threads' waits, load 2.7); spans that long keep each thread's stream sequential, and the packed
  // kernels' prefetch past a span's end wastes under 2 % of its bytes. The parts (q / k / v, gate / up) share one
  // parallel region. The region's last spans get shorter (guided): each at most 1 / (4·threads) of the columns left,
  // down to kMinSpan, so that the threads finish within a short span of each other; with spans of about N/16 or
  // kChunk the one that took the last span ran alone at each region's end (32-stream SmolLM2-135M Q4_K_M step, 2
  // threads: 14 % of the pool worker's samples spinning for its next job while the caller was still in a product).
  constexpr int64_t kChunk = 64;
  constexpr int64_t kMinSpan = 16;  // columns: whole groups of 4 (packed) and of 8 (gemm8) rows of W
  // from how many rows of x: a single stream's spans are short anyway, and cost more shortened (b = 1 step, 2
  // threads: 4.0-5.2 -> 4.6-6.4 ms CPU)
  constexpr int64_t kGuidedMinM = 8;
  const int64_t nth = threads_get();
  std::vector<Plan> plans;
  thread_local std::vector<Span> spans;
  spans.clear();
  int64_t col = 0, cols = 0;
  for (int p = 0; p < n_parts; p++) cols += parts[p].N;
  for (int p = 0; p < n_parts; p++) {
    const QuantPart& pt = parts[p];
    const QuantType& e = check(pt.t, K);
    Plan pl{};
    pl.part = &pt;
    pl.wb = static_cast<const uint8_t*>(pt.w);
    pl.rb = quant_row_bytes(pt.t, K);
    pl.dot = e.dot[isa];
    pl.dot4 = e.dot4[isa];
    // packed (quant_pack): the group of rows n .. n + 3 starts at n·rb as a plain row would, and the kernels take
    // the group stride where the plain ones take the row stride
    const bool packed = pt.packed && e.packed4[isa];
    pl.gemm4 = packed ? e.packed4[isa] : M > 1 ? e.gemm4[isa] : nullptr;
    pl.gemm8 = packed ? e.packed8[isa] : M > 1 ? e.gemm8[isa] : nullptr;
    pl.rs = packed ? 4 * pl.rb : pl.rb;
    // a packed type with a rows-in-lanes kernel, against enough rows of x on AVX-512 VNNI (quant_acts laid them out)
    pl.lanes = packed && isa == 2 && lanes_min_m(pt.t) && M >= lanes_min_m(pt.t) && !a.xt.empty();
    // packed Q8_0 against the s16 lanes on AVX2 (quant_acts laid them out)
    pl.wide = packed && isa == 1 && pt.t == DType::Q8_0 && !a.xw.empty();
    pl.dsp = a.ds.data();
    pl.col0 = col;
    const int64_t span = std::max(kChunk, (pt.N + 8 * nth - 1) / (8 * nth) + kChunk - 1) / kChunk * kChunk;
    for (int64_t c0 = 0; c0 < pt.N;) {
      const int64_t left = cols - col - c0;  // the region's columns from c0 on
      const int64_t guided = std::max(kMinSpan, (left / (4 * nth) + kMinSpan - 1) / kMinSpan * kMinSpan);
      const int64_t c1 = std::min(pt.N, c0 + (nth > 1 && M >= kGuidedMinM ? std::min(span, guided) : span));
      spans.push_back({p, c0, c1});
      c0 = c1;
    }
    col += pt.N;
    plans.push_back(pl);
  }
  // Q6_K's kernels but the lanes take d·Σq per 16 values of x (M, K/16) where the others take ds: the packed ones
  // take its offset of 32 from these once per super-block, against each 16 values' scale (the file-layout ones
  // ignore them). Only where a Q6_K part has columns outside the lanes kernels (32-stream SmolLM2-135M Q4_K_M step:
  // 49,152 sums a Q6_K down projection, serial, for nothing)
  thread_local std::vector<float> d16;
  bool have_d16 = false;
  for (Plan& pl : plans) {
    if (pl.part->t != DType::Q6_K || (pl.lanes && pl.part->N % 4 == 0)) continue;
    if (!have_d16) {
      have_d16 = true;
      d16.resize(size_t(M * K / 16));
      for (int64_t i = 0; i < M * K / 16; i++) {
        int32_t sum = 0;
        for (int l = 0; l < 16; l++) sum += qp[16 * i + l];
        d16[size_t(i)] = dp[i / 2] * float(sum);
      }
    }
    pl.dsp = d16.data();
  }
  // groups of 4 or 8 rows of W (each group's blocks stay in L1 while every row of x passes), split over threads; the
  // kernels write chunks of kChunk columns into a local (M, kChunk) tile, copied out a row of y at a time. Written
  // straight into y, each group stored 16 or 32 bytes into each of M rows of y ldy floats apart: with ldy a multiple
  // of 1024 (the logits of a 49,152-token vocabulary) those M lines share one L1 set and two L2 sets, and every
  // partial store missed (Q8_0 lm_head, M = 32, 1 thread: 41-52 ms where 6,144 rows took 2.5).
  // a y far larger than the L2 (the lm_head's logits, 32 x 49,152: 6.3 MB) written past the caches, without
  // reading its lines first
#if defined(__SSE2__)
  const bool stream = beta == 0.0f && n_parts == 1 && !parts[0].bias && M * ldy * 4 > (4 << 20);
#else
  const bool stream = false;
#endif
  const Span* span_list = spans.data();  // the caller's (spans is thread_local: each thread names its own)
  parallel_tasks(int64_t(spans.size()), [&](int64_t task) {
    const Span sp = span_list[task];
    bool streamed = false;
    const Plan& pl = plans[size_t(sp.p)];
    const QuantPart& part = *pl.part;
    const int64_t n1 = sp.c1;
    const uint8_t* wb = pl.wb;
    const size_t rb = pl.rb, rs = pl.rs;
    const float* dsp = pl.dsp;
    float* yp = y + pl.col0;
    alignas(64) float v[kQuantSmallM * kChunk];  // (M, kChunk): columns c0 .. c0 + kChunk - 1 of the part's y
    for (int64_t c0 = sp.c0; c0 < n1; c0 += kChunk) {
      const int64_t c1 = std::min(n1, c0 + kChunk);
      int64_t n = c0;
      if (pl.lanes && n + 4 <= c1) {
        avx512::gemm_lanes(part.t, a, wb + size_t(n) * rb, rs, (c1 - n) / 4, v, kChunk);
        n += (c1 - n) / 4 * 4;
      }
      for (; pl.wide && n + 4 <= c1; n += 4) avx2::gemm4_q8_0x4_wide(K, wb + size_t(n) * rb, a, v + (n - c0), kChunk);
      for (; pl.gemm8 && n + 8 <= c1; n += 8)
        pl.gemm8(K, wb + size_t(n) * rb, rs, M, qp, dp, dsp, v + (n - c0), kChunk);
      for (; n + 4 <= c1; n += 4) {
        const uint8_t* wr = wb + size_t(n) * rb;
        if (pl.gemm4) {
          pl.gemm4(K, wr, rs, M, qp, dp, dsp, v + (n - c0), kChunk);
          continue;
        }
        for (int64_t m = 0; m < M; m++)
          pl.dot4(K, wr, rb, qp + m * K, dp + m * nb, dsp + m * nb, v + m * kChunk + (n - c0));
      }
      for (; n < c1; n++)
        for (int64_t m = 0; m < M; m++)
          v[m * kChunk + (n - c0)] = pl.dot(K, wb + size_t(n) * rb, qp + m * K, dp + m * nb, dsp + m * nb);
      // y = v (+ bias) (+ beta·y), one branch-free loop per case (the compiler vectorizes them; one loop testing
      // both per value ran scalar: 3.6 % of a 32-stream SmolLM2-135M Q8_0 step, 1 thread, with its residual adds)
      const int64_t nc = c1 - c0;
      const float* bc = part.bias ? part.bias + c0 : nullptr;
      for (int64_t m = 0; m < M; m++) {
        const float* vm = v + m * kChunk;
        float* ym = yp + m * ldy + c0;
        if (stream && nc % 4 == 0 && (reinterpret_cast<uintptr_t>(ym) & 15) == 0) {
          stream_floats(nc, vm, ym);
          streamed = true;
        } else if (!bc && beta == 0.0f) std::memcpy(ym, vm, size_t(nc) * sizeof(float));
        else if (!bc) for (int64_t c = 0; c < nc; c++) ym[c] = vm[c] + beta * ym[c];
        else if (beta == 0.0f) for (int64_t c = 0; c < nc; c++) ym[c] = vm[c] + bc[c];
        else for (int64_t c = 0; c < nc; c++) ym[c] = (vm[c] + bc[c]) + beta * ym[c];
      }
    }
    if (streamed) stream_fence();  // the streaming stores before the region's end (the pool's release)
  });
}

}  // namespace loom
