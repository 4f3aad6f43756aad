// Tensor parallelism: one model across W ranks (devices). A property of the
// plan, not of the model files: a family builds its whole program once;
// split_program() turns it into the program every rank runs on its own
// shard of the weights, before any weight is allocated (a model that cannot
// be split W ways fails here, with one error listing every reason).
//
// The split, per contract (Megatron-LM's layout, as vLLM):
// - causal_paged_attention: query heads and KV heads split W ways (Q / K / V
//   rows, column-parallel; O columns, row-parallel); KV heads fewer than W
//   are replicated (W a multiple of them), each rank keeping the one its
//   query heads read. Each rank's KV cache holds its KV heads.
// - gated_delta_recurrent_attention: value heads split W ways with their key
//   heads (key heads fewer than W replicated as KV heads are): Q / K / V /
//   z / b / a rows, conv channels, A_log / dt_bias, out_proj columns and the
//   conv / delta state per rank.
// - dense_swiglu: gate / up rows and down columns split W ways.
// - routed_swiglu_moe / routed_shared_swiglu_moe: split within the experts
//   (every rank holds every expert at 1/W of its width; the router and the
//   shared-expert gate are replicated), not expert parallelism: every rank
//   does the same work for every token (no routing imbalance between ranks,
//   no all-to-all), the contract stays as it is, and it is vLLM's default
//   for Qwen3-MoE. The cost: expert GEMMs 1/W as wide, and cuts of the
//   packed expert tensors that are strided (copied at load, 1/W each).
// - The four blocks above write their contribution to `partial_out` (the
//   contracts' optional binding) instead of adding it to hidden; the plan
//   then has a tp_all_reduce_sum node (the sum over ranks, in place) and a
//   residual_add node (hidden += the sum) after each. hidden is replicated:
//   every rank holds the same bits after every all-reduce.
// - last_token_dense_linear (the LM head): vocab-parallel, each rank's
//   logits of its 1/W of the vocabulary, then a tp_all_gather node makes the
//   whole [sequences, vocab] logits on every rank: the sampler contracts run
//   unchanged on rank 0 (gathered logits rather than a gathered argmax: the
//   sampler's penalties, top-k / top-p / min-p, logprobs and top-n,
//   constraints' masks all need the whole row; the gather is S x V floats a
//   step, small beside the step's weights at any batch).
// - token_embedding, rms_norm, residual_add: replicated (the embedding
//   table too: a mmap view on CPU).
// Each rank's weights are cut from the checkpoint by WeightShard
// (runtime/program.h): row cuts of a tensor are views of the mapping on CPU,
// column cuts are copied (1/W of the tensor per rank).
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "runtime/communicator.h"
#include "runtime/program.h"

namespace ferrite {

// The program each of `world` ranks runs (world == 1: `program` as it is).
// invalid_argument listing every dimension that does not split `world`
// ways; unsupported for a contract without a split.
Result<ModelProgram> split_program(const ModelProgram& program, int world);

// Rank `rank`'s elements of a weight cut by `shard`, as [begin, end) ranges
// of the whole weight's elements in row-major order, ascending, adjacent
// ranges merged.
std::vector<std::pair<int64_t, int64_t>> shard_ranges(const WeightShard& shard, int rank,
                                                      int world);

}  // namespace ferrite
