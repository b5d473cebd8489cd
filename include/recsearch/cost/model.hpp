// SPDX-License-Identifier: Apache-2.0
// Closed-form pieces of the relative cost model, shared by the search and
// the evaluator: per-axis tensor layouts, collectives and their costs, the
// redistribution table, and an operator's compute time.
//
// Conventions (docs/design.md, Cost model):
//  * bytes are per device sent; a collective across a cut of size k on a
//    tensor whose size within the group is B: all-gather and reduce-scatter
//    (k-1)/k*b, all-reduce 2(k-1)/k*b, all-to-all (k-1)/k^2*b, halo b, where
//    b = B / Cut::devices_below: each part of the cut is a group of devices
//    that holds the part's data between them (sharded by the later cuts, or
//    sharing the work when replicated), and each moves its share over its
//    own link — hierarchical collectives, as NCCL's tree/ring and 2-D
//    all-reduce run them;
//  * time = bytes / bandwidth + latency * steps, steps = ceil(log2 k) for
//    all-gather, reduce-scatter and all-to-all, 2*ceil(log2 k) for
//    all-reduce, 1 for a halo exchange (tree/ring hybrids as NCCL picks);
//  * compute time = max(flops / (peak * efficiency), bytes touched / HBM
//    bandwidth), times (1 + backward_flops_factor) in training, where peak
//    is the device's peak at the operator's precision
//    (plan::operator_precision); an operator whose inputs do not all take
//    a gradient runs that share of its backward (step_compute).
#pragma once

#include <cstdint>
#include <string_view>

#include "recsearch/cluster.hpp"
#include "recsearch/cost/cost_params.hpp"

namespace recsearch::cost {

// Layout of a tensor along one mesh axis.
enum class LayoutKind : std::uint8_t { Replicate, Shard, Partial };

struct AxisLayout {
  LayoutKind kind = LayoutKind::Replicate;
  std::int16_t dim = -1;  // tensor dim when kind == Shard, else -1

  friend bool operator==(const AxisLayout&, const AxisLayout&) = default;
  static constexpr AxisLayout replicate() noexcept { return {}; }
  static constexpr AxisLayout partial() noexcept { return {LayoutKind::Partial, -1}; }
  static constexpr AxisLayout shard(int d) noexcept {
    return {LayoutKind::Shard, static_cast<std::int16_t>(d)};
  }
};

enum class Collective : std::uint8_t { AllGather, ReduceScatter, AllReduce, AllToAll, Halo };
enum class Phase : std::uint8_t { Forward, Backward };

// "all_gather", "reduce_scatter", "all_reduce", "all_to_all", "halo".
[[nodiscard]] std::string_view collective_name(Collective c) noexcept;
[[nodiscard]] std::string_view phase_name(Phase p) noexcept;

// Bytes one device sends for collective c across `cut` on a tensor of
// group_bytes bytes (its size within the group; see the file comment).
// 0 when the cut has size 1.
[[nodiscard]] double collective_bytes(Collective c, double group_bytes, const Cut& cut) noexcept;
// Seconds for the same collective across `cut` (0 when cut.size == 1).
[[nodiscard]] double collective_seconds(Collective c, double group_bytes, const Cut& cut,
                                        const CostParams& p) noexcept;

// Seconds of the backward all-reduce of a gradient slice of group_bytes;
// parameter gradients are bucketed when CostParams::bucket_gradients.
[[nodiscard]] double gradient_seconds(double group_bytes, bool parameter, const Cut& cut,
                                      const CostParams& p) noexcept;

// One collective that synchronises a gradient, and whether each microbatch
// repeats it (else it runs once per step).
struct SyncStep {
  Collective collective;
  Phase phase;
  bool per_microbatch;
};

// The synchronisation of a gradient slice replicated across a cut
// (docs/cost-model.md, ZeRO): an activation's gradient is all-reduced in
// every microbatch; a parameter's is all-reduced once per step (stage 0),
// reduce-scattered and the updated shard all-gathered (stage 1), the
// reduce-scatter repeated per microbatch as gradients are sharded (stage 2),
// and the weights all-gathered in each microbatch's forward and backward
// passes (stage 3). Returns the steps written (1..3).
int gradient_sync_steps(bool parameter, int zero_stage, SyncStep out[3]) noexcept;

// Seconds of one occurrence of step s on a slice of group_bytes: parameter
// collectives are bucketed (bandwidth only) when CostParams::bucket_gradients.
[[nodiscard]] double sync_step_seconds(const SyncStep& s, double group_bytes, bool parameter,
                                       const Cut& cut, const CostParams& p) noexcept;

// Per-step seconds of all of a gradient's synchronisation with
// `microbatches` microbatches (total), and of its steps that run once a
// step and that each microbatch repeats, as the evaluator tells them
// apart for overlap (with one microbatch, every step runs once).
struct GradientSync {
  double total = 0, once = 0, repeated = 0;
};
[[nodiscard]] GradientSync gradient_sync(double group_bytes, bool parameter, int zero_stage,
                                         std::int64_t microbatches, const Cut& cut,
                                         const CostParams& p) noexcept;
[[nodiscard]] double gradient_sync_seconds(double group_bytes, bool parameter, int zero_stage,
                                           std::int64_t microbatches, const Cut& cut,
                                           const CostParams& p) noexcept;

// One collective of a redistribution.
struct RedistStep {
  Collective collective;
  Phase phase;
};

// The collectives that turn a tensor held as `from` into `to` on one axis
// (docs/design.md, Cost model, the redistribution table: S->R all-gather /
// bwd reduce-scatter, R->S local / bwd all-gather, S(i)->S(j) all-to-all
// both ways, P->R all-reduce / bwd none, P->S reduce-scatter / bwd
// all-gather). Backward duals only in training.
// `to` must not be Partial (consumers never want partial inputs). Returns
// the number of steps written to out (0..2).
int redistribution_steps(AxisLayout from, AxisLayout to, Mode mode, RedistStep out[2]) noexcept;

// Forward+backward (training) or forward (inference) compute time of an
// operator slice with `flops` forward flops touching `bytes` bytes.
[[nodiscard]] double compute_seconds(double flops, double bytes, const DeviceSpec& dev,
                                     const CostParams& p, Mode mode) noexcept;
// The same at the peak of `precision` (DeviceSpec::peak_TFLOPs_of): the
// model sees `dev` with that peak as its peak_TFLOPs, so that a user's
// CostModel prices every precision through its one compute_seconds.
[[nodiscard]] double compute_seconds(double flops, double bytes, const DeviceSpec& dev,
                                     Precision precision, const CostParams& p, Mode mode) noexcept;

// An operator slice's compute in one microbatch of a step. In training,
// `backward_share` of its backward runs (ir::backward_shares: 1 prices the
// whole backward_flops_factor, 0 none, as for an operator on the data
// alone), and a recomputed operator runs its forward once more.
struct StepCompute {
  double forward = 0;    // the forward pass
  double passes = 0;     // the forward and the backward's share; the forward in inference
  double recompute = 0;  // the forward again in the backward pass
  [[nodiscard]] double total() const noexcept { return passes + recompute; }
};
[[nodiscard]] StepCompute step_compute(double flops, double bytes, const DeviceSpec& dev,
                                       Precision precision, const CostParams& p, Mode mode,
                                       double backward_share, bool recomputed) noexcept;

// Bytes per device of parameter state per parameter byte: 1 in inference,
// 1 + gradient_bytes_factor + optimizer_bytes_factor in training.
[[nodiscard]] double parameter_state_factor(const CostParams& p, Mode mode) noexcept;

}  // namespace recsearch::cost
