// SPDX-License-Identifier: Apache-2.0
// search::run: picks the algorithm, enforces the memory budget with a
// ladder of memory weights (raise the price of a byte until the plan fits),
// and hands every plan to the independent evaluator.
#include "recsearch/search/search.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "recsearch/error.hpp"
#include "search/common.hpp"
#include "search/flat_graph.hpp"
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

std::string_view effort_name(Effort e) noexcept {
  switch (e) {
    case Effort::Fast: return "fast";
    case Effort::Default: return "default";
  }
  return "?";
}

std::optional<Effort> parse_effort(std::string_view s) noexcept {
  for (Effort e : {Effort::Fast, Effort::Default})
    if (effort_name(e) == s) return e;
  return std::nullopt;
}

std::optional<Algorithm> parse_algorithm(std::string_view s) noexcept {
  for (Algorithm a : {Algorithm::Rec, Algorithm::DataParallel, Algorithm::Exhaustive,
                      Algorithm::Megatron, Algorithm::Grid, Algorithm::Ilp})
    if (algorithm_name(a) == s) return a;
  return std::nullopt;
}

namespace {

constexpr int kLadderRungs = 24;  // lambda grows 4x a rung: 4^24 ~ 3e14

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

// Bytes in GiB to `digits` significant digits: fixed decimals made a small
// budget and the smallest plan both "0.001 GiB".
std::string gib(double bytes, int digits = 4) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*g GiB", digits, bytes / kGiB);
  return buf;
}

// The budget and the need, with as many digits as it takes to tell them apart.
std::pair<std::string, std::string> gib_pair(double budget, double need) {
  int digits = 4;
  while (digits < 9 && gib(budget, digits) == gib(need, digits)) ++digits;
  return {gib(budget, digits), gib(need, digits)};
}

// Extra searches that narrow the memory price once a rung fits: the first
// fitting rung's price can be up to 4x what the budget needs, and an
// over-priced byte costs communication (slicing what need not be sliced).
// The plan is not monotone in the price (each pass is a heuristic), so the
// fastest fitting plan of all the prices tried is kept, and the more are
// tried the better: 8 steps narrow the price to 4^(1/256), 0.5%, close
// enough that a memory-bound plan pays little for the price's error.
// Their number falls with the cost of one search.
constexpr int kBisectSmall = 8;
constexpr int kBisectFolded = 8;  // folded searches are cheap
constexpr int kBisect = 3;
constexpr std::size_t kBisectSmallGraph = 10'000;
// When the first priced rung fits, its price is bisected down to 1/64 of
// it, not 1/4: a byte priced like one send over the slowest link can
// already be far too dear when the budget is only just short, and the
// fastest plan that fits then lies at a much lower price.
constexpr double kFirstRungSpan = 64;
// Past this many operators (unfolded) each search takes seconds: one step.
constexpr std::size_t kBisectLargeGraph = 100'000;

int bisect_steps(std::size_t operators) {
  if (operators <= kBisectSmallGraph) return kBisectSmall;
  return operators <= kBisectLargeGraph ? kBisect : 1;
}

// The price of a byte on a rung of the ladder.
double ladder_price(const std::vector<Cut>& mesh, int rung) {
  double slowest = std::numeric_limits<double>::infinity();
  for (const Cut& c : mesh) slowest = std::min(slowest, c.bandwidth_Bps);
  const double base = std::isfinite(slowest) ? 1.0 / slowest : 1e-11;
  return rung == 0 ? 0.0 : base * std::pow(4.0, rung - 1);
}

// The memory ladder: prices of a byte of per-device memory in seconds,
// starting at 0, then the time to send that byte over the slowest link, then
// 4x per rung. attempt(lambda, rung) searches at that price and says whether
// the plan fits (keeping the fastest fitting one). Once a rung fits, its
// price interval is bisected (geometrically) `bisect` times. Returns the
// first fitting rung, or -1.
template <class Attempt>
int climb_ladder(const std::vector<Cut>& mesh, Attempt&& attempt, int bisect) {
  const auto price = [&](int rung) { return ladder_price(mesh, rung); };
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

// The per-device memory of a plan by kind: what a no-fit message breaks the
// smallest plan found into. total is infinite until a plan is seen.
struct MemoryParts {
  double total = std::numeric_limits<double>::infinity();
  double weights = 0, gradients = 0, optimizer = 0, activations = 0;

  static MemoryParts of(const plan::Summary& s) {
    return {s.memory_per_device_bytes, s.parameter_bytes - s.gradient_bytes - s.optimizer_bytes,
            s.gradient_bytes, s.optimizer_bytes, s.activation_bytes};
  }
  // Keeps the smaller of the two.
  void take_min(const MemoryParts& o) {
    if (o.total < total) *this = o;
  }
};

// "parameters 1.2 GiB, gradients ..., optimizer state ..., activations ...".
std::string memory_parts_text(const MemoryParts& m) {
  return "parameters " + gib(m.weights) + ", gradients " + gib(m.gradients) + ", optimizer state " +
         gib(m.optimizer) + ", activations " + gib(m.activations);
}

// What would make the smallest plan fit: the budget it needs, and the device
// count at which its memory would fit if it fell in proportion to the
// devices (an estimate: replicated parts do not fall).
std::string would_fit_text(double budget, const Cluster& cluster, const MemoryParts& m) {
  const double devices =
      std::ceil(static_cast<double>(cluster.num_devices()) * m.total / budget - 1e-9);
  std::string out = "; it would fit a budget of " + gib_pair(budget, m.total).second;
  if (std::isfinite(devices) && devices > static_cast<double>(cluster.num_devices()) &&
      devices < 1e12) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.0f", devices);
    out += std::string(", or about ") + buf +
           " devices if its memory per device fell in proportion to the device count";
  }
  return out;
}

// "no plan fits the memory budget of B per device on N devices".
std::string no_fit_head(const std::string& budget_text, const Cluster& cluster) {
  return "no plan fits the memory budget of " + budget_text + " per device on " +
         std::to_string(cluster.num_devices()) + " devices";
}

std::string no_fit_message(double budget, const Cluster& cluster, const MemoryParts& smallest) {
  const auto [budget_text, need_text] = gib_pair(budget, smallest.total);
  std::string out = no_fit_head(budget_text, cluster) + "; the smallest found needs " + need_text;
  if (!std::isfinite(smallest.total)) return out;
  return out + " (" + memory_parts_text(smallest) + ")" + would_fit_text(budget, cluster, smallest);
}

// The rec ladders' no-fit error, with the smallest plan's memory by kind, so
// that a search over training settings can report the smallest of all.
class NoFit : public NoFitError {
 public:
  NoFit(double budget, const Cluster& cluster, const MemoryParts& smallest)
      : NoFitError(no_fit_message(budget, cluster, smallest), smallest.total, 0),
        budget_(budget),
        smallest_(smallest) {}
  [[nodiscard]] double budget() const noexcept { return budget_; }
  [[nodiscard]] const MemoryParts& smallest() const noexcept { return smallest_; }

 private:
  double budget_;
  MemoryParts smallest_;
};

bool may_polish(const detail::Context& ctx) {
  return ctx.opts.effort == Effort::Default && detail::polish_applies(ctx.g, ctx.mesh.size());
}

plan::EvalDetail eval_detail(const SearchOptions& opts) {
  if (!opts.detailed_evaluation) return plan::EvalDetail::Summary;
  return opts.list_redistributions ? plan::EvalDetail::Full : plan::EvalDetail::Shardings;
}

// The independent evaluation of a plan (checked first), in the detail the
// options ask for.
plan::Evaluation evaluate(const detail::Context& ctx, const plan::Plan& p) {
  plan::check_plan(ctx.g, ctx.spaces, p);
  return plan::evaluate(ctx.g, ctx.spaces, ctx.cluster, p, ctx.opts.cost, eval_detail(ctx.opts));
}

// What rec's passes gave at each price of the memory ladder tried on one
// graph and options: the cuts, their bookkept step time and evaluated
// summary (the full evaluation is made again where the plan is taken).
// rec_search reads the price and the options, never the budget of the
// search that asks (its own budget is the options'), and the evaluation
// reads neither, so the links of rec's chain (kTightenRounds), which
// differ in the budget only and try many of the same prices (every link
// from the second starts over the first rung, then bisects from the same
// interval), take them from here. Kept where the chain runs only (on
// graphs polish refines).
class PriceMemo {
 public:
  struct Entry {
    std::vector<std::vector<std::int16_t>> cuts;
    double bookkept = 0;
    plan::Summary summary;
  };
  [[nodiscard]] const Entry* find(double lambda) const {
    const auto it = entries_.find(lambda);
    return it == entries_.end() ? nullptr : &it->second;
  }
  void store(double lambda, Entry e) { entries_.emplace(lambda, std::move(e)); }

