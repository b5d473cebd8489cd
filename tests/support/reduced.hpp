// SPDX-License-Identifier: Apache-2.0
// The reduced test matrix for instrumented runs.
//
// A few tests sweep every graph of a family against every cluster shape.
// That breadth is what checks the search's quality; under the sanitizers,
// which look for memory and undefined-behaviour errors in the code paths,
// it buys nothing but a ten- to twenty-fold slowdown. tools/sanitize.sh
// therefore sets RECSEARCH_TEST_REDUCED, and these tests then keep a fixed
// diagonal of their matrix: every graph and every cluster still appears,
// in fewer pairings. The plain run always covers the whole matrix.
#pragma once

#include <cstddef>
#include <cstdlib>
#include <string_view>

namespace recsearch::testing {

inline bool reduced_run() {
  const char* v = std::getenv("RECSEARCH_TEST_REDUCED");
  return v != nullptr && std::string_view(v) != "" && std::string_view(v) != "0";
}

// Whether the pair (graph i, cluster j) of a matrix is run: always in a
// plain run, and on every third diagonal in a reduced one.
inline bool keep_pair(std::size_t i, std::size_t j) { return !reduced_run() || (i + j) % 3 == 0; }

}  // namespace recsearch::testing
