// SPDX-License-Identifier: Apache-2.0
// The pipeline search (recsearch/search/pipeline.hpp; docs/pipeline.md).
//
// Cost. Stage cut points are the boundaries of the graph's units (repeated
// blocks on folded graphs, else at most kMaxPipelineUnits runs of
// operators), so balancing is O(S · K²) for S stages over K units, not a
// function of the operator count. Per candidate (p, v, m) the stage graphs
// are searched with search::run, but stages of the same shape are searched
// once: on a graph of R repeated blocks every middle stage of b blocks is
// the same graph, so a candidate costs at most a handful of searches
// (first, middle, last stage; one more per distinct block count), each of
// them folded when its stage still repeats a block 8 times or more.
// Microbatch counts are tried from the largest down (thinned to a factor
// of about 2 apart): fewer microbatches need more memory, so the first
// count that does not fit ends the walk, and so do two in a row that are
// not faster than the best of the same p. Interleaving (v = 2) is priced at
// the count plain 1F1B liked best. Group counts go up from 1; two fitting
// ones in a row that do not beat the best end that walk too. A candidate's
// stages are searched middle first, and it is dropped as soon as the
// groups' busy times found so far bound its step above the best it must
// beat (the schedule's step grows with every group's busy time). Searches
// of a stage are remembered by budget; a larger budget where nothing fit
// answers for a smaller one, and so does one whose choices the smaller
// budget would repeat (SearchResult::same_choices_from_bytes); otherwise
// the stage's searches share their folded ladders' prices
// (SearchOptions::ladder_memo). Stage searches skip polish (most of a
// small search's time) and pin the training settings the user left open
// (selective recomputation, ZeRO 1); so is the unpipelined plan priced
// first, and searched with the settings free only when that price is
// within kSingleMargin of the best pipeline's. The winner's stages are
// searched again with polish and the settings free (the settings chosen
// without polish, then polished at that recomputation and microbatch
// count), and only then weighed against the unpipelined plan. Searches of
// different shapes run at once once a candidate's first search leaves it
// standing, and the unpipelined price beside the walk (prefetch). GPT-1T
// on 384x8 DGX-A100: 24 candidates, 74 stage searches (docs/pipeline.md).
#include "recsearch/search/pipeline.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

#include <oneapi/tbb/info.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/task_arena.h>
#include <oneapi/tbb/task_group.h>

#include "recsearch/error.hpp"
#include "recsearch/ir/gradients.hpp"
#include "recsearch/plan/training.hpp"
#include "search/common.hpp"
#include "search/fold.hpp"

