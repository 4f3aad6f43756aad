#include "formats/json_config.h"

#include <gtest/gtest.h>

#include <limits>

#include "test_util.h"

namespace ferrite {
namespace {

using testing_util::TempDir;
using testing_util::write_bytes;

constexpr std::string_view kQwenLike = R"({
  "architectures": ["Qwen3NextForCausalLM"],
  "hidden_size": 2048,
  "num_hidden_layers": 48,
  "rms_norm_eps": 1e-06,
  "rope_theta": 10000000,
  "partial_rotary_factor": 0.25,
  "tie_word_embeddings": false,
  "torch_dtype": "bfloat16",
  "sliding_window": null,
  "max_position_embeddings": 262144.0,
  "bad_int": "abc",
  "fraction": 3.5,
  "negative": -3,
  "huge": 18446744073709551615,
  "eos_token_id": [151645, 151643],
  "bos_token_id": 151643,
  "layer_types": ["linear_attention", "full_attention"],
  "mrope_section": [24, 20, 20],
  "rope_scaling": {"rope_type": "yarn", "factor": 4.0},
  "text_config": {"hidden_size": "abc", "head_dim": 128, "rope_scaling": {"factor": 2}}
})";

JsonConfig parse_ok(std::string_view text = kQwenLike) {
  auto c = JsonConfig::parse(text, "/m/config.json");
  EXPECT_TRUE(c.is_ok()) << c.status().to_string();
  return std::move(c).value();
}

TEST(JsonConfig, LoadFromFile) {
  TempDir dir;
  write_bytes(dir.file("config.json"), kQwenLike);
  auto c = JsonConfig::load(dir.file("config.json"));
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->source(), dir.file("config.json"));
  EXPECT_EQ(c->get_int("hidden_size").value(), 2048);
}

TEST(JsonConfig, LoadErrors) {
  TempDir dir;
  auto missing = JsonConfig::load(dir.file("config.json"));
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("config.json"), std::string::npos);

  write_bytes(dir.file("bad.json"), "{\"a\": 1,,}");
  auto bad = JsonConfig::load(dir.file("bad.json"));
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find(dir.file("bad.json")), std::string::npos);
  EXPECT_NE(bad.status().message().find("parse error"), std::string::npos)
      << bad.status().message();

  write_bytes(dir.file("empty.json"), "");
  EXPECT_EQ(JsonConfig::load(dir.file("empty.json")).status().code(), StatusCode::kInvalidArgument);
  write_bytes(dir.file("array.json"), "[1]");
  auto arr = JsonConfig::load(dir.file("array.json"));
  EXPECT_EQ(arr.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(arr.status().message().find("not a JSON object"), std::string::npos);
  EXPECT_EQ(JsonConfig::load(dir.path().string()).status().code(), StatusCode::kInvalidArgument);

  std::string deep = std::string(100000, '[') + std::string(100000, ']');
  EXPECT_EQ(JsonConfig::parse("{\"x\":" + deep + "}", "d").status().code(),
            StatusCode::kInvalidArgument);
}

