// SPDX-License-Identifier: Apache-2.0
// Exact optimum of the cost model as an integer program (the formulation of
// Alpa and XLA auto-sharding), solved with COIN-OR CBC.
//
// Variables: x[o,s] = 1 when operator o takes strategy s (a loop choice on
// every mesh axis; make_strategy gives its own cost, memory and operand
// layouts), one per operator. The cost model is per axis, and on each axis a
// tensor pays one redistribution from its holder's layout to every distinct
// (layout, slice) its uses request. For every use (consumer slot) and axis,
// z[h,r] in [0,1] is the joint choice of holder layout h and request r,
// tied to x by transport constraints (sum over r = holder's x with layout h,
// sum over h = the use's x with request r), which makes z the exact product
// for integral x and keeps the relaxation tight. y[t,a,h,r] >= z of every
// use of t with request r carries the cost once, however many uses ask for
// the same layout. Memory: the training sum of make_strategy's accounts, in
// inference the parameters plus the largest working set of one operator.
//
// Operators with more legal strategies than SearchOptions::ilp_max_strategies
// are restricted: first to one order of the choices within each run of mesh
// axes of the same level and size (choices non-increasing, replication
// last), then to the cheapest by own cost; when all operators together
// still exceed ilp_max_total_strategies, each keeps its share of that total
// (at least 16, else the program is refused). The hint plans' strategies
// (data parallel, grid, rec) are always kept, and rec's plan is CBC's
// starting solution. The result then is the optimum over that subset only,
// flagged as restricted.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>
#include <numeric>

#include "recsearch/error.hpp"
#include "search/common.hpp"
#include "search/flat_graph.hpp"

#ifdef RECSEARCH_HAVE_CBC
#include <Cbc_C_Interface.h>  // COIN-OR CBC, the MIP solver (C interface)
#endif

namespace recsearch::search {

bool ilp_available() noexcept {
#ifdef RECSEARCH_HAVE_CBC
  return true;
#else
  return false;
#endif
}

}  // namespace recsearch::search