namespace recsearch::search {

std::vector<std::size_t> balance_stages(const std::vector<double>& w, std::size_t parts) {
  return balance_stages(w, parts, std::vector<std::int64_t>(w.size(), -1));
}

std::vector<std::size_t> balance_stages(const std::vector<double>& w, std::size_t parts,
                                        const std::vector<std::int64_t>& pins) {
  const std::size_t k = w.size();
  if (parts == 0 || parts > k)
    throw Error(Errc::kUsage, "balance_stages: " + std::to_string(parts) + " stages over " +
                                  std::to_string(k) + " units");
  std::vector<double> prefix(k + 1, 0.0);
  for (std::size_t i = 0; i < k; ++i) prefix[i + 1] = prefix[i] + w[i];
  constexpr double kInf = std::numeric_limits<double>::infinity();
  // best[s][i]: the least heaviest run splitting units [0, i) into s runs;
  // from[s][i]: where the last of them starts.
  std::vector<std::vector<double>> best(parts + 1, std::vector<double>(k + 1, kInf));
  std::vector<std::vector<std::size_t>> from(parts + 1, std::vector<std::size_t>(k + 1, 0));
  best[0][0] = 0;
  for (std::size_t s = 1; s <= parts; ++s) {
    for (std::size_t i = s; i + (parts - s) <= k; ++i) {
      // Runs [j, i) from the shortest up: once one holds a unit pinned
      // elsewhere, every longer one does too.
      for (std::size_t j = i; j-- > s - 1;) {
        if (pins[j] >= 0 && static_cast<std::size_t>(pins[j]) != s - 1) break;
        if (best[s - 1][j] == kInf) continue;
        const double run = std::max(best[s - 1][j], prefix[i] - prefix[j]);
        // Not worse keeps the earliest start among equal runs (j falls).
        if (run <= best[s][i] * (1 + 1e-12) || best[s][i] == kInf) {
          best[s][i] = run;
          from[s][i] = j;
        }
      }
    }
  }
  if (best[parts][k] == kInf) return {};
  std::vector<std::size_t> ends(parts);
  std::size_t i = k;
  for (std::size_t s = parts; s > 0; --s) {
    ends[s - 1] = i;
    i = from[s][i];
  }
  return ends;
}

namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::int64_t> divisors(std::int64_t n) {
  std::vector<std::int64_t> d;
  for (std::int64_t i = 1; i * i <= n; ++i) {
    if (n % i != 0) continue;
    d.push_back(i);
    if (i != n / i) d.push_back(n / i);
  }
  std::sort(d.begin(), d.end());
  return d;
}

// search::run with polish where opts ask for it, in two passes: the
// training settings the options leave open are chosen without polish (a
// polished search polishes the first fitting setting of every
// recomputation ladder, and mends each one that does not fit), then the
// chosen recomputation and microbatch count are pinned and searched again
// with polish, the ZeRO stage still free (polish may make a smaller one
// fit). The faster of the two results is returned. When nothing fits
// without polish, the one polished search (polish may mend a plan).
SearchResult run_polished(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                          const Cluster& cluster, const SearchOptions& opts) {
  if (opts.effort == Effort::Fast || opts.mode != Mode::Train)
    return search::run(g, spaces, cluster, opts);
  SearchOptions quick = opts;
  quick.effort = Effort::Fast;
  SearchResult first;
  try {
    first = search::run(g, spaces, cluster, quick);
  } catch (const Error& e) {
    if (e.code() != Errc::kNoFit) throw;
    return search::run(g, spaces, cluster, opts);
  }
  SearchOptions pinned = opts;
  pinned.training.recompute = first.plan.training.recompute;
  pinned.training.microbatches = first.plan.training.microbatches;
  try {
    SearchResult second = search::run(g, spaces, cluster, pinned);
    if (second.eval.summary.step_time_s <= first.eval.summary.step_time_s) return second;
  } catch (const Error& e) {
    if (e.code() != Errc::kNoFit) throw;
  }
  return first;
}

// The units: their operator boundaries (bounds[0] = 0, bounds.back() = ops)
// and whether they are repeated blocks (stages of equal shape are equal).
struct Units {
  std::vector<ir::OpId> bounds;
  bool repeated = false;
  [[nodiscard]] std::size_t count() const noexcept { return bounds.size() - 1; }
};

Units find_units(const ir::Graph& g, const SearchOptions& opts) {
  Units u;
  const std::size_t ops = g.num_operators();
  const std::size_t min_repeats = std::max<std::size_t>(2, opts.fold_min_repeats);
  if (const auto rep = detail::find_repetition(g, min_repeats)) {
    u.repeated = true;
    u.bounds.push_back(0);
    for (std::size_t k = 1; k < rep->repeats; ++k) u.bounds.push_back(rep->start + k * rep->period);
    u.bounds.push_back(ops);
    return u;
  }
  const std::size_t k = std::min(ops, kMaxPipelineUnits);
  for (std::size_t i = 0; i <= k; ++i) u.bounds.push_back(i * ops / k);
  return u;
}

// Each unit's pinned stage (-1: none). Error(kPlan) when one unit holds
// operators pinned to different stages.
std::vector<std::int64_t> unit_pins(const ir::Graph& g, const Units& u) {
  std::vector<std::int64_t> pins(u.count(), -1);
  for (std::size_t k = 0; k < u.count(); ++k) {
    ir::OpId first = 0;
    for (ir::OpId o = u.bounds[k]; o < u.bounds[k + 1]; ++o) {
      const std::int64_t pin = plan::pinned_stage(g, o);
      if (pin < 0) continue;
      if (pins[k] >= 0 && pins[k] != pin)
        throw Error(Errc::kPlan,
                    "operators '" + g.op(first).name + "' and '" + g.op(o).name +
                        "' are pinned to stages " + std::to_string(pins[k]) + " and " +
                        std::to_string(pin) + " but no stage cut may fall between them",
                    "/operators/" + std::to_string(o) + "/attrs/stage");
      pins[k] = pin;
      first = o;
    }
  }
  return pins;
}

// Each unit's compute in the replicated plan: what a stage's share of the
// work is, whatever its cuts (they divide every unit about alike).
std::vector<double> unit_weights(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                                 const Cluster& cluster, const SearchOptions& opts,
                                 const Units& u) {
  plan::Plan p;
  p.mode = opts.mode;
  p.mesh = cluster.cuts();
  p.cuts.assign(g.num_operators(), std::vector<std::int16_t>(p.mesh.size(), plan::kReplicated));
  const auto ev = plan::evaluate(g, spaces, cluster, p, opts.cost, plan::EvalDetail::Summary);
  std::vector<double> w(u.count(), 0.0);
  for (std::size_t k = 0; k < u.count(); ++k)
    for (ir::OpId o = u.bounds[k]; o < u.bounds[k + 1]; ++o) w[k] += ev.op_costs[o].compute_s;
  return w;
}

std::vector<double> prefix_sums(const std::vector<double>& w) {
  std::vector<double> out(w.size() + 1, 0.0);
  for (std::size_t i = 0; i < w.size(); ++i) out[i + 1] = out[i] + w[i];
  return out;
}

// One searched stage graph.
struct StageResult {
  plan::Plan plan;
  plan::Evaluation eval;  // summary detail
  // SearchResult::same_choices_from_bytes: the least budget this search
  // answers for.
  double same_from = std::numeric_limits<double>::infinity();
};

// A candidate's stage graphs, each built when first asked for: a stage
// recalled from the cache needs its graph only for pricing, and a candidate
// the bound drops before pricing needs none.
class StageGraphs {
 public:
  // grads: ir::gradient_tensors(g).
  StageGraphs(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
              const std::vector<std::uint8_t>& grads, const plan::PipelinePlan& pp)
      : g_(g), spaces_(spaces), grads_(grads), pp_(pp), built_(pp.stages.size()) {}

