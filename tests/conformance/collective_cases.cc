// Cases of the tensor-parallel collectives (tp_all_reduce_sum,
// tp_all_gather) in a world of one rank (the suite's backends have one
// device): the identity and a copy. tests/parallel runs them across ranks.
#include "contracts/tp_all_gather.h"
#include "contracts/tp_all_reduce_sum.h"
#include "tests/conformance/conformance.h"

namespace ferrite::conformance {

std::vector<Case> tp_collective_cases() {
  std::vector<Case> out;
  CaseRng rng(41);
  for (int64_t width : {1, 64, 257}) {
    Case c;
    c.name = "all_reduce_w" + std::to_string(width);
    c.contract = &tp_all_reduce_sum::contract();
    c.attrs.set("width", static_cast<uint64_t>(width)).set("world_size", uint64_t{1});
    add_sequence(c, 3, 0);
    add_sequence(c, 2, 5);
    c.batch.token_ids = {1, 2, 3, 4, 5};
    c.bindings = {random_tensor(rng, DType::kF32, {5, width}, -2, 2, true)};
    out.push_back(std::move(c));

    Case g;
    g.name = "all_gather_w" + std::to_string(width);
    g.contract = &tp_all_gather::contract();
    g.attrs.set("width", static_cast<uint64_t>(width))
        .set("world_size", uint64_t{1})
        .set("out_width", static_cast<uint64_t>(width));
    add_sequence(g, 4, 0);
    g.batch.token_ids = {1, 2, 3, 4};
    g.bindings = {random_tensor(rng, DType::kF32, {4, width}, -2, 2, false),
                  zeros(DType::kF32, {4, width}, false)};
    out.push_back(std::move(g));
  }
  return out;
}
FERRITE_CONFORMANCE_CASES(tp_collective_cases);

}  // namespace ferrite::conformance
