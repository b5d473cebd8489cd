// SPDX-License-Identifier: Apache-2.0
// The double-recursive symbolic search.
//
// Recursion 1 walks the cut schedule (one pass per prime cut, outermost
// level first): both halves of a symmetric cut take the same decision, so
// log N passes suffice. Recursion 2, inside one pass, decides every
// operator's choice (a loop to cut, or none) by its own cost plus the
// redistributions it causes against the neighbours already decided:
//
//  * Growth. The heaviest operator — weight is the spread of its candidate
//    costs, i.e. how much its choice matters — seeds a region; the region
//    then grows by always deciding the heaviest operator adjacent to it
//    (Prim-like), so every decision but a seed's is taken against a decided
//    neighbour.
//  * Refinement. With all neighbours decided, operators reconsider in id
//    order; later sweeps revisit only the neighbours of operators that
//    changed.
//  * Starts. Growth can settle a whole network into a region that is only
//    locally good (everything replicated around one tensor-parallel
//    projection; cuts on a network too small to pay for any collective), so
//    each pass also considers three fixed starts — every operator on its
//    batch loop, every operator replicated, every operator on its
//    Megatron-style tensor-parallel loop (column then row) — refines those
//    that are not far behind, and keeps the assignment its objective
//    prefers. The expert plans are thus among what each pass weighs.
//  * Region moves. Finally the heaviest operators try each other candidate
//    together with the best responses of the operators around it, so that a
//    chain that only pays off when changed as a whole can change.
//
// Redistributions are counted as the evaluator counts them: per tensor,
// each distinct request (layout, slice) of its uses turned from the holder's
// layout. The bookkept total therefore equals plan::evaluate's step time,
// which the tests check. Each pass is O(V log V + E): one sort, then a
// bounded number of visits per operator, each looking at its own tensors.
#include <oneapi/tbb/info.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/parallel_sort.h>
#include <oneapi/tbb/task_arena.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <queue>
#include <span>

#include "recsearch/ir/gradients.hpp"
#include "search/common.hpp"
#include "search/flat_graph.hpp"

namespace recsearch::search::detail {
namespace {

using cost::AxisLayout;
using cost::LayoutKind;

// A distinct request for a tensor on the current axis: a layout wanted by
// some use, and the divisor of that use's slice.
struct Want {
  AxisLayout layout;
  std::uint32_t uses;  // decided uses making this request
  std::int64_t divisor;
  double slice_bytes;  // the tensor's bytes / divisor, kept: edge_cost reads it millions of times
};

// Refinement sweeps per start; the second and later only revisit operators
// next to a change.
constexpr int kRefineSweeps = 3;

// Region attempts per pass (region_sweep; the depth and size of one region
// are polish's too, common.hpp): at least this many, or one per 16
// operators if that is more.
constexpr std::size_t kRegionMinAttempts = 8192;

// Tensor flags.
constexpr std::uint8_t kParameter = 2;

// Fixed starts of each pass besides growth: every operator on its batch
// loop, every operator replicated, every operator on its Megatron-style
// tensor-parallel loop (search/megatron.cpp).
constexpr int kStarts = 3;

// Extra starts are refined only when their unrefined objective is within
// this factor of the best refined one.
constexpr double kStartSlack = 1.5;

// Redistribution seconds on one axis as bytes * per_byte + fixed, by the
// kind of change (cost::redistribution_steps summed with its duals), set up
// once per pass: the search asks for these costs millions of times.
class RedistTable {
 public:
  void set(const Cut& cut, const CostParams& p, Mode mode) {
    nonnegative_ = true;
    for (int f = 0; f < 3; ++f)
      for (int t = 0; t < 3; ++t)
        for (int same = 0; same < 2; ++same) {
          const auto lay = [&](int kind, int dim) {
            return kind == 1   ? AxisLayout::shard(dim)
                   : kind == 2 ? AxisLayout::partial()
                               : AxisLayout::replicate();
          };
          const AxisLayout from = lay(f, 0), to = lay(t, same ? 0 : 1);
          // Seconds are affine in bytes: sample at 0 and 1 byte.
          const double at0 = redistribution_seconds(from, to, 0.0, cut, p, mode);
          const double at1 = redistribution_seconds(from, to, 1.0, cut, p, mode);
          fixed_[f][t][same] = at0;
          per_byte_[f][t][same] = at1 - at0;
          nonnegative_ = nonnegative_ && at0 >= 0 && at1 - at0 >= 0;
        }
  }
  // Whether no redistribution can cost less than nothing (a user's cost
  // model could make one): choose's pruning relies on it.
  [[nodiscard]] bool nonnegative() const noexcept { return nonnegative_; }
  [[nodiscard]] double seconds(AxisLayout from, AxisLayout to, double bytes) const {
    const int f = static_cast<int>(from.kind), t = static_cast<int>(to.kind);
    const int same = from.dim == to.dim ? 1 : 0;
    return fixed_[f][t][same] + per_byte_[f][t][same] * bytes;
  }

 private:
  double fixed_[3][3][2] = {};
  double per_byte_[3][3][2] = {};
  bool nonnegative_ = true;
};

// What a cut saved in this pass is worth at the end of the schedule: its
// compute and its memory divided by these (see own_cost).
struct Discount {
  double compute = 1;
  double memory = 1;
};

class RecSearch {
 public:
  RecSearch(const Context& ctx, double lambda, const std::vector<double>* weights)
      : ctx_(ctx), lambda_(lambda), flat_(flatten(ctx.g)), training_(ctx_.training) {
    size_operators();
    size_tensors(weights);
    set_loop_gcds();
  }

