// mma.sync m16n8k16 (16-bit inputs, f32 accumulators) emulated on the CPU
// over one warp's fragments, laid out as backends/cuda/kernels/mma.cuh says
// (lane l: g = l / 4, t = l % 4; A a[0] (g, 2t..), a[1] (g+8, 2t..), a[2]
// (g, 2t+8..), a[3] (g+8, 2t+8..); B b0 (k 2t.., n g), b1 (k 2t+8.., n g);
// C c[0..1] (g, 2t..2t+1), c[2..3] (g+8, 2t..2t+1)), summed in f64, so
// that the kernels' fragment mappings are checked where CI runs.
#pragma once

#include <cstdint>

namespace ferrite::cuda::testing {

// c[lane][4] += A (16x16) B (16x8); to_f(bits) turns one 16-bit element
// (bf16 or f16) into a float.
template <typename ToF>
void emulate_mma_m16n8k16(const uint32_t (&a)[32][4], const uint32_t (&b)[32][2],
                          double (&c)[32][4], ToF to_f) {
  double A[16][16] = {}, B[16][8] = {};
  auto lo = [&](uint32_t w) { return double(to_f(static_cast<uint16_t>(w & 0xFFFFu))); };
  auto hi = [&](uint32_t w) { return double(to_f(static_cast<uint16_t>(w >> 16))); };
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    const int rows[4] = {g, g + 8, g, g + 8}, cols[4] = {2 * t, 2 * t, 2 * t + 8, 2 * t + 8};
    for (int r = 0; r < 4; ++r) {
      A[rows[r]][cols[r]] = lo(a[lane][r]);
      A[rows[r]][cols[r] + 1] = hi(a[lane][r]);
    }
    B[2 * t][g] = lo(b[lane][0]);
    B[2 * t + 1][g] = hi(b[lane][0]);
    B[2 * t + 8][g] = lo(b[lane][1]);
    B[2 * t + 9][g] = hi(b[lane][1]);
  }
  for (int lane = 0; lane < 32; ++lane) {
    const int g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 4; ++i) {
      const int row = g + (i >= 2 ? 8 : 0), col = 2 * t + (i & 1);
      for (int e = 0; e < 16; ++e) c[lane][i] += A[row][e] * B[e][col];
    }
  }
}

}  // namespace ferrite::cuda::testing
