// Hostile model files: every value of a config.json, safetensors or GGUF
// header is range-checked before anything is sized from it. The inputs live in
// tests/formats/data/hostile (written by make_hostile.py; also the fuzzers'
// seed corpus); each must be refused with a Status naming the field or tensor
// and the value, never a crash, an abort, a huge allocation or a hang. Run
// under ASan/UBSan to make "never" checkable. The real configs must still load.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "contracts/causal_paged_attention.h"
#include "contracts/rope.h"
#include "formats/gguf.h"
#include "formats/safetensors.h"
#include "models/family.h"
#include "models/loader.h"
#include "runtime/device.h"
#include "test_util.h"

namespace ferrite {
namespace {

namespace fs = std::filesystem;
using testing_util::read_bytes;
using testing_util::TempDir;
using testing_util::write_bytes;

const fs::path kSource = FERRITE_SOURCE_DIR;
const fs::path kHostile = kSource / "tests/formats/data/hostile";

::testing::AssertionResult has_error(const Status& s, StatusCode code,
                                     const std::vector<std::string>& parts) {
  if (s.code() != code) {
    return ::testing::AssertionFailure()
           << "expected " << status_code_name(code) << ", got " << s.to_string();
  }
  for (const std::string& p : parts) {
    if (s.message().find(p) == std::string::npos) {
      return ::testing::AssertionFailure() << "'" << p << "' not in: " << s.message();
    }
  }
  return ::testing::AssertionSuccess();
}

// open_model as `ferrite info --dummy-weights` runs it: config, family,
// program, no checkpoint.
Result<ModelSource> open_dummy(const std::string& dir) {
  LoadOptions o;
  o.model_dir = dir;
  o.dummy_weights = true;
  return open_model(o);
}

struct Case {
  const char* file;
  StatusCode code;
  std::vector<std::string> parts;  // substrings of the message
};

constexpr StatusCode kInvalid = StatusCode::kInvalidArgument;
constexpr StatusCode kLoss = StatusCode::kDataLoss;
constexpr StatusCode kUnsup = StatusCode::kUnsupported;

const std::vector<Case>& config_cases() {
  static const std::vector<Case> cases = {
      // Found by hand: rope past the head (heap overflow), length_error,
      // bad_alloc, a hang inside text_config, a negative theta accepted.
      {"partial_rotary_4.json", kInvalid, {"'partial_rotary_factor'", "(0, 1.0]", "got 4.0"}},
      {"partial_rotary_negative.json", kInvalid, {"'partial_rotary_factor'", "got -0.5"}},
      {"partial_rotary_zero.json", kInvalid, {"'partial_rotary_factor'", "got 0"}},
      {"partial_rotary_odd_dim.json", kInvalid, {"rotary dimension of 5", "head_dim 16", "even"}},
      {"partial_rotary_in_rope_parameters.json",
       kInvalid,
       {"'rope_parameters.partial_rotary_factor'", "got 2.0"}},
      {"layers_2pow32.json", kInvalid, {"'num_hidden_layers'", "[1, 1024]", "got 4294967296"}},
      {"layers_1025.json", kInvalid, {"'num_hidden_layers'", "got 1025"}},
      {"text_config_layers_2pow32.json",
       kInvalid,
       {"'text_config.num_hidden_layers'", "got 4294967296"}},
      {"text_config_hidden_huge.json", kInvalid, {"'text_config.hidden_size'", "1099511627776"}},
      {"text_config_experts_huge.json",
       kInvalid,
       {"'text_config.num_experts'", "[0, 4096]", "got 1000000000"}},
      {"text_config_linear_key_heads_huge.json",
       kInvalid,
       {"'text_config.linear_num_key_heads'", "got 1073741824"}},
      {"text_config_conv_kernel_huge.json",
       kInvalid,
       {"'text_config.linear_conv_kernel_dim'", "[1, 64]"}},
      {"rope_theta_negative.json",
       kInvalid,
       {"'rope_parameters.rope_theta'", "finite number > 0", "-1e+308"}},
      {"rope_theta_zero.json", kInvalid, {"'rope_parameters.rope_theta'", "got 0"}},
      {"rope_theta_top_level_negative.json", kInvalid, {"'rope_theta'", "got -1.0"}},
      // Past a double's range: refused by the parser.
      {"rope_theta_overflow.json", kInvalid, {"number overflow", "1e999"}},
      // Sizes and how they relate.
      {"vocab_huge.json", kInvalid, {"'vocab_size'", "[1, 16777216]", "got 1099511627776"}},
      {"vocab_zero.json", kInvalid, {"'vocab_size'", "got 0"}},
      {"hidden_huge.json", kInvalid, {"'hidden_size'", "[1, 1048576]", "got 2097152"}},
      {"heads_zero.json", kInvalid, {"'num_attention_heads'", "got 0"}},
      {"heads_huge.json", kInvalid, {"'num_attention_heads'", "[1, 4096]"}},
      {"kv_heads_not_dividing.json", kInvalid, {"4 attention heads", "multiple of 3 KV heads"}},
      {"kv_heads_above_heads.json", kInvalid, {"'num_key_value_heads'", "[1, 4]", "got 8"}},
      {"kv_heads_negative.json", kInvalid, {"'num_key_value_heads'", "got -2"}},
      {"head_dim_huge.json", kInvalid, {"'head_dim'", "[1, 1024]", "got 1048576"}},
      {"heads_times_head_dim_huge.json",
       kInvalid,
       {"4096 attention heads x head_dim 1024", "limit of 1048576"}},
      {"hidden_not_multiple_of_heads.json", kInvalid, {"hidden_size 66", "multiple of 4 heads"}},
      {"derived_head_dim_huge.json", kInvalid, {"head_dim 524288", "limit of 1024"}},
      {"intermediate_huge.json", kInvalid, {"'intermediate_size'", "[0, 1048576]"}},
      {"intermediate_negative.json", kInvalid, {"'intermediate_size'", "got -1"}},
      {"intermediate_missing.json", kInvalid, {"'intermediate_size' must be positive"}},
      {"max_positions_huge.json", kInvalid, {"'max_position_embeddings'", "[1, 16777216]"}},
      {"max_positions_zero.json", kInvalid, {"'max_position_embeddings'", "got 0"}},
      {"rms_norm_eps_zero.json", kInvalid, {"'rms_norm_eps'", "got 0"}},
      {"rms_norm_eps_negative.json", kInvalid, {"'rms_norm_eps'", "got -1e-06"}},
      {"rms_norm_eps_overflow.json", kInvalid, {"number overflow", "1e999"}},
      {"layer_types_short.json", kInvalid, {"'layer_types'", "1 entries for 2 layers"}},
      {"layer_types_long_hybrid.json", kInvalid, {"'layer_types'", "5 entries for 4 layers"}},
      {"layer_types_unknown.json", kUnsup, {"layer type 'sliding_attention'"}},
      {"eos_outside_vocab.json", kInvalid, {"'eos_token_id'", "[0, 512)", "[2,512]"}},
      {"eos_negative.json", kInvalid, {"'eos_token_id'", "got -1"}},
      {"eos_too_many.json", kInvalid, {"'eos_token_id'", "1025 entries", "limit of 1024"}},
      {"bos_huge.json", kInvalid, {"'bos_token_id'", "got 1099511627776"}},
      // Rope scaling.
      {"llama3_equal_freq_factors.json",
       kInvalid,
       {"'rope_parameters.high_freq_factor'", "greater than low_freq_factor 1"}},
      {"llama3_factor_zero.json", kInvalid, {"'rope_parameters.factor'", "got 0"}},
      {"llama3_low_freq_negative.json", kInvalid, {"'rope_parameters.low_freq_factor'"}},
      {"llama3_original_positions_zero.json",
       kInvalid,
       {"'rope_parameters.original_max_position_embeddings'", "got 0"}},
      {"llama3_original_positions_huge.json",
       kInvalid,
       {"'rope_parameters.original_max_position_embeddings'", "[1, 16777216]"}},
      {"linear_rope_factor_negative.json", kInvalid, {"'rope_parameters.factor'", "got -2.0"}},
      // Experts.
      {"experts_huge.json", kInvalid, {"'num_local_experts'", "[0, 4096]"}},
      {"experts_negative.json", kInvalid, {"'num_local_experts'", "got -8"}},
      {"experts_times_layers_huge.json",
       kInvalid,
       {"'num_local_experts'", "x 1000 layers", "262144"}},
      {"top_k_above_experts.json", kInvalid, {"'num_experts_per_tok'", "[1, 8]", "got 9"}},
      {"top_k_zero.json", kInvalid, {"'num_experts_per_tok'", "got 0"}},
      {"moe_intermediate_huge.json", kInvalid, {"'moe_intermediate_size'", "[1, 1048576]"}},
      {"shared_expert_negative.json",
       kInvalid,
       {"'shared_expert_intermediate_size'", "got -48"}},
      {"mlp_only_layers_outside.json", kInvalid, {"'mlp_only_layers'", "[0, 2)", "[1,2]"}},
      {"mlp_only_layers_negative.json", kInvalid, {"'mlp_only_layers'", "[-1]"}},
      {"decoder_sparse_step_zero.json", kInvalid, {"'decoder_sparse_step'", "got 0"}},
      // Gated DeltaNet sizes.
      {"linear_key_head_dim_huge.json", kInvalid, {"'linear_key_head_dim'", "[1, 1024]"}},
      {"linear_value_heads_not_multiple.json",
       kInvalid,
       {"3 linear value heads", "multiple of 2 key heads"}},
      {"linear_value_width_huge.json", kInvalid, {"4096 x 1024 (values)", "at most 1048576"}},
      {"linear_conv_kernel_zero.json", kInvalid, {"'linear_conv_kernel_dim'", "got 0"}},
      {"linear_key_heads_times_layers_huge.json",
       kInvalid,
       {"'linear_num_key_heads'", "x 1000 layers"}},
      {"full_attention_interval_zero.json", kInvalid, {"'full_attention_interval'", "got 0"}},
  };
  return cases;
}

TEST(HostileModelConfig, EveryCaseIsRefusedWithTheFieldAndValue) {
  for (const Case& c : config_cases()) {
    SCOPED_TRACE(c.file);
    TempDir dir;
    fs::copy_file(kHostile / "config" / c.file, dir.file("config.json"));
    auto src = open_dummy(dir.path().string());
    ASSERT_FALSE(src.is_ok()) << "accepted";
    EXPECT_TRUE(has_error(src.status(), c.code, c.parts));
    // Every message names the file it came from.
    EXPECT_NE(src.status().message().find(dir.file("config.json")), std::string::npos)
        << src.status().message();
  }
}

// The folder and the table stay in sync: a new seed file needs its expectation.
TEST(HostileModelConfig, EveryFileHasACase) {
  std::set<std::string> listed;
  for (const Case& c : config_cases()) EXPECT_TRUE(listed.insert(c.file).second) << c.file;
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(kHostile / "config")) {
    ++files;
    EXPECT_TRUE(listed.count(e.path().filename().string())) << e.path();
  }
  EXPECT_EQ(files, listed.size());
}

// A long mlp_only_layers list is read once, not searched per layer.
TEST(HostileModelConfig, LongLayerListsAreLinear) {
  std::string list = "[";
  for (int i = 0; i < 2000000; ++i) list += (i ? ",1" : "1");
  list += "]";
  const std::string text = read_bytes((kHostile / "config" / "mlp_only_layers_outside.json").string());
  TempDir dir;
  std::string cfg = text;
  const size_t at = cfg.find("\"mlp_only_layers\"");
  ASSERT_NE(at, std::string::npos);
  const size_t end = cfg.find(']', at);
  cfg.replace(at, end + 1 - at, "\"mlp_only_layers\": " + list);
  // 1000 layers x 2M entries would be 2e9 comparisons.
  const size_t layers = cfg.find("\"num_hidden_layers\"");
  cfg.replace(layers, cfg.find(',', layers) - layers, "\"num_hidden_layers\": 1000");
  write_bytes(dir.file("config.json"), cfg);
  auto src = open_dummy(dir.path().string());
  ASSERT_TRUE(src.is_ok()) << src.status().to_string();
  EXPECT_EQ(src->config.num_layers, 1000);
}

// A named pipe in place of config.json or a shard is refused at once (opening
// one for reading used to wait for a writer forever).
TEST(HostileModelConfig, FifoIsRefusedNotWaitedOn) {
  TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("config.json").c_str(), 0600), 0);
  auto src = open_dummy(dir.path().string());
  EXPECT_TRUE(has_error(src.status(), kInvalid, {"config.json", "not a regular file"}));

  TempDir model;
  fs::copy_file(kSource / "tests/models/qwen3/config.json", model.file("config.json"));
  ASSERT_EQ(::mkfifo(model.file("model.safetensors").c_str(), 0600), 0);
  LoadOptions o;
  o.model_dir = model.path().string();
  EXPECT_TRUE(has_error(open_model(o).status(), kInvalid, {"not a regular file"}));
}

