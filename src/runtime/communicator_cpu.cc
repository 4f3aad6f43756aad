// The in-process CPU communicator (runtime/communicator.h): ranks are
// threads of one process sharing one rendezvous.
//
// Every collective has two barriers. At the first, each rank has posted its
// call (op, sizes, buffers) and its data are complete; the last rank to
// arrive checks that the calls agree. Between the two, every rank works on
// its share: an all-reduce gives rank r the elements [r n / W, (r+1) n / W),
// which it sums over the ranks in rank order and writes into every rank's
// buffer (no other rank reads or writes those elements), so the result does
// not depend on timing; an all-gather / broadcast rank copies the others'
// data into its own buffer. The second barrier keeps every buffer unchanged
// until no rank reads it any more.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>

#include "runtime/communicator.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define FERRITE_CPU_RELAX() _mm_pause()
#else
#define FERRITE_CPU_RELAX() std::this_thread::yield()
#endif

namespace ferrite {

namespace {

enum class Op { kAllReduceSum, kAllGather, kBroadcast };

std::string_view op_name(Op op) {
  switch (op) {
    case Op::kAllReduceSum: return "all_reduce_sum";
    case Op::kAllGather: return "all_gather";
    case Op::kBroadcast: return "broadcast";
  }
  return "?";
}

struct Post {
  Op op = Op::kAllReduceSum;
  void* data = nullptr;        // all_reduce / broadcast buffer; all_gather recv
  const void* send = nullptr;  // all_gather
  int64_t rows = 0, count = 0;
  DType dtype = DType::kF32;
  int root = 0;
  std::string to_string() const {
    return fmt::format("{}(rows {}, count {}, {}, root {})", op_name(op), rows, count,
                       dtype_name(dtype), root);
  }
  bool agrees(const Post& o) const {
    return op == o.op && rows == o.rows && count == o.count && dtype == o.dtype && root == o.root;
  }
};

// The shared rendezvous of one group.
class Group {
 public:
  explicit Group(int world) : world_(world), posts_(world) {}
  int world() const { return world_; }

  // Barrier; `post` (when given) is published for the other ranks first.
  // The last rank in also checks the posted calls (first barrier only).
  Status arrive(int rank, const Post* post) {
    std::unique_lock<std::mutex> lock(mu_);
    if (aborted_) return cancelled("tensor-parallel group aborted");
    if (post) posts_[rank] = *post;
    const uint64_t gen = generation_.load(std::memory_order_relaxed);
    if (++arrived_ == world_) {
      arrived_ = 0;
      if (post) {
        mismatch_.clear();
        for (int q = 1; q < world_; ++q)
          if (!posts_[q].agrees(posts_[0]))
            mismatch_ = fmt::format("collective mismatch: rank 0 called {}, rank {} called {}",
                                    posts_[0].to_string(), q, posts_[q].to_string());
      }
      generation_.store(gen + 1, std::memory_order_release);
      cv_.notify_all();
    } else {
      // Spin a little (a step issues collectives back to back), then sleep.
      lock.unlock();
      for (int i = 0; i < 4000; ++i) {
        if (generation_.load(std::memory_order_acquire) != gen ||
            aborted_flag_.load(std::memory_order_relaxed))
          break;
        FERRITE_CPU_RELAX();
      }
      lock.lock();
      cv_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != gen || aborted_; });
      if (generation_.load(std::memory_order_acquire) == gen)
        return cancelled("tensor-parallel group aborted");
    }
    if (post && !mismatch_.empty()) return internal_error(mismatch_);
    return Status::ok();
  }

  void abort() {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = true;
    aborted_flag_.store(true, std::memory_order_relaxed);
    cv_.notify_all();
  }

  const Post& post(int rank) const { return posts_[rank]; }

 private:
  const int world_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<uint64_t> generation_{0};
  int arrived_ = 0;
  bool aborted_ = false;
  std::atomic<bool> aborted_flag_{false};
  std::vector<Post> posts_;
  std::string mismatch_;
};

bool reducible(DType dt) { return dt == DType::kF32 || dt == DType::kBF16 || dt == DType::kF16; }

class CpuCommunicator final : public Communicator {
 public:
  CpuCommunicator(std::shared_ptr<Group> group, int rank) : group_(std::move(group)), rank_(rank) {}
  int rank() const override { return rank_; }
  int world_size() const override { return group_->world(); }
  std::string_view kind() const override { return "cpu"; }

