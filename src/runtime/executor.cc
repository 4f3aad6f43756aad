#include "runtime/executor.h"

#include <fmt/format.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>

#include "contracts/last_token_masked_argmax.h"
#include "contracts/last_token_sample.h"
#include "runtime/communicator.h"

namespace ferrite {

namespace {

int64_t value_rows(const ValueDecl& v, const StepLimits& limits) {
  return v.rows == ValueRows::kTokens ? limits.max_tokens : limits.max_sequences;
}

}  // namespace

// Runs a job on ranks 1.. of a plan, one persistent thread each, while the
// caller runs rank 0.
class BoundPlan::RankThreads {
 public:
  explicit RankThreads(int world) : status_(world, Status::ok()) {
    for (int r = 1; r < world; ++r) threads_.emplace_back([this, r] { loop(r); });
  }
  ~RankThreads() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_) t.join();
  }
  // fn(rank) on every rank; the statuses in rank order.
  const std::vector<Status>& run(const std::function<Status(int)>& fn) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      job_ = &fn;
      pending_ = static_cast<int>(threads_.size());
      ++generation_;
    }
    cv_.notify_all();
    status_[0] = fn(0);
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return pending_ == 0; });
    job_ = nullptr;
    return status_;
  }

 private:
  void loop(int rank) {
    uint64_t seen = 0;
    for (;;) {
      const std::function<Status(int)>* job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
        if (stop_) return;
        seen = generation_;
        job = job_;
      }
      Status st = (*job)(rank);
      std::lock_guard<std::mutex> lock(mu_);
      status_[rank] = std::move(st);
      if (--pending_ == 0) done_cv_.notify_all();
    }
  }
  std::vector<std::thread> threads_;
  std::vector<Status> status_;
  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  const std::function<Status(int)>* job_ = nullptr;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
};

BoundPlan::BoundPlan(ResolvedPlan plan, const ModelProgram& program)
    : plan_(std::move(plan)), program_(program) {}

BoundPlan::~BoundPlan() = default;

Result<std::unique_ptr<BoundPlan>> BoundPlan::bind(ResolvedPlan plan, const ModelProgram& program,
                                                   std::unique_ptr<WeightStore> weights,
                                                   Device& device, ExecContext ctx,
                                                   const CacheConfig& cache) {
  std::vector<RankBinding> ranks(1);
  ranks[0].device = &device;
  ranks[0].ctx = ctx;
  ranks[0].weights = std::move(weights);
  return bind(std::move(plan), program, std::move(ranks), cache);
}

