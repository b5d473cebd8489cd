// SPDX-License-Identifier: Apache-2.0
// The pipeline search (docs/pipeline.md): whether cutting the graph into
// stages on device groups pays, and how.
//
//   opts.pipeline_stages = 0;  // search the number of groups
//   auto r = search::run_pipeline(graph, spaces, cluster, opts);
//   // r.plan.groups == 1: no pipeline; r.single is search::run's result
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/cluster.hpp"
#include "recsearch/plan/pipeline.hpp"
#include "recsearch/search/options.hpp"
#include "recsearch/search/search.hpp"

namespace recsearch::search {

struct PipelineResult {
  plan::PipelinePlan plan;
  plan::PipelineEvaluation eval;  // evaluate_pipeline's, stage by stage
  // The operator-level search of the whole graph when that is the answer
  // (plan.groups == 1: one stage, its plan is single.plan).
  SearchResult single;
  std::size_t candidates = 0;      // (groups, microbatches, v) priced
  std::size_t stage_searches = 0;  // search::run calls on stage graphs
  double search_time_s = 0;
};

// Stage cut points: the graph's units in operator order. On a graph with a
// repeated block (search/fold.hpp) a unit is one block, the prefix joined to
// the first and the suffix to the last; otherwise at most kMaxUnits runs of
// consecutive operators of equal count.
inline constexpr std::size_t kMaxPipelineUnits = 512;

// Splits unit weights w (in order) into `parts` contiguous non-empty runs
// minimizing the heaviest run (ties: the earliest cut points). Returns the
// run ends (parts of them, the last = w.size()). Dynamic programming,
// O(parts · units²); Error(kUsage) when parts is 0 or exceeds the units.
[[nodiscard]] std::vector<std::size_t> balance_stages(const std::vector<double>& w,
                                                      std::size_t parts);
// The same with pins (a graph's "stage" attributes, plan::pinned_stage):
// pins[i] >= 0 puts unit i into run pins[i]. Empty when no split into
// `parts` runs honours them. Still O(parts · units²).
[[nodiscard]] std::vector<std::size_t> balance_stages(const std::vector<double>& w,
                                                      std::size_t parts,
                                                      const std::vector<std::int64_t>& pins);

// For every number of groups p the options allow (opts.pipeline_stages), v
// (pipeline_virtual_stages) and microbatch count m (a divisor of the batch,
// at least p; opts.training.microbatches pins it), balances the stages by
// balance_stages over the units' compute, searches each stage with
// search::run on its stage graph and group cluster, prices the schedule
// (plan::schedule_pipeline), and keeps the fastest plan whose every group
// fits the memory budget. p = 1 is search::run on the whole graph (the
// settings chosen without polish, then polished), done when its price with
// the walk's pinned settings is within 25% of the best pipeline's. A
// candidate is dropped once its stages searched so far bound its step
// above the best it must beat.
// Operators pinned to a stage by the graph (plan::pinned_stage) stay in it;
// pins inside one repeated block must agree (Error(kPlan) otherwise). Stages
// of the same shape (the same count of middle blocks) are searched once.
// Error(kNoFit) when nothing fits; Error(kUsage) for a pinned p that does
// not split the cluster's levels (plan::stage_cluster) or exceeds the units.
[[nodiscard]] PipelineResult run_pipeline(const ir::Graph& g,
                                          const std::vector<algebra::OpSpace>& spaces,
                                          const Cluster& cluster, const SearchOptions& opts);

}  // namespace recsearch::search