namespace recsearch::search::detail {

#ifndef RECSEARCH_HAVE_CBC

IlpResult ilp(const ir::Graph&, const std::vector<algebra::OpSpace>&, const Cluster&,
              const SearchOptions&, double, const std::vector<plan::Plan>&, plan::Plan&) {
  throw Error(Errc::kUsage,
              "this recsearch was built without COIN-OR CBC: algorithm 'ilp' is not available "
              "(install coinor-libcbc-dev and reconfigure with -Dilp=enabled)");
}

#else

namespace {

using cost::AxisLayout;
using Key = std::pair<AxisLayout, std::int64_t>;  // a use's request: layout, slice divisor

constexpr double kTimeScale = 1e6;  // objective in microseconds
// Fewest candidates per operator ilp runs with when the total is cut down.
constexpr std::size_t kMinKeptPerOperator = 16;
// Legal strategies enumerated in all before the program counts as too large
// (bounds the memory of the enumeration).
constexpr std::size_t kMaxEnumerated = 4'000'000;
constexpr double kByteScale = 1.0 / (1024.0 * 1024.0 * 1024.0);  // memory rows in GiB

// Legal cut vectors of one operator: all of them, or (canonical) only those
// whose choices do not increase within each run of interchangeable axes.
void enumerate(const ir::Graph& g, const algebra::OpSpace& s, ir::OpId o,
               const std::vector<Cut>& mesh, bool canonical, std::size_t cap, std::size_t a,
               std::vector<std::int64_t>& splits, std::vector<std::int16_t>& cuts,
               std::vector<std::vector<std::int16_t> >& out, bool& overflow) {
  if (overflow) return;
  if (a == mesh.size()) {
    if (out.size() >= cap) {
      overflow = true;
      return;
    }
    out.push_back(cuts);
    return;
  }
  std::vector<std::int16_t> choices;
  legal_choices(g, o, s, splits, mesh[a].size, choices);
  const bool same_run =
      canonical && a > 0 && mesh[a - 1].level == mesh[a].level && mesh[a - 1].size == mesh[a].size;
  for (auto c : choices) {
    if (same_run && c > cuts.back()) continue;
    cuts.push_back(c);
    if (c != plan::kReplicated) splits[static_cast<std::size_t>(c)] *= mesh[a].size;
    enumerate(g, s, o, mesh, canonical, cap, a + 1, splits, cuts, out, overflow);
    if (c != plan::kReplicated) splits[static_cast<std::size_t>(c)] /= mesh[a].size;
    cuts.pop_back();
  }
}

// The program, gathered in triplets and handed to CBC at once
// (Cbc_loadProblem): adding rows one by one costs a copy of the matrix each.
struct Model {
  std::vector<double> lb, ub, obj;
  std::vector<int> integer;
  std::vector<double> rlb, rub;
  std::vector<int> tr, tc;  // triplets: row, column, value
  std::vector<double> tv;
  int cols = 0, rows = 0;
  int col(double lo, double hi, double o, bool is_int) {
    lb.push_back(lo);
    ub.push_back(hi);
    obj.push_back(o);
    if (is_int) integer.push_back(cols);
    return cols++;
  }
  void row(const std::vector<int>& idx, const std::vector<double>& val, char sense, double rhs) {
    for (std::size_t i = 0; i < idx.size(); ++i) {
      tr.push_back(rows);
      tc.push_back(idx[i]);
      tv.push_back(val[i]);
    }
    const double inf = std::numeric_limits<double>::infinity();
    rlb.push_back(sense == 'L' ? -inf : rhs);
    rub.push_back(sense == 'G' ? inf : rhs);
    ++rows;
  }
  void load(Cbc_Model* m) const {
    std::vector<CoinBigIndex> start(static_cast<std::size_t>(cols) + 1, 0);
    for (int c : tc) ++start[static_cast<std::size_t>(c) + 1];
    for (std::size_t c = 0; c < static_cast<std::size_t>(cols); ++c) start[c + 1] += start[c];
    std::vector<CoinBigIndex> fill(start.begin(), start.end() - 1);
    std::vector<int> index(tv.size());
    std::vector<double> value(tv.size());
    for (std::size_t k = 0; k < tv.size(); ++k) {
      const auto at = static_cast<std::size_t>(fill[static_cast<std::size_t>(tc[k])]++);
      index[at] = tr[k];
      value[at] = tv[k];
    }
    Cbc_loadProblem(m, cols, rows, start.data(), index.data(), value.data(), lb.data(), ub.data(),
                    obj.data(), rlb.data(), rub.data());
    for (int c : integer) Cbc_setInteger(m, c);
  }
};

struct CbcModel {
  Cbc_Model* m = Cbc_newModel();
  CbcModel() = default;
  CbcModel(const CbcModel&) = delete;
  CbcModel& operator=(const CbcModel&) = delete;
  ~CbcModel() { Cbc_deleteModel(m); }
};

// Candidate cut vectors of one unpinned operator: all legal ones, or the
// canonical orders when there are more than `cap` (res.restricted), plus the
// hints' own.
std::vector<std::vector<std::int16_t> > operator_candidates(const Context& ctx, ir::OpId id,
                                                            std::size_t cap,
                                                            const std::vector<plan::Plan>& hints,
                                                            IlpResult& res) {
  const algebra::OpSpace& s = ctx.spaces[id];
  std::vector<std::vector<std::int16_t> > cand;
  bool overflow = false;
  std::vector<std::int64_t> splits(s.loops.size(), 1);
  std::vector<std::int16_t> cuts;
  enumerate(ctx.g, s, id, ctx.mesh, false, cap, 0, splits, cuts, cand, overflow);
  if (overflow) {
    res.restricted = true;
    cand.clear();
    overflow = false;
    enumerate(ctx.g, s, id, ctx.mesh, true, 64 * cap, 0, splits, cuts, cand, overflow);
    if (overflow)
      throw Error(Errc::kUsage, "ilp: operator '" + ctx.g.op(id).name + "' has more than " +
                                    std::to_string(64 * cap) +
                                    " candidate strategies even in canonical axis order; "
                                    "the integer program would be too large for this mesh");
  }
  for (const auto& h : hints)
    if (std::find(cand.begin(), cand.end(), h.cuts[id]) == cand.end()) cand.push_back(h.cuts[id]);
  return cand;
}

// Candidate cut vectors of every operator (a pinned one: its cuts), and how
// many each may keep: the cap, or past ilp_max_total_strategies in all
// fewer per operator rather than give up, down to a floor.
std::vector<std::vector<std::vector<std::int16_t> > > candidates(
    const Context& ctx, const std::vector<plan::Plan>& hints, IlpResult& res,
    std::size_t& keep_per_op) {
  const std::size_t n_ops = ctx.g.num_operators();
  const std::size_t cap = std::max<std::size_t>(ctx.opts.ilp_max_strategies, 1);
  const auto pinned = pinned_cuts(ctx.g, ctx.spaces, ctx.mesh);
  std::vector<std::vector<std::vector<std::int16_t> > > cands(n_ops);
  std::size_t total = 0, enumerated = 0;
  for (std::size_t o = 0; o < n_ops; ++o) {
    if (!pinned[o].empty()) cands[o].push_back(pinned[o]);
    else cands[o] = operator_candidates(ctx, static_cast<ir::OpId>(o), cap, hints, res);
    total += std::min(cands[o].size(), cap);
    enumerated += cands[o].size();
    if (enumerated > kMaxEnumerated)
      throw Error(Errc::kUsage, "ilp: more than " + std::to_string(kMaxEnumerated) +
                                    " legal strategies over the first " + std::to_string(o + 1) +
                                    " of " + std::to_string(n_ops) +
                                    " operators; the integer program would be too large");
  }
  keep_per_op = cap;
  const std::size_t max_total = ctx.opts.ilp_max_total_strategies;
  if (total > max_total) {
    keep_per_op = max_total / std::max<std::size_t>(n_ops, 1);
    if (keep_per_op < kMinKeptPerOperator)
      throw Error(Errc::kUsage, "ilp: " + std::to_string(total) + " candidate strategies over " +
                                    std::to_string(n_ops) + " operators, more than " +
                                    std::to_string(max_total) + " in all even at " +
                                    std::to_string(kMinKeptPerOperator) +
                                    " per operator; the integer program would be too large");
  }
  return cands;
}

// The keep_per_op cheapest strategies of operator o by own cost, and the
// hints' own, in their order in `list`.
std::vector<OpStrategy> cheapest(std::vector<OpStrategy> list, std::size_t keep_per_op,
                                 const std::vector<plan::Plan>& hints, std::size_t o) {
  std::vector<std::size_t> idx(list.size());
  std::iota(idx.begin(), idx.end(), std::size_t{0});
  std::stable_sort(idx.begin(), idx.end(),
                   [&](std::size_t a, std::size_t b) { return list[a].own < list[b].own; });
  std::vector<bool> keep(list.size(), false);
  for (std::size_t i = 0; i < keep_per_op; ++i) keep[idx[i]] = true;
  for (const auto& h : hints)
    for (std::size_t i = 0; i < list.size(); ++i)
      if (list[i].cuts == h.cuts[o]) keep[i] = true;
  std::vector<OpStrategy> kept;
  for (std::size_t i = 0; i < list.size(); ++i)
    if (keep[i]) kept.push_back(std::move(list[i]));
  return kept;
}

// Every operator's candidate strategies, at most keep_per_op each (beyond
// the hints'); `cands` is freed as it is read.
std::vector<std::vector<OpStrategy> > strategies(
    const Context& ctx, std::vector<std::vector<std::vector<std::int16_t> > >& cands,
    std::size_t keep_per_op, const std::vector<plan::Plan>& hints, IlpResult& res) {
  std::vector<std::vector<OpStrategy> > strat(cands.size());
  for (std::size_t o = 0; o < cands.size(); ++o) {
    const auto id = static_cast<ir::OpId>(o);
    std::vector<OpStrategy> list;
    list.reserve(cands[o].size());
    for (const auto& c : cands[o]) list.push_back(make_strategy(ctx, id, c));
    std::vector<std::vector<std::int16_t> >().swap(cands[o]);
    if (list.size() > keep_per_op) {
      res.restricted = true;
      list = cheapest(std::move(list), keep_per_op, hints, o);
    }
    strat[o] = std::move(list);
  }
  res.strategies = 0;
  for (const auto& l : strat) res.strategies += l.size();
  return strat;
}

// The distinct values of `key(s)` over strategies s of a list, and for each
// the x columns of the strategies that have it, in first-seen order.
template <class T, class KeyOf>
void group_columns(const std::vector<OpStrategy>& list, const std::vector<int>& cols, KeyOf&& key,
                   std::vector<T>& values, std::vector<std::vector<int> >& groups) {
  for (std::size_t s = 0; s < list.size(); ++s) {
    const T v = key(list[s]);
    auto it = std::find(values.begin(), values.end(), v);
    if (it == values.end()) {
      values.push_back(v);
      groups.emplace_back();
      it = values.end() - 1;
    }
    groups[static_cast<std::size_t>(it - values.begin())].push_back(cols[s]);
  }
}

// The integer program over the candidate strategies (see the file comment),
// built in the order of its columns and rows.
class Program {
 public:
  Program(const Context& ctx, const FlatGraph& flat,
          const std::vector<std::vector<OpStrategy> >& strat)
      : ctx_(ctx), flat_(flat), strat_(strat), xcol_(strat.size()) {}

