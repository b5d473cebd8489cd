// SPDX-License-Identifier: Apache-2.0
// Tests of plan::RedistributionSummary and EvalDetail::Shardings: the
// summary an evaluation sums as it finds its events is the one the plan
// writer sums from a full event list, to the bit, and a summary-detail plan
// file written from either evaluation is the same text.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <string>
#include <tuple>
#include <vector>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/error.hpp"
#include "recsearch/gen/generate.hpp"
#include "recsearch/io/json_io.hpp"
#include "recsearch/plan/evaluator.hpp"
#include "recsearch/search/search.hpp"
#include "support/gen_specs.hpp"
#include "support/search_options.hpp"

using namespace recsearch;
using cost::Collective;
using cost::Phase;
using plan::CommEvent;
using plan::CommReason;
using plan::RedistributionSummary;

namespace {

CommEvent event(CommReason r, Phase ph, Collective c, std::uint32_t axis, double seconds,
                ir::TensorId tensor) {
  CommEvent e;
  e.reason = r;
  e.phase = ph;
  e.collective = c;
  e.axis = axis;
  e.seconds = seconds;
  e.bytes = 2 * seconds;
  e.tensor = tensor;
  return e;
}

// The heaviest events as the plan writer once chose them: a partial sort of
// the whole list by seconds, ties in event order.
std::vector<ir::TensorId> heaviest_by_sort(const std::vector<CommEvent>& events) {
  std::vector<std::size_t> order(events.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  const std::size_t n = std::min(RedistributionSummary::kHeaviest, order.size());
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(n), order.end(),
                    [&](std::size_t a, std::size_t b) {
                      const double sa = events[a].seconds, sb = events[b].seconds;
                      return sa != sb ? sa > sb : a < b;
                    });
  std::vector<ir::TensorId> out;
  for (std::size_t i = 0; i < n; ++i) out.push_back(events[order[i]].tensor);
  return out;
}

std::vector<ir::TensorId> tensors_of(const std::vector<CommEvent>& events) {
  std::vector<ir::TensorId> out;
  for (const CommEvent& e : events) out.push_back(e.tensor);
  return out;
}

void check_same(const RedistributionSummary& a, const RedistributionSummary& b) {
  CHECK(a.events() == b.events());
  const auto ta = a.totals(), tb = b.totals();
  REQUIRE(ta.size() == tb.size());
  for (std::size_t i = 0; i < ta.size(); ++i) {
    CHECK(ta[i].reason == tb[i].reason);
    CHECK(ta[i].phase == tb[i].phase);
    CHECK(ta[i].collective == tb[i].collective);
    CHECK(ta[i].axis == tb[i].axis);
    CHECK(ta[i].events == tb[i].events);
    CHECK(ta[i].bytes == tb[i].bytes);  // the same doubles, not merely close
    CHECK(ta[i].seconds == tb[i].seconds);
  }
  REQUIRE(a.heaviest().size() == b.heaviest().size());
  for (std::size_t i = 0; i < a.heaviest().size(); ++i) {
    CHECK(a.heaviest()[i].tensor == b.heaviest()[i].tensor);
    CHECK(a.heaviest()[i].seconds == b.heaviest()[i].seconds);
    CHECK(a.heaviest()[i].axis == b.heaviest()[i].axis);
  }
}

gen::ModelSpec gpt(std::int64_t layers) { return testing::small_gpt(layers); }

}  // namespace

TEST_CASE("redistribution summary: totals in key order, heaviest by seconds then event order") {
  RedistributionSummary s(2);
  std::vector<CommEvent> events;
  // 40 events over a few keys with many tied seconds, and one axis beyond
  // the table's (kept apart, still totalled and ordered by its key).
  for (ir::TensorId i = 0; i < 40; ++i) {
    const auto r = i % 3 == 0 ? CommReason::Gradient : CommReason::Layout;
    const auto c = i % 2 == 0 ? Collective::AllReduce : Collective::AllGather;
    events.push_back(event(r, i % 5 == 0 ? Phase::Backward : Phase::Forward, c, i % 2,
                           static_cast<double>((i * 7) % 6), i));
  }
  events.push_back(event(CommReason::Layout, Phase::Forward, Collective::Halo, 5, 9.0, 40));
  events.push_back(event(CommReason::Halo, Phase::Forward, Collective::Halo, 1, 9.0, 41));
  for (const CommEvent& e : events) s.add(e);
  CHECK(s.events() == events.size());
  CHECK(tensors_of(s.heaviest()) == heaviest_by_sort(events));

  const auto totals = s.totals();
  std::int64_t n = 0;
  double seconds = 0;
  for (std::size_t i = 0; i < totals.size(); ++i) {
    n += totals[i].events;
    seconds += totals[i].seconds;
    if (i > 0) {
      const auto& a = totals[i - 1];
      const auto& b = totals[i];
      CHECK(std::tuple(a.reason, a.phase, a.collective, a.axis) <
            std::tuple(b.reason, b.phase, b.collective, b.axis));
    }
  }
  CHECK(n == static_cast<std::int64_t>(events.size()));
  double expected = 0;
  for (const CommEvent& e : events) expected += e.seconds;
  CHECK(seconds == doctest::Approx(expected));
  // The out-of-table axis is a key of its own.
  CHECK(std::any_of(totals.begin(), totals.end(), [](const RedistributionSummary::Total& t) {
    return t.axis == 5 && t.events == 1 && t.collective == Collective::Halo;
  }));
}

