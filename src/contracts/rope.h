// Rotary position embedding frequencies, shared by every backend so that all
// compute the same angles. Follows Hugging Face's ROPE_INIT_FUNCTIONS: the
// inverse frequencies are computed in f32 as theta^(-2i/rope_dim), then
// rescaled by the scaling type; the angle of position p is float(p) * inv_freq[i].
#pragma once

#include <cmath>
#include <span>
#include <vector>

#include "base/check.h"
#include "contracts/causal_paged_attention.h"

namespace ferrite {

// rope_dim must be even and in [2, head_dim], rope_theta finite and > 0:
// parse_model_config refuses configs that break this, so a violation is a
// bug (checked: apply_rope would otherwise rotate pairs outside the head).
// Writes the rope_dim / 2 inverse frequencies into `inv` (of that size:
// providers keep them in their workspace or a kernel argument, so that a
// step allocates nothing).
inline void rope_inv_freq(const causal_paged_attention::Params& p, std::span<float> inv) {
  FERRITE_CHECK(p.rope_dim >= 2 && p.rope_dim % 2 == 0 && p.rope_dim <= p.head_dim)
      << "rope_dim " << p.rope_dim << " for head_dim " << p.head_dim;
  FERRITE_CHECK(std::isfinite(p.rope_theta) && p.rope_theta > 0) << "rope_theta " << p.rope_theta;
  const int64_t half = static_cast<int64_t>(p.rope_dim / 2);
  FERRITE_CHECK(static_cast<int64_t>(inv.size()) == half) << "rope_inv_freq: " << inv.size()
                                                          << " slots for " << half;
  for (int64_t i = 0; i < half; ++i) {
    float exponent = static_cast<float>(2 * i) / static_cast<float>(p.rope_dim);
    inv[i] = 1.0f / std::pow(static_cast<float>(p.rope_theta), exponent);
  }
  if (p.rope_scaling == "linear") {
    for (float& f : inv) f = f / static_cast<float>(p.rope_factor);
  } else if (p.rope_scaling == "llama3") {
    const double old_len = static_cast<double>(p.rope_original_max_positions);
    const double low_wavelen = old_len / p.rope_low_freq_factor;
    const double high_wavelen = old_len / p.rope_high_freq_factor;
    for (float& f : inv) {
      double wavelen = 2.0 * M_PI / f;
      if (wavelen < high_wavelen) continue;
      if (wavelen > low_wavelen) {
        f = static_cast<float>(f / p.rope_factor);
      } else {
        double smooth = (old_len / wavelen - p.rope_low_freq_factor) /
                        (p.rope_high_freq_factor - p.rope_low_freq_factor);
        f = static_cast<float>((1 - smooth) * f / p.rope_factor + smooth * f);
      }
    }
  }
}

inline std::vector<float> rope_inv_freq(const causal_paged_attention::Params& p) {
  FERRITE_CHECK(p.rope_dim >= 2 && p.rope_dim % 2 == 0 && p.rope_dim <= p.head_dim)
      << "rope_dim " << p.rope_dim << " for head_dim " << p.head_dim;
  std::vector<float> inv(p.rope_dim / 2);
  rope_inv_freq(p, inv);
  return inv;
}

// Rotates the first rope_dim dims of one head in place (NeoX rotate-half:
// pairs (i, i + rope_dim/2)); `head` holds head_dim >= 2 * inv_freq.size()
// floats, as rope_inv_freq guarantees.
inline void apply_rope(float* head, int64_t position, std::span<const float> inv_freq) {
  const int64_t half = static_cast<int64_t>(inv_freq.size());
  for (int64_t i = 0; i < half; ++i) {
    float angle = static_cast<float>(position) * inv_freq[i];
    float c = std::cos(angle), s = std::sin(angle);
    float x0 = head[i], x1 = head[i + half];
    head[i] = x0 * c - x1 * s;
    head[i + half] = x1 * c + x0 * s;
  }
}

}  // namespace ferrite
