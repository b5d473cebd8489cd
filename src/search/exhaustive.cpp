// SPDX-License-Identifier: Apache-2.0
// Exact optimum of the cost model by branch and bound, for small graphs.
//
// An operator's full strategy (one choice per axis) fixes its own costs
// (compute, gradient all-reduces, halos, reduction of unconsumed partial
// outputs) and the layouts of its operands; a tensor's redistribution cost
// depends on its holder's strategy and on the distinct requests of its uses.
// Operators are assigned in topological order; the bound is the cost so far
// (own costs plus redistributions among assigned operators, which only grow
// as more uses are assigned) plus the cheapest own cost of every operator
// still open. This is a third, separate account of the cost model: the
// tests check its optimum against plan::evaluate.
#include <algorithm>
#include <limits>
#include <span>

#include "recsearch/error.hpp"
#include "recsearch/ir/gradients.hpp"
#include "search/common.hpp"

namespace recsearch::search::detail {
namespace {

using cost::AxisLayout;
using cost::LayoutKind;

using Strategy = OpStrategy;

class BranchAndBound {
 public:
  explicit BranchAndBound(const Context& ctx) : ctx_(ctx), flat_(flatten(ctx.g)) {
    const ir::Graph& g = ctx.g;
    const auto pinned = pinned_cuts(g, ctx.spaces, ctx.mesh);
    strategies_.resize(g.num_operators());
    for (std::size_t o = 0; o < g.num_operators(); ++o) {
      std::vector<std::int16_t> cuts;
      std::vector<std::int64_t> splits(ctx.spaces[o].loops.size(), 1);
      if (!pinned[o].empty()) add_strategy(static_cast<ir::OpId>(o), pinned[o]);
      else enumerate(static_cast<ir::OpId>(o), 0, splits, cuts);
    }
    order_ = g.topological_order();
    suffix_min_.assign(order_.size() + 1, 0.0);
    for (std::size_t i = order_.size(); i-- > 0;) {
      double m = std::numeric_limits<double>::infinity();
      for (const auto& s : strategies_[order_[i]]) m = std::min(m, s.own);
      suffix_min_[i] = suffix_min_[i + 1] + m;
    }
    chosen_.assign(g.num_operators(), -1);
    edge_.assign(g.num_tensors(), 0.0);
  }

  ExhaustiveResult solve(plan::Plan& incumbent, bool have_incumbent) {
    if (have_incumbent) {
      best_ = plan::evaluate(ctx_.g, ctx_.spaces, ctx_.cluster, incumbent, ctx_.opts.cost)
                  .summary.step_time_s;
      best_cuts_ = incumbent.cuts;
      found_ = true;
    }
    dfs(0, 0.0, 0.0, 0.0);
    if (!found_) return {false, !aborted_, 0.0};
    incumbent.cuts = best_cuts_;
    return {true, !aborted_, account(best_cuts_)};
  }

  // This search's own cost of a full plan: own costs of each operator's
  // strategy plus every tensor's redistributions. (The incumbent's cost
  // came from the evaluator; this recount is what the tests compare.)
  double account(const std::vector<std::vector<std::int16_t>>& cuts) {
    double total = 0;
    for (std::size_t o = 0; o < cuts.size(); ++o) {
      const auto& list = strategies_[o];
      const auto it = std::find_if(list.begin(), list.end(),
                                   [&](const Strategy& s) { return s.cuts == cuts[o]; });
      if (it == list.end())
        throw Error(Errc::kInternal, "exhaustive: plan strategy not among the enumerated ones");
      chosen_[o] = static_cast<int>(it - list.begin());
      total += it->own;
    }
    for (std::size_t t = 0; t < ctx_.g.num_tensors(); ++t)
      total += tensor_edge(static_cast<ir::TensorId>(t));
    std::fill(chosen_.begin(), chosen_.end(), -1);
    return total;
  }

 private:
  void enumerate(ir::OpId o, std::size_t a, std::vector<std::int64_t>& splits,
                 std::vector<std::int16_t>& cuts) {
    if (a == ctx_.mesh.size()) {
      add_strategy(o, cuts);
      return;
    }
    std::vector<std::int16_t> choices;
    legal_choices(ctx_.g, o, ctx_.spaces[o], splits, ctx_.mesh[a].size, choices);
    for (auto c : choices) {
      cuts.push_back(c);
      if (c != plan::kReplicated) splits[static_cast<std::size_t>(c)] *= ctx_.mesh[a].size;
      enumerate(o, a + 1, splits, cuts);
      if (c != plan::kReplicated) splits[static_cast<std::size_t>(c)] /= ctx_.mesh[a].size;
      cuts.pop_back();
    }
  }

