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
#include "search/fold.hpp"
#include "search/polish.hpp"

namespace recsearch::search {

std::string_view algorithm_name(Algorithm a) noexcept {
  switch (a) {
    case Algorithm::Rec: return "rec";
    case Algorithm::DataParallel: return "data-parallel";
    case Algorithm::Exhaustive: return "exhaustive";
    case Algorithm::Megatron: return "megatron";
    case Algorithm::Grid: return "grid";
    case Algorithm::Ilp: return "ilp";
  }
  return "?";
}

std::optional<Algorithm> parse_algorithm(std::string_view s) noexcept {
  for (Algorithm a : {Algorithm::Rec, Algorithm::DataParallel, Algorithm::Exhaustive,
                      Algorithm::Megatron, Algorithm::Grid, Algorithm::Ilp})
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

// Extra searches that narrow the memory price once a rung fits: the first
// fitting rung's price can be up to 4x what the budget needs, and an
// over-priced byte costs communication (slicing what need not be sliced).
// The plan is not monotone in the price (each pass is a heuristic), so the
// fastest fitting plan of all the prices tried is kept, and the more are
// tried the better: 8 steps narrow the price to 4^(1/256), 0.5%, and on
// the memory-bound zoo models took rec from 7% to 2% of the ilp optimum.
// Their number falls with the cost of one search.
constexpr int kBisectSmall = 8;
constexpr int kBisectFolded = 8;  // folded searches are cheap
constexpr int kBisect = 3;
constexpr std::size_t kBisectSmallGraph = 10'000;
// When the first priced rung fits, its price is bisected down to 1/64 of
// it, not 1/4: a byte priced like one send over the slowest link can
// already be far too dear when the budget is only just short (the small
// test graphs went from 26% to 6% behind the best fitting baseline).
constexpr double kFirstRungSpan = 64;
// Past this many operators (unfolded) each search takes seconds: one step.
constexpr std::size_t kBisectLargeGraph = 100'000;

int bisect_steps(std::size_t operators) {
  if (operators <= kBisectSmallGraph) return kBisectSmall;
  return operators <= kBisectLargeGraph ? kBisect : 1;
}

// The memory ladder: prices of a byte of per-device memory in seconds,
// starting at 0, then the time to send that byte over the slowest link, then
// 4x per rung. attempt(lambda, rung) searches at that price and says whether
// the plan fits (keeping the fastest fitting one). Once a rung fits, its
// price interval is bisected (geometrically) `bisect` times. Returns the
// first fitting rung, or -1.
template <class Attempt>
int climb_ladder(const std::vector<Cut>& mesh, Attempt&& attempt, int bisect) {
  double slowest = std::numeric_limits<double>::infinity();
  for (const Cut& c : mesh) slowest = std::min(slowest, c.bandwidth_Bps);
  const double base = std::isfinite(slowest) ? 1.0 / slowest : 1e-11;
  const auto price = [&](int rung) { return rung == 0 ? 0.0 : base * std::pow(4.0, rung - 1); };
  for (int rung = 0; rung <= kLadderRungs; ++rung) {
    if (!attempt(price(rung), rung)) continue;
    if (rung > 0) {
      double lo = rung == 1 ? price(1) / kFirstRungSpan : price(rung - 1);
      double hi = price(rung);
      for (int i = 0; i < bisect; ++i) {
        const double mid = std::sqrt(lo * hi);
        if (attempt(mid, rung)) {
          hi = mid;
        } else {
          lo = mid;
        }
      }
    }
    return rung;
  }
  return -1;
}

std::string no_fit_message(double budget, const Cluster& cluster, double smallest) {
  return "no plan fits the memory budget of " + gib(budget) + " per device on " +
         std::to_string(cluster.num_devices()) + " devices; the smallest found needs " +
         gib(smallest);
}

bool may_polish(const ir::Graph& g, const Cluster& cluster, const SearchOptions& opts) {
  return opts.polish && detail::polish_applies(g, cluster.cuts().size());
}

// Polishes `start` (plan::evaluate's memory: start_mem) and takes the result
// into `res` when it fits and beats what res holds (`have`). `smallest`
// learns the polished plan's memory.
bool take_polished(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                   const Cluster& cluster, const SearchOptions& opts, double budget,
                   plan::Plan start, double start_mem, bool have, SearchResult& res,
                   double& smallest) {
  const detail::PolishResult pr =
      detail::polish(g, spaces, cluster, opts, budget, start, start_mem);
  if (!pr.changed) return false;
  plan::check_plan(g, spaces, start);
  plan::Evaluation ev = plan::evaluate(
      g, spaces, cluster, start, opts.cost,
      opts.detailed_evaluation ? plan::EvalDetail::Full : plan::EvalDetail::Summary);
  smallest = std::min(smallest, ev.summary.memory_per_device_bytes);
  if (ev.summary.memory_per_device_bytes > budget) return false;
  if (have && ev.summary.step_time_s >= res.eval.summary.step_time_s) return false;
  res.plan = std::move(start);
  res.eval = std::move(ev);
  res.bookkept_step_time_s = pr.step_time_s;
  res.polished = true;
  return true;
}

// The memory ladder of Rec on the 3-copy fold of a repeated graph. Memory
// and step time are additive over blocks (inference activations: a maximum
// over operators), so the full graph's follow exactly from the 3- and 4-copy
// folds; only the accepted plan is unfolded and evaluated in full, and its
// bookkept step time is that extrapolation.
void rec_folded(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                const Cluster& cluster, const SearchOptions& opts, const detail::Repetition& rep,
                double budget, SearchResult& res) {
  const detail::Folded f3 = detail::fold(g, spaces, rep, 3);
  const detail::Folded f4 = detail::fold(g, spaces, rep, 4);
  const double extra = static_cast<double>(rep.repeats) - 3.0;
  double best_mem = std::numeric_limits<double>::infinity();
  plan::Plan best;
  double best_step = std::numeric_limits<double>::infinity();
  bool best_expert = false;
  plan::Plan smallest;  // the least memory seen, for polish to mend
  // Extrapolated from the folds; a fitting plan is kept if it is the fastest so far.
  auto consider = [&](plan::Plan trial, bool expert) {
    plan::check_plan(f3.graph, f3.spaces, trial);
    const plan::Plan trial4 = detail::refold(trial, rep, 4, g.num_operators());
    const auto s3 = plan::evaluate(f3.graph, f3.spaces, cluster, trial, opts.cost,
                                   plan::EvalDetail::Summary).summary;
    const auto s4 = plan::evaluate(f4.graph, f4.spaces, cluster, trial4, opts.cost,
                                   plan::EvalDetail::Summary).summary;
    const double params = s3.parameter_bytes + extra * (s4.parameter_bytes - s3.parameter_bytes);
    const double acts = opts.mode == Mode::Train
                            ? s3.activation_bytes + extra * (s4.activation_bytes - s3.activation_bytes)
                            : std::max(s3.activation_bytes, s4.activation_bytes);
    const double mem = params + acts;
    // The weighted search models the edges between middle blocks by the
    // middle copy's edges to the last one, so its own account is not the
    // full graph's; the extrapolation is exact, and the tests hold it to the
    // full evaluation.
    const double step = s3.step_time_s + extra * (s4.step_time_s - s3.step_time_s);
    if (mem < best_mem) {
      best_mem = mem;
      smallest = trial;
    }
    // A hair under the budget, so that rounding in the extrapolation cannot
    // accept a plan the full evaluation finds over it.
    if (mem > budget * (1 - 1e-9)) return false;
    if (step < best_step) {
      best_step = step;
      best = std::move(trial);
      best_expert = expert;
    }
    return true;
  };
  auto attempt = [&](double lambda, int rung) {
    plan::Plan trial = res.plan;
    (void)detail::rec_search(f3.graph, f3.spaces, cluster, opts, lambda, trial, &f3.weight, rung);
    return consider(std::move(trial), false);
  };
  const int rung = climb_ladder(res.plan.mesh, attempt, kBisectFolded);
  bool expert_fits = false;
  if (opts.expert_candidates) {
    for (std::size_t split = 0; split <= res.plan.mesh.size(); ++split) {
      plan::Plan trial = res.plan;
      detail::tensor_parallel(f3.graph, f3.spaces, cluster, split, trial);
      expert_fits = consider(std::move(trial), true) || expert_fits;
    }
  }
  const bool fits = rung >= 0 || expert_fits;
  if (!fits && !may_polish(g, cluster, opts))
    throw Error(Errc::kNoFit, no_fit_message(budget, cluster, best_mem));
  plan::Plan full = detail::unfold(fits ? best : smallest, rep, g.num_operators());
  plan::check_plan(g, spaces, full);
  plan::Evaluation ev = plan::evaluate(
      g, spaces, cluster, full, opts.cost,
      opts.detailed_evaluation ? plan::EvalDetail::Full : plan::EvalDetail::Summary);
  if (fits && ev.summary.memory_per_device_bytes > budget) {
    throw Error(Errc::kInternal, "folded search: the unfolded plan needs " +
                                     gib(ev.summary.memory_per_device_bytes) +
                                     " where its folds promised at most " + gib(budget));
  }
  res.memory_rungs = rung < 0 ? kLadderRungs + 1 : rung;
  const double full_mem = ev.summary.memory_per_device_bytes;
  if (fits) {
    res.plan = full;
    res.eval = std::move(ev);
    res.bookkept_step_time_s = best_step;
    res.expert_plan = best_expert;
  } else {
    res.plan.cuts.clear();
  }
  const bool polished =
      may_polish(g, cluster, opts) &&
      take_polished(g, spaces, cluster, opts, budget, std::move(full), full_mem, fits, res, best_mem);
  if (!fits && !polished) throw Error(Errc::kNoFit, no_fit_message(budget, cluster, best_mem));
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
  const auto eval_detail =
      opts.detailed_evaluation ? plan::EvalDetail::Full : plan::EvalDetail::Summary;

  auto evaluate = [&](const plan::Plan& plan) {
    plan::check_plan(g, spaces, plan);
    return plan::evaluate(g, spaces, cluster, plan, opts.cost, eval_detail);
  };

  switch (opts.algorithm) {
    case Algorithm::Rec: {
      if (opts.fold_repeats) {
        if (const auto rep = detail::find_repetition(g, opts.fold_min_repeats)) {
          res.fold_period = rep->period;
          res.fold_repeats = rep->repeats;
          rec_folded(g, spaces, cluster, opts, *rep, budget, res);
          break;
        }
      }
      double best_mem = std::numeric_limits<double>::infinity();
      bool have = false;
      plan::Plan smallest;  // the least memory seen, for polish to mend
      auto note_memory = [&](const plan::Plan& trial, double mem) {
        if (mem >= best_mem) return;
        best_mem = mem;
        if (may_polish(g, cluster, opts)) smallest = trial;
      };
      auto attempt = [&](double lambda, int rung) {
        plan::Plan trial = p;
        const double bookkept =
            detail::rec_search(g, spaces, cluster, opts, lambda, trial, nullptr, rung);
        plan::Evaluation ev = evaluate(trial);
        note_memory(trial, ev.summary.memory_per_device_bytes);
        if (ev.summary.memory_per_device_bytes > budget) return false;
        if (!have || ev.summary.step_time_s < res.eval.summary.step_time_s) {
          have = true;
          res.plan = std::move(trial);
          res.eval = std::move(ev);
          res.bookkept_step_time_s = bookkept;
        }
        return true;
      };
      const int rung = climb_ladder(p.mesh, attempt, bisect_steps(g.num_operators()));
      // The expert splits (one evaluation each): on small graphs, and on
      // any graph when nothing else fits.
      if (opts.expert_candidates && (g.num_operators() <= kBisectSmallGraph || rung < 0)) {
        for (std::size_t split = 0; split <= p.mesh.size(); ++split) {
          plan::Plan trial = p;
          detail::tensor_parallel(g, spaces, cluster, split, trial);
          plan::check_plan(g, spaces, trial);
          const auto sum = plan::evaluate(g, spaces, cluster, trial, opts.cost,
                                          plan::EvalDetail::Summary).summary;
          note_memory(trial, sum.memory_per_device_bytes);
          if (sum.memory_per_device_bytes > budget ||
              (have && sum.step_time_s >= res.eval.summary.step_time_s))
            continue;
          have = true;
          res.eval = evaluate(trial);
          res.plan = std::move(trial);
          res.bookkept_step_time_s = res.eval.summary.step_time_s;
          res.expert_plan = true;
        }
      }
      // Polish the fastest fitting plan, or mend the smallest one.
      if (may_polish(g, cluster, opts)) {
        plan::Plan from = have ? res.plan : std::move(smallest);
        const double start_mem = have ? res.eval.summary.memory_per_device_bytes : best_mem;
        if (take_polished(g, spaces, cluster, opts, budget, std::move(from), start_mem, have,
                          res, best_mem))
          have = true;
      }
      if (!have) throw Error(Errc::kNoFit, no_fit_message(budget, cluster, best_mem));
      res.memory_rungs = rung < 0 ? kLadderRungs + 1 : rung;
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
    case Algorithm::Megatron: {
      detail::tensor_parallel(g, spaces, cluster, detail::innermost_level_axis(cluster), p);
      res.eval = evaluate(p);
      if (res.eval.summary.memory_per_device_bytes > budget)
        throw Error(Errc::kNoFit, "the megatron plan needs " +
                                      gib(res.eval.summary.memory_per_device_bytes) +
                                      " per device, over the budget of " + gib(budget));
      break;
    }
    case Algorithm::Grid: {
      double smallest = 0;
      if (!detail::grid(g, spaces, cluster, opts, budget, p, smallest))
        throw Error(Errc::kNoFit, "no DP x TP split fits the memory budget of " + gib(budget) +
                                      " per device; the smallest needs " + gib(smallest));
      res.eval = evaluate(p);
      break;
    }
    case Algorithm::Ilp: {
      if (!ilp_available())
        throw Error(Errc::kUsage,
                    "this recsearch was built without COIN-OR CBC: algorithm 'ilp' is not "
                    "available (install coinor-libcbc-dev and reconfigure with -Dilp=enabled)");
      // The baselines' and rec's plans stay among the candidates; rec's
      // (last) is the solver's starting point.
      std::vector<plan::Plan> hints;
      for (Algorithm a : {Algorithm::DataParallel, Algorithm::Grid, Algorithm::Rec}) {
        SearchOptions o = opts;
        o.algorithm = a;
        o.detailed_evaluation = false;
        try {
          hints.push_back(run(g, spaces, cluster, o).plan);
        } catch (const Error& e) {
          if (e.code() != Errc::kNoFit) throw;
        }
      }
      const auto r = detail::ilp(g, spaces, cluster, opts, budget, hints, p);
      if (!r.found)
        throw Error(Errc::kNoFit, std::string("no plan fits the memory budget of ") + gib(budget) +
                                      " per device (ilp" +
                                      (r.proven ? ", proven infeasible)" : ", none found in time)"));
      res.proven_optimal = r.proven && !r.restricted;
      res.ilp_restricted = r.restricted;
      res.ilp_lower_bound_s = r.lower_bound_s;
      res.bookkept_step_time_s = r.step_time_s;
      res.eval = evaluate(p);
      if (res.eval.summary.memory_per_device_bytes > budget)
        throw Error(Errc::kInternal, "ilp: the solution's memory differs from the evaluator's");
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
