// SPDX-License-Identifier: Apache-2.0
// The "pipeline" section of a plan file (docs/pipeline.md, Plan file): a
// pipelined plan is a recsearch.plan document whose "pipeline" object lists
// the stages, each with its operator range, device group and range, and
// the operator-level plan of its stage graph in the plan file's own form
// ("mesh", "operators", ...), plus the schedule, v and the microbatches.
// The per-group figures (compute, memory, bubble) are written for readers
// and recomputed, never read.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/cluster.hpp"
#include "recsearch/ir/graph.hpp"
#include "recsearch/plan/pipeline.hpp"

namespace recsearch::io {

// Whether a plan file has a "pipeline" object (the rest is not checked).
[[nodiscard]] bool plan_has_pipeline(std::string_view text, const std::string& source);

// The pipeline plan of a plan file, against the graph and the whole
// cluster (whose devices the groups split, plan::stage_cluster). Errors name the file
// and the JSON path ("/pipeline/stages/1/operators/3/cuts/0"): kSchema for
// a missing or mistyped field, kPlan for stages that do not fit the graph
// or cluster (plan::check_pipeline), and each stage's plan errors as
// parse_plan reports them, under its stage.
[[nodiscard]] plan::PipelinePlan parse_pipeline(std::string_view text, const std::string& source,
                                                const ir::Graph& g,
                                                const std::vector<algebra::OpSpace>& spaces,
                                                const Cluster& cluster);

// The plan file of a pipelined plan (evaluated by plan::evaluate_pipeline).
[[nodiscard]] std::string pipeline_to_json(const ir::Graph& g,
                                           const std::vector<algebra::OpSpace>& spaces,
                                           const Cluster& cluster, const plan::PipelinePlan& pp,
                                           const plan::PipelineEvaluation& pe, int indent = 2);

}  // namespace recsearch::io
