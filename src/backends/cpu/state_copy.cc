#include "backends/cpu/state_copy.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "base/thread_pool.h"

namespace ferrite {

namespace {

// Pieces of at most this many bytes are the unit of parallel work: small
// enough to spread one layer's delta state (MiBs) over the workers, large
// enough that a tiny model's copy stays on the caller.
constexpr int64_t kPieceBytes = 256 << 10;

class CpuStateCopier final : public StateCopier {
 public:
  explicit CpuStateCopier(ThreadPool* pool) : pool_(pool) {}

  Status bind(std::span<const StateRows> tensors) override {
    tensors_.assign(tensors.begin(), tensors.end());
    pieces_.clear();
    for (size_t t = 0; t < tensors_.size(); ++t)
      for (int64_t off = 0; off < tensors_[t].row_bytes; off += kPieceBytes)
        pieces_.push_back(
            Piece{static_cast<int32_t>(t), off, std::min(kPieceBytes, tensors_[t].row_bytes - off)});
    return Status::ok();
  }

  Status copy(int32_t slot, int32_t snapshot, StateCopyDirection direction) override {
    const bool to_snapshot = direction == StateCopyDirection::kToSnapshot;
    auto run = [&](int64_t a, int64_t b) {
      for (int64_t i = a; i < b; ++i) {
        const Piece& p = pieces_[i];
        const StateRows& r = tensors_[p.tensor];
        char* work = r.slots + r.row_bytes * slot + p.offset;
        char* snap = r.snapshots + r.row_bytes * snapshot + p.offset;
        std::memcpy(to_snapshot ? snap : work, to_snapshot ? work : snap,
                    static_cast<size_t>(p.bytes));
      }
    };
    const int64_t n = static_cast<int64_t>(pieces_.size());
    if (pool_ && n > 1)
      pool_->parallel_for(n, run);
    else
      run(0, n);
    return Status::ok();
  }

 private:
  struct Piece {
    int32_t tensor = 0;
    int64_t offset = 0;
    int64_t bytes = 0;
  };
  ThreadPool* pool_;
  std::vector<StateRows> tensors_;
  std::vector<Piece> pieces_;
};

}  // namespace

std::unique_ptr<StateCopier> make_cpu_state_copier(ThreadPool* pool) {
  return std::make_unique<CpuStateCopier>(pool);
}

}  // namespace ferrite
