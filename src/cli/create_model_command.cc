// ferrite create-model --out DIR: writes a small random-weight model folder
// (config.json, generation_config.json, model.safetensors in bf16) that every
// other command can load. It is the default model of a fresh checkout: no
// download is ever needed to try Ferrite.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "formats/safetensors.h"
#include "models/loader.h"

namespace ferrite::cli {

namespace {

struct CreateFlags {
  std::string out;
  std::string family = "qwen3";
  int64_t vocab = 512;
  int64_t hidden = 128;
  int64_t layers = 4;
  int64_t heads = 4;
  int64_t kv_heads = 2;
  int64_t head_dim = 32;
  int64_t intermediate = 256;
  uint64_t seed = 7;
  bool force = false;
};

Status write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  f.close();
  if (!f) return invalid_argument("cannot write " + path.string());
  return Status::ok();
}

Status create_model(const CreateFlags& f) {
  if (f.family != "qwen3" && f.family != "llama")
    return invalid_argument("--family must be qwen3 or llama");
  for (int64_t v : {f.vocab, f.hidden, f.layers, f.heads, f.kv_heads, f.head_dim, f.intermediate})
    if (v <= 0 || v > (1 << 20)) return invalid_argument("model sizes must be positive");
  if (f.heads % f.kv_heads != 0) return invalid_argument("--heads must be a multiple of --kv-heads");
  namespace fs = std::filesystem;
  fs::path dir(f.out);
  std::error_code ec;
  if (fs::exists(dir / "config.json") && !f.force)
    return invalid_argument(f.out + " already holds a model (use --force to overwrite)");
  fs::create_directories(dir, ec);
  if (ec) return invalid_argument("cannot create " + f.out + ": " + ec.message());

  nlohmann::json config = {
      {"architectures", {f.family == "qwen3" ? "Qwen3ForCausalLM" : "LlamaForCausalLM"}},
      {"model_type", f.family},
      {"vocab_size", f.vocab},
      {"hidden_size", f.hidden},
      {"num_hidden_layers", f.layers},
      {"num_attention_heads", f.heads},
      {"num_key_value_heads", f.kv_heads},
      {"head_dim", f.head_dim},
      {"intermediate_size", f.intermediate},
      {"max_position_embeddings", 4096},
      {"rms_norm_eps", 1e-6},
      {"rope_theta", 1000000.0},
      {"tie_word_embeddings", true},
      {"bos_token_id", 1},
      {"eos_token_id", 2},
      {"torch_dtype", "bfloat16"},
  };
  FERRITE_RETURN_IF_ERROR(write_text(dir / "config.json", config.dump(2) + "\n"));
  nlohmann::json gen = {{"bos_token_id", 1}, {"eos_token_id", 2}};
  FERRITE_RETURN_IF_ERROR(write_text(dir / "generation_config.json", gen.dump(2) + "\n"));

  LoadOptions lo;
  lo.model_dir = f.out;
  lo.dummy_weights = true;
  lo.dummy_dtype = DType::kBF16;
  lo.seed = f.seed;
  FERRITE_ASSIGN_OR_RETURN(ModelSource src, open_model(lo));
  auto device = make_cpu_device();
  FERRITE_ASSIGN_OR_RETURN(auto store, materialize_weights(src, *device, lo));
  std::vector<SafetensorsWriteTensor> tensors;
  for (const auto& [name, view] : store->views()) {
    tensors.push_back({name, view.dtype, view.shape,
                       std::span<const uint8_t>(static_cast<const uint8_t*>(view.data),
                                                static_cast<size_t>(view.nbytes()))});
  }
  return write_safetensors((dir / "model.safetensors").string(), tensors, {{"format", "pt"}});
}

}  // namespace

void register_create_model(CLI::App& app, int* exit_code) {
  auto f = std::make_shared<CreateFlags>();
  CLI::App* cmd = app.add_subcommand("create-model", "write a small random-weight model folder");
  cmd->add_option("--out", f->out, "output folder")->required();
  cmd->add_option("--family", f->family, "qwen3 or llama");
  cmd->add_option("--vocab", f->vocab, "vocabulary size");
  cmd->add_option("--hidden", f->hidden, "hidden size");
  cmd->add_option("--layers", f->layers, "decoder layers");
  cmd->add_option("--heads", f->heads, "attention heads");
  cmd->add_option("--kv-heads", f->kv_heads, "KV heads");
  cmd->add_option("--head-dim", f->head_dim, "head dimension");
  cmd->add_option("--intermediate", f->intermediate, "MLP intermediate size");
  cmd->add_option("--seed", f->seed, "weight seed");
  cmd->add_flag("--force", f->force, "overwrite an existing model");
  cmd->callback([f, exit_code] {
    Status s = create_model(*f);
    if (!s.is_ok()) {
      *exit_code = report_error(s);
      return;
    }
    std::printf("wrote %s\n", f->out.c_str());
    *exit_code = 0;
  });
}

}  // namespace ferrite::cli
