// The work behind `recsearch search`, `eval` and `validate`: read the inputs
// through recsearch::io, build the cluster the options describe, call the
// library, write the result. Kept free of CLI11 so that it reads as a plain
// sequence of library calls.
//
// Errors that the library raises without naming a file (operator-space
// validation, pinned strategies the search cannot lay out, plan checks) are
// attributed here to the file they concern, because only the CLI knows which
// file that was: DESIGN.md promises that every bad-input message names the
// file and the JSON path.
#include "commands.hpp"

#include <unistd.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <string_view>
#include <utility>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/cluster.hpp"
#include "recsearch/cost/cost_params.hpp"
#include "recsearch/error.hpp"
#include "recsearch/io/json_io.hpp"
#include "recsearch/io/onnx.hpp"
#include "recsearch/ir/graph.hpp"
#include "recsearch/plan/evaluator.hpp"
#include "recsearch/plan/plan.hpp"
#include "recsearch/search/options.hpp"
#include "recsearch/search/search.hpp"

namespace recsearch::cli {
namespace {

using Clock = std::chrono::steady_clock;

constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;


// Short progress lines on stderr, only for a person watching: when stderr is
// not a terminal (pipes, CI logs, the tests) they would only be noise.
class Progress {
 public:
  explicit Progress(bool quiet) : on_(!quiet && ::isatty(STDERR_FILENO) == 1) {}

  [[nodiscard]] bool on() const noexcept { return on_; }
  void say(const std::string& line) const {
    if (on_) std::cerr << line << '\n' << std::flush;
  }
  [[nodiscard]] double elapsed_s() const {
    return std::chrono::duration<double>(Clock::now() - start_).count();
  }

