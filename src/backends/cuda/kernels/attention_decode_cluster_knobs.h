// The cluster decode attention's switches (Tuning::cuda_decode_cluster_*),
// one struct from the tuning file to the kernel: CudaExecOptions and the
// execution state carry it as is, and launch_attention_decode_cluster takes
// it. Every switch leaves the outputs the same; the defaults are the
// tuning file's. Plain C++ with no includes: the backend's public header
// (no CUDA headers) and the kernels' headers (C++17) both include it.
#pragma once

namespace ferrite {

struct DecodeClusterKnobs {
  // Tuning::cuda_decode_cluster_late_stores: the token's K / V rows reach
  // the cache after the first cluster barrier instead of before it (nothing
  // in the launch reads them from there), so that barrier's release no
  // longer waits for those global stores, and the last barrier (which only
  // keeps every block's shared memory alive for the others' reads) arrives
  // relaxed, with no memory fence.
  bool late_stores = true;
  // Tuning::cuda_decode_cluster_staged_pages: before the wait, a block loads
  // the page ids of its positions at once (a thread a page) into shared
  // memory, then issues its K/V copies from them, instead of two dependent
  // global loads (sequence's table offset, page id) before every copy; with
  // StepMeta::token_table the table's start comes from the token (one
  // dependent load fewer: token -> page ids -> copies).
  bool staged_pages = true;
  // Tuning::cuda_decode_cluster_bulk_copies: the cached K/V rows reach
  // shared memory as one bulk (TMA) copy a row, completed on an mbarrier,
  // instead of a cp.async a 16-byte chunk.
  bool bulk_copies = true;
  // Tuning::cuda_decode_cluster_copy_warps: with bulk_copies and
  // late_stores, the two warps without a q / K / V row load the page ids
  // and issue every copy, synchronised only among themselves (a named
  // barrier), so the row warps reach the PDL wait without waiting on them.
  // Ignored without both.
  bool copy_warps = true;
  // Tuning::cuda_decode_cluster_rope_table: RoPE's cos / sin computed once
  // a block into shared memory instead of per row lane.
  bool rope_table = true;
};

}  // namespace ferrite