 private:
  std::map<double, Entry> entries_;
};

// The budgets under which a search makes every choice as it did: from
// `memory` up to the budget it ran under. Each choice that a budget steers
// passes a fitting test (a price of the ladder that fits, a plan taken,
// polish's moves: detail::PolishResult::path_memory); a tighter budget that
// every such test still passes fails the same tests the budget failed, so
// it repeats the search. `sensitive`: no budget but its own is known to.
// `binding`: the budget turned something down (a price, a plan, a move);
// where not, the search made the choices it would make with no budget.
// `ladder`: the part of `memory` from the ladder and the expert splits.
struct PathBound {
  double memory = 0;
  double ladder = 0;
  // The least memory of a plan polish started from whose polished plan,
  // taken, needs more: under a budget between the two the polished plan no
  // longer fits, so the search there differs (run_rec).
  double raised_from = std::numeric_limits<double>::infinity();
  bool sensitive = false;
  bool binding = false;

  void take(const detail::PolishResult& r) {
    memory = std::max(memory, r.path_memory);
    sensitive = sensitive || r.budget_sensitive;
    binding = binding || r.budget_binding;
  }
  void passed(double mem) {
    memory = std::max(memory, mem);
    ladder = std::max(ladder, mem);
  }
  void failed() { binding = true; }
  // Whether a search of the same start under `budget` makes the same choices.
  [[nodiscard]] bool holds_at(double budget) const { return !sensitive && memory <= budget; }
};

// Polishes `start` (plan::evaluate's memory: start_mem) and takes the result
// into `res` when it fits and beats what res holds (`have`). `smallest`
// learns the polished plan's memory.
// `kick`: detail::kick instead of detail::polish. `bound` learns the budgets
// under which the result would be the same.
bool take_polished(const detail::Context& ctx, plan::Plan start, double start_mem, bool have,
                   SearchResult& res, MemoryParts& smallest, bool kick = false,
                   PathBound* bound = nullptr) {
  const detail::PolishResult pr = (kick ? detail::kick : detail::polish)(
      ctx.g, ctx.spaces, ctx.cluster, ctx.opts, ctx.budget, start, start_mem);
  if (bound != nullptr) bound->take(pr);
  if (!pr.changed) return false;
  plan::Evaluation ev = evaluate(ctx, start);
  smallest.take_min(MemoryParts::of(ev.summary));
  if (ev.summary.memory_per_device_bytes > ctx.budget) {
    if (bound != nullptr) bound->failed();
    return false;
  }
  if (have && ev.summary.step_time_s >= res.eval.summary.step_time_s) return false;
  if (bound != nullptr) {
    bound->memory = std::max(bound->memory, ev.summary.memory_per_device_bytes);
    if (ev.summary.memory_per_device_bytes > start_mem)
      bound->raised_from = std::min(bound->raised_from, start_mem);
  }
  res.plan = std::move(start);
  res.eval = std::move(ev);
  res.bookkept_step_time_s = pr.step_time_s;
  res.polished = true;
  return true;
}

// Mesh axes of one level and size are interchangeable, but the cost model
// does not price them alike: a collective across an outer axis spreads its
// traffic over the devices below it (Cut::devices_below). The passes
// choose an axis per cut and polish moves one operator at a time, so a plan
// whose cuts sit on the wrong one of two such axes stays there. Swapping
// the two axes in every operator at once (the same strategies, relabelled)
// is one move per pair: greedy over the pairs, until none is faster and
// fits; at most axes^2 / 2 evaluations a round, kSwapRounds rounds.
constexpr int kSwapRounds = 4;

bool take_axis_swaps(const detail::Context& ctx, SearchResult& res, PathBound* bound = nullptr) {
  const std::vector<Cut>& mesh = res.plan.mesh;
  const auto alike = [&](std::size_t a, std::size_t b) {
    return mesh[a].size == mesh[b].size && mesh[a].level == mesh[b].level;
  };
  bool changed = false;
  for (int round = 0; round < kSwapRounds; ++round) {
    bool improved = false;
    for (std::size_t a = 0; a < mesh.size(); ++a)
      for (std::size_t b = a + 1; b < mesh.size(); ++b) {
        if (!alike(a, b)) continue;
        plan::Plan trial = res.plan;
        bool moves = false;
        for (auto& cuts : trial.cuts) {
          moves = moves || cuts[a] != cuts[b];
          std::swap(cuts[a], cuts[b]);
        }
        if (!moves) continue;
        const auto sum = plan::evaluate(ctx.g, ctx.spaces, ctx.cluster, trial, ctx.opts.cost,
                                        plan::EvalDetail::Summary)
                             .summary;
        if (sum.step_time_s >= res.eval.summary.step_time_s * (1 - 1e-12)) continue;
        if (sum.memory_per_device_bytes > ctx.budget) {
          if (bound != nullptr) bound->failed();
          continue;
        }
        res.eval = evaluate(ctx, trial);
        res.plan = std::move(trial);
        res.bookkept_step_time_s = res.eval.summary.step_time_s;
        if (bound != nullptr) bound->memory = std::max(bound->memory, sum.memory_per_device_bytes);
        improved = changed = true;
      }
    if (!improved) break;
  }
  return changed;
}

// Budget monotonicity (issue 19; docs/search.md, "Tightening"). The ladder
// bisects prices by what fits, and polish is greedy, so the plan a search
// reaches depends on the budget: a tighter budget can end at a faster plan,
// which fits the looser budget too. So the search is a chain: once it has a
// plan, it searches again under the budget that plan needs (a hair over
// it, as a user reading the plan file would give), and so on, keeping the
// fastest plan of every link. A search under a link's budget is the chain
// from that link on, so it finds no faster plan than the chain did, up to
// where the chain stopped. The chain stops where a link's PathBound shows
// that the next would repeat it (no search made: most stop there at once),
// at the first link no faster than the fastest plan so far (past it, the
// links of the zoo walk down the memory at a growing step time, each a
// search), or after kTightenRounds links. Where polish does not run (the
// passes alone, past kPolishMaxWork) or runs from every start (small
// graphs, whose ladder is climbed to the top whatever the budget) there
// is no chain.
constexpr int kTightenRounds = 8;

// The budget of the chain's next link after a plan of `mem` bytes: a hair
// over it (the plan file rounds memory to whole bytes), within the search's.
double tightened(double budget, double mem) { return std::min(budget, mem * (1 + 1e-9)); }

// The folded ladder accepts a plan a hair under the budget, so that
// rounding in the extrapolation cannot accept one the full evaluation finds
// over it.
constexpr double kFoldSlack = 1e-9;

// The full graph's figures for plan3 (a plan of the 3-copy fold f3) from
// the 3- and 4-copy folds: memory and the additive parts of step time
// extrapolate over the blocks (inference activations: a maximum over
// operators), and the step time follows from them (overlap after the sum).
plan::Summary extrapolate(const detail::Folded& f3, const detail::Folded& f4,
                          const detail::Repetition& rep, std::size_t full_ops,
                          const Cluster& cluster, const SearchOptions& opts,
                          const plan::Plan& plan3) {
  const plan::Plan plan4 = detail::refold(plan3, rep, 4, full_ops);
  const auto s3 =
      plan::evaluate(f3.graph, f3.spaces, cluster, plan3, opts.cost, plan::EvalDetail::Summary)
          .summary;
  const auto s4 =
      plan::evaluate(f4.graph, f4.spaces, cluster, plan4, opts.cost, plan::EvalDetail::Summary)
          .summary;
  const double extra = static_cast<double>(rep.repeats) - 3.0;  // blocks past the 3-copy fold
  const auto ext = [&](double a3, double a4) { return a3 + extra * (a4 - a3); };
  plan::Summary whole;
  whole.parameter_bytes = ext(s3.parameter_bytes, s4.parameter_bytes);
  whole.gradient_bytes = ext(s3.gradient_bytes, s4.gradient_bytes);
  whole.optimizer_bytes = ext(s3.optimizer_bytes, s4.optimizer_bytes);
  whole.activation_bytes = opts.mode == Mode::Train
                               ? ext(s3.activation_bytes, s4.activation_bytes)
                               : std::max(s3.activation_bytes, s4.activation_bytes);
  whole.memory_per_device_bytes = whole.parameter_bytes + whole.activation_bytes;
  whole.compute_s = ext(s3.compute_s, s4.compute_s);
  whole.recompute_s = ext(s3.recompute_s, s4.recompute_s);
  whole.backward_compute_s = ext(s3.backward_compute_s, s4.backward_compute_s);
  whole.communication_s = ext(s3.communication_s, s4.communication_s);
  whole.parameter_comm_s = ext(s3.parameter_comm_s, s4.parameter_comm_s);
  whole.parameter_comm_repeated_s = ext(s3.parameter_comm_repeated_s, s4.parameter_comm_repeated_s);
  plan::finish_step_time(whole, plan3.training.microbatches, opts.cost.overlap);
  return whole;
}

