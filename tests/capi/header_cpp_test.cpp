// SPDX-License-Identifier: Apache-2.0
// The C header compiles as C++ next to the C++ API, declares its functions
// with C linkage, and its version macros agree with the C++ library's.
#include "recsearch/recsearch.h"

#include <doctest/doctest.h>

#include <cstring>
#include <type_traits>

#include "recsearch/recsearch.hpp"

TEST_CASE("C header in C++: linkage, status values, version") {
  // C linkage: the function types carry no C++ mangling, so pointers to them
  // have the plain C function types.
  static_assert(std::is_same_v<decltype(&rs_version), const char* (*)()>);
  static_assert(std::is_same_v<decltype(&rs_graph_free), void (*)(rs_graph*)>);
  // The status values are the CLI's exit codes.
  CHECK(RS_OK == 0);
  CHECK(RS_BAD_INPUT == recsearch::exit_code(recsearch::Errc::kParse));
  CHECK(RS_USAGE == recsearch::exit_code(recsearch::Errc::kUsage));
  CHECK(RS_NO_FIT == recsearch::exit_code(recsearch::Errc::kNoFit));
  CHECK(RS_RUNTIME == recsearch::exit_code(recsearch::Errc::kRuntime));
  CHECK(RS_INTERNAL == static_cast<int>(recsearch::Errc::kInternal) / 100);
  CHECK(std::strcmp(RS_VERSION_STRING, recsearch::kVersion) == 0);
}
