// SPDX-License-Identifier: Apache-2.0
// Pieces shared by the search algorithms (private): operand layouts of a
// choice, legal choices of an operator on one axis, and the cost of a
// redistribution. Kept apart from plan/evaluator.cpp on purpose: the
// evaluator is the independent reference the searches are checked against.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/cost/model.hpp"
#include "recsearch/plan/evaluator.hpp"
#include "recsearch/plan/plan.hpp"
#include "recsearch/search/options.hpp"
#include "search/flat_graph.hpp"

namespace recsearch::search::detail {

// SearchOptions::ladder_memo: what a price of the folded ladder gave (the
// 3-copy fold's cuts, all rec_search sets, and the whole graph's
// extrapolated figures), by price, rung and training setting. The search at one price does not read
// the budget, so a search under another budget that tries the same price finds the same plan.
class LadderMemo {
 public:
  struct Entry {
    std::vector<std::vector<std::int16_t>> cuts3;
    plan::Summary whole;
  };
  using Key = std::tuple<double, int, plan::Recompute, int, std::int64_t>;

  [[nodiscard]] const Entry* find(const Key& k) const {
    const auto it = entries_.find(k);
    return it == entries_.end() ? nullptr : &it->second;
  }
  void store(const Key& k, Entry e) { entries_.emplace(k, std::move(e)); }
  [[nodiscard]] std::size_t size() const noexcept { return entries_.size(); }

