#include "models/family.h"

// The family table: X(name, config.json model_type values). Family `name`
// is defined by build_<name>() in its own file (<name>.cc or, for variants,
// the file of the family it extends).
#define FERRITE_FAMILIES(X)                            \
  X(llama, "llama")                                    \
  X(qwen3, "qwen3")                                    \
  X(qwen3_moe, "qwen3_moe")                            \
  X(qwen3_next, "qwen3_next")                          \
  X(qwen3_5, "qwen3_5", "qwen3_5_text")                \
  X(qwen3_5_moe, "qwen3_5_moe", "qwen3_5_moe_text")

namespace ferrite {

#define FERRITE_DECLARE(name, ...) \
  Result<ModelProgram> build_##name(const ModelConfig&, const ProgramOptions&);
FERRITE_FAMILIES(FERRITE_DECLARE)
#undef FERRITE_DECLARE

const std::vector<ModelFamily>& model_families() {
  static const std::vector<ModelFamily> families = {
#define FERRITE_ENTRY(name, ...) {#name, {__VA_ARGS__}, &build_##name},
      FERRITE_FAMILIES(FERRITE_ENTRY)
#undef FERRITE_ENTRY
  };
  return families;
}

Result<const ModelFamily*> find_family(const std::string& model_type) {
  std::string known;
  for (const ModelFamily& f : model_families()) {
    for (const std::string& t : f.model_types) {
      if (t == model_type) return &f;
      known += (known.empty() ? "" : ", ") + t;
    }
  }
  return unsupported("architecture '" + model_type + "' is not supported (supported: " + known +
                     ")");
}

}  // namespace ferrite
