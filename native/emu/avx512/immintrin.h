// AVX-512 emulation shim (test builds only; see scripts/build-avx512-emu.mjs).
// Placed first on the include path of the *_avx512.cc sources, it makes their `#include <immintrin.h>`
// bring in the real header (native AVX2/FMA/F16C) plus SIMDe's portable AVX-512 implementations under the
// native names, so the AVX-512 code paths can be executed and tested on a CPU without AVX-512.
#pragma once
#include_next <immintrin.h>
#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>
#include <cstring>

// Intrinsics that SIMDe 0.7.4 lacks, in plain lane loops.
// _mm512_cvt<src>_epi32: 16 lanes of type `lane` of a `src_t` vector, each widened to int32
#define LOOM_EMU_WIDEN_EPI32(name, src_t, lane)                  \
  static inline simde__m512i loom_emu_##name(src_t a) {          \
    src_t##_private a_ = src_t##_to_private(a);                  \
    simde__m512i_private r_;                                     \
    for (int i = 0; i < 16; i++) r_.i32[i] = (int32_t)a_.lane[i]; \
    return simde__m512i_from_private(r_);                        \
  }
LOOM_EMU_WIDEN_EPI32(mm512_cvtepu16_epi32, simde__m256i, u16)
LOOM_EMU_WIDEN_EPI32(mm512_cvtepu8_epi32, simde__m128i, u8)
LOOM_EMU_WIDEN_EPI32(mm512_cvtepi8_epi32, simde__m128i, i8)
#undef LOOM_EMU_WIDEN_EPI32
#undef _mm512_cvtepu16_epi32
#define _mm512_cvtepu16_epi32(a) loom_emu_mm512_cvtepu16_epi32(a)
#undef _mm512_cvtepu8_epi32
#define _mm512_cvtepu8_epi32(a) loom_emu_mm512_cvtepu8_epi32(a)
#undef _mm512_cvtepi8_epi32
#define _mm512_cvtepi8_epi32(a) loom_emu_mm512_cvtepi8_epi32(a)

static inline simde__m512 loom_emu_mm512_cvtph_ps(simde__m256i a) {
  simde__m256i_private a_ = simde__m256i_to_private(a);
  simde__m512_private r_;
  __m256 lo = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)&a_.u16[0]));
  __m256 hi = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)&a_.u16[8]));
  _mm256_storeu_ps(&r_.f32[0], lo);
  _mm256_storeu_ps(&r_.f32[8], hi);
  return simde__m512_from_private(r_);
}
#undef _mm512_cvtph_ps
#define _mm512_cvtph_ps(a) loom_emu_mm512_cvtph_ps(a)

static inline simde__m512i loom_emu_mm512_cvtps_epi32(simde__m512 a) {
  simde__m512_private a_ = simde__m512_to_private(a);
  simde__m512i_private r_;
  _mm256_storeu_si256((__m256i*)&r_.i32[0], _mm256_cvtps_epi32(_mm256_loadu_ps(&a_.f32[0])));
  _mm256_storeu_si256((__m256i*)&r_.i32[8], _mm256_cvtps_epi32(_mm256_loadu_ps(&a_.f32[8])));
  return simde__m512i_from_private(r_);
}
#undef _mm512_cvtps_epi32
#define _mm512_cvtps_epi32(a) loom_emu_mm512_cvtps_epi32(a)

static inline float loom_emu_mm512_reduce_add_ps(simde__m512 a) {
  simde__m512_private a_ = simde__m512_to_private(a);
  float s = 0.0f;
  for (int i = 0; i < 16; i++) s += a_.f32[i];
  return s;
}
#undef _mm512_reduce_add_ps
#define _mm512_reduce_add_ps(a) loom_emu_mm512_reduce_add_ps(a)

