// SPDX-License-Identifier: Apache-2.0
// The grid baseline: every split of the cut schedule into an outer
// data-parallel part and an inner tensor-parallel part (DP x TP, Megatron
// style on the TP part), each evaluated; the fastest that fits wins.
#include <limits>

#include "recsearch/error.hpp"
#include "search/common.hpp"

namespace recsearch::search::detail {

bool grid(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces, const Cluster& cluster,
          const SearchOptions& opts, double budget, plan::Plan& out, double& smallest_memory) {
  const std::size_t n = cluster.cuts().size();
  double best = std::numeric_limits<double>::infinity();
  smallest_memory = std::numeric_limits<double>::infinity();
  bool found = false;
  // From all-DP (split n) to all-TP (split 0); ties keep the more data-parallel split.
  for (std::size_t split = n + 1; split-- > 0;) {
    plan::Plan trial = out;
    tensor_parallel(g, spaces, cluster, split, trial);
    plan::check_plan(g, spaces, trial);
    const auto sum =
        plan::evaluate(g, spaces, cluster, trial, opts.cost, plan::EvalDetail::Summary).summary;
    smallest_memory = std::min(smallest_memory, sum.memory_per_device_bytes);
    if (sum.memory_per_device_bytes > budget || sum.step_time_s >= best) continue;
    best = sum.step_time_s;
    out.cuts = std::move(trial.cuts);
    found = true;
  }
  return found;
}

}  // namespace recsearch::search::detail
