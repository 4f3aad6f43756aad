// Products of 9 to a few hundred tokens on block weights (q8_0, q4_0, q4_k,
// q5_k, q6_k, u4_g128; layouts in tensor/dtype.h) on int8 tensor cores,
// reading every weight byte once per 64 tokens:
//
//   xq, xd = x in 8-bit blocks of 32 (q = round(x * 127 / amax), d = amax /
//            127: the numerics of launch_quant_gemv_q8), with each block's
//            d * sum(q) for the min terms
//   out[t, r] (= or +=) sum over the 32-element chunks c of row r
//            wd[r, c] * xd[t, c] * (q_w . q_x)  -  wm[r, c] * xd[t, c] * sum(q_x)
//            (+ bias[r])
//
// with (wd, wm) the chunk's scale and min (quant_mmq_formats.h; q6_k: a
// scale per 16 elements). Each element of x is off by at most amax / 254 of
// its 32-block, as in the decode GEMV (the conformance bound for block
// activations). A block of 4 warps takes 64 weight rows (16 a warp) x 16, 32
// or 64 tokens: per k step of 256 elements the rows' raw blocks and the tokens'
// 8-bit blocks are copied to shared memory (cp.async, two stages), the raw
// blocks are decoded into the A fragments of m16n8k32 s8 mma (the tokens are
// B), and each chunk's int32 tile is scaled into f32 accumulators.
//
// This replaces, for these token counts, dequantizing the weights to 16 bits
// for cuBLASLt (a write and a read of twice the bf16 size on top of the
// blocks) (Tuning::cuda_quant_mmq_tokens; gemm.cc).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backends/cuda/cuda_status.h"
#include "tensor/dtype.h"

namespace ferrite::cuda {

// Lets the kernels use the shared memory they need (call once per process
// before the first launch_quant_mmq, outside any graph capture).
Status quant_mmq_init();

// True when launch_quant_mmq runs this product: a format above, k whole
// blocks, x f32 / bf16 / f16, out f32 / bf16 / f16, and a 16-byte aligned
// weight (rows may start anywhere their predecessor ends).
bool quant_mmq_supported(DType x_dt, DType w_dt, const void* w, int64_t k, DType out_dt);

// Bytes of scratch launch_quant_mmq needs for m tokens of k elements (the
// 8-bit activations and their block scales, padded to whole token tiles).
int64_t quant_mmq_scratch_bytes(int64_t m, int64_t k);

// out [m, n] (row-major, out_dt) (= or +=) x [m, k] (row-major, x_dt) . W^T
// (+ bias [n]); W [n, k] in w_dt blocks; scratch of quant_mmq_scratch_bytes
// (16-byte aligned).
Status launch_quant_mmq(cudaStream_t s, const void* x, DType x_dt, int64_t m, int64_t k,
                        const void* w, DType w_dt, int64_t n, void* out, DType out_dt,
                        bool accumulate, const void* bias, DType bias_dt, void* scratch,
                        int64_t scratch_bytes);

}  // namespace ferrite::cuda
