// The double-recursive symbolic search.
//
// Recursion 1 walks the cut schedule (one pass per prime cut, outermost
// level first): both halves of a symmetric cut take the same decision, so
// log N passes suffice. Recursion 2, inside one pass, visits operators by
// decreasing weight — the spread of their candidate costs at the current
// slice sizes, i.e. how much their choice matters — and lets each take the
// choice (a loop to cut, or none) that minimises its own cost plus the
// redistribution it causes against neighbours already decided in this pass.
//
// Every redistribution is charged exactly once, by whichever end of an edge
// decides second, and identical requests for one tensor (same layout, same
// slice) are charged once, as the evaluator counts them; so the bookkept
// total equals plan::evaluate's step time, which the tests check. Per pass
// the work is O(V log V + E) (the sort, then each use looked at a constant
// number of times per candidate).
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_sort.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <limits>
#include <numeric>
#include <queue>

#include "search/common.hpp"

namespace recsearch::search::detail {
namespace {

using cost::AxisLayout;
using cost::LayoutKind;

// A distinct request for a tensor on the current axis: a layout wanted by
// some use, and the divisor of that use's slice.
struct Want {
  AxisLayout layout;
  std::int64_t divisor;
  std::uint32_t uses;  // decided uses making this request
};

constexpr int kRefineSweeps = 2;

class RecSearch {
 public:
  RecSearch(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
            const Cluster& cluster, const SearchOptions& opts, double lambda)
      : g_(g), spaces_(spaces), cluster_(cluster), opts_(opts), lambda_(lambda) {
    const std::size_t nops = g.num_operators(), nt = g.num_tensors();
    loop_off_.resize(nops + 1);
    in_off_.resize(nops + 1);
    out_off_.resize(nops + 1);
    for (std::size_t o = 0; o < nops; ++o) {
      loop_off_[o + 1] = loop_off_[o] + spaces[o].loops.size();
      in_off_[o + 1] = in_off_[o] + g.op(static_cast<ir::OpId>(o)).inputs.size();
      out_off_[o + 1] = out_off_[o] + g.op(static_cast<ir::OpId>(o)).outputs.size();
    }
    splits_.assign(loop_off_[nops], 1);
    in_div_.assign(in_off_[nops], 1);
    out_div_.assign(out_off_[nops], 1);

    // Holder of each tensor: its producer, else its first use.
    holder_op_.assign(nt, ir::kNone);
    holder_slot_.assign(nt, 0);
    want_off_.resize(nt + 1);
    for (std::size_t t = 0; t < nt; ++t) {
      const ir::Tensor& tensor = g.tensor(static_cast<ir::TensorId>(t));
      want_off_[t + 1] = want_off_[t] + tensor.consumers.size();
      if (tensor.producer != ir::kNone) {
        holder_op_[t] = tensor.producer;
        const auto& outs = g.op(tensor.producer).outputs;
        holder_slot_[t] = static_cast<std::uint32_t>(
            std::find(outs.begin(), outs.end(), static_cast<ir::TensorId>(t)) - outs.begin());
        holder_is_output_.push_back(1);
      } else {
        holder_is_output_.push_back(0);
        if (!tensor.consumers.empty()) {
          holder_op_[t] = tensor.consumers.front();
          const auto& ins = g.op(holder_op_[t]).inputs;
          holder_slot_[t] = static_cast<std::uint32_t>(
              std::find(ins.begin(), ins.end(), static_cast<ir::TensorId>(t)) - ins.begin());
        }
      }
    }
    wants_.resize(want_off_[nt]);
    want_count_.assign(nt, 0);
    holder_decided_.assign(nt, 0);
    holder_layout_.assign(nt, AxisLayout{});
    queued_.assign(nops, 0);
  }

