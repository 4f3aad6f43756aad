// ModelConfig: the architecture hyper-parameters Ferrite reads from a
// Hugging Face config.json (transformers 4.x and 5.x spellings: `rope_theta`
// / `rope_scaling` at the top level, or `rope_parameters`). Multimodal
// checkpoints are read through their `text_config`.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "formats/json_config.h"
#include "tensor/dtype.h"

namespace ferrite {

struct ModelConfig {
  std::string model_type;  // "llama", "qwen3", ... (of the text model)
  std::string source;      // where it was read from, for messages
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t intermediate_size = 0;
  int64_t max_position_embeddings = 4096;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  double partial_rotary_factor = 1.0;
  std::string rope_scaling = "none";  // "none" | "llama3" | "linear"
  double rope_factor = 1.0;
  double rope_low_freq_factor = 1.0;
  double rope_high_freq_factor = 4.0;
  int64_t rope_original_max_positions = 8192;
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  std::optional<DType> torch_dtype;  // the checkpoint's declared dtype
  std::vector<int64_t> eos_token_ids;
  std::optional<int64_t> bos_token_id;
  bool multimodal = false;  // read from text_config of a vision-language checkpoint
  // Checkpoint name prefix of the language model's modules ("model." or, for
  // vision-language checkpoints, "model.language_model.").
  std::string weight_prefix = "model.";

  // Every family-specific field lives in the JSON; families read what they need.
  std::optional<JsonConfig> json;
};

// Reads and checks the common fields (positive sizes, heads dividing evenly).
Result<ModelConfig> parse_model_config(const JsonConfig& json);
// Reads <dir>/config.json.
Result<ModelConfig> load_model_config(const std::string& model_dir);

}  // namespace ferrite
