// Dequantization of ggml block types to float32 (see gguf_dequant.h). Plain loops, one function per type,
// written from the block layouts; each value is computed with the same float32 operations, in the same
// order, as gguf-py's numpy reference (d·q, d·q + m, or (d·sc)·q - dmin·mn), so results are bit-exact.
// That needs a*b - c to stay two roundings: fused multiply-add contraction is turned off below (x86-64's
// portable build has no FMA anyway; an aarch64 or -march=native build would otherwise fuse).
#include "gguf_dequant.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "loom/core.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace loom::gguf {
namespace {

inline float load_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);  // GGUF is little-endian, as are the hosts Loom builds for
  return f16_to_f32(h);
}

// The sub-block factors of a Q4_K / Q5_K super-block (f16 d, f16 dmin, then the 12 packed bytes):
// d1[j] = d·scale_j, m1[j] = dmin·min_j.
inline void scales_k4(const uint8_t* blk, float d1[8], float m1[8]) {
  const float d = load_f16(blk), dmin = load_f16(blk + 2);
  for (int j = 0; j < 8; j++) {
    int sc, mn;
    scale_min_k4(j, blk + 4, &sc, &mn);
    d1[j] = d * float(sc);
    m1[j] = dmin * float(mn);
  }
}

// Q5_0 / Q5_1: 1 << j, so that "bit j of qh" is a lane-wise AND in the value loops (they vectorize).
constexpr uint32_t kBit[32] = {1u << 0, 1u << 1, 1u << 2, 1u << 3, 1u << 4, 1u << 5, 1u << 6, 1u << 7,
                               1u << 8, 1u << 9, 1u << 10, 1u << 11, 1u << 12, 1u << 13, 1u << 14, 1u << 15,
                               1u << 16, 1u << 17, 1u << 18, 1u << 19, 1u << 20, 1u << 21, 1u << 22, 1u << 23,
                               1u << 24, 1u << 25, 1u << 26, 1u << 27, 1u << 28, 1u << 29, 1u << 30, 1u << 31};

}  // namespace

// Q4_0, 18 bytes / 32 values: f16 d, 16 bytes of 4-bit q (value j in the low nibble of byte j, value
// j+16 in the high nibble). x = d·(q - 8).
void dequant_q4_0(const uint8_t* __restrict src, float* __restrict dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; b++, src += 18, dst += 32) {
    const float d = load_f16(src);
    const uint8_t* qs = src + 2;
    for (int j = 0; j < 16; j++) dst[j] = d * float(int(qs[j] & 0x0F) - 8);
    for (int j = 0; j < 16; j++) dst[j + 16] = d * float(int(qs[j] >> 4) - 8);
  }
}

// Q4_1, 20 bytes / 32 values: f16 d, f16 m, 16 bytes of 4-bit q as in Q4_0. x = d·q + m.
void dequant_q4_1(const uint8_t* __restrict src, float* __restrict dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; b++, src += 20, dst += 32) {
    const float d = load_f16(src), m = load_f16(src + 2);
    const uint8_t* qs = src + 4;
    for (int j = 0; j < 16; j++) dst[j] = d * float(qs[j] & 0x0F) + m;
    for (int j = 0; j < 16; j++) dst[j + 16] = d * float(qs[j] >> 4) + m;
  }
}

// Q5_0, 22 bytes / 32 values: f16 d, u32 qh (bit j = 5th bit of value j), 16 bytes of low nibbles as in
// Q4_0. x = d·(q - 16).
void dequant_q5_0(const uint8_t* __restrict src, float* __restrict dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; b++, src += 22, dst += 32) {
    const float d = load_f16(src);
    uint32_t qh;
    std::memcpy(&qh, src + 2, 4);
    const uint8_t* qs = src + 6;
    for (int j = 0; j < 16; j++) dst[j] = d * float(int((qs[j] & 0x0F) | ((qh & kBit[j]) ? 16 : 0)) - 16);
    for (int j = 0; j < 16; j++) dst[j + 16] = d * float(int((qs[j] >> 4) | ((qh & kBit[j + 16]) ? 16 : 0)) - 16);
  }
}

