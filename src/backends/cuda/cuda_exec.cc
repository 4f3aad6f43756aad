// The CUDA execution context: stream, cuBLASLt, the per-step binding buffer
// (StepPreparer) and graph capture / replay of decode steps (StepRunner).
//
// Decode steps (every sequence contributes one token) are padded to a
// batch-size bucket: padding sequences have one token, length 0, no block
// table; kernels skip their KV writes and write zeros for their attention.
// Rows are independent in every op, so padding never changes a real row,
// and eager runs use the same padded shapes: eager and replay are bitwise
// equal. The graph of a bucket is captured on its first decode step.
#include <algorithm>
#include <map>
#include <vector>

#include <cuda_profiler_api.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_common.h"
#include "backends/cuda/cuda_device.h"
#include "backends/cuda/gemm.h"
#include "backends/cuda/profiler.h"
#include "backends/cuda/kernels/attention_prefill.cuh"
#include "base/hash.h"

namespace ferrite {
namespace cuda {

uint64_t batch_key(const StepBatch& b) {
  uint64_t h = hash_combine(static_cast<uint64_t>(b.num_tokens()),
                            static_cast<uint64_t>(b.num_sequences()));
  for (const SequenceSlice& s : b.sequences) {
    h = hash_combine(h, static_cast<uint64_t>(s.token_begin) << 32 | static_cast<uint32_t>(s.token_count));
    h = hash_combine(h, static_cast<uint64_t>(s.position_start) << 32 | static_cast<uint32_t>(s.state_slot));
    h = hash_combine(h, reinterpret_cast<uintptr_t>(s.block_table.data()));
    h = hash_combine(h, s.block_table.size());
  }
  return h;
}

class CudaExec final : public StepPreparer, public StepRunner {
 public:
  CudaExec(CudaDevice& device, const CudaExecOptions& o) : device_(device), options_(o) {}

  ~CudaExec() override {
    cudaStreamSynchronize(st_.stream);
    drop_graphs();
    if (host_) cudaFreeHost(host_);
    if (dev_) cudaFree(dev_);
    if (uploaded_) cudaEventDestroy(uploaded_);
    if (st_.split_counters) cudaFree(st_.split_counters);
    close_cluster_trace();
    gemm_shutdown(st_);
  }

