#include "runtime/workspace.h"

#include <fmt/format.h>

namespace ferrite {

Status Workspace::status(std::string_view what) const {
  if (!failed_) return Status::ok();
  return internal_error(fmt::format("{}: workspace too small ({} bytes needed, {} bound)", what,
                                    needed_, capacity_));
}

}  // namespace ferrite
