// Result<T>: a value or the Status that explains why there is none.
//
// Result<T> never holds an ok Status without a value: constructing one from
// Status::Ok() is a programming error and yields an Internal status instead.
#pragma once

#include <cassert>
#include <type_traits>
#include <utility>
#include <variant>

#include "aryl/status.h"

namespace aryl {

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    if (std::get<Status>(v_).ok()) v_ = Status::Internal("Result constructed from an ok Status");
  }

  bool ok() const { return std::holds_alternative<T>(v_); }
  // The error; Ok when the result holds a value.
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }

  T& value() & { assert(ok()); return std::get<T>(v_); }
  const T& value() const& { assert(ok()); return std::get<T>(v_); }
  T&& value() && { assert(ok()); return std::get<T>(std::move(v_)); }
  T value_or(T fallback) const { return ok() ? std::get<T>(v_) : std::move(fallback); }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace aryl

#define ARYL_CONCAT_INNER_(a, b) a##b
#define ARYL_CONCAT_(a, b) ARYL_CONCAT_INNER_(a, b)
// ARYL_ASSIGN_OR_RETURN(auto x, Compute()); propagates the error of a Result.
#define ARYL_ASSIGN_OR_RETURN(lhs, expr)                                 \
  auto ARYL_CONCAT_(_aryl_result_, __LINE__) = (expr);                   \
  if (!ARYL_CONCAT_(_aryl_result_, __LINE__).ok())                       \
    return ARYL_CONCAT_(_aryl_result_, __LINE__).status();               \
  lhs = std::move(ARYL_CONCAT_(_aryl_result_, __LINE__)).value()
