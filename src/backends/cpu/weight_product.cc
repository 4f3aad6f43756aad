#include "backends/cpu/weight_product.h"

#include <algorithm>
#include <vector>

#include "base/check.h"

namespace ferrite::cpu {

void weight_product_rows(const float* x, int64_t ldx, int64_t tokens, int64_t in,
                         const TensorView& w, int64_t row0, int64_t o_begin, int64_t o_end,
                         float* y, int64_t ldy, bool accumulate, ThreadPool* pool) {
  const char* base = static_cast<const char*>(w.data) + dtype_bytes(w.dtype, row0 * in);
  if (!w.input_perm) {
    matmul_rows(x, ldx, tokens, in, base, w.dtype, o_begin, o_end, y, ldy, accumulate, pool);
    return;
  }
  FERRITE_CHECK(w.perm_rows > 0) << "an input permutation without its run length";
  // The gathered activations of one permutation run; per thread, because
  // MoE experts run their products on the pool's workers concurrently.
  thread_local std::vector<float> gathered;
  gathered.resize(static_cast<size_t>(tokens * in));
  for (int64_t o = o_begin; o < o_end;) {
    const int64_t run = (row0 + o) / w.perm_rows;
    const int64_t end = std::min(o_end, (run + 1) * w.perm_rows - row0);
    const int32_t* perm = w.input_perm + run * in;
    for (int64_t t = 0; t < tokens; ++t) {
      const float* xt = x + t * ldx;
      float* gt = gathered.data() + t * in;
      for (int64_t c = 0; c < in; ++c) gt[c] = xt[perm[c]];
    }
    matmul_rows(gathered.data(), in, tokens, in, base, w.dtype, o, end, y + (o - o_begin), ldy,
                accumulate, pool);
    o = end;
  }
}

TensorView weight_rows_view(const TensorView& w, int64_t offset, Shape shape) {
  TensorView v{static_cast<char*>(w.data) + dtype_bytes(w.dtype, offset), w.dtype, shape};
  if (w.input_perm) {
    const int64_t in = w.shape[w.shape.rank() - 1];
    const int64_t row = offset / in;
    FERRITE_CHECK(offset % in == 0 && row % w.perm_rows == 0)
        << "a view of an act-order weight starts inside a permutation run";
    v.input_perm = w.input_perm + (row / w.perm_rows) * in;
    v.perm_rows = w.perm_rows;
  }
  return v;
}

}  // namespace ferrite::cpu