 private:
  bool on_;
  Clock::time_point start_ = Clock::now();
};

std::string format_double(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// A graph with its operator spaces: build_op_spaces is the semantic half of
// reading a graph, so every command does both.
struct LoadedGraph {
  ir::Graph graph;
  std::vector<algebra::OpSpace> spaces;
};

// Operators of a type recsearch does not know (and without an `einsum`
// attribute) run replicated; say so, naming the first few.
void warn_unknown_kinds(const LoadedGraph& lg, const std::string& source) {
  constexpr std::size_t kNamed = 5;
  std::size_t count = 0;
  std::string names;
  for (std::size_t o = 0; o < lg.spaces.size(); ++o) {
    if (!lg.spaces[o].opaque) continue;
    const ir::Operator& op = lg.graph.op(static_cast<ir::OpId>(o));
    if (count++ < kNamed) names += (names.empty() ? "" : ", ") + op.name + " (" + op.type + ")";
  }
  if (count == 0) return;
  if (count > kNamed) names += " and " + std::to_string(count - kNamed) + " more";
  std::cerr << "recsearch: warning: " << source << ": " << count
            << " operator(s) of unknown type run replicated: " << names
            << " (give them an \"einsum\" attribute to let them be cut)\n";
}

// An ONNX model (by its extension) is imported on the fly; its importer's
// warnings name the operators it keeps replicated.
ir::Graph read_any_graph(const std::string& path, const std::string& source, CostParams* cost,
                         bool quiet) {
  if (!io::is_onnx_path(path)) return io::parse_graph(io::read_text_file(path), source, cost);
  io::OnnxImport r = io::read_onnx_file(path);
  if (!quiet) {
    for (const auto& w : r.warnings) std::cerr << "recsearch: warning: " << source << ": " << w << '\n';
  }
  return std::move(r.graph);
}

LoadedGraph load_graph(const std::string& path, CostParams* cost, bool quiet) {
  const std::string source = source_name(path);
  LoadedGraph lg{read_any_graph(path, source, cost, quiet), {}};
  try {
    lg.spaces = algebra::build_op_spaces(lg.graph);
  } catch (const Error& e) {
    if (!e.file().empty()) throw;
    throw e.in_file(source);
  }
  if (!quiet) warn_unknown_kinds(lg, source);
  return lg;
}

// Reads a `--cost FILE` JSON object over the coefficients gathered so far.
void apply_cost_file(const std::optional<std::string>& path, CostParams& cost) {
  if (!path) return;
  const std::string text = io::read_text_file(*path);
  io::parse_cost_params(text, source_name(*path), cost);
}

Cluster cluster_from_args(const ClusterArgs& a, CostParams& cost) {
  if (a.devices) return Cluster::flat(*a.devices);
  if (a.mesh) return Cluster::mesh(parse_mesh(*a.mesh));
  const std::string text = io::read_text_file(*a.cluster_file);
  return io::parse_cluster(text, source_name(*a.cluster_file), &cost);
}

void require_one_cluster_option(const ClusterArgs& a) {
  if (a.count() > 1)
    throw Error(Errc::kUsage, "give only one of --devices, --mesh and --cluster");
}

Mode parse_mode(const std::string& s) {
  if (s == "train") return Mode::Train;
  if (s == "infer") return Mode::Infer;
  throw Error(Errc::kUsage, "unknown mode '" + s + "' (train or infer)");
}

// Library errors that carry a JSON path but no file refer to the graph
// (e.g. "/operators/3/strategy" from the search).
[[noreturn]] void rethrow_for(const Error& e, const std::string& source) {
  if (e.file().empty() && !e.json_path().empty()) throw e.in_file(source);
  throw e;
}


std::string render(const std::string& format, const LoadedGraph& lg, const Cluster& cluster,
                   const plan::Plan& p, const plan::Evaluation& ev) {
  if (format == "table") return io::plan_to_table(lg.graph, lg.spaces, cluster, p, ev);
  return io::plan_to_json(lg.graph, lg.spaces, cluster, p, ev);
}

std::string summary_line(const plan::Summary& s) {
  return "step " + format_double("%.4g", s.step_time_s) + " s, " +
         format_double("%.4g", s.memory_per_device_bytes / kBytesPerGiB) + " GiB per device";
}

// `eval` of a plan without a saved cluster and without cluster options: the
// plan's own mesh. Every axis of a plan
// is a prime cut, so Cluster::mesh(sizes) always reproduces its schedule;
// when the sizes are exactly the flat schedule of their product, the plan
// most likely came from `--devices N`, whose single-level cluster (and its
// bandwidth) is the better guess.
Cluster cluster_from_plan_mesh(const std::vector<std::int64_t>& sizes,
                               const std::string& plan_source) {
  if (sizes.empty())
    throw Error(Errc::kUsage, plan_source +
                                  " has no mesh: give --devices, --mesh or --cluster to "
                                  "evaluate it on");
  std::int64_t product = 1;
  for (const std::int64_t s : sizes) {
    if (s < 1 || product > kMaxDevices / s)
      throw Error(Errc::kPlan, "mesh axis sizes must be >= 1 with a product of at most 2^31",
                  "/mesh", plan_source);
    product *= s;
  }
  if (sizes == prime_factors(product)) return Cluster::flat(product);
  return Cluster::mesh(sizes);
}

}  // namespace

std::string source_name(const std::string& path) { return path == "-" ? "<stdin>" : path; }

void write_output(const std::string& path, std::string text) {
  if (text.empty() || text.back() != '\n') text.push_back('\n');
  if (path == "-") {
    std::cout << text << std::flush;
    if (!std::cout) throw Error(Errc::kIo, "cannot write to standard output");
    return;
  }
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(Errc::kIo, "cannot open for writing", {}, path);
  out << text;
  out.close();
  if (!out) throw Error(Errc::kIo, "cannot write", {}, path);
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
  const Progress progress(a.quiet);

  search::SearchOptions opts;
  const auto algorithm = search::parse_algorithm(a.algo);
  if (!algorithm) throw Error(Errc::kUsage, "unknown --algo '" + a.algo + "'");
  opts.algorithm = *algorithm;
  opts.mode = parse_mode(a.mode);
  opts.threads = a.threads;

  progress.say("reading graph " + source_name(a.graph) + "...");
  // Coefficients from the least to the most specific source: graph file,
  // cluster file, --cost file, then the --memory flag.
  const LoadedGraph lg = load_graph(a.graph, &opts.cost, a.quiet);
  const Cluster cluster = cluster_from_args(a.cluster, opts.cost);
  apply_cost_file(a.cost_file, opts.cost);
  if (a.memory_gib) opts.cost.memory_budget_bytes = *a.memory_gib * kBytesPerGiB;

  progress.say("searching " + std::to_string(lg.graph.num_operators()) + " operators on " +
               std::to_string(cluster.num_devices()) + " devices (" + a.algo + ", " +
               std::to_string(cluster.cuts().size()) + " cuts)...");
  if (progress.on()) {
    // One line rewritten in place: which memory rung and cut pass the search is in.
    opts.on_progress = [](int rung, std::size_t pass, std::size_t passes) {
      std::fprintf(stderr, "\r  memory rung %d, cut %zu of %zu   ", rung, pass + 1, passes);
      std::fflush(stderr);
    };
  }
  search::SearchResult result;
  try {
    result = search::run(lg.graph, lg.spaces, cluster, opts);
    if (progress.on()) std::fputc('\n', stderr);
  } catch (const Error& e) {
    rethrow_for(e, source_name(a.graph));
  }
  result.eval.summary.search_time_s = result.search_time_s;
  if (result.expert_plan)
    progress.say("the fastest fitting plan is a data x tensor parallel split");
  progress.say("done in " + format_double("%.2f", progress.elapsed_s()) + " s (search " +
               format_double("%.3g", result.search_time_s) + " s; " +
               summary_line(result.eval.summary) + ")");

  write_output(a.output, render(a.format, lg, cluster, result.plan, result.eval));
  return 0;
}

int run_eval(const EvalArgs& a) {
  require_one_cluster_option(a.cluster);
  if (a.graph == "-" && a.plan == "-")
    throw Error(Errc::kUsage, "GRAPH and PLAN cannot both be read from stdin");
  const Progress progress(a.quiet);
  const std::string plan_source = source_name(a.plan);

  progress.say("reading graph " + source_name(a.graph) + "...");
  CostParams cost;
  const LoadedGraph lg = load_graph(a.graph, &cost, a.quiet);
  const std::string plan_text = io::read_text_file(a.plan);
  // Cluster: the options, else the cluster the plan was made for, else a
  // guess from the plan's mesh (hand-written plans).
  std::optional<Cluster> saved;
  if (a.cluster.count() != 1) saved = io::plan_cluster(plan_text, plan_source);
  const Cluster cluster =
      a.cluster.count() == 1 ? cluster_from_args(a.cluster, cost)
      : saved               ? *saved
                            : cluster_from_plan_mesh(io::plan_mesh_sizes(plan_text, plan_source),
                                                     plan_source);
  apply_cost_file(a.cost_file, cost);

  progress.say("evaluating " + plan_source + " on " + std::to_string(cluster.num_devices()) +
               " devices...");
  plan::Plan p = io::parse_plan(plan_text, plan_source, lg.graph, lg.spaces, cluster.cuts());
  if (a.mode) p.mode = parse_mode(*a.mode);
  try {
    plan::check_plan(lg.graph, lg.spaces, p);
  } catch (const Error& e) {
    if (!e.file().empty()) throw;
    throw e.in_file(plan_source);
  }
  const plan::Evaluation ev = plan::evaluate(lg.graph, lg.spaces, cluster, p, cost);
  progress.say("done in " + format_double("%.2f", progress.elapsed_s()) + " s (" +
               summary_line(ev.summary) + ")");

  write_output(a.output, render(a.format, lg, cluster, p, ev));
  return 0;
}

int run_validate(const ValidateArgs& a) {
  const LoadedGraph lg = load_graph(a.graph, nullptr, false);
  std::size_t parameters = 0;
  double parameter_bytes = 0;
  for (const ir::Tensor& t : lg.graph.tensors()) {
    if (t.kind != ir::TensorKind::Parameter) continue;
    ++parameters;
    parameter_bytes += t.bytes();
  }
  const double gib = parameter_bytes / kBytesPerGiB;
  // Two decimals read well for real models; tiny graphs would all say 0.00.
  const std::string gib_text = format_double(gib >= 1.0 || gib == 0.0 ? "%.2f" : "%.3g", gib);
  std::cout << source_name(a.graph) << ": ok (" << lg.graph.num_operators() << " operators, "
            << lg.graph.num_tensors() << " tensors, " << parameters << " parameters, "
            << gib_text << " GiB of parameters)\n"
            << std::flush;
  if (!std::cout) throw Error(Errc::kIo, "cannot write to standard output");
  return 0;
}

}  // namespace recsearch::cli
