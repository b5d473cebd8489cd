// SPDX-License-Identifier: Apache-2.0
// Memory-aware refinement of a whole plan (search/polish.cpp).
#pragma once

#include <algorithm>
#include <cstddef>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/cluster.hpp"
#include "recsearch/plan/plan.hpp"
#include "recsearch/search/options.hpp"

namespace recsearch::search::detail {

// Polish runs where operators x mesh axes is at most this: each sweep
// builds every operator's neighbouring strategies (about axes x loops of
// them, each over every axis), a cost that grows with the square of the
// axes where rec's passes grow with their number; past this bound polish
// would cost far more than the search it refines.
inline constexpr std::size_t kPolishMaxWork = 20'000;

// Operators x mesh axes up to which a graph counts as small (the blocks and
// random DAGs of up to ~16 operators of tests/search/quality_corners_test.cpp,
// on up to 4 axes; no graph of the zoo), where bounded extra work buys plan
// quality: rec climbs its memory ladder to the top and polishes every plan
// of it, not only the fastest fitting one (search/search.cpp, RecLadder),
// and polish adds propagated regions that span the graph (polish.cpp). At
// 2,000 these made a 177-operator Wide-ResNet on 8x8 take minutes.
inline constexpr std::size_t kSmallGraphWork = 128;

// Whether polish runs on g with this many mesh axes.
[[nodiscard]] inline bool polish_applies(const ir::Graph& g, std::size_t axes) {
  const std::size_t ops = g.num_operators();
  return ops > 0 && ops * std::max<std::size_t>(axes, 1) <= kPolishMaxWork;
}

struct PolishResult {
  bool changed = false;
  // Step time of the polished plan by polish's own account (strategies'
  // own costs plus every tensor's redistributions), for the tests to hold
  // against plan::evaluate.
  double step_time_s = 0;
};

// Moves single operators on single axes of `plan`: over `budget`, toward
// fitting at the least time; within it, to the fastest strategy that still
// fits. `evaluated_memory`: plan::evaluate's memory per device of `plan`.
// The caller evaluates a changed plan anew.
PolishResult polish(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                    const Cluster& cluster, const SearchOptions& opts, double budget,
                    plan::Plan& plan, double evaluated_memory);

}  // namespace recsearch::search::detail
