// The fused decode GEMV on block weights (GGUF q8_0 / q4_0 / q4_k / q5_k /
// q6_k, u4_g128 and f8_e4m3_b128; layouts in tensor/dtype.h): for up to 8
// tokens,
//
//   n   = x                       (norm null)
//       = rms_norm(x) * norm      (rounded to the activation type, as the
//                                  rms_norm kernel stores it)
//   xq  = n in 8-bit blocks of 32 (q = round(n * 127 / amax), scale amax / 127:
//                                  the numerics of launch_quant_gemv_q8); for
//                                  e4m3 weights n itself, and each lane's 16
//                                  code x activation products summed in f32
//                                  before its block scale
//   out_i[t, r] (= or +=) sum_k xq[t, k] dequant(W_i)[r, k] (+ bias[r])
//
// for up to four weights W_i of one format sharing x (Q/K/V, the gated
// delta's qkv / z / b / a), or with `swiglu` out_0 = silu(x W_0^T) * (x
// W_1^T) (gate and up, each product rounded to the activation type first).
//
// One launch instead of a norm, a quantization and a GEMV per weight: every
// block stages xq in shared memory itself (x is small and in L2), the grid is
// what is resident on the GPU and loops over groups of two weight rows, and
// each warp keeps several blocks of its rows in flight, the first of them
// loaded before the kernel waits on the previous one (PDL), since weights
// depend on no earlier kernel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_status.h"
#include "tensor/dtype.h"