// Q5_1, 24 bytes / 32 values: f16 d, f16 m, u32 qh, 16 bytes of low nibbles. x = d·q + m.
void dequant_q5_1(const uint8_t* __restrict src, float* __restrict dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; b++, src += 24, dst += 32) {
    const float d = load_f16(src), m = load_f16(src + 2);
    uint32_t qh;
    std::memcpy(&qh, src + 4, 4);
    const uint8_t* qs = src + 8;
    for (int j = 0; j < 16; j++) dst[j] = d * float((qs[j] & 0x0F) | ((qh & kBit[j]) ? 16 : 0)) + m;
    for (int j = 0; j < 16; j++) dst[j + 16] = d * float((qs[j] >> 4) | ((qh & kBit[j + 16]) ? 16 : 0)) + m;
  }
}

// Q8_0, 34 bytes / 32 values: f16 d, 32 int8 q. x = d·q.
void dequant_q8_0(const uint8_t* __restrict src, float* __restrict dst, int64_t n) {
  for (int64_t b = 0; b < n / 32; b++, src += 34, dst += 32) {
    const float d = load_f16(src);
    const int8_t* qs = reinterpret_cast<const int8_t*>(src + 2);
    for (int j = 0; j < 32; j++) dst[j] = float(qs[j]) * d;
  }
}

// Q2_K, 84 bytes / 256 values: 16 bytes of sub-block scales (low nibble: scale, high nibble: min; one per
// 16 values), 64 bytes of 2-bit q, f16 d, f16 dmin. Each half of the block (128 values) reads 32 bytes
// of q four times, shifting by 0, 2, 4, 6: value 128h + 32s + l is bits 2s..2s+1 of q byte 32h + l.
// x = (d·scale)·q - dmin·min.
void dequant_q2_k(const uint8_t* __restrict src, float* __restrict dst, int64_t n) {
  for (int64_t b = 0; b < n / QK_K; b++, src += 84, dst += QK_K) {
    const uint8_t* scales = src;
    const float d = load_f16(src + 80), dmin = load_f16(src + 82);
    for (int h = 0; h < 2; h++)
      for (int s = 0; s < 4; s++)
        for (int k = 0; k < 2; k++) {  // 16 values sharing sub-block scale sb
          const int sb = 8 * h + 2 * s + k;
          const float dl = d * float(scales[sb] & 0x0F), ml = dmin * float(scales[sb] >> 4);
          const uint8_t* q = src + 16 + 32 * h + 16 * k;
          float* y = dst + 128 * h + 32 * s + 16 * k;
          for (int l = 0; l < 16; l++) y[l] = dl * float((q[l] >> (2 * s)) & 3) - ml;
        }
  }
}

// Q3_K, 110 bytes / 256 values: 32 bytes hmask (bit b of byte l: high bit of value 32b + l), 64 bytes of
// 2-bit low bits (arranged as in Q2_K), 12 bytes of 6-bit signed sub-block scales (one per 16 values),
// f16 d. Scale j: low 4 bits from byte j (j < 8, low nibble) or byte j-8 (high nibble), bits 4-5 from
// byte 8 + j%4 at bit 2·(j/4); stored with +32. A value is its 2 low bits minus 4 when its hmask bit
// is clear. x = (d·scale)·q.
void dequant_q3_k(const uint8_t* __restrict src, float* __restrict dst, int64_t n) {
  for (int64_t b = 0; b < n / QK_K; b++, src += 110, dst += QK_K) {
    const uint8_t* hmask = src;
    const uint8_t* sc = src + 96;
    const float d = load_f16(src + 108);
    for (int h = 0; h < 2; h++)
      for (int s = 0; s < 4; s++)
        for (int k = 0; k < 2; k++) {  // 16 values sharing sub-block scale sb; their hmask bit is 4h + s
          const int sb = 8 * h + 2 * s + k;
          const int lo = sb < 8 ? (sc[sb] & 0x0F) : (sc[sb - 8] >> 4);
          const int hi = (sc[8 + sb % 4] >> (2 * (sb / 4))) & 3;
          const float dl = d * float((lo | hi << 4) - 32);
          const uint8_t* q = src + 32 + 32 * h + 16 * k;
          const uint8_t* hm = hmask + 16 * k;
          const int bit = 4 * h + s;
          float* y = dst + 128 * h + 32 * s + 16 * k;
          for (int l = 0; l < 16; l++) y[l] = dl * float(((q[l] >> (2 * s)) & 3) - 4 + (((hm[l] >> bit) & 1) << 2));
        }
  }
}

