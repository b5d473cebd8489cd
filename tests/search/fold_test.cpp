// SPDX-License-Identifier: Apache-2.0
// Folding of repeated blocks: detection, verification of the wiring, and
// the promise that makes it safe — the folded search's bookkeeping and its
// extrapolated memory equal the independent evaluation of the unfolded plan
// on the whole graph, and the plan is as good as searching the whole graph;
// training settings compared on the folds choose as the unfolded reference.
#include <doctest/doctest.h>

#include <array>
#include <cmath>
#include <optional>
#include <set>
#include <tuple>

#include "recsearch/error.hpp"
#include "recsearch/gen/generate.hpp"
#include "recsearch/plan/evaluator.hpp"
#include "recsearch/search/search.hpp"
#include "search/fold.hpp"
#include "support/gen_specs.hpp"
#include "support/graph_factories.hpp"
#include "support/reduced.hpp"
#include "support/search_options.hpp"

using namespace recsearch;
namespace t = recsearch::testing;

namespace {

search::SearchResult run(const ir::Graph& g, const Cluster& c, Mode mode, bool fold) {
  const auto spaces = algebra::build_op_spaces(g);
  search::SearchOptions o = testing::operator_level_options();
  o.mode = mode;
  o.fold_repeats = fold;
  return search::run(g, spaces, c, o);
}

gen::ModelSpec gpt(std::int64_t layers) { return testing::small_gpt(layers); }

}  // namespace

TEST_CASE("a transformer stack is found to repeat its layer") {
  const ir::Graph g = t::transformer_stack(12, 8, 256, 512, 8);
  const auto rep = search::detail::find_repetition(g, 8);
  REQUIRE(rep.has_value());
  CHECK(rep->period == g.num_operators() / 12);
  // Layer 0 reads a graph input where the others read an activation, so
  // the repeating phase may start one operator in: 11 or 12 blocks.
  CHECK(rep->repeats >= 11);

  const ir::Graph big = gen::build_graph(gpt(20));
  const auto r2 = search::detail::find_repetition(big, 8);
  REQUIRE(r2.has_value());
  CHECK(r2->period == 33);
  // Twenty layers, or nineteen if the phase starts inside the first one.
  CHECK(r2->repeats >= 19);
}

TEST_CASE("graphs without a long enough repetition are not folded") {
  CHECK_FALSE(search::detail::find_repetition(t::transformer_stack(4), 8).has_value());
  CHECK_FALSE(search::detail::find_repetition(t::random_dag(3, 300), 8).has_value());
  CHECK_FALSE(
      search::detail::find_repetition(t::mlp2(64, 512, 512, 512, ir::DType::F32), 8).has_value());
}

TEST_CASE("a block feeding past its successor ends the repetition there") {
  // Layer 5's output also feeds an operator after the stack: blocks up to
  // 5 may fold, later ones not with it.
  ir::Graph g = gen::build_graph(gpt(16));
  ir::Graph h(g.name());
  for (const auto& x : g.tensors())
    h.add_tensor(x.name, x.shape, x.dtype,
                 x.kind == ir::TensorKind::Activation ? ir::TensorKind::Input : x.kind);
  for (const auto& op : g.operators()) h.add_operator(op);
  const auto skip = *h.find_tensor("h5.res2");
  const auto out = h.add_tensor("skip_out", h.tensor(skip).shape, h.tensor(skip).dtype);
  t::add_op(h, "skip", "GeLU", {"h5.res2"}, {"skip_out"});
  (void)out;
  h.finalize();
  const auto rep = search::detail::find_repetition(h, 3);
  REQUIRE(rep.has_value());
  const std::size_t producer = h.tensor(skip).producer;
  const std::size_t end = rep->start + rep->period * rep->repeats;
  // The producer is either in the last folded block or outside the run.
  CHECK((producer >= end || producer < rep->start ||
         (producer - rep->start) / rep->period == rep->repeats - 1));
  // Whatever was folded, the bookkeeping still equals the full evaluation.
  const auto res = run(h, Cluster::flat(8), Mode::Train, true);
  CHECK(res.bookkept_step_time_s == doctest::Approx(res.eval.summary.step_time_s).epsilon(1e-9));
}

