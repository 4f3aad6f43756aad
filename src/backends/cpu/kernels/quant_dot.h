// Integer matmul on GGUF block weights (q8_0, q4_0, q4_k, q5_k, q6_k) and on
// u4_g128 (GPTQ / AWQ / compressed-tensors 4-bit, tensor/dtype.h): the fast
// path of matmul_rows (matmul.h) for block weights.
//
//   y[t][o] = sum_i xq[t][i] * W[o][i]
//
// Each activation row is quantized once per call to 8-bit blocks matching
// the weight's block size (32 for q8_0 / q4_0, 128 for u4_g128, 256 for the
// k-quants; one f32 scale d = amax / 127 per block, q =
// round-to-nearest-even(x * 127 / amax), plus the exact integer sums the
// weight offsets, k-quant mins and u4_g128 zero points need), and
// the products are integer dot products on the blocks (AVX-512 VNNI
// vpdpbusd, AVX2 vpmaddubsw, or scalar; chosen at run time by CPU feature
// detection, whatever the compiler flags of the rest of the build).
//
// Numerics (one canonical order, bitwise equal on every ISA, for any thread
// count, tile and batch composition):
//  - k-quants: per 256-block b, the exact integers S1 = sum_j sc_j * dot_j
//    (and S2 = sum_j m_j * bsum_j for q4_k / q5_k; q6_k folds its -32 offset
//    into S1), then acc = fma(dw_b * dx_b, (float)S1, acc) and
//    accm = fma(dmin_b * dx_b, (float)S2, accm) in increasing b;
//    y = acc - accm.
//  - q8_0: per 32-block b the exact integer S_b = sum_i w_i q_i, then
//    acc = fma((float)S_b, dw_b * dx_b, acc) in increasing b; y = acc (so
//    AMX tiles, which only give whole-block integers, compute it too).
//  - q4_0: 16 f32 lanes; blocks go in pairs (2p, 2p + 1), lane l of pair p
//    holds the exact integer sum of 4 elements (block 2p + (l / 4) % 2,
//    elements 16 (l / 8) + 4 (l % 4) .. + 3), acc[l] = fma((float)v,
//    dw * dx, acc[l]) in increasing p; y = the fixed lane tree of simd.h.
//  - u4_g128: 16 f32 lanes; per 128-block b, lane l holds the exact integer
//    sum of code * activation over elements 8l .. 8l + 7 (codes 0..15, the
//    zero point apart): acc[l] = fma((float)v, dw_b * dx_b, acc[l]) and
//    accz = fma((float)(z_b * bsum_b), dw_b * dx_b, accz) in increasing b;
//    y = the lane tree of acc - accz.
//
// Error against the exact product on the dequantized weights (what the
// tests check): |x - dx q| <= dx / 2 per element (dx = amax_b / 127), so
// |y - y_exact| <= sum_b (amax_b / 254) * sum_{i in b} |w_i| plus the f32
// rounding of the combination (a few ulps of sum |w| |x| per block).
#pragma once

#include <cstdint>

#include "base/thread_pool.h"
#include "tensor/dtype.h"

namespace ferrite::cpu {

enum class QuantIsa : int { kScalar = 1, kAvx2 = 2, kAvx512Vnni = 3, kAmx = 4 };

// The best ISA this CPU runs (cpuid; AVX-512 needs F, BW, VL and VNNI; AMX
// needs those, AMX-TILE, AMX-INT8 and the OS's permission for the tile
// data). kAmx is kAvx512Vnni plus AMX-INT8 tiles for k-quant matmuls of 16
// or more tokens: the same integers and f32 steps, so the same bits.
QuantIsa quant_isa_detected();
const char* quant_isa_name(QuantIsa isa);

// The process-wide mode of matmul on block weights (Tuning::cpu_quant_dot,
// Tuning::cpu_quant_isa): `integer` false is the exact path (dequantized
// panels, f32 dots: bitwise the f32 matmul of the dequantized weights);
// `isa` 0 is the detected one, otherwise a QuantIsa (clamped to what the CPU
// runs). Set once at start-up (tests switch it between cases).
void set_quant_matmul_mode(bool integer, int isa);
bool quant_matmul_integer();
QuantIsa quant_matmul_isa();

// The block formats of the integer path (q8_0, q4_0, q4_k, q5_k, q6_k,
// u4_g128); other formats (f8_e4m3_b128) take the exact path.
bool quant_dot_supports(DType w_dtype);

// The integer matmul (arguments as matmul_rows; w_dtype a block format,
// `in` whole blocks). pool == nullptr runs on the calling thread.
void quant_matmul_rows(const float* x, int64_t ldx, int64_t tokens, int64_t in, const void* w,
                       DType w_dtype, int64_t o_begin, int64_t o_end, float* y, int64_t ldy,
                       bool accumulate, ThreadPool* pool, QuantIsa isa);

// The activation quantization of one row as the kernels see it (for tests):
// q (length n, natural order) and d (one per block of the format).
void quantize_activation_row(DType w_dtype, const float* x, int64_t n, int8_t* q, float* d);

}  // namespace ferrite::cpu