  double run(plan::Plan& out, int rung) {
    rung_ = rung;
    const auto& mesh = ctx_.mesh;
    const std::size_t nops = ctx_.g.num_operators();
    out.cuts.assign(nops, std::vector<std::int16_t>(mesh.size(), plan::kReplicated));
    const auto pinned = pinned_cuts(ctx_.g, ctx_.spaces, mesh);
    const std::vector<int> tp = tensor_parallel_loops(ctx_.g, ctx_.spaces, pinned);

    std::vector<double> weight(nops);
    std::vector<ir::OpId> order(nops);
    // Choices as indices into each operator's candidates.
    std::vector<std::uint16_t> choice(nops), alt(nops);
    double comm_total = 0;

    // More workers than the machine has only makes oneTBB warn; the plan is
    // the same for any count, so the request is capped.
    const int hw = tbb::info::default_concurrency();
    tbb::task_arena arena(ctx_.opts.threads > 0 ? std::min(ctx_.opts.threads, hw) : hw);
    for (std::size_t a = 0; a < mesh.size(); ++a) {
      const Cut& cut = mesh[a];
      if (ctx_.opts.on_progress) ctx_.opts.on_progress(rung_, a, mesh.size());
      redist_.set(cut, ctx_.opts.cost, ctx_.opts.mode);
      rest_ = 1;
      for (std::size_t b = a + 1; b < mesh.size(); ++b) rest_ *= mesh[b].size;
      set_discounts();

      // Candidates and their own costs depend only on the state at the
      // start of the pass: computed once, in parallel.
      arena.execute([&] {
        tbb::parallel_for(tbb::blocked_range<std::size_t>(0, nops, 512), [&](const auto& r) {
          std::vector<std::int16_t> c;
          for (std::size_t o = r.begin(); o != r.end(); ++o)
            weight[o] = set_candidates(static_cast<ir::OpId>(o), pinned[o], a, cut, c);
        });
      });
      std::iota(order.begin(), order.end(), 0);
      const Heavier heavier{weight};
      arena.execute([&] { tbb::parallel_sort(order.begin(), order.end(), heavier); });

      decide_pass(order, heavier, tp, choice, alt);
      comm_total += pass_communication(choice);
      // Slices shrink only after the pass: every decision of this pass saw
      // the slices as they were before the cut.
      for (std::size_t o = 0; o < nops; ++o) {
        const std::int16_t c = cands_[cand_off_[o] + choice[o]];
        apply(static_cast<ir::OpId>(o), choice[o], c, cut.size);
        out.cuts[o][a] = c;
      }
    }

    double compute_total = 0;
    for (std::size_t o = 0; o < nops; ++o) compute_total += final_compute(static_cast<ir::OpId>(o));
    return compute_total + comm_total;
  }

 private:
  // A total order (weight, then id) keeps the result independent of threads.
  struct Heavier {
    const std::vector<double>& weight;
    bool operator()(ir::OpId x, ir::OpId y) const {
      return weight[x] != weight[y] ? weight[x] > weight[y] : x < y;
    }
  };

  // This pass's candidates of operator o on axis a (its pinned cut, else
  // kReplicated and every loop that can take the cut), their layouts and
  // their own costs; returns o's weight, the spread of those costs. `c` is
  // scratch.
  double set_candidates(ir::OpId o, const std::vector<std::int16_t>& pinned, std::size_t a,
                        const Cut& cut, std::vector<std::int16_t>& c) {
    if (!pinned.empty()) {
      c.assign(1, pinned[a]);
    } else {
      // legal_choices, from the per-loop gcds.
      c.assign(1, plan::kReplicated);
      for (std::size_t l = loop_off_[o]; l < loop_off_[o + 1]; ++l)
        if (loop_gcd_[l] > 0 && loop_gcd_[l] % (splits_[l] * cut.size) == 0)
          c.push_back(static_cast<std::int16_t>(l - loop_off_[o]));
    }
    n_cands_[o] = static_cast<std::uint16_t>(c.size());
    double lo = std::numeric_limits<double>::infinity(), hi = -lo;
    for (std::size_t i = 0; i < c.size(); ++i) {
      const std::size_t at = cand_off_[o] + i;
      cands_[at] = c[i];
      fill_layouts(o, i, c[i]);
      own_[at] = op_w_[o] * own_cost(o, i, c[i], cut, &own_comm_[at]);
      own_comm_[at] *= op_w_[o];
      lo = std::min(lo, own_[at]);
      hi = std::max(hi, own_[at]);
    }
    std::uint16_t* order = by_own_.data() + cand_off_[o];
    std::iota(order, order + c.size(), std::uint16_t{0});
    const double* own = own_.data() + cand_off_[o];
    std::stable_sort(order, order + c.size(),
                     [own](std::uint16_t x, std::uint16_t y) { return own[x] < own[y]; });
    return hi - lo;
  }

  // Recursion 2 on one axis: growth and refinement, then the fixed starts,
  // then region moves (see the file comment). Leaves `choice` decided, with
  // its uses recorded; `alt` is scratch.
  void decide_pass(const std::vector<ir::OpId>& order, const Heavier& heavier,
                   const std::vector<int>& tp, std::vector<std::uint16_t>& choice,
                   std::vector<std::uint16_t>& alt) {
    clear_uses();
    grow(order, heavier, choice);
    refine(choice);
    double best_obj = pass_objective(choice);
    // The recorded uses are those of choice, or of alt when alt_recorded.
    bool alt_recorded = false;
    for (int start = 0; start < kStarts; ++start) {
      const bool replicated = start == 1;
      double obj0 = set_start(start, tp, alt);
      // All-replicated moves nothing: its objective is its own costs.
      if (!replicated) {
        record_all(alt);
        alt_recorded = true;
        obj0 = pass_objective(alt);
      }
      // A start far behind before refinement is not refined: refinement
      // moves one operator at a time and rarely closes such a gap, and
      // skipping it keeps big graphs fast.
      if (obj0 > kStartSlack * best_obj) continue;
      if (replicated) {
        record_all(alt);
        alt_recorded = true;
      }
      refine(alt);
      const double obj = pass_objective(alt);
      if (obj < best_obj) {
        best_obj = obj;
        choice.swap(alt);
        alt_recorded = false;  // the recorded uses now belong to choice
      }
    }
    if (alt_recorded) record_all(choice);
    region_sweep(order, choice);
  }

  // Fixed start `start` into alt (0: every operator on its batch loop, 1:
  // replicated, 2: on its tensor-parallel loop `tp`), where a candidate;
  // returns the sum of the own costs.
  double set_start(int start, const std::vector<int>& tp, std::vector<std::uint16_t>& alt) const {
    double own = 0;
    for (std::size_t o = 0; o < alt.size(); ++o) {
      const int want = start == 1                    ? plan::kReplicated
                       : start == 0                  ? batch_[o]
                       : tp[o] == algebra::kUnmapped ? plan::kReplicated
                                                     : tp[o];
      alt[o] = 0;
      for (std::uint16_t i = 0; i < n_cands_[o]; ++i)
        if (cands_[cand_off_[o] + i] == want) alt[o] = i;
      own += own_[cand_off_[o] + alt[o]];
    }
    return own;
  }

