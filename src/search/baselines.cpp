// SPDX-License-Identifier: Apache-2.0
// Choices every algorithm shares (legal cuts, pinned operators, the memory
// budget) and the data-parallel baseline, which follows the batch through
// the graph (data_parallel_loops).
#include <algorithm>

#include "recsearch/error.hpp"
#include "recsearch/plan/training.hpp"
#include "search/common.hpp"

namespace recsearch::search::detail {

bool loop_allowed(const ir::Operator& op, const algebra::OpSpace& s, int loop) {
  if (s.opaque) return false;
  const algebra::LoopDim& l = s.loops[static_cast<std::size_t>(loop)];
  if (l.role == algebra::DimRole::Whole) return false;
  if (op.allowed && std::find(op.allowed->begin(), op.allowed->end(), l.name) == op.allowed->end())
    return false;
  return true;
}

void legal_choices(const ir::Graph& g, ir::OpId op, const algebra::OpSpace& s,
                   const std::vector<std::int64_t>& splits, std::int64_t k,
                   std::vector<std::int16_t>& out) {
  out.assign(1, plan::kReplicated);
  const ir::Operator& o = g.op(op);
  for (std::size_t l = 0; l < s.loops.size(); ++l)
    if (loop_allowed(o, s, static_cast<int>(l)) &&
        algebra::can_cut(g, o, s, splits, static_cast<int>(l), k))
      out.push_back(static_cast<std::int16_t>(l));
}

std::vector<std::vector<std::int16_t>> pinned_cuts(const ir::Graph& g,
                                                   const std::vector<algebra::OpSpace>& spaces,
                                                   const std::vector<Cut>& mesh) {
  std::vector<std::vector<std::int16_t>> out(g.num_operators());
  for (std::size_t o = 0; o < g.num_operators(); ++o) {
    const ir::Operator& op = g.op(static_cast<ir::OpId>(o));
    if (op.strategy)
      out[o] = plan::assign_cuts(g, static_cast<ir::OpId>(o), spaces[o], *op.strategy, mesh);
  }
  return out;
}

int batch_loop(const ir::Graph& g, const algebra::OpSpace& s, ir::OpId id) {
  const ir::Operator& op = g.op(id);
  // Dim 0 of the first data input (not a weight or constant).
  for (std::size_t j = 0; j < op.inputs.size(); ++j) {
    const ir::Tensor& t = g.tensor(op.inputs[j]);
    if (t.kind == ir::TensorKind::Parameter || t.kind == ir::TensorKind::Constant) continue;
    if (s.inputs[j].empty()) continue;
    const int loop = s.inputs[j][0];
    return loop != algebra::kUnmapped && loop_allowed(op, s, loop) ? loop : algebra::kUnmapped;
  }
  return algebra::kUnmapped;
}

double memory_budget(const Cluster& cluster, const SearchOptions& opts) {
  if (opts.cost.memory_budget_bytes > 0) return opts.cost.memory_budget_bytes;
  return cluster.device().memory_GiB * 1024.0 * 1024.0 * 1024.0;
}

namespace {

// The batch followed from dim `d` of the graph inputs that have it at the
// extent of the first input's dim d.
plan::BatchDims batch_from(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                           const ir::Tensor& first, std::size_t d) {
  std::vector<int> seeds(g.num_tensors(), -1);
  for (std::size_t t = 0; t < g.num_tensors(); ++t) {
    const ir::Tensor& x = g.tensor(static_cast<ir::TensorId>(t));
    if (x.kind == ir::TensorKind::Input && x.shape.size() > d && x.shape[d] == first.shape[d])
      seeds[t] = static_cast<int>(d);
  }
  return plan::follow_batch(g, spaces, std::move(seeds));
}

std::size_t reached(const plan::BatchDims& b) {
  return static_cast<std::size_t>(std::count_if(b.op_loop.begin(), b.op_loop.end(),
                                                [](int l) { return l != algebra::kUnmapped; }));
}

}  // namespace

std::vector<int> data_parallel_loops(const ir::Graph& g,
                                     const std::vector<algebra::OpSpace>& spaces) {
  const ir::Tensor* first = nullptr;
  for (const ir::Tensor& t : g.tensors()) {
    if (t.kind == ir::TensorKind::Input && !t.shape.empty() && !t.consumers.empty()) {
      first = &t;
      break;
    }
  }
  std::vector<int> loops(g.num_operators(), algebra::kUnmapped);
  if (first == nullptr) return loops;
  // Dim 0, as microbatch_view takes it, unless it meets itself in some
  // operator (a sequence-first layout: q kᵀ pairs every row with every
  // other) and another dim reaches as many operators and never does.
  plan::BatchDims best = batch_from(g, spaces, *first, 0);
  for (std::size_t d = 1; d < first->shape.size() && best.conflicts > 0; ++d) {
    plan::BatchDims b = batch_from(g, spaces, *first, d);
    if (b.conflicts == 0 && reached(b) >= reached(best)) best = std::move(b);
  }
  for (std::size_t o = 0; o < g.num_operators(); ++o) {
    const int l = best.op_loop[o];
    if (l != algebra::kUnmapped && loop_allowed(g.op(static_cast<ir::OpId>(o)), spaces[o], l))
      loops[o] = l;
  }
  return loops;
}

void data_parallel(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                   const Cluster& cluster, plan::Plan& out) {
  const auto& mesh = cluster.cuts();
  const auto pinned = pinned_cuts(g, spaces, mesh);
  const std::vector<int> batch_of = data_parallel_loops(g, spaces);
  out.cuts.assign(g.num_operators(), std::vector<std::int16_t>(mesh.size(), plan::kReplicated));
  for (std::size_t o = 0; o < g.num_operators(); ++o) {
    if (!pinned[o].empty()) {
      out.cuts[o] = pinned[o];
      continue;
    }
    const ir::Operator& op = g.op(static_cast<ir::OpId>(o));
    const algebra::OpSpace& s = spaces[o];
    const int batch = batch_of[o];
    if (batch == algebra::kUnmapped) continue;
    std::vector<std::int64_t> splits(s.loops.size(), 1);
    for (std::size_t a = 0; a < mesh.size(); ++a) {
      if (!algebra::can_cut(g, op, s, splits, batch, mesh[a].size)) continue;
      out.cuts[o][a] = static_cast<std::int16_t>(batch);
      splits[static_cast<std::size_t>(batch)] *= mesh[a].size;
    }
  }
}

}  // namespace recsearch::search::detail
