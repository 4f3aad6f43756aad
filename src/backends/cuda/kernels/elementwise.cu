// Embedding gather, RMS norm, residual add, SiLU product, row gather.
#include <algorithm>

#include "backends/cuda/kernels/cuda_types.cuh"
#include "backends/cuda/kernels/elementwise.cuh"

namespace ferrite::cuda {
namespace {

template <typename TT, typename TO>
__global__ void embedding_kernel(const uint32_t* ids, const TT* table, int64_t vocab,
                                 int64_t hidden, TO* out) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t t = blockIdx.x;
  uint32_t id = ids[t];
  if (id >= vocab) id = 0;  // padding rows of graph buckets may hold stale ids
  const TT* row = table + static_cast<int64_t>(id) * hidden;
  for (int64_t i = threadIdx.x; i < hidden; i += blockDim.x)
    out[t * hidden + i] = from_f<TO>(to_f(row[i]));
}

// The block's sum of every thread's v (warp sums, then the warps' sums by
// warp 0), returned to every thread; partial: 32 floats of shared memory.
__device__ __forceinline__ float block_sum(float v, float* partial) {
  v = warp_sum(v);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    float t = threadIdx.x < (blockDim.x + 31) / 32 ? partial[threadIdx.x] : 0.0f;
    t = warp_sum(t);
    if (threadIdx.x == 0) partial[0] = t;
  }
  __syncthreads();
  return partial[0];
}

template <typename T, typename TW>
__global__ void rms_norm_kernel(const T* x, T* y, const TW* w, int64_t width, float eps,
                                bool zero_centred) {
  pdl_launch_dependents();
  pdl_wait();
  extern __shared__ float row[];
  __shared__ float partial[32];
  const int64_t r = blockIdx.x;
  const T* xr = x + r * width;
  float ss = 0;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    float v = to_f(xr[i]);
    row[i] = v;
    ss += v * v;
  }
  const float inv = rsqrtf(block_sum(ss, partial) / static_cast<float>(width) + eps);
  T* yr = y + r * width;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) {
    float wi = to_f(w[i]);
    yr[i] = from_f<T>(row[i] * inv * (zero_centred ? 1.0f + wi : wi));
  }
}


// rms_norm_kernel for 16-bit activations whose rows are whole 16-byte
// vectors: a thread holds kChunks vectors of 8 in registers (all its loads
// in flight at once) instead of striding over the row 2 bytes a load and
// staging it in shared memory (ncu on the H200: a 64 x 4096 step took 10.4
// us at 8 % issue, a round trip a few elements). Each element's
// arithmetic is rms_norm_kernel's; the sum of squares is added in another
// order (each thread's 8 consecutive elements, then warps in order).
template <typename T, typename TW, int kChunks>
__global__ void rms_norm_vec8_kernel(const T* x, T* y, const TW* w, int64_t width, float eps,
                                     bool zero_centred) {
  pdl_launch_dependents();
  pdl_wait();
  __shared__ float partial[32];
  const int64_t r = blockIdx.x, n8 = width / 8;
  const uint4* xr = reinterpret_cast<const uint4*>(x + r * width);
  float v[kChunks][8];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(c) * blockDim.x;
    if (i < n8) {
      const uint4 u = xr[i];
      unpack_words<T, 8>(&u.x, v[c]);
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) v[c][e] = 0.0f;
    }
  }
  float ss = 0;
#pragma unroll
  for (int c = 0; c < kChunks; ++c)
#pragma unroll
    for (int e = 0; e < 8; ++e) ss += v[c][e] * v[c][e];
  const float inv = rsqrtf(block_sum(ss, partial) / static_cast<float>(width) + eps);
  uint4* yr = reinterpret_cast<uint4*>(y + r * width);
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const int64_t i = threadIdx.x + static_cast<int64_t>(c) * blockDim.x;
    if (i < n8) {
      float wv[8], o[8];
      load8(w + 8 * i, wv);
#pragma unroll
      for (int e = 0; e < 8; ++e) o[e] = v[c][e] * inv * (zero_centred ? 1.0f + wv[e] : wv[e]);
      store_words<T, 8>(yr + i, o);
    }
  }
}

struct AddOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct SiluMulOp {  // silu(gate) * up
  __device__ float operator()(float g, float u) const { return g / (1.0f + expf(-g)) * u; }
};