  double run(plan::Plan& out) {
    const auto& mesh = cluster_.cuts();
    const std::size_t nops = g_.num_operators();
    out.cuts.assign(nops, std::vector<std::int16_t>(mesh.size(), plan::kReplicated));
    const auto pinned = pinned_cuts(g_, spaces_, mesh);

    std::vector<std::vector<std::int16_t>> cands(nops);
    std::vector<double> weight(nops);
    std::vector<ir::OpId> order(nops);
    std::vector<std::int16_t> choice(nops);
    std::vector<ir::OpId> visit(nops);
    std::vector<std::int16_t> alt(nops);
    double comm_total = 0;

    tbb::task_arena arena(opts_.threads > 0 ? opts_.threads : tbb::task_arena::automatic);
    for (std::size_t a = 0; a < mesh.size(); ++a) {
      const Cut& cut = mesh[a];
      rest_ = 1;
      for (std::size_t b = a + 1; b < mesh.size(); ++b) rest_ *= static_cast<double>(mesh[b].size);
      arena.execute([&] {
        tbb::parallel_for(tbb::blocked_range<std::size_t>(0, nops, 256), [&](const auto& r) {
          for (std::size_t o = r.begin(); o != r.end(); ++o) {
            auto& c = cands[o];
            if (!pinned[o].empty()) {
              c.assign(1, pinned[o][a]);
            } else {
              std::vector<std::int64_t> sp(splits_.begin() + loop_off_[o],
                                           splits_.begin() + loop_off_[o + 1]);
              legal_choices(g_, static_cast<ir::OpId>(o), spaces_[o], sp, cut.size, c);
            }
            double lo = std::numeric_limits<double>::infinity(), hi = -lo;
            for (auto ch : c) {
              const double v = own_cost(static_cast<ir::OpId>(o), ch, cut, nullptr);
              lo = std::min(lo, v);
              hi = std::max(hi, v);
            }
            weight[o] = hi - lo;
          }
        });
      });
      std::iota(order.begin(), order.end(), 0);
      // A total order (weight, then id) keeps the result independent of threads.
      auto heavier = [&](ir::OpId x, ir::OpId y) {
        return weight[x] != weight[y] ? weight[x] > weight[y] : x < y;
      };
      arena.execute([&] { tbb::parallel_sort(order.begin(), order.end(), heavier); });

      std::fill(want_count_.begin(), want_count_.end(), 0);
      std::fill(holder_decided_.begin(), holder_decided_.end(), 0);
      std::fill(queued_.begin(), queued_.end(), 0);
      // Visit order: the heaviest operator seeds a region; then always the
      // heaviest operator adjacent to a decided one, so that every decision
      // but a region's seed is taken against a decided neighbour (a frontier
      // grown like Prim's algorithm, by weight). A new region starts only
      // when the frontier is empty.
      auto lighter = [&](ir::OpId x, ir::OpId y) { return heavier(y, x); };
      std::priority_queue<ir::OpId, std::vector<ir::OpId>, decltype(lighter)> frontier(lighter);
      std::size_t next_seed = 0;
      for (std::size_t visited = 0; visited < nops; ++visited) {
        ir::OpId o;
        if (frontier.empty()) {
          while (queued_[order[next_seed]]) ++next_seed;
          o = order[next_seed];
          queued_[o] = 1;
        } else {
          o = frontier.top();
          frontier.pop();
        }
        visit[visited] = o;
        choice[o] = choose(o, cands[o], cut, plan::kReplicated, false);
        add_uses(o, choice[o]);
        for_each_neighbour(o, [&](ir::OpId n) {
          if (!queued_[n]) {
            queued_[n] = 1;
            frontier.push(n);
          }
        });
      }
      refine(visit, cands, choice, cut);
      // More starts: every operator on its batch loop where it can be cut
      // there; every operator replicated. Each is refined the same way.
      // Greedy growth from the heaviest operator can settle a whole network
      // into a region that is only locally good (everything replicated
      // around one tensor-parallel projection; cuts on a network too small
      // to pay for any collective); the pass keeps whichever assignment its
      // own objective prefers, so no single start has to be right.
      double best_obj = pass_objective(choice, cut);
      for (int start = 0; start < 2; ++start) {
        for (std::size_t o = 0; o < nops; ++o) {
          remove_uses(static_cast<ir::OpId>(o), start == 0 ? choice[o] : alt[o]);
          alt[o] = cands[o].front();
          const int b = start == 0 ? batch_loop(g_, spaces_[o], static_cast<ir::OpId>(o))
                                   : plan::kReplicated;
          for (auto ch : cands[o])
            if (ch == b) alt[o] = ch;
        }
        for (std::size_t o = 0; o < nops; ++o) add_uses(static_cast<ir::OpId>(o), alt[o]);
        refine(visit, cands, alt, cut);
        const double obj = pass_objective(alt, cut);
        if (obj < best_obj) {
          best_obj = obj;
          choice = alt;
        }
      }
      for (std::size_t o = 0; o < nops; ++o) remove_uses(static_cast<ir::OpId>(o), alt[o]);
      for (std::size_t o = 0; o < nops; ++o) add_uses(static_cast<ir::OpId>(o), choice[o]);
      comm_total += pass_communication(choice, cut);
      // Slices shrink only after the pass: every decision of this pass saw
      // the slices as they were before the cut.
      for (std::size_t o = 0; o < nops; ++o) apply(static_cast<ir::OpId>(o), choice[o], cut.size);
      for (std::size_t o = 0; o < nops; ++o) out.cuts[o][a] = choice[o];
    }

    double compute_total = 0;
    for (std::size_t o = 0; o < nops; ++o) compute_total += final_compute(static_cast<ir::OpId>(o));
    return compute_total + comm_total;
  }

