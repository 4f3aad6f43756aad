#include "models/model_config.h"

#include <fmt/format.h>

#include <limits>

namespace ferrite {

namespace {

namespace lim = model_limits;
constexpr double kMaxDouble = std::numeric_limits<double>::max();

// Rope settings: transformers 5 keeps them in `rope_parameters`, older
// configs in `rope_theta` + `rope_scaling`. Every factor reaches a division
// or a power in rope_inv_freq, so each must be finite and > 0.
Status read_rope(const JsonConfig& j, ModelConfig* c) {
  FERRITE_ASSIGN_OR_RETURN(c->rope_theta,
                           j.get_positive_float_or("rope_theta", kMaxDouble, c->rope_theta));
  FERRITE_ASSIGN_OR_RETURN(
      c->partial_rotary_factor,
      j.get_positive_float_or("partial_rotary_factor", 1.0, c->partial_rotary_factor));
  std::optional<JsonConfig> rope;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    FERRITE_ASSIGN_OR_RETURN(auto found, j.find_object(key));
    if (found) {
      rope = std::move(found);
      break;
    }
  }
  if (!rope) return Status::ok();
  FERRITE_ASSIGN_OR_RETURN(c->rope_theta,
                           rope->get_positive_float_or("rope_theta", kMaxDouble, c->rope_theta));
  FERRITE_ASSIGN_OR_RETURN(
      c->partial_rotary_factor,
      rope->get_positive_float_or("partial_rotary_factor", 1.0, c->partial_rotary_factor));
  std::string type = "default";
  if (rope->has("rope_type")) {
    FERRITE_ASSIGN_OR_RETURN(type, rope->get_string("rope_type"));
  } else if (rope->has("type")) {
    FERRITE_ASSIGN_OR_RETURN(type, rope->get_string("type"));
  }
  if (type == "default" || type == "mrope") {
    c->rope_scaling = "none";
  } else if (type == "linear") {
    c->rope_scaling = "linear";
    FERRITE_ASSIGN_OR_RETURN(c->rope_factor, rope->get_positive_float("factor", kMaxDouble));
  } else if (type == "llama3") {
    c->rope_scaling = "llama3";
    FERRITE_ASSIGN_OR_RETURN(c->rope_factor, rope->get_positive_float("factor", kMaxDouble));
    FERRITE_ASSIGN_OR_RETURN(c->rope_low_freq_factor,
                             rope->get_positive_float("low_freq_factor", kMaxDouble));
    FERRITE_ASSIGN_OR_RETURN(c->rope_high_freq_factor,
                             rope->get_positive_float("high_freq_factor", kMaxDouble));
    // The smoothing divides by (high - low).
    if (!(c->rope_high_freq_factor > c->rope_low_freq_factor))
      return rope->field_error("high_freq_factor",
                               fmt::format("must be greater than low_freq_factor {}",
                                           c->rope_low_freq_factor));
    FERRITE_ASSIGN_OR_RETURN(c->rope_original_max_positions,
                             rope->get_int_in("original_max_position_embeddings", 1,
                                              lim::kMaxPositions));
  } else {
    return unsupported(fmt::format("{}: rope type '{}' is not supported (default, linear, llama3)",
                                   c->source, type));
  }
  return Status::ok();
}

// HF's rotary dimension: int(head_dim * partial_rotary_factor). The kernels
// rotate pairs (i, i + rope_dim / 2) inside one head, so it must be even and
// within the head.
Status set_rope_dim(ModelConfig* c) {
  const double dim = static_cast<double>(c->head_dim) * c->partial_rotary_factor;
  c->rope_dim = static_cast<int64_t>(dim);  // factor in (0, 1]: dim in (0, head_dim]
  if (c->rope_dim < 2 || c->rope_dim % 2 != 0 || c->rope_dim > c->head_dim)
    return invalid_argument(
        fmt::format("{}: partial_rotary_factor {} gives a rotary dimension of {} for head_dim "
                    "{}; it must be even and in [2, head_dim]",
                    c->source, c->partial_rotary_factor, c->rope_dim, c->head_dim));
  return Status::ok();
}

Status check_token_ids(const JsonConfig& j, const char* key, const std::vector<int64_t>& ids,
                       int64_t vocab) {
  // Every eos id becomes a stop id that each generated token is compared with.
  if (static_cast<int64_t>(ids.size()) > lim::kMaxEosTokens)
    return j.field_error(key, fmt::format("has {} entries, more than the limit of {}",
                                          ids.size(), lim::kMaxEosTokens));
  for (int64_t id : ids)
    if (id < 0 || id >= vocab)
      return j.field_error(key, fmt::format("must hold token ids in [0, {}) (vocab_size)", vocab));
  return Status::ok();
}

}  // namespace