// Every real config still loads, and its rotary dimension is what HF computes.
TEST(HostileModelConfig, RealConfigsStillLoad) {
  std::vector<fs::path> dirs;
  for (const char* root : {"configs", "tests/models"})
    for (const auto& e : fs::directory_iterator(kSource / root))
      if (fs::exists(e.path() / "config.json")) dirs.push_back(e.path());
  ASSERT_GE(dirs.size(), 10u);
  for (const fs::path& d : dirs) {
    SCOPED_TRACE(d.string());
    auto src = open_dummy(d.string());
    ASSERT_TRUE(src.is_ok()) << src.status().to_string();
    const ModelConfig& c = src->config;
    EXPECT_EQ(c.rope_dim,
              static_cast<int64_t>(static_cast<double>(c.head_dim) * c.partial_rotary_factor));
    for (const ProgramNode& n : src->program.nodes) {
      if (n.contract_id != "causal_paged_attention") continue;
      auto p = causal_paged_attention::Params::from(n.attrs);
      EXPECT_EQ(p.rope_dim, static_cast<uint64_t>(c.rope_dim));
      EXPECT_LE(p.rope_dim, p.head_dim);
      EXPECT_EQ(p.rope_dim % 2, 0u);
    }
  }
}

// rope_inv_freq is the last line of defence: a rotary dimension outside the
// head is a bug, not a silent overflow.
TEST(HostileModelConfigDeathTest, RopeOutsideTheHeadIsChecked) {
  causal_paged_attention::Params p{};
  p.head_dim = 16;
  p.rope_dim = 16;
  p.rope_theta = 10000.0;
  p.rope_scaling = "none";
  EXPECT_EQ(rope_inv_freq(p).size(), 8u);
  p.rope_dim = 64;
  EXPECT_DEATH(rope_inv_freq(p), "rope_dim 64 for head_dim 16");
  p.rope_dim = 15;
  EXPECT_DEATH(rope_inv_freq(p), "rope_dim 15");
  p.rope_dim = 16;
  p.rope_theta = -1e308;
  EXPECT_DEATH(rope_inv_freq(p), "rope_theta");
}

