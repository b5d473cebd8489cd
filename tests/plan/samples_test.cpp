// SPDX-License-Identifier: Apache-2.0
// The plan module on real operator spaces: the sample graphs of data/graphs
// with spaces from algebra::build_op_spaces, under random legal plans.
//
// Exact numbers are checked in evaluator_test.cpp on hand-written spaces;
// here the checks are the invariants every evaluation must satisfy whatever
// the graph (totals add up, shardings divide their tensors, replicated plans
// cost compute only, results are deterministic), so that all operator kinds
// go through check_plan and evaluate at least once.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "fixtures.hpp"
#include "recsearch/io/json_io.hpp"
#include "recsearch/plan/evaluator.hpp"

using namespace plan_test;
using plan::kReplicated;

namespace {

std::string data_path(const std::string& rel) {
  const char* dir = std::getenv("RECSEARCH_DATA");
  return std::string(dir != nullptr ? dir : "data") + "/" + rel;
}

// A legal plan picked at random: on every axis each operator takes
// replication or one loop that can_cut allows (and `allowed` permits);
// pinned operators take their strategy's cuts.
plan::Plan random_plan(const ir::Graph& g, const std::vector<OpSpace>& spaces,
                       const std::vector<Cut>& mesh, Mode mode, std::uint64_t seed) {
  auto next = [&seed] {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    return seed >> 33;
  };
  plan::Plan p = make_plan(mesh, {}, mode);
  for (ir::OpId o = 0; o < g.num_operators(); ++o) {
    const auto& node = g.op(o);
    const auto& s = spaces[o];
    if (node.strategy) {
      p.cuts.push_back(plan::assign_cuts(g, o, s, *node.strategy, mesh));
      continue;
    }
    std::vector<std::int64_t> splits(s.loops.size(), 1);
    std::vector<std::int16_t> row;
    for (const Cut& c : mesh) {
      std::vector<int> options = {kReplicated};
      for (int l = 0; l < static_cast<int>(s.loops.size()); ++l) {
        bool allowed = !node.allowed;
        if (node.allowed) {
          for (const auto& n : *node.allowed) allowed = allowed || n == s.loops[l].name;
        }
        if (allowed && algebra::can_cut(g, node, s, splits, l, c.size)) options.push_back(l);
      }
      const int pick = options[next() % options.size()];
      if (pick != kReplicated) splits[pick] *= c.size;
      row.push_back(static_cast<std::int16_t>(pick));
    }
    p.cuts.push_back(std::move(row));
  }
  return p;
}

void check_invariants(const ir::Graph& g, const std::vector<OpSpace>& spaces, const plan::Plan& p,
                      const plan::Evaluation& ev) {
  REQUIRE(ev.op_costs.size() == g.num_operators());
  REQUIRE(ev.strategies.size() == g.num_operators());
  REQUIRE(ev.tensors.size() == g.num_tensors());

  double compute = 0, comm_ops = 0, comm_events = 0;
  for (const auto& c : ev.op_costs) {
    CHECK(std::isfinite(c.compute_s));
    CHECK(c.compute_s >= 0);
    compute += c.compute_s;
    comm_ops += c.communication_s;
  }
  for (std::size_t i = 0; i < ev.events.size(); ++i) {
    const auto& e = ev.events[i];
    CHECK(e.bytes > 0);
    CHECK(e.seconds > 0);
    CHECK(e.axis < p.mesh.size());
    comm_events += e.seconds;
    if (p.mode == Mode::Infer) CHECK(e.phase == cost::Phase::Forward);
    if (e.reason == plan::CommReason::Layout) {
      CHECK(e.to != ir::kNone);
    } else {
      CHECK(e.to == ir::kNone);
    }
    if (i > 0) {
      const auto& prev = ev.events[i - 1];
      const bool ordered = prev.axis < e.axis || (prev.axis == e.axis && prev.reason <= e.reason);
      CHECK(ordered);
    }
  }
  CHECK(ev.summary.compute_s == doctest::Approx(compute));
  CHECK(ev.summary.communication_s == doctest::Approx(comm_events));
  CHECK(comm_ops == doctest::Approx(comm_events));
  // Overlap hides part of the communication, never more than all of it.
  CHECK(ev.summary.exposed_communication_s >= 0);
  CHECK(ev.summary.exposed_communication_s <= comm_events * (1 + 1e-12));
  CHECK(ev.summary.step_time_s == doctest::Approx(compute + ev.summary.exposed_communication_s));
  CHECK(ev.summary.memory_per_device_bytes ==
        doctest::Approx(ev.summary.parameter_bytes + ev.summary.activation_bytes));

  for (ir::OpId o = 0; o < g.num_operators(); ++o) {
    CHECK(ev.strategies[o] == plan::strategy_of(spaces[o], p.mesh, p.cuts[o]));
  }
  for (ir::TensorId t = 0; t < g.num_tensors(); ++t) {
    const auto& shape = g.tensor(t).shape;
    const auto& sh = ev.tensors[t];
    REQUIRE(sh.dims.size() == shape.size());
    for (std::size_t d = 0; d < shape.size(); ++d) {
      std::int64_t ways = 1;
      for (std::size_t i = 0; i < sh.dims[d].size(); ++i) {
        if (i > 0) CHECK(sh.dims[d][i - 1] < sh.dims[d][i]);
        ways *= p.mesh[sh.dims[d][i]].size;
      }
      CHECK(shape[d] % ways == 0);
    }
  }
}

}  // namespace

