// SPDX-License-Identifier: Apache-2.0
// Budget monotonicity of rec on graphs where polish runs from one start
// (issue 19; docs/search.md, "Tightening"): every plan that fits a budget
// fits every looser one, so rec under a looser budget must never return a
// slower plan than under a tighter one. The cases are generated graphs
// (a small GPT, ResNet-18, a Wide-ResNet) and budgets at which rec did
// (a tighter budget, above all the one a plan itself needs, led polish to a
// faster plan that the looser search never reached); the corner suite
// (quality_corners_test.cpp) holds the small graphs, tools/zoo/budget_monotone.py
// the zoo. Each case searches with no budget that binds, then at fractions
// of that plan's memory, and at each plan's own memory (a hair over it, as
// a user reading the plan file would give), and compares every pair.
// Builds under the sanitizers (RECSEARCH_TEST_REDUCED) run every third case.
#include <doctest/doctest.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/error.hpp"
#include "recsearch/gen/generate.hpp"
#include "recsearch/search/search.hpp"
#include "support/gen_specs.hpp"
#include "support/reduced.hpp"

using namespace recsearch;

namespace {

struct Case {
  std::string name;
  gen::ModelSpec spec;
  Cluster cluster;
  std::vector<double> fractions;  // of the unconstrained plan's memory
};

gen::ModelSpec resnet(std::int64_t depth, std::int64_t channels, std::int64_t width,
                      std::int64_t batch) {
  gen::ModelSpec s;
  s.family = gen::Family::ResNet;
  s.depth = depth;
  s.channels = channels;
  s.width = width;
  s.batch = batch;
  return s;
}

// Each was not monotone before the search tightened (the fraction where it
// was first).
std::vector<Case> cases() {
  return {
      {"gpt-4 layers, 4x8", testing::small_gpt(4), Cluster::mesh({4, 8}), {0.5, 0.9}},
      {"gpt-12 layers, 2x4", testing::small_gpt(12), Cluster::mesh({2, 4}), {0.6, 0.8}},
      {"resnet-18, 8", resnet(18, 0, 0, 32), Cluster::flat(8), {0.6, 0.8}},
      {"wide-resnet-50-2, 8", resnet(50, 64, 2, 64), Cluster::flat(8), {0.6, 0.9}},
      {"wide-resnet-50-2, 4x8", resnet(50, 64, 2, 64), Cluster::mesh({4, 8}), {0.8, 0.5}},
  };
}

// rec at one training setting (no recomputation, ZeRO 0, one microbatch:
// the zoo script's), the cost model's defaults otherwise; nullopt-like
// (step 0) where nothing fits.
struct Point {
  double budget = 0;
  bool fits = false;
  double step = 0;
  double mem = 0;
};

Point rec(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces, const Cluster& c,
          double budget) {
  search::SearchOptions o;
  o.training.recompute = plan::Recompute::None;
  o.training.zero_stage = 0;
  o.training.microbatches = 1;
  o.cost.memory_budget_bytes = budget;
  Point p{budget};
  try {
    const auto r = search::run(g, spaces, c, o);
    p = {budget, true, r.eval.summary.step_time_s, r.eval.summary.memory_per_device_bytes};
  } catch (const Error& e) {
    REQUIRE(e.code() == Errc::kNoFit);
  }
  return p;
}

}  // namespace

TEST_CASE("rec is monotone in the budget, down to a plan's own memory") {
  const auto all = cases();
  for (std::size_t i = 0; i < all.size(); ++i) {
    if (!testing::keep_pair(i, 0)) continue;
    const Case& k = all[i];
    CAPTURE(k.name);
    const ir::Graph g = gen::build_graph(k.spec);
    const auto spaces = algebra::build_op_spaces(g);
    std::vector<Point> points{rec(g, spaces, k.cluster, 1e15)};
    REQUIRE(points[0].fits);
    const double free_mem = points[0].mem;
    // The plan's own memory as the budget after every budget, loosest first.
    points.push_back(rec(g, spaces, k.cluster, free_mem * (1 + 1e-9)));
    for (double f : k.fractions) {
      const Point p = rec(g, spaces, k.cluster, f * free_mem);
      points.push_back(p);
      if (p.fits) points.push_back(rec(g, spaces, k.cluster, p.mem * (1 + 1e-9)));
    }
    for (const Point& a : points)
      for (const Point& b : points) {
        if (!a.fits || !b.fits || a.budget <= b.budget) continue;
        CAPTURE(a.budget);
        CAPTURE(b.budget);
        CHECK(a.mem <= a.budget);
        // a's budget is the looser: its plan is no slower (rounding aside).
        CHECK(a.step <= b.step * (1 + 1e-9));
      }
  }
}
