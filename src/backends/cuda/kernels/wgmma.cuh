// Hopper's warpgroup MMA (wgmma, sm_90a PTX) for the kernels that use it
// (u4_tile.cu): a warpgroup (4 consecutive warps, 128 threads) issues
// m64nNk16 bf16 products asynchronously; A (64 x 16) from registers, B (16 x
// N) from shared memory through a matrix descriptor, f32 accumulators.
//
// Register fragments (per warp w of the warpgroup, lane g = l / 4, tq = l % 4):
//   A: a[0] (row 16 w + g, k 2 tq..2 tq + 1), a[1] (row + 8, ..), a[2] (row
//      16 w + g, k 2 tq + 8..), a[3] (row + 8, ..): mma.sync m16n8k16's A;
//   D: d[4 j + 0..1] (row 16 w + g, n 8 j + 2 tq..+1), d[4 j + 2..3] (row +
//      8, ..): mma.sync's C per n8 tile j.
// B is K-major (each token's k contiguous) without swizzle: 8 x 16-byte
// "core matrices" (8 n rows of 8 k elements, 128 contiguous bytes); the
// descriptor gives the byte distance between the two core matrices of a k16
// (LBO, along k) and between consecutive 8-row groups (SBO, along n).
//
// Ordering rules the callers follow (PTX ISA, wgmma): wgmma_fence() after
// writing A or accumulator registers and before the wgmma reading them; a
// generic-proxy write of B (cp.async) is made visible to the wgmma's async
// proxy by fence_proxy_async() after the copy completes and before the
// barrier; registers a wgmma reads or writes are not touched until a
// wgmma_wait<> covers it (fence_operand() keeps the compiler from reusing
// or moving them across that wait).
#pragma once

#include <cstdint>

#include "backends/cuda/kernels/mma.cuh"

namespace ferrite::cuda::wg {

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FERRITE_WGMMA 1
#endif

__device__ __forceinline__ void fence() {
#ifdef FERRITE_WGMMA
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void commit() {
#ifdef FERRITE_WGMMA
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void wait() {
#ifdef FERRITE_WGMMA
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}
__device__ __forceinline__ void fence_proxy_async() {
#ifdef FERRITE_WGMMA
  asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// The compiler sees r read and written here: it neither reuses its register
// nor moves its uses across this point.
__device__ __forceinline__ void fence_operand(uint32_t& r) { asm volatile("" : "+r"(r)::"memory"); }
__device__ __forceinline__ void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// A K-major, unswizzled shared-memory descriptor (16-byte aligned start).
__device__ __forceinline__ uint64_t descriptor(const void* smem, uint32_t lbo, uint32_t sbo) {
  const uint32_t a = smem_addr(smem);
  return static_cast<uint64_t>((a & 0x3FFFFu) >> 4) | (static_cast<uint64_t>(lbo >> 4) << 16) |
         (static_cast<uint64_t>(sbo >> 4) << 32);
}

// d (+)= A (64 x 16, registers) B (16 x N, descriptor), bf16 in, f32 out.
template <int N>
__device__ __forceinline__ void mma_rs_bf16(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t b);

template <>
__device__ __forceinline__ void mma_rs_bf16<16>(float (&d)[8], const uint32_t (&a)[4], uint64_t b) {
#ifdef FERRITE_WGMMA
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7}, "
      "{%8, %9, %10, %11}, %12, 1, 1, 1, 0;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
#else
  __trap();
#endif
}

template <>
__device__ __forceinline__ void mma_rs_bf16<32>(float (&d)[16], const uint32_t (&a)[4], uint64_t b) {
#ifdef FERRITE_WGMMA
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
      "{%16, %17, %18, %19}, %20, 1, 1, 1, 0;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
#else
  __trap();
#endif
}

template <>
__device__ __forceinline__ void mma_rs_bf16<64>(float (&d)[32], const uint32_t (&a)[4], uint64_t b) {
#ifdef FERRITE_WGMMA
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, 1, 1, 1, 0;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
#else
  __trap();
#endif
}

template <>
__device__ __forceinline__ void mma_rs_bf16<128>(float (&d)[64], const uint32_t (&a)[4], uint64_t b) {
#ifdef FERRITE_WGMMA
  asm volatile(
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, 1, 1, 1, 0;\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b));
#else
  __trap();
#endif
}


}  // namespace ferrite::cuda::wg
