// SPDX-License-Identifier: Apache-2.0
// The front door (problem.hpp, solution.hpp): a Problem from a file, from
// text and from a graph built in code; solve and evaluate agree with the
// modules below them; the answers by name match the plan; a user's cost
// model reaches every account of the step time.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include "recsearch/recsearch.hpp"

namespace {

using namespace recsearch;

std::string data_path(const std::string& rel) {
  const char* d = std::getenv("RECSEARCH_DATA");
  return std::string(d != nullptr ? d : "data") + "/" + rel;
}

bool close(double a, double b, double rel = 1e-9) {
  return std::abs(a - b) <= rel * std::max({1e-30, std::abs(a), std::abs(b)});
}

// A two-layer MLP built in code and never finalized by its author.
ir::Graph unfinished_mlp() {
  ir::Graph g("mlp");
  const auto x = g.add_tensor("x", {64, 1024}, ir::DType::F32, ir::TensorKind::Input);
  const auto w1 = g.add_tensor("w1", {1024, 4096}, ir::DType::F32, ir::TensorKind::Parameter);
  const auto h = g.add_tensor("h", {64, 4096}, ir::DType::F32, ir::TensorKind::Activation);
  const auto w2 = g.add_tensor("w2", {4096, 1024}, ir::DType::F32, ir::TensorKind::Parameter);
  const auto y = g.add_tensor("y", {64, 1024}, ir::DType::F32, ir::TensorKind::Activation);
  const auto matmul = [&](const char* name, ir::TensorId a, ir::TensorId b, ir::TensorId out) {
    ir::Operator op;
    op.name = name;
    op.type = "MatMul";
    op.inputs = {a, b};
    op.outputs = {out};
    g.add_operator(std::move(op));
  };
  matmul("fc1", x, w1, h);
  matmul("fc2", h, w2, y);
  return g;
}

// Every collective costs `factor` times the symbolic model's price.
struct ScaledCollectives : cost::CostModel {
  explicit ScaledCollectives(double f) : factor(f) {}
  double factor;
  [[nodiscard]] double collective_seconds(cost::Collective c, double bytes, const Cut& cut,
                                          const CostParams& p) const noexcept override {
    return factor * CostModel::collective_seconds(c, bytes, cut, p);
  }
};

CostParams with_model(CostParams p, double factor) {
  p.model = std::make_shared<ScaledCollectives>(factor);
  return p;
}

}  // namespace

TEST_CASE("a graph built in code needs no finalize() before it becomes a Problem") {
  const Problem problem(unfinished_mlp());
  CHECK(problem.graph().finalized());
  CHECK(problem.spaces().size() == 2);
  const Solution s = solve(problem, Cluster::flat(4));
  CHECK(s.plan().num_devices() == 4);
  CHECK(s.summary().find("GiB per device") != std::string::npos);
}

// One solve serves every check below: blocks, not SUBCASEs, since doctest
// reruns the whole case (and its search) once per SUBCASE.
TEST_CASE("solve equals the search and the writer below it") {
  const Problem problem = Problem::read(data_path("graphs/gpt2_block.json"));
  const Cluster cluster = Cluster::mesh({2, 4});
  const Solution s = solve(problem, cluster);
  const search::SearchResult direct =
      search::run(problem.graph(), problem.spaces(), cluster, problem.options());
  CHECK(s.plan().cuts == direct.plan.cuts);
  CHECK(s.evaluation().summary.step_time_s == direct.eval.summary.step_time_s);
  CHECK(s.details().search_time_s == s.evaluation().summary.search_time_s);
  CHECK(s.to_json() ==
        io::plan_to_json(problem.graph(), problem.spaces(), cluster, s.plan(), s.evaluation()));

  {
    INFO("evaluate reproduces the search's evaluation");
    const Solution again = evaluate(problem, s.plan(), cluster);
    CHECK(again.evaluation().summary.step_time_s == s.evaluation().summary.step_time_s);
    CHECK(again.evaluation().summary.memory_per_device_bytes ==
          s.evaluation().summary.memory_per_device_bytes);
    CHECK(again.details().search_time_s == 0);
  }
  {
    INFO("the plan file reads back into the same plan");
    const plan::Plan back = problem.parse_plan(s.to_json(), "plan.json", cluster);
    CHECK(back.cuts == s.plan().cuts);
    const auto saved = plan_file_cluster(s.to_json(), "plan.json");
    REQUIRE(saved.has_value());
    CHECK(saved->num_devices() == 8);
  }
  {
    INFO("answers by name follow the plan");
    for (ir::OpId o = 0; o < problem.graph().num_operators(); ++o) {
      const OpStrategy st = s.strategy(problem.graph().op(o).name);
      CHECK(st.splits == s.evaluation().strategies[o]);
      REQUIRE(st.cuts.size() == s.plan().mesh.size());
      for (std::size_t a = 0; a < st.cuts.size(); ++a) {
        const std::int16_t c = s.plan().cuts[o][a];
        CHECK(st.cuts[a] ==
              (c == plan::kReplicated ? std::string() : problem.spaces()[o].loops[c].name));
      }
    }
    for (ir::TensorId t = 0; t < problem.graph().num_tensors(); ++t) {
      const TensorPlacement tp = s.sharding(problem.graph().tensor(t).name);
      const plan::TensorSharding& ts = s.evaluation().tensors[t];
      REQUIRE(tp.dims.size() == ts.dims.size());
      for (std::size_t d = 0; d < ts.dims.size(); ++d) {
        REQUIRE(tp.dims[d].size() == ts.dims[d].size());
        for (std::size_t i = 0; i < ts.dims[d].size(); ++i)
          CHECK(tp.dims[d][i] == s.plan().mesh[ts.dims[d][i]].axis);
      }
      CHECK(tp.partial.size() == ts.partial.size());
    }
    CHECK_THROWS_AS((void)s.strategy("no such operator"), Error);
    CHECK_THROWS_AS((void)s.sharding("no such tensor"), Error);
  }
}

