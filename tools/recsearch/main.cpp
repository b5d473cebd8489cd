// SPDX-License-Identifier: Apache-2.0
// `recsearch`: the command-line tool (docs/design.md, CLI; docs/cli.md). This file only
// registers the subcommands (each file adds its own: subcommand.hpp) and
// the core ones (search, eval, validate) with CLI11, and turns every way
// a run can fail into a one-line message and a documented exit code:
//   0 ok, 1 bad input, 2 usage, 3 no plan fits the memory budget,
//   4 runtime failure (and out-of-memory or internal errors).
// Whatever happens, the process exits with one of those codes: a crash
// would leave scripts unable to tell a bad graph from a bug.
#include <cmath>
#include <cstdint>
#include <exception>
#include <iostream>
#include <memory>
#include <new>
#include <string>

#include "recsearch/cluster.hpp"
#include "recsearch/error.hpp"
#include "subcommand.hpp"
#include "sweep_cmd.hpp"

#ifndef RECSEARCH_VERSION
#define RECSEARCH_VERSION "unknown"
#endif

namespace recsearch::cli {

ClusterArgs ClusterOptions::args() const {
  ClusterArgs a;
  if (devices_opt->count() > 0) a.devices = devices;
  if (mesh_opt->count() > 0) a.mesh = mesh;
  if (cluster_opt->count() > 0) a.cluster_file = cluster_file;
  return a;
}

void add_cluster_options(CLI::App* cmd, ClusterOptions& o) {
  o.devices_opt = cmd->add_option("--devices", o.devices, "N devices in one flat level")
                      ->check(CLI::Range(std::int64_t{1}, recsearch::kMaxDevices))
                      ->type_name("N");
  o.mesh_opt =
      cmd->add_option("--mesh", o.mesh, "hierarchical mesh, outermost level first, e.g. 64x8")
          ->type_name("AxB[xC..]");
  o.cluster_opt =
      cmd->add_option("--cluster", o.cluster_file, "cluster JSON file (recsearch.cluster)")
          ->type_name("FILE");
}

// An infinite budget is no budget, and NaN compares false with everything.
const CLI::Validator& positive_finite() {
  static const CLI::Validator v(
      [](std::string& s) -> std::string {
        try {
          std::size_t used = 0;
          const double d = std::stod(s, &used);
          if (used == s.size() && std::isfinite(d) && d > 0) return {};
        } catch (const std::exception&) {
        }
        return "must be a positive number, got '" + s + "'";
      },
      "X>0");
  return v;
}

void add_core_commands(CLI::App& app, Registry& reg) {
  // Option values must outlive this function: the registry's closures own them.
  auto sa = std::make_shared<SearchArgs>();
  auto sc = std::make_shared<ClusterOptions>();
  auto search_memory = std::make_shared<std::string>();
  auto search_cost = std::make_shared<std::string>();
  CLI::App* search = app.add_subcommand("search", "find a parallel plan for GRAPH on a cluster");
  search->add_option("GRAPH", sa->graph, "graph JSON file ('-' for stdin)")->required();
  add_cluster_options(search, *sc);
  search->add_option("-o,--output", sa->output, "plan file ('-' for stdout, the default)")
      ->type_name("PLAN");
  search->add_option("--mode", sa->mode, "train (default) or infer")
      ->check(CLI::IsMember({"train", "infer"}));
  CLI::Option* memory_opt =
      search->add_option("--memory", *search_memory, "memory budget per device in GiB")
          ->check(positive_finite())
          ->type_name("GiB");
  search->add_option("--format", sa->format, "json (default) or table")
      ->check(CLI::IsMember({"json", "table"}));
  search->add_option("--threads", sa->threads, "worker threads, 0 = all (the plan is the same)")
      ->check(CLI::Range(0, 65536));
  search
      ->add_option("--algo", sa->algo,
                   "rec (default), data-parallel, megatron, grid, ilp or exhaustive")
      ->check(CLI::IsMember({"rec", "data-parallel", "megatron", "grid", "ilp", "exhaustive"}));
  CLI::Option* search_cost_opt =
      search->add_option("--cost", *search_cost, "cost coefficients JSON file")->type_name("FILE");
  search->add_flag("-q,--quiet", sa->quiet, "no progress on stderr");
  search
      ->add_option("--stages", sa->stages,
                   "pipeline device groups: 1 (default, none), N, or auto (searched)")
      ->type_name("N|auto");
  reg.push_back({search, [=] {
                   sa->cluster = sc->args();
                   if (memory_opt->count() > 0) sa->memory_gib = std::stod(*search_memory);
                   if (search_cost_opt->count() > 0) sa->cost_file = *search_cost;
                   return run_search(*sa);
                 }});

  auto ea = std::make_shared<EvalArgs>();
  auto ec = std::make_shared<ClusterOptions>();
  auto eval_mode = std::make_shared<std::string>();
  auto eval_cost = std::make_shared<std::string>();
  CLI::App* eval =
      app.add_subcommand("eval", "independent step-time and memory estimate of PLAN for GRAPH");
  eval->add_option("GRAPH", ea->graph, "graph JSON file ('-' for stdin)")->required();
  eval->add_option("PLAN", ea->plan, "plan JSON file ('-' for stdin)")->required();
  add_cluster_options(eval, *ec);
  eval->add_option("-o,--output", ea->output, "output file ('-' for stdout, the default)")
      ->type_name("OUT");
  CLI::Option* eval_mode_opt =
      eval->add_option("--mode", *eval_mode, "train or infer (default: the plan's mode)")
          ->check(CLI::IsMember({"train", "infer"}));
  eval->add_option("--format", ea->format, "json (default) or table")
      ->check(CLI::IsMember({"json", "table"}));
  CLI::Option* eval_cost_opt =
      eval->add_option("--cost", *eval_cost, "cost coefficients JSON file")->type_name("FILE");
  eval->add_flag("-q,--quiet", ea->quiet, "no progress on stderr");
  reg.push_back({eval, [=] {
                   ea->cluster = ec->args();
                   if (eval_mode_opt->count() > 0) ea->mode = *eval_mode;
                   if (eval_cost_opt->count() > 0) ea->cost_file = *eval_cost;
                   return run_eval(*ea);
                 }});

  auto va = std::make_shared<ValidateArgs>();
  CLI::App* validate = app.add_subcommand("validate", "check GRAPH (schema and shapes) only");
  validate->add_option("GRAPH", va->graph, "graph JSON file ('-' for stdin)")->required();
  reg.push_back({validate, [=] { return run_validate(*va); }});
}

}  // namespace recsearch::cli

namespace {

constexpr int kExitUsage = 2;
constexpr int kExitRuntime = 4;

int run(int argc, char** argv) {
  CLI::App app{"recsearch: operator-level parallel strategy search for deep-learning graphs",
               "recsearch"};
  app.set_version_flag("--version", std::string("recsearch ") + RECSEARCH_VERSION);
  app.require_subcommand(1);

  // One line per subcommand family; each lives in its own file.
  recsearch::cli::Registry reg;
  recsearch::cli::add_core_commands(app, reg);
  recsearch::cli::add_import_command(app, reg);
  recsearch::cli::add_show_command(app, reg);
  recsearch::cli::add_gen_command(app, reg);
  recsearch::cli::add_exec_command(app, reg);
  recsearch::cli::add_compare_command(app, reg);
  recsearch::cli::add_sweep_command(app, reg);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version come through here too, with exit code 0.
    return app.exit(e) == 0 ? 0 : kExitUsage;
  }

  for (const auto& cmd : reg) {
    if (cmd.app->parsed()) return cmd.run();
  }
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
