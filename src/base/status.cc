#include "base/status.h"

#include <cstdio>
#include <cstdlib>

namespace ferrite {

std::string_view status_code_name(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kNotFound:
      return "NotFound";
    case StatusCode::kUnsupported:
      return "Unsupported";
    case StatusCode::kDataLoss:
      return "DataLoss";
    case StatusCode::kResourceExhausted:
      return "ResourceExhausted";
    case StatusCode::kUnavailable:
      return "Unavailable";
    case StatusCode::kCancelled:
      return "Cancelled";
    case StatusCode::kInternal:
      return "Internal";
  }
  return "Unknown";
}

std::string Status::to_string() const {
  if (is_ok()) return "OK";
  return std::string(status_code_name(code_)) + ": " + message_;
}

Status Status::with_context(std::string_view context) const {
  if (is_ok()) return *this;
  return Status(code_, std::string(context) + ": " + message_);
}

Status invalid_argument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
Status not_found(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
Status unsupported(std::string m) { return {StatusCode::kUnsupported, std::move(m)}; }
Status data_loss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
Status resource_exhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
Status unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
Status cancelled(std::string m) { return {StatusCode::kCancelled, std::move(m)}; }
Status internal_error(std::string m) { return {StatusCode::kInternal, std::move(m)}; }

namespace internal {

CheckFailure::CheckFailure(const char* file, int line, const char* expr) {
  stream_ << file << ":" << line << ": check failed: " << expr << " ";
}

CheckFailure::~CheckFailure() {
  std::fprintf(stderr, "%s\n", stream_.str().c_str());
  std::fflush(stderr);
  std::abort();
}

}  // namespace internal
}  // namespace ferrite