Result<std::unique_ptr<BoundPlan>> BoundPlan::bind(ResolvedPlan plan, const ModelProgram& program,
                                                   std::vector<RankBinding> bindings,
                                                   const CacheConfig& cache) {
  const int world = program.tensor_parallel;
  if (static_cast<int>(bindings.size()) != world)
    return invalid_argument(fmt::format("the program is split {} ways, {} ranks were given",
                                        world, bindings.size()));
  std::unique_ptr<BoundPlan> bp(new BoundPlan(std::move(plan), program));
  // Plan nodes must point into our own copy of the program.
  for (size_t i = 0; i < bp->plan_.nodes.size(); ++i) {
    const ProgramNode* old = bp->plan_.nodes[i].node;
    for (const ProgramNode& n : bp->program_.nodes)
      if (n.name == old->name) bp->plan_.nodes[i].node = &n;
  }
  for (int r = 0; r < world; ++r) {
    RankBinding& b = bindings[r];
    if (!b.device || !b.weights) return invalid_argument(fmt::format("rank {} is not bound", r));
    if (world > 1 && (!b.ctx.comm || b.ctx.comm->world_size() != world || b.ctx.comm->rank() != r))
      return invalid_argument(
          fmt::format("rank {} needs the endpoint {} of a communicator of {} ranks", r, r, world));
    for (const WeightDecl& w : bp->program_.weights) {
      const TensorView* v = b.weights->find(w.name);
      if (!v) return not_found("weight '" + w.name + "' was not loaded");
      if (v->dtype != w.dtype || v->shape != w.shape)
        return invalid_argument(fmt::format("weight '{}' is {} {}, the plan expects {} {}", w.name,
                                            dtype_name(v->dtype), v->shape.to_string(),
                                            dtype_name(w.dtype), w.shape.to_string()));
    }
    Rank rank;
    rank.device = b.device;
    rank.ctx = b.ctx;
    rank.ctx.rank = r;
    rank.weights = std::move(b.weights);
    bp->ranks_.push_back(std::move(rank));
  }
  const StepLimits& limits = bp->plan_.limits;

  // KV pages: every kv state shares page ids (on every rank).
  int64_t kv_rank = 0, state_rank = 0;
  for (const StateDecl& s : bp->program_.states) {
    int64_t row = dtype_bytes(s.dtype, s.shape.numel());
    if (s.kind == StateKind::kKvPages)
      kv_rank += row * cache.page_size;
    else
      state_rank += row;
  }
  bp->kv_bytes_per_page_ = kv_rank * world;
  bp->state_bytes_per_slot_ = state_rank * world;
  int32_t num_pages = 0;
  if (bp->kv_bytes_per_page_ > 0) {
    num_pages = cache.num_pages > 0
                    ? cache.num_pages
                    : static_cast<int32_t>(cache.kv_memory_bytes / bp->kv_bytes_per_page_);
    if (num_pages < 1)
      return resource_exhausted(fmt::format("KV cache: {} bytes cannot hold one page of {} bytes",
                                            cache.kv_memory_bytes, bp->kv_bytes_per_page_));
  }
  bp->pages_.init(num_pages, cache.page_size);
  int32_t num_slots = 0;
  if (bp->state_bytes_per_slot_ > 0)
    num_slots = cache.num_state_slots > 0 ? cache.num_state_slots
                                          : static_cast<int32_t>(limits.max_sequences);
  bp->slots_.init(num_slots);

  for (Rank& rank : bp->ranks_) {
    Device& device = *rank.device;
    for (const ValueDecl& v : bp->program_.values) {
      DType dt = v.activation_dtype ? bp->plan_.activation_dtype : v.dtype;
      int64_t bytes = dtype_bytes(dt, value_rows(v, limits) * v.width);
      FERRITE_ASSIGN_OR_RETURN(auto buf, DeviceBuffer::allocate(device, bytes));
      rank.values.emplace(v.name, std::move(buf));
    }
    for (const StateDecl& s : bp->program_.states) {
      Shape shape;
      int64_t count = s.kind == StateKind::kKvPages ? num_pages : num_slots;
      shape.push_back(count);
      if (s.kind == StateKind::kKvPages) shape.push_back(cache.page_size);
      for (int i = 0; i < s.shape.rank(); ++i) shape.push_back(s.shape[i]);
      int64_t bytes = dtype_bytes(s.dtype, shape.numel());
      FERRITE_ASSIGN_OR_RETURN(auto buf, DeviceBuffer::allocate(device, bytes));
      rank.state_views[s.name] = TensorView{buf.data(), s.dtype, shape};
      rank.states.emplace(s.name, std::move(buf));
    }
    bp->bind_views(rank);
    FERRITE_ASSIGN_OR_RETURN(rank.workspace,
                             DeviceBuffer::allocate(device, bp->plan_.workspace_bytes));
  }
  for (int32_t slot = 0; slot < num_slots; ++slot)
    FERRITE_RETURN_IF_ERROR(bp->reset_state_slot(slot));
  Device& device0 = *bp->ranks_[0].device;
  FERRITE_ASSIGN_OR_RETURN(bp->tokens_out_,
                           DeviceBuffer::allocate(device0, 4 * limits.max_sequences));
  FERRITE_ASSIGN_OR_RETURN(bp->logprobs_out_,
                           DeviceBuffer::allocate(device0, 4 * limits.max_sequences));
  bp->sampler_views_.resize(std::max(bp->plan_.argmax.signature.contract->bindings().size(),
                                      bp->plan_.sampler.signature.contract->bindings().size()));
  if (world > 1) bp->threads_ = std::make_unique<RankThreads>(world);
  return bp;
}