namespace ferrite::cuda {

struct QuantGemvSegment {
  const void* w;  // [rows, k] in the launch's block format
  void* out;      // [m, rows] of out_dt
  int64_t rows;
};

// A gated delta layer's causal conv + SiLU as the epilogue of its qkv
// projection at decode (Tuning::cuda_gated_delta_conv_in_projection):
// segment 0's outputs are the conv's channels; once stored, each passes
// through its channel's conv over the token's sequence's state in place
// (kernels/causal_conv.cuh: the same bits as the conv launch, which it
// replaces). Only for steps where
// every sequence has one token (and the kernels take it at one token only:
// QuantGemvArgs::conv): token t is sequence token_seq[t] (padding: state
// slot -1, no state).
struct GemvConvEpilogue {
  const void* w = nullptr;  // [channels, kernel] of w_dt; null: no epilogue
  DType w_dt = DType::kBF16;
  int kernel = 4;
  float* state = nullptr;  // [slots, kernel - 1, channels] f32
  const int32_t* token_seq = nullptr;
  const int32_t* seq_state_slot = nullptr;
};

struct QuantGemvArgs {
  const void* x = nullptr;  // [m, k] of x_dt (f32, bf16, f16), rows packed
  DType x_dt = DType::kBF16;
  int64_t m = 0, k = 0;
  DType w_dt = DType::kQ4_K;  // every segment's format (but a tail's, tail_seg)
  const QuantGemvSegment* segs = nullptr;
  int count = 0;  // 1..4; 2 with swiglu (gate, up: equal rows)
  bool swiglu = false;
  const void* norm = nullptr;  // [k] of norm_dt (f32, bf16, f16), or null: x as it is
  // Act-order weights (TensorView::input_perm, one permutation for every
  // segment): stored column c multiplies x[:, input_perm[c]] (normalised
  // with norm[input_perm[c]]); the CUDA-core kernels gather x so as they
  // stage it (the tensor-core one does not take it). Null: natural order.
  const int32_t* input_perm = nullptr;
  DType norm_dt = DType::kF32;
  float eps = 1e-6f;
  bool zero_centred = false;  // n = x * inv * (1 + norm)
  DType out_dt = DType::kBF16;  // f32 or x_dt (x_dt with swiglu)
  bool accumulate = false;      // out += (one segment only)
  const void* bias = nullptr;   // [rows] (one segment only)
  DType bias_dt = DType::kF32;
  // The rows bulk-copied into shared memory (quant_gemv_stream.cu,
  // Tuning::cuda_quant_stream_tokens) where quant_gemv_stream_supported;
  // else, and by default, streamed through registers. Same results.
  bool stream = false;
  // Blocks an SM of the bulk-copy kernel, 1 or 2 (Tuning::
  // cuda_quant_stream_blocks): with 2, each takes half the warps and half
  // the shared memory, and the next kernel's blocks can start beside the
  // last ones.
  int stream_blocks = 1;
  // Warp iterations an item of the bulk-copy kernel, 1, 2 or 4, at one
  // token (Tuning::cuda_quant_stream_item_steps); the kernel takes the
  // largest up to this that leaves a warp at least two ring slots.
  int stream_item_steps = 4;
  // At one token, the bulk-copy kernel leaves room on every SM for a block
  // of the cluster decode attention of head_dim up to 128 (20 warps instead
  // of 24, attention_decode_cluster_room() less shared memory; Tuning::
  // cuda_decode_colocate 2): the attention's blocks then start beside the
  // Q/K/V projection's, and the output projection's beside the attention's.
  bool stream_attention_room = false;
  // The tensor-core kernel (quant_gemv_mma.cu) where quant_gemv_mma_supported
  // holds: f8_e4m3_b128 / u4_g128 weights, bf16 / f16 x. Not bitwise equal to
  // the others: f16 activations under a per-token scale instead of 8-bit
  // blocks (u4) or f32 (e4m3), and the mma's summation order.
  bool mma = false;
  // Shared memory (KiB) the tensor-core kernel's block takes when its plan
  // fits in it (Tuning::cuda_quant_mma_smem_kib; 0: all an SM has). Below
  // half an SM, a block of the next product can start beside this one.
  int mma_smem_kib = 0;
  // With mma on f8_e4m3_b128 weights: activations quantized to e4m3 per
  // token and 128-element group (scale = amax / 448: the FP8 checkpoints'
  // dynamic activation scheme, W8A8) and multiplied by the e4m3 mma
  // (m16n8k32), no conversion of the weights (Tuning::cuda_quant_mma_fp8_act).
  // Not the reference's numerics: x carries e4m3's 3 mantissa bits.
  bool mma_a8 = false;
  // A second format in one launch (Tuning::cuda_quant_stream_mixed; the
  // bulk-copy kernel at one token only, quant_gemv_tail_ok): segments
  // [tail_seg, count) are in tail_dt, e.g. a Q4_K_M layer's Q and K in
  // q4_k and V in q6_k. 0: every segment is in w_dt. Why: at batch 1 the
  // second launch of such a layer's Q/K/V projection starts only as the
  // first ends and then runs its whole latency chain (block start, copies,
  // staging, one item a warp, store) for ~1-3 MB: 11.6 us a layer for
  // Qwen3-30B-A3B's 0.86 MB V, 8.3 us for Qwen3-8B's 3.4 MB (H100
  // timeline, session 32).
  int tail_seg = 0;
  DType tail_dt = DType::kQ6_K;
  // The conv epilogue of segment 0: one token (a batch-1 decode step), f32
  // outputs, no tail format, conv.kernel 4 taps (the kernels' compile-time
  // count), no swiglu, bias or accumulate (compiled into those kernels
  // only: quant_gemv_common.cuh, conv_epilogue, says why). The CUDA-core
  // kernels run it, the tensor-core one does not: quant_gemv_conv_ok says
  // whether a launch takes it.
  GemvConvEpilogue conv;
};

// Whether launch_quant_gemv_fused runs these arguments (conv set) with the
// conv epilogue: a CUDA-core kernel takes them and the epilogue's own
// conditions hold. A launch with conv set that fails this is refused.
bool quant_gemv_conv_ok(const QuantGemvArgs& a);

// True when launch_quant_gemv_fused runs this product: the arguments below
// hold, and either the CUDA-core kernels' staged rows fit shared memory
// or the tensor-core kernel takes it (mma set and quant_gemv_mma_supported).
bool quant_gemv_fused_supported(const QuantGemvArgs& a);
// The conditions every fused kernel shares: m <= 8 tokens, k of whole
// blocks, weights aligned for the kernel's loads, the output / norm types as
// above.
bool quant_gemv_fused_args_ok(const QuantGemvArgs& a);
// The CUDA-core kernels' staged rows fit shared memory (m * k * 1.125 bytes;
// for e4m3 weights m * k activations).
bool quant_gemv_simt_smem_ok(const QuantGemvArgs& a);
Status launch_quant_gemv_fused(cudaStream_t s, const QuantGemvArgs& a);

// The bulk-copy kernel's own conditions, beyond quant_gemv_fused_args_ok and
// quant_gemv_simt_smem_ok:
// rows of a 16-byte multiple (q6_k: k a multiple of 2,048; q8_0, q4_0,
// u4_g128: of 256; f8_e4m3_b128: of 512) from 16-byte aligned weights, and
// at least two ring slots a warp beside the staged activations.
bool quant_gemv_stream_supported(const QuantGemvArgs& a);
// The conditions of a tail format (QuantGemvArgs::tail_seg; true without
// one): one token, no swiglu / bias / accumulate / act-order, w_dt q4_k or
// q5_k and tail_dt q6_k (the k-quant mixes), the tail starting at a whole
// group of rows (an even row).
bool quant_gemv_tail_ok(const QuantGemvArgs& a);
Status launch_quant_gemv_stream(cudaStream_t s, const QuantGemvArgs& a);

// The tensor-core kernel's own conditions, beyond quant_gemv_fused_args_ok:
// f8_e4m3_b128 (k a multiple of 512) or u4_g128 (of 256) with 16-byte
// aligned weights, x bf16 / f16, and the staged activations (m * (k + 8) f16,
// or with mma_a8 m * (k + 16) e4m3 codes and their scales) beside one ring
// slot a warp in shared memory.
bool quant_gemv_mma_supported(const QuantGemvArgs& a);
Status launch_quant_gemv_mma(cudaStream_t s, const QuantGemvArgs& a);

}  // namespace ferrite::cuda
