// SPDX-License-Identifier: Apache-2.0
// `recsearch compare GRAPH [cluster] [--algo a,b,...]`: runs several search
// algorithms on one graph and cluster and tabulates what each plan costs by
// the independent evaluator (step time, communication, memory per device)
// and how long each search took, with the step-time ratio to rec's plan.
// An algorithm that finds no plan within the memory budget is listed as
// "no fit"; one that cannot run here (ilp without CBC, a program too large,
// exhaustive on a large graph) as "skipped" with the reason. Neither is an
// error of the command. On a terminal each algorithm's row appears on stderr
// as it finishes (an ilp run may take a minute); -q silences it.
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/cluster.hpp"
#include "recsearch/error.hpp"
#include "recsearch/io/json_io.hpp"
#include "recsearch/io/onnx.hpp"
#include "recsearch/search/search.hpp"
#include "recsearch/solution.hpp"
#include "subcommand.hpp"

namespace recsearch::cli {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

struct CompareArgs {
  std::string graph;
  ReadOptions read;
  ClusterArgs cluster;
  std::string mode = "train";
  std::optional<double> memory_gib;
  std::string format = "table";
  std::vector<std::string> algos;
  double ilp_time_limit_s = 60;
  std::string output = "-";
  int threads = 0;
  std::string effort = "default";  // rec's --effort
  std::optional<std::string> cost_file;
  TrainingArgs training;
  bool quiet = false;
};

struct Row {
  std::string algo;
  std::string status;  // "ok", "no fit", "skipped"
  std::string note;    // why, for "no fit" and "skipped"; ilp optimality otherwise
  plan::Summary summary;
  double search_time_s = 0;
};

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20)
          out += fmt("\\u%04x", static_cast<unsigned char>(c));
        else out += c;
    }
  }
  return out + "\"";
}

std::string json_number(double v) { return std::isfinite(v) ? fmt("%.9g", v) : "null"; }

// The end of an algorithm's progress line: its status and, for a plan, the
// figures the table will show.
std::string progress_result(const Row& r) {
  if (r.status != "ok") return r.status;
  return "ok in " + fmt("%.3g", r.search_time_s) + " s: step " +
         fmt("%.5g", r.summary.step_time_s) + " s, comm " + fmt("%.5g", r.summary.communication_s) +
         " s, " + fmt("%.4g", r.summary.memory_per_device_bytes / kGiB) + " GiB";
}

// Runs one algorithm; a plan that does not fit or an algorithm that cannot
// run here is a row, not an error.
Row run_one(const Problem& problem, const Cluster& cluster, const search::SearchOptions& base,
            search::Algorithm alg) {
  Row r;
  r.algo = std::string(search::algorithm_name(alg));
  search::SearchOptions opts = base;
  opts.algorithm = alg;
  try {
    const search::SearchResult res = solve(problem, cluster, opts).details();
    r.status = "ok";
    r.summary = res.eval.summary;
    r.search_time_s = res.search_time_s;
    if (alg == search::Algorithm::Ilp) {
      // proven_optimal is false for restricted candidates; CBC's own
      // verdict over them is whether its bound meets the solution.
      const bool solved = res.ilp_lower_bound_s >= res.bookkept_step_time_s * (1 - 1e-6);
      r.note = std::string(res.ilp_restricted ? "restricted candidates, " : "") +
               (res.proven_optimal || solved
                    ? (res.ilp_restricted ? "optimal over them" : "optimal")
                    : "time limit, bound " + fmt("%.4g", res.ilp_lower_bound_s) + " s");
    } else if (alg == search::Algorithm::Exhaustive)
      r.note = res.proven_optimal ? "optimal" : "node limit";
  } catch (const Error& e) {
    if (e.code() == Errc::kNoFit) {
      r.status = "no fit";
    } else if (e.code() == Errc::kUsage) {
      r.status = "skipped";
    } else {
      throw;
    }
    r.note = e.what();
  }
  return r;
}

