// SPDX-License-Identifier: Apache-2.0
// A parallel plan: for every operator and every mesh axis (cut), which loop
// dimension that cut splits, or none (replicated across the axis).
//
// The plan stores only these choices; everything else (MindSpore-style
// strategies, tensor shardings, redistributions, costs) is derived from them
// by the evaluator, so that a plan read back from a file means exactly what
// the search meant.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/cluster.hpp"
#include "recsearch/cost/cost_params.hpp"
#include "recsearch/ir/graph.hpp"
#include "recsearch/plan/training.hpp"

namespace recsearch::plan {

// Choice for one operator on one axis: a loop index of its OpSpace, or kReplicated.
inline constexpr std::int16_t kReplicated = -1;

struct Plan {
  std::string graph_name;
  std::string algorithm;  // "rec", "data-parallel", "exhaustive", "file"
  Mode mode = Mode::Train;
  std::vector<Cut> mesh;                        // the cut schedule the plan was made for
  std::vector<std::vector<std::int16_t>> cuts;  // [op][axis]
  // Recomputation, ZeRO stage and microbatches (training only). With
  // microbatches > 1 the cuts are those of the microbatch graph
  // (plan::microbatch_view): the same loops, the batch loop m times shorter.
  Training training;

  [[nodiscard]] std::int64_t num_devices() const noexcept {
    std::int64_t n = 1;
    for (const auto& c : mesh) n *= c.size;
    return n;
  }
};

// Product of the cuts each loop received: splits[loop].
[[nodiscard]] std::vector<std::int64_t> loop_splits(const algebra::OpSpace& s,
                                                    const std::vector<Cut>& mesh,
                                                    const std::vector<std::int16_t>& cuts);
// The same into `splits` (a reused buffer: writers call it per operator).
void loop_splits(const algebra::OpSpace& s, const std::vector<Cut>& mesh,
                 const std::vector<std::int16_t>& cuts, std::vector<std::int64_t>& splits);

// MindSpore-style strategy of an operator's cuts: per input, the split count
// of each dimension.
[[nodiscard]] ir::Strategy strategy_of(const algebra::OpSpace& s, const std::vector<Cut>& mesh,
                                       const std::vector<std::int16_t>& cuts);

// Lays a MindSpore-style strategy out on the mesh: derives each loop's
// split count from the inputs' split counts (they must agree on shared
// loops), then assigns cuts outermost-first, each axis to the first loop
// (in loop order) whose remaining split count it divides; axes left over are
// replicated. Throws Error(kStrategy) with the path "/operators/<op>/strategy"
// (prefix it as needed) when the strategy has the wrong shape, splits a dim
// that cannot be cut (Whole, unmapped, not dividing), disagrees between
// inputs, or its product does not divide into the mesh.
[[nodiscard]] std::vector<std::int16_t> assign_cuts(const ir::Graph& g, ir::OpId op,
                                                    const algebra::OpSpace& s,
                                                    const ir::Strategy& strategy,
                                                    const std::vector<Cut>& mesh);

// Checks that every choice of a plan is legal for its operator (loop exists,
// role is not Whole, each cut divides the remaining slices, pinned
// strategies kept). Throws Error(kPlan) naming "/operators/<op>/cuts/<axis>".
void check_plan(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces, const Plan& p);

}  // namespace recsearch::plan
