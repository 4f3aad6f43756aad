// The tensor-core decode GEMV (kernels/quant_gemv_mma.cu) on FP8
// (f8_e4m3_b128) and 4-bit (u4_g128) weights against a host reference in
// f64 on the dequantized weights (tensor/dtype.h's dequantize_row), through
// every feature of the fused-GEMV contract: the norm (plain and zero
// centred), up to three segments sharing x, swiglu, accumulate + bias,
// partial row tiles, k split unevenly over the warps, 1 / 3 / 8 tokens, and
// a token with a large outlier (the per-token f16 scale). Skipped without a
// GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
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
using cuda::launch_quant_gemv_mma;
using cuda::quant_gemv_mma_supported;

enum Norm { kNoNorm, kNormF32, kNormBF16 };

struct MmaCase {
  DType w;
  int64_t k;
  std::vector<int64_t> rows;  // one per segment (swiglu: gate, up)
  bool swiglu = false;
  Norm norm = kNoNorm;
  bool zero_centred = false;
  bool accumulate_bias = false;
  DType out = DType::kF32;
  // e4m3 activations (QuantGemvArgs::mma_a8; f8_e4m3_b128 weights).
  bool a8 = false;
};

using testing::upload;

float round_to(DType dt, float v) {
  if (dt == DType::kBF16) return bf16_to_f32(f32_to_bf16(v));
  if (dt == DType::kF16) return f16_to_f32(f32_to_f16(v));
  return v;
}

