// SPDX-License-Identifier: Apache-2.0
// The property every fuzz target checks: reading any bytes either yields a
// valid result or throws a recsearch::Error that is about the input (a
// bad-input id, the file named, and a JSON path or, for malformed JSON, a
// byte offset). Anything else -- another exception type, an internal error,
// a crash, a leak -- aborts, which libFuzzer and the corpus replay report.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

#include "recsearch/error.hpp"

namespace fuzz {

// The file name every target reads its input as.
inline constexpr const char* kSource = "fuzz.json";

[[noreturn]] inline void die(const std::string& why) {
  std::fprintf(stderr, "fuzz property violated: %s\n", why.c_str());
  std::fflush(stderr);
  std::abort();
}

// Aborts unless e is a well-formed error about input `source`. kNoFit (no
// plan fits the memory budget) is allowed where a search or evaluation runs.
inline void check_error(const recsearch::Error& e, const std::string& source,
                        bool allow_no_fit = false) {
  const int id = static_cast<int>(e.code());
  const std::string what = e.what();
  const bool input_error = id >= 101 && id <= 110;
  if (!input_error && !(allow_no_fit && e.code() == recsearch::Errc::kNoFit))
    die("unexpected error id: " + what);
  if (e.file() != source) die("error does not name the file '" + source + "': " + what);
  if (what.rfind(source + ": ", 0) != 0) die("what() does not start with the file: " + what);
  if (e.code() == recsearch::Errc::kParse) {
    if (e.detail().find("not valid JSON") == std::string::npos)
      die("parse error without its reason: " + what);
    return;
  }
  // No plan fitting a budget is about the whole graph, not one place in it.
  if (e.code() == recsearch::Errc::kNoFit) {
    if (e.detail().find("no plan fits") == std::string::npos)
      die("no-fit error that does not say no plan fits: " + what);
    return;
  }
  // The document itself has the empty path (RFC 6901): only an error about
  // the top-level value may go without one.
  const bool about_root = e.code() == recsearch::Errc::kSchema && e.json_path().empty() &&
                          e.detail().rfind("expected a JSON object at the top level, got ", 0) == 0;
  if (!about_root && (e.json_path().empty() || e.json_path().front() != '/'))
    die("error without a JSON path: " + what);
}

// Runs f; any recsearch::Error must pass check_error, any other exception
// aborts.
template <class F>
void guard(const std::string& source, bool allow_no_fit, F&& f) {
  try {
    f();
  } catch (const recsearch::Error& e) {
    check_error(e, source, allow_no_fit);
  } catch (const std::exception& e) {
    die(std::string("exception that is not a recsearch::Error: ") + e.what());
  }
}

// An Error thrown by a library call on a graph read from `source` (e.g.
// algebra::build_op_spaces) carries the JSON path but not the file; the
// CLI attributes it the same way.
template <class F>
auto attributed(const std::string& source, F&& f) {
  try {
    return f();
  } catch (const recsearch::Error& e) {
    if (!e.file().empty()) throw;
    throw e.in_file(source);
  }
}

inline std::string_view as_text(const unsigned char* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

}  // namespace fuzz
