// Private to the DeBERTa forward: the per-(sample, head) attention task handed to the ISA kernels
// (deberta_attn_impl.h, compiled in deberta.cc / deberta_attn_avx2.cc / deberta_attn_avx512.cc).
#pragma once
#include <cstring>
#include <cstddef>
#include <cstdint>
#include <vector>
#include "deberta.h"

namespace loom::deberta {

struct AttnTask {
  int64_t n = 0, d = 0;                  // tokens of the sample, head size
  const float *q = nullptr, *k = nullptr, *v = nullptr;  // rows of the QKV buffer, head slice applied
  int64_t ld = 0;                        // row stride of q, k, v
  const float *PQT = nullptr, *PKTr = nullptr;  // this head's (d, S2P) position projections (see Layer)
  int64_t S2P = 0, span2 = 0;            // row stride of PQT/PKTr, 2*span
  const int32_t* dtab = nullptr;         // δ(rel) (rel-embedding row) at dtab[rel + R − 1], |rel| < R
  int64_t R = 0;
  const uint8_t* mask = nullptr;         // (n) keys, 1 = attend; null = all
  // Label isolation (fresh GLiNER2 models, deberta.h group_positions): per-token group ids and positions, both or
  // neither. A query of group 0 attends to keys of group 0, one of group g >= 1 to keys of group 0 and g; relative
  // positions are pos[i] − pos[j] (0 <= pos < n) instead of i − j; 0 <= group < n. Null: every key, positions =
  // indices.
  const int32_t* group = nullptr;
  const int32_t* pos = nullptr;
  float scale = 1.0f;
  bool c2p = true, p2c = true;
  float* ctx = nullptr;                  // (n, d) output, row stride ldc
  int64_t ldc = 0;
  float* probs = nullptr;                // (n, n) normalized probabilities (training), or null
  // Attention dropout (training), or null: keep (n, n), 1 = kept; ctx then sums the kept probabilities times
  // keep_scale = 1 / (1 − p) (probs stay the undropped ones, which the softmax backward reads)
  const uint8_t* keep = nullptr;
  float keep_scale = 1.0f;
  float* scratch = nullptr;              // attn_scratch_floats(n, d) floats, 64-byte aligned
  int64_t delta(int64_t rel) const { return dtab[rel + R - 1]; }
};

// Scratch floats one task needs for n tokens and head size d (any ISA: sized for 16 lanes).
inline size_t attn_scratch_floats(int64_t n, int64_t d) {
  auto r16 = [](int64_t a) { return (a + 15) / 16 * 16; };
  const int64_t Np = r16(n), dp = r16(d), ncolp = r16(2 * n - 1);
  return size_t(r16(Np * d) + r16(d * Np) + r16(Np * dp) + 2 * r16(Np * Np) + 2 * r16(Np * ncolp) + 4 * r16(Np) +
                r16(Np + 16) + 2 * r16(2 * Np) + 64);
}

// The tables every task of a forward shares (deberta.cc's forward and the training graph's forward,
// native/train/encoder_train.cc):
// δ(rel) for |rel| < R into dtab, R = nmax rounded up to 16, + 16 (covers every padded tile of the kernels); returns R
int64_t delta_table(const Config& c, int64_t nmax, std::vector<int32_t>& dtab);
// Packing of a (B, N) batch (the forward here and the training graph, native/train/encoder_train.cc): sample b owns
// rows [off[b], off[b] + len[b]) of T = off[B] packed rows, positions 0..len[b)−1. A right-padded sample (mask 1…1
// 0…0) keeps its k real tokens; any other, every sample when `whole_rows`, and one with k < need[b] (need optional)
// keeps its N rows, with kmask[b] its mask row when some key is padding (else null).
struct BatchPack {
  std::vector<int64_t> len, off;
  std::vector<const uint8_t*> kmask;
  std::vector<int64_t> order;  // samples by len, longest first (attention tasks)
  int64_t T = 0, nmax = 0;
};
void batch_pack(int64_t B, int64_t N, const uint8_t* mask, bool whole_rows, const int64_t* need, BatchPack& p);
// dst (T, cols) = the packed rows of src (B, N, cols)
template <class E>
void pack_rows(const BatchPack& p, int64_t N, int64_t cols, const E* src, E* dst) {
  for (size_t b = 0; b < p.len.size(); b++)
    std::memcpy(dst + p.off[b] * cols, src + int64_t(b) * N * cols, size_t(p.len[b] * cols) * sizeof(E));
}
// PQ, PK (S2, D) -> per head (d, S2P) zero-padded: PQᵀ into PQT, PKᵀ with reversed columns into PKTr. Only the rows
// [r0, r1) of PQ and PK are read (r1 < 0: S2); the columns of the other rows are zero (the training graph projects only
// the rows its tasks read: rel_rows)
void rel_proj_layout(int64_t S2, int64_t D, int64_t H, int64_t S2P, const float* PQ, const float* PK,
                     std::vector<float>& PQT, std::vector<float>& PKTr, int64_t r0 = 0, int64_t r1 = -1);

// One task on the active ISA's kernel (the inference forward, and the training graph's forward with or without
// attention dropout: native/train/encoder_train.cc).
void attn_run(const AttnTask& t);

}  // namespace loom::deberta

namespace loom {
namespace portable { void deberta_attend(const deberta::AttnTask& t); }
namespace avx2 { void deberta_attend(const deberta::AttnTask& t); }
namespace avx512 { void deberta_attend(const deberta::AttnTask& t); }
}  // namespace loom
