// AVX-512 (F, BW, VL, VNNI) kernels of the integer block matmul
// (quant_dot.h); compiled with those flags whatever the build's, used only
// when cpuid says the CPU has them. The same integers and the same f32
// operations per output as the scalar definition in quant_dot.cc.
#include <immintrin.h>

#include "backends/cpu/kernels/quant_dot_impl.h"

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && \
    defined(__AVX512VNNI__) && defined(__FMA__) && defined(__F16C__)

namespace ferrite::cpu::qdot {
namespace {

inline float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}
inline float fmaf_(float a, float b, float c) {
  return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}
inline __m512i ld(const void* p) { return _mm512_loadu_si512(p); }
inline __m256i ld256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i ld128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// The canonical lane tree: (j, j+8), (j, j+4), (j, j+2), (0, 1).
inline float tree16(__m512 a) {
  __m256 lo = _mm512_castps512_ps256(a);
  __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1));
  __m256 b = _mm256_add_ps(lo, hi);
  __m128 c = _mm_add_ps(_mm256_castps256_ps128(b), _mm256_extractf128_ps(b, 1));
  __m128 d = _mm_add_ps(c, _mm_movehl_ps(c, c));
  return _mm_cvtss_f32(_mm_add_ss(d, _mm_movehdup_ps(d)));
}

// --- activation quantization -------------------------------------------------

// 16 floats -> 16 int8 of round(x * id), clamped to [-127, 127].
inline __m128i q16(const float* x, __m512 id) {
  __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(x), id));
  v = _mm512_min_epi32(_mm512_max_epi32(v, _mm512_set1_epi32(-127)), _mm512_set1_epi32(127));
  return _mm512_cvtepi32_epi8(v);
}
inline float amax_of(const float* x, int64_t n) {
  __m512 m = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(x + i)));
  return _mm512_reduce_max_ps(m);
}

// The q4_k / q5_k activation layout of the VNNI tiles (kIl, "interleaved"):
// vector i (64 bytes) of a 256-block holds, in its lane l (4 bytes),
// elements 8i + 4 (l % 2) .. + 3 of sub-block l / 2. So every vector holds a
// piece of every sub-block, the 4 vpdpbusd of a block accumulate into one
// vector whose lane l belongs to one sub-block, and one multiply by the
// lanes' sub-block scales follows (block_dots_il) instead of one a vector
// (q4_k prefill tiles ~5 % faster on Zen 4: prefill64 best of 8 alternating
// runs 155 against 165 ms; decode the same). The AMX panels keep the contiguous
// sub-blocks their tiles load (Layout's comment, quant_dot_impl.h); the
// integers are the same either way. kIlDwords4: the natural dword each
// 4-byte lane of the layout takes (vector i = dwords 16 i .. 16 i + 15).
constexpr uint8_t kIlDwords4[64] = {
    0,  1,  8,  9,  16, 17, 24, 25, 32, 33, 40, 41, 48, 49, 56, 57, 2,  3,  10, 11, 18, 19,
    26, 27, 34, 35, 42, 43, 50, 51, 58, 59, 4,  5,  12, 13, 20, 21, 28, 29, 36, 37, 44, 45,
    52, 53, 60, 61, 6,  7,  14, 15, 22, 23, 30, 31, 38, 39, 46, 47, 54, 55, 62, 63};

// Whether format f takes the interleaved layout in a kIl table: q4_k and
// q5_k. q6_k keeps its natural order: its interleaved unpack (two permutes,
// two shifts and masks a vector) cost more than the three scale multiplies
// it saves at one token (its decode measured ~10 % slower; prefill, where
// the unpack is shared by 8 tokens, ~10 % faster).
constexpr bool interleaved(int f, bool kIl) { return kIl && f != kQ6_K; }

template <bool kIl>
void quantize(int f, const float* x, int64_t n, uint8_t* dst) {
  const Layout L = layout(f, n);
  auto* q = reinterpret_cast<int8_t*>(dst + L.q);
  if (f <= kQ4_0) {
    const int64_t nb = n / 32, pairs = (nb + 1) / 2;
    auto* dx = reinterpret_cast<float*>(dst + L.dx);
    for (int64_t p = 0; p < pairs; ++p) {
      float d[2] = {0.0f, 0.0f};
      __m128i part[4] = {_mm_setzero_si128(), _mm_setzero_si128(), _mm_setzero_si128(),
                         _mm_setzero_si128()};  // [b][half]
      for (int h = 0; h < 2 && 2 * p + h < nb; ++h) {
        const float* xb = x + 32 * (2 * p + h);
        const float amax = amax_of(xb, 32);
        d[h] = amax / 127.0f;
        const __m512 id = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
        part[2 * h] = q16(xb, id);
        part[2 * h + 1] = q16(xb + 16, id);
      }
      __m512i v;
      if (f == kQ8_0) {  // natural: b0 lo, b0 hi, b1 lo, b1 hi
        v = _mm512_inserti32x4(_mm512_castsi128_si512(part[0]), part[1], 1);
        v = _mm512_inserti32x4(v, part[2], 2);
        v = _mm512_inserti32x4(v, part[3], 3);
      } else {  // b0 lo, b1 lo, b0 hi, b1 hi
        v = _mm512_inserti32x4(_mm512_castsi128_si512(part[0]), part[2], 1);
        v = _mm512_inserti32x4(v, part[1], 2);
        v = _mm512_inserti32x4(v, part[3], 3);
      }
      _mm512_storeu_si512(q + 64 * p, _mm512_xor_si512(v, _mm512_set1_epi8(static_cast<char>(0x80))));
      const __mmask16 second = f == kQ8_0 ? 0xFF00 : 0xF0F0;
      _mm512_storeu_ps(dx + 16 * p,
                       _mm512_mask_blend_ps(second, _mm512_set1_ps(d[0]), _mm512_set1_ps(d[1])));
    }
    return;
  }
  auto* d = reinterpret_cast<float*>(dst + L.d);
  auto* bsum = reinterpret_cast<int16_t*>(dst + L.bsum);
  if (f == kU4) {
    for (int64_t b = 0; b < n / 128; ++b) {
      const float* xb = x + 128 * b;
      const float amax = amax_of(xb, 128);
      d[b] = amax / 127.0f;
      const __m512 id = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
      __m512i half[2];  // natural elements 0..63, 64..127
      int32_t s = 0;
      for (int h = 0; h < 2; ++h) {
        __m128i a[4];
        for (int j = 0; j < 4; ++j) {
          a[j] = q16(xb + 64 * h + 16 * j, id);
          s += _mm512_reduce_add_epi32(_mm512_cvtepi8_epi32(a[j]));
        }
        __m512i v = _mm512_inserti32x4(_mm512_castsi128_si512(a[0]), a[1], 1);
        v = _mm512_inserti32x4(v, a[2], 2);
        half[h] = _mm512_inserti32x4(v, a[3], 3);
      }
      bsum[b] = static_cast<int16_t>(s);
      // Even elements: the low byte of each 16-bit word; odd: the high byte.
      const __m256i e0 = _mm512_cvtepi16_epi8(half[0]), e1 = _mm512_cvtepi16_epi8(half[1]);
      const __m256i o0 = _mm512_cvtepi16_epi8(_mm512_srai_epi16(half[0], 8));
      const __m256i o1 = _mm512_cvtepi16_epi8(_mm512_srai_epi16(half[1], 8));
      _mm512_storeu_si512(q + 128 * b, _mm512_inserti64x4(_mm512_castsi256_si512(e0), e1, 1));
      _mm512_storeu_si512(q + 128 * b + 64,
                          _mm512_inserti64x4(_mm512_castsi256_si512(o0), o1, 1));
    }
    return;
  }
  for (int64_t b = 0; b < n / 256; ++b) {
    const float* xb = x + 256 * b;
    const float amax = amax_of(xb, 256);
    d[b] = amax / 127.0f;
    const __m512 id = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    const bool il = interleaved(f, kIl);
    alignas(64) int8_t nat[256];  // il: the block in natural order first
    for (int j = 0; j < 8; ++j) {  // natural sub-block j of 32
      const __m128i a = q16(xb + 32 * j, id), c = q16(xb + 32 * j + 16, id);
      bsum[16 * b + 2 * j] = static_cast<int16_t>(_mm512_reduce_add_epi32(_mm512_cvtepi8_epi32(a)));
      bsum[16 * b + 2 * j + 1] =
          static_cast<int16_t>(_mm512_reduce_add_epi32(_mm512_cvtepi8_epi32(c)));
      int8_t* at = il ? nat + 32 * j : q + 256 * b + 32 * (f == kQ6_K ? j : kSubPos[j]);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(at), a);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(at + 16), c);
    }
    if (il)
      for (int d = 0; d < 64; ++d) std::memcpy(q + 256 * b + 4 * d, nat + 4 * kIlDwords4[d], 4);
  }
}

// --- dot products -------------------------------------------------------------

constexpr int kMaxTok = 8;

// q8_0 / q4_0: one weight row against nt activation rows.
template <int F, int nt>
void row32(const uint8_t* row, const uint8_t* act, int64_t stride, int64_t n, float* out) {
  const Layout L = layout(F, n);
  const int64_t nb = n / 32, pairs = (nb + 1) / 2;
  constexpr int64_t bb = F == kQ8_0 ? 34 : 18;
  __m512 acc[nt];
  for (int t = 0; t < nt; ++t) acc[t] = _mm512_setzero_ps();
  const __m512i k128 = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m256i m4 = _mm256_set1_epi8(0x0F), eight = _mm256_set1_epi8(8);
  for (int64_t p = 0; p < pairs; ++p) {
    const uint8_t* b0 = row + 2 * p * bb;
    const bool two = 2 * p + 1 < nb;
    const float d0 = f16(b0), d1 = two ? f16(b0 + bb) : 0.0f;
    __m512i w;  // signed weights in the layout of the activations
    __m512 dw;
    if constexpr (F == kQ8_0) {
      const __m256i hi = two ? ld256(b0 + bb + 2) : _mm256_setzero_si256();
      w = _mm512_inserti64x4(_mm512_castsi256_si512(ld256(b0 + 2)), hi, 1);
      dw = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(d0), _mm512_set1_ps(d1));
    } else {
      const __m128i hi = two ? ld128(b0 + bb + 2) : _mm_setzero_si128();
      const __m256i y = _mm256_inserti128_si256(_mm256_castsi128_si256(ld128(b0 + 2)), hi, 1);
      __m256i lo4 = _mm256_sub_epi8(_mm256_and_si256(y, m4), eight);
      __m256i hi4 = _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(y, 4), m4), eight);
      if (!two) {  // the padding block's weights are 0, not -8
        lo4 = _mm256_maskz_mov_epi8(0x0000FFFF, lo4);
        hi4 = _mm256_maskz_mov_epi8(0x0000FFFF, hi4);
      }
      w = _mm512_inserti64x4(_mm512_castsi256_si512(lo4), hi4, 1);
      dw = _mm512_mask_blend_ps(0xF0F0, _mm512_set1_ps(d0), _mm512_set1_ps(d1));
    }
    // The activations are q + 128: subtract 128 * (sum of each lane's weights).
    const __m512i corr =
        _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), k128, w));
