// SPDX-License-Identifier: Apache-2.0
// An optional value kept on the heap: the size of a pointer when empty.
// ir::Operator's user pins (a pinned strategy, the loops the search may
// cut) are absent from nearly every operator; as std::optional of a vector
// each took 32 bytes of every operator, a third of a gigabyte at 10^7
// operators. It reads like std::optional (has_value, bool, *, ->, value,
// reset, emplace, == and = with values and std::nullopt) and copies its value.
#pragma once

#include <memory>
#include <optional>
#include <utility>

namespace recsearch::ir {

template <class T>
class BoxedOptional {
 public:
  BoxedOptional() noexcept = default;
  // Implicit, as std::optional's: `op.strategy = std::nullopt`, `= strategy`.
  BoxedOptional(std::nullopt_t) noexcept {}
  BoxedOptional(T value) : value_(std::make_unique<T>(std::move(value))) {}
  BoxedOptional(const BoxedOptional& o)
      : value_(o.value_ ? std::make_unique<T>(*o.value_) : nullptr) {}
  BoxedOptional(BoxedOptional&&) noexcept = default;
  ~BoxedOptional() = default;

  BoxedOptional& operator=(const BoxedOptional& o) {
    if (this != &o) value_ = o.value_ ? std::make_unique<T>(*o.value_) : nullptr;
    return *this;
  }
  BoxedOptional& operator=(BoxedOptional&&) noexcept = default;
  BoxedOptional& operator=(std::nullopt_t) noexcept {
    value_.reset();
    return *this;
  }
  BoxedOptional& operator=(T value) {
    value_ = std::make_unique<T>(std::move(value));
    return *this;
  }

  [[nodiscard]] bool has_value() const noexcept { return value_ != nullptr; }
  explicit operator bool() const noexcept { return has_value(); }
  [[nodiscard]] T& operator*() noexcept { return *value_; }
  [[nodiscard]] const T& operator*() const noexcept { return *value_; }
  [[nodiscard]] T* operator->() noexcept { return value_.get(); }
  [[nodiscard]] const T* operator->() const noexcept { return value_.get(); }
  [[nodiscard]] T& value() {
    if (!value_) throw std::bad_optional_access();
    return *value_;
  }
  [[nodiscard]] const T& value() const {
    if (!value_) throw std::bad_optional_access();
    return *value_;
  }
  void reset() noexcept { value_.reset(); }
  template <class... Args>
  T& emplace(Args&&... args) {
    value_ = std::make_unique<T>(std::forward<Args>(args)...);
    return *value_;
  }

  friend bool operator==(const BoxedOptional& a, const BoxedOptional& b) {
    return a.has_value() == b.has_value() && (!a.has_value() || *a == *b);
  }
  friend bool operator==(const BoxedOptional& a, std::nullopt_t) noexcept { return !a.has_value(); }
  friend bool operator==(const BoxedOptional& a, const T& b) { return a.has_value() && *a == b; }

 private:
  std::unique_ptr<T> value_;
};

}  // namespace recsearch::ir
