#include "backends/cuda/gemm.h"

#include <cublasLt.h>
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "backends/cuda/kernels/fp8_block_gemm.cuh"
#include "backends/cuda/kernels/elementwise.cuh"
#include "backends/cuda/kernels/gemm.cuh"
#include "backends/cuda/kernels/quant_gemm.cuh"
#include "backends/cuda/kernels/quant_mmq.cuh"
#include "backends/cuda/kernels/quant_gemv.cuh"
#include "backends/cuda/kernels/quant_tile.cuh"
#include "backends/cuda/kernels/u4_tile.cuh"

namespace ferrite::cuda {
namespace {

cudaDataType_t cuda_type(DType dt) {
  switch (dt) {
    case DType::kBF16:
      return CUDA_R_16BF;
    case DType::kF16:
      return CUDA_R_16F;
    default:
      return CUDA_R_32F;
  }
}

struct LtPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;
  int heuristic_status = -1;  // cublasLtMatmulAlgoGetHeuristic's, or -1 before it
  int found = 0;              // its candidates
};

using LtKey = std::tuple<int64_t, int64_t, int64_t, int, int, int, int64_t>;

struct LtCache {
  std::mutex mu;
  std::map<LtKey, LtPlan> plans;
};

LtCache& cache() {
  static LtCache* c = new LtCache();  // plans live as long as the process
  return *c;
}

// The block-scaled FP8 products' operand scales (kernels/fp8_block_gemm.cuh).
enum class Fp8Scales { kNone, kRows, kBlocks };  // 16-bit operands; VEC128; BLK128x128

// A new plan (lt_plan below, which caches them).
LtPlan make_lt_plan(BackendState& st, int64_t m, int64_t n, int64_t k, DType act, DType out_dt,
                    bool accumulate, int64_t ldc, Fp8Scales fp8, const void* a_scale,
                    const void* b_scale) {
  LtPlan p;
  auto handle = static_cast<cublasLtHandle_t>(st.lt_handle);
  bool good =
      cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS;
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  good = good && cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta,
                                                sizeof(ta)) == CUBLAS_STATUS_SUCCESS;
  good = good && cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb,
                                                sizeof(tb)) == CUBLAS_STATUS_SUCCESS;
  if (fp8 != Fp8Scales::kNone) {
    const int32_t amode = fp8 == Fp8Scales::kBlocks ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                                                    : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    const int32_t bmode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    good = good && cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &amode,
                                                  sizeof(amode)) == CUBLAS_STATUS_SUCCESS;
    good = good && cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &bmode,
                                                  sizeof(bmode)) == CUBLAS_STATUS_SUCCESS;
    good =
        good && cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale,
                                               sizeof(a_scale)) == CUBLAS_STATUS_SUCCESS;
    good =
        good && cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale,
                                               sizeof(b_scale)) == CUBLAS_STATUS_SUCCESS;
  }
  // Column-major view: out^T (n x m) = W (k x n)^T * x^T (k x m).
  const cudaDataType_t in = fp8 != Fp8Scales::kNone ? CUDA_R_8F_E4M3 : cuda_type(act);
  good = good && cublasLtMatrixLayoutCreate(&p.a, in, k, n, k) == CUBLAS_STATUS_SUCCESS;
  good = good && cublasLtMatrixLayoutCreate(&p.b, in, k, m, k) == CUBLAS_STATUS_SUCCESS;
  good = good &&
         cublasLtMatrixLayoutCreate(&p.c, cuda_type(out_dt), n, m, ldc) == CUBLAS_STATUS_SUCCESS;
  if (good) {
    cublasLtMatmulPreference_t pref = nullptr;
    cublasLtMatmulPreferenceCreate(&pref);
    size_t ws = st.lt_workspace_bytes;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                         sizeof(ws));
    // Skinny products (decode batches) get few output tiles: above 8 rows,
    // among the heuristic's candidates take the first that fills most of the
    // GPU (waves >= 0.75, split-K variants included), else the fullest one.
    cublasLtMatmulHeuristicResult_t res[16];
    int found = 0;
    p.heuristic_status = static_cast<int>(
        cublasLtMatmulAlgoGetHeuristic(handle, p.op, p.a, p.b, p.c, p.c, pref, 16, res, &found));
    p.found = found;
    if (p.heuristic_status == CUBLAS_STATUS_SUCCESS && found > 0) {
      int pick = 0;
      // Measured on the H200 (Qwen3-8B decode): the first choice wins at 8
      // rows, the fullest at 128.
      if (m > 8 && res[0].wavesCount < 0.75f) {
        int fullest = 0;
        pick = -1;
        for (int i = 0; i < found; ++i) {
          if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
          if (res[i].wavesCount > res[fullest].wavesCount) fullest = i;
          if (pick < 0 && res[i].wavesCount >= 0.75f) pick = i;
        }
        if (pick < 0) pick = fullest;
      }
      p.algo = res[pick].algo;
      p.ok = true;
    }
    cublasLtMatmulPreferenceDestroy(pref);
  }
  return p;
}