#pragma GCC unroll 8
    for (int t = 0; t < nt; ++t) {
      const uint8_t* a = act + t * stride;
      const __m512i v = _mm512_dpbusd_epi32(corr, ld(a + L.q + 64 * p), w);
      const __m512 s = _mm512_mul_ps(dw, _mm512_loadu_ps(reinterpret_cast<const float*>(a + L.dx) + 16 * p));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), s, acc[t]);
    }
  }
  for (int t = 0; t < nt; ++t) out[t] = tree16(acc[t]);
}

// The exact sums of 8 outputs' 16 int32 lanes, as they come in pairs: a[k]
// holds output 2k's lanes in its 128-bit lanes 0-1 and output 2k + 1's in
// 2-3 (any split of each output's terms over its two lanes). Returns the 8
// sums, output t in lane t. Shuffles and adds of whole vectors (24 ops for
// 8 outputs; a half sum per output then a vphaddd transposition took about
// twice that, vphaddd being 3 uops each on Zen 4).
inline __m256i tsum8_pairs(const __m512i* a) {
  __m512i b[2];
  for (int k = 0; k < 2; ++k)  // lanes: outputs 4k, 4k + 1, 4k + 2, 4k + 3 (4 terms each)
    b[k] = _mm512_add_epi32(_mm512_shuffle_i32x4(a[2 * k], a[2 * k + 1], 0x88),
                            _mm512_shuffle_i32x4(a[2 * k], a[2 * k + 1], 0xDD));
  // 128-bit lane k: output k (2 terms), output k + 4 (2 terms).
  const __m512i c = _mm512_add_epi32(_mm512_unpacklo_epi64(b[0], b[1]),
                                     _mm512_unpackhi_epi64(b[0], b[1]));
  const __m512i d = _mm512_add_epi32(c, _mm512_shuffle_epi32(c, _MM_PERM_CDAB));
  const __m512i order = _mm512_set_epi32(0, 0, 0, 0, 0, 0, 0, 0, 14, 10, 6, 2, 12, 8, 4, 0);
  return _mm512_castsi512_si256(_mm512_permutexvar_epi32(order, d));
}
// Two outputs' 16-lane vectors as one pair (each output's 8 half sums).
inline __m512i pair_halves(__m512i v0, __m512i v1) {
  return _mm512_add_epi32(_mm512_shuffle_i32x4(v0, v1, 0x44), _mm512_shuffle_i32x4(v0, v1, 0xEE));
}
template <int G>
inline __m256 lanes(const float* v) {
  float a[8] = {};
  for (int g = 0; g < G; ++g) a[g] = v[g];
  return _mm256_setr_ps(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]);
}

// k4_scales (quant_dot_impl.h) in registers: bytes sc[0..7], m[0..7] of the
// 12 scale bytes at s (16 bytes readable), without the store-to-load trip
// of the scalar version.
inline __m128i k4_scales_v(const uint8_t* s) {
  const __m128i x = ld128(s);                                                  // [a, b, c, .]
  const __m128i v1 = _mm_shuffle_epi32(x, _MM_SHUFFLE(2, 1, 2, 0));            // [a, c, b, c]
  const __m128i v2 = _mm_shuffle_epi32(x, _MM_SHUFFLE(1, 1, 0, 0));            // [a, a, b, b]
  const __m128i lo = _mm_and_si128(_mm_srlv_epi32(v1, _mm_setr_epi32(0, 0, 0, 4)),
                                   _mm_setr_epi32(0x3f3f3f3f, 0x0f0f0f0f, 0x3f3f3f3f, 0x0f0f0f0f));
  const __m128i hi = _mm_and_si128(_mm_srlv_epi32(v2, _mm_setr_epi32(0, 6, 0, 6)),
                                   _mm_setr_epi32(0, 0x03030303, 0, 0x03030303));
  return _mm_or_si128(lo, _mm_slli_epi32(hi, 4));
}

// The unpacked k-quant weights of one 256-block of one row.
struct KBlock {
  __m512i w[4], s[4];  // weights (u8) in the activation layout; scales (i16 in i32 lanes)
                       // (interleaved layout: s[0] only, lane l's sub-block scale, i32)
  __m256i mins;        // q4_k / q5_k: m_j twice per pair (i16); q6_k: the 16 scales (i16)
  float dw, dmin;
};

template <int F>
inline void unpack(const uint8_t* blk, KBlock& k) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  if constexpr (F == kQ6_K) {
    const __m512i m2 = _mm512_set1_epi8(0x03);
    auto words = [](int lo, int hi) {
      return _mm512_inserti64x4(_mm512_set1_epi16(static_cast<short>(lo)),
                                _mm256_set1_epi16(static_cast<short>(hi)), 1);
    };
    const __m512i sh01 = words(0, 2), sh23 = words(4, 6);
    const __m512i low16 = _mm512_set1_epi32(0xFFFF);
    auto sidx = [](int base) {
      return _mm_set_epi8(base + 3, base + 3, base + 3, base + 3, base + 2, base + 2, base + 2,
                          base + 2, base + 1, base + 1, base + 1, base + 1, base, base, base, base);
    };
    const __m128i sc = ld128(blk + 192);
    for (int i = 0; i < 4; ++i)
      k.s[i] = _mm512_and_si512(_mm512_cvtepi8_epi32(_mm_shuffle_epi8(sc, sidx(4 * i))), low16);
    k.mins = _mm256_cvtepi8_epi16(sc);
    for (int h = 0; h < 2; ++h) {
      const __m512i z = ld(blk + 64 * h);
      const __m512i qh = _mm512_broadcast_i64x4(ld256(blk + 128 + 32 * h));
      const __m512i b01 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, sh01), m2), 4);
      const __m512i b23 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, sh23), m2), 4);
      k.w[2 * h] = _mm512_or_si512(_mm512_and_si512(z, m4), b01);
      k.w[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(z, 4), m4), b23);
    }
    k.dw = f16(blk + 208);
    k.dmin = 0.0f;
    return;
  } else {
    constexpr bool kFive = F == kQ5_K;
    const __m512i ia = _mm512_set_epi32(2, 2, 2, 2, 2, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 0);
    const __m512i ib = _mm512_set_epi32(3, 3, 3, 3, 3, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i ic = _mm512_set_epi32(6, 6, 6, 6, 6, 6, 6, 6, 4, 4, 4, 4, 4, 4, 4, 4);
    const __m512i id = _mm512_set_epi32(7, 7, 7, 7, 7, 7, 7, 7, 5, 5, 5, 5, 5, 5, 5, 5);
    const __m128i dup = _mm_set_epi8(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8);
    const __m128i smv = k4_scales_v(blk + 4);
    const __m512i sc32 = _mm512_cvtepu8_epi32(smv);
    k.s[0] = _mm512_permutexvar_epi32(ia, sc32);
    k.s[1] = _mm512_permutexvar_epi32(ib, sc32);
    k.s[2] = _mm512_permutexvar_epi32(ic, sc32);
    k.s[3] = _mm512_permutexvar_epi32(id, sc32);
    k.mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(smv, dup));
    const uint8_t* qs = blk + (kFive ? 48 : 16);
    const __m512i z0 = ld(qs), z1 = ld(qs + 64);
    k.w[0] = _mm512_and_si512(z0, m4);
    k.w[1] = _mm512_and_si512(_mm512_srli_epi16(z0, 4), m4);
    k.w[2] = _mm512_and_si512(z1, m4);
    k.w[3] = _mm512_and_si512(_mm512_srli_epi16(z1, 4), m4);
    if constexpr (kFive) {
      // q5_k high bits: (bit of the low 32 bytes, of the high 32 bytes) per vector.
      auto bits = [](int lo, int hi) {
        return _mm512_inserti64x4(_mm512_set1_epi8(static_cast<char>(lo)),
                                  _mm256_set1_epi8(static_cast<char>(hi)), 1);
      };
      const __m512i sixteen = _mm512_set1_epi8(16);
      const __m512i qh = _mm512_broadcast_i64x4(ld256(blk + 16));
      const __m512i hb[4] = {bits(0x01, 0x04), bits(0x02, 0x08), bits(0x10, 0x40),
                             bits(0x20, 0x80)};
      for (int i = 0; i < 4; ++i)
        k.w[i] = _mm512_mask_add_epi8(k.w[i], _mm512_test_epi8_mask(qh, hb[i]), k.w[i], sixteen);
    }
    k.dw = f16(blk);
    k.dmin = f16(blk + 2);
  }
}

// One block's sub-block-scaled dot products of one row and one activation
// row (x: the row's 256 bytes of the block), as 16 int32 lanes of exact
// integers whose sum is S1 (q6_k: before its -32 offset term): 4 products a
// vpdpbusd lane (|.| < 2^15), times the sub-block scales by vpmaddwd /
// vpdpwssd on the low 16 bits (the scales' high halves are 0).
template <int F>
inline __m512i block_dots(const KBlock& k, const uint8_t* x) {
  const __m512i z = _mm512_setzero_si512();
  __m512i v = _mm512_madd_epi16(_mm512_dpbusd_epi32(z, k.w[0], ld(x)), k.s[0]);
  v = _mm512_dpwssd_epi32(v, _mm512_dpbusd_epi32(z, k.w[1], ld(x + 64)), k.s[1]);
  v = _mm512_dpwssd_epi32(v, _mm512_dpbusd_epi32(z, k.w[2], ld(x + 128)), k.s[2]);
  return _mm512_dpwssd_epi32(v, _mm512_dpbusd_epi32(z, k.w[3], ld(x + 192)), k.s[3]);
}

