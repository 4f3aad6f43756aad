#include "contracts/contract.h"

#include <cstdio>

#include "base/hash.h"

namespace ferrite {

namespace {

template <typename T>
const T* get_if_type(const std::map<std::string, AttrValue, std::less<>>& m,
                     std::string_view name) {
  auto it = m.find(name);
  if (it == m.end()) return nullptr;
  const T* v = std::get_if<T>(&it->second);
  FERRITE_CHECK(v != nullptr) << "attribute '" << name << "' read with the wrong type";
  return v;
}

std::string attr_value_string(const AttrValue& v) {
  switch (v.index()) {
    case 0:
      return std::to_string(std::get<uint64_t>(v));
    case 1: {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%g", std::get<double>(v));
      return buf;
    }
    case 2:
      return std::get<bool>(v) ? "true" : "false";
    default:
      return std::get<std::string>(v);
  }
}

}  // namespace

uint64_t Attributes::u(std::string_view name) const {
  const uint64_t* v = get_if_type<uint64_t>(values_, name);
  return v ? *v : 0;
}
double Attributes::f(std::string_view name) const {
  const double* v = get_if_type<double>(values_, name);
  return v ? *v : 0.0;
}
bool Attributes::b(std::string_view name) const {
  const bool* v = get_if_type<bool>(values_, name);
  return v ? *v : false;
}
const std::string& Attributes::e(std::string_view name) const {
  static const std::string kEmpty;
  const std::string* v = get_if_type<std::string>(values_, name);
  return v ? *v : kEmpty;
}

uint64_t Attributes::fingerprint() const {
  uint64_t h = kFnvOffset;
  for (const auto& [k, v] : values_) {
    h = fnv1a(k, h);
    h = fnv1a(attr_value_string(v), h);
  }
  return h;
}

std::string Attributes::to_string() const {
  std::string s;
  for (const auto& [k, v] : values_) {
    if (!s.empty()) s += ' ';
    s += k + "=" + attr_value_string(v);
  }
  return s;
}

ContractSchema::ContractSchema(std::string id, int major, int minor, std::vector<AttrSpec> attrs,
                               std::vector<BindingSpec> bindings, OracleSpec oracle,
                               std::string doc)
    : id_(std::move(id)),
      major_(major),
      minor_(minor),
      attrs_(std::move(attrs)),
      bindings_(std::move(bindings)),
      oracle_(oracle),
      doc_(std::move(doc)) {
  uint64_t h = fnv1a(id_);
  h = hash_combine(h, static_cast<uint64_t>(major_));
  h = hash_combine(h, static_cast<uint64_t>(minor_));
  for (const AttrSpec& a : attrs_) {
    h = fnv1a(a.name, h);
    h = hash_combine(h, static_cast<uint64_t>(a.type));
    h = hash_combine(h, a.required);
    for (const auto& e : a.enum_values) h = fnv1a(e, h);
  }
  for (const BindingSpec& b : bindings_) {
    h = fnv1a(b.role, h);
    h = hash_combine(h, static_cast<uint64_t>(b.kind));
    h = hash_combine(h, static_cast<uint64_t>(b.access));
    for (const auto& d : b.dims) h = fnv1a(d, h);
    h = hash_combine(h, b.optional);
  }
  fingerprint_ = h;
}

std::string ContractSchema::version_string() const {
  return std::to_string(major_) + "." + std::to_string(minor_);
}

int ContractSchema::binding_index(const std::string& role) const {
  for (size_t i = 0; i < bindings_.size(); ++i)
    if (bindings_[i].role == role) return static_cast<int>(i);
  return -1;
}

Status ContractSchema::validate(const Attributes& attrs) const {
  for (const AttrSpec& spec : attrs_) {
    auto it = attrs.values().find(spec.name);
    if (it == attrs.values().end()) {
      if (spec.required) return invalid_argument(id_ + ": missing attribute '" + spec.name + "'");
      continue;
    }
    const AttrValue& v = it->second;
    bool ok = false;
    switch (spec.type) {
      case AttrType::kUnsigned:
        ok = std::holds_alternative<uint64_t>(v);
        break;
      case AttrType::kFloat:
        ok = std::holds_alternative<double>(v);
        break;
      case AttrType::kBool:
        ok = std::holds_alternative<bool>(v);
        break;
      case AttrType::kEnum: {
        ok = std::holds_alternative<std::string>(v);
        if (ok) {
          ok = false;
          for (const auto& e : spec.enum_values) ok = ok || e == std::get<std::string>(v);
          if (!ok)
            return invalid_argument(id_ + ": attribute '" + spec.name + "' has unknown value '" +
                                    std::get<std::string>(v) + "'");
        }
        break;
      }
    }
    if (!ok) return invalid_argument(id_ + ": attribute '" + spec.name + "' has the wrong type");
  }
  for (const auto& [name, v] : attrs.values()) {
    bool known = false;
    for (const AttrSpec& spec : attrs_) known = known || spec.name == name;
    if (!known) return invalid_argument(id_ + ": unknown attribute '" + name + "'");
  }
  return Status::ok();
}

}  // namespace ferrite