  // x columns and one-choice rows.
  void add_choices() {
    for (std::size_t o = 0; o < strat_.size(); ++o) {
      std::vector<int> idx;
      for (const auto& s : strat_[o]) {
        idx.push_back(mdl_.col(0, 1, s.own * kTimeScale, true));
        xcol_[o].push_back(idx.back());
      }
      mdl_.row(idx, std::vector<double>(idx.size(), 1.0), 'E', 1.0);
    }
  }

  // Redistributions of every held tensor, per axis and use.
  void add_redistributions() {
    for (std::size_t t = 0; t < flat_.holder_op.size(); ++t) {
      if (flat_.holder_op[t] == ir::kNone) continue;
      const auto uses = uses_of(static_cast<ir::TensorId>(t));
      for (std::size_t a = 0; a < ctx_.mesh.size(); ++a) add_axis(t, a, uses);
    }
  }

  // The memory row: the strategies' accounts, in inference plus the largest
  // working set (one more column, above every operator's).
  void add_memory() {
    std::vector<int> idx;
    std::vector<double> val;
    for (std::size_t o = 0; o < strat_.size(); ++o)
      for (std::size_t s = 0; s < strat_[o].size(); ++s)
        if (strat_[o][s].mem > 0) {
          idx.push_back(xcol_[o][s]);
          val.push_back(strat_[o][s].mem * kByteScale);
        }
    if (ctx_.opts.mode == Mode::Infer) {
      const int act = mdl_.col(0, std::numeric_limits<double>::max(), 0, false);
      idx.push_back(act);
      val.push_back(1.0);
      for (std::size_t o = 0; o < strat_.size(); ++o) add_working_sets(act, o);
    }
    if (!idx.empty()) mdl_.row(idx, val, 'L', (ctx_.budget - fixed_memory()) * kByteScale);
  }

