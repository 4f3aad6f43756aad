// Products on block weights, kernel by kernel: gemm() (backends/cuda/gemm.h)
// at real shapes on random weights in a block format, through the bf16
// tensor-core tile (kernels/quant_tile.cuh) and through dequantize +
// cuBLASLt (paths tile, lt: 9+ tokens; u4: the Marlin-class 4-bit tile,
// kernels/u4_tile.cuh, u4_g128 only; bf16: the same shape's bf16 cuBLASLt
// product on the dequantized weights, what a bf16 model pays), or for decode (up to 8 tokens)
// through the fused GEMV on the CUDA cores and on the tensor cores (paths
// gemv, mma: kernels/quant_gemv_mma.cu, f8_e4m3_b128 / u4_g128; mma8: e4m3 activations), timed with CUDA events over repeated calls that cycle through
// enough weight copies (512 MiB at least) that none is read from L2.
// Prints microseconds a call, the weights' GB/s and the TFLOP/s, and the
// largest difference between the two paths' outputs relative to the largest
// output (the same rounded weights: only the summation order differs).
//
//   quant_gemm_bench --formats q4_k,q8_0 --tokens 16,64,128 --shapes 4096x4096,12288x4096
//   quant_gemm_bench --formats f8_e4m3_b128,u4_g128 --tokens 1,2,8 --paths gemv,mma
//
// Under ncu: --iters 1 --warmup 0 --paths tile and ncu's --kernel-name filter.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "backends/cuda/cuda_common.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/kernels/u4_tile.cuh"
#include "backends/cuda/kernels/u4_tile_formats.h"
#include "tensor/dtype.h"