  const plan::StageGraph& operator[](std::size_t j) {
    if (!built_[j])
      built_[j] = plan::stage_graph(g_, spaces_, pp_.stages[j].first, pp_.stages[j].last, &grads_);
    return *built_[j];
  }

  // Stage j's graph, already built (operator[]); safe to read from several
  // threads.
  [[nodiscard]] const plan::StageGraph& built(std::size_t j) const { return *built_[j]; }
  [[nodiscard]] std::size_t groups() const { return pp_.groups; }

  // The stage graph's name (plan::stage_graph's), without building it.
  [[nodiscard]] std::string name(std::size_t j) const {
    return g_.name() + "/ops" + std::to_string(pp_.stages[j].first) + "-" +
           std::to_string(pp_.stages[j].last);
  }

 private:
  const ir::Graph& g_;
  const std::vector<algebra::OpSpace>& spaces_;
  const std::vector<std::uint8_t>& grads_;
  const plan::PipelinePlan& pp_;
  std::vector<std::optional<plan::StageGraph>> built_;
};

// SearchOptions::threads, capped at the machine's (more only makes oneTBB
// warn).
int worker_threads(const SearchOptions& opts) {
  const int hw = oneapi::tbb::info::default_concurrency();
  return opts.threads > 0 ? std::min(opts.threads, hw) : hw;
}

// How much slower than the fastest pipeline the unpipelined plan may be,
// both with the walk's pinned settings, and still be searched with the
// settings free (PipelineSearch::single_may_win).
constexpr double kSingleMargin = 1.25;

class PipelineSearch {
 public:
  PipelineSearch(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                 const Cluster& cluster, const SearchOptions& opts)
      : g_(g),
        spaces_(spaces),
        grads_(ir::gradient_tensors(g)),
        cluster_(cluster),
        opts_(opts),
        budget_(detail::memory_budget(cluster, opts)),
        units_(find_units(g, opts)),
        weights_(unit_weights(g, spaces, cluster, opts, units_)),
        weight_prefix_(prefix_sums(weights_)),
        pins_(unit_pins(g, units_)),
        max_pin_(pins_.empty() ? -1 : *std::max_element(pins_.begin(), pins_.end())),
        arena_(worker_threads(opts)) {}

  PipelineResult run() {
    const auto start = Clock::now();
    // The unpipelined plan's price decides nothing in the walk, which
    // weighs pipelines against each other only: it is searched beside it.
    oneapi::tbb::task_group beside;
    try {
      walk(beside);
    } catch (...) {
      arena_.execute([&] {
        beside.cancel();
        try {
          beside.wait();
        } catch (...) {  // the walk's error is the one to report
        }
      });
      throw;
    }
    arena_.execute([&] { beside.wait(); });
    if (walked_single_ && single_may_win()) single();
    if (!have_ && !single_) throw NoFitError(no_fit_message(), smallest_, 0);
    if (have_) polish_best();
    if (single_ &&
        (!have_ || single_->eval.summary.step_time_s <= best_.eval.summary.step_time_s)) {
      best_ = std::move(*single_);
      have_ = true;
    }
    if (best_.plan.groups > 1) {
      best_.eval = plan::evaluate_pipeline(
          g_, spaces_, cluster_, best_.plan, opts_.cost,
          opts_.detailed_evaluation ? plan::EvalDetail::Full : plan::EvalDetail::Summary);
    }
    best_.candidates = candidates_;
    best_.stage_searches = searches_;
    best_.search_time_s = std::chrono::duration<double>(Clock::now() - start).count();
    best_.eval.summary.search_time_s = best_.search_time_s;
    return std::move(best_);
  }

 private:
  std::string no_fit_message() const {
    const auto gib = [](double bytes) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.3f GiB", bytes / (1024.0 * 1024.0 * 1024.0));
      return std::string(buf);
    };
    std::string m = "no pipeline plan fits the memory budget of " + gib(budget_) +
                    " per device on " + std::to_string(cluster_.num_devices()) + " devices";
    if (std::isfinite(smallest_))
      m += "; the smallest found needs " + gib(smallest_) + " (" + smallest_at_ + ")";
    return m;
  }

  // Group counts in increasing order; past the first that fits, two in a
  // row that are not faster than the best so far end the walk (the step
  // time falls with p while the bubble and the sends are small, then
  // rises). p = 1 is priced in `beside`.
  void walk(oneapi::tbb::task_group& beside) {
    int worse = 0;
    for (const std::int64_t p : group_counts()) {
      if (p == 1) {
        if (max_pin_ > 0) continue;  // pins ask for stages
        walked_single_ = true;
        ++searches_;
        ++candidates_;
        arena_.execute([&] { beside.run([this] { single_pinned(); }); });
        continue;
      }
      const double before = best_step();
      const auto vs = virtual_counts(p);
      std::int64_t m_best = 0;
      bool fits = walk_microbatches(p, vs.front(), m_best);
      // Interleaving only at the microbatch count plain 1F1B liked best.
      for (std::size_t i = 1; i < vs.size() && m_best > 0; ++i)
        if (m_best % p == 0) fits = std::isfinite(candidate(p, vs[i], m_best, best_step())) || fits;
      if (!fits || !have_) continue;
      if (best_.eval.summary.step_time_s < before) {
        worse = 0;
      } else if (++worse == 2) {
        break;
      }
    }
  }

