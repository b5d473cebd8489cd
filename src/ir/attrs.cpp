// SPDX-License-Identifier: Apache-2.0
// Typed access to operator attributes; wrong types are schema errors that
// name the attribute, so a graph file's mistakes are reported, not guessed.
#include "recsearch/ir/attrs.hpp"

#include <algorithm>

#include "recsearch/error.hpp"

namespace recsearch::ir {
namespace {

[[noreturn]] void wrong_type(std::string_view name, std::string_view want) {
  throw Error(Errc::kSchema, "attribute '" + std::string(name) + "' must be " + std::string(want),
              "/attrs/" + std::string(name));
}

}  // namespace

Attrs::Attrs(std::initializer_list<std::pair<std::string, AttrValue>> init) {
  for (const auto& [k, v] : init) set(k, v);
}

void Attrs::set(std::string name, AttrValue v) {
  auto it = std::lower_bound(items_.begin(), items_.end(), name,
                             [](const auto& item, const std::string& n) { return item.first < n; });
  if (it != items_.end() && it->first == name) {
    it->second = std::move(v);
  } else {
    items_.emplace(it, std::move(name), std::move(v));
  }
}

const AttrValue* Attrs::find(std::string_view name) const noexcept {
  auto it = std::lower_bound(items_.begin(), items_.end(), name,
                             [](const auto& item, std::string_view n) { return item.first < n; });
  return it != items_.end() && it->first == name ? &it->second : nullptr;
}

bool Attrs::has(std::string_view name) const noexcept { return find(name) != nullptr; }

bool Attrs::get_bool(std::string_view name, bool def) const {
  const AttrValue* v = find(name);
  if (!v) return def;
  if (auto* b = std::get_if<bool>(v)) return *b;
  if (auto* i = std::get_if<std::int64_t>(v); i && (*i == 0 || *i == 1)) return *i == 1;
  wrong_type(name, "a boolean");
}

std::int64_t Attrs::get_int(std::string_view name, std::int64_t def) const {
  const AttrValue* v = find(name);
  if (!v) return def;
  if (auto* i = std::get_if<std::int64_t>(v)) return *i;
  if (auto* b = std::get_if<bool>(v)) return *b ? 1 : 0;
  wrong_type(name, "an integer");
}

double Attrs::get_float(std::string_view name, double def) const {
  const AttrValue* v = find(name);
  if (!v) return def;
  if (auto* d = std::get_if<double>(v)) return *d;
  if (auto* i = std::get_if<std::int64_t>(v)) return static_cast<double>(*i);
  wrong_type(name, "a number");
}

std::string Attrs::get_string(std::string_view name, std::string_view def) const {
  const AttrValue* v = find(name);
  if (!v) return std::string(def);
  if (auto* s = std::get_if<std::string>(v)) return *s;
  wrong_type(name, "a string");
}

std::optional<std::vector<std::int64_t>> Attrs::get_ints(std::string_view name) const {
  const AttrValue* v = find(name);
  if (!v) return std::nullopt;
  if (auto* l = std::get_if<std::vector<std::int64_t>>(v)) return *l;
  if (auto* i = std::get_if<std::int64_t>(v)) return std::vector<std::int64_t>{*i};
  // An empty JSON array carries no element type; the reader may store it as
  // any list kind.
  if (auto* d = std::get_if<std::vector<double>>(v); d && d->empty())
    return std::vector<std::int64_t>{};
  if (auto* s = std::get_if<std::vector<std::string>>(v); s && s->empty())
    return std::vector<std::int64_t>{};
  wrong_type(name, "a list of integers");
}

}  // namespace recsearch::ir
