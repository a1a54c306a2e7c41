// Dequantization of ggml's block-quantized tensor types (GGUF files from llama.cpp / Ollama) to float32.
//
// Block layouts are ggml's (ggml-common.h); the reference semantics are gguf-py's numpy dequantizers
// (llama.cpp's gguf/quants.py), which the tests match bit for bit (test/formats/gguf-quants.test.ts).
// Every block stores its values as small integers q plus one or more scales; a value is d·q (- m).
// The K-quants group 256 values (QK_K) in a super-block with an f16 scale d (and f16 dmin) and 16 or 8
// sub-blocks whose own scales / mins are small integers multiplied by d / dmin.
#pragma once
#include <cstdint>

namespace loom::gguf {

// ggml type ids (enum ggml_type; part of the GGUF format). Only the block types dequantized here.
enum GgmlBlockType : int {
  GGML_Q4_0 = 2, GGML_Q4_1 = 3, GGML_Q5_0 = 6, GGML_Q5_1 = 7, GGML_Q8_0 = 8,
  GGML_Q2_K = 10, GGML_Q3_K = 11, GGML_Q4_K = 12, GGML_Q5_K = 13, GGML_Q6_K = 14, GGML_Q8_K = 15,
};

constexpr int64_t QK_K = 256;

// Q4_K / Q5_K: 8 sub-blocks with a 6-bit scale and a 6-bit min each, packed in 12 bytes:
//   bytes 0-3: scale j (j < 4) in the low 6 bits, bits 4-5 of scale j+4 in the top 2
//   bytes 4-7: min j (j < 4) in the low 6 bits, bits 4-5 of min j+4 in the top 2
//   bytes 8-11: low 4 bits of scale j+4 (low nibble) and of min j+4 (high nibble)
inline void scale_min_k4(int j, const uint8_t* s, int* sc, int* mn) {
  if (j < 4) {
    *sc = s[j] & 63;
    *mn = s[j + 4] & 63;
  } else {
    *sc = (s[j + 4] & 0x0F) | ((s[j - 4] >> 6) << 4);
    *mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// One function per type: n values (a multiple of the type's block size) from consecutive blocks at src
// to float32 at dst. Plain single-threaded loops.
void dequant_q4_0(const uint8_t* src, float* dst, int64_t n);
void dequant_q4_1(const uint8_t* src, float* dst, int64_t n);
void dequant_q5_0(const uint8_t* src, float* dst, int64_t n);
void dequant_q5_1(const uint8_t* src, float* dst, int64_t n);
void dequant_q8_0(const uint8_t* src, float* dst, int64_t n);
void dequant_q2_k(const uint8_t* src, float* dst, int64_t n);
void dequant_q3_k(const uint8_t* src, float* dst, int64_t n);
void dequant_q4_k(const uint8_t* src, float* dst, int64_t n);
void dequant_q5_k(const uint8_t* src, float* dst, int64_t n);
void dequant_q6_k(const uint8_t* src, float* dst, int64_t n);
void dequant_q8_k(const uint8_t* src, float* dst, int64_t n);

// Values and bytes per block for a type dequantized here; false (outputs untouched) for any other type.
bool dequant_layout(int type, int64_t* block_values, int64_t* block_bytes);

// The type ids dequant_layout accepts, ascending; *count receives how many.
const int* dequant_types(int* count);

// Dequantizes n values of `type` (src holds n / block_values blocks), splitting the blocks across
// loom's thread pool. Throws std::invalid_argument for a type without a dequantizer or an n that is
// not a multiple of the block size.
void dequantize(int type, const uint8_t* src, float* dst, int64_t n);
// The same on the calling thread only (for callers already inside a parallel_for task).
void dequantize_serial(int type, const uint8_t* src, float* dst, int64_t n);

}  // namespace loom::gguf
