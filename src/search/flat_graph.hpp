// SPDX-License-Identifier: Apache-2.0
// The shared, private ground of the searches that keep state per operator
// and tensor (rec, polish, the branch and bound, ilp): the problem they
// solve (Context) and a flat view of the graph's operands, holders and uses
// (FlatGraph), built once per search so that the inner loops walk plain
// arrays instead of each operator's and tensor's own vectors.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/cluster.hpp"
#include "recsearch/ir/graph.hpp"
#include "recsearch/plan/precision.hpp"
#include "recsearch/plan/training.hpp"
#include "recsearch/search/options.hpp"

namespace recsearch::search::detail {

// The training settings of the options, defaults where unset (no
// recomputation, ZeRO 0, one microbatch); inference: the defaults.
inline plan::Training pinned_training(const SearchOptions& o) {
  plan::Training t;
  if (o.mode != Mode::Train) return t;
  t.recompute = o.training.recompute.value_or(plan::Recompute::None);
  t.zero_stage = o.training.zero_stage.value_or(0);
  t.microbatches = o.training.microbatches.value_or(1);
  return t;
}

// What every search is asked: the graph with its spaces, the cluster (and
// its mesh, cluster.cuts()), the options (cost parameters, mode) and the
// memory budget per device in bytes, where the search enforces one.
struct Context {
  Context(const ir::Graph& graph, const std::vector<algebra::OpSpace>& op_spaces, const Cluster& c,
          const SearchOptions& o, double memory_budget);

  const ir::Graph& g;
  const std::vector<algebra::OpSpace>& spaces;
  const Cluster& cluster;
  const SearchOptions& opts;
  const std::vector<Cut>& mesh;
  double budget;
  // The training settings searched (SearchOptions::training, defaults where
  // unset) and the memory rules they give the graph (training only).
  plan::Training training;
  plan::MemoryRules rules;
  // Per tensor: bytes of memory per byte as the evaluator counts them when
  // the tensor is held (saved activations; parameter state unsharded).
  std::vector<double> held_factor;
  // A parameter tensor's state per byte (plan::parameter_state), which
  // depends on its dtype alone: one per dtype, not one per tensor (24 bytes
  // a tensor, a third of a gigabyte at 10^7 operators).
  [[nodiscard]] const plan::ParameterState& state(ir::TensorId t) const {
    return state_by_dtype[static_cast<std::size_t>(g.tensor(t).dtype)];
  }
  std::array<plan::ParameterState, ir::kDTypeCount> state_by_dtype;
  // Per operator: the precision its flops run at (plan::operator_precision).
  std::vector<Precision> precision;
};

// Operands, holders and uses of a graph in flat arrays. An operator's slots
// are numbered inputs first, then outputs (as OpStrategy::layout).
struct FlatGraph {
  // Per operator, with offsets (size operators + 1): its input and output
  // tensors, one per slot; whether an input slot holds its tensor (see
  // holder_op); the distinct tensors it touches, in id order.
  std::vector<std::size_t> in_off, out_off, touched_off;
  std::vector<ir::TensorId> in_tensor, out_tensor, touched;
  std::vector<std::uint8_t> in_holds;
  // Per input slot: kEarlierSlot when an earlier input slot of the same
  // operator reads the same tensor, kLaterSlot when a later one does, so
  // that the searches skip their scans of the other slots (a Concat of k
  // inputs: k per slot) where there is nothing to find.
  static constexpr std::uint8_t kEarlierSlot = 1, kLaterSlot = 2;
  std::vector<std::uint8_t> in_repeat;

  // Per tensor: full bytes; its holder, whose layout a redistribution
  // starts from (the producer, else the first use; kNone for a tensor
  // nobody touches) and the holder's slot; its uses, one per consumer
  // entry, with offsets (size tensors + 1).
  std::vector<double> bytes;
  std::vector<ir::OpId> holder_op;
  std::vector<std::uint32_t> holder_slot;
  std::vector<std::size_t> use_off;
  std::vector<ir::OpId> uses;
  // Per tensor (offsets size tensors + 1): the input slots that read it,
  // as (operator, slot within its inputs), in use order and, within an
  // operator, in slot order; an operator listed by consecutive uses once.
  // A Concat of k inputs would otherwise be scanned whole for each of them.
  struct UseSlot {
    ir::OpId op;
    std::uint32_t slot;
  };
  std::vector<std::size_t> use_slot_off;
  std::vector<UseSlot> use_slots;

  [[nodiscard]] std::span<const ir::TensorId> touched_of(ir::OpId o) const {
    return {touched.data() + touched_off[o], touched_off[o + 1] - touched_off[o]};
  }
  [[nodiscard]] std::span<const UseSlot> use_slots_of(ir::TensorId t) const {
    return {use_slots.data() + use_slot_off[t], use_slot_off[t + 1] - use_slot_off[t]};
  }
};

FlatGraph flatten(const ir::Graph& g);

}  // namespace recsearch::search::detail
