// SPDX-License-Identifier: Apache-2.0
// Where each rank's piece of a tensor lives when a plan runs, and how the
// execution layer moves between two such placements.
//
// A Layout gives, per mesh axis, what the tensor is on that axis
// (cost::AxisLayout: replicated, sharded along one tensor dim, or a partial
// sum), exactly as the evaluator derives it from a plan's cuts. A dim split
// by several axes is split in increasing axis order, the first axis most
// significant (the plan file's `sharding` lists), so the block of dim d held
// by a rank is the mixed-radix number of its coordinates on those axes.
//
// Moving a tensor from one layout to another (redistribution_plan) is a
// sequence of per-axis collectives, the same ones the cost model counts:
// S->R all-gather, R->S a local slice, S(i)->S(j) all-to-all, P->R
// all-reduce, P->S reduce-scatter. Axes that stop splitting a dim go first,
// innermost axis first (so each is the least significant digit of its dim
// when it leaves); axes that start splitting a dim go last, outermost first.
// When a dim keeps an inner axis but loses an outer one ([c0, c1] -> [c1]),
// the inner one has to leave and come back as well: that case moves more
// than the cost model's per-axis count, and predict_exec_bytes says so.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/cost/model.hpp"
#include "recsearch/ir/graph.hpp"
#include "recsearch/plan/plan.hpp"

