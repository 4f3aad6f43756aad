// Building blocks of the MoE and hybrid families (Qwen3-MoE, Qwen3-Next,
// Qwen3.5, Qwen3.5-MoE): routed experts with an optional shared expert, the
// Gated DeltaNet mixer in both checkpoint layouts, and the per-layer plan
// (mixer kind, sparse or dense MLP) read from config.json.
#pragma once

#include <string>
#include <vector>

#include "models/decoder_blocks.h"

namespace ferrite {

enum class MixerKind { kFullAttention, kLinearAttention };

// `layer_types` when present ("full_attention" / "linear_attention"), else
// full attention when (i + 1) % full_attention_interval == 0 (default 4).
Result<std::vector<MixerKind>> hybrid_layer_types(const ModelConfig& c);

// True when layer i has a sparse MoE MLP: num_experts > 0, i not in
// mlp_only_layers and (i + 1) % decoder_sparse_step == 0.
Result<std::vector<bool>> sparse_mlp_layers(const ModelConfig& c);

struct MoeSpec {
  int64_t num_experts = 0;
  int64_t top_k = 0;
  int64_t intermediate_size = 0;         // per expert
  int64_t shared_intermediate_size = 0;  // 0: no shared expert
  bool normalize_topk = false;
  bool zero_centred = false;
};
// Reads num_experts, num_experts_per_tok, moe_intermediate_size,
// shared_expert_intermediate_size and norm_topk_prob.
Result<MoeSpec> read_moe_spec(const ModelConfig& c);

// One routed_swiglu_moe (or routed_shared_swiglu_moe) node for layer i.
// Experts come from per-expert tensors (mlp.experts.N.{gate,up,down}_proj)
// or packed ones (mlp.experts.gate_up_proj [E, 2I, H], mlp.experts.down_proj).
void add_moe_mlp(ModelProgram& p, const ModelConfig& c, const ProgramOptions& o, int64_t layer,
                 const MoeSpec& spec);

enum class DeltaLayout {
  kGrouped,   // Qwen3-Next: in_proj_qkvz / in_proj_ba grouped per key head
  kSeparate,  // Qwen3.5: in_proj_qkv, in_proj_z, in_proj_b, in_proj_a
};
struct DeltaSpec {
  int64_t num_k_heads = 0, num_v_heads = 0, k_head_dim = 0, v_head_dim = 0, conv_kernel = 4;
  DeltaLayout layout = DeltaLayout::kSeparate;
};
// Reads linear_num_key_heads, linear_num_value_heads, linear_key_head_dim,
// linear_value_head_dim, linear_conv_kernel_dim.
Result<DeltaSpec> read_delta_spec(const ModelConfig& c, DeltaLayout layout);

// One gated_delta_recurrent_attention node for layer i with its conv and
// delta states (zero-centred input norm).
void add_gated_delta(ModelProgram& p, const ModelConfig& c, const ProgramOptions& o, int64_t layer,
                     const DeltaSpec& spec);

// The hybrid decoder of Qwen3-Next / Qwen3.5 (-MoE): per layer the mixer of
// its type, then a MoE MLP (when `moe` and the layer is sparse) or a dense
// one; zero-centred norms throughout.
Result<ModelProgram> build_hybrid(const ModelConfig& c, const ProgramOptions& o,
                                  const std::string& family, DeltaLayout layout,
                                  const MoeSpec* moe);

}  // namespace ferrite