  void add_strategy(ir::OpId o, const std::vector<std::int16_t>& cuts) {
    strategies_[o].push_back(make_strategy(ctx_, o, cuts));
  }

  // Redistribution cost of tensor t among its assigned holder and uses.
  double tensor_edge(ir::TensorId t) const {
    const ir::OpId hop = flat_.holder_op[t];
    if (hop == ir::kNone || chosen_[hop] < 0) return 0.0;
    return tensor_redistribution(
        ctx_, flat_, t, strategies_[hop][static_cast<std::size_t>(chosen_[hop])],
        flat_.holder_slot[t],
        [&](ir::OpId u) -> const Strategy* {
          return chosen_[u] < 0 ? nullptr : &strategies_[u][static_cast<std::size_t>(chosen_[u])];
        },
        rows_);
  }

  void dfs(std::size_t pos, double own, double mem, double peak_work) {
    if (aborted_) return;
    if (++nodes_ > ctx_.opts.exhaustive_max_nodes) {
      aborted_ = true;
      return;
    }
    double edges = edge_sum_;
    if (own + edges + suffix_min_[pos] >= best_ * (1 - 1e-12)) return;
    if (pos == order_.size()) {
      plan::Plan p;
      p.mode = ctx_.opts.mode;
      p.mesh = ctx_.mesh;
      p.training = ctx_.training;
      p.training.microbatches = 1;  // the graph is the microbatch's
      p.cuts.resize(ctx_.g.num_operators());
      for (std::size_t o = 0; o < ctx_.g.num_operators(); ++o)
        p.cuts[o] = strategies_[o][static_cast<std::size_t>(chosen_[o])].cuts;
      if (ctx_.opts.mode == Mode::Infer &&
          plan::evaluate(ctx_.g, ctx_.spaces, ctx_.cluster, p, ctx_.opts.cost)
                  .summary.memory_per_device_bytes > ctx_.budget)
        return;
      best_ = own + edges;
      best_cuts_ = std::move(p.cuts);
      found_ = true;
      return;
    }
    const ir::OpId o = order_[pos];
    const std::span<const ir::TensorId> touched = flat_.touched_of(o);
    for (std::size_t i = 0; i < strategies_[o].size(); ++i) {
      const Strategy& st = strategies_[o][i];
      // Inference holds parameters plus the largest working set; both only
      // grow as operators are assigned, so they bound the subtree too.
      const double peak = std::max(peak_work, st.work);
      if (mem + st.mem + peak > ctx_.budget) continue;
      chosen_[o] = static_cast<int>(i);
      std::vector<double> old(touched.size());
      for (std::size_t x = 0; x < touched.size(); ++x) {
        old[x] = edge_[touched[x]];
        edge_[touched[x]] = tensor_edge(touched[x]);
        edge_sum_ += edge_[touched[x]] - old[x];
      }
      dfs(pos + 1, own + st.own, mem + st.mem, peak);
      for (std::size_t x = 0; x < touched.size(); ++x) {
        edge_sum_ += old[x] - edge_[touched[x]];
        edge_[touched[x]] = old[x];
      }
      chosen_[o] = -1;
      if (aborted_) return;
    }
  }

