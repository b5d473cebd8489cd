// SPDX-License-Identifier: Apache-2.0
// Layout arithmetic of the execution layer (exec/layout.hpp): local blocks,
// the per-axis step sequence of a redistribution, and the bytes a forward
// pass sends, predicted from the plan without running anything; what a
// training step with recomputation drops and sends again (exec/recompute.hpp).
#include "recsearch/exec/layout.hpp"

#include <algorithm>
#include <map>
#include <span>
#include <string>
#include <utility>

#include "exec/halo.hpp"
#include "recsearch/error.hpp"
#include "recsearch/exec/recompute.hpp"
#include "recsearch/ir/gradients.hpp"
#include "recsearch/plan/evaluator.hpp"

namespace recsearch::exec {
namespace {

using cost::AxisLayout;
using cost::LayoutKind;

// Axes splitting dim d, in increasing order.
std::vector<std::uint32_t> dim_axes(const Layout& l, int d) {
  std::vector<std::uint32_t> out;
  for (std::uint32_t a = 0; a < l.size(); ++a) {
    if (l[a].kind == LayoutKind::Shard && l[a].dim == d) out.push_back(a);
  }
  return out;
}

int max_dim(const Layout& l) {
  int m = -1;
  for (const auto& x : l) m = std::max(m, static_cast<int>(x.dim));
  return m;
}

std::vector<RedistStep> plan_steps(const Layout& from, const Layout& to, std::size_t rank,
                                   const ir::Shape* full, const std::vector<std::int64_t>* mesh);

}  // namespace

std::vector<std::int64_t> mesh_sizes(const plan::Plan& p) {
  std::vector<std::int64_t> m;
  m.reserve(p.mesh.size());
  for (const auto& c : p.mesh) m.push_back(c.size);
  return m;
}

std::vector<std::int64_t> rank_coords(std::int64_t rank, const std::vector<std::int64_t>& mesh) {
  std::vector<std::int64_t> c(mesh.size(), 0);
  for (std::size_t a = mesh.size(); a-- > 0;) {
    c[a] = rank % mesh[a];
    rank /= mesh[a];
  }
  return c;
}

ir::Shape local_shape(const ir::Shape& full, const Layout& l,
                      const std::vector<std::int64_t>& mesh) {
  ir::Shape s = full;
  for (std::size_t a = 0; a < l.size(); ++a) {
    if (l[a].kind != LayoutKind::Shard) continue;
    const auto d = static_cast<std::size_t>(l[a].dim);
    if (d >= s.size() || s[d] % mesh[a] != 0) {
      throw Error(Errc::kInternal, "layout " + layout_to_string(l) + " does not divide shape " +
                                       ir::shape_to_string(full));
    }
    s[d] /= mesh[a];
  }
  return s;
}

std::vector<std::int64_t> local_offsets(const ir::Shape& full, const Layout& l,
                                        const std::vector<std::int64_t>& mesh,
                                        const std::vector<std::int64_t>& coords) {
  const ir::Shape loc = local_shape(full, l, mesh);
  std::vector<std::int64_t> off(full.size(), 0);
  for (std::size_t d = 0; d < full.size(); ++d) {
    std::int64_t block = 0;
    for (const std::uint32_t a : dim_axes(l, static_cast<int>(d)))
      block = block * mesh[a] + coords[a];
    off[d] = block * loc[d];
  }
  return off;
}

std::string layout_to_string(const Layout& l) {
  std::string s = "[";
  for (std::size_t a = 0; a < l.size(); ++a) {
    if (a > 0) s += ", ";
    switch (l[a].kind) {
      case LayoutKind::Replicate: s += "R"; break;
      case LayoutKind::Partial: s += "P"; break;
      case LayoutKind::Shard: s += "S" + std::to_string(l[a].dim); break;
    }
  }
  return s + "]";
}

std::vector<std::uint32_t> zero_scatter_axes(const Layout& from, const Layout& to) {
  std::vector<std::uint32_t> axes;
  int dim = -1;
  for (std::uint32_t a = 0; a < from.size() && a < to.size(); ++a) {
    if (from[a] == to[a]) continue;
    if (from[a].kind != LayoutKind::Partial || to[a].kind != LayoutKind::Shard ||
        (dim >= 0 && to[a].dim != dim))
      return {};
    dim = to[a].dim;
    axes.push_back(a);
  }
  // The dim must be split by these axes alone, in this order.
  if (from.size() != to.size() || axes.size() < 2 || dim_axes(to, dim) != axes) return {};
  return axes;
}

std::vector<RedistStep> redistribution_plan(const Layout& from, const Layout& to,
                                            std::size_t rank) {
  return plan_steps(from, to, rank, nullptr, nullptr);
}

std::vector<RedistStep> redistribution_plan(const Layout& from, const Layout& to,
                                            const ir::Shape& full,
                                            const std::vector<std::int64_t>& mesh) {
  return plan_steps(from, to, full.size(), &full, &mesh);
}

namespace {

// The step sequence of one redistribution (see exec/layout.hpp), built axis
// by axis while tracking, per dim, which axes split it so far.
class StepPlanner {
 public:
  StepPlanner(const Layout& from, const Layout& to, std::size_t rank, const ir::Shape* full,
              const std::vector<std::int64_t>* mesh)
      : from_(from), to_(to), full_(full), mesh_(mesh), n_(from.size()), state_(from) {
    if (from.size() != to.size()) throw Error(Errc::kInternal, "layouts over different meshes");
    dims_ = std::max({max_dim(from), max_dim(to), static_cast<int>(rank) - 1}) + 1;
    // Per dim, the current axis list and the target one.
    cur_.resize(static_cast<std::size_t>(dims_));
    tgt_.resize(static_cast<std::size_t>(dims_));
    for (int d = 0; d < dims_; ++d) {
      cur_[static_cast<std::size_t>(d)] = dim_axes(from, d);
      tgt_[static_cast<std::size_t>(d)] = dim_axes(to, d);
    }
    // An axis keeps its place in a dim when everything before it agrees too.
    kept_.assign(n_, false);
    for (int d = 0; d < dims_; ++d) {
      const auto& c = cur_[static_cast<std::size_t>(d)];
      const auto& t = tgt_[static_cast<std::size_t>(d)];
      for (std::size_t i = 0; i < c.size() && i < t.size() && c[i] == t[i]; ++i) kept_[c[i]] = true;
    }
  }