  Status init() {
    st_.stream = device_.stream();
    st_.num_sms = device_.num_sms();
    st_.exec = this;
    st_.quant_dot = options_.quant_dot;
    st_.quant_fused = options_.quant_fused;
    st_.quant_fused_fp8 = options_.quant_fused_fp8;
    st_.quant_stream_tokens = options_.quant_stream_tokens;
    st_.quant_mma_fp8 = options_.quant_mma_fp8;
    st_.quant_mma_u4 = options_.quant_mma_u4;
    st_.quant_mma_smem_kib = options_.quant_mma_smem_kib;
    st_.quant_mma_fp8_act = options_.quant_mma_fp8_act;
    st_.moe_mma_fp8 = options_.moe_mma_fp8;
    st_.moe_mma_u4 = options_.moe_mma_u4;
    st_.quant_stream_blocks = options_.quant_stream_blocks;
    st_.quant_stream_item_steps = options_.quant_stream_item_steps;
    st_.quant_stream_mixed = options_.quant_stream_mixed;
    st_.moe_dequant = options_.moe_dequant;
    st_.moe_fused_tokens = options_.moe_fused_tokens;
    st_.moe_gate_up_warp_outputs = options_.moe_gate_up_warp_outputs;
    st_.moe_route_in_router = options_.moe_route_in_router;
    st_.moe_route_block = options_.moe_route_block;
    st_.moe_route_in_experts = options_.moe_route_in_experts;
    st_.moe_down_form = options_.moe_down_form;
    st_.moe_down_pdl_trigger = options_.moe_down_pdl_trigger;
    st_.pdl_trigger_small = options_.pdl_trigger_small;
    st_.moe_shared_in_experts = options_.moe_shared_in_experts;
    st_.gated_delta_fused_norm = options_.gated_delta_fused_norm;
    st_.gated_delta_pdl = options_.gated_delta_pdl;
    st_.gated_delta_conv_in_projection = options_.gated_delta_conv_in_projection;
    st_.decode_split_positions = options_.decode_split_positions;
    st_.decode_reduce_scatter = options_.decode_reduce_scatter;
    st_.decode_cluster = options_.decode_cluster;
    st_.decode_cluster_knobs = options_.decode_cluster_knobs;
    st_.decode_colocate = options_.decode_colocate;
    st_.decode_colocate_min_mib = options_.decode_colocate_min_mib;
    st_.decode_mma_tokens = options_.decode_mma_tokens;
    st_.rope_token_warps = options_.rope_token_warps;
    st_.prefill_short_tiles = options_.prefill_short_tiles;
    st_.dequant_slice_mib = options_.dequant_slice_mib;
    st_.quant_tile_tokens = options_.quant_tile_tokens;
    st_.quant_mmq_tokens = options_.quant_mmq_tokens;
    st_.quant_mmq_min_tokens = options_.quant_mmq_min_tokens;
    st_.quant_mmq_waves = options_.quant_mmq_waves;
    st_.quant_mmq_share_act = options_.quant_mmq_share_act;
    st_.u4_tile_tokens = options_.u4_tile_tokens;
    st_.u4_tile_wgmma = options_.u4_tile_wgmma;
    st_.fp8_lt_tokens = options_.fp8_lt_tokens;
    FERRITE_RETURN_IF_ERROR(gemm_init(st_));
    FERRITE_CUDA_RETURN(cudaEventCreateWithFlags(&uploaded_, cudaEventDisableTiming));
    FERRITE_CUDA_RETURN(cudaMalloc(&st_.split_counters, kSplitCounters * sizeof(int32_t)));
    FERRITE_CUDA_RETURN(cudaMemset(st_.split_counters, 0, kSplitCounters * sizeof(int32_t)));
    if (options_.cluster_trace > 0) FERRITE_RETURN_IF_ERROR(open_cluster_trace());
    const int64_t blocks = (options_.max_context + options_.page_size - 1) / options_.page_size + 1;
    return reserve(options_.max_tokens, options_.max_sequences,
                   options_.max_sequences * blocks);
  }

  BackendState& state() { return st_; }

  // Tuning::cuda_cluster_trace: the ring lives in device memory (a block's
  // record is a few stores at its end, never a round trip to the host that
  // would delay the kernel's completion) and is printed when the context
  // closes.
  Status open_cluster_trace() {
    uint32_t capacity = 1;
    while (capacity < options_.cluster_trace && capacity < (1u << 24)) capacity <<= 1;
    ClusterTrace& t = st_.cluster_trace;
    FERRITE_CUDA_RETURN(cudaMalloc(&t.records, capacity * sizeof(ClusterTraceRecord)));
    FERRITE_CUDA_RETURN(cudaMalloc(&t.next, sizeof(uint32_t)));
    FERRITE_CUDA_RETURN(cudaMemset(t.next, 0, sizeof(uint32_t)));
    t.capacity = capacity;
    return Status::ok();
  }
  void close_cluster_trace() {
    ClusterTrace& t = st_.cluster_trace;
    if (!t.records) return;
    uint32_t taken = 0;
    std::vector<ClusterTraceRecord> r(t.capacity);
    if (cudaMemcpy(&taken, t.next, sizeof(taken), cudaMemcpyDeviceToHost) == cudaSuccess &&
        cudaMemcpy(r.data(), t.records, r.size() * sizeof(ClusterTraceRecord),
                   cudaMemcpyDeviceToHost) == cudaSuccess) {
      const uint32_t n = std::min(taken, t.capacity);
      fmt::print(stderr,
                 "cluster_trace,global_start,global_end,c0,c1,c2,c3,c4,c5,c6,c7,c8,c9,c10,block,blocks,"
                 "smid ({} records of {} taken)\n",
                 n, taken);
      for (uint32_t i = 0; i < n; ++i) {
        const ClusterTraceRecord& x = r[i];
        fmt::print(stderr, "cluster_trace,{},{},{},{},{},{}\n", x.global_start, x.global_end,
                   fmt::join(x.clock, ","), x.block, x.blocks, x.smid);
      }
    }
    cudaFree(t.records);
    cudaFree(t.next);
    t = {};
  }
  CudaGraphStats stats() const { return stats_; }
  void set_graphs(bool on) { graphs_ = on; }
  void invalidate_graphs() { drop_graphs(); }