  // Offsets of each operator's loops, candidates and candidate layouts, and
  // the per-operator state sized from them.
  void size_operators() {
    const std::size_t nops = ctx_.g.num_operators();
    loop_off_.resize(nops + 1);
    cand_off_.resize(nops + 1);
    lay_off_.resize(nops + 1);
    for (std::size_t o = 0; o < nops; ++o) {
      const std::size_t loops = ctx_.spaces[o].loops.size();
      const std::size_t slots =
          flat_.in_off[o + 1] - flat_.in_off[o] + flat_.out_off[o + 1] - flat_.out_off[o];
      loop_off_[o + 1] = loop_off_[o] + loops;
      cand_off_[o + 1] = cand_off_[o] + loops + 1;
      lay_off_[o + 1] = lay_off_[o] + (loops + 1) * slots;
    }
    layouts_.resize(lay_off_[nops]);
    splits_.assign(loop_off_[nops], 1);
    in_div_.assign(flat_.in_off[nops], 1);
    out_div_.assign(flat_.out_off[nops], 1);
    cands_.assign(cand_off_[nops], plan::kReplicated);
    n_cands_.assign(nops, 0);
    own_.assign(cand_off_[nops], 0.0);
    by_own_.assign(cand_off_[nops], 0);
    own_comm_.assign(cand_off_[nops], 0.0);
    flag_.assign(nops, 0);
    touched_.assign(nops, 0);
    // The batch as data parallelism follows it (through transposes and
    // merge regions), so that the batch start is that baseline's plan.
    batch_ = data_parallel_loops(ctx_.g, ctx_.spaces);
  }

  // Tensor flags, request lists, and the multiplicities (folded graphs): an
  // operator's costs count w times, and so do those of the tensors it holds.
  void size_tensors(const std::vector<double>* weights) {
    const std::size_t nops = ctx_.g.num_operators(), nt = ctx_.g.num_tensors();
    tensor_flags_.resize(nt);
    for (std::size_t t = 0; t < nt; ++t) {
      const ir::Tensor& tensor = ctx_.g.tensor(static_cast<ir::TensorId>(t));
      tensor_flags_[t] = tensor.kind == ir::TensorKind::Parameter ? kParameter : 0;
    }
    in_grad_.assign(flat_.in_tensor.size(), 0);
    if (!ctx_.rules.grads.empty()) {
      for (std::size_t o = 0; o < nops; ++o) {
        const ir::Operator& op = ctx_.g.op(static_cast<ir::OpId>(o));
        for (std::size_t j = 0; j < op.inputs.size(); ++j)
          in_grad_[flat_.in_off[o] + j] =
              ir::input_takes_gradient(ctx_.g, ctx_.rules.grads, op, j) ? 1 : 0;
      }
    }
    wants_.resize(flat_.use_off[nt]);
    want_count_.assign(nt, 0);
    holder_decided_.assign(nt, 0);
    holder_layout_.assign(nt, AxisLayout{});
    op_w_.assign(nops, 1.0);
    if (weights != nullptr) op_w_ = *weights;
    tensor_w_.assign(nt, 1.0);
    for (std::size_t t = 0; t < nt; ++t)
      if (flat_.holder_op[t] != ir::kNone) tensor_w_[t] = op_w_[flat_.holder_op[t]];
  }

  // A loop can take a further cut of k when splits*k divides the loop and
  // every operand dim mapped to it (algebra::can_cut), i.e. divides their
  // gcd: kept per loop, 0 where the search may never cut.
  void set_loop_gcds() {
    const ir::Graph& g = ctx_.g;
    loop_gcd_.assign(loop_off_.back(), 0);
    for (std::size_t o = 0; o < g.num_operators(); ++o) {
      const ir::Operator& op = g.op(static_cast<ir::OpId>(o));
      const algebra::OpSpace& s = ctx_.spaces[o];
      for (std::size_t l = 0; l < s.loops.size(); ++l) {
        if (!loop_allowed(op, s, static_cast<int>(l))) continue;
        std::int64_t gcd = s.loops[l].size;
        auto fold = [&](const std::vector<ir::TensorId>& ts, const algebra::OperandLoops& maps) {
          for (std::size_t j = 0; j < ts.size(); ++j)
            for (std::size_t d = 0; d < maps[j].size(); ++d)
              if (maps[j][d] == static_cast<int>(l)) {
                const std::int64_t dim = g.tensor(ts[j]).shape[d];
                gcd = dim == 0 || gcd == 0 ? 0 : std::gcd(gcd, dim);
              }
        };
        fold(op.inputs, s.inputs);
        fold(op.outputs, s.outputs);
        loop_gcd_[loop_off_[o] + l] = gcd;
      }
    }
  }
  std::span<const int> in_dims(ir::OpId o, std::size_t j) const { return ctx_.spaces[o].inputs[j]; }
  std::span<const int> out_dims(ir::OpId o, std::size_t j) const {
    return ctx_.spaces[o].outputs[j];
  }

  // Growth: seeds by weight, then the heaviest operator next to a decided
  // one (see the file comment).
  template <class Heavier>
  void grow(const std::vector<ir::OpId>& order, Heavier heavier,
            std::vector<std::uint16_t>& choice) {
    const std::size_t nops = order.size();
    std::fill(flag_.begin(), flag_.end(), 0);  // flag_: queued
    auto lighter = [&](ir::OpId x, ir::OpId y) { return heavier(y, x); };
    std::priority_queue<ir::OpId, std::vector<ir::OpId>, decltype(lighter)> frontier(lighter);
    std::size_t next_seed = 0;
    for (std::size_t visited = 0; visited < nops; ++visited) {
      ir::OpId o;
      if (frontier.empty()) {
        while (flag_[order[next_seed]]) ++next_seed;
        o = order[next_seed];
        flag_[o] = 1;
      } else {
        o = frontier.top();
        frontier.pop();
      }
      choice[o] = choose(o, 0, false);
      change_uses(o, choice[o], +1);
      for_each_neighbour(o, [&](ir::OpId n) {
        if (!flag_[n]) {
          flag_[n] = 1;
          frontier.push(n);
        }
      });
    }
  }

  // Refinement sweeps in id order — neighbours in the graph are mostly
  // neighbours in memory; later sweeps revisit only operators next to a
  // change. Each move lowers the pass objective.
  void refine(std::vector<std::uint16_t>& choice) {
    std::fill(flag_.begin(), flag_.end(), 1);  // flag_: needs a look
    for (int sweep = 0; sweep < kRefineSweeps; ++sweep) {
      bool changed = false;
      for (ir::OpId o = 0; o < choice.size(); ++o) {
        if (!flag_[o]) continue;
        flag_[o] = 0;
        if (n_cands_[o] < 2) continue;
        change_uses(o, choice[o], -1);
        const std::uint16_t c = choose(o, choice[o], true);
        change_uses(o, c, +1);
        if (c != choice[o]) {
          changed = true;
          choice[o] = c;
          for_each_neighbour(o, [&](ir::OpId n) { flag_[n] = 1; });
          for_each_coupled(o, [&](ir::OpId n) { flag_[n] = 1; });
        }
      }
      if (!changed) break;
    }
  }

