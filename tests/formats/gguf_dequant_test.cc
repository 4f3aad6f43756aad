// Ferrite's block decoding on GGUF files that llama.cpp's tools wrote: every
// tensor of the committed quantized test files (Q4_K_M / Q5_K_M / Q6_K from
// llama-quantize, Q8_0 / Q4_0 from gguf-py) dequantizes, through the
// reference dequantize_row() that every CPU provider and the conformance
// oracle use, to exactly the float32 values llama.cpp's gguf-py computes
// (tests/models/gguf/quant/dequant_checks.json, made by
// scripts/make_gguf_dequant_checks.py): the same bits, hashed over the whole
// tensor, and values at fixed positions to say where a mismatch starts.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <set>
#include <nlohmann/json.hpp>

#include "base/hash.h"
#include "formats/gguf.h"
#include "tensor/dtype.h"

namespace ferrite {
namespace {

const std::string kQuantDir = FERRITE_SOURCE_DIR "/tests/models/gguf/quant/";

std::string upper(std::string_view s) {
  std::string u(s);
  for (char& c : u) c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
  return u;
}

TEST(GgufDequantTest, EveryTensorAsLlamaCppDequantizesIt) {
  std::ifstream in(kQuantDir + "dequant_checks.json");
  ASSERT_TRUE(in) << kQuantDir << "dequant_checks.json";
  const nlohmann::json checks = nlohmann::json::parse(in);
  std::set<std::string> types_seen;
  size_t tensors = 0;
  for (const auto& [file, expect] : checks.items()) {
    SCOPED_TRACE(file);
    auto f = GgufFile::open(kQuantDir + file);
    ASSERT_TRUE(f.is_ok()) << f.status().to_string();
    ASSERT_EQ(f->tensors().size(), expect.size());
    for (const GgufTensor& t : f->tensors()) {
      SCOPED_TRACE(t.name);
      ASSERT_TRUE(expect.contains(t.name));
      const nlohmann::json& e = expect[t.name];
      EXPECT_EQ(upper(dtype_name(t.dtype)), e["type"].get<std::string>());
      const int64_t n = t.shape.numel();
      ASSERT_EQ(n, e["elements"].get<int64_t>());
      std::vector<float> x(static_cast<size_t>(n));
      dequantize_row(t.dtype, t.data, x.data(), n);
      types_seen.insert(e["type"].get<std::string>());
      ++tensors;
      for (const auto& [index, value] : e["values"].items()) {
        const size_t i = std::stoul(index);
        ASSERT_EQ(x[i], value.get<float>()) << "element " << i;
      }
      char hash[17];
      std::snprintf(hash, sizeof hash, "%016llx",
                    static_cast<unsigned long long>(fnv1a(x.data(), x.size() * sizeof(float))));
      EXPECT_EQ(std::string(hash), e["fnv1a64"].get<std::string>()) << "some element differs";
      double sum = 0;
      for (float v : x) sum += v;
      EXPECT_NEAR(sum, e["sum"].get<double>(), 1e-9 * (1 + std::abs(sum)));
    }
  }
  for (const char* t : {"Q8_0", "Q4_0", "Q4_K", "Q5_K", "Q6_K"})
    EXPECT_TRUE(types_seen.count(t)) << t << " not covered by the files";
  EXPECT_GT(tensors, 150u);
}

}  // namespace
}  // namespace ferrite
