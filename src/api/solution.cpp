// SPDX-License-Identifier: Apache-2.0
// recsearch::solve, recsearch::evaluate and Solution (solution.hpp): the one
// sequence search -> evaluation -> plan file that the CLI, the C API and the
// tests share, and the answers a user asks of a plan by name.
#include "recsearch/solution.hpp"

#include <cstdio>
#include <utility>

#include "recsearch/error.hpp"
#include "recsearch/io/json_io.hpp"
#include "recsearch/report/report.hpp"

namespace recsearch {
namespace {

constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;

std::string format_double(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// Library errors that carry a JSON path but no file refer to the problem's
// graph (e.g. "/operators/3/strategy" from the search).
[[noreturn]] void rethrow_for(const Error& e, const std::string& source) {
  if (e.file().empty() && !e.json_path().empty() && !source.empty()) throw e.in_file(source);
  throw;  // the exception itself, not a copy cut down to Error (NoFitError's figures)
}

}  // namespace

Solution::Solution(Problem problem, Cluster cluster, search::SearchResult details)
    : problem_(std::move(problem)), cluster_(std::move(cluster)), details_(std::move(details)) {}

std::string Solution::summary() const {
  const plan::Summary& s = details_.eval.summary;
  return "step " + format_double("%.4g", s.step_time_s) + " s, " +
         format_double("%.4g", s.memory_per_device_bytes / kBytesPerGiB) + " GiB per device";
}

OpStrategy Solution::strategy(std::string_view op_name) const {
  const auto id = problem_.graph().find_operator(op_name);
  if (!id) throw Error(Errc::kUsage, "unknown operator '" + std::string(op_name) + "'");
  OpStrategy s;
  s.op = std::string(op_name);
  s.splits = details_.eval.strategies.at(*id);
  const algebra::OpSpace& space = problem_.spaces()[*id];
  for (const std::int16_t c : details_.plan.cuts.at(*id))
    s.cuts.push_back(c == plan::kReplicated ? std::string() : space.loops.at(c).name.str());
  return s;
}

TensorPlacement Solution::sharding(std::string_view tensor_name) const {
  const auto id = problem_.graph().find_tensor(tensor_name);
  if (!id) throw Error(Errc::kUsage, "unknown tensor '" + std::string(tensor_name) + "'");
  const plan::TensorSharding& ts = details_.eval.tensors.at(*id);
  const auto axis = [&](std::uint32_t a) { return details_.plan.mesh.at(a).axis; };
  TensorPlacement p;
  p.tensor = std::string(tensor_name);
  for (const auto& axes : ts.dims) {
    auto& names = p.dims.emplace_back();
    for (const std::uint32_t a : axes) names.push_back(axis(a));
  }
  for (const std::uint32_t a : ts.partial) p.partial.push_back(axis(a));
  return p;
}

std::string Solution::to_json(int indent) const {
  return io::plan_to_json(problem_.graph(), problem_.spaces(), cluster_, details_.plan,
                          details_.eval, indent);
}

std::string Solution::to_table() const {
  return report::plan_to_table(
      {problem_.graph(), problem_.spaces(), cluster_, details_.plan, details_.eval});
}

void Solution::write(const std::string& path, PlanFormat format, io::PlanDetail detail) const {
  if (format == PlanFormat::Table) {
    io::write_text_file(path, to_table());
    return;
  }
  io::write_plan_file(path, problem_.graph(), problem_.spaces(), cluster_, details_.plan,
                      details_.eval, detail);
}

Solution solve(const Problem& problem, const Cluster& cluster) {
  return solve(problem, cluster, problem.options());
}

Solution solve(const Problem& problem, const Cluster& cluster,
               const search::SearchOptions& options) {
  search::SearchResult result;
  try {
    result = search::run(problem.graph(), problem.spaces(), cluster, options);
  } catch (const Error& e) {
    rethrow_for(e, problem.source());
  }
  result.eval.summary.search_time_s = result.search_time_s;
  return Solution(problem, cluster, std::move(result));
}

Solution evaluate(const Problem& problem, plan::Plan plan, const Cluster& cluster) {
  return evaluate(problem, std::move(plan), cluster, problem.cost());
}

Solution evaluate(const Problem& problem, plan::Plan plan, const Cluster& cluster,
                  const CostParams& cost) {
  plan::check_plan(problem.graph(), problem.spaces(), plan);
  search::SearchResult details;
  details.eval = plan::evaluate(problem.graph(), problem.spaces(), cluster, plan, cost);
  details.plan = std::move(plan);
  return Solution(problem, cluster, std::move(details));
}

}  // namespace recsearch
