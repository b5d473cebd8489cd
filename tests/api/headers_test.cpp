// SPDX-License-Identifier: Apache-2.0
// The public headers are self-contained, pull in no third-party library, and
// the umbrella header's example works as written.
#include "recsearch/fwd.hpp"
#include "recsearch/recsearch.hpp"

#include <doctest/doctest.h>

#include "support/graph_factories.hpp"

#ifdef NLOHMANN_JSON_VERSION_MAJOR
#error "a public header included nlohmann_json"
#endif
#ifdef TBB_VERSION_MAJOR
#error "a public header included oneTBB"
#endif
#ifdef BOOST_VERSION
#error "a public header included Boost"
#endif

TEST_CASE("umbrella example: graph -> spaces -> search -> plan JSON -> evaluate") {
  using namespace recsearch;
  const ir::Graph graph = recsearch::testing::ffn();
  const auto spaces = algebra::build_op_spaces(graph);
  const Cluster cluster = Cluster::mesh({2, 4});
  search::SearchOptions opts;
  const auto result = search::run(graph, spaces, cluster, opts);
  const std::string json = io::plan_to_json(graph, spaces, cluster, result.plan, result.eval);
  // The plan read back means what the search meant.
  const plan::Plan back = io::parse_plan(json, "plan.json", graph, spaces, cluster.cuts());
  CHECK(back.cuts == result.plan.cuts);
  const auto ev = plan::evaluate(graph, spaces, cluster, back, opts.cost);
  CHECK(ev.summary.step_time_s == doctest::Approx(result.eval.summary.step_time_s).epsilon(1e-12));
  CHECK(std::string(kVersion) == "0.1.0");
}
