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
// ones in a row that do not beat the best end that walk too. Stage
// searches skip polish (most of a small search's time) and pin the training
// settings the user left open (selective recomputation, ZeRO 1); the
// winner's stages are searched again with polish and the settings free,
// and only then weighed against the unpipelined plan. GPT-1T on 384x8
// DGX-A100: 21 candidates, 149 stage searches, 10.4 s (docs/pipeline.md).
#include "recsearch/search/pipeline.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <tuple>

#include "recsearch/error.hpp"
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

// One searched stage graph.
struct StageResult {
  plan::Plan plan;
  plan::Evaluation eval;  // summary detail
};

class PipelineSearch {
 public:
  PipelineSearch(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                 const Cluster& cluster, const SearchOptions& opts)
      : g_(g),
        spaces_(spaces),
        cluster_(cluster),
        opts_(opts),
        budget_(detail::memory_budget(cluster, opts)),
        units_(find_units(g, opts)),
        weights_(unit_weights(g, spaces, cluster, opts, units_)),
        pins_(unit_pins(g, units_)),
        max_pin_(pins_.empty() ? -1 : *std::max_element(pins_.begin(), pins_.end())) {}

  PipelineResult run() {
    const auto start = Clock::now();
    // Group counts in increasing order; past the first that fits, two in a
    // row that are not faster than the best so far end the walk (the step
    // time falls with p while the bubble and the sends are small, then
    // rises).
    int worse = 0;
    for (const std::int64_t p : group_counts()) {
      const double before = have_ ? best_.eval.summary.step_time_s : infinity();
      bool fits = false;
      if (p == 1) {
        if (max_pin_ > 0) continue;  // pins ask for stages
        fits = single();
      } else {
        const auto vs = virtual_counts(p);
        std::int64_t m_best = 0;
        fits = walk_microbatches(p, vs.front(), m_best);
        // Interleaving only at the microbatch count plain 1F1B liked best.
        for (std::size_t i = 1; i < vs.size() && m_best > 0; ++i)
          if (m_best % p == 0) fits = std::isfinite(candidate(p, vs[i], m_best)) || fits;
      }
      if (!fits || !have_) continue;
      if (best_.eval.summary.step_time_s < before) {
        worse = 0;
      } else if (++worse == 2) {
        break;
      }
    }
    if (!have_ && !single_) throw Error(Errc::kNoFit, no_fit_message());
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

  // Remembers the least memory a priced candidate needed, for no_fit_message.
  void note_memory(double bytes, std::int64_t p, std::int64_t v, std::int64_t m) {
    if (bytes >= smallest_) return;
    smallest_ = bytes;
    smallest_at_ = std::to_string(p) + " groups x " + std::to_string(v) + ", " + std::to_string(m) +
                   " microbatches";
  }

  std::vector<std::int64_t> group_counts() const {
    const std::int64_t outer = cluster_.levels().empty() ? 1 : cluster_.levels()[0].size;
    const auto units = static_cast<std::int64_t>(units_.count());
    if (opts_.pipeline_stages > 0) {
      const std::int64_t p = opts_.pipeline_stages;
      if (p > 1 && (outer % p != 0 || p > units))
        throw Error(Errc::kUsage,
                    std::to_string(p) + " pipeline stages: " +
                        (outer % p != 0
                             ? "they do not divide the outermost level (" + std::to_string(outer) +
                                   " devices)"
                             : "the graph has only " + std::to_string(units) + " places to cut"));
      return {p};
    }
    std::vector<std::int64_t> out;
    for (const std::int64_t p : divisors(outer))
      if (p <= units) out.push_back(p);
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

  // search::run on the whole graph; whether it fits.
  bool single() {
    SearchOptions o = opts_;
    ++searches_;
    ++candidates_;
    SearchResult r;
    try {
      r = search::run(g_, spaces_, cluster_, o);
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
      const double step = candidate(p, v, m);
      if (!std::isfinite(step)) break;  // fewer microbatches need more memory
      if (step < best_here) {
        best_here = step;
        m_best = m;
        worse = 0;
      } else if (++worse == 2) {
        break;
      }
    }
    return std::isfinite(best_here);
  }

  // A stage covering units [a, b): its cache key. Middle stages of repeated
  // blocks depend only on their block count.
  using Key = std::tuple<std::size_t, std::size_t, std::int64_t, std::int64_t, double, bool>;
  Key key(std::size_t a, std::size_t b, std::int64_t p, std::int64_t m, double budget) const {
    const std::size_t k = units_.count();
    if (units_.repeated && a > 0 && b < k) return {b - a, k + 1, p, m, budget, polishing_};
    return {a, b, p, m, budget, polishing_};
  }

  // search::run on the stage graph at `budget`; nullptr when nothing fits.
  const StageResult* stage(const plan::StageGraph& sg, const Cluster& group, const Key& k,
                           std::int64_t m, double budget) {
    const auto it = cache_.find(k);
    if (it != cache_.end()) return it->second ? &*it->second : nullptr;
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
    o.polish = polishing_ && opts_.polish;
    // The walk pins what the user left to the search: full recomputation
    // (the least activation memory) and ZeRO 1, so that a stage costs one
    // memory ladder, not one per setting; the winner's stages are searched
    // again with the settings free.
    if (!polishing_ && opts_.mode == Mode::Train) {
      o.training.recompute = opts_.training.recompute.value_or(plan::Recompute::Selective);
      o.training.zero_stage = opts_.training.zero_stage.value_or(1);
    }
    std::optional<StageResult> r;
    ++searches_;
    try {
      SearchResult sr = search::run(sg.graph, sg.spaces, group, o);
      r = StageResult{std::move(sr.plan), std::move(sr.eval)};
    } catch (const Error& e) {
      if (e.code() != Errc::kNoFit) throw;
    }
    auto& slot = cache_[k];
    slot = std::move(r);
    return slot ? &*slot : nullptr;
  }

  // Searches and prices one candidate; its step time, or infinity when some
  // group does not fit.
  double candidate(std::int64_t p, std::int64_t v, std::int64_t m) {
    ++candidates_;
    const std::size_t parts = static_cast<std::size_t>(p * v);
    const std::vector<std::size_t> ends = balance_stages(weights_, parts, pins_);
    if (ends.empty()) return infinity();  // the pins need other stage counts
    const Cluster group = plan::stage_cluster(cluster_, static_cast<std::size_t>(p));
    plan::PipelinePlan pp;
    pp.groups = static_cast<std::size_t>(p);
    pp.schedule = v > 1 ? plan::Schedule::Interleaved : plan::Schedule::OneFOneB;
    pp.virtual_stages = static_cast<std::size_t>(v);
    pp.microbatches = m;
    std::vector<plan::StageGraph> graphs;
    std::vector<std::size_t> begins(parts);
    for (std::size_t j = 0; j < parts; ++j) {
      begins[j] = j == 0 ? 0 : ends[j - 1];
      plan::Stage s;
      s.first = units_.bounds[begins[j]];
      s.last = units_.bounds[ends[j]];
      s.group = j % pp.groups;
      pp.stages.push_back(std::move(s));
      graphs.push_back(plan::stage_graph(g_, spaces_, pp.stages[j].first, pp.stages[j].last));
    }
    // Each stage at the whole budget, then the groups over it again with
    // room for the microbatches they keep in flight (twice at most).
    std::vector<double> budgets(parts, budget_);
    plan::PipelineEvaluation pe;
    for (int round = 0; round < 3; ++round) {
      if (!fill(pp, graphs, group, begins, ends, budgets, m)) return infinity();
      pe = price(pp, graphs);
      note_memory(pe.summary.memory_per_device_bytes, p, v, m);
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
    std::vector<plan::StageGraph> graphs;
    for (const plan::Stage& s : pp.stages)
      graphs.push_back(plan::stage_graph(g_, spaces_, s.first, s.last));
    polishing_ = true;
    const bool found =
        fill(pp, graphs, group, best_begins_, best_ends_, best_budgets_, pp.microbatches);
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

  // Searches (or recalls) every stage's plan into pp at its budget.
  bool fill(plan::PipelinePlan& pp, const std::vector<plan::StageGraph>& graphs,
            const Cluster& group, const std::vector<std::size_t>& begins,
            const std::vector<std::size_t>& ends, const std::vector<double>& budgets,
            std::int64_t m) {
    for (std::size_t j = 0; j < pp.stages.size(); ++j) {
      if (budgets[j] <= 0) return false;
      const Key k = key(begins[j], ends[j], static_cast<std::int64_t>(pp.groups), m, budgets[j]);
      const StageResult* r = stage(graphs[j], group, k, m, budgets[j]);
      if (r == nullptr) return false;
      pp.stages[j].plan = r->plan;
      pp.stages[j].plan.graph_name = graphs[j].graph.name();
      pp.stages[j].plan.training.microbatches = m;
      stage_evals_[j] = &r->eval;
    }
    return true;
  }

  plan::PipelineEvaluation price(const plan::PipelinePlan& pp,
                                 const std::vector<plan::StageGraph>& graphs) {
    std::vector<plan::Evaluation> evals;
    std::vector<double> send_s, sent;
    for (std::size_t j = 0; j < pp.stages.size(); ++j) {
      evals.push_back(*stage_evals_.at(j));
      const plan::StageSends s = plan::stage_sends(g_, graphs[j], cluster_, pp, opts_.mode);
      send_s.push_back(s.seconds);
      sent.push_back(s.bytes);
    }
    return plan::schedule_pipeline(pp, opts_.mode, std::move(evals), send_s, sent);
  }

  const ir::Graph& g_;
  const std::vector<algebra::OpSpace>& spaces_;
  const Cluster& cluster_;
  const SearchOptions& opts_;
  const double budget_;
  const Units units_;
  const std::vector<double> weights_;
  const std::vector<std::int64_t> pins_;
  const std::int64_t max_pin_;  // -1: nothing pinned
  std::map<Key, std::optional<StageResult>> cache_;
  std::map<std::size_t, const plan::Evaluation*> stage_evals_;
  PipelineResult best_;
  bool have_ = false;  // best_ holds a pipeline
  std::optional<PipelineResult> single_;
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
