#include "runtime/tuning.h"

#include <fmt/format.h>

#include <charconv>
#include <cstdlib>

#include "base/hash.h"

namespace ferrite {

namespace {

Status parse(std::string_view variable, std::string_view text, bool* out) {
  if (text == "1" || text == "true" || text == "on" || text == "yes") {
    *out = true;
  } else if (text == "0" || text == "false" || text == "off" || text == "no") {
    *out = false;
  } else {
    return invalid_argument(fmt::format("{}='{}': expected 0 or 1", variable, text));
  }
  return Status::ok();
}

Status parse(std::string_view variable, std::string_view text, int64_t* out) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 0 || v > (1 << 20))
    return invalid_argument(fmt::format("{}='{}': expected an integer in [0, 1048576]", variable, text));
  *out = v;
  return Status::ok();
}

std::string show(bool v) { return v ? "1" : "0"; }
std::string show(int64_t v) { return std::to_string(v); }
const char* type_name(bool) { return "bool"; }
const char* type_name(int64_t) { return "integer"; }

}  // namespace

Status Tuning::set(std::string_view variable, std::string_view value) {
#define FERRITE_TUNING_SET(type, field, env, def, doc) \
  if (variable == env) return parse(variable, value, &field);
  FERRITE_TUNING_KNOBS(FERRITE_TUNING_SET)
#undef FERRITE_TUNING_SET
  return invalid_argument(fmt::format("unknown tuning variable {}", variable));
}

Result<Tuning> Tuning::from_environment(const std::function<const char*(const char*)>& lookup) {
  Tuning t;
  auto get = [&](const char* name) -> const char* {
    return lookup ? lookup(name) : std::getenv(name);
  };
#define FERRITE_TUNING_ENV(type, field, env, def, doc) \
  if (const char* v = get(env)) FERRITE_RETURN_IF_ERROR(t.set(env, v));
  FERRITE_TUNING_KNOBS(FERRITE_TUNING_ENV)
#undef FERRITE_TUNING_ENV
  if (t.threads > 1024) return invalid_argument("FERRITE_THREADS must be in [0, 1024]");
  if (t.cuda_quant_mmq_tokens > 64)
    return invalid_argument("FERRITE_CUDA_QUANT_MMQ_TOKENS must be in [0, 64]");
  if (t.cuda_quant_mmq_min_tokens < 1 || t.cuda_quant_mmq_min_tokens > 9)
    return invalid_argument("FERRITE_CUDA_QUANT_MMQ_MIN_TOKENS must be in [1, 9]");
  if (t.cuda_moe_gate_up_warp_outputs != 1 && t.cuda_moe_gate_up_warp_outputs != 2 &&
      t.cuda_moe_gate_up_warp_outputs != 4)
    return invalid_argument("FERRITE_CUDA_MOE_GATE_UP_WARP_OUTPUTS must be 1, 2 or 4");
  if (t.cuda_moe_down_form < 0 || t.cuda_moe_down_form > 2)
    return invalid_argument("FERRITE_CUDA_MOE_DOWN_FORM must be 0, 1 or 2");
  if (t.cuda_decode_colocate > 2)
    return invalid_argument("FERRITE_CUDA_DECODE_COLOCATE must be 0, 1 or 2");
  return t;
}

uint64_t Tuning::fingerprint() const {
  uint64_t h = fnv1a("tuning");
#define FERRITE_TUNING_HASH(type, field, env, def, doc) \
  h = hash_combine(fnv1a(std::string_view(#field), h), static_cast<uint64_t>(field));
  FERRITE_TUNING_KNOBS(FERRITE_TUNING_HASH)
#undef FERRITE_TUNING_HASH
  return h;
}

std::string Tuning::to_string() const {
  std::string s;
#define FERRITE_TUNING_SHOW(type, field, env, def, doc) \
  s += fmt::format("{}{}={}", s.empty() ? "" : " ", #field, show(field));
  FERRITE_TUNING_KNOBS(FERRITE_TUNING_SHOW)
#undef FERRITE_TUNING_SHOW
  return s;
}

std::string tuning_docs_table() {
  std::string s = "| variable | field | type | default | what |\n|---|---|---|---|---|\n";
#define FERRITE_TUNING_ROW(type, field, env, def, doc)                                   \
  s += fmt::format("| `{}` | `{}` | {} | {} | {} |\n", env, #field, type_name(type(def)), \
                   show(type(def)), doc);
  FERRITE_TUNING_KNOBS(FERRITE_TUNING_ROW)
#undef FERRITE_TUNING_ROW
  return s;
}

}  // namespace ferrite
