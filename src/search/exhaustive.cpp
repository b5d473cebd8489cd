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

#include "recsearch/error.hpp"
#include "search/common.hpp"

namespace recsearch::search::detail {
namespace {

using cost::AxisLayout;
using cost::LayoutKind;

using Strategy = OpStrategy;

class BranchAndBound {
 public:
  BranchAndBound(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                 const Cluster& cluster, const SearchOptions& opts, double budget)
      : g_(g), spaces_(spaces), cluster_(cluster), opts_(opts), budget_(budget),
        mesh_(cluster.cuts()) {
    const auto pinned = pinned_cuts(g, spaces, mesh_);
    strategies_.resize(g.num_operators());
    for (std::size_t o = 0; o < g.num_operators(); ++o) {
      std::vector<std::int16_t> cuts;
      std::vector<std::int64_t> splits(spaces[o].loops.size(), 1);
      if (!pinned[o].empty())
        add_strategy(static_cast<ir::OpId>(o), pinned[o]);
      else
        enumerate(static_cast<ir::OpId>(o), 0, splits, cuts);
    }
    order_ = g.topological_order();
    holder_ = tensor_holders(g);
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
      best_ = plan::evaluate(g_, spaces_, cluster_, incumbent, opts_.cost).summary.step_time_s;
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
    for (std::size_t t = 0; t < g_.num_tensors(); ++t)
      total += tensor_edge(static_cast<ir::TensorId>(t));
    std::fill(chosen_.begin(), chosen_.end(), -1);
    return total;
  }

 private:
  void enumerate(ir::OpId o, std::size_t a, std::vector<std::int64_t>& splits,
                 std::vector<std::int16_t>& cuts) {
    if (a == mesh_.size()) {
      add_strategy(o, cuts);
      return;
    }
    std::vector<std::int16_t> choices;
    legal_choices(g_, o, spaces_[o], splits, mesh_[a].size, choices);
    for (auto c : choices) {
      cuts.push_back(c);
      if (c != plan::kReplicated) splits[static_cast<std::size_t>(c)] *= mesh_[a].size;
      enumerate(o, a + 1, splits, cuts);
      if (c != plan::kReplicated) splits[static_cast<std::size_t>(c)] /= mesh_[a].size;
      cuts.pop_back();
    }
  }

  void add_strategy(ir::OpId o, const std::vector<std::int16_t>& cuts) {
    strategies_[o].push_back(make_strategy(g_, spaces_, cluster_, opts_, o, cuts));
  }

  // Redistribution cost of tensor t among its assigned holder and uses.
  double tensor_edge(ir::TensorId t) const {
    const auto [hop, hslot] = holder_[t];
    if (hop == ir::kNone || chosen_[hop] < 0) return 0.0;
    return tensor_redistribution(
        g_, mesh_, opts_, t, g_.tensor(t).bytes(),
        strategies_[hop][static_cast<std::size_t>(chosen_[hop])], hslot,
        [&](ir::OpId u) -> const Strategy* {
          return chosen_[u] < 0 ? nullptr : &strategies_[u][static_cast<std::size_t>(chosen_[u])];
        },
        seen_);
  }