  Status all_reduce_sum(void* data, int64_t count, DType dtype, void* /*stream*/) override {
    if (!reducible(dtype))
      return invalid_argument(
          fmt::format("all_reduce_sum: {} is not a summable dtype (f32, bf16, f16)",
                      dtype_name(dtype)));
    if (count < 0 || (count > 0 && !data))
      return invalid_argument("all_reduce_sum: bad buffer");
    Post p{Op::kAllReduceSum, data, nullptr, 1, count, dtype, 0};
    FERRITE_RETURN_IF_ERROR(group_->arrive(rank_, &p));
    const int w = world_size();
    const int64_t begin = count * rank_ / w, end = count * (rank_ + 1) / w;
    if (dtype == DType::kF32) {
      float* bufs[kMaxTensorParallel];
      for (int q = 0; q < w; ++q) bufs[q] = static_cast<float*>(group_->post(q).data);
      for (int64_t i = begin; i < end; ++i) {
        float s = bufs[0][i];
        for (int q = 1; q < w; ++q) s += bufs[q][i];
        for (int q = 0; q < w; ++q) bufs[q][i] = s;
      }
    } else {
      for (int64_t i = begin; i < end; ++i) {
        float s = load_as_f32(group_->post(0).data, dtype, i);
        for (int q = 1; q < w; ++q) s += load_as_f32(group_->post(q).data, dtype, i);
        for (int q = 0; q < w; ++q) store_from_f32(group_->post(q).data, dtype, i, s);
      }
    }
    return group_->arrive(rank_, nullptr);
  }

  Status all_gather(const void* send, void* recv, int64_t rows, int64_t count, DType dtype,
                    void* /*stream*/) override {
    if (rows < 0 || count < 0 || (rows * count > 0 && (!send || !recv)))
      return invalid_argument("all_gather: bad buffers");
    if (dtype_block_elems(dtype) != 1 && count % dtype_block_elems(dtype) != 0)
      return invalid_argument("all_gather: count is not whole blocks");
    const int w = world_size();
    const int64_t row_bytes = dtype_bytes(dtype, count);
    const char* s = static_cast<const char*>(send);
    char* r = static_cast<char*>(recv);
    if (rows * row_bytes > 0 && s < r + rows * row_bytes * w && r < s + rows * row_bytes)
      return invalid_argument("all_gather: send and recv overlap");
    Post p{Op::kAllGather, recv, send, rows, count, dtype, 0};
    FERRITE_RETURN_IF_ERROR(group_->arrive(rank_, &p));
    for (int64_t row = 0; row < rows; ++row)
      for (int q = 0; q < w; ++q)
        std::memcpy(r + (row * w + q) * row_bytes,
                    static_cast<const char*>(group_->post(q).send) + row * row_bytes, row_bytes);
    return group_->arrive(rank_, nullptr);
  }

  Status broadcast(void* data, int64_t count, DType dtype, int root, void* /*stream*/) override {
    if (root < 0 || root >= world_size())
      return invalid_argument(fmt::format("broadcast: root {} outside [0, {})", root, world_size()));
    if (count < 0 || (count > 0 && !data)) return invalid_argument("broadcast: bad buffer");
    Post p{Op::kBroadcast, data, nullptr, 1, count, dtype, root};
    FERRITE_RETURN_IF_ERROR(group_->arrive(rank_, &p));
    if (rank_ != root && count > 0)
      std::memcpy(data, group_->post(root).data, dtype_bytes(dtype, count));
    return group_->arrive(rank_, nullptr);
  }

  void abort() override { group_->abort(); }

 private:
  std::shared_ptr<Group> group_;
  int rank_;
};

}  // namespace

Result<std::vector<std::unique_ptr<Communicator>>> make_cpu_communicators(int world_size) {
  if (world_size < 1 || world_size > kMaxTensorParallel)
    return invalid_argument(fmt::format("tensor-parallel size {} outside [1, {}]", world_size,
                                        kMaxTensorParallel));
  auto group = std::make_shared<Group>(world_size);
  std::vector<std::unique_ptr<Communicator>> out;
  for (int r = 0; r < world_size; ++r) out.push_back(std::make_unique<CpuCommunicator>(group, r));
  return out;
}

}  // namespace ferrite