 private:
  const std::vector<int>& in_dims(ir::OpId o, std::size_t j) const { return spaces_[o].inputs[j]; }
  const std::vector<int>& out_dims(ir::OpId o, std::size_t j) const {
    return spaces_[o].outputs[j];
  }

  // Compute estimate + own communication + memory penalty of choice c;
  // *comm receives the communication part alone.
  double own_cost(ir::OpId o, std::int16_t c, const Cut& cut, double* comm) const {
    const ir::Operator& op = g_.op(o);
    const algebra::OpSpace& s = spaces_[o];
    const Mode mode = opts_.mode;
    const CostParams& p = opts_.cost;
    const std::int64_t k = cut.size;
    double comm_s = 0, touched = 0, mem = 0;
    std::int64_t sprev = 1;
    for (std::size_t l = loop_off_[o]; l < loop_off_[o + 1]; ++l) sprev *= splits_[l];
    const double kc = c == plan::kReplicated ? 1.0 : static_cast<double>(k);
    const double psf = cost::parameter_state_factor(p, mode);

    for (std::size_t j = 0; j < op.inputs.size(); ++j) {
      const ir::Tensor& t = g_.tensor(op.inputs[j]);
      const AxisLayout lay = operand_layout(s, in_dims(o, j), false, c);
      const double slice = t.bytes() / static_cast<double>(in_div_[in_off_[o] + j]);
      const double after = lay.kind == LayoutKind::Shard ? slice / static_cast<double>(k) : slice;
      touched += after;
      if (c != plan::kReplicated && mode == Mode::Train && t.requires_grad() &&
          lay.kind == LayoutKind::Replicate)
        comm_s += cost::gradient_seconds(slice, t.kind == ir::TensorKind::Parameter, cut, p);
      if (lambda_ > 0 && t.kind == ir::TensorKind::Parameter && holder_op_[op.inputs[j]] == o &&
          holder_slot_[op.inputs[j]] == j)
        mem += after * psf;
    }
    for (std::size_t j = 0; j < op.outputs.size(); ++j) {
      const ir::Tensor& t = g_.tensor(op.outputs[j]);
      const AxisLayout lay = operand_layout(s, out_dims(o, j), true, c);
      const double slice = t.bytes() / static_cast<double>(out_div_[out_off_[o] + j]);
      const double after = lay.kind == LayoutKind::Shard ? slice / static_cast<double>(k) : slice;
      touched += after;
      mem += after;
      if (t.consumers.empty() && lay.kind == LayoutKind::Partial)
        comm_s += cost::collective_seconds(cost::Collective::AllReduce, slice, cut, p);
    }
    if (c != plan::kReplicated &&
        s.loops[static_cast<std::size_t>(c)].role == algebra::DimRole::Window &&
        s.loops[static_cast<std::size_t>(c)].halo > 0) {
      const double halo = halo_bytes(o, c);
      const double one = cost::collective_seconds(cost::Collective::Halo, halo, cut, p);
      comm_s += mode == Mode::Train ? 2 * one : one;
    }
    // Compute saved now is worth what it will be once the remaining cuts
    // have divided it too: valued at the full size, a cut in an early pass
    // would look worth up to (remaining devices) times its real gain.
    const double flops = s.flops / static_cast<double>(sprev) / kc / rest_;
    if (comm) *comm = comm_s;
    return comm_s + cost::compute_seconds(flops, touched / rest_, cluster_.device(), p, mode) +
           lambda_ * mem;
  }