  // Remembers the least memory a priced candidate needed, for no_fit_message.
  void note_memory(double bytes, std::int64_t p, std::int64_t v, std::int64_t m) {
    if (bytes >= smallest_) return;
    smallest_ = bytes;
    smallest_at_ = std::to_string(p) + " groups x " + std::to_string(v) + ", " + std::to_string(m) +
                   " microbatches";
  }

  // Every group count that splits the cluster's levels from the outermost
  // (plan::device_group_counts: divisors of the node count, then groups
  // inside the nodes), up to the graph's units.
  std::vector<std::int64_t> group_counts() const {
    const std::vector<std::size_t> all = plan::device_group_counts(cluster_);
    const auto units = static_cast<std::int64_t>(units_.count());
    if (opts_.pipeline_stages > 0) {
      const std::int64_t p = opts_.pipeline_stages;
      const bool splits =
          std::find(all.begin(), all.end(), static_cast<std::size_t>(p)) != all.end();
      if (p > 1 && (!splits || p > units))
        throw Error(
            Errc::kUsage,
            std::to_string(p) + " pipeline stages: " +
                (!splits ? "they do not split the cluster's levels (" + cluster_.levels_text() +
                               ") from the outermost (whole outer members, then an "
                               "equal part of the next)"
                         : "the graph has only " + std::to_string(units) + " places to cut"));
      return {p};
    }
    std::vector<std::int64_t> out;
    for (const std::size_t p : all)
      if (static_cast<std::int64_t>(p) <= units) out.push_back(static_cast<std::int64_t>(p));
    return out;
  }

  std::vector<std::int64_t> virtual_counts(std::int64_t p) const {
    const auto units = static_cast<std::int64_t>(units_.count());
    if (opts_.pipeline_virtual_stages > 0) {
      if (p * opts_.pipeline_virtual_stages > units)
        throw Error(Errc::kUsage, std::to_string(p) + " pipeline stages x " +
                                      std::to_string(opts_.pipeline_virtual_stages) +
                                      " virtual stages: the graph has only " +
                                      std::to_string(units) + " places to cut");
      return {opts_.pipeline_virtual_stages};
    }
    if (2 * p <= units) return {1, 2};
    return {1};
  }

  // Microbatch counts for p groups, largest first, about 2x apart. The
  // largest leaves a microbatch at least one sample per outermost-level
  // part of a group (a node): smaller ones leave the group's outer cuts
  // nothing to split but the weights, and only cost more.
  std::vector<std::int64_t> microbatch_counts(std::int64_t p, std::int64_t v) const {
    if (opts_.training.microbatches) return {*opts_.training.microbatches};
    const std::int64_t batch = plan::batch_size(g_);
    if (batch < p) return {};
    const std::int64_t outer = cluster_.levels().empty() ? 1 : cluster_.levels()[0].size;
    const std::int64_t cap = std::max(p, batch / std::max<std::int64_t>(1, outer / p));
    std::vector<std::int64_t> all;
    for (const std::int64_t m : divisors(batch))
      if (m >= p && m <= cap && (v == 1 || m % p == 0)) all.push_back(m);
    std::vector<std::int64_t> out;
    for (auto it = all.rbegin(); it != all.rend(); ++it)
      if (out.empty() || *it * 2 <= out.back()) out.push_back(*it);
    return out;
  }

  // The unpipelined plan priced as the walk prices a stage (training
  // settings pinned, no polish) into single_pinned_s_ (infinity when it
  // does not fit). Only a rough price: the plan itself comes from single()
  // after the walk. Runs beside the walk, touching nothing else.
  void single_pinned() {
    SearchOptions o = opts_;
    pin_walk_settings(o);
    o.effort = Effort::Fast;
    o.detailed_evaluation = false;
    o.on_progress = nullptr;
    try {
      single_pinned_s_ = search::run(g_, spaces_, cluster_, o).eval.summary.step_time_s;
    } catch (const Error& e) {
      if (e.code() != Errc::kNoFit) throw;
    }
  }

  // Whether the unpipelined plan is worth its search with the settings
  // free: always, unless it fitted with them pinned and was slower by more
  // than kSingleMargin than the fastest pipeline priced the same way (free
  // settings gain less: no recomputation instead of the selective one, a
  // ZeRO stage that saves no time).
  bool single_may_win() const {
    if (!have_ || !std::isfinite(single_pinned_s_)) return true;
    return single_pinned_s_ <= kSingleMargin * best_.eval.summary.step_time_s;
  }