TEST(JsonConfig, TypedGetters) {
  JsonConfig c = parse_ok();
  EXPECT_EQ(c.get_int("num_hidden_layers").value(), 48);
  EXPECT_EQ(c.get_positive_int("hidden_size").value(), 2048);
  EXPECT_EQ(c.get_int("max_position_embeddings").value(), 262144);  // integral float
  EXPECT_EQ(c.get_int("negative").value(), -3);
  EXPECT_DOUBLE_EQ(c.get_float("rms_norm_eps").value(), 1e-6);
  EXPECT_DOUBLE_EQ(c.get_float("rope_theta").value(), 1e7);  // ints are numbers too
  EXPECT_FALSE(c.get_bool("tie_word_embeddings").value());
  EXPECT_EQ(c.get_string("torch_dtype").value(), "bfloat16");
  EXPECT_EQ(c.get_int_list("eos_token_id").value(), (std::vector<int64_t>{151645, 151643}));
  EXPECT_EQ(c.get_int_list("bos_token_id").value(), (std::vector<int64_t>{151643}));
  EXPECT_EQ(c.get_int_list("mrope_section").value(), (std::vector<int64_t>{24, 20, 20}));
  EXPECT_EQ(c.get_string_list("layer_types").value(),
            (std::vector<std::string>{"linear_attention", "full_attention"}));
  EXPECT_EQ(c.get_float_list("mrope_section").value(), (std::vector<double>{24, 20, 20}));
  EXPECT_TRUE(c.has("hidden_size"));
  EXPECT_FALSE(c.has("sliding_window"));  // null counts as absent
  EXPECT_FALSE(c.has("nope"));
  EXPECT_EQ(c.dump("mrope_section"), "[24,20,20]");
  EXPECT_EQ(c.dump("nope"), "");
  EXPECT_EQ(c.keys().front(), "architectures");
}

