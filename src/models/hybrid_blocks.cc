#include "models/hybrid_blocks.h"

#include <fmt/format.h>

#include <algorithm>

#include "contracts/gated_delta_recurrent_attention.h"
#include "contracts/routed_shared_swiglu_moe.h"
#include "contracts/routed_swiglu_moe.h"

namespace ferrite {

namespace {

namespace lim = model_limits;

uint64_t u(int64_t v) { return static_cast<uint64_t>(v); }

std::string layer_prefix(const ModelConfig& c, int64_t layer) {
  return fmt::format("{}layers.{}.", c.weight_prefix, layer);
}

const JsonConfig& json_of(const ModelConfig& c) {
  FERRITE_CHECK(c.json.has_value()) << "ModelConfig without its JSON";
  return *c.json;
}

// `num_experts`, or `num_local_experts` (transformers 5 writes Qwen3-MoE's so);
// 0 when absent, and at most kMaxExperts, with layers x experts bounded.
Result<int64_t> num_experts(const ModelConfig& c) {
  const JsonConfig& j = json_of(c);
  const char* key = j.has("num_experts") ? "num_experts" : "num_local_experts";
  FERRITE_ASSIGN_OR_RETURN(int64_t e, j.get_int_in_or(key, 0, lim::kMaxExperts, 0));
  if (e * c.num_layers > lim::kMaxLayerFanout)
    return j.field_error(key, fmt::format("x {} layers exceeds the limit of {} expert layers",
                                          c.num_layers, lim::kMaxLayerFanout));
  return e;
}

}  // namespace

Result<std::vector<MixerKind>> hybrid_layer_types(const ModelConfig& c) {
  const JsonConfig& j = json_of(c);
  std::vector<MixerKind> kinds;
  if (j.has("layer_types")) {
    FERRITE_ASSIGN_OR_RETURN(auto types, j.get_string_list("layer_types"));
    if (static_cast<int64_t>(types.size()) != c.num_layers)
      return j.field_error("layer_types", fmt::format("has {} entries for {} layers",
                                                      types.size(), c.num_layers));
    for (const std::string& t : types) {
      if (t == "full_attention")
        kinds.push_back(MixerKind::kFullAttention);
      else if (t == "linear_attention")
        kinds.push_back(MixerKind::kLinearAttention);
      else
        return unsupported(
            fmt::format("{}: layer type '{}' is not supported "
                        "(full_attention, linear_attention)",
                        c.source, t));
    }
    return kinds;
  }
  FERRITE_ASSIGN_OR_RETURN(int64_t interval,
                           j.get_int_in_or("full_attention_interval", 1, lim::kMaxLayers, 4));
  for (int64_t i = 0; i < c.num_layers; ++i)
    kinds.push_back((i + 1) % interval == 0 ? MixerKind::kFullAttention
                                            : MixerKind::kLinearAttention);
  return kinds;
}

Result<std::vector<bool>> sparse_mlp_layers(const ModelConfig& c) {
  const JsonConfig& j = json_of(c);
  FERRITE_ASSIGN_OR_RETURN(int64_t experts, num_experts(c));
  FERRITE_ASSIGN_OR_RETURN(int64_t step,
                           j.get_int_in_or("decoder_sparse_step", 1, lim::kMaxLayers, 1));
  // A flag per layer, not a search of the list per layer: the list's length
  // is bounded only by the file.
  std::vector<bool> dense(c.num_layers, false);
  if (j.has("mlp_only_layers")) {
    FERRITE_ASSIGN_OR_RETURN(auto listed, j.get_int_list("mlp_only_layers"));
    for (int64_t i : listed) {
      if (i < 0 || i >= c.num_layers)
        return j.field_error("mlp_only_layers",
                             fmt::format("must hold layer indices in [0, {})", c.num_layers));
      dense[i] = true;
    }
  }
  std::vector<bool> sparse(c.num_layers);
  for (int64_t i = 0; i < c.num_layers; ++i)
    sparse[i] = experts > 0 && !dense[i] && (i + 1) % step == 0;
  return sparse;
}

Result<MoeSpec> read_moe_spec(const ModelConfig& c) {
  const JsonConfig& j = json_of(c);
  MoeSpec s;
  FERRITE_ASSIGN_OR_RETURN(s.num_experts, num_experts(c));
  if (s.num_experts <= 0) return invalid_argument(c.source + ": 'num_experts' must be positive");
  FERRITE_ASSIGN_OR_RETURN(s.top_k, j.get_int_in("num_experts_per_tok", 1, s.num_experts));
  FERRITE_ASSIGN_OR_RETURN(s.intermediate_size,
                           j.get_int_in("moe_intermediate_size", 1, lim::kMaxIntermediate));
  FERRITE_ASSIGN_OR_RETURN(s.shared_intermediate_size,
                           j.get_int_in_or("shared_expert_intermediate_size", 0,
                                           lim::kMaxIntermediate, 0));
  FERRITE_ASSIGN_OR_RETURN(s.normalize_topk, j.get_bool_or("norm_topk_prob", false));
  return s;
}

void add_moe_mlp(ModelProgram& p, const ModelConfig& c, const ProgramOptions& o, int64_t layer,
                 const MoeSpec& s) {
  const std::string pre = layer_prefix(c, layer);
  const int64_t H = c.hidden_size, E = s.num_experts, I = s.intermediate_size;
  const bool shared = s.shared_intermediate_size > 0;
  declare_weight(p, o, pre + "post_attention_layernorm.weight", {H});
  declare_weight(p, o, pre + "mlp.gate.weight", {E, H});
  // Experts: per-expert tensors stacked, or the packed tensors as they are.
  const std::string gate_up = pre + "mlp.experts.gate_up_proj";
  const std::string down = pre + "mlp.experts.down_proj";
  std::vector<WeightSlice> per_gate_up, per_down;
  for (int64_t e = 0; e < E; ++e) {
    const std::string ex = fmt::format("{}mlp.experts.{}.", pre, e);
    per_gate_up.push_back({ex + "gate_proj.weight"});
    per_gate_up.push_back({ex + "up_proj.weight"});
    per_down.push_back({ex + "down_proj.weight"});
  }
  declare_weight(p, o, gate_up, {E, 2, I, H});
  p.weights.back().sources = {std::move(per_gate_up), {{gate_up}}};
  declare_weight(p, o, down, {E, H, I});
  p.weights.back().sources = {std::move(per_down), {{down}}};
  if (shared) {
    const int64_t Is = s.shared_intermediate_size;
    declare_weight(p, o, pre + "mlp.shared_expert_gate.weight", {1, H});
    declare_weight(p, o, pre + "mlp.shared_expert.gate_proj.weight", {Is, H});
    declare_weight(p, o, pre + "mlp.shared_expert.up_proj.weight", {Is, H});
    declare_weight(p, o, pre + "mlp.shared_expert.down_proj.weight", {H, Is});
  }
  ProgramNode n;
  n.name = fmt::format("layers.{}.moe", layer);
  n.attrs.set("hidden_size", u(H))
      .set("num_experts", u(E))
      .set("top_k", u(s.top_k))
      .set("intermediate_size", u(I))
      .set("normalize_topk", s.normalize_topk)
      .set("eps", c.rms_norm_eps)
      .set("zero_centred", s.zero_centred);
  if (shared) n.attrs.set("shared_intermediate_size", u(s.shared_intermediate_size));
  auto w = [&](const std::string& name) { return BindingRef::weight(pre + name); };
  const std::pair<std::string_view, BindingRef> routed[] = {
      {"hidden", BindingRef::value("hidden")},
      {"norm", w("post_attention_layernorm.weight")},
      {"router", w("mlp.gate.weight")},
      {"gate_up", BindingRef::weight(gate_up)},
      {"down", BindingRef::weight(down)}};
  if (shared) {
    n.bind(routed_shared_swiglu_moe::contract(),
           {routed[0], routed[1], routed[2], routed[3], routed[4],
            {"shared_gate_weight", w("mlp.shared_expert_gate.weight")},
            {"shared_gate", w("mlp.shared_expert.gate_proj.weight")},
            {"shared_up", w("mlp.shared_expert.up_proj.weight")},
            {"shared_down", w("mlp.shared_expert.down_proj.weight")}});
  } else {
    n.bind(routed_swiglu_moe::contract(),
           {routed[0], routed[1], routed[2], routed[3], routed[4]});
  }
  p.nodes.push_back(std::move(n));
}

Result<DeltaSpec> read_delta_spec(const ModelConfig& c, DeltaLayout layout) {
  const JsonConfig& j = json_of(c);
  DeltaSpec s;
  s.layout = layout;
  FERRITE_ASSIGN_OR_RETURN(s.num_k_heads,
                           j.get_int_in("linear_num_key_heads", 1, lim::kMaxHeads));
  FERRITE_ASSIGN_OR_RETURN(s.num_v_heads,
                           j.get_int_in("linear_num_value_heads", 1, lim::kMaxHeads));
  FERRITE_ASSIGN_OR_RETURN(s.k_head_dim, j.get_int_in("linear_key_head_dim", 1, lim::kMaxHeadDim));
  FERRITE_ASSIGN_OR_RETURN(s.v_head_dim,
                           j.get_int_in("linear_value_head_dim", 1, lim::kMaxHeadDim));
  FERRITE_ASSIGN_OR_RETURN(s.conv_kernel,
                           j.get_int_in_or("linear_conv_kernel_dim", 1, lim::kMaxConvKernel, 4));
  if (s.num_k_heads * s.k_head_dim > lim::kMaxHidden ||
      s.num_v_heads * s.v_head_dim > lim::kMaxHidden)
    return invalid_argument(fmt::format(
        "{}: linear attention widths {} x {} (keys) and {} x {} (values) must be at most {}",
        c.source, s.num_k_heads, s.k_head_dim, s.num_v_heads, s.v_head_dim, lim::kMaxHidden));
  // The grouped layout declares one slice per key head and layer.
  if (s.num_k_heads * c.num_layers > lim::kMaxLayerFanout)
    return j.field_error("linear_num_key_heads",
                         fmt::format("x {} layers exceeds the limit of {}", c.num_layers,
                                     lim::kMaxLayerFanout));
  if (s.num_v_heads % s.num_k_heads != 0)
    return invalid_argument(
        fmt::format("{}: {} linear value heads are not a multiple of {} key heads", c.source,
                    s.num_v_heads, s.num_k_heads));
  return s;
}

void add_gated_delta(ModelProgram& p, const ModelConfig& c, const ProgramOptions& o, int64_t layer,
                     const DeltaSpec& s) {
  const std::string pre = layer_prefix(c, layer);
  const std::string la = pre + "linear_attn.";
  const int64_t H = c.hidden_size, Hk = s.num_k_heads, Hv = s.num_v_heads;
  const int64_t dk = s.k_head_dim, dv = s.v_head_dim, r = Hv / Hk;
  const int64_t conv_dim = 2 * Hk * dk + Hv * dv;
  const int64_t K = s.conv_kernel;
  declare_weight(p, o, pre + "input_layernorm.weight", {H});
  declare_weight(p, o, la + "in_proj_qkv.weight", {conv_dim, H});
  declare_weight(p, o, la + "in_proj_z.weight", {Hv * dv, H});
  declare_weight(p, o, la + "in_proj_b.weight", {Hv, H});
  declare_weight(p, o, la + "in_proj_a.weight", {Hv, H});
  if (s.layout == DeltaLayout::kGrouped) {
    // in_proj_qkvz rows: per key head g: q_g (dk), k_g (dk), v_g (r dv), z_g (r dv);
    // in_proj_ba rows: per key head g: b_g (r), a_g (r). Regroup into [Q|K|V], Z, B, A.
    const std::string qkvz = la + "in_proj_qkvz.weight", ba = la + "in_proj_ba.weight";
    const int64_t stride = 2 * dk + 2 * r * dv;
    std::vector<WeightSlice> qkv, z, b, a;
    for (int64_t g = 0; g < Hk; ++g) qkv.push_back({qkvz, g * stride, dk});
    for (int64_t g = 0; g < Hk; ++g) qkv.push_back({qkvz, g * stride + dk, dk});
    for (int64_t g = 0; g < Hk; ++g) qkv.push_back({qkvz, g * stride + 2 * dk, r * dv});
    for (int64_t g = 0; g < Hk; ++g) z.push_back({qkvz, g * stride + 2 * dk + r * dv, r * dv});
    for (int64_t g = 0; g < Hk; ++g) b.push_back({ba, g * 2 * r, r});
    for (int64_t g = 0; g < Hk; ++g) a.push_back({ba, g * 2 * r + r, r});
    const size_t n = p.weights.size();
    p.weights[n - 4].sources = {std::move(qkv)};
    p.weights[n - 3].sources = {std::move(z)};
    p.weights[n - 2].sources = {std::move(b)};
    p.weights[n - 1].sources = {std::move(a)};
  }
  // conv1d.weight is [conv_dim, 1, K] in checkpoints: viewed as [conv_dim, K].
  declare_weight(p, o, la + "conv1d.weight", {conv_dim, K});
  p.weights.back().sources = {{{la + "conv1d.weight"}}};
  declare_weight(p, o, la + "A_log", {Hv});
  declare_weight(p, o, la + "dt_bias", {Hv});
  declare_weight(p, o, la + "norm.weight", {dv});
  declare_weight(p, o, la + "out_proj.weight", {H, Hv * dv});

  const std::string conv_state = fmt::format("layers.{}.conv_state", layer);
  const std::string delta_state = fmt::format("layers.{}.delta_state", layer);
  p.states.push_back({conv_state,
                      StateKind::kRecurrentSlot,
                      {std::max<int64_t>(K - 1, 1), conv_dim},
                      DType::kF32});
  p.states.push_back({delta_state, StateKind::kRecurrentSlot, {Hv, dk, dv}, DType::kF32});

  ProgramNode n;
  n.name = fmt::format("layers.{}.linear_attention", layer);
  n.attrs.set("hidden_size", u(H))
      .set("num_k_heads", u(Hk))
      .set("num_v_heads", u(Hv))
      .set("k_head_dim", u(dk))
      .set("v_head_dim", u(dv))
      .set("conv_kernel", u(K))
      .set("eps", c.rms_norm_eps)
      .set("zero_centred", true);
  auto w = [&](const std::string& name) { return BindingRef::weight(la + name); };
  n.bind(gated_delta_recurrent_attention::contract(),
         {{"hidden", BindingRef::value("hidden")},
          {"input_norm", BindingRef::weight(pre + "input_layernorm.weight")},
          {"in_proj_qkv", w("in_proj_qkv.weight")},
          {"in_proj_z", w("in_proj_z.weight")},
          {"in_proj_b", w("in_proj_b.weight")},
          {"in_proj_a", w("in_proj_a.weight")},
          {"conv_weight", w("conv1d.weight")},
          {"a_log", w("A_log")},
          {"dt_bias", w("dt_bias")},
          {"norm", w("norm.weight")},
          {"out_proj", w("out_proj.weight")},
          {"conv_state", BindingRef::state(conv_state)},
          {"delta_state", BindingRef::state(delta_state)}});
  p.nodes.push_back(std::move(n));
}

Result<ModelProgram> build_hybrid(const ModelConfig& c, const ProgramOptions& o,
                                  const std::string& family, DeltaLayout layout,
                                  const MoeSpec* moe) {
  FERRITE_ASSIGN_OR_RETURN(auto kinds, hybrid_layer_types(c));
  FERRITE_ASSIGN_OR_RETURN(DeltaSpec delta, read_delta_spec(c, layout));
  std::vector<bool> sparse(c.num_layers, false);
  if (moe) {
    FERRITE_ASSIGN_OR_RETURN(sparse, sparse_mlp_layers(c));
  }
  for (int64_t i = 0; i < c.num_layers; ++i)
    if (!sparse[i] && c.intermediate_size <= 0)
      return invalid_argument(
          fmt::format("{}: layer {} has a dense MLP but 'intermediate_size' "
                      "is not positive",
                      c.source, i));
  ModelProgram p;
  p.family = family;
  add_embedding(p, c, o);
  AttentionFlavor flavor;
  flavor.qk_norm = true;
  flavor.output_gate = true;
  flavor.zero_centred = true;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    if (kinds[i] == MixerKind::kFullAttention)
      add_attention(p, c, o, i, flavor);
    else
      add_gated_delta(p, c, o, i, delta);
    if (sparse[i]) {
      MoeSpec s = *moe;
      s.zero_centred = true;
      add_moe_mlp(p, c, o, i, s);
    } else {
      add_dense_mlp(p, c, o, i, c.intermediate_size, /*zero_centred=*/true);
    }
  }
  add_head(p, c, o, /*zero_centred=*/true);
  return p;
}

}  // namespace ferrite