TEST_CASE("a Problem's copies and cost variants share one graph") {
  const Problem a = Problem::read(data_path("graphs/ffn.json"));
  const Problem b = a;  // NOLINT(performance-unnecessary-copy-initialization): the point
  CHECK(&a.graph() == &b.graph());
  CostParams cheap = a.cost();
  cheap.compute_efficiency = 1.0;
  const Problem c = a.with_cost(cheap);
  CHECK(&c.graph() == &a.graph());
  CHECK(c.cost().compute_efficiency == 1.0);
  CHECK(a.cost().compute_efficiency != 1.0);
}

TEST_CASE("errors of a Problem name its file") {
  try {
    (void)Problem::from_json(R"({"name": "g", "tensors": [], "operators": [{"name": "o"}]})",
                             "bad.json");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.file() == "bad.json");
    CHECK(!e.json_path().empty());
  }
  CHECK_THROWS_AS((void)Problem::read(data_path("graphs/no_such_file.json")), Error);
}

TEST_CASE("a user's cost model prices every account of the step time") {
  const Problem problem = Problem::read(data_path("graphs/gpt2_block.json"));
  const Cluster cluster = Cluster::mesh({2, 4});
  const Solution plain = solve(problem, cluster);
  REQUIRE(plain.evaluation().summary.communication_s > 0);

  SUBCASE("the same plan under doubled collectives: communication doubles, compute stays") {
    const Solution doubled =
        evaluate(problem, plain.plan(), cluster, with_model(problem.cost(), 2));
    CHECK(close(doubled.evaluation().summary.communication_s,
                2 * plain.evaluation().summary.communication_s));
    CHECK(close(doubled.evaluation().summary.compute_s, plain.evaluation().summary.compute_s));
  }
  for (const double factor : {2.0, 1000.0}) {
    CAPTURE(factor);
    for (const auto algo : {search::Algorithm::Rec, search::Algorithm::Exhaustive}) {
      if (algo == search::Algorithm::Exhaustive && problem.graph().num_operators() > 16) continue;
      search::SearchOptions o = problem.options();
      o.cost = with_model(o.cost, factor);
      o.algorithm = algo;
      const Solution s = solve(problem, cluster, o);
      // The search's own bookkeeping and the evaluator price alike (the
      // searches add every collective; overlap is applied to the plan).
      CHECK(close(s.details().bookkept_step_time_s,
                  s.evaluation().summary.compute_s + s.evaluation().summary.communication_s, 1e-6));
      // Never worse, under the user's model, than the plan made for the default one.
      const Solution old = evaluate(problem, plain.plan(), cluster, o.cost);
      CHECK(s.evaluation().summary.step_time_s <= old.evaluation().summary.step_time_s * 1.000001);
      if (factor == 1000.0) {
        // Collectives 1000x dearer than compute: the plan changes to one that
        // communicates less.
        CHECK(s.plan().cuts != plain.plan().cuts);
        CHECK(s.evaluation().summary.communication_s < old.evaluation().summary.communication_s);
      }
    }
  }
}