Status BoundPlan::reset_state_slot(int32_t slot) {
  for (Rank& rank : ranks_) {
    for (const StateDecl& s : program_.states) {
      if (s.kind != StateKind::kRecurrentSlot) continue;
      const TensorView& v = rank.state_views.at(s.name);
      int64_t row = dtype_bytes(s.dtype, s.shape.numel());
      char* p = static_cast<char*>(v.data) + row * slot;
      if (rank.device->host_accessible()) {
        std::memset(p, 0, row);
      } else {
        std::vector<char> zeros(row, 0);
        FERRITE_RETURN_IF_ERROR(rank.device->copy_to_device(p, zeros.data(), row));
      }
    }
  }
  return Status::ok();
}

Status BoundPlan::reserve_snapshots(int32_t n) {
  if (n < 0) return invalid_argument("negative snapshot count");
  if (snapshot_slots_.free_slots() != snapshot_slots_.num_slots())
    return internal_error("state snapshots are in use");
  if (!has_recurrent_state()) n = 0;
  if (copier_) FERRITE_RETURN_IF_ERROR(copier_->bind({}));
  snapshot_rows_.clear();
  snapshot_row_rank_.clear();
  for (Rank& rank : ranks_) rank.snapshot_buffers.clear();  // frees before the new storage
  snapshot_slots_.init(n);
  if (n == 0) return Status::ok();
  for (int r = 0; r < world_size(); ++r) {
    Rank& rank = ranks_[r];
    for (const StateDecl& s : program_.states) {
      if (s.kind != StateKind::kRecurrentSlot) continue;
      const int64_t row = dtype_bytes(s.dtype, s.shape.numel());
      auto buf = DeviceBuffer::allocate(*rank.device, static_cast<size_t>(row * n));
      if (!buf.is_ok()) {
        for (Rank& q : ranks_) q.snapshot_buffers.clear();
        snapshot_rows_.clear();
        snapshot_row_rank_.clear();
        snapshot_slots_.init(0);
        return buf.status().with_context("prefix-cache state snapshots");
      }
      snapshot_rows_.push_back(StateRows{static_cast<char*>(rank.state_views.at(s.name).data),
                                         static_cast<char*>(buf->data()), row});
      snapshot_row_rank_.push_back(r);
      rank.snapshot_buffers.emplace(s.name, std::move(buf).value());
    }
  }
  if (copier_) FERRITE_RETURN_IF_ERROR(copier_->bind(snapshot_rows_));
  return Status::ok();
}

void BoundPlan::set_state_copier(std::unique_ptr<StateCopier> copier) {
  copier_ = std::move(copier);
  if (copier_) {
    Status s = copier_->bind(snapshot_rows_);
    if (!s.is_ok()) copier_.reset();  // the per-tensor fallback still works
  }
}

Status BoundPlan::copy_snapshot(int32_t slot, int32_t snapshot, StateCopyDirection direction) {
  if (slot < 0 || slot >= slots_.num_slots())
    return invalid_argument(fmt::format("state slot {} out of range", slot));
  if (snapshot < 0 || snapshot >= snapshot_slots_.num_slots())
    return invalid_argument(fmt::format("state snapshot {} out of range", snapshot));
  if (copier_) return copier_->copy(slot, snapshot, direction);
  for (size_t i = 0; i < snapshot_rows_.size(); ++i) {
    const StateRows& r = snapshot_rows_[i];
    char* work = r.slots + r.row_bytes * slot;
    char* snap = r.snapshots + r.row_bytes * snapshot;
    const bool to = direction == StateCopyDirection::kToSnapshot;
    FERRITE_RETURN_IF_ERROR(ranks_[snapshot_row_rank_[i]].device->copy_on_device(
        to ? snap : work, to ? work : snap, static_cast<size_t>(r.row_bytes)));
  }
  return Status::ok();
}