 private:
  std::map<Key, Entry> entries_;
};

// Layout on one axis of operand `dims` (an OpSpace operand mapping) when its
// operator chooses `choice` (a loop or plan::kReplicated).
inline cost::AxisLayout operand_layout(const algebra::OpSpace& s, std::span<const int> dims,
                                       bool is_output, int choice) {
  if (choice == plan::kReplicated) return cost::AxisLayout::replicate();
  for (std::size_t d = 0; d < dims.size(); ++d)
    if (dims[d] == choice) return cost::AxisLayout::shard(static_cast<int>(d));
  if (is_output && s.loops[static_cast<std::size_t>(choice)].role == algebra::DimRole::Reduction)
    return cost::AxisLayout::partial();
  return cost::AxisLayout::replicate();
}

// Seconds to turn `from` into `to` on `cut` for a slice of `bytes`.
inline double redistribution_seconds(cost::AxisLayout from, cost::AxisLayout to, double bytes,
                                     const Cut& cut, const CostParams& p, Mode mode) {
  cost::RedistStep steps[2];
  const int n = cost::redistribution_steps(from, to, mode, steps);
  double t = 0;
  for (int i = 0; i < n; ++i) t += cost::collective_seconds(steps[i].collective, bytes, cut, p);
  return t;
}

// Whether the search may cut `loop` of operator `op` at all (role, opaque,
// `allowed` names).
bool loop_allowed(const ir::Operator& op, const algebra::OpSpace& s, int loop);

// Legal choices of operator `op` on an axis of size k given the loops'
// splits so far: kReplicated first, then the loops that may be cut, in loop
// order.
void legal_choices(const ir::Graph& g, ir::OpId op, const algebra::OpSpace& s,
                   const std::vector<std::int64_t>& splits, std::int64_t k,
                   std::vector<std::int16_t>& out);

// Cuts of every pinned operator (plan::assign_cuts), empty rows for the others.
std::vector<std::vector<std::int16_t>> pinned_cuts(const ir::Graph& g,
                                                   const std::vector<algebra::OpSpace>& spaces,
                                                   const std::vector<Cut>& mesh);

// The batch loop of an operator: the loop of dim 0 of its first data input
// (not a parameter or constant), when the search may cut it; else kUnmapped.
int batch_loop(const ir::Graph& g, const algebra::OpSpace& s, ir::OpId op);

// The memory budget in bytes the options and cluster imply.
double memory_budget(const Cluster& cluster, const SearchOptions& opts);

// Plan of the double-recursive search with memory weight lambda (seconds per
// byte of per-device memory); returns its bookkept step time. `weights`, when
// given, are operator multiplicities (a folded graph, search/fold.hpp): the
// objective and the bookkept time are those of the graph it stands for.
double rec_search(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                  const Cluster& cluster, const SearchOptions& opts, double lambda, plan::Plan& out,
                  const std::vector<double>* weights = nullptr, int rung = 0);

// The batch loop of every operator as data parallelism cuts it: the batch
// followed from the graph inputs through the operator spaces
// (plan::follow_batch), from their dim 0 or, where that dim meets itself
// in an operator (a sequence-first attention model), from the input dim
// that never does; algebra::kUnmapped where an operator has no batch (its
// inputs are weights and constants) or may not cut it.
std::vector<int> data_parallel_loops(const ir::Graph& g,
                                     const std::vector<algebra::OpSpace>& spaces);

// Data-parallel baseline: every operator cuts its batch loop
// (data_parallel_loops) on every mesh axis it divides; the others are
// replicated.
void data_parallel(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                   const Cluster& cluster, plan::Plan& out);

// The Megatron-style tensor-parallel loop of every operator, algebra::
// kUnmapped where it has none (search/megatron.cpp); pinned operators get
// none.
std::vector<int> tensor_parallel_loops(const ir::Graph& g,
                                       const std::vector<algebra::OpSpace>& spaces,
                                       const std::vector<std::vector<std::int16_t>>& pinned);

// Tensor-parallel plan: the batch loop on axes before `first_tp_axis` (data
// parallel), each operator's Megatron-style loop on the others
// (search/megatron.cpp).
void tensor_parallel(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                     const Cluster& cluster, std::size_t first_tp_axis, plan::Plan& out);

// Grid baseline: the fastest tensor_parallel plan over every DP/TP split
// point that fits `budget`, into out.cuts; false when none fits
// (smallest_memory: the least memory per device seen).
bool grid(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces, const Cluster& cluster,
          const SearchOptions& opts, double budget, plan::Plan& out, double& smallest_memory);

// First axis of the innermost cluster level (Megatron's tensor-parallel axes).
std::size_t innermost_level_axis(const Cluster& cluster);

// Region moves of rec and polish (a chain changed as a whole): hops from the
// moved operator, and the most operators one region may change.
inline constexpr int kRegionDepth = 3;
inline constexpr std::size_t kRegionOps = 12;

// One full strategy of an operator (a loop choice per axis) with the costs
// it fixes by itself: compute, gradient all-reduces, halos, the reduction of
// unconsumed partial outputs; the memory it accounts for; its operands'
// layouts. Redistributions depend on neighbours and are not included.
// A table of [slot][axis] in one buffer (row `slot` is axes long), so that
// a strategy costs one allocation per table, not one per operand slot.
template <class T>
class SlotAxes {
 public:
  void assign(std::size_t slots, std::size_t axes, const T& value) {
    slots_ = slots;
    axes_ = axes;
    data_.assign(slots * axes, value);
  }
  [[nodiscard]] T* operator[](std::size_t slot) noexcept { return data_.data() + slot * axes_; }
  [[nodiscard]] const T* operator[](std::size_t slot) const noexcept {
    return data_.data() + slot * axes_;
  }
  [[nodiscard]] std::size_t size() const noexcept { return slots_; }  // slots