  Status prepare(const StepBatch& batch) override { return prepare_padded(batch, 0); }

  Status run(const StepBatch& batch,
             const std::function<Status(const StepBatch&)>& encode_nodes) override {
    bool decode = batch.num_sequences() > 0;
    for (const SequenceSlice& s : batch.sequences) decode = decode && s.token_count == 1;
    const int32_t bucket = decode ? bucket_for(batch.num_sequences()) : 0;
    if (bucket == 0) {
      FERRITE_RETURN_IF_ERROR(prepare_padded(batch, 0));
      ++stats_.eager_steps;
      return encode_nodes(batch);
    }
    padded_.token_ids.assign(bucket, 0);
    padded_.sequences.assign(batch.sequences.begin(), batch.sequences.end());
    for (int32_t i = batch.num_sequences(); i < bucket; ++i)
      padded_.sequences.push_back(SequenceSlice{i, 1, 0, {}, -1});
    FERRITE_RETURN_IF_ERROR(prepare_padded(batch, bucket));
    st_.prepared = &padded_;
    st_.prepared_key = batch_key(padded_);
    if (!graphs_) {
      ++stats_.eager_steps;
      return encode_nodes(padded_);
    }
    // A graph per (bucket, KV length class): providers size work by both.
    const int64_t key = static_cast<int64_t>(bucket) << 32 | st_.meta.kv_len_bound;
    auto it = graphs_by_bucket_.find(key);
    if (it == graphs_by_bucket_.end()) {
      cudaGraph_t graph = nullptr;
      FERRITE_CUDA_RETURN(cudaStreamBeginCapture(st_.stream, cudaStreamCaptureModeThreadLocal));
      st_.capturing = true;
      Status s = encode_nodes(padded_);
      st_.capturing = false;
      cudaError_t e = cudaStreamEndCapture(st_.stream, &graph);
      if (!s.is_ok()) {
        if (graph) cudaGraphDestroy(graph);
        return s.with_context("capturing a decode graph");
      }
      if (e != cudaSuccess) return cuda_error(e, "cudaStreamEndCapture");
      cudaGraphExec_t exec = nullptr;
      e = cudaGraphInstantiate(&exec, graph, 0);
      cudaGraphDestroy(graph);
      if (e != cudaSuccess) return cuda_error(e, "cudaGraphInstantiate");
      it = graphs_by_bucket_.emplace(key, exec).first;
      ++stats_.captures;
    } else {
      ++stats_.replays;
    }
    // FERRITE_NCU_DECODE_STEP=K: only the K-th replayed decode step runs
    // inside a profiler range, for `ncu --profile-from-start off`
    // (scripts/gpu_run.sh, FERRITE_NCU=1): per-kernel times of a real
    // replayed step without counting launches.
    const bool profile = ncu_step_ > 0 && stats_.replays == ncu_step_;
    if (profile) FERRITE_CUDA_RETURN(cudaProfilerStart());
    FERRITE_CUDA_RETURN(cudaGraphLaunch(it->second, st_.stream));
    if (profile) {
      FERRITE_CUDA_RETURN(cudaStreamSynchronize(st_.stream));
      FERRITE_CUDA_RETURN(cudaProfilerStop());
    }
    return Status::ok();
  }

  // Makes `meta` describe `batch` (eager callers that bypassed the runner).
  Status ensure(const StepBatch& batch) {
    const uint64_t key = batch_key(batch);
    if (st_.prepared == &batch && st_.prepared_key == key) return Status::ok();
    if (st_.capturing) return internal_error("step metadata changed during graph capture");
    return prepare_padded(batch, 0);
  }

 private:
  int32_t bucket_for(int32_t sequences) const {
    static const int32_t kBuckets[] = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 384, 512};
    for (int32_t b : kBuckets)
      if (b >= sequences && b <= cap_tokens_ && b <= cap_seqs_) return b;
    return 0;
  }

  void drop_graphs() {
    for (auto& [b, g] : graphs_by_bucket_) cudaGraphExecDestroy(g);
    graphs_by_bucket_.clear();
  }