// Masked loads and stores touch only the active lanes, as the hardware does (no fault on the others).
static inline simde__m512 loom_emu_mm512_maskz_loadu_ps(simde__mmask16 k, const void* p) {
  simde__m512_private r_;
  for (int i = 0; i < 16; i++) r_.f32[i] = ((k >> i) & 1) ? ((const float*)p)[i] : 0.0f;
  return simde__m512_from_private(r_);
}
#undef _mm512_maskz_loadu_ps
#define _mm512_maskz_loadu_ps(k, p) loom_emu_mm512_maskz_loadu_ps(k, p)

static inline simde__m512i loom_emu_mm512_maskz_loadu_epi32(simde__mmask16 k, const void* p) {
  simde__m512i_private r_;
  for (int i = 0; i < 16; i++) r_.i32[i] = ((k >> i) & 1) ? ((const int32_t*)p)[i] : 0;
  return simde__m512i_from_private(r_);
}
#undef _mm512_maskz_loadu_epi32
#define _mm512_maskz_loadu_epi32(k, p) loom_emu_mm512_maskz_loadu_epi32(k, p)

static inline simde__m512 loom_emu_mm512_mask_loadu_ps(simde__m512 src, simde__mmask16 k, const void* p) {
  simde__m512_private r_ = simde__m512_to_private(src);
  for (int i = 0; i < 16; i++) if ((k >> i) & 1) r_.f32[i] = ((const float*)p)[i];
  return simde__m512_from_private(r_);
}
#undef _mm512_mask_loadu_ps
#define _mm512_mask_loadu_ps(s, k, p) loom_emu_mm512_mask_loadu_ps(s, k, p)

static inline void loom_emu_mm512_mask_storeu_ps(void* p, simde__mmask16 k, simde__m512 a) {
  simde__m512_private a_ = simde__m512_to_private(a);
  for (int i = 0; i < 16; i++) if ((k >> i) & 1) ((float*)p)[i] = a_.f32[i];
}
#undef _mm512_mask_storeu_ps
#define _mm512_mask_storeu_ps(p, k, a) loom_emu_mm512_mask_storeu_ps(p, k, a)

static inline simde__m512 loom_emu_mm512_i32gather_ps(simde__m512i idx, const void* base, int scale) {
  simde__m512i_private i_ = simde__m512i_to_private(idx);
  simde__m512_private r_;
  for (int i = 0; i < 16; i++) r_.f32[i] = *(const float*)((const char*)base + (int64_t)i_.i32[i] * scale);
  return simde__m512_from_private(r_);
}
#undef _mm512_i32gather_ps
#define _mm512_i32gather_ps(i, b, s) loom_emu_mm512_i32gather_ps(i, b, s)

static inline simde__m512 loom_emu_mm512_cvtepi32_ps(simde__m512i a) {
  simde__m512i_private a_ = simde__m512i_to_private(a);
  simde__m512_private r_;
  for (int i = 0; i < 16; i++) r_.f32[i] = (float)a_.i32[i];
  return simde__m512_from_private(r_);
}
#undef _mm512_cvtepi32_ps
#define _mm512_cvtepi32_ps(a) loom_emu_mm512_cvtepi32_ps(a)

// masked gather: only the active lanes are read (an inactive lane's index may point past the buffer's end)
static inline simde__m512i loom_emu_mm512_mask_i32gather_epi32(simde__m512i src, simde__mmask16 k, simde__m512i idx,
                                                               const void* base, int scale) {
  simde__m512i_private i_ = simde__m512i_to_private(idx), r_ = simde__m512i_to_private(src);
  for (int i = 0; i < 16; i++)
    if ((k >> i) & 1) memcpy(&r_.i32[i], (const char*)base + (int64_t)i_.i32[i] * scale, 4);
  return simde__m512i_from_private(r_);
}
#undef _mm512_mask_i32gather_epi32
#define _mm512_mask_i32gather_epi32(s, k, i, b, sc) loom_emu_mm512_mask_i32gather_epi32(s, k, i, b, sc)

