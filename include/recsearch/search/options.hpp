// SPDX-License-Identifier: Apache-2.0
// Options of the search: which algorithm, training or inference, memory
// budget, threads, cost coefficients. The search core reads nothing else:
// no globals, no environment.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>

#include "recsearch/cost/cost_params.hpp"
#include "recsearch/plan/training.hpp"

namespace recsearch::search {

enum class Algorithm {
  Rec,           // double-recursive symbolic search (default)
  DataParallel,  // batch dim cut on every axis where it divides
  Exhaustive,    // exact optimum of the same cost model (small graphs only)
  Megatron,      // tensor parallel on the innermost level, data parallel outside
  Grid,          // best of every DP x TP split of the cut schedule
  Ilp,           // integer program over per-operator strategies (CBC; optional build)
};

// Whether this build can run Algorithm::Ilp (built with COIN-OR CBC).
[[nodiscard]] bool ilp_available() noexcept;

[[nodiscard]] std::string_view algorithm_name(Algorithm a) noexcept;
[[nodiscard]] std::optional<Algorithm> parse_algorithm(std::string_view s) noexcept;

// How much time rec spends on the quality of its plan (SearchOptions::effort).
enum class Effort {
  // The passes over the device cuts, the memory ladder and the expert
  // splits (docs/search.md, Effort): no polish, nor what builds on it
  // (the tightening chain, axis swaps, kicks).
  Fast,
  // Also polish, where operators x mesh axes is at most 2·10^4 (the
  // default): there, about 20x the time of Fast, for plans 5% faster on
  // average and up to 1.6x faster on small graphs over many axes.
  Default,
};

[[nodiscard]] std::string_view effort_name(Effort e) noexcept;
[[nodiscard]] std::optional<Effort> parse_effort(std::string_view s) noexcept;

// The training settings of a plan (plan::Training) the search decides: each
// field left unset is chosen by the search under the memory budget, a set
// one is pinned (command line, graph file, API).
struct TrainingChoice {
  std::optional<plan::Recompute> recompute;
  std::optional<int> zero_stage;
  std::optional<std::int64_t> microbatches;
};

namespace detail {
class LadderMemo;  // search/common.hpp
}

struct SearchOptions {
  Algorithm algorithm = Algorithm::Rec;
  Mode mode = Mode::Train;
  CostParams cost;
  // Training mode: recomputation, ZeRO stage and microbatches to search or pin.
  TrainingChoice training;
  // Pipeline parallelism (search::run_pipeline; docs/pipeline.md): into how
  // many device groups, each running a contiguous stage of the graph, the
  // cluster's devices are split (plan::stage_cluster). 1: none (the
  // default; run_pipeline is then search::run); 0: searched among
  // plan::device_group_counts, 1 included; N: pinned.
  std::int64_t pipeline_stages = 1;
  // Stages per device group (interleaved 1F1B when > 1); 0: searched (1 or 2).
  std::int64_t pipeline_virtual_stages = 1;
  // Worker threads for the parallel parts; 0 = all hardware threads. The
  // plan is identical for every value.
  int threads = 0;
  // Rec: compute saved in a pass is valued as divided by R^e, R the part of
  // the cuts still to come that the operator's loops can still absorb.
  // e = 1 assumes later passes cut every operator that far (early passes
  // then leave too much to them), e = 0 that they cut none (early passes
  // then over-cut on slow links); 0.5 did best on the bundled and benchmark
  // graphs.
  double future_cut_exponent = 0.5;
  // Rec: the same for the per-device memory a cut saves, priced by the
  // memory ladder. Memory is what a budget caps at the end of the schedule,
  // and under a tight budget later passes do cut what they can, so the full
  // discount (1) holds; with 0 the slow outer links are cut for memory the
  // fast inner ones would have saved. What that cost when the setting was
  // chosen is in docs/search.md, History (measurements date; the reason
  // does not).
  double future_memory_exponent = 1.0;
  // Rec: also evaluate every data x tensor parallel split of the cut
  // schedule (the grid baseline's plans: batch on the outer cuts, Megatron
  // column/row on the inner ones) and keep the fastest fitting plan of all,
  // so rec is never slower than those and fits whenever one of them does.
  // The memory ladder prices a sum of bytes while the budget caps a maximum
  // (in inference, the largest working set of one operator), so its passes
  // alone can miss such a plan. One evaluation per split: on folded graphs
  // through the folds, else on graphs of up to 10^4 operators, and on any
  // graph when nothing else fits.
  bool expert_candidates = true;
  // Rec: with Effort::Default, after the passes, refine the whole plan one
  // operator and one axis at a time with the exact costs ("polish"): within
  // the memory budget, toward the fastest strategy that still fits (budget
  // the ladder's single price left unused); over it, toward fitting at the
  // least time added (so a plan that misses by a little is mended). Where
  // operators x mesh axes is at most 2·10^4 (each operator's neighbouring
  // strategies are many more than the passes' candidates). Effort::Fast
  // leaves it out.
  Effort effort = Effort::Default;
  // Rec: when the graph repeats one block at least fold_min_repeats times
  // (transformer layers, ResNet blocks), search three copies of it with the
  // middle one weighted for all the middle blocks, then copy its decisions.
  // Search time then follows the block, not the depth.
  bool fold_repeats = true;
  std::size_t fold_min_repeats = 8;
  // Training, rec on a folded graph without polish: compare the
  // recomputation x ZeRO x microbatch settings by their plans' step times
  // extrapolated from the folds, and unfold and evaluate in full only the
  // fastest (docs/search.md, Training settings on folded graphs). false
  // unfolds and evaluates every setting's plan: the reference the tests
  // hold the folded comparison to.
  bool fold_settings = true;
  // Whether SearchResult::eval lists every strategy, sharding and
  // redistribution (needed to write the plan) or only the summary and
  // per-operator costs (scaling runs on graphs of millions of operators).
  bool detailed_evaluation = true;
  // With detailed_evaluation: whether SearchResult::eval lists every
  // redistribution (eval.events, and the strategies), or only sums them
  // into eval.redistribution_summary (plan::EvalDetail::Shardings): what a
  // summary-detail plan file writes, without the 9.4 M events (450 MB) of a
  // 10^6-operator GPT.
  bool list_redistributions = true;
  // Called from the searching thread as the search advances: the memory
  // ladder's rung (0 = no memory price) and the cut pass within it, of
  // `passes`. For progress displays; must not throw.
  std::function<void(int rung, std::size_t pass, std::size_t passes)> on_progress;
  // The folded memory ladder's searches by price, shared by searches of
  // the same graph, cluster and options that differ in the budget only
  // (which steers what the ladder tries, not what a price gives): the
  // pipeline search's searches of one stage shape. Null: none kept.
  std::shared_ptr<detail::LadderMemo> ladder_memo;
  // Exhaustive: give up (Error kUsage) past this many operators, and stop
  // proving optimality after this many search nodes (result flagged).
  std::size_t exhaustive_max_operators = 16;
  std::uint64_t exhaustive_max_nodes = 200'000'000;
  // Ilp: CBC's wall-clock limit in seconds; past it the best integer
  // solution found is returned (SearchResult::proven_optimal false).
  double ilp_time_limit_s = 60;
  // Ilp: candidate strategies (one loop choice per axis) kept per operator.
  // Operators with more keep the cheapest by own cost plus the data-parallel,
  // tensor-parallel and rec plans' choices, and the result is no longer the
  // exact optimum (SearchResult::ilp_restricted).
  std::size_t ilp_max_strategies = 4096;
  // Ilp: the candidates of all operators together; past it every operator
  // keeps only its share (cheapest by own cost, restricted), and below 16 a
  // share the program is refused (Error kUsage) as too large.
  std::size_t ilp_max_total_strategies = 250'000;
};

}  // namespace recsearch::search
