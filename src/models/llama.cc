// Llama (and Llama-3 `rope_scaling`): attention with RoPE and GQA, SwiGLU MLP.
#include "models/decoder_blocks.h"

namespace ferrite {

Result<ModelProgram> build_llama(const ModelConfig& c, const ProgramOptions& o) {
  if (c.intermediate_size <= 0)
    return invalid_argument(c.source + ": 'intermediate_size' must be positive");
  ModelProgram p;
  p.family = "llama";
  add_embedding(p, c, o);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    add_attention(p, c, o, i, AttentionFlavor{});
    add_dense_mlp(p, c, o, i, c.intermediate_size, /*zero_centred=*/false);
  }
  add_head(p, c, o, /*zero_centred=*/false);
  return p;
}

}  // namespace ferrite
