// SPDX-License-Identifier: Apache-2.0
// The name -> id index of ir::Graph: open addressing over 32-bit ids, the
// names themselves staying in the graph's tensor and operator vectors. A
// node-based std::unordered_map<std::string, id> held a second copy of every
// name and a heap node per entry (about 70 bytes per tensor on GPT graphs)
// and its lookups missed the cache at a million operators; this index takes
// 8 bytes per slot and holds no pointer, so copying a Graph copies it as is.
// Not part of the API: ir::Graph's find_tensor / find_operator are.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

namespace recsearch::ir::detail {

class NameIndex {
 public:
  static constexpr std::uint32_t kEmpty = 0xFFFFFFFFu;

  [[nodiscard]] static std::uint32_t hash(std::string_view name) noexcept {
    const std::size_t h = std::hash<std::string_view>{}(name);
    return static_cast<std::uint32_t>(h ^ (h >> 32));
  }

  // Room for n names without growing (load factor at most 1/2).
  void reserve(std::size_t n) {
    std::size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    if (cap > slots_.size()) rebuild(cap);
  }

  // The id whose name (name_of(id)) equals `name`, if any.
  template <class NameOf>
  [[nodiscard]] std::optional<std::uint32_t> find(std::string_view name, std::uint32_t h,
                                                  const NameOf& name_of) const {
    if (slots_.empty()) return std::nullopt;
    const std::size_t mask = slots_.size() - 1;
    for (std::size_t i = h & mask;; i = (i + 1) & mask) {
      const Slot& s = slots_[i];
      if (s.id == kEmpty) return std::nullopt;
      if (s.hash == h && name_of(s.id) == name) return s.id;
    }
  }

  // Adds `id` under hash h; the caller has checked that its name is new.
  void add(std::uint32_t h, std::uint32_t id) {
    if (2 * (size_ + 1) > slots_.size()) rebuild(slots_.empty() ? 16 : 2 * slots_.size());
    place(Slot{h, id});
    ++size_;
  }

 private:
  struct Slot {
    std::uint32_t hash = 0;
    std::uint32_t id = kEmpty;
  };
  void place(Slot slot) {
    const std::size_t mask = slots_.size() - 1;
    std::size_t i = slot.hash & mask;
    while (slots_[i].id != kEmpty) i = (i + 1) & mask;
    slots_[i] = slot;
  }
  void rebuild(std::size_t cap) {
    std::vector<Slot> old(cap);
    old.swap(slots_);
    for (const Slot& s : old)
      if (s.id != kEmpty) place(s);
  }

  std::vector<Slot> slots_;
  std::size_t size_ = 0;
};

}  // namespace recsearch::ir::detail