// out is [m, n] with row stride ldc (n unless a column slice is written).
// fp8 != kNone: e4m3 operands with VEC128 activation scales and the weight
// scales named; the scale pointers are the descriptor's attributes, which
// the caller sets (under cache().mu) before each call. cuBLASLt's heuristic
// finds no algorithm for block-scaled operands without them: a_scale /
// b_scale are set first (measured on the H200: without, every FP8 product
// fell back to the dequantizing path).
const LtPlan* lt_plan(BackendState& st, int64_t m, int64_t n, int64_t k, DType act, DType out_dt,
                      bool accumulate, int64_t ldc, Fp8Scales fp8 = Fp8Scales::kNone,
                      const void* a_scale = nullptr, const void* b_scale = nullptr,
                      std::string* why = nullptr) {
  LtCache& lc = cache();
  std::lock_guard<std::mutex> lock(lc.mu);
  const int act_key = fp8 == Fp8Scales::kNone ? static_cast<int>(act) : -static_cast<int>(fp8);
  LtKey key{m, n, k, act_key, static_cast<int>(out_dt), accumulate ? 1 : 0, ldc};
  auto it = lc.plans.find(key);
  if (it == lc.plans.end())
    it = lc.plans
             .emplace(key, make_lt_plan(st, m, n, k, act, out_dt, accumulate, ldc, fp8, a_scale,
                                        b_scale))
             .first;
  if (why && !it->second.ok)
    *why = fmt::format("no cuBLASLt algorithm for m={} n={} k={} (heuristic status {}, {} found)",
                       m, n, k, it->second.heuristic_status, it->second.found);
  return it->second.ok ? &it->second : nullptr;
}

// Makes the scratch buffer `buf` (`have` bytes) hold at least `bytes`:
// grown on eager steps only (a regrowth drops the captured decode graphs,
// which point into the old buffer); false when it does not and cannot now
// (capturing, or the allocation failed: the caller takes another path).
template <typename T>
Result<bool> ensure_scratch(BackendState& st, T*& buf, int64_t& have, int64_t bytes) {
  if (have >= bytes) return true;
  if (st.capturing) return false;
  if (buf) {
    FERRITE_CUDA_RETURN(cudaStreamSynchronize(st.stream));
    if (st.exec) drop_captured_graphs(st);
    FERRITE_CUDA_RETURN(cudaFree(buf));
    buf = nullptr;
    have = 0;
  }
  void* p = nullptr;
  if (cudaMalloc(&p, bytes) != cudaSuccess) {
    (void)cudaGetLastError();  // an out-of-memory error is not sticky: clear it
    return false;
  }
  buf = static_cast<T*>(p);
  have = bytes;
  return true;
}

int64_t align256(int64_t bytes) { return (bytes + 255) / 256 * 256; }

// Whether the f8_e4m3_b128 weight w [n, k] takes 128x128 scales: checked on
// the device once per weight, on an eager step (a sync); a weight first met
// while a graph is captured takes per-row scales, which fit every weight.
Result<Fp8Scales> fp8_weight_scales(BackendState& st, const void* w, int64_t n, int64_t k) {
  const auto key = std::make_pair(w, n);
  auto it = st.fp8_blk.find(key);
  if (it != st.fp8_blk.end()) return it->second ? Fp8Scales::kBlocks : Fp8Scales::kRows;
  if (st.capturing) return Fp8Scales::kRows;
  if (!st.fp8_check) FERRITE_CUDA_RETURN(cudaMalloc(&st.fp8_check, sizeof(int32_t)));
  FERRITE_RETURN_IF_ERROR(launch_fp8_blk_uniform(st.stream, w, n, k, st.fp8_check));
  int32_t mismatch = 1;
  FERRITE_CUDA_RETURN(cudaMemcpyAsync(&mismatch, st.fp8_check, sizeof(mismatch),
                                      cudaMemcpyDeviceToHost, st.stream));
  FERRITE_CUDA_RETURN(cudaStreamSynchronize(st.stream));
  st.fp8_blk[key] = mismatch == 0;
  return mismatch == 0 ? Fp8Scales::kBlocks : Fp8Scales::kRows;
}

