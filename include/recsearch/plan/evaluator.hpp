// SPDX-License-Identifier: Apache-2.0
// The evaluator: recomputes layouts, redistributions, step time and memory of
// a plan from its cuts alone, independently of how the plan was found.
//
// The cost of a plan (docs/design.md, Cost model; summed over all axes a, with
// k = mesh[a].size; all "slice" sizes are the tensor's bytes divided by the
// product of k_b over the earlier axes b < a on which that operand is
// sharded):
//
//  Operand layout on axis a, for operator o choosing c = cuts[o][a]:
//   c == kReplicated -> every operand Replicate;
//   else an operand with a dim mapped to loop c -> Shard(first such dim);
//   else an input -> Replicate; an output -> Partial if loop c is a
//   Reduction, otherwise Replicate.
//
//  Holder of a tensor: its producer's output layout; for a tensor nobody
//  produces (input, parameter, constant), the layout its first use wants
//  (lowest operator id, then lowest input slot). Holding is free. A tensor
//  no operator touches has no holder: it is held replicated, with no events.
//
//  Communication (seconds and per-device bytes, cost/model.hpp: a
//  collective across cut a on a group slice of B bytes moves its share
//  B / devices_below of it per device), per axis a:
//   1. layout: for every tensor, the distinct (wanted layout on a, divisor of
//      the consumer's slice) among its uses other than the holder's own;
//      each that differs from the holder's layout pays the redistribution
//      steps of cost::redistribution_steps on the consumer's slice, once
//      (recorded with the lowest consumer operator id as `to`);
//   2. gradient (training): an operator with c != kReplicated pays an
//      all-reduce (backward) of every input slice that requires a gradient
//      and is Replicate on a;
//   3. halo: c a Window loop -> halo exchange of `halo` rows of the first
//      input mapping a dim to c (row = slice / slice extent of that dim),
//      forward, and again backward in training (nothing when halo is 0);
//   4. output: a tensor nobody consumes that is Partial on a pays an
//      all-reduce (forward).
//  Compute: per operator, cost::compute_seconds(flops / S, touched) with S
//  the product of all its chosen cut sizes and touched the sum of its
//  operands' final slice bytes (each operand's bytes / product of the k of
//  axes on which it is sharded), plus its forward again where the plan's
//  recomputation recomputes it.
//
//  Training settings (plan/training.hpp, docs/cost-model.md, Training):
//  with m microbatches the graph evaluated is the microbatch graph, and
//  compute, layout, halo, output and activation-gradient events repeat m
//  times (CommEvent::repeats); parameter gradients are synchronised as
//  cost::gradient_sync_steps says for each parameter's ZeRO stage
//  (plan::parameter_zero: its own where the plan names one, else the plan's).
//  step_time = compute + the communication overlap does not hide
//  (finish_step_time).
//
//  Memory per device: every parameter's holder slice times its state
//  (plan::parameter_state), the ZeRO-sharded parts divided by its
//  data-parallel ways; in training plus every activation's and input's
//  holder slice times the bytes its consumers keep (MemoryRules::saved; a
//  Partial holder counts as a slice) and, under full recomputation, the
//  largest segment's; in inference plus the largest sum, over operators, of
//  the slices of the operator's non-parameter operands in the operator's
//  own layout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "recsearch/cost/model.hpp"
#include "recsearch/plan/plan.hpp"