TEST_CASE("redistribution summary: fewer events than the heaviest list holds") {
  RedistributionSummary s(1);
  CHECK(s.totals().empty());
  CHECK(s.heaviest().empty());
  const std::vector<CommEvent> events = {
      event(CommReason::Layout, Phase::Forward, Collective::AllGather, 0, 1.0, 0),
      event(CommReason::Layout, Phase::Forward, Collective::AllGather, 0, 3.0, 1),
      event(CommReason::Layout, Phase::Forward, Collective::AllGather, 0, 1.0, 2)};
  for (const CommEvent& e : events) s.add(e);
  CHECK(tensors_of(s.heaviest()) == std::vector<ir::TensorId>{1, 0, 2});
  REQUIRE(s.totals().size() == 1);
  CHECK(s.totals()[0].events == 3);
  CHECK(s.totals()[0].bytes == 10.0);
}

TEST_CASE("EvalDetail::Shardings: the full evaluation less its event list and strategies") {
  const ir::Graph g = gen::build_graph(gpt(3));
  const auto spaces = algebra::build_op_spaces(g);
  for (const Cluster& c : {Cluster::flat(8), Cluster::mesh({2, 3}), Cluster::mesh({4, 8})}) {
    for (const Mode mode : {Mode::Train, Mode::Infer}) {
      for (const std::int64_t micro : {1, 4}) {
        if (mode == Mode::Infer && micro > 1) continue;
        CAPTURE(c.num_devices());
        CAPTURE(static_cast<int>(mode));
        CAPTURE(micro);
        search::SearchOptions o = testing::operator_level_options();
        o.mode = mode;
        if (micro > 1) o.training.microbatches = micro;
        const auto res = search::run(g, spaces, c, o);
        const auto full = plan::evaluate(g, spaces, c, res.plan, o.cost, plan::EvalDetail::Full);
        const auto brief =
            plan::evaluate(g, spaces, c, res.plan, o.cost, plan::EvalDetail::Shardings);
        CHECK(brief.events.empty());
        CHECK(brief.strategies.empty());
        CHECK_FALSE(full.redistribution_summary.has_value());
        REQUIRE(brief.redistribution_summary.has_value());
        RedistributionSummary summed(res.plan.mesh.size());
        for (const CommEvent& e : full.events) summed.add(e);
        check_same(*brief.redistribution_summary, summed);
        CHECK(brief.summary.step_time_s == full.summary.step_time_s);
        CHECK(brief.summary.communication_s == full.summary.communication_s);
        CHECK(brief.summary.exposed_communication_s == full.summary.exposed_communication_s);
        CHECK(brief.summary.memory_per_device_bytes == full.summary.memory_per_device_bytes);
        REQUIRE(brief.tensors.size() == full.tensors.size());
        for (std::size_t t = 0; t < full.tensors.size(); ++t) {
          CHECK(brief.tensors[t].dims == full.tensors[t].dims);
          CHECK(brief.tensors[t].partial == full.tensors[t].partial);
        }
        REQUIRE(brief.op_costs.size() == full.op_costs.size());
        for (std::size_t i = 0; i < full.op_costs.size(); ++i) {
          CHECK(brief.op_costs[i].communication_s == full.op_costs[i].communication_s);
          CHECK(brief.op_costs[i].compute_s == full.op_costs[i].compute_s);
        }
        // The summary-only evaluation sums the same events in the same order.
        const auto summary =
            plan::evaluate(g, spaces, c, res.plan, o.cost, plan::EvalDetail::Summary);
        CHECK(summary.summary.communication_s == full.summary.communication_s);
        CHECK(summary.summary.step_time_s == full.summary.step_time_s);

        // A summary plan file is the same text from either evaluation; a
        // full one needs the event list.
        CHECK(io::plan_to_json(g, spaces, c, res.plan, brief, 2, io::PlanDetail::Summary) ==
              io::plan_to_json(g, spaces, c, res.plan, full, 2, io::PlanDetail::Summary));
        CHECK_THROWS_AS(
            (void)io::plan_to_json(g, spaces, c, res.plan, brief, 2, io::PlanDetail::Full), Error);

        // The search evaluates its plan in that detail when asked.
        o.list_redistributions = false;
        const auto res2 = search::run(g, spaces, c, o);
        CHECK(res2.plan.cuts == res.plan.cuts);
        CHECK(res2.eval.events.empty());
        CHECK(res2.eval.redistribution_summary.has_value());
      }
    }
  }
}

TEST_CASE("lists_redistributions follows the plan detail") {
  CHECK(io::lists_redistributions(io::PlanDetail::Full, 1'000'000));
  CHECK_FALSE(io::lists_redistributions(io::PlanDetail::Summary, 10));
  CHECK(io::lists_redistributions(io::PlanDetail::Auto, io::kFullDetailMaxOperators));
  CHECK_FALSE(io::lists_redistributions(io::PlanDetail::Auto, io::kFullDetailMaxOperators + 1));
}