Status BoundPlan::save_snapshot(int32_t slot, int32_t snapshot) {
  return copy_snapshot(slot, snapshot, StateCopyDirection::kToSnapshot);
}

Status BoundPlan::restore_snapshot(int32_t snapshot, int32_t slot) {
  return copy_snapshot(slot, snapshot, StateCopyDirection::kFromSnapshot);
}

Status BoundPlan::validate_batch(const StepBatch& batch) const {
  const StepLimits& limits = plan_.limits;
  if (batch.num_tokens() == 0 || batch.num_sequences() == 0)
    return invalid_argument("empty step batch");
  if (batch.num_tokens() > limits.max_tokens)
    return invalid_argument(fmt::format("step has {} tokens, the plan allows {}",
                                        batch.num_tokens(), limits.max_tokens));
  if (batch.num_sequences() > limits.max_sequences)
    return invalid_argument(fmt::format("step has {} sequences, the plan allows {}",
                                        batch.num_sequences(), limits.max_sequences));
  for (uint32_t id : batch.token_ids)
    if (id >= static_cast<uint64_t>(program_.vocab_size))
      return invalid_argument(
          fmt::format("token id {} is outside the vocabulary of {}", id, program_.vocab_size));
  int32_t next = 0;
  for (const SequenceSlice& s : batch.sequences) {
    if (s.token_begin != next || s.token_count < 1)
      return invalid_argument("step batch token ranges must be contiguous and non-empty");
    next += s.token_count;
    int64_t end = static_cast<int64_t>(s.position_start) + s.token_count;
    if (s.position_start < 0 || end > limits.max_context)
      return invalid_argument(
          fmt::format("positions up to {} exceed the context limit {}", end, limits.max_context));
    if (has_kv()) {
      if (static_cast<int64_t>(s.block_table.size()) < pages_.pages_for(end))
        return invalid_argument("block table too short for the sequence's positions");
      for (int32_t p : s.block_table)
        if (p < 0 || p >= pages_.num_pages()) return invalid_argument("page id out of range");
    }
    if (has_recurrent_state() && (s.state_slot < 0 || s.state_slot >= slots_.num_slots()))
      return invalid_argument("sequence has no valid recurrent state slot");
  }
  if (next != batch.num_tokens())
    return invalid_argument("sequence ranges do not cover the packed tokens");
  return Status::ok();
}

Status BoundPlan::run_node(Rank& rank, const PlannedNode& node, const StepBatch& batch,
                           const SamplingBatch* sampling, std::span<const TensorView> bindings) {
  Invocation inv;
  inv.signature = &node.signature;
  inv.bindings = bindings;
  inv.batch = &batch;
  inv.sampling = sampling;
  inv.workspace = rank.workspace.data();
  inv.workspace_bytes = static_cast<int64_t>(rank.workspace.size());
  inv.ctx = &rank.ctx;
  Status s = node.provider->encode(inv);
  if (!s.is_ok()) return s.with_context(node.node ? node.node->name : "sampler");
  return Status::ok();
}

Status BoundPlan::forward_rank(Rank& rank, const StepBatch& batch) {
  DeviceBuffer& ids = rank.values.at(program_.ids_value);
  FERRITE_RETURN_IF_ERROR(
      rank.device->copy_to_device(ids.data(), batch.token_ids.data(), 4 * batch.token_ids.size()));
  // Records every node for `b` (the step itself, or the step padded to a
  // graph bucket by the backend's StepRunner).
  auto encode_nodes = [&](const StepBatch& b) -> Status { return run_nodes(rank, b); };
  if (rank.ctx.runner) return rank.ctx.runner->run(batch, encode_nodes);
  if (rank.ctx.preparer) FERRITE_RETURN_IF_ERROR(rank.ctx.preparer->prepare(batch));
  return encode_nodes(batch);
}