namespace recsearch::plan {

// The "operand layout" rule above: the layout on one axis of an operand with
// dims `dims` (its OpSpace mapping; empty when the space lists no such
// operand) of an operator choosing loop `c` (or kReplicated). The one
// definition the evaluator and the execution layer share; the search keeps
// its own copy on purpose (tests/plan/layout_rule_test.cpp compares them).
[[nodiscard]] cost::AxisLayout wanted_layout(const algebra::OpSpace& s, int c,
                                             std::span<const int> dims, bool is_output);

enum class CommReason : std::uint8_t { Layout, Gradient, Halo, Output };
[[nodiscard]] std::string_view comm_reason_name(CommReason r) noexcept;

// One collective the plan implies.
struct CommEvent {
  ir::TensorId tensor = ir::kNone;
  ir::OpId from = ir::kNone;  // holder (layout), or the operator itself
  ir::OpId to = ir::kNone;    // consumer (layout); kNone otherwise
  std::uint32_t axis = 0;
  cost::Collective collective = cost::Collective::AllGather;
  cost::Phase phase = cost::Phase::Forward;
  CommReason reason = CommReason::Layout;
  double bytes = 0;    // per device sent, per occurrence
  double seconds = 0;  // per step: all its occurrences
  // Occurrences per step: microbatches for what each microbatch repeats,
  // 1 for what happens once per step (parameter gradients up to ZeRO 1).
  std::uint32_t repeats = 1;
};

// Where one tensor lives: per tensor dim, the ordered mesh axes that split
// it; and the axes on which it is partial. From the holder's layout.
struct TensorSharding {
  std::vector<std::vector<std::uint32_t>> dims;
  std::vector<std::uint32_t> partial;
};

// Where every tensor of a graph lives (Evaluation::tensors), kept as one
// byte per tensor and mesh axis: none, partial, or the dim the axis
// splits. A list per dim cost about 200 bytes a tensor in small vectors
// (two gigabytes at 10^7 operators); the bytes cost one per axis. A graph
// with a tensor of rank over kMaxCodedRank keeps the lists themselves.
// Reading a tensor's sharding builds its lists: operator[] and at() return
// a copy (bind it, or its members, before walking them), read() fills a
// caller's TensorSharding and reuses its storage.
class TensorShardings {
 public:
  static constexpr std::size_t kMaxCodedRank = 254;

  TensorShardings() = default;
  // `ranks.size()` tensors of these ranks on `axes` mesh axes, each held
  // whole until set_split or set_partial says otherwise.
  TensorShardings(std::vector<std::uint32_t> ranks, std::size_t axes);

  // Mesh axis `axis` splits dim `dim` of tensor t (dim < its rank). Inline:
  // the evaluator records every tensor on every axis.
  void set_split(std::size_t t, std::size_t axis, std::size_t dim) {
    if (lists_.empty()) {
      codes_[axis * size() + t] = static_cast<std::uint8_t>(kSplit + dim);
    } else {
      insert_axis(lists_[t].dims[dim], axis);
    }
  }
  // Tensor t is partial on mesh axis `axis`.
  void set_partial(std::size_t t, std::size_t axis) {
    if (lists_.empty()) {
      codes_[axis * size() + t] = kPartial;
    } else {
      insert_axis(lists_[t].partial, axis);
    }
  }

  [[nodiscard]] std::size_t size() const noexcept { return ranks_.size(); }
  [[nodiscard]] bool empty() const noexcept { return ranks_.empty(); }
  [[nodiscard]] std::size_t axes() const noexcept { return axes_; }
  [[nodiscard]] TensorSharding operator[](std::size_t t) const;
  [[nodiscard]] TensorSharding at(std::size_t t) const;  // std::out_of_range past size()
  // Tensor t's sharding into `out`, its lists cleared and refilled.
  void read(std::size_t t, TensorSharding& out) const;

 private:
  static constexpr std::uint8_t kNone = 0, kPartial = 1, kSplit = 2;
  // Inserts `axis` into a list kept in increasing order (once).
  static void insert_axis(std::vector<std::uint32_t>& list, std::size_t axis);
  std::vector<std::uint32_t> ranks_;
  std::size_t axes_ = 0;
  // [axis * size() + t]: the evaluator records an axis at a time, and a
  // reader walking the tensors in order reads one stream per axis.
  std::vector<std::uint8_t> codes_;
  std::vector<TensorSharding> lists_;  // instead, where a rank exceeds kMaxCodedRank
};

struct OpCost {
  double compute_s = 0;
  double communication_s =
      0;  // events attributed to this op (gradient, halo, output; layout to the consumer)
};

struct Summary {
  // compute_s + exposed_communication_s.
  double step_time_s = 0;
  // Per step, every microbatch, the recomputed forward included.
  double compute_s = 0;
  double recompute_s = 0;  // of compute_s: forward work redone in the backward pass
  // Of compute_s: the backward pass, recomputation apart (training; each
  // operator's share of it, ir::backward_shares).
  double backward_compute_s = 0;
  // Per step, every collective (see CommEvent::repeats).
  double communication_s = 0;
  // Of communication_s: what compute does not hide. Parameter-gradient
  // reductions overlap the backward pass of the last microbatch and ZeRO-3
  // gathers are prefetched (CostParams::overlap; docs/cost-model.md).
  double exposed_communication_s = 0;
  // One microbatch's forward and backward with the collectives it repeats
  // (what a pipeline stage is busy for per microbatch).
  double microbatch_s = 0;
  // Of communication_s, what overlap may hide: parameter collectives once
  // per step, and those every microbatch repeats (all microbatches).
  double parameter_comm_s = 0;
  double parameter_comm_repeated_s = 0;
  double memory_per_device_bytes = 0;
  double parameter_bytes = 0;   // of memory_per_device_bytes: parameter state
  double gradient_bytes = 0;    // of parameter_bytes: gradients
  double optimizer_bytes = 0;   // of parameter_bytes: optimizer state
  double activation_bytes = 0;  // of memory_per_device_bytes: activations (one microbatch)
  double search_time_s = 0;     // filled by the search, 0 for eval
};

// The redistributions of a plan totalled per (reason, phase, collective,
// axis), and the heaviest few in full: what a summary-detail plan file
// writes in their place (docs/formats.md, Plan detail). The one definition
// of that summary: the plan writer feeds it a full event list, and
// evaluate(..., EvalDetail::Shardings) feeds it each event as it is found,
// so both give the same doubles (each total is summed in event order).
class RedistributionSummary {
 public:
  struct Total {
    CommReason reason = CommReason::Layout;
    cost::Phase phase = cost::Phase::Forward;
    cost::Collective collective = cost::Collective::AllGather;
    std::uint32_t axis = 0;
    std::int64_t events = 0;
    double bytes = 0;
    double seconds = 0;
  };
  static constexpr std::size_t kHeaviest = 20;

