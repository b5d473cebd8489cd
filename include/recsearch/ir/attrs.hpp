// SPDX-License-Identifier: Apache-2.0
// Operator attributes: a small typed key/value map (ONNX names and defaults).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace recsearch::ir {

using AttrValue = std::variant<bool, std::int64_t, double, std::string, std::vector<std::int64_t>,
                               std::vector<double>, std::vector<std::string>>;

// Attributes of one operator, kept sorted by name for deterministic output.
// Getters throw recsearch::Error(kSchema) with the path "/attrs/<name>" when
// the stored value has the wrong type; an int is accepted where a double is
// wanted, and a bool where an int is wanted.
class Attrs {
 public:
  Attrs() = default;
  Attrs(std::initializer_list<std::pair<std::string, AttrValue>> init);

  void set(std::string name, AttrValue v);
  [[nodiscard]] bool has(std::string_view name) const noexcept;
  [[nodiscard]] const AttrValue* find(std::string_view name) const noexcept;

  [[nodiscard]] bool get_bool(std::string_view name, bool def) const;
  [[nodiscard]] std::int64_t get_int(std::string_view name, std::int64_t def) const;
  [[nodiscard]] double get_float(std::string_view name, double def) const;
  [[nodiscard]] std::string get_string(std::string_view name, std::string_view def) const;
  // Integer list; a single int is read as a one-element list.
  [[nodiscard]] std::optional<std::vector<std::int64_t>> get_ints(std::string_view name) const;

  [[nodiscard]] const std::vector<std::pair<std::string, AttrValue>>& items() const noexcept {
    return items_;
  }
  [[nodiscard]] bool empty() const noexcept { return items_.empty(); }

 private:
  std::vector<std::pair<std::string, AttrValue>> items_;
};

}  // namespace recsearch::ir