// unpack in the interleaved layout (q4_k / q5_k, quantize<true>): w[i] lane
// l holds the weights of the activations' lane l of vector i; s[0] the
// lanes' sub-block scales (int32); mins, dw, dmin as unpack.
template <int F>
inline void unpack_il(const uint8_t* blk, KBlock& k) {
  static_assert(F == kQ4_K || F == kQ5_K, "q6_k keeps its natural layout");
  // Lane l = 2 s + (half of 8 bytes): qword s of vector i is qs bytes
  // 32 (s / 2) + 8 i .. + 7, the low nibbles for even s, the high for odd
  // (ggml's q4_K order: sub-blocks 2c and 2c + 1 share qs[32 c ..]).
  constexpr bool kFive = F == kQ5_K;
  const uint8_t* qs = blk + (kFive ? 48 : 16);
  const __m512i a = ld(qs), b = ld(qs + 64);
  const __m512i nib = _mm512_setr_epi64(0, 4, 0, 4, 0, 4, 0, 4);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int i = 0; i < 4; ++i) {
    const __m512i idx = _mm512_setr_epi64(i, i, 4 + i, 4 + i, 8 + i, 8 + i, 12 + i, 12 + i);
    k.w[i] = _mm512_and_si512(_mm512_srlv_epi64(_mm512_permutex2var_epi64(a, idx, b), nib), m4);
    if constexpr (kFive) {
      // q5_k: bit s of qh[j] is the fifth bit of element j of sub-block s.
      uint64_t h;
      std::memcpy(&h, blk + 16 + 8 * i, 8);
      const __m512i hb = _mm512_and_si512(
          _mm512_srlv_epi64(_mm512_set1_epi64(static_cast<long long>(h)),
                            _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7)),
          _mm512_set1_epi8(0x01));
      k.w[i] = _mm512_or_si512(k.w[i], _mm512_slli_epi64(hb, 4));
    }
  }
  const __m128i smv = k4_scales_v(blk + 4);
  const __m128i dup_sc = _mm_setr_epi8(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  const __m128i dup_m = _mm_set_epi8(15, 15, 14, 14, 13, 13, 12, 12, 11, 11, 10, 10, 9, 9, 8, 8);
  k.s[0] = _mm512_cvtepu8_epi32(_mm_shuffle_epi8(smv, dup_sc));
  k.mins = _mm256_cvtepu8_epi16(_mm_shuffle_epi8(smv, dup_m));
  k.dw = f16(blk);
  k.dmin = f16(blk + 2);
}

// The interleaved layout's block_dots: the 4 vpdpbusd accumulate into one
// vector (lane l: 16 products of one sub-block, |.| < 2^16), times the
// lanes' sub-block scales (vpmulld, exact): the same 16-lane total.
template <int F>
inline __m512i block_dots_il(const KBlock& k, const uint8_t* x) {
  __m512i v = _mm512_dpbusd_epi32(_mm512_setzero_si512(), k.w[0], ld(x));
  v = _mm512_dpbusd_epi32(v, k.w[1], ld(x + 64));
  v = _mm512_dpbusd_epi32(v, k.w[2], ld(x + 128));
  v = _mm512_dpbusd_epi32(v, k.w[3], ld(x + 192));
  return _mm512_mullo_epi32(v, k.s[0]);
}


// The block's weights and dot products in the layout kIl says.
template <int F, bool kIl>
inline void unpack_as(const uint8_t* blk, KBlock& k) {
  if constexpr (interleaved(F, kIl))
    unpack_il<F>(blk, k);
  else
    unpack<F>(blk, k);
}
template <int F, bool kIl>
inline __m512i dots_as(const KBlock& k, const uint8_t* x) {
  if constexpr (interleaved(F, kIl))
    return block_dots_il<F>(k, x);
  else
    return block_dots<F>(k, x);
}


// A group of R rows x T tokens (R * T <= 8 outputs, out[r * T + t]) of a
// k-quant (decode: 8 rows x 1 token): per 256-block the exact integers of
// the 8 outputs are summed together (tsum8_pairs) and the f32 steps run on 8
// lanes, one output each: the scalar definition's operations, lane by lane.
template <int F, int R, int T, bool kIl>
void group_k(const uint8_t* w, int64_t row_bytes, const uint8_t* act, int64_t stride, int64_t n,
             float* out) {
  static_assert(R * T <= 8);
  constexpr int G = R * T;
  const Layout L = layout(F, n);
  constexpr int64_t bb = block_bytes(F);
  const __m512i z = _mm512_setzero_si512();
  __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / 256; ++b) {
    __m512i v[8];
    __m256i m[8];
    float dw[R], dmin[R], dx[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) dx[t] = reinterpret_cast<const float*>(act + t * stride + L.d)[b];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      if constexpr (T == 1) {  // decode: the next group's block into L2
        const char* nx = reinterpret_cast<const char*>(w + (R + r) * row_bytes + b * bb);
        for (int64_t o = 0; o < bb; o += 64) _mm_prefetch(nx + o, _MM_HINT_T1);
      }
      KBlock k;
      unpack_as<F, kIl>(w + r * row_bytes + b * bb, k);
      dw[r] = k.dw;
      dmin[r] = k.dmin;
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t) {
        v[r * T + t] = dots_as<F, kIl>(k, act + t * stride + L.q + 256 * b);
        m[r * T + t] = _mm256_madd_epi16(k.mins, ld256(act + t * stride + L.bsum + 32 * b));
      }
    }
    for (int g = G; g < 8; ++g) {
      v[g] = z;
      m[g] = _mm256_setzero_si256();
    }
    __m512i a[4], mm[4];
    for (int q = 0; q < 4; ++q) {
      mm[q] = _mm512_inserti64x4(_mm512_castsi256_si512(m[2 * q]), m[2 * q + 1], 1);
      a[q] = pair_halves(v[2 * q], v[2 * q + 1]);
      if constexpr (F == kQ6_K) a[q] = _mm512_sub_epi32(a[q], _mm512_slli_epi32(mm[q], 5));
    }
    float sw[8] = {}, sm[8] = {};
    for (int g = 0; g < G; ++g) {
      sw[g] = dw[g / T] * dx[g % T];
      sm[g] = dmin[g / T] * dx[g % T];
    }
    acc = _mm256_fmadd_ps(lanes<G>(sw), _mm256_cvtepi32_ps(tsum8_pairs(a)), acc);
    if constexpr (F != kQ6_K)
      accm = _mm256_fmadd_ps(lanes<G>(sm), _mm256_cvtepi32_ps(tsum8_pairs(mm)), accm);
  }
  float o[8];
  _mm256_storeu_ps(o, _mm256_sub_ps(acc, accm));
  for (int g = 0; g < G; ++g) out[g] = o[g];
}

// q8_0: the exact sums of 8 outputs' vectors v[g] whose lanes 0-7 are block
// 2p and 8-15 block 2p + 1: lane g of the result is output g's block 2p,
// lane 8 + g its block 2p + 1 (one shuffle tree for all 16).
inline __m512i q8_pair_sums(const __m512i* v) {
  __m512i s[4], u[2];
  for (int i = 0; i < 4; ++i)
    s[i] = _mm512_add_epi32(_mm512_shuffle_i32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_i32x4(v[2 * i], v[2 * i + 1], _MM_SHUFFLE(3, 1, 3, 1)));
  for (int i = 0; i < 2; ++i)
    u[i] = _mm512_add_epi32(_mm512_unpacklo_epi64(s[2 * i], s[2 * i + 1]),
                            _mm512_unpackhi_epi64(s[2 * i], s[2 * i + 1]));
  const __m512 u0 = _mm512_castsi512_ps(u[0]), u1 = _mm512_castsi512_ps(u[1]);
  const __m512i order = _mm512_set_epi32(15, 7, 14, 6, 13, 5, 12, 4, 11, 3, 10, 2, 9, 1, 8, 0);
  return _mm512_permutexvar_epi32(
      order, _mm512_add_epi32(
                 _mm512_castps_si512(_mm512_shuffle_ps(u0, u1, _MM_SHUFFLE(2, 0, 2, 0))),
                 _mm512_castps_si512(_mm512_shuffle_ps(u0, u1, _MM_SHUFFLE(3, 1, 3, 1)))));
}

// q8_0: a group of R rows x T tokens (R * T <= 8 outputs, out[r * T + t]):
// per block pair the exact integers of the 16 (output, block) dot products
// (the lanes of one vpdpbusd per output summed in a transposition), then
// per block in increasing order acc = fma(S_b, dw_b * dx_b, acc) with the
// outputs in 8 lanes: the scalar definition's operations, lane by lane.
template <int R, int T>
void group_q8(const uint8_t* w, int64_t row_bytes, const uint8_t* act, int64_t stride, int64_t n,
              float* out) {
  static_assert(R * T <= 8);
  constexpr int G = R * T;
  const Layout L = layout(kQ8_0, n);
  const int64_t nb = n / 32, pairs = (nb + 1) / 2;
  const __m512i k128 = _mm512_set1_epi8(static_cast<char>(0x80));
  __m256 acc = _mm256_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    const bool two = 2 * p + 1 < nb;
    __m512i v[8];
    float dwa[R], dwb[R], dxa[T], dxb[T];
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const float* dx = reinterpret_cast<const float*>(act + t * stride + L.dx) + 16 * p;
      dxa[t] = dx[0];
      dxb[t] = dx[8];
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const uint8_t* b0 = w + r * row_bytes + 2 * p * 34;
      if constexpr (T == 1) {  // decode: the next group's pair into L2
        _mm_prefetch(reinterpret_cast<const char*>(b0 + R * row_bytes), _MM_HINT_T1);
        _mm_prefetch(reinterpret_cast<const char*>(b0 + R * row_bytes + 64), _MM_HINT_T1);
      }
      dwa[r] = f16(b0);
      dwb[r] = two ? f16(b0 + 34) : 0.0f;
      const __m256i hi = two ? ld256(b0 + 36) : _mm256_setzero_si256();
      const __m512i wv = _mm512_inserti64x4(_mm512_castsi256_si512(ld256(b0 + 2)), hi, 1);
      const __m512i corr = _mm512_sub_epi32(_mm512_setzero_si512(),
                                            _mm512_dpbusd_epi32(_mm512_setzero_si512(), k128, wv));
#pragma GCC unroll 8
      for (int t = 0; t < T; ++t)
        v[r * T + t] = _mm512_dpbusd_epi32(corr, ld(act + t * stride + L.q + 64 * p), wv);
    }
    for (int g = G; g < 8; ++g) v[g] = _mm512_setzero_si512();
    const __m512i sums = q8_pair_sums(v);
    float sa[8] = {}, sb[8] = {};
    for (int g = 0; g < G; ++g) {
      sa[g] = dwa[g / T] * dxa[g % T];
      sb[g] = dwb[g / T] * dxb[g % T];
    }
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm512_castsi512_si256(sums)), lanes<G>(sa), acc);
    if (two)
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm512_extracti64x4_epi64(sums, 1)), lanes<G>(sb),
                            acc);
  }
  float o[8];
  _mm256_storeu_ps(o, acc);
  for (int g = 0; g < G; ++g) out[g] = o[g];
}

