#include "runtime/planner.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <optional>

#include "base/hash.h"

namespace ferrite {

namespace {

// A declared dimension's size: a literal, an unsigned attribute of the node,
// or nullopt (a derived size such as q_rows, an absent optional attribute,
// pages / page_size / slots): not checked.
std::optional<int64_t> dim_size(const std::string& d, const Attributes& attrs) {
  if (!d.empty() && d.find_first_not_of("0123456789") == std::string::npos)
    return std::stoll(d);
  auto it = attrs.values().find(d);
  if (it == attrs.values().end()) return std::nullopt;
  if (const uint64_t* v = std::get_if<uint64_t>(&it->second)) return static_cast<int64_t>(*v);
  return std::nullopt;
}

std::string dims_string(const std::vector<std::string>& dims, const Attributes& attrs) {
  std::string s;
  for (const std::string& d : dims) {
    if (!s.empty()) s += ", ";
    std::optional<int64_t> v = dim_size(d, attrs);
    s += v && d != std::to_string(*v) ? fmt::format("{}={}", d, *v) : d;
  }
  return "[" + s + "]";
}

// The declared dims of `spec` against a bound weight / state shape (state:
// its leading pages, page_size or slots dims are the pool's, not the
// declaration's). Empty when they agree where both are known.
std::string check_shape(const BindingSpec& spec, const Attributes& attrs, const Shape& shape,
                        bool state) {
  std::vector<std::string> dims = spec.dims;
  if (state)
    while (!dims.empty() && (dims.front() == "pages" || dims.front() == "page_size" ||
                             dims.front() == "slots"))
      dims.erase(dims.begin());
  if (dims.empty()) return {};
  bool ok = static_cast<int>(dims.size()) == shape.rank();
  for (int i = 0; ok && i < shape.rank(); ++i) {
    std::optional<int64_t> v = dim_size(dims[i], attrs);
    if (v && *v != shape[i]) ok = false;
  }
  if (ok) return {};
  return fmt::format("is {}, the contract declares {}", shape.to_string(),
                     dims_string(dims, attrs));
}

// The same for a per-step value: rows of the step's tokens or sequences,
// `width` elements each.
std::string check_value(const BindingSpec& spec, const Attributes& attrs, const ValueDecl& v) {
  if (spec.dims.empty()) return {};
  const std::string& lead = spec.dims.front();
  const char* rows = v.rows == ValueRows::kTokens ? "tokens" : "sequences";
  if ((lead == "tokens" || lead == "sequences") && lead != rows)
    return fmt::format("has a row per {}, the contract declares {}", rows,
                       dims_string(spec.dims, attrs));
  int64_t width = 1;
  for (size_t i = 1; i < spec.dims.size(); ++i) {
    std::optional<int64_t> d = dim_size(spec.dims[i], attrs);
    if (!d) return {};
    width *= *d;
  }
  if (width == v.width) return {};
  return fmt::format("has {} elements per row, the contract declares {}", v.width,
                     dims_string(spec.dims, attrs));
}

// Builds the signature of a node; appends problems to `errors`.
NodeSignature make_signature(const ModelProgram& program, const ProgramNode& node,
                             const ContractSchema& schema, DType activation_dtype,
                             std::vector<std::string>* errors) {
  NodeSignature sig;
  sig.contract = &schema;
  sig.attrs = node.attrs;
  sig.activation_dtype = activation_dtype;
  sig.resolve_params();  // attrs were validated against the schema
  const auto& specs = schema.bindings();
  if (node.bindings.size() != specs.size()) {
    errors->push_back(fmt::format("node {} ({}): {} bindings given, the contract has {}", node.name,
                                  schema.id(), node.bindings.size(), specs.size()));
    return sig;
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    const BindingRef& ref = node.bindings[i];
    std::optional<DType> dt;
    switch (ref.source) {
      case BindingRef::Source::kNone:
        if (!specs[i].optional)
          errors->push_back(fmt::format("node {} ({}): required binding '{}' is not bound",
                                        node.name, schema.id(), specs[i].role));
        break;
      case BindingRef::Source::kValue: {
        const ValueDecl* v = program.find_value(ref.name);
        if (!v) {
          errors->push_back(fmt::format("node {}: unknown value '{}'", node.name, ref.name));
        } else {
          dt = v->activation_dtype ? activation_dtype : v->dtype;
          std::string bad = check_value(specs[i], node.attrs, *v);
          if (!bad.empty())
            errors->push_back(fmt::format("node {} ({}): value '{}' bound to '{}' {}", node.name,
                                          schema.id(), ref.name, specs[i].role, bad));
        }
        break;
      }
      case BindingRef::Source::kWeight: {
        const WeightDecl* w = program.find_weight(ref.name);
        if (!w) {
          errors->push_back(fmt::format("node {}: undeclared weight '{}'", node.name, ref.name));
        } else {
          dt = w->dtype;
          if (w->perm_rows > 0) {
            sig.binding_permuted.resize(specs.size());
            sig.binding_permuted[i] = true;
          }
          // A weight in a block format (GGUF q8_0, q4_k, ...) has rows of
          // whole blocks: its last dimension is a multiple of the block.
          const int64_t block = dtype_block_elems(w->dtype);
          const int64_t row = w->shape.rank() > 0 ? w->shape[w->shape.rank() - 1] : 0;
          if (block > 1 && row % block != 0)
            errors->push_back(fmt::format(
                "node {}: weight '{}' has rows of {} elements, not whole {} blocks of {}",
                node.name, ref.name, row, dtype_name(w->dtype), block));
          std::string bad = check_shape(specs[i], node.attrs, w->shape, /*state=*/false);
          if (!bad.empty())
            errors->push_back(fmt::format("node {} ({}): weight '{}' bound to '{}' {}", node.name,
                                          schema.id(), ref.name, specs[i].role, bad));
        }
        break;
      }
      case BindingRef::Source::kState: {
        const StateDecl* s = program.find_state(ref.name);
        if (!s) {
          errors->push_back(fmt::format("node {}: undeclared state '{}'", node.name, ref.name));
        } else {
          dt = s->dtype;
          std::string bad = check_shape(specs[i], node.attrs, s->shape, /*state=*/true);
          if (!bad.empty())
            errors->push_back(fmt::format("node {} ({}): state '{}' bound to '{}' {}", node.name,
                                          schema.id(), ref.name, specs[i].role, bad));
        }
        break;
      }
    }
    sig.binding_dtypes.push_back(dt);
  }
  return sig;
}

// Picks a provider for `planned`, or appends why none fits.
void choose_provider(const Registry& registry, const PlanOptions& options,
                     const std::string& node_name, PlannedNode* planned,
                     std::vector<std::string>* errors) {
  const std::string& id = planned->signature.contract->id();
  std::vector<const Provider*> candidates = registry.providers_for(id);
  if (!options.prefer.empty()) {
    std::stable_partition(candidates.begin(), candidates.end(), [&](const Provider* p) {
      return p->descriptor().name.find(options.prefer) != std::string::npos;
    });
  }
  std::string reasons;
  for (const Provider* p : candidates) {
    Status s = p->supports(planned->signature);
    if (s.is_ok()) {
      planned->provider = p;
      planned->workspace_bytes = p->workspace_bytes(planned->signature, options.limits);
      return;
    }
    reasons += "; " + s.message();
  }
  if (candidates.empty()) reasons = "; no provider implements this contract";
  errors->push_back(fmt::format("node {} needs {} {} with {} activations{}", node_name, id,
                                planned->signature.contract->version_string(),
                                dtype_name(planned->signature.activation_dtype), reasons));
}

}  // namespace

std::string ResolvedPlan::to_string() const {
  std::string s;
  for (const PlannedNode& n : nodes) {
    s += fmt::format("  {:<28} {:<24} -> {}", n.node->name, n.signature.contract->id(),
                     n.provider->descriptor().name);
    if (n.workspace_bytes) s += fmt::format(" (workspace {} KiB)", n.workspace_bytes / 1024);
    s += "\n";
  }
  s += fmt::format("  {:<28} {:<24} -> {}\n", "sampler.greedy", argmax.signature.contract->id(),
                   argmax.provider->descriptor().name);
  s += fmt::format("  {:<28} {:<24} -> {}\n", "sampler.sample", sampler.signature.contract->id(),
                   sampler.provider->descriptor().name);
  return s;
}

Result<ResolvedPlan> plan_program(const ModelProgram& program, const Registry& registry,
                                  const PlanOptions& options) {
  ResolvedPlan plan;
  plan.backend = registry.backend();
  plan.activation_dtype = options.activation_dtype;
  plan.limits = options.limits;
  plan.tensor_parallel = program.tensor_parallel;
  std::vector<std::string> errors;
  // Tensor parallelism runs on the CPU backend only until a two-GPU machine
  // has run it on CUDA (NCCL communicator, CUDA collective providers, the
  // block providers' partial_out: see docs/tensor_parallel.md).
  if (program.tensor_parallel > 1 && plan.backend != BackendKind::kCpu)
    return unsupported(fmt::format(
        "--tensor-parallel-size {}: tensor parallelism is not verified on the {} backend yet "
        "(it runs on --device cpu; on CUDA no two-GPU run has checked it, so it is refused "
        "rather than shipped unverified)",
        program.tensor_parallel, backend_name(plan.backend)));

  for (const ProgramNode& node : program.nodes) {
    const ContractSchema* schema = registry.contract(node.contract_id);
    if (!schema) {
      errors.push_back(fmt::format("node {}: contract {} is not known to the {} backend", node.name,
                                   node.contract_id, backend_name(plan.backend)));
      continue;
    }
    Status valid = schema->validate(node.attrs);
    if (!valid.is_ok()) {
      errors.push_back(fmt::format("node {}: {}", node.name, valid.message()));
      continue;
    }
    size_t before = errors.size();
    PlannedNode planned;
    planned.node = &node;
    planned.signature = make_signature(program, node, *schema, options.activation_dtype, &errors);
    if (errors.size() != before) continue;
    choose_provider(registry, options, node.name, &planned, &errors);
    if (planned.provider) plan.nodes.push_back(std::move(planned));
  }

  // The sampler stage: greedy and stochastic, over f32 logits.
  for (auto [id, out] : {std::pair{"last_token_masked_argmax", &plan.argmax},
                         std::pair{"last_token_sample", &plan.sampler}}) {
    const ContractSchema* schema = registry.contract(id);
    if (!schema) {
      errors.push_back(fmt::format("sampler: contract {} is not known to the {} backend", id,
                                   backend_name(plan.backend)));
      continue;
    }
    out->signature.contract = schema;
    out->signature.attrs.set("vocab_size", static_cast<uint64_t>(program.vocab_size));
    out->signature.resolve_params();
    // Logits are always f32, whatever the activation dtype.
    out->signature.activation_dtype = DType::kF32;
    out->signature.binding_dtypes.assign(schema->bindings().size(), std::nullopt);
    out->signature.binding_dtypes[0] = DType::kF32;
    out->signature.binding_dtypes[2] = DType::kU32;
    PlanOptions sampler_options = options;
    choose_provider(registry, sampler_options, std::string("sampler.") + id, out, &errors);
  }

  if (!errors.empty()) {
    std::string msg =
        fmt::format("cannot plan {} on the {} backend: {} missing capabilit{}", program.family,
                    backend_name(plan.backend), errors.size(), errors.size() == 1 ? "y" : "ies");
    for (const std::string& e : errors) msg += "\n  - " + e;
    return unsupported(msg);
  }

  uint64_t h = fnv1a(program.family);
  h = hash_combine(h, static_cast<uint64_t>(plan.activation_dtype));
  h = hash_combine(h, options.tuning.fingerprint());
  if (program.tensor_parallel > 1) h = hash_combine(h, 0x7470ull + program.tensor_parallel);
  for (const PlannedNode& n : plan.nodes) {
    plan.workspace_bytes = std::max(plan.workspace_bytes, n.workspace_bytes);
    h = hash_combine(h, n.signature.contract->fingerprint());
    h = hash_combine(h, n.signature.attrs.fingerprint());
    h = hash_combine(h, n.provider->descriptor().fingerprint());
  }
  for (const PlannedNode* n : {&plan.argmax, &plan.sampler}) {
    plan.workspace_bytes = std::max(plan.workspace_bytes, n->workspace_bytes);
    h = hash_combine(h, n->provider->descriptor().fingerprint());
  }
  plan.fingerprint = h;
  return plan;
}

}  // namespace ferrite
