// SPDX-License-Identifier: Apache-2.0
// The one definition of a plan's "training" object ({recompute, zero_stage,
// microbatches, recompute_ops, zero_params}; the plan file adds zero_axes), written by the plan
// file, the HTML report's data block and the sweep's JSON alike, so that the three never disagree
// on a name or on which exceptions are listed. Private to the library (nlohmann stays out of
// include/).
#pragma once

#include <nlohmann/json.hpp>

#include "recsearch/ir/graph.hpp"
#include "recsearch/plan/plan.hpp"
#include "recsearch/plan/training.hpp"

namespace recsearch::io::detail {

// recompute, zero_stage and microbatches; "recompute_ops" lists the operators
// whose recomputation (their pins included) is not the plan-wide one, and
// "zero_params" the parameters whose ZeRO stage is not (each present only
// when it has an entry).
[[nodiscard]] nlohmann::ordered_json training_json(const ir::Graph& g, const plan::Training& t);

}  // namespace recsearch::io::detail