// u4_g128: R weight rows x T activation rows (R * T <= 8), out[r * T + t].
// Per 128-block the nibbles unpack once per row (low: the even elements,
// high: the odd ones, the activation layout's two halves) and meet each
// token's activations in two vpdpbusd (nibbles unsigned, activations
// signed); lane l holds elements 8l .. 8l + 7, as the scalar definition.
template <int R, int T>
void group_u4(const uint8_t* w, int64_t row_bytes, const uint8_t* act, int64_t stride, int64_t n,
              float* out) {
  const Layout L = layout(kU4, n);
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  __m512 acc[R][T];
  float accz[R][T];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) {
      acc[r][t] = _mm512_setzero_ps();
      accz[r][t] = 0.0f;
    }
  for (int64_t b = 0; b < n / 128; ++b) {
    __m512i lo[R], hi[R];
    float dw[R];
    int32_t z[R];
    for (int r = 0; r < R; ++r) {
      const uint8_t* blk = w + r * row_bytes + b * 72;
      if constexpr (T == 1) {  // decode: the next group's block into L2 (72 bytes: 2 lines)
        const char* nx = reinterpret_cast<const char*>(blk + R * row_bytes);
        _mm_prefetch(nx, _MM_HINT_T1);
        _mm_prefetch(nx + 64, _MM_HINT_T1);
      }
      std::memcpy(&dw[r], blk, 4);
      z[r] = blk[4];
      const __m512i v = ld(blk + 8);
      lo[r] = _mm512_and_si512(v, m4);
      hi[r] = _mm512_and_si512(_mm512_srli_epi16(v, 4), m4);
    }
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) {
      const uint8_t* a = act + t * stride;
      const __m512i xe = ld(a + L.q + 128 * b), xo = ld(a + L.q + 128 * b + 64);
      const float dx = reinterpret_cast<const float*>(a + L.d)[b];
      const int32_t bs = reinterpret_cast<const int16_t*>(a + L.bsum)[b];
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m512i v =
            _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), lo[r], xe), hi[r], xo);
        const float s = dw[r] * dx;
        acc[r][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_set1_ps(s), acc[r][t]);
        accz[r][t] = fmaf_(static_cast<float>(z[r] * bs), s, accz[r][t]);
      }
    }
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < T; ++t) out[r * T + t] = tree16(acc[r][t]) - accz[r][t];
}

// Prefill tiles: one weight row x T <= 8 tokens, the tokens' activation
// scales transposed once per token tile by tile_groups (dxT: per block the 8
// tokens' scales, zeros past T), so that each block's f32 factors are one
// vector multiply instead of 8 strided scalar loads and a lane build (the
// group_k / group_q8 prefill forms spent a third of their instructions
// there). The same integers and the same f32 operations as group_k<F, 1, T>
// / group_q8<1, T>: bitwise their results. dxT null (rows too long for the
// caller's buffer): each block's scales are gathered from the rows.
template <int T>
inline __m256 token_scales(const float* dxT, int64_t i, const uint8_t* act, int64_t stride,
                           int64_t off) {
  if (dxT) return _mm256_loadu_ps(dxT + 8 * i);
  float v[8] = {};
#pragma GCC unroll 8
  for (int t = 0; t < T; ++t) v[t] = *reinterpret_cast<const float*>(act + t * stride + off);
  return _mm256_loadu_ps(v);
}
template <int F, int T, bool kIl>
void toks_k(const uint8_t* w, const uint8_t* act, int64_t stride, int64_t n, const float* dxT,
            float* out) {
  static_assert(T <= 8);
  const Layout L = layout(F, n);
  constexpr int64_t bb = block_bytes(F);
  const __m512i z = _mm512_setzero_si512();
  __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
  for (int64_t b = 0; b < n / 256; ++b) {
    KBlock k;
    unpack_as<F, kIl>(w + b * bb, k);
    const __m512i mins2 = _mm512_inserti64x4(_mm512_castsi256_si512(k.mins), k.mins, 1);
    // Per token the block's sub-block-scaled dot products, per token pair
    // the mins (q6_k: scale) terms.
    __m512i v[8], mm[4];
#pragma GCC unroll 8
    for (int t = 0; t < 8; ++t) {
      v[t] = t < T ? dots_as<F, kIl>(k, act + t * stride + L.q + 256 * b) : z;
    }
#pragma GCC unroll 4
    for (int q = 0; q < 4; ++q) {
      if (2 * q < T) {
        const __m256i b0 = ld256(act + 2 * q * stride + L.bsum + 32 * b);
        const __m256i b1 = 2 * q + 1 < T ? ld256(act + (2 * q + 1) * stride + L.bsum + 32 * b)
                                         : _mm256_setzero_si256();
        mm[q] = _mm512_madd_epi16(mins2, _mm512_inserti64x4(_mm512_castsi256_si512(b0), b1, 1));
      } else {
        mm[q] = z;
      }
    }
    __m512i a[4];
    for (int q = 0; q < 4; ++q) {
      a[q] = pair_halves(v[2 * q], v[2 * q + 1]);
      if constexpr (F == kQ6_K) a[q] = _mm512_sub_epi32(a[q], _mm512_slli_epi32(mm[q], 5));
    }
    const __m256 dxv = token_scales<T>(dxT, b, act, stride, L.d + 4 * b);
    acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(k.dw), dxv),
                          _mm256_cvtepi32_ps(tsum8_pairs(a)), acc);
    if constexpr (F != kQ6_K)
      accm = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(k.dmin), dxv),
                             _mm256_cvtepi32_ps(tsum8_pairs(mm)), accm);
  }
  alignas(32) float o[8];
  _mm256_store_ps(o, _mm256_sub_ps(acc, accm));
  for (int t = 0; t < T; ++t) out[t] = o[t];
}

// q8_0 (dxT: per block pair 16 floats, the 8 tokens' scales of block 2p then
// of block 2p + 1).
template <int T>
void toks_q8(const uint8_t* w, const uint8_t* act, int64_t stride, int64_t n, const float* dxT,
             float* out) {
  static_assert(T <= 8);
  const Layout L = layout(kQ8_0, n);
  const int64_t nb = n / 32, pairs = (nb + 1) / 2;
  const __m512i k128 = _mm512_set1_epi8(static_cast<char>(0x80));
  __m256 acc = _mm256_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    const bool two = 2 * p + 1 < nb;
    __m512i v[8];
    const uint8_t* b0 = w + 2 * p * 34;
    const float dwa = f16(b0), dwb = two ? f16(b0 + 34) : 0.0f;
    const __m256i hi = two ? ld256(b0 + 36) : _mm256_setzero_si256();
    const __m512i wv = _mm512_inserti64x4(_mm512_castsi256_si512(ld256(b0 + 2)), hi, 1);
    const __m512i corr = _mm512_sub_epi32(_mm512_setzero_si512(),
                                          _mm512_dpbusd_epi32(_mm512_setzero_si512(), k128, wv));
#pragma GCC unroll 8
    for (int t = 0; t < T; ++t) v[t] = _mm512_dpbusd_epi32(corr, ld(act + t * stride + L.q + 64 * p), wv);
    for (int g = T; g < 8; ++g) v[g] = _mm512_setzero_si512();
    const __m512i sums = q8_pair_sums(v);
    const __m256 sa =
        _mm256_mul_ps(_mm256_set1_ps(dwa), token_scales<T>(dxT, 2 * p, act, stride, L.dx + 64 * p));
    acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm512_castsi512_si256(sums)), sa, acc);
    if (two) {
      const __m256 sb = _mm256_mul_ps(
          _mm256_set1_ps(dwb), token_scales<T>(dxT, 2 * p + 1, act, stride, L.dx + 64 * p + 32));
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm512_extracti64x4_epi64(sums, 1)), sb, acc);
    }
  }
  alignas(32) float o[8];
  _mm256_store_ps(o, acc);
  for (int t = 0; t < T; ++t) out[t] = o[t];
}