// ---------------------------------------------------------------------------
// safetensors

const std::vector<Case>& safetensors_cases() {
  static const std::vector<Case> cases = {
      {"overlap.safetensors", kLoss, {"tensor 'b' at offset 4 overlaps tensor 'a'"}},
      {"out_of_file.safetensors", kLoss, {"'a'", "run past the data region of 8 bytes"}},
      {"offsets_past_int64.safetensors", kLoss, {"'a'", "invalid data_offsets"}},
      {"shape_product_overflow.safetensors", kLoss, {"'a'", "too large"}},
      {"shape_dtype_overflow.safetensors", kLoss, {"'a'", "too large"}},
      {"shape_zero_dim_overflow.safetensors", kLoss, {"'a'", "[0,4294967296,4294967296]", "too large"}},
      {"span_mismatch.safetensors", kLoss, {"'a'", "span 8 bytes", "needs 12"}},
      {"negative_dim.safetensors", kLoss, {"'a'", "negative dimension"}},
      {"rank_9.safetensors", kUnsup, {"'a'", "rank 9"}},
      {"unknown_dtype.safetensors", kUnsup, {"'a'", "unsupported dtype 'F64'"}},
      {"gap.safetensors", kLoss, {"gap of 4 bytes before tensor 'b'"}},
      {"duplicate_name.safetensors", kLoss, {"names 'a' twice"}},
      {"header_length_huge.safetensors", kLoss, {"header length 1099511627776", "limit"}},
      {"header_length_past_file.safetensors", kLoss, {"header length 4096", "past the end"}},
      {"deep_header.safetensors", kLoss, {"nests deeper than 64"}},
  };
  return cases;
}