// out[m, n] (= or +=) x[m, k] . W[n, k]^T (+ bias) for f8_e4m3_b128 W on the
// e4m3 tensor cores through cuBLASLt's block-scaled FP8 GEMM
// (kernels/fp8_block_gemm.cuh): x quantized to e4m3 per token and
// 128-element group into st.fp8_act, then per slice of weight rows (whole
// 128-row groups that fit st.dequant, at most Tuning::cuda_dequant_slice_mib)
// the codes and scales repacked and one cuBLASLt call writing its columns of
// out. False (nothing launched) when the types, buffers or cuBLASLt do not
// allow it: the caller takes the dequantizing path.
Result<bool> fp8_lt_product(BackendState& st, const void* x, DType x_dt, int64_t m, int64_t k,
                            const void* w, int64_t n, void* out, DType out_dt, bool accumulate,
                            const void* bias, DType bias_dt) {
  if ((x_dt != DType::kBF16 && x_dt != DType::kF16) || (out_dt != x_dt && out_dt != DType::kF32) ||
      k % 128 != 0) {
    st.fp8_lt_why = "activation / output types or k";
    return false;
  }
  const int64_t act_codes = align256(m * k);
  const uint8_t* act_before = st.fp8_act;
  FERRITE_ASSIGN_OR_RETURN(bool have_act, ensure_scratch(st, st.fp8_act, st.fp8_act_bytes,
                                                         act_codes + 4 * (k / 128) * m));
  if (st.fp8_act != act_before) st.fp8_act_x = nullptr;  // a new buffer holds nothing yet
  if (!have_act) {
    st.fp8_lt_why = "no activation buffer (capturing, or out of memory)";
    return false;
  }
  FERRITE_ASSIGN_OR_RETURN(Fp8Scales mode, fp8_weight_scales(st, w, n, k));
  const bool blk = mode == Fp8Scales::kBlocks;
  auto slice_bytes = [&](int64_t rows) {
    return align256(rows * k) + fp8_weight_scale_bytes(k, rows, blk);
  };
  const int64_t limit = std::max<int64_t>(1, st.dequant_slice_mib) << 20;
  int64_t want_rows = std::max<int64_t>(128, limit / (k + 4 * (k / 128)) / 128 * 128);
  want_rows = std::min(n, want_rows);
  FERRITE_ASSIGN_OR_RETURN(bool grown, ensure_dequant_capacity(st, slice_bytes(want_rows)));
  (void)grown;  // a smaller buffer still takes slices of it
  int64_t slice = want_rows;
  while (slice > 0 && slice_bytes(slice) > st.dequant_bytes)
    slice = slice > 128 ? (slice - 1) / 128 * 128 : 0;
  if (slice <= 0) {
    st.fp8_lt_why = "no slice buffer (capturing, or out of memory)";
    return false;
  }
  auto* codes = static_cast<uint8_t*>(st.dequant);
  float* act_scales = reinterpret_cast<float*>(st.fp8_act + act_codes);
  const LtPlan* full = lt_plan(st, m, slice, k, x_dt, out_dt, accumulate, n, mode,
                               codes + align256(slice * k), act_scales, &st.fp8_lt_why);
  const LtPlan* last = full && n % slice != 0
                           ? lt_plan(st, m, n % slice, k, x_dt, out_dt, accumulate, n, mode,
                                     codes + align256((n % slice) * k), act_scales, &st.fp8_lt_why)
                           : full;
  if (!full || !last) return false;
  if (!(st.fp8_act_same_x && st.fp8_act_x == x && st.fp8_act_m == m && st.fp8_act_k == k)) {
    st.fp8_act_x = nullptr;  // stale until the launch below succeeds
    FERRITE_RETURN_IF_ERROR(
        launch_fp8_quantize_act(st.stream, x, x_dt, m, k, st.fp8_act, act_scales));
    st.fp8_act_x = x;
    st.fp8_act_m = m;
    st.fp8_act_k = k;
    ++st.fp8_act_quantized;
  }
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  const int64_t out_elem = dtype_bytes(out_dt, 1);
  for (int64_t n0 = 0; n0 < n; n0 += slice) {
    const int64_t rows = std::min(slice, n - n0);
    const LtPlan* p = rows == slice ? full : last;
    float* w_scales = reinterpret_cast<float*>(codes + align256(rows * k));
    FERRITE_RETURN_IF_ERROR(
        launch_fp8_repack_rows(st.stream, w, k, n0, rows, blk, codes, w_scales));
    void* o = static_cast<char*>(out) + n0 * out_elem;
    cublasStatus_t cs;
    {
      // The scale pointers are attributes of the shared descriptor.
      std::lock_guard<std::mutex> lock(cache().mu);
      const void* ws = w_scales;
      const void* xs = act_scales;
      cs = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &ws,
                                          sizeof(ws));
      if (cs == CUBLAS_STATUS_SUCCESS)
        cs = cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &xs,
                                            sizeof(xs));
      if (cs == CUBLAS_STATUS_SUCCESS)
        cs = cublasLtMatmul(static_cast<cublasLtHandle_t>(st.lt_handle), p->op, &alpha, codes, p->a,
                            st.fp8_act, p->b, &beta, o, p->c, o, p->c, &p->algo, st.lt_workspace,
                            st.lt_workspace_bytes, st.stream);
    }
    if (cs != CUBLAS_STATUS_SUCCESS)
      return internal_error(fmt::format("cublasLtMatmul (fp8) failed ({}) for m={} n={} k={}",
                                        static_cast<int>(cs), m, rows, k));
  }
  FERRITE_RETURN_IF_ERROR(launch_add_bias(st.stream, out, out_dt, m, n, n, bias, bias_dt));
  ++st.fp8_lt_products;
  return true;
}

