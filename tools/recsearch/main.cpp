// `recsearch`: the command-line tool (DESIGN.md "CLI"). This file only
// declares the subcommands and their options with CLI11 and turns every way
// a run can fail into a one-line message and a documented exit code:
//   0 ok, 1 bad input, 2 usage, 3 no plan fits the memory budget,
//   4 runtime failure (and out-of-memory or internal errors).
// Whatever happens, the process exits with one of those codes: a crash
// would leave scripts unable to tell a bad graph from a bug.
#include <cmath>
#include <cstdint>
#include <exception>
#include <iostream>
#include <new>
#include <string>

#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "recsearch/cluster.hpp"
#include "recsearch/error.hpp"

#ifndef RECSEARCH_VERSION
#define RECSEARCH_VERSION "unknown"
#endif

namespace {

using recsearch::cli::ClusterArgs;

constexpr int kExitUsage = 2;
constexpr int kExitRuntime = 4;

// The raw values of the cluster options; which were given is known only
// after parsing, from the Option pointers.
struct ClusterOptions {
  std::int64_t devices = 0;
  std::string mesh;
  std::string cluster_file;
  CLI::Option* devices_opt = nullptr;
  CLI::Option* mesh_opt = nullptr;
  CLI::Option* cluster_opt = nullptr;

  [[nodiscard]] ClusterArgs args() const {
    ClusterArgs a;
    if (devices_opt->count() > 0) a.devices = devices;
    if (mesh_opt->count() > 0) a.mesh = mesh;
    if (cluster_opt->count() > 0) a.cluster_file = cluster_file;
    return a;
  }
};

void add_cluster_options(CLI::App* cmd, ClusterOptions& o) {
  o.devices_opt = cmd->add_option("--devices", o.devices, "N devices in one flat level")
                      ->check(CLI::Range(std::int64_t{1}, recsearch::kMaxDevices))
                      ->type_name("N");
  o.mesh_opt = cmd->add_option("--mesh", o.mesh, "hierarchical mesh, outermost level first, e.g. 64x8")
                   ->type_name("AxB[xC..]");
  o.cluster_opt = cmd->add_option("--cluster", o.cluster_file, "cluster JSON file (recsearch.cluster)")
                      ->type_name("FILE");
}

// Validates --memory: a positive, finite number of GiB (CLI11's range check
// lets NaN through, and an infinite budget is no budget).
const CLI::Validator kPositiveFinite(
    [](std::string& s) -> std::string {
      try {
        std::size_t used = 0;
        const double v = std::stod(s, &used);
        if (used == s.size() && std::isfinite(v) && v > 0) return {};
      } catch (const std::exception&) {
      }
      return "must be a positive number, got '" + s + "'";
    },
    "GiB>0");

int run(int argc, char** argv) {
  CLI::App app{"recsearch: operator-level parallel strategy search for deep-learning graphs",
               "recsearch"};
  app.set_version_flag("--version", std::string("recsearch ") + RECSEARCH_VERSION);
  app.require_subcommand(1);

  // search
  recsearch::cli::SearchArgs sa;
  ClusterOptions sc;
  std::string search_memory;
  CLI::App* search = app.add_subcommand("search", "find a parallel plan for GRAPH on a cluster");
  search->add_option("GRAPH", sa.graph, "graph JSON file ('-' for stdin)")->required();
  add_cluster_options(search, sc);
  search->add_option("-o,--output", sa.output, "plan file ('-' for stdout, the default)")
      ->type_name("PLAN");
  search->add_option("--mode", sa.mode, "train (default) or infer")
      ->check(CLI::IsMember({"train", "infer"}));
  CLI::Option* memory_opt =
      search->add_option("--memory", search_memory, "memory budget per device in GiB")
          ->check(kPositiveFinite)
          ->type_name("GiB");
  search->add_option("--format", sa.format, "json (default) or table")
      ->check(CLI::IsMember({"json", "table"}));
  search->add_option("--threads", sa.threads, "worker threads, 0 = all (the plan is the same)")
      ->check(CLI::Range(0, 65536));
  search->add_option("--algo", sa.algo, "rec (default), data-parallel or exhaustive")
      ->check(CLI::IsMember({"rec", "data-parallel", "exhaustive"}));
  std::string search_cost;
  CLI::Option* search_cost_opt =
      search->add_option("--cost", search_cost, "cost coefficients JSON file")->type_name("FILE");
  search->add_flag("-q,--quiet", sa.quiet, "no progress on stderr");

  // eval
  recsearch::cli::EvalArgs ea;
  ClusterOptions ec;
  std::string eval_mode;
  CLI::App* eval = app.add_subcommand(
      "eval", "independent step-time and memory estimate of PLAN for GRAPH");
  eval->add_option("GRAPH", ea.graph, "graph JSON file ('-' for stdin)")->required();
  eval->add_option("PLAN", ea.plan, "plan JSON file ('-' for stdin)")->required();
  add_cluster_options(eval, ec);
  eval->add_option("-o,--output", ea.output, "output file ('-' for stdout, the default)")
      ->type_name("OUT");
  CLI::Option* eval_mode_opt =
      eval->add_option("--mode", eval_mode, "train or infer (default: the plan's mode)")
          ->check(CLI::IsMember({"train", "infer"}));
  eval->add_option("--format", ea.format, "json (default) or table")
      ->check(CLI::IsMember({"json", "table"}));
  std::string eval_cost;
  CLI::Option* eval_cost_opt =
      eval->add_option("--cost", eval_cost, "cost coefficients JSON file")->type_name("FILE");
  eval->add_flag("-q,--quiet", ea.quiet, "no progress on stderr");

  // validate
  recsearch::cli::ValidateArgs va;
  CLI::App* validate = app.add_subcommand("validate", "check GRAPH (schema and shapes) only");
  validate->add_option("GRAPH", va.graph, "graph JSON file ('-' for stdin)")->required();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version come through here too, with exit code 0.
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }

  if (search->parsed()) {
    sa.cluster = sc.args();
    if (memory_opt->count() > 0) sa.memory_gib = std::stod(search_memory);
    if (search_cost_opt->count() > 0) sa.cost_file = search_cost;
    return recsearch::cli::run_search(sa);
  }
  if (eval->parsed()) {
    ea.cluster = ec.args();
    if (eval_mode_opt->count() > 0) ea.mode = eval_mode;
    if (eval_cost_opt->count() > 0) ea.cost_file = eval_cost;
    return recsearch::cli::run_eval(ea);
  }
  if (validate->parsed()) return recsearch::cli::run_validate(va);
  // require_subcommand(1) makes this unreachable; say so rather than exit 0.
  std::cerr << app.help();
  return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const recsearch::Error& e) {
    std::cerr << "recsearch: " << e.what() << '\n';
    return recsearch::exit_code(e.code());
  } catch (const std::bad_alloc&) {
    std::cerr << "recsearch: out of memory\n";
    return kExitRuntime;
  } catch (const std::exception& e) {
    std::cerr << "recsearch: internal error: " << e.what() << " (please report)\n";
    return kExitRuntime;
  } catch (...) {
    std::cerr << "recsearch: internal error: unknown exception (please report)\n";
    return kExitRuntime;
  }
}