TEST(HostileSafetensors, EveryCaseIsRefused) {
  std::set<std::string> known = {"misaligned_header.safetensors",
                                 "odd_u8_before_bf16.safetensors"};
  for (const Case& c : safetensors_cases()) {
    SCOPED_TRACE(c.file);
    known.insert(c.file);
    const std::string path = (kHostile / "safetensors" / c.file).string();
    auto f = SafetensorsFile::open(path);
    ASSERT_FALSE(f.is_ok()) << "accepted";
    EXPECT_TRUE(has_error(f.status(), c.code, c.parts));
    EXPECT_NE(f.status().message().find(path), std::string::npos) << f.status().message();
  }
  for (const auto& e : fs::directory_iterator(kHostile / "safetensors")) {
    if (e.path().extension() == ".safetensors") {
      EXPECT_TRUE(known.count(e.path().filename().string())) << e.path() << " has no case";
    }
  }
}

// The format does not forbid header lengths that are not a multiple of 8:
// such files open, and their (misaligned) tensors read correctly through the
// dtype conversions (UBSan flags a typed misaligned load).
TEST(HostileSafetensors, MisalignedTensorsOpenAndRead) {
  for (const char* name : {"misaligned_header.safetensors", "odd_u8_before_bf16.safetensors"}) {
    SCOPED_TRACE(name);
    auto f = SafetensorsFile::open((kHostile / "safetensors" / name).string());
    ASSERT_TRUE(f.is_ok()) << f.status().to_string();
    bool some_misaligned = false;
    for (const SafetensorsTensor& t : f->tensors()) {
      const auto addr = reinterpret_cast<uintptr_t>(t.data);
      some_misaligned = some_misaligned || addr % dtype_block_bytes(t.dtype) != 0;
      if (!dtype_is_float(t.dtype) || t.dtype == DType::kF8E4M3) continue;
      for (int64_t i = 0; i < t.shape.numel(); ++i) EXPECT_EQ(load_as_f32(t.data, t.dtype, i), 0);
    }
    EXPECT_TRUE(some_misaligned);
  }
  // Non-zero values through a misaligned pointer, both directions.
  alignas(8) uint8_t buf[16] = {};
  store_from_f32(buf + 1, DType::kF32, 1, 3.5f);
  EXPECT_EQ(load_as_f32(buf + 1, DType::kF32, 1), 3.5f);
  store_from_f32(buf + 1, DType::kBF16, 2, -2.0f);
  EXPECT_EQ(load_as_f32(buf + 1, DType::kBF16, 2), -2.0f);
  store_from_f32(buf + 3, DType::kF16, 0, 0.5f);
  EXPECT_EQ(load_as_f32(buf + 3, DType::kF16, 0), 0.5f);
}