// q4_0 decode: R weight rows x one token, row32's arithmetic per row (so
// bitwise its results), the rows' pairs interleaved and the next group's
// pair prefetched into L2 (one row at a time without the prefetch, the
// short row streams left the hardware prefetchers behind: 0.91x llama.cpp's
// decode on the Qwen3-0.6B twin).
template <int R>
void group_q4(const uint8_t* w, int64_t row_bytes, const uint8_t* act, int64_t n, float* out) {
  const Layout L = layout(kQ4_0, n);
  const int64_t nb = n / 32, pairs = (nb + 1) / 2;
  constexpr int64_t bb = 18;
  __m512 acc[R];
  for (int r = 0; r < R; ++r) acc[r] = _mm512_setzero_ps();
  const __m512i k128 = _mm512_set1_epi8(static_cast<char>(0x80));
  const __m256i m4 = _mm256_set1_epi8(0x0F), eight = _mm256_set1_epi8(8);
  for (int64_t p = 0; p < pairs; ++p) {
    const bool two = 2 * p + 1 < nb;
    const __m512i x = ld(act + L.q + 64 * p);
    const __m512 dx = _mm512_loadu_ps(reinterpret_cast<const float*>(act + L.dx) + 16 * p);
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
      const uint8_t* b0 = w + r * row_bytes + 2 * p * bb;
      _mm_prefetch(reinterpret_cast<const char*>(b0 + R * row_bytes), _MM_HINT_T1);
      const float d0 = f16(b0), d1 = two ? f16(b0 + bb) : 0.0f;
      const __m128i hi = two ? ld128(b0 + bb + 2) : _mm_setzero_si128();
      const __m256i y = _mm256_inserti128_si256(_mm256_castsi128_si256(ld128(b0 + 2)), hi, 1);
      __m256i lo4 = _mm256_sub_epi8(_mm256_and_si256(y, m4), eight);
      __m256i hi4 = _mm256_sub_epi8(_mm256_and_si256(_mm256_srli_epi16(y, 4), m4), eight);
      if (!two) {  // the padding block's weights are 0, not -8
        lo4 = _mm256_maskz_mov_epi8(0x0000FFFF, lo4);
        hi4 = _mm256_maskz_mov_epi8(0x0000FFFF, hi4);
      }
      const __m512i wv = _mm512_inserti64x4(_mm512_castsi256_si512(lo4), hi4, 1);
      const __m512 dw = _mm512_mask_blend_ps(0xF0F0, _mm512_set1_ps(d0), _mm512_set1_ps(d1));
      const __m512i corr = _mm512_sub_epi32(
          _mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), k128, wv));
      const __m512i v = _mm512_dpbusd_epi32(corr, x, wv);
      acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(dw, dx), acc[r]);
    }
  }
  for (int r = 0; r < R; ++r) out[r] = tree16(acc[r]);
}
using GroupQ4Fn = void (*)(const uint8_t*, int64_t, const uint8_t*, int64_t, float*);
constexpr GroupQ4Fn kGroupsQ4[9] = {nullptr,      &group_q4<1>, &group_q4<2>, &group_q4<3>,
                                    &group_q4<4>, &group_q4<5>, &group_q4<6>, &group_q4<7>,
                                    &group_q4<8>};

// One weight row against nt (1..kMaxTok) activation rows (q4_0).
template <int nt>
void row_nt(int, const uint8_t* row, const uint8_t* a, int64_t stride, int64_t n, float* out) {
  row32<kQ4_0, nt>(row, a, stride, n, out);
}
using RowFn = void (*)(int, const uint8_t*, const uint8_t*, int64_t, int64_t, float*);
constexpr RowFn kRowFns[kMaxTok + 1] = {nullptr,    &row_nt<1>, &row_nt<2>, &row_nt<3>, &row_nt<4>,
                                        &row_nt<5>, &row_nt<6>, &row_nt<7>, &row_nt<8>};

// k-quant groups: 1 token x R rows (decode), or 1 row x T tokens.
using GroupFn = void (*)(const uint8_t*, int64_t, const uint8_t*, int64_t, int64_t, float*);
// Prefill tiles with transposed activation scales (toks_k, toks_q8).
using TokFn = void (*)(const uint8_t*, const uint8_t*, int64_t, int64_t, const float*, float*);

template <int F, bool kIl>
struct Groups {
  static constexpr GroupFn rows[9] = {
      nullptr,                    &group_k<F, 1, 1, kIl>, &group_k<F, 2, 1, kIl>,
      &group_k<F, 3, 1, kIl>,     &group_k<F, 4, 1, kIl>, &group_k<F, 5, 1, kIl>,
      &group_k<F, 6, 1, kIl>,     &group_k<F, 7, 1, kIl>, &group_k<F, 8, 1, kIl>};
  static constexpr TokFn toks[9] = {nullptr,              &toks_k<F, 1, kIl>, &toks_k<F, 2, kIl>,
                                    &toks_k<F, 3, kIl>,   &toks_k<F, 4, kIl>, &toks_k<F, 5, kIl>,
                                    &toks_k<F, 6, kIl>,   &toks_k<F, 7, kIl>, &toks_k<F, 8, kIl>};
  // Per 256-block the 8 tokens' scales d (zeros past nt).
  static int64_t scale_floats(int64_t n) { return n / 256 * 8; }
  static void transpose_scales(const uint8_t* act, int64_t stride, int nt, int64_t n, float* dxT) {
    const Layout L = layout(F, n);
    for (int64_t b = 0; b < n / 256; ++b)
      for (int t = 0; t < 8; ++t)
        dxT[8 * b + t] = t < nt ? reinterpret_cast<const float*>(act + t * stride + L.d)[b] : 0.0f;
  }
};

struct GroupsQ8 {
  static constexpr GroupFn rows[9] = {nullptr,          &group_q8<1, 1>, &group_q8<2, 1>,
                                      &group_q8<3, 1>, &group_q8<4, 1>, &group_q8<5, 1>,
                                      &group_q8<6, 1>, &group_q8<7, 1>, &group_q8<8, 1>};
  static constexpr TokFn toks[9] = {nullptr,      &toks_q8<1>, &toks_q8<2>, &toks_q8<3>,
                                    &toks_q8<4>,  &toks_q8<5>, &toks_q8<6>, &toks_q8<7>,
                                    &toks_q8<8>};
  // Per block pair 16 floats: the 8 tokens' scales of block 2p, then 2p + 1.
  static int64_t scale_floats(int64_t n) { return (n / 32 + 1) / 2 * 16; }
  static void transpose_scales(const uint8_t* act, int64_t stride, int nt, int64_t n, float* dxT) {
    const Layout L = layout(kQ8_0, n);
    for (int64_t p = 0; p < (n / 32 + 1) / 2; ++p)
      for (int t = 0; t < 8; ++t) {
        const float* dx = reinterpret_cast<const float*>(act + t * stride + L.dx) + 16 * p;
        dxT[16 * p + t] = t < nt ? dx[0] : 0.0f;
        dxT[16 * p + 8 + t] = t < nt ? dx[8] : 0.0f;
      }
  }
};

template <int T>
void toks_u4(const uint8_t* w, const uint8_t* act, int64_t stride, int64_t n, const float*,
             float* out) {
  group_u4<1, T>(w, 0, act, stride, n, out);
}
struct GroupsU4 {
  static constexpr GroupFn rows[9] = {nullptr,          &group_u4<1, 1>, &group_u4<2, 1>,
                                      &group_u4<3, 1>, &group_u4<4, 1>, &group_u4<5, 1>,
                                      &group_u4<6, 1>, &group_u4<7, 1>, &group_u4<8, 1>};
  static constexpr TokFn toks[9] = {nullptr,      &toks_u4<1>, &toks_u4<2>, &toks_u4<3>,
                                    &toks_u4<4>,  &toks_u4<5>, &toks_u4<6>, &toks_u4<7>,
                                    &toks_u4<8>};
  // group_u4 reads its scales itself (one f32 step per token and block).
  static int64_t scale_floats(int64_t) { return 0; }
  static void transpose_scales(const uint8_t*, int64_t, int, int64_t, float*) {}
};

// Tiles of the integer products. Decode (one token): groups of 8 rows.
// Prefill: token tiles of 8 outer (their activation rows stay in L1 while
// the rows pass over them; the token tile's scales transposed once), rows
// inner.
template <typename Gs>
void tile_groups(const uint8_t* w, int64_t row_bytes, int64_t nrows, const uint8_t* act,
                 int64_t stride, int64_t ntok, int64_t n, float* y, int64_t ldy, bool accumulate) {
  float out[8];
  if (ntok == 1) {
    for (int64_t r0 = 0; r0 < nrows; r0 += 8) {
      const int nr = static_cast<int>(nrows - r0 < 8 ? nrows - r0 : 8);
      Gs::rows[nr](w + r0 * row_bytes, row_bytes, act, stride, n, out);
      for (int r = 0; r < nr; ++r) y[r0 + r] = accumulate ? y[r0 + r] + out[r] : out[r];
    }
    return;
  }
  // (No std::vector here: this file's inline functions must not be emitted
  // in its ISA for the rest of the program, quant_dot_impl.h.)
  constexpr int64_t kScaleFloats = 8192;
  alignas(64) float scales[kScaleFloats];
  float* dxT = Gs::scale_floats(n) <= kScaleFloats ? scales : nullptr;
  for (int64_t t0 = 0; t0 < ntok; t0 += 8) {
    const int nt = static_cast<int>(ntok - t0 < 8 ? ntok - t0 : 8);
    if (dxT) Gs::transpose_scales(act + t0 * stride, stride, nt, n, dxT);
    for (int64_t r = 0; r < nrows; ++r) {
      Gs::toks[nt](w + r * row_bytes, act + t0 * stride, stride, n, dxT, out);
      for (int t = 0; t < nt; ++t) {
        float* p = y + (t0 + t) * ldy + r;
        *p = accumulate ? *p + out[t] : out[t];
      }
    }
  }
}