  // Region moves: single-operator moves cannot leave a state in which a
  // whole chain would have to change together (a projection and the
  // elementwise operators after it cut on one more dim costs a
  // redistribution at every step of the way, and nothing at the end). For
  // each operator and each other candidate, set it, let the operators
  // around it (breadth first, up to kRegionDepth hops and kRegionOps
  // operators) take their best response, and keep the region if the pass
  // objective fell; otherwise undo it.
  //
  // Operators are tried heaviest first, within a budget of attempts
  // (small graphs: every operator; 10^5 operators: about the heaviest
  // sixteenth), so the pass stays linear with a small constant.
  void region_sweep(const std::vector<ir::OpId>& order, std::vector<std::uint16_t>& choice) {
    bool any = false;
    std::size_t budget = std::max(kRegionMinAttempts, order.size() / 16);
    for (ir::OpId o : order) {
      if (n_cands_[o] < 2) continue;
      const std::uint16_t current = choice[o];
      for (std::uint16_t i = 0; i < n_cands_[o] && budget > 0; ++i) {
        if (i == current) continue;
        --budget;
        if (region_move(o, i, choice)) {
          any = true;
          break;
        }
      }
      if (budget == 0) break;
    }
    if (any) refine(choice);
  }

  bool region_move(ir::OpId o, std::uint16_t to, std::vector<std::uint16_t>& choice) {
    moved_.clear();
    region_.clear();
    // Only operators across a tensor whose layout the move changed can
    // have a new best response worth following.
    auto enqueue = [&](ir::OpId n, std::uint16_t from, int depth) {
      if (depth >= kRegionDepth) return;
      for_each_neighbour_changed(n, from, choice[n], [&](ir::OpId m) {
        for (const RegionOp& r : region_)
          if (r.op == m) return;
        region_.push_back({m, depth + 1, 0});
      });
    };
    const std::uint16_t first = choice[o];
    double delta = region_step(o, to, choice);
    region_.push_back({o, 0, 0});
    enqueue(o, first, 0);
    for (std::size_t head = 1; head < region_.size() && moved_.size() < kRegionOps; ++head) {
      const ir::OpId n = region_[head].op;
      if (n_cands_[n] < 2) continue;
      region_[head].seen = clock_;
      const std::uint16_t b = respond(n, choice);
      if (b == choice[n]) continue;
      const std::uint16_t was = choice[n];
      delta += region_step(n, b, choice);
      enqueue(n, was, region_[head].depth);
    }
    // Responses were taken in breadth-first order; one more round lets the
    // early ones answer the later ones. An operator nothing around has
    // changed since its response would give the same one: it is skipped.
    for (std::size_t x = 1; x < region_.size(); ++x) {
      const ir::OpId n = region_[x].op;
      if (n_cands_[n] < 2) continue;
      if (region_[x].seen != 0 && touched_[n] <= region_[x].seen) continue;
      region_[x].seen = clock_;
      const std::uint16_t b = respond(n, choice);
      if (b != choice[n]) delta += region_step(n, b, choice);
    }
    if (delta < 0) return true;
    for (std::size_t x = moved_.size(); x-- > 0;) {
      const auto [op, old] = moved_[x];
      change_uses(op, choice[op], -1);
      change_uses(op, old, +1);
      choice[op] = old;
    }
    return false;
  }

  // o's best response to the recorded uses (its own withdrawn meanwhile).
  std::uint16_t respond(ir::OpId o, const std::vector<std::uint16_t>& choice) {
    change_uses(o, choice[o], -1);
    const std::uint16_t b = choose(o, choice[o], true);
    change_uses(o, choice[o], +1);
    return b;
  }

  // move() inside a region: also stamps every operator whose edge costs
  // the move can change, i.e. every other use and the holder of each
  // tensor whose layout it changed (for_each_neighbour_changed plus the
  // co-readers for_each_coupled stands for).
  double region_step(ir::OpId o, std::uint16_t to, std::vector<std::uint16_t>& choice) {
    const std::uint16_t from = choice[o];
    const double d = move(o, to, choice);
    ++clock_;
    // o's own best response does not depend on its choice.
    const auto touch = [&](ir::OpId n) {
      if (n != o && n != ir::kNone) touched_[n] = clock_;
    };
    for_each_changed_tensor(o, from, to, [&](ir::TensorId t, std::size_t) {
      touch(flat_.holder_op[t]);
      for (std::size_t u = flat_.use_off[t]; u < flat_.use_off[t + 1]; ++u) touch(flat_.uses[u]);
    });
    return d;
  }

  // Sets o to candidate `to` and returns the change of the pass objective
  // (o's own cost and the redistributions of its tensors).
  double move(ir::OpId o, std::uint16_t to, std::vector<std::uint16_t>& choice) {
    const std::uint16_t from = choice[o];
    change_uses(o, from, -1);
    const double before = own_[cand_off_[o] + from] + edge_cost(o, from);
    const double after = own_[cand_off_[o] + to] + edge_cost(o, to);
    change_uses(o, to, +1);
    moved_.emplace_back(o, from);
    choice[o] = to;
    return after - before;
  }

  // What a pass minimises: heuristic own costs (compute estimate, own
  // collectives, memory price) plus all redistributions, with every use of
  // the assignment recorded.
  double pass_objective(const std::vector<std::uint16_t>& choice) const {
    return pass_sum(own_, choice);
  }

  // Communication of the pass as decided: own collectives of every
  // operator plus every tensor's redistributions. The search's bookkeeping,
  // summed over passes and compared with the evaluator by the tests.
  double pass_communication(const std::vector<std::uint16_t>& choice) const {
    return pass_sum(own_comm_, choice);
  }

  double pass_sum(const std::vector<double>& own, const std::vector<std::uint16_t>& choice) const {
    double total = 0;
    for (std::size_t o = 0; o < choice.size(); ++o) total += own[cand_off_[o] + choice[o]];
    for (std::size_t t = 0; t < ctx_.g.num_tensors(); ++t)
      total += tensor_cost(static_cast<ir::TensorId>(t));
    return total;
  }

