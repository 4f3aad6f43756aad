// Device-side helpers shared by the .cu files: element conversions and the
// dtype dispatch of launchers (f32, bf16, f16 only).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "backends/cuda/cuda_status.h"
#include "tensor/dtype.h"

#include <cstdlib>
#include <utility>

namespace ferrite::cuda {

__device__ __forceinline__ float to_f(float v) { return v; }
__device__ __forceinline__ float to_f(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_f(__half v) { return __half2float(v); }

template <typename T> __device__ __forceinline__ T from_f(float v);
template <> __device__ __forceinline__ float from_f<float>(float v) { return v; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <> __device__ __forceinline__ __half from_f<__half>(float v) { return __float2half_rn(v); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// 16-bit values (bf16, f16) as raw words: bits_to_f of one, D contiguous
// ones loaded as one access (load_words) and unpacked to f32.
__device__ __forceinline__ float bits_to_f(uint32_t h, __nv_bfloat16) {
  return __uint_as_float(h << 16);
}
__device__ __forceinline__ float bits_to_f(uint32_t h, __half) {
  return __half2float(__ushort_as_half(static_cast<unsigned short>(h)));
}

// D contiguous elements (D = 2, 4 or 8 of a 2-byte type) as D/2 words.
template <int D>
__device__ __forceinline__ void load_words(const void* p, uint32_t* w) {
  if constexpr (D == 2) {
    w[0] = *static_cast<const uint32_t*>(p);
  } else if constexpr (D == 4) {
    const uint2 v = *static_cast<const uint2*>(p);
    w[0] = v.x;
    w[1] = v.y;
  } else {
    const uint4 v = *static_cast<const uint4*>(p);
    w[0] = v.x;
    w[1] = v.y;
    w[2] = v.z;
    w[3] = v.w;
  }
}
template <typename T, int D>
__device__ __forceinline__ void unpack_words(const uint32_t* w, float* f) {
#pragma unroll
  for (int i = 0; i < D / 2; ++i) {
    f[2 * i] = bits_to_f(w[i] & 0xffffu, T{});
    f[2 * i + 1] = bits_to_f(w[i] >> 16, T{});
  }
}
// The inverse: D values rounded to T (bf16 / f16), packed two a word, stored
// as one access.
__device__ __forceinline__ uint32_t f_to_bits(float v, __nv_bfloat16) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(v));
}
__device__ __forceinline__ uint32_t f_to_bits(float v, __half) {
  return __half_as_ushort(__float2half_rn(v));
}
template <typename T, int D>
__device__ __forceinline__ void store_words(void* p, const float* f) {
  uint32_t w[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) w[i] = f_to_bits(f[2 * i], T{}) | (f_to_bits(f[2 * i + 1], T{}) << 16);
  if constexpr (D == 2) {
    *static_cast<uint32_t*>(p) = w[0];
  } else if constexpr (D == 4) {
    *static_cast<uint2*>(p) = make_uint2(w[0], w[1]);
  } else {
    *static_cast<uint4*>(p) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// Small weights (norms, biases, gates) of any float type, passed to
// kernels as a type code: 0 f32, 1 bf16, 2 f16. load_any_bits and
// any_bits_to_f are its two halves, for a kernel that issues the load long
// before it needs the value (no instruction waits on the raw bits; 0 reads
// as 0.0 in every type).
__device__ __forceinline__ uint32_t load_any_bits(const void* p, int dt, int64_t i) {
  if (dt == 1 || dt == 2) return static_cast<const uint16_t*>(p)[i];
  return static_cast<const uint32_t*>(p)[i];
}
__device__ __forceinline__ float any_bits_to_f(uint32_t b, int dt) {
  if (dt == 1) return __uint_as_float(b << 16);
  if (dt == 2) return __half2float(__ushort_as_half(static_cast<unsigned short>(b)));
  return __uint_as_float(b);
}
__device__ __forceinline__ float load_any(const void* p, int dt, int64_t i) {
  return any_bits_to_f(load_any_bits(p, dt, i), dt);
}
// 8 weights of type TW (f32 / bf16 / f16) at p, 16-byte aligned, through
// the read-only cache (router rows, norm weights).
template <typename TW>
__device__ __forceinline__ void load8(const TW* p, float (&f)[8]) {
  if constexpr (sizeof(TW) == 4) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(p));
    const float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
  } else {
    const uint4 u = __ldg(reinterpret_cast<const uint4*>(p));
    unpack_words<TW, 8>(&u.x, f);
  }
}

// out[i] = v in the type of code dt (0 f32, 1 bf16, 2 f16): the bf16 tile's
// epilogue for outputs of any float type (an accumulating caller loads the
// old values first, load_any, so that the loads are not each behind a store).
__device__ __forceinline__ void store_any(void* out, int dt, int64_t i, float v) {
  if (dt == 1)
    static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(v);
  else if (dt == 2)
    static_cast<__half*>(out)[i] = __float2half_rn(v);
  else
    static_cast<float*>(out)[i] = v;
}
inline int dt_code(DType dt) { return dt == DType::kBF16 ? 1 : dt == DType::kF16 ? 2 : 0; }
inline bool small_ok(DType dt) {
  return dt == DType::kF32 || dt == DType::kBF16 || dt == DType::kF16;
}

// Element offset of (position pos, KV head kvh) of sequence seq in a paged
// K or V cache [pages, page_size, nkv, hd], through the step's block tables.
__device__ __forceinline__ int64_t paged_kv_offset(const StepMeta& meta, int32_t seq, int32_t pos,
                                                   int32_t page_size, int32_t nkv, int32_t hd,
                                                   int32_t kvh) {
  const int32_t page = meta.block_tables[meta.seq_block_off[seq] + pos / page_size];
  return ((static_cast<int64_t>(page) * page_size + pos % page_size) * nkv + kvh) * hd;
}

// Blocks of `threads` for a grid-stride loop over n elements (1 .. 8192).
inline int grid_for(int64_t n, int threads) {
  const int64_t b = (n + threads - 1) / threads;
  return static_cast<int>(b < 8192 ? (b < 1 ? 1 : b) : 8192);
}

// Calls f(T{}) with T the C++ type of dt; false for other dtypes.
template <typename F>
bool dispatch_float(DType dt, F&& f) {
  switch (dt) {
    case DType::kF32: f(float{}); return true;
    case DType::kBF16: f(__nv_bfloat16{}); return true;
    case DType::kF16: f(__half{}); return true;
    default: return false;
  }
}

// --- Programmatic dependent launch (sm_90) --------------------------------
// A kernel launched with launch_pdl() may start while the previous kernel of
// the stream is still finishing, so the ~2 us drain / launch gap between
// two decode kernels (hundreds per step) overlaps with useful work. Rules
// for such a kernel:
//  - call pdl_wait() in every thread before touching global memory that an
//    earlier kernel writes or reads (it returns once the previous grid has
//    completed and its writes are visible); only read-only data (weights)
//    may be read before it;
//  - call it before any early return: a grid that completes without waiting
//    would let the next kernel run ahead of the one before it;
//  - pdl_launch_dependents() lets the next kernel be scheduled as soon as
//    every block of this one has started (it still waits in its pdl_wait).
// Both are no-ops when the kernel was launched normally.
//
// Only the weight-streaming GEMVs are launched with PDL (launch_pdl_weights);
// launch_pdl launches normally. Settled on the H200 (docs/perf-log.md,
// bench b1 / b8 / b128): PDL on the GEMVs lifts Qwen3-0.6B batch 1 by 11 %
// and is neutral on 8B; on every small kernel as well it cost 3-6 % at
// batch 1-8 and 14 % at 0.6B b128. (The kernels keep their pdl_wait() /
// pdl_launch_dependents() calls: no-ops without the attribute.)
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

template <typename... KArgs, typename... Args>
cudaError_t launch_maybe_pdl(bool pdl, void (*kernel)(KArgs...), dim3 grid, dim3 block,
                             size_t smem, cudaStream_t s, Args&&... args) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = pdl ? 1 : 0;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, kernel, static_cast<KArgs>(args)...);
}

// kernel<<<grid, block, smem, s>>>(args...), allowed to overlap the previous
// kernel's tail (see above).
template <typename... KArgs, typename... Args>
cudaError_t launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                       cudaStream_t s, Args&&... args) {
  return launch_maybe_pdl(false, kernel, grid, block, smem, s,
                          std::forward<Args>(args)...);
}
// The same for kernels that stream weights before their pdl_wait().
template <typename... KArgs, typename... Args>
cudaError_t launch_pdl_weights(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem,
                               cudaStream_t s, Args&&... args) {
  return launch_maybe_pdl(true, kernel, grid, block, smem, s,
                          std::forward<Args>(args)...);
}

inline Status bad_dtype(const char* what, DType dt) {
  return unsupported(std::string(what) + ": dtype " + std::string(dtype_name(dt)));
}

}  // namespace ferrite::cuda
