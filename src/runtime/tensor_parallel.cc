#include "runtime/tensor_parallel.h"

#include <fmt/format.h>

#include <map>
#include <set>

#include "contracts/causal_paged_attention.h"
#include "contracts/dense_swiglu.h"
#include "contracts/gated_delta_recurrent_attention.h"
#include "contracts/last_token_dense_linear.h"
#include "contracts/residual_add.h"
#include "contracts/routed_shared_swiglu_moe.h"
#include "contracts/routed_swiglu_moe.h"
#include "contracts/tp_all_gather.h"
#include "contracts/tp_all_reduce_sum.h"

namespace ferrite {

namespace {

using Segment = WeightShard::Segment;

bool same_cut(const WeightShard& a, const WeightShard& b) {
  if (a.dim != b.dim || a.segments.size() != b.segments.size()) return false;
  for (size_t i = 0; i < a.segments.size(); ++i)
    if (a.segments[i].size != b.segments[i].size || a.segments[i].parts != b.segments[i].parts)
      return false;
  return true;
}

class Splitter {
 public:
  Splitter(const ModelProgram& full, int world) : full_(full), W_(world) {
    out_ = full;
    out_.nodes.clear();
    out_.tensor_parallel = world;
  }

  Result<ModelProgram> run() {
    for (const ProgramNode& node : full_.nodes) split_node(node);
    if (!unsplittable_.empty()) {
      std::string msg = fmt::format("cannot split {} across {} ranks (tensor parallelism): "
                                    "no tensor-parallel split for",
                                    full_.family, W_);
      for (const std::string& e : unsplittable_) msg += "\n  - " + e;
      return unsupported(msg);
    }
    if (!errors_.empty()) {
      std::string msg = fmt::format("cannot split {} across {} ranks (--tensor-parallel-size {}):",
                                    full_.family, W_, W_);
      for (const std::string& e : errors_) msg += "\n  - " + e;
      return invalid_argument(msg);
    }
    return std::move(out_);
  }

 private:
  void error(std::string e) {
    if (seen_.insert(e).second) errors_.push_back(std::move(e));
  }

  // Parts a count of heads splits into: W when W divides it, the count
  // itself when it divides W (replicated on W / count ranks); 0 otherwise.
  int64_t head_parts(int64_t heads) const {
    if (heads % W_ == 0) return W_;
    if (W_ % heads == 0) return heads;
    return 0;
  }

  WeightDecl* decl(const std::string& name) {
    for (WeightDecl& w : out_.weights)
      if (w.name == name) return &w;
    return nullptr;
  }

  // A copy of weight `name` under a new name (the same checkpoint data),
  // for a second use with another cut (a tied embedding: the table whole,
  // the LM head cut by vocabulary).
  std::string clone(const std::string& name, const std::string& suffix) {
    const WeightDecl* orig = nullptr;
    for (const WeightDecl& w : full_.weights)
      if (w.name == name) orig = &w;
    FERRITE_CHECK(orig) << name;
    WeightDecl c = *orig;
    c.name = name + suffix;
    if (c.sources.empty()) c.sources = {{WeightSlice{name, 0, -1}}};
    out_.weights.push_back(std::move(c));
    return name + suffix;
  }

  // The name to bind for weight `name` kept whole.
  std::string keep(const std::string& name) {
    auto it = cut_.find(name);
    if (it == cut_.end() || !it->second.split()) {
      cut_[name] = WeightShard{};
      return name;
    }
    const std::string whole = name + "@whole";
    if (!decl(whole)) clone(name, "@whole");
    return whole;
  }

