// Qwen3.5 and Qwen3.5-MoE (and their `*_text` language models): the Qwen3-Next
// hybrid with separate in_proj_qkv / z / b / a; a dense SwiGLU MLP (qwen3_5)
// or routed experts with a shared expert whose router always renormalises
// (qwen3_5_moe). Interleaved M-RoPE reduces to partial RoPE for text.
// Vision-language checkpoints load their language model only.
#include "models/hybrid_blocks.h"

namespace ferrite {

Result<ModelProgram> build_qwen3_5(const ModelConfig& c, const ProgramOptions& o) {
  return build_hybrid(c, o, "qwen3_5", DeltaLayout::kSeparate, nullptr);
}

Result<ModelProgram> build_qwen3_5_moe(const ModelConfig& c, const ProgramOptions& o) {
  FERRITE_ASSIGN_OR_RETURN(MoeSpec moe, read_moe_spec(c));
  moe.normalize_topk = true;
  return build_hybrid(c, o, "qwen3_5_moe", DeltaLayout::kSeparate, &moe);
}

}  // namespace ferrite
