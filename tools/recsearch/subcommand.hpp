// SPDX-License-Identifier: Apache-2.0
// How subcommands plug into the `recsearch` tool. Each subcommand lives in
// its own file and registers itself with add_*_command: it declares its
// options on the CLI11 app and leaves a Subcommand whose run() main.cpp calls
// when that subcommand was given. This keeps main.cpp to error handling and
// lets `gen`, `exec`, `show`, `compare` grow without touching each other.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>  // CLI11: only the tool, never the library, sees it

#include "commands.hpp"

namespace recsearch::cli {

// Adds --recompute, --zero and --microbatches (TrainingArgs) to a command.
// A value other than auto overrides the graph file's "training" pin of the
// same setting; operators' own "recompute" pins stay.
inline void add_training_options(CLI::App* cmd, TrainingArgs& a) {
  cmd->add_option("--recompute", a.recompute,
                  "activation recomputation: auto (default: the graph's pin, else searched), none, "
                  "selective or full (operators' own pins stay)")
      ->check(CLI::IsMember({"auto", "none", "selective", "full"}));
  cmd->add_option("--zero", a.zero,
                  "ZeRO stage: auto (default: the graph's pin, else searched), 0, 1, 2 or 3")
      ->check(CLI::IsMember({"auto", "0", "1", "2", "3"}));
  cmd->add_option(
         "--microbatches", a.microbatches,
         "microbatches per step: auto (default: the graph's pin, else searched) or N dividing "
         "the batch")
      ->check(CLI::IsMember({"auto"}) | CLI::PositiveNumber);
}

// --effort: how much time rec spends on plan quality (search::Effort).
inline void add_effort_option(CLI::App* cmd, std::string& effort) {
  cmd->add_option("--effort", effort,
                  "rec: default (polish graphs of up to 2e4 operators x mesh axes) or fast (the "
                  "passes alone: about 20x less time, plans 5% slower on average)")
      ->check(CLI::IsMember({"fast", "default"}));
}

// A declared subcommand: run() is called after parsing if app->parsed().
struct Subcommand {
  CLI::App* app = nullptr;
  std::function<int()> run;
};
using Registry = std::vector<Subcommand>;

// The raw values of `--devices | --mesh | --cluster`; which were given is
// known only after parsing, from the Option pointers.
struct ClusterOptions {
  std::int64_t devices = 0;
  std::string mesh;
  std::string cluster_file;
  bool strict = false;
  CLI::Option* devices_opt = nullptr;
  CLI::Option* mesh_opt = nullptr;
  CLI::Option* cluster_opt = nullptr;

  [[nodiscard]] ClusterArgs args() const;
};

// How a command reads its GRAPH: --dim NAME=N (symbolic dims of an .onnx
// model) and --allow-custom (operator types that look like misspelt kinds
// kept as custom operators).
struct GraphOptions {
  std::vector<std::string> dims;
  bool allow_custom = false;

  // Error(kUsage) on a malformed --dim.
  [[nodiscard]] ReadOptions read_options() const;
};

// Adds --dim and --allow-custom to cmd, bound to o.
void add_graph_options(CLI::App* cmd, GraphOptions& o);

// Adds --devices, --mesh, --cluster and --strict to cmd, bound to o.
void add_cluster_options(CLI::App* cmd, ClusterOptions& o);

// Validates a positive, finite number (CLI11's range check lets NaN through).
[[nodiscard]] const CLI::Validator& positive_finite();

// search, eval, validate (main.cpp).
void add_core_commands(CLI::App& app, Registry& reg);
// import (import_cmd.cpp).
void add_import_command(CLI::App& app, Registry& reg);
// show (show_cmd.cpp).
void add_show_command(CLI::App& app, Registry& reg);
// gen (gen_cmd.cpp).
void add_gen_command(CLI::App& app, Registry& reg);
// exec (exec_cmd.cpp).
void add_exec_command(CLI::App& app, Registry& reg);
// calibrate (calibrate_cmd.cpp).
void add_calibrate_command(CLI::App& app, Registry& reg);
// compare (compare_cmd.cpp).
void add_compare_command(CLI::App& app, Registry& reg);
// export (export_cmd.cpp).
void add_export_command(CLI::App& app, Registry& reg);

}  // namespace recsearch::cli