// Elementwise a (op) b: the residual add (AddOp) and the SiLU product
// (SiluMulOp); for 16-bit T, 8 elements a thread as one 16-byte access each
// (n a multiple of 8, 16-byte aligned operands); the same arithmetic per
// element. The scalar loops moved 2 bytes a load; the SiLU product of a
// 4,096-token Qwen3-8B prefill is [4096, 12288] a layer (300 MB of traffic).
template <typename T, typename Op>
__global__ void binary_vec8_kernel(const uint4* a, const uint4* b, uint4* out, int64_t n8, Op op) {
  pdl_launch_dependents();
  pdl_wait();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n8;
       i += int64_t(gridDim.x) * blockDim.x) {
    const uint4 va = a[i], vb = b[i];
    float fa[8], fb[8], r[8];
    unpack_words<T, 8>(&va.x, fa);
    unpack_words<T, 8>(&vb.x, fb);
#pragma unroll
    for (int e = 0; e < 8; ++e) r[e] = op(fa[e], fb[e]);
    store_words<T, 8>(out + i, r);
  }
}

// out[i] = op(a[i], b[i]) for any float T, one element a thread (grid-stride).
template <typename T, typename Op>
__global__ void binary_kernel(const T* a, const T* b, T* out, int64_t n, Op op) {
  pdl_launch_dependents();
  pdl_wait();
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    out[i] = from_f<T>(op(to_f(a[i]), to_f(b[i])));
}

// Whether binary_vec8_kernel takes n elements at these pointers, and its launch.
bool vec8_ok(DType act, int64_t n, const void* a, const void* b, const void* out) {
  auto al = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return (act == DType::kBF16 || act == DType::kF16) && n % 8 == 0 && al(a) && al(b) && al(out);
}
template <typename Op>
void launch_vec8(cudaStream_t s, DType act, const void* a, const void* b, void* out, int64_t n,
                 Op op) {
  auto go = [&](auto kernel) {
    (void)launch_pdl(kernel, grid_for(n / 8, 256), 256, 0, s, static_cast<const uint4*>(a),
                     static_cast<const uint4*>(b), static_cast<uint4*>(out), n / 8, op);
  };
  if (act == DType::kBF16) go(binary_vec8_kernel<__nv_bfloat16, Op>);
  else go(binary_vec8_kernel<__half, Op>);
}

template <typename T>
__global__ void gather_rows_kernel(const T* src, const int32_t* rows, T* dst, int64_t width) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t s = blockIdx.x;
  const T* row = src + static_cast<int64_t>(rows[s]) * width;
  for (int64_t i = threadIdx.x; i < width; i += blockDim.x) dst[s * width + i] = row[i];
}

// One block a row: the permutation is read once a row, coalesced, and the
// gathered row (at most a few KiB) comes from L1 / L2.
template <typename T>
__global__ void gather_columns_kernel(const T* src, const int32_t* cols, T* dst, int64_t width) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t t = blockIdx.x;
  const T* row = src + t * width;
  for (int64_t c = threadIdx.x; c < width; c += blockDim.x) dst[t * width + c] = row[cols[c]];
}

}  // namespace

Status launch_embedding(cudaStream_t s, const uint32_t* ids, int64_t tokens, const void* table,
                        DType table_dt, int64_t vocab, int64_t hidden, void* out, DType out_dt) {
  if (tokens == 0) return Status::ok();
  bool ok = dispatch_float(table_dt, [&](auto tt) {
    using TT = decltype(tt);
    dispatch_float(out_dt, [&](auto to) {
      using TO = decltype(to);
      (void)launch_pdl(embedding_kernel<TT, TO>, tokens, 256, 0, s, ids, static_cast<const TT*>(table), vocab,
                                                      hidden, static_cast<TO*>(out));
    });
  });
  if (!ok) return bad_dtype("embedding", table_dt);
  return check_launch("embedding");
}

