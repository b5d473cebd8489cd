// SPDX-License-Identifier: Apache-2.0
// Typed errors with stable ids, thrown at the API and I/O edges.
//
// Every error carries a stable id (Errc), the file it concerns (may be empty
// when the input did not come from a file), the JSON path inside that file
// (RFC 6901 pointer, e.g. "/operators/12/inputs/1"; may be empty) and a
// human-readable detail. what() renders all of it on one line:
//   "graph.json: /operators/12/inputs/1: unknown tensor 'h9' [E103]"
#pragma once

#include <limits>
#include <stdexcept>
#include <string>

namespace recsearch {

// Stable error ids; the hundreds digit groups them by the CLI exit code.
enum class Errc : int {
  kParse = 101,        // not JSON / truncated / wrong JSON type
  kSchema = 102,       // missing or malformed field, unknown format or version
  kUnknownName = 103,  // reference to a tensor/operator/dim that does not exist
  kDuplicate = 104,    // name defined twice, tensor produced twice
  kCycle = 105,        // the operator graph has a cycle
  kShape = 106,        // shapes contradict the operator kind
  kStrategy = 107,     // pinned strategy or allowed dims invalid
  kCluster = 108,      // invalid cluster description
  kPlan = 109,         // plan does not match graph or cluster
  kIo = 110,           // file cannot be opened or read
  kUsage = 201,        // bad command-line usage or bad API argument
  kNoFit = 301,        // no plan fits the memory budget
  kRuntime = 401,      // collective or device failure
  kInternal = 501,     // a broken invariant (a bug): please report
};

// Exit code the CLI uses for an error id (docs/design.md, Errors and exit
// codes: 1 bad input, 2 usage, 3 no plan fits, 4 runtime).
[[nodiscard]] constexpr int exit_code(Errc e) noexcept {
  const int group = static_cast<int>(e) / 100;
  return group >= 1 && group <= 4 ? group : 4;
}

// Base of every error recsearch throws on purpose.
class Error : public std::runtime_error {
 public:
  Error(Errc code, std::string detail, std::string json_path = {}, std::string file = {})
      : std::runtime_error(render(code, detail, json_path, file)),
        code_(code),
        detail_(std::move(detail)),
        json_path_(std::move(json_path)),
        file_(std::move(file)) {}

  [[nodiscard]] Errc code() const noexcept { return code_; }
  [[nodiscard]] const std::string& detail() const noexcept { return detail_; }
  [[nodiscard]] const std::string& json_path() const noexcept { return json_path_; }
  [[nodiscard]] const std::string& file() const noexcept { return file_; }

  // The same error attributed to a file (used by readers that validate a
  // Graph built from a file). The JSON path is kept; a non-empty prefix is
  // prepended to it.
  [[nodiscard]] Error in_file(const std::string& file, const std::string& path_prefix = {}) const {
    return Error(code_, detail_, path_prefix + json_path_, file);
  }

 private:
  static std::string render(Errc code, const std::string& detail, const std::string& path,
                            const std::string& file) {
    std::string s;
    if (!file.empty()) s += file + ": ";
    if (!path.empty()) s += path + ": ";
    s += detail;
    s += " [E" + std::to_string(static_cast<int>(code)) + "]";
    return s;
  }

  Errc code_;
  std::string detail_;
  std::string json_path_;
  std::string file_;
};

// kNoFit with the figures its message states, for callers that compare
// them (a sweep's smallest memory reached) without reading the message: the
// per-device memory of the smallest plan the search priced (NaN when it
// priced none), and the parameter state per device were it spread over
// every device, below which no plan at any training setting fits (0 where
// the search did not work it out, as in inference).
class NoFitError : public Error {
 public:
  NoFitError(std::string detail, double smallest_bytes, double floor_bytes)
      : Error(Errc::kNoFit, std::move(detail)),
        smallest_bytes_(smallest_bytes < std::numeric_limits<double>::infinity()
                            ? smallest_bytes
                            : std::numeric_limits<double>::quiet_NaN()),
        floor_bytes_(floor_bytes) {}

  [[nodiscard]] double smallest_bytes() const noexcept { return smallest_bytes_; }
  [[nodiscard]] double floor_bytes() const noexcept { return floor_bytes_; }

 private:
  double smallest_bytes_;
  double floor_bytes_;
};

}  // namespace recsearch
