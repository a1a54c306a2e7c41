// Half-precision conversions, portable reference plus dispatch to the SIMD variants.
#include "loom/core.h"
#include "loom/dispatch.h"

namespace loom {

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ff;
  uint32_t u;
  if (exp == 0) {
    if (man == 0) {
      u = sign;
    } else {  // subnormal: normalize
      int e = -1;
      do { e++; man <<= 1; } while (!(man & 0x400));
      u = sign | uint32_t(127 - 15 - e) << 23 | (man & 0x3ff) << 13;
    }
  } else if (exp == 31) {
    u = sign | 0x7f800000u | (man << 13);
  } else {
    u = sign | (exp + 112) << 23 | man << 13;
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000;
  int32_t exp = int32_t((u >> 23) & 0xff) - 127 + 15;
  uint32_t man = u & 0x7fffff;
  if (((u >> 23) & 0xff) == 0xff) return uint16_t(sign | 0x7c00 | (man ? 0x200 : 0));
  if (exp >= 31) return uint16_t(sign | 0x7c00);
  if (exp <= 0) {
    if (exp < -10) return uint16_t(sign);
    man |= 0x800000;
    uint32_t shift = uint32_t(14 - exp);
    uint32_t half = 1u << (shift - 1);
    uint32_t r = man >> shift;
    uint32_t rem = man & ((1u << shift) - 1);
    if (rem > half || (rem == half && (r & 1))) r++;
    return uint16_t(sign | r);
  }
  uint32_t r = (uint32_t(exp) << 10) | (man >> 13);
  uint32_t rem = man & 0x1fff;
  if (rem > 0x1000 || (rem == 0x1000 && (r & 1))) r++;
  return uint16_t(sign | r);
}

namespace portable {
void convert_bf16_to_f32(int64_t n, const uint16_t* src, float* dst) {
  for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_f32(src[i]);
}
void convert_f32_to_bf16(int64_t n, const float* src, uint16_t* dst) {
  for (int64_t i = 0; i < n; i++) dst[i] = f32_to_bf16(src[i]);
}
void convert_f16_to_f32(int64_t n, const uint16_t* src, float* dst) {
  for (int64_t i = 0; i < n; i++) dst[i] = f16_to_f32(src[i]);
}
}  // namespace portable

void convert_bf16_to_f32(int64_t n, const uint16_t* src, float* dst) {
  LOOM_DISPATCH(convert_bf16_to_f32, n, src, dst);
}
void convert_f32_to_bf16(int64_t n, const float* src, uint16_t* dst) {
  LOOM_DISPATCH(convert_f32_to_bf16, n, src, dst);
}
void convert_f16_to_f32(int64_t n, const uint16_t* src, float* dst) {
  LOOM_DISPATCH(convert_f16_to_f32, n, src, dst);
}

}  // namespace loom
