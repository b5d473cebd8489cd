// SPDX-License-Identifier: Apache-2.0
// The pipeline search: the stage balancing DP against brute force on
// synthetic chains, and run_pipeline's plans (pinned, pinned interleaved
// and searched) on a small GPT: they fit, their figures are
// evaluate_pipeline's, and the search is never slower than the
// unpipelined plan it also weighs.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <random>

#include "recsearch/gen/generate.hpp"
#include "recsearch/plan/pipeline.hpp"
#include "recsearch/search/pipeline.hpp"
#include "recsearch/search/search.hpp"
#include "search/common.hpp"
#include "support/errors.hpp"
#include "support/gen_specs.hpp"
#include "support/search_options.hpp"

using namespace recsearch;
namespace t = recsearch::testing;

namespace {

// The least heaviest run over every way to cut w into `parts` runs that
// keeps each pinned unit (pins[i] >= 0) in its run.
double brute_force(const std::vector<double>& w, std::size_t parts,
                   const std::vector<std::int64_t>& pins = {}) {
  const std::size_t k = w.size();
  double best = std::numeric_limits<double>::infinity();
  // Bit i set: a cut after unit i (i < k - 1).
  for (std::uint32_t mask = 0; mask < (1u << (k - 1)); ++mask) {
    if (static_cast<std::size_t>(__builtin_popcount(mask)) != parts - 1) continue;
    double run = 0, heaviest = 0;
    std::int64_t stage = 0;
    bool ok = true;
    for (std::size_t i = 0; i < k; ++i) {
      run += w[i];
      if (!pins.empty() && pins[i] >= 0 && pins[i] != stage) ok = false;
      if (i + 1 == k || (mask >> i & 1u)) {
        heaviest = std::max(heaviest, run);
        run = 0;
        ++stage;
      }
    }
    if (ok) best = std::min(best, heaviest);
  }
  return best;
}

double heaviest(const std::vector<double>& w, const std::vector<std::size_t>& ends) {
  double h = 0;
  std::size_t begin = 0;
  for (const std::size_t end : ends) {
    double run = 0;
    for (std::size_t i = begin; i < end; ++i) run += w[i];
    h = std::max(h, run);
    CHECK(end > begin);
    begin = end;
  }
  CHECK(begin == w.size());
  return h;
}

gen::ModelSpec gpt(std::int64_t layers) { return testing::small_gpt(layers); }

Cluster nodes(std::int64_t n) {
  return Cluster("nodes", {Level{"node", n, 25.0, 5.0}, Level{"gpu", 2, 300.0, 2.0}},
                 DeviceSpec{312.0, 80.0, 2039.0});
}

}  // namespace

TEST_CASE("stage balancing finds the brute-force optimum on synthetic chains") {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> weight(0.1, 10.0);
  for (int trial = 0; trial < 40; ++trial) {
    const std::size_t k = 1 + static_cast<std::size_t>(trial % 11);
    std::vector<double> w(k);
    for (double& x : w) x = weight(rng);
    // A heavy head and tail, as an embedding and a loss are.
    if (trial % 3 == 0) {
      w.front() *= 5;
      w.back() *= 3;
    }
    for (std::size_t parts = 1; parts <= k; ++parts) {
      CAPTURE(k);
      CAPTURE(parts);
      const auto ends = search::balance_stages(w, parts);
      REQUIRE(ends.size() == parts);
      CHECK(heaviest(w, ends) == doctest::Approx(brute_force(w, parts)).epsilon(1e-12));
    }
  }
  // With stages pinned: the optimum among the splits that honour them, or
  // none when there is no such split.
  for (int trial = 0; trial < 40; ++trial) {
    const std::size_t k = 2 + static_cast<std::size_t>(trial % 9);
    std::vector<double> w(k);
    for (double& x : w) x = weight(rng);
    std::vector<std::int64_t> pins(k, -1);
    pins[static_cast<std::size_t>(trial) % k] = trial % 3;
    pins[k - 1 - static_cast<std::size_t>(trial) % 2] = trial % 4;
    for (std::size_t parts = 1; parts <= k; ++parts) {
      CAPTURE(trial);
      CAPTURE(parts);
      const double expect = brute_force(w, parts, pins);
      const auto ends = search::balance_stages(w, parts, pins);
      if (!std::isfinite(expect)) {
        CHECK(ends.empty());
        continue;
      }
      REQUIRE(ends.size() == parts);
      CHECK(heaviest(w, ends) == doctest::Approx(expect).epsilon(1e-12));
      std::size_t begin = 0;
      for (std::size_t r = 0; r < parts; ++r) {
        for (std::size_t i = begin; i < ends[r]; ++i)
          if (pins[i] >= 0) CHECK(pins[i] == static_cast<std::int64_t>(r));
        begin = ends[r];
      }
    }
  }
  const std::vector<double> even(12, 1.0);
  CHECK(search::balance_stages(even, 4) == std::vector<std::size_t>{3, 6, 9, 12});
  t::check_error([&] { (void)search::balance_stages(even, 13); }, Errc::kUsage, "");
  t::check_error([&] { (void)search::balance_stages(even, 0); }, Errc::kUsage, "");
}