  // Compute estimate + own communication + memory penalty of choice c;
  // *comm receives the communication part alone.
  // Needs the layouts of candidate i (fill_layouts) in place.
  double own_cost(ir::OpId o, std::size_t i, std::int16_t c, const Cut& cut, double* comm) const {
    const algebra::OpSpace& s = ctx_.spaces[o];
    const Mode mode = ctx_.opts.mode;
    const CostParams& p = ctx_.opts.cost;
    const std::int64_t k = cut.size;
    const bool train = mode == Mode::Train;
    double comm_s = 0, touched = 0, mem = 0;
    std::int64_t sprev = 1;
    for (std::size_t l = loop_off_[o]; l < loop_off_[o + 1]; ++l) sprev *= splits_[l];
    const double kc = c == plan::kReplicated ? 1.0 : static_cast<double>(k);
    const std::size_t in0 = flat_.in_off[o], nin = flat_.in_off[o + 1] - in0;
    const std::size_t out0 = flat_.out_off[o], nout = flat_.out_off[o + 1] - out0;
    const AxisLayout* lay = layouts_of(o, i);

    for (std::size_t j = 0; j < nin; ++j) {
      const ir::TensorId tid = flat_.in_tensor[in0 + j];
      const std::uint8_t f = tensor_flags_[tid];
      const double slice = flat_.bytes[tid] / static_cast<double>(in_div_[in0 + j]);
      const double after =
          lay[j].kind == LayoutKind::Shard ? slice / static_cast<double>(k) : slice;
      touched += after;
      // The objective is per microbatch: what runs once per step counts 1/m.
      if (c != plan::kReplicated && train && in_grad_[in0 + j] != 0 &&
          lay[j].kind == LayoutKind::Replicate)
        comm_s += cost::gradient_sync_seconds(slice, (f & kParameter) != 0, training_.zero_stage,
                                              training_.microbatches, cut, p) /
                  static_cast<double>(training_.microbatches);
      // Memory as the evaluator counts it: parameter state and, in
      // training, saved activations where they are held (a graph input by
      // its first use); in inference the operator's working set, whose
      // largest is the peak.
      if (f & kParameter) {
        if (flat_.in_holds[in0 + j]) {
          const plan::ParameterState& st = ctx_.state(tid);
          const bool dp = c != plan::kReplicated && lay[j].kind == LayoutKind::Replicate;
          mem +=
              after * (dp ? st.sharded(training_.zero_stage, static_cast<double>(k)) : st.total());
        }
      } else if (!train) {
        mem += after;
      } else if (flat_.in_holds[in0 + j]) {
        mem += after * ctx_.held_factor[tid];
      }
    }
    for (std::size_t j = 0; j < nout; ++j) {
      const ir::TensorId tid = flat_.out_tensor[out0 + j];
      const double slice = flat_.bytes[tid] / static_cast<double>(out_div_[out0 + j]);
      const AxisLayout l = lay[nin + j];
      const double after = l.kind == LayoutKind::Shard ? slice / static_cast<double>(k) : slice;
      touched += after;
      mem += train ? after * ctx_.held_factor[tid] : after;
      if (flat_.use_off[tid + 1] == flat_.use_off[tid] && l.kind == LayoutKind::Partial)
        comm_s += cost::collective_seconds(cost::Collective::AllReduce, slice, cut, p);
    }
    if (c != plan::kReplicated &&
        s.loops[static_cast<std::size_t>(c)].role == algebra::DimRole::Window &&
        s.loops[static_cast<std::size_t>(c)].halo > 0) {
      const double one = cost::collective_seconds(cost::Collective::Halo, halo_bytes(o, c), cut, p);
      comm_s += mode == Mode::Train ? 2 * one : one;
    }
    // Compute saved by a cut now shrinks with the cuts still to come, while
    // the communication it costs is paid at this pass's sizes. How much
    // later cuts can divide this operator is bounded by what its loops can
    // still absorb (divisibility, after this choice); expect a share of it,
    // SearchOptions::future_cut_exponent.
    std::int64_t remaining = rest_, absorbable = 1;
    for (std::size_t l = loop_off_[o]; l < loop_off_[o + 1] && remaining > 1; ++l) {
      if (loop_gcd_[l] == 0) continue;
      const std::int64_t done =
          splits_[l] * (static_cast<std::int64_t>(l - loop_off_[o]) == c ? k : 1);
      const std::int64_t g = std::gcd(loop_gcd_[l] / done, remaining);
      absorbable *= g;
      remaining /= g;
    }
    // Memory likewise: a byte held now is bytes / R at the end if later
    // cuts divide it R more times (SearchOptions::future_memory_exponent).
    // Undiscounted, early passes (the slow links) pay for savings the fast
    // inner links would have made anyway.
    const Discount discount = discount_of(absorbable);
    const double flops = s.flops / static_cast<double>(sprev) / kc / discount.compute;
    if (comm) *comm = comm_s;
    const DeviceSpec& dev = ctx_.cluster.device();
    const Precision prec = ctx_.precision[o];
    const double compute = cost::step_compute(flops, touched / discount.compute, dev, prec, p, mode,
                                              train ? ctx_.rules.backward_share[o] : 1.0,
                                              train && ctx_.rules.recomputed[o] != 0)
                               .total();
    return comm_s + compute + lambda_ * mem / discount.memory;
  }

  // absorbable^future_cut_exponent and ^future_memory_exponent for every
  // divisor of rest_ (the only values own_cost asks for), so that the hot
  // loop does no pow.
  void set_discounts() {
    discounts_.clear();
    const auto add = [&](std::int64_t d) { discounts_.emplace_back(d, discount_at(d)); };
    for (std::int64_t d = 1; d * d <= rest_; ++d) {
      if (rest_ % d != 0) continue;
      add(d);
      if (rest_ / d != d) add(rest_ / d);
    }
    std::sort(discounts_.begin(), discounts_.end(),
              [](const auto& x, const auto& y) { return x.first < y.first; });
  }

  [[nodiscard]] Discount discount_at(std::int64_t absorbable) const {
    const double a = static_cast<double>(absorbable);
    return {std::pow(a, ctx_.opts.future_cut_exponent),
            std::pow(a, ctx_.opts.future_memory_exponent)};
  }

  [[nodiscard]] Discount discount_of(std::int64_t absorbable) const {
    const auto it = std::lower_bound(
        discounts_.begin(), discounts_.end(), absorbable,
        [](const std::pair<std::int64_t, Discount>& x, std::int64_t v) { return x.first < v; });
    if (it != discounts_.end() && it->first == absorbable) return it->second;
    return discount_at(absorbable);
  }

