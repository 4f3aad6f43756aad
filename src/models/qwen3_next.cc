// Qwen3-Next: hybrid of Gated DeltaNet (grouped in_proj_qkvz / in_proj_ba,
// regrouped at load) and gated full attention (partial RoPE, output gate),
// zero-centred norms, routed experts with a sigmoid-gated shared expert.
#include "models/hybrid_blocks.h"

namespace ferrite {

Result<ModelProgram> build_qwen3_next(const ModelConfig& c, const ProgramOptions& o) {
  FERRITE_ASSIGN_OR_RETURN(MoeSpec moe, read_moe_spec(c));
  return build_hybrid(c, o, "qwen3_next", DeltaLayout::kGrouped, &moe);
}

}  // namespace ferrite