  // The name to bind for weight `name` cut along `dim` into `segments`
  // (empty: one segment of the whole dimension in W parts).
  std::string cut(const std::string& name, int dim, std::vector<Segment> segments = {}) {
    const WeightDecl* orig = nullptr;
    for (const WeightDecl& w : full_.weights)
      if (w.name == name) orig = &w;
    if (!orig) return name;  // the planner reports the undeclared weight
    WeightShard s;
    s.dim = dim;
    s.full_shape = orig->shape;
    if (dim >= orig->shape.rank()) {
      error(fmt::format("weight '{}' {} has no dimension {} to split", name,
                        orig->shape.to_string(), dim));
      return name;
    }
    if (segments.empty()) segments = {{orig->shape[dim], W_}};
    s.segments = segments;
    int64_t total = 0, local = 0;
    for (const Segment& g : segments) {
      total += g.size;
      local += g.size / g.parts;
      if (g.size % g.parts != 0)
        error(fmt::format("weight '{}': {} rows do not split {} ways", name, g.size, g.parts));
    }
    FERRITE_CHECK(total == orig->shape[dim]) << name << " segments";
    // A block format (GGUF q8_0, q4_k, ...) is cut on whole blocks only.
    const int64_t block = dtype_block_elems(orig->dtype);
    if (block > 1 && dim == orig->shape.rank() - 1)
      for (const Segment& g : segments)
        if ((g.size / g.parts) % block != 0)
          error(fmt::format("weight '{}' ({}): rows of {} elements cut into parts of {}, not "
                            "whole blocks of {}",
                            name, dtype_name(orig->dtype), orig->shape[dim], g.size / g.parts,
                            block));
    std::string bound = name;
    auto it = cut_.find(name);
    if (it != cut_.end() && !same_cut(it->second, s)) {
      bound = name + fmt::format("@tp{}", ++clones_);
      clone(name, bound.substr(name.size()));
    } else {
      cut_[name] = s;
    }
    WeightDecl* d = decl(bound);
    d->shard = s;
    d->shape = orig->shape;
    d->shape[dim] = local;
    return bound;
  }

  void reshape_state(const std::string& name, Shape shape) {
    for (StateDecl& st : out_.states)
      if (st.name == name) st.shape = shape;
  }

  const std::string& partial_value(int64_t width) {
    auto it = partial_.find(width);
    if (it != partial_.end()) return it->second;
    std::string name = partial_.empty() ? "tp.partial" : fmt::format("tp.partial_{}", width);
    out_.values.push_back({name, ValueRows::kTokens, width, true});
    return partial_.emplace(width, name).first->second;
  }

  // Binds partial_out of `n` and appends n, the all-reduce and the residual add.
  void finish_block(ProgramNode n, const ContractSchema& schema) {
    const int64_t H = static_cast<int64_t>(n.attrs.u("hidden_size"));
    const std::string partial = partial_value(H);
    const std::string hidden = n.bindings[schema.binding_index("hidden")].name;
    n.bindings[schema.binding_index("partial_out")] = BindingRef::value(partial);
    const std::string base = n.name;
    out_.nodes.push_back(std::move(n));
    ProgramNode ar;
    ar.name = base + ".all_reduce";
    ar.attrs.set("width", static_cast<uint64_t>(H)).set("world_size", static_cast<uint64_t>(W_));
    ar.bind(tp_all_reduce_sum::contract(), {{"x", BindingRef::value(partial)}});
    out_.nodes.push_back(std::move(ar));
    ProgramNode add;
    add.name = base + ".residual";
    add.attrs.set("hidden_size", static_cast<uint64_t>(H));
    add.bind(residual_add::contract(), {{"a", BindingRef::value(hidden)},
                                        {"b", BindingRef::value(partial)},
                                        {"out", BindingRef::value(hidden)}});
    out_.nodes.push_back(std::move(add));
  }

  // Rebinds weight role `role` of n to `name` (when bound).
  static void rebind(ProgramNode& n, const ContractSchema& schema, const char* role,
                     const std::string& name) {
    BindingRef& r = n.bindings[schema.binding_index(role)];
    if (r.source == BindingRef::Source::kWeight) r.name = name;
  }
  static const std::string& weight_of(const ProgramNode& n, const ContractSchema& schema,
                                      const char* role) {
    return n.bindings[schema.binding_index(role)].name;
  }
  static bool bound(const ProgramNode& n, const ContractSchema& schema, const char* role) {
    return n.bindings[schema.binding_index(role)].source != BindingRef::Source::kNone;
  }
  // Every weight binding of n not rebound by its rule stays whole.
  void keep_rest(ProgramNode& n, const std::set<std::string>& cut_roles,
                 const ContractSchema& schema) {
    const auto& specs = schema.bindings();
    for (size_t i = 0; i < specs.size() && i < n.bindings.size(); ++i)
      if (n.bindings[i].source == BindingRef::Source::kWeight && !cut_roles.count(specs[i].role))
        n.bindings[i].name = keep(n.bindings[i].name);
  }

