// The bulk-copy decode GEMV with a tail format (QuantGemvArgs::tail_seg,
// Tuning::cuda_quant_stream_mixed): a projection whose first segments are
// q4_k and whose last is q6_k (a Q4_K_M layer's Q, K and V) in one launch
// against one launch per format, bitwise, on random blocks: 1,024 to 8,192
// rows (so that some warps take groups of both formats), k 2,048 and 4,096,
// with and without the norm, room for the cluster attention and each item
// multiple; and which arguments quant_gemv_tail_ok refuses. Skipped without
// a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/kernels/quant_gemv.cuh"
#include "product_buffers.h"
#include "tensor/dtype.h"

namespace ferrite {
namespace {

using cuda::QuantGemvArgs;
using cuda::QuantGemvSegment;

using testing::upload;

struct TailCase {
  int64_t k, q_rows, kv_rows;
  bool norm, room;
  int item_steps;
};

TEST(CudaQuantStreamTailTest, TwoFormatsInOneLaunchAreBitwiseOneLaunchEach) {
  std::string why;
  if (!cuda_device_present(&why)) GTEST_SKIP() << "no GPU: " << why;
  std::mt19937 rng(32);
  const TailCase cases[] = {{2048, 4096, 512, true, false, 4},  {2048, 4096, 512, true, true, 4},
                            {4096, 4096, 1024, true, true, 4},  {4096, 4096, 1024, false, false, 2},
                            {2048, 6144, 1024, true, false, 4}, {2048, 6144, 1024, true, true, 1},
                            {4096, 8192, 1024, true, false, 4}};
  for (const TailCase& c : cases) {
    SCOPED_TRACE("k " + std::to_string(c.k) + " q " + std::to_string(c.q_rows) + " kv " +
                 std::to_string(c.kv_rows) + (c.norm ? " norm" : "") + (c.room ? " room" : "") +
                 " item steps " + std::to_string(c.item_steps));
    const int64_t rows[3] = {c.q_rows, c.kv_rows, c.kv_rows};
    const DType fmt[3] = {DType::kQ4_K, DType::kQ4_K, DType::kQ6_K};
    std::vector<uint8_t*> w(3);
    std::vector<uint16_t*> out[2];
    for (int s = 0; s < 3; ++s) {
      w[s] = upload(testing::random_blocks(fmt[s], rows[s], c.k, rng));
      ASSERT_NE(w[s], nullptr);
      for (auto& o : out) {
        o.push_back(upload(std::vector<uint16_t>(static_cast<size_t>(rows[s]), 0)));
        ASSERT_NE(o.back(), nullptr);
      }
    }
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<uint16_t> xh(static_cast<size_t>(c.k)), nh(static_cast<size_t>(c.k));
    for (auto& v : xh) v = f32_to_bf16(nd(rng));
    for (auto& v : nh) v = f32_to_bf16(1.0f + 0.1f * nd(rng));
    uint16_t* x = upload(xh);
    uint16_t* norm = upload(nh);
    ASSERT_NE(x, nullptr);
    ASSERT_NE(norm, nullptr);

    auto args = [&](int form) {  // 0: Q/K in q4_k, 1: V in q6_k, 2: all three
      QuantGemvArgs a;
      a.x = x;
      a.x_dt = DType::kBF16;
      a.m = 1;
      a.k = c.k;
      a.norm = c.norm ? norm : nullptr;
      a.norm_dt = DType::kBF16;
      a.out_dt = DType::kBF16;
      a.stream = true;
      a.stream_item_steps = c.item_steps;
      a.stream_attention_room = c.room;
      a.w_dt = form == 1 ? DType::kQ6_K : DType::kQ4_K;
      a.count = form == 0 ? 2 : form == 1 ? 1 : 3;
      if (form == 2) {
        a.tail_seg = 2;
        a.tail_dt = DType::kQ6_K;
      }
      return a;
    };
    QuantGemvSegment segs[2][3];
    for (int v = 0; v < 2; ++v)
      for (int s = 0; s < 3; ++s) segs[v][s] = {w[s], out[v][s], rows[s]};
    QuantGemvArgs qk = args(0), vv = args(1), both = args(2);
    qk.segs = segs[0];
    vv.segs = segs[0] + 2;
    both.segs = segs[1];
    ASSERT_TRUE(cuda::quant_gemv_stream_supported(qk));
    ASSERT_TRUE(cuda::quant_gemv_stream_supported(vv));
    ASSERT_TRUE(cuda::quant_gemv_fused_supported(both));
    for (const QuantGemvArgs* a : {&qk, &vv, &both}) {
      const Status st = cuda::launch_quant_gemv_fused(nullptr, *a);
      ASSERT_TRUE(st.is_ok()) << st.to_string();
    }
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    for (int s = 0; s < 3; ++s) {
      std::vector<uint16_t> got[2];
      for (int v = 0; v < 2; ++v) {
        got[v].resize(static_cast<size_t>(rows[s]));
        ASSERT_EQ(cudaMemcpy(got[v].data(), out[v][s], got[v].size() * 2, cudaMemcpyDeviceToHost),
                  cudaSuccess);
      }
      bool nonzero = false;
      for (uint16_t b : got[0]) nonzero = nonzero || (b & 0x7fff) != 0;
      EXPECT_TRUE(nonzero) << "segment " << s << " was not written";
      EXPECT_EQ(std::memcmp(got[0].data(), got[1].data(), got[0].size() * 2), 0)
          << "segment " << s << ": one launch differs from one launch a format";
    }
    for (int s = 0; s < 3; ++s) {
      cudaFree(w[s]);
      for (auto& o : out) cudaFree(o[s]);
    }
    cudaFree(x);
    cudaFree(norm);
  }
}

// What a tail format refuses (host only): more than one token, a q6_k tail
// after a format other than q4_k / q5_k, a tail other than q6_k, a group of
// rows across the formats, swiglu, and the tail as the first segment.
TEST(CudaQuantStreamTailTest, TailArgumentsOutsideTheKernelsAreRefused) {
  QuantGemvSegment segs[3] = {{nullptr, nullptr, 64}, {nullptr, nullptr, 16}, {nullptr, nullptr, 16}};
  QuantGemvArgs a;
  a.m = 1;
  a.k = 2048;
  a.w_dt = DType::kQ4_K;
  a.segs = segs;
  a.count = 3;
  a.tail_seg = 2;
  a.tail_dt = DType::kQ6_K;
  EXPECT_TRUE(cuda::quant_gemv_tail_ok(a));
  a.tail_seg = 0;
  EXPECT_TRUE(cuda::quant_gemv_tail_ok(a));  // no tail
  a.tail_seg = 2;
  {
    QuantGemvArgs b = a;
    b.m = 2;
    EXPECT_FALSE(cuda::quant_gemv_tail_ok(b));
  }
  {
    QuantGemvArgs b = a;
    b.w_dt = DType::kQ8_0;
    EXPECT_FALSE(cuda::quant_gemv_tail_ok(b));
  }
  {
    QuantGemvArgs b = a;
    b.tail_dt = DType::kQ8_0;
    EXPECT_FALSE(cuda::quant_gemv_tail_ok(b));
  }
  {
    QuantGemvSegment odd[3] = {{nullptr, nullptr, 63}, {nullptr, nullptr, 17}, {nullptr, nullptr, 16}};
    QuantGemvArgs b = a;
    b.segs = odd;
    EXPECT_TRUE(cuda::quant_gemv_tail_ok(b));  // 80 rows before the tail: whole groups
    odd[1].rows = 16;
    EXPECT_FALSE(cuda::quant_gemv_tail_ok(b));  // 79: a group across the formats
  }
  {
    QuantGemvArgs b = a;
    b.swiglu = true;
    EXPECT_FALSE(cuda::quant_gemv_tail_ok(b));
  }
  {
    QuantGemvArgs b = a;
    b.tail_seg = 3;
    EXPECT_FALSE(cuda::quant_gemv_tail_ok(b));  // past the last segment
  }
}

}  // namespace
}  // namespace ferrite