TEST_CASE("folded search: bookkeeping and extrapolated memory equal the full evaluation") {
  const ir::Graph g = gen::build_graph(gpt(24));
  const auto spaces = algebra::build_op_spaces(g);
  const auto rep = search::detail::find_repetition(g, 8);
  REQUIRE(rep.has_value());
  for (const Cluster& c : {Cluster::flat(8), Cluster::mesh({4, 8}), Cluster::flat(12)}) {
    for (const Mode mode : {Mode::Train, Mode::Infer}) {
      CAPTURE(c.num_devices());
      CAPTURE(mode == Mode::Train);
      const auto res = run(g, c, mode, true);
      CHECK(res.fold_repeats == rep->repeats);
      CHECK(res.bookkept_step_time_s ==
            doctest::Approx(res.eval.summary.step_time_s).epsilon(1e-9));

      // The 3- and 4-copy folds of the plan extrapolate to the full evaluation.
      const auto f3 = search::detail::fold(g, spaces, *rep, 3);
      const auto f4 = search::detail::fold(g, spaces, *rep, 4);
      plan::Plan p3 = res.plan;
      p3.cuts.resize(f3.graph.num_operators());
      for (std::size_t o = 0; o < g.num_operators(); ++o)
        p3.cuts[search::detail::folded_op(*rep, 3, o)] = res.plan.cuts[o];
      const plan::Plan p4 = search::detail::refold(p3, *rep, 4, g.num_operators());
      const CostParams cost = testing::operator_level_options().cost;
      const auto s3 = plan::evaluate(f3.graph, f3.spaces, c, p3, cost).summary;
      const auto s4 = plan::evaluate(f4.graph, f4.spaces, c, p4, cost).summary;
      const double extra = static_cast<double>(rep->repeats) - 3;
      CHECK(s3.step_time_s + extra * (s4.step_time_s - s3.step_time_s) ==
            doctest::Approx(res.eval.summary.step_time_s).epsilon(1e-9));
      CHECK(s3.parameter_bytes + extra * (s4.parameter_bytes - s3.parameter_bytes) ==
            doctest::Approx(res.eval.summary.parameter_bytes).epsilon(1e-9));
      // And the unfolded plan is the 3-fold's plan copied out.
      CHECK(search::detail::unfold(p3, *rep, g.num_operators()).cuts == res.plan.cuts);
      // Every copies-fold's op has the decisions of the full ops it stands for.
      for (std::size_t copies = 3; copies <= 6; ++copies) {
        const plan::Plan pk = search::detail::refold(p3, *rep, copies, g.num_operators());
        for (std::size_t o = 0; o < g.num_operators(); ++o)
          CHECK(pk.cuts[search::detail::folded_op(*rep, copies, o)] == res.plan.cuts[o]);
      }
    }
  }
}

TEST_CASE("folding costs no plan quality on deep stacks") {
  const std::array<std::int64_t, 2> depths{12, 24};
  const std::array<Cluster, 3> clusters{Cluster::flat(8), Cluster::mesh({4, 8}), Cluster::flat(64)};
  for (std::size_t li = 0; li < depths.size(); ++li) {
    const std::int64_t layers = depths[li];
    const ir::Graph g = gen::build_graph(gpt(layers));
    for (std::size_t ci = 0; ci < clusters.size(); ++ci) {
      if (!testing::keep_pair(li, ci)) continue;
      const Cluster& c = clusters[ci];
      for (const Mode mode : {Mode::Train, Mode::Infer}) {
        CAPTURE(layers);
        CAPTURE(c.num_devices());
        const double folded = run(g, c, mode, true).eval.summary.step_time_s;
        const double whole = run(g, c, mode, false).eval.summary.step_time_s;
        MESSAGE("folded/whole = " << folded / whole);
        CHECK(folded <= whole * 1.01);
      }
    }
  }
}

TEST_CASE("a summary-only evaluation has the full evaluation's summary") {
  const ir::Graph g = gen::build_graph(gpt(3));
  const auto spaces = algebra::build_op_spaces(g);
  for (const Cluster& c : {Cluster::flat(8), Cluster::mesh({2, 3}), Cluster::mesh({4, 8})}) {
    for (const Mode mode : {Mode::Train, Mode::Infer}) {
      search::SearchOptions o = testing::operator_level_options();
      o.mode = mode;
      const auto res = search::run(g, spaces, c, o);
      const auto full = plan::evaluate(g, spaces, c, res.plan, o.cost, plan::EvalDetail::Full);
      const auto brief = plan::evaluate(g, spaces, c, res.plan, o.cost, plan::EvalDetail::Summary);
      CHECK(brief.summary.step_time_s == doctest::Approx(full.summary.step_time_s).epsilon(1e-12));
      CHECK(brief.summary.communication_s ==
            doctest::Approx(full.summary.communication_s).epsilon(1e-12));
      CHECK(brief.summary.memory_per_device_bytes == full.summary.memory_per_device_bytes);
      CHECK(brief.strategies.empty());
      CHECK(brief.events.empty());
      CHECK(brief.tensors.empty());
      CHECK(full.strategies.size() == g.num_operators());
      REQUIRE(brief.op_costs.size() == full.op_costs.size());
      for (std::size_t i = 0; i < full.op_costs.size(); ++i)
        CHECK(brief.op_costs[i].communication_s ==
              doctest::Approx(full.op_costs[i].communication_s).epsilon(1e-12));
      // The search gives the same plan when it only summarizes.
      o.detailed_evaluation = false;
      const auto res2 = search::run(g, spaces, c, o);
      CHECK(res2.plan.cuts == res.plan.cuts);
      CHECK(res2.eval.strategies.empty());
    }
  }
}

