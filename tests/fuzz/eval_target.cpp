// Fuzz target: `eval`, a graph and a plan read together. The input is the
// graph file, a line "%%", then the plan file. The cluster is chosen as
// `recsearch eval` chooses it without cluster options: the plan's saved
// cluster, else its mesh, else 8 flat devices. Property (fuzz_common.hpp):
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

Cluster cluster_for(std::string_view plan_text) {
  if (std::optional<Cluster> saved = io::plan_cluster(plan_text, kPlan)) return *std::move(saved);
  const std::vector<std::int64_t> sizes = io::plan_mesh_sizes(plan_text, kPlan);
  if (sizes.empty()) return Cluster::flat(8);
  std::int64_t product = 1;
  for (const std::int64_t s : sizes) {
    if (s < 1 || product > kMaxDevices / s)
      throw Error(Errc::kPlan, "mesh axis sizes must be >= 1 with a product of at most 2^31",
                  "/mesh", kPlan);
    product *= s;
  }
  return Cluster::mesh(sizes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input = fuzz::as_text(data, size);
  const std::size_t sep = input.find(kSeparator);
  if (sep == std::string_view::npos) return 0;
  const std::string_view graph_text = input.substr(0, sep);
  const std::string_view plan_text = input.substr(sep + kSeparator.size());

  std::optional<ir::Graph> graph;
  std::vector<algebra::OpSpace> spaces;
  CostParams cost;
  fuzz::guard(kGraph, false, [&] {
    graph.emplace(io::parse_graph(graph_text, kGraph, &cost));
    spaces = fuzz::attributed(kGraph, [&] { return algebra::build_op_spaces(*graph); });
  });
  if (!graph || spaces.size() != graph->num_operators()) return 0;

  fuzz::guard(kPlan, false, [&] {
    const Cluster cluster = cluster_for(plan_text);
    const plan::Plan p = io::parse_plan(plan_text, kPlan, *graph, spaces, cluster.cuts());
    fuzz::attributed(kPlan, [&] {
      plan::check_plan(*graph, spaces, p);
      return 0;
    });
    const plan::Evaluation ev = plan::evaluate(*graph, spaces, cluster, p, cost);
    for (const double v : {ev.summary.step_time_s, ev.summary.memory_per_device_bytes})
      if (!std::isfinite(v) || v < 0) fuzz::die("evaluation gave a negative or non-finite figure");
    if (ev.strategies.size() != graph->num_operators()) fuzz::die("one strategy per operator");
  });
  return 0;
}
