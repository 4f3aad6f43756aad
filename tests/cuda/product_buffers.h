// Device buffers of one gemm() product in the kernel-level GPU tests
// (fp8_lt_test.cc, u4_tile_test.cc): the weight bytes, bf16 activations,
// an output of f32 or bf16 holding `init` (what an accumulating product
// adds to), an f32 bias; and the output read back as floats.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdint>
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

}  // namespace ferrite::testing