  // Rows of the first input that maps a dim to window loop c, times the
  // bytes of one row of its current slice.
  double halo_bytes(ir::OpId o, std::int16_t c) const {
    const ir::Operator& op = ctx_.g.op(o);
    const algebra::OpSpace& s = ctx_.spaces[o];
    for (std::size_t j = 0; j < op.inputs.size(); ++j) {
      const auto& dims = in_dims(o, j);
      for (std::size_t d = 0; d < dims.size(); ++d) {
        if (dims[d] != c) continue;
        const ir::Tensor& t = ctx_.g.tensor(op.inputs[j]);
        const double slice =
            flat_.bytes[op.inputs[j]] / static_cast<double>(in_div_[flat_.in_off[o] + j]);
        const double extent =
            static_cast<double>(t.shape[d]) /
            static_cast<double>(splits_[loop_off_[o] + static_cast<std::size_t>(c)]);
        return static_cast<double>(s.loops[static_cast<std::size_t>(c)].halo) * slice / extent;
      }
    }
    return 0.0;
  }

  // Operators coupled to o through a tensor: the holders of its inputs, and
  // every use of a tensor o holds. Each tensor's use list is walked only by
  // its holder, so a growth costs O(E) however large the fan-out.
  template <class F>
  void for_each_neighbour(ir::OpId o, F&& f) const {
    for (std::size_t j = flat_.in_off[o]; j < flat_.in_off[o + 1]; ++j) {
      const ir::TensorId t = flat_.in_tensor[j];
      if (flat_.holder_op[t] != o) {
        f(flat_.holder_op[t]);
      } else if (flat_.in_holds[j]) {
        for (std::size_t u = flat_.use_off[t]; u < flat_.use_off[t + 1]; ++u)
          if (flat_.uses[u] != o) f(flat_.uses[u]);
      }
    }
    for (std::size_t j = flat_.out_off[o]; j < flat_.out_off[o + 1]; ++j) {
      const ir::TensorId t = flat_.out_tensor[j];
      for (std::size_t u = flat_.use_off[t]; u < flat_.use_off[t + 1]; ++u) f(flat_.uses[u]);
    }
  }

  // The tensors whose layout differs between o's candidates a and b:
  // f(t, j) with j the flat input slot, or kOutputSlot for an output.
  static constexpr std::size_t kOutputSlot = ~std::size_t{0};
  template <class F>
  void for_each_changed_tensor(ir::OpId o, std::uint16_t a, std::uint16_t b, F&& f) const {
    const std::size_t in0 = flat_.in_off[o], nin = flat_.in_off[o + 1] - in0;
    const std::size_t out0 = flat_.out_off[o], nout = flat_.out_off[o + 1] - out0;
    const AxisLayout* la = layouts_of(o, a);
    const AxisLayout* lb = layouts_of(o, b);
    for (std::size_t j = 0; j < nin; ++j)
      if (!(la[j] == lb[j])) f(flat_.in_tensor[in0 + j], in0 + j);
    for (std::size_t j = 0; j < nout; ++j)
      if (!(la[nin + j] == lb[nin + j])) f(flat_.out_tensor[out0 + j], kOutputSlot);
  }

  // for_each_neighbour restricted to the tensors whose layout differs
  // between o's candidates a and b.
  template <class F>
  void for_each_neighbour_changed(ir::OpId o, std::uint16_t a, std::uint16_t b, F&& f) const {
    for_each_changed_tensor(o, a, b, [&](ir::TensorId t, std::size_t j) {
      if (j == kOutputSlot) {
        for (std::size_t u = flat_.use_off[t]; u < flat_.use_off[t + 1]; ++u) f(flat_.uses[u]);
      } else if (flat_.holder_op[t] != o) {
        f(flat_.holder_op[t]);
      } else if (flat_.in_holds[j]) {
        for (std::size_t u = flat_.use_off[t]; u < flat_.use_off[t + 1]; ++u)
          if (flat_.uses[u] != o) f(flat_.uses[u]);
      }
    });
  }

  // Uses that share a request with o's: a change of o can make a shared
  // request o's alone, which changes what its siblings pay. Bounded by the
  // distinct requests of o's inputs, not by the fan-out.
  template <class F>
  void for_each_coupled(ir::OpId o, F&& f) const {
    for (std::size_t j = flat_.in_off[o]; j < flat_.in_off[o + 1]; ++j) {
      const ir::TensorId t = flat_.in_tensor[j];
      if (flat_.use_off[t + 1] - flat_.use_off[t] <= 8)
        for (std::size_t u = flat_.use_off[t]; u < flat_.use_off[t + 1]; ++u) f(flat_.uses[u]);
    }
  }

  // Layouts of o's operands (inputs, then outputs) under candidate i.
  void fill_layouts(ir::OpId o, std::size_t i, std::int16_t c) {
    const algebra::OpSpace& s = ctx_.spaces[o];
    const std::size_t nin = flat_.in_off[o + 1] - flat_.in_off[o];
    const std::size_t nout = flat_.out_off[o + 1] - flat_.out_off[o];
    AxisLayout* lay = layouts_.data() + lay_off_[o] + i * (nin + nout);
    for (std::size_t j = 0; j < nin; ++j) lay[j] = operand_layout(s, in_dims(o, j), false, c);
    for (std::size_t j = 0; j < nout; ++j)
      lay[nin + j] = operand_layout(s, out_dims(o, j), true, c);
  }

  const AxisLayout* layouts_of(ir::OpId o, std::size_t i) const {
    const std::size_t n =
        flat_.in_off[o + 1] - flat_.in_off[o] + flat_.out_off[o + 1] - flat_.out_off[o];
    return layouts_.data() + lay_off_[o] + i * n;
  }

