// Cases of the element-wise and projection contracts: token_embedding,
// rms_norm, residual_add, dense_linear, dense_swiglu, last_token_dense_linear.
#include <cmath>

#include "contracts/dense_linear.h"
#include "contracts/dense_swiglu.h"
#include "contracts/last_token_dense_linear.h"
#include "contracts/residual_add.h"
#include "contracts/rms_norm.h"
#include "contracts/token_embedding.h"
#include "tests/conformance/conformance.h"

namespace ferrite::conformance {

namespace {
std::string part(int64_t v) { return std::to_string(v); }
std::string part(int32_t v) { return std::to_string(v); }
std::string part(bool v) { return v ? "zc" : "plain"; }
std::string part(DType t) { return std::string(dtype_name(t)); }
constexpr DType kWeightTypes[] = {DType::kF32, DType::kBF16, DType::kF16};
uint64_t u(int64_t v) { return static_cast<uint64_t>(v); }

template <typename... Args>
std::string fmt_name(const char* prefix, Args... args) {
  std::string s = prefix;
  ((s += "_" + part(args)), ...);
  return s;
}
}  // namespace

std::vector<Case> token_embedding_cases() {
  std::vector<Case> out;
  CaseRng rng(1);
  for (DType wt : kWeightTypes) {
    Case c;
    c.name = std::string("vocab50_hidden33_") + std::string(dtype_name(wt));
    c.contract = &token_embedding::contract();
    c.attrs.set("vocab_size", u(50)).set("hidden_size", u(33));
    add_sequence(c, 4, 0);
    add_sequence(c, 3, 9);
    std::vector<uint32_t> ids = {0, 49, 7, 7, 13, 1, 48};
    c.batch.token_ids = ids;
    c.bindings = {u32_tensor(ids), random_tensor(rng, wt, {50, 33}, -2, 2, false),
                  zeros(DType::kF32, {7, 33}, true)};
    out.push_back(std::move(c));
  }
  return out;
}
FERRITE_CONFORMANCE_CASES(token_embedding_cases);

std::vector<Case> rms_norm_cases() {
  std::vector<Case> out;
  CaseRng rng(2);
  for (int64_t hidden : {1, 17, 256}) {
    for (int64_t tokens : {1, 5}) {
      for (bool zc : {false, true}) {
        for (DType wt : kWeightTypes) {
          Case c;
          c.name = fmt_name("h", hidden, tokens, zc, wt);
          c.contract = &rms_norm::contract();
          c.attrs.set("hidden_size", u(hidden)).set("eps", 1e-6).set("zero_centred", zc);
          add_sequence(c, static_cast<int32_t>(tokens), 0);
          c.bindings = {
              random_tensor(rng, DType::kF32, {tokens, hidden}, -3, 3, true),
              random_tensor(rng, wt, {hidden}, zc ? -0.5f : 0.5f, zc ? 0.5f : 1.5f, false),
              zeros(DType::kF32, {tokens, hidden}, true)};
          out.push_back(std::move(c));
        }
      }
    }
  }
  return out;
}
FERRITE_CONFORMANCE_CASES(rms_norm_cases);

std::vector<Case> residual_add_cases() {
  std::vector<Case> out;
  CaseRng rng(3);
  Case c;
  c.name = "h70_t3";
  c.contract = &residual_add::contract();
  c.attrs.set("hidden_size", u(70));
  add_sequence(c, 3, 0);
  c.bindings = {random_tensor(rng, DType::kF32, {3, 70}, -1, 1, true),
                random_tensor(rng, DType::kF32, {3, 70}, -1, 1, true),
                zeros(DType::kF32, {3, 70}, true)};
  out.push_back(std::move(c));
  return out;
}
FERRITE_CONFORMANCE_CASES(residual_add_cases);

std::vector<Case> dense_linear_cases() {
  std::vector<Case> out;
  CaseRng rng(4);
  const int64_t shapes[][2] = {{1, 1}, {17, 33}, {256, 96}, {64, 200}};
  for (const auto& s : shapes) {
    for (int32_t tokens : {1, 3, 19}) {
      for (DType wt : kWeightTypes) {
        for (bool bias : {false, true}) {
          if (bias && wt != DType::kBF16) continue;
          Case c;
          c.name = fmt_name("in", s[0], s[1], tokens, wt) + (bias ? "_bias" : "");
          c.contract = &dense_linear::contract();
          c.attrs.set("in_features", u(s[0])).set("out_features", u(s[1]));
          add_sequence(c, tokens, 0);
          const float scale = 1.0f / std::sqrt(static_cast<float>(s[0]));
          c.bindings = {random_tensor(rng, DType::kF32, {tokens, s[0]}, -1, 1, true),
                        random_tensor(rng, wt, {s[1], s[0]}, -scale, scale, false),
                        bias ? random_tensor(rng, wt, {s[1]}, -0.5f, 0.5f, false) : HostTensor{},
                        zeros(DType::kF32, {tokens, s[1]}, true)};
          out.push_back(std::move(c));
        }
      }
    }
  }
  return out;
}
FERRITE_CONFORMANCE_CASES(dense_linear_cases);

std::vector<Case> dense_swiglu_cases() {
  std::vector<Case> out;
  CaseRng rng(5);
  const int64_t shapes[][2] = {{32, 48}, {64, 176}};
  for (const auto& s : shapes) {
    for (int32_t tokens : {1, 9}) {
      for (DType wt : kWeightTypes) {
        for (bool zc : {false, true}) {
          Case c;
          c.name = fmt_name("h", s[0], s[1], tokens, wt) + (zc ? "_zc" : "");
          c.contract = &dense_swiglu::contract();
          c.attrs.set("hidden_size", u(s[0]))
              .set("intermediate_size", u(s[1]))
              .set("eps", 1e-6)
              .set("zero_centred", zc);
          add_sequence(c, tokens, 0);
          const float sh = 1.0f / std::sqrt(static_cast<float>(s[0]));
          const float si = 1.0f / std::sqrt(static_cast<float>(s[1]));
          c.bindings = {random_tensor(rng, DType::kF32, {tokens, s[0]}, -2, 2, true),
                        random_tensor(rng, wt, {s[0]}, zc ? -0.3f : 0.7f, zc ? 0.3f : 1.3f, false),
                        random_tensor(rng, wt, {s[1], s[0]}, -2 * sh, 2 * sh, false),
                        random_tensor(rng, wt, {s[1], s[0]}, -2 * sh, 2 * sh, false),
                        random_tensor(rng, wt, {s[0], s[1]}, -si, si, false)};
          out.push_back(std::move(c));
        }
      }
    }
  }
  return out;
}
FERRITE_CONFORMANCE_CASES(dense_swiglu_cases);

std::vector<Case> last_token_dense_linear_cases() {
  std::vector<Case> out;
  CaseRng rng(6);
  for (DType wt : kWeightTypes) {
    Case c;
    c.name = std::string("h40_v100_") + std::string(dtype_name(wt));
    c.contract = &last_token_dense_linear::contract();
    c.attrs.set("hidden_size", u(40)).set("vocab_size", u(100));
    add_sequence(c, 5, 0);
    add_sequence(c, 1, 30);
    add_sequence(c, 3, 7);
    c.bindings = {random_tensor(rng, DType::kF32, {9, 40}, -1, 1, true),
                  random_tensor(rng, wt, {100, 40}, -0.3f, 0.3f, false),
                  zeros(DType::kF32, {3, 100}, false)};
    out.push_back(std::move(c));
  }
  return out;
}
FERRITE_CONFORMANCE_CASES(last_token_dense_linear_cases);

}  // namespace ferrite::conformance