 private:
  std::vector<T> data_;
  std::size_t slots_ = 0, axes_ = 0;
};

struct OpStrategy {
  std::vector<std::int16_t> cuts;
  double own = 0;   // seconds
  double mem = 0;   // bytes per device this operator accounts for (training)
  double work = 0;  // inference: its working set (operands other than parameters)
  // Parts of own that overlap trades (plan::finish_step_time): the compute
  // (recomputation included), and the parameter-gradient collectives it
  // may hide, once a step (per microbatch: their share) and repeated in
  // every microbatch. With one microbatch every such collective counts
  // once, as the evaluator counts it.
  double compute = 0, sync_once = 0, sync_repeated = 0;
  // [slot][axis]: inputs first, then outputs.
  SlotAxes<cost::AxisLayout> layout;
  SlotAxes<std::int64_t> divisor;  // slice divisor before the axis
};

// A use's rows of layouts and slice divisors (one entry per mesh axis):
// tensor_redistribution's scratch.
struct UseRows {
  const cost::AxisLayout* layout;
  const std::int64_t* divisor;
};

// Redistribution seconds of tensor t held in slot `holder_slot` of
// strategy `holder`: on every axis, each distinct request (layout, slice
// divisor) of its uses turned from the holder's layout, as plan::evaluate
// counts them, summed axis by axis and, on an axis, in the order of the
// requests' first uses. strategy_of(op) is each user's strategy, or nullptr
// for one not assigned yet (left out). `rows` is scratch: each use's rows
// are looked up once, not once per axis, and a request is matched against
// the earlier uses directly (a tensor has a few), so the hot loop
// allocates nothing. The sum runs axis by axis from 0: `prefix`, when
// given, receives before each axis a the sum so far; a caller whose
// inputs agree with an earlier call's on the axes before `from` passes
// that call's prefix[from] as `start` and gets, bit for bit, the same sum
// as from axis 0 (Polish::tensor_edge).
template <class StrategyOf>
double tensor_redistribution(const Context& ctx, const FlatGraph& flat, ir::TensorId t,
                             const OpStrategy& holder, std::size_t holder_slot,
                             StrategyOf&& strategy_of, std::vector<UseRows>& rows,
                             std::size_t from = 0, double start = 0.0, double* prefix = nullptr) {
  const double bytes = flat.bytes[t];
  rows.clear();
  for (const FlatGraph::UseSlot& use : flat.use_slots_of(t)) {
    const OpStrategy* us = strategy_of(use.op);
    if (us != nullptr) rows.push_back({us->layout[use.slot], us->divisor[use.slot]});
  }
  const cost::AxisLayout* held = holder.layout[holder_slot];
  double total = start;
  for (std::size_t a = from; a < ctx.mesh.size(); ++a) {
    if (prefix != nullptr) prefix[a] = total;
    for (std::size_t k = 0; k < rows.size(); ++k) {
      const cost::AxisLayout l = rows[k].layout[a];
      const std::int64_t d = rows[k].divisor[a];
      bool again = false;
      for (std::size_t m = 0; m < k && !again; ++m)
        again = rows[m].layout[a] == l && rows[m].divisor[a] == d;
      if (again) continue;
      total += redistribution_seconds(held[a], l, bytes / static_cast<double>(d), ctx.mesh[a],
                                      ctx.opts.cost, ctx.opts.mode);
    }
  }
  return total;
}

// OpStrategy of operator `o` with `cuts` (legal; one per mesh axis).
OpStrategy make_strategy(const Context& ctx, ir::OpId o, const std::vector<std::int16_t>& cuts);

struct ExhaustiveResult {
  bool found = false;      // a plan within the budget (in the incumbent)
  bool proven = false;     // optimality proven within the node limit
  double step_time_s = 0;  // of the best plan, by the search's own account
};

// Exact optimum (branch and bound). `incumbent`, when have_incumbent, is a
// feasible plan to start from; it receives the best plan found.
ExhaustiveResult exhaustive(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                            const Cluster& cluster, const SearchOptions& opts, double budget,
                            plan::Plan& incumbent, bool have_incumbent);

struct IlpResult {
  bool found = false;        // an integer solution within the budget (in `out`)
  bool proven = false;       // CBC proved it optimal (or proved infeasibility)
  bool restricted = false;   // some operator's candidates were cut down
  double step_time_s = 0;    // of the solution, by the formulation's own account
  double lower_bound_s = 0;  // CBC's bound on the optimum over the candidates
  std::size_t strategies = 0, variables = 0, constraints = 0;
};

// Integer program over per-operator strategies (search/ilp.cpp). `hints`
// are plans whose strategies are kept among the candidates; the last one is
// the solver's starting solution. Throws Error(kUsage) when built without CBC
// or when the program would be too large.
IlpResult ilp(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
              const Cluster& cluster, const SearchOptions& opts, double budget,
              const std::vector<plan::Plan>& hints, plan::Plan& out);

}  // namespace recsearch::search::detail
