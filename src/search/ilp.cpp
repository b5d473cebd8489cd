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


constexpr double kTimeScale = 1e6;   // objective in microseconds
// Fewest candidates per operator ilp runs with when the total is cut down.
constexpr std::size_t kMinKeptPerOperator = 16;
// Legal strategies enumerated in all before the program counts as too large
// (bounds the memory of the enumeration).
constexpr std::size_t kMaxEnumerated = 4'000'000;
constexpr double kByteScale = 1.0 / (1024.0 * 1024.0 * 1024.0);  // memory rows in GiB

// Legal cut vectors of one operator: all of them, or (canonical) only those
// whose choices do not increase within each run of interchangeable axes.
void enumerate(const ir::Graph& g, const algebra::OpSpace& s, ir::OpId o,
               const std::vector<Cut>& mesh, bool canonical, std::size_t cap,
               std::size_t a, std::vector<std::int64_t>& splits, std::vector<std::int16_t>& cuts,
               std::vector<std::vector<std::int16_t>>& out, bool& overflow) {
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
  const bool same_run = canonical && a > 0 && mesh[a - 1].level == mesh[a].level &&
                        mesh[a - 1].size == mesh[a].size;
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

}  // namespace

IlpResult ilp(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
              const Cluster& cluster, const SearchOptions& opts, double budget,
              const std::vector<plan::Plan>& hints, plan::Plan& out) {
  const std::vector<Cut>& mesh = cluster.cuts();
  const std::size_t n_ops = g.num_operators(), n_axes = mesh.size();
  const std::size_t cap = std::max<std::size_t>(opts.ilp_max_strategies, 1);
  const auto pinned = pinned_cuts(g, spaces, mesh);
  IlpResult res;

  // Candidate cut vectors per operator: all legal ones, or the canonical
  // orders when there are more than the cap.
  std::vector<std::vector<std::vector<std::int16_t>>> cands(n_ops);
  std::size_t total = 0, enumerated = 0;
  for (std::size_t o = 0; o < n_ops; ++o) {
    const auto id = static_cast<ir::OpId>(o);
    auto& cand = cands[o];
    if (!pinned[o].empty()) {
      cand.push_back(pinned[o]);
    } else {
      bool overflow = false;
      std::vector<std::int64_t> splits(spaces[o].loops.size(), 1);
      std::vector<std::int16_t> cuts;
      enumerate(g, spaces[o], id, mesh, false, cap, 0, splits, cuts, cand, overflow);
      if (overflow) {
        res.restricted = true;
        cand.clear();
        overflow = false;
        enumerate(g, spaces[o], id, mesh, true, 64 * cap, 0, splits, cuts, cand, overflow);
        if (overflow)
          throw Error(Errc::kUsage, "ilp: operator '" + g.op(id).name + "' has more than " +
                                        std::to_string(64 * cap) +
                                        " candidate strategies even in canonical axis order; "
                                        "the integer program would be too large for this mesh");
      }
      for (const auto& h : hints)
        if (std::find(cand.begin(), cand.end(), h.cuts[o]) == cand.end()) cand.push_back(h.cuts[o]);
    }
    total += std::min(cand.size(), cap);
    enumerated += cand.size();
    if (enumerated > kMaxEnumerated)
      throw Error(Errc::kUsage, "ilp: more than " + std::to_string(kMaxEnumerated) +
                                    " legal strategies over the first " + std::to_string(o + 1) +
                                    " of " + std::to_string(n_ops) +
                                    " operators; the integer program would be too large");
  }
  // Past the total, keep fewer per operator rather than give up, down to a floor.
  std::size_t keep_per_op = cap;
  if (total > opts.ilp_max_total_strategies) {
    keep_per_op = opts.ilp_max_total_strategies / std::max<std::size_t>(n_ops, 1);
    if (keep_per_op < kMinKeptPerOperator)
      throw Error(Errc::kUsage, "ilp: " + std::to_string(total) + " candidate strategies over " +
                                    std::to_string(n_ops) + " operators, more than " +
                                    std::to_string(opts.ilp_max_total_strategies) +
                                    " in all even at " + std::to_string(kMinKeptPerOperator) +
                                    " per operator; the integer program would be too large");
  }

  std::vector<std::vector<OpStrategy>> strat(n_ops);
  for (std::size_t o = 0; o < n_ops; ++o) {
    const auto id = static_cast<ir::OpId>(o);
    std::vector<OpStrategy> list;
    list.reserve(cands[o].size());
    for (const auto& c : cands[o]) list.push_back(make_strategy(g, spaces, cluster, opts, id, c));
    std::vector<std::vector<std::int16_t>>().swap(cands[o]);
    if (list.size() > keep_per_op) {
      res.restricted = true;
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
      list = std::move(kept);
    }
    strat[o] = std::move(list);
  }
  res.strategies = 0;
  for (const auto& l : strat) res.strategies += l.size();

  Model mdl;

  // x columns and one-choice rows.
  std::vector<std::vector<int>> xcol(n_ops);
  for (std::size_t o = 0; o < n_ops; ++o) {
    std::vector<int> idx;
    for (const auto& s : strat[o]) {
      idx.push_back(mdl.col(0, 1, s.own * kTimeScale, true));
      xcol[o].push_back(idx.back());
    }
    mdl.row(idx, std::vector<double>(idx.size(), 1.0), 'E', 1.0);
  }

  // Redistributions.
  const auto holder = tensor_holders(g);
  for (std::size_t t = 0; t < g.num_tensors(); ++t) {
    const auto [hop, hslot] = holder[t];
    if (hop == ir::kNone) continue;
    const ir::Tensor& tensor = g.tensor(static_cast<ir::TensorId>(t));
    // Uses: (op, input slot), each op once per slot.
    std::vector<std::pair<ir::OpId, std::size_t>> uses;
    ir::OpId prev = ir::kNone;
    for (ir::OpId u : tensor.consumers) {
      if (u == prev) continue;
      prev = u;
      const auto& ins = g.op(u).inputs;
      for (std::size_t j = 0; j < ins.size(); ++j)
        if (ins[j] == static_cast<ir::TensorId>(t)) uses.emplace_back(u, j);
    }
    for (std::size_t a = 0; a < n_axes; ++a) {
      // Holder layouts and their x columns.
      std::vector<AxisLayout> hl;
      std::vector<std::vector<int>> hcols;
      for (std::size_t s = 0; s < strat[hop].size(); ++s) {
        const AxisLayout l = strat[hop][s].layout[hslot][a];
        auto it = std::find(hl.begin(), hl.end(), l);
        if (it == hl.end()) {
          hl.push_back(l);
          hcols.emplace_back();
          it = hl.end() - 1;
        }
        hcols[static_cast<std::size_t>(it - hl.begin())].push_back(xcol[hop][s]);
      }
      std::map<std::pair<std::size_t, std::size_t>, int> ycol;  // (holder layout, key id)
      std::vector<Key> keys;
      for (const auto& [u, j] : uses) {
        std::vector<std::size_t> rk;  // key ids of this use
        std::vector<std::vector<int>> rcols;
        for (std::size_t s = 0; s < strat[u].size(); ++s) {
          const Key k{strat[u][s].layout[j][a], strat[u][s].divisor[j][a]};
          auto it = std::find(keys.begin(), keys.end(), k);
          if (it == keys.end()) {
            keys.push_back(k);
            it = keys.end() - 1;
          }
          const auto kid = static_cast<std::size_t>(it - keys.begin());
          auto r = std::find(rk.begin(), rk.end(), kid);
          if (r == rk.end()) {
            rk.push_back(kid);
            rcols.emplace_back();
            r = rk.end() - 1;
          }
          rcols[static_cast<std::size_t>(r - rk.begin())].push_back(xcol[u][s]);
        }
        // Costs of every (holder layout, request); nothing to model when all are free.
        std::vector<std::vector<double>> c(hl.size(), std::vector<double>(rk.size()));
        bool any = false;
        for (std::size_t h = 0; h < hl.size(); ++h)
          for (std::size_t r = 0; r < rk.size(); ++r) {
            const Key& k = keys[rk[r]];
            c[h][r] = redistribution_seconds(hl[h], k.first,
                                             tensor.bytes() / static_cast<double>(k.second),
                                             mesh[a], opts.cost, opts.mode);
            any = any || c[h][r] > 0;
          }
        if (!any) continue;
        std::vector<std::vector<int>> z(hl.size(), std::vector<int>(rk.size()));
        for (std::size_t h = 0; h < hl.size(); ++h)
          for (std::size_t r = 0; r < rk.size(); ++r) z[h][r] = mdl.col(0, 1, 0, false);
        // Transport rows: sum_r z[h][r] - sum x(holder layout h) = 0, and for requests.
        for (std::size_t h = 0; h < hl.size(); ++h) {
          std::vector<int> idx(z[h].begin(), z[h].end());
          std::vector<double> val(idx.size(), 1.0);
          for (int x : hcols[h]) {
            idx.push_back(x);
            val.push_back(-1.0);
          }
          mdl.row(idx, val, 'E', 0.0);
        }
        for (std::size_t r = 0; r < rk.size(); ++r) {
          std::vector<int> idx;
          std::vector<double> val;
          for (std::size_t h = 0; h < hl.size(); ++h) {
            idx.push_back(z[h][r]);
            val.push_back(1.0);
          }
          for (int x : rcols[r]) {
            idx.push_back(x);
            val.push_back(-1.0);
          }
          mdl.row(idx, val, 'E', 0.0);
        }
        // y >= z, paid once per distinct request.
        for (std::size_t h = 0; h < hl.size(); ++h)
          for (std::size_t r = 0; r < rk.size(); ++r) {
            if (c[h][r] <= 0) continue;
            auto [it, fresh] = ycol.try_emplace({h, rk[r]}, 0);
            if (fresh) it->second = mdl.col(0, 1, c[h][r] * kTimeScale, false);
            mdl.row({it->second, z[h][r]}, {1.0, -1.0}, 'G', 0.0);
          }
      }
    }
  }

  // Memory.
  const double psf = cost::parameter_state_factor(opts.cost, opts.mode);
  double fixed = 0;  // tensors nobody touches are held whole
  for (std::size_t t = 0; t < g.num_tensors(); ++t) {
    if (holder[t].first != ir::kNone) continue;
    const ir::Tensor& tensor = g.tensor(static_cast<ir::TensorId>(t));
    if (tensor.kind == ir::TensorKind::Parameter) fixed += tensor.bytes() * psf;
    else if (opts.mode == Mode::Train && tensor.kind != ir::TensorKind::Constant)
      fixed += tensor.bytes();
  }
  {
    std::vector<int> idx;
    std::vector<double> val;
    for (std::size_t o = 0; o < n_ops; ++o)
      for (std::size_t s = 0; s < strat[o].size(); ++s)
        if (strat[o][s].mem > 0) {
          idx.push_back(xcol[o][s]);
          val.push_back(strat[o][s].mem * kByteScale);
        }
    int act = -1;
    if (opts.mode == Mode::Infer) {
      act = mdl.col(0, std::numeric_limits<double>::max(), 0, false);
      idx.push_back(act);
      val.push_back(1.0);
      for (std::size_t o = 0; o < n_ops; ++o) {
        const ir::Operator& op = g.op(static_cast<ir::OpId>(o));
        std::vector<int> ai{act};
        std::vector<double> av{1.0};
        for (std::size_t s = 0; s < strat[o].size(); ++s) {
          double live = 0;
          const OpStrategy& st = strat[o][s];
          for (std::size_t slot = 0; slot < st.layout.size(); ++slot) {
            const ir::TensorId t = slot < op.inputs.size() ? op.inputs[slot]
                                                           : op.outputs[slot - op.inputs.size()];
            const ir::Tensor& tensor = g.tensor(t);
            if (tensor.kind == ir::TensorKind::Parameter) continue;
            std::int64_t div = 1;
            if (n_axes > 0) {
              div = st.divisor[slot][n_axes - 1];
              if (st.layout[slot][n_axes - 1].kind == cost::LayoutKind::Shard)
                div *= mesh[n_axes - 1].size;
            }
            live += tensor.bytes() / static_cast<double>(div);
          }
          ai.push_back(xcol[o][s]);
          av.push_back(-live * kByteScale);
        }
        mdl.row(ai, av, 'G', 0.0);
      }
    }
    if (!idx.empty()) mdl.row(idx, val, 'L', (budget - fixed) * kByteScale);
  }
  res.variables = static_cast<std::size_t>(mdl.cols);
  res.constraints = static_cast<std::size_t>(mdl.rows);
  CbcModel cbc;
  mdl.load(cbc.m);
  Cbc_setLogLevel(cbc.m, 0);
  Cbc_setMaximumSeconds(cbc.m, opts.ilp_time_limit_s);
  Cbc_setParameter(cbc.m, "threads", "1");  // deterministic

  // Start from the first hint that the candidates hold (rec's plan).
  if (!hints.empty()) {
    std::vector<int> idx;
    std::vector<double> val;
    const plan::Plan& h = hints.back();
    for (std::size_t o = 0; o < n_ops; ++o)
      for (std::size_t s = 0; s < strat[o].size(); ++s) {
        idx.push_back(xcol[o][s]);
        val.push_back(strat[o][s].cuts == h.cuts[o] ? 1.0 : 0.0);
      }
    Cbc_setMIPStartI(cbc.m, static_cast<int>(idx.size()), idx.data(), val.data());
  }

  Cbc_solve(cbc.m);
  if (Cbc_isProvenInfeasible(cbc.m) || Cbc_numberSavedSolutions(cbc.m) <= 0) {
    res.found = false;
    res.proven = Cbc_isProvenInfeasible(cbc.m) != 0;
    return res;
  }
  const double* sol = Cbc_getColSolution(cbc.m);
  out.cuts.assign(n_ops, {});
  std::vector<int> chosen(n_ops, 0);
  for (std::size_t o = 0; o < n_ops; ++o) {
    std::size_t best = 0;
    for (std::size_t s = 1; s < strat[o].size(); ++s)
      if (sol[xcol[o][s]] > sol[xcol[o][best]]) best = s;
    chosen[o] = static_cast<int>(best);
    out.cuts[o] = strat[o][best].cuts;
  }
  res.found = true;
  res.proven = Cbc_isProvenOptimal(cbc.m) != 0;
  res.lower_bound_s = Cbc_getBestPossibleObjValue(cbc.m) / kTimeScale;
  // The objective by this formulation's own account, recomputed from the
  // chosen strategies (not CBC's rounded value).
  double obj = 0;
  for (std::size_t o = 0; o < n_ops; ++o) obj += strat[o][static_cast<std::size_t>(chosen[o])].own;
  for (std::size_t t = 0; t < g.num_tensors(); ++t) {
    const auto [hop, hslot] = holder[t];
    if (hop == ir::kNone) continue;
    const ir::Tensor& tensor = g.tensor(static_cast<ir::TensorId>(t));
    const OpStrategy& hs = strat[hop][static_cast<std::size_t>(chosen[hop])];
    for (std::size_t a = 0; a < n_axes; ++a) {
      std::vector<Key> seen;
      ir::OpId prev = ir::kNone;
      for (ir::OpId u : tensor.consumers) {
        if (u == prev) continue;
        prev = u;
        const OpStrategy& us = strat[u][static_cast<std::size_t>(chosen[u])];
        const auto& ins = g.op(u).inputs;
        for (std::size_t j = 0; j < ins.size(); ++j) {
          if (ins[j] != static_cast<ir::TensorId>(t)) continue;
          const Key k{us.layout[j][a], us.divisor[j][a]};
          if (std::find(seen.begin(), seen.end(), k) != seen.end()) continue;
          seen.push_back(k);
          obj += redistribution_seconds(hs.layout[hslot][a], k.first,
                                        tensor.bytes() / static_cast<double>(k.second), mesh[a],
                                        opts.cost, opts.mode);
        }
      }
    }
  }
  res.step_time_s = obj;
  return res;
}

#endif

}  // namespace recsearch::search::detail
