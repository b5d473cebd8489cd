// SPDX-License-Identifier: Apache-2.0
// The front door of the C++ API, second half: solve a Problem on a Cluster,
// or evaluate a plan of one's own, and read the answer as a user asks it:
// a summary line, an operator's strategy, a tensor's sharding, the plan
// file or the table.
//
//   auto solution = recsearch::solve(problem, cluster);        // problem.options()
//   auto options = problem.options();
//   options.mode = recsearch::Mode::Infer;
//   auto inference = recsearch::solve(problem, cluster, options);
//   std::cout << inference.summary() << '\n'
//             << inference.strategy("fc1").text << '\n';
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "recsearch/cluster.hpp"
#include "recsearch/cost/cost_params.hpp"
#include "recsearch/io/json_io.hpp"
#include "recsearch/ir/graph.hpp"
#include "recsearch/plan/evaluator.hpp"
#include "recsearch/plan/plan.hpp"
#include "recsearch/problem.hpp"
#include "recsearch/search/options.hpp"
#include "recsearch/search/search.hpp"

namespace recsearch {

// How one operator is split.
struct OpStrategy {
  std::string op;
  // MindSpore-style: per input, the split count of each dimension.
  ir::Strategy splits;
  // Per mesh axis, the loop it cuts ("" when replicated on that axis).
  std::vector<std::string> cuts;
};

// How one tensor is held: per tensor dim, the mesh axes that shard it, and
// the axes over which it is a partial sum.
struct TensorPlacement {
  std::string tensor;
  std::vector<std::vector<std::string>> dims;
  std::vector<std::string> partial;
};

enum class PlanFormat { Json, Table };

class Solution {
 public:
  // What solve() and evaluate() build; `details` holds the plan and its
  // evaluation (and, from solve(), the search's own figures).
  Solution(Problem problem, Cluster cluster, search::SearchResult details);

  [[nodiscard]] const Problem& problem() const noexcept { return problem_; }
  [[nodiscard]] const Cluster& cluster() const noexcept { return cluster_; }
  [[nodiscard]] const plan::Plan& plan() const noexcept { return details_.plan; }
  [[nodiscard]] const plan::Evaluation& evaluation() const noexcept { return details_.eval; }
  // The search's figures (rungs, polish, folding, ilp bounds, search time);
  // all zero for a plan that was evaluated, not searched.
  [[nodiscard]] const search::SearchResult& details() const noexcept { return details_; }

  // "step 0.01234 s, 1.5 GiB per device".
  [[nodiscard]] std::string summary() const;
  // Throw Error(kUsage) for a name the graph does not have.
  [[nodiscard]] OpStrategy strategy(std::string_view op_name) const;
  [[nodiscard]] TensorPlacement sharding(std::string_view tensor_name) const;

  // The plan file (recsearch.plan JSON) and the human-readable table.
  [[nodiscard]] std::string to_json(int indent = 2) const;
  [[nodiscard]] std::string to_table() const;
  // Writes the plan file (or the table) to `path`, "-" for standard output,
  // as it is produced (never held whole); Error(kIo) with the OS reason when
  // it cannot. `detail`: how much of the evaluation the plan file carries
  // (Auto: everything for graphs of up to 10^4 operators, else a summary
  // of the redistributions).
  void write(const std::string& path, PlanFormat format = PlanFormat::Json,
             io::PlanDetail detail = io::PlanDetail::Auto) const;

 private:
  Problem problem_;
  Cluster cluster_;
  search::SearchResult details_;
};

// Searches a plan with the problem's cost settings (problem.options()).
[[nodiscard]] Solution solve(const Problem& problem, const Cluster& cluster);
// Searches with options of one's own; options.cost is used as given (start
// from problem.options() to keep the file's settings).
[[nodiscard]] Solution solve(const Problem& problem, const Cluster& cluster,
                             const search::SearchOptions& options);

// Costs a given plan (checked first: Error(kPlan) for an illegal one) with
// the problem's cost settings, or with `cost`.
[[nodiscard]] Solution evaluate(const Problem& problem, plan::Plan plan, const Cluster& cluster);
[[nodiscard]] Solution evaluate(const Problem& problem, plan::Plan plan, const Cluster& cluster,
                                const CostParams& cost);

}  // namespace recsearch
