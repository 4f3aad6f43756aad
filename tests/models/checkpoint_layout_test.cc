// Checkpoint layouts of the MoE and hybrid families beside the goldens'
// (per-expert tensors, text-only names): the same tiny weights rewritten as
// transformers 5 packs experts (mlp.experts.gate_up_proj [E, 2I, H] with the
// gate half first, mlp.experts.down_proj [E, H, I]) and as a vision-language
// checkpoint (text_config; model.language_model.* plus vision tensors) must
// give the golden greedy tokens.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "engine/generator.h"
#include "formats/safetensors.h"

namespace ferrite {
namespace {

const std::string kModelsDir = FERRITE_SOURCE_DIR "/tests/models/";

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f);
}

// Writes `tensors` (name -> (dtype, shape, bytes)) and `config` to a fresh dir.
struct Owned {
  DType dtype;
  Shape shape;
  std::vector<uint8_t> bytes;
};
std::string write_model(const std::string& name, const std::map<std::string, Owned>& tensors,
                        const nlohmann::json& config) {
  const std::string dir = testing::TempDir() + "/ferrite_layout_" + name;
  std::filesystem::create_directories(dir);
  std::vector<SafetensorsWriteTensor> w;
  for (const auto& [n, t] : tensors) w.push_back({n, t.dtype, t.shape, t.bytes});
  Status s = write_safetensors(dir + "/model.safetensors", w, {{"format", "pt"}});
  EXPECT_TRUE(s.is_ok()) << s.to_string();
  std::ofstream(dir + "/config.json") << config.dump(1);
  return dir;
}

std::map<std::string, Owned> read_all(const std::string& family) {
  auto ck = SafetensorsCheckpoint::open(kModelsDir + family);
  EXPECT_TRUE(ck.is_ok()) << ck.status().to_string();
  std::map<std::string, Owned> out;
  for (const std::string& n : ck->names()) {
    const SafetensorsTensor* t = ck->find(n);
    out[n] = {t->dtype, t->shape, std::vector<uint8_t>(t->data, t->data + t->nbytes)};
  }
  return out;
}

void expect_golden_tokens(const std::string& dir, const std::string& family) {
  nlohmann::json golden = read_json(kModelsDir + family + "/golden.json");
  for (const char* providers : {"fast", "reference"}) {
    RunnerOptions o;
    o.load.model_dir = dir;
    o.providers = providers;
    o.limits.max_tokens = 512;
    o.limits.max_sequences = 2;
    o.limits.max_context = 1024;
    o.load.program.max_context = 1024;
    o.cache.kv_memory_bytes = 16ll << 20;
    auto r = ModelRunner::open(o);
    ASSERT_TRUE(r.is_ok()) << r.status().to_string();
    for (const char* which : {"short", "long"}) {
      GenerationRequest req;
      req.prompt = golden["prompts"][which]["ids"].get<std::vector<uint32_t>>();
      auto want = golden["prompts"][which]["greedy_tokens"].get<std::vector<uint32_t>>();
      req.max_tokens = static_cast<int32_t>(want.size());
      auto out = generate(**r, {req});
      ASSERT_TRUE(out.is_ok()) << out.status().to_string();
      EXPECT_EQ((*out)[0].tokens, want) << family << " " << which << " " << providers;
    }
  }
}

TEST(CheckpointLayout, PackedExpertsGiveTheGoldenTokens) {
  for (const std::string family : {"qwen3_moe", "qwen3_5_moe"}) {
    std::map<std::string, Owned> in = read_all(family), out;
    const std::regex expert(R"((.*\.mlp\.experts\.)(\d+)\.(gate|up|down)_proj\.weight)");
    std::map<std::string, int64_t> experts;  // prefix -> count
    for (auto& [name, t] : in) {
      std::smatch m;
      if (std::regex_match(name, m, expert)) {
        experts[m[1]] = std::max<int64_t>(experts[m[1]], std::stoll(m[2]) + 1);
      } else {
        out[name] = t;
      }
    }
    ASSERT_FALSE(experts.empty());
    for (const auto& [pre, count] : experts) {
      const Owned& g0 = in.at(pre + "0.gate_proj.weight");
      const Owned& d0 = in.at(pre + "0.down_proj.weight");
      Owned gate_up{g0.dtype, {count, 2 * g0.shape[0], g0.shape[1]}, {}};
      Owned down{d0.dtype, {count, d0.shape[0], d0.shape[1]}, {}};
      for (int64_t e = 0; e < count; ++e) {
        for (const char* part : {"gate", "up"}) {
          const auto& b = in.at(pre + std::to_string(e) + "." + part + "_proj.weight").bytes;
          gate_up.bytes.insert(gate_up.bytes.end(), b.begin(), b.end());
        }
        const auto& b = in.at(pre + std::to_string(e) + ".down_proj.weight").bytes;
        down.bytes.insert(down.bytes.end(), b.begin(), b.end());
      }
      out[pre + "gate_up_proj"] = std::move(gate_up);
      out[pre + "down_proj"] = std::move(down);
    }
    const std::string dir =
        write_model("packed_" + family, out, read_json(kModelsDir + family + "/config.json"));
    expect_golden_tokens(dir, family);
  }
}

TEST(CheckpointLayout, VisionLanguageCheckpointLoadsItsLanguageModel) {
  for (const std::string family : {"qwen3_5", "qwen3_next"}) {
    std::map<std::string, Owned> in = read_all(family), out;
    for (auto& [name, t] : in) {
      const bool inner = name.rfind("model.", 0) == 0;
      out[inner ? "model.language_model." + name.substr(6) : name] = t;
    }
    out["model.visual.patch_embed.proj.weight"] = {DType::kBF16, {2, 3}, std::vector<uint8_t>(12)};
    nlohmann::json text = read_json(kModelsDir + family + "/config.json");
    nlohmann::json top = {{"architectures", {"VisionLanguageModel"}},
                          {"model_type", text["model_type"].get<std::string>() + "_vl"},
                          {"text_config", text},
                          {"vision_config", {{"depth", 1}}},
                          {"tie_word_embeddings", text["tie_word_embeddings"]}};
    const std::string dir = write_model("vl_" + family, out, top);
    expect_golden_tokens(dir, family);
  }
}

}  // namespace
}  // namespace ferrite
