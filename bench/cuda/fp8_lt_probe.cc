// FP8 block-scaled GEMM through cuBLASLt on the H200: which scale layouts it
// reads, whether it is exact to the block-scaled reference, and its speed
// against the bf16 GEMM of the same shape (issue 13: FP8 prefill >= 1.6x
// bf16, "cuBLASLt FP8 where it fits the block scales").
//
// The product is the engine's column-major view (gemm.cc): out^T [n, m] =
// W [n, k] (A, transposed) x X^T [k, m] (B), e4m3 A and B, bf16 out, f32
// compute. X carries one f32 scale per token and 128-element group (the FP8
// checkpoints' dynamic activation scales, CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F);
// W one per 128 x 128 block (their weight_block_size [128, 128],
// CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F) or one per row and 128-element
// group (VEC128_32F: the f8_e4m3_b128 blocks' own granularity, which any
// checkpoint's scales fit). The header of cublasLt.h does not say how the
// scale tensors are laid out, so this tries the candidate orders (below) on a
// small shape against an f64 host reference of the same codes and scales,
// prints each one's largest error against the largest output, and times the
// first exact order of each weight scale mode beside the bf16 GEMM on the
// Qwen3-8B shapes (m tokens x n x k). (The first run, with 5 k-blocks and the
// 128 x 128 scales unpadded, matched no order: PyTorch's _scaled_mm asks for
// the k-block count padded to a multiple of 4.)
//
//   fp8_lt_probe [--m 4096] [--shapes 4096x4096,24576x4096] [--iters 20]
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tensor/dtype.h"

