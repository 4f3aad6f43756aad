// Runs every case on every provider of every available backend and compares
// with the CPU reference provider of the same contract. Each provider is
// tried with each activation dtype it accepts (f32, bf16, f16): activations
// and KV state are converted for it, and the reference runs in f32 on the
// same values rounded through that dtype.
#include "tests/conformance/conformance.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
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

bool has_block_weights(const Case& c) {
  for (const HostTensor& t : c.bindings)
    if (t.present() && dtype_is_quantized(t.dtype)) return true;
  return false;
}

// 8-bit block activations. A provider may quantize the input rows of its
// products with block weights to 8-bit blocks of the weight's block size
// (CPU: backends/cpu/kernels/quant_dot.h; llama.cpp's q8_0 / q8_K): element
// i of block b is off by at most amax_b / 254.
//  - For the single products (dense_linear, last_token_dense_linear) the
//    error bound of each output is exact: sum_b amax_b / 254 * sum_{i in b}
//    |w_i| (+ 2^-15 of it for the rounding of x * 127 / amax), plus the f32
//    rounding of the combination, gamma_{nb + 5} * sum_i |w_i| (|x_i| +
//    amax_b / 254); |w| over-estimates the k-quants' min terms by at most
//    their size, covered by counting it twice (mag below).
//  - The composite contracts (SwiGLU, attention, gated delta, MoE) quantize
//    several inputs, some of them functions of earlier products; their error
//    is modelled as the bf16 activation path models its rounding: the
//    contract's low_precision_ulps spacings of the 8-bit grid (1/127 of the
//    block's max, bounded by the tensor's magnitude) at the output
//    magnitude, on top of the f32 tolerance. The recurrent contract carries
//    the rounding of every earlier token's projections in its state: twice
//    the spacings (its worst chunked case uses 6.9 of the 8).
// Returns, per element of the written binding `out`, the extra tolerance
// (empty: use the model).
std::vector<double> block_activation_bounds(const Case& c, const std::vector<HostTensor>& in,
                                            size_t out) {
  const std::string& id = c.contract->id();
  const bool dense = id == "dense_linear", head = id == "last_token_dense_linear";
  if (!(dense || head) || out != (dense ? 3u : 2u)) return {};
  const HostTensor& x = in[0];
  const HostTensor& w = in[1];
  if (!dtype_is_quantized(w.dtype)) return {};
  // An act-order weight's blocks are over the gathered inputs.
  const int32_t* perm = w.input_perm.empty() ? nullptr : w.input_perm.data();
  const int64_t rows_w = w.shape[0], k = w.shape[1], be = dtype_block_elems(w.dtype);
  std::vector<float> wv(rows_w * k);
  dequantize_row(w.dtype, w.bytes.data(), wv.data(), rows_w * k);
  std::vector<int64_t> xrows;  // the input row of each output row
  if (dense) {
    for (int64_t t = 0; t < x.shape[0]; ++t) xrows.push_back(t);
  } else {
    for (const SequenceSlice& s : c.batch.sequences) xrows.push_back(s.token_begin + s.token_count - 1);
  }
  const double u = std::ldexp(1.0, -24), nb = double(k / be);
  const double gamma = (nb + 5) * u / (1 - (nb + 5) * u);
  std::vector<double> bound;
  std::vector<double> xg(k), amax(k / be);
  for (int64_t r : xrows) {
    for (int64_t o = 0; o < rows_w; ++o) {
      const int32_t* p = perm ? perm + (o / w.perm_rows) * k : nullptr;
      std::fill(amax.begin(), amax.end(), 0.0);
      for (int64_t i = 0; i < k; ++i) {
        xg[i] = std::fabs(double(to_f32(x, r * k + (p ? p[i] : i))));
        amax[i / be] = std::max(amax[i / be], xg[i]);
      }
      double q = 0, f = 0;
      for (int64_t i = 0; i < k; ++i) {
        const double aw = std::fabs(double(wv[o * k + i]));
        q += amax[i / be] / 254 * aw;
        f += 2 * aw * (xg[i] + amax[i / be] / 254);
      }
      bound.push_back(q * (1 + std::ldexp(1.0, -15)) + gamma * f);
    }
  }
  return bound;
}

