// SPDX-License-Identifier: Apache-2.0
// The members of an operator-level plan that a pipeline plan file repeats
// for each stage (io/pipeline_io.cpp), printed by the plan writer itself
// (io/plan_io.cpp) so that a stage's plan reads exactly as a plan file of
// its stage graph, without building it as a document and parsing it back.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/cluster.hpp"
#include "recsearch/ir/graph.hpp"
#include "recsearch/plan/evaluator.hpp"
#include "recsearch/plan/plan.hpp"

namespace recsearch::io::detail {

// The plan format's version: 2 writes an operator's "cuts" as an object
// {"axis": "dim"}; the list of {"axis", "dim"} objects of version 1 is
// still read.
inline constexpr std::int64_t kPlanVersion = 2;

// '"training": {...}, ' (training plans only), then '"mesh": {...},
// "operators": [...], "summary": {...}' of plan p on graph g, with every
// mesh axis in every operator's "cuts" (full detail), on one line: spaced
// (", ", ": ") or not, as LayoutWriter prints a record.
void print_plan_members(std::string& out, bool spaced, const ir::Graph& g,
                        const std::vector<algebra::OpSpace>& spaces, const Cluster& cluster,
                        const plan::Plan& p, const plan::Evaluation& ev);

}  // namespace recsearch::io::detail
