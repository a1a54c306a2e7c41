// avx2 kernel table (SIMD variants land here; until then each entry is the lower path's).
#include "ops_table.h"

namespace loom::avx2 {

void attention_fwd(const AttnParams& p, const float* q, const float* k, const float* v, float* out, float* lse) {
  portable::attention_fwd(p, q, k, v, out, lse);
}
void attention_bwd(const AttnParams& p, const float* q, const float* k, const float* v, const float* out,
                   const float* lse, const float* dout, float* dq, float* dk, float* dv, float* dbias) {
  portable::attention_bwd(p, q, k, v, out, lse, dout, dq, dk, dv, dbias);
}

const OpsTable& ops_table() {
  static const OpsTable t = [] {
    OpsTable t = portable::ops_table();
    t.attention_fwd = attention_fwd;
    t.attention_bwd = attention_bwd;
    return t;
  }();
  return t;
}

}  // namespace loom::avx2