// A setting's plan as the folded comparison of settings sees it: the 3-copy
// fold's plan and its extrapolated step time (run_training unfolds only
// the fastest setting's).
struct FoldedChoice {
  plan::Plan plan3;
  double step_time_s = 0;
};

// The memory ladder of Rec on the 3-copy fold of a repeated graph. Memory
// and step time are additive over blocks (inference activations: a maximum
// over operators), so the full graph's follow exactly from the 3- and 4-copy
// folds; only the accepted plan is unfolded and evaluated in full, and its
// bookkept step time is that extrapolation. `full_ops`: the operators of
// the graph folded; ctx's graph is that graph for run() (which unfolds
// into it), any graph of the same options, cluster and budget for choose().
class FoldedLadder {
 public:
  FoldedLadder(const detail::Context& ctx, const detail::Repetition& rep, SearchResult& res,
               detail::Folded f3, detail::Folded f4, std::size_t full_ops)
      : ctx_(ctx),
        rep_(rep),
        res_(res),
        f3_(std::move(f3)),
        f4_(std::move(f4)),
        full_ops_(full_ops) {}

  // The fastest fitting plan, unfolded, evaluated in full and polished.
  void run() {
    const auto [rung, fits] = climb();
    finish(rung, fits);
  }

  // After run(): the budgets under which it would make the same choices.
  [[nodiscard]] const PathBound& bound() const { return bound_; }

  // The fastest fitting plan on the fold, not unfolded: for a comparison
  // of settings where polish does not apply. Throws NoFit like run().
  FoldedChoice choose() {
    const auto [rung, fits] = climb();
    if (!fits) throw NoFit(ctx_.budget, ctx_.cluster, best_mem_);
    res_.memory_rungs = rung < 0 ? kLadderRungs + 1 : rung;
    res_.expert_plan = best_expert_;
    return {std::move(best_), best_step_};
  }

 private:
  // The ladder, then the expert splits: the first fitting rung (-1: none)
  // and whether any plan fits.
  std::pair<int, bool> climb() {
    const int rung = climb_ladder(
        res_.plan.mesh, [&](double lambda, int r) { return attempt(lambda, r); }, kBisectFolded);
    bool expert_fits = false;
    if (ctx_.opts.expert_candidates) {
      for (std::size_t split = 0; split <= res_.plan.mesh.size(); ++split) {
        plan::Plan trial = res_.plan;
        detail::tensor_parallel(f3_.graph, f3_.spaces, ctx_.cluster, split, trial);
        expert_fits = consider(std::move(trial), true) || expert_fits;
      }
    }
    return {rung, rung >= 0 || expert_fits};
  }

  // Rec on the 3-copy fold at memory price lambda (or what it gave, from
  // SearchOptions::ladder_memo).
  bool attempt(double lambda, int rung) {
    detail::LadderMemo* memo = ctx_.opts.ladder_memo.get();
    const plan::Training& t = res_.plan.training;
    const detail::LadderMemo::Key key{lambda, rung, t.recompute, t.zero_stage,
                                      ctx_.opts.training.microbatches.value_or(1)};
    if (memo != nullptr)
      if (const detail::LadderMemo::Entry* e = memo->find(key)) {
        plan::Plan trial = res_.plan;  // the header
        trial.cuts = e->cuts3;
        return consider(std::move(trial), e->whole, false);
      }
    plan::Plan trial = res_.plan;
    (void)detail::rec_search(f3_.graph, f3_.spaces, ctx_.cluster, ctx_.opts, lambda, trial,
                             &f3_.weight, rung);
    const plan::Summary whole = extrapolated(trial);
    if (memo != nullptr) memo->store(key, {trial.cuts, whole});
    return consider(std::move(trial), whole, false);
  }

  // The full graph's figures for a plan of the 3-copy fold.
  plan::Summary extrapolated(const plan::Plan& trial) const {
    plan::check_plan(f3_.graph, f3_.spaces, trial);
    // The weighted search models the edges between middle blocks by the
    // middle copy's edges to the last one, so its own account is not the
    // full graph's; the extrapolation is exact, and the tests hold it to the
    // full evaluation.
    return extrapolate(f3_, f4_, rep_, full_ops_, ctx_.cluster, ctx_.opts, trial);
  }

  bool consider(plan::Plan trial, bool expert) {
    const plan::Summary whole = extrapolated(trial);
    return consider(std::move(trial), whole, expert);
  }

  // A fitting plan is kept if it is the fastest so far.
  bool consider(plan::Plan trial, const plan::Summary& whole, bool expert) {
    const double mem = whole.memory_per_device_bytes;
    const double step = whole.step_time_s;
    if (mem < best_mem_.total) {
      best_mem_ = MemoryParts::of(whole);
      smallest_ = trial;
    }
    // A hair under the budget, so that rounding in the extrapolation cannot
    // accept a plan the full evaluation finds over it.
    if (mem > ctx_.budget * (1 - kFoldSlack)) {
      // An expert split slower than the fastest plan so far decides nothing.
      if (!expert || step < best_step_) bound_.failed();
      return false;
    }
    if (!expert || step < best_step_) bound_.passed(mem / (1 - kFoldSlack));
    if (step < best_step_) {
      best_step_ = step;
      best_ = std::move(trial);
      best_expert_ = expert;
    }
    return true;
  }

  // Unfolds and evaluates the fastest fitting plan (or, for polish to mend,
  // the smallest), then polishes it.
  void finish(int rung, bool fits) {
    const detail::Context& ctx = ctx_;
    if (!fits && !may_polish(ctx)) throw NoFit(ctx.budget, ctx.cluster, best_mem_);
    plan::Plan full = detail::unfold(fits ? best_ : smallest_, rep_, full_ops_);
    plan::Evaluation ev = evaluate(ctx, full);
    // Full recomputation keeps the largest segment's activations, which
    // the folds extrapolate only approximately: a plan over the budget once
    // unfolded is mended by polish or reported as not fitting.
    if (fits && ev.summary.memory_per_device_bytes > ctx.budget) {
      bound_.failed();
      best_mem_.take_min(MemoryParts::of(ev.summary));
      if (!may_polish(ctx)) throw NoFit(ctx.budget, ctx.cluster, best_mem_);
      fits = false;
    }
    res_.memory_rungs = rung < 0 ? kLadderRungs + 1 : rung;
    const double full_mem = ev.summary.memory_per_device_bytes;
    if (fits) {
      res_.eval = std::move(ev);
      res_.bookkept_step_time_s = best_step_;
      res_.expert_plan = best_expert_;
      bound_.passed(full_mem);
    }
    // Without polish (then the plan fits: see the throws above) the
    // unfolded plan is the result, moved: at 10^7 operators a copy of its
    // cuts is most of a gigabyte.
    if (!may_polish(ctx)) {
      res_.plan = std::move(full);
      return;
    }
    if (fits) {
      res_.plan = full;
    } else {
      res_.plan.cuts.clear();
    }
    const bool polished =
        take_polished(ctx, std::move(full), full_mem, fits, res_, best_mem_, false, &bound_);
    if (!fits && !polished) throw NoFit(ctx.budget, ctx.cluster, best_mem_);
  }

  const detail::Context& ctx_;
  const detail::Repetition& rep_;
  SearchResult& res_;
  const detail::Folded f3_, f4_;
  const std::size_t full_ops_;
  MemoryParts best_mem_;  // the least memory seen, by kind
  plan::Plan best_;
  double best_step_ = std::numeric_limits<double>::infinity();
  bool best_expert_ = false;
  plan::Plan smallest_;  // the least memory seen, for polish to mend
  PathBound bound_;
};

// The memory ladder of Rec on the whole graph, then the expert splits, then
// polish; the fastest fitting plan goes into res (have_), and the least
// memory seen with its plan is kept for polish to mend.
class RecLadder {
 public:
  // `prices`: the prices tried by the chain's links so far (PriceMemo).
  RecLadder(const detail::Context& ctx, SearchResult& res, PriceMemo& prices)
      : ctx_(ctx), res_(res), prices_(prices) {}

