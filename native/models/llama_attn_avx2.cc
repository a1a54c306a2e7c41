// Paged-attention inner kernel, avx2 build (see llama_attn_impl.h).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>
#include "llama.h"
#include "../ops/ops_table.h"

namespace loom::llama::avx2 {
#include "llama_attn_impl.h"
}  // namespace loom::llama::avx2
