// SPDX-License-Identifier: Apache-2.0
// How a training step runs around the operator-level plan: activation
// recomputation, ZeRO sharding of parameter state, microbatches (gradient
// accumulation), and the memory rules that follow from them.
//
// These are plan-wide decisions, recomputation and the ZeRO stage with
// per-operator and per-parameter exceptions (docs/cost-model.md, Training): the search
// picks them under the memory budget (search/options.hpp, TrainingChoice),
// the plan file records them, and the evaluator prices them. Everything a
// training setting changes about memory is expressed per tensor here, so that
// the evaluator and every search count bytes by the same rules.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/cost/cost_params.hpp"
#include "recsearch/ir/graph.hpp"

namespace recsearch::plan {

// Activation recomputation (Korthikanti et al. 2022), per operator:
//  None       every tensor an operator's backward needs is kept;
//  Selective  the attention core (scores, softmax, dropout between the two
//             batched products of a self-attention) is recomputed from the
//             kept q, k, v;
//  Full       only checkpoints are kept (the tensors that alone carry the
//             forward pass from one part of the graph to the next, about
//             sqrt(n) of them), and each segment is recomputed in the
//             backward pass, but for the segment after the last
//             checkpoint of a graph that ends in its loss (the backward
//             starts there: it runs once and keeps its tensors).
// The enum lives in the graph's vocabulary (ir/training_pins.hpp) because a
// graph file may pin it.
using Recompute = ir::Recompute;

[[nodiscard]] std::string_view recompute_name(Recompute r) noexcept;
[[nodiscard]] std::optional<Recompute> parse_recompute(std::string_view s) noexcept;

// The plan-wide training settings. Meaningful in Mode::Train only.
struct Training {
  // The recomputation of every operator per_op does not name.
  Recompute recompute = Recompute::None;
  // ZeRO / FSDP over each parameter's data-parallel axes (the axes on which
  // its holding operator is cut while the parameter is replicated):
  // 1 shards optimizer state, 2 also gradients, 3 also the weights.
  int zero_stage = 0;
  // Microbatches per step (gradient accumulation): the step's batch runs as
  // this many slices of the batch dimension in sequence.
  std::int64_t microbatches = 1;
  // Per operator (empty: `recompute` everywhere): the recomputation of each,
  // e.g. full for the last blocks of a stack and selective for the others.
  // Operators the graph pins (ir::Operator::recompute) carry their pin.
  std::vector<Recompute> per_op;
  // Per tensor (empty: `zero_stage` for every parameter): the ZeRO stage of
  // each parameter, e.g. 3 for the embedding and the largest blocks and 2
  // for the rest; entries of other tensors are ignored. (Initialized so
  // that aggregates naming the first four members stay complete.)
  std::vector<std::int8_t> zero_per_param = {};