  // search::run on the whole graph with the settings free; whether it fits.
  bool single() {
    SearchOptions o = opts_;
    ++searches_;
    SearchResult r;
    try {
      r = run_polished(g_, spaces_, cluster_, o);
    } catch (const Error& e) {
      if (e.code() != Errc::kNoFit) throw;
      return false;
    }
    // Kept apart: the walk prices pipelines with settings pinned, so it is
    // weighed against them only after the winner's stages are searched
    // with the settings free (run()).
    single_ = PipelineResult{};
    single_->plan.groups = 1;
    single_->plan.microbatches = r.plan.training.microbatches;
    plan::Stage s;
    s.first = 0;
    s.last = static_cast<ir::OpId>(g_.num_operators());
    s.plan = r.plan;
    single_->plan.stages.push_back(std::move(s));
    single_->eval.stages.push_back(r.eval);
    single_->eval.summary = r.eval.summary;
    single_->single = std::move(r);
    return true;
  }

  // Microbatch counts for p groups and v, largest first; whether any fits,
  // and the fastest in m_best.
  bool walk_microbatches(std::int64_t p, std::int64_t v, std::int64_t& m_best) {
    double best_here = infinity();
    int worse = 0;
    for (const std::int64_t m : microbatch_counts(p, v)) {
      // The bound prunes against this walk's best, or the best so far
      // before it has one: a pruned candidate is not faster than either.
      const double cutoff = std::isfinite(best_here) ? best_here : best_step();
      const double step = candidate(p, v, m, cutoff);
      if (!std::isfinite(step)) break;  // fewer microbatches need more memory
      if (pruned_ && !std::isfinite(best_here)) {
        // Not faster than the best of an earlier p: no start for this walk.
        if (m_best == 0) m_best = m;
        if (++worse == 2) break;
      } else if (step < best_here) {
        best_here = step;
        m_best = m;
        worse = 0;
      } else if (++worse == 2) {
        break;
      }
    }
    return m_best > 0;
  }

  // A stage covering units [a, b): its cache key (the budget apart: see
  // recall). Middle stages of repeated blocks depend only on their block
  // count.
  using Key = std::tuple<std::size_t, std::size_t, std::int64_t, std::int64_t, bool>;
  Key key(std::size_t a, std::size_t b, std::int64_t p, std::int64_t m) const {
    const std::size_t k = units_.count();
    if (units_.repeated && a > 0 && b < k) return {b - a, k + 1, p, m, polishing_};
    return {a, b, p, m, polishing_};
  }

  // A search of the same stage that answers for one at `budget`: one at
  // this budget, one at a larger budget where nothing fit (nothing fits
  // in less: the memory ladder tries the same prices), or one at a larger
  // budget whose every fitting test `budget` still passes (its
  // same_choices_from_bytes: the search at `budget` would repeat it). A
  // plan found at a larger budget is not reused merely because it fits
  // this one: the search at a lower budget may trade time for memory
  // differently, which is what a group over the budget asks of it.
  std::optional<const std::optional<StageResult>*> recall(const Key& k, double budget) const {
    const auto it = cache_.find(k);
    if (it == cache_.end()) return std::nullopt;
    for (auto e = it->second.lower_bound(budget); e != it->second.end(); ++e)
      if (e->first == budget || !e->second || e->second->same_from <= budget) return &e->second;
    return std::nullopt;
  }

  // search::run on stage j's graph at `budget`; nullptr when nothing fits.
  const StageResult* stage(StageGraphs& graphs, std::size_t j, const Cluster& group, const Key& k,
                           std::int64_t m, double budget) {
    if (const auto hit = recall(k, budget)) return **hit ? &***hit : nullptr;
    ++searches_;
    auto& slot = cache_[k][budget];
    slot = search_stage(graphs[j], group, m, budget, memo(k));
    return slot ? &*slot : nullptr;
  }

  // The walk's searches of one stage shape differ in the budget only:
  // their ladders share the prices they both try. Polished searches share
  // nothing.
  std::shared_ptr<detail::LadderMemo> memo(const Key& k) {
    if (polishing_) return nullptr;
    auto& memo = memos_[k];
    if (!memo) memo = std::make_shared<detail::LadderMemo>();
    return memo;
  }

  // One stage search, touching nothing of this object but its settings
  // (and the ladder memo it is handed), so that searches of different
  // shapes may run at once (prefetch).
  std::optional<StageResult> search_stage(const plan::StageGraph& sg, const Cluster& group,
                                          std::int64_t m, double budget,
                                          std::shared_ptr<detail::LadderMemo> memo) const {
    SearchOptions o = opts_;
    o.training.microbatches = m;
    o.cost.memory_budget_bytes = budget;
    o.detailed_evaluation = false;
    o.on_progress = nullptr;
    // Stages of 4 blocks or more are searched folded: a stage's search
    // then costs a block, not its depth.
    o.fold_min_repeats = std::min<std::size_t>(o.fold_min_repeats, 4);
    // Polish (refining the whole plan with exact costs) costs more than the
    // rest of a stage search together: the walk goes without it, and only
    // the winner's stages are searched again with it (polish_best).
    o.effort = polishing_ ? opts_.effort : Effort::Fast;
    // The walk pins what the user left to the search: full recomputation
    // (the least activation memory) and ZeRO 1, so that a stage costs one
    // memory ladder, not one per setting; the winner's stages are searched
    // again with the settings free.
    if (!polishing_) pin_walk_settings(o);
    o.ladder_memo = std::move(memo);
    try {
      SearchResult sr = run_polished(sg.graph, sg.spaces, group, o);
      return StageResult{std::move(sr.plan), std::move(sr.eval), sr.same_choices_from_bytes};
    } catch (const Error& e) {
      if (e.code() != Errc::kNoFit) throw;
    }
    return std::nullopt;
  }