// Compares every binding the contract writes. `inputs` are the bindings the
// provider was given; `block_activations`: it may quantize activations
// against block weights (every provider but the CPU reference).
void compare(const Case& c, const std::vector<HostTensor>& want, const std::vector<HostTensor>& got,
             DType act, const std::string& what, const std::vector<HostTensor>& inputs,
             bool block_activations) {
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
    std::vector<double> qbound;
    double qmodel = 0;
    if (block_activations && !oracle.exact) {
      qbound = block_activation_bounds(c, inputs, b);
      const double recurrent = c.contract->id() == "gated_delta_recurrent_attention" ? 2 : 1;
      if (qbound.empty()) qmodel = recurrent * oracle.low_precision_ulps * magnitude / 127;
      EXPECT_TRUE(qbound.empty() || static_cast<int64_t>(qbound.size()) == n) << what;
    }
    int64_t bad = 0, first = -1;
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double w = to_f32(want_b, i), g = to_f32(got[b], i);
      const double d = std::fabs(w - g);
      // A value the provider stores in the activation type carries its
      // rounding; ids, masks and f32-always outputs do not.
      const double rounding = rounded ? ulps * eps * magnitude : 0.0;
      const double quant = qbound.empty() ? qmodel : qbound[i];
      const bool ok = oracle.exact ? (w == g || (std::isnan(w) && std::isnan(g)))
                                   : d <= scale * (oracle.abs_tol + oracle.rel_tol * std::fabs(w)) +
                                              rounding + quant;
      if (!ok) {
        if (first < 0) first = i;
        ++bad;
      }
      if (std::isfinite(d)) worst = std::max(worst, d);
    }
    EXPECT_EQ(bad, 0) << what << " binding " << spec.role << ": " << bad << " of " << n
                      << " elements out of tolerance, first at " << first << " (want "
                      << (first >= 0 ? to_f32(want_b, first) : 0) << ", got "
                      << (first >= 0 ? to_f32(got[b], first) : 0) << "), worst |d| " << worst
                      << ", magnitude " << magnitude;
  }
}

struct ProviderId {
  std::string backend;
  std::string provider;
};

void PrintTo(const ProviderId& id, std::ostream* os) { *os << id.backend << "/" << id.provider; }

std::vector<ProviderId> all_providers() {
  std::vector<ProviderId> ids;
  for (const Backend& b : available_backends()) {
    for (const auto& p : b.registry->providers()) {
      bool blocks = false;
      for (DType t : p->descriptor().weight_dtypes) blocks = blocks || dtype_is_quantized(t);
      const auto& also = b.also_providers;
      const bool named = std::find(also.begin(), also.end(), p->descriptor().name) != also.end();
      if (b.block_weight_providers_only && !blocks && !named) continue;
      ids.push_back({b.name, p->descriptor().name});
    }
  }
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
      // The reference sees the same values in f32, and act-order weights as
      // the natural-order f32 weights they stand for (so a permuted product
      // is checked against an ordinary one).
      std::vector<HostTensor> ref_in, ref_natural;
      for (const HostTensor& t : mine) {
        ref_in.push_back(t.follows_activation ? convert(t, DType::kF32) : t);
        ref_natural.push_back(natural_order(ref_in.back()));
      }
      auto want = run_provider(c, ref_natural, DType::kF32, *reference, *cpu);
      ASSERT_TRUE(want.is_ok()) << what << ": reference failed: " << want.status().to_string();
      auto got = run_provider(c, mine, act, *provider, *backend);
      ASSERT_TRUE(got.is_ok()) << what << ": " << got.status().to_string();
      const bool block_activations =
          has_block_weights(c) && provider->descriptor().name.find(".reference.") == std::string::npos;
      compare(c, *want, *got, act, what, ref_in, block_activations);
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
