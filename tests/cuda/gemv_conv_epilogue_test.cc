// The gated delta layers' causal conv + SiLU as the epilogue of the fused
// block-format decode GEMV (QuantGemvArgs::conv, Tuning::
// cuda_gated_delta_conv_in_projection) against the GEMV into f32 followed
// by the conv's own launch (launch_causal_conv_silu), bitwise in the
// outputs and the conv state: q4_k and q8_0 weights, the register-streaming
// and the bulk-copy kernels, one token (a sequence with a state slot, and
// padding without one), with a second segment after the conv's (the gated
// delta's z). And which arguments are refused: more than one token, a tail
// format, the tensor-core kernel's (quant_gemv_conv_ok false, the launch an
// error). Skipped without a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/kernels/gated_delta.cuh"
#include "backends/cuda/kernels/quant_gemv.cuh"
#include "product_buffers.h"
#include "tensor/dtype.h"

namespace ferrite {
namespace {

using cuda::GemvConvEpilogue;
using cuda::QuantGemvArgs;
using cuda::QuantGemvSegment;
using testing::upload;

struct ConvCase {
  DType fmt;
  bool stream;
  int32_t slot;  // the sequence's state slot (-1: padding)
};

template <typename T>
std::vector<T> download(const T* d, size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

TEST(CudaGemvConvEpilogueTest, ConvInTheEpilogueIsBitwiseTheConvLaunch) {
  std::string why;
  if (!cuda_device_present(&why)) GTEST_SKIP() << "no GPU: " << why;
  std::mt19937 rng(43);
  const ConvCase cases[] = {{DType::kQ4_K, true, 5},  {DType::kQ4_K, false, 2},
                            {DType::kQ4_K, true, -1}, {DType::kQ8_0, true, 0},
                            {DType::kQ8_0, false, 7}, {DType::kQ8_0, false, -1}};
  constexpr int64_t k = 2048, C = 2560, Z = 1024, K = 4, kSlots = 8;
  for (const ConvCase& c : cases) {
    SCOPED_TRACE(std::string(dtype_name(c.fmt)) + (c.stream ? " bulk copy" : " registers") +
                 " slot " + std::to_string(c.slot));
    uint8_t* wq = upload(testing::random_blocks(c.fmt, C, k, rng));
    uint8_t* wz = upload(testing::random_blocks(c.fmt, Z, k, rng));
    std::normal_distribution<float> nd(0.0f, 1.0f);
    std::vector<uint16_t> xh(static_cast<size_t>(k)), nh(static_cast<size_t>(k)),
        cwh(static_cast<size_t>(C * K));
    for (auto& v : xh) v = f32_to_bf16(nd(rng));
    for (auto& v : nh) v = f32_to_bf16(1.0f + 0.1f * nd(rng));
    for (auto& v : cwh) v = f32_to_bf16(0.5f * nd(rng));
    std::vector<float> state_h(static_cast<size_t>(kSlots * (K - 1) * C));
    for (auto& v : state_h) v = nd(rng);
    uint16_t* x = upload(xh);
    uint16_t* norm = upload(nh);
    uint16_t* cw = upload(cwh);
    int32_t* d_token_seq = upload(std::vector<int32_t>{0});
    int32_t* d_last_row = upload(std::vector<int32_t>{0});
    int32_t* d_slots = upload(std::vector<int32_t>{c.slot});
    float* state[2] = {upload(state_h), upload(state_h)};
    float* outq[2] = {upload(std::vector<float>(C, 0.0f)), upload(std::vector<float>(C, 0.0f))};
    float* outz[2] = {upload(std::vector<float>(Z, 0.0f)), upload(std::vector<float>(Z, 0.0f))};

    QuantGemvSegment segs[2][2];
    QuantGemvArgs a[2];
    for (int v = 0; v < 2; ++v) {
      segs[v][0] = {wq, outq[v], C};
      segs[v][1] = {wz, outz[v], Z};
      a[v].x = x;
      a[v].x_dt = DType::kBF16;
      a[v].m = 1;
      a[v].k = k;
      a[v].norm = norm;
      a[v].norm_dt = DType::kBF16;
      a[v].out_dt = DType::kF32;
      a[v].stream = c.stream;
      a[v].w_dt = c.fmt;
      a[v].segs = segs[v];
      a[v].count = 2;
    }
    // 0: the GEMV, then the conv launch; 1: the conv in the GEMV's epilogue.
    GemvConvEpilogue& e = a[1].conv;
    e.w = cw;
    e.w_dt = DType::kBF16;
    e.kernel = K;
    e.state = state[1];
    e.token_seq = d_token_seq;
    e.seq_state_slot = d_slots;
    ASSERT_TRUE(cuda::quant_gemv_fused_supported(a[0]));
    ASSERT_TRUE(cuda::quant_gemv_conv_ok(a[1]));
    Status st = cuda::launch_quant_gemv_fused(nullptr, a[0]);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    cuda::StepMeta meta;
    meta.token_seq = d_token_seq;
    meta.seq_last_row = d_last_row;
    meta.seq_state_slot = d_slots;
    st = cuda::launch_causal_conv_silu(nullptr, meta, 1, outq[0], C, cw, DType::kBF16, K,
                                       state[0], false);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    st = cuda::launch_quant_gemv_fused(nullptr, a[1]);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

    const auto q0 = download(outq[0], C), q1 = download(outq[1], C);
    const auto z0 = download(outz[0], Z), z1 = download(outz[1], Z);
    const auto s0 = download(state[0], state_h.size()), s1 = download(state[1], state_h.size());
    EXPECT_EQ(std::memcmp(q0.data(), q1.data(), q0.size() * 4), 0) << "the conv outputs differ";
    EXPECT_EQ(std::memcmp(z0.data(), z1.data(), z0.size() * 4), 0) << "z differs";
    EXPECT_EQ(std::memcmp(s0.data(), s1.data(), s0.size() * 4), 0) << "the conv states differ";
    if (c.slot >= 0) {
      // The slot's rows shifted (its row 0 now holds its old row 1), the
      // other slots untouched.
      const int64_t at = static_cast<int64_t>(c.slot) * (K - 1) * C;
      EXPECT_EQ(s1[at + 7], state_h[at + C + 7]);
      EXPECT_NE(std::memcmp(s1.data() + at, state_h.data() + at, (K - 1) * C * 4), 0);
    } else {
      EXPECT_EQ(std::memcmp(s1.data(), state_h.data(), s1.size() * 4), 0)
          << "padding wrote a state";
    }
    bool nonzero = false;
    for (float v : q1) nonzero = nonzero || v != 0.0f;
    EXPECT_TRUE(nonzero);

    for (void* p : {static_cast<void*>(wq), static_cast<void*>(wz), static_cast<void*>(x),
                    static_cast<void*>(norm), static_cast<void*>(cw),
                    static_cast<void*>(d_token_seq), static_cast<void*>(d_last_row),
                    static_cast<void*>(d_slots)})
      cudaFree(p);
    for (int v = 0; v < 2; ++v) cudaFree(state[v]), cudaFree(outq[v]), cudaFree(outz[v]);
  }
}

// The epilogue's own conditions (host only): one token, no tail format,
// f32 outputs, no swiglu, bias or accumulate, 4 taps, its pointers set; and
// never on the tensor-core kernel (u4_g128 weights with mma: refused, the
// launch an error).
TEST(CudaGemvConvEpilogueTest, ArgumentsOutsideTheEpilogueAreRefused) {
  alignas(16) static uint8_t buf[64];
  QuantGemvSegment segs[1] = {{buf, buf, 256}};
  QuantGemvArgs a;
  a.x = buf;
  a.x_dt = DType::kBF16;
  a.m = 1;
  a.k = 2048;
  a.w_dt = DType::kQ4_K;
  a.segs = segs;
  a.count = 1;
  a.out_dt = DType::kF32;
  a.conv.w = buf;
  a.conv.state = reinterpret_cast<float*>(buf);
  a.conv.token_seq = reinterpret_cast<const int32_t*>(buf);
  a.conv.seq_state_slot = reinterpret_cast<const int32_t*>(buf);
  EXPECT_TRUE(cuda::quant_gemv_conv_ok(a));
  QuantGemvArgs b = a;
  b.out_dt = DType::kBF16;
  EXPECT_FALSE(cuda::quant_gemv_conv_ok(b));
  b = a;
  b.conv.kernel = 3;
  EXPECT_FALSE(cuda::quant_gemv_conv_ok(b));
  b = a;
  b.accumulate = true;
  EXPECT_FALSE(cuda::quant_gemv_conv_ok(b));
  b = a;
  b.conv.state = nullptr;
  EXPECT_FALSE(cuda::quant_gemv_conv_ok(b));
  b = a;
  b.m = 3;
  EXPECT_FALSE(cuda::quant_gemv_conv_ok(b));
  QuantGemvSegment tail_segs[2] = {{buf, buf, 256}, {buf, buf, 256}};
  b = a;
  b.segs = tail_segs;
  b.count = 2;
  b.tail_seg = 1;
  b.tail_dt = DType::kQ6_K;
  EXPECT_FALSE(cuda::quant_gemv_conv_ok(b));
  b = a;
  b.w_dt = DType::kU4G128;
  b.mma = true;
  if (cuda::quant_gemv_mma_supported(b)) {
    EXPECT_FALSE(cuda::quant_gemv_conv_ok(b));
    EXPECT_FALSE(cuda::launch_quant_gemv_fused(nullptr, b).is_ok());
  }
}

}  // namespace
}  // namespace ferrite
