// Memory-aware refinement of a whole plan (search/polish.cpp).
#pragma once

#include <cstddef>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/cluster.hpp"
#include "recsearch/plan/plan.hpp"
#include "recsearch/search/options.hpp"

namespace recsearch::search::detail {

// Graphs past this many operators are left as they are: each sweep builds
// every operator's neighbouring strategies.
inline constexpr std::size_t kPolishMaxOperators = 10'000;

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
            const Cluster& cluster, const SearchOptions& opts, double budget, plan::Plan& plan,
            double evaluated_memory);

}  // namespace recsearch::search::detail
