// search::run: picks the algorithm, enforces the memory budget with a
// ladder of memory weights (raise the price of a byte until the plan fits),
// and hands every plan to the independent evaluator.
#include "recsearch/search/search.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>

#include "recsearch/error.hpp"
#include "search/common.hpp"

namespace recsearch::search {

std::string_view algorithm_name(Algorithm a) noexcept {
  switch (a) {
    case Algorithm::Rec: return "rec";
    case Algorithm::DataParallel: return "data-parallel";
    case Algorithm::Exhaustive: return "exhaustive";
  }
  return "?";
}

std::optional<Algorithm> parse_algorithm(std::string_view s) noexcept {
  for (Algorithm a : {Algorithm::Rec, Algorithm::DataParallel, Algorithm::Exhaustive})
    if (algorithm_name(a) == s) return a;
  return std::nullopt;
}

namespace {

constexpr int kLadderRungs = 24;  // lambda grows 4x a rung: 4^24 ~ 3e14

std::string gib(double bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
  return buf;
}

}  // namespace

SearchResult run(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                 const Cluster& cluster, const SearchOptions& opts) {
  const auto start = std::chrono::steady_clock::now();
  if (spaces.size() != g.num_operators())
    throw Error(Errc::kUsage, "search::run: one OpSpace per operator is required");
  SearchResult res;
  plan::Plan& p = res.plan;
  p.graph_name = g.name();
  p.algorithm = std::string(algorithm_name(opts.algorithm));
  p.mode = opts.mode;
  p.mesh = cluster.cuts();
  const double budget = detail::memory_budget(cluster, opts);

  auto evaluate = [&](const plan::Plan& plan) {
    plan::check_plan(g, spaces, plan);
    return plan::evaluate(g, spaces, cluster, plan, opts.cost);
  };

  switch (opts.algorithm) {
    case Algorithm::Rec: {
      double best_mem = std::numeric_limits<double>::infinity();
      // Price of one byte of per-device memory, in seconds: start at the
      // time to send that byte over the slowest link and climb.
      double slowest = std::numeric_limits<double>::infinity();
      for (const Cut& c : p.mesh) slowest = std::min(slowest, c.bandwidth_Bps);
      const double base = std::isfinite(slowest) ? 1.0 / slowest : 1e-11;
      for (int rung = 0; rung <= kLadderRungs; ++rung) {
        const double lambda = rung == 0 ? 0.0 : base * std::pow(4.0, rung - 1);
        plan::Plan trial = p;
        const double bookkept = detail::rec_search(g, spaces, cluster, opts, lambda, trial);
        plan::Evaluation ev = evaluate(trial);
        best_mem = std::min(best_mem, ev.summary.memory_per_device_bytes);
        if (ev.summary.memory_per_device_bytes <= budget) {
          p = std::move(trial);
          res.eval = std::move(ev);
          res.bookkept_step_time_s = bookkept;
          res.memory_rungs = rung;
          break;
        }
        if (rung == kLadderRungs)
          throw Error(Errc::kNoFit, "no plan fits the memory budget of " + gib(budget) +
                                        " per device on " + std::to_string(cluster.num_devices()) +
                                        " devices; the smallest found needs " + gib(best_mem));
      }
      break;
    }
    case Algorithm::DataParallel: {
      detail::data_parallel(g, spaces, cluster, p);
      res.eval = evaluate(p);
      if (res.eval.summary.memory_per_device_bytes > budget)
        throw Error(Errc::kNoFit, "the data-parallel plan needs " +
                                      gib(res.eval.summary.memory_per_device_bytes) +
                                      " per device, over the budget of " + gib(budget));
      break;
    }
    case Algorithm::Exhaustive: {
      if (g.num_operators() > opts.exhaustive_max_operators)
        throw Error(Errc::kUsage, "exhaustive search is limited to " +
                                      std::to_string(opts.exhaustive_max_operators) +
                                      " operators; the graph has " +
                                      std::to_string(g.num_operators()));
      // Start from the best feasible heuristic plan as the incumbent.
      SearchOptions rec_opts = opts;
      rec_opts.algorithm = Algorithm::Rec;
      plan::Plan incumbent = p;
      bool have = false;
      try {
        incumbent = run(g, spaces, cluster, rec_opts).plan;
        have = true;
      } catch (const Error& e) {
        if (e.code() != Errc::kNoFit) throw;
      }
      const auto ex = detail::exhaustive(g, spaces, cluster, opts, budget, incumbent, have);
      res.proven_optimal = ex.proven;
      res.bookkept_step_time_s = ex.step_time_s;
      if (!ex.found)
        throw Error(Errc::kNoFit, "no plan fits the memory budget of " + gib(budget) +
                                      " per device (exhaustive search)");
      incumbent.algorithm = p.algorithm;
      p = std::move(incumbent);
      res.eval = evaluate(p);
      break;
    }
  }
  res.search_time_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  res.eval.summary.search_time_s = res.search_time_s;
  return res;
}

}  // namespace recsearch::search
