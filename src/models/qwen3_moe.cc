// Qwen3-MoE: Qwen3 attention (q/k norms) with a routed SwiGLU MoE MLP;
// `mlp_only_layers` and `decoder_sparse_step` pick dense layers.
#include "models/hybrid_blocks.h"

namespace ferrite {

Result<ModelProgram> build_qwen3_moe(const ModelConfig& c, const ProgramOptions& o) {
  FERRITE_ASSIGN_OR_RETURN(MoeSpec moe, read_moe_spec(c));
  FERRITE_ASSIGN_OR_RETURN(auto sparse, sparse_mlp_layers(c));
  ModelProgram p;
  p.family = "qwen3_moe";
  add_embedding(p, c, o);
  AttentionFlavor flavor;
  flavor.qk_norm = true;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    add_attention(p, c, o, i, flavor);
    if (sparse[i]) {
      add_moe_mlp(p, c, o, i, moe);
    } else {
      if (c.intermediate_size <= 0)
        return invalid_argument(c.source + ": dense layers need a positive 'intermediate_size'");
      add_dense_mlp(p, c, o, i, c.intermediate_size, /*zero_centred=*/false);
    }
  }
  add_head(p, c, o, /*zero_centred=*/false);
  return p;
}

}  // namespace ferrite