  void run() {
    const std::size_t ops = ctx_.g.num_operators();
    const int rung = climb_ladder(
        res_.plan.mesh, [&](double lambda, int r) { return attempt(lambda, r); },
        bisect_steps(ops));
    if (rung >= 0) climb_on(rung);
    // The expert splits (one evaluation each): on small graphs, and on
    // any graph when nothing else fits.
    if (ctx_.opts.expert_candidates && (ops <= kBisectSmallGraph || rung < 0)) expert_splits();
    // Polish the fastest fitting plan, or mend the smallest one.
    if (may_polish(ctx_)) {
      plan::Plan start = have_ ? res_.plan : std::move(smallest_);
      const double start_mem = have_ ? res_.eval.summary.memory_per_device_bytes : best_mem_.total;
      if (take_polished(ctx_, std::move(start), start_mem, have_, res_, best_mem_, false, &bound_))
        have_ = true;
      // On small graphs, every other plan the ladder and the splits made is
      // polished too (see multi_start()).
      for (auto& [plan, mem] : starts_)
        if (take_polished(ctx_, std::move(plan), mem, have_, res_, best_mem_)) have_ = true;
      // Then kicks from the fastest (see detail::kick).
      if (have_ && multi_start())
        (void)take_polished(ctx_, res_.plan, res_.eval.summary.memory_per_device_bytes, true, res_,
                            best_mem_, true);
      // Then equal axes swapped (take_axis_swaps), and polish again from there.
      if (have_ && take_axis_swaps(ctx_, res_, &bound_))
        (void)take_polished(ctx_, res_.plan, res_.eval.summary.memory_per_device_bytes, true, res_,
                            best_mem_, false, &bound_);
    }
    if (!have_) throw NoFit(ctx_.budget, ctx_.cluster, best_mem_);
    res_.memory_rungs = rung < 0 ? kLadderRungs + 1 : rung;
  }

  // After run(): the budgets under which it would make the same choices;
  // small graphs (multi_start()) do not chain (kTightenRounds).
  [[nodiscard]] const PathBound& bound() const { return bound_; }
  [[nodiscard]] bool chains() const { return may_polish(ctx_) && !multi_start(); }

 private:
  // Polish's moves are local: from the fastest fitting plan it cannot
  // reach an optimum that differs in several operators at once, which under
  // a budget on latency-bound graphs (every collective costs its latency)
  // is the rule. Where operators x mesh axes is small, each distinct plan
  // of the ladder's prices and of the splits (over the budget or within
  // it) is kept as a start of its own: at most kLadderRungs + kBisectSmall +
  // axes + 1 polishes of a small graph.
  [[nodiscard]] bool multi_start() const {
    return may_polish(ctx_) && detail::small_graph(ctx_.g, ctx_.mesh.size());
  }

  // Small graphs: the rungs above the first that fits, each plan a start of
  // polish. A tighter budget climbs to them and polishes them; so that a
  // looser budget never returns a slower plan than a tighter one, it sees
  // them too (its polish then has more room). Until two rungs in a row add
  // no new plan: at most kLadderRungs searches of a small graph.
  void climb_on(int fitted) {
    if (!multi_start()) return;
    SearchOptions quiet = ctx_.opts;
    quiet.on_progress = nullptr;
    int idle = 0;
    for (int r = fitted + 1; r <= kLadderRungs && idle < 2; ++r) {
      const std::size_t before = starts_.size();
      (void)attempt(ladder_price(res_.plan.mesh, r), r, quiet);
      idle = starts_.size() > before ? 0 : idle + 1;
    }
  }

  void note_start(const plan::Plan& trial, double mem) {
    if (!multi_start()) return;
    for (const auto& [p, m] : starts_)
      if (p.cuts == trial.cuts) return;
    starts_.emplace_back(trial, mem);
  }

  void note_memory(const plan::Plan& trial, const plan::Summary& sum) {
    note_start(trial, sum.memory_per_device_bytes);
    if (sum.memory_per_device_bytes >= best_mem_.total) return;
    best_mem_ = MemoryParts::of(sum);
    if (may_polish(ctx_)) smallest_ = trial;
  }

  // Rec at memory price lambda; whether its plan fits.
  // `opts`: the search's options, or (climb_on) a copy that reports no
  // progress (progress counts the rungs up to the first that fits).
  bool attempt(double lambda, int rung) { return attempt(lambda, rung, ctx_.opts); }
  bool attempt(double lambda, int rung, const SearchOptions& opts) {
    plan::Plan trial = res_.plan;
    double bookkept = 0;
    std::optional<plan::Evaluation> ev;  // made here, or where the plan is taken
    plan::Summary sum;
    if (const PriceMemo::Entry* known = prices_.find(lambda)) {
      trial.cuts = known->cuts;
      bookkept = known->bookkept;
      sum = known->summary;
    } else {
      bookkept =
          detail::rec_search(ctx_.g, ctx_.spaces, ctx_.cluster, opts, lambda, trial, nullptr, rung);
      ev = evaluate(ctx_, trial);
      sum = ev->summary;
      if (chains()) prices_.store(lambda, {trial.cuts, bookkept, sum});
    }
    note_memory(trial, sum);
    if (sum.memory_per_device_bytes > ctx_.budget) {
      bound_.failed();
      return false;
    }
    bound_.passed(sum.memory_per_device_bytes);
    if (!have_ || sum.step_time_s < res_.eval.summary.step_time_s) {
      have_ = true;
      res_.eval = ev ? std::move(*ev) : evaluate(ctx_, trial);
      res_.plan = std::move(trial);
      res_.bookkept_step_time_s = bookkept;
    }
    return true;
  }

  // Every DP x TP split of the mesh, taken where it fits and is faster.
  void expert_splits() {
    const detail::Context& ctx = ctx_;
    for (std::size_t split = 0; split <= res_.plan.mesh.size(); ++split) {
      plan::Plan trial = res_.plan;
      detail::tensor_parallel(ctx.g, ctx.spaces, ctx.cluster, split, trial);
      plan::check_plan(ctx.g, ctx.spaces, trial);
      const auto sum = plan::evaluate(ctx.g, ctx.spaces, ctx.cluster, trial, ctx.opts.cost,
                                      plan::EvalDetail::Summary)
                           .summary;
      note_memory(trial, sum);
      if (have_ && sum.step_time_s >= res_.eval.summary.step_time_s) continue;
      if (sum.memory_per_device_bytes > ctx.budget) {
        bound_.failed();
        continue;
      }
      bound_.passed(sum.memory_per_device_bytes);
      have_ = true;
      res_.eval = evaluate(ctx, trial);
      res_.plan = std::move(trial);
      res_.bookkept_step_time_s = res_.eval.summary.step_time_s;
      res_.expert_plan = true;
    }
  }

  const detail::Context& ctx_;
  SearchResult& res_;
  PriceMemo& prices_;
  bool have_ = false;
  MemoryParts best_mem_;                               // the least memory seen, by kind
  plan::Plan smallest_;                                // the least memory seen, for polish to mend
  std::vector<std::pair<plan::Plan, double>> starts_;  // multi_start(): plans and their memory
  PathBound bound_;
};

void run_algorithm(const detail::Context& ctx, SearchResult& res,
                   const detail::Repetition* known = nullptr);

// Another algorithm on the same graph and training setting (the hints of
// ilp, the incumbent of exhaustive), with `header`'s plan header.
SearchResult run_nested(const detail::Context& ctx, const SearchOptions& o,
                        const plan::Plan& header) {
  SearchResult r;
  r.plan = header;
  r.plan.algorithm = std::string(algorithm_name(o.algorithm));
  const detail::Context nested(ctx.g, ctx.spaces, ctx.cluster, o, ctx.budget);
  run_algorithm(nested, r);
  return r;
}

// One link of rec's chain (kTightenRounds): the folded or the whole
// graph's ladder, with polish, under ctx's budget. `rep`: ctx.g's
// repetition, if it folds. Whether the chain goes on from it.
bool run_link(const detail::Context& ctx, SearchResult& res,
              const std::optional<detail::Repetition>& rep, PathBound& bound, PriceMemo& prices) {
  if (rep) {
    res.fold_period = rep->period;
    res.fold_repeats = rep->repeats;
    FoldedLadder ladder(ctx, *rep, res, detail::fold(ctx.g, ctx.spaces, *rep, 3),
                        detail::fold(ctx.g, ctx.spaces, *rep, 4), ctx.g.num_operators());
    ladder.run();
    bound = ladder.bound();
    return may_polish(ctx);
  }
  RecLadder ladder(ctx, res, prices);
  ladder.run();
  bound = ladder.bound();
  return ladder.chains();
}

