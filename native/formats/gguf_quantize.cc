// Q4_K quantizer (gguf_quantize.h): quantize_row_q4_K_ref with make_qkx2_quants, step for step as the
// TypeScript reference (src/formats/gguf-quantize.ts), which rounds every operation to float32.
#include "gguf_quantize.h"
#include "gguf_dequant.h"
#include <algorithm>
#include <cmath>
#include <cstring>
#include "loom/core.h"

namespace loom::gguf {

namespace {

// ggml's nearest_int: round half to even through the 1.5·2^23 trick (|v| < 2^22)
inline int nearest_int(float v) {
  const float val = v + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &val, 4);
  return (i & 0x007fffff) - 0x00400000;
}

inline int clamp_int(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

// make_qkx2_quants: levels L (0..nmax) and (scale, min) minimising Σ w·(scale·L + min - x)² over nstep + 1
// candidate inverse scales, each refined by weighted least squares. Returns the scale, *neg_min = -min.
float make_qkx2(int n, int nmax, const float* x, const float* w, uint8_t* L, uint8_t* aux, float rmin, float rdelta,
                int nstep, float* neg_min) {
  float min = x[0], max = x[0], sum_w = w[0], sum_x = sum_w * x[0];
  for (int i = 1; i < n; i++) {
    if (x[i] < min) min = x[i];
    if (x[i] > max) max = x[i];
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::memset(L, 0, size_t(n));
    *neg_min = -min;
    return 0.0f;
  }
  float iscale = float(nmax) / (max - min);
  float scale = 1.0f / iscale;
  float best_error = 0.0f;
  for (int i = 0; i < n; i++) {
    L[i] = uint8_t(clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax));
    float diff = scale * float(L[i]) + min - x[i];
    diff = diff * diff;
    best_error += w[i] * diff;
  }
  for (int is = 0; is <= nstep; is++) {
    iscale = (rmin + rdelta * float(is) + float(nmax)) / (max - min);
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    for (int i = 0; i < n; i++) {
      const int l = clamp_int(nearest_int(iscale * (x[i] - min)), 0, nmax);
      aux[i] = uint8_t(l);
      const float wl = w[i] * float(l);
      sum_l += wl;
      sum_l2 += wl * float(l);
      sum_xl += wl * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D > 0) {
      float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
      float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
      if (this_min > 0) {
        this_min = 0;
        this_scale = sum_xl / sum_l2;
      }
      float err = 0.0f;
      for (int i = 0; i < n; i++) {
        float diff = this_scale * float(aux[i]) + this_min - x[i];
        diff = diff * diff;
        err += w[i] * diff;
      }
      if (err < best_error) {
        std::memcpy(L, aux, size_t(n));
        best_error = err;
        scale = this_scale;
        min = this_min;
      }
    }
  }
  *neg_min = -min;
  return scale;
}

}  // namespace

void quantize_q4_K(const float* x, uint8_t* dst, int64_t n) {
  uint8_t L[QK_K], aux[32];
  float w[32], scales[8], mins[8];
  for (int64_t b = 0; b < n / QK_K; b++) {
    const float* xb = x + b * QK_K;
    uint8_t* o = dst + b * 144;
    float max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; j++) {
      const float* xs = xb + 32 * j;
      float sum_x2 = 0.0f;
      for (int l = 0; l < 32; l++) sum_x2 += xs[l] * xs[l];
      const float av_x = std::sqrt(sum_x2 / 32.0f);
      for (int l = 0; l < 32; l++) w[l] = av_x + std::fabs(xs[l]);
      scales[j] = make_qkx2(32, 15, xs, w, L + 32 * j, aux, -1.0f, 0.1f, 20, &mins[j]);
      if (scales[j] > max_scale) max_scale = scales[j];
      if (mins[j] > max_min) max_min = mins[j];
    }
    const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
    uint8_t* sc = o + 4;
    std::memset(sc, 0, 12);
    for (int j = 0; j < 8; j++) {
      const int ls = std::min(63, nearest_int(inv_scale * scales[j]) & 255);
      const int lm = std::min(63, nearest_int(inv_min * mins[j]) & 255);
      if (j < 4) {
        sc[j] = uint8_t(ls);
        sc[j + 4] = uint8_t(lm);
      } else {
        sc[j + 4] = uint8_t((ls & 0xF) | ((lm & 0xF) << 4));
        sc[j - 4] |= uint8_t((ls >> 4) << 6);
        sc[j] |= uint8_t((lm >> 4) << 6);
      }
    }
    const uint16_t dh = f32_to_f16(max_scale / 63.0f), mh = f32_to_f16(max_min / 63.0f);
    std::memcpy(o, &dh, 2);
    std::memcpy(o + 2, &mh, 2);
    const float d = f16_to_f32(dh), dmin = f16_to_f32(mh);
    for (int j = 0; j < 8; j++) {
      int s, m;
      scale_min_k4(j, sc, &s, &m);
      const float dj = d * float(s);
      if (dj == 0.0f) continue;
      const float dm = dmin * float(m);
      for (int l = 0; l < 32; l++) L[32 * j + l] = uint8_t(clamp_int(nearest_int((xb[32 * j + l] + dm) / dj), 0, 15));
    }
    for (int c = 0; c < 4; c++)
      for (int l = 0; l < 32; l++) o[16 + 32 * c + l] = uint8_t(L[64 * c + l] | (L[64 * c + 32 + l] << 4));
  }
}

}  // namespace loom::gguf