TEST(HostileSafetensors, BadIndexesAreRefused) {
  const std::vector<Case> cases = {
      {"index_escaping_shard.json", kLoss, {"'../../etc/passwd'", "outside the model folder"}},
      {"index_absolute_shard.json", kLoss, {"outside the model folder"}},
      {"index_not_a_name.json", kLoss, {"weight_map entry 'a' is not a file name"}},
      {"index_no_weight_map.json", kLoss, {"missing or non-object 'weight_map'"}},
  };
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(kHostile / "safetensors"))
    files += e.path().extension() == ".json";
  EXPECT_EQ(files, cases.size());
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    TempDir dir;
    fs::copy_file(kHostile / "safetensors" / c.file,
                  dir.file(std::string(SafetensorsCheckpoint::kIndexFileName)));
    auto ck = SafetensorsCheckpoint::open(dir.path().string());
    ASSERT_FALSE(ck.is_ok()) << "accepted";
    EXPECT_TRUE(has_error(ck.status(), c.code, c.parts));
  }
}

// A checkpoint whose header length is 8k+1 (every tensor one byte off): the
// loader copies misaligned tensors into aligned memory, keeps the values, and
// still views aligned files in place.
TEST(HostileSafetensors, LoaderAlignsMisalignedWeights) {
  const fs::path good = kSource / "tests/models/qwen3";
  TempDir dir;
  fs::copy_file(good / "config.json", dir.file("config.json"));
  const std::string bytes = read_bytes((good / "model.safetensors").string());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
  std::string header = bytes.substr(8, n);
  while (header.size() % 8 != 1) header += ' ';
  write_bytes(dir.file("model.safetensors"),
              testing_util::le64(header.size()) + header + bytes.substr(8 + n));

  auto device = make_cpu_device();
  for (const fs::path& model : {good, dir.path()}) {
    SCOPED_TRACE(model.string());
    LoadOptions o;
    o.model_dir = model.string();
    auto src = open_model(o);
    ASSERT_TRUE(src.is_ok()) << src.status().to_string();
    auto store = materialize_weights(*src, *device, o);
    ASSERT_TRUE(store.is_ok()) << store.status().to_string();
    auto reference = SafetensorsCheckpoint::open(good.string());
    ASSERT_TRUE(reference.is_ok());
    for (const auto& [name, view] : (*store)->views()) {
      SCOPED_TRACE(name);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(view.data) % dtype_block_bytes(view.dtype), 0u);
      const SafetensorsTensor* t = reference->find(name);
      ASSERT_NE(t, nullptr);
      ASSERT_EQ(view.nbytes(), t->nbytes);
      EXPECT_EQ(std::memcmp(view.data, t->data, t->nbytes), 0);
      // Aligned files stay zero-copy: the view is the mapping.
      const SafetensorsTensor* own = src->checkpoint->find(name);
      const bool aligned = reinterpret_cast<uintptr_t>(own->data) % dtype_block_bytes(own->dtype) == 0;
      EXPECT_EQ(view.data == own->data, aligned);
    }
  }
}

