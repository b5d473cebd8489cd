// SPDX-License-Identifier: Apache-2.0
// `recsearch`: the command-line tool (docs/design.md, CLI; docs/cli.md). This file only
// registers the subcommands (each file adds its own: subcommand.hpp) and
// the core ones (search, eval, validate) with CLI11, and turns every way
// a run can fail into a one-line message and a documented exit code:
//   0 ok, 1 bad input, 2 usage, 3 no plan fits the memory budget,
//   4 runtime failure (and out-of-memory or internal errors).
// Whatever happens, the process exits with one of those codes: a crash
// would leave scripts unable to tell a bad graph from a bug. Errors of the
// argument parser take the same one-line form as every other error
// ("recsearch: search: --devices: ... [E201]"), with a "did you mean" for a
// misspelled command or option.
#include <malloc.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <exception>
#include <iostream>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/suggest.hpp"
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
  a.strict = strict;
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
  cmd->add_flag("--strict", o.strict,
                "unknown keys in the cluster file are errors (default: warnings)");
}

ReadOptions GraphOptions::read_options() const {
  ReadOptions r;
  r.dims = parse_dims(dims);
  r.allow_custom = allow_custom;
  return r;
}

void add_graph_options(CLI::App* cmd, GraphOptions& o) {
  cmd->add_option("--dim", o.dims,
                  "value of a symbolic dimension of an .onnx GRAPH, e.g. --dim batch=32 "
                  "(repeatable)")
      ->type_name("NAME=N");
  cmd->add_flag("--allow-custom", o.allow_custom,
                "keep operator types that look like misspelt kinds (e.g. Matmul) as custom "
                "operators, replicated");
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
  auto sg = std::make_shared<GraphOptions>();
  search->add_option("GRAPH", sa->graph, "graph JSON file ('-' for stdin)")->required();
  add_graph_options(search, *sg);
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
  search->add_flag("--all-operators", sa->all_operators,
                   "table: one row per operator, a repeated block not folded");
  search
      ->add_option("--detail", sa->detail,
                   "plan file detail: auto (default: full up to 10^4 operators), full or summary")
      ->check(CLI::IsMember({"auto", "full", "summary"}));
  search->add_option("--threads", sa->threads, "worker threads, 0 = all (the plan is the same)")
      ->check(CLI::Range(0, 65536));
  search
      ->add_option("--algo", sa->algo,
                   "rec (default), data-parallel, megatron, grid, ilp or exhaustive")
      ->check(CLI::IsMember({"rec", "data-parallel", "megatron", "grid", "ilp", "exhaustive"}));
  add_effort_option(search, sa->effort);
  CLI::Option* search_cost_opt =
      search->add_option("--cost", *search_cost, "cost coefficients JSON file")->type_name("FILE");
  add_training_options(search, sa->training);
  search->add_flag("-q,--quiet", sa->quiet, "no progress on stderr");
  search
      ->add_option(
          "--stages", sa->stages,
          "pipeline device groups: 1 (default, none), N, NxV (V interleaved stages per group), "
          "or auto (searched)")
      ->type_name("N|NxV|auto");
  reg.push_back({search, [=] {
                   sa->cluster = sc->args();
                   sa->read = sg->read_options();
                   sa->read.strict = sa->cluster.strict;  // one switch for graph and cluster
                   sa->cluster.quiet = sa->quiet;
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
  auto eg = std::make_shared<GraphOptions>();
  add_graph_options(eval, *eg);
  add_cluster_options(eval, *ec);
  eval->add_option("-o,--output", ea->output, "output file ('-' for stdout, the default)")
      ->type_name("OUT");
  CLI::Option* eval_mode_opt =
      eval->add_option("--mode", *eval_mode, "train or infer (default: the plan's mode)")
          ->check(CLI::IsMember({"train", "infer"}));
  eval->add_option("--format", ea->format, "json (default) or table")
      ->check(CLI::IsMember({"json", "table"}));
  eval->add_flag("--all-operators", ea->all_operators,
                 "table: one row per operator, a repeated block not folded");
  eval->add_option("--detail", ea->detail,
                   "output detail: auto (default: full up to 10^4 operators), full or summary")
      ->check(CLI::IsMember({"auto", "full", "summary"}));
  CLI::Option* eval_cost_opt =
      eval->add_option("--cost", *eval_cost, "cost coefficients JSON file")->type_name("FILE");
  eval->add_flag("-q,--quiet", ea->quiet, "no progress on stderr");
  reg.push_back({eval, [=] {
                   ea->cluster = ec->args();
                   ea->read = eg->read_options();
                   ea->read.strict = ea->cluster.strict;
                   ea->cluster.quiet = ea->quiet;
                   if (eval_mode_opt->count() > 0) ea->mode = *eval_mode;
                   if (eval_cost_opt->count() > 0) ea->cost_file = *eval_cost;
                   return run_eval(*ea);
                 }});

  auto va = std::make_shared<ValidateArgs>();
  CLI::App* validate = app.add_subcommand("validate", "check GRAPH (schema and shapes) only");
  validate->add_option("GRAPH", va->graph, "graph JSON file ('-' for stdin)")->required();
  auto vg = std::make_shared<GraphOptions>();
  add_graph_options(validate, *vg);
  auto strict = std::make_shared<bool>(false);
  validate->add_flag("--strict", *strict, "unknown keys in the graph file are errors");
  reg.push_back({validate, [=] {
                   va->read = vg->read_options();
                   va->read.strict = *strict;
                   return run_validate(*va);
                 }});
}

}  // namespace recsearch::cli

namespace {

constexpr int kOneGiB = 1 << 30;
constexpr int kHeapStep = 64 << 20;
constexpr int kExitUsage = 2;
constexpr int kExitRuntime = 4;

using recsearch::Errc;
using recsearch::Error;

// The subcommands' names, in the order of the help.
std::vector<std::string> command_names(CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; }))
    names.push_back(sub->get_name());
  return names;
}