  const Context ctx_;
  FlatGraph flat_;  // holders, uses and touched tensors
  std::vector<std::vector<Strategy>> strategies_;
  std::vector<ir::OpId> order_;
  std::vector<double> suffix_min_;
  std::vector<int> chosen_;
  std::vector<double> edge_;
  mutable std::vector<UseRows> rows_;  // tensor_edge's scratch
  double edge_sum_ = 0;
  double best_ = std::numeric_limits<double>::infinity();
  std::vector<std::vector<std::int16_t>> best_cuts_;
  std::uint64_t nodes_ = 0;
  bool aborted_ = false;
  bool found_ = false;
};

}  // namespace

namespace {

// Bytes of the halo a cut of window loop c exchanges: rows of the first
// input that maps a dim to it (with a halo of any bytes), times the bytes of
// one row of its slice (divisors `div`, loop splits so far `splits`).
double halo_bytes(const ir::Graph& g, const ir::Operator& op, const algebra::OpSpace& s, int c,
                  const std::vector<std::int64_t>& div, const std::vector<std::int64_t>& splits) {
  const algebra::LoopDim& loop = s.loops[static_cast<std::size_t>(c)];
  for (std::size_t j = 0; j < op.inputs.size(); ++j)
    for (std::size_t d = 0; d < s.inputs[j].size(); ++d)
      if (s.inputs[j][d] == c) {
        const ir::Tensor& t = g.tensor(op.inputs[j]);
        const double extent = static_cast<double>(t.shape[d]) /
                              static_cast<double>(splits[static_cast<std::size_t>(c)]);
        const double halo =
            static_cast<double>(loop.halo) * t.bytes() / static_cast<double>(div[j]) / extent;
        if (halo != 0) return halo;
        break;
      }
  return 0.0;
}

// Adds to st.own the seconds of synchronising the gradient of input t (a
// slice of `slice` bytes replicated over `cut`); per microbatch, as every
// other cost: what runs once per step counts 1/m. A parameter's are also
// kept apart (OpStrategy::sync_once, sync_repeated) for overlap to hide.
void add_sync_seconds(const Context& ctx, const ir::Tensor& t, double slice, const Cut& cut,
                      OpStrategy& st) {
  const bool parameter = t.kind == ir::TensorKind::Parameter;
  const auto m = static_cast<double>(ctx.training.microbatches);
  const cost::GradientSync sync = cost::gradient_sync(
      slice, parameter, ctx.training.zero_stage, ctx.training.microbatches, cut, ctx.opts.cost);
  st.own += sync.total / m;
  if (!parameter) return;
  st.sync_once += sync.once / m;
  st.sync_repeated += sync.repeated / m;
}

// Adds to st.own the seconds of cutting loop c on mesh axis a: gradient
// all-reduces of replicated inputs that need one (training) and the halo
// exchange of a window loop. `st.layout` on axis a is in place.
void add_cut_seconds(const Context& ctx, const ir::Operator& op, const algebra::OpSpace& s,
                     std::size_t a, int c, const std::vector<std::int64_t>& div,
                     const std::vector<std::int64_t>& splits, OpStrategy& st) {
  const Cut& cut = ctx.mesh[a];
  const Mode mode = ctx.opts.mode;
  for (std::size_t j = 0; j < op.inputs.size(); ++j) {
    const ir::Tensor& t = ctx.g.tensor(op.inputs[j]);
    if (mode == Mode::Train && st.layout[j][a].kind == LayoutKind::Replicate &&
        ir::input_takes_gradient(ctx.g, ctx.rules.grads, op, j))
      add_sync_seconds(ctx, t, t.bytes() / static_cast<double>(div[j]), cut, st);
  }
  const algebra::LoopDim& loop = s.loops[static_cast<std::size_t>(c)];
  if (loop.role == algebra::DimRole::Window && loop.halo > 0) {
    const double halo = halo_bytes(ctx.g, op, s, c, div, splits);
    const double one = cost::collective_seconds(cost::Collective::Halo, halo, cut, ctx.opts.cost);
    st.own += mode == Mode::Train ? 2 * one : one;
  }
}

// Memory operator o accounts for: the tensors it holds (parameter state,
// ZeRO-sharded over the axes it cuts while replicating the parameter, and,
// in training, graph inputs at their first use and its outputs, as much of
// them as the backward pass keeps: Context::held_factor).
double held_memory(const Context& ctx, ir::OpId o, const std::vector<std::int64_t>& div,
                   const OpStrategy& st) {
  const ir::Graph& g = ctx.g;
  const ir::Operator& op = g.op(o);
  const Mode mode = ctx.opts.mode;
  const std::size_t nin = op.inputs.size();
  double mem = 0;
  for (std::size_t j = 0; j < nin; ++j) {
    const ir::TensorId id = op.inputs[j];
    const ir::Tensor& t = g.tensor(id);
    const bool holds = t.producer == ir::kNone && t.consumers.front() == o &&
                       std::find(op.inputs.begin(), op.inputs.end(), id) - op.inputs.begin() ==
                           static_cast<std::ptrdiff_t>(j);
    if (!holds) continue;
    const double slice = t.bytes() / static_cast<double>(div[j]);
    if (t.kind == ir::TensorKind::Parameter) {
      double ways = 1;
      for (std::size_t a = 0; a < ctx.mesh.size(); ++a)
        if (st.cuts[a] != plan::kReplicated && st.layout[j][a].kind == LayoutKind::Replicate)
          ways *= static_cast<double>(ctx.mesh[a].size);
      mem += slice * ctx.state(id).sharded(ctx.training.zero_stage, ways);
    } else if (t.kind == ir::TensorKind::Input && mode == Mode::Train) {
      mem += slice * ctx.held_factor[id];
    }
  }
  if (mode == Mode::Train)
    for (std::size_t j = 0; j < op.outputs.size(); ++j)
      mem += g.tensor(op.outputs[j]).bytes() / static_cast<double>(div[nin + j]) *
             ctx.held_factor[op.outputs[j]];
  return mem;
}

}  // namespace

OpStrategy make_strategy(const Context& ctx, ir::OpId o, const std::vector<std::int16_t>& cuts) {
  const ir::Graph& g = ctx.g;
  const std::vector<Cut>& mesh = ctx.mesh;
  const ir::Operator& op = g.op(o);
  const algebra::OpSpace& s = ctx.spaces[o];
  const Mode mode = ctx.opts.mode;
  const CostParams& p = ctx.opts.cost;
  const std::size_t nin = op.inputs.size(), nslots = nin + op.outputs.size();
  OpStrategy st;
  st.cuts = cuts;
  st.layout.assign(nslots, mesh.size(), AxisLayout{});
  st.divisor.assign(nslots, mesh.size(), 1);
  std::vector<std::int64_t> div(nslots, 1), splits(s.loops.size(), 1);
  auto tensor_of = [&](std::size_t slot) {
    return slot < nin ? op.inputs[slot] : op.outputs[slot - nin];
  };
  std::int64_t total_split = 1;
  for (std::size_t a = 0; a < mesh.size(); ++a) {
    const Cut& cut = mesh[a];
    const int c = cuts[a];
    for (std::size_t slot = 0; slot < nslots; ++slot) {
      const auto& dims = slot < nin ? s.inputs[slot] : s.outputs[slot - nin];
      st.layout[slot][a] = operand_layout(s, dims, slot >= nin, c);
      st.divisor[slot][a] = div[slot];
    }
    if (c != plan::kReplicated) add_cut_seconds(ctx, op, s, a, c, div, splits, st);
    // Partial outputs nobody consumes are reduced here.
    for (std::size_t j = 0; j < op.outputs.size(); ++j) {
      const ir::Tensor& t = g.tensor(op.outputs[j]);
      if (t.consumers.empty() && st.layout[nin + j][a].kind == LayoutKind::Partial)
        st.own += cost::collective_seconds(cost::Collective::AllReduce,
                                           t.bytes() / static_cast<double>(div[nin + j]), cut, p);
    }
    if (c != plan::kReplicated) {
      splits[static_cast<std::size_t>(c)] *= cut.size;
      total_split *= cut.size;
    }
    for (std::size_t slot = 0; slot < nslots; ++slot)
      if (st.layout[slot][a].kind == LayoutKind::Shard) div[slot] *= cut.size;
  }
  double touched = 0;
  for (std::size_t slot = 0; slot < nslots; ++slot) {
    const ir::Tensor& t = g.tensor(tensor_of(slot));
    const double slice = t.bytes() / static_cast<double>(div[slot]);
    touched += slice;
    if (mode == Mode::Infer && t.kind != ir::TensorKind::Parameter) st.work += slice;
  }
  const double flops = s.flops / static_cast<double>(total_split);
  const Precision prec = ctx.precision[o];
  const bool train = mode == Mode::Train;
  const cost::StepCompute c = cost::step_compute(flops, touched, ctx.cluster.device(), prec, p,
                                                 mode, train ? ctx.rules.backward_share[o] : 1.0,
                                                 train && ctx.rules.recomputed[o] != 0);
  st.compute = c.passes;
  st.own += st.compute;
  if (train && ctx.rules.recomputed[o] != 0) {
    st.own += c.recompute;
    st.compute += c.recompute;
  }
  st.mem = held_memory(ctx, o, div, st);
  return st;
}

ExhaustiveResult exhaustive(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                            const Cluster& cluster, const SearchOptions& opts, double budget,
                            plan::Plan& incumbent, bool have_incumbent) {
  const Context ctx(g, spaces, cluster, opts, budget);
  BranchAndBound bb(ctx);
  return bb.solve(incumbent, have_incumbent);
}

}  // namespace recsearch::search::detail