  [[nodiscard]] std::size_t columns() const { return static_cast<std::size_t>(mdl_.cols); }
  [[nodiscard]] std::size_t rows() const { return static_cast<std::size_t>(mdl_.rows); }
  void load(Cbc_Model* m) const { mdl_.load(m); }

  // CBC's starting solution: the strategies of `h`.
  void start_from(Cbc_Model* m, const plan::Plan& h) const {
    std::vector<int> idx;
    std::vector<double> val;
    for (std::size_t o = 0; o < strat_.size(); ++o)
      for (std::size_t s = 0; s < strat_[o].size(); ++s) {
        idx.push_back(xcol_[o][s]);
        val.push_back(strat_[o][s].cuts == h.cuts[o] ? 1.0 : 0.0);
      }
    Cbc_setMIPStartI(m, static_cast<int>(idx.size()), idx.data(), val.data());
  }

  // The strategy each operator takes in solution `sol`.
  [[nodiscard]] std::vector<std::size_t> chosen(const double* sol) const {
    std::vector<std::size_t> out(strat_.size(), 0);
    for (std::size_t o = 0; o < strat_.size(); ++o) {
      std::size_t best = 0;
      for (std::size_t s = 1; s < strat_[o].size(); ++s)
        if (sol[xcol_[o][s]] > sol[xcol_[o][best]]) best = s;
      out[o] = best;
    }
    return out;
  }

