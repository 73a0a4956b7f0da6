// Status: the error value that crosses every module and thread boundary in Aryl.
//
// Modelled on LevelDB's Status: a code plus a message that names the problem (the
// field, the value, the file:line). Ok statuses carry no allocation. Codes split
// into retryable (Timeout, Unavailable, IoError: "try again / rebuild the group")
// and fatal (InvalidArgument, NotFound, ...: "fail with a clear message").
//
// Thread safety: a Status is a value; distinct objects may be used concurrently.
#pragma once

#include <ostream>
#include <string>
#include <string_view>
#include <utility>

namespace aryl {

class [[nodiscard]] Status {
 public:
  enum class Code : int {
    kOk = 0,
    kInvalidArgument,    // the caller's input is wrong; retrying will not help
    kNotFound,           // a named thing (job, server, file) does not exist
    kAlreadyExists,      // a named thing exists and must not be created again
    kFailedPrecondition, // the system is not in a state where this is allowed
    kOutOfRange,         // a value is outside its allowed range
    kCorruption,         // stored data failed a check (checksum, format)
    kTimeout,            // a deadline passed (retryable)
    kUnavailable,        // a peer is gone or not yet there (retryable)
    kIoError,            // an I/O operation failed (retryable)
    kPermissionDenied,   // authentication or authorization refused
    kCancelled,          // the operation was cancelled
    kInternal,           // a bug: an invariant does not hold
  };

  Status() noexcept = default;
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) { return {Code::kInvalidArgument, std::move(msg)}; }
  static Status NotFound(std::string msg) { return {Code::kNotFound, std::move(msg)}; }
  static Status AlreadyExists(std::string msg) { return {Code::kAlreadyExists, std::move(msg)}; }
  static Status FailedPrecondition(std::string msg) {
    return {Code::kFailedPrecondition, std::move(msg)};
  }
  static Status OutOfRange(std::string msg) { return {Code::kOutOfRange, std::move(msg)}; }
  static Status Corruption(std::string msg) { return {Code::kCorruption, std::move(msg)}; }
  static Status Timeout(std::string msg) { return {Code::kTimeout, std::move(msg)}; }
  static Status Unavailable(std::string msg) { return {Code::kUnavailable, std::move(msg)}; }
  static Status IoError(std::string msg) { return {Code::kIoError, std::move(msg)}; }
  static Status PermissionDenied(std::string msg) {
    return {Code::kPermissionDenied, std::move(msg)};
  }
  static Status Cancelled(std::string msg) { return {Code::kCancelled, std::move(msg)}; }
  static Status Internal(std::string msg) { return {Code::kInternal, std::move(msg)}; }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  bool IsInvalidArgument() const { return code_ == Code::kInvalidArgument; }
  bool IsNotFound() const { return code_ == Code::kNotFound; }
  bool IsTimeout() const { return code_ == Code::kTimeout; }
  bool IsUnavailable() const { return code_ == Code::kUnavailable; }
  bool IsIoError() const { return code_ == Code::kIoError; }
  bool IsCorruption() const { return code_ == Code::kCorruption; }
  bool IsPermissionDenied() const { return code_ == Code::kPermissionDenied; }
  // Retryable errors mean "the peer or the network failed": rebuild and go on.
  bool IsRetryable() const {
    return code_ == Code::kTimeout || code_ == Code::kUnavailable || code_ == Code::kIoError;
  }

  // Returns a copy whose message is "context: message".
  Status WithContext(std::string_view context) const;

  // "OK" or "<CodeName>: <message>".
  std::string ToString() const;
  static std::string_view CodeName(Code code);

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  Status(Code code, std::string msg) : code_(code), message_(std::move(msg)) {}

  Code code_ = Code::kOk;
  std::string message_;
};

inline std::ostream& operator<<(std::ostream& os, const Status& s) { return os << s.ToString(); }

}  // namespace aryl

// Propagates a non-ok Status to the caller.
#define ARYL_RETURN_IF_ERROR(expr)                  \
  do {                                              \
    ::aryl::Status _aryl_status = (expr);           \
    if (!_aryl_status.ok()) return _aryl_status;    \
  } while (0)