  // Cost that candidate i of o adds to the tensors it touches, given the
  // other uses as recorded (o's own uses withdrawn): redistributions it
  // requests, or, where o holds a tensor, those of every request against
  // its layout; plus, for a partial output nobody has asked for yet, the
  // cheapest reduction (a heuristic, never bookkept: a partial tensor must
  // be reduced whatever its consumers choose).
  double edge_cost(ir::OpId o, std::size_t i) const {
    const std::size_t in0 = flat_.in_off[o], nin = flat_.in_off[o + 1] - in0;
    const std::size_t out0 = flat_.out_off[o], nout = flat_.out_off[o + 1] - out0;
    const AxisLayout* lay = layouts_of(o, i);
    double total = 0;
    for (std::size_t j = 0; j < nout; ++j) {
      const ir::TensorId t = flat_.out_tensor[out0 + j];
      const AxisLayout h = lay[nin + j];
      const Want* w = wants_.data() + flat_.use_off[t];
      const std::uint32_t n = want_count_[t];
      double sum = 0;
      for (std::size_t x = 0; x < n; ++x) sum += redist_.seconds(h, w[x].layout, w[x].slice_bytes);
      if (n == 0 && h.kind == LayoutKind::Partial && flat_.use_off[t + 1] > flat_.use_off[t])
        sum += redist_.seconds(h, AxisLayout::shard(0),
                               flat_.bytes[t] / static_cast<double>(out_div_[out0 + j]));
      total += tensor_w_[t] * sum;
    }
    for (std::size_t j = 0; j < nin; ++j) {
      const ir::TensorId t = flat_.in_tensor[in0 + j];
      if (flat_.in_holds[in0 + j]) {
        total += tensor_w_[t] * held_input_cost(in0, nin, j, lay);
        continue;
      }
      // A later slot of a tensor o holds was charged with the holder slot.
      bool held_here = false;
      if ((flat_.in_repeat[in0 + j] & FlatGraph::kEarlierSlot) != 0)
        for (std::size_t m = 0; m < j && !held_here; ++m)
          held_here = flat_.in_tensor[in0 + m] == t && flat_.in_holds[in0 + m];
      if (held_here || !holder_decided_[t]) continue;
      total += tensor_w_[t] * request_cost(in0, j, lay);
    }
    return total;
  }

  // edge_cost of input slot j of an operator (inputs at in0, nin of them,
  // layouts `lay`) that holds its tensor: this use fixes where the tensor
  // lives, so every request is turned from its layout, including those the
  // operator's later slots make.
  double held_input_cost(std::size_t in0, std::size_t nin, std::size_t j,
                         const AxisLayout* lay) const {
    const ir::TensorId t = flat_.in_tensor[in0 + j];
    const AxisLayout wl = lay[j];
    const Want* base = wants_.data() + flat_.use_off[t];
    const std::uint32_t n = want_count_[t];
    const double bytes = flat_.bytes[t];
    double sum = 0;
    for (std::size_t x = 0; x < n; ++x)
      sum += redist_.seconds(wl, base[x].layout, base[x].slice_bytes);
    if ((flat_.in_repeat[in0 + j] & FlatGraph::kLaterSlot) == 0) return sum;
    for (std::size_t k = j + 1; k < nin; ++k) {
      if (flat_.in_tensor[in0 + k] != t) continue;
      bool dup = false;
      for (std::size_t x = 0; x < n && !dup; ++x)
        dup = base[x].layout == lay[k] && base[x].divisor == in_div_[in0 + k];
      for (std::size_t m = j + 1; m < k && !dup; ++m)
        dup = flat_.in_tensor[in0 + m] == t && lay[m] == lay[k] &&
              in_div_[in0 + m] == in_div_[in0 + k];
      if (!dup) sum += redist_.seconds(wl, lay[k], bytes / static_cast<double>(in_div_[in0 + k]));
    }
    return sum;
  }

  // edge_cost of input slot j (a use, not the holder, of a tensor whose
  // holder is decided): its request turned from the holder's layout, unless
  // another use or an earlier slot already makes it.
  double request_cost(std::size_t in0, std::size_t j, const AxisLayout* lay) const {
    const ir::TensorId t = flat_.in_tensor[in0 + j];
    const AxisLayout wl = lay[j];
    const std::int64_t wd = in_div_[in0 + j];
    const Want* base = wants_.data() + flat_.use_off[t];
    const std::uint32_t n = want_count_[t];
    bool seen = false;
    for (std::size_t x = 0; x < n && !seen; ++x)
      seen = base[x].layout == wl && base[x].divisor == wd;
    if ((flat_.in_repeat[in0 + j] & FlatGraph::kEarlierSlot) != 0)
      for (std::size_t m = 0; m < j && !seen; ++m)
        seen = flat_.in_tensor[in0 + m] == t && lay[m] == wl && in_div_[in0 + m] == wd;
    if (seen) return 0.0;
    return redist_.seconds(holder_layout_[t], wl, flat_.bytes[t] / static_cast<double>(wd));
  }

  // Best candidate of o: cached own cost plus edge_cost. On ties the
  // earlier candidate wins; with prefer_keep, `keep` stays unless another
  // is strictly better (refinement moves only on a gain).
  //
  // Candidates are weighed cheapest own cost first, and the rest skipped
  // once an own cost alone exceeds the best total: edge costs are never
  // negative (RedistTable::nonnegative, multiplicities), so none of them
  // could win, nor could `keep` stay. The answer is the one weighing every
  // candidate gives; only most edge_cost calls are saved.
  std::uint16_t choose(ir::OpId o, std::uint16_t keep, bool prefer_keep) {
    const double* own = own_.data() + cand_off_[o];
    const std::uint16_t* order = by_own_.data() + cand_off_[o];
    const bool prune = redist_.nonnegative();
    double best = std::numeric_limits<double>::infinity();
    std::uint16_t best_i = 0;
    bool kept_seen = false;
    double kept = best;
    for (std::uint16_t r = 0; r < n_cands_[o]; ++r) {
      const std::uint16_t i = order[r];
      if (prune && own[i] > best) break;
      const double v = own[i] + edge_cost(o, i);
      if (i == keep) {
        kept = v;
        kept_seen = true;
      }
      if (v < best || (v == best && i < best_i)) {
        best = v;
        best_i = i;
      }
    }
    if (!prefer_keep) return best_i;
    const double threshold = best * (1 + 1e-12);
    if (!kept_seen && own[keep] <= threshold) kept = own[keep] + edge_cost(o, keep);
    return kept <= threshold ? keep : best_i;
  }

  // Redistribution seconds of tensor t on this axis: each distinct request
  // of its decided uses, turned from the holder's layout (0 while the
  // holder is undecided).
  double tensor_cost(ir::TensorId t) const {
    if (!holder_decided_[t]) return 0.0;
    const AxisLayout h = holder_layout_[t];
    double total = 0;
    const Want* w = wants_.data() + flat_.use_off[t];
    for (std::size_t i = 0; i < want_count_[t]; ++i)
      total += redist_.seconds(h, w[i].layout, w[i].slice_bytes);
    return tensor_w_[t] * total;
  }

  // Records exactly the uses of `choice`.
  void record_all(const std::vector<std::uint16_t>& choice) {
    clear_uses();
    for (std::size_t o = 0; o < choice.size(); ++o)
      change_uses(static_cast<ir::OpId>(o), choice[o], +1);
  }