 private:
  // Uses of tensor t: (op, input slot), each op once per slot.
  [[nodiscard]] std::vector<std::pair<ir::OpId, std::size_t> > uses_of(ir::TensorId t) const {
    std::vector<std::pair<ir::OpId, std::size_t> > uses;
    for (const FlatGraph::UseSlot& u : flat_.use_slots_of(t)) uses.emplace_back(u.op, u.slot);
    return uses;
  }

  // Tensor t on axis a: the holder's layouts and their x columns, then each
  // use's requests; y columns are shared by the uses (one per holder layout
  // and distinct request).
  void add_axis(std::size_t t, std::size_t a,
                const std::vector<std::pair<ir::OpId, std::size_t> >& uses) {
    const ir::OpId hop = flat_.holder_op[t];
    const std::size_t hslot = flat_.holder_slot[t];
    hl_.clear();
    hcols_.clear();
    group_columns<AxisLayout>(
        strat_[hop], xcol_[hop], [&](const OpStrategy& s) { return s.layout[hslot][a]; }, hl_,
        hcols_);
    ycol_.clear();
    keys_.clear();
    for (const auto& [u, j] : uses) add_use(t, a, u, j);
  }

  // One use (op u, input slot j) of tensor t on axis a: its requests'
  // joint choice z with the holder's layout, tied to x by transport rows,
  // and y >= z paying each (holder layout, request) once.
  void add_use(std::size_t t, std::size_t a, ir::OpId u, std::size_t j) {
    std::vector<Key> rkeys;
    std::vector<std::vector<int> > rcols;
    const auto request = [&](const OpStrategy& s) { return Key{s.layout[j][a], s.divisor[j][a]}; };
    group_columns<Key>(strat_[u], xcol_[u], request, rkeys, rcols);
    // Key ids in the tensor's list, in the order the use first requests them.
    std::vector<std::size_t> rk;
    for (const Key& k : rkeys) {
      auto it = std::find(keys_.begin(), keys_.end(), k);
      if (it == keys_.end()) {
        keys_.push_back(k);
        it = keys_.end() - 1;
      }
      rk.push_back(static_cast<std::size_t>(it - keys_.begin()));
    }
    // Costs of every (holder layout, request); nothing to model when all are free.
    std::vector<std::vector<double> > c(hl_.size(), std::vector<double>(rk.size()));
    bool any = false;
    for (std::size_t h = 0; h < hl_.size(); ++h)
      for (std::size_t r = 0; r < rk.size(); ++r) {
        const Key& k = keys_[rk[r]];
        c[h][r] =
            redistribution_seconds(hl_[h], k.first, flat_.bytes[t] / static_cast<double>(k.second),
                                   ctx_.mesh[a], ctx_.opts.cost, ctx_.opts.mode);
        any = any || c[h][r] > 0;
      }
    if (!any) return;
    add_transport(rk, rcols, c);
  }