TEST_CASE("a pinned pipeline fits, and its figures are evaluate_pipeline's") {
  const ir::Graph g = gen::build_graph(gpt(8));
  const auto spaces = algebra::build_op_spaces(g);
  const Cluster c = nodes(4);
  search::SearchOptions o;
  o.pipeline_stages = 2;
  const search::PipelineResult r = search::run_pipeline(g, spaces, c, o);
  REQUIRE(r.plan.groups == 2);
  CHECK(r.plan.num_stages() == 2);
  CHECK(r.plan.microbatches >= 2);
  CHECK(16 % r.plan.microbatches == 0);
  const auto pe = plan::evaluate_pipeline(g, spaces, c, r.plan, o.cost);
  CHECK(pe.summary.step_time_s == doctest::Approx(r.eval.summary.step_time_s).epsilon(1e-9));
  CHECK(pe.summary.memory_per_device_bytes <= 80.0 * 1024 * 1024 * 1024);
  // The stages split the layers, so each holds about half of the weights.
  CHECK(r.plan.stages[0].last > g.num_operators() / 4);
  CHECK(r.plan.stages[0].last < 3 * g.num_operators() / 4);

  // Pins it cannot honour are usage errors.
  o.pipeline_stages = 3;
  t::check_error([&] { (void)search::run_pipeline(g, spaces, c, o); }, Errc::kUsage, "",
                 "do not split the cluster's levels (node 4 x gpu 2)");
}

TEST_CASE("a pinned interleaved pipeline has v stages per group, in group order") {
  const ir::Graph g = gen::build_graph(gpt(8));
  const auto spaces = algebra::build_op_spaces(g);
  const Cluster c = nodes(4);
  search::SearchOptions o;
  o.pipeline_stages = 2;
  o.pipeline_virtual_stages = 2;
  o.training.microbatches = 4;
  const search::PipelineResult r = search::run_pipeline(g, spaces, c, o);
  REQUIRE(r.plan.num_stages() == 4);
  CHECK(r.plan.schedule == plan::Schedule::Interleaved);
  CHECK(r.plan.virtual_stages == 2);
  CHECK(r.plan.microbatches == 4);
  for (std::size_t j = 0; j < 4; ++j) CHECK(r.plan.stages[j].group == j % 2);
  const auto pe = plan::evaluate_pipeline(g, spaces, c, r.plan, o.cost);
  CHECK(pe.summary.step_time_s == doctest::Approx(r.eval.summary.step_time_s).epsilon(1e-9));
  // The interleaved bubble: (p - 1)/(v·m) of the busiest group's busy time
  // with balanced groups, so well under plain 1F1B's (p - 1)/m.
  CHECK(pe.bubble_fraction < 1.0 / 4);
}

TEST_CASE("operators pinned to a stage by the graph stay in it") {
  ir::Graph g = gen::build_graph(gpt(8));
  const ir::OpId pinned = *g.find_operator("h2.fc1");
  g.mutable_op(pinned).attrs.set("stage", std::int64_t{0});
  g.finalize();
  const auto spaces = algebra::build_op_spaces(g);
  const Cluster c = nodes(4);
  search::SearchOptions o;
  o.pipeline_stages = 4;
  const search::PipelineResult r = search::run_pipeline(g, spaces, c, o);
  REQUIRE(r.plan.num_stages() == 4);
  CHECK(r.plan.stages[0].last > pinned);
  // A plan that moves it is refused, naming the stage.
  plan::PipelinePlan moved = r.plan;
  moved.stages[0].last = pinned;
  moved.stages[1].first = pinned;
  t::check_error([&] { plan::check_pipeline(g, c, moved); }, Errc::kPlan,
                 "/pipeline/stages/1/range", "pinned to stage 0");
}

