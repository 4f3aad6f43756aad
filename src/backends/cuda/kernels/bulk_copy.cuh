// Bulk copies from global into shared memory through the Hopper copy
// engine (cp.async.bulk, sm_90), completed on mbarriers: a thread issues a
// contiguous span of any 16-byte multiple in one instruction, the bytes
// land without passing through registers, and waiters sleep on the barrier
// until the announced byte count has arrived. Device code only; every
// address 16-byte aligned, sizes multiples of 16.
//
// A ring slot's life: mbar_expect_tx(bar, bytes) + bulk_copy_g2s(..., bar)
// by one thread; mbar_wait(bar, phase) by the readers; before the slot is
// refilled, the readers' generic loads are ordered before the copy
// engine's writes with fence_proxy_async_shared() in the issuing thread
// (after a barrier that the readers passed).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace ferrite::cuda {

__device__ __forceinline__ uint32_t shared_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t arrivals) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(shared_addr(bar)), "r"(arrivals)
               : "memory");
#endif
}
// After mbar_init, before a barrier is used by the copy engine.
__device__ __forceinline__ void mbar_init_fence() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
#endif
}
// One arrival that also announces `bytes` of copies completing on `bar`.
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(shared_addr(bar)),
               "r"(bytes)
               : "memory");
#endif
}
// Returns once the phase of parity `parity` of `bar` has completed.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const uint32_t addr = shared_addr(bar);
  uint32_t done = 0;
  do {
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(done)
        : "r"(addr), "r"(parity)
        : "memory");
  } while (!done);
#endif
}
__device__ __forceinline__ void fence_proxy_async_shared() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}
// An L2 policy for data read once per step (streamed weights): evicted
// first, so the KV cache and activations stay in L2.
__device__ __forceinline__ uint64_t l2_evict_first_policy() {
  uint64_t p = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
#endif
  return p;
}
// `bytes` (a multiple of 16) from global src to shared dst, both 16-byte
// aligned, completing on `bar`.
__device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, uint32_t bytes,
                                              uint64_t* bar, uint64_t policy) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint "
      "[%0], [%1], %2, [%3], %4;" ::"r"(shared_addr(dst)),
      "l"(__cvta_generic_to_global(src)), "r"(bytes), "r"(shared_addr(bar)), "l"(policy)
      : "memory");
#endif
}

// The same with the default L2 policy (data that later steps read again).
__device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, uint32_t bytes,
                                              uint64_t* bar) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(shared_addr(dst)),
      "l"(__cvta_generic_to_global(src)), "r"(bytes), "r"(shared_addr(bar))
      : "memory");
#endif
}

}  // namespace ferrite::cuda
