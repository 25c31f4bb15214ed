// Status and StatusOr: how errors cross module and thread boundaries in shardd.
//
// A Status carries a code and a message that names the place (file, key, rank,
// peer, call) and, where there is a usual fix, a hint. Exceptions never cross a
// module boundary: code that calls a throwing library converts at the edge.
#pragma once

#include <cstdlib>
#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace shard {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,   // the caller's input is wrong (config, flag, file content)
  kNotFound,          // a file, key, tensor or job does not exist
  kAlreadyExists,
  kOutOfRange,        // bounds or sizes that do not fit
  kDataLoss,          // corrupt or truncated data, checksum mismatch
  kFailedPrecondition,
  kDeadlineExceeded,  // a timeout
  kAborted,           // cancelled by Abort() or by the coordinator
  kUnavailable,       // a peer or service cannot be reached
  kUnimplemented,     // a feature shardd does not have (yet)
  kPermissionDenied,
  kUnauthenticated,
  kResourceExhausted,
  kInternal,
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }

  // "INVALID_ARGUMENT: message" (or "OK").
  std::string ToString() const;

  // Prepends context: Status(kNotFound, "x").WithContext("loading y") ->
  // "loading y: x". Keeps the code.
  Status WithContext(const std::string& context) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status OkStatus() { return Status(); }
inline Status InvalidArgument(std::string m) { return {StatusCode::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {StatusCode::kNotFound, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {StatusCode::kOutOfRange, std::move(m)}; }
inline Status DataLoss(std::string m) { return {StatusCode::kDataLoss, std::move(m)}; }
inline Status FailedPrecondition(std::string m) { return {StatusCode::kFailedPrecondition, std::move(m)}; }
inline Status DeadlineExceeded(std::string m) { return {StatusCode::kDeadlineExceeded, std::move(m)}; }
inline Status Aborted(std::string m) { return {StatusCode::kAborted, std::move(m)}; }
inline Status Unavailable(std::string m) { return {StatusCode::kUnavailable, std::move(m)}; }
inline Status Unimplemented(std::string m) { return {StatusCode::kUnimplemented, std::move(m)}; }
inline Status Internal(std::string m) { return {StatusCode::kInternal, std::move(m)}; }
inline Status ResourceExhausted(std::string m) { return {StatusCode::kResourceExhausted, std::move(m)}; }
inline Status PermissionDenied(std::string m) { return {StatusCode::kPermissionDenied, std::move(m)}; }
inline Status Unauthenticated(std::string m) { return {StatusCode::kUnauthenticated, std::move(m)}; }

// Holds either a value or a non-OK Status.
template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(T value) : value_(std::move(value)) {}  // NOLINT: implicit by design
  StatusOr(Status status) : status_(std::move(status)) {  // NOLINT
    if (status_.ok()) status_ = Internal("StatusOr constructed from an OK status without a value");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

[[noreturn]] void CheckFailed(const char* file, int line, const char* expr, const std::string& msg);

}  // namespace shard

#define SHARD_CONCAT_INNER(a, b) a##b
#define SHARD_CONCAT(a, b) SHARD_CONCAT_INNER(a, b)

// Returns the Status from the enclosing function if `expr` is not OK.
#define RETURN_IF_ERROR(expr)                        \
  do {                                               \
    ::shard::Status _st = (expr);                    \
    if (!_st.ok()) return _st;                       \
  } while (0)

// ASSIGN_OR_RETURN(auto x, MakeX()); declares x or returns the error.
#define ASSIGN_OR_RETURN(lhs, expr)                                   \
  auto SHARD_CONCAT(_so_, __LINE__) = (expr);                         \
  if (!SHARD_CONCAT(_so_, __LINE__).ok())                             \
    return SHARD_CONCAT(_so_, __LINE__).status();                     \
  lhs = std::move(SHARD_CONCAT(_so_, __LINE__)).value()

// Invariants (programming errors, never user input): abort with file:line.
#define SHARD_CHECK(cond)                                                       \
  do {                                                                          \
    if (!(cond)) ::shard::CheckFailed(__FILE__, __LINE__, #cond, std::string()); \
  } while (0)
#define SHARD_CHECK_MSG(cond, msg)                                       \
  do {                                                                   \
    if (!(cond)) ::shard::CheckFailed(__FILE__, __LINE__, #cond, (msg)); \
  } while (0)