TEST_CASE("the searched pipeline is never slower than the plan without stages") {
  const ir::Graph g = gen::build_graph(gpt(16));
  const auto spaces = algebra::build_op_spaces(g);
  const Cluster c = nodes(4);
  search::SearchOptions o;
  const auto single = search::run(g, spaces, c, o);
  o.pipeline_stages = 0;
  o.pipeline_virtual_stages = 0;
  const search::PipelineResult r = search::run_pipeline(g, spaces, c, o);
  CHECK(r.eval.summary.step_time_s <= single.eval.summary.step_time_s * (1 + 1e-9));
  CHECK(r.candidates >= 2);
  // Under a budget the whole-graph plan does not meet, stages pay for
  // memory: each group holds its share of the weights.
  search::SearchOptions tight = o;
  tight.cost.memory_budget_bytes = 0.6 * single.eval.summary.memory_per_device_bytes;
  const search::PipelineResult rt = search::run_pipeline(g, spaces, c, tight);
  CHECK(rt.eval.summary.memory_per_device_bytes <= tight.cost.memory_budget_bytes);
  for (const plan::GroupReport& gr : rt.eval.groups)
    CHECK(gr.memory_bytes <= tight.cost.memory_budget_bytes);
}

TEST_CASE("a search without polish repeats itself under budgets down to its claim") {
  // The pipeline search reuses a stage's search at a lower budget where
  // SearchResult::same_choices_from_bytes says the search would repeat
  // itself: each such budget is searched here and must give the same plan.
  const ir::Graph g = gen::build_graph(gpt(8));
  const auto spaces = algebra::build_op_spaces(g);
  const Cluster c = nodes(4);
  for (const bool fold : {true, false}) {
    CAPTURE(fold);
    search::SearchOptions o;
    o.effort = search::Effort::Fast;
    o.fold_repeats = fold;
    o.fold_min_repeats = 4;
    o.training = {plan::Recompute::Selective, 1, 4};
    const auto free = search::run(g, spaces, c, o);
    const double need = free.eval.summary.memory_per_device_bytes;
    CHECK(free.same_choices_from_bytes >= need);
    CHECK(free.same_choices_from_bytes <= 80.0 * 1024 * 1024 * 1024);
    int claims = 0;
    for (const double share : {0.95, 0.8, 0.65, 0.5}) {
      CAPTURE(share);
      search::SearchOptions b = o;
      b.cost.memory_budget_bytes = share * need;
      search::SearchResult r;
      try {
        r = search::run(g, spaces, c, b);
      } catch (const Error& e) {
        CHECK(e.code() == Errc::kNoFit);
        continue;
      }
      const double claim = r.same_choices_from_bytes;
      REQUIRE(std::isfinite(claim));
      CHECK(claim >= r.eval.summary.memory_per_device_bytes);
      CHECK(claim <= b.cost.memory_budget_bytes);
      ++claims;
      for (const double at : {claim, 0.5 * (claim + b.cost.memory_budget_bytes)}) {
        search::SearchOptions lower = b;
        lower.cost.memory_budget_bytes = at;
        const auto again = search::run(g, spaces, c, lower);
        CHECK(again.plan.cuts == r.plan.cuts);
        CHECK(again.eval.summary.step_time_s == r.eval.summary.step_time_s);
        CHECK(again.memory_rungs == r.memory_rungs);
      }
    }
    CHECK(claims >= 2);
    // Polish, or settings left to the search, claim nothing.
    search::SearchOptions polished = o;
    polished.effort = search::Effort::Default;
    CHECK(std::isinf(search::run(g, spaces, c, polished).same_choices_from_bytes));
    search::SearchOptions settings = o;
    settings.training.recompute.reset();
    CHECK(std::isinf(search::run(g, spaces, c, settings).same_choices_from_bytes));
  }
}

