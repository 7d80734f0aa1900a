// daemon/util/result.h — value-or-error for fallible system calls and parsers. Nothing in the
// daemon throws across a module boundary: functions that can fail return Result<T>.
#pragma once

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>
#include <variant>

namespace coloc {

/// What went wrong: an errno value (0 when none applies) and a sentence naming the operation.
struct Error {
  int err = 0;
  std::string what;

  /// "what: strerror(err)" or just "what".
  std::string message() const { return err ? what + ": " + std::strerror(err) : what; }
  /// An Error from the current errno, e.g. Error::from_errno("bind /run/coloc/colocd.sock").
  static Error from_errno(std::string what) { return Error{errno, std::move(what)}; }
};

/// Holds a T or an Error. Check ok() (or operator bool) before value().
template <class T>
class Result {
 public:
  Result(T value) : v_(std::move(value)) {}
  Result(Error e) : v_(std::move(e)) {}
  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  const Error& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, Error> v_;
};

/// Result<void>: success or an Error.
template <>
class Result<void> {
 public:
  Result() = default;
  Result(Error e) : e_(std::move(e)), failed_(true) {}
  bool ok() const { return !failed_; }
  explicit operator bool() const { return ok(); }
  const Error& error() const { return e_; }

 private:
  Error e_;
  bool failed_ = false;
};

}  // namespace coloc