  std::vector<RedistStep> run() {
    for (std::uint32_t a = static_cast<std::uint32_t>(n_); a-- > 0;) {
      const AxisLayout f = state_[a];
      if (to_[a].kind == LayoutKind::Partial) {
        throw Error(Errc::kInternal, "cannot redistribute to partial");
      }
      if (f.kind == LayoutKind::Shard) {
        leave_shard(a);
      } else if (f.kind == LayoutKind::Partial) {
        leave_partial(a);
      }
    }
    // Last scattered first: each is then the last axis of its dim.
    for (auto it = regather_.rbegin(); it != regather_.rend(); ++it) {
      const auto [a, d] = *it;
      remove_last(d, a);
      steps_.push_back({StepKind::AllGather, a, static_cast<std::int16_t>(d), -1});
      state_[a] = AxisLayout::replicate();
    }
    for (std::uint32_t a = 0; a < n_; ++a) slice_into_place(a);
    return std::move(steps_);
  }

 private:
  // Whether axis a can join dim j now: it must become the dim's least
  // significant axis and stay on the way to the target list.
  [[nodiscard]] bool appendable(std::uint32_t a, int j) const {
    const auto& c = cur_[static_cast<std::size_t>(j)];
    const auto& t = tgt_[static_cast<std::size_t>(j)];
    if (c.size() >= t.size() || t[c.size()] != a) return false;
    return std::equal(c.begin(), c.end(), t.begin());
  }

  void remove_last(int d, std::uint32_t a) {
    auto& c = cur_[static_cast<std::size_t>(d)];
    if (c.empty() || c.back() != a) throw Error(Errc::kInternal, "redistribution order broken");
    c.pop_back();
  }

  // Axis a shards a dim it must leave: to its target dim (all-to-all) when it
  // can join it now, else gathered.
  void leave_shard(std::uint32_t a) {
    const AxisLayout f = state_[a];
    const AxisLayout t = to_[a];
    if (kept_[a]) return;
    remove_last(f.dim, a);
    if (t.kind == LayoutKind::Shard && t.dim != f.dim && appendable(a, t.dim)) {
      steps_.push_back({StepKind::AllToAll, a, f.dim, t.dim});
      cur_[static_cast<std::size_t>(t.dim)].push_back(a);
      state_[a] = t;
    } else {
      steps_.push_back({StepKind::AllGather, a, f.dim, -1});
      state_[a] = AxisLayout::replicate();
    }
  }

  // Axis a holds a partial sum: reduce-scatter into its target dim,
  // hierarchically through a temporary dim (temp_dim), or all-reduce.
  void leave_partial(std::uint32_t a) {
    const AxisLayout t = to_[a];
    int temp = -1;
    if (t.kind == LayoutKind::Replicate && full_ != nullptr) temp = temp_dim(a);
    if (t.kind == LayoutKind::Shard && appendable(a, t.dim)) {
      steps_.push_back({StepKind::ReduceScatter, a, -1, t.dim});
      cur_[static_cast<std::size_t>(t.dim)].push_back(a);
      state_[a] = t;
    } else if (temp >= 0) {
      // Reduce-scatter now, all-gather once the outer partial axes are
      // summed on the smaller piece (a hierarchical all-reduce).
      steps_.push_back({StepKind::ReduceScatter, a, -1, static_cast<std::int16_t>(temp)});
      cur_[static_cast<std::size_t>(temp)].push_back(a);
      state_[a] = AxisLayout::shard(temp);
      regather_.push_back({a, temp});
    } else {
      steps_.push_back({StepKind::AllReduce, a, -1, -1});
      state_[a] = AxisLayout::replicate();
    }
  }

