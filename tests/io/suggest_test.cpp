// SPDX-License-Identifier: Apache-2.0
// Tests of the "did you mean" helper (src/io/suggest.hpp): the edit distance
// on the typos the readers and the CLI meet, the closeness limit, ties and
// the phrase appended to messages.
#include <doctest/doctest.h>

#include <array>
#include <string>
#include <string_view>
#include <vector>

#include "io/suggest.hpp"

namespace {

using recsearch::io::detail::closest;
using recsearch::io::detail::did_you_mean;
using recsearch::io::detail::edit_distance;
using recsearch::io::detail::suggestion_distance;

TEST_CASE("edit distance counts insertions, deletions, substitutions and adjacent swaps") {
  CHECK(edit_distance("", "") == 0);
  CHECK(edit_distance("", "abc") == 3);
  CHECK(edit_distance("abc", "") == 3);
  CHECK(edit_distance("bandwidth_GBs", "bandwidth_GBps") == 1);
  CHECK(edit_distance("memory_GB", "memory_GiB") == 1);
  CHECK(edit_distance("serch", "search") == 1);
  CHECK(edit_distance("strategey", "strategy") == 1);
  CHECK(edit_distance("stratgey", "strategy") == 1);  // swap
  CHECK(edit_distance("kitten", "sitting") == 3);
  // Case is ignored: "Matmul" is MatMul.
  CHECK(edit_distance("Matmul", "MatMul") == 0);
  CHECK(edit_distance("RELU", "ReLU") == 0);
  // Symmetric.
  CHECK(edit_distance("sitting", "kitten") == 3);
}

TEST_CASE("the closeness limit grows with the word, up to three") {
  CHECK(suggestion_distance("") == 1);
  CHECK(suggestion_distance("serch") == 1);
  CHECK(suggestion_distance("strate") == 2);
  CHECK(suggestion_distance("memory_GB") == 3);
  CHECK(suggestion_distance("a_very_long_misspelled_key") == 3);
}

TEST_CASE("closest picks the nearest candidate within the limit") {
  constexpr std::array<std::string_view, 4> kCommands = {"search", "eval", "validate", "sweep"};
  CHECK(closest("serch", kCommands) == "search");
  CHECK(closest("evl", kCommands) == "eval");
  CHECK(closest("swep", kCommands) == "sweep");
  CHECK_FALSE(closest("frobnicate", kCommands).has_value());
  // A name that is a candidate is not misspelled.
  CHECK_FALSE(closest("search", kCommands).has_value());
  // An explicit limit overrides the default.
  CHECK_FALSE(closest("serch", kCommands, 0).has_value());
  CHECK(closest("srch", kCommands, 2) == "search");
  // Ties go to the first candidate in order.
  constexpr std::array<std::string_view, 2> kTie = {"ab", "ba"};
  CHECK(closest("aa", kTie) == "ab");
  const std::vector<std::string> keys = {"name", "levels", "device", "cost"};
  CHECK(closest("level", keys) == "levels");
  CHECK(closest("Device", keys) == "device");
}

TEST_CASE("did_you_mean is a phrase to append, empty when nothing is near") {
  const std::vector<std::string> keys = {"bandwidth_GBps", "latency_us", "name", "size"};
  CHECK(did_you_mean("bandwidth_GBs", keys) == "; did you mean `bandwidth_GBps`?");
  CHECK(did_you_mean("colour", keys).empty());
  constexpr std::array<std::string_view, 2> kKinds = {"MatMul", "BatchMatMul"};
  CHECK(did_you_mean("Matmul", kKinds) == "; did you mean `MatMul`?");
}

}  // namespace
