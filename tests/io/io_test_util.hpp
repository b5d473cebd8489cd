// Shared helpers of the io tests: asserting that a call throws a
// recsearch::Error with a given code, JSON path and file.
#pragma once

#include <doctest/doctest.h>

#include <string>

#include "recsearch/error.hpp"

namespace io_test {

// Runs f, which must throw recsearch::Error with exactly this code and JSON
// path, naming `file` in what(). Returns the detail for further checks.
template <class F>
std::string expect_error(F&& f, recsearch::Errc code, const std::string& path,
                         const std::string& file) {
  try {
    f();
  } catch (const recsearch::Error& e) {
    INFO("what(): " << std::string(e.what()));
    CHECK(static_cast<int>(e.code()) == static_cast<int>(code));
    CHECK(e.json_path() == path);
    CHECK(e.file() == file);
    CHECK(std::string(e.what()).find(file + ": ") == 0);
    return e.detail();
  } catch (const std::exception& e) {
    FAIL("expected recsearch::Error, got std::exception: " << e.what());
    return {};
  }
  FAIL("expected recsearch::Error " << static_cast<int>(code) << " at '" << path
                                    << "', nothing was thrown");
  return {};
}

}  // namespace io_test