  // A partial axis going to replicated, while outer axes are all-reduced
  // too (and nothing else changes on them), is summed hierarchically:
  // reduce-scatter into a dim whose axes all stay, all-reduce the outer
  // axes on the piece, all-gather back. Per axis this sends what the cost
  // model counts (a collective spread over the devices below its cut).
  // Returns that dim, or -1.
  [[nodiscard]] int temp_dim(std::uint32_t a) const {
    bool outer_partial = false;
    for (std::uint32_t b = 0; b < a; ++b) {
      if (state_[b] == to_[b]) continue;
      if (state_[b].kind != LayoutKind::Partial || to_[b].kind != LayoutKind::Replicate) return -1;
      outer_partial = true;
    }
    if (!outer_partial) return -1;
    // Axes that stay, or earlier temporary ones (gathered back in reverse).
    const auto ok = [&](std::uint32_t x) {
      return (kept_[x] && x < a) || std::any_of(regather_.begin(), regather_.end(),
                                                [&](const auto& r) { return r.first == x; });
    };
    for (int d = 0; d < dims_; ++d) {
      const auto& c = cur_[static_cast<std::size_t>(d)];
      if (!std::all_of(c.begin(), c.end(), ok)) continue;
      std::int64_t extent = (*full_)[static_cast<std::size_t>(d)];
      for (const std::uint32_t x : c) extent /= (*mesh_)[x];
      if (extent % (*mesh_)[a] == 0) return d;
    }
    return -1;
  }

  // After the gathers, every axis still differing from its target is
  // replicated and starts splitting its dim: a local slice.
  void slice_into_place(std::uint32_t a) {
    if (state_[a] == to_[a]) return;
    if (state_[a].kind != LayoutKind::Replicate || to_[a].kind != LayoutKind::Shard ||
        !appendable(a, to_[a].dim)) {
      throw Error(Errc::kInternal, "redistribution from " + layout_to_string(from_) + " to " +
                                       layout_to_string(to_) + " stuck on axis " +
                                       std::to_string(a));
    }
    steps_.push_back({StepKind::Slice, a, -1, to_[a].dim});
    cur_[static_cast<std::size_t>(to_[a].dim)].push_back(a);
    state_[a] = to_[a];
  }

