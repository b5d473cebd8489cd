// SPDX-License-Identifier: Apache-2.0
// Expert-style baselines: Megatron tensor parallelism on the inner mesh axes
// with data parallelism on the outer ones.
//
// The tensor-parallel loop of every operator is found by one pass in
// topological order that follows which dimension of each tensor is split:
//
// * an operator whose data input is split on a dim it can cut continues that
//   split (attention heads, the hidden dim through GeLU/bias). When that dim
//   is a reduction loop of the operator (the second MatMul of a pair) its
//   output is partial and the split ends there: the "row" cut;
// * an operator with a weight and no split input starts a split: a
//   reduction loop only the weight has (vocabulary of an embedding Gather),
//   else the first weight dim that is a parallel loop of the output and of
//   no data input (the output features of a MatMul, the heads of a QKV
//   einsum, the output channels of a convolution): the "column" cut;
// * everything else (LayerNorm, residual adds, softmax over a split dim)
//   runs replicated across the tensor-parallel axes, as in Megatron-LM.
//
// Pinned operators keep their cuts; every cut goes through loop_allowed and
// algebra::can_cut, so `allowed` dims and divisibility are respected; an
// operator whose loop does not divide an axis runs replicated on it.
#include <limits>

#include "recsearch/error.hpp"
#include "search/common.hpp"

namespace recsearch::search::detail {
namespace {

bool is_weight(const ir::Tensor& t) { return t.kind == ir::TensorKind::Parameter; }
bool is_data(const ir::Tensor& t) {
  return t.kind != ir::TensorKind::Parameter && t.kind != ir::TensorKind::Constant;
}

// Whether loop l maps a dim of some data input of op.
bool in_data(const ir::Graph& g, const ir::Operator& op, const algebra::OpSpace& s, int l) {
  for (std::size_t j = 0; j < op.inputs.size(); ++j)
    if (is_data(g.tensor(op.inputs[j])))
      for (int x : s.inputs[j])
        if (x == l) return true;
  return false;
}

// Whether loop l maps a dim of some output.
bool in_output(const algebra::OpSpace& s, int l) {
  for (const auto& dims : s.outputs)
    for (int x : dims)
      if (x == l) return true;
  return false;
}

// The loop that continues the split of a data input (split_dim: the dim of
// each tensor the TP axes split, -1 for none), or kUnmapped.
int continued_loop(const ir::Operator& op, const algebra::OpSpace& s,
                   const std::vector<int>& split_dim) {
  for (std::size_t j = 0; j < op.inputs.size(); ++j) {
    const int d = split_dim[op.inputs[j]];
    if (d < 0 || static_cast<std::size_t>(d) >= s.inputs[j].size()) continue;
    const int l = s.inputs[j][static_cast<std::size_t>(d)];
    if (l != algebra::kUnmapped && loop_allowed(op, s, l)) return l;
  }
  return algebra::kUnmapped;
}

// The first loop of a weight with `role` that no data input has (and, for
// a parallel loop, some output has), or kUnmapped.
int weight_loop(const ir::Graph& g, const ir::Operator& op, const algebra::OpSpace& s,
                algebra::DimRole role) {
  for (std::size_t j = 0; j < op.inputs.size(); ++j) {
    if (!is_weight(g.tensor(op.inputs[j]))) continue;
    for (int l : s.inputs[j]) {
      if (l == algebra::kUnmapped || !loop_allowed(op, s, l)) continue;
      const auto& loop = s.loops[static_cast<std::size_t>(l)];
      if (loop.role != role || in_data(g, op, s, l)) continue;
      if (role == algebra::DimRole::Parallel && !in_output(s, l)) continue;
      return l;
    }
  }
  return algebra::kUnmapped;
}

// Records the dim of each output that tensor-parallel loop tp splits.
void mark_split(const ir::Operator& op, const algebra::OpSpace& s, int tp,
                std::vector<int>& split_dim) {
  for (std::size_t j = 0; j < op.outputs.size(); ++j)
    for (std::size_t d = 0; d < s.outputs[j].size(); ++d)
      if (s.outputs[j][d] == tp) {
        split_dim[op.outputs[j]] = static_cast<int>(d);
        break;
      }
}

}  // namespace

std::vector<int> tensor_parallel_loops(const ir::Graph& g,
                                       const std::vector<algebra::OpSpace>& spaces,
                                       const std::vector<std::vector<std::int16_t>>& pinned) {
  std::vector<int> loop_of(g.num_operators(), algebra::kUnmapped);
  std::vector<int> split_dim(g.num_tensors(), -1);  // dim of each tensor the TP axes split
  for (ir::OpId o : g.topological_order()) {
    const ir::Operator& op = g.op(o);
    const algebra::OpSpace& s = spaces[o];
    if (!pinned[o].empty() || s.opaque) continue;
    // Continue a split of a data input, else start one at a weight: a
    // reduction loop only the weight has, else a parallel loop of the
    // output (the column cut); see the file comment.
    int tp = continued_loop(op, s, split_dim);
    if (tp == algebra::kUnmapped) tp = weight_loop(g, op, s, algebra::DimRole::Reduction);
    if (tp == algebra::kUnmapped) tp = weight_loop(g, op, s, algebra::DimRole::Parallel);
    loop_of[o] = tp;
    if (tp != algebra::kUnmapped &&
        s.loops[static_cast<std::size_t>(tp)].role == algebra::DimRole::Parallel)
      mark_split(op, s, tp, split_dim);
  }
  return loop_of;
}

void tensor_parallel(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                     const Cluster& cluster, std::size_t first_tp_axis, plan::Plan& out) {
  const auto& mesh = cluster.cuts();
  const auto pinned = pinned_cuts(g, spaces, mesh);
  const std::vector<int> tp = tensor_parallel_loops(g, spaces, pinned);
  out.cuts.assign(g.num_operators(), std::vector<std::int16_t>(mesh.size(), plan::kReplicated));
  for (std::size_t o = 0; o < g.num_operators(); ++o) {
    if (!pinned[o].empty()) {
      out.cuts[o] = pinned[o];
      continue;
    }
    const ir::Operator& op = g.op(static_cast<ir::OpId>(o));
    const algebra::OpSpace& s = spaces[o];
    const int batch = batch_loop(g, s, static_cast<ir::OpId>(o));
    std::vector<std::int64_t> splits(s.loops.size(), 1);
    auto try_cut = [&](std::size_t a, int loop) {
      if (loop == algebra::kUnmapped || !algebra::can_cut(g, op, s, splits, loop, mesh[a].size))
        return false;
      out.cuts[o][a] = static_cast<std::int16_t>(loop);
      splits[static_cast<std::size_t>(loop)] *= mesh[a].size;
      return true;
    };
    for (std::size_t a = 0; a < mesh.size(); ++a) {
      (void)try_cut(a, a < first_tp_axis ? batch : tp[o]);
    }
  }
}

std::size_t innermost_level_axis(const Cluster& cluster) {
  const auto& mesh = cluster.cuts();
  if (mesh.empty()) return 0;
  std::size_t a = mesh.size() - 1;
  while (a > 0 && mesh[a - 1].level == mesh.back().level) --a;
  return a;
}

}  // namespace recsearch::search::detail
