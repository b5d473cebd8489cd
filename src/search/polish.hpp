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

// Polish runs where its work (polish_work: about operators x mesh axes) is
// at most this: each sweep builds every operator's neighbouring strategies
// (about axes x loops of them, each over every axis), a cost that grows
// with the square of the axes where rec's passes grow with their number;
// past this bound polish would cost far more than the search it refines.
inline constexpr std::size_t kPolishMaxWork = 20'000;

// Polish work (about operators x mesh axes) up to which a graph counts as
// small (the blocks and random DAGs of up to ~16 operators of
// tests/search/quality_corners_test.cpp,
// on up to 4 axes; no graph of the zoo), where bounded extra work buys plan
// quality: rec climbs its memory ladder to the top and polishes every plan
// of it, not only the fastest fitting one (search/search.cpp, RecLadder),
// and polish adds propagated regions that span the graph (polish.cpp). At
// 2,000 these made a 177-operator Wide-ResNet on 8x8 take minutes.
inline constexpr std::size_t kSmallGraphWork = 128;

// An operator's tensors up to which it counts as one unit of polish work.
inline constexpr std::size_t kPolishUnitArity = 4;

// Polish's work on g: operators x mesh axes, where an operator with more
// than kPolishUnitArity inputs and outputs counts each one beyond as an
// operator of its own. A move re-prices every tensor of the operator, so a
// Concat of 10^4 inputs costs what 10^4 operators do; counted as one, it
// made a one-operator graph polish for minutes.
[[nodiscard]] inline std::size_t polish_work(const ir::Graph& g, std::size_t axes) {
  std::size_t units = 0;
  for (std::size_t o = 0; o < g.num_operators(); ++o) {
    const ir::Operator& op = g.op(static_cast<ir::OpId>(o));
    const std::size_t arity = op.inputs.size() + op.outputs.size();
    units += 1 + (arity > kPolishUnitArity ? arity - kPolishUnitArity : 0);
  }
  return units * std::max<std::size_t>(axes, 1);
}

// Whether polish runs on g with this many mesh axes.
[[nodiscard]] inline bool polish_applies(const ir::Graph& g, std::size_t axes) {
  return g.num_operators() > 0 && polish_work(g, axes) <= kPolishMaxWork;
}

// Whether g counts as small (kSmallGraphWork) on this many mesh axes.
[[nodiscard]] inline bool small_graph(const ir::Graph& g, std::size_t axes) {
  return polish_work(g, axes) <= kSmallGraphWork;
}

struct PolishResult {
  bool changed = false;
  // Step time of the polished plan by polish's own account (strategies'
  // own costs plus every tensor's redistributions), for the tests to hold
  // against plan::evaluate.
  double step_time_s = 0;
  // What makes the result a function of the budget (search.cpp, tighten):
  // the most memory of any state polish chose while within the budget (the
  // start included). Under any budget from path_memory up to the one it ran
  // under, every fitting test polish made comes out the same, so it makes
  // the same moves and returns the same plan. budget_sensitive: the plan
  // was over the budget at some point (how much it is over steers the
  // moves) or kicks ran, and no budget but its own is known to give the
  // same result.
  double path_memory = 0;
  bool budget_sensitive = false;
  // Whether the budget turned anything down (a move over it, a region that
  // did not fit): where not, polish made the moves it would make with no
  // budget at all.
  bool budget_binding = false;
};

// Moves single operators on single axes of `plan`: over `budget`, toward
// fitting at the least time; within it, to the fastest strategy that still
// fits. `evaluated_memory`: plan::evaluate's memory per device of `plan`.
// The caller evaluates a changed plan anew.
PolishResult polish(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                    const Cluster& cluster, const SearchOptions& opts, double budget,
                    plan::Plan& plan, double evaluated_memory);

// Small graphs under a budget that binds only (polish.cpp: kKickOps,
// kKickWork, kKickBinding): moves each operator in turn to each
// of its neighbouring strategies whatever that costs, holds it there while
// polish answers around it (mending the budget elsewhere if the move broke
// it), then lets it go and polishes again; the fastest fitting result is
// kept (kKickRounds: one round). Reaches trades that polish's moves,
// each of which must fit and pay on its own, cannot: memory freed in one
// place spent on dropping a collective in another.
PolishResult kick(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                  const Cluster& cluster, const SearchOptions& opts, double budget,
                  plan::Plan& plan, double evaluated_memory);

}  // namespace recsearch::search::detail