// Rewrites the header of <dir>/model.safetensors through `edit` (same data).
void edit_header(const std::string& file, const std::function<void(nlohmann::json&)>& edit) {
  const std::string bytes = read_bytes(file);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(bytes[i]);
  nlohmann::json h = nlohmann::json::parse(bytes.substr(8, n));
  edit(h);
  std::string text = h.dump();
  while (text.size() % 8 != 0) text += ' ';
  write_bytes(file, testing_util::le64(text.size()) + text + bytes.substr(8 + n));
}

// A sliced or stacked source with the right element count but another row
// width would be copied with the wrong layout: refused by name.
TEST(HostileSafetensors, SlicedSourcesKeepTheirRowWidth) {
  const fs::path good = kSource / "tests/models/qwen3_next";
  TempDir dir;
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(good / f, dir.file(f));
  const std::string name = "model.layers.0.linear_attn.in_proj_qkvz.weight";
  edit_header(dir.file("model.safetensors"), [&](nlohmann::json& h) {
    ASSERT_TRUE(h.contains(name));
    auto& shape = h[name]["shape"];
    shape = {shape[0].get<int64_t>() * 2, shape[1].get<int64_t>() / 2};
  });
  LoadOptions o;
  o.model_dir = dir.path().string();
  EXPECT_TRUE(has_error(open_model(o).status(), kInvalid,
                        {"'" + name + "'", "rows of 64 elements are needed"}));
}

