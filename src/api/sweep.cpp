// SPDX-License-Identifier: Apache-2.0
// Trade-off sweeps (recsearch/sweep.hpp): the search run at many budgets or
// on many clusters over one Problem, every reported plan re-evaluated on its
// own point, and the curves written as CSV, JSON or an SVG page (sweep_html
// below). Nothing here prices anything itself: step times and memory come
// from the evaluator, throughput from the graph's batch and flops.
#include "recsearch/sweep.hpp"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>  // the JSON writer only

#include "io/training_json.hpp"
#include "recsearch/error.hpp"
#include "recsearch/report/report.hpp"
#include "recsearch/search/pipeline.hpp"
#include "recsearch/solution.hpp"
#include "sweep_html.hpp"

namespace recsearch {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr std::size_t kMaxPoints = 10'000;

std::string mesh_label(const Cluster& c) {
  std::string s;
  for (const Level& l : c.levels()) s += (s.empty() ? "" : "x") + std::to_string(l.size);
  return s.empty() ? "1" : s;
}

// What one step processes, read off the graph: the batch is dim 0 of the
// first input (the convention of every bundled and generated graph), the
// tokens its whole shape when it holds integer ids of rank 2 (token ids,
// batch x sequence). Graphs without inputs say nothing (0).
void read_step_size(const Problem& problem, Mode mode, Sweep& s) {
  for (const ir::Tensor& t : problem.graph().tensors()) {
    if (t.kind != ir::TensorKind::Input || t.shape.empty()) continue;
    s.batch = t.shape[0];
    // (A bool input is a mask, not token ids.)
    if (ir::is_integer(t.dtype) && t.dtype != ir::DType::Bool && t.shape.size() == 2)
      s.tokens = t.shape[0] * t.shape[1];
    break;
  }
  double flops = 0;
  for (const algebra::OpSpace& sp : problem.spaces()) flops += sp.flops;
  // The same training factor the cost model charges compute with.
  s.step_flops = mode == Mode::Train ? flops * (1.0 + problem.cost().backward_flops_factor) : flops;
}

void fill_throughput(const Sweep& s, SweepPoint& p) {
  const double step = p.summary.step_time_s;
  if (!p.fits || !(step > 0)) return;
  if (s.batch > 0) p.samples_per_s = static_cast<double>(s.batch) / step;
  if (s.tokens > 0) p.tokens_per_s = static_cast<double>(s.tokens) / step;
  if (s.step_flops > 0)
    p.model_tflops_per_device = s.step_flops / step / static_cast<double>(p.devices) / 1e12;
}

// The smallest per-device memory a no-fit error reports (NoFitError): the
// smallest plan's, else the parameter-state floor no plan goes below; NaN
// when it says neither. It did not fit, so it is above the budget.
double smallest_needed(const Error& e, double budget) {
  const auto* n = dynamic_cast<const NoFitError*>(&e);
  if (n == nullptr) return NAN;
  double v = n->smallest_bytes();
  if (!std::isfinite(v) && n->floor_bytes() > 0) v = n->floor_bytes();
  return std::isfinite(v) ? std::max(v, budget) : NAN;
}

struct Found {
  plan::Plan plan;
  plan::PipelinePlan pipeline;  // groups > 1 when the plan has stages
  double memory = 0;
  double step = 0;
  std::size_t at = 0;
};

// One search at one point: the plan found, or the no-fit message.
struct Outcome {
  bool fits = false;
  Found found;
  std::string no_fit;
  double smallest = NAN;
  double time_s = 0;
};

Found search_plain(const Problem& problem, const Cluster& cluster,
                   const search::SearchOptions& opts) {
  const Solution sol = solve(problem, cluster, opts);
  const plan::Summary& m = sol.evaluation().summary;
  return {sol.plan(), {}, m.memory_per_device_bytes, m.step_time_s, 0};
}

// The pipeline search decides whether stages pay; one group is a plain plan.
Found search_pipeline(const Problem& problem, const Cluster& cluster,
                      const search::SearchOptions& opts) {
  search::PipelineResult r = search::run_pipeline(problem.graph(), problem.spaces(), cluster, opts);
  const plan::Summary& m = r.eval.summary;
  if (r.plan.groups == 1)
    return {std::move(r.single.plan), {}, m.memory_per_device_bytes, m.step_time_s, 0};
  plan::Plan first = r.plan.stages.front().plan;
  return {std::move(first), std::move(r.plan), m.memory_per_device_bytes, m.step_time_s, 0};
}

Outcome search_point(const Problem& problem, const Cluster& cluster, search::SearchOptions opts,
                     double budget, std::size_t index) {
  opts.cost.memory_budget_bytes = budget;
  opts.detailed_evaluation = false;
  Outcome out;
  const auto start = std::chrono::steady_clock::now();
  try {
    out.found = opts.pipeline_stages != 1 ? search_pipeline(problem, cluster, opts)
                                          : search_plain(problem, cluster, opts);
    out.found.at = index;
    out.fits = true;
  } catch (const Error& e) {
    if (e.code() != Errc::kNoFit) throw;
    out.no_fit = e.detail();
    out.smallest = smallest_needed(e, budget);
  }
  out.time_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

// The smallest per-device memory the sweep's searches reached: the least
// of the plans found and the figures their no-fit errors carry; NaN when
// none says.
double smallest_reached(const std::vector<Outcome>& outcomes) {
  double least = INFINITY;
  for (const Outcome& o : outcomes) {
    if (o.fits) least = std::min(least, o.found.memory);
    else if (std::isfinite(o.smallest)) least = std::min(least, o.smallest);
  }
  return std::isfinite(least) ? least : NAN;
}

// The training settings of the point's plan, written against the graph. A
// pipeline's first-stage plan numbers the operators of its stage, so its
// plan-wide settings stand for the stages.
void describe_training(const ir::Graph& g, const Found& f, SweepPoint& p) {
  if (f.plan.mode != Mode::Train) return;
  plan::Training t = f.plan.training;
  if (f.pipeline.groups > 1) {
    t.per_op.clear();
    t.zero_per_param.clear();
  }
  p.training_json = io::detail::training_json(g, t).dump();
  p.recompute_text = report::recompute_text(g, t);
  p.zero_text = report::zero_text(g, t);
}

// The point's figures from its own evaluation of `plan`, never the search's.
void report_plan(const Problem& problem, const Cluster& cluster, const search::SearchOptions& opts,
                 const Found& f, SweepPoint& p) {
  p.fits = true;
  p.plan = f.plan;
  p.found_at = f.at;
  describe_training(problem.graph(), f, p);
  if (f.pipeline.groups > 1) {
    p.pipeline = f.pipeline;
    const plan::PipelineEvaluation pe =
        plan::evaluate_pipeline(problem.graph(), problem.spaces(), cluster, f.pipeline, opts.cost,
                                plan::EvalDetail::Summary);
    p.summary = pe.summary;
    p.bubble_s = pe.pipelined_s * pe.bubble_fraction;
    return;
  }
  p.summary = plan::evaluate(problem.graph(), problem.spaces(), cluster, f.plan, opts.cost,
                             plan::EvalDetail::Summary)
                  .summary;
}

double default_budget(const search::SearchOptions& opts, const Cluster& cluster) {
  return opts.cost.memory_budget_bytes > 0 ? opts.cost.memory_budget_bytes
                                           : cluster.device().memory_GiB * kGiB;
}

Sweep start_sweep(const Problem& problem, const search::SearchOptions& opts, SweepKind kind) {
  Sweep s;
  s.kind = kind;
  s.graph = problem.graph().name();
  s.mode = opts.mode;
  s.algorithm = std::string(search::algorithm_name(opts.algorithm));
  read_step_size(problem, opts.mode, s);
  return s;
}

// Smallest budget within the tolerance of the best step time.
std::size_t budget_knee(const Sweep& s) {
  double best = std::numeric_limits<double>::infinity();
  for (const SweepPoint& p : s.points)
    if (p.fits) best = std::min(best, p.summary.step_time_s);
  for (std::size_t i = 0; i < s.points.size(); ++i)
    if (s.points[i].fits && s.points[i].summary.step_time_s <= best * (1 + s.knee_tolerance))
      return i;
  return s.points.size();
}

std::size_t fastest_point(const Sweep& s) {
  std::size_t best = s.points.size();
  for (std::size_t i = 0; i < s.points.size(); ++i)
    if (s.points[i].fits && (best == s.points.size() ||
                             s.points[i].summary.step_time_s < s.points[best].summary.step_time_s))
      best = i;
  return best;
}

[[noreturn]] void bad_points(std::string_view what, std::string_view text, const std::string& why) {
  throw Error(Errc::kUsage, std::string(what) + " '" + std::string(text) + "': " + why +
                                " (expected a list like 8,16,32, a range A:B that doubles, or "
                                "A:B:STEP)");
}

double parse_real(std::string_view part, std::string_view what, std::string_view text) {
  double v = 0;
  const auto [end, ec] = std::from_chars(part.data(), part.data() + part.size(), v);
  if (part.empty() || ec != std::errc{} || end != part.data() + part.size())
    bad_points(what, text, "'" + std::string(part) + "' is not a number");
  if (!std::isfinite(v) || v <= 0) bad_points(what, text, "values must be positive and finite");
  return v;
}

std::vector<std::string_view> split(std::string_view text, char sep) {
  std::vector<std::string_view> parts;
  while (true) {
    const std::size_t at = text.find(sep);
    parts.push_back(text.substr(0, at));
    if (at == std::string_view::npos) return parts;
    text = text.substr(at + 1);
  }
}

}  // namespace

std::vector<double> parse_sweep_reals(std::string_view text, std::string_view what) {
  if (text.empty()) bad_points(what, text, "empty");
  std::vector<double> out;
  if (text.find(':') == std::string_view::npos) {
    for (std::string_view part : split(text, ',')) out.push_back(parse_real(part, what, text));
    if (out.size() > kMaxPoints) bad_points(what, text, "more than 10000 points");
    return out;
  }
  const auto parts = split(text, ':');
  if (parts.size() > 3) bad_points(what, text, "a range has at most three fields");
  const double lo = parse_real(parts[0], what, text);
  const double hi = parse_real(parts[1], what, text);
  if (lo > hi) bad_points(what, text, "the range's start is above its end");
  if (parts.size() == 2) {
    for (double v = lo; v < hi; v *= 2) out.push_back(v);
  } else {
    const double step = parse_real(parts[2], what, text);
    if ((hi - lo) / step > static_cast<double>(kMaxPoints))
      bad_points(what, text, "more than 10000 points");
    // Index times step, not repeated sums: 0.1 steps would drift past B.
    for (std::size_t i = 0; lo + static_cast<double>(i) * step < hi * (1 - 1e-12); ++i)
      out.push_back(lo + static_cast<double>(i) * step);
  }
  out.push_back(hi);
  if (out.size() > kMaxPoints) bad_points(what, text, "more than 10000 points");
  return out;
}

std::vector<std::int64_t> parse_sweep_counts(std::string_view text, std::string_view what) {
  std::vector<std::int64_t> out;
  for (double v : parse_sweep_reals(text, what)) {
    if (v != std::floor(v)) bad_points(what, text, "counts must be whole numbers");
    if (v > static_cast<double>(kMaxDevices)) bad_points(what, text, "more than 2^31 devices");
    out.push_back(static_cast<std::int64_t>(v));
  }
  return out;
}

Cluster with_outer_size(const Cluster& cluster, std::int64_t size) {
  if (size < 1) throw Error(Errc::kUsage, "the outermost level needs at least 1 member");
  std::vector<Level> levels = cluster.levels();
  if (levels.empty()) throw Error(Errc::kUsage, "the cluster has no level to resize");
  levels.front().size = size;
  return Cluster(cluster.name(), std::move(levels), cluster.device());
}

Sweep sweep_memory(const Problem& problem, const Cluster& cluster,
                   const search::SearchOptions& options, std::vector<double> budgets_bytes) {
  if (budgets_bytes.empty()) throw Error(Errc::kUsage, "a memory sweep needs at least one budget");
  for (double b : budgets_bytes)
    if (!std::isfinite(b) || b <= 0)
      throw Error(Errc::kUsage, "memory budgets must be positive and finite");
  std::sort(budgets_bytes.begin(), budgets_bytes.end());
  budgets_bytes.erase(std::unique(budgets_bytes.begin(), budgets_bytes.end()), budgets_bytes.end());

  Sweep s = start_sweep(problem, options, SweepKind::Memory);
  std::vector<Outcome> outcomes;
  for (std::size_t i = 0; i < budgets_bytes.size(); ++i)
    outcomes.push_back(search_point(problem, cluster, options, budgets_bytes[i], i));
  const double smallest = smallest_reached(outcomes);
  for (std::size_t i = 0; i < budgets_bytes.size(); ++i) {
    SweepPoint p;
    p.budget_bytes = budgets_bytes[i];
    p.devices = cluster.num_devices();
    p.mesh = mesh_label(cluster);
    p.search_time_s = outcomes[i].time_s;
    // Every plan the sweep found that fits this budget is a candidate: the
    // fastest wins, ties to the smaller memory, then the earlier search.
    const Found* best = nullptr;
    for (const Outcome& o : outcomes) {
      if (!o.fits || o.found.memory > p.budget_bytes) continue;
      if (best == nullptr || o.found.step < best->step ||
          (o.found.step == best->step && o.found.memory < best->memory))
        best = &o.found;
    }
    search::SearchOptions opts = options;
    opts.cost.memory_budget_bytes = p.budget_bytes;
    if (best != nullptr) {
      report_plan(problem, cluster, opts, *best, p);
      fill_throughput(s, p);
    } else {
      p.no_fit = outcomes[i].no_fit;
      p.smallest_bytes = smallest;
    }
    s.points.push_back(std::move(p));
  }
  s.knee = budget_knee(s);
  return s;
}

Sweep sweep_clusters(const Problem& problem, const std::vector<Cluster>& clusters,
                     const search::SearchOptions& options) {
  if (clusters.empty()) throw Error(Errc::kUsage, "a cluster sweep needs at least one cluster");
  Sweep s = start_sweep(problem, options, SweepKind::Devices);
  double base = 0;  // devices x step time of the first fitting point
  for (std::size_t i = 0; i < clusters.size(); ++i) {
    const Cluster& c = clusters[i];
    const double budget = default_budget(options, c);
    const Outcome o = search_point(problem, c, options, budget, i);
    SweepPoint p;
    p.budget_bytes = budget;
    p.devices = c.num_devices();
    p.mesh = mesh_label(c);
    p.search_time_s = o.time_s;
    if (o.fits) {
      search::SearchOptions opts = options;
      opts.cost.memory_budget_bytes = budget;
      report_plan(problem, c, opts, o.found, p);
      fill_throughput(s, p);
      // Same graph, same batch: throughput per device is 1 / (devices x step).
      const double cost = static_cast<double>(p.devices) * p.summary.step_time_s;
      if (base == 0) base = cost;
      p.scaling_efficiency = cost > 0 ? base / cost : 0;
    } else {
      p.no_fit = o.no_fit;
      p.smallest_bytes = o.smallest;
    }
    s.points.push_back(std::move(p));
  }
  s.knee = fastest_point(s);
  return s;
}

namespace {

// CSV fields: numbers as %.6g, empty when unknown; text quoted when needed.
std::string csv_num(double v, double scale = 1) {
  if (!std::isfinite(v)) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v / scale);
  return buf;
}
std::string csv_pos(double v) { return v > 0 ? csv_num(v) : ""; }
std::string csv_text(const std::string& t) {
  if (t.find_first_of(",\"\n") == std::string::npos) return t;
  std::string out = "\"";
  for (char c : t) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

nlohmann::json json_num(double v) {
  return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json();
}
nlohmann::json json_pos(double v) { return v > 0 ? json_num(v) : nlohmann::json(); }

}  // namespace

std::string sweep_to_csv(const Sweep& s) {
  std::string out =
      "budget_gib,devices,mesh,fits,step_time_s,compute_s,communication_s,memory_gib,"
      "parameter_gib,activation_gib,samples_per_s,tokens_per_s,model_tflops_per_device,"
      "scaling_efficiency,found_at_budget_gib,search_time_s,smallest_gib,note,"
      "exposed_communication_s,gradient_gib,optimizer_gib,recompute,zero_stage,microbatches,"
      "bubble_s,stages,virtual_stages,recompute_detail,zero_detail\n";
  for (const SweepPoint& p : s.points) {
    std::vector<std::string> f = {csv_num(p.budget_bytes, kGiB), std::to_string(p.devices), p.mesh,
                                  p.fits ? "yes" : "no"};
    if (p.fits) {
      const plan::Summary& m = p.summary;
      for (const std::string& v :
           {csv_num(m.step_time_s), csv_num(m.compute_s), csv_num(m.communication_s),
            csv_num(m.memory_per_device_bytes, kGiB), csv_num(m.parameter_bytes, kGiB),
            csv_num(m.activation_bytes, kGiB), csv_pos(p.samples_per_s), csv_pos(p.tokens_per_s),
            csv_pos(p.model_tflops_per_device),
            s.kind == SweepKind::Devices ? csv_num(p.scaling_efficiency) : std::string(),
            csv_num(s.points[p.found_at].budget_bytes, kGiB)})
        f.push_back(v);
    } else {
      f.insert(f.end(), 11, "");
    }
    f.push_back(csv_num(p.search_time_s));
    f.push_back(p.fits ? "" : csv_num(p.smallest_bytes, kGiB));
    f.push_back(csv_text(p.fits ? std::string() : p.no_fit));
    if (p.fits) {
      const plan::Summary& m = p.summary;
      const plan::Training& t = p.plan.training;
      const bool train = p.plan.mode == Mode::Train;
      f.push_back(csv_num(m.exposed_communication_s));
      f.push_back(csv_num(m.gradient_bytes, kGiB));
      f.push_back(csv_num(m.optimizer_bytes, kGiB));
      f.push_back(train ? std::string(plan::recompute_name(t.recompute)) : std::string());
      f.push_back(train ? std::to_string(t.zero_stage) : std::string());
      f.push_back(train ? std::to_string(t.microbatches) : std::string());
      f.push_back(csv_num(p.bubble_s));
      f.push_back(std::to_string(p.pipeline.groups));
      f.push_back(std::to_string(p.pipeline.virtual_stages));
      f.push_back(csv_text(p.recompute_text));
      f.push_back(csv_text(p.zero_text));
    } else {
      f.insert(f.end(), 11, "");
    }
    for (std::size_t i = 0; i < f.size(); ++i) out += (i ? "," : "") + f[i];
    out += '\n';
  }
  return out;
}

std::string sweep_to_json(const Sweep& s) {
  using nlohmann::json;
  json points = json::array();
  for (const SweepPoint& p : s.points) {
    json j = {{"budget_gib", p.budget_bytes / kGiB},
              {"devices", p.devices},
              {"mesh", p.mesh},
              {"fits", p.fits},
              {"search_time_s", json_num(p.search_time_s)}};
    if (p.fits) {
      const plan::Summary& m = p.summary;
      j["step_time_s"] = json_num(m.step_time_s);
      j["compute_s"] = json_num(m.compute_s);
      j["communication_s"] = json_num(m.communication_s);
      j["memory_gib"] = json_num(m.memory_per_device_bytes / kGiB);
      j["parameter_gib"] = json_num(m.parameter_bytes / kGiB);
      j["activation_gib"] = json_num(m.activation_bytes / kGiB);
      j["exposed_communication_s"] = json_num(m.exposed_communication_s);
      j["gradient_gib"] = json_num(m.gradient_bytes / kGiB);
      j["optimizer_gib"] = json_num(m.optimizer_bytes / kGiB);
      if (!p.training_json.empty()) {
        j["training"] = json::parse(p.training_json);
        j["training"]["recompute_text"] = p.recompute_text;
        j["training"]["zero_text"] = p.zero_text;
      }
      j["bubble_s"] = json_num(p.bubble_s);
      j["stages"] = p.pipeline.groups;
      j["virtual_stages"] = p.pipeline.virtual_stages;
      j["samples_per_s"] = json_pos(p.samples_per_s);
      j["tokens_per_s"] = json_pos(p.tokens_per_s);
      j["model_tflops_per_device"] = json_pos(p.model_tflops_per_device);
      if (s.kind == SweepKind::Devices) j["scaling_efficiency"] = json_num(p.scaling_efficiency);
      j["found_at"] = p.found_at;
      j["found_at_budget_gib"] = s.points[p.found_at].budget_bytes / kGiB;
    } else {
      j["smallest_gib"] = json_num(p.smallest_bytes / kGiB);
      j["note"] = p.no_fit;
    }
    points.push_back(std::move(j));
  }
  json doc = {{"format", "recsearch.sweep"},
              {"version", 1},
              {"graph", s.graph},
              {"sweep", s.kind == SweepKind::Memory ? "memory" : "devices"},
              {"mode", s.mode == Mode::Train ? "train" : "infer"},
              {"algorithm", s.algorithm},
              {"batch", s.batch > 0 ? json(s.batch) : json()},
              {"tokens", s.tokens > 0 ? json(s.tokens) : json()},
              {"step_tflop", json_pos(s.step_flops / 1e12)},
              {"knee", s.knee < s.points.size() ? json(s.knee) : json()},
              {"knee_tolerance", s.knee_tolerance},
              {"points", std::move(points)}};
  return doc.dump(1) + "\n";
}

std::string sweep_to_html(const Sweep& s) { return detail::sweep_html(s); }

}  // namespace recsearch
