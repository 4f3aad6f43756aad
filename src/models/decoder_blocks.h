// Shared building blocks of decoder-only programs: the embedding, the
// attention and MLP nodes of a layer, and the head. Each adds its weight
// declarations (Hugging Face names), states and node to a ModelProgram.
#pragma once

#include <string>

#include "models/family.h"

namespace ferrite {

// Declares the standard values: ids [tokens] u32, hidden [tokens, H],
// normed [tokens, H], logits [sequences, V] f32; adds the embedding node.
void add_embedding(ModelProgram& p, const ModelConfig& c, const ProgramOptions& o);

struct AttentionFlavor {
  bool qk_norm = false;       // Qwen3: per-head RMSNorm of q and k
  bool output_gate = false;   // Qwen3-Next: sigmoid gate from q_proj
  bool zero_centred = false;  // norms are (1 + w)
};

// One causal_paged_attention node for layer i (prefix "model.layers.i."),
// with its KV state.
void add_attention(ModelProgram& p, const ModelConfig& c, const ProgramOptions& o, int64_t layer,
                   const AttentionFlavor& flavor);

// One dense_swiglu node for layer i (mlp.gate_proj / up_proj / down_proj,
// post_attention_layernorm).
void add_dense_mlp(ModelProgram& p, const ModelConfig& c, const ProgramOptions& o, int64_t layer,
                   int64_t intermediate_size, bool zero_centred);

// Final norm (model.norm) and the LM head (lm_head, or the embedding when tied).
void add_head(ModelProgram& p, const ModelConfig& c, const ProgramOptions& o, bool zero_centred);

// Adds a weight declaration with the options' dtype.
void declare_weight(ModelProgram& p, const ProgramOptions& o, const std::string& name, Shape shape);

}  // namespace ferrite
