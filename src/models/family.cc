#include "models/family.h"

namespace ferrite {

const std::vector<ModelFamily>& model_families() {
  static const std::vector<ModelFamily> families = {
      {"llama", {"llama"}, &build_llama},
      {"qwen3", {"qwen3"}, &build_qwen3},
      {"qwen3_moe", {"qwen3_moe"}, &build_qwen3_moe},
      {"qwen3_next", {"qwen3_next"}, &build_qwen3_next},
      {"qwen3_5", {"qwen3_5", "qwen3_5_text"}, &build_qwen3_5},
      {"qwen3_5_moe", {"qwen3_5_moe", "qwen3_5_moe_text"}, &build_qwen3_5_moe},
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
