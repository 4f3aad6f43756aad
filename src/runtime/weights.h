// WeightStore: the model's weights bound by name, on the plan's device.
// Storage is either borrowed (an mmap kept alive by `keep_alive`) or owned
// device buffers (uploads, materialized or dummy weights).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "tensor/tensor.h"

namespace ferrite {

class WeightStore {
 public:
  void add(const std::string& name, TensorView view) { views_[name] = view; }
  void own(DeviceBuffer buffer) { owned_.push_back(std::move(buffer)); }
  void keep_alive(std::shared_ptr<const void> holder) { holders_.push_back(std::move(holder)); }
  const TensorView* find(const std::string& name) const {
    auto it = views_.find(name);
    return it == views_.end() ? nullptr : &it->second;
  }
  const std::map<std::string, TensorView>& views() const { return views_; }
  int64_t total_bytes() const;

 private:
  std::map<std::string, TensorView> views_;
  std::vector<DeviceBuffer> owned_;
  std::vector<std::shared_ptr<const void>> holders_;
};

}  // namespace ferrite