  // Forgets every recorded use (cheaper than withdrawing them one by one).
  void clear_uses() {
    std::fill(want_count_.begin(), want_count_.end(), 0);
    std::fill(holder_decided_.begin(), holder_decided_.end(), 0);
  }

  // Records (delta +1) or withdraws (-1) the layouts candidate i of o gives
  // the tensors it holds and the requests it makes of the others.
  void change_uses(ir::OpId o, std::size_t i, int delta) {
    const std::size_t in0 = flat_.in_off[o], nin = flat_.in_off[o + 1] - in0;
    const std::size_t out0 = flat_.out_off[o], nout = flat_.out_off[o + 1] - out0;
    const AxisLayout* lay = layouts_of(o, i);
    for (std::size_t j = 0; j < nout; ++j) {
      const ir::TensorId t = flat_.out_tensor[out0 + j];
      holder_decided_[t] = delta > 0;
      holder_layout_[t] = lay[nin + j];
    }
    for (std::size_t j = 0; j < nin; ++j) {
      const ir::TensorId t = flat_.in_tensor[in0 + j];
      const AxisLayout wl = lay[j];
      const std::int64_t wd = in_div_[in0 + j];
      if (flat_.in_holds[in0 + j]) {
        holder_decided_[t] = delta > 0;
        holder_layout_[t] = wl;
      }
      Want* base = wants_.data() + flat_.use_off[t];
      std::uint32_t& n = want_count_[t];
      std::size_t x = 0;
      while (x < n && !(base[x].layout == wl && base[x].divisor == wd)) ++x;
      if (delta > 0) {
        if (x == n) base[n++] = Want{wl, 0, wd, flat_.bytes[t] / static_cast<double>(wd)};
        ++base[x].uses;
      } else if (x < n && --base[x].uses == 0) {
        base[x] = base[n - 1];  // order of requests does not matter
        --n;
      }
    }
  }

  void apply(ir::OpId o, std::size_t i, std::int16_t c, std::int64_t k) {
    if (c == plan::kReplicated) return;
    const std::size_t nin = flat_.in_off[o + 1] - flat_.in_off[o];
    const std::size_t nout = flat_.out_off[o + 1] - flat_.out_off[o];
    const AxisLayout* lay = layouts_of(o, i);
    splits_[loop_off_[o] + static_cast<std::size_t>(c)] *= k;
    for (std::size_t j = 0; j < nin; ++j)
      if (lay[j].kind == LayoutKind::Shard) in_div_[flat_.in_off[o] + j] *= k;
    for (std::size_t j = 0; j < nout; ++j)
      if (lay[nin + j].kind == LayoutKind::Shard) out_div_[flat_.out_off[o] + j] *= k;
  }

  double final_compute(ir::OpId o) const {
    const ir::Operator& op = ctx_.g.op(o);
    std::int64_t total_split = 1;
    for (std::size_t l = loop_off_[o]; l < loop_off_[o + 1]; ++l) total_split *= splits_[l];
    double touched = 0;
    for (std::size_t j = 0; j < op.inputs.size(); ++j)
      touched += flat_.bytes[op.inputs[j]] / static_cast<double>(in_div_[flat_.in_off[o] + j]);
    for (std::size_t j = 0; j < op.outputs.size(); ++j)
      touched += flat_.bytes[op.outputs[j]] / static_cast<double>(out_div_[flat_.out_off[o] + j]);
    const double flops = ctx_.spaces[o].flops / static_cast<double>(total_split);
    const DeviceSpec& dev = ctx_.cluster.device();
    const Precision prec = ctx_.precision[o];
    const bool train = ctx_.opts.mode == Mode::Train;
    const double t = cost::step_compute(flops, touched, dev, prec, ctx_.opts.cost, ctx_.opts.mode,
                                        train ? ctx_.rules.backward_share[o] : 1.0,
                                        train && ctx_.rules.recomputed[o] != 0)
                         .total();
    return op_w_[o] * t;
  }

  const Context ctx_;
  double lambda_;
  FlatGraph flat_;         // operands, holders and uses (use_off doubles as wants_'s offsets)
  std::int64_t rest_ = 1;  // product of the cuts after this pass
  int rung_ = 0;           // memory ladder rung, for progress reports
  std::vector<std::pair<std::int64_t, Discount>> discounts_;  // see set_discounts

  // Per operator (flat, with offsets): loop splits so far, slice divisors
  // of its operands, this pass's candidates and their cached own costs.
  std::vector<std::size_t> loop_off_, cand_off_, lay_off_;
  std::vector<AxisLayout> layouts_;  // [op][candidate][slot] for this pass
  std::vector<std::int64_t> splits_, in_div_, out_div_;
  std::vector<std::int16_t> cands_;
  std::vector<std::uint16_t> n_cands_;
  std::vector<double> own_, own_comm_;
  std::vector<std::uint16_t> by_own_;  // each operator's candidates by own cost, cheapest first
  std::vector<std::uint8_t> flag_;

  // Per tensor: bytes, holder, and this pass's layout and requests.
  RedistTable redist_;  // this pass's redistribution costs

  // Scratch of region moves: operators changed (with their old choice) and
  // the breadth-first queue (operator, hops, and `seen`: the clock_ at its
  // last response, 0 for none yet); touched_: per operator, the clock_ of
  // the last region step that could change its edge costs.
  struct RegionOp {
    ir::OpId op;
    int depth;
    std::uint64_t seen;
  };
  std::vector<std::pair<ir::OpId, std::uint16_t>> moved_;
  std::vector<RegionOp> region_;
  std::vector<std::uint64_t> touched_;
  std::uint64_t clock_ = 0;

  std::vector<std::uint8_t> tensor_flags_;  // kParameter
  std::vector<std::uint8_t> in_grad_;       // per input slot: ir::input_takes_gradient
  std::vector<int> batch_;                  // batch loop of each operator
  std::vector<std::int64_t> loop_gcd_;      // see set_loop_gcds
  std::vector<Want> wants_;
  std::vector<std::uint32_t> want_count_;
  std::vector<std::uint8_t> holder_decided_;
  std::vector<AxisLayout> holder_layout_;
  std::vector<double> op_w_, tensor_w_;  // multiplicities (1 unless folded)

  const plan::Training& training_;  // ctx_.training
};

}  // namespace

double rec_search(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                  const Cluster& cluster, const SearchOptions& opts, double lambda, plan::Plan& out,
                  const std::vector<double>* weights, int rung) {
  const Context ctx(g, spaces, cluster, opts, memory_budget(cluster, opts));
  RecSearch rs(ctx, lambda, weights);
  return rs.run(out, rung);
}

}  // namespace recsearch::search::detail