// Q4_K, 144 bytes / 256 values: f16 d, f16 dmin, 12 bytes of 6-bit scales/mins (scale_min_k4), 128 bytes
// of 4-bit q: sub-block j (32 values) is the low (j even) or high (j odd) nibbles of bytes 32·(j/2)...
// x = (d·scale_j)·q - dmin·min_j.
void dequant_q4_k(const uint8_t* __restrict src, float* __restrict dst, int64_t n) {
  for (int64_t b = 0; b < n / QK_K; b++, src += 144, dst += QK_K) {
    float d1[8], m1[8];
    scales_k4(src, d1, m1);
    for (int c = 0; c < 4; c++) {  // 32 bytes of q: sub-block 2c in the low nibbles, 2c+1 in the high ones
      const uint8_t* q = src + 16 + 32 * c;
      float* y = dst + 64 * c;
      for (int l = 0; l < 32; l++) y[l] = d1[2 * c] * float(q[l] & 0x0F) - m1[2 * c];
      for (int l = 0; l < 32; l++) y[l + 32] = d1[2 * c + 1] * float(q[l] >> 4) - m1[2 * c + 1];
    }
  }
}

// Q5_K, 176 bytes / 256 values: f16 d, f16 dmin, 12 bytes scales/mins as Q4_K, 32 bytes qh (bit j of
// byte l: 5th bit of value 32j + l), 128 bytes of low nibbles as Q4_K. x = (d·scale_j)·q - dmin·min_j.
void dequant_q5_k(const uint8_t* __restrict src, float* __restrict dst, int64_t n) {
  for (int64_t b = 0; b < n / QK_K; b++, src += 176, dst += QK_K) {
    const uint8_t* qh = src + 16;
    float d1[8], m1[8];
    scales_k4(src, d1, m1);
    for (int c = 0; c < 4; c++) {  // as Q4_K; sub-block j's 5th bits are bit j of the qh bytes
      const uint8_t* q = src + 48 + 32 * c;
      float* y = dst + 64 * c;
      const int j0 = 2 * c, j1 = 2 * c + 1;
      for (int l = 0; l < 32; l++) y[l] = d1[j0] * float((q[l] & 0x0F) | ((qh[l] >> j0) & 1) << 4) - m1[j0];
      for (int l = 0; l < 32; l++) y[l + 32] = d1[j1] * float((q[l] >> 4) | ((qh[l] >> j1) & 1) << 4) - m1[j1];
    }
  }
}