  // The training settings the walk pins where the user left them open.
  void pin_walk_settings(SearchOptions& o) const {
    if (opts_.mode != Mode::Train) return;
    o.training.recompute = opts_.training.recompute.value_or(plan::Recompute::Selective);
    o.training.zero_stage = opts_.training.zero_stage.value_or(1);
  }

  // Searches and prices one candidate; its step time, or infinity when some
  // group does not fit, or `cutoff` as soon as the stages searched so far
  // show that it cannot be faster than that (its stages are then left
  // unsearched).
  double candidate(std::int64_t p, std::int64_t v, std::int64_t m, double cutoff) {
    ++candidates_;
    pruned_ = false;
    const std::size_t parts = static_cast<std::size_t>(p * v);
    const std::vector<std::size_t> ends = balance_stages(weights_, parts, pins_);
    if (ends.empty()) return infinity();  // the pins need other stage counts
    const Cluster group = plan::stage_cluster(cluster_, static_cast<std::size_t>(p));
    plan::PipelinePlan pp;
    pp.groups = static_cast<std::size_t>(p);
    pp.schedule = v > 1 ? plan::Schedule::Interleaved : plan::Schedule::OneFOneB;
    pp.virtual_stages = static_cast<std::size_t>(v);
    pp.microbatches = m;
    std::vector<std::size_t> begins(parts);
    for (std::size_t j = 0; j < parts; ++j) {
      begins[j] = j == 0 ? 0 : ends[j - 1];
      plan::Stage s;
      s.first = units_.bounds[begins[j]];
      s.last = units_.bounds[ends[j]];
      s.group = j % pp.groups;
      pp.stages.push_back(std::move(s));
    }
    StageGraphs graphs(g_, spaces_, grads_, pp);
    // Each stage at the whole budget, then the groups over it again with
    // room for the microbatches they keep in flight (twice at most).
    std::vector<double> budgets(parts, budget_);
    plan::PipelineEvaluation pe;
    for (int round = 0; round < 3; ++round) {
      const Filled f = fill(pp, graphs, group, begins, ends, budgets, m, cutoff);
      if (f == Filled::kNoFit) return infinity();
      // Not faster than the cutoff whatever the stages not searched: a
      // lower budget only slows the stages.
      if (f == Filled::kPruned) {
        pruned_ = true;
        return cutoff;
      }
      pe = price(pp, graphs);
      note_memory(pe.summary.memory_per_device_bytes, p, v, m);
      // Searching groups over the budget again at lower budgets only slows
      // them: a candidate already not faster than the cutoff stops here.
      if (pe.summary.step_time_s >= cutoff) {
        pruned_ = true;
        return cutoff;
      }
      bool over = false;
      for (std::size_t gi = 0; gi < pe.groups.size(); ++gi) {
        const plan::GroupReport& gr = pe.groups[gi];
        if (gr.memory_bytes <= budget_) continue;
        over = true;
        const double extra = (gr.in_flight - 1) * gr.activation_bytes;
        for (std::size_t j = gi; j < parts; j += pp.groups)
          budgets[j] = std::max(0.0, budgets[j] - (gr.memory_bytes - budget_) -
                                         0.05 * extra / static_cast<double>(v));
      }
      if (!over) break;
      if (round == 2) return infinity();
    }
    const double step = pe.summary.step_time_s;
    if (!have_ || step < best_.eval.summary.step_time_s) {
      have_ = true;
      best_ = PipelineResult{};
      best_.plan = std::move(pp);
      best_.eval = std::move(pe);
      best_begins_ = begins;
      best_ends_ = ends;
      best_budgets_ = budgets;
    }
    return step;
  }

  // The winner's stages searched again with polish and the training
  // settings free, taken when the result still fits and is faster.
  void polish_best() {
    if (best_.plan.groups <= 1) return;
    plan::PipelinePlan pp = best_.plan;
    const Cluster group = plan::stage_cluster(cluster_, pp.groups);
    StageGraphs graphs(g_, spaces_, grads_, pp);
    // The result is taken only when it fits and is faster: its stages stop
    // being searched as soon as the bound or a group's memory says it will
    // not be.
    polishing_ = true;
    const bool found = fill(pp, graphs, group, best_begins_, best_ends_, best_budgets_,
                            pp.microbatches, best_.eval.summary.step_time_s,
                            /*over_budget_fails=*/true) == Filled::kAll;
    polishing_ = false;
    if (!found) return;
    plan::PipelineEvaluation pe = price(pp, graphs);
    for (const plan::GroupReport& gr : pe.groups)
      if (gr.memory_bytes > budget_) return;
    if (pe.summary.step_time_s >= best_.eval.summary.step_time_s) return;
    best_.plan = std::move(pp);
    best_.eval = std::move(pe);
  }

