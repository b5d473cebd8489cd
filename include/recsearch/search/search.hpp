// SPDX-License-Identifier: Apache-2.0
// Entry point of the strategy search.
//
//   auto spaces = algebra::build_op_spaces(graph);
//   auto result = search::run(graph, spaces, cluster, {});
//   // result.plan: per operator and axis the loop cut; result.eval: costs
#pragma once

#include <limits>
#include <vector>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/cluster.hpp"
#include "recsearch/plan/evaluator.hpp"
#include "recsearch/plan/plan.hpp"
#include "recsearch/search/options.hpp"

namespace recsearch::search {

struct SearchResult {
  plan::Plan plan;
  // Independent evaluation of `plan` (plan::evaluate); its summary carries
  // the search time.
  plan::Evaluation eval;
  // Step time the search's own bookkeeping arrived at (Rec, Exhaustive, Ilp,
  // each with its own account of the cost model; equals
  // eval.summary.step_time_s up to rounding, which the tests check). On a
  // folded graph (fold_repeats > 0): extrapolated from the 3- and 4-copy folds.
  double bookkept_step_time_s = 0;
  // Memory ladder rungs tried before the plan fitted (0: fitted at once).
  int memory_rungs = 0;
  // Rec: the plan is (or was polished from) one of the data x tensor
  // parallel splits it also weighs (SearchOptions::expert_candidates), not
  // one its passes built.
  // memory_rungs is past the last rung when no memory price made the
  // passes' own plan fit.
  bool expert_plan = false;
  // Rec: the plan was refined whole after the passes (polish: SearchOptions::effort);
  // bookkept_step_time_s is then the refinement's own account.
  bool polished = false;
  // Rec on a folded graph: the repeated block's operators and repeats (0 when
  // the graph was searched whole).
  std::size_t fold_period = 0;
  std::size_t fold_repeats = 0;
  // Exhaustive: whether optimality was proven within the node limit. Ilp:
  // whether CBC proved its solution optimal over unrestricted candidates.
  bool proven_optimal = false;
  // Ilp: whether some operator's candidate strategies were cut down
  // (SearchOptions::ilp_max_strategies), and CBC's lower bound on the
  // optimum over the candidates it had.
  bool ilp_restricted = false;
  double ilp_lower_bound_s = 0;
  // The search makes every choice as it did, and so returns this result,
  // under any memory budget from this many bytes up to its own (each
  // fitting test it passed still passes, each it failed still fails);
  // infinity where it claims nothing (polish, or several training settings
  // compared). The pipeline search reuses a stage's search at such budgets.
  double same_choices_from_bytes = std::numeric_limits<double>::infinity();
  double search_time_s = 0;
};

// Runs the chosen algorithm. Pinned strategies are kept and `allowed` dims
// respected. Throws Error(kNoFit) when no plan found fits the memory budget
// (CostParams::memory_budget_bytes, else the device capacity), naming the
// smallest memory per device reached; Error(kStrategy) for a pinned strategy
// that cannot be laid out on the mesh.
[[nodiscard]] SearchResult run(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                               const Cluster& cluster, const SearchOptions& opts);

}  // namespace recsearch::search