  void add_transport(const std::vector<std::size_t>& rk,
                     const std::vector<std::vector<int> >& rcols,
                     const std::vector<std::vector<double> >& c) {
    std::vector<std::vector<int> > z(hl_.size(), std::vector<int>(rk.size()));
    for (std::size_t h = 0; h < hl_.size(); ++h)
      for (std::size_t r = 0; r < rk.size(); ++r) z[h][r] = mdl_.col(0, 1, 0, false);
    // Transport rows: sum_r z[h][r] - sum x(holder layout h) = 0, and for requests.
    for (std::size_t h = 0; h < hl_.size(); ++h) {
      std::vector<int> idx(z[h].begin(), z[h].end());
      std::vector<double> val(idx.size(), 1.0);
      for (int x : hcols_[h]) {
        idx.push_back(x);
        val.push_back(-1.0);
      }
      mdl_.row(idx, val, 'E', 0.0);
    }
    for (std::size_t r = 0; r < rk.size(); ++r) {
      std::vector<int> idx;
      std::vector<double> val;
      for (std::size_t h = 0; h < hl_.size(); ++h) {
        idx.push_back(z[h][r]);
        val.push_back(1.0);
      }
      for (int x : rcols[r]) {
        idx.push_back(x);
        val.push_back(-1.0);
      }
      mdl_.row(idx, val, 'E', 0.0);
    }
    // y >= z, paid once per distinct request.
    for (std::size_t h = 0; h < hl_.size(); ++h)
      for (std::size_t r = 0; r < rk.size(); ++r) {
        if (c[h][r] <= 0) continue;
        auto [it, fresh] = ycol_.try_emplace({h, rk[r]}, 0);
        if (fresh) it->second = mdl_.col(0, 1, c[h][r] * kTimeScale, false);
        mdl_.row({it->second, z[h][r]}, {1.0, -1.0}, 'G', 0.0);
      }
  }

  // Inference: column `act` at least each strategy's working set (its
  // operands other than parameters, sliced on every axis).
  void add_working_sets(int act, std::size_t o) {
    const std::size_t n_axes = ctx_.mesh.size();
    std::vector<int> ai{act};
    std::vector<double> av{1.0};
    for (std::size_t s = 0; s < strat_[o].size(); ++s) {
      double live = 0;
      const OpStrategy& st = strat_[o][s];
      for (std::size_t slot = 0; slot < st.layout.size(); ++slot) {
        const std::size_t nin = flat_.in_off[o + 1] - flat_.in_off[o];
        const ir::TensorId t = slot < nin ? flat_.in_tensor[flat_.in_off[o] + slot]
                                          : flat_.out_tensor[flat_.out_off[o] + slot - nin];
        if (ctx_.g.tensor(t).kind == ir::TensorKind::Parameter) continue;
        std::int64_t div = 1;
        if (n_axes > 0) {
          div = st.divisor[slot][n_axes - 1];
          if (st.layout[slot][n_axes - 1].kind == cost::LayoutKind::Shard)
            div *= ctx_.mesh[n_axes - 1].size;
        }
        live += flat_.bytes[t] / static_cast<double>(div);
      }
      ai.push_back(xcol_[o][s]);
      av.push_back(-live * kByteScale);
    }
    mdl_.row(ai, av, 'G', 0.0);
  }

  // Tensors nobody touches are held whole.
  [[nodiscard]] double fixed_memory() const {
    double fixed = 0;
    for (std::size_t t = 0; t < flat_.holder_op.size(); ++t) {
      if (flat_.holder_op[t] != ir::kNone) continue;
      const ir::Tensor& tensor = ctx_.g.tensor(static_cast<ir::TensorId>(t));
      if (tensor.kind == ir::TensorKind::Parameter ||
          (ctx_.opts.mode == Mode::Train && tensor.kind != ir::TensorKind::Constant))
        fixed += tensor.bytes() * ctx_.held_factor[t];
    }
    return fixed;
  }

