// SPDX-License-Identifier: Apache-2.0
// The cost model's step time split into the phases exec times (forward,
// backward, gradient synchronisation, optimizer), the one definition that
// `recsearch exec` prints against the clock and tools/exec/calibration_bench.py
// reads back (docs/exec.md, Model against the clock).
#pragma once

#include "recsearch/cost/cost_params.hpp"
#include "recsearch/ir/graph.hpp"
#include "recsearch/plan/evaluator.hpp"

namespace recsearch::exec {

// Seconds per step of each phase as the cost model prices them, and its
// step time. The model's compute_s is the forward's time plus the
// backward's (backward_compute_s: each operator's share of
// backward_flops_factor times its forward, ir::backward_shares) plus the
// recomputed forward (recompute_s, which runs inside the backward pass):
// backward_compute_s and recompute_s go to the backward, the rest of
// compute_s to the forward. Collectives go by their events: a parameter's gradient
// events (its synchronisation, ZeRO's all-gathers included) to the sync,
// other backward-phase events (layout duals, activation gradients) to the
// backward, the rest (forward layout and output events) to the forward.
// The model has no optimizer time (0). In an inference evaluation all
// compute is the forward's. The phases sum to the step time only when
// nothing overlaps (CostParams::overlap false, as calibrated clusters say).
struct PhaseTimes {
  double forward_s = 0;
  double backward_s = 0;
  double sync_s = 0;
  double optimizer_s = 0;
  double step_s = 0;  // Summary::step_time_s
};
[[nodiscard]] PhaseTimes predicted_phase_times(const ir::Graph& g, const plan::Evaluation& ev,
                                               Mode mode);

}  // namespace recsearch::exec