  void split_node(const ProgramNode& node) {
    const std::string& id = node.contract_id;
    if (id == causal_paged_attention::contract().id()) return attention(node);
    if (id == gated_delta_recurrent_attention::contract().id()) return gated_delta(node);
    if (id == dense_swiglu::contract().id()) return dense_mlp(node);
    if (id == routed_swiglu_moe::contract().id()) return moe(node, false);
    if (id == routed_shared_swiglu_moe::contract().id()) return moe(node, true);
    if (id == last_token_dense_linear::contract().id()) return lm_head(node);
    if (id == "token_embedding" || id == "rms_norm" || id == "residual_add") {
      ProgramNode n = node;
      for (BindingRef& r : n.bindings)
        if (r.source == BindingRef::Source::kWeight) r.name = keep(r.name);
      out_.nodes.push_back(std::move(n));
      return;
    }
    std::string e = fmt::format("{} (node {})", id, node.name);
    if (unsplittable_seen_.insert(id).second) unsplittable_.push_back(e);
  }

  void attention(const ProgramNode& node) {
    const ContractSchema& s = causal_paged_attention::contract();
    const auto p = causal_paged_attention::Params::from(node.attrs);
    const int64_t nh = p.num_heads, nkv = p.num_kv_heads, hd = p.head_dim;
    if (nh % W_ != 0) {
      error(fmt::format("attention: {} query heads do not split {} ways", nh, W_));
      return;
    }
    const int64_t kv_parts = head_parts(nkv);
    if (kv_parts == 0) {
      error(fmt::format("attention: {} KV heads do not split {} ways (the tensor-parallel size "
                        "must divide the KV heads or be a multiple of them)",
                        nkv, W_));
      return;
    }
    ProgramNode n = node;
    n.attrs.set("num_heads", static_cast<uint64_t>(nh / W_))
        .set("num_kv_heads", static_cast<uint64_t>(nkv / kv_parts));
    const int64_t q_rows = nh * hd * (p.output_gate ? 2 : 1), kv_rows = nkv * hd;
    rebind(n, s, "q_proj", cut(weight_of(node, s, "q_proj"), 0, {{q_rows, W_}}));
    rebind(n, s, "k_proj", cut(weight_of(node, s, "k_proj"), 0, {{kv_rows, kv_parts}}));
    rebind(n, s, "v_proj", cut(weight_of(node, s, "v_proj"), 0, {{kv_rows, kv_parts}}));
    rebind(n, s, "o_proj", cut(weight_of(node, s, "o_proj"), 1, {{nh * hd, W_}}));
    if (bound(node, s, "q_bias"))
      rebind(n, s, "q_bias", cut(weight_of(node, s, "q_bias"), 0, {{q_rows, W_}}));
    if (bound(node, s, "k_bias"))
      rebind(n, s, "k_bias", cut(weight_of(node, s, "k_bias"), 0, {{kv_rows, kv_parts}}));
    if (bound(node, s, "v_bias"))
      rebind(n, s, "v_bias", cut(weight_of(node, s, "v_bias"), 0, {{kv_rows, kv_parts}}));
    keep_rest(n, {"q_proj", "k_proj", "v_proj", "o_proj", "q_bias", "k_bias", "v_bias"}, s);
    for (const char* cache : {"k_cache", "v_cache"})
      reshape_state(weight_of(node, s, cache), {nkv / kv_parts, hd});
    finish_block(std::move(n), s);
  }