// Products on GGUF block weights (q8_0, q4_k, ...; kernels/quant_gemm.cuh):
//  - decode (m <= 8): the weight-streaming GEMV, on 8-bit activation blocks
//    (Tuning::cuda_quant_dot) or on f32 activations; FP8 and 4-bit weights
//    on the tensor cores (Tuning::cuda_quant_mma_fp8 / _u4); shapes whose
//    activations the fused kernels cannot stage on the bf16 tile;
//  - 9 .. Tuning::cuda_u4_tile_tokens bf16 tokens on u4_g128 weights: the
//    Marlin-class 4-bit tile (kernels/u4_tile.cuh);
//  - 9 .. Tuning::cuda_quant_tile_tokens bf16 tokens: the bf16 tensor-core
//    tile that decodes the blocks in registers (kernels/quant_tile.cuh);
//  - larger batches on FP8 weights, from Tuning::cuda_fp8_lt_tokens tokens:
//    e4m3 activations and cuBLASLt's block-scaled FP8 GEMM (fp8_lt_product);
//  - larger bf16 / f16 batches (prefill): slices of weight rows dequantized
//    to the activation type into st.dequant, then cuBLASLt, each slice
//    writing its columns of out (tensor cores at the bf16 rate; the
//    dequantization is one pass over the weight's blocks per call);
//  - otherwise (f32 activations, a graph capture that would need a larger
//    buffer): the tiles that dequantize into shared memory.
// An act-order weight (perm): the fused GEMV gathers x as it stages it; the
// other paths run on x gathered into perm.scratch first.
Status quant_product(BackendState& st, const void* x, DType x_dt, int64_t m, int64_t k,
                     const void* w, DType w_dt, int64_t n, void* out, DType out_dt, bool accumulate,
                     const void* bias, DType bias_dt, InputPerm perm = {}) {
  // Up to 8 tokens: the integer GEMV (fused with the activations'
  // quantization, else after a quantize launch); 9 to 64 tokens the bf16
  // tile, beyond dequantize + cuBLASLt (each the faster there, measured:
  // Tuning::cuda_quant_tile_tokens). Ahead of these, q4_k / q6_k / q8_0
  // products of cuda_quant_mmq_min_tokens to cuda_quant_mmq_tokens take the
  // int8 tile (mmq_takes).
  if (quant_fused_enabled(st, w_dt, m)) {
    const QuantGemvSegment seg{w, out, n};
    QuantGemvArgs a;
    a.x = x;
    a.x_dt = x_dt;
    a.m = m;
    a.k = k;
    a.w_dt = w_dt;
    a.segs = &seg;
    a.count = 1;
    a.out_dt = out_dt;
    a.accumulate = accumulate;
    a.bias = bias;
    a.bias_dt = bias_dt;
    set_gemv_paths(st, a);
    a.input_perm = perm.table;
    if (quant_gemv_fused_supported(a)) return launch_quant_gemv_fused(st.stream, a);
  }
  if (perm.table) {
    if (!perm.scratch || perm.scratch == x)
      return internal_error("an act-order product without its gather buffer");
    FERRITE_RETURN_IF_ERROR(
        launch_gather_columns(st.stream, x, perm.table, perm.scratch, x_dt, m, k));
    x = perm.scratch;
  }
  const bool mmq = mmq_takes(st, w_dt, m) && quant_mmq_supported(x_dt, w_dt, w, m, k, n, out_dt);
  if (!mmq && st.quant_dot && m <= kQuantGemvMaxTokens && m * k <= st.q8_capacity &&
      quant_gemv_q8_supported(w_dt, w, k, out_dt))
    return launch_quant_gemv_q8(st.stream, x, x_dt, m, k, w, w_dt, n, out, out_dt, accumulate, bias,
                                bias_dt, st.q8_x, st.q8_d);
  auto tile_ok = [&] {
    return st.tile_partials && m <= st.quant_tile_tokens &&
           quant_tile_supported(x_dt, x, w_dt, w, k, out_dt);
  };
  const QuantTileScratch scratch = quant_tile_scratch(st);
  if (w_dt == DType::kU4G128 && m > kQuantGemvMaxTokens && m <= st.u4_tile_tokens &&
      st.tile_partials && u4_tile_supported(x_dt, x, w_dt, w, k, out_dt)) {
    ++st.u4_tile_products;
    return launch_u4_tile(st.stream, st.num_sms, x, x_dt, m, k, w, w_dt, n, out, out_dt,
                          accumulate, bias, bias_dt, scratch, st.u4_tile_wgmma,
                          st.u4_tile_stage_steps);
  }
  if (mmq) {
    // An earlier product of the same unchanged rows (not gathered: the
    // gather buffer holds another permutation's rows) left them quantized.
    const int group = quant_mmq_act_group(w_dt);
    const bool held = st.quant_mmq_share_act && st.fp8_act_same_x && !perm.table && st.mmq_x == x && st.mmq_m == m &&
                      st.mmq_k == k && st.mmq_group == group;
    st.mmq_x = nullptr;  // stale until the launch below succeeds
    FERRITE_RETURN_IF_ERROR(launch_quant_mmq(st.stream, st.num_sms, x, x_dt, m, k, w, w_dt, n,
                                             out, out_dt, accumulate, bias, bias_dt, st.mmq,
                                             MmqOptions{st.quant_mmq_waves, !held}));
    if (!perm.table) {
      st.mmq_x = x;
      st.mmq_m = m;
      st.mmq_k = k;
      st.mmq_group = group;
    }
    if (!held) ++st.mmq_quantized;
    return Status::ok();
  }
  if (m <= 8) {
    // A decode product the fused kernels cannot stage (8 tokens of a
    // 12,288-wide FP8 down projection: 196 KiB of x) and no 8-bit GEMV
    // takes: the bf16 tile reads the weights once for all the tokens, where
    // the fast paths are on (the SIMT GEMV below streams them once a token
    // group: 196 against ~40 us on the H200).
    if (quant_fused_enabled(st, w_dt, m) && tile_ok())
      return launch_quant_tile(st.stream, st.num_sms, x, x_dt, m, k, w, w_dt, n, out, out_dt,
                               accumulate, bias, bias_dt, scratch);
    return launch_quant_gemm(st.stream, x, x_dt, m, k, w, w_dt, n, out, out_dt, accumulate, bias,
                             bias_dt);
  }
  if (tile_ok()) {
    return launch_quant_tile(st.stream, st.num_sms, x, x_dt, m, k, w, w_dt, n, out, out_dt,
                             accumulate, bias, bias_dt, scratch);
  }
  if (w_dt == DType::kF8B128 && st.fp8_lt_tokens > 0 && m >= st.fp8_lt_tokens && m >= 16) {
    // cuBLASLt's block-scaled FP8 GEMM takes token counts of 16-multiples
    // only (measured on the H200: 66, 70 and 130 tokens find no algorithm):
    // the first m16 rows there, the last few (x and out are row-major) on
    // the paths of their own count.
    const int64_t m16 = m / 16 * 16;
    FERRITE_ASSIGN_OR_RETURN(bool done, fp8_lt_product(st, x, x_dt, m16, k, w, n, out, out_dt,
                                                       accumulate, bias, bias_dt));
    if (done) {
      if (m16 == m) return Status::ok();
      return quant_product(st, static_cast<const char*>(x) + m16 * dtype_bytes(x_dt, k), x_dt,
                           m - m16, k, w, w_dt, n,
                           static_cast<char*>(out) + m16 * dtype_bytes(out_dt, n), out_dt,
                           accumulate, bias, bias_dt);
    }
  }
  const bool lt_types = (x_dt == DType::kBF16 || x_dt == DType::kF16) &&
                        (out_dt == x_dt || out_dt == DType::kF32) &&
                        !(accumulate && out_dt != x_dt) && k % dtype_block_elems(w_dt) == 0;
  if (lt_types) {
    // The dequantized-rows buffer: at most Tuning::cuda_dequant_slice_mib
    // (larger matrices go in slices of rows, 128 at least), grown only on
    // eager steps.
    const int64_t row_bytes = k * 2;
    const int64_t slice_bytes =
        std::max(std::max<int64_t>(1, st.dequant_slice_mib) << 20, 128 * row_bytes);
    const int64_t want = std::min(n * row_bytes, slice_bytes);
    FERRITE_ASSIGN_OR_RETURN(bool grown, ensure_dequant_capacity(st, want));
    (void)grown;  // a smaller buffer still takes slices of it
    // Slices of whole 128-row groups (cuBLASLt tiles) that fit the buffer.
    const int64_t slice =
        std::min(n, std::min(st.dequant_bytes, slice_bytes) / row_bytes / 128 * 128);
    // cuBLASLt plans for the full slice and the last one (else the tile
    // kernel below does the whole product).
    const LtPlan* full = slice >= 128 || slice == n
                             ? lt_plan(st, m, slice, k, x_dt, out_dt, accumulate, n)
                             : nullptr;
    const LtPlan* last =
        full && n % slice != 0 ? lt_plan(st, m, n % slice, k, x_dt, out_dt, accumulate, n) : full;
    if (full && last) {
      const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
      const int64_t out_elem = dtype_bytes(out_dt, 1);
      for (int64_t n0 = 0; n0 < n; n0 += slice) {
        const int64_t rows = std::min(slice, n - n0);
        const LtPlan* p = rows == slice ? full : last;
        FERRITE_RETURN_IF_ERROR(
            launch_quant_dequant_rows(st.stream, w, w_dt, k, n0, rows, st.dequant, x_dt));
        void* o = static_cast<char*>(out) + n0 * out_elem;
        cublasStatus_t cs = cublasLtMatmul(
            static_cast<cublasLtHandle_t>(st.lt_handle), p->op, &alpha, st.dequant, p->a, x, p->b,
            &beta, o, p->c, o, p->c, &p->algo, st.lt_workspace, st.lt_workspace_bytes, st.stream);
        if (cs != CUBLAS_STATUS_SUCCESS)
          return internal_error(fmt::format("cublasLtMatmul failed ({}) for m={} n={} k={}",
                                            static_cast<int>(cs), m, rows, k));
        if (n0 + rows == n) return launch_add_bias(st.stream, out, out_dt, m, n, n, bias, bias_dt);
      }
    }
  }
  return launch_quant_gemm(st.stream, x, x_dt, m, k, w, w_dt, n, out, out_dt, accumulate, bias,
                           bias_dt);
}

}  // namespace