Status launch_rms_norm(cudaStream_t s, const void* x, void* y, DType act, const void* w,
                       DType w_dt, int64_t rows, int64_t width, float eps, bool zero_centred) {
  if (rows == 0) return Status::ok();
  // 16-bit rows of whole 16-byte vectors: rms_norm_vec8_kernel, one to four
  // vectors a thread, up to 1,024 threads a row.
  auto al = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const int64_t n8 = width / 8;
  if ((act == DType::kBF16 || act == DType::kF16) && width % 8 == 0 && n8 <= 4 * 1024 &&
      al(x) && al(y) && al(w) && small_ok(w_dt)) {
    const int threads = static_cast<int>(std::min<int64_t>(1024, (n8 + 31) / 32 * 32));
    const int64_t chunks = (n8 + threads - 1) / threads;
    bool ok = dispatch_float(act, [&](auto ta) {
      using T = decltype(ta);
      if constexpr (sizeof(T) == 2) {
        dispatch_float(w_dt, [&](auto tw) {
          using TW = decltype(tw);
          auto go = [&](auto kernel) {
            (void)launch_pdl(kernel, rows, threads, 0, s, static_cast<const T*>(x),
                             static_cast<T*>(y), static_cast<const TW*>(w), width, eps,
                             zero_centred);
          };
          if (chunks == 1) go(rms_norm_vec8_kernel<T, TW, 1>);
          else if (chunks == 2) go(rms_norm_vec8_kernel<T, TW, 2>);
          else go(rms_norm_vec8_kernel<T, TW, 4>);
        });
      }
    });
    if (!ok) return bad_dtype("rms_norm", act);
    return check_launch("rms_norm");
  }
  const size_t smem = width * sizeof(float);
  if (smem > 96 * 1024) return unsupported("rms_norm: width too large");
  bool ok = dispatch_float(act, [&](auto ta) {
    using T = decltype(ta);
    dispatch_float(w_dt, [&](auto tw) {
      using TW = decltype(tw);
      auto k = rms_norm_kernel<T, TW>;
      if (smem > 48 * 1024)
        cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, 96 * 1024);
      (void)launch_pdl(k, rows, 256, smem, s, static_cast<const T*>(x), static_cast<T*>(y),
                                static_cast<const TW*>(w), width, eps, zero_centred);
    });
  });
  if (!ok) return bad_dtype("rms_norm", act);
  return check_launch("rms_norm");
}

Status launch_add(cudaStream_t s, const void* a, const void* b, void* out, DType act, int64_t n) {
  if (n == 0) return Status::ok();
  if (vec8_ok(act, n, a, b, out)) {
    launch_vec8(s, act, a, b, out, n, AddOp{});
    return check_launch("residual_add");
  }
  bool ok = dispatch_float(act, [&](auto ta) {
    using T = decltype(ta);
    (void)launch_pdl(binary_kernel<T, AddOp>, grid_for(n, 256), 256, 0, s,
                     static_cast<const T*>(a), static_cast<const T*>(b), static_cast<T*>(out), n,
                     AddOp{});
  });
  if (!ok) return bad_dtype("residual_add", act);
  return check_launch("residual_add");
}

Status launch_silu_mul(cudaStream_t s, const void* gate, const void* up, void* out, DType act,
                       int64_t n) {
  if (n == 0) return Status::ok();
  if (vec8_ok(act, n, gate, up, out)) {
    launch_vec8(s, act, gate, up, out, n, SiluMulOp{});
    return check_launch("silu_mul");
  }
  bool ok = dispatch_float(act, [&](auto ta) {
    using T = decltype(ta);
    (void)launch_pdl(binary_kernel<T, SiluMulOp>, grid_for(n, 256), 256, 0, s,
                     static_cast<const T*>(gate), static_cast<const T*>(up),
                     static_cast<T*>(out), n, SiluMulOp{});
  });
  if (!ok) return bad_dtype("silu_mul", act);
  return check_launch("silu_mul");
}

Status launch_gather_rows(cudaStream_t s, const void* src, const int32_t* rows, void* dst,
                          DType act, int64_t count, int64_t width) {
  if (count == 0) return Status::ok();
  bool ok = dispatch_float(act, [&](auto ta) {
    using T = decltype(ta);
    (void)launch_pdl(gather_rows_kernel<T>, count, 256, 0, s, static_cast<const T*>(src), rows,
                                                 static_cast<T*>(dst), width);
  });
  if (!ok) return bad_dtype("gather_rows", act);
  return check_launch("gather_rows");
}

Status launch_gather_columns(cudaStream_t s, const void* src, const int32_t* cols, void* dst,
                             DType act, int64_t rows, int64_t width) {
  if (rows == 0 || width == 0) return Status::ok();
  bool ok = dispatch_float(act, [&](auto ta) {
    using T = decltype(ta);
    (void)launch_pdl(gather_columns_kernel<T>, rows, 256, 0, s, static_cast<const T*>(src), cols,
                     static_cast<T*>(dst), width);
  });
  if (!ok) return bad_dtype("gather_columns", act);
  return check_launch("gather_columns");
}

}  // namespace ferrite::cuda