// kIl: the k-quants' interleaved activation layout (quantize<kIl>).
template <bool kIl>
void tile(int f, const uint8_t* w, int64_t row_bytes, int64_t nrows, const uint8_t* act,
          int64_t stride, int64_t ntok, int64_t n, float* y, int64_t ldy, bool accumulate) {
  switch (f) {
    case kQ8_0:
      return tile_groups<GroupsQ8>(w, row_bytes, nrows, act, stride, ntok, n, y, ldy, accumulate);
    case kQ4_K:
      return tile_groups<Groups<kQ4_K, kIl>>(w, row_bytes, nrows, act, stride, ntok, n, y, ldy,
                                             accumulate);
    case kQ5_K:
      return tile_groups<Groups<kQ5_K, kIl>>(w, row_bytes, nrows, act, stride, ntok, n, y, ldy,
                                             accumulate);
    case kQ6_K:
      return tile_groups<Groups<kQ6_K, kIl>>(w, row_bytes, nrows, act, stride, ntok, n, y, ldy,
                                             accumulate);
    case kU4:
      return tile_groups<GroupsU4>(w, row_bytes, nrows, act, stride, ntok, n, y, ldy, accumulate);
    default: break;
  }
  if (f == kQ4_0 && ntok == 1) {
    float out[8];
    for (int64_t r0 = 0; r0 < nrows; r0 += 8) {
      const int nr = static_cast<int>(nrows - r0 < 8 ? nrows - r0 : 8);
      kGroupsQ4[nr](w + r0 * row_bytes, row_bytes, act, n, out);
      for (int r = 0; r < nr; ++r) y[r0 + r] = accumulate ? y[r0 + r] + out[r] : out[r];
    }
    return;
  }
  for (int64_t r = 0; r < nrows; ++r) {
    const uint8_t* row = w + r * row_bytes;
    for (int64_t t0 = 0; t0 < ntok; t0 += kMaxTok) {
      const int nt = static_cast<int>(ntok - t0 < kMaxTok ? ntok - t0 : kMaxTok);
      float out[kMaxTok];
      kRowFns[nt](f, row, act + t0 * stride, stride, n, out);
      for (int t = 0; t < nt; ++t) {
        float* p = y + (t0 + t) * ldy + r;
        *p = accumulate ? *p + out[t] : out[t];
      }
    }
  }
}

// --- q8_0 panels (AVX-512 VNNI and AMX) ------------------------------------------
//
// A call's 16 weight rows repacked once so that a vector lane is a row: per
// 32-block b, vector kk (64 bytes) holds elements 4 kk .. 4 kk + 3 of each
// of the 16 rows, with each row's 128 * sum(w) and dw. The prefill tiles
// (toks_q8) keep a row's elements in the lanes instead and sum every
// (row, token, block)'s 8 lanes in a shuffle tree; here one vpdpbusd of a
// token's broadcast activation word against vector kk adds that word's
// products to all 16 rows at once, and the block's exact integers come out
// in the rows' lanes (no horizontal sums; llama.cpp's repacked Q4_0 rows
// have the same idea). The integers and the f32 steps are the scalar
// definition's (quant_dot.h): acc = fma(S_b, dw_b * dx_b, acc) per block.
struct PanelBlock32 {
  alignas(64) uint8_t b[8 * 64];
  alignas(64) int32_t corr[16];
  alignas(64) float dw[16];
};
static_assert(sizeof(PanelBlock32) == kPanelBlock32Bytes);

// The panel of rows [0, nrows) (nrows <= 16; the lanes past it zero): one
// gather of the 16 rows' word kk a block and vector.
void pack_panel_q8(const uint8_t* w, int64_t row_bytes, int64_t nrows, int64_t nb,
                   PanelBlock32* panel) {
  const __mmask16 rmask = nrows >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << nrows) - 1);
  const __m512i rows = _mm512_mullo_epi32(
      _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
      _mm512_set1_epi32(static_cast<int32_t>(row_bytes)));
  const __m512i k128 = _mm512_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < nb; ++b) {
    PanelBlock32& P = panel[b];
    const uint8_t* blk = w + b * 34;
    __m512i corr = _mm512_setzero_si512();
    for (int kk = 0; kk < 8; ++kk) {
      const __m512i v =
          _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), rmask, rows, blk + 2 + 4 * kk, 1);
      _mm512_store_si512(P.b + 64 * kk, v);
      corr = _mm512_dpbusd_epi32(corr, k128, v);  // 128 * sum(w), exact
    }
    _mm512_store_si512(P.corr, corr);
    const __m512i d = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), rmask, rows, blk, 1);
    _mm512_store_ps(P.dw, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d)));
  }
}

// q8_0 on the VNNI panel: passes of 8 tokens (activation rows padded to
// kPanelTokens by the caller, so the pass reads past ntok safely), every
// block's 8 weight vectors loaded once a pass and met by each token's 8
// broadcast activation words (unsigned, q + 128: the panel's correction
// removes the 128s).
void panel_q8_vnni(const uint8_t* w, int64_t row_bytes, int64_t nrows, const uint8_t* act,
                   int64_t stride, int64_t ntok, int64_t n, float* y, int64_t ldy,
                   bool accumulate, void* scratch) {
  constexpr int kT = 8;
  static_assert(kPanelTokens % kT == 0, "passes stay inside the padded rows");
  const Layout L = layout(kQ8_0, n);
  const int64_t nb = n / 32;
  auto* panel = static_cast<PanelBlock32*>(scratch);
  pack_panel_q8(w, row_bytes, nrows, nb, panel);
  const __mmask16 rmask = nrows >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << nrows) - 1);
  for (int64_t t0 = 0; t0 < ntok; t0 += kT) {
    const uint8_t* a0 = act + t0 * stride;
    __m512 acc[kT];
    for (int t = 0; t < kT; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const PanelBlock32& P = panel[b];
      __m512i wv[8];
      for (int kk = 0; kk < 8; ++kk) wv[kk] = _mm512_load_si512(P.b + 64 * kk);
      const __m512i corr = _mm512_load_si512(P.corr);
      const __m512 dw = _mm512_load_ps(P.dw);
      const int64_t dxo = 16 * (b / 2) + 8 * (b % 2);
#pragma GCC unroll 8
      for (int t = 0; t < kT; ++t) {
        const uint8_t* xa = a0 + t * stride;
        const int32_t* xq = reinterpret_cast<const int32_t*>(xa + L.q + 32 * b);
        __m512i v = _mm512_sub_epi32(_mm512_setzero_si512(), corr);
#pragma GCC unroll 8
        for (int kk = 0; kk < 8; ++kk) v = _mm512_dpbusd_epi32(v, _mm512_set1_epi32(xq[kk]), wv[kk]);
        const float dx = reinterpret_cast<const float*>(xa + L.dx)[dxo];
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(dw, _mm512_set1_ps(dx)),
                                 acc[t]);
      }
    }
    const int64_t nt = ntok - t0 < kT ? ntok - t0 : kT;
    for (int t = 0; t < nt; ++t) {
      float* yp = y + (t0 + t) * ldy;
      __m512 v = acc[t];
      if (accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(rmask, yp), v);
      _mm512_mask_storeu_ps(yp, rmask, v);
    }
  }
}

// --- k-quant panels (AVX-512 VNNI) -------------------------------------------------
//
// One row group of a call, unpacked. Per 256-block: b (64 groups x 16
// rows x 4 bytes), sc[p][row], mn[i][row] (two int16: q4_k / q5_k m_i
// twice; q6_k sc_2i, sc_2i+1), dw / dmin per row. The AMX panels index sc
// by the sub-block's position in their activation layout; the VNNI panels
// by the natural sub-block (q4_k / q5_k: 8 of 32 elements; q6_k: 16 of 16).
struct PanelBlock {
  alignas(64) uint8_t b[64 * 64];
  alignas(64) int32_t sc[16][16];
  alignas(64) int32_t mn[8][16];
  alignas(64) float dw[16];
  alignas(64) float dmin[16];
};

// Row r of a q6_k block's panel scales (both panels' layout): the 16 int8
// sub-block scales, and their pairs (sc_2i, sc_2i+1) as two int16 in mn[i]
// for the offset term's vpdpwssd.
inline void q6k_panel_scales(const uint8_t* blk, int r, PanelBlock& P) {
  const auto* sc = reinterpret_cast<const int8_t*>(blk + 192);
  for (int j = 0; j < 16; ++j) P.sc[j][r] = sc[j];
  for (int i = 0; i < 8; ++i)
    P.mn[i][r] = static_cast<int32_t>(static_cast<uint16_t>(static_cast<int16_t>(sc[2 * i])) |
                                      static_cast<uint32_t>(static_cast<uint16_t>(
                                          static_cast<int16_t>(sc[2 * i + 1])))
                                          << 16);
}

// c[l] lane r = a[r] lane l: a 16 x 16 transposition of 32-bit lanes (64
// shuffles: 32-bit and 64-bit unpacks within 128-bit lanes, then two rounds
// of 128-bit lane shuffles).
inline void transpose16(const __m512i (&a)[16], __m512i (&c)[16]) {
  __m512i t[16], u[16];
  for (int k = 0; k < 8; ++k) {
    t[2 * k] = _mm512_unpacklo_epi32(a[2 * k], a[2 * k + 1]);
    t[2 * k + 1] = _mm512_unpackhi_epi32(a[2 * k], a[2 * k + 1]);
  }
  // u[4 k + j], 128-bit lane q: rows 4 k .. 4 k + 3 at column 4 q + j.
  for (int k = 0; k < 4; ++k) {
    u[4 * k] = _mm512_unpacklo_epi64(t[4 * k], t[4 * k + 2]);
    u[4 * k + 1] = _mm512_unpackhi_epi64(t[4 * k], t[4 * k + 2]);
    u[4 * k + 2] = _mm512_unpacklo_epi64(t[4 * k + 1], t[4 * k + 3]);
    u[4 * k + 3] = _mm512_unpackhi_epi64(t[4 * k + 1], t[4 * k + 3]);
  }
  for (int j = 0; j < 4; ++j) {
    const __m512i x0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x88);   // q 0, 2 of rows 0-7
    const __m512i x1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xDD);   // q 1, 3
    const __m512i y0 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x88);
    const __m512i y1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xDD);
    c[j] = _mm512_shuffle_i32x4(x0, y0, 0x88);
    c[8 + j] = _mm512_shuffle_i32x4(x0, y0, 0xDD);
    c[4 + j] = _mm512_shuffle_i32x4(x1, y1, 0x88);
    c[12 + j] = _mm512_shuffle_i32x4(x1, y1, 0xDD);
  }
}