bool quant_fused_enabled(const BackendState& st, DType w_dt, int64_t m) {
  return st.quant_dot && st.quant_fused && m <= kQuantGemvMaxTokens && dtype_is_quantized(w_dt) &&
         (w_dt != DType::kF8B128 || st.quant_fused_fp8) && !mmq_takes(st, w_dt, m);
}

bool mmq_takes(const BackendState& st, DType w_dt, int64_t m) {
  return st.quant_dot && st.mmq.xq && m >= st.quant_mmq_min_tokens && m <= st.quant_mmq_tokens &&
         quant_mmq_format(w_dt);
}

void set_gemv_paths(const BackendState& st, QuantGemvArgs& a) {
  a.stream = a.m <= st.quant_stream_tokens;
  a.stream_blocks = static_cast<int>(st.quant_stream_blocks);
  a.stream_item_steps = static_cast<int>(st.quant_stream_item_steps);
  // Room for the cluster attention's blocks (Tuning::cuda_decode_colocate
  // 2): the projections beside it (st.gemv_beside_attention, set by the
  // attention provider). Not on q8_0 weights: there the GEMVs' lost warps
  // and ring cost more than the attention gains (H200, Qwen3-8B Q8_0 b1
  // 332.3 against 315.8 tokens/s with room in every one-token GEMV;
  // Q4_K_M 400.0 against 427.4).
  a.stream_attention_room = st.gemv_beside_attention && a.w_dt != DType::kQ8_0;
  const int64_t from = a.w_dt == DType::kF8B128   ? st.quant_mma_fp8
                       : a.w_dt == DType::kU4G128 ? st.quant_mma_u4
                                                  : 0;
  a.mma = from > 0 && a.m >= from;
  a.mma_smem_kib = static_cast<int>(st.quant_mma_smem_kib);
  a.mma_a8 = st.quant_mma_fp8_act;
}

