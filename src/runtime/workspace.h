// Workspace: the one bump allocator of the providers' scratch, on every
// backend.
//
// A provider's scratch is a run of pieces carved from the plan's workspace
// buffer (runtime/executor.h: one buffer per rank, as large as the largest
// node needs; nodes run one after another). The layout is written once, as
// a function that takes the pieces from a Workspace:
//
//   template <class W> static Pieces layout(W& ws, const Params& p, int64_t tokens) {
//     Pieces s;
//     s.n = ws.template take<float>(tokens * p.hidden_size);
//     ...
//     return s;
//   }
//   int64_t workspace_bytes(node, limits) const override {
//     Workspace ws = Workspace::measure();
//     layout(ws, node.params<Params>(), limits.max_tokens);
//     return ws.used();
//   }
//   Status encode(inv) const override {
//     Workspace ws(inv);
//     const Pieces s = layout(ws, p, inv.batch->num_tokens());
//     FERRITE_RETURN_IF_ERROR(ws.status("dense_swiglu"));
//
// so the size the planner reserves and the pieces encode() uses come from
// the same code: no size formula mirrors the carving order by hand. The
// measuring pass runs with the step limits (the largest step), encode with
// the step's own sizes, which are never larger.
//
// Failure, the same on every backend: a take() past the end returns null
// and marks the workspace failed; status() then returns internal_error with
// what was needed. A provider checks status() once, after its layout and
// before it touches any piece (pieces it takes later, such as the CUDA
// decode splits, are checked where they are taken).
//
// Pieces start at multiples of kAlign bytes from the buffer's start (the
// buffers are allocated with at least that alignment: 256 bytes, CUDA's
// and the CPU device's), so SIMD loads and the CUDA kernels' 16-byte
// vector loads of any piece are aligned.
#pragma once

#include <cstdint>
#include <string_view>

#include "base/status.h"
#include "runtime/provider.h"

namespace ferrite {

class Workspace {
 public:
  static constexpr int64_t kAlign = 256;

  // Measures: take() returns null (a layout must not touch the pieces of a
  // measuring pass); used() is the bytes the layout needs.
  static Workspace measure() { return Workspace(nullptr, -1); }
  // Carves the invocation's workspace.
  explicit Workspace(const Invocation& inv)
      : Workspace(inv.workspace, inv.workspace ? inv.workspace_bytes : 0) {}
  Workspace(void* base, int64_t capacity)
      : base_(static_cast<char*>(base)), capacity_(capacity) {}

  bool measuring() const { return capacity_ < 0; }

  // `count` elements of T, at the next aligned offset.
  template <class T>
  T* take(int64_t count) {
    return static_cast<T*>(take_bytes(count * static_cast<int64_t>(sizeof(T))));
  }
  void* take_bytes(int64_t bytes) {
    const int64_t start = round_up(used_);
    const int64_t end = start + (bytes > 0 ? bytes : 0);
    used_ = end;
    if (measuring()) return nullptr;
    if (end > capacity_) {
      failed_ = true;
      if (end > needed_) needed_ = end;
      return nullptr;
    }
    return base_ + start;
  }

  // Bytes from the start to the end of the last piece (a measuring pass:
  // the workspace_bytes() of the layout).
  int64_t used() const { return used_; }
  // Elements of T a take() now could still get (0 when measuring).
  template <class T>
  int64_t remaining() const {
    const int64_t left = capacity_ - round_up(used_);
    return left > 0 ? left / static_cast<int64_t>(sizeof(T)) : 0;
  }
  // OK, or internal_error naming `what` when a take() did not fit.
  Status status(std::string_view what) const;

  static int64_t round_up(int64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

 private:
  char* base_;
  int64_t capacity_;
  int64_t used_ = 0;
  int64_t needed_ = 0;
  bool failed_ = false;
};

// The workspace_bytes() of a layout function `fn(Workspace&)` (measured).
template <class Fn>
int64_t measure_workspace(Fn&& fn) {
  Workspace ws = Workspace::measure();
  fn(ws);
  return ws.used();
}

}  // namespace ferrite