  Status reserve(int64_t tokens, int64_t seqs, int64_t blocks) {
    if (tokens <= cap_tokens_ && seqs <= cap_seqs_ && blocks <= cap_blocks_) return Status::ok();
    if (st_.capturing) return internal_error("binding buffer growth during graph capture");
    FERRITE_CUDA_RETURN(cudaStreamSynchronize(st_.stream));
    drop_graphs();  // they point into the old buffer
    cap_tokens_ = std::max<int64_t>(tokens, cap_tokens_);
    cap_seqs_ = std::max<int64_t>(seqs, cap_seqs_);
    cap_blocks_ = std::max<int64_t>(blocks, cap_blocks_);
    // tokens: position, sequence, table start and two prefill-tile entries (a tile holds
    // at least one token); sequences: last row, length, slot, table offset.
    const size_t bytes = 4 * static_cast<size_t>(5 * cap_tokens_ + 4 * cap_seqs_ + cap_blocks_ + 64);
    if (host_) cudaFreeHost(host_);
    if (dev_) cudaFree(dev_);
    host_ = nullptr;
    dev_ = nullptr;
    FERRITE_CUDA_RETURN(cudaHostAlloc(reinterpret_cast<void**>(&host_), bytes, cudaHostAllocDefault));
    FERRITE_CUDA_RETURN(cudaMalloc(reinterpret_cast<void**>(&dev_), bytes));
    return Status::ok();
  }

  // Writes the metadata of `batch` padded to `bucket` sequences (0: none).
  Status prepare_padded(const StepBatch& batch, int32_t bucket) {
    const int64_t seqs = std::max<int64_t>(bucket, batch.num_sequences());
    const int64_t tokens = bucket > 0 ? bucket : batch.num_tokens();
    int64_t blocks = 0;
    for (const SequenceSlice& s : batch.sequences) blocks += static_cast<int64_t>(s.block_table.size());
    FERRITE_RETURN_IF_ERROR(reserve(tokens, seqs, blocks));
    FERRITE_CUDA_RETURN(cudaEventSynchronize(uploaded_));  // the last upload has left host_
    int32_t* token_pos = host_;
    int32_t* token_seq = token_pos + tokens;
    int32_t* token_table = token_seq + tokens;
    int32_t* seq_last = token_table + tokens;
    int32_t* seq_len = seq_last + seqs;
    int32_t* seq_slot = seq_len + seqs;
    int32_t* seq_off = seq_slot + seqs;
    int32_t* tables = seq_off + seqs;
    int32_t off = 0;
    for (int64_t i = 0; i < seqs; ++i) {
      if (i < batch.num_sequences()) {
        const SequenceSlice& s = batch.sequences[i];
        for (int32_t j = 0; j < s.token_count; ++j) {
          token_pos[s.token_begin + j] = s.position_start + j;
          token_seq[s.token_begin + j] = static_cast<int32_t>(i);
          token_table[s.token_begin + j] = off;
        }
        seq_last[i] = s.token_begin + s.token_count - 1;
        seq_len[i] = s.position_start + s.token_count;
        seq_slot[i] = s.state_slot;
        seq_off[i] = off;
        std::copy(s.block_table.begin(), s.block_table.end(), tables + off);
        off += static_cast<int32_t>(s.block_table.size());
      } else {  // padding: one token of its own at row i, no positions
        token_pos[i] = 0;
        token_seq[i] = static_cast<int32_t>(i);
        token_table[i] = -1;
        seq_last[i] = static_cast<int32_t>(i);
        seq_len[i] = 0;
        seq_slot[i] = -1;
        seq_off[i] = off;
      }
    }
    int32_t* tile_seq = tables + off;
    int32_t* tile_row = tile_seq + tokens;
    int32_t tiles = 0, longest = 0, kv_bound = 256;
    for (int32_t i = 0; i < batch.num_sequences(); ++i) {
      const SequenceSlice& s = batch.sequences[i];
      longest = std::max(longest, s.token_count);
      while (kv_bound < s.position_start + s.token_count && kv_bound < (1 << 30)) kv_bound *= 2;
      for (int32_t r = 0; r < s.token_count; r += kPrefillTileQ) {
        tile_seq[tiles] = i;
        tile_row[tiles] = s.token_begin + r;
        ++tiles;
      }
    }
    const size_t used = static_cast<size_t>(tile_row + tiles - host_);
    FERRITE_CUDA_RETURN(cudaMemcpyAsync(dev_, host_, 4 * std::max<size_t>(used, 1),
                                        cudaMemcpyHostToDevice, st_.stream));
    FERRITE_CUDA_RETURN(cudaEventRecord(uploaded_, st_.stream));
    auto dev = [&](int32_t* p) { return dev_ + (p - host_); };
    st_.meta.token_pos = dev(token_pos);
    st_.meta.token_seq = dev(token_seq);
    st_.meta.token_table = dev(token_table);
    st_.meta.seq_last_row = dev(seq_last);
    st_.meta.seq_len = dev(seq_len);
    st_.meta.seq_state_slot = dev(seq_slot);
    st_.meta.seq_block_off = dev(seq_off);
    st_.meta.block_tables = dev(tables);
    st_.meta.tile_seq = dev(tile_seq);
    st_.meta.tile_row = dev(tile_row);
    st_.meta.num_tiles = tiles;
    st_.meta.longest_run = longest;
    st_.meta.kv_len_bound = kv_bound;
    st_.prepared = &batch;
    st_.prepared_key = batch_key(batch);
    return Status::ok();
  }

