// Operation contracts: versioned, backend-neutral op signatures.
//
// A contract names an operation (`rms_norm`, `causal_paged_attention`, ...),
// its typed attributes, its bindings (activations, weights, state) by role,
// and the oracle tolerance the conformance suite uses to compare providers
// against the CPU reference. Models are written against contracts only;
// backends implement them with providers (runtime/provider.h).
//
// Thread-safety: schemas are immutable after construction and shared.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"

namespace ferrite {

enum class AttrType { kUnsigned, kFloat, kBool, kEnum };

struct AttrSpec {
  std::string name;
  AttrType type = AttrType::kUnsigned;
  bool required = true;
  std::vector<std::string> enum_values;  // for kEnum
  std::string doc;
};

using AttrValue = std::variant<uint64_t, double, bool, std::string>;

// Attribute values of one node. Missing optional attributes read as their
// zero value (0, 0.0, false, first enum value).
class Attributes {
 public:
  Attributes() = default;
  Attributes& set(const std::string& name, AttrValue v) {
    values_[name] = std::move(v);
    return *this;
  }
  // Lookups by name copy no string (a transparent map).
  bool has(std::string_view name) const { return values_.find(name) != values_.end(); }
  uint64_t u(std::string_view name) const;
  double f(std::string_view name) const;
  bool b(std::string_view name) const;
  const std::string& e(std::string_view name) const;
  const std::map<std::string, AttrValue, std::less<>>& values() const { return values_; }
  uint64_t fingerprint() const;
  std::string to_string() const;  // "heads=16 eps=1e-06 ..."

 private:
  std::map<std::string, AttrValue, std::less<>> values_;
};

enum class BindingKind {
  kActivation,  // a per-step tensor in the activation arena
  kWeight,      // a model weight, bound once
  kState,       // persistent per-sequence state (KV pages, recurrent slots)
};

enum class Access { kRead, kWrite, kReadWrite };

struct BindingSpec {
  std::string role;  // "x", "weight", "q_proj", ...
  BindingKind kind = BindingKind::kActivation;
  Access access = Access::kRead;
  // Dimensions, each an attribute name, "tokens", "sequences" or a literal.
  std::vector<std::string> dims;
  bool optional = false;
  int may_alias = -1;  // an output that may alias this input binding index
};

// How the conformance suite compares a provider with the reference.
struct OracleSpec {
  bool exact = false;  // bitwise / integer equality (argmax ids, embeddings)
  double abs_tol = 0;  // per element: |a - b| <= abs_tol + rel_tol * |b|
  double rel_tol = 0;  // applied for f32 activations
  // With bf16/f16 activations: the f32 tolerance times this scale, plus
  // `low_precision_ulps` units of the activation type's rounding at the
  // magnitude of the tensor (its largest |value|): a provider rounds its
  // inputs, intermediates and outputs to that type, and those errors scale
  // with the values flowing through, not with each output element. An exact
  // oracle compares with the reference rounded to the activation type.
  double low_precision_scale = 16;
  double low_precision_ulps = 4;
};

// The identity of a typed-parameter struct (NodeSignature::params checks it).
template <class P>
inline constexpr char kParamsTag = 0;

class ContractSchema {
 public:
  ContractSchema(std::string id, int major, int minor, std::vector<AttrSpec> attrs,
                 std::vector<BindingSpec> bindings, OracleSpec oracle, std::string doc);

  const std::string& id() const { return id_; }
  int major() const { return major_; }
  int minor() const { return minor_; }
  const std::vector<AttrSpec>& attrs() const { return attrs_; }
  const std::vector<BindingSpec>& bindings() const { return bindings_; }
  const OracleSpec& oracle() const { return oracle_; }
  const std::string& doc() const { return doc_; }
  // Hash of id, version, attribute and binding specs: changes whenever the
  // schema does, so stale plans and caches are detected.
  uint64_t fingerprint() const { return fingerprint_; }
  std::string version_string() const;  // "1.0"

  // Every required attribute present with the right type; enum values known;
  // no unknown attributes.
  Status validate(const Attributes& attrs) const;
  // Index of a binding role, or -1.
  int binding_index(const std::string& role) const;

  // The contract's typed parameters: the `Params` of its header, parsed from
  // a node's (validated) attributes once, when the node's signature is made
  // (NodeSignature::resolve_params, at plan time), never per step. Every
  // contract header declares its struct here:
  //   static const ContractSchema s = ContractSchema(...).with_params<Params>();
  template <class P>
  ContractSchema&& with_params() && {
    parse_params_ = [](const Attributes& a) -> std::shared_ptr<const void> {
      return std::make_shared<const P>(P::from(a));
    };
    params_tag_ = &kParamsTag<P>;
    return std::move(*this);
  }
  // Null when the contract declared no typed parameters.
  std::shared_ptr<const void> parse_params(const Attributes& a) const {
    return parse_params_ ? parse_params_(a) : nullptr;
  }
  const void* params_tag() const { return params_tag_; }

 private:
  std::string id_;
  int major_, minor_;
  std::vector<AttrSpec> attrs_;
  std::vector<BindingSpec> bindings_;
  OracleSpec oracle_;
  std::string doc_;
  uint64_t fingerprint_ = 0;
  std::shared_ptr<const void> (*parse_params_)(const Attributes&) = nullptr;
  const void* params_tag_ = nullptr;
};

}  // namespace ferrite
