// Status and Result<T>: the error channel for everything caused by input
// (files, requests, shapes, unsupported ops or dtypes, exhausted memory).
// Internal invariants use FERRITE_CHECK (check.h) instead, which aborts.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "base/check.h"

namespace ferrite {

// A small fixed set of codes; server/ maps them to HTTP statuses in one place.
enum class StatusCode {
  kOk = 0,
  kInvalidArgument,    // malformed input: bad flag, bad JSON field, token out of vocab
  kNotFound,           // missing file, unknown model or tensor name
  kUnsupported,        // valid input the engine cannot run (architecture, dtype, op)
  kDataLoss,           // corrupt or truncated file, header that lies
  kResourceExhausted,  // out of memory, KV pages, queue slots
  kUnavailable,        // transient: device busy, server shutting down
  kCancelled,          // the caller cancelled
  kInternal,           // a bug or a driver failure
};

std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok() { return Status(); }
  bool is_ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: message"
  std::string to_string() const;

  // Returns a copy whose message is "context: message".
  Status with_context(std::string_view context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// Named constructors (LevelDB style).
Status invalid_argument(std::string message);
Status not_found(std::string message);
Status unsupported(std::string message);
Status data_loss(std::string message);
Status resource_exhausted(std::string message);
Status unavailable(std::string message);
Status cancelled(std::string message);
Status internal_error(std::string message);

// Either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    FERRITE_CHECK(!std::get<Status>(v_).is_ok()) << "Result built from an OK status";
  }

  bool is_ok() const { return std::holds_alternative<T>(v_); }
  const Status& status() const {
    static const Status kOkStatus;
    return is_ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & {
    FERRITE_CHECK(is_ok()) << status().to_string();
    return std::get<T>(v_);
  }
  const T& value() const& {
    FERRITE_CHECK(is_ok()) << status().to_string();
    return std::get<T>(v_);
  }
  T&& value() && {
    FERRITE_CHECK(is_ok()) << status().to_string();
    return std::get<T>(std::move(v_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace ferrite

#define FERRITE_CONCAT_INNER(a, b) a##b
#define FERRITE_CONCAT(a, b) FERRITE_CONCAT_INNER(a, b)

// Returns the status from the enclosing function if it is not OK.
#define FERRITE_RETURN_IF_ERROR(expr)                     \
  do {                                                    \
    ::ferrite::Status ferrite_status_ = (expr);           \
    if (!ferrite_status_.is_ok()) return ferrite_status_; \
  } while (0)

// FERRITE_ASSIGN_OR_RETURN(auto x, make_x()); declares x or returns the error.
#define FERRITE_ASSIGN_OR_RETURN(lhs, expr) \
  FERRITE_ASSIGN_OR_RETURN_IMPL(FERRITE_CONCAT(ferrite_result_, __LINE__), lhs, expr)
#define FERRITE_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.is_ok()) return tmp.status();              \
  lhs = std::move(tmp).value()
