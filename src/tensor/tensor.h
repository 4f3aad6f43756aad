// Shape and TensorView: a non-owning, contiguous, row-major view of memory
// that lives on some device (the view does not know which; the binding does).
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "base/check.h"
#include "tensor/dtype.h"

namespace ferrite {

class Shape {
 public:
  static constexpr int kMaxRank = 6;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) {
    FERRITE_CHECK(dims.size() <= kMaxRank);
    for (int64_t d : dims) dims_[rank_++] = d;
  }
  int rank() const { return rank_; }
  int64_t operator[](int i) const {
    FERRITE_CHECK(i >= 0 && i < rank_);
    return dims_[i];
  }
  int64_t& operator[](int i) {
    FERRITE_CHECK(i >= 0 && i < rank_);
    return dims_[i];
  }
  void push_back(int64_t d) {
    FERRITE_CHECK(rank_ < kMaxRank);
    dims_[rank_++] = d;
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < rank_; ++i) n *= dims_[i];
    return n;
  }
  bool operator==(const Shape& o) const {
    if (rank_ != o.rank_) return false;
    for (int i = 0; i < rank_; ++i)
      if (dims_[i] != o.dims_[i]) return false;
    return true;
  }
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::string to_string() const;  // "[2, 3]"

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

struct TensorView {
  void* data = nullptr;
  DType dtype = DType::kF32;
  Shape shape;
  // Act-order 4-bit weights only (GPTQ desc_act, models/hf_quant.h): the
  // stored columns are the input columns reordered so that each 128 of them
  // form one quantization group, and stored column c of row r multiplies
  // x[input_perm[(r / perm_rows) * in + c]] (in: the last dimension). The
  // table holds one permutation per run of `perm_rows` rows (a module's rows;
  // stacked MoE experts have one per expert matrix). Null for every other
  // tensor; only providers whose descriptor declares `input_permutation` are
  // planned with such a weight (runtime/provider.h).
  const int32_t* input_perm = nullptr;
  int64_t perm_rows = 0;

  int64_t numel() const { return shape.numel(); }
  int64_t nbytes() const { return dtype_bytes(dtype, numel()); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
  // Row r of a rank-2 (or flattened leading dims) view.
  void* row(int64_t r) const {
    int64_t cols = shape[shape.rank() - 1];
    return static_cast<char*>(data) + dtype_bytes(dtype, r * cols);
  }
};

}  // namespace ferrite