  // Rows of the first input that maps a dim to window loop c, times the
  // bytes of one row of its current slice.
  double halo_bytes(ir::OpId o, std::int16_t c) const {
    const ir::Operator& op = g_.op(o);
    const algebra::OpSpace& s = spaces_[o];
    for (std::size_t j = 0; j < op.inputs.size(); ++j) {
      const auto& dims = in_dims(o, j);
      for (std::size_t d = 0; d < dims.size(); ++d) {
        if (dims[d] != c) continue;
        const ir::Tensor& t = g_.tensor(op.inputs[j]);
        const double slice = t.bytes() / static_cast<double>(in_div_[in_off_[o] + j]);
        const double extent = static_cast<double>(t.shape[d]) /
                              static_cast<double>(splits_[loop_off_[o] + static_cast<std::size_t>(c)]);
        return static_cast<double>(s.loops[static_cast<std::size_t>(c)].halo) * slice / extent;
      }
    }
    return 0.0;
  }

  // Operators coupled to o through a tensor: the holders of its inputs, and
  // every use of a tensor o holds. Each tensor's use list is walked only by
  // its holder, so a pass costs O(E) however large the fan-out.
  template <class F>
  void for_each_neighbour(ir::OpId o, F&& f) const {
    const ir::Operator& op = g_.op(o);
    for (std::size_t j = 0; j < op.inputs.size(); ++j) {
      const ir::TensorId t = op.inputs[j];
      if (holder_op_[t] != o) {
        f(holder_op_[t]);
      } else if (!holder_is_output_[t] && holder_slot_[t] == j) {
        for (ir::OpId u : g_.tensor(t).consumers)
          if (u != o) f(u);
      }
    }
    for (ir::TensorId t : op.outputs)
      for (ir::OpId u : g_.tensor(t).consumers) f(u);
  }

  // Refinement: with every neighbour decided, each operator reconsiders in
  // visit order; a bounded number of sweeps keeps the pass linear. Each
  // move lowers the pass objective.
  void refine(const std::vector<ir::OpId>& visit, const std::vector<std::vector<std::int16_t>>& cands,
              std::vector<std::int16_t>& choice, const Cut& cut) {
    for (int sweep = 0; sweep < kRefineSweeps; ++sweep) {
      bool changed = false;
      for (ir::OpId o : visit) {
        if (cands[o].size() < 2) continue;
        remove_uses(o, choice[o]);
        const std::int16_t c = choose(o, cands[o], cut, choice[o], true);
        changed |= c != choice[o];
        choice[o] = c;
        add_uses(o, c);
      }
      if (!changed) break;
    }
  }

  // What a pass minimises: heuristic own costs (compute estimate, own
  // collectives, memory price) plus all redistributions, with every use of
  // the assignment recorded.
  double pass_objective(const std::vector<std::int16_t>& choice, const Cut& cut) const {
    double total = 0;
    for (std::size_t o = 0; o < choice.size(); ++o)
      total += own_cost(static_cast<ir::OpId>(o), choice[o], cut, nullptr);
    for (std::size_t t = 0; t < g_.num_tensors(); ++t)
      total += tensor_cost(static_cast<ir::TensorId>(t), cut);
    return total;
  }

