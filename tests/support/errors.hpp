// SPDX-License-Identifier: Apache-2.0
// Assertions on the recsearch::Error a call throws, shared by the unit tests:
// error_of returns the error for the test to inspect, expect_error checks
// code, JSON path and file of a reader's error, check_error checks code,
// JSON path and part of the detail of a validator's error. Each fails the
// test when nothing, or something other than recsearch::Error, is thrown.
#pragma once

#include <doctest/doctest.h>

#include <exception>
#include <string>

#include "recsearch/error.hpp"

namespace recsearch::testing {

// The error f throws (FAIL when it throws nothing or something else).
template <class F>
Error error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  } catch (const std::exception& e) {
    FAIL("expected recsearch::Error, got: " << e.what());
  }
  FAIL("expected recsearch::Error, nothing was thrown");
  return Error(Errc::kInternal, "unreachable");
}

// Runs f, which must throw recsearch::Error with exactly this code and JSON
// path, naming `file` in what(). Returns the detail for further checks.
template <class F>
std::string expect_error(F&& f, Errc code, const std::string& path, const std::string& file) {
  try {
    f();
  } catch (const Error& e) {
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

// Runs f and checks that it throws recsearch::Error with this code and JSON
// path, and (when given) a detail containing `text`.
template <class F>
void check_error(F&& f, Errc code, const std::string& path, const std::string& text = {}) {
  try {
    f();
  } catch (const Error& e) {
    CHECK(static_cast<int>(e.code()) == static_cast<int>(code));
    CHECK(e.json_path() == path);
    if (!text.empty()) CHECK_MESSAGE(e.detail().find(text) != std::string::npos, e.what());
    return;
  }
  FAIL("no error thrown; expected " << path);
}

}  // namespace recsearch::testing