// ---------------------------------------------------------------------------
// GGUF

TEST(HostileGguf, EveryCaseIsRefused) {
  const std::vector<Case> cases = {
      {"alignment_2.gguf", kLoss, {"general.alignment", "at least 8", "2"}},
      {"alignment_not_power_of_two.gguf", kLoss, {"general.alignment", "48"}},
      {"bad_version.gguf", kUnsup, {"GGUF version 1"}},
      {"block_type_bad_inner_dim.gguf", kLoss, {"'w'", "innermost dimension 33", "Q8_0"}},
      {"dim_above_int64.gguf", kLoss, {"'w'", "dimension 9223372036854775808"}},
      {"dims_product_overflow.gguf", kLoss, {"'w'", "too large"}},
      {"key_length_huge.gguf", kLoss, {"metadata key 0", "truncated"}},
      {"kv_count_huge.gguf", kLoss, {"metadata count 4611686018427387904", "limit of 65536"}},
      {"kv_count_over_limit.gguf", kLoss, {"metadata count 65537", "limit of 65536"}},
      {"n_dims_5.gguf", kLoss, {"'w'", "5 dimensions (at most 4)"}},
      {"nested_array.gguf", kUnsup, {"'k'", "nested arrays"}},
      {"offset_past_file.gguf", kLoss, {"'w'", "runs past the data region"}},
      {"offset_unaligned.gguf", kLoss, {"'w'", "offset 4", "alignment 32"}},
      {"overlapping_tensors.gguf", kLoss, {"overlaps tensor"}},
      {"string_array_count_huge.gguf", kLoss, {"'k'", "strings runs past the end"}},
      {"tensor_count_after_metadata.gguf", kLoss, {"tensor count 40", "after the metadata"}},
      {"tensor_count_huge.gguf", kLoss, {"tensor count 4611686018427387904", "limit of 1048576"}},
      {"tensor_count_over_limit.gguf", kLoss, {"tensor count 1048577", "limit of 1048576"}},
      {"unknown_ggml_type.gguf", kUnsup, {"'w'", "Q5_0"}},
      {"unknown_value_type.gguf", kLoss, {"'k'", "unknown value type 13"}},
  };
  std::set<std::string> known;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.file);
    known.insert(c.file);
    const std::string path = (kHostile / "gguf" / c.file).string();
    auto f = GgufFile::open(path);
    ASSERT_FALSE(f.is_ok()) << "accepted";
    EXPECT_TRUE(has_error(f.status(), c.code, c.parts));
    EXPECT_NE(f.status().message().find(path), std::string::npos) << f.status().message();
  }
  for (const auto& e : fs::directory_iterator(kHostile / "gguf"))
    EXPECT_TRUE(known.count(e.path().filename().string())) << e.path() << " has no case";
}

}  // namespace
}  // namespace ferrite