  void gated_delta(const ProgramNode& node) {
    const ContractSchema& s = gated_delta_recurrent_attention::contract();
    const auto p = gated_delta_recurrent_attention::Params::from(node.attrs);
    const int64_t Hk = p.num_k_heads, Hv = p.num_v_heads, dk = p.k_head_dim, dv = p.v_head_dim;
    if (p.tiled_value_heads) {
      error("linear attention: tiled value heads (GGUF's Qwen3.5 layout) have no tensor-parallel "
            "split yet");
      return;
    }
    if (Hv % W_ != 0) {
      error(fmt::format("linear attention: {} value heads do not split {} ways", Hv, W_));
      return;
    }
    const int64_t k_parts = head_parts(Hk);
    if (k_parts == 0) {
      error(fmt::format("linear attention: {} key heads do not split {} ways (the "
                        "tensor-parallel size must divide the key heads or be a multiple of "
                        "them)",
                        Hk, W_));
      return;
    }
    ProgramNode n = node;
    const int64_t lk = Hk / k_parts, lv = Hv / W_;
    n.attrs.set("num_k_heads", static_cast<uint64_t>(lk))
        .set("num_v_heads", static_cast<uint64_t>(lv));
    const std::vector<Segment> channels = {{Hk * dk, k_parts}, {Hk * dk, k_parts}, {Hv * dv, W_}};
    rebind(n, s, "in_proj_qkv", cut(weight_of(node, s, "in_proj_qkv"), 0, channels));
    rebind(n, s, "conv_weight", cut(weight_of(node, s, "conv_weight"), 0, channels));
    rebind(n, s, "in_proj_z", cut(weight_of(node, s, "in_proj_z"), 0));
    for (const char* role : {"in_proj_b", "in_proj_a", "a_log", "dt_bias"})
      rebind(n, s, role, cut(weight_of(node, s, role), 0));
    rebind(n, s, "out_proj", cut(weight_of(node, s, "out_proj"), 1));
    keep_rest(n,
              {"in_proj_qkv", "conv_weight", "in_proj_z", "in_proj_b", "in_proj_a", "a_log",
               "dt_bias", "out_proj"},
              s);
    const int64_t K = p.conv_kernel;
    reshape_state(weight_of(node, s, "conv_state"),
                  {std::max<int64_t>(K - 1, 1), 2 * lk * dk + lv * dv});
    reshape_state(weight_of(node, s, "delta_state"), {lv, dk, dv});
    finish_block(std::move(n), s);
  }

  void dense_mlp(const ProgramNode& node) {
    const ContractSchema& s = dense_swiglu::contract();
    const int64_t I = static_cast<int64_t>(node.attrs.u("intermediate_size"));
    if (I % W_ != 0) {
      error(fmt::format("MLP: intermediate_size {} does not split {} ways", I, W_));
      return;
    }
    ProgramNode n = node;
    n.attrs.set("intermediate_size", static_cast<uint64_t>(I / W_));
    rebind(n, s, "gate", cut(weight_of(node, s, "gate"), 0));
    rebind(n, s, "up", cut(weight_of(node, s, "up"), 0));
    rebind(n, s, "down", cut(weight_of(node, s, "down"), 1));
    keep_rest(n, {"gate", "up", "down"}, s);
    finish_block(std::move(n), s);
  }

  void moe(const ProgramNode& node, bool shared) {
    const ContractSchema& s =
        shared ? routed_shared_swiglu_moe::contract() : routed_swiglu_moe::contract();
    const auto p = routed_swiglu_moe::Params::from(node.attrs);
    const int64_t I = p.intermediate_size, Is = p.shared_intermediate_size;
    bool ok = true;
    if (I % W_ != 0) {
      error(fmt::format("MoE: the experts' intermediate size {} does not split {} ways "
                        "(experts are split within, not across ranks)",
                        I, W_));
      ok = false;
    }
    if (shared && Is % W_ != 0) {
      error(fmt::format("MoE: the shared expert's intermediate size {} does not split {} ways",
                        Is, W_));
      ok = false;
    }
    if (!ok) return;
    ProgramNode n = node;
    n.attrs.set("intermediate_size", static_cast<uint64_t>(I / W_));
    rebind(n, s, "gate_up", cut(weight_of(node, s, "gate_up"), 2));
    rebind(n, s, "down", cut(weight_of(node, s, "down"), 2));
    std::set<std::string> cut_roles = {"gate_up", "down"};
    if (shared) {
      n.attrs.set("shared_intermediate_size", static_cast<uint64_t>(Is / W_));
      rebind(n, s, "shared_gate", cut(weight_of(node, s, "shared_gate"), 0));
      rebind(n, s, "shared_up", cut(weight_of(node, s, "shared_up"), 0));
      rebind(n, s, "shared_down", cut(weight_of(node, s, "shared_down"), 1));
      cut_roles.insert({"shared_gate", "shared_up", "shared_down"});
    }
    keep_rest(n, cut_roles, s);
    finish_block(std::move(n), s);
  }

