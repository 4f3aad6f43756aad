#include "models/model_config.h"

#include <fmt/format.h>

namespace ferrite {

namespace {

Status check_positive(const ModelConfig& c, const char* name, int64_t v) {
  if (v <= 0)
    return invalid_argument(fmt::format("{}: '{}' must be positive, got {}", c.source, name, v));
  return Status::ok();
}

// Rope settings: transformers 5 keeps them in `rope_parameters`, older
// configs in `rope_theta` + `rope_scaling`.
Status read_rope(const JsonConfig& j, ModelConfig* c) {
  FERRITE_ASSIGN_OR_RETURN(c->rope_theta, j.get_float_or("rope_theta", c->rope_theta));
  FERRITE_ASSIGN_OR_RETURN(c->partial_rotary_factor,
                           j.get_float_or("partial_rotary_factor", c->partial_rotary_factor));
  std::optional<JsonConfig> rope;
  for (const char* key : {"rope_parameters", "rope_scaling"}) {
    FERRITE_ASSIGN_OR_RETURN(auto found, j.find_object(key));
    if (found) {
      rope = std::move(found);
      break;
    }
  }
  if (!rope) return Status::ok();
  FERRITE_ASSIGN_OR_RETURN(c->rope_theta, rope->get_float_or("rope_theta", c->rope_theta));
  FERRITE_ASSIGN_OR_RETURN(c->partial_rotary_factor,
                           rope->get_float_or("partial_rotary_factor", c->partial_rotary_factor));
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
    FERRITE_ASSIGN_OR_RETURN(c->rope_factor, rope->get_float("factor"));
  } else if (type == "llama3") {
    c->rope_scaling = "llama3";
    FERRITE_ASSIGN_OR_RETURN(c->rope_factor, rope->get_float("factor"));
    FERRITE_ASSIGN_OR_RETURN(c->rope_low_freq_factor, rope->get_float("low_freq_factor"));
    FERRITE_ASSIGN_OR_RETURN(c->rope_high_freq_factor, rope->get_float("high_freq_factor"));
    FERRITE_ASSIGN_OR_RETURN(c->rope_original_max_positions,
                             rope->get_int("original_max_position_embeddings"));
  } else {
    return unsupported(fmt::format("{}: rope type '{}' is not supported (default, linear, llama3)",
                                   c->source, type));
  }
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
  FERRITE_ASSIGN_OR_RETURN(c.vocab_size, j.get_positive_int("vocab_size"));
  FERRITE_ASSIGN_OR_RETURN(c.hidden_size, j.get_positive_int("hidden_size"));
  FERRITE_ASSIGN_OR_RETURN(c.num_layers, j.get_positive_int("num_hidden_layers"));
  FERRITE_ASSIGN_OR_RETURN(c.num_heads, j.get_positive_int("num_attention_heads"));
  FERRITE_ASSIGN_OR_RETURN(c.num_kv_heads, j.get_int_or("num_key_value_heads", c.num_heads));
  FERRITE_RETURN_IF_ERROR(check_positive(c, "num_key_value_heads", c.num_kv_heads));
  if (j.has("head_dim")) {
    FERRITE_ASSIGN_OR_RETURN(c.head_dim, j.get_positive_int("head_dim"));
  } else {
    if (c.hidden_size % c.num_heads != 0)
      return invalid_argument(fmt::format("{}: hidden_size {} is not a multiple of {} heads",
                                          c.source, c.hidden_size, c.num_heads));
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.num_heads % c.num_kv_heads != 0)
    return invalid_argument(fmt::format("{}: {} attention heads are not a multiple of {} KV heads",
                                        c.source, c.num_heads, c.num_kv_heads));
  FERRITE_ASSIGN_OR_RETURN(c.intermediate_size, j.get_int_or("intermediate_size", 0));
  FERRITE_ASSIGN_OR_RETURN(c.max_position_embeddings,
                           j.get_int_or("max_position_embeddings", c.max_position_embeddings));
  FERRITE_RETURN_IF_ERROR(check_positive(c, "max_position_embeddings", c.max_position_embeddings));
  FERRITE_ASSIGN_OR_RETURN(c.rms_norm_eps, j.get_float_or("rms_norm_eps", c.rms_norm_eps));
  if (!(c.rms_norm_eps > 0))
    return invalid_argument(fmt::format("{}: 'rms_norm_eps' must be positive", c.source));
  FERRITE_RETURN_IF_ERROR(read_rope(j, &c));
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
    break;
  }
  if (j.has("bos_token_id")) {
    FERRITE_ASSIGN_OR_RETURN(int64_t bos, j.get_int("bos_token_id"));
    c.bos_token_id = bos;
  }
  c.json = j;
  return c;
}

Result<ModelConfig> load_model_config(const std::string& model_dir) {
  FERRITE_ASSIGN_OR_RETURN(JsonConfig json, JsonConfig::load(model_dir + "/config.json"));
  return parse_model_config(json);
}

}  // namespace ferrite