TEST(JsonConfig, ErrorsNameFileAndField) {
  JsonConfig c = parse_ok();
  auto bad = c.get_positive_int("bad_int");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(bad.status().message(),
            "/m/config.json: field 'bad_int' must be a positive integer, got \"abc\"");
  EXPECT_EQ(c.get_int("fraction").status().message(),
            "/m/config.json: field 'fraction' must be an integer, got 3.5");
  EXPECT_EQ(c.get_positive_int("negative").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.get_int("huge").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.get_int("tie_word_embeddings").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.get_int("hidden_sizes").status().message(),
            "/m/config.json: missing required field 'hidden_sizes'");
  EXPECT_EQ(c.get_int("sliding_window").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.get_float("torch_dtype").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.get_bool("hidden_size").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.get_string("hidden_size").status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(c.get_int_list("layer_types").status().message().find("a list of integers"),
            std::string::npos);
  EXPECT_EQ(c.get_string_list("eos_token_id").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.get_object("hidden_size").status().code(), StatusCode::kInvalidArgument);
}

TEST(JsonConfig, OptionalGetters) {
  JsonConfig c = parse_ok();
  EXPECT_EQ(c.get_int_or("sliding_window", 4096).value(), 4096);  // null
  EXPECT_EQ(c.get_int_or("absent", 7).value(), 7);
  EXPECT_EQ(c.get_int_or("hidden_size", 7).value(), 2048);
  // Present but wrong: an error, never the fallback.
  EXPECT_EQ(c.get_int_or("bad_int", 7).status().code(), StatusCode::kInvalidArgument);
  EXPECT_DOUBLE_EQ(c.get_float_or("absent", 0.5).value(), 0.5);
  EXPECT_TRUE(c.get_bool_or("absent", true).value());
  EXPECT_EQ(c.get_bool_or("torch_dtype", true).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.get_string_or("absent", "x").value(), "x");
  auto none = c.find_object("absent");
  ASSERT_TRUE(none.is_ok());
  EXPECT_FALSE(none->has_value());
  EXPECT_EQ(c.find_object("hidden_size").status().code(), StatusCode::kInvalidArgument);
}

TEST(JsonConfig, RangeCheckedGetters) {
  JsonConfig c = parse_ok();
  EXPECT_EQ(c.get_int_in("num_hidden_layers", 1, 1024).value(), 48);
  EXPECT_EQ(c.get_int_in("num_hidden_layers", 48, 48).value(), 48);  // bounds included
  EXPECT_EQ(c.get_int_in("num_hidden_layers", 1, 47).status().message(),
            "/m/config.json: field 'num_hidden_layers' must be an integer in [1, 47], got 48");
  EXPECT_EQ(c.get_int_in("negative", 0, 10).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.get_int_in("fraction", 0, 10).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.get_int_in("huge", 0, INT64_MAX).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c.get_int_in("absent", 0, 1).status().message(),
            "/m/config.json: missing required field 'absent'");
  EXPECT_EQ(c.get_int_in_or("absent", 1, 4, 7).value(), 7);  // the fallback is the caller's
  EXPECT_EQ(c.get_int_in_or("sliding_window", 1, 4, 3).value(), 3);
  EXPECT_NE(c.get_int_in_or("negative", 0, 4, 3).status().message().find("got -3"),
            std::string::npos);

  const double max = std::numeric_limits<double>::max();
  EXPECT_DOUBLE_EQ(c.get_positive_float("partial_rotary_factor", 1.0).value(), 0.25);
  EXPECT_DOUBLE_EQ(c.get_positive_float("rope_theta", max).value(), 1e7);
  EXPECT_EQ(c.get_positive_float("fraction", 1.0).status().message(),
            "/m/config.json: field 'fraction' must be a finite number in (0, 1.0], got 3.5");
  EXPECT_EQ(c.get_positive_float("negative", max).status().message(),
            "/m/config.json: field 'negative' must be a finite number > 0, got -3");
  EXPECT_EQ(c.get_positive_float("torch_dtype", max).status().code(),
            StatusCode::kInvalidArgument);
  EXPECT_DOUBLE_EQ(c.get_positive_float_or("absent", 1.0, 0.5).value(), 0.5);
  EXPECT_EQ(c.get_positive_float_or("negative", max, 0.5).status().code(),
            StatusCode::kInvalidArgument);

  JsonConfig z = parse_ok(R"({"zero": 0, "tiny": -0.0, "big": 1e308, "neg": -1e308})");
  EXPECT_EQ(z.get_positive_float("zero", max).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(z.get_positive_float("tiny", max).status().code(), StatusCode::kInvalidArgument);
  EXPECT_DOUBLE_EQ(z.get_positive_float("big", max).value(), 1e308);
  EXPECT_EQ(z.get_positive_float("big", 1e307).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(z.get_positive_float("neg", max).status().code(), StatusCode::kInvalidArgument);
  // Numbers past a double's range never reach a getter.
  EXPECT_EQ(JsonConfig::parse(R"({"x": 1e999})", "o").status().code(),
            StatusCode::kInvalidArgument);

  EXPECT_EQ(c.field_error("layer_types", "has 2 entries for 3 layers").message(),
            "/m/config.json: field 'layer_types' has 2 entries for 3 layers, got "
            "[\"linear_attention\",\"full_attention\"]");
  EXPECT_EQ(c.field_error("absent", "is needed").message(),
            "/m/config.json: field 'absent' is needed");
  auto text = c.get_object("text_config");
  ASSERT_TRUE(text.is_ok());
  EXPECT_EQ(text->get_int_in("head_dim", 1, 64).status().message(),
            "/m/config.json: field 'text_config.head_dim' must be an integer in [1, 64], got 128");
}

TEST(JsonConfig, SubObjects) {
  JsonConfig c = parse_ok();
  auto rs = c.find_object("rope_scaling");
  ASSERT_TRUE(rs.is_ok() && rs->has_value());
  EXPECT_EQ((*rs)->get_string("rope_type").value(), "yarn");
  EXPECT_DOUBLE_EQ((*rs)->get_float("factor").value(), 4.0);

  // The sub-object outlives the config it came from.
  Result<JsonConfig> text = parse_ok().get_object("text_config");
  ASSERT_TRUE(text.is_ok());
  EXPECT_EQ(text->prefix(), "text_config.");
  EXPECT_EQ(text->get_int("head_dim").value(), 128);
  EXPECT_EQ(text->get_positive_int("hidden_size").status().message(),
            "/m/config.json: field 'text_config.hidden_size' must be a positive integer, "
            "got \"abc\"");
  auto nested = text->get_object("rope_scaling");
  ASSERT_TRUE(nested.is_ok());
  EXPECT_EQ(nested->get_string("rope_type").status().message(),
            "/m/config.json: missing required field 'text_config.rope_scaling.rope_type'");
}

}  // namespace
}  // namespace ferrite