namespace recsearch::exec {

// Per mesh axis, the tensor's layout on that axis.
using Layout = std::vector<cost::AxisLayout>;

// Sizes of the mesh axes of a plan, outermost first.
[[nodiscard]] std::vector<std::int64_t> mesh_sizes(const plan::Plan& p);

// Coordinates (one digit per axis, axis 0 most significant) of a rank.
[[nodiscard]] std::vector<std::int64_t> rank_coords(std::int64_t rank,
                                                    const std::vector<std::int64_t>& mesh);

// Shape of the local block a layout leaves each rank (every rank's block has
// the same shape). Throws Error(kInternal) if a split does not divide.
[[nodiscard]] ir::Shape local_shape(const ir::Shape& full, const Layout& l,
                                    const std::vector<std::int64_t>& mesh);

// Offset (in elements of the full tensor) of a rank's block along each dim.
[[nodiscard]] std::vector<std::int64_t> local_offsets(const ir::Shape& full, const Layout& l,
                                                      const std::vector<std::int64_t>& mesh,
                                                      const std::vector<std::int64_t>& coords);

// "[S0, R, P]" (one entry per axis).
[[nodiscard]] std::string layout_to_string(const Layout& l);

// One step of a redistribution, on one axis.
enum class StepKind : std::uint8_t {
  AllGather,      // S(dim) -> R
  AllToAll,       // S(dim) -> S(to_dim)
  AllReduce,      // P -> R
  ReduceScatter,  // P -> S(to_dim)
  Slice,          // R -> S(to_dim), local
};

struct RedistStep {
  StepKind kind;
  std::uint32_t axis;
  std::int16_t dim = -1;     // the dim the axis leaves (AllGather, AllToAll)
  std::int16_t to_dim = -1;  // the dim the axis joins (AllToAll, ReduceScatter, Slice)
};

// The steps that move a tensor of `rank` dims from layout `from` to layout
// `to` (which must not be partial anywhere). Empty when the layouts are equal.
[[nodiscard]] std::vector<RedistStep> redistribution_plan(const Layout& from, const Layout& to,
                                                          std::size_t rank);
// The same, knowing the tensor's shape and the mesh: partial sums over
// several axes are then reduced hierarchically (reduce-scatter on the inner
// axis, all-reduce on the outer ones on the piece, all-gather back), which
// sends per axis exactly what the cost model counts.
[[nodiscard]] std::vector<RedistStep> redistribution_plan(const Layout& from, const Layout& to,
                                                          const ir::Shape& full,
                                                          const std::vector<std::int64_t>& mesh);

// Layouts of one operator's operands on every axis (inputs, then outputs),
// the way the evaluator derives them from the operator's cuts.
struct OpLayouts {
  std::vector<Layout> inputs;
  std::vector<Layout> outputs;
};

// The whole plan laid out: every operator's operand layouts and every
// tensor's holder layout (its producer's output, or for a tensor nobody
// produces, its first use's input layout; a tensor nobody touches: replicated).
struct PlanLayouts {
  std::vector<std::int64_t> mesh;
  std::vector<OpLayouts> ops;
  std::vector<Layout> holders;
  // The plan's mode is training: BatchNorm normalises with batch statistics.
  bool train = true;
};

[[nodiscard]] PlanLayouts plan_layouts(const ir::Graph& g,
                                       const std::vector<algebra::OpSpace>& spaces,
                                       const plan::Plan& p);

// Bytes one rank sends in a forward pass of the execution layer (each rank
// sends the same amount), from the plan's layouts and tensor shapes alone:
// every distinct (tensor, layout) an operator needs, redistributed once from
// its holder, plus the all-reduce of graph outputs left partial and the
// exchanges of a vocabulary-parallel loss (per row and cut axis, an
// all-gather of its log-sum-exp and an all-reduce of its label's logit), and
// the all-reduce of a BatchNorm's per-channel sum and sum of squares (2·C
// of its block's channels) over each axis that cuts its batch or spatial
// dims (SyncBatchNorm's statistics, when it normalises with batch statistics). Elements
// are counted at `element_bytes` (the execution computes in f32: 4).
struct BytePrediction {
  double total = 0;
  std::vector<double> per_axis;  // by the axis the collective runs on
};
[[nodiscard]] BytePrediction predict_exec_bytes(const ir::Graph& g, const PlanLayouts& pl,
                                                double element_bytes = 4.0);
// Bytes the rank at `coords` sends point to point in a forward pass: the
// halo exchanges of convolutions and pools with a cut window dim (the rows
// of its block of the input that other ranks' windows read; ranks at the
// ends of a cut send less than those inside it, so unlike the collectives
// this depends on the rank).
[[nodiscard]] double predict_halo_bytes(const ir::Graph& g, const PlanLayouts& pl,
                                        const std::vector<std::int64_t>& coords,
                                        double element_bytes = 4.0);
// What one rank sends to move one tensor of shape `full` from layout `from`
// to `to` (redistribution_plan with the shape), per axis.
[[nodiscard]] BytePrediction redistribution_bytes(const ir::Shape& full, const Layout& from,
                                                  const Layout& to,
                                                  const std::vector<std::int64_t>& mesh,
                                                  double element_bytes = 4.0);

// Where gradients live in a training step (docs/exec.md, Training). The
// gradient of an operator's output is taken in the dual of its layout (a
// partial sum's gradient is replicated: every rank's term gets the whole
// gradient; shards and copies stay as they are). The local backward kernel
// then leaves each input's gradient contribution in the input's layout,
// except on an axis where the operator is cut but the input is replicated:
// there each rank holds its share of a sum (partial). Contributions of a
// tensor are brought to its gradient layout with the same collectives as
// the forward pass (P->R all-reduce, P->S reduce-scatter, S->R all-gather,
// R->S a slice): for activations the dual of the holder's layout, for
// parameters the holder's layout itself (the gradient synchronisation).
// Under ZeRO stage 1 or 2 a parameter's gradient is reduce-scattered over
// its innermost data-parallel axis (of those on which its holding operator,
// its first use, is cut while it is replicated; the outer ones all-reduce
// the shard) into a shard along its first dim that no axis splits and that
// the axis divides; the optimizer updates that shard and all-gathers the
// parameter back (a parameter without such a dim is all-reduced as in
// stage 0: the same bytes). Under stage 3 the shard is over every
// data-parallel axis (the cost model's plan::zero_axes), and it stays
// sharded: the passes gather it (zero3_sharded).
struct GradientLayouts {
  std::vector<std::uint8_t> needs_grad;  // per tensor: ir::gradient_tensors with grad_inputs
  std::vector<Layout> target;  // per tensor: where its summed gradient lives (a ZeRO shard)
  // Per op, per input: its contribution's layout (none when the input gets no gradient).
  std::vector<std::vector<std::optional<Layout>>> input;
};
// `grad_inputs`: graph inputs that get a gradient as parameters do (a
// pipeline stage's received boundary tensors, whose gradients go back to
// the stage that produced them); their gradient lives in their holder's
// layout and is never a ZeRO shard.
[[nodiscard]] GradientLayouts gradient_layouts(const ir::Graph& g, const PlanLayouts& pl,
                                               int zero_stage = 0,
                                               const std::vector<ir::TensorId>& grad_inputs = {});
// The same with a ZeRO stage per tensor (plan::parameter_zero; entries of
// tensors that are not parameters are ignored): each parameter's own stage.
[[nodiscard]] GradientLayouts gradient_layouts(const ir::Graph& g, const PlanLayouts& pl,
                                               const std::vector<int>& zero,
                                               const std::vector<ir::TensorId>& grad_inputs = {});

// Bytes one rank sends in the backward pass of a training step of the
// execution layer, from the layouts alone: the activation gradients'
// redistributions (`backward`) and the parameter gradients' (`gradient_sync`,
// with ZeRO's all-gather of the updated shards): each distinct contribution
// layout of a tensor is summed locally and moved once to the tensor's
// gradient layout.
struct TrainBytePrediction {
  BytePrediction backward;
  BytePrediction gradient_sync;
};
// `grad_inputs` as for gradient_layouts (their gradients count in `backward`).
[[nodiscard]] TrainBytePrediction predict_train_bytes(
    const ir::Graph& g, const PlanLayouts& pl, int zero_stage = 0, double element_bytes = 4.0,
    const std::vector<ir::TensorId>& grad_inputs = {});
// With a ZeRO stage per tensor: a ZeRO-3 parameter's updated shard is not
// gathered back (it stays sharded; the passes gather it).
[[nodiscard]] TrainBytePrediction predict_train_bytes(
    const ir::Graph& g, const PlanLayouts& pl, const std::vector<int>& zero,
    double element_bytes = 4.0, const std::vector<ir::TensorId>& grad_inputs = {});

// ZeRO 3 over several axes: a gradient partial on them becomes a shard of
// one dim split by them alone (major first). The redistribution plan would
// all-reduce the inner axes (an axis can only join a dim after the ones
// before it); the reduce-scatter runs one axis after the other from the
// outermost instead (Redistributor::scatter_partial), the hierarchical
// reduce-scatter the cost model prices. The axes, ascending, when `from`
// and `to` differ exactly so on two or more; empty otherwise.
[[nodiscard]] std::vector<std::uint32_t> zero_scatter_axes(const Layout& from, const Layout& to);

// ZeRO 3 (docs/exec.md, ZeRO 3): per tensor, whether it is a parameter kept
// as its gradient's shard between passes (stage 3 and a GradientLayouts
// target other than its holder's layout; a parameter without a shard dim is
// kept whole, as under stage 0).
[[nodiscard]] std::vector<std::uint8_t> zero3_sharded(const ir::Graph& g, const PlanLayouts& pl,
                                                      const GradientLayouts& gl,
                                                      const std::vector<int>& zero);
// Bytes one rank sends gathering ZeRO-3 parameters: in the forward pass each
// shard is all-gathered once into its holder's layout; in the backward pass
// again, and the copies its readers need in other layouts are made again
// from it (but those the recomputation makes: `rp`).
struct RecomputePlan;  // exec/recompute.hpp
struct Zero3GatherBytes {
  BytePrediction forward;
  BytePrediction backward;
};
[[nodiscard]] Zero3GatherBytes predict_zero3_gather_bytes(const ir::Graph& g, const PlanLayouts& pl,
                                                          const GradientLayouts& gl,
                                                          const std::vector<int>& zero,
                                                          const RecomputePlan& rp,
                                                          double element_bytes = 4.0);
// Bytes the rank at `coords` sends point to point in a backward pass: the
// reverse of each halo exchange whose input gets a gradient (the gradients
// of the halo rows it received, sent back to the ranks that hold them, the
// last cut window dim first). A rank sends back what it received, so
// ranks at the ends of a cut send what their neighbours sent them forward.
[[nodiscard]] double predict_halo_backward_bytes(const ir::Graph& g, const PlanLayouts& pl,
                                                 const GradientLayouts& gl,
                                                 const std::vector<std::int64_t>& coords,
                                                 double element_bytes = 4.0);

}  // namespace recsearch::exec
