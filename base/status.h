// Status and Result<T>: how every library reports bad input or a missing environment.
// Bugs are not Statuses: they hit FATHOM_CHECK (base/check.h).
#pragma once

#include <string>
#include <utility>
#include <variant>

#include "base/check.h"

namespace fathom {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad flag, config, trace line or layout
  kNotFound,         // a named file, model or hardware that does not exist
  kUnavailable,      // missing environment: no GPU, built without CUDA
  kIoError,          // a file that exists but cannot be read or written
};

// [[nodiscard]]: a Status or Result dropped on the floor is an error nobody sees.
class [[nodiscard]] Status {
 public:
  Status() = default;
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) {
    return Status(StatusCode::kInvalidArgument, std::move(msg));
  }
  static Status NotFound(std::string msg) { return Status(StatusCode::kNotFound, std::move(msg)); }
  static Status Unavailable(std::string msg) {
    return Status(StatusCode::kUnavailable, std::move(msg));
  }
  static Status IoError(std::string msg) { return Status(StatusCode::kIoError, std::move(msg)); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // Prefixes the message with where it happened, e.g. a file name.
  Status WithContext(const std::string& where) const {
    if (ok()) return *this;
    return Status(code_, where + ": " + message_);
  }

 private:
  Status(StatusCode code, std::string msg) : code_(code), message_(std::move(msg)) {}
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : data_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : data_(std::move(status)) {  // NOLINT: implicit by design
    FATHOM_CHECK(!std::get<Status>(data_).ok());
  }

  bool ok() const { return std::holds_alternative<T>(data_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(data_);
  }
  T& value() & {
    FATHOM_CHECK(ok());
    return std::get<T>(data_);
  }
  const T& value() const& {
    FATHOM_CHECK(ok());
    return std::get<T>(data_);
  }
  T&& value() && {
    FATHOM_CHECK(ok());
    return std::get<T>(std::move(data_));
  }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() { return value(); }
  const T& operator*() const { return value(); }

 private:
  std::variant<T, Status> data_;
};

}  // namespace fathom

// Returns early from the enclosing function when `expr` (a Status) is not ok.
#define FATHOM_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::fathom::Status fathom_status_ = (expr);        \
    if (!fathom_status_.ok()) return fathom_status_; \
  } while (0)

#define FATHOM_CONCAT_INNER(a, b) a##b
#define FATHOM_CONCAT(a, b) FATHOM_CONCAT_INNER(a, b)

// `FATHOM_ASSIGN_OR_RETURN(auto x, MakeX());` unwraps a Result or returns its Status.
#define FATHOM_ASSIGN_OR_RETURN(lhs, expr)                   \
  auto FATHOM_CONCAT(fathom_result_, __LINE__) = (expr);     \
  if (!FATHOM_CONCAT(fathom_result_, __LINE__).ok())         \
    return FATHOM_CONCAT(fathom_result_, __LINE__).status(); \
  lhs = std::move(FATHOM_CONCAT(fathom_result_, __LINE__)).value()
