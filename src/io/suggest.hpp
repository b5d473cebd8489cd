// SPDX-License-Identifier: Apache-2.0
// "Did you mean ...?" for misspelled names: JSON keys, operator types,
// subcommands. One edit distance and one closeness rule for every reader and
// the CLI, so that a typo gets the same kind of answer wherever it is made.
// Light on purpose (standard library only), so that any reader above io and
// the command-line tool can include it.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace recsearch::io::detail {

// Edit distance between a and b, ignoring ASCII case: insertions, deletions,
// substitutions and swaps of two adjacent characters each count one
// ("optimal string alignment"), so "bandwidth_GBs" is 1 from
// "bandwidth_GBps" and "stratgey" 1 from "strategy".
[[nodiscard]] std::size_t edit_distance(std::string_view a, std::string_view b);

// The largest distance at which a candidate still counts as what `word`
// meant: 1 up to 5 characters, then one more per 3 characters, at most 3.
// Far enough for a typo, near enough that unrelated names are not offered.
[[nodiscard]] std::size_t suggestion_distance(std::string_view word) noexcept;

// The candidate nearest to `word` within max_distance (default:
// suggestion_distance(word)); the first in order on a tie; nullopt when none
// is that near or `word` is itself a candidate.
[[nodiscard]] std::optional<std::string> closest(std::string_view word,
                                                 std::span<const std::string_view> candidates,
                                                 std::optional<std::size_t> max_distance = {});
[[nodiscard]] std::optional<std::string> closest(std::string_view word,
                                                 std::span<const std::string> candidates,
                                                 std::optional<std::size_t> max_distance = {});

// "; did you mean `name`?" for the nearest candidate, or "" when none is
// near: appended to a message that names the unknown word.
[[nodiscard]] std::string did_you_mean(std::string_view word,
                                       std::span<const std::string_view> candidates);
[[nodiscard]] std::string did_you_mean(std::string_view word,
                                       std::span<const std::string> candidates);

}  // namespace recsearch::io::detail