// The VNNI panel of rows [0, nrows) (the lanes past it zero): each row's
// block unpacked in the activation layout of the VNNI table (q4_k / q5_k
// interleaved, unpack_il; q6_k natural, unpack), then per vector i the 16
// rows transposed so that P.b's vector 16 i + l holds every row's weights
// of the activations' word 16 i + l.
template <int F>
void pack_panel_vnni(const uint8_t* w, int64_t row_bytes, int64_t nrows, int64_t nblk,
                     PanelBlock* pb) {
  constexpr int64_t bb = block_bytes(F);
  __m512i rows[4][16];
  for (int64_t b = 0; b < nblk; ++b) {
    PanelBlock& P = pb[b];
    for (int r = 0; r < 16; ++r) {
      if (r >= nrows) {
        for (int i = 0; i < 4; ++i) rows[i][r] = _mm512_setzero_si512();
        for (int j = 0; j < 16; ++j) P.sc[j][r] = 0;
        for (int i = 0; i < 8; ++i) P.mn[i][r] = 0;
        P.dw[r] = P.dmin[r] = 0.0f;
        continue;
      }
      const uint8_t* blk = w + r * row_bytes + b * bb;
      KBlock k;
      if constexpr (F == kQ6_K) {
        unpack<F>(blk, k);
        q6k_panel_scales(blk, r, P);
      } else {
        unpack_il<F>(blk, k);
        uint8_t sm[16];
        k4_scales(blk + 4, sm);
        for (int j = 0; j < 8; ++j) {
          P.sc[j][r] = sm[j];
          P.mn[j][r] = static_cast<int32_t>(sm[8 + j] | (sm[8 + j] << 16));
        }
      }
      for (int i = 0; i < 4; ++i) rows[i][r] = k.w[i];
      P.dw[r] = k.dw;
      P.dmin[r] = k.dmin;
    }
    for (int i = 0; i < 4; ++i) {
      __m512i c[16];
      transpose16(rows[i], c);
      for (int l = 0; l < 16; ++l) _mm512_store_si512(P.b + 64 * (16 * i + l), c[l]);
    }
  }
}

// k-quants on the VNNI panel: passes of kT tokens; per 256-block and
// sub-block its weight vectors (loaded once a pass) meet each token's
// broadcast activation words (the weights' codes are vpdpbusd's unsigned
// operand, the activations its signed one), the sub-block's exact dot
// products times the rows' scales (vpmulld) summed into S1; the mins (q4_k /
// q5_k: S2 = sum_j m_j (bsum_2j + bsum_2j+1)) and q6_k's offset term (sum_j
// sc_j bsum_j) as vpdpwssd of the rows' int16 pairs with the token's
// bsum pairs; then the scalar definition's f32 steps with the rows in the
// lanes: acc = fma(dw dx, S1, acc), accm = fma(dmin dx, S2, accm), y = acc -
// accm.
template <int F>
void panel_k_vnni(const uint8_t* w, int64_t row_bytes, int64_t nrows, const uint8_t* act,
                  int64_t stride, int64_t ntok, int64_t n, float* y, int64_t ldy, bool accumulate,
                  void* scratch) {
  constexpr bool kSix = F == kQ6_K;
  constexpr int kT = 4;
  static_assert(kPanelTokens % kT == 0, "passes stay inside the padded rows");
  const Layout L = layout(F, n);
  const int64_t nblk = n / 256;
  auto* panel = static_cast<PanelBlock*>(scratch);
  pack_panel_vnni<F>(w, row_bytes, nrows, nblk, panel);
  const __mmask16 rmask = nrows >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << nrows) - 1);
  const __m512i z = _mm512_setzero_si512();
  for (int64_t t0 = 0; t0 < ntok; t0 += kT) {
    const uint8_t* a0 = act + t0 * stride;
    __m512 acc[kT], accm[kT];
    for (int t = 0; t < kT; ++t) acc[t] = accm[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nblk; ++b) {
      const PanelBlock& P = panel[b];
      __m512i s1[kT];
      for (int t = 0; t < kT; ++t) s1[t] = z;
      if constexpr (kSix) {
        // Sub-block j of 16: the natural words 4 j .. 4 j + 3.
        for (int j = 0; j < 16; ++j) {
          const __m512i sc = _mm512_load_si512(P.sc[j]);
          __m512i wv[4];
          for (int m = 0; m < 4; ++m) wv[m] = _mm512_load_si512(P.b + 64 * (4 * j + m));
#pragma GCC unroll 4
          for (int t = 0; t < kT; ++t) {
            const auto* xq = reinterpret_cast<const int32_t*>(a0 + t * stride + L.q + 256 * b);
            __m512i da = _mm512_dpbusd_epi32(z, wv[0], _mm512_set1_epi32(xq[4 * j]));
            __m512i db = _mm512_dpbusd_epi32(z, wv[1], _mm512_set1_epi32(xq[4 * j + 1]));
            da = _mm512_dpbusd_epi32(da, wv[2], _mm512_set1_epi32(xq[4 * j + 2]));
            db = _mm512_dpbusd_epi32(db, wv[3], _mm512_set1_epi32(xq[4 * j + 3]));
            s1[t] = _mm512_add_epi32(s1[t], _mm512_mullo_epi32(_mm512_add_epi32(da, db), sc));
          }
        }
      } else {
        // Sub-block j of 32: the layout's words 16 i + 2 j + e (i < 4, e < 2).
        for (int j = 0; j < 8; ++j) {
          const __m512i sc = _mm512_load_si512(P.sc[j]);
          __m512i wv[8];
          for (int i = 0; i < 4; ++i)
            for (int e = 0; e < 2; ++e)
              wv[2 * i + e] = _mm512_load_si512(P.b + 64 * (16 * i + 2 * j + e));
#pragma GCC unroll 4
          for (int t = 0; t < kT; ++t) {
            const auto* xq = reinterpret_cast<const int32_t*>(a0 + t * stride + L.q + 256 * b);
            __m512i da = z, db = z;
            for (int i = 0; i < 4; ++i) {
              da = _mm512_dpbusd_epi32(da, wv[2 * i], _mm512_set1_epi32(xq[16 * i + 2 * j]));
              db = _mm512_dpbusd_epi32(db, wv[2 * i + 1], _mm512_set1_epi32(xq[16 * i + 2 * j + 1]));
            }
            s1[t] = _mm512_add_epi32(s1[t], _mm512_mullo_epi32(_mm512_add_epi32(da, db), sc));
          }
        }
      }
      const __m512 dw = _mm512_load_ps(P.dw), dmin = _mm512_load_ps(P.dmin);
#pragma GCC unroll 4
      for (int t = 0; t < kT; ++t) {
        const uint8_t* xa = a0 + t * stride;
        const auto* bs = reinterpret_cast<const int32_t*>(xa + L.bsum + 32 * b);  // int16 pairs
        __m512i s2 = z;
        for (int i = 0; i < 8; ++i)
          s2 = _mm512_dpwssd_epi32(s2, _mm512_load_si512(P.mn[i]), _mm512_set1_epi32(bs[i]));
        const __m512 dx = _mm512_set1_ps(reinterpret_cast<const float*>(xa + L.d)[b]);
        if constexpr (kSix) {
          // S1 = sum_j sc_j dot_j - 32 sum_j sc_j bsum_j (exact).
          const __m512i v = _mm512_sub_epi32(s1[t], _mm512_slli_epi32(s2, 5));
          acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(v), acc[t]);
        } else {
          acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, dx), _mm512_cvtepi32_ps(s1[t]), acc[t]);
          accm[t] = _mm512_fmadd_ps(_mm512_mul_ps(dmin, dx), _mm512_cvtepi32_ps(s2), accm[t]);
        }
      }
    }
    const int64_t nt = ntok - t0 < kT ? ntok - t0 : kT;
    for (int t = 0; t < nt; ++t) {
      float* yp = y + (t0 + t) * ldy;
      __m512 v = _mm512_sub_ps(acc[t], accm[t]);
      if (accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(rmask, yp), v);
      _mm512_mask_storeu_ps(yp, rmask, v);
    }
  }
}

void panel_vnni(int f, const uint8_t* w, int64_t row_bytes, int64_t nrows, const uint8_t* act,
                int64_t stride, int64_t ntok, int64_t n, float* y, int64_t ldy, bool accumulate,
                void* scratch) {
  switch (f) {
    case kQ8_0:
      return panel_q8_vnni(w, row_bytes, nrows, act, stride, ntok, n, y, ldy, accumulate, scratch);
    case kQ4_K:
      return panel_k_vnni<kQ4_K>(w, row_bytes, nrows, act, stride, ntok, n, y, ldy, accumulate,
                                 scratch);
    case kQ5_K:
      return panel_k_vnni<kQ5_K>(w, row_bytes, nrows, act, stride, ntok, n, y, ldy, accumulate,
                                 scratch);
    case kQ6_K:
      return panel_k_vnni<kQ6_K>(w, row_bytes, nrows, act, stride, ntok, n, y, ldy, accumulate,
                                 scratch);
    default: break;
  }
}

// AVX-512 VNNI without AMX: the interleaved k-quant layout (one scale
// multiply a block and token); the AMX table keeps the contiguous
// sub-blocks its panels load. q8_0 prefill on the VNNI panels.
const Kernels kAvx512 = {&quantize<true>, &tile<true>, &panel_vnni, kVnniPanelFormats,
                         1u << kQ8_0};

#if defined(__AMX_TILE__) && defined(__AMX_INT8__)
// --- AMX-INT8 panels (k-quants) -----------------------------------------------
//
// The same integers as block_dots: per sub-block position p of a 256-block
// the exact dot products of 16 tokens x 16 weight rows come from one
// TDPBSUD (activations signed, weights unsigned) into an int32 tile; the
// vector code scales them by the rows' sub-block scales and sums them
// (exact), adds the mins / q6_k offset terms (exact), and runs the f32 steps
// of the scalar definition with the 16 weight rows in the lanes.
//
// The weight rows are unpacked (unpack<F>, the activation layout) into a
// per-thread panel once per call and transposed to the tiles' B layout:
// 4-byte groups, row kk of a block = group kk of each of the 16 weight rows.

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Tiles: 0, 5 C (16 x 16 int32); 1 A (16 tokens x 32 bytes), 2 B (8 x 64);
// 3 A (16 x 16 bytes), 4 B (4 x 64) for q6_k's 16-element sub-blocks.
inline void load_tile_config() {
  TileConfig c;
  c.rows[0] = 16; c.colsb[0] = 64;
  c.rows[1] = 16; c.colsb[1] = 32;
  c.rows[2] = 8;  c.colsb[2] = 64;
  c.rows[3] = 16; c.colsb[3] = 16;
  c.rows[4] = 4;  c.colsb[4] = 64;
  c.rows[5] = 16; c.colsb[5] = 64;
  _tile_loadconfig(&c);
}


