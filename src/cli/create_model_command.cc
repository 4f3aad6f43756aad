// ferrite create-model --out DIR: writes a small random-weight model folder
// (config.json, generation_config.json, model.safetensors in bf16, and a
// byte-level BPE tokenizer.json + tokenizer_config.json with a ChatML chat
// template, sized to the vocabulary) that every other command can load. It is the default model of
// a fresh checkout: no download is ever needed to try Ferrite.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/common.h"
#include "cli/default_model.h"
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

// GPT-2's byte -> printable code point map of byte-level BPE.
std::string byte_token(int b) {
  int n = 0, cp = -1;
  for (int x = 0; x < 256; ++x) {
    bool printable = (x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174);
    int mapped = printable ? x : 256 + n++;
    if (x == b) cp = mapped;
  }
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

const char* kChatTemplate =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";

// tokenizer.json + tokenizer_config.json: 256 byte tokens, merges of common
// letter pairs up to the vocabulary, and three specials at its end.
Status write_tokenizer(const std::filesystem::path& dir, int64_t vocab) {
  const int64_t specials = 3;
  const int64_t merges_n = vocab - 256 - specials;
  nlohmann::ordered_json v = nlohmann::ordered_json::object();
  for (int b = 0; b < 256; ++b) v[byte_token(b)] = b;
  nlohmann::ordered_json merges = nlohmann::ordered_json::array();
  const std::string letters = "etaoinshrdlucmfwypvbgkjqxz";
  std::vector<std::pair<std::string, std::string>> pairs;
  for (char c : letters) pairs.emplace_back(byte_token(' '), std::string(1, c));
  for (char a : letters)
    for (char b : letters) pairs.emplace_back(std::string(1, a), std::string(1, b));
  int64_t id = 256;
  for (const auto& [a, b] : pairs) {
    if (id >= 256 + merges_n) break;
    v[a + b] = id++;
    merges.push_back({a, b});
  }
  const char* names[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  nlohmann::ordered_json added = nlohmann::ordered_json::array();
  nlohmann::ordered_json decoder = nlohmann::ordered_json::object();
  for (int i = 0; i < specials; ++i) {
    nlohmann::ordered_json t = {{"id", id + i},    {"content", names[i]}, {"single_word", false},
                                {"lstrip", false}, {"rstrip", false},     {"normalized", false},
                                {"special", true}};
    added.push_back(t);
    t.erase("id");
    decoder[std::to_string(id + i)] = t;
  }
  nlohmann::ordered_json byte_level = {{"type", "ByteLevel"},
                                       {"add_prefix_space", false},
                                       {"trim_offsets", false},
                                       {"use_regex", false}};
  nlohmann::ordered_json tok = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"},
           {"pattern",
            {{"Regex",
              "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| "
              "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"}}},
           {"behavior", "Isolated"},
           {"invert", false}},
          byte_level}}}},
      {"post_processor", byte_level},
      {"decoder", byte_level},
      {"model",
       {{"type", "BPE"},
        {"dropout", nullptr},
        {"unk_token", nullptr},
        {"continuing_subword_prefix", ""},
        {"end_of_word_suffix", ""},
        {"fuse_unk", false},
        {"byte_fallback", false},
        {"ignore_merges", false},
        {"vocab", v},
        {"merges", merges}}}};
  FERRITE_RETURN_IF_ERROR(write_text(dir / "tokenizer.json", tok.dump(1) + "\n"));
  nlohmann::ordered_json cfg = {
      {"added_tokens_decoder", decoder}, {"bos_token", nullptr},
      {"eos_token", "<|im_end|>"},       {"pad_token", "<|endoftext|>"},
      {"model_max_length", 4096},        {"tokenizer_class", "Qwen2Tokenizer"},
      {"chat_template", kChatTemplate}};
  return write_text(dir / "tokenizer_config.json", cfg.dump(2) + "\n");
}

