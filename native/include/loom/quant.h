// Linear layers over block-quantized weights (GGUF Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K, Q8_K: every
// type of llama.cpp's Q4_K_M / Q5_K_M / Q6_K / Q8_0 files), kept in memory as the file's blocks (Q8_0, Q5_0, Q4_K,
// Q5_K and Q6_K re-laid by quant_pack, below, in the same bytes).
//
// W (N, K) is N rows of consecutive ggml blocks (e.g. Q8_0: 34 bytes per 32 values; Q4_K: 144 bytes per 256;
// layouts in native/formats/gguf_dequant.cc). y (M, N) = beta·y + x (M, K) · Wᵀ + bias, computed two ways:
//   M <= kQuantSmallM (decode, small batches): each row of x is quantized per 32 values to int8 with an
//     f32 scale (as llama.cpp's Q8_0 activations), and every (row of x, row of W) pair is an integer dot
//     product per block (vpmaddubsw / vpmaddwd on AVX2, vpdpbusd on AVX-512 VNNI) scaled and summed in f32.
//     W is read in groups of 4 rows (one activation load for 4 rows, 4 accumulators in registers; for M > 1
//     tiles of 8 rows unpacked once into L1, each pair of rows of x then passing with its accumulators in
//     registers; AVX-512 VNNI, the packed types and 6-8+ rows of x: 16 rows of x per 512-bit vector instead,
//     quant_avx512.cc; AVX2, packed Q8_0 and 16+ rows of x: 8 rows per vector as s16, quant_avx2.cc), so a step
//     reads the weights once whatever M.
//     The error against the dequantized f32 product is bounded by Σ_k |w_k|·d_b(k)/2, d_b the activation
//     scale of k's block.
//   larger M (prefill): on AVX2 and AVX-512, for the packed types (quant_prefill_int8), as above kQuantSmallM rows
//     of x at a time (each weight matrix then read M / 32 times, from the L3 after the first; VNNI through the
//     rows-in-lanes kernels); otherwise (portable, the file's layout) panels of W rows are dequantized to f32 and
//     multiplied with the f32 GEMM.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>
#include "loom/core.h"