  // Best choice of o among cands: heuristic own cost plus the cost of every
  // tensor o touches with o's uses added. On ties the earlier candidate
  // wins, or `keep` when prefer_keep (refinement moves only on a gain).
  std::int16_t choose(ir::OpId o, const std::vector<std::int16_t>& cands, const Cut& cut,
                      std::int16_t keep, bool prefer_keep) {
    touched_tensors(o);
    double best = std::numeric_limits<double>::infinity();
    std::int16_t best_c = cands.front();
    for (auto ch : cands) {
      add_uses(o, ch);
      double v = own_cost(o, ch, cut, nullptr);
      for (ir::TensorId t : touched_) v += tensor_cost(t, cut) + partial_estimate(t, cut);
      remove_uses(o, ch);
      if (v < best || (prefer_keep && ch == keep && v <= best * (1 + 1e-12))) {
        best = v;
        best_c = ch;
      }
    }
    if (prefer_keep) {
      // Keep the current choice unless another is strictly better.
      add_uses(o, keep);
      double v = own_cost(o, keep, cut, nullptr);
      for (ir::TensorId t : touched_) v += tensor_cost(t, cut) + partial_estimate(t, cut);
      remove_uses(o, keep);
      if (v <= best * (1 + 1e-12)) best_c = keep;
    }
    return best_c;
  }

  // Distinct tensors operator o reads or writes, into touched_.
  void touched_tensors(ir::OpId o) {
    const ir::Operator& op = g_.op(o);
    touched_.assign(op.inputs.begin(), op.inputs.end());
    touched_.insert(touched_.end(), op.outputs.begin(), op.outputs.end());
    std::sort(touched_.begin(), touched_.end());
    touched_.erase(std::unique(touched_.begin(), touched_.end()), touched_.end());
  }

  // Redistribution seconds of tensor t on this axis: each distinct request
  // of its decided uses, turned from the holder's layout (0 while the
  // holder is undecided).
  double tensor_cost(ir::TensorId t, const Cut& cut) const {
    if (!holder_decided_[t]) return 0.0;
    const AxisLayout h = holder_layout_[t];
    const double bytes = g_.tensor(t).bytes();
    double total = 0;
    for (std::size_t i = 0; i < want_count_[t]; ++i) {
      const Want& w = wants_[want_off_[t] + i];
      total += redistribution_seconds(h, w.layout, bytes / static_cast<double>(w.divisor), cut,
                                      opts_.cost, opts_.mode);
    }
    return total;
  }

  // A partial tensor must be reduced whatever its consumers choose; while
  // none has decided, count the cheapest reduction (reduce-scatter) so that
  // a partial output does not look free. A heuristic only: never bookkept.
  double partial_estimate(ir::TensorId t, const Cut& cut) const {
    if (!holder_decided_[t] || want_count_[t] > 0 || g_.tensor(t).consumers.empty()) return 0.0;
    if (holder_layout_[t].kind != LayoutKind::Partial) return 0.0;
    const ir::OpId o = holder_op_[t];
    const double slice = g_.tensor(t).bytes() /
                         static_cast<double>(out_div_[out_off_[o] + holder_slot_[t]]);
    return redistribution_seconds(holder_layout_[t], AxisLayout::shard(0), slice, cut, opts_.cost,
                                  opts_.mode);
  }

  // Records (add) or withdraws (remove) the layouts choice c of o gives the
  // tensors it holds and the requests it makes of the others.
  void add_uses(ir::OpId o, std::int16_t c) { change_uses(o, c, +1); }
  void remove_uses(ir::OpId o, std::int16_t c) { change_uses(o, c, -1); }

  void change_uses(ir::OpId o, std::int16_t c, int delta) {
    const ir::Operator& op = g_.op(o);
    const algebra::OpSpace& s = spaces_[o];
    for (std::size_t j = 0; j < op.outputs.size(); ++j) {
      const ir::TensorId t = op.outputs[j];
      holder_decided_[t] = delta > 0;
      holder_layout_[t] = operand_layout(s, out_dims(o, j), true, c);
    }
    for (std::size_t j = 0; j < op.inputs.size(); ++j) {
      const ir::TensorId t = op.inputs[j];
      const Want w{operand_layout(s, in_dims(o, j), false, c), in_div_[in_off_[o] + j], 0};
      if (!holder_is_output_[t] && holder_op_[t] == o && holder_slot_[t] == j) {
        holder_decided_[t] = delta > 0;
        holder_layout_[t] = w.layout;
      }
      Want* base = wants_.data() + want_off_[t];
      std::uint32_t& n = want_count_[t];
      std::size_t i = 0;
      while (i < n && !(base[i].layout == w.layout && base[i].divisor == w.divisor)) ++i;
      if (delta > 0) {
        if (i == n) base[n++] = w;
        ++base[i].uses;
      } else if (i < n && --base[i].uses == 0) {
        base[i] = base[n - 1];  // order of requests does not matter
        --n;
      }
    }
  }

