// The gated delta layers' causal depthwise conv + SiLU for one channel, as
// device helpers shared by its own launch (gated_delta.cu: conv_silu_kernel,
// a thread per (sequence, channel) over the sequence's tokens) and by the
// qkv projection's epilogue at batch 1 (quant_gemv_common.cuh:
// conv_epilogue, FusedParams::conv_w, Tuning::
// cuda_gated_delta_conv_in_projection): one expression in one place, so
// both give the same bits. The taps are a compile-time count (the launch
// instantiates 1..kMaxConv, the epilogue kConvEpilogueTaps only) so that
// the arrays stay in registers: a run-time count put a 64-112 byte stack
// frame into every GEMV instantiation.
#pragma once

#include <cstdint>

#include "backends/cuda/kernels/cuda_types.cuh"

namespace ferrite::cuda {

constexpr int kMaxConv = 8;           // conv taps the launch takes
constexpr int kConvEpilogueTaps = 4;  // the GEMV epilogue's (Qwen3.5, Qwen3-Next)

// A channel's K taps and its K-1 inputs before the current one (hist[K-1]
// is the current input's place).
template <int K>
struct ConvChannel {
  float wt[K], hist[K];
};

// The channel's taps (weight [C, K] of wdt: dt_code) and history from the
// state ([K-1, C] rows of one slot; null: a sequence without state, zeros).
template <int K>
__device__ __forceinline__ void conv_load(ConvChannel<K>& c, const void* w, int wdt,
                                          const float* st, int64_t C, int64_t ch) {
#pragma unroll
  for (int j = 0; j < K; ++j) c.wt[j] = load_any(w, wdt, ch * K + j);
#pragma unroll
  for (int j = 0; j < K - 1; ++j) c.hist[j] = st ? st[j * C + ch] : 0.0f;
}

// One input v through the conv: silu(sum_j wt[j] hist[j]) with hist[K-1] =
// v, summed in tap order; the history shifted by one.
template <int K>
__device__ __forceinline__ float conv_silu_step(ConvChannel<K>& c, float v) {
  c.hist[K - 1] = v;
  float acc = 0;
#pragma unroll
  for (int j = 0; j < K; ++j) acc += c.wt[j] * c.hist[j];
#pragma unroll
  for (int j = 0; j + 1 < K; ++j) c.hist[j] = c.hist[j + 1];
  return acc / (1.0f + expf(-acc));
}

template <int K>
__device__ __forceinline__ void conv_store(const ConvChannel<K>& c, float* st, int64_t C,
                                           int64_t ch) {
  if (st)
#pragma unroll
    for (int j = 0; j < K - 1; ++j) st[j * C + ch] = c.hist[j];
}

}  // namespace ferrite::cuda
