#include <cstring>

#include "tests/conformance/conformance.h"

namespace ferrite::conformance {

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

}  // namespace ferrite::conformance
