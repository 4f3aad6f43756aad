// ModelConfig: the architecture hyper-parameters Ferrite reads from a
// Hugging Face config.json (transformers 4.x and 5.x spellings: `rope_theta`
// / `rope_scaling` at the top level, or `rope_parameters`). Multimodal
// checkpoints are read through their `text_config`.
//
// Every size is range-checked here (and the family-specific ones where the
// family reads them, hybrid_blocks.cc) before a program is built or any
// weight, KV or state memory is allocated: a value outside its range, or
// sizes that disagree with each other, is invalid_argument naming the field
// and the value.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "formats/json_config.h"
#include "tensor/dtype.h"

namespace ferrite {

// Upper bounds on what a config.json may declare: the one place they are
// chosen. Each is far above every released model (today's largest: 126
// layers, hidden 16384, vocab ~262k, head_dim 256, 512 experts, 10M
// positions) and low enough that every weight, KV and state size built from
// them fits int64 without overflow (the largest, layers x experts x 2 x
// moe_intermediate x hidden x 4 bytes, stays below 2^62).
namespace model_limits {
inline constexpr int64_t kMaxLayers = 1024;              // num_hidden_layers
inline constexpr int64_t kMaxHidden = int64_t{1} << 20;  // hidden_size, heads x head_dim
inline constexpr int64_t kMaxVocab = int64_t{1} << 24;   // vocab_size
inline constexpr int64_t kMaxHeads = 4096;               // attention / linear-attention heads
inline constexpr int64_t kMaxHeadDim = 1024;             // head_dim, linear key / value dims
inline constexpr int64_t kMaxIntermediate = int64_t{1} << 20;  // dense, expert, shared expert
inline constexpr int64_t kMaxPositions = int64_t{1} << 24;     // max_position_embeddings
inline constexpr int64_t kMaxExperts = 4096;                   // num_experts
// layers x experts and layers x linear key heads: bounds the number of
// per-layer weight declarations and slices a program is built from.
inline constexpr int64_t kMaxLayerFanout = int64_t{1} << 18;
inline constexpr int64_t kMaxConvKernel = 64;  // linear_conv_kernel_dim
inline constexpr int64_t kMaxEosTokens = 1024;  // eos_token_id entries (each a stop id)
// Sum of the declared weight bytes (checked in open_model): 1 PiB.
inline constexpr int64_t kMaxWeightBytes = int64_t{1} << 50;
}  // namespace model_limits

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
  double partial_rotary_factor = 1.0;  // in (0, 1]
  int64_t rope_dim = 0;  // int(head_dim * partial_rotary_factor): even, in [2, head_dim]
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

  // config.json's `quantization_config` (top level), read by models/hf_quant.h.
  std::optional<JsonConfig> quantization_config;

  // Every family-specific field lives in the JSON; families read what they need.
  std::optional<JsonConfig> json;
};

// Reads and checks the common fields: every size within model_limits, heads
// a multiple of KV heads, head_dim from hidden_size / heads when absent (then
// hidden_size must divide evenly), rope theta / factors / eps finite and > 0,
// an even rotary dimension, `layer_types` (when present) one entry per layer,
// bos / eos ids inside the vocabulary.
Result<ModelConfig> parse_model_config(const JsonConfig& json);
// Reads <dir>/config.json.
Result<ModelConfig> load_model_config(const std::string& model_dir);

}  // namespace ferrite
