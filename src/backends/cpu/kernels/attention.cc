#include "backends/cpu/kernels/attention.h"

#include <algorithm>

#include "backends/cpu/kernels/simd.h"
#include "backends/cpu/kernels/vec.h"
#include "base/check.h"

namespace ferrite::cpu {
namespace {

using simd::V16;

// Walks the rows of a paged cache in increasing positions.
struct RowCursor {
  const PagedRows& r;
  int64_t page = 0, in_page = 0;
  const char* ptr;
  explicit RowCursor(const PagedRows& rows) : r(rows), ptr(rows.row(0)) {}
  void next() {
    if (++in_page == r.page_size) {
      in_page = 0;
      ++page;
      ptr = r.base + r.block_table[page] * r.page_size * r.row_bytes + r.head_offset;
    } else {
      ptr += r.row_bytes;
    }
  }
};

// Scores of NQ queries against keys p0 .. p0 + nk - 1 (nk <= 4; the missing
// keys repeat the last one and are not stored): srow[i][p] = scale * the
// canonical dot (lane j takes elements j mod 16 in increasing order, then
// the tree of simd::reduce).
template <typename WL, int NQ>
void score_tile(const float* const* q, RowCursor& kc, int64_t hd, float scale, int64_t p0, int nk,
                bool more, float* const* srow) {
  using T = typename WL::T;
  const T* k[4];
  for (int j = 0; j < 4; ++j) {
    k[j] = reinterpret_cast<const T*>(kc.ptr);
    if (j + 1 < nk) kc.next();
  }
  if (more) kc.next();  // to p0 + 4, the next tile's first key
  V16 acc[4][NQ];
  for (int j = 0; j < 4; ++j)
    for (int i = 0; i < NQ; ++i) acc[j][i] = simd::zero();
  for (int64_t d = 0; d < hd; d += 16) {
    V16 qv[NQ];
    for (int i = 0; i < NQ; ++i) qv[i] = simd::F32::load(q[i] + d);
    for (int j = 0; j < 4; ++j) {
      const V16 kv = WL::load(k[j] + d);
      for (int i = 0; i < NQ; ++i) acc[j][i] = simd::fma(qv[i], kv, acc[j][i]);
    }
  }
#if defined(FERRITE_KERNELS_AVX512)
  if constexpr (NQ == 4) {
    // The 16 trees at once: every addition pairs the same partial sums as
    // simd::reduce ((j, j+8), (j, j+4), (j, j+2), (0, 1)); lane 4 i + j of
    // the result is the tree of acc[j][i].
    __m512 a[16], v[8], w[4], x[2];
    for (int j = 0; j < 4; ++j)
      for (int i = 0; i < 4; ++i) a[4 * j + i] = acc[j][i].v;
    for (int s = 0; s < 8; ++s)
      v[s] = _mm512_add_ps(_mm512_shuffle_f32x4(a[2 * s], a[2 * s + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                           _mm512_shuffle_f32x4(a[2 * s], a[2 * s + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    for (int s = 0; s < 4; ++s)
      w[s] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * s], v[2 * s + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                           _mm512_shuffle_f32x4(v[2 * s], v[2 * s + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    for (int s = 0; s < 2; ++s)
      x[s] = _mm512_add_ps(_mm512_shuffle_ps(w[2 * s], w[2 * s + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                           _mm512_shuffle_ps(w[2 * s], w[2 * s + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 y =
        _mm512_mul_ps(_mm512_set1_ps(scale),
                      _mm512_add_ps(_mm512_shuffle_ps(x[0], x[1], _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm512_shuffle_ps(x[0], x[1], _MM_SHUFFLE(3, 1, 3, 1))));
    alignas(64) float r[16];
    _mm512_store_ps(r, y);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < nk; ++j) srow[i][p0 + j] = r[4 * i + j];
    return;
  }
#endif
  for (int j = 0; j < nk; ++j)
    for (int i = 0; i < NQ; ++i) srow[i][p0 + j] = scale * simd::reduce(acc[j][i]);
}

// out_i[d0 .. d0 + 16 CH) = (sum_p fma(s_i[p], V[p][d], .)) * inv_sum_i.
template <typename WL, int NQ, int CH>
void value_pass(const float* const* srow, const int64_t* last, int64_t lmin, int64_t lmax,
                const PagedRows& rows, int64_t d0, const float* inv_sum, float* const* out) {
  using T = typename WL::T;
  RowCursor vc(rows);
  V16 acc[NQ][CH];
  for (int i = 0; i < NQ; ++i)
    for (int c = 0; c < CH; ++c) acc[i][c] = simd::zero();
  for (int64_t p = 0; p <= lmin; ++p) {
    const T* v = reinterpret_cast<const T*>(vc.ptr) + d0;
    if (p < lmax) vc.next();
    V16 s[NQ];
    for (int i = 0; i < NQ; ++i) s[i] = simd::set1(srow[i][p]);
    for (int c = 0; c < CH; ++c) {
      const V16 vv = WL::load(v + 16 * c);
      for (int i = 0; i < NQ; ++i) acc[i][c] = simd::fma(s[i], vv, acc[i][c]);
    }
  }
  for (int64_t p = lmin + 1; p <= lmax; ++p) {  // queries whose span goes on
    const T* v = reinterpret_cast<const T*>(vc.ptr) + d0;
    if (p < lmax) vc.next();
    for (int c = 0; c < CH; ++c) {
      const V16 vv = WL::load(v + 16 * c);
      for (int i = 0; i < NQ; ++i)
        if (last[i] >= p) acc[i][c] = simd::fma(simd::set1(srow[i][p]), vv, acc[i][c]);
    }
  }
  for (int i = 0; i < NQ; ++i)
    for (int c = 0; c < CH; ++c)
      simd::store(out[i] + d0 + 16 * c, simd::mul(acc[i][c], simd::set1(inv_sum[i])));
}

template <typename WL, int NQ>
void tile(const float* const* q, const int64_t* last, float* const* out, const PagedRows& k,
          const PagedRows& v, int64_t hd, float scale, float* scores) {
  int64_t lmin = last[0], lmax = last[0];
  for (int i = 1; i < NQ; ++i) {
    lmin = std::min(lmin, last[i]);
    lmax = std::max(lmax, last[i]);
  }
  const int64_t stride = (lmax + 16) / 16 * 16;
  float* srow[NQ];
  for (int i = 0; i < NQ; ++i) srow[i] = scores + i * stride;
  RowCursor kc(k);
  for (int64_t p0 = 0; p0 <= lmax; p0 += 4)
    score_tile<WL, NQ>(q, kc, hd, scale, p0, static_cast<int>(std::min<int64_t>(4, lmax + 1 - p0)),
                       p0 + 4 <= lmax, srow);
  float inv_sum[NQ];
  for (int i = 0; i < NQ; ++i) {
    const float m = max_f32(srow[i], last[i] + 1);
    inv_sum[i] = 1.0f / exp_sub_sum_inplace(srow[i], last[i] + 1, m);
  }
  int64_t d0 = 0;
  for (; d0 + 64 <= hd; d0 += 64)
    value_pass<WL, NQ, 4>(srow, last, lmin, lmax, v, d0, inv_sum, out);
  for (; d0 < hd; d0 += 16)
    value_pass<WL, NQ, 1>(srow, last, lmin, lmax, v, d0, inv_sum, out);
}

template <typename WL>
void tile_n(int nq, const float* const* q, const int64_t* last, float* const* out,
            const PagedRows& k, const PagedRows& v, int64_t hd, float scale, float* scores) {
  switch (nq) {
    case 1: return tile<WL, 1>(q, last, out, k, v, hd, scale, scores);
    case 2: return tile<WL, 2>(q, last, out, k, v, hd, scale, scores);
    case 3: return tile<WL, 3>(q, last, out, k, v, hd, scale, scores);
    case 4: return tile<WL, 4>(q, last, out, k, v, hd, scale, scores);
    default: FERRITE_CHECK(false) << "attention_tile: " << nq << " queries";
  }
}

}  // namespace

bool attention_tile_supports(DType kv_dtype, int64_t head_dim) {
  return (kv_dtype == DType::kF32 || kv_dtype == DType::kBF16 || kv_dtype == DType::kF16) &&
         head_dim > 0 && head_dim % 16 == 0;
}

void attention_tile(int nq, const float* const* q, const int64_t* last, float* const* out,
                    const PagedRows& k, const PagedRows& v, DType kv_dtype, int64_t head_dim,
                    float scale, float* scores) {
  FERRITE_CHECK(attention_tile_supports(kv_dtype, head_dim));
  switch (kv_dtype) {
    case DType::kF32:
      return tile_n<simd::F32>(nq, q, last, out, k, v, head_dim, scale, scores);
    case DType::kBF16:
      return tile_n<simd::BF16>(nq, q, last, out, k, v, head_dim, scale, scores);
    default:
      return tile_n<simd::F16>(nq, q, last, out, k, v, head_dim, scale, scores);
  }
}

}  // namespace ferrite::cpu