namespace loom {

// Up to 32 rows (32 decode streams) the int8 path is at least as fast as the dequantized panels (SmolLM2-135M
// Q4_K_M, 1 thread: 8 streams 58 vs 95 ms of CPU per step, 32 streams 250 vs 256 ms), and it keeps the
// activation rounding of the single stream.
constexpr int64_t kQuantSmallM = 32;

// Whether t is a block type kept quantized (the Q* of DType).
bool quant_supported(DType t);
// "Q4_K" (ggml's spelling) → DType; false for a name that is not a kept type.
bool quant_type_parse(const std::string& name, DType* out);
// "Q4_0, Q4_1, ...": the kept types, for error messages.
std::string quant_type_names();
// Values per block (32, 256); 0 for other types.
int64_t quant_block_values(DType t);
// Bytes of one row of K values (K a multiple of the block size).
size_t quant_row_bytes(DType t, int64_t K);
// rows × K values from consecutive rows of blocks to f32, on the calling thread.
void quant_dequantize_rows(DType t, int64_t rows, int64_t K, const void* src, float* dst);
// y (M, N) = beta·y + x (M, K) · W (N, K)ᵀ (+ bias), W rows of blocks of type t.
// packed: W laid out by quant_pack (ignored for the types it does not re-lay).
void linear_quant(DType t, int64_t M, int64_t N, int64_t K, const float* x, int64_t ldx, const void* w,
                  const float* bias, float* y, int64_t ldy, float beta = 0.0f, bool packed = false);

// Load-time layout (weight_pack): Q8_0, Q5_0, Q4_K, Q5_K and Q6_K rows re-laid in groups of 4, each group one
// sequential run of blocks with the 4 rows' values interleaved as the small-M kernels read them and the 4 rows'
// scales first (the K-quants' 6-bit scales in planes one shift and mask decodes), in the file's own byte count
// (group n/4 at byte n·row_bytes; rows past the last full group stay as they are). The file's layout makes a group
// four streams a row apart and costs shuffles on every pass.
bool quant_packs(DType t);
// Whether a product over more than kQuantSmallM rows of x takes the int8 path in chunks of kQuantSmallM rows
// (packed W of Q8_0, Q5_0, Q4_K, Q5_K or Q6_K; AVX2, or AVX-512 with VNNI) instead of the dequantized panels
// (linear_quant has the measurement).
bool quant_prefill_int8(DType t, bool packed);
// N rows of K values at src (rows ldb bytes apart) → dst (N·quant_row_bytes): packed, or copied for other types.
void quant_pack(DType t, int64_t N, int64_t K, const void* src, size_t ldb, void* dst);
// Rows n0 .. n0 + n - 1 of a packed W (N rows) → f32 (n, K), on the calling thread.
void quant_dequantize_packed(DType t, int64_t N, int64_t K, const void* w, int64_t n0, int64_t n, float* dst);

// x (M, K) quantized once, int8 per 32 values (M <= kQuantSmallM, K a multiple of 32): the matrices that
// share an input (q/k/v, gate/up) take the same blocks instead of each quantizing x again.
struct QuantActs {
  int64_t M = 0, K = 0;
  std::vector<int8_t> q;     // (M, K)
  std::vector<float> d, ds;  // (M, K/32): scale, scale·Σq
  // AVX-512 VNNI and enough rows (else empty): the rows in 512-bit lanes for the packed kernels there, Mp = M
  // rounded up to 16: xt (K/4, Mp, 4) the values + 128 as u8 (against Q8_0's signed weights), xs the same as s8
  // (against the unsigned values of the other types), dt and st (K/32, Mp) d and ds, sq (K/16, Mp) Σq per 16 values
  std::vector<uint8_t> xt;
  std::vector<int8_t> xs;
  std::vector<float> dt, st;
  std::vector<int32_t> sq;
  // AVX2 and enough rows (else empty): the rows in 256-bit lanes for packed Q8_0, M8 = M rounded up to 8: xw
  // (K/2, M8, 2) each pair of values of each row as s16 (rows past M zero), dw (K/32, M8) d
  std::vector<int16_t> xw;
  std::vector<float> dw;
  // while rows are filled (quant_acts_begin / quant_acts_row): whether the lanes (AVX-512) or the s16 lanes (AVX2)
  // are built, and the rows of each group of 16 still to come
  bool lanes = false, wide = false;
  std::atomic<int32_t> left[kQuantSmallM / 16] = {};
};
void quant_acts(int64_t M, int64_t K, const float* x, int64_t ldx, QuantActs* a);
// The same filled row by row from several tasks, each its own rows (a decode step's row groups): quant_acts_begin
// sizes a for M rows of K; quant_acts_row quantizes row m from x_row, and the call that completes a vector of 16
// rows lays that vector out in the lanes. Each row once, on any thread, in any order; a is complete (and may be
// read) once every row is and the tasks have joined.
void quant_acts_begin(int64_t M, int64_t K, QuantActs* a);
void quant_acts_row(QuantActs* a, int64_t m, const float* x_row);
// The same for rows that row(m) makes (filling x + m·ldx) on the pool, each quantized as soon as it is made (and each
// vector of 16 rows laid out in the lanes once its last row is): the making and the quantization in one parallel
// region
void quant_acts_rows(int64_t M, int64_t K, const float* x, int64_t ldx, const std::function<void(int64_t)>& row,
                     QuantActs* a);
// y (a.M, N) = beta·y + x·Wᵀ (+ bias) from the quantized x, W (N, a.K) rows of blocks of type t.
void linear_quant_acts(DType t, int64_t N, const QuantActs& a, const void* w, const float* bias, float* y,
                       int64_t ldy, float beta = 0.0f, bool packed = false);
// The same for several matrices side by side in y (q / k / v, gate / up: part p's columns follow part p - 1's), in
// one parallel region.
struct QuantPart {
  DType t;
  int64_t N;
  const void* w;
  const float* bias;  // (N) or nullptr
  bool packed;
};
void linear_quant_acts_parts(const QuantActs& a, const QuantPart* parts, int n_parts, float* y, int64_t ldy,
                             float beta = 0.0f);

}  // namespace loom
