#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <optional>

#include "tests/conformance/conformance.h"

namespace ferrite::conformance {

namespace {
std::vector<CaseGenerator>& generators() {
  static std::vector<CaseGenerator> all;
  return all;
}
}  // namespace

int enrol_cases(CaseGenerator generator) {
  generators().push_back(generator);
  return static_cast<int>(generators().size());
}

std::vector<Case> all_cases() {
  std::vector<Case> all;
  for (CaseGenerator gen : generators())
    for (Case& c : gen()) {
      // Optional bindings a generator leaves out (newer minor versions) are absent.
      if (c.bindings.size() < c.contract->bindings().size())
        c.bindings.resize(c.contract->bindings().size());
      all.push_back(std::move(c));
    }
  return all;
}

HostTensor random_tensor(CaseRng& rng, DType dtype, Shape shape, float lo, float hi,
                         bool follows_activation) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = shape;
  t.follows_activation = follows_activation;
  const int64_t n = shape.numel();
  t.bytes.resize(dtype_bytes(dtype, n));
  for (int64_t i = 0; i < n; ++i) {
    float v = rng.uniform(lo, hi);
    store_from_f32(t.bytes.data(), dtype, i, v);
  }
  return t;
}

HostTensor u32_tensor(const std::vector<uint32_t>& values) {
  HostTensor t;
  t.dtype = DType::kU32;
  t.shape = Shape{static_cast<int64_t>(values.size())};
  t.bytes.resize(4 * values.size());
  std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

HostTensor zeros(DType dtype, Shape shape, bool follows_activation) {
  HostTensor t;
  t.dtype = dtype;
  t.shape = shape;
  t.follows_activation = follows_activation;
  t.bytes.assign(dtype_bytes(dtype, shape.numel()), 0);
  return t;
}

HostTensor with_random_input_perm(CaseRng& rng, HostTensor w, int64_t perm_rows) {
  const int64_t in = w.shape[w.shape.rank() - 1], rows = w.shape.numel() / in;
  w.perm_rows = perm_rows;
  w.input_perm.clear();
  for (int64_t r = 0; r < rows; r += perm_rows) {
    std::vector<int32_t> p(static_cast<size_t>(in));
    std::iota(p.begin(), p.end(), 0);
    std::shuffle(p.begin(), p.end(), rng.engine());
    w.input_perm.insert(w.input_perm.end(), p.begin(), p.end());
  }
  return w;
}

HostTensor natural_order(const HostTensor& w) {
  if (w.input_perm.empty()) return w;
  const int64_t in = w.shape[w.shape.rank() - 1], rows = w.shape.numel() / in;
  std::vector<float> stored(static_cast<size_t>(rows * in));
  dequantize_row(w.dtype, w.bytes.data(), stored.data(), rows * in);
  HostTensor out = zeros(DType::kF32, w.shape, false);
  float* dst = reinterpret_cast<float*>(out.bytes.data());
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t* perm = w.input_perm.data() + (r / w.perm_rows) * in;
    for (int64_t c = 0; c < in; ++c) dst[r * in + perm[c]] = stored[r * in + c];
  }
  return out;
}

void add_sequence(Case& c, int32_t token_count, int32_t position_start,
                  std::vector<int32_t> block_table, int32_t state_slot) {
  auto table = std::make_shared<std::vector<int32_t>>(std::move(block_table));
  c.block_tables.push_back(table);
  SequenceSlice s;
  s.token_begin = c.batch.num_tokens();
  s.token_count = token_count;
  s.position_start = position_start;
  s.block_table = *table;
  s.state_slot = state_slot;
  c.batch.sequences.push_back(s);
  c.batch.token_ids.resize(c.batch.token_ids.size() + token_count, 0);
}

namespace {

bool has_activation_bindings(const Case& c) {
  for (const HostTensor& t : c.bindings)
    if (t.follows_activation) return true;
  return false;
}

}  // namespace

NodeSignature signature_for(const Case& c, const std::vector<HostTensor>& bindings, DType act) {
  NodeSignature sig;
  sig.contract = c.contract;
  sig.attrs = c.attrs;
  sig.resolve_params();
  sig.activation_dtype = has_activation_bindings(c) ? act : DType::kF32;
  for (const HostTensor& t : bindings) {
    sig.binding_dtypes.push_back(t.present() ? std::optional<DType>(t.dtype) : std::nullopt);
    sig.binding_permuted.push_back(t.present() && !t.input_perm.empty());
  }
  return sig;
}

Result<std::vector<HostTensor>> run_provider(const Case& c, std::vector<HostTensor> bindings,
                                             DType act, const Provider& provider,
                                             Backend& backend) {
  NodeSignature sig = signature_for(c, bindings, act);
  StepLimits limits;
  limits.max_tokens = c.batch.num_tokens();
  limits.max_sequences = c.batch.num_sequences();
  limits.max_context = 1;
  for (const SequenceSlice& s : c.batch.sequences)
    limits.max_context = std::max<int64_t>(limits.max_context, s.position_start + s.token_count);
  Device& dev = *backend.device;
  std::vector<DeviceBuffer> buffers;
  Invocation inv;
  inv.signature = &sig;
  std::vector<TensorView> views;
  for (const HostTensor& t : bindings) {
    TensorView v;
    if (t.present()) {
      FERRITE_ASSIGN_OR_RETURN(auto buf, DeviceBuffer::allocate(dev, t.bytes.size()));
      FERRITE_RETURN_IF_ERROR(dev.copy_to_device(buf.data(), t.bytes.data(), t.bytes.size()));
      v = TensorView{buf.data(), t.dtype, t.shape};
      buffers.push_back(std::move(buf));
      if (!t.input_perm.empty()) {
        const int64_t bytes = static_cast<int64_t>(t.input_perm.size() * sizeof(int32_t));
        FERRITE_ASSIGN_OR_RETURN(auto perm, DeviceBuffer::allocate(dev, bytes));
        FERRITE_RETURN_IF_ERROR(dev.copy_to_device(perm.data(), t.input_perm.data(), bytes));
        v.input_perm = static_cast<const int32_t*>(perm.data());
        v.perm_rows = t.perm_rows;
        buffers.push_back(std::move(perm));
      }
    }
    views.push_back(v);
  }
  inv.bindings = views;
  const int64_t ws = provider.workspace_bytes(sig, limits);
  FERRITE_ASSIGN_OR_RETURN(auto workspace, DeviceBuffer::allocate(dev, std::max<int64_t>(ws, 1)));
  inv.workspace = workspace.data();
  inv.workspace_bytes = ws;
  inv.batch = &c.batch;
  inv.sampling = &c.sampling;
  inv.ctx = &backend.ctx;
  if (backend.ctx.preparer) FERRITE_RETURN_IF_ERROR(backend.ctx.preparer->prepare(c.batch));
  FERRITE_RETURN_IF_ERROR(provider.encode(inv));
  FERRITE_RETURN_IF_ERROR(dev.synchronize());
  for (size_t i = 0; i < bindings.size(); ++i) {
    if (!bindings[i].present()) continue;
    FERRITE_RETURN_IF_ERROR(
        dev.copy_to_host(bindings[i].bytes.data(), inv.bindings[i].data, bindings[i].bytes.size()));
  }
  return bindings;
}

}  // namespace ferrite::conformance
