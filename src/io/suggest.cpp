// SPDX-License-Identifier: Apache-2.0
// Edit distance and nearest-name lookup behind every "did you mean" of the
// readers and the CLI (suggest.hpp).
#include "io/suggest.hpp"

#include <algorithm>
#include <vector>

namespace recsearch::io::detail {
namespace {

char lower(char c) noexcept { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// One loop over any container of string-likes, so that both overloads pick
// the same candidate.
template <typename Names>
std::optional<std::string> nearest(std::string_view word, const Names& candidates,
                                   std::optional<std::size_t> max_distance) {
  const std::size_t limit = max_distance.value_or(suggestion_distance(word));
  std::optional<std::string> best;
  std::size_t best_distance = limit + 1;
  for (const auto& c : candidates) {
    const std::string_view name(c);
    if (name == word) return std::nullopt;  // not misspelled
    const std::size_t d = edit_distance(word, name);
    if (d < best_distance) {
      best_distance = d;
      best = std::string(name);
    }
  }
  return best;
}

std::string phrase(const std::optional<std::string>& name) {
  return name ? "; did you mean `" + *name + "`?" : std::string();
}

}  // namespace

std::size_t edit_distance(std::string_view a, std::string_view b) {
  // Three rows of the dynamic program: the swap looks two rows back.
  const std::size_t n = b.size();
  std::vector<std::size_t> prev2(n + 1), prev(n + 1), cur(n + 1);
  for (std::size_t j = 0; j <= n; ++j) prev[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (std::size_t j = 1; j <= n; ++j) {
      const bool same = lower(a[i - 1]) == lower(b[j - 1]);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (same ? 0 : 1)});
      if (i > 1 && j > 1 && lower(a[i - 1]) == lower(b[j - 2]) &&
          lower(a[i - 2]) == lower(b[j - 1]))
        cur[j] = std::min(cur[j], prev2[j - 2] + 1);
    }
    std::swap(prev2, prev);
    std::swap(prev, cur);
  }
  return prev[n];
}

std::size_t suggestion_distance(std::string_view word) noexcept {
  if (word.size() <= 5) return 1;
  return std::min<std::size_t>(3, 1 + (word.size() - 3) / 3);
}

std::optional<std::string> closest(std::string_view word,
                                   std::span<const std::string_view> candidates,
                                   std::optional<std::size_t> max_distance) {
  return nearest(word, candidates, max_distance);
}

std::optional<std::string> closest(std::string_view word, std::span<const std::string> candidates,
                                   std::optional<std::size_t> max_distance) {
  return nearest(word, candidates, max_distance);
}

std::string did_you_mean(std::string_view word, std::span<const std::string_view> candidates) {
  return phrase(closest(word, candidates));
}

std::string did_you_mean(std::string_view word, std::span<const std::string> candidates) {
  return phrase(closest(word, candidates));
}

}  // namespace recsearch::io::detail