  const Layout& from_;
  const Layout& to_;
  const ir::Shape* full_;
  const std::vector<std::int64_t>* mesh_;
  std::size_t n_;
  int dims_ = 0;
  std::vector<std::vector<std::uint32_t>> cur_;
  std::vector<std::vector<std::uint32_t>> tgt_;
  std::vector<bool> kept_;
  Layout state_;
  std::vector<RedistStep> steps_;
  std::vector<std::pair<std::uint32_t, int>> regather_;
};

std::vector<RedistStep> plan_steps(const Layout& from, const Layout& to, std::size_t rank,
                                   const ir::Shape* full, const std::vector<std::int64_t>* mesh) {
  return StepPlanner(from, to, rank, full, mesh).run();
}

}  // namespace

PlanLayouts plan_layouts(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                         const plan::Plan& p) {
  PlanLayouts pl;
  pl.mesh = mesh_sizes(p);
  pl.train = p.mode == Mode::Train;
  const std::size_t n_axes = p.mesh.size();
  if (p.cuts.size() != g.num_operators() || spaces.size() != g.num_operators()) {
    throw Error(Errc::kPlan,
                "plan has " + std::to_string(p.cuts.size()) + " operators but the graph has " +
                    std::to_string(g.num_operators()),
                "/operators");
  }
  pl.ops.resize(g.num_operators());
  for (ir::OpId o = 0; o < g.num_operators(); ++o) {
    const auto& op = g.op(o);
    const auto& s = spaces[o];
    OpLayouts& ol = pl.ops[o];
    ol.inputs.assign(op.inputs.size(), Layout(n_axes));
    ol.outputs.assign(op.outputs.size(), Layout(n_axes));
    if (p.cuts[o].size() != n_axes) {
      throw Error(Errc::kPlan, "cuts do not match the mesh's " + std::to_string(n_axes) + " axes",
                  "/operators/" + std::to_string(o) + "/cuts");
    }
    for (std::size_t a = 0; a < n_axes; ++a) {
      const int c = p.cuts[o][a];
      // A strided shard (algebra::StridedDim) holds rows no local slice or
      // collective here produces: refuse (exit 2) rather than run wrong rows.
      if (c >= 0 && s.cuts_inner_factor(c)) {
        throw Error(Errc::kUsage,
                    "exec does not run strided shards yet: operator '" + op.name +
                        "' cuts the inner factor of a merged dim (a merge region, "
                        "docs/design.md); search with that loop disallowed to execute the plan",
                    "/operators/" + std::to_string(o) + "/cuts");
      }
      for (std::size_t j = 0; j < op.inputs.size(); ++j) {
        ol.inputs[j][a] = plan::wanted_layout(
            s, c, j < s.inputs.size() ? s.inputs[j] : std::span<const int>{}, false);
      }
      for (std::size_t j = 0; j < op.outputs.size(); ++j) {
        ol.outputs[j][a] = plan::wanted_layout(
            s, c, j < s.outputs.size() ? s.outputs[j] : std::span<const int>{}, true);
      }
    }
  }
  pl.holders.assign(g.num_tensors(), Layout(n_axes));
  std::vector<bool> held(g.num_tensors(), false);
  for (ir::OpId o = 0; o < g.num_operators(); ++o) {
    const auto& op = g.op(o);
    for (std::size_t j = 0; j < op.outputs.size(); ++j) {
      pl.holders[op.outputs[j]] = pl.ops[o].outputs[j];
      held[op.outputs[j]] = true;
    }
  }
  for (ir::OpId o = 0; o < g.num_operators(); ++o) {
    const auto& op = g.op(o);
    for (std::size_t j = 0; j < op.inputs.size(); ++j) {
      if (held[op.inputs[j]]) continue;
      pl.holders[op.inputs[j]] = pl.ops[o].inputs[j];
      held[op.inputs[j]] = true;
    }
  }
  return pl;
}

namespace {

// Adds what moving tensor t from layout `from` to `to` sends per rank.
void charge(BytePrediction& out, const PlanLayouts& pl, double element_bytes, const ir::Tensor& t,
            const Layout& from, const Layout& to) {
  Layout state = from;
  for (const RedistStep& st : redistribution_plan(from, to, t.shape, pl.mesh)) {
    const double n = ir::num_elements(local_shape(t.shape, state, pl.mesh));
    const double k = static_cast<double>(pl.mesh[st.axis]);
    double sent = 0;
    switch (st.kind) {
      case StepKind::AllGather:
        sent = (k - 1) * n;
        state[st.axis] = AxisLayout::replicate();
        break;
      case StepKind::AllToAll:
        sent = (k - 1) / k * n;
        state[st.axis] = AxisLayout::shard(st.to_dim);
        break;
      case StepKind::AllReduce:
        sent = 2 * (k - 1) / k * n;
        state[st.axis] = AxisLayout::replicate();
        break;
      case StepKind::ReduceScatter:
        sent = (k - 1) / k * n;
        state[st.axis] = AxisLayout::shard(st.to_dim);
        break;
      case StepKind::Slice: state[st.axis] = AxisLayout::shard(st.to_dim); break;
    }
    out.per_axis[st.axis] += sent * element_bytes;
    out.total += sent * element_bytes;
  }
}

// A vocabulary-parallel loss (SoftmaxCrossEntropy with its class dim
// cut) exchanges per row, on each such axis, its slice's log-sum-exp
// (all-gather) and the label's logit (all-reduce).
void charge_vocab_loss(BytePrediction& out, const ir::Graph& g, const PlanLayouts& pl, ir::OpId o,
                       double element_bytes) {
  const ir::Operator& op = g.op(o);
  const Layout& logits = pl.ops[o].inputs[0];
  const ir::Shape& shape = g.tensor(op.inputs[0]).shape;
  const ir::Shape local = local_shape(shape, logits, pl.mesh);
  double rows = 1;
  for (std::size_t d = 0; d + 1 < local.size(); ++d) rows *= static_cast<double>(local[d]);
  for (std::size_t a = 0; a < logits.size(); ++a) {
    if (logits[a].kind != LayoutKind::Shard || logits[a].dim != static_cast<int>(shape.size()) - 1)
      continue;
    const double k = static_cast<double>(pl.mesh[a]);
    const double sent = ((k - 1) * rows + 2 * (k - 1) / k * rows) * element_bytes;
    out.per_axis[a] += sent;
    out.total += sent;
  }
}

// A BatchNorm with batch statistics all-reduces its block's per-channel sum
// and sum of squares (one buffer of 2·C) over each axis that cuts its batch
// or spatial dims.
void charge_batch_norm(BytePrediction& out, const ir::Graph& g, const PlanLayouts& pl, ir::OpId o,
                       double element_bytes) {
  const ir::Operator& op = g.op(o);
  const Layout& x = pl.ops[o].inputs[0];
  const double n =
      2.0 * static_cast<double>(local_shape(g.tensor(op.inputs[0]).shape, x, pl.mesh).at(1));
  for (const std::uint32_t a : detail::batch_norm_stat_axes(x)) {
    const double k = static_cast<double>(pl.mesh[a]);
    const double sent = 2 * (k - 1) / k * n * element_bytes;
    out.per_axis[a] += sent;
    out.total += sent;
  }
}

// Each distinct layout of tensor t is made once from its holder; a graph
// output left partial is summed for the user.
void charge_tensor(BytePrediction& out, const ir::Graph& g, const PlanLayouts& pl, ir::TensorId t,
                   double element_bytes) {
  const ir::Tensor& tensor = g.tensor(t);
  std::vector<Layout> done{pl.holders[t]};
  std::vector<ir::OpId> users = tensor.consumers;
  users.erase(std::unique(users.begin(), users.end()), users.end());
  for (const ir::OpId o : users) {
    const auto& op = g.op(o);
    for (std::size_t j = 0; j < op.inputs.size(); ++j) {
      if (op.inputs[j] != t) continue;
      const Layout& want = pl.ops[o].inputs[j];
      if (std::find(done.begin(), done.end(), want) != done.end()) continue;
      charge(out, pl, element_bytes, tensor, pl.holders[t], want);
      done.push_back(want);
    }
  }
  if (tensor.producer == ir::kNone || !tensor.consumers.empty()) return;
  Layout whole = pl.holders[t];
  bool partial = false;
  for (auto& x : whole) {
    if (x.kind == LayoutKind::Partial) {
      x = AxisLayout::replicate();
      partial = true;
    }
  }
  if (partial) charge(out, pl, element_bytes, tensor, pl.holders[t], whole);
}

// A ZeRO-3 gradient's reduce-scatter over several axes, one axis after the
// other from the outermost (Redistributor::scatter_partial): what a rank
// sends on each is (k-1)/k of its block there.
void charge_zero_scatter(BytePrediction& out, const PlanLayouts& pl, double element_bytes,
                         const ir::Tensor& t, const Layout& from, const Layout& to) {
  Layout state = from;
  for (const std::uint32_t a : zero_scatter_axes(from, to)) {
    const double n = ir::num_elements(local_shape(t.shape, state, pl.mesh));
    const double k = static_cast<double>(pl.mesh[a]);
    out.per_axis[a] += (k - 1) / k * n * element_bytes;
    out.total += (k - 1) / k * n * element_bytes;
    state[a] = to[a];
  }
}

// The gradient of a tensor in layout l is taken in l's dual: partial -> replicated.
Layout dual(Layout l) {
  for (auto& x : l) {
    if (x.kind == LayoutKind::Partial) x = AxisLayout::replicate();
  }
  return l;
}

// Operator o is cut on axis a when one of its outputs is not replicated there
// (a cut parallel loop reaches every output, a cut reduction leaves it partial).
bool cut_on(const PlanLayouts& pl, ir::OpId o, std::size_t a) {
  for (const Layout& l : pl.ops[o].outputs) {
    if (l[a].kind != LayoutKind::Replicate) return true;
  }
  return false;
}

// The distinct layouts of a tensor's gradient contributions, in the order
// the executor's reverse pass meets them.
std::vector<Layout> contribution_layouts(const ir::Graph& g, const GradientLayouts& gl,
                                         ir::TensorId t) {
  std::vector<Layout> out;
  const std::vector<ir::OpId> order = g.topological_order();
  for (auto it = order.rbegin(); it != order.rend(); ++it) {
    const ir::Operator& op = g.op(*it);
    for (std::size_t j = 0; j < op.inputs.size(); ++j) {
      const std::optional<Layout>& l = gl.input[*it][j];
      if (op.inputs[j] != t || !l) continue;
      if (std::find(out.begin(), out.end(), *l) == out.end()) out.push_back(*l);
    }
  }
  return out;
}

}  // namespace

namespace {

// The ZeRO shard of parameter t's gradient (see GradientLayouts), or its
// holder layout when it has no data-parallel axis or no dim to shard.
// Stages 1 and 2 shard over the innermost data-parallel axis: the partial
// sums over the outer ones are then reduced on the shard (reduce-scatter
// inside, all-reduce of the piece outside), the hierarchical reduction's
// bytes without its gather. Stage 3 (`all_axes`) shards over every one, as
// the cost model's zero_axes do: the weights a rank keeps, and the
// all-gathers of each pass, are then the model's.
Layout zero_shard(const ir::Graph& g, const PlanLayouts& pl, ir::TensorId t, bool all_axes) {
  const Layout& holder = pl.holders[t];
  const ir::Tensor& tensor = g.tensor(t);
  ir::OpId first = ir::kNone;
  for (const ir::OpId o : tensor.consumers) first = std::min(first, o);
  std::vector<std::size_t> dp;
  for (std::size_t a = 0; first != ir::kNone && a < holder.size(); ++a) {
    if (holder[a].kind == LayoutKind::Replicate && cut_on(pl, first, a)) dp.push_back(a);
  }
  if (dp.empty()) return holder;
  if (!all_axes) dp.erase(dp.begin(), dp.end() - 1);
  std::int64_t ways = 1;
  for (const std::size_t a : dp) ways *= pl.mesh[a];
  for (std::size_t d = 0; d < tensor.shape.size(); ++d) {
    const bool split = std::any_of(holder.begin(), holder.end(), [&](const AxisLayout& x) {
      return x.kind == LayoutKind::Shard && x.dim == static_cast<int>(d);
    });
    if (split || tensor.shape[d] % ways != 0) continue;
    Layout shard = holder;
    for (const std::size_t a : dp) shard[a] = AxisLayout::shard(static_cast<int>(d));
    return shard;
  }
  return holder;
}

}  // namespace

GradientLayouts gradient_layouts(const ir::Graph& g, const PlanLayouts& pl, int zero_stage,
                                 const std::vector<ir::TensorId>& grad_inputs) {
  return gradient_layouts(g, pl, std::vector<int>(g.num_tensors(), zero_stage), grad_inputs);
}

GradientLayouts gradient_layouts(const ir::Graph& g, const PlanLayouts& pl,
                                 const std::vector<int>& zero,
                                 const std::vector<ir::TensorId>& grad_inputs) {
  if (zero.size() != g.num_tensors())
    throw Error(Errc::kInternal, "gradient_layouts: one ZeRO stage per tensor");
  GradientLayouts gl;
  gl.needs_grad = ir::gradient_tensors(g, grad_inputs);
  gl.target.resize(g.num_tensors());
  for (ir::TensorId t = 0; t < g.num_tensors(); ++t) {
    const ir::Tensor& tensor = g.tensor(t);
    if (tensor.producer != ir::kNone) {
      gl.target[t] = dual(pl.holders[t]);
    } else if (zero[t] > 0 && gl.needs_grad[t] && tensor.kind == ir::TensorKind::Parameter) {
      gl.target[t] = zero_shard(g, pl, t, zero[t] >= 3);
    } else {
      gl.target[t] = pl.holders[t];
    }
  }
  gl.input.resize(g.num_operators());
  for (ir::OpId o = 0; o < g.num_operators(); ++o) {
    const ir::Operator& op = g.op(o);
    gl.input[o].resize(op.inputs.size());
    bool out_grad = false;
    for (const ir::TensorId out : op.outputs) out_grad = out_grad || gl.needs_grad[out];
    if (!out_grad) continue;
    for (std::size_t j = 0; j < op.inputs.size(); ++j) {
      if (!ir::input_takes_gradient(g, gl.needs_grad, op, j)) continue;
      Layout l = pl.ops[o].inputs[j];
      for (std::size_t a = 0; a < l.size(); ++a) {
        if (l[a].kind == LayoutKind::Replicate && cut_on(pl, o, a)) l[a] = AxisLayout::partial();
      }
      gl.input[o][j] = std::move(l);
    }
  }
  return gl;
}

TrainBytePrediction predict_train_bytes(const ir::Graph& g, const PlanLayouts& pl, int zero_stage,
                                        double element_bytes,
                                        const std::vector<ir::TensorId>& grad_inputs) {
  return predict_train_bytes(g, pl, std::vector<int>(g.num_tensors(), zero_stage), element_bytes,
                             grad_inputs);
}

TrainBytePrediction predict_train_bytes(const ir::Graph& g, const PlanLayouts& pl,
                                        const std::vector<int>& zero, double element_bytes,
                                        const std::vector<ir::TensorId>& grad_inputs) {
  TrainBytePrediction out;
  out.backward.per_axis.assign(pl.mesh.size(), 0.0);
  out.gradient_sync.per_axis.assign(pl.mesh.size(), 0.0);
  const GradientLayouts gl = gradient_layouts(g, pl, zero, grad_inputs);
  for (ir::TensorId t = 0; t < g.num_tensors(); ++t) {
    if (!gl.needs_grad[t]) continue;
    const ir::Tensor& tensor = g.tensor(t);
    BytePrediction& into =
        tensor.kind == ir::TensorKind::Parameter ? out.gradient_sync : out.backward;
    const std::vector<Layout> from = contribution_layouts(g, gl, t);
    for (const Layout& l : from) {
      if (l == gl.target[t]) continue;
      if (zero[t] >= 3 && !zero_scatter_axes(l, gl.target[t]).empty()) {
        charge_zero_scatter(into, pl, element_bytes, tensor, l, gl.target[t]);
      } else {
        charge(into, pl, element_bytes, tensor, l, gl.target[t]);
      }
    }
    // ZeRO 1 and 2: the updated shard is gathered back into the holder's
    // layout (ZeRO 3 keeps the shard: its gathers are the passes').
    if (tensor.producer == ir::kNone && !from.empty() && gl.target[t] != pl.holders[t] &&
        zero[t] < 3)
      charge(into, pl, element_bytes, tensor, gl.target[t], pl.holders[t]);
  }
  // SyncBatchNorm's backward: Σdy and Σdy·x̂ per channel, all-reduced as the
  // forward's sums were, where x gets a gradient.
  for (ir::OpId o = 0; o < g.num_operators(); ++o) {
    const ir::Operator& op = g.op(o);
    if (op.kind == ir::OpKind::BatchNorm && !gl.input[o].empty() && gl.input[o][0] &&
        detail::batch_norm_batch_stats(op, pl.train))
      charge_batch_norm(out.backward, g, pl, o, element_bytes);
  }
  return out;
}

std::vector<std::uint8_t> zero3_sharded(const ir::Graph& g, const PlanLayouts& pl,
                                        const GradientLayouts& gl, const std::vector<int>& zero) {
  std::vector<std::uint8_t> out(g.num_tensors(), 0);
  for (ir::TensorId t = 0; t < g.num_tensors(); ++t) {
    const ir::Tensor& tensor = g.tensor(t);
    out[t] = tensor.kind == ir::TensorKind::Parameter && tensor.producer == ir::kNone &&
                     !tensor.consumers.empty() && gl.needs_grad[t] && zero[t] >= 3 &&
                     gl.target[t] != pl.holders[t]
                 ? 1
                 : 0;
  }
  return out;
}

Zero3GatherBytes predict_zero3_gather_bytes(const ir::Graph& g, const PlanLayouts& pl,
                                            const GradientLayouts& gl, const std::vector<int>& zero,
                                            const RecomputePlan& rp, double element_bytes) {
  Zero3GatherBytes out;
  out.forward.per_axis.assign(pl.mesh.size(), 0.0);
  out.backward.per_axis.assign(pl.mesh.size(), 0.0);
  const std::vector<std::uint8_t> sharded = zero3_sharded(g, pl, gl, zero);
  for (ir::TensorId t = 0; t < g.num_tensors(); ++t) {
    if (!sharded[t]) continue;
    const ir::Tensor& tensor = g.tensor(t);
    charge(out.forward, pl, element_bytes, tensor, gl.target[t], pl.holders[t]);
    charge(out.backward, pl, element_bytes, tensor, gl.target[t], pl.holders[t]);
    // The forward freed the copies its readers made from the gathered
    // parameter; the backward makes them again (those only recomputed
    // operators read are the recomputation's, predict_recompute_bytes').
    std::vector<Layout> made;
    for (const ir::OpId o : tensor.consumers) {
      const ir::Operator& op = g.op(o);
      for (std::size_t j = 0; j < op.inputs.size(); ++j) {
        const Layout& want = pl.ops[o].inputs[j];
        if (op.inputs[j] != t || want == pl.holders[t]) continue;
        if (std::find(made.begin(), made.end(), want) != made.end()) continue;
        if (!rp.empty() && std::find(rp.dropped_copies[t].begin(), rp.dropped_copies[t].end(),
                                     want) != rp.dropped_copies[t].end())
          continue;
        made.push_back(want);
        charge(out.backward, pl, element_bytes, tensor, pl.holders[t], want);
      }
    }
  }
  return out;
}

BytePrediction redistribution_bytes(const ir::Shape& full, const Layout& from, const Layout& to,
                                    const std::vector<std::int64_t>& mesh, double element_bytes) {
  PlanLayouts pl;
  pl.mesh = mesh;
  ir::Tensor t;
  t.shape = full;
  BytePrediction out;
  out.per_axis.assign(mesh.size(), 0.0);
  charge(out, pl, element_bytes, t, from, to);
  return out;
}

BytePrediction predict_exec_bytes(const ir::Graph& g, const PlanLayouts& pl, double element_bytes) {
  BytePrediction out;
  out.per_axis.assign(pl.mesh.size(), 0.0);
  for (ir::OpId o = 0; o < g.num_operators(); ++o) {
    if (g.op(o).kind != ir::OpKind::SoftmaxCrossEntropy || pl.ops[o].inputs.empty()) continue;
    charge_vocab_loss(out, g, pl, o, element_bytes);
  }
  for (ir::OpId o = 0; o < g.num_operators(); ++o) {
    const ir::Operator& op = g.op(o);
    if (op.kind == ir::OpKind::BatchNorm && !pl.ops[o].inputs.empty() &&
        detail::batch_norm_batch_stats(op, pl.train))
      charge_batch_norm(out, g, pl, o, element_bytes);
  }
  for (ir::TensorId t = 0; t < g.num_tensors(); ++t) charge_tensor(out, g, pl, t, element_bytes);
  return out;
}

namespace {

// Union-find root of operator o.
std::int32_t root_of(std::vector<std::int32_t>& parent, std::int32_t o) {
  while (parent[static_cast<std::size_t>(o)] != o) {
    parent[static_cast<std::size_t>(o)] =
        parent[static_cast<std::size_t>(parent[static_cast<std::size_t>(o)])];
    o = parent[static_cast<std::size_t>(o)];
  }
  return o;
}

// Whether activation t is dropped after the forward pass (recompute.hpp).
bool droppable(const ir::Graph& g, const std::vector<std::uint8_t>& recomputed,
               const std::vector<float>& saved, ir::TensorId t) {
  const ir::Tensor& x = g.tensor(t);
  if (x.producer == ir::kNone || x.consumers.empty() || !recomputed[x.producer] || saved[t] > 0)
    return false;
  return std::all_of(x.consumers.begin(), x.consumers.end(),
                     [&](ir::OpId c) { return recomputed[c] != 0; });
}

// The layouts other than the holder's in which only recomputed operators read t.
std::vector<Layout> copies_only_recomputed_read(const ir::Graph& g, const PlanLayouts& pl,
                                                const std::vector<std::uint8_t>& recomputed,
                                                ir::TensorId t) {
  std::vector<Layout> only, other;
  for (const ir::OpId o : g.tensor(t).consumers) {
    const ir::Operator& op = g.op(o);
    for (std::size_t j = 0; j < op.inputs.size(); ++j) {
      if (op.inputs[j] != t) continue;
      const Layout& want = pl.ops[o].inputs[j];
      if (want == pl.holders[t]) continue;
      std::vector<Layout>& into = recomputed[o] ? only : other;
      if (std::find(into.begin(), into.end(), want) == into.end()) into.push_back(want);
    }
  }
  std::erase_if(only, [&](const Layout& l) {
    return std::find(other.begin(), other.end(), l) != other.end();
  });
  return only;
}

}  // namespace

RecomputePlan recompute_plan(const ir::Graph& g, const PlanLayouts& pl,
                             const std::vector<std::uint8_t>& recomputed,
                             const std::vector<float>& saved) {
  const std::size_t n_ops = g.num_operators();
  if (recomputed.size() != n_ops || saved.size() != g.num_tensors())
    throw Error(Errc::kInternal, "recompute_plan: one value per operator and per tensor");
  RecomputePlan rp;
  rp.group.assign(n_ops, -1);
  rp.dropped.assign(g.num_tensors(), 0);
  rp.dropped_copies.resize(g.num_tensors());
  std::vector<std::int32_t> parent(n_ops);
  for (std::size_t o = 0; o < n_ops; ++o) {
    parent[o] = static_cast<std::int32_t>(o);
    rp.op.push_back(recomputed[o] != 0 ? 1 : 0);
  }
  for (ir::TensorId t = 0; t < g.num_tensors(); ++t) {
    // A dropped tensor's readers are all recomputed, so all its copies go.
    rp.dropped_copies[t] = copies_only_recomputed_read(g, pl, rp.op, t);
    if (!droppable(g, rp.op, saved, t)) continue;
    rp.dropped[t] = 1;
    // Its readers rerun with its producer: one group.
    const ir::Tensor& x = g.tensor(t);
    for (const ir::OpId c : x.consumers)
      parent[static_cast<std::size_t>(root_of(parent, static_cast<std::int32_t>(c)))] =
          root_of(parent, static_cast<std::int32_t>(x.producer));
  }
  std::vector<std::int32_t> id(n_ops, -1);
  for (const ir::OpId o : g.topological_order()) {
    if (!rp.op[o]) continue;
    const auto r = static_cast<std::size_t>(root_of(parent, static_cast<std::int32_t>(o)));
    if (id[r] < 0) id[r] = rp.groups++;
    rp.group[o] = id[r];
  }
  return rp;
}

BytePrediction predict_recompute_bytes(const ir::Graph& g, const PlanLayouts& pl,
                                       const RecomputePlan& rp, double element_bytes) {
  BytePrediction out;
  out.per_axis.assign(pl.mesh.size(), 0.0);
  for (ir::TensorId t = 0; t < g.num_tensors() && !rp.empty(); ++t) {
    for (const Layout& l : rp.dropped_copies[t])
      charge(out, pl, element_bytes, g.tensor(t), pl.holders[t], l);
  }
  for (ir::OpId o = 0; o < g.num_operators() && !rp.empty(); ++o) {
    if (!rp.op[o] || pl.ops[o].inputs.empty()) continue;
    const ir::Operator& op = g.op(o);
    if (op.kind == ir::OpKind::SoftmaxCrossEntropy) charge_vocab_loss(out, g, pl, o, element_bytes);
    if (op.kind == ir::OpKind::BatchNorm && detail::batch_norm_batch_stats(op, pl.train))
      charge_batch_norm(out, g, pl, o, element_bytes);
  }
  return out;
}

}  // namespace recsearch::exec