Status create_model(const CreateFlags& f) {
  if (f.family != "qwen3" && f.family != "llama")
    return invalid_argument("--family must be qwen3 or llama");
  for (int64_t v : {f.vocab, f.hidden, f.layers, f.heads, f.kv_heads, f.head_dim, f.intermediate})
    if (v <= 0 || v > (1 << 20)) return invalid_argument("model sizes must be positive");
  if (f.heads % f.kv_heads != 0)
    return invalid_argument("--heads must be a multiple of --kv-heads");
  // A tokenizer needs the 256 byte tokens and 3 specials.
  const bool with_tokenizer = f.vocab >= 259;
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
      {"bos_token_id", with_tokenizer ? f.vocab - 3 : 1},
      {"eos_token_id",
       with_tokenizer ? nlohmann::json{f.vocab - 1, f.vocab - 3} : nlohmann::json(2)},
      {"torch_dtype", "bfloat16"},
  };
  FERRITE_RETURN_IF_ERROR(write_text(dir / "config.json", config.dump(2) + "\n"));
  nlohmann::json gen = {{"bos_token_id", config["bos_token_id"]},
                        {"eos_token_id", config["eos_token_id"]}};
  FERRITE_RETURN_IF_ERROR(write_text(dir / "generation_config.json", gen.dump(2) + "\n"));
  if (with_tokenizer) FERRITE_RETURN_IF_ERROR(write_tokenizer(dir, f.vocab));

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

// The random-weight fallback, written on first use.
static Result<std::string> ensure_random_default_model();

std::string find_trained_default_model() {
  namespace fs = std::filesystem;
  std::vector<fs::path> candidates;
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    fs::path bin = exe.parent_path();
    candidates.push_back(bin.parent_path() / "models" / "ferrite-tiny");
    candidates.push_back(bin / "models" / "ferrite-tiny");
    candidates.push_back(bin.parent_path() / "share" / "ferrite" / "models" / "ferrite-tiny");
  }
#ifdef FERRITE_DEFAULT_MODEL_DIR
  candidates.push_back(FERRITE_DEFAULT_MODEL_DIR);
#endif
  for (const fs::path& dir : candidates) {
    if (fs::is_regular_file(dir / "config.json", ec) &&
        fs::is_regular_file(dir / "model.safetensors", ec) &&
        fs::is_regular_file(dir / "tokenizer.json", ec))
      return dir.lexically_normal().string();
  }
  return "";
}

Result<DefaultModel> default_model() {
  std::string trained = find_trained_default_model();
  if (!trained.empty()) return DefaultModel{trained, kDefaultModelName};
  std::fprintf(stderr,
               "ferrite: the default model (models/ferrite-tiny) is not beside this binary "
               "nor in its source tree; using a random-weight model instead (its text is "
               "noise)\n");
  FERRITE_ASSIGN_OR_RETURN(std::string dir, ensure_random_default_model());
  return DefaultModel{dir, kRandomModelName};
}

Result<std::string> ensure_default_model() {
  FERRITE_ASSIGN_OR_RETURN(DefaultModel m, default_model());
  return m.dir;
}

static Result<std::string> ensure_random_default_model() {
  namespace fs = std::filesystem;
  fs::path base;
  if (const char* h = std::getenv("FERRITE_HOME"); h && *h) {
    base = h;
  } else if (const char* home = std::getenv("HOME"); home && *home) {
    base = fs::path(home) / ".cache" / "ferrite";
  } else {
    base = fs::temp_directory_path() / "ferrite";
  }
  // The folder name carries a version: a new default model never reuses an old one.
  fs::path dir = base / "default-model-v1";
  if (fs::exists(dir / "model.safetensors") && fs::exists(dir / "tokenizer_config.json"))
    return dir.string();
  std::error_code ec;
  fs::create_directories(base, ec);
  if (ec) return invalid_argument("cannot create " + base.string() + ": " + ec.message());
  // Written aside, then renamed: concurrent first uses never see half a model.
  fs::path tmp = base / ("default-model-v1.tmp." + std::to_string(getpid()));
  fs::remove_all(tmp, ec);
  CreateFlags f;
  f.out = tmp.string();
  f.force = true;
  FERRITE_RETURN_IF_ERROR(create_model(f));
  fs::rename(tmp, dir, ec);
  if (ec) {
    fs::remove_all(tmp, ec);
    if (!fs::exists(dir / "tokenizer_config.json"))
      return invalid_argument("cannot create the default model in " + dir.string());
  }
  return dir.string();
}

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
