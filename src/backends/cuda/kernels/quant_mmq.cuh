// Products of up to 64 tokens on q4_k, q6_k and q8_0 block weights on the int8
// tensor cores (Tuning::cuda_quant_mmq_min_tokens .. cuda_quant_mmq_tokens):
//
//   out[t, r] (= or +=) sum_e w[r, e] x'[t, e] (+ bias[r])
//
// with w the reference dequantization of the blocks and x' the activations
// quantized to int8 per token and 256 elements, for q8_0 per 32 (scale amax
// / 127, the CPU dot products' numerics, quant_dot_impl.h; the conformance
// bound of 8-bit block activations is per weight block): per 256-block
//   q4_k: d * sum_j sc_j (q_j . xq_j) - dmin * sum_j m_j sum(xq_j)
//   q6_k: d * sum_s sc_s ((q_s - 32) . xq_s)   (16 sub-blocks of 16)
// in integers (exact), times the activation scale, added in f32;
//   q8_0: sum_j d_j xd_j (q_j . xq_j)   (8 blocks of 32, both scales in f32
// on the int32 sums).
//
// Three launches: the activations' quantization (int8 rows, one scale per
// 256 or 32, the sums of each 32), the product (a block of 4 warps takes 64 rows x
// all the tokens over a range of 256-blocks, two steps in flight: the next
// step's activations, and for q4_k / q8_0 its weight blocks, copied to
// shared memory by cp.async during this one's mma; a warp's 16 rows meet
// the tokens in m16n8k32 (q4_k, q8_0) / m16n8k16 (q6_k) int8 mma, the A
// fragments straight from the blocks' codes, the scales applied to the int32
// results; k split into waves of blocks, mmq_splits), then the sum of the k
// splits in split order (deterministic) with bias / accumulate (a product of
// one split writes its outputs itself: two launches).
//
// Unlike dequantizing for cuBLASLt (a 16-bit write and read of every weight
// each step) or the bf16 tile (f32 decoding of every weight), a weight costs
// one mask and shift per 4 (docs/perf-log.md session 26: at 33-64 tokens
// the dequantization was half of a Qwen3-8B Q4_K_M decode step).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_status.h"
#include "tensor/dtype.h"

namespace ferrite::cuda {

constexpr int64_t kMmqMaxTokens = 64;
constexpr int64_t kMmqMaxK = 65536;
constexpr int64_t kMmqPartialFloats = int64_t{4} << 20;

// Fixed device buffers (allocated once, so that decode graphs can point
// into them).
struct QuantMmqScratch {
  int8_t* xq = nullptr;      // [kMmqMaxTokens, kMmqMaxK]
  float* xd = nullptr;       // [kMmqMaxK / 256, kMmqMaxTokens] (q8_0: [kMmqMaxK / 32, ..])
  uint32_t* xsum = nullptr;  // [kMmqMaxK / 256, kMmqMaxTokens, 4]: int16 pairs
  float* partials = nullptr; // kMmqPartialFloats
};
Status quant_mmq_alloc(QuantMmqScratch* sc);
void quant_mmq_free(QuantMmqScratch* sc);

// The weight formats the tile has: q4_k, q6_k and q8_0 blocks. The one list
// of them, for quant_mmq_supported and for the caller's routing (mmq_takes).
constexpr bool quant_mmq_format(DType w_dt) {
  return w_dt == DType::kQ4_K || w_dt == DType::kQ6_K || w_dt == DType::kQ8_0;
}

// True when launch_quant_mmq runs this product: q4_k or q8_0 (16-byte aligned)
// or q6_k (2-byte aligned) weights, k a multiple of 256 up to kMmqMaxK,
// 1..kMmqMaxTokens tokens, x f32 / bf16 / f16, out f32 / bf16 / f16 (k is
// split only as far as the partial sums' room, kMmqPartialFloats, allows;
// one split writes the outputs directly).
bool quant_mmq_supported(DType x_dt, DType w_dt, const void* w, int64_t m, int64_t k, int64_t n,
                         DType out_dt);

// The activations' quantization group of a product on w_dt (32 for q8_0, 256
// for the k-quants): two products may share a quantization only with equal
// groups.
int quant_mmq_act_group(DType w_dt);

// out [m, n] (row-major, out_dt) (= or +=) x [m, k] (row-major) . W^T (+ bias
// [n]); W [n, k] in q4_k, q6_k or q8_0 blocks.
struct MmqOptions {
  bool wave_splits = true;  // Tuning::cuda_quant_mmq_waves (mmq_splits)
  // False: the scratch already holds x quantized for this product (the same
  // rows, m, k and activation group: an earlier product of the same input),
  // and the quantization launch is skipped.
  bool quantize = true;
};
Status launch_quant_mmq(cudaStream_t s, int num_sms, const void* x, DType x_dt, int64_t m,
                        int64_t k, const void* w, DType w_dt, int64_t n, void* out, DType out_dt,
                        bool accumulate, const void* bias, DType bias_dt,
                        const QuantMmqScratch& sc, const MmqOptions& opt = {});

// The k splits (at most `room`, the partial sums' kMmqPartialFloats / (m n);
// whole equal runs of steps) of a product of `tiles` 64-row tiles and
// `steps` 256-blocks when `slots` blocks fit on the GPU at once: with
// wave_splits the fewest waves x (steps a split + 1/2), else about one block
// a slot.
int64_t mmq_splits(int64_t tiles, int64_t steps, int64_t slots, int64_t room,
                   bool wave_splits);

}  // namespace ferrite::cuda
