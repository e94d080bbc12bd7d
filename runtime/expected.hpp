// Errors as values: Expected<T> holds either a T or an Error with a message a person can act
// on. The request path never throws (STYLE.md, from Envoy); functions that can fail because
// of what a client or a template sent return Expected. Expected<T, E> carries a richer error
// where the caller needs more than a message (a tool call's status, say).
#pragma once

#include <string>
#include <utility>
#include <variant>

namespace dynrt {

struct Error {
  std::string message;
};

template <class T, class E = Error>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit
  Expected(E error) : v_(std::in_place_index<1>, std::move(error)) {}  // NOLINT: implicit

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  // Precondition: ok().
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }

  // Precondition: !ok().
  const E& error() const { return std::get<1>(v_); }

 private:
  std::variant<T, E> v_;
};

inline Error make_error(std::string message) {
  return Error{std::move(message)};
}

}  // namespace dynrt
