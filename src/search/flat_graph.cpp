// SPDX-License-Identifier: Apache-2.0
// flatten: the flat view of a graph the searches share (search/flat_graph.hpp).
#include "search/flat_graph.hpp"

#include <algorithm>

namespace recsearch::search::detail {

Context::Context(const ir::Graph& graph, const std::vector<algebra::OpSpace>& op_spaces,
                 const Cluster& c, const SearchOptions& o, double memory_budget)
    : g(graph),
      spaces(op_spaces),
      cluster(c),
      opts(o),
      mesh(c.cuts()),
      budget(memory_budget),
      training(pinned_training(o)),
      precision(plan::operator_precisions(graph, o.cost)) {
  const bool train = o.mode == Mode::Train;
  if (train) rules = plan::memory_rules(g, spaces, plan::operator_recompute(g, training));
  for (std::size_t d = 0; d < ir::kDTypeCount; ++d)
    state_by_dtype[d] = plan::parameter_state(
        o.cost, o.mode, static_cast<int>(ir::dtype_size(static_cast<ir::DType>(d))));
  held_factor.assign(g.num_tensors(), 1.0);
  for (std::size_t t = 0; t < g.num_tensors(); ++t) {
    const ir::Tensor& x = g.tensor(static_cast<ir::TensorId>(t));
    if (x.kind == ir::TensorKind::Parameter) {
      held_factor[t] = state(static_cast<ir::TensorId>(t)).total();
    } else if (train) {
      held_factor[t] = rules.saved[t];
      // A recomputed tensor is live with its segment only: its share of one.
      if (rules.segment[t] >= 0)
        held_factor[t] += rules.saved_if_kept[t] / static_cast<double>(std::max(rules.segments, 1));
    }
  }
}
namespace {

// Each operator's input and output tensors, and the distinct ones it
// touches (the tensors whose redistributions a change of its strategy can
// move), with their offsets.
void flatten_operands(const ir::Graph& g, FlatGraph& f) {
  const std::size_t nops = g.num_operators();
  f.in_off.assign(nops + 1, 0);
  f.out_off.assign(nops + 1, 0);
  f.touched_off.assign(nops + 1, 0);
  for (std::size_t o = 0; o < nops; ++o) {
    const ir::Operator& op = g.op(static_cast<ir::OpId>(o));
    f.in_tensor.insert(f.in_tensor.end(), op.inputs.begin(), op.inputs.end());
    f.out_tensor.insert(f.out_tensor.end(), op.outputs.begin(), op.outputs.end());
    f.in_off[o + 1] = f.in_tensor.size();
    f.out_off[o + 1] = f.out_tensor.size();
    const auto first = static_cast<std::ptrdiff_t>(f.touched.size());
    f.touched.insert(f.touched.end(), op.inputs.begin(), op.inputs.end());
    f.touched.insert(f.touched.end(), op.outputs.begin(), op.outputs.end());
    std::sort(f.touched.begin() + first, f.touched.end());
    f.touched.erase(std::unique(f.touched.begin() + first, f.touched.end()), f.touched.end());
    f.touched_off[o + 1] = f.touched.size();
  }
}

// Each tensor's bytes, holder and uses.
void flatten_tensors(const ir::Graph& g, FlatGraph& f) {
  const std::size_t nt = g.num_tensors();
  f.bytes.resize(nt);
  f.holder_op.assign(nt, ir::kNone);
  f.holder_slot.assign(nt, 0);
  f.use_off.assign(nt + 1, 0);
  for (std::size_t t = 0; t < nt; ++t) {
    const auto id = static_cast<ir::TensorId>(t);
    const ir::Tensor& tensor = g.tensor(id);
    f.bytes[t] = tensor.bytes();
    f.uses.insert(f.uses.end(), tensor.consumers.begin(), tensor.consumers.end());
    f.use_off[t + 1] = f.uses.size();
    if (tensor.producer != ir::kNone) {
      const ir::Operator& op = g.op(tensor.producer);
      f.holder_op[t] = tensor.producer;
      f.holder_slot[t] = static_cast<std::uint32_t>(
          op.inputs.size() +
          static_cast<std::size_t>(std::find(op.outputs.begin(), op.outputs.end(), id) -
                                   op.outputs.begin()));
    } else if (!tensor.consumers.empty()) {
      const auto& ins = g.op(tensor.consumers.front()).inputs;
      f.holder_op[t] = tensor.consumers.front();
      f.holder_slot[t] =
          static_cast<std::uint32_t>(std::find(ins.begin(), ins.end(), id) - ins.begin());
    }
  }
}

// Each tensor's input slots (FlatGraph::use_slots), from its uses and the
// operators' input tensors.
void flatten_use_slots(FlatGraph& f) {
  const std::size_t nt = f.use_off.size() - 1;
  f.use_slot_off.assign(nt + 1, 0);
  f.use_slots.clear();
  f.use_slots.reserve(f.uses.size());
  for (std::size_t t = 0; t < nt; ++t) {
    ir::OpId prev = ir::kNone;
    for (std::size_t x = f.use_off[t]; x < f.use_off[t + 1]; ++x) {
      const ir::OpId u = f.uses[x];
      if (u == prev) continue;
      prev = u;
      for (std::size_t j = 0; j < f.in_off[u + 1] - f.in_off[u]; ++j)
        if (f.in_tensor[f.in_off[u] + j] == t)
          f.use_slots.push_back({u, static_cast<std::uint32_t>(j)});
    }
    f.use_slot_off[t + 1] = f.use_slots.size();
  }
}

// FlatGraph::in_repeat: per operator, its input tensors that occur in more
// than one slot (sorted copies: O(k log k) for k inputs).
void flatten_repeats(FlatGraph& f) {
  f.in_repeat.assign(f.in_tensor.size(), 0);
  std::vector<ir::TensorId> sorted;
  for (std::size_t o = 0; o + 1 < f.in_off.size(); ++o) {
    const std::size_t in0 = f.in_off[o], nin = f.in_off[o + 1] - in0;
    sorted.assign(f.in_tensor.begin() + static_cast<std::ptrdiff_t>(in0),
                  f.in_tensor.begin() + static_cast<std::ptrdiff_t>(in0 + nin));
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end()) continue;
    for (std::size_t j = 0; j < nin; ++j)
      for (std::size_t m = 0; m < nin; ++m)
        if (m != j && f.in_tensor[in0 + m] == f.in_tensor[in0 + j])
          f.in_repeat[in0 + j] |= m < j ? FlatGraph::kEarlierSlot : FlatGraph::kLaterSlot;
  }
}

}  // namespace

FlatGraph flatten(const ir::Graph& g) {
  FlatGraph f;
  flatten_operands(g, f);
  flatten_tensors(g, f);
  flatten_use_slots(f);
  // An input slot holds its tensor when it is the holder's slot: a source
  // tensor's first use (a producer's slot is an output slot).
  f.in_holds.assign(f.in_tensor.size(), 0);
  for (std::size_t o = 0; o + 1 < f.in_off.size(); ++o)
    for (std::size_t j = 0; j < f.in_off[o + 1] - f.in_off[o]; ++j) {
      const ir::TensorId t = f.in_tensor[f.in_off[o] + j];
      f.in_holds[f.in_off[o] + j] = f.holder_op[t] == o && f.holder_slot[t] == j;
    }
  flatten_repeats(f);
  return f;
}

}  // namespace recsearch::search::detail