  void dfs(std::size_t pos, double own, double mem, double peak_work) {
    if (aborted_) return;
    if (++nodes_ > opts_.exhaustive_max_nodes) {
      aborted_ = true;
      return;
    }
    double edges = edge_sum_;
    if (own + edges + suffix_min_[pos] >= best_ * (1 - 1e-12)) return;
    if (pos == order_.size()) {
      plan::Plan p;
      p.mode = opts_.mode;
      p.mesh = mesh_;
      p.cuts.resize(g_.num_operators());
      for (std::size_t o = 0; o < g_.num_operators(); ++o)
        p.cuts[o] = strategies_[o][static_cast<std::size_t>(chosen_[o])].cuts;
      if (opts_.mode == Mode::Infer &&
          plan::evaluate(g_, spaces_, cluster_, p, opts_.cost).summary.memory_per_device_bytes >
              budget_)
        return;
      best_ = own + edges;
      best_cuts_ = std::move(p.cuts);
      found_ = true;
      return;
    }
    const ir::OpId o = order_[pos];
    const std::vector<ir::TensorId> touched = touched_tensors(g_, o);
    for (std::size_t i = 0; i < strategies_[o].size(); ++i) {
      const Strategy& st = strategies_[o][i];
      // Inference holds parameters plus the largest working set; both only
      // grow as operators are assigned, so they bound the subtree too.
      const double peak = std::max(peak_work, st.work);
      if (mem + st.mem + peak > budget_) continue;
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

  const ir::Graph& g_;
  const std::vector<algebra::OpSpace>& spaces_;
  const Cluster& cluster_;
  const SearchOptions& opts_;
  double budget_;
  const std::vector<Cut>& mesh_;
  std::vector<std::vector<Strategy>> strategies_;
  std::vector<ir::OpId> order_;
  std::vector<std::pair<ir::OpId, std::size_t>> holder_;
  std::vector<double> suffix_min_;
  std::vector<int> chosen_;
  std::vector<double> edge_;
  mutable std::vector<std::pair<AxisLayout, std::int64_t>> seen_;  // tensor_edge's scratch
  double edge_sum_ = 0;
  double best_ = std::numeric_limits<double>::infinity();
  std::vector<std::vector<std::int16_t>> best_cuts_;
  std::uint64_t nodes_ = 0;
  bool aborted_ = false;
  bool found_ = false;
};

}  // namespace

std::vector<std::pair<ir::OpId, std::size_t>> tensor_holders(const ir::Graph& g) {
  const std::size_t nt = g.num_tensors();
  std::vector<std::pair<ir::OpId, std::size_t>> holder(nt, {ir::kNone, 0});
  for (std::size_t t = 0; t < nt; ++t) {
    const ir::Tensor& tensor = g.tensor(static_cast<ir::TensorId>(t));
    if (tensor.producer != ir::kNone) {
      const auto& outs = g.op(tensor.producer).outputs;
      holder[t] = {tensor.producer,
                   g.op(tensor.producer).inputs.size() +
                       static_cast<std::size_t>(std::find(outs.begin(), outs.end(), t) - outs.begin())};
    } else if (!tensor.consumers.empty()) {
      const auto& ins = g.op(tensor.consumers.front()).inputs;
      holder[t] = {tensor.consumers.front(),
                   static_cast<std::size_t>(std::find(ins.begin(), ins.end(), t) - ins.begin())};
    }
  }
  return holder;
}

OpStrategy make_strategy(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                         const Cluster& cluster, const SearchOptions& opts, ir::OpId o,
                         const std::vector<std::int16_t>& cuts) {
  const std::vector<Cut>& mesh = cluster.cuts();
  const ir::Operator& op = g.op(o);
  const algebra::OpSpace& s = spaces[o];
  const Mode mode = opts.mode;
  const CostParams& p = opts.cost;
  const std::size_t nin = op.inputs.size(), nslots = nin + op.outputs.size();
  OpStrategy st;
  st.cuts = cuts;
  st.layout.assign(nslots, std::vector<AxisLayout>(mesh.size()));
  st.divisor.assign(nslots, std::vector<std::int64_t>(mesh.size(), 1));
  std::vector<std::int64_t> div(nslots, 1), splits(s.loops.size(), 1);
  auto tensor_of = [&](std::size_t slot) {
    return slot < nin ? op.inputs[slot] : op.outputs[slot - nin];
  };
  auto dims_of = [&](std::size_t slot) -> const std::vector<int>& {
    return slot < nin ? s.inputs[slot] : s.outputs[slot - nin];
  };
  std::int64_t total_split = 1;
  for (std::size_t a = 0; a < mesh.size(); ++a) {
    const Cut& cut = mesh[a];
    const int c = cuts[a];
    for (std::size_t slot = 0; slot < nslots; ++slot) {
      st.layout[slot][a] = operand_layout(s, dims_of(slot), slot >= nin, c);
      st.divisor[slot][a] = div[slot];
    }
    if (c != plan::kReplicated) {
      for (std::size_t j = 0; j < nin; ++j) {
        const ir::Tensor& t = g.tensor(op.inputs[j]);
        if (mode == Mode::Train && t.requires_grad() &&
            st.layout[j][a].kind == LayoutKind::Replicate)
          st.own += cost::gradient_seconds(t.bytes() / static_cast<double>(div[j]),
                                           t.kind == ir::TensorKind::Parameter, cut, p);
      }
      const algebra::LoopDim& loop = s.loops[static_cast<std::size_t>(c)];
      if (loop.role == algebra::DimRole::Window && loop.halo > 0) {
        double halo = 0;
        for (std::size_t j = 0; j < nin && halo == 0; ++j)
          for (std::size_t d = 0; d < s.inputs[j].size(); ++d)
            if (s.inputs[j][d] == c) {
              const ir::Tensor& t = g.tensor(op.inputs[j]);
              const double extent = static_cast<double>(t.shape[d]) /
                                    static_cast<double>(splits[static_cast<std::size_t>(c)]);
              halo = static_cast<double>(loop.halo) * t.bytes() /
                     static_cast<double>(div[j]) / extent;
              break;
            }
        const double one = cost::collective_seconds(cost::Collective::Halo, halo, cut, p);
        st.own += mode == Mode::Train ? 2 * one : one;
      }
    }
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
  st.own += cost::compute_seconds(s.flops / static_cast<double>(total_split), touched,
                                  cluster.device(), p, mode);
  // Memory this operator accounts for: tensors it holds.
  const double psf = cost::parameter_state_factor(p, mode);
  for (std::size_t j = 0; j < nin; ++j) {
    const ir::Tensor& t = g.tensor(op.inputs[j]);
    const bool holds = t.producer == ir::kNone && t.consumers.front() == o &&
                       std::find(op.inputs.begin(), op.inputs.end(), op.inputs[j]) -
                               op.inputs.begin() == static_cast<std::ptrdiff_t>(j);
    if (!holds) continue;
    const double slice = t.bytes() / static_cast<double>(div[j]);
    if (t.kind == ir::TensorKind::Parameter) st.mem += slice * psf;
    else if (t.kind == ir::TensorKind::Input && mode == Mode::Train) st.mem += slice;
  }
  if (mode == Mode::Train)
    for (std::size_t j = 0; j < op.outputs.size(); ++j)
      st.mem += g.tensor(op.outputs[j]).bytes() / static_cast<double>(div[nin + j]);
  return st;
}


ExhaustiveResult exhaustive(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                            const Cluster& cluster, const SearchOptions& opts, double budget,
                            plan::Plan& incumbent, bool have_incumbent) {
  BranchAndBound bb(g, spaces, cluster, opts, budget);
  return bb.solve(incumbent, have_incumbent);
}

}  // namespace recsearch::search::detail