// The --algo list, or the default one (ilp only when built with CBC).
std::vector<search::Algorithm> chosen_algorithms(const std::vector<std::string>& names) {
  std::vector<search::Algorithm> algos;
  if (names.empty()) {
    algos = {search::Algorithm::Rec, search::Algorithm::DataParallel, search::Algorithm::Megatron,
             search::Algorithm::Grid};
    if (search::ilp_available()) algos.push_back(search::Algorithm::Ilp);
    return algos;
  }
  for (const auto& name : names) {
    const auto alg = search::parse_algorithm(name);
    if (!alg) throw Error(Errc::kUsage, "unknown algorithm '" + name + "' in --algo");
    if (*alg == search::Algorithm::Ilp && !search::ilp_available())
      throw Error(Errc::kUsage,
                  "this recsearch was built without COIN-OR CBC: algorithm 'ilp' is not "
                  "available");
    algos.push_back(*alg);
  }
  return algos;
}

int run_compare(const CompareArgs& a) {
  if (a.cluster.count() > 1)
    throw Error(Errc::kUsage, "give only one of --devices, --mesh and --cluster");
  if (a.cluster.count() == 0)
    throw Error(Errc::kUsage, "give one of --devices N, --mesh AxB or --cluster FILE");
  check_output_writable(a.output);
  const std::vector<search::Algorithm> algos = chosen_algorithms(a.algos);

  const Progress progress(a.quiet);
  progress.say("reading graph " + source_name(a.graph) + "...");
  const Problem problem = load_problem(a.graph, a.quiet, a.read);
  // Coefficients as for `search`: graph file, cluster file, --cost, --memory.
  search::SearchOptions base = problem.options();
  base.mode = a.mode == "infer" ? Mode::Infer : Mode::Train;
  base.detailed_evaluation = false;
  base.ilp_time_limit_s = a.ilp_time_limit_s;
  base.threads = a.threads;
  base.effort = effort_of(a.effort);
  const Cluster cluster = cluster_from_args(a.cluster, base.cost);
  apply_cost_file(a.cost_file, base.cost);
  pin_training(a.training, base.training);
  if (a.memory_gib) {
    base.cost.memory_budget_bytes = *a.memory_gib * kGiB;
    warn_budget_over_device(*a.memory_gib, cluster, a.quiet);
  }

  progress.say("comparing " + std::to_string(algos.size()) + " algorithms on " +
               std::to_string(problem.graph().num_operators()) + " operators, " +
               std::to_string(cluster.num_devices()) + " devices:");
  std::vector<Row> rows;
  for (std::size_t i = 0; i < algos.size(); ++i) {
    if (progress.on()) {
      // The line opens before the run so that a long one (ilp) says what it is.
      std::fprintf(stderr, "  [%zu/%zu] %-14s ... ", i + 1, algos.size(),
                   std::string(search::algorithm_name(algos[i])).c_str());
      std::fflush(stderr);
    }
    rows.push_back(run_one(problem, cluster, base, algos[i]));
    if (progress.on()) std::fprintf(stderr, "%s\n", progress_result(rows.back()).c_str());
  }
  progress.say("done in " + fmt("%.2f", progress.elapsed_s()) + " s");

  double rec_step = NAN;
  for (const Row& r : rows)
    if (r.algo == "rec" && r.status == "ok") rec_step = r.summary.step_time_s;

  std::ostringstream out;
  if (a.format == "json") {
    out << "{\"format\": \"recsearch.compare\", \"version\": 1, \"graph\": "
        << json_string(problem.graph().name())
        << ", \"operators\": " << problem.graph().num_operators()
        << ", \"devices\": " << cluster.num_devices() << ", \"mode\": " << json_string(a.mode)
        << ",\n \"results\": [";
    for (std::size_t i = 0; i < rows.size(); ++i) {
      const Row& r = rows[i];
      out << (i ? ",\n  " : "\n  ") << "{\"algorithm\": " << json_string(r.algo)
          << ", \"status\": " << json_string(r.status);
      if (r.status == "ok") {
        out << ", \"step_time_s\": " << json_number(r.summary.step_time_s)
            << ", \"compute_s\": " << json_number(r.summary.compute_s)
            << ", \"communication_s\": " << json_number(r.summary.communication_s)
            << ", \"memory_per_device_bytes\": " << json_number(r.summary.memory_per_device_bytes)
            << ", \"search_time_s\": " << json_number(r.search_time_s)
            << ", \"ratio_to_rec\": " << json_number(r.summary.step_time_s / rec_step);
      }
      if (!r.note.empty()) out << ", \"note\": " << json_string(r.note);
      out << "}";
    }
    out << "\n]}\n";
  } else {
    out << "graph " << problem.graph().name() << ": " << problem.graph().num_operators()
        << " operators, " << cluster.num_devices() << " devices, " << a.mode << "\n";
    char line[256];
    std::snprintf(line, sizeof line, "%-14s %12s %12s %12s %12s %9s  %s\n", "algorithm", "step (s)",
                  "comm (s)", "mem (GiB)", "search (s)", "vs rec", "note");
    out << line;
    for (const Row& r : rows) {
      if (r.status == "ok") {
        const double ratio = r.summary.step_time_s / rec_step;
        std::snprintf(line, sizeof line, "%-14s %12.5g %12.5g %12.4g %12.4g %9s  %s\n",
                      r.algo.c_str(), r.summary.step_time_s, r.summary.communication_s,
                      r.summary.memory_per_device_bytes / kGiB, r.search_time_s,
                      std::isfinite(ratio) ? fmt("%.3f", ratio).c_str() : "-", r.note.c_str());
      } else {
        std::snprintf(line, sizeof line, "%-14s %12s %12s %12s %12s %9s  ", r.algo.c_str(),
                      r.status.c_str(), "-", "-", "-", "-");
        out << line << r.note << "\n";
        continue;
      }
      out << line;
    }
  }
  const std::string text = out.str();
  if (a.output == "-") {
    std::cout << text << std::flush;
    if (!std::cout) throw Error(Errc::kIo, "cannot write to standard output");
  } else {
    std::FILE* f = std::fopen(a.output.c_str(), "wb");
    if (!f) throw Error(Errc::kIo, "cannot open for writing", {}, a.output);
    const bool ok = std::fwrite(text.data(), 1, text.size(), f) == text.size();
    if (std::fclose(f) != 0 || !ok) throw Error(Errc::kIo, "cannot write", {}, a.output);
  }
  return 0;
}

}  // namespace

