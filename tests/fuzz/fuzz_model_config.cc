// libFuzzer target: config.json -> ModelConfig -> the family's program
// (src/formats/json_config.h, src/models/model_config.h, src/models/family.h).
//
// Input: the text of a config.json. It is parsed by JsonConfig::parse, every
// top-level key is read back through every typed getter, and the document
// goes through parse_model_config (validation); an accepted config is then
// built into its family's ModelProgram (no weights are allocated) with a
// small context. Oracle: no crash, no sanitizer report, no hang; an accepted
// config has positive sizes and heads that divide evenly.
#include <cstdint>
#include <string_view>

#include "formats/json_config.h"
#include "fuzz_util.h"
#include "models/family.h"
#include "models/model_config.h"

using namespace ferrite;

namespace {

void read_all(const JsonConfig& j, int depth) {
  for (const auto& key : j.keys()) {
    (void)j.has(key);
    (void)j.get_int(key);
    (void)j.get_positive_int(key);
    (void)j.get_float(key);
    (void)j.get_bool(key);
    (void)j.get_string(key);
    (void)j.get_int_list(key);
    (void)j.get_float_list(key);
    (void)j.get_string_list(key);
    (void)j.get_int_or(key, 1);
    (void)j.get_string_or(key, "x");
    (void)j.dump(key);
    if (depth < 2) {
      if (auto o = j.find_object(key); o.is_ok() && o->has_value()) read_all(**o, depth + 1);
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto json = JsonConfig::parse(text, "fuzz/config.json");
  if (!json.is_ok()) return 0;
  read_all(*json, 0);
  auto config = parse_model_config(*json);
  if (!config.is_ok()) return 0;
  const ModelConfig& c = *config;
  FERRITE_FUZZ_CHECK(c.vocab_size > 0 && c.hidden_size > 0 && c.num_layers > 0);
  FERRITE_FUZZ_CHECK(c.num_heads > 0 && c.num_kv_heads > 0 && c.head_dim > 0);
  FERRITE_FUZZ_CHECK(c.num_heads % c.num_kv_heads == 0);
  auto family = find_family(c.model_type);
  if (!family.is_ok()) return 0;
  ProgramOptions options;
  options.max_context = 64;
  auto program = (*family)->build(c, options);
  (void)program.is_ok();
  return 0;
}
