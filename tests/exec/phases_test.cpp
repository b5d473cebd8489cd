// SPDX-License-Identifier: Apache-2.0
// exec::predicted_phase_times, the split of the cost model's step into the
// phases exec times: compute without the recomputed forward split 1:f, the
// recomputed forward in the backward, events by tensor kind, reason and
// phase; an inference step's compute all forward.
#include <doctest/doctest.h>

#include "recsearch/exec/phases.hpp"

namespace {

using namespace recsearch;

plan::CommEvent event(ir::TensorId t, plan::CommReason r, cost::Phase ph, double seconds) {
  plan::CommEvent e;
  e.tensor = t;
  e.reason = r;
  e.phase = ph;
  e.seconds = seconds;
  return e;
}

}  // namespace

TEST_CASE("phases: the model's step split into forward, backward, sync and optimizer") {
  ir::Graph g("phases");
  const auto w = g.add_tensor("w", {4, 4}, ir::DType::F32, ir::TensorKind::Parameter);
  const auto h = g.add_tensor("h", {4, 4}, ir::DType::F32, ir::TensorKind::Activation);
  plan::Evaluation ev;
  ev.summary.compute_s = 3.5;  // 1 s forward, 2 s backward, 0.5 s recomputed forward
  ev.summary.recompute_s = 0.5;
  ev.summary.backward_compute_s = 2.0;
  ev.summary.step_time_s = 9.0;
  ev.events = {event(w, plan::CommReason::Gradient, cost::Phase::Backward, 0.25),
               event(w, plan::CommReason::Gradient, cost::Phase::Forward, 0.125),  // ZeRO gather
               event(h, plan::CommReason::Gradient, cost::Phase::Backward, 1.0),
               event(h, plan::CommReason::Layout, cost::Phase::Backward, 2.0),
               event(h, plan::CommReason::Layout, cost::Phase::Forward, 4.0),
               event(ir::kNone, plan::CommReason::Halo, cost::Phase::Forward, 8.0)};
  const exec::PhaseTimes t = exec::predicted_phase_times(g, ev, Mode::Train);
  CHECK(t.forward_s == doctest::Approx(1.0 + 4.0 + 8.0));
  CHECK(t.backward_s == doctest::Approx(2.0 + 0.5 + 1.0 + 2.0));
  CHECK(t.sync_s == doctest::Approx(0.375));
  CHECK(t.optimizer_s == 0.0);
  CHECK(t.step_s == 9.0);
  // A backward of 1.5 s (operators on the data alone run less of theirs).
  ev.summary.backward_compute_s = 1.5;
  const exec::PhaseTimes even = exec::predicted_phase_times(g, ev, Mode::Train);
  CHECK(even.forward_s == doctest::Approx(1.5 + 12.0));
  CHECK(even.backward_s == doctest::Approx(1.5 + 0.5 + 3.0));
  // Inference: all compute is the forward's; the events go as above.
  const exec::PhaseTimes infer = exec::predicted_phase_times(g, ev, Mode::Infer);
  CHECK(infer.forward_s == doctest::Approx(3.5 + 12.0));
  CHECK(infer.backward_s == doctest::Approx(3.0));
}
