// The conformance suite: every (contract, provider) pair of every backend is
// compared with the CPU reference provider of that contract, on generated
// cases, with the tolerance of the contract's OracleSpec.
//
// A case is data only: the node signature (contract, attributes, dtypes),
// host tensors for every binding, the step batch and, for the sampler
// contracts, the sampling batch. One file per contract (`<op>_cases.cc`)
// generates its cases and enrols its generators (FERRITE_CONFORMANCE_CASES);
// `conformance_test.cc` runs them on every provider, so
// a new provider needs no new test code. A new backend adds itself in
// `backends.cc`.
#pragma once

#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/provider.h"
#include "runtime/registry.h"

namespace ferrite::conformance {

struct HostTensor {
  DType dtype = DType::kF32;
  Shape shape;
  std::vector<uint8_t> bytes;  // empty: binding absent
  // True for activations and KV state that follow the activation dtype of
  // the provider under test (converted from f32); false for ids, masks,
  // weights and f32-always tensors such as logits.
  bool follows_activation = false;
  // An act-order weight (TensorView::input_perm): one permutation of the
  // last dimension per run of perm_rows rows; empty: natural order.
  std::vector<int32_t> input_perm;
  int64_t perm_rows = 0;
  bool present() const { return !bytes.empty(); }
};

struct Case {
  std::string name;
  const ContractSchema* contract = nullptr;
  Attributes attrs;
  std::vector<HostTensor> bindings;  // schema order
  StepBatch batch;
  SamplingBatch sampling;
  // Owns the memory that batch / sampling spans point into.
  std::vector<std::shared_ptr<std::vector<int32_t>>> block_tables;
  std::vector<std::shared_ptr<std::vector<uint32_t>>> histories;
};

// Case generators enrol themselves, one line after each (in the contract's
// `<op>_cases.cc`): FERRITE_CONFORMANCE_CASES(rms_norm_cases);
using CaseGenerator = std::vector<Case> (*)();
int enrol_cases(CaseGenerator generator);
#define FERRITE_CONFORMANCE_CASES(generator) \
  [[maybe_unused]] static const int ferrite_enrolled_##generator = \
      ::ferrite::conformance::enrol_cases(&generator)
// Every case of every enrolled generator.
std::vector<Case> all_cases();

// A backend under test: its device, registry and execution context.
struct Backend {
  std::string name;
  std::unique_ptr<Device> device;
  std::unique_ptr<Registry> registry;
  ExecContext ctx;
  std::shared_ptr<void> keep_alive;  // backend-private state behind ctx
  // A variant of a backend with other tuning (e.g. "cuda_alt"): only its
  // providers that accept block-format weights are tested again, and those
  // named in also_providers.
  bool block_weight_providers_only = false;
  std::vector<std::string> also_providers;
};
// Every backend compiled in and usable on this machine (CPU always).
std::vector<Backend> available_backends();
// Backends compiled in but not usable here, with the reason (e.g. no GPU).
std::vector<std::string> skipped_backends();

// The node signature of case `c` with these bindings and activation dtype.
NodeSignature signature_for(const Case& c, const std::vector<HostTensor>& bindings, DType act);
// Runs one provider of `backend` on case `c` with these bindings (the
// case's, converted for activation dtype `act`); returns every binding
// after the call.
Result<std::vector<HostTensor>> run_provider(const Case& c, std::vector<HostTensor> bindings,
                                             DType act, const Provider& provider,
                                             Backend& backend);

// --- helpers for case generators -----------------------------------------

class CaseRng {
 public:
  explicit CaseRng(uint64_t seed) : rng_(seed) {}
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng_); }
  int64_t integer(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  std::mt19937_64& engine() { return rng_; }

 private:
  std::mt19937_64 rng_;
};

// A tensor of `dtype` with uniform values in [lo, hi] (rounded to dtype).
HostTensor random_tensor(CaseRng& rng, DType dtype, Shape shape, float lo, float hi,
                         bool follows_activation);
HostTensor u32_tensor(const std::vector<uint32_t>& values);
HostTensor zeros(DType dtype, Shape shape, bool follows_activation);
// `w` (a weight of rows of `in` = its last dimension) as an act-order weight:
// random permutations, one per run of perm_rows rows, stored column c of a
// row being its input column perm[c]. The values stay those of `w`: the
// natural-order weight it stands for is natural_order(result).
HostTensor with_random_input_perm(CaseRng& rng, HostTensor w, int64_t perm_rows);
// An act-order weight as the f32 natural-order weight it multiplies by:
// element (r, perm_r[c]) is stored element (r, c).
HostTensor natural_order(const HostTensor& w);
// Adds a sequence slice (and its block table) to the case's batch.
void add_sequence(Case& c, int32_t token_count, int32_t position_start,
                  std::vector<int32_t> block_table = {}, int32_t state_slot = -1);

}  // namespace ferrite::conformance