  void lm_head(const ProgramNode& node) {
    const ContractSchema& s = last_token_dense_linear::contract();
    const int64_t V = static_cast<int64_t>(node.attrs.u("vocab_size"));
    if (V % W_ != 0) {
      error(fmt::format("LM head: vocab_size {} does not split {} ways (the head is "
                        "vocab-parallel)",
                        V, W_));
      return;
    }
    ProgramNode n = node;
    n.attrs.set("vocab_size", static_cast<uint64_t>(V / W_));
    rebind(n, s, "lm_head", cut(weight_of(node, s, "lm_head"), 0));
    const std::string logits = n.bindings[s.binding_index("logits")].name;
    const std::string local = "tp.logits";
    const ValueDecl* full_logits = full_.find_value(logits);
    ValueDecl v{local, ValueRows::kSequences, V / W_, false, DType::kF32};
    if (full_logits) {
      v.activation_dtype = full_logits->activation_dtype;
      v.dtype = full_logits->dtype;
    }
    out_.values.push_back(v);
    n.bindings[s.binding_index("logits")] = BindingRef::value(local);
    const std::string base = n.name;
    out_.nodes.push_back(std::move(n));
    ProgramNode g;
    g.name = base + ".all_gather";
    g.attrs.set("width", static_cast<uint64_t>(V / W_))
        .set("world_size", static_cast<uint64_t>(W_))
        .set("out_width", static_cast<uint64_t>(V));
    g.bind(tp_all_gather::contract(),
           {{"x", BindingRef::value(local)}, {"out", BindingRef::value(logits)}});
    out_.nodes.push_back(std::move(g));
  }

  const ModelProgram& full_;
  const int W_;
  ModelProgram out_;
  std::vector<std::string> errors_;
  std::set<std::string> seen_;
  std::vector<std::string> unsplittable_;
  std::set<std::string> unsplittable_seen_;
  std::map<std::string, WeightShard> cut_;  // weight -> how its own name is bound
  std::map<int64_t, std::string> partial_;
  int clones_ = 0;
};

}  // namespace

Result<ModelProgram> split_program(const ModelProgram& program, int world) {
  if (world < 1 || world > kMaxTensorParallel)
    return invalid_argument(fmt::format("--tensor-parallel-size {} outside [1, {}]", world,
                                        kMaxTensorParallel));
  if (program.tensor_parallel != 1)
    return internal_error("split_program: the program is split already");
  if (world == 1) return program;
  return Splitter(program, world).run();
}

std::vector<std::pair<int64_t, int64_t>> shard_ranges(const WeightShard& shard, int rank,
                                                      int world) {
  std::vector<std::pair<int64_t, int64_t>> out;
  const Shape& f = shard.full_shape;
  if (!shard.split()) {
    out.emplace_back(0, f.numel());
    return out;
  }
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < shard.dim; ++i) outer *= f[i];
  for (int i = shard.dim + 1; i < f.rank(); ++i) inner *= f[i];
  const int64_t D = f[shard.dim];
  for (int64_t o = 0; o < outer; ++o) {
    int64_t off = 0;
    for (const Segment& g : shard.segments) {
      const int64_t part = g.size / g.parts;
      const int64_t index = rank / (world / g.parts);
      const int64_t begin = (o * D + off + index * part) * inner, end = begin + part * inner;
      if (!out.empty() && out.back().second == begin)
        out.back().second = end;
      else if (end > begin)
        out.emplace_back(begin, end);
      off += g.size;
    }
  }
  return out;
}

}  // namespace ferrite