static inline simde__m256 loom_emu_mm512_extractf32x8_ps(simde__m512 a, int imm) {
  simde__m512_private a_ = simde__m512_to_private(a);
  simde__m256_private r_;
  for (int i = 0; i < 8; i++) r_.f32[i] = a_.f32[(imm & 1) * 8 + i];
  return simde__m256_from_private(r_);
}
#undef _mm512_extractf32x8_ps
#define _mm512_extractf32x8_ps(a, imm) loom_emu_mm512_extractf32x8_ps(a, imm)

// vcvtne2ps2bf16: lanes 0-15 from b, 16-31 from a; round to nearest even, NaN quieted, denormal inputs to zero
// (what the instruction does: it reads inputs as if DAZ were set).
static inline simde__m512bh loom_emu_mm512_cvtne2ps_pbh(simde__m512 a, simde__m512 b) {
  simde__m512_private a_ = simde__m512_to_private(a), b_ = simde__m512_to_private(b);
  simde__m512i_private r_;
  for (int i = 0; i < 32; i++) {
    const float f = i < 16 ? b_.f32[i] : a_.f32[i - 16];
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) r_.u16[i] = (uint16_t)((u >> 16) | 0x40u);  // NaN
    else if ((u & 0x7f800000u) == 0) r_.u16[i] = (uint16_t)((u >> 16) & 0x8000u);     // zero or denormal: ±0
    else r_.u16[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
  }
  simde__m512bh r;
  memcpy(&r, &r_, sizeof(r));
  return r;
}
#undef _mm512_cvtne2ps_pbh
#define _mm512_cvtne2ps_pbh(a, b) loom_emu_mm512_cvtne2ps_pbh(a, b)

static inline void loom_emu_mm512_mask_storeu_epi32(void* p, simde__mmask16 k, simde__m512i a) {
  simde__m512i_private a_ = simde__m512i_to_private(a);
  for (int i = 0; i < 16; i++) if ((k >> i) & 1) ((int32_t*)p)[i] = a_.i32[i];
}
#undef _mm512_mask_storeu_epi32
#define _mm512_mask_storeu_epi32(p, k, a) loom_emu_mm512_mask_storeu_epi32(p, k, a)

// SIMDe 0.7.4 has _mm512_madd_epi16 itself but aliases the native name with four arguments (src, k, a, b)
#undef _mm512_madd_epi16
#define _mm512_madd_epi16(a, b) simde_mm512_madd_epi16(a, b)

static inline simde__mmask64 loom_emu_mm512_testn_epi8_mask(simde__m512i a, simde__m512i b) {
  simde__m512i_private a_ = simde__m512i_to_private(a), b_ = simde__m512i_to_private(b);
  simde__mmask64 r = 0;
  for (int i = 0; i < 64; i++) r |= (simde__mmask64)((a_.i8[i] & b_.i8[i]) == 0) << i;
  return r;
}
#undef _mm512_testn_epi8_mask
#define _mm512_testn_epi8_mask(a, b) loom_emu_mm512_testn_epi8_mask(a, b)

// SIMDe 0.7.4 has simde_mm512_shuffle_f32x4 but not its native alias
#undef _mm512_shuffle_f32x4
#define _mm512_shuffle_f32x4(a, b, imm8) simde_mm512_shuffle_f32x4(a, b, imm8)

static inline simde__m256i loom_emu_mm512_cvtepi32_epi16(simde__m512i a) {  // truncating, as vpmovdw
  simde__m512i_private a_ = simde__m512i_to_private(a);
  simde__m256i_private r_;
  for (int i = 0; i < 16; i++) r_.i16[i] = (int16_t)a_.i32[i];
  return simde__m256i_from_private(r_);
}
#undef _mm512_cvtepi32_epi16
#define _mm512_cvtepi32_epi16(a) loom_emu_mm512_cvtepi32_epi16(a)