TEST_CASE("searches sharing a ladder memo find what each finds alone") {
  // SearchOptions::ladder_memo: the pipeline search's searches of one stage
  // shape at several budgets share what each price of the folded ladder
  // gave. Each budget, searched with the memo filled by the others (tighter
  // and looser ones, in both orders), must give the plan a search without
  // the memo gives.
  const ir::Graph g = gen::build_graph(gpt(8));
  const auto spaces = algebra::build_op_spaces(g);
  const Cluster c = nodes(4);
  search::SearchOptions o;
  o.effort = search::Effort::Fast;
  o.fold_min_repeats = 4;
  o.training = {plan::Recompute::Selective, 1, 4};
  const double need = search::run(g, spaces, c, o).eval.summary.memory_per_device_bytes;
  const std::vector<double> shares{1.0, 0.8, 0.65, 0.5, 0.8, 1.0};
  search::SearchOptions shared = o;
  shared.ladder_memo = std::make_shared<search::detail::LadderMemo>();
  int fits = 0;
  std::size_t entries = 0;
  for (std::size_t i = 0; i < shares.size(); ++i) {
    const double share = shares[i];
    CAPTURE(share);
    // The budgets searched again try only prices the memo holds.
    if (i == 4) entries = shared.ladder_memo->size();
    search::SearchOptions alone = o, with = shared;
    alone.cost.memory_budget_bytes = with.cost.memory_budget_bytes = share * need;
    const auto a = testing::search_or_no_fit(g, spaces, c, alone);
    const auto b = testing::search_or_no_fit(g, spaces, c, with);
    REQUIRE(a.has_value() == b.has_value());
    if (!a) continue;
    ++fits;
    CHECK(b->plan.cuts == a->plan.cuts);
    CHECK(b->eval.summary.step_time_s == a->eval.summary.step_time_s);
    CHECK(b->memory_rungs == a->memory_rungs);
    CHECK(b->fold_repeats > 0);
  }
  CHECK(fits >= 3);
  CHECK(entries > 0);
  CHECK(shared.ladder_memo->size() == entries);
}

TEST_CASE("the searched pipeline is the same for any thread count") {
  // Stage searches of different shapes run at once (and the unpipelined
  // plan's price beside the walk): the same searches, the same plan, the
  // same count, on one thread or several, with a budget that makes groups
  // go over it and be searched again.
  const ir::Graph g = gen::build_graph(gpt(16));
  const auto spaces = algebra::build_op_spaces(g);
  const Cluster c = nodes(8);
  search::SearchOptions o;
  o.pipeline_stages = 0;
  o.pipeline_virtual_stages = 0;
  const double whole = search::run(g, spaces, c, o).eval.summary.memory_per_device_bytes;
  for (const double share : {0.0, 0.5}) {
    CAPTURE(share);
    o.cost.memory_budget_bytes = share * whole;
    o.threads = 1;
    const search::PipelineResult one = search::run_pipeline(g, spaces, c, o);
    for (const int threads : {2, 4, 0}) {
      CAPTURE(threads);
      o.threads = threads;
      const search::PipelineResult r = search::run_pipeline(g, spaces, c, o);
      CHECK(r.stage_searches == one.stage_searches);
      CHECK(r.candidates == one.candidates);
      CHECK(r.eval.summary.step_time_s == one.eval.summary.step_time_s);
      CHECK(r.eval.summary.memory_per_device_bytes == one.eval.summary.memory_per_device_bytes);
      CHECK(r.plan.groups == one.plan.groups);
      CHECK(r.plan.microbatches == one.plan.microbatches);
      REQUIRE(r.plan.stages.size() == one.plan.stages.size());
      for (std::size_t j = 0; j < r.plan.stages.size(); ++j) {
        CHECK(r.plan.stages[j].first == one.plan.stages[j].first);
        CHECK(r.plan.stages[j].last == one.plan.stages[j].last);
        CHECK(r.plan.stages[j].plan.cuts == one.plan.stages[j].plan.cuts);
        CHECK(r.plan.stages[j].plan.training.recompute ==
              one.plan.stages[j].plan.training.recompute);
      }
    }
  }
}

TEST_CASE("stages inside one node: the groups split its devices") {
  // One node of 8 devices: before the levels could be split below the
  // outermost, a single node had no pipeline at all.
  const ir::Graph g = gen::build_graph(gpt(16));
  const auto spaces = algebra::build_op_spaces(g);
  const Cluster one("one node", {Level{"node", 1, 25.0, 5.0}, Level{"gpu", 8, 300.0, 2.0}},
                    DeviceSpec{312.0, 80.0, 2039.0});
  search::SearchOptions o;
  o.pipeline_stages = 4;
  const search::PipelineResult r = search::run_pipeline(g, spaces, one, o);
  REQUIRE(r.plan.groups == 4);
  for (const plan::Stage& s : r.plan.stages) {
    std::int64_t devices = 1;
    for (const Cut& cut : s.plan.mesh) devices *= cut.size;
    CHECK(devices == 2);
  }
  const auto pe = plan::evaluate_pipeline(g, spaces, one, r.plan, o.cost);
  CHECK(pe.summary.step_time_s == doctest::Approx(r.eval.summary.step_time_s).epsilon(1e-9));
  // The walk weighs 1, 2, 4 and 8 groups (until two in a row are slower).
  o.pipeline_stages = 0;
  const search::PipelineResult walked = search::run_pipeline(g, spaces, one, o);
  CHECK(walked.candidates >= 3);
}
