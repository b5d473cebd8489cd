// SPDX-License-Identifier: Apache-2.0
// Polish's own account of a training step (search/polish.cpp) against the
// independent evaluator, with the overlap of parameter-gradient collectives
// that plan::finish_step_time applies: polish ranks its moves by that
// account, so where it counted hidden collectives as paid it would take
// moves the evaluated step time does not reward.
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "recsearch/plan/evaluator.hpp"
#include "recsearch/plan/training.hpp"
#include "recsearch/search/search.hpp"
#include "search/polish.hpp"
#include "support/graph_factories.hpp"

using namespace recsearch;
namespace t = recsearch::testing;

namespace {

struct Setting {
  int zero;
  std::int64_t microbatches;
};

// Polishes the passes' plan of g at `s` (on the microbatch graph, as the
// search does) and returns polish's step time per step and the evaluator's
// summary of the polished plan on g.
std::pair<double, plan::Summary> polish_and_evaluate(const ir::Graph& g, const Cluster& c,
                                                     Setting s) {
  const auto spaces = algebra::build_op_spaces(g);
  search::SearchOptions o;
  o.training = {plan::Recompute::None, s.zero, s.microbatches};
  o.effort = search::Effort::Fast;
  plan::Plan p = search::run(g, spaces, c, o).plan;
  const auto view = plan::microbatch_view(g, spaces, s.microbatches);
  REQUIRE(view);
  const double budget = std::numeric_limits<double>::infinity();
  const auto before = plan::evaluate(g, spaces, c, p, o.cost, plan::EvalDetail::Summary).summary;
  const search::detail::PolishResult r = search::detail::polish(
      view->graph, view->spaces, c, o, budget, p, before.memory_per_device_bytes);
  const auto after = plan::evaluate(g, spaces, c, p, o.cost, plan::EvalDetail::Summary).summary;
  // Polish counts one microbatch, its share of what runs once a step.
  return {r.step_time_s * static_cast<double>(s.microbatches), after};
}

}  // namespace

TEST_CASE("polish's account of a training step, overlap included, equals the evaluator's") {
  const std::vector<ir::Graph> graphs = {t::mlp2(8, 1024, 4096, 1024), t::transformer_block(),
                                         t::conv_net(64), t::random_dag(1, 24), t::ffn(32)};
  const std::vector<Cluster> clusters = {Cluster::flat(8), Cluster::mesh({2, 4})};
  const std::vector<Setting> settings = {{0, 1}, {2, 1}, {3, 1}, {2, 2}, {3, 4}};
  int hidden = 0, repeated = 0, cases = 0;
  for (const ir::Graph& g : graphs)
    for (const Cluster& c : clusters)
      for (const Setting s : settings) {
        CAPTURE(g.name());
        CAPTURE(c.name());
        CAPTURE(s.zero);
        CAPTURE(s.microbatches);
        const auto [polished, ev] = polish_and_evaluate(g, c, s);
        CHECK(polished == doctest::Approx(ev.step_time_s).epsilon(1e-9));
        ++cases;
        // The cases where overlap hides part of the parameter collectives,
        // once a step and repeated in each microbatch: those the additive
        // account would get wrong.
        if (ev.step_time_s < (ev.compute_s + ev.communication_s) * (1 - 1e-6)) ++hidden;
        if (ev.parameter_comm_repeated_s > 0) ++repeated;
      }
  CHECK(cases == 50);
  CHECK(hidden >= 15);
  CHECK(repeated >= 5);
}
