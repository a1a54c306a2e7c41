// Quantizers to ggml block types, as llama.cpp's llama-quantize writes them without an importance matrix.
// Native ports of the hot ones in src/formats/gguf-quantize.ts (the reference: float32 arithmetic in llama.cpp's
// order; test/formats/gguf-quantize.test.ts checks the two bit for bit). Plain scalar float code in a file
// compiled without FMA flags, so no multiply-add is fused where the reference rounds twice.
#pragma once
#include <cstdint>

namespace loom::gguf {

// n values (a multiple of 256) → n/256 Q4_K blocks of 144 bytes at dst (quantize_row_q4_K_ref)
void quantize_q4_K(const float* x, uint8_t* dst, int64_t n);

}  // namespace loom::gguf