  static double infinity() { return std::numeric_limits<double>::infinity(); }
  double best_step() const { return have_ ? best_.eval.summary.step_time_s : infinity(); }

  // Searches (or recalls) every stage's plan into pp at its budget; kPruned
  // as soon as the step is bound to be at least `cutoff`, and, where
  // over_budget_fails, kNoFit as soon as the stages searched so far take a
  // group over the memory budget (a group's memory is a sum over its
  // stages, plan::stage_memory_bytes).
  enum class Filled { kAll, kNoFit, kPruned };
  Filled fill(plan::PipelinePlan& pp, StageGraphs& graphs, const Cluster& group,
              const std::vector<std::size_t>& begins, const std::vector<std::size_t>& ends,
              const std::vector<double>& budgets, std::int64_t m, double cutoff = infinity(),
              bool over_budget_fails = false) {
    // Middle stages first: on a repeated graph they are one search for most
    // groups, so the bound below is strong after the first search.
    const std::size_t parts = pp.stages.size();
    std::vector<std::size_t> order;
    for (std::size_t j = 1; j + 1 < parts; ++j) order.push_back(j);
    order.push_back(0);
    if (parts > 1) order.push_back(parts - 1);
    // Each group's busy time per microbatch, from the stages searched so
    // far and the floors of the others.
    std::vector<double> floors(parts), known(pp.groups, 0.0);
    for (std::size_t j = 0; j < parts; ++j) {
      floors[j] = compute_floor(begins[j], ends[j], m, static_cast<std::int64_t>(pp.groups));
      known[pp.stages[j].group] += floors[j];
    }
    if (pipelined_bound(pp, known) >= cutoff) return Filled::kPruned;
    std::vector<double> memory(pp.groups, 0.0);
    bool searched = false;
    for (std::size_t i = 0; i < order.size(); ++i) {
      const std::size_t j = order[i];
      if (budgets[j] <= 0) return Filled::kNoFit;
      const Key k = key(begins[j], ends[j], static_cast<std::int64_t>(pp.groups), m);
      if (!recall(k, budgets[j])) {
        // The first search left the candidate standing: the rest at once.
        if (searched) prefetch(graphs, group, begins, ends, budgets, m, order, i);
        searched = true;
      }
      const StageResult* r = stage(graphs, j, group, k, m, budgets[j]);
      if (r == nullptr) return Filled::kNoFit;
      pp.stages[j].plan = r->plan;
      pp.stages[j].plan.graph_name = graphs.name(j);
      pp.stages[j].plan.training.microbatches = m;
      stage_evals_[j] = &r->eval;
      const plan::Summary& sum = r->eval.summary;
      known[pp.stages[j].group] +=
          (sum.microbatch_s > 0 ? sum.microbatch_s : sum.step_time_s / static_cast<double>(m)) -
          floors[j];
      if (pipelined_bound(pp, known) >= cutoff) return Filled::kPruned;
      double& mem = memory[pp.stages[j].group];
      mem += plan::stage_memory_bytes(pp, j, opts_.mode, sum);
      // A hair over, so that the order of the sums cannot tell apart what
      // schedule_pipeline finds within the budget.
      if (over_budget_fails && mem > budget_ * (1 + 1e-9)) return Filled::kNoFit;
    }
    return Filled::kAll;
  }

  // Searches, at once on the search's threads, the stages from order[from]
  // on that are not remembered yet, one per shape (a shape's searches at
  // several budgets share a ladder memo, so they stay in order), up to the
  // first stage without a budget (fill stops there). The same searches
  // fill() would make one by one and the same results, which do not depend
  // on what else is remembered (recall, SearchOptions::ladder_memo), so the
  // plan is the same for any thread count; fill() then finds them
  // remembered. A stage that fill() would not have reached (the bound, or a
  // stage before it that does not fit) is searched too, and remembered for
  // later candidates.
  void prefetch(StageGraphs& graphs, const Cluster& group, const std::vector<std::size_t>& begins,
                const std::vector<std::size_t>& ends, const std::vector<double>& budgets,
                std::int64_t m, const std::vector<std::size_t>& order, std::size_t from) {
    struct Job {
      std::size_t stage;
      Key key;
      double budget;
      std::shared_ptr<detail::LadderMemo> memo;
      std::optional<StageResult> result;
    };
    std::vector<Job> jobs;
    for (std::size_t i = from; i < order.size(); ++i) {
      const std::size_t j = order[i];
      if (budgets[j] <= 0) break;
      const Key k = key(begins[j], ends[j], static_cast<std::int64_t>(graphs.groups()), m);
      const bool seen =
          std::any_of(jobs.begin(), jobs.end(), [&](const Job& x) { return x.key == k; });
      if (seen || recall(k, budgets[j])) continue;
      jobs.push_back(Job{j, k, budgets[j], memo(k), std::nullopt});
    }
    if (jobs.size() < 2) return;
    for (const Job& x : jobs) (void)graphs[x.stage];  // built here: StageGraphs is not shared
    searches_ += jobs.size();
    arena_.execute([&] {
      oneapi::tbb::parallel_for(std::size_t{0}, jobs.size(), [&](std::size_t i) {
        Job& x = jobs[i];
        x.result = search_stage(graphs.built(x.stage), group, m, x.budget, x.memo);
      });
    });
    for (Job& x : jobs) cache_[x.key][x.budget] = std::move(x.result);
  }