namespace {

using namespace ferrite;

#define CHECK_CUDA(x)                                                                      \
  do {                                                                                     \
    cudaError_t e_ = (x);                                                                  \
    if (e_ != cudaSuccess) {                                                               \
      std::fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_));                        \
      std::exit(1);                                                                        \
    }                                                                                      \
  } while (0)

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t a = 0;
  while (a <= s.size()) {
    const size_t b = std::min(s.find(',', a), s.size());
    if (b > a) out.push_back(s.substr(a, b - a));
    a = b + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"quant_gemm_bench: products on block weights, tile against dequantize + cuBLASLt"};
  std::string formats = "q4_k,q8_0,q6_k,u4_g128,f8_e4m3_b128", tokens = "16,32,64,128";
  std::string shapes = "4096x4096,1024x4096,12288x4096,4096x12288", paths = "tile,lt";
  int iters = 20, warmup = 3;
  app.add_option("--formats", formats, "weight formats (dtype names)")->capture_default_str();
  app.add_option("--tokens", tokens, "token counts m")->capture_default_str();
  app.add_option("--shapes", shapes, "NxK weight shapes (n outputs x k inputs)")
      ->capture_default_str();
  app.add_option("--paths", paths,
                 "tile, lt (dequantize + cuBLASLt), mmq (the int8 tile: q4_k / q6_k / q8_0, 9-64 "
                 "tokens; mmq0: its k splits at ~3 blocks an SM, Tuning::cuda_quant_mmq_waves 0), u4 / u4wg (the 4-bit tile on mma.sync / wgmma, u4_g128; u4s1 / u4s2: mma.sync with one / two k steps a stage; u4t: "
                 "the weights in the tile's own 128-row layout, U4Layout::kTiles), bf16 (the "
                 "bf16 product of the dequantized weights); gemv, gemv1, gemv2, gemv4, mma, mma8 (up "
                 "to 8 tokens: the fused GEMV on CUDA cores (gemv1 / gemv2 / gemv4: items of 1 / "
                 "2 / 4 warp iterations at one token, Tuning::cuda_quant_stream_item_steps; gemv: "
                 "the default 4) / tensor cores / "
                 "tensor cores with e4m3 activations)")
      ->capture_default_str();
  app.add_option("--iters", iters, "timed calls per case")->capture_default_str();
  app.add_option("--warmup", warmup, "untimed calls first")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  cuda::BackendState st;
  CHECK_CUDA(cudaStreamCreate(&st.stream));
  cudaDeviceProp prop{};
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  st.num_sms = prop.multiProcessorCount;
  st.u4_tile_tokens = int64_t{1} << 30;  // gemm_init sizes the split-k scratch for it
  st.quant_mmq_tokens = 64;               // gemm_init allocates the int8 tile's buffers
  if (Status s = cuda::gemm_init(st); !s.is_ok()) {
    std::fprintf(stderr, "gemm_init: %s\n", s.to_string().c_str());
    return 1;
  }
  // The tile path takes every token count asked for (the default threshold
  // would send the larger ones to dequantize + cuBLASLt).
  const int64_t tile_tokens = int64_t{1} << 30;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uni(-1.0f, 1.0f);
  std::printf("%-14s %6s %6s %4s %-5s %9s %8s %8s %10s\n", "format", "n", "k", "m", "path", "us",
              "GB/s", "TFLOP/s", "max diff");
  for (const std::string& fname : split(formats)) {
    const std::optional<DType> dt = dtype_from_name(fname);
    if (!dt || !dtype_is_quantized(*dt)) {
      std::fprintf(stderr, "not a block format: %s\n", fname.c_str());
      return 2;
    }
    for (const std::string& shape : split(shapes)) {
      const size_t x = shape.find('x');
      const int64_t n = std::stoll(shape.substr(0, x)), k = std::stoll(shape.substr(x + 1));
      const int64_t bytes = dtype_bytes(*dt, n * k);
      std::vector<float> wf(static_cast<size_t>(n * k));
      for (float& v : wf) v = uni(rng) / std::sqrt(static_cast<float>(k));
      std::vector<uint8_t> wq(static_cast<size_t>(bytes));
      quantize_row(*dt, wf.data(), wq.data(), n * k);
      const int64_t stride = (bytes + 255) / 256 * 256;
      const int copies = static_cast<int>(std::max<int64_t>(2, (int64_t{512} << 20) / stride + 1));
      uint8_t* w = nullptr;
      CHECK_CUDA(cudaMalloc(&w, stride * copies));
      for (int c = 0; c < copies; ++c)
        CHECK_CUDA(cudaMemcpy(w + c * stride, wq.data(), bytes, cudaMemcpyHostToDevice));
      // The u4t path's weights: the same blocks in the tiled layout.
      uint8_t* wt = nullptr;
      int64_t stride_t = 0;
      int copies_t = 0;
      if (paths.find("u4t") != std::string::npos && *dt == DType::kU4G128) {
        std::vector<uint8_t> tiles(static_cast<size_t>(cuda::u4tile::tiled_bytes(n, k)));
        cuda::u4tile::tile_u4_rows(wq.data(), tiles.data(), n, k);
        stride_t = (static_cast<int64_t>(tiles.size()) + 255) / 256 * 256;
        copies_t = static_cast<int>(std::max<int64_t>(2, (int64_t{512} << 20) / stride_t + 1));
        CHECK_CUDA(cudaMalloc(&wt, stride_t * copies_t));
        for (int c = 0; c < copies_t; ++c)
          CHECK_CUDA(cudaMemcpy(wt + c * stride_t, tiles.data(), tiles.size(),
                                cudaMemcpyHostToDevice));
      }
      // The bf16 path's weights: the same values rounded to bf16, as many
      // copies as keep them out of L2.
      uint16_t* w16 = nullptr;
      const int64_t stride16 = (n * k * 2 + 255) / 256 * 256;
      const int copies16 = static_cast<int>(std::max<int64_t>(2, (int64_t{512} << 20) / stride16 + 1));
      if (paths.find("bf16") != std::string::npos) {
        std::vector<float> wd(static_cast<size_t>(n * k));
        dequantize_row(*dt, wq.data(), wd.data(), n * k);
        std::vector<uint16_t> wh(wd.size());
        for (size_t i = 0; i < wd.size(); ++i) wh[i] = f32_to_bf16(wd[i]);
        CHECK_CUDA(cudaMalloc(&w16, stride16 * copies16));
        for (int c = 0; c < copies16; ++c)
          CHECK_CUDA(cudaMemcpy(reinterpret_cast<char*>(w16) + c * stride16, wh.data(), n * k * 2,
                                cudaMemcpyHostToDevice));
      }
      for (const std::string& ms : split(tokens)) {
        const int64_t m = std::stoll(ms);
        std::vector<uint16_t> xh(static_cast<size_t>(m * k));
        for (uint16_t& v : xh) v = f32_to_bf16(uni(rng));
        void *xd = nullptr, *od = nullptr;
        CHECK_CUDA(cudaMalloc(&xd, m * k * 2));
        CHECK_CUDA(cudaMalloc(&od, m * n * 4));
        CHECK_CUDA(cudaMemcpy(xd, xh.data(), m * k * 2, cudaMemcpyHostToDevice));
        std::vector<float> first;
        for (const std::string& path : split(paths)) {
          if (path == "u4t" && !wt) continue;  // u4_g128 only
          st.quant_tile_tokens = path == "tile" ? tile_tokens : 0;
          st.quant_mmq_tokens = path == "mmq" || path == "mmq0" ? 64 : 0;
          st.quant_mmq_waves = path != "mmq0";
          const bool u4 = path == "u4" || path == "u4wg" || path == "u4s1" || path == "u4s2";
          st.u4_tile_tokens = u4 ? tile_tokens : 0;
          st.u4_tile_wgmma = path == "u4wg";
          st.u4_tile_stage_steps = path == "u4s1" ? 1 : (path == "u4s2" ? 2 : 0);
          st.quant_mma_fp8 = st.quant_mma_u4 = path == "mma" || path == "mma8" ? 1 : 0;
          st.quant_mma_fp8_act = path == "mma8";
          st.quant_stream_item_steps = path == "gemv2" ? 2 : (path == "gemv1" ? 1 : 4);
          auto call = [&](int i) {
            Status s =
                path == "u4t"
                    ? cuda::launch_u4_tile(
                          st.stream, st.num_sms, xd, DType::kBF16, m, k, wt + (i % copies_t) * stride_t,
                          DType::kU4G128, n, od, DType::kF32, false, nullptr, DType::kF32,
                          cuda::quant_tile_scratch(st),
                          false, 1, cuda::U4Layout::kTiles)
                : path == "bf16"
                    ? cuda::gemm(st, xd, DType::kBF16, m, k,
                                 reinterpret_cast<char*>(w16) + (i % copies16) * stride16,
                                 DType::kBF16, n, od, DType::kF32, false)
                    : cuda::gemm(st, xd, DType::kBF16, m, k, w + (i % copies) * stride, *dt, n,
                                 od, DType::kF32, false);
            if (!s.is_ok()) {
              std::fprintf(stderr, "gemm: %s\n", s.to_string().c_str());
              std::exit(1);
            }
          };
          for (int i = 0; i < warmup; ++i) call(i);
          cudaEvent_t a, b;
          CHECK_CUDA(cudaEventCreate(&a));
          CHECK_CUDA(cudaEventCreate(&b));
          CHECK_CUDA(cudaEventRecord(a, st.stream));
          for (int i = 0; i < iters; ++i) call(warmup + i);
          CHECK_CUDA(cudaEventRecord(b, st.stream));
          CHECK_CUDA(cudaEventSynchronize(b));
          float ms_total = 0;
          CHECK_CUDA(cudaEventElapsedTime(&ms_total, a, b));
          const double us = 1e3 * ms_total / std::max(iters, 1);
          std::vector<float> out(static_cast<size_t>(m * n));
          CHECK_CUDA(cudaMemcpy(out.data(), od, m * n * 4, cudaMemcpyDeviceToHost));
          double diff = 0;
          if (first.empty()) {
            first = out;
          } else {
            double mag = 0;
            for (size_t i = 0; i < out.size(); ++i) {
              mag = std::max(mag, std::fabs(double(first[i])));
              diff = std::max(diff, std::fabs(double(first[i]) - out[i]));
            }
            diff /= std::max(mag, 1e-30);
          }
          std::printf("%-14s %6lld %6lld %4lld %-5s %9.1f %8.0f %8.1f %10.2e\n", fname.c_str(),
                      static_cast<long long>(n), static_cast<long long>(k),
                      static_cast<long long>(m), path.c_str(), us, bytes / us / 1e3,
                      2.0 * m * n * k / us / 1e6, diff);
          cudaEventDestroy(a);
          cudaEventDestroy(b);
        }
        cudaFree(xd);
        cudaFree(od);
      }
      cudaFree(w);
      if (w16) cudaFree(w16);
      if (wt) cudaFree(wt);
    }
  }
  cuda::gemm_shutdown(st);
  return 0;
}
