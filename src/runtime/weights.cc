#include "runtime/weights.h"

namespace ferrite {

int64_t WeightStore::total_bytes() const {
  int64_t n = 0;
  for (const auto& [name, v] : views_) n += v.nbytes();
  return n;
}

}  // namespace ferrite