  // A floor under the busy time per microbatch of the stage of units
  // [a, b) on one of p groups, whatever its plan: its units' compute in the
  // replicated plan (weights_) spread perfectly over the group's devices,
  // one microbatch's share. Each operator's compute on its slices is at
  // least its share of the replicated compute, because the symbolic
  // compute time (max(flops / rate, bytes / bandwidth), plan/evaluator.hpp)
  // is homogeneous and grows with flops and bytes, no cut divides an
  // operator more ways than the group has devices, and m microbatches read
  // the weights m times. Collectives, recomputation and sends only add to
  // it. 0 under a user's cost model, of which nothing is known.
  [[nodiscard]] double compute_floor(std::size_t a, std::size_t b, std::int64_t m,
                                     std::int64_t p) const {
    if (opts_.cost.model) return 0.0;
    const double devices = static_cast<double>(cluster_.num_devices()) / static_cast<double>(p);
    return (weight_prefix_[b] - weight_prefix_[a]) / (static_cast<double>(m) * devices);
  }

  // A lower bound on the pipelined part of the step from the groups' busy
  // times known so far (the schedule's formula, plan/pipeline.hpp, grows
  // with every group's busy time; the floors of stages not yet searched
  // and the sends only add to it).
  static double pipelined_bound(const plan::PipelinePlan& pp, const std::vector<double>& t) {
    double sum = 0, most = 0;
    for (const double x : t) {
      sum += x;
      most = std::max(most, x);
    }
    const double v = pp.schedule == plan::Schedule::Interleaved
                         ? static_cast<double>(std::max<std::size_t>(pp.virtual_stages, 1))
                         : 1.0;
    return static_cast<double>(pp.microbatches) * most + (sum - most) / v;
  }

  plan::PipelineEvaluation price(const plan::PipelinePlan& pp, StageGraphs& graphs) {
    std::vector<plan::Evaluation> evals;
    std::vector<double> send_s, sent;
    for (std::size_t j = 0; j < pp.stages.size(); ++j) {
      evals.push_back(*stage_evals_.at(j));
      const plan::StageSends s = plan::stage_sends(g_, graphs[j], cluster_, pp, opts_.mode);
      send_s.push_back(s.seconds);
      sent.push_back(s.bytes);
    }
    return plan::schedule_pipeline(pp, opts_.mode, std::move(evals), send_s, sent,
                                   plan::tied_syncs(g_, cluster_, pp, opts_.mode, opts_.cost));
  }

  const ir::Graph& g_;
  const std::vector<algebra::OpSpace>& spaces_;
  const std::vector<std::uint8_t> grads_;  // ir::gradient_tensors(g_), for the stage graphs
  const Cluster& cluster_;
  const SearchOptions& opts_;
  const double budget_;
  const Units units_;
  const std::vector<double> weights_;
  const std::vector<double> weight_prefix_;  // weight_prefix_[k]: units [0, k)
  const std::vector<std::int64_t> pins_;
  const std::int64_t max_pin_;  // -1: nothing pinned
  // The threads independent stage searches run on (prefetch, and the
  // unpipelined plan's price beside the walk).
  oneapi::tbb::task_arena arena_;
  // Per stage, its searches by budget (map nodes stay put: stage_evals_
  // points into them).
  std::map<Key, std::map<double, std::optional<StageResult>>> cache_;
  std::map<std::size_t, const plan::Evaluation*> stage_evals_;
  // Per stage, its folded ladder's searches by price (SearchOptions::ladder_memo).
  std::map<Key, std::shared_ptr<detail::LadderMemo>> memos_;
  PipelineResult best_;
  bool have_ = false;  // best_ holds a pipeline
  std::optional<PipelineResult> single_;
  bool pruned_ = false;         // the last candidate was cut off by the bound
  bool walked_single_ = false;  // p = 1 is among the group counts
  double single_pinned_s_ = std::numeric_limits<double>::infinity();
  bool polishing_ = false;
  std::vector<std::size_t> best_begins_, best_ends_;
  std::vector<double> best_budgets_;
  double smallest_ = std::numeric_limits<double>::infinity();
  std::string smallest_at_;
  std::size_t candidates_ = 0;
  std::size_t searches_ = 0;
};

}  // namespace

PipelineResult run_pipeline(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                            const Cluster& cluster, const SearchOptions& opts) {
  if (spaces.size() != g.num_operators())
    throw Error(Errc::kUsage, "search::run_pipeline: one OpSpace per operator is required");
  if (opts.pipeline_stages < 0 || opts.pipeline_virtual_stages < 0)
    throw Error(Errc::kUsage, "pipeline stages and virtual stages must be >= 0");
  return PipelineSearch(g, spaces, cluster, opts).run();
}

}  // namespace recsearch::search
