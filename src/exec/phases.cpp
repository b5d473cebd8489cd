// SPDX-License-Identifier: Apache-2.0
// The cost model's step split into exec's phases (exec/phases.hpp).
#include "recsearch/exec/phases.hpp"

namespace recsearch::exec {

PhaseTimes predicted_phase_times(const ir::Graph& g, const plan::Evaluation& ev, Mode mode) {
  PhaseTimes t;
  const plan::Summary& s = ev.summary;
  t.step_s = s.step_time_s;
  if (mode == Mode::Infer) {
    t.forward_s = s.compute_s;
  } else {
    t.forward_s = s.compute_s - s.recompute_s - s.backward_compute_s;
    t.backward_s = s.backward_compute_s + s.recompute_s;
  }
  for (const plan::CommEvent& e : ev.events) {
    const bool parameter =
        e.tensor != ir::kNone && g.tensor(e.tensor).kind == ir::TensorKind::Parameter;
    if (parameter && e.reason == plan::CommReason::Gradient) {
      t.sync_s += e.seconds;
    } else if (e.phase == cost::Phase::Backward) {
      t.backward_s += e.seconds;
    } else {
      t.forward_s += e.seconds;
    }
  }
  return t;
}

}  // namespace recsearch::exec