template <int F>
void pack_panel(const uint8_t* w, int64_t row_bytes, int64_t nrows, int64_t nblk, PanelBlock* pb) {
  constexpr int64_t bb = block_bytes(F);
  const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3,
                                                          2, 1, 0),
                                         _mm512_set1_epi32(64));
  for (int64_t b = 0; b < nblk; ++b) {
    PanelBlock& P = pb[b];
    for (int r = 0; r < 16; ++r) {
      if (r >= nrows) {
        for (int kk = 0; kk < 64; ++kk) std::memset(P.b + 64 * kk + 4 * r, 0, 4);
        for (int p = 0; p < 16; ++p) P.sc[p][r] = 0;
        for (int i = 0; i < 8; ++i) P.mn[i][r] = 0;
        P.dw[r] = P.dmin[r] = 0.0f;
        continue;
      }
      const uint8_t* blk = w + r * row_bytes + b * bb;
      KBlock k;
      unpack<F>(blk, k);
      for (int i = 0; i < 4; ++i)
        _mm512_i32scatter_epi32(P.b + 16 * 64 * i + 4 * r, idx, k.w[i], 1);
      P.dw[r] = k.dw;
      P.dmin[r] = k.dmin;
      if constexpr (F == kQ6_K) {
        q6k_panel_scales(blk, r, P);
      } else {
        uint8_t sm[16];
        k4_scales(blk + 4, sm);
        for (int p = 0; p < 8; ++p) P.sc[p][r] = sm[kSubPos[p]];
        for (int i = 0; i < 8; ++i) P.mn[i][r] = static_cast<int32_t>(sm[8 + i] | (sm[8 + i] << 16));
      }
    }
  }
}

template <int F>
void panel_k(const uint8_t* w, int64_t row_bytes, int64_t nrows, const uint8_t* act, int64_t stride,
             int64_t ntok, int64_t n, float* y, int64_t ldy, bool accumulate, void* scratch) {
  constexpr bool kSix = F == kQ6_K;
  constexpr int kPos = kSix ? 16 : 8;       // sub-block positions per 256-block
  constexpr int kSubBytes = kSix ? 16 : 32;  // elements per sub-block
  const Layout L = layout(F, n);
  const int64_t nblk = n / 256;
  auto* panel = static_cast<PanelBlock*>(scratch);
  pack_panel<F>(w, row_bytes, nrows, nblk, panel);
  load_tile_config();
  alignas(64) int32_t cbuf[2][16][16];
  const __mmask16 rmask = nrows >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << nrows) - 1);
  for (int64_t t0 = 0; t0 < ntok; t0 += 16) {
    const uint8_t* a0 = act + t0 * stride;
    __m512 acc[16], accm[16];
    for (int t = 0; t < 16; ++t) acc[t] = accm[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nblk; ++b) {
      const PanelBlock& P = panel[b];
      __m512i s1[16];
      for (int t = 0; t < 16; ++t) s1[t] = _mm512_setzero_si512();
      const uint8_t* aq = a0 + L.q + 256 * b;
      // Two C tiles in turn: the vector code on one overlaps the next TDPBSUD.
      auto issue = [&](int p) {
        if constexpr (kSix) {
          _tile_loadd(3, aq + kSubBytes * p, stride);
          _tile_loadd(4, P.b + 64 * 4 * p, 64);
          if (p % 2 == 0) {
            _tile_zero(0);
            _tile_dpbsud(0, 3, 4);
            _tile_stored(0, cbuf[0], 64);
          } else {
            _tile_zero(5);
            _tile_dpbsud(5, 3, 4);
            _tile_stored(5, cbuf[1], 64);
          }
        } else {
          _tile_loadd(1, aq + kSubBytes * p, stride);
          _tile_loadd(2, P.b + 64 * 8 * p, 64);
          if (p % 2 == 0) {
            _tile_zero(0);
            _tile_dpbsud(0, 1, 2);
            _tile_stored(0, cbuf[0], 64);
          } else {
            _tile_zero(5);
            _tile_dpbsud(5, 1, 2);
            _tile_stored(5, cbuf[1], 64);
          }
        }
      };
      for (int p = 0; p < kPos; ++p) {
        issue(p);
        const __m512i sc = _mm512_load_si512(P.sc[p]);
#pragma GCC unroll 16
        for (int t = 0; t < 16; ++t)
          s1[t] = _mm512_add_epi32(s1[t], _mm512_mullo_epi32(_mm512_load_si512(cbuf[p % 2][t]), sc));
      }
      const __m512 dw = _mm512_load_ps(P.dw), dmin = _mm512_load_ps(P.dmin);
#pragma GCC unroll 16
      for (int t = 0; t < 16; ++t) {
        const uint8_t* a = a0 + t * stride;
        const float dx = reinterpret_cast<const float*>(a + L.d)[b];
        const auto* bs = reinterpret_cast<const int32_t*>(a + L.bsum + 32 * b);
        __m512i m = _mm512_setzero_si512();
        for (int i = 0; i < 8; ++i)
          m = _mm512_dpwssd_epi32(m, _mm512_load_si512(P.mn[i]), _mm512_set1_epi32(bs[i]));
        const __m512 vdx = _mm512_set1_ps(dx);
        if constexpr (kSix) {
          const __m512i v = _mm512_sub_epi32(s1[t], _mm512_slli_epi32(m, 5));
          acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, vdx), _mm512_cvtepi32_ps(v), acc[t]);
        } else {
          acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(dw, vdx), _mm512_cvtepi32_ps(s1[t]), acc[t]);
          accm[t] = _mm512_fmadd_ps(_mm512_mul_ps(dmin, vdx), _mm512_cvtepi32_ps(m), accm[t]);
        }
      }
    }
    const int64_t nt = ntok - t0 < 16 ? ntok - t0 : 16;
    for (int t = 0; t < nt; ++t) {
      float* yp = y + (t0 + t) * ldy;
      __m512 v = _mm512_sub_ps(acc[t], accm[t]);
      if (accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(rmask, yp), v);
      _mm512_mask_storeu_ps(yp, rmask, v);
    }
  }
  _tile_release();
}

static_assert(sizeof(PanelBlock) == kPanelBlockBytes);

void panel_q8(const uint8_t* w, int64_t row_bytes, int64_t nrows, const uint8_t* act,
              int64_t stride, int64_t ntok, int64_t n, float* y, int64_t ldy, bool accumulate,
              void* scratch) {
  const Layout L = layout(kQ8_0, n);
  const int64_t nb = n / 32;
  auto* panel = static_cast<PanelBlock32*>(scratch);
  pack_panel_q8(w, row_bytes, nrows, nb, panel);
  load_tile_config();
  alignas(64) int32_t cbuf[2][16][16];
  const __mmask16 rmask = nrows >= 16 ? 0xFFFF : static_cast<__mmask16>((1u << nrows) - 1);
  for (int64_t t0 = 0; t0 < ntok; t0 += 16) {
    const uint8_t* a0 = act + t0 * stride;
    __m512 acc[16];
    for (int t = 0; t < 16; ++t) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; ++b) {
      const PanelBlock32& P = panel[b];
      _tile_loadd(1, a0 + L.q + 32 * b, stride);
      _tile_loadd(2, P.b, 64);
      if (b % 2 == 0) {
        _tile_zero(0);
        _tile_dpbusd(0, 1, 2);
        _tile_stored(0, cbuf[0], 64);
      } else {
        _tile_zero(5);
        _tile_dpbusd(5, 1, 2);
        _tile_stored(5, cbuf[1], 64);
      }
      const __m512i corr = _mm512_load_si512(P.corr);
      const __m512 dw = _mm512_load_ps(P.dw);
      const int64_t dxo = 16 * (b / 2) + 8 * (b % 2);
#pragma GCC unroll 16
      for (int t = 0; t < 16; ++t) {
        const float dx = reinterpret_cast<const float*>(a0 + t * stride + L.dx)[dxo];
        const __m512i v = _mm512_sub_epi32(_mm512_load_si512(cbuf[b % 2][t]), corr);
        acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(dw, _mm512_set1_ps(dx)),
                                 acc[t]);
      }
    }
    const int64_t nt = ntok - t0 < 16 ? ntok - t0 : 16;
    for (int t = 0; t < nt; ++t) {
      float* yp = y + (t0 + t) * ldy;
      __m512 v = acc[t];
      if (accumulate) v = _mm512_add_ps(_mm512_maskz_loadu_ps(rmask, yp), v);
      _mm512_mask_storeu_ps(yp, rmask, v);
    }
  }
  _tile_release();
}

void panel(int f, const uint8_t* w, int64_t row_bytes, int64_t nrows, const uint8_t* act,
           int64_t stride, int64_t ntok, int64_t n, float* y, int64_t ldy, bool accumulate,
           void* scratch) {
  switch (f) {
    case kQ8_0:
      return panel_q8(w, row_bytes, nrows, act, stride, ntok, n, y, ldy, accumulate, scratch);
    case kQ4_K:
      return panel_k<kQ4_K>(w, row_bytes, nrows, act, stride, ntok, n, y, ldy, accumulate, scratch);
    case kQ5_K:
      return panel_k<kQ5_K>(w, row_bytes, nrows, act, stride, ntok, n, y, ldy, accumulate, scratch);
    case kQ6_K:
      return panel_k<kQ6_K>(w, row_bytes, nrows, act, stride, ntok, n, y, ldy, accumulate, scratch);
    default: break;
  }
}

const Kernels kAmx = {&quantize<false>, &tile<false>, &panel, kAmxPanelFormats};
#define FERRITE_QDOT_AMX 1
#endif

}  // namespace

const Kernels* avx512_kernels() { return &kAvx512; }

#ifdef FERRITE_QDOT_AMX
const Kernels* amx_kernels() { return &kAmx; }
#else
const Kernels* amx_kernels() { return nullptr; }
#endif

}  // namespace ferrite::cpu::qdot

#else

namespace ferrite::cpu::qdot {
const Kernels* avx512_kernels() { return nullptr; }
const Kernels* amx_kernels() { return nullptr; }
}  // namespace ferrite::cpu::qdot

#endif