// `known`: ctx.g's repetition where the caller found it already (a pass over
// the whole graph).
void run_rec(const detail::Context& ctx, SearchResult& res, const detail::Repetition* known) {
  std::optional<detail::Repetition> rep;
  if (ctx.opts.fold_repeats)
    rep = known ? std::optional(*known) : detail::find_repetition(ctx.g, ctx.opts.fold_min_repeats);
  PathBound bound;
  PriceMemo prices;
  if (!run_link(ctx, res, rep, bound, prices)) {
    // No polish, no chain: the ladder's fitting tests are all the budget
    // steered.
    if (!may_polish(ctx) && !bound.sensitive) res.same_choices_from_bytes = bound.memory;
    return;
  }
  SearchOptions quiet = ctx.opts;
  quiet.on_progress = nullptr;
  for (int round = 0; round < kTightenRounds; ++round) {
    double b = tightened(ctx.budget, res.eval.summary.memory_per_device_bytes);
    // No link where it would repeat this one. Where the budget turned
    // nothing down, only where the ladder would differ (its first price no
    // longer fits), not where only polish would: see kTightenRounds. Where
    // polish took a plan needing more memory than the ladder's plan it
    // started from, the next link's budget is that plan's, where the
    // polished plan no longer fits; or, where that plan is the most memory
    // the ladder tried, a hair under it, where the ladder climbs on.
    const auto repeats = [&](double budget) {
      return bound.binding ? bound.holds_at(budget) : bound.ladder <= budget;
    };
    if (repeats(b) && !bound.binding && bound.raised_from < b) {
      b = tightened(ctx.budget, bound.raised_from);
      if (repeats(b)) b = std::min(ctx.budget, bound.raised_from * (1 - 1e-9));
    }
    if (repeats(b)) return;
    const detail::Context tight(ctx.g, ctx.spaces, ctx.cluster, quiet, b);
    SearchResult link;
    link.plan = res.plan;  // the header
    link.plan.cuts.clear();
    try {
      (void)run_link(tight, link, rep, bound, prices);
    } catch (const NoFit&) {
      return;
    }
    if (link.eval.summary.step_time_s >= res.eval.summary.step_time_s) return;
    // The rungs the ladder climbed under the search's own budget, not the
    // link's: whether the budget priced memory at all (run_training).
    link.memory_rungs = res.memory_rungs;
    res = std::move(link);
  }
}

// DataParallel and Megatron: one fixed plan each, which must fit; they
// differ only in how they pick each operator's strategy.
void run_fixed(const detail::Context& ctx, SearchResult& res) {
  plan::Plan& p = res.plan;
  if (ctx.opts.algorithm == Algorithm::DataParallel)
    detail::data_parallel(ctx.g, ctx.spaces, ctx.cluster, p);
  else
    detail::tensor_parallel(ctx.g, ctx.spaces, ctx.cluster,
                            detail::innermost_level_axis(ctx.cluster), p);
  res.eval = evaluate(ctx, p);
  const MemoryParts need = MemoryParts::of(res.eval.summary);
  if (need.total > ctx.budget) {
    const auto [budget_text, need_text] = gib_pair(ctx.budget, need.total);
    throw NoFitError("the " + std::string(algorithm_name(ctx.opts.algorithm)) + " plan needs " +
                         need_text + " per device (" + memory_parts_text(need) +
                         "), over the budget of " + budget_text,
                     need.total, 0);
  }
}

void run_grid(const detail::Context& ctx, SearchResult& res) {
  double smallest = 0;
  if (!detail::grid(ctx.g, ctx.spaces, ctx.cluster, ctx.opts, ctx.budget, res.plan, smallest))
    throw NoFitError("no DP x TP split fits the memory budget of " +
                         gib_pair(ctx.budget, smallest).first + " per device; the smallest needs " +
                         gib_pair(ctx.budget, smallest).second,
                     smallest, 0);
  res.eval = evaluate(ctx, res.plan);
}

void run_ilp(const detail::Context& ctx, SearchResult& res) {
  if (!ilp_available())
    throw Error(Errc::kUsage,
                "this recsearch was built without COIN-OR CBC: algorithm 'ilp' is not "
                "available (install coinor-libcbc-dev and reconfigure with -Dilp=enabled)");
  // The baselines' and rec's plans stay among the candidates; rec's
  // (last) is the solver's starting point.
  std::vector<plan::Plan> hints;
  for (Algorithm a : {Algorithm::DataParallel, Algorithm::Grid, Algorithm::Rec}) {
    SearchOptions o = ctx.opts;
    o.algorithm = a;
    o.detailed_evaluation = false;
    try {
      hints.push_back(run_nested(ctx, o, res.plan).plan);
    } catch (const Error& e) {
      if (e.code() != Errc::kNoFit) throw;
    }
  }
  const auto r = detail::ilp(ctx.g, ctx.spaces, ctx.cluster, ctx.opts, ctx.budget, hints, res.plan);
  if (!r.found)
    throw Error(Errc::kNoFit, std::string("no plan fits the memory budget of ") + gib(ctx.budget) +
                                  " per device (ilp" +
                                  (r.proven ? ", proven infeasible)" : ", none found in time)"));
  res.proven_optimal = r.proven && !r.restricted;
  res.ilp_restricted = r.restricted;
  res.ilp_lower_bound_s = r.lower_bound_s;
  res.bookkept_step_time_s = r.step_time_s;
  res.eval = evaluate(ctx, res.plan);
  if (res.eval.summary.memory_per_device_bytes > ctx.budget)
    throw Error(Errc::kInternal, "ilp: the solution's memory differs from the evaluator's");
}

void run_exhaustive(const detail::Context& ctx, SearchResult& res) {
  if (ctx.g.num_operators() > ctx.opts.exhaustive_max_operators)
    throw Error(Errc::kUsage, "exhaustive search is limited to " +
                                  std::to_string(ctx.opts.exhaustive_max_operators) +
                                  " operators; the graph has " +
                                  std::to_string(ctx.g.num_operators()));
  // Start from the best feasible heuristic plan as the incumbent.
  SearchOptions rec_opts = ctx.opts;
  rec_opts.algorithm = Algorithm::Rec;
  plan::Plan incumbent = res.plan;
  bool have = false;
  try {
    incumbent = run_nested(ctx, rec_opts, res.plan).plan;
    have = true;
  } catch (const Error& e) {
    if (e.code() != Errc::kNoFit) throw;
  }
  const auto ex =
      detail::exhaustive(ctx.g, ctx.spaces, ctx.cluster, ctx.opts, ctx.budget, incumbent, have);
  res.proven_optimal = ex.proven;
  res.bookkept_step_time_s = ex.step_time_s;
  if (!ex.found)
    throw Error(Errc::kNoFit, "no plan fits the memory budget of " + gib(ctx.budget) +
                                  " per device (exhaustive search)");
  incumbent.algorithm = res.plan.algorithm;
  res.plan = std::move(incumbent);
  res.eval = evaluate(ctx, res.plan);
}

// Runs the algorithm the options name into res (whose plan has its header).
void run_algorithm(const detail::Context& ctx, SearchResult& res, const detail::Repetition* known) {
  switch (ctx.opts.algorithm) {
    case Algorithm::Rec: return run_rec(ctx, res, known);
    case Algorithm::DataParallel:
    case Algorithm::Megatron: return run_fixed(ctx, res);
    case Algorithm::Grid: return run_grid(ctx, res);
    case Algorithm::Ilp: return run_ilp(ctx, res);
    case Algorithm::Exhaustive: return run_exhaustive(ctx, res);
  }
}

}  // namespace