Result<bool> ensure_dequant_capacity(BackendState& st, int64_t bytes) {
  return ensure_scratch(st, st.dequant, st.dequant_bytes, bytes);
}

Result<bool> ensure_q8_capacity(BackendState& st, int64_t elems) {
  if (st.q8_capacity >= elems) return true;
  if (st.capturing) return false;
  FERRITE_CUDA_RETURN(cudaStreamSynchronize(st.stream));
  if (st.exec) drop_captured_graphs(st);  // they point into the old buffers
  if (st.q8_x) cudaFree(st.q8_x);
  if (st.q8_d) cudaFree(st.q8_d);
  st.q8_x = nullptr;
  st.q8_d = nullptr;
  st.q8_capacity = 0;
  const int64_t cap = (elems + 31) / 32 * 32;
  FERRITE_CUDA_RETURN(cudaMalloc(&st.q8_x, cap));
  FERRITE_CUDA_RETURN(cudaMalloc(&st.q8_d, cap / 32 * sizeof(float)));
  st.q8_capacity = cap;
  return true;
}

Status gemm_init(BackendState& st) {
  cublasLtHandle_t h = nullptr;
  if (cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS) return internal_error("cublasLtCreate failed");
  st.lt_handle = h;
  st.lt_workspace_bytes = 32ull << 20;
  FERRITE_CUDA_RETURN(cudaMalloc(&st.lt_workspace, st.lt_workspace_bytes));
  // 8-bit activation blocks of a decode GEMV: 8 rows of up to 64 Ki (a
  // fixed buffer, so that decode graphs can point into it).
  st.q8_capacity = kQuantGemvMaxTokens * kQuantScratchMaxK;
  FERRITE_CUDA_RETURN(cudaMalloc(&st.q8_x, st.q8_capacity));
  FERRITE_CUDA_RETURN(cudaMalloc(&st.q8_d, st.q8_capacity / 32 * sizeof(float)));
  // The MoE norm + router launch's arrival counter (Tuning::
  // cuda_moe_route_in_router): fixed, so that decode graphs can point at it.
  FERRITE_CUDA_RETURN(cudaMalloc(&st.moe_route_counter, sizeof(int32_t)));
  FERRITE_CUDA_RETURN(cudaMemset(st.moe_route_counter, 0, sizeof(int32_t)));
  if (st.quant_mmq_tokens > kQuantGemvMaxTokens) FERRITE_RETURN_IF_ERROR(quant_mmq_alloc(&st.mmq));
  const bool u4_tile = st.u4_tile_tokens > kQuantGemvMaxTokens;
  if (st.quant_tile_tokens > kQuantGemvMaxTokens || u4_tile) {
    FERRITE_RETURN_IF_ERROR(quant_tile_init());
    if (u4_tile) FERRITE_RETURN_IF_ERROR(u4_tile_init());
    st.tile_partial_floats = std::max(quant_tile_partial_floats(st.num_sms),
                                      u4_tile ? u4_tile_partial_floats(st.num_sms) : int64_t{0});
    st.tile_counter_count = kQuantTileCounters;
    FERRITE_CUDA_RETURN(cudaMalloc(&st.tile_partials, st.tile_partial_floats * sizeof(float)));
    FERRITE_CUDA_RETURN(cudaMalloc(&st.tile_counters, st.tile_counter_count * sizeof(int32_t)));
    FERRITE_CUDA_RETURN(cudaMemset(st.tile_counters, 0, st.tile_counter_count * sizeof(int32_t)));
  }
  return Status::ok();
}