// Q6_K, 210 bytes / 256 values: 128 bytes ql (low 4 bits), 64 bytes qh (high 2 bits), 16 int8 sub-block
// scales (one per 16 values), f16 d. In each half h (128 values), value 128h + r takes nibble r/64 of
// ql byte 64h + r%64 and bits 2·(r/32)..+1 of qh byte 32h + r%32; q is stored with +32.
// x = (d·scale)·(q - 32).
void dequant_q6_k(const uint8_t* __restrict src, float* __restrict dst, int64_t n) {
  for (int64_t b = 0; b < n / QK_K; b++, src += 210, dst += QK_K) {
    const int8_t* scales = reinterpret_cast<const int8_t*>(src + 192);
    const float d = load_f16(src + 208);
    for (int h = 0; h < 2; h++)
      for (int k = 0; k < 2; k++) {  // r = 16k + l for l < 16: values r, r+32, r+64, r+96 of half h
        const uint8_t* ql = src + 64 * h + 16 * k;
        const uint8_t* qh = src + 128 + 32 * h + 16 * k;
        float* y = dst + 128 * h + 16 * k;
        const int sb = 8 * h + k;
        const float d0 = d * float(scales[sb]), d1 = d * float(scales[sb + 2]);
        const float d2 = d * float(scales[sb + 4]), d3 = d * float(scales[sb + 6]);
        for (int l = 0; l < 16; l++) {
          y[l] = d0 * float(((ql[l] & 0x0F) | (qh[l] & 3) << 4) - 32);
          y[l + 32] = d1 * float(((ql[l + 32] & 0x0F) | ((qh[l] >> 2) & 3) << 4) - 32);
          y[l + 64] = d2 * float(((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32);
          y[l + 96] = d3 * float(((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32);
        }
      }
  }
}

// Q8_K, 292 bytes / 256 values: f32 d, 256 int8 q, 16 int16 sums of q per 16 values (for dot products;
// not needed here). x = d·q. (llama.cpp uses it for activations, but it is a valid tensor type.)
void dequant_q8_k(const uint8_t* __restrict src, float* __restrict dst, int64_t n) {
  for (int64_t b = 0; b < n / QK_K; b++, src += 292, dst += QK_K) {
    float d;
    std::memcpy(&d, src, 4);
    const int8_t* qs = reinterpret_cast<const int8_t*>(src + 4);
    for (int j = 0; j < QK_K; j++) dst[j] = d * float(qs[j]);
  }
}

namespace {
struct TypeEntry {
  int type;
  int64_t values, bytes;
  void (*fn)(const uint8_t*, float*, int64_t);
};
constexpr TypeEntry kTypes[] = {
    {GGML_Q4_0, 32, 18, dequant_q4_0},    {GGML_Q4_1, 32, 20, dequant_q4_1},    {GGML_Q5_0, 32, 22, dequant_q5_0},
    {GGML_Q5_1, 32, 24, dequant_q5_1},    {GGML_Q8_0, 32, 34, dequant_q8_0},    {GGML_Q2_K, QK_K, 84, dequant_q2_k},
    {GGML_Q3_K, QK_K, 110, dequant_q3_k}, {GGML_Q4_K, QK_K, 144, dequant_q4_k}, {GGML_Q5_K, QK_K, 176, dequant_q5_k},
    {GGML_Q6_K, QK_K, 210, dequant_q6_k}, {GGML_Q8_K, QK_K, 292, dequant_q8_k},
};
constexpr int kTypeIds[] = {GGML_Q4_0, GGML_Q4_1, GGML_Q5_0, GGML_Q5_1, GGML_Q8_0, GGML_Q2_K,
                            GGML_Q3_K, GGML_Q4_K, GGML_Q5_K, GGML_Q6_K, GGML_Q8_K};

const TypeEntry* find(int type) {
  for (const TypeEntry& e : kTypes)
    if (e.type == type) return &e;
  return nullptr;
}
}  // namespace

bool dequant_layout(int type, int64_t* block_values, int64_t* block_bytes) {
  const TypeEntry* e = find(type);
  if (!e) return false;
  if (block_values) *block_values = e->values;
  if (block_bytes) *block_bytes = e->bytes;
  return true;
}

const int* dequant_types(int* count) {
  *count = int(sizeof(kTypeIds) / sizeof(kTypeIds[0]));
  return kTypeIds;
}

static const TypeEntry& checked(int type, int64_t n) {
  const TypeEntry* e = find(type);
  if (!e) throw std::invalid_argument("ggml type " + std::to_string(type) + " has no dequantizer");
  if (n < 0 || n % e->values != 0)
    throw std::invalid_argument(std::to_string(n) + " values is not a multiple of the block size " + std::to_string(e->values));
  return *e;
}

void dequantize_serial(int type, const uint8_t* src, float* dst, int64_t n) { checked(type, n).fn(src, dst, n); }

void dequantize(int type, const uint8_t* src, float* dst, int64_t n) {
  const TypeEntry* e = &checked(type, n);
  // Chunks of at least 64 Ki values: enough work per task that the pool's wake-up cost is noise.
  const int64_t blocks = n / e->values, grain = (65536 + e->values - 1) / e->values;
  parallel_for(blocks, grain, [&](int64_t b0, int64_t b1) {
    e->fn(src + b0 * e->bytes, dst + b0 * e->values, (b1 - b0) * e->values);
  });
}

}  // namespace loom::gguf
