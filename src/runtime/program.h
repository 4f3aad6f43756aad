// ModelProgram: a model written against contracts. Produced by a family in
// src/models/ from its config; consumed by the planner (which needs no weight
// data) and then by the executor.
//
// Values are per-step activation tensors with one row per packed token (or
// per sequence); weights are named as in the checkpoint; states are
// per-sequence persistent tensors (KV pages, recurrent slots).
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "contracts/contract.h"
#include "tensor/tensor.h"

namespace ferrite {

// A run of rows of a checkpoint tensor: rows are its first dimension, a row
// is the product of the others.
struct WeightSlice {
  std::string tensor;  // checkpoint name
  int64_t row_begin = 0;
  int64_t rows = -1;  // -1: to the end
};

// Tensor parallelism (runtime/tensor_parallel.h): how one rank's weight is
// cut from the whole checkpoint weight. Along dimension `dim` of the whole
// weight (`full_shape`), the segments follow one another; a segment of
// `size` is cut into `parts` equal parts, and rank r of a world of W takes
// part r / (W / parts) of every segment (parts == W: one part each; parts <
// W: a part is replicated on W / parts ranks, e.g. a KV head when the KV
// heads are fewer than the ranks). The rank's weight is its parts, in
// order, with the other dimensions whole.
struct WeightShard {
  int dim = -1;  // -1: not cut (every rank holds the whole weight)
  Shape full_shape;
  struct Segment {
    int64_t size = 0;
    int64_t parts = 1;
  };
  std::vector<Segment> segments;
  bool split() const { return dim >= 0; }
};

struct WeightDecl {
  std::string name;  // checkpoint name, e.g. "model.layers.0.self_attn.q_proj.weight"
  Shape shape;       // expected shape, from the config
  DType dtype;       // stored dtype (from the checkpoint header, or the dummy dtype)
  // Weight materializer. Empty: the checkpoint tensor `name` as it is
  // (zero-copy). Otherwise each entry is one alternative layout (e.g.
  // per-expert tensors, or one packed tensor): the rows of its slices
  // concatenated in order and viewed with `shape`, built once at load into
  // owned memory. The loader keeps the first alternative whose tensors the
  // checkpoint holds; an alternative of one whole tensor stays zero-copy.
  std::vector<std::vector<WeightSlice>> sources;
  // Tensor-parallel programs: `shape` is the rank's; the cut is here.
  WeightShard shard;
  // Act-order 4-bit weights (set by the loader from the checkpoint): one
  // input permutation per run of this many rows (TensorView::input_perm);
  // 0: columns in their natural order.
  int64_t perm_rows = 0;
};

enum class ValueRows { kTokens, kSequences };

struct ValueDecl {
  std::string name;  // "hidden", "ids", "logits"
  ValueRows rows = ValueRows::kTokens;
  int64_t width = 1;             // elements per row
  bool activation_dtype = true;  // false: fixed `dtype` (ids u32, logits f32)
  DType dtype = DType::kF32;
};

enum class StateKind {
  kKvPages,        // [pages, page_size, ...shape]: shared page ids across layers
  kRecurrentSlot,  // [slots, ...shape]: one slot per live sequence
};

struct StateDecl {
  std::string name;  // "layers.0.k_cache"
  StateKind kind = StateKind::kKvPages;
  Shape shape;  // per page row (kv_heads, head_dim) or per slot
  DType dtype = DType::kF32;
};

struct BindingRef {
  enum class Source { kNone, kValue, kWeight, kState };
  Source source = Source::kNone;
  std::string name;
  static BindingRef none() { return {}; }
  static BindingRef value(std::string n) { return {Source::kValue, std::move(n)}; }
  static BindingRef weight(std::string n) { return {Source::kWeight, std::move(n)}; }
  static BindingRef state(std::string n) { return {Source::kState, std::move(n)}; }
};

struct ProgramNode {
  std::string name;         // "layers.3.attention"
  std::string contract_id;  // "causal_paged_attention"
  Attributes attrs;
  std::vector<BindingRef> bindings;  // the contract's binding order (see bind())
  // Sets contract_id and the bindings by role: roles left out are absent
  // (the planner reports a required one). A role the contract does not
  // have is a programming error (checked).
  void bind(const ContractSchema& contract,
            std::initializer_list<std::pair<std::string_view, BindingRef>> roles);
};

struct ModelProgram {
  std::string family;  // "llama", "qwen3", ...
  std::vector<WeightDecl> weights;
  std::vector<ValueDecl> values;
  std::vector<StateDecl> states;
  std::vector<ProgramNode> nodes;
  std::string ids_value = "ids";        // u32 [tokens]: the step's token ids
  std::string logits_value = "logits";  // f32 [sequences, vocab]
  int64_t vocab_size = 0;
  // Ranks the program was split for (runtime/tensor_parallel.h): every rank
  // runs this same program on its own shard of the weights; 1: not split.
  int tensor_parallel = 1;

  const WeightDecl* find_weight(const std::string& name) const;
  const ValueDecl* find_value(const std::string& name) const;
  const StateDecl* find_state(const std::string& name) const;
  // Bytes of every weight as stored, act-order permutation tables included.
  int64_t weight_bytes() const;
};

}  // namespace ferrite