  friend bool operator==(const Training&, const Training&) = default;
};

inline constexpr int kMaxZeroStage = 3;

// The recomputation of each operator of g under t: per_op where set, else
// t.recompute, and an operator's own pin (ir::Operator::recompute) over
// both. The one definition the evaluator, the searches and the plan file
// share.
[[nodiscard]] std::vector<Recompute> operator_recompute(const ir::Graph& g, const Training& t);

// Whether t, read against g, recomputes anything other than t.recompute
// (per-operator values or pins that differ): the plan file then lists them.
[[nodiscard]] bool mixed_recompute(const ir::Graph& g, const Training& t);

// The ZeRO stage of each tensor of g under t: zero_per_param where set, else
// t.zero_stage (0 for tensors that are not parameters). The one definition
// the evaluator, the searches and the plan file share.
[[nodiscard]] std::vector<int> parameter_zero(const ir::Graph& g, const Training& t);

// Whether some parameter of g has a ZeRO stage other than t.zero_stage: the
// plan file then lists them.
[[nodiscard]] bool mixed_zero(const ir::Graph& g, const Training& t);

struct Plan;

// The ZeRO axes of each parameter under a plan: the mesh axes (of more than
// one device) on which the parameter's holding operator (its first consumer:
// lowest operator id, then lowest input slot; plan/evaluator.hpp, Holder) is
// cut while the parameter itself is replicated there -- its data-parallel
// axes, over which its ZeRO stage shards its state. The one definition the
// evaluator prices and the plan file writes and checks. Per tensor, in
// ascending axis order; empty for tensors that are not parameters and for
// parameters nobody reads. Compressed (begin per tensor) because graphs of
// millions of tensors have few parameters with axes.
struct ZeroAxes {
  std::vector<std::uint32_t> begin;  // per tensor, plus one end entry
  std::vector<std::uint32_t> axes;   // axes[begin[t] .. begin[t + 1]] are tensor t's
  [[nodiscard]] std::span<const std::uint32_t> of(ir::TensorId t) const noexcept {
    return {axes.data() + begin[t], axes.data() + begin[t + 1]};
  }
};
[[nodiscard]] ZeroAxes zero_axes(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                                 const Plan& p);

// Per-tensor and per-operator memory rules of one graph under one training
// setting (docs/cost-model.md, Saved tensors):
struct MemoryRules {
  // Bytes kept for the backward pass per byte of the tensor (0 for
  // parameters and constants; masks and statistics are fractions).
  std::vector<float> saved;
  // Full recomputation: the segment (0, 1, ...) whose backward recomputes
  // the tensor, whose saved bytes (saved_if_kept) are live together only
  // while that segment's backward runs; -1 for checkpoints and tensors
  // outside every segment.
  std::vector<std::int32_t> segment;
  std::vector<float> saved_if_kept;  // Full only: the None rule's bytes
  std::int32_t segments = 0;
  // Per operator: its forward runs again in the backward pass.
  std::vector<std::uint8_t> recomputed;
  // Per tensor: it takes a gradient (ir::gradient_tensors); per operator:
  // the share of its backward work that runs (ir::backward_shares), which
  // cost::step_compute_seconds prices.
  std::vector<std::uint8_t> grads;
  std::vector<float> backward_share;
};

// The rules for graph g (finalized; spaces are its operator spaces).
[[nodiscard]] MemoryRules memory_rules(const ir::Graph& g,
                                       const std::vector<algebra::OpSpace>& spaces,
                                       Recompute recompute);
// The same with one recomputation per operator (operator_recompute): the
// attention cores whose operators are all selective or full drop their
// saved tensors; full operators form segments among themselves (a segment
// ends where an operator that is not full comes in topological order), and
// an activation a full operator reads from one that is not is kept whole,
// the checkpoint its segment restarts from. Uniform values give exactly the
// rules of memory_rules(g, spaces, recompute).
[[nodiscard]] MemoryRules memory_rules(const ir::Graph& g,
                                       const std::vector<algebra::OpSpace>& spaces,
                                       const std::vector<Recompute>& per_op);

// Bytes of parameter state per byte of weights: the weights, their
// gradients and the optimizer state (cost settings' optimizer preset for a
// parameter of dtype_bytes per element; in inference the weights alone).
struct ParameterState {
  double weight = 1;
  double gradient = 0;
  double optimizer = 0;
  [[nodiscard]] double total() const noexcept { return weight + gradient + optimizer; }
  // Per device after ZeRO at `stage` divides the sharded parts by `ways`.
  [[nodiscard]] double sharded(int stage, double ways) const noexcept {
    return (stage >= 3 ? weight / ways : weight) + (stage >= 2 ? gradient / ways : gradient) +
           (stage >= 1 ? optimizer / ways : optimizer);
  }
};
[[nodiscard]] ParameterState parameter_state(const CostParams& p, Mode mode, int dtype_bytes);

// The batch dimension followed through a graph from `seeds` (per tensor, its
// batch dim or -1; the graph inputs'): an operator's batch loop is the loop
// its first input carrying a batch dim maps it to, and each output carries
// the batch at the dim that loop indexes. The one rule microbatch_view
// (inputs' dim 0) and the data-parallel baseline (search/baselines.cpp)
// follow.
struct BatchDims {
  std::vector<int> tensor_dim;  // per tensor, -1 where it has none
  std::vector<int> op_loop;     // per operator, algebra::kUnmapped where none
  // Operators whose inputs carry the batch on different loops (a product
  // of two batch-carrying operands over it, as q kᵀ is over a sequence).
  std::size_t conflicts = 0;
};
[[nodiscard]] BatchDims follow_batch(const ir::Graph& g,
                                     const std::vector<algebra::OpSpace>& spaces,
                                     std::vector<int> seeds);

// follow_batch from every graph input whose dim 0 is the graph's batch
// (batch_size): the batch dims microbatch_view divides.
[[nodiscard]] BatchDims batch_dims(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces);

// The microbatch graph: g with the batch dimension of every tensor that
// carries one divided by m (found by following each graph input's dim 0
// through the operator spaces), and its spaces. Empty when some batch
// dimension is not divisible by m or no tensor carries a batch dimension.
struct MicrobatchView {
  ir::Graph graph;
  std::vector<algebra::OpSpace> spaces;
};
[[nodiscard]] std::optional<MicrobatchView> microbatch_view(
    const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces, std::int64_t m);

// The global batch of g (the common extent of the graph inputs' dim 0), 0
// when it has none.
[[nodiscard]] std::int64_t batch_size(const ir::Graph& g);

}  // namespace recsearch::plan