TEST_CASE("algebra spaces give the hand-computed MLP costs") {
  // Same plan as the column-then-row test of evaluator_test.cpp, with the
  // algebra's MatMul spaces: one all-reduce of y (512 bytes) at the end.
  Mlp m(8);
  const auto spaces = algebra::build_op_spaces(m.g);
  const int j = spaces[0].find_loop("j");
  const int k = spaces[1].find_loop("k");
  REQUIRE(j >= 0);
  REQUIRE(k >= 0);
  const auto p =
      make_plan({axis("c0", 2)}, {{static_cast<std::int16_t>(j)}, {static_cast<std::int16_t>(k)}});
  plan::check_plan(m.g, spaces, p);
  const auto ev = plan::evaluate(m.g, spaces, test_cluster(), p, {});
  REQUIRE(ev.events.size() == 1);
  CHECK(ev.events[0].reason == plan::CommReason::Output);
  CHECK(ev.events[0].bytes == doctest::Approx(512));
  CHECK(ev.summary.parameter_bytes == doctest::Approx(4 * 2048));
  CHECK(ev.summary.activation_bytes == doctest::Approx(1024));  // x whole, h halved
  CHECK(spaces[0].flops == doctest::Approx(2.0 * 8 * 16 * 32));
  CHECK(ev.summary.compute_s == doctest::Approx(2 * 3 * std::max(4096 / 50e12, 2048 / 1000e9)));
}

TEST_CASE("sample graphs under random legal plans") {
  const std::vector<std::string> files = {"graphs/ffn.json",
                                          "graphs/gpt2_block.json",
                                          "graphs/bert_large.json",
                                          "graphs/resnet50.json",
                                          "graphs/tiny/convnet.json",
                                          "graphs/tiny/embedding.json",
                                          "graphs/tiny/wide_matmul.json",
                                          "graphs/tiny/mlp_huge_weights.json"};
  const std::vector<std::vector<Cut>> meshes = {
      {axis("c0", 2, 50e9, 5e-6), axis("c1", 2, 450e9, 2e-6), axis("c2", 2, 450e9, 2e-6)},
      {axis("c0", 3), axis("c1", 2)},
      {axis("c0", 2), axis("c1", 2), axis("c2", 2), axis("c3", 2), axis("c4", 2)},
  };
  const auto cl = test_cluster();
  for (const auto& file : files) {
    CAPTURE(file);
    const ir::Graph g = io::read_graph_file(data_path(file));
    const auto spaces = algebra::build_op_spaces(g);
    for (std::size_t mi = 0; mi < meshes.size(); ++mi) {
      CAPTURE(mi);
      const auto& mesh = meshes[mi];
      for (const Mode mode : {Mode::Train, Mode::Infer}) {
        // Replicated: compute only, and the memory of the whole graph.
        const auto rep =
            make_plan(mesh,
                      std::vector<std::vector<std::int16_t>>(
                          g.num_operators(), std::vector<std::int16_t>(mesh.size(), kReplicated)),
                      mode);
        bool pinned = false;
        for (const auto& op : g.operators()) pinned = pinned || op.strategy.has_value();
        if (!pinned) {
          plan::check_plan(g, spaces, rep);
          const auto ev = plan::evaluate(g, spaces, cl, rep, {});
          check_invariants(g, spaces, rep, ev);
          CHECK(ev.events.empty());
          if (mode == Mode::Train) {
            // Adam state: 16 bytes per element (f16: mixed precision; f32:
            // weight, gradient, m and v); activations whole as the saved
            // table keeps them.
            const auto rules = plan::memory_rules(g, spaces, plan::Recompute::None);
            double params = 0, acts = 0;
            for (ir::TensorId t = 0; t < g.num_tensors(); ++t) {
              const ir::Tensor& x = g.tensor(t);
              if (x.kind == ir::TensorKind::Parameter) params += ir::num_elements(x.shape) * 16.0;
              else acts += x.bytes() * rules.saved[t];
            }
            CHECK(ev.summary.parameter_bytes == doctest::Approx(params));
            CHECK(ev.summary.activation_bytes == doctest::Approx(acts));
          }
        }

        std::size_t random_events = 0;
        for (std::uint64_t seed = 1; seed <= 3; ++seed) {
          CAPTURE(seed);
          const auto p = random_plan(g, spaces, mesh, mode, seed * 7919 + mi);
          plan::check_plan(g, spaces, p);
          const auto ev = plan::evaluate(g, spaces, cl, p, {});
          check_invariants(g, spaces, p, ev);
          // Without overlap every collective is on the critical path.
          CostParams serial;
          serial.overlap = false;
          const auto ser = plan::evaluate(g, spaces, cl, p, serial);
          CHECK(ser.summary.step_time_s ==
                doctest::Approx(ser.summary.compute_s + ser.summary.communication_s));
          CHECK(ser.summary.communication_s == doctest::Approx(ev.summary.communication_s));
          // Deterministic: a second evaluation is identical.
          const auto again = plan::evaluate(g, spaces, cl, p, {});
          REQUIRE(again.events.size() == ev.events.size());
          for (std::size_t i = 0; i < ev.events.size(); ++i) {
            CHECK(again.events[i].tensor == ev.events[i].tensor);
            CHECK(again.events[i].to == ev.events[i].to);
            CHECK(again.events[i].seconds == ev.events[i].seconds);
          }
          CHECK(again.summary.step_time_s == ev.summary.step_time_s);
          random_events += ev.events.size();
        }
        // The random plans do cut: the checks above are not vacuous.
        CHECK(random_events > 0);
      }
    }
  }
}
