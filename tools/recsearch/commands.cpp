// SPDX-License-Identifier: Apache-2.0
// The work behind `recsearch search`, `eval` and `validate`, and the input
// handling the other subcommands share: read the graph as a
// recsearch::Problem, build the cluster the options describe, solve or
// evaluate through the facade, write the result. Kept free of CLI11 so that
// it reads as a plain sequence of library calls.
//
// Every bad-input message names the file and the JSON path (docs/design.md,
// Errors and exit codes): the facade attributes what concerns the graph or
// the plan file; the cluster and cost files are named by their readers.
#include "commands.hpp"

#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "pipeline_cmd.hpp"
#include "recsearch/error.hpp"
#include "recsearch/io/json_io.hpp"
#include "recsearch/io/onnx.hpp"
#include "recsearch/problem.hpp"
#include "recsearch/report/report.hpp"
#include "recsearch/solution.hpp"

namespace recsearch::cli {
namespace {

constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;

std::string format_double(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

void require_one_cluster_option(const ClusterArgs& a) {
  if (a.count() > 1) throw Error(Errc::kUsage, "give only one of --devices, --mesh and --cluster");
}

Mode parse_mode(const std::string& s) {
  if (s == "train") return Mode::Train;
  if (s == "infer") return Mode::Infer;
  throw Error(Errc::kUsage, "unknown mode '" + s + "' (train or infer)");
}

PlanFormat plan_format(const std::string& format) {
  return format == "table" ? PlanFormat::Table : PlanFormat::Json;
}

io::PlanDetail plan_detail(const std::string& detail) {
  if (const auto d = io::parse_plan_detail(detail)) return *d;
  throw Error(Errc::kUsage, "unknown --detail '" + detail + "' (auto, full or summary)");
}

// The plan file, or with --format table the report's table (the summary
// first, a repeated block folded unless table.every_operator).
void write_solution(const Solution& solution, const std::string& path, const std::string& format,
                    const std::string& detail, const report::TableOptions& table) {
  if (plan_format(format) != PlanFormat::Table) {
    solution.write(path, PlanFormat::Json, plan_detail(detail));
    return;
  }
  const report::ReportInput in{solution.problem().graph(), solution.problem().spaces(),
                               solution.cluster(), solution.plan(), solution.evaluation()};
  io::write_text_file(path, report::plan_to_table(in, table));
}

// solve(), with a no-fit message that also names the saving the command
// line left out: pipeline stages are tried only with --stages, and they split
// the devices, so they are named where there are two or more.
Solution solve_or_explain(const Problem& problem, const Cluster& cluster,
                          const search::SearchOptions& opts) {
  try {
    return solve(problem, cluster, opts);
  } catch (const Error& e) {
    const bool stages_possible = opts.mode == Mode::Train && cluster.num_devices() > 1;
    if (e.code() != Errc::kNoFit || !stages_possible) throw;
    throw Error(e.code(), e.detail() + "; pipeline stages were not tried (--stages auto)",
                e.json_path(), e.file());
  }
}

}  // namespace

Progress::Progress(bool quiet) : on_(!quiet && ::isatty(STDERR_FILENO) == 1) {}

void Progress::say(const std::string& line) const {
  if (on_) std::cerr << line << '\n' << std::flush;
}

double Progress::elapsed_s() const {
  return std::chrono::duration<double>(Clock::now() - start_).count();
}

std::string source_name(const std::string& path) { return path == "-" ? "<stdin>" : path; }

void write_output(const std::string& path, std::string text) {
  io::write_text_file(path, std::move(text));
}

void check_output_writable(const std::string& path) {
  if (path == "-") return;
  // The directory, not the file: opening the file here would truncate or
  // create it, and a failed search must leave no empty output behind.
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string dir = parent.empty() ? std::string(".") : parent.string();
  if (::access(dir.c_str(), W_OK) != 0) {
    throw Error(Errc::kIo, std::string("cannot open for writing: ") + std::strerror(errno), {},
                path);
  }
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw Error(Errc::kIo, "cannot open for writing: is a directory", {}, path);
}

void warn_budget_over_device(double budget_gib, const Cluster& cluster, bool quiet) {
  // A budget the devices cannot hold gives plans that do not run; likely a
  // typo or a unit mix-up, but a deliberate what-if is allowed, so only warn.
  const double device_gib = cluster.device().memory_GiB;
  if (quiet || budget_gib <= device_gib) return;
  std::cerr << "recsearch: warning: --memory " << format_double("%g", budget_gib)
            << " GiB is more than the " << format_double("%g", device_gib)
            << " GiB of memory of each device\n";
}

std::map<std::string, std::int64_t, std::less<>> parse_dims(
    const std::vector<std::string>& bindings) {
  std::map<std::string, std::int64_t, std::less<>> dims;
  for (const std::string& text : bindings) {
    const std::size_t eq = text.rfind('=');
    const auto bad = [&](const std::string& why) {
      return Error(Errc::kUsage,
                   "--dim '" + text + "': " + why + " (expected NAME=N, e.g. batch=32)");
    };
    if (eq == std::string::npos || eq == 0) throw bad("missing NAME=");
    std::int64_t v = 0;
    const char* first = text.data() + eq + 1;
    const char* last = text.data() + text.size();
    const auto [end, ec] = std::from_chars(first, last, v);
    if (ec != std::errc{} || end != last || first == last) throw bad("the value is not an integer");
    if (v < 1) throw bad("the value must be >= 1");
    dims[text.substr(0, eq)] = v;
  }
  return dims;
}

void keep_until_exit(std::shared_ptr<const void> held) {
  // The command ends right after its output is written; freeing a
  // 10^6-operator graph, its spaces and its plan (about 10^7 small blocks)
  // would take a tenth of its CPU time for nothing.
  static auto* const kept = new std::vector<std::shared_ptr<const void>>();
  kept->push_back(std::move(held));
}

Problem load_problem(const std::string& path, bool quiet, const ReadOptions& options) {
  // A graph file has no symbolic dims: a --dim there is a mistake to report,
  // not a value to drop.
  if (!options.dims.empty() && !io::is_onnx_path(path))
    throw Error(Errc::kUsage, "--dim binds symbolic dims of an ONNX model (.onnx); " +
                                  source_name(path) + " is a graph file");
  Problem problem = Problem::read(path, options);
  // Copies share the graph: the one kept holds it past every other.
  keep_until_exit(std::make_shared<const Problem>(problem));
  if (!quiet) {
    for (const std::string& w : problem.warnings())
      std::cerr << "recsearch: warning: " << problem.source() << ": " << w << '\n';
  }
  return problem;
}

void pin_training(const TrainingArgs& a, search::TrainingChoice& t) {
  if (a.recompute != "auto") t.recompute = plan::parse_recompute(a.recompute);
  if (a.zero != "auto") t.zero_stage = std::stoi(a.zero);
  if (a.microbatches != "auto") t.microbatches = std::stoll(a.microbatches);
}

search::Effort effort_of(const std::string& name) {
  const auto e = search::parse_effort(name);
  if (!e) throw Error(Errc::kUsage, "unknown --effort '" + name + "' (fast or default)");
  return *e;
}

void apply_cost_file(const std::optional<std::string>& path, CostParams& cost) {
  if (!path) return;
  io::parse_cost_params(io::read_text_file(*path), source_name(*path), cost);
}

Cluster cluster_from_args(const ClusterArgs& a, CostParams& cost) {
  if (a.devices) return Cluster::flat(*a.devices);
  if (a.mesh) return Cluster::mesh(parse_mesh(*a.mesh));
  const std::string text = io::read_text_file(*a.cluster_file);
  std::vector<std::string> warnings;
  Cluster c = io::parse_cluster(text, source_name(*a.cluster_file), &cost,
                                io::UnknownKeys{.strict = a.strict, .warnings = &warnings});
  if (!a.quiet) {
    for (const std::string& w : warnings) std::cerr << "recsearch: warning: " << w << '\n';
  }
  return c;
}

Cluster cluster_for_plan(const ClusterArgs& a, std::string_view plan_text,
                         const std::string& plan_source, CostParams& cost) {
  if (a.count() == 1) return cluster_from_args(a, cost);
  if (auto saved = plan_file_cluster(plan_text, plan_source)) return *std::move(saved);
  throw Error(Errc::kUsage, plan_source +
                                " has no mesh: give --devices, --mesh or --cluster to "
                                "evaluate it on");
}

std::vector<std::int64_t> parse_mesh(const std::string& text) {
  const auto bad = [&](const std::string& why) {
    return Error(Errc::kUsage, "--mesh '" + text + "': " + why +
                                   " (expected factors like 64x8, outermost first)");
  };
  std::vector<std::int64_t> dims;
  std::int64_t product = 1;
  std::string_view rest = text;
  while (true) {
    const std::size_t x = rest.find_first_of("xX");
    const std::string_view part = rest.substr(0, x);
    if (part.empty()) throw bad("empty factor");
    std::int64_t v = 0;
    const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
    if (ec == std::errc::result_out_of_range) throw bad("factor too large");
    if (ec != std::errc{} || end != part.data() + part.size())
      throw bad("'" + std::string(part) + "' is not a positive integer");
    if (v < 1) throw bad("factors must be >= 1");
    if (product > kMaxDevices / v) throw bad("more than 2^31 devices");
    product *= v;
    dims.push_back(v);
    if (x == std::string_view::npos) break;
    rest = rest.substr(x + 1);
  }
  return dims;
}

int run_search(const SearchArgs& a) {
  require_one_cluster_option(a.cluster);
  if (a.cluster.count() == 0)
    throw Error(Errc::kUsage, "give one of --devices N, --mesh AxB or --cluster FILE");
  check_output_writable(a.output);
  const Progress progress(a.quiet);
  const auto algorithm = search::parse_algorithm(a.algo);
  if (!algorithm) throw Error(Errc::kUsage, "unknown --algo '" + a.algo + "'");

  progress.say("reading graph " + source_name(a.graph) + "...");
  const Problem problem = load_problem(a.graph, a.quiet, a.read);
  // Coefficients from the least to the most specific source: graph file,
  // cluster file, --cost file, then the --memory flag.
  search::SearchOptions opts = problem.options();
  opts.algorithm = *algorithm;
  opts.effort = effort_of(a.effort);
  opts.mode = parse_mode(a.mode);
  opts.threads = a.threads;
  apply_stages(a.stages, opts);
  const Cluster cluster = cluster_from_args(a.cluster, opts.cost);
  apply_cost_file(a.cost_file, opts.cost);
  if (a.memory_gib) {
    opts.cost.memory_budget_bytes = *a.memory_gib * kBytesPerGiB;
    warn_budget_over_device(*a.memory_gib, cluster, a.quiet);
  }
  pin_training(a.training, opts.training);

  progress.say("searching " + std::to_string(problem.graph().num_operators()) + " operators on " +
               std::to_string(cluster.num_devices()) + " devices (" + a.algo + ", " +
               std::to_string(cluster.cuts().size()) + " cuts)...");
  if (progress.on()) {
    // One line rewritten in place: which memory rung and cut pass the search is in.
    opts.on_progress = [](int rung, std::size_t pass, std::size_t passes) {
      std::fprintf(stderr, "\r  memory rung %d, cut %zu of %zu   ", rung, pass + 1, passes);
      std::fflush(stderr);
    };
  }
  if (pipeline_requested(opts)) return run_pipeline_search(problem, cluster, opts, a);
  // A plan file that only sums the redistributions needs none listed.
  opts.list_redistributions =
      plan_format(a.format) == PlanFormat::Table ||
      io::lists_redistributions(plan_detail(a.detail), problem.graph().num_operators());
  const auto kept = std::make_shared<const Solution>(solve_or_explain(problem, cluster, opts));
  keep_until_exit(kept);
  const Solution& solution = *kept;
  if (progress.on()) std::fputc('\n', stderr);
  if (solution.details().expert_plan)
    progress.say("the fastest fitting plan is a data x tensor parallel split");
  // "done" comes after the plan is written: a big plan takes a moment.
  if (a.output != "-") progress.say("writing " + a.output + "...");
  write_solution(
      solution, a.output, a.format, a.detail,
      {.every_operator = a.all_operators, .memory_budget_bytes = opts.cost.memory_budget_bytes});
  progress.say("done in " + format_double("%.2f", progress.elapsed_s()) + " s (search " +
               format_double("%.3g", solution.details().search_time_s) + " s; " +
               solution.summary() + ")");
  return 0;
}

int run_eval(const EvalArgs& a) {
  require_one_cluster_option(a.cluster);
  if (a.graph == "-" && a.plan == "-")
    throw Error(Errc::kUsage, "GRAPH and PLAN cannot both be read from stdin");
  check_output_writable(a.output);
  const Progress progress(a.quiet);
  const std::string plan_source = source_name(a.plan);

  progress.say("reading graph " + source_name(a.graph) + "...");
  const Problem problem = load_problem(a.graph, a.quiet, a.read);
  CostParams cost = problem.cost();
  const std::string plan_text = io::read_text_file(a.plan);
  // Cluster: the options, else the cluster the plan was made for, else a
  // guess from the plan's mesh (hand-written plans).
  const Cluster cluster = cluster_for_plan(a.cluster, plan_text, plan_source, cost);
  apply_cost_file(a.cost_file, cost);

  progress.say("evaluating " + plan_source + " on " + std::to_string(cluster.num_devices()) +
               " devices...");
  if (is_pipeline_plan(plan_text, plan_source))
    return run_pipeline_eval(problem, cluster, cost, plan_text, plan_source, a);
  plan::Plan p = problem.parse_plan(plan_text, plan_source, cluster);
  if (a.mode) p.mode = parse_mode(*a.mode);
  const auto kept =
      std::make_shared<const Solution>(evaluate(problem, std::move(p), cluster, cost));
  keep_until_exit(kept);
  const Solution& solution = *kept;
  progress.say("done in " + format_double("%.2f", progress.elapsed_s()) + " s (" +
               solution.summary() + ")");
  write_solution(
      solution, a.output, a.format, a.detail,
      {.every_operator = a.all_operators, .memory_budget_bytes = cost.memory_budget_bytes});
  return 0;
}

int run_validate(const ValidateArgs& a) {
  const Problem problem = load_problem(a.graph, false, a.read);
  const ir::Graph& g = problem.graph();
  std::size_t parameters = 0;
  double parameter_bytes = 0;
  for (const ir::Tensor& t : g.tensors()) {
    if (t.kind != ir::TensorKind::Parameter) continue;
    ++parameters;
    parameter_bytes += t.bytes();
  }
  const double gib = parameter_bytes / kBytesPerGiB;
  // Two decimals read well for real models; tiny graphs would all say 0.00.
  const std::string gib_text = format_double(gib >= 1.0 || gib == 0.0 ? "%.2f" : "%.3g", gib);
  std::cout << problem.source() << ": ok (" << g.num_operators() << " operators, "
            << g.num_tensors() << " tensors, " << parameters << " parameters, " << gib_text
            << " GiB of parameters)\n"
            << std::flush;
  if (!std::cout) throw Error(Errc::kIo, "cannot write to standard output");
  return 0;
}

}  // namespace recsearch::cli