void gemm_shutdown(BackendState& st) {
  if (st.lt_workspace) cudaFree(st.lt_workspace);
  if (st.q8_x) cudaFree(st.q8_x);
  if (st.q8_d) cudaFree(st.q8_d);
  quant_mmq_free(&st.mmq);
  if (st.moe_route_counter) cudaFree(st.moe_route_counter);
  st.moe_route_counter = nullptr;
  if (st.dequant) cudaFree(st.dequant);
  if (st.fp8_act) cudaFree(st.fp8_act);
  if (st.fp8_check) cudaFree(st.fp8_check);
  st.fp8_act = nullptr;
  st.fp8_act_bytes = 0;
  st.fp8_act_x = nullptr;
  st.fp8_check = nullptr;
  st.fp8_blk.clear();
  if (st.tile_partials) cudaFree(st.tile_partials);
  if (st.tile_counters) cudaFree(st.tile_counters);
  st.tile_partials = nullptr;
  st.tile_counters = nullptr;
  st.q8_x = nullptr;
  st.q8_d = nullptr;
  st.dequant = nullptr;
  st.dequant_bytes = 0;
  if (st.lt_handle) cublasLtDestroy(static_cast<cublasLtHandle_t>(st.lt_handle));
  st.lt_workspace = nullptr;
  st.lt_handle = nullptr;
}