  CudaDevice& device_;
  CudaExecOptions options_;
  BackendState st_;
  bool graphs_ = true;
  int64_t ncu_step_ = options_.ncu_decode_step;
  int32_t* host_ = nullptr;
  int32_t* dev_ = nullptr;
  int64_t cap_tokens_ = 0, cap_seqs_ = 0, cap_blocks_ = 0;
  cudaEvent_t uploaded_ = nullptr;
  StepBatch padded_;
  std::map<int64_t, cudaGraphExec_t> graphs_by_bucket_;  // (bucket << 32 | kv_len_bound)
  CudaGraphStats stats_;
};

BackendState& state(const Invocation& inv) {
  FERRITE_CHECK(inv.ctx && inv.ctx->backend) << "CUDA provider run without a CUDA exec context";
  return *static_cast<BackendState*>(inv.ctx->backend);
}

void drop_captured_graphs(BackendState& st) { st.exec->invalidate_graphs(); }

Status ensure_prepared(const Invocation& inv) {
  BackendState& st = state(inv);
  return st.exec->ensure(*inv.batch);
}

ProviderDescriptor cuda_descriptor(std::string name, const ContractSchema& contract,
                                   std::string summary, bool paged_kv) {
  ProviderDescriptor d;
  d.name = std::move(name);
  d.contract = &contract;
  d.contract_id = contract.id();
  d.contract_major = contract.major();
  d.backend = BackendKind::kCuda;
  d.activation_dtypes = {DType::kBF16, DType::kF16, DType::kF32};
  d.weight_dtypes = {DType::kBF16, DType::kF16, DType::kF32};
  d.paged_kv = paged_kv;
  d.priority = 10;
  d.summary = std::move(summary);
  return d;
}

}  // namespace cuda

Result<std::shared_ptr<void>> make_cuda_exec_context(Device& device, const CudaExecOptions& options,
                                                     ExecContext* ctx) {
  auto* d = dynamic_cast<cuda::CudaDevice*>(&device);
  if (!d) return invalid_argument("make_cuda_exec_context: not a CUDA device");
  auto exec = std::make_shared<cuda::CudaExec>(*d, options);
  FERRITE_RETURN_IF_ERROR(exec->init());
  exec->set_graphs(options.graphs);
  if (options.profile) cuda::set_profiling(true);
  ctx->device = &device;
  ctx->stream = exec->state().stream;
  ctx->preparer = exec.get();
  ctx->runner = exec.get();
  ctx->backend = &exec->state();
  return std::shared_ptr<void>(exec);
}

CudaGraphStats cuda_graph_stats(const ExecContext& ctx) {
  if (!ctx.backend) return {};
  return static_cast<cuda::BackendState*>(ctx.backend)->exec->stats();
}

void cuda_set_graphs_enabled(const ExecContext& ctx, bool enabled) {
  if (ctx.backend) static_cast<cuda::BackendState*>(ctx.backend)->exec->set_graphs(enabled);
}

}  // namespace ferrite