Result<ModelConfig> parse_model_config(const JsonConfig& top) {
  ModelConfig c;
  c.source = top.source();
  FERRITE_ASSIGN_OR_RETURN(std::string model_type, top.get_string("model_type"));
  JsonConfig j = top;
  // Vision-language checkpoints: the language model is in text_config.
  FERRITE_ASSIGN_OR_RETURN(auto text, top.find_object("text_config"));
  if (text && !top.has("num_hidden_layers")) {
    j = *text;
    c.multimodal = true;
    c.weight_prefix = "model.language_model.";
    FERRITE_ASSIGN_OR_RETURN(model_type, j.get_string_or("model_type", model_type + "_text"));
  }
  c.model_type = model_type;
  FERRITE_ASSIGN_OR_RETURN(c.vocab_size, j.get_int_in("vocab_size", 1, lim::kMaxVocab));
  FERRITE_ASSIGN_OR_RETURN(c.hidden_size, j.get_int_in("hidden_size", 1, lim::kMaxHidden));
  FERRITE_ASSIGN_OR_RETURN(c.num_layers, j.get_int_in("num_hidden_layers", 1, lim::kMaxLayers));
  FERRITE_ASSIGN_OR_RETURN(c.num_heads, j.get_int_in("num_attention_heads", 1, lim::kMaxHeads));
  FERRITE_ASSIGN_OR_RETURN(c.num_kv_heads,
                           j.get_int_in_or("num_key_value_heads", 1, c.num_heads, c.num_heads));
  if (c.num_heads % c.num_kv_heads != 0)
    return invalid_argument(fmt::format("{}: {} attention heads are not a multiple of {} KV heads",
                                        c.source, c.num_heads, c.num_kv_heads));
  if (j.has("head_dim")) {
    FERRITE_ASSIGN_OR_RETURN(c.head_dim, j.get_int_in("head_dim", 1, lim::kMaxHeadDim));
  } else {
    if (c.hidden_size % c.num_heads != 0)
      return invalid_argument(fmt::format("{}: hidden_size {} is not a multiple of {} heads",
                                          c.source, c.hidden_size, c.num_heads));
    c.head_dim = c.hidden_size / c.num_heads;
    if (c.head_dim > lim::kMaxHeadDim)
      return invalid_argument(
          fmt::format("{}: hidden_size {} / {} heads gives head_dim {}, above the limit of {}",
                      c.source, c.hidden_size, c.num_heads, c.head_dim, lim::kMaxHeadDim));
  }
  if (c.num_heads * c.head_dim > lim::kMaxHidden)
    return invalid_argument(fmt::format(
        "{}: {} attention heads x head_dim {} = {} exceeds the limit of {}", c.source,
        c.num_heads, c.head_dim, c.num_heads * c.head_dim, lim::kMaxHidden));
  FERRITE_ASSIGN_OR_RETURN(c.intermediate_size,
                           j.get_int_in_or("intermediate_size", 0, lim::kMaxIntermediate, 0));
  FERRITE_ASSIGN_OR_RETURN(c.max_position_embeddings,
                           j.get_int_in_or("max_position_embeddings", 1, lim::kMaxPositions,
                                           c.max_position_embeddings));
  FERRITE_ASSIGN_OR_RETURN(c.rms_norm_eps,
                           j.get_positive_float_or("rms_norm_eps", kMaxDouble, c.rms_norm_eps));
  FERRITE_RETURN_IF_ERROR(read_rope(j, &c));
  FERRITE_RETURN_IF_ERROR(set_rope_dim(&c));
  // Per-layer lists must describe exactly the declared layers (the hybrid
  // families index them by layer; the others ignore the values).
  if (j.has("layer_types")) {
    FERRITE_ASSIGN_OR_RETURN(auto types, j.get_string_list("layer_types"));
    if (static_cast<int64_t>(types.size()) != c.num_layers)
      return j.field_error("layer_types",
                           fmt::format("has {} entries for {} layers (num_hidden_layers)",
                                       types.size(), c.num_layers));
  }
  // tie_word_embeddings may sit on the outer config of multimodal checkpoints.
  FERRITE_ASSIGN_OR_RETURN(bool outer_tie, top.get_bool_or("tie_word_embeddings", false));
  FERRITE_ASSIGN_OR_RETURN(c.tie_word_embeddings, j.get_bool_or("tie_word_embeddings", outer_tie));
  FERRITE_ASSIGN_OR_RETURN(c.attention_bias, j.get_bool_or("attention_bias", false));
  for (const char* key : {"dtype", "torch_dtype"}) {
    const JsonConfig& src = j.has(key) ? j : top;
    if (!src.has(key)) continue;
    FERRITE_ASSIGN_OR_RETURN(std::string name, src.get_string(key));
    if (name == "bfloat16")
      c.torch_dtype = DType::kBF16;
    else if (name == "float16")
      c.torch_dtype = DType::kF16;
    else if (name == "float32")
      c.torch_dtype = DType::kF32;
    break;
  }
  for (const JsonConfig* src : std::initializer_list<const JsonConfig*>{&j, &top}) {
    if (!src->has("eos_token_id")) continue;
    FERRITE_ASSIGN_OR_RETURN(c.eos_token_ids, src->get_int_list("eos_token_id"));
    FERRITE_RETURN_IF_ERROR(check_token_ids(*src, "eos_token_id", c.eos_token_ids, c.vocab_size));
    break;
  }
  if (j.has("bos_token_id")) {
    FERRITE_ASSIGN_OR_RETURN(int64_t bos, j.get_int("bos_token_id"));
    FERRITE_RETURN_IF_ERROR(check_token_ids(j, "bos_token_id", {bos}, c.vocab_size));
    c.bos_token_id = bos;
  }
  FERRITE_ASSIGN_OR_RETURN(c.quantization_config, top.find_object("quantization_config"));
  c.json = j;
  return c;
}

Result<ModelConfig> load_model_config(const std::string& model_dir) {
  FERRITE_ASSIGN_OR_RETURN(JsonConfig json, JsonConfig::load(model_dir + "/config.json"));
  return parse_model_config(json);
}

}  // namespace ferrite