QuantTileScratch quant_tile_scratch(const BackendState& st) {
  return {st.tile_partials, st.tile_partial_floats, st.tile_counters, st.tile_counter_count};
}

Result<InputPerm> input_perm_of(const TensorView& w, int64_t rows, void* scratch) {
  if (!w.input_perm) return InputPerm{};
  if (w.perm_rows != rows)
    return unsupported(fmt::format(
        "act-order weight of {} rows with a permutation per {} rows: the CUDA products take "
        "one permutation per weight",
        rows, w.perm_rows));
  if (!scratch) return internal_error("act-order weight without a gather buffer");
  return InputPerm{w.input_perm, scratch};
}

Status gemm(BackendState& st, const void* x, DType x_dt, int64_t m, int64_t k, const void* w,
            DType w_dt, int64_t n, void* out, DType out_dt, bool accumulate, const void* bias,
            DType bias_dt, InputPerm perm) {
  if (m == 0 || n == 0) return Status::ok();
  if (dtype_is_quantized(w_dt))
    return quant_product(st, x, x_dt, m, k, w, w_dt, n, out, out_dt, accumulate, bias, bias_dt,
                         perm);
  if (perm.table) return internal_error("an input permutation on a float weight");
  const bool tensor_types = x_dt == w_dt && (x_dt == DType::kBF16 || x_dt == DType::kF16) &&
                            (out_dt == x_dt || out_dt == DType::kF32) && !bias;
  if (tensor_types && gemv_supported(m, k, x_dt, w_dt, out_dt))
    return launch_gemv(st.stream, x, m, k, w, n, out, x_dt, out_dt, accumulate);
  if (tensor_types && !(accumulate && out_dt != x_dt)) {
    if (const LtPlan* p = lt_plan(st, m, n, k, x_dt, out_dt, accumulate, n)) {
      const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
      cublasStatus_t s = cublasLtMatmul(static_cast<cublasLtHandle_t>(st.lt_handle), p->op, &alpha,
                                        w, p->a, x, p->b, &beta, out, p->c, out, p->c, &p->algo,
                                        st.lt_workspace, st.lt_workspace_bytes, st.stream);
      if (s != CUBLAS_STATUS_SUCCESS)
        return internal_error(fmt::format("cublasLtMatmul failed ({}) for m={} n={} k={}",
                                          static_cast<int>(s), m, n, k));
      return Status::ok();
    }
  }
  return launch_gemm_simt(st.stream, x, x_dt, m, k, w, w_dt, n, out, out_dt, accumulate, bias,
                          bias_dt);
}

}  // namespace ferrite::cuda
