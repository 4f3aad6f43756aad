// Qwen3 dense: Llama plus per-head RMSNorm of q and k before RoPE, and an
// explicit head_dim.
#include "models/decoder_blocks.h"

namespace ferrite {

Result<ModelProgram> build_qwen3(const ModelConfig& c, const ProgramOptions& o) {
  if (c.intermediate_size <= 0)
    return invalid_argument(c.source + ": 'intermediate_size' must be positive");
  ModelProgram p;
  p.family = "qwen3";
  add_embedding(p, c, o);
  AttentionFlavor flavor;
  flavor.qk_norm = true;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    add_attention(p, c, o, i, flavor);
    add_dense_mlp(p, c, o, i, c.intermediate_size, /*zero_centred=*/false);
  }
  add_head(p, c, o, /*zero_centred=*/false);
  return p;
}

}  // namespace ferrite
