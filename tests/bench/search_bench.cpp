// SPDX-License-Identifier: Apache-2.0
// `meson benchmark`: time of building operator spaces and of the rec search
// on large graphs (a stacked transformer and a random DAG) over 1,024
// devices, and how it grows with the graph (ratios near 2 per doubling mean
// near-linear work). Prints one line per run; not a test: it asserts only
// that the plan it times is the one the evaluator accepts.
#include <chrono>
#include <cstdio>
#include <string>

#include "recsearch/search/search.hpp"
#include "support/graph_factories.hpp"

using namespace recsearch;

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void bench(const ir::Graph& g, const Cluster& c, bool fold = true) {
  auto t0 = std::chrono::steady_clock::now();
  const auto spaces = algebra::build_op_spaces(g);
  const double t_spaces = seconds_since(t0);
  search::SearchOptions o;
  // Time the search itself: a budget no plan exceeds, so the memory ladder
  // never climbs (each rung would be one more search of the same cost).
  o.cost.memory_budget_bytes = 1e30;
  // Repeated blocks are folded by default; `whole` times the search of
  // every operator, the cost on graphs that do not repeat.
  o.fold_repeats = fold;
  const auto r = search::run(g, spaces, c, o);
  // The search time includes the independent evaluation of the plan.
  t0 = std::chrono::steady_clock::now();
  const auto ev = plan::evaluate(g, spaces, c, r.plan, o.cost);
  const double t_eval = seconds_since(t0);
  std::printf(
      "%-10s %9zu ops  %-22s %-6s spaces %7.3f s  search+eval %7.3f s  (eval %6.3f s)  "
      "step %.4g s\n",
      g.name().c_str(), g.num_operators(), c.name().c_str(),
      r.fold_repeats > 0 ? "folded" : "whole", t_spaces, r.search_time_s, t_eval,
      ev.summary.step_time_s);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  const Cluster flat = Cluster::flat(1024);
  const Cluster mesh = Cluster::mesh({128, 8});
  // 100,000 operators over 1,024 devices, then doublings for the growth.
  const int layers_100k = 100'000 / 23 + 1;
  using recsearch::testing::transformer_stack;
  bench(transformer_stack(layers_100k), flat);
  bench(transformer_stack(layers_100k), flat, /*fold=*/false);
  bench(transformer_stack(layers_100k), mesh);
  bench(recsearch::testing::random_dag(1, 100'000), flat);
  if (quick) return 0;
  for (int layers : {layers_100k / 4, layers_100k / 2, layers_100k, layers_100k * 2})
    bench(transformer_stack(layers), mesh, /*fold=*/false);
  // Growth in devices: a quarter of the graph on 8 ... 2^20 devices.
  for (std::int64_t n : {8, 64, 1024, 1 << 14, 1 << 20})
    bench(transformer_stack(layers_100k / 4), Cluster::flat(n), /*fold=*/false);
  return 0;
}