void add_compare_command(CLI::App& app, Registry& reg) {
  auto a = std::make_shared<CompareArgs>();
  auto c = std::make_shared<ClusterOptions>();
  auto memory = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "compare", "run several search algorithms on GRAPH and compare their plans");
  auto g = std::make_shared<GraphOptions>();
  cmd->add_option("GRAPH", a->graph, "graph JSON file ('-' for stdin)")->required();
  add_graph_options(cmd, *g);
  add_cluster_options(cmd, *c);
  cmd->add_option("--algo", a->algos,
                  "comma-separated algorithms (default: rec, data-parallel, megatron, grid, and "
                  "ilp when built with CBC)")
      ->delimiter(',')
      // A transform, not a check: "rec, grid" reaches the run as "rec" and "grid".
      ->transform(CLI::IsMember({"rec", "data-parallel", "megatron", "grid", "ilp", "exhaustive"},
                                CLI::ignore_space));
  cmd->add_option("--mode", a->mode, "train (default) or infer")
      ->check(CLI::IsMember({"train", "infer"}));
  CLI::Option* memory_opt = cmd->add_option("--memory", *memory, "memory budget per device in GiB")
                                ->check(positive_finite())
                                ->type_name("GiB");
  cmd->add_option("--format", a->format, "table (default) or json")
      ->check(CLI::IsMember({"table", "json"}));
  cmd->add_option("--ilp-time-limit", a->ilp_time_limit_s, "seconds CBC may take (default 60)")
      ->check(positive_finite());
  cmd->add_option("-o,--output", a->output, "output file ('-' for stdout, the default)");
  cmd->add_option("--threads", a->threads, "worker threads, 0 = all (the plans are the same)")
      ->check(CLI::Range(0, 65536));
  add_effort_option(cmd, a->effort);
  auto cost = std::make_shared<std::string>();
  CLI::Option* cost_opt =
      cmd->add_option("--cost", *cost, "cost coefficients JSON file")->type_name("FILE");
  add_training_options(cmd, a->training);
  cmd->add_flag("-q,--quiet", a->quiet, "no progress or warnings on stderr");
  reg.push_back({cmd, [=] {
                   a->cluster = c->args();
                   a->cluster.quiet = a->quiet;
                   a->read = g->read_options();
                   if (memory_opt->count() > 0) a->memory_gib = std::stod(*memory);
                   if (cost_opt->count() > 0) a->cost_file = *cost;
                   return run_compare(*a);
                 }});
}

}  // namespace recsearch::cli