Status BoundPlan::forward(const StepBatch& batch) {
  FERRITE_RETURN_IF_ERROR(validate_batch(batch));
  if (ranks_.size() == 1) {
    FERRITE_RETURN_IF_ERROR(forward_rank(ranks_[0], batch));
  } else {
    // Every rank at once; a failing rank aborts the group so that the
    // others do not wait for it in a collective.
    const std::vector<Status>& st = threads_->run([&](int r) {
      Status s = forward_rank(ranks_[r], batch);
      if (!s.is_ok() && ranks_[r].ctx.comm) ranks_[r].ctx.comm->abort();
      return s;
    });
    // The first failure that is not the abort it caused elsewhere.
    const Status* first = nullptr;
    for (int r = 0; r < world_size(); ++r) {
      if (st[r].is_ok()) continue;
      if (!first || (first->code() == StatusCode::kCancelled &&
                     st[r].code() != StatusCode::kCancelled))
        first = &st[r];
    }
    if (first) {
      for (int r = 0; r < world_size(); ++r)
        if (&st[r] == first) return first->with_context(fmt::format("tensor-parallel rank {}", r));
    }
  }
  last_sequences_ = batch.num_sequences();
  return Status::ok();
}

void BoundPlan::bind_views(Rank& rank) {
  rank.bound_nodes.clear();
  rank.bound_nodes.reserve(plan_.nodes.size());
  for (const PlannedNode& node : plan_.nodes) {
    BoundNode bn;
    for (const BindingRef& ref : node.node->bindings) {
      TensorView v;
      switch (ref.source) {
        case BindingRef::Source::kNone:
          break;
        case BindingRef::Source::kValue: {
          const ValueDecl* decl = program_.find_value(ref.name);
          v.data = rank.values.at(ref.name).data();
          v.dtype = decl->activation_dtype ? plan_.activation_dtype : decl->dtype;
          // The first dimension is the step's tokens or sequences.
          v.shape = decl->width == 1 && decl->rows == ValueRows::kTokens && !decl->activation_dtype
                        ? Shape{0}
                        : Shape{0, decl->width};
          bn.step_rows.push_back({static_cast<int32_t>(bn.views.size()), decl->rows});
          break;
        }
        case BindingRef::Source::kWeight:
          v = *rank.weights->find(ref.name);
          break;
        case BindingRef::Source::kState:
          v = rank.state_views.at(ref.name);
          break;
      }
      bn.views.push_back(v);
    }
    rank.bound_nodes.push_back(std::move(bn));
  }
}

Status BoundPlan::run_nodes(Rank& rank, const StepBatch& batch) {
  const int64_t tokens = batch.num_tokens(), sequences = batch.num_sequences();
  for (size_t i = 0; i < plan_.nodes.size(); ++i) {
    BoundNode& bn = rank.bound_nodes[i];
    for (const BoundNode::StepRows& r : bn.step_rows)
      bn.views[r.index].shape[0] = r.rows == ValueRows::kTokens ? tokens : sequences;
    FERRITE_RETURN_IF_ERROR(run_node(rank, plan_.nodes[i], batch, nullptr, bn.views));
  }
  return Status::ok();
}

TensorView BoundPlan::logits() const {
  return TensorView{ranks_[0].values.at(program_.logits_value).data(), DType::kF32,
                    Shape{last_sequences_, program_.vocab_size}};
}