void run_case(const MmaCase& c, int m, std::mt19937& rng) {
  SCOPED_TRACE(std::string(dtype_name(c.w)) + " k " + std::to_string(c.k) + " m " +
               std::to_string(m) + (c.swiglu ? " swiglu" : "") +
               (c.norm != kNoNorm ? " norm" : "") + (c.accumulate_bias ? " acc+bias" : "") +
               (c.a8 ? " a8" : ""));
  std::normal_distribution<float> nd(0.0f, 1.0f);
  const int64_t k = c.k;
  // Activations (bf16), token 0 with an outlier far above f16's comfort.
  std::vector<uint16_t> xh(static_cast<size_t>(m * k));
  for (auto& v : xh) v = f32_to_bf16(nd(rng));
  xh[static_cast<size_t>(k / 3)] = f32_to_bf16(3.0e5f);
  std::vector<float> xf(xh.size());
  for (size_t i = 0; i < xh.size(); ++i) xf[i] = bf16_to_f32(xh[i]);
  // The norm weights (rounded to bf16 when stored so), and the normalised
  // rows as the kernel stages them (rounded to bf16).
  std::vector<float> normw(static_cast<size_t>(k));
  for (auto& v : normw) v = 1.0f + 0.25f * nd(rng);
  std::vector<uint16_t> normh(normw.size());
  for (size_t i = 0; i < normw.size(); ++i) {
    normh[i] = f32_to_bf16(normw[i]);
    if (c.norm == kNormBF16) normw[i] = bf16_to_f32(normh[i]);
  }
  std::vector<double> n(xf.size());
  for (int t = 0; t < m; ++t) {
    double ss = 0;
    for (int64_t i = 0; i < k; ++i) ss += double(xf[t * k + i]) * xf[t * k + i];
    const float inv = static_cast<float>(1.0 / std::sqrt(ss / double(k) + 1e-6));
    for (int64_t i = 0; i < k; ++i) {
      const float w = c.zero_centred ? 1.0f + normw[i] : normw[i];
      n[t * k + i] = c.norm == kNoNorm ? xf[t * k + i]
                                       : round_to(DType::kBF16, xf[t * k + i] * inv * w);
    }
  }

  if (c.a8) {
    // The kernel's activation quantization: per token and 128-group,
    // scale = amax / 448, code = e4m3(v / scale) (f32 division, ties to
    // even, saturating); the reference multiplies by code * scale.
    for (int t = 0; t < m; ++t)
      for (int64_t g0 = 0; g0 < k; g0 += 128) {
        float amax = 0.0f;
        for (int64_t i = g0; i < g0 + 128; ++i)
          amax = std::max(amax, std::fabs(static_cast<float>(n[t * k + i])));
        const float scale = amax / 448.0f;
        for (int64_t i = g0; i < g0 + 128; ++i) {
          const float v = static_cast<float>(n[t * k + i]);
          n[t * k + i] =
              scale > 0.0f ? double(f8e4m3_to_f32(f32_to_f8e4m3(v / scale))) * scale : 0.0;
        }
      }
  }

  const int count = static_cast<int>(c.rows.size());
  std::vector<QuantGemvSegment> segs(count);
  std::vector<std::vector<double>> ref(count);
  std::vector<void*> outs(count);
  std::vector<std::vector<float>> init(count);
  std::vector<float> bias;
  for (int s = 0; s < count; ++s) {
    const int64_t rows = c.rows[s];
    std::vector<float> wf(static_cast<size_t>(rows * k));
    for (auto& v : wf) v = nd(rng) / std::sqrt(static_cast<float>(k));
    std::vector<uint8_t> wq(static_cast<size_t>(dtype_bytes(c.w, rows * k)));
    quantize_row(c.w, wf.data(), wq.data(), rows * k);
    std::vector<float> deq(wf.size());
    dequantize_row(c.w, wq.data(), deq.data(), rows * k);
    ref[s].assign(static_cast<size_t>(m * rows), 0.0);
    for (int t = 0; t < m; ++t)
      for (int64_t r = 0; r < rows; ++r) {
        double acc = 0;
        for (int64_t i = 0; i < k; ++i) acc += double(deq[r * k + i]) * n[t * k + i];
        ref[s][t * rows + r] = acc;
      }
    if (c.accumulate_bias) {
      bias.resize(static_cast<size_t>(rows));
      for (auto& v : bias) v = nd(rng);
      init[s].resize(static_cast<size_t>(m * rows));
      for (auto& v : init[s]) v = nd(rng);
      for (int t = 0; t < m; ++t)
        for (int64_t r = 0; r < rows; ++r) ref[s][t * rows + r] += bias[r] + init[s][t * rows + r];
    }
    const size_t out_bytes = static_cast<size_t>(m * rows) * dtype_bytes(c.out, 1);
    ASSERT_EQ(cudaMalloc(&outs[s], out_bytes), cudaSuccess);
    if (c.accumulate_bias) {
      ASSERT_EQ(c.out, DType::kF32);
      ASSERT_EQ(cudaMemcpy(outs[s], init[s].data(), out_bytes, cudaMemcpyHostToDevice), cudaSuccess);
    }
    segs[s] = {upload(wq), outs[s], rows};
  }
  std::vector<double> want;  // what the kernel stores: the outputs, or silu(gate) * up
  if (c.swiglu) {
    want.resize(ref[0].size());
    for (size_t i = 0; i < want.size(); ++i) {
      const double g = ref[0][i];
      want[i] = g / (1.0 + std::exp(-g)) * ref[1][i];
    }
  }

  QuantGemvArgs a;
  a.x = upload(xh);
  a.x_dt = DType::kBF16;
  a.m = m;
  a.k = k;
  a.w_dt = c.w;
  a.segs = segs.data();
  a.count = count;
  a.swiglu = c.swiglu;
  float* normf = nullptr;
  uint16_t* normb = nullptr;
  if (c.norm == kNormF32) a.norm = normf = upload(normw);
  if (c.norm == kNormBF16) a.norm = normb = upload(normh);
  a.norm_dt = c.norm == kNormBF16 ? DType::kBF16 : DType::kF32;
  a.eps = 1e-6f;
  a.zero_centred = c.zero_centred;
  a.out_dt = c.out;
  a.accumulate = c.accumulate_bias;
  float* biasd = c.accumulate_bias ? upload(bias) : nullptr;
  a.bias = biasd;
  a.bias_dt = DType::kF32;
  a.mma = true;
  a.mma_a8 = c.a8;
  ASSERT_TRUE(quant_gemv_mma_supported(a));
  // One launch with the shared-memory budget `kib` (0: all); the outputs of
  // every segment read back (accumulating ones reset to their start first).
  auto launch_and_read = [&](int kib, std::vector<std::vector<float>>& got) {
    a.mma_smem_kib = kib;
    for (int s = 0; s < count; ++s) {
      if (c.accumulate_bias) {
        ASSERT_EQ(cudaMemcpy(outs[s], init[s].data(), init[s].size() * 4, cudaMemcpyHostToDevice),
                  cudaSuccess);
      }
    }
    Status st = launch_quant_gemv_mma(nullptr, a);
    ASSERT_TRUE(st.is_ok()) << st.to_string();
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    got.assign(static_cast<size_t>(count), {});
    for (int s = 0; s < (c.swiglu ? 1 : count); ++s) {
      std::vector<float>& g = got[s];
      g.resize(static_cast<size_t>(m * c.rows[s]));
      if (c.out == DType::kF32) {
        ASSERT_EQ(cudaMemcpy(g.data(), outs[s], g.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
      } else {
        std::vector<uint16_t> h(g.size());
        ASSERT_EQ(cudaMemcpy(h.data(), outs[s], h.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
        for (size_t i = 0; i < h.size(); ++i) g[i] = bf16_to_f32(h[i]);
      }
    }
  };
  std::vector<std::vector<float>> all, small;
  launch_and_read(0, all);
  if (::testing::Test::HasFatalFailure()) return;
  // A budget of 100 KiB (fewer ring slots a warp, where the plan fits it)
  // changes where rows wait, not the sums: bitwise the same outputs.
  launch_and_read(100, small);
  if (::testing::Test::HasFatalFailure()) return;
  EXPECT_EQ(all, small) << "outputs differ with mma_smem_kib = 100";

  for (int s = 0; s < (c.swiglu ? 1 : count); ++s) {
    const std::vector<double>& r = c.swiglu ? want : ref[s];
    const int64_t rows = c.rows[s];
    const std::vector<float>& got = all[s];
    // Per token: the largest error against the token's largest output (the
    // f32 sums of exact products; bf16 outputs round to 2^-8).
    // e4m3 activations: the same codes, the tensor cores' f32 sums of each
    // 128-block (their accumulation keeps fewer bits), so 1e-3 unnormed.
    const double tol = c.out == DType::kF32 ? (c.norm != kNoNorm ? 3e-3 : c.a8 ? 1e-3 : 1e-4)
                                            : 1.5e-2;
    for (int t = 0; t < m; ++t) {
      double mag = 0, err = 0;
      for (int64_t i = 0; i < rows; ++i) mag = std::max(mag, std::fabs(r[t * rows + i]));
      for (int64_t i = 0; i < rows; ++i)
        err = std::max(err, std::fabs(r[t * rows + i] - got[t * rows + i]));
      EXPECT_LE(err, tol * mag) << "segment " << s << " token " << t << " (largest " << mag << ")";
      EXPECT_GT(mag, 0.0);
    }
  }
  for (auto& sg : segs) cudaFree(const_cast<void*>(sg.w));
  for (void* o : outs) cudaFree(o);
  cudaFree(const_cast<void*>(a.x));
  cudaFree(normf);
  cudaFree(normb);
  cudaFree(biasd);
}

TEST(CudaQuantMmaTest, MatchesHostReferenceOnDequantizedWeights) {
  std::string why;
  if (!cuda_device_present(&why)) GTEST_SKIP() << "no GPU: " << why;
  std::mt19937 rng(11);
  const std::vector<MmaCase> cases = {
      // Q / K / V of one launch with the block's norm; 4096 = 8 items a row.
      {DType::kF8B128, 4096, {1024, 256, 256}, false, kNormF32},
      {DType::kU4G128, 4096, {1024, 256, 256}, false, kNormF32},
      // A partial last tile, accumulate + bias, 3 items a row over 3 warps.
      {DType::kF8B128, 1536, {200}, false, kNoNorm, false, true},
      // u4: 768 = one item of 4 blocks and one of 2.
      {DType::kU4G128, 768, {72}, false, kNoNorm, false, true},
      // Gate and up with a zero-centred bf16 norm, bf16 out.
      {DType::kF8B128, 2048, {528, 528}, true, kNormBF16, true, false, DType::kBF16},
      {DType::kU4G128, 1280, {528, 528}, true, kNormBF16, true, false, DType::kBF16},
      // A long row (a down projection): 24 items over 8 warps.
      {DType::kF8B128, 12288, {256}, false},
      {DType::kU4G128, 12288, {256}, false},
      // e4m3 activations: Q / K / V with the norm, accumulate + bias, gate
      // and up with a bf16 norm, a long row.
      {DType::kF8B128, 4096, {1024, 256, 256}, false, kNormF32, false, false, DType::kF32, true},
      {DType::kF8B128, 1536, {200}, false, kNoNorm, false, true, DType::kF32, true},
      {DType::kF8B128, 2048, {528, 528}, true, kNormBF16, true, false, DType::kBF16, true},
      {DType::kF8B128, 12288, {256}, false, kNoNorm, false, false, DType::kF32, true},
  };
  for (const MmaCase& c : cases)
    for (int m : {1, 3, 8}) {
      // The f16 staged x does not fit beside the rings (e4m3 codes do).
      if (c.k == 12288 && m == 8 && !c.a8) continue;
      run_case(c, m, rng);
      if (HasFatalFailure()) return;
    }
}

}  // namespace
}  // namespace ferrite