  explicit RedistributionSummary(std::size_t axes = 0);
  // The next event, in event order.
  void add(const CommEvent& e);
  // Per (reason, phase, collective, axis) that has events, in that key order.
  [[nodiscard]] std::vector<Total> totals() const;
  // The costliest events, most seconds first (ties: event order).
  [[nodiscard]] const std::vector<CommEvent>& heaviest() const noexcept { return heaviest_; }
  [[nodiscard]] std::uint64_t events() const noexcept { return events_; }

 private:
  [[nodiscard]] Total& slot(const CommEvent& e);

  std::size_t axes_;
  std::vector<Total> dense_;  // over every reason, phase, collective and axis
  std::vector<Total> other_;  // keys outside the dense table (none from evaluate)
  std::vector<CommEvent> heaviest_;
  std::uint64_t events_ = 0;
};

struct Evaluation {
  std::vector<ir::Strategy> strategies;  // per operator
  TensorShardings tensors;               // per tensor
  std::vector<CommEvent> events;         // in (axis, kind, tensor/op) order
  std::vector<OpCost> op_costs;          // per operator
  // EvalDetail::Shardings: the events summed as they were found, in place
  // of `events`.
  std::optional<RedistributionSummary> redistribution_summary;
  Summary summary;
};

// How much of an Evaluation to fill: everything; or only the summary and
// op_costs (no strategies, shardings or event list: for graphs of millions
// of operators whose plan is not written out); or what a summary-detail
// plan file needs: the shardings, op_costs, summary and the
// redistribution_summary, no event list and no strategies (strategy_of
// derives them from the cuts): 9.4 M events, 450 MB, at 10^6 operators.
enum class EvalDetail { Full, Summary, Shardings };

// Evaluates `p` (after check_plan) on `g` with the mesh of `p`; the cluster
// supplies the device model. Deterministic; O(axes * (V + E)).
[[nodiscard]] Evaluation evaluate(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                                  const Cluster& cluster, const Plan& p, const CostParams& params,
                                  EvalDetail detail = EvalDetail::Full);

// Sets microbatch_s, exposed_communication_s and step_time_s of `s` from
// its compute, communication and parameter-collective figures (the
// overlap model of docs/cost-model.md): additive figures can be summed or
// extrapolated first and the step time derived after.
void finish_step_time(Summary& s, std::int64_t microbatches, bool overlap);

// The overlap rule finish_step_time applies: communication seconds of a
// step of m microbatches that stay exposed, from the rest (never hidden),
// the parameter collectives once a step, each microbatch's repeated ones
// and each microbatch's compute. The repeated ones hide behind each
// microbatch's compute, the once-a-step ones behind what the last
// microbatch's compute has left.
[[nodiscard]] double exposed_communication(double rest, double once, double repeated_per_micro,
                                           double micro_compute, std::int64_t m) noexcept;

// Checks a plan's training settings against the graph (ZeRO stage 0..3,
// microbatches dividing the batch); throws Error(kPlan) with the path
// "/training/...". evaluate() calls it.
void check_training(const ir::Graph& g, const Plan& p);

// Why graph g cannot run as m microbatches.
[[nodiscard]] std::string microbatch_error(const ir::Graph& g, std::int64_t m);

}  // namespace recsearch::plan
