// Runs every case on every provider of every available backend and compares
// with the CPU reference provider of the same contract. Each provider is
// tried with each activation dtype it accepts (f32, bf16, f16): activations
// and KV state are converted for it, and the reference runs in f32 on the
// same values rounded through that dtype.
#include "tests/conformance/conformance.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>

namespace ferrite::conformance {
namespace {

float to_f32(const HostTensor& t, int64_t i) { return load_as_f32(t.bytes.data(), t.dtype, i); }

HostTensor convert(const HostTensor& t, DType to) {
  if (t.dtype == to || !t.present()) return t;
  HostTensor out = zeros(to, t.shape, t.follows_activation);
  const int64_t n = t.shape.numel();
  for (int64_t i = 0; i < n; ++i) {
    store_from_f32(out.bytes.data(), to, i, to_f32(t, i));
  }
  return out;
}

// The case as the provider sees it with activation dtype `act`.
std::vector<HostTensor> bindings_for(const Case& c, DType act) {
  std::vector<HostTensor> out;
  for (const HostTensor& t : c.bindings) out.push_back(t.follows_activation ? convert(t, act) : t);
  return out;
}

const Provider* reference_for(const Registry& cpu, const std::string& contract) {
  for (const Provider* p : cpu.providers_for(contract))
    if (p->descriptor().name.find(".reference.") != std::string::npos) return p;
  return nullptr;
}

// Compares every binding the contract writes.
void compare(const Case& c, const std::vector<HostTensor>& want, const std::vector<HostTensor>& got,
             DType act, const std::string& what) {
  const OracleSpec& oracle = c.contract->oracle();
  const double scale = act == DType::kF32 ? 1.0 : oracle.low_precision_scale;
  // Relative spacing of the activation type: 2^-8 (bf16), 2^-11 (f16).
  const double eps = act == DType::kBF16 ? 1.0 / 256 : act == DType::kF16 ? 1.0 / 2048 : 0.0;
  const double ulps = act == DType::kF32 ? 0.0 : oracle.low_precision_ulps;
  for (size_t b = 0; b < want.size(); ++b) {
    const BindingSpec& spec = c.contract->bindings()[b];
    if (spec.access == Access::kRead || !want[b].present()) continue;
    const int64_t n = want[b].shape.numel();
    if (!dtype_is_float(want[b].dtype) || !dtype_is_float(got[b].dtype)) {
      EXPECT_EQ(want[b].bytes, got[b].bytes) << what << " binding " << spec.role;
      continue;
    }
    const bool rounded = got[b].follows_activation && act != DType::kF32;
    // The reference as the provider must store it: rounded to the type.
    const HostTensor want_b = rounded && oracle.exact ? convert(want[b], act) : want[b];
    double magnitude = 0;
    for (int64_t i = 0; i < n; ++i)
      magnitude = std::max(magnitude, std::fabs(double(to_f32(want_b, i))));
    int64_t bad = 0, first = -1;
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double w = to_f32(want_b, i), g = to_f32(got[b], i);
      const double d = std::fabs(w - g);
      // A value the provider stores in the activation type carries its
      // rounding; ids, masks and f32-always outputs do not.
      const double rounding = rounded ? ulps * eps * magnitude : 0.0;
      const bool ok =
          oracle.exact ? (w == g || (std::isnan(w) && std::isnan(g)))
                       : d <= scale * (oracle.abs_tol + oracle.rel_tol * std::fabs(w)) + rounding;
      if (!ok) {
        if (first < 0) first = i;
        ++bad;
      }
      if (std::isfinite(d)) worst = std::max(worst, d);
    }
    EXPECT_EQ(bad, 0) << what << " binding " << spec.role << ": " << bad << " of " << n
                      << " elements out of tolerance, first at " << first << " (want "
                      << (first >= 0 ? to_f32(want_b, first) : 0) << ", got "
                      << (first >= 0 ? to_f32(got[b], first) : 0) << "), worst |d| " << worst;
  }
}

struct ProviderId {
  std::string backend;
  std::string provider;
};

void PrintTo(const ProviderId& id, std::ostream* os) { *os << id.backend << "/" << id.provider; }

std::vector<ProviderId> all_providers() {
  std::vector<ProviderId> ids;
  for (const Backend& b : available_backends())
    for (const auto& p : b.registry->providers()) ids.push_back({b.name, p->descriptor().name});
  return ids;
}

class ConformanceTest : public testing::TestWithParam<ProviderId> {};

TEST_P(ConformanceTest, MatchesCpuReference) {
  std::vector<Backend> backends = available_backends();
  Backend* cpu = nullptr;
  Backend* backend = nullptr;
  for (Backend& b : backends) {
    if (b.name == "cpu") cpu = &b;
    if (b.name == GetParam().backend) backend = &b;
  }
  ASSERT_NE(cpu, nullptr);
  ASSERT_NE(backend, nullptr);
  const Provider* provider = nullptr;
  for (const auto& p : backend->registry->providers())
    if (p->descriptor().name == GetParam().provider) provider = p.get();
  ASSERT_NE(provider, nullptr);
  const std::string& contract = provider->descriptor().contract_id;
  const Provider* reference = reference_for(*cpu->registry, contract);
  ASSERT_NE(reference, nullptr) << "no CPU reference for " << contract;

  int ran = 0;
  for (const Case& c : all_cases()) {
    if (c.contract->id() != contract) continue;
    for (DType act : {DType::kF32, DType::kBF16, DType::kF16}) {
      std::vector<HostTensor> mine = bindings_for(c, act);
      if (!provider->supports(signature_for(c, mine, act)).is_ok()) continue;
      const std::string what =
          fmt::format("{} on {} case '{}' ({} activations)", provider->descriptor().name,
                      backend->name, c.name, dtype_name(act));
      // The reference sees the same values in f32.
      std::vector<HostTensor> ref_in;
      for (const HostTensor& t : mine)
        ref_in.push_back(t.follows_activation ? convert(t, DType::kF32) : t);
      auto want = run_provider(c, ref_in, DType::kF32, *reference, *cpu);
      ASSERT_TRUE(want.is_ok()) << what << ": reference failed: " << want.status().to_string();
      auto got = run_provider(c, mine, act, *provider, *backend);
      ASSERT_TRUE(got.is_ok()) << what << ": " << got.status().to_string();
      compare(c, *want, *got, act, what);
      ++ran;
    }
  }
  EXPECT_GT(ran, 0) << GetParam().provider << " supports none of the " << contract << " cases";
}

INSTANTIATE_TEST_SUITE_P(Providers, ConformanceTest, testing::ValuesIn(all_providers()),
                         [](const testing::TestParamInfo<ProviderId>& info) {
                           std::string s = info.param.backend + "_" + info.param.provider;
                           for (char& ch : s)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return s;
                         });

TEST(ConformanceSuite, EveryStandardContractHasCases) {
  std::set<std::string> covered;
  for (const Case& c : all_cases()) covered.insert(c.contract->id());
  std::vector<Backend> backends = available_backends();
  for (const Backend& b : backends)
    for (const auto& p : b.registry->providers())
      EXPECT_TRUE(covered.count(p->descriptor().contract_id))
          << "contract " << p->descriptor().contract_id << " has no conformance cases";
}

// Backends compiled in but not usable here (e.g. CUDA without a GPU) show
// up as a skipped test, never as a silent pass.
TEST(ConformanceSuite, CompiledBackendsAreAvailable) {
  std::string reasons;
  for (const std::string& r : skipped_backends()) reasons += r + "; ";
  if (!reasons.empty()) GTEST_SKIP() << "skipped backends: " << reasons;
}

}  // namespace
}  // namespace ferrite::conformance