Status BoundPlan::choose_tokens(const StepBatch& batch, const SamplingBatch& sampling,
                                std::vector<uint32_t>* tokens, std::vector<float>* logprobs,
                                int32_t top_n, std::vector<uint32_t>* top_ids,
                                std::vector<float>* top_logprobs) {
  namespace am = last_token_masked_argmax;
  namespace ts = last_token_sample;
  int32_t s = batch.num_sequences();
  if (static_cast<int32_t>(sampling.params.size()) != s || s != last_sequences_)
    return invalid_argument("sampling batch does not match the last forward step");
  if (top_n < 0 || top_n > am::kMaxTopLogprobs) return invalid_argument("at most 20 top logprobs");
  bool all_greedy = true;
  for (const SamplingParams& p : sampling.params) all_greedy = all_greedy && p.greedy();
  // Both contracts write the logprob outputs; all-greedy steps take the argmax.
  const bool argmax = all_greedy;
  const PlannedNode& node = argmax ? plan_.argmax : plan_.sampler;
  auto at = [argmax](int in_argmax, int in_sample) { return argmax ? in_argmax : in_sample; };
  // The sampler's binding views: reused (sized at bind), nothing allocated.
  const std::span<TensorView> bindings(sampler_views_.data(),
                                       node.signature.contract->bindings().size());
  std::fill(bindings.begin(), bindings.end(), TensorView{});
  bindings[am::kLogits] = logits();
  bindings[am::kTokens] = TensorView{tokens_out_.data(), DType::kU32, Shape{s}};
  if (logprobs)
    bindings[at(am::kLogprobs, ts::kLogprobs)] =
        TensorView{logprobs_out_.data(), DType::kF32, Shape{s}};
  if (top_n > 0 && top_ids && top_logprobs) {
    if (!top_out_.data()) {
      FERRITE_ASSIGN_OR_RETURN(
          top_out_, DeviceBuffer::allocate(*ranks_[0].device, 8 * am::kMaxTopLogprobs * plan_.limits.max_sequences));
    }
    char* base = static_cast<char*>(top_out_.data());
    bindings[at(am::kTopIds, ts::kTopIds)] = TensorView{base, DType::kU32, Shape{s, top_n}};
    bindings[at(am::kTopLogprobs, ts::kTopLogprobs)] =
        TensorView{base + 4 * s * top_n, DType::kF32, Shape{s, top_n}};
  }
  if (!sampling.allowed.empty()) {  // the allowed-id bitmap
    const int64_t words = (program_.vocab_size + 31) / 32;
    if (static_cast<int64_t>(sampling.allowed.size()) != s * words)
      return invalid_argument("allowed-id bitmap does not match the step");
    void* bits = const_cast<uint32_t*>(sampling.allowed.data());
    if (!ranks_[0].device->host_accessible()) {
      if (!allowed_in_.data()) {
        FERRITE_ASSIGN_OR_RETURN(
            allowed_in_, DeviceBuffer::allocate(*ranks_[0].device, 4 * words * plan_.limits.max_sequences));
      }
      FERRITE_RETURN_IF_ERROR(ranks_[0].device->copy_to_device(allowed_in_.data(), bits, 4 * s * words));
      bits = allowed_in_.data();
    }
    bindings[at(am::kAllowed, ts::kAllowed)] = TensorView{bits, DType::kU32, Shape{s, words}};
  }
  FERRITE_RETURN_IF_ERROR(run_node(ranks_[0], node, batch, &sampling, bindings));
  tokens->resize(s);
  FERRITE_RETURN_IF_ERROR(ranks_[0].device->copy_to_host(tokens->data(), tokens_out_.data(), 4 * s));
  if (logprobs) {
    logprobs->resize(s);
    FERRITE_RETURN_IF_ERROR(ranks_[0].device->copy_to_host(logprobs->data(), logprobs_out_.data(), 4 * s));
  }
  if (top_n > 0 && top_ids && top_logprobs) {
    // One copy of both tables (ids, then logprobs).
    top_host_.resize(2 * static_cast<size_t>(s) * top_n);
    FERRITE_RETURN_IF_ERROR(
        ranks_[0].device->copy_to_host(top_host_.data(), top_out_.data(), 8 * static_cast<size_t>(s) * top_n));
    top_ids->assign(top_host_.begin(), top_host_.begin() + s * top_n);
    top_logprobs->resize(static_cast<size_t>(s) * top_n);
    std::memcpy(top_logprobs->data(), top_host_.data() + s * top_n, 4 * static_cast<size_t>(s) * top_n);
  }
  return Status::ok();
}

}  // namespace ferrite