std::string joined(const std::vector<std::string>& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

// `recsearch serch ...`: CLI11 would only say that a subcommand is required.
// Checked before parsing, so that the message names the word typed.
void check_command_name(CLI::App& app, int argc, char** argv) {
  if (argc < 2 || argv[1][0] == '-') return;
  const std::string word = argv[1];
  const std::vector<std::string> names = command_names(app);
  for (const auto& n : names)
    if (n == word) return;
  const auto near = recsearch::io::detail::closest(word, names);
  throw Error(Errc::kUsage, "unknown command '" + word + "'" +
                                (near ? "; did you mean `" + *near + "`?"
                                      : "; the commands are " + joined(names)));
}

// The long option names of `cmd` ("--devices"), for "did you mean".
std::vector<std::string> option_names(const CLI::App& cmd) {
  std::vector<std::string> names;
  for (const CLI::Option* o : cmd.get_options())
    for (const auto& l : o->get_lnames()) names.push_back("--" + l);
  return names;
}

// The first `--name` on the command line that `cmd` does not know, with the
// nearest option it does know. Read from argv: CLI11 keeps no list of the
// arguments it refused once it has thrown.
std::optional<std::string> unknown_option(const CLI::App& cmd, int argc, char** argv) {
  const std::vector<std::string> options = option_names(cmd);
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg.size() < 3 || arg.substr(0, 2) != "--") continue;
    const std::string name(arg.substr(0, arg.find('=')));
    if (std::find(options.begin(), options.end(), name) != options.end()) continue;
    if (auto near = recsearch::io::detail::closest(name, options))
      return "unknown option '" + name + "'; did you mean `" + *near + "`?";
    return "unknown option '" + name + "'";
  }
  return std::nullopt;
}

// A parse error as a recsearch::Error(kUsage): prefixed with the subcommand it
// concerns, an unexpected option offered the nearest real one, and pointed
// at the help that lists the options.
Error usage_error(CLI::App& app, const CLI::ParseError& e, int argc, char** argv) {
  const std::vector<CLI::App*> parsed = app.get_subcommands();
  const CLI::App* cmd = parsed.empty() ? nullptr : parsed.back();
  const std::string help =
      std::string("`recsearch ") + (cmd ? cmd->get_name() + " " : "") + "--help`";
  if (!cmd) {
    // Only a bad top-level option gets here (a command name was checked).
    const auto unknown = unknown_option(app, argc, argv);
    return Error(Errc::kUsage, unknown.value_or(e.what()) + "; " + help + " lists the commands");
  }
  std::string detail = e.what();
  // By type: CLI11 names an ExtrasError after the app that threw it.
  if (dynamic_cast<const CLI::ExtrasError*>(&e) != nullptr) {
    if (auto unknown = unknown_option(*cmd, argc, argv)) detail = *unknown;
  }
  return Error(Errc::kUsage, cmd->get_name() + ": " + detail + " (" + help + " lists the options)");
}

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
  recsearch::cli::add_calibrate_command(app, reg);
  recsearch::cli::add_compare_command(app, reg);
  recsearch::cli::add_export_command(app, reg);
  recsearch::cli::add_sweep_command(app, reg);

  // Bare `recsearch`: the help, on stderr as for any usage error, exit 2.
  if (argc < 2) {
    std::cerr << app.help();
    throw Error(Errc::kUsage, "give a command: " + joined(command_names(app)));
  }
  check_command_name(app, argc, argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version come through here too, with exit code 0.
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
    throw usage_error(app, e, argc, argv);
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
  // Every block from the heap, none given back before exit: the big
  // vectors of a 10^6-operator graph, its spaces and its evaluation are
  // otherwise mapped, freed and mapped again, and every page of them faulted
  // in afresh each time (a third of the system time of `search` there;
  // docs/scaling.md, End to end). The heap grows 64 MiB at a time.
  ::mallopt(M_MMAP_THRESHOLD, kOneGiB);
  ::mallopt(M_TRIM_THRESHOLD, kOneGiB);
  ::mallopt(M_TOP_PAD, kHeapStep);
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
