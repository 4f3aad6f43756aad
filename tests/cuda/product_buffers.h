// Device buffers of one gemm() product in the kernel-level GPU tests
// (fp8_lt_test.cc, u4_tile_test.cc, quant_mmq_test.cc, quant_gemv_stream_test.cc): the weight bytes, bf16 activations,
// an output of f32 or bf16 holding `init` (what an accumulating product
// adds to), an f32 bias; and the output read back as floats.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "tensor/dtype.h"

namespace ferrite::testing {

// One product's shape: m tokens x n rows x k, the output type, and whether
// it accumulates into a random output and adds a bias.
struct ProductCase {
  int64_t m, n, k;
  DType out;
  bool accumulate_bias;
};

struct ProductBuffers {
  void *w = nullptr, *x = nullptr, *out = nullptr, *bias = nullptr;
  int64_t m = 0, n = 0;
  DType out_dt = DType::kF32;

  ProductBuffers() = default;
  ProductBuffers(const ProductBuffers&) = delete;
  ProductBuffers& operator=(const ProductBuffers&) = delete;
  ~ProductBuffers() {
    for (void* p : {w, x, out, bias})
      if (p) cudaFree(p);
  }

  // Allocates and uploads; a failure is a gtest failure (check
  // HasFatalFailure() after).
  void upload(const std::vector<uint8_t>& weight, const std::vector<uint16_t>& xh,
              const std::vector<float>& init, const std::vector<float>& bias_f32, int64_t m_,
              int64_t n_, DType out_) {
    m = m_;
    n = n_;
    out_dt = out_;
    ASSERT_EQ(cudaMalloc(&w, weight.size()), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&x, xh.size() * 2), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&out, m * n * dtype_bytes(out_dt, 1)), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&bias, n * 4), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(w, weight.data(), weight.size(), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(x, xh.data(), xh.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(bias, bias_f32.data(), n * 4, cudaMemcpyHostToDevice), cudaSuccess);
    set_out(init);
  }
  void set_out(const std::vector<float>& init) {
    if (out_dt == DType::kF32) {
      ASSERT_EQ(cudaMemcpy(out, init.data(), m * n * 4, cudaMemcpyHostToDevice), cudaSuccess);
    } else {
      std::vector<uint16_t> ih(init.size());
      for (size_t i = 0; i < ih.size(); ++i) ih[i] = f32_to_bf16(init[i]);
      ASSERT_EQ(cudaMemcpy(out, ih.data(), ih.size() * 2, cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  void read_out(std::vector<float>* got) const {
    got->assign(static_cast<size_t>(m * n), 0.0f);
    if (out_dt == DType::kF32) {
      ASSERT_EQ(cudaMemcpy(got->data(), out, m * n * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    } else {
      std::vector<uint16_t> gh(got->size());
      ASSERT_EQ(cudaMemcpy(gh.data(), out, gh.size() * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      for (size_t i = 0; i < gh.size(); ++i) (*got)[i] = bf16_to_f32(gh[i]);
    }
  }
};

// A device copy of `host` (at least 16 bytes allocated); a failure is a
// gtest failure (the caller frees it).
template <typename T>
T* upload(const std::vector<T>& host) {
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(16, host.size() * sizeof(T))), cudaSuccess);
  EXPECT_EQ(cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
  return static_cast<T*>(p);
}

// Rows of random block bytes with small f16 scales: q4_k (d, dmin first,
// random 6-bit scale / min bytes and codes), q6_k (random low / high code
// bits, int8 scales over their whole range, -128 included, d last) or q8_0
// (d first, then 32 random int8 codes).
inline std::vector<uint8_t> random_blocks(DType w_dt, int64_t n, int64_t k, std::mt19937& rng) {
  const bool q4k = w_dt == DType::kQ4_K, q6k = w_dt == DType::kQ6_K;
  const int64_t bytes = q4k ? 144 : (q6k ? 210 : 34), elems = q4k || q6k ? 256 : 32;
  std::vector<uint8_t> w(static_cast<size_t>(dtype_bytes(w_dt, n * k)));
  std::uniform_int_distribution<int> byte(0, 255);
  std::uniform_real_distribution<float> scale(0.5f, 2.0f);
  for (uint8_t& b : w) b = static_cast<uint8_t>(byte(rng));
  for (int64_t b = 0; b < n * k / elems; ++b) {
    uint8_t* blk = w.data() + b * bytes;
    const float unit = 1.0f / std::sqrt(float(k));
    const uint16_t d = f32_to_f16(scale(rng) * unit / (q4k ? 256.0f : (q6k ? 4096.0f : 128.0f)));
    std::memcpy(q6k ? blk + 208 : blk, &d, 2);
    if (q4k) {
      const uint16_t dmin = f32_to_f16(scale(rng) * unit / 512.0f);
      std::memcpy(blk + 2, &dmin, 2);
    }
  }
  return w;
}

}  // namespace ferrite::testing