  const Context& ctx_;
  const FlatGraph& flat_;
  const std::vector<std::vector<OpStrategy> >& strat_;
  std::vector<std::vector<int> > xcol_;  // x columns of each operator's strategies
  Model mdl_;
  // One tensor on one axis (add_axis): the holder's layouts and their x
  // columns, the distinct requests of its uses, their y columns.
  std::vector<AxisLayout> hl_;
  std::vector<std::vector<int> > hcols_;
  std::vector<Key> keys_;
  std::map<std::pair<std::size_t, std::size_t>, int> ycol_;  // (holder layout, key id)
};

// The objective by the formulation's own account, recomputed from the
// chosen strategies (not CBC's rounded value). Each redistribution is added
// to the total as it is met (tensor_redistribution sums per tensor first,
// which would round differently).
double own_account(const Context& ctx, const FlatGraph& flat,
                   const std::vector<std::vector<OpStrategy> >& strat,
                   const std::vector<std::size_t>& chosen) {
  double obj = 0;
  for (std::size_t o = 0; o < strat.size(); ++o) obj += strat[o][chosen[o]].own;
  std::vector<Key> seen;
  for (std::size_t t = 0; t < flat.holder_op.size(); ++t) {
    const ir::OpId hop = flat.holder_op[t];
    if (hop == ir::kNone) continue;
    const OpStrategy& hs = strat[hop][chosen[hop]];
    for (std::size_t a = 0; a < ctx.mesh.size(); ++a) {
      seen.clear();
      ir::OpId prev = ir::kNone;
      for (std::size_t x = flat.use_off[t]; x < flat.use_off[t + 1]; ++x) {
        const ir::OpId u = flat.uses[x];
        if (u == prev) continue;
        prev = u;
        const OpStrategy& us = strat[u][chosen[u]];
        for (std::size_t j = 0; j < flat.in_off[u + 1] - flat.in_off[u]; ++j) {
          if (flat.in_tensor[flat.in_off[u] + j] != static_cast<ir::TensorId>(t)) continue;
          const Key k{us.layout[j][a], us.divisor[j][a]};
          if (std::find(seen.begin(), seen.end(), k) != seen.end()) continue;
          seen.push_back(k);
          obj += redistribution_seconds(hs.layout[flat.holder_slot[t]][a], k.first,
                                        flat.bytes[t] / static_cast<double>(k.second), ctx.mesh[a],
                                        ctx.opts.cost, ctx.opts.mode);
        }
      }
    }
  }
  return obj;
}

}  // namespace

IlpResult ilp(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
              const Cluster& cluster, const SearchOptions& opts, double budget,
              const std::vector<plan::Plan>& hints, plan::Plan& out) {
  const Context ctx(g, spaces, cluster, opts, budget);
  const FlatGraph flat = flatten(g);
  IlpResult res;
  std::size_t keep_per_op = 0;
  auto cands = candidates(ctx, hints, res, keep_per_op);
  const auto strat = strategies(ctx, cands, keep_per_op, hints, res);

  Program program(ctx, flat, strat);
  program.add_choices();
  program.add_redistributions();
  program.add_memory();
  res.variables = program.columns();
  res.constraints = program.rows();
  CbcModel cbc;
  program.load(cbc.m);
  Cbc_setLogLevel(cbc.m, 0);
  Cbc_setMaximumSeconds(cbc.m, opts.ilp_time_limit_s);
  Cbc_setParameter(cbc.m, "threads", "1");  // deterministic
  // Start from the last hint (rec's plan), whose strategies the candidates hold.
  if (!hints.empty()) program.start_from(cbc.m, hints.back());

  Cbc_solve(cbc.m);
  if (Cbc_isProvenInfeasible(cbc.m) || Cbc_numberSavedSolutions(cbc.m) <= 0) {
    res.found = false;
    res.proven = Cbc_isProvenInfeasible(cbc.m) != 0;
    return res;
  }
  const std::vector<std::size_t> chosen = program.chosen(Cbc_getColSolution(cbc.m));
  out.cuts.assign(strat.size(), {});
  for (std::size_t o = 0; o < strat.size(); ++o) out.cuts[o] = strat[o][chosen[o]].cuts;
  res.found = true;
  res.proven = Cbc_isProvenOptimal(cbc.m) != 0;
  res.lower_bound_s = Cbc_getBestPossibleObjValue(cbc.m) / kTimeScale;
  res.step_time_s = own_account(ctx, flat, strat, chosen);
  return res;
}

#endif

}  // namespace recsearch::search::detail
