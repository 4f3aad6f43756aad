#include "models/decoder_blocks.h"

#include <fmt/format.h>

#include "contracts/causal_paged_attention.h"
#include "contracts/dense_swiglu.h"
#include "contracts/last_token_dense_linear.h"
#include "contracts/rms_norm.h"
#include "contracts/token_embedding.h"

namespace ferrite {

namespace {

std::string layer_prefix(const ModelConfig& c, int64_t layer) {
  return fmt::format("{}layers.{}.", c.weight_prefix, layer);
}

uint64_t u(int64_t v) { return static_cast<uint64_t>(v); }

}  // namespace

void declare_weight(ModelProgram& p, const ProgramOptions& o, const std::string& name,
                    Shape shape) {
  WeightDecl w;
  w.name = name;
  w.shape = shape;
  w.dtype = o.weight_dtype;
  p.weights.push_back(std::move(w));
}

void add_embedding(ModelProgram& p, const ModelConfig& c, const ProgramOptions& o) {
  p.vocab_size = c.vocab_size;
  p.values.push_back({"ids", ValueRows::kTokens, 1, false, DType::kU32});
  p.values.push_back({"hidden", ValueRows::kTokens, c.hidden_size, true});
  p.values.push_back({"normed", ValueRows::kTokens, c.hidden_size, true});
  p.values.push_back({"logits", ValueRows::kSequences, c.vocab_size, false, DType::kF32});
  const std::string embed = c.weight_prefix + "embed_tokens.weight";
  declare_weight(p, o, embed, {c.vocab_size, c.hidden_size});
  ProgramNode n;
  n.name = "embed";
  n.attrs.set("vocab_size", u(c.vocab_size)).set("hidden_size", u(c.hidden_size));
  n.bind(token_embedding::contract(), {{"ids", BindingRef::value("ids")},
                                       {"table", BindingRef::weight(embed)},
                                       {"out", BindingRef::value("hidden")}});
  p.nodes.push_back(std::move(n));
}

void add_attention(ModelProgram& p, const ModelConfig& c, const ProgramOptions& o, int64_t layer,
                   const AttentionFlavor& f) {
  const std::string pre = layer_prefix(c, layer);
  const int64_t hd = c.head_dim;
  const int64_t q_rows = c.num_heads * hd * (f.output_gate ? 2 : 1);
  const int64_t kv_rows = c.num_kv_heads * hd;
  const int64_t rope_dim = c.rope_dim;  // even, in [2, head_dim] (parse_model_config)

  declare_weight(p, o, pre + "input_layernorm.weight", {c.hidden_size});
  declare_weight(p, o, pre + "self_attn.q_proj.weight", {q_rows, c.hidden_size});
  declare_weight(p, o, pre + "self_attn.k_proj.weight", {kv_rows, c.hidden_size});
  declare_weight(p, o, pre + "self_attn.v_proj.weight", {kv_rows, c.hidden_size});
  declare_weight(p, o, pre + "self_attn.o_proj.weight", {c.hidden_size, c.num_heads * hd});
  if (f.qk_norm) {
    declare_weight(p, o, pre + "self_attn.q_norm.weight", {hd});
    declare_weight(p, o, pre + "self_attn.k_norm.weight", {hd});
  }
  if (c.attention_bias) {
    declare_weight(p, o, pre + "self_attn.q_proj.bias", {q_rows});
    declare_weight(p, o, pre + "self_attn.k_proj.bias", {kv_rows});
    declare_weight(p, o, pre + "self_attn.v_proj.bias", {kv_rows});
  }
  const std::string kname = fmt::format("layers.{}.k_cache", layer);
  const std::string vname = fmt::format("layers.{}.v_cache", layer);
  p.states.push_back({kname, StateKind::kKvPages, {c.num_kv_heads, hd}, o.kv_dtype});
  p.states.push_back({vname, StateKind::kKvPages, {c.num_kv_heads, hd}, o.kv_dtype});

  ProgramNode n;
  n.name = fmt::format("layers.{}.attention", layer);
  n.attrs.set("hidden_size", u(c.hidden_size))
      .set("num_heads", u(c.num_heads))
      .set("num_kv_heads", u(c.num_kv_heads))
      .set("head_dim", u(hd))
      .set("rope_dim", u(rope_dim))
      .set("rope_theta", c.rope_theta)
      .set("rope_scaling", c.rope_scaling)
      .set("rope_factor", c.rope_factor)
      .set("rope_low_freq_factor", c.rope_low_freq_factor)
      .set("rope_high_freq_factor", c.rope_high_freq_factor)
      .set("rope_original_max_positions", u(c.rope_original_max_positions))
      .set("qk_norm", f.qk_norm)
      .set("output_gate", f.output_gate)
      .set("zero_centred", f.zero_centred)
      .set("attention_bias", c.attention_bias)
      .set("eps", c.rms_norm_eps)
      .set("max_context", u(o.max_context));
  auto w = [&](const std::string& s) { return BindingRef::weight(pre + s); };
  auto opt = [&](bool present, const std::string& s) {
    return present ? BindingRef::weight(pre + s) : BindingRef::none();
  };
  n.bind(causal_paged_attention::contract(),
         {{"hidden", BindingRef::value("hidden")},
          {"input_norm", w("input_layernorm.weight")},
          {"q_proj", w("self_attn.q_proj.weight")},
          {"k_proj", w("self_attn.k_proj.weight")},
          {"v_proj", w("self_attn.v_proj.weight")},
          {"o_proj", w("self_attn.o_proj.weight")},
          {"q_norm", opt(f.qk_norm, "self_attn.q_norm.weight")},
          {"k_norm", opt(f.qk_norm, "self_attn.k_norm.weight")},
          {"q_bias", opt(c.attention_bias, "self_attn.q_proj.bias")},
          {"k_bias", opt(c.attention_bias, "self_attn.k_proj.bias")},
          {"v_bias", opt(c.attention_bias, "self_attn.v_proj.bias")},
          {"k_cache", BindingRef::state(kname)},
          {"v_cache", BindingRef::state(vname)}});
  p.nodes.push_back(std::move(n));
}

void add_dense_mlp(ModelProgram& p, const ModelConfig& c, const ProgramOptions& o, int64_t layer,
                   int64_t intermediate_size, bool zero_centred) {
  const std::string pre = layer_prefix(c, layer);
  declare_weight(p, o, pre + "post_attention_layernorm.weight", {c.hidden_size});
  declare_weight(p, o, pre + "mlp.gate_proj.weight", {intermediate_size, c.hidden_size});
  declare_weight(p, o, pre + "mlp.up_proj.weight", {intermediate_size, c.hidden_size});
  declare_weight(p, o, pre + "mlp.down_proj.weight", {c.hidden_size, intermediate_size});
  ProgramNode n;
  n.name = fmt::format("layers.{}.mlp", layer);
  n.attrs.set("hidden_size", u(c.hidden_size))
      .set("intermediate_size", u(intermediate_size))
      .set("eps", c.rms_norm_eps)
      .set("zero_centred", zero_centred);
  n.bind(dense_swiglu::contract(),
         {{"hidden", BindingRef::value("hidden")},
          {"norm", BindingRef::weight(pre + "post_attention_layernorm.weight")},
          {"gate", BindingRef::weight(pre + "mlp.gate_proj.weight")},
          {"up", BindingRef::weight(pre + "mlp.up_proj.weight")},
          {"down", BindingRef::weight(pre + "mlp.down_proj.weight")}});
  p.nodes.push_back(std::move(n));
}

void add_head(ModelProgram& p, const ModelConfig& c, const ProgramOptions& o, bool zero_centred) {
  const std::string final_norm = c.weight_prefix + "norm.weight";
  declare_weight(p, o, final_norm, {c.hidden_size});
  ProgramNode norm;
  norm.name = "final_norm";
  norm.attrs.set("hidden_size", u(c.hidden_size))
      .set("eps", c.rms_norm_eps)
      .set("zero_centred", zero_centred);
  norm.bind(rms_norm::contract(), {{"x", BindingRef::value("hidden")},
                                   {"weight", BindingRef::weight(final_norm)},
                                   {"out", BindingRef::value("normed")}});
  p.nodes.push_back(std::move(norm));

  std::string head = c.weight_prefix + "embed_tokens.weight";
  if (!c.tie_word_embeddings) {
    head = "lm_head.weight";
    declare_weight(p, o, head, {c.vocab_size, c.hidden_size});
  }
  ProgramNode lm;
  lm.name = "lm_head";
  lm.attrs.set("hidden_size", u(c.hidden_size)).set("vocab_size", u(c.vocab_size));
  lm.bind(last_token_dense_linear::contract(), {{"hidden", BindingRef::value("normed")},
                                                {"lm_head", BindingRef::weight(head)},
                                                {"logits", BindingRef::value("logits")}});
  p.nodes.push_back(std::move(lm));
}

}  // namespace ferrite