namespace {

// The plan header of a search at training setting t (one microbatch: the
// searches see the microbatch graph).
plan::Plan setting_header(const ir::Graph& g, const Cluster& cluster, const SearchOptions& opts,
                          const plan::Training& t) {
  plan::Plan p;
  p.graph_name = g.name();
  p.algorithm = std::string(algorithm_name(opts.algorithm));
  p.mode = opts.mode;
  p.mesh = cluster.cuts();
  if (opts.mode == Mode::Train) p.training = {t.recompute, t.zero_stage, 1, {}};
  return p;
}

// The search at one training setting: on the microbatch graph when the
// setting has several microbatches (its plans evaluated there as one
// microbatch, so that memory is that of the step), then evaluated on g.
// `known`: g's repetition (SearchOptions::fold_min_repeats), where found
// already.
SearchResult run_setting(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                         const Cluster& cluster, const SearchOptions& opts, const plan::Training& t,
                         const detail::Repetition* known = nullptr) {
  SearchOptions o = opts;
  if (opts.mode == Mode::Train) o.training = {t.recompute, t.zero_stage, t.microbatches};
  std::optional<plan::MicrobatchView> view;
  if (opts.mode == Mode::Train && t.microbatches > 1) {
    view = plan::microbatch_view(g, spaces, t.microbatches);
    if (!view) throw Error(Errc::kNoFit, plan::microbatch_error(g, t.microbatches));
  }
  const ir::Graph& sg = view ? view->graph : g;
  const std::vector<algebra::OpSpace>& ss = view ? view->spaces : spaces;
  SearchResult res;
  plan::Plan& p = res.plan;
  p = setting_header(g, cluster, opts, t);
  const detail::Context ctx(sg, ss, cluster, o, detail::memory_budget(cluster, o));
  run_algorithm(ctx, res, view ? nullptr : known);
  if (view) {
    p.training.microbatches = t.microbatches;
    res.eval = plan::evaluate(g, spaces, cluster, p, o.cost, eval_detail(o));
    res.bookkept_step_time_s = res.eval.summary.compute_s + res.eval.summary.communication_s;
  }
  return res;
}

// Microbatch counts to try: every divisor of the batch up to
// kMaxMicrobatches, ascending (past a few, each further split saves less
// than the collectives it repeats cost). A batch of 12 tries 1, 2, 3, 4, 6
// and 12; one of 9, 1, 3 and 9.
constexpr std::int64_t kMaxMicrobatches = 64;

std::vector<std::int64_t> microbatch_counts(const ir::Graph& g, const TrainingChoice& pin) {
  if (pin.microbatches) return {*pin.microbatches};
  std::vector<std::int64_t> out{1};
  const std::int64_t b = plan::batch_size(g);
  for (std::int64_t m = 2; m <= kMaxMicrobatches && b > 0 && m <= b; ++m)
    if (b % m == 0) out.push_back(m);
  return out;
}

// The settings tried, one ladder per recomputation: within a ladder, in
// the order their overheads grow (ZeRO 2 with one microbatch costs what
// ZeRO 0 does and saves the most; with several, ZeRO 1 keeps gradients
// whole and reduces them once, ZeRO 2 and 3 trade collectives per
// microbatch for memory; more microbatches repeat every collective's
// latency), so the first that fits is the ladder's best.
std::vector<std::vector<plan::Training>> setting_ladders(const ir::Graph& g,
                                                         const TrainingChoice& pin,
                                                         bool allow_full) {
  std::vector<plan::Recompute> rcs = {plan::Recompute::None, plan::Recompute::Selective};
  if (allow_full) rcs.push_back(plan::Recompute::Full);
  if (pin.recompute) rcs = {*pin.recompute};
  const auto ms = microbatch_counts(g, pin);
  std::vector<std::vector<plan::Training>> ladders;
  for (const plan::Recompute rc : rcs) {
    std::vector<plan::Training> ladder;
    for (const std::int64_t m : ms) {
      std::vector<int> stages = m == 1 ? std::vector<int>{2, 3} : std::vector<int>{1, 2, 3};
      if (pin.zero_stage) stages = {*pin.zero_stage};
      for (const int z : stages) ladder.push_back({rc, z, m, {}});
    }
    ladders.push_back(std::move(ladder));
  }
  return ladders;
}

// What a search that fits nothing also tried, for its message: the
// settings it was free to choose.
std::string tried_settings(const ir::Graph& g, const TrainingChoice& pin, bool allow_full) {
  std::vector<std::string> parts;
  if (!pin.recompute)
    parts.emplace_back(allow_full ? "selective and full recomputation" : "selective recomputation");
  if (!pin.zero_stage) parts.emplace_back("ZeRO stages 1 to 3");
  if (!pin.microbatches && microbatch_counts(g, pin).size() > 1)
    parts.push_back("up to " + std::to_string(microbatch_counts(g, pin).back()) + " microbatches");
  if (parts.empty()) return {};
  std::string out = " (also tried ";
  for (std::size_t i = 0; i < parts.size(); ++i)
    out += (i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ") + parts[i];
  return out + ")";
}

// The memory savings the user's pins ruled out, for a message that fits
// nothing: " (not allowed: ZeRO stage 3 (--zero 1), ...)"; empty when every
// saving was free. `allow_full`: whether full recomputation was an option.
std::string untried_savings(const TrainingChoice& user, bool allow_full) {
  std::vector<std::string> parts;
  if (user.recompute && *user.recompute != plan::Recompute::Full && allow_full)
    parts.push_back("full recomputation (--recompute " +
                    std::string(plan::recompute_name(*user.recompute)) + ")");
  if (user.zero_stage && *user.zero_stage < 3)
    parts.push_back("ZeRO stage 3 (--zero " + std::to_string(*user.zero_stage) + ")");
  if (user.microbatches)
    parts.push_back("other microbatch counts (--microbatches " +
                    std::to_string(*user.microbatches) + ")");
  if (parts.empty()) return {};
  std::string out = " (not allowed: ";
  for (std::size_t i = 0; i < parts.size(); ++i) out += (i == 0 ? "" : ", ") + parts[i];
  return out + ")";
}

// The parameter state per device were every parameter's state spread over
// all devices: no plan at any training setting needs less, since each byte
// of it lives on some device. A budget below it fits nothing.
double parameter_state_floor(const ir::Graph& g, const Cluster& cluster,
                             const SearchOptions& opts) {
  double total = 0;
  for (const ir::Tensor& t : g.tensors())
    if (t.kind == ir::TensorKind::Parameter)
      total += t.bytes() * plan::parameter_state(opts.cost, opts.mode,
                                                 static_cast<int>(ir::dtype_size(t.dtype)))
                               .total();
  return total / static_cast<double>(std::max<std::size_t>(cluster.num_devices(), 1));
}

// Why a search below the floor searched one setting only, for its message.
std::string floor_note(double floor, const Cluster& cluster, const plan::Training& t) {
  return " (the parameter state alone takes " + gib(floor) + " per device spread over all " +
         std::to_string(cluster.num_devices()) +
         " devices, so no training setting fits; searched at the most saving one allowed: " +
         std::string(plan::recompute_name(t.recompute)) + " recomputation, ZeRO stage " +
         std::to_string(t.zero_stage) + ", " + std::to_string(t.microbatches) + " microbatch" +
         (t.microbatches == 1 ? "" : "es") + ")";
}

// Whether graph g has an attention core for selective recomputation to drop.
bool has_attention_core(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces) {
  const plan::MemoryRules r = plan::memory_rules(g, spaces, plan::Recompute::Selective);
  return std::any_of(r.recomputed.begin(), r.recomputed.end(), [](std::uint8_t x) { return x; });
}

// Per-block recomputation (docs/cost-model.md, What the searches do with
// them): where plan-wide full recomputation won, full recomputation of only
// the last k blocks of the repeated stack, the others at `rest`, may fit at
// less recomputed work. One segment is live at a time, so memory falls with
// k; k is bisected between 2 (one block alone saves nothing) and all
// blocks but one, each k searched on a copy of g whose
// blocks' operators are pinned (so a fold sees the recomputed blocks as a
// tail of their own). Past kBlockSearchMaxOps operators the log2(blocks)
// extra searches, each copying the graph, are not made.
constexpr std::size_t kBlockSearchMaxOps = 50000;
constexpr std::size_t kBlockSearchMinRepeats = 3;

// g with the operators of its last k blocks pinned to full recomputation
// (operators the graph pins keep their pins).
ir::Graph pin_last_blocks(const ir::Graph& g, const detail::Repetition& rep, std::size_t k) {
  ir::Graph copy = g;
  const std::size_t end = rep.start + rep.period * rep.repeats;
  for (std::size_t o = end - rep.period * k; o < end; ++o) {
    ir::Operator& op = copy.mutable_op(static_cast<ir::OpId>(o));
    if (!op.recompute) op.recompute = plan::Recompute::Full;
  }
  return copy;
}

std::optional<SearchResult> run_blocks(const ir::Graph& g,
                                       const std::vector<algebra::OpSpace>& spaces,
                                       const Cluster& cluster, const SearchOptions& opts,
                                       const plan::Training& won, plan::Recompute rest) {
  if (g.num_operators() > kBlockSearchMaxOps) return std::nullopt;
  const auto rep = detail::find_repetition(g, kBlockSearchMinRepeats);
  if (!rep) return std::nullopt;
  const plan::Training t{rest, won.zero_stage, won.microbatches, {}};
  std::optional<SearchResult> best;
  // Bisected: the smallest k whose plan fits with no price on memory (past
  // it, more blocks only add work). Plans that fit under a price are kept
  // too when faster: fewer blocks recomputed may pay for dearer cuts.
  std::size_t lo = 2, hi = rep->repeats - 1;
  while (lo <= hi) {
    const std::size_t k = lo + (hi - lo) / 2;
    const ir::Graph pinned = pin_last_blocks(g, *rep, k);
    bool free = false;
    try {
      SearchResult r = run_setting(pinned, spaces, cluster, opts, t);
      free = r.memory_rungs == 0;
      r.plan.training.per_op = plan::operator_recompute(pinned, r.plan.training);
      if (!best || r.eval.summary.step_time_s < best->eval.summary.step_time_s) best = std::move(r);
    } catch (const Error& e) {
      if (e.code() != Errc::kNoFit) throw;
    }
    if (free) {
      hi = k - 1;
    } else {
      lo = k + 1;
    }
  }
  return best;
}

// Per-parameter ZeRO (docs/cost-model.md, What the searches do with them):
// where plan-wide stage 3 won, stage 3 on the largest parameters only (the
// embeddings, the biggest blocks' weights) and stage 2 on the rest may fit
// at fewer weight gathers. The won plan's cuts are kept and each choice is
// priced by the evaluator alone: k, the number of largest parameters at
// stage 3, is bisected to the smallest whose plan fits (memory falls as k
// grows, the gathers grow with it), about log2(parameters) evaluations.
// The result replaces the plan-wide one where it is faster; its bookkept
// step time is then the evaluator's (rec's accounts are plan-wide).
std::optional<SearchResult> run_zero_split(const ir::Graph& g,
                                           const std::vector<algebra::OpSpace>& spaces,
                                           const Cluster& cluster, const SearchOptions& opts,
                                           const SearchResult& won) {
  if (won.plan.training.zero_stage != 3 || !won.plan.training.zero_per_param.empty())
    return std::nullopt;
  std::vector<ir::TensorId> params;
  for (ir::TensorId t = 0; t < g.num_tensors(); ++t)
    if (g.tensor(t).kind == ir::TensorKind::Parameter) params.push_back(t);
  if (params.size() < 2) return std::nullopt;
  std::stable_sort(params.begin(), params.end(), [&](ir::TensorId a, ir::TensorId b) {
    return g.tensor(a).bytes() > g.tensor(b).bytes();
  });
  const double budget = detail::memory_budget(cluster, opts);
  const auto priced = [&](std::size_t k) {
    SearchResult r;
    r.plan = won.plan;
    std::vector<std::int8_t>& z = r.plan.training.zero_per_param;
    z.assign(g.num_tensors(), 2);
    for (std::size_t i = 0; i < k; ++i) z[params[i]] = 3;
    r.eval = plan::evaluate(g, spaces, cluster, r.plan, opts.cost, eval_detail(opts));
    r.bookkept_step_time_s = r.eval.summary.compute_s + r.eval.summary.communication_s;
    r.memory_rungs = won.memory_rungs;
    return r;
  };
  std::optional<SearchResult> best;
  std::size_t lo = 1, hi = params.size() - 1;  // 0 and all are plan-wide stages 2 and 3
  while (lo <= hi) {
    const std::size_t k = lo + (hi - lo) / 2;
    SearchResult r = priced(k);
    if (r.eval.summary.memory_per_device_bytes <= budget) {
      if (!best || r.eval.summary.step_time_s < best->eval.summary.step_time_s) best = std::move(r);
      hi = k - 1;
    } else {
      lo = k + 1;
    }
  }
  return best;
}

// One training setting as the comparison of settings sees it: its step
// time and memory rungs, and its full result where it was evaluated
// unfolded (run_setting).
struct SettingOutcome {
  plan::Training t;
  int memory_rungs = 0;
  double step_time_s = 0;
  std::optional<SearchResult> full;

  static SettingOutcome of(const plan::Training& t, SearchResult r) {
    SettingOutcome out{t, r.memory_rungs, r.eval.summary.step_time_s, {}};
    out.full = std::move(r);
    return out;
  }
};

// The training settings compared on the folds of a repeated graph
// (SearchOptions::fold_settings): g is folded once; each setting climbs the
// folded ladder on those folds (their microbatch graphs, when it has
// several microbatches) and its plan's step time is extrapolated from the
// full-batch folds, as run_setting's unfolded evaluation of the same plan
// would find it where the fold is exact. Neither the graph nor its
// microbatch graph is copied, and no plan is unfolded: run_training
// searches the fastest setting again with run_setting.
class FoldedSettings {
 public:
  FoldedSettings(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                 const Cluster& cluster, const SearchOptions& opts, const detail::Repetition& rep)
      : g_(g),
        cluster_(cluster),
        opts_(opts),
        rep_(rep),
        f3_(detail::fold(g, spaces, rep, 3)),
        f4_(detail::fold(g, spaces, rep, 4)) {}

  // Throws NoFit (or Error kNoFit for a batch m does not divide) as
  // run_setting does.
  [[nodiscard]] SettingOutcome search(const plan::Training& t) const {
    SearchOptions o = opts_;
    o.training = {t.recompute, t.zero_stage, t.microbatches};
    detail::Folded v3 = f3_, v4 = f4_;
    if (t.microbatches > 1 && !(microbatch(v3, t.microbatches) && microbatch(v4, t.microbatches)))
      throw Error(Errc::kNoFit, plan::microbatch_error(g_, t.microbatches));
    SearchResult res;
    res.plan = setting_header(g_, cluster_, opts_, t);
    const detail::Context ctx(v3.graph, v3.spaces, cluster_, o, detail::memory_budget(cluster_, o));
    FoldedChoice c =
        FoldedLadder(ctx, rep_, res, std::move(v3), std::move(v4), g_.num_operators()).choose();
    double step = c.step_time_s;
    if (t.microbatches > 1) {
      // The whole step of m microbatches, as the evaluator prices the plan
      // on the full-batch graph.
      c.plan3.training.microbatches = t.microbatches;
      step = extrapolate(f3_, f4_, rep_, g_.num_operators(), cluster_, o, c.plan3).step_time_s;
    }
    return {t, res.memory_rungs, step, {}};
  }

  [[nodiscard]] const detail::Repetition& repetition() const noexcept { return rep_; }

  // Whether the graph has an attention core for selective recomputation to
  // drop: its blocks, prefix and suffix are all in the 3-copy fold.
  [[nodiscard]] bool has_attention_core() const {
    return search::has_attention_core(f3_.graph, f3_.spaces);
  }

 private:
  // f as its microbatch graph of m microbatches (the weights stay); false
  // when the batch does not divide.
  static bool microbatch(detail::Folded& f, std::int64_t m) {
    auto view = plan::microbatch_view(f.graph, f.spaces, m);
    if (!view) return false;
    f.graph = std::move(view->graph);
    f.spaces = std::move(view->spaces);
    return true;
  }

  const ir::Graph& g_;
  const Cluster& cluster_;
  const SearchOptions& opts_;
  const detail::Repetition rep_;
  const detail::Folded f3_, f4_;
};

// The folded comparison of settings where it applies: rec on a graph it
// folds, more than one setting to compare, and no polish (polish refines
// the unfolded plan, which the folds do not see).
std::optional<FoldedSettings> folded_settings(const ir::Graph& g,
                                              const std::vector<algebra::OpSpace>& spaces,
                                              const Cluster& cluster, const SearchOptions& opts,
                                              std::size_t settings) {
  if (!opts.fold_settings || !opts.fold_repeats || opts.algorithm != Algorithm::Rec ||
      opts.mode != Mode::Train || settings < 2)
    return std::nullopt;
  if (opts.effort == Effort::Default && detail::polish_applies(g, cluster.cuts().size()))
    return std::nullopt;
  const auto rep = detail::find_repetition(g, opts.fold_min_repeats);
  if (!rep) return std::nullopt;
  return std::optional<FoldedSettings>(std::in_place, g, spaces, cluster, opts, *rep);
}

SearchResult run_training(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                          const Cluster& cluster, const SearchOptions& opts,
                          bool allow_full = true);

// The setting ilp and exhaustive search at: the options' pins, and what rec
// chooses for the rest (they prove optimality over the operators'
// strategies, not the settings). Full recomputation is refused.
TrainingChoice exact_setting(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                             const Cluster& cluster, const SearchOptions& opts) {
  TrainingChoice pin = opts.training;
  if (pin.recompute == plan::Recompute::Full)
    throw Error(Errc::kUsage, std::string(algorithm_name(opts.algorithm)) +
                                  " counts the memory of recomputation none and selective "
                                  "only: full recomputation keeps one segment at a time, a "
                                  "maximum its objective does not express");
  if (pin.recompute && pin.zero_stage && pin.microbatches) return pin;
  SearchOptions rec = opts;
  rec.algorithm = Algorithm::Rec;
  rec.detailed_evaluation = false;
  try {
    const plan::Training t = run_training(g, spaces, cluster, rec, false).plan.training;
    return {t.recompute, t.zero_stage, t.microbatches};
  } catch (const Error& e) {
    if (e.code() != Errc::kNoFit) throw;
    return {pin.recompute.value_or(plan::Recompute::None), pin.zero_stage.value_or(2),
            pin.microbatches.value_or(1)};
  }
}

// What climbing the settings' ladders found: the fastest of their first
// fitting settings, and, for the message where none fits, what failed.
struct SettingsClimb {
  std::optional<SettingOutcome> won;
  std::optional<Error> first_error;
  bool first_is_memory = false;  // a NoFitError: about memory, not a setting
  MemoryParts smallest;
  double reached = std::numeric_limits<double>::infinity();  // other algorithms' smallest
};

// Each ladder climbed to its first fitting setting. `selective`: whether
// the graph has an attention core for selective recomputation to drop.
SettingsClimb climb_settings(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                             const Cluster& cluster, const SearchOptions& opts,
                             const std::vector<std::vector<plan::Training>>& ladders,
                             const TrainingChoice& pin, bool selective,
                             const std::optional<FoldedSettings>& folded) {
  SettingsClimb c;
  bool unconstrained = false;
  for (const auto& ladder : ladders) {
    if (!selective && !pin.recompute && ladder.front().recompute == plan::Recompute::Selective)
      continue;  // the same memory and time as no recomputation
    // A plan that fitted with no price on memory at the cheapest setting
    // (one microbatch, ZeRO 2 at most) is the search's unconstrained best;
    // settings that save more memory only add work to it.
    if (unconstrained) break;
    for (const plan::Training& t : ladder) {
      try {
        SettingOutcome r = folded ? folded->search(t)
                                  : SettingOutcome::of(t, run_setting(g, spaces, cluster, opts, t));
        unconstrained = r.memory_rungs == 0 && opts.algorithm == Algorithm::Rec &&
                        t.microbatches == 1 && t.zero_stage <= 2;
        if (!c.won || r.step_time_s < c.won->step_time_s) c.won = std::move(r);
        break;
      } catch (const NoFit& e) {
        c.smallest.take_min(e.smallest());
        if (!c.first_error) {
          c.first_error = e;
          c.first_is_memory = true;
        }
      } catch (const Error& e) {
        if (e.code() != Errc::kNoFit) throw;
        const auto* n = dynamic_cast<const NoFitError*>(&e);
        if (n != nullptr) c.reached = std::min(c.reached, n->smallest_bytes());  // NaN leaves it
        if (!c.first_error) {
          c.first_error = e;
          c.first_is_memory = n != nullptr;
        }
      }
    }
  }
  return c;
}

// The won setting refined where the user left it to the search: full
// recomputation on the last blocks only (run_blocks), ZeRO 3 on the
// largest parameters only (run_zero_split); each kept where faster.
void refine_setting(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                    const Cluster& cluster, const SearchOptions& opts, const TrainingChoice& pin,
                    bool selective, SearchResult& best) {
  if (best.plan.training.recompute == plan::Recompute::Full && !pin.recompute) {
    const plan::Recompute rest = selective ? plan::Recompute::Selective : plan::Recompute::None;
    auto blocks = run_blocks(g, spaces, cluster, opts, best.plan.training, rest);
    if (blocks && blocks->eval.summary.step_time_s < best.eval.summary.step_time_s)
      best = std::move(*blocks);
  }
  if (!pin.zero_stage) {
    auto split = run_zero_split(g, spaces, cluster, opts, best);
    if (split && split->eval.summary.step_time_s < best.eval.summary.step_time_s)
      best = std::move(*split);
  }
}

// Training: every ladder climbed to its first fitting setting, the fastest
// of those kept. Ilp and exhaustive search at the setting rec chooses
// (exact_setting).
SearchResult run_training(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                          const Cluster& cluster, const SearchOptions& opts, bool allow_full) {
  const bool exact = opts.algorithm == Algorithm::Ilp || opts.algorithm == Algorithm::Exhaustive;
  const TrainingChoice pin = exact ? exact_setting(g, spaces, cluster, opts) : opts.training;
  auto ladders = setting_ladders(g, pin, allow_full && !exact);
  // Below the floor every setting fails: the most saving one alone gives
  // the message its smallest plan (one search, not one per setting).
  const double floor = parameter_state_floor(g, cluster, opts);
  const bool below_floor = floor > detail::memory_budget(cluster, opts);
  if (below_floor) ladders = {{ladders.back().back()}};
  std::size_t settings = 0;
  for (const auto& ladder : ladders) settings += ladder.size();
  const auto folded = folded_settings(g, spaces, cluster, opts, settings);
  const bool selective = folded ? folded->has_attention_core() : has_attention_core(g, spaces);
  SettingsClimb climb = climb_settings(g, spaces, cluster, opts, ladders, pin, selective, folded);
  std::optional<SearchResult> best;
  if (climb.won && !climb.won->full) {
    // The folded comparison's winner, searched again and evaluated in full.
    try {
      best = run_setting(g, spaces, cluster, opts, climb.won->t, &folded->repetition());
    } catch (const Error& e) {
      if (e.code() != Errc::kNoFit) throw;
      // The folds accepted a plan its full evaluation finds over the
      // budget (full recomputation's largest segment, which they
      // extrapolate only approximately): compare the settings unfolded.
      SearchOptions unfolded = opts;
      unfolded.fold_settings = false;
      return run_training(g, spaces, cluster, unfolded, allow_full);
    }
  } else if (climb.won) {
    best = std::move(climb.won->full);
  }
  if (best && !exact) refine_setting(g, spaces, cluster, opts, pin, selective, *best);
  // One setting searched: its search's claim stands. Where settings were
  // compared (or blocks and parameters split), a tighter budget may pick
  // another.
  if (best && !(opts.training.recompute && opts.training.zero_stage && opts.training.microbatches &&
                !exact))
    best->same_choices_from_bytes = std::numeric_limits<double>::infinity();
  if (!best) {
    // The smallest memory over every setting tried, where the ladders said.
    // Below the floor the one setting searched may fail for a reason of its
    // own (a batch its microbatch count does not split): the budget is the
    // reason then, and floor_note says why.
    const double budget = detail::memory_budget(cluster, opts);
    const std::string first =
        std::isfinite(climb.smallest.total)     ? no_fit_message(budget, cluster, climb.smallest)
        : below_floor && !climb.first_is_memory ? no_fit_head(gib(budget), cluster)
                                                : climb.first_error->detail();
    const std::string tried = below_floor ? floor_note(floor, cluster, ladders.back().back())
                                          : tried_settings(g, pin, allow_full && !exact);
    throw NoFitError(first + tried + untried_savings(opts.training, allow_full && !exact),
                     std::min(climb.smallest.total, climb.reached), floor);
  }
  return std::move(*best);
}

}  // namespace

namespace {

// The options with the graph's training pins where the options leave a
// setting unset: the options (command line, API) override the graph.
SearchOptions with_graph_pins(const ir::Graph& g, const SearchOptions& opts) {
  SearchOptions o = opts;
  const ir::TrainingPins& pins = g.training_pins();
  if (!o.training.recompute) o.training.recompute = pins.recompute;
  if (!o.training.zero_stage) o.training.zero_stage = pins.zero_stage;
  if (!o.training.microbatches) o.training.microbatches = pins.microbatches;
  return o;
}

// The exact searches count recomputation none and selective only (see
// run_training); an operator pinned to full is refused like the option.
void check_exact_pins(const ir::Graph& g, const SearchOptions& opts) {
  if (opts.algorithm != Algorithm::Ilp && opts.algorithm != Algorithm::Exhaustive) return;
  for (const ir::Operator& op : g.operators())
    if (op.recompute == plan::Recompute::Full)
      throw Error(Errc::kUsage, std::string(algorithm_name(opts.algorithm)) +
                                    " counts the memory of recomputation none and selective "
                                    "only, but operator '" +
                                    op.name + "' is pinned to full recomputation");
}

// The plan's recomputation per operator where the graph's pins make it
// differ from the plan-wide one, so that the plan file says what the
// evaluator priced.
void record_pins(const ir::Graph& g, plan::Plan& p) {
  if (p.mode != Mode::Train || !p.training.per_op.empty() || !plan::mixed_recompute(g, p.training))
    return;
  p.training.per_op = plan::operator_recompute(g, p.training);
}

}  // namespace

SearchResult run(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                 const Cluster& cluster, const SearchOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  if (spaces.size() != g.num_operators())
    throw Error(Errc::kUsage, "search::run: one OpSpace per operator is required");
  SearchOptions opts = with_graph_pins(g, options);
  // The ladder memo serves one graph at one setting: where settings are
  // compared (on folds of their own), or blocks pinned on copies of the
  // graph, a price means another search.
  if (opts.mode == Mode::Train &&
      !(opts.training.recompute && opts.training.zero_stage && opts.training.microbatches))
    opts.ladder_memo.reset();
  if (opts.mode == Mode::Train) check_exact_pins(g, opts);
  SearchResult res = opts.mode == Mode::Train ? run_training(g, spaces, cluster, opts)
                                              : run_setting(g, spaces, cluster, opts, {});
  record_pins(g, res.plan);
  res.search_time_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  res.eval.summary.search_time_s = res.search_time_s;
  return res;
}

}  // namespace recsearch::search