  // Communication of the pass as decided: own collectives of every
  // operator plus every tensor's redistributions. The search's bookkeeping,
  // summed over passes and compared with the evaluator by the tests.
  double pass_communication(const std::vector<std::int16_t>& choice, const Cut& cut) const {
    double total = 0;
    for (std::size_t o = 0; o < choice.size(); ++o) {
      double comm = 0;
      (void)own_cost(static_cast<ir::OpId>(o), choice[o], cut, &comm);
      total += comm;
    }
    for (std::size_t t = 0; t < g_.num_tensors(); ++t)
      total += tensor_cost(static_cast<ir::TensorId>(t), cut);
    return total;
  }

  void apply(ir::OpId o, std::int16_t c, std::int64_t k) {
    if (c == plan::kReplicated) return;
    const ir::Operator& op = g_.op(o);
    const algebra::OpSpace& s = spaces_[o];
    splits_[loop_off_[o] + static_cast<std::size_t>(c)] *= k;
    for (std::size_t j = 0; j < op.inputs.size(); ++j)
      if (operand_layout(s, in_dims(o, j), false, c).kind == LayoutKind::Shard)
        in_div_[in_off_[o] + j] *= k;
    for (std::size_t j = 0; j < op.outputs.size(); ++j)
      if (operand_layout(s, out_dims(o, j), true, c).kind == LayoutKind::Shard)
        out_div_[out_off_[o] + j] *= k;
  }

  double final_compute(ir::OpId o) const {
    const ir::Operator& op = g_.op(o);
    std::int64_t total_split = 1;
    for (std::size_t l = loop_off_[o]; l < loop_off_[o + 1]; ++l) total_split *= splits_[l];
    double touched = 0;
    for (std::size_t j = 0; j < op.inputs.size(); ++j)
      touched += g_.tensor(op.inputs[j]).bytes() / static_cast<double>(in_div_[in_off_[o] + j]);
    for (std::size_t j = 0; j < op.outputs.size(); ++j)
      touched += g_.tensor(op.outputs[j]).bytes() / static_cast<double>(out_div_[out_off_[o] + j]);
    return cost::compute_seconds(spaces_[o].flops / static_cast<double>(total_split), touched,
                                 cluster_.device(), opts_.cost, opts_.mode);
  }

  const ir::Graph& g_;
  const std::vector<algebra::OpSpace>& spaces_;
  const Cluster& cluster_;
  const SearchOptions& opts_;
  double lambda_;

  std::vector<std::size_t> loop_off_, in_off_, out_off_;
  std::vector<std::int64_t> splits_, in_div_, out_div_;
  std::vector<ir::OpId> holder_op_;
  std::vector<std::uint32_t> holder_slot_;
  std::vector<std::uint8_t> holder_is_output_;
  std::vector<std::size_t> want_off_;
  std::vector<Want> wants_;
  std::vector<std::uint32_t> want_count_;
  std::vector<std::uint8_t> holder_decided_;
  std::vector<AxisLayout> holder_layout_;
  std::vector<std::uint8_t> queued_;
  std::vector<ir::TensorId> touched_;
  double rest_ = 1;  // product of the sizes of the cuts after this pass
};

}  // namespace

double rec_search(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                  const Cluster& cluster, const SearchOptions& opts, double lambda,
                  plan::Plan& out) {
  RecSearch rs(g, spaces, cluster, opts, lambda);
  return rs.run(out);
}

}  // namespace recsearch::search::detail