TEST_CASE("progress reports every cut pass of every memory rung, in order") {
  const ir::Graph g = gen::build_graph(gpt(10));
  const auto spaces = algebra::build_op_spaces(g);
  for (const bool fold : {true, false}) {
    search::SearchOptions o = testing::operator_level_options();
    o.fold_repeats = fold;
    std::vector<std::pair<int, std::size_t>> seen;
    o.on_progress = [&](int rung, std::size_t pass, std::size_t passes) {
      CHECK(passes == 5);  // 32 devices: five cuts of 2
      seen.emplace_back(rung, pass);
    };
    const auto res = search::run(g, spaces, Cluster::flat(32), o);
    REQUIRE(seen.size() == 5 * static_cast<std::size_t>(res.memory_rungs + 1));
    for (std::size_t i = 0; i < seen.size(); ++i) {
      CHECK(seen[i].first == static_cast<int>(i / 5));
      CHECK(seen[i].second == i % 5);
    }
  }
}

// The training settings are compared on the folds (SearchOptions::
// fold_settings) and only the fastest is unfolded: where the fold is exact,
// the choice and the reported step time and memory are those of the
// reference that unfolds and evaluates every setting. The budgets run from
// none to a quarter of the free plan's memory: no, selective and full
// recomputation win in turn, and the tightest needs two microbatches and
// ZeRO 1. Polish is off, as it is on the large graphs the folded comparison
// is for (it refines unfolded plans).
TEST_CASE("training settings compared on the folds choose as the unfolded comparison does") {
  gen::ModelSpec m = gpt(10);
  m.heads = 4;
  m.batch = 32;
  const ir::Graph g = gen::build_graph(m);
  REQUIRE(search::detail::find_repetition(g, 8).has_value());
  const auto spaces = algebra::build_op_spaces(g);
  // The reduced run under the sanitizers keeps the flat cluster.
  const std::size_t n_clusters = testing::reduced_run() ? 1 : 2;
  const std::array<Cluster, 2> clusters{Cluster::flat(8), Cluster::mesh({2, 4})};
  for (std::size_t ci = 0; ci < n_clusters; ++ci) {
    const Cluster& c = clusters[ci];
    search::SearchOptions o;
    o.effort = search::Effort::Fast;
    const double free_mem = search::run(g, spaces, c, o).eval.summary.memory_per_device_bytes;
    std::set<std::tuple<int, int, std::int64_t>> chosen;
    for (const double f : {0.0, 0.7, 0.35, 0.25}) {
      CAPTURE(c.num_devices());
      CAPTURE(f);
      o.cost.memory_budget_bytes = f * free_mem;
      search::SearchOptions ref = o;
      ref.fold_settings = false;
      const auto folded = testing::search_or_no_fit(g, spaces, c, o);
      const auto unfolded = testing::search_or_no_fit(g, spaces, c, ref);
      REQUIRE(folded.has_value() == unfolded.has_value());
      if (!folded) continue;
      const plan::Training& a = folded->plan.training;
      const plan::Training& b = unfolded->plan.training;
      CHECK(a.recompute == b.recompute);
      CHECK(a.zero_stage == b.zero_stage);
      CHECK(a.microbatches == b.microbatches);
      CHECK(a.per_op == b.per_op);
      CHECK(folded->plan.cuts == unfolded->plan.cuts);
      CHECK(folded->eval.summary.step_time_s == unfolded->eval.summary.step_time_s);
      CHECK(folded->eval.summary.memory_per_device_bytes ==
            unfolded->eval.summary.memory_per_device_bytes);
      CHECK(folded->memory_rungs == unfolded->memory_rungs);
      chosen.insert({static_cast<int>(a.recompute), a.zero_stage, a.microbatches});
    }
    // The budgets reach beyond the cheapest setting.
    CHECK(chosen.size() >= 3);
  }
}