namespace {

using ferrite::bf16_to_f32;
using ferrite::f32_to_bf16;
using ferrite::f32_to_f8e4m3;
using ferrite::f8e4m3_to_f32;

#define CHECK_CUDA(x)                                                                         \
  do {                                                                                        \
    cudaError_t e_ = (x);                                                                     \
    if (e_ != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

// Codes and scales of a row-major [rows, k] matrix, scales per (rb x 128)
// block: rb = 128 (weights, 2D blocks) or 1 (activations, per row group).
struct Quantized {
  std::vector<uint8_t> codes;
  std::vector<float> scales;  // [rows / rb][k / 128], k-block fastest
};

Quantized quantize(const std::vector<float>& v, int64_t rows, int64_t k, int64_t rb) {
  Quantized q;
  q.codes.resize(v.size());
  const int64_t kb = k / 128, nrb = rows / rb;
  q.scales.resize(static_cast<size_t>(nrb * kb));
  for (int64_t r0 = 0; r0 < nrb; ++r0)
    for (int64_t c0 = 0; c0 < kb; ++c0) {
      float amax = 0.0f;
      for (int64_t r = r0 * rb; r < (r0 + 1) * rb; ++r)
        for (int64_t c = c0 * 128; c < (c0 + 1) * 128; ++c)
          amax = std::max(amax, std::fabs(v[r * k + c]));
      const float s = amax > 0.0f ? amax / 448.0f : 1.0f;
      q.scales[r0 * kb + c0] = s;
      for (int64_t r = r0 * rb; r < (r0 + 1) * rb; ++r)
        for (int64_t c = c0 * 128; c < (c0 + 1) * 128; ++c)
          q.codes[r * k + c] = f32_to_f8e4m3(v[r * k + c] / s);
    }
  return q;
}

// The scales [outer][inner] with each outer row padded to a multiple of 4
// entries (padding 1.0: never read by a correct layout, wrong if it is).
std::vector<float> padded_rows(const std::vector<float>& s, int64_t outer, int64_t inner) {
  const int64_t ld = (inner + 3) / 4 * 4;
  std::vector<float> t(static_cast<size_t>(outer * ld), 1.0f);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) t[o * ld + i] = s[o * inner + i];
  return t;
}

// The scales [outer][inner] as [inner][outer] (the other candidate order).
std::vector<float> transposed(const std::vector<float>& s, int64_t outer, int64_t inner) {
  std::vector<float> t(s.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) t[i * outer + o] = s[o * inner + i];
  return t;
}

template <typename T>
T* upload(const std::vector<T>& h) {
  T* d = nullptr;
  CHECK_CUDA(cudaMalloc(&d, std::max<size_t>(16, h.size() * sizeof(T))));
  CHECK_CUDA(cudaMemcpy(d, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice));
  return d;
}

struct Lt {
  cublasLtHandle_t h = nullptr;
  void* ws = nullptr;
  size_t ws_bytes = size_t{64} << 20;
};

// One matmul out^T [n, m] (bf16) = op(A)^T.. as gemm.cc lays it out; fp8 when
// the scale pointers are given, else bf16 operands. Returns the status of
// the first failing call (the heuristic's NOT_SUPPORTED included) or of the
// launches; `ms` the average over `iters` launches after one warm-up.
cublasStatus_t matmul(Lt& lt, bool fp8, int32_t amode, int64_t m, int64_t n, int64_t k,
                      const void* a, const void* b, void* out, const float* a_scale,
                      const float* b_scale, int iters, float* ms) {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;
  cublasStatus_t st = cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  auto set = [&](cublasLtMatmulDescAttributes_t attr, const void* v, size_t sz) {
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulDescSetAttribute(op, attr, v, sz);
  };
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  set(CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
  set(CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
  if (fp8) {
    const int32_t bmode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &amode, sizeof(amode));
    set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &bmode, sizeof(bmode));
    set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof(a_scale));
    set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof(b_scale));
  }
  const cudaDataType_t in = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&la, in, k, n, k);
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&lb, in, k, m, k);
  if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatrixLayoutCreate(&lc, CUDA_R_16BF, n, m, n);
  cublasLtMatmulHeuristicResult_t res{};
  if (st == CUBLAS_STATUS_SUCCESS) {
    cublasLtMatmulPreference_t pref = nullptr;
    cublasLtMatmulPreferenceCreate(&pref);
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                         &lt.ws_bytes, sizeof(lt.ws_bytes));
    int found = 0;
    st = cublasLtMatmulAlgoGetHeuristic(lt.h, op, la, lb, lc, lc, pref, 1, &res, &found);
    if (st == CUBLAS_STATUS_SUCCESS && found == 0) st = CUBLAS_STATUS_NOT_SUPPORTED;
    cublasLtMatmulPreferenceDestroy(pref);
  }
  const float alpha = 1.0f, beta = 0.0f;
  auto run = [&] {
    return cublasLtMatmul(lt.h, op, &alpha, a, la, b, lb, &beta, out, lc, out, lc, &res.algo, lt.ws,
                          lt.ws_bytes, nullptr);
  };
  if (st == CUBLAS_STATUS_SUCCESS) st = run();
  if (st == CUBLAS_STATUS_SUCCESS && iters > 0) {
    cudaEvent_t e0, e1;
    CHECK_CUDA(cudaEventCreate(&e0));
    CHECK_CUDA(cudaEventCreate(&e1));
    CHECK_CUDA(cudaEventRecord(e0));
    for (int i = 0; i < iters && st == CUBLAS_STATUS_SUCCESS; ++i) st = run();
    CHECK_CUDA(cudaEventRecord(e1));
    CHECK_CUDA(cudaEventSynchronize(e1));
    float t = 0.0f;
    CHECK_CUDA(cudaEventElapsedTime(&t, e0, e1));
    *ms = t / static_cast<float>(iters);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
  }
  CHECK_CUDA(cudaDeviceSynchronize());
  if (lc) cublasLtMatrixLayoutDestroy(lc);
  if (lb) cublasLtMatrixLayoutDestroy(lb);
  if (la) cublasLtMatrixLayoutDestroy(la);
  if (op) cublasLtMatmulDescDestroy(op);
  return st;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"fp8_lt_probe: cuBLASLt FP8 with 128x128 weight and 1x128 activation scales"};
  int64_t M = 4096, N = 128, K = 128;  // N, K: the largest shape's
  int iters = 20;
  app.add_option("--m", M, "tokens of the timed product")->capture_default_str();
  app.add_option("--iters", iters, "timed launches")->capture_default_str();
  std::vector<std::string> shape_list = {"4096x4096", "6144x4096", "24576x4096", "4096x12288"};
  app.add_option("--shapes", shape_list, "timed n x k shapes (m = --m)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  std::vector<std::pair<int64_t, int64_t>> shapes;
  for (const std::string& sh : shape_list) {
    long long a = 0, b = 0;
    if (std::sscanf(sh.c_str(), "%lldx%lld", &a, &b) != 2 || a % 128 || b % 128) {
      std::fprintf(stderr, "bad shape %s (n x k, multiples of 128)\n", sh.c_str());
      return 2;
    }
    shapes.emplace_back(a, b);
    N = std::max<int64_t>(N, a);
    K = std::max<int64_t>(K, b);
  }
  if (M % 128 || N % 128 || K % 128) {
    std::fprintf(stderr, "m, n and k must be multiples of 128\n");
    return 2;
  }
  Lt lt;
  if (cublasLtCreate(&lt.h) != CUBLAS_STATUS_SUCCESS) return 1;
  CHECK_CUDA(cudaMalloc(&lt.ws, lt.ws_bytes));
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0.0f, 1.0f);

  // Candidates (weights' scales; activations' scales, one per token and
  // 128-element group):
  //   0-3: 128 x 128 weight blocks (BLK128x128_32F); bit 0 the weights'
  //        scales k-block fastest (0, k-blocks padded to a multiple of 4) or
  //        n-block fastest (1); bit 1 the activations' k-block fastest (0) or
  //        token fastest (1);
  //   4-5: 1 x 128 weight blocks (VEC128_32F, one scale per row and group,
  //        the f8_e4m3_b128 blocks' own granularity): 4 rows fastest with
  //        token-fastest activations, 5 k-block fastest for both.
  const int64_t m = 256, n = 384, k = 640;  // small, uneven block counts
  const int64_t kb = k / 128;
  std::vector<float> w(static_cast<size_t>(n * k)), x(static_cast<size_t>(m * k));
  for (auto& v : w) v = nd(rng) * (1.0f + 3.0f * std::fabs(nd(rng)));  // blocks of unequal range
  for (auto& v : x) v = nd(rng) * (1.0f + 3.0f * std::fabs(nd(rng)));
  const Quantized qx = quantize(x, m, k, 1);
  const char* kNames[6] = {"128x128 weights k-block fastest (padded), activations k-block fastest",
                           "128x128 weights n-block fastest, activations k-block fastest",
                           "128x128 weights k-block fastest (padded), activations token fastest",
                           "128x128 weights n-block fastest, activations token fastest",
                           "1x128 weights row fastest, activations token fastest",
                           "1x128 weights k-block fastest, activations k-block fastest"};
  int exact_blk = -1, exact_vec = -1;
  __nv_bfloat16* dout = nullptr;
  CHECK_CUDA(cudaMalloc(&dout, m * n * 2));
  uint8_t* dx = upload(qx.codes);
  for (int c = 0; c < 6; ++c) {
    const bool vec = c >= 4;
    const int64_t rb = vec ? 1 : 128;
    const Quantized qw = quantize(w, n, k, rb);
    std::vector<float> ws, xs;
    if (!vec) {
      ws = (c & 1) ? transposed(qw.scales, n / 128, kb) : padded_rows(qw.scales, n / 128, kb);
      xs = (c & 2) ? transposed(qx.scales, m, kb) : qx.scales;
    } else {
      ws = c == 4 ? transposed(qw.scales, n, kb) : qw.scales;
      xs = c == 4 ? transposed(qx.scales, m, kb) : qx.scales;
    }
    double mag = 0.0;
    std::vector<double> ref(static_cast<size_t>(m * n));
    for (int64_t t = 0; t < m; ++t)
      for (int64_t r = 0; r < n; ++r) {
        double acc = 0.0;
        for (int64_t i = 0; i < k; ++i)
          acc += double(f8e4m3_to_f32(qw.codes[r * k + i])) * qw.scales[(r / rb) * kb + i / 128] *
                 double(f8e4m3_to_f32(qx.codes[t * k + i])) * qx.scales[t * kb + i / 128];
        ref[t * n + r] = acc;
        mag = std::max(mag, std::fabs(acc));
      }
    uint8_t* dw = upload(qw.codes);
    float* dws = upload(ws);
    float* dxs = upload(xs);
    CHECK_CUDA(cudaMemset(dout, 0, m * n * 2));
    float ms = 0.0f;
    const int32_t amode =
        vec ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    const cublasStatus_t st = matmul(lt, true, amode, m, n, k, dw, dx, dout, dws, dxs, 0, &ms);
    if (st != CUBLAS_STATUS_SUCCESS) {
      std::printf("layout %d (%s): cublasLt status %d\n", c, kNames[c], static_cast<int>(st));
    } else {
      std::vector<uint16_t> got(static_cast<size_t>(m * n));
      CHECK_CUDA(cudaMemcpy(got.data(), dout, got.size() * 2, cudaMemcpyDeviceToHost));
      double err = 0.0;
      for (int64_t t = 0; t < m; ++t)
        for (int64_t r = 0; r < n; ++r)
          err = std::max(err, std::fabs(double(bf16_to_f32(got[t * n + r])) - ref[t * n + r]));
      // bf16 output: 2^-8 of a value; the f32 sums of exact products.
      const bool ok = err <= 8e-3 * mag;
      std::printf("layout %d (%s): largest error %.3e of %.3e %s\n", c, kNames[c], err, mag,
                  ok ? "EXACT" : "wrong");
      int& e = vec ? exact_vec : exact_blk;
      if (ok && e < 0) e = c;
    }
    cudaFree(dw);
    cudaFree(dws);
    cudaFree(dxs);
  }
  cudaFree(dx);
  cudaFree(dout);
  if (exact_blk < 0 && exact_vec < 0) {
    std::printf("no layout matched the reference: nothing timed\n");
    return 1;
  }

  // Timing on the big shapes (values do not matter: random codes, small
  // scales), each exact scale mode beside bf16.
  float* tsw = nullptr;
  float* tsx = nullptr;
  {
    std::vector<float> big(static_cast<size_t>(std::max(M, N) * (K / 128 + 4)), 1e-3f);
    tsw = upload(big);
    tsx = upload(big);
  }
  std::uniform_int_distribution<int> code(0, 0x7E);  // finite e4m3 magnitudes
  for (const auto& [bn, bk] : shapes) {
    const int64_t NN = bn, KK = bk;
    std::vector<uint8_t> cw(static_cast<size_t>(NN * KK)), cx(static_cast<size_t>(M * KK));
    for (auto& v : cw) v = static_cast<uint8_t>(code(rng) | (rng() & 0x80));
    for (auto& v : cx) v = static_cast<uint8_t>(code(rng) | (rng() & 0x80));
    std::vector<uint16_t> bw(static_cast<size_t>(NN * KK)), bx(static_cast<size_t>(M * KK));
    for (auto& v : bw) v = f32_to_bf16(nd(rng));
    for (auto& v : bx) v = f32_to_bf16(nd(rng));
    uint8_t* tw = upload(cw);
    uint8_t* tx = upload(cx);
    uint16_t* tbw = upload(bw);
    uint16_t* tbx = upload(bx);
    void* tout = nullptr;
    CHECK_CUDA(cudaMalloc(&tout, M * NN * 2));
    float ms16 = 0.0f;
    const cublasStatus_t s16 =
        matmul(lt, false, 0, M, NN, KK, tbw, tbx, tout, nullptr, nullptr, iters, &ms16);
    const double flop = 2.0 * M * NN * KK;
    std::printf("m %lld n %lld k %lld: bf16 %s %.1f us (%.0f TFLOP/s)", static_cast<long long>(M),
                static_cast<long long>(NN), static_cast<long long>(KK),
                s16 == CUBLAS_STATUS_SUCCESS ? "ok" : "FAILED", 1e3 * ms16, flop / ms16 / 1e9);
    for (const int c : {exact_blk, exact_vec}) {
      if (c < 0) continue;
      const int32_t amode = c >= 4 ? CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F
                                   : CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
      float ms8 = 0.0f;
      const cublasStatus_t s8 =
          matmul(lt, true, amode, M, NN, KK, tw, tx, tout, tsw, tsx, iters, &ms8);
      std::printf("; fp8 %s (layout %d) %s %.1f us (%.0f TFLOP/s) %.2fx",
                  c >= 4 ? "1x128" : "128x128", c, s8 == CUBLAS_STATUS_SUCCESS ? "ok" : "FAILED",
                  1e3 * ms8, flop / ms8 / 1e9, ms16 / std::max(ms8, 1e-6f));
    }
    std::printf("\n");
    cudaFree(tw);
    cudaFree(tx);
    cudaFree(tbw);
    cudaFree(tbx);
    cudaFree(tout);
  }
  return 0;
}
