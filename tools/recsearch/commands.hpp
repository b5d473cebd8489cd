// SPDX-License-Identifier: Apache-2.0
// The subcommands of the `recsearch` tool, independent of how their options
// are parsed. main.cpp fills these option structs from the command line (so
// that CLI11 stays in one file) and calls run_*; each returns the process
// exit code on success and throws recsearch::Error (or anything else) on
// failure, which main.cpp maps to the exit codes of docs/design.md, Errors
// and exit codes.
//
// Nothing here computes a cost: every number comes from the library, so that
// the CLI cannot drift from what the C API or the tests see.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "recsearch/cluster.hpp"
#include "recsearch/cost/cost_params.hpp"
#include "recsearch/problem.hpp"

namespace recsearch::cli {

// `--devices N | --mesh AxB | --cluster FILE`: at most one is set.
struct ClusterArgs {
  std::optional<std::int64_t> devices;
  std::optional<std::string> mesh;
  std::optional<std::string> cluster_file;
  // --strict: unknown keys in the cluster file are errors, not warnings.
  bool strict = false;
  // The command's -q: no warnings about the cluster file on stderr.
  bool quiet = false;

  [[nodiscard]] int count() const noexcept {
    return int{devices.has_value()} + int{mesh.has_value()} + int{cluster_file.has_value()};
  }
};

// Training settings to pin ("auto": the search chooses).
struct TrainingArgs {
  std::string recompute = "auto";
  std::string zero = "auto";
  std::string microbatches = "auto";
};

struct SearchArgs {
  std::string graph;  // "-" = stdin
  ReadOptions read;
  ClusterArgs cluster;
  std::string output = "-";
  std::string mode = "train";
  std::optional<double> memory_gib;
  std::string format = "json";
  std::string detail = "auto";  // plan file detail: auto, full or summary
  bool all_operators = false;   // table: every operator, no folded block
  int threads = 0;
  std::string algo = "rec";
  std::string effort = "default";  // --effort fast|default
  std::optional<std::string> cost_file;
  TrainingArgs training;
  bool quiet = false;
  std::string stages = "1";  // --stages N|auto (pipeline_cmd.hpp)
};

struct EvalArgs {
  std::string graph;
  ReadOptions read;
  std::string plan;
  ClusterArgs cluster;
  std::string output = "-";
  std::optional<std::string> mode;  // default: the plan file's mode
  std::string format = "json";
  std::string detail = "auto";
  bool all_operators = false;
  std::optional<std::string> cost_file;
  bool quiet = false;
};

struct ValidateArgs {
  std::string graph;
  ReadOptions read;
};

// "64x8" -> {64, 8}: factors >= 1, product <= kMaxDevices. Throws
// Error(kUsage) naming the malformed text.
[[nodiscard]] std::vector<std::int64_t> parse_mesh(const std::string& text);

int run_search(const SearchArgs& a);
int run_eval(const EvalArgs& a);
int run_validate(const ValidateArgs& a);

// Short progress lines on stderr, only for a person watching: when stderr is
// not a terminal (pipes, CI logs, the tests) they would only be noise.
class Progress {
 public:
  using Clock = std::chrono::steady_clock;

  explicit Progress(bool quiet);

  [[nodiscard]] bool on() const noexcept { return on_; }
  void say(const std::string& line) const;
  [[nodiscard]] double elapsed_s() const;

 private:
  bool on_;
  Clock::time_point start_ = Clock::now();
};

// The name an input goes by in messages: "-" alone says little.
[[nodiscard]] std::string source_name(const std::string& path);
// Writes text (ending it with a newline) to path, "-" for stdout; Error(kIo)
// naming the file when it cannot.
void write_output(const std::string& path, std::string text);
// Checks, before any long work, that an output file could be created: its
// directory exists and is writable ("-" always passes). Error(kIo) naming
// the path and the OS reason otherwise, so a typo in -o does not cost a
// whole search.
void check_output_writable(const std::string& path);

// Warns on stderr (unless quiet) when a --memory budget exceeds the memory
// of the cluster's devices; the run goes on.
void warn_budget_over_device(double budget_gib, const Cluster& cluster, bool quiet);

// `--dim NAME=N` bindings ("batch=32") as ReadOptions::dims; Error(kUsage)
// naming the malformed one.
[[nodiscard]] std::map<std::string, std::int64_t, std::less<>> parse_dims(
    const std::vector<std::string>& bindings);

// Hands `held` to the process's exit: a command's graph, spaces and plan
// are not freed block by block when it returns (docs/scaling.md, End to
// end). Held from a static pointer, so that leak checkers count them as
// reachable.
void keep_until_exit(std::shared_ptr<const void> held);

// Reads a graph JSON file or ONNX model; its warnings go to stderr unless
// quiet. Error(kUsage) when options bind dims (--dim) of a graph JSON file,
// which has none. The graph is kept until exit (keep_until_exit).
[[nodiscard]] Problem load_problem(const std::string& path, bool quiet,
                                   const ReadOptions& options = {});
// The --recompute, --zero and --microbatches values that are not "auto".
void pin_training(const TrainingArgs& a, search::TrainingChoice& t);
// The --effort value (fast or default); Error(kUsage) for any other.
[[nodiscard]] search::Effort effort_of(const std::string& name);

// Reads a `--cost FILE` JSON object over the coefficients gathered so far.
void apply_cost_file(const std::optional<std::string>& path, CostParams& cost);
// The cluster of `--devices | --mesh | --cluster` (exactly one given); a
// cluster file's "cost" object goes into `cost`.
[[nodiscard]] Cluster cluster_from_args(const ClusterArgs& a, CostParams& cost);
// The cluster to read a plan on: the options' if given, else the plan
// file's (plan_file_cluster); Error(kUsage) when neither says.
[[nodiscard]] Cluster cluster_for_plan(const ClusterArgs& a, std::string_view plan_text,
                                       const std::string& plan_source, CostParams& cost);

}  // namespace recsearch::cli
