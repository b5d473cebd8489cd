// SPDX-License-Identifier: Apache-2.0
// Fuzz target: `eval`, a graph and a plan read together. The input is the
// graph file, a line "%%", then the plan file. The cluster is chosen as
// `recsearch eval` chooses it without cluster options: the plan's saved
// cluster, else its mesh, else 8 flat devices. Graph and plan are read
// through recsearch::Problem, as every tool reads them. Property (fuzz_common.hpp):
// a valid evaluation with finite figures, or a well-formed recsearch::Error
// naming the file it is about; a plan inconsistent with its graph is
// rejected, never evaluated.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_common.hpp"
#include "recsearch/recsearch.hpp"

namespace {

using namespace recsearch;

constexpr const char* kGraph = "graph.json";
constexpr const char* kPlan = "plan.json";
constexpr std::string_view kSeparator = "\n%%\n";

// As `recsearch eval` without cluster options (plan_file_cluster), with 8
// flat devices for a plan that has no mesh at all.
Cluster cluster_for(std::string_view plan_text) {
  if (std::optional<Cluster> c = plan_file_cluster(plan_text, kPlan)) return *std::move(c);
  return Cluster::flat(8);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input = fuzz::as_text(data, size);
  const std::size_t sep = input.find(kSeparator);
  if (sep == std::string_view::npos) return 0;
  const std::string_view graph_text = input.substr(0, sep);
  const std::string_view plan_text = input.substr(sep + kSeparator.size());

  std::optional<Problem> problem;
  fuzz::guard(kGraph, false, [&] { problem.emplace(Problem::from_json(graph_text, kGraph)); });
  if (!problem) return 0;
  const ir::Graph& graph = problem->graph();
  if (problem->spaces().size() != graph.num_operators()) fuzz::die("one space per operator");

  fuzz::guard(kPlan, false, [&] {
    const Cluster cluster = cluster_for(plan_text);
    const Solution s = evaluate(*problem, problem->parse_plan(plan_text, kPlan, cluster), cluster);
    const plan::Summary& sum = s.evaluation().summary;
    for (const double v : {sum.step_time_s, sum.memory_per_device_bytes})
      if (!std::isfinite(v) || v < 0) fuzz::die("evaluation gave a negative or non-finite figure");
    if (s.evaluation().strategies.size() != graph.num_operators())
      fuzz::die("one strategy per operator");
  });
  return 0;
}
