// attention_tile (kernels/attention.h) is, bit for bit, the per-(token,
// head) loop of dot_row / max_f32 / exp_sub_sum_inplace / axpy_row, for any
// tile shape, span and page layout.
#include "backends/cpu/kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <vector>

#include "backends/cpu/kernels/vec.h"
#include "test_util.h"

namespace ferrite::cpu {
namespace {

using testing::make_weight;
using testing::random_f32;
using testing::same_bits;

// The loop attention_tile replaces (the CPU provider's per-item path).
std::vector<float> per_query(const float* q, int64_t last, const PagedRows& k, const PagedRows& v,
                             DType dt, int64_t hd, float scale) {
  std::vector<float> s(static_cast<size_t>(last + 1)), acc(static_cast<size_t>(hd), 0.0f);
  for (int64_t p = 0; p <= last; ++p) s[p] = scale * dot_row(q, k.row(p), dt, hd);
  const float m = max_f32(s.data(), last + 1);
  const float sum = exp_sub_sum_inplace(s.data(), last + 1, m);
  for (int64_t p = 0; p <= last; ++p) axpy_row(s[p], v.row(p), dt, acc.data(), hd);
  const float inv = 1.0f / sum;
  for (auto& a : acc) a *= inv;
  return acc;
}

TEST(AttentionTile, IsThePerQueryLoopBitwise) {
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (int64_t hd : {16, 80, 128}) {
      const int64_t nkv = 2, page = 16, ctx = 70, pages = (ctx + page - 1) / page;
      const int64_t row_elems = nkv * hd;
      const int64_t row_bytes = dtype_bytes(dt, row_elems);
      // Pages in a scrambled order.
      std::vector<int32_t> table(static_cast<size_t>(pages));
      for (int64_t i = 0; i < pages; ++i) table[i] = static_cast<int32_t>((i * 3 + 1) % pages);
      auto kw = make_weight(dt, pages * page * row_elems, 5);
      auto vw = make_weight(dt, pages * page * row_elems, 6);
      const float scale = 0.125f;
      for (int64_t kvh : {0, 1}) {
        const PagedRows k{reinterpret_cast<const char*>(kw.bytes.data()), table.data(), page,
                          row_bytes, dtype_bytes(dt, kvh * hd)};
        const PagedRows v{reinterpret_cast<const char*>(vw.bytes.data()), table.data(), page,
                          row_bytes, dtype_bytes(dt, kvh * hd)};
        for (int nq = 1; nq <= kAttentionTileQueries; ++nq) {
          // Spans: equal, consecutive, far apart, crossing page ends, a lone position.
          for (const std::vector<int64_t>& lasts :
               std::vector<std::vector<int64_t>>{{0, 0, 0, 0}, {15, 15, 16, 16}, {3, 64, 17, 69},
                                                 {69, 68, 67, 66}, {31, 0, 47, 5}}) {
            std::vector<float> qs = random_f32(nq * hd, 7 + nq, -2.0f, 2.0f);
            std::vector<float> outs(static_cast<size_t>(nq * hd), -1.0f);
            const float* qp[4];
            float* op[4];
            int64_t last[4];
            for (int i = 0; i < nq; ++i) {
              qp[i] = qs.data() + i * hd;
              op[i] = outs.data() + i * hd;
              last[i] = lasts[i];
            }
            const int64_t lmax = *std::max_element(last, last + nq);
            std::vector<float> scratch(static_cast<size_t>(attention_tile_scratch_floats(lmax)));
            attention_tile(nq, qp, last, op, k, v, dt, hd, scale, scratch.data());
            for (int i = 0; i < nq; ++i) {
              const std::vector<float> want = per_query(qp[i], last[i], k, v, dt, hd, scale);
              for (int64_t d = 0; d < hd; ++d)
                ASSERT_TRUE(same_bits(want[d], op[i][d]))
                    << dtype_name(dt) << " hd " << hd << " nq " << nq << " query " << i << " last "
                    << last[i] << " d " << d << ": " << want[d] << " vs " << op[i][d];
            }
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace ferrite::cpu
