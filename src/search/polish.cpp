// SPDX-License-Identifier: Apache-2.0
// Memory-aware refinement of a whole plan ("polish"), after rec's passes.
//
// Each pass of rec decides one mesh axis with the later ones unknown, and
// the memory ladder prices every byte alike; so a plan that fits can keep
// budget unused that a faster strategy of some operator would fill, and a
// plan that misses the budget by a little can often be mended by a few
// operators alone. Polish works on whole strategies (a loop choice on every
// axis) with the exact costs of the model: an operator's own costs
// (make_strategy) and the redistributions of the tensors it touches, each
// distinct request per axis turned from the holder's layout, as the
// evaluator counts them. In training the step time it lowers is the
// evaluator's, overlap included (plan::finish_step_time): the
// parameter-gradient collectives that compute hides count only where they
// show (hidden()), from running totals of compute and of those
// collectives, so a move's price stays O(1) more than its own costs. Where
// it added them up as paid, it took moves (less gradient traffic for more
// compute or redistribution) that the evaluated step time does not reward.
//
// Moves change one operator on one axis, or swap its choices on two axes;
// once single moves are spent, region moves change an operator and let the
// operators around it answer (regions()); on small graphs (kSmallGraphWork)
// also by propagation, the answer that moves the fewest seconds of
// redistribution toward the region whatever it costs on its own, and over
// the budget as well (propagated()). Over budget, the move that frees
// the most memory per second it adds is taken, until the plan fits; within
// budget, the move that saves the most time and still fits. Sweeps visit
// operators in id order (after the first, only those next to a change) and
// stop when one changes nothing, at most kSweeps of them:
// O(sweeps · Σ candidates · touched uses), on graphs whose operators x mesh
// axes are at most kPolishMaxWork. Deterministic: one thread, fixed order,
// ties to the earlier candidate.
//
// Kicks (kick(), small graphs under a budget that binds): each operator is moved to each of its
// neighbouring strategies whatever that costs and held there while polish
// answers around it, then let go; the fastest fitting result is kept. A
// trade of memory freed in one place for a collective dropped in another
// is out of reach of moves that must each fit and pay on their own.
//
// Memos (Memo): the same candidates are priced over and over (every sweep,
// every region try, every kick), so each (operator, cuts) is made once and
// shared, and each tensor's redistribution seconds are kept per choice of
// its holder's and users' strategies. Both are pure functions of what they
// are keyed by, so the memos change no decision, only its cost.
#include "search/polish.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>
#include <memory>
#include <set>
#include <span>
#include <utility>

#include "search/common.hpp"
#include "search/flat_graph.hpp"

namespace recsearch::search::detail {
namespace {

using cost::AxisLayout;

constexpr int kSweeps = 8;
// A move within budget must save more than this share of the seconds it
// touches, so rounding cannot make sweeps go round.
constexpr double kMinGain = 1e-12;
// Operators touching a tensor with more uses than this keep their strategy:
// each of their moves would recount every use.
constexpr std::size_t kMaxUses = 256;
// Tensors with more uses than this (a DenseNet's features, read by every
// later layer of their block and by each concatenation) are priced from
// their distinct requests per axis, kept as strategies change, instead of
// recounting every use for every candidate: O(axes · distinct requests) a
// price instead of O(axes · uses). Their sums run over the requests in
// the order they were first made, not in use order, so their seconds can
// differ from a recount in the last bits.
constexpr std::size_t kIncrementalUses = 4;
// Region moves (see regions(); their depth and size: common.hpp): the tries
// per polish, at most kRegionAttempts, at least one per two operators, else
// kRegionWork over the squared number of mesh axes (4096 tries on 6 axes).
constexpr std::size_t kRegionAttempts = 4096;
constexpr std::size_t kRegionWork = 4096 * 36;
// Region depth and size on small graphs (kSmallGraphWork).
constexpr int kSmallRegionDepth = 16;
constexpr std::size_t kSmallRegionOps = 64;
// Kicks (kick()): rounds, and the share of the step time a kick must save.
// A second round (kicks from the first round's result) never gained on the
// corner suite's full set (8 second rounds, 430 kicks) and cost an eighth
// of the kicks' work.
constexpr int kKickRounds = 1;
constexpr double kKickGain = 1e-9;
// Kicks run where the graph has at most kKickOps operators and polish work
// is at most kKickWork (a random DAG of 10 operators on 3 axes: a few
// hundred polishes of a few operators each), and only where the plan uses
// at least kKickBinding of the budget: a kick trades memory, and far from
// the budget single moves already take what a trade would give.
constexpr std::size_t kKickOps = 12;
constexpr std::size_t kKickWork = 32;
constexpr double kKickBinding = 0.5;

// A strategy as polish holds it: made once per (operator, cuts) by Memo and
// shared by address; `id` numbers it among its operator's (Polish::edge_key).
// Its neighbouring strategies (Polish::neighbours_of), a function of its
// cuts alone, are listed on the first ask: every sweep, region try and
// response walks the current strategy's, and working them out each time
// repeats the legal choices per axis and a hash lookup per candidate.
struct Held {
  OpStrategy s;
  std::uint32_t id = 0;
  mutable bool listed = false;
  mutable std::vector<const Held*> moves;  // one axis's choice changed
  mutable std::vector<const Held*> swaps;  // two axes' choices traded
};

struct CutsHash {
  std::size_t operator()(const std::vector<std::int16_t>& cuts) const noexcept {
    std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a
    for (std::int16_t c : cuts) h = (h ^ static_cast<std::uint16_t>(c)) * 0x100000001b3ULL;
    return static_cast<std::size_t>(h);
  }
};

// What one polish, and the copies kick() makes of it, has priced: each
// operator's strategies by cuts (addresses stable), and each tensor's
// redistribution seconds by the ids of its holder's and users' strategies.
class Memo {
 public:
  Memo(std::size_t ops, std::size_t tensors) : ops_(ops), edges_(tensors) {}

  // o's strategy with `cuts`, made on the first ask.
  const Held& strategy(const Context& ctx, ir::OpId o, const std::vector<std::int16_t>& cuts) {
    PerOp& p = ops_[o];
    if (2 * (p.made.size() + 1) > p.index.size()) grow(p);
    const std::size_t mask = p.index.size() - 1;
    const std::size_t h = CutsHash{}(cuts);
    std::size_t i = h & mask;
    for (; p.index[i] != kEmpty; i = (i + 1) & mask)
      if (p.made[p.index[i]].s.cuts == cuts) return p.made[p.index[i]];
    const auto id = static_cast<std::uint32_t>(p.made.size());
    p.made.push_back(Held{make_strategy(ctx, o, cuts), id, false, {}, {}});
    p.index[i] = id;
    return p.made.back();
  }

  // Tensor t's redistribution seconds under `key` (not kNoKey), from
  // `compute` on the first ask.
  template <class F>
  double edge(ir::TensorId t, std::uint64_t key, F&& compute) {
    EdgeTable& e = edges_[t];
    if (2 * (e.used + 1) > e.slots.size()) grow(e);
    std::size_t i = slot_of(e, key);
    for (; e.slots[i].key != kNoKey; i = (i + 1) & (e.slots.size() - 1))
      if (e.slots[i].key == key) return e.slots[i].seconds;
    const double v = compute();
    e.slots[i] = EdgeSlot{key, v};
    ++e.used;
    return v;
  }

  static constexpr std::uint64_t kNoKey = ~std::uint64_t{0};

 private:
  // An operator's strategies, and their ids in an open-addressed table by
  // the hash of their cuts (linear probing, at most half full), so that a
  // strategy's cuts are not copied into a key of their own.
  struct PerOp {
    std::deque<Held> made;
    std::vector<std::uint32_t> index;
  };
  static constexpr std::uint32_t kEmpty = ~std::uint32_t{0};

  static void grow(PerOp& p) {
    p.index.assign(std::max<std::size_t>(p.index.size() * 2, 8), kEmpty);
    const std::size_t mask = p.index.size() - 1;
    for (const Held& h : p.made) {
      std::size_t i = CutsHash{}(h.s.cuts) & mask;
      while (p.index[i] != kEmpty) i = (i + 1) & mask;
      p.index[i] = h.id;
    }
  }
  // The edge memo: per tensor, an open-addressed table (linear probing,
  // at most half full), so that a priced edge costs no allocation of its
  // own and one operator's candidates probe one small table.
  struct EdgeSlot {
    std::uint64_t key = kNoKey;
    double seconds = 0;
  };
  struct EdgeTable {
    std::vector<EdgeSlot> slots;
    std::size_t used = 0;
  };

  [[nodiscard]] static std::size_t slot_of(const EdgeTable& e, std::uint64_t key) {
    std::uint64_t h = key;  // splitmix64's finalizer
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
    return static_cast<std::size_t>(h ^ (h >> 31)) & (e.slots.size() - 1);
  }

  static void grow(EdgeTable& e) {
    std::vector<EdgeSlot> old(std::max<std::size_t>(e.slots.size() * 2, 16));
    old.swap(e.slots);
    for (const EdgeSlot& x : old) {
      if (x.key == kNoKey) continue;
      std::size_t i = slot_of(e, x.key);
      while (e.slots[i].key != kNoKey) i = (i + 1) & (e.slots.size() - 1);
      e.slots[i] = x;
    }
  }

  std::vector<PerOp> ops_;
  std::vector<EdgeTable> edges_;
};

class Polish {
 public:
  Polish(const Context& ctx, const plan::Plan& plan)
      : ctx_(ctx),
        flat_(flatten(ctx.g)),
        memo_(std::make_shared<Memo>(ctx.g.num_operators(), ctx.g.num_tensors())) {
    const std::size_t n = ctx.g.num_operators();
    cur_.reserve(n);
    for (std::size_t o = 0; o < n; ++o)
      cur_.push_back(&memo_->strategy(ctx_, static_cast<ir::OpId>(o), plan.cuts[o]));
    count_requests();
    const auto pinned = pinned_cuts(ctx.g, ctx.spaces, ctx.mesh);
    movable_.assign(n, 1);
    for (std::size_t o = 0; o < n; ++o) {
      if (!pinned[o].empty()) movable_[o] = 0;
      for (ir::TensorId t : touched(static_cast<ir::OpId>(o)))
        if (uses(t) > kMaxUses) movable_[o] = 0;
    }
    edge_.resize(ctx.g.num_tensors());
    prefix_.assign(ctx.g.num_tensors() * ctx.mesh.size(), 0.0);
    for (std::size_t t = 0; t < ctx.g.num_tensors(); ++t)
      edge_[t] = current_edge(static_cast<ir::TensorId>(t), 0);
    held_ = 0;
    for (const Held* s : cur_) {
      held_ += s->s.mem;
      compute_ += s->s.compute;
      once_ += s->s.sync_once;
      repeated_ += s->s.sync_repeated;
    }
    if (ctx.opts.mode == Mode::Infer) rebuild_peak();
  }

  // Memory as the evaluator counts it, up to the bytes of tensors no
  // operator touches (constant: the caller adds them).
  [[nodiscard]] double memory() const { return held_ + peak_; }

  // Own costs of every strategy plus every tensor's redistributions, less
  // what overlap hides.
  [[nodiscard]] double step_time() const {
    double total = 0, compute = 0, once = 0, repeated = 0;
    for (const Held* s : cur_) {
      total += s->s.own;
      compute += s->s.compute;
      once += s->s.sync_once;
      repeated += s->s.sync_repeated;
    }
    for (double e : edge_) total += e;
    return total + hidden(compute, once, repeated);
  }

  [[nodiscard]] bool fits_now(double untouched) const {
    return held_ + peak_ + untouched <= ctx_.budget;
  }

  // The kicks of o (kick()): its neighbouring strategies, none if it is
  // pinned.
  [[nodiscard]] std::vector<std::vector<std::int16_t>> kicks(ir::OpId o) const {
    if (!movable_[o]) return {};
    std::vector<std::vector<std::int16_t>> out;
    const Held& now = neighbours_of(o);
    for (const auto* list : {&now.moves, &now.swaps})
      for (const Held* h : *list) out.push_back(h->s.cuts);
    return out;
  }

  // Sets o to `cuts` whatever that costs and holds it there until release().
  void force(ir::OpId o, const std::vector<std::int16_t>& cuts) {
    undo_.clear();
    (void)apply(o, &memo_->strategy(ctx_, o, cuts));
    if (ctx_.opts.mode == Mode::Infer) rebuild_peak();
    movable_[o] = 0;
  }
  void release(ir::OpId o) { movable_[o] = 1; }

  bool run(plan::Plan& plan, double untouched) {
    note_state(untouched);
    // Small graphs over the budget: propagated regions first, which can
    // make the plan fit without the collective a single move would add.
    bool any = small_ && held_ + peak_ + untouched > ctx_.budget && regions(untouched);
    any = sweeps(untouched) || any;
    // Region moves, once the plan fits and single moves are spent; then
    // single moves again around what they changed.
    if (held_ + peak_ + untouched <= ctx_.budget && regions(untouched)) {
      any = true;
      (void)sweeps(untouched);
    }
    for (std::size_t o = 0; o < cur_.size(); ++o) plan.cuts[o] = cur_[o]->s.cuts;
    return any;
  }

  // See PolishResult::path_memory and budget_sensitive.
  [[nodiscard]] double path_memory() const { return path_mem_; }
  [[nodiscard]] bool budget_sensitive() const { return sensitive_; }
  [[nodiscard]] bool budget_binding() const { return binding_; }

 private:
  // The current state, for path_memory: within the budget, its memory;
  // over it, the moves depend on by how much.
  void note_state(double untouched) {
    const double mem = held_ + peak_ + untouched;
    if (mem > ctx_.budget) sensitive_ = binding_ = true;
    else path_mem_ = std::max(path_mem_, mem);
  }

  // Sweeps in id order; after the first, only operators next to a change
  // (whose best move may have changed) are looked at again.
  bool sweeps(double untouched) {
    bool any = false;
    std::vector<std::uint8_t> look(cur_.size(), 1);
    for (int sweep = 0; sweep < kSweeps; ++sweep) {
      bool changed = false;
      for (ir::OpId o = 0; o < cur_.size(); ++o) {
        if (!look[o]) continue;
        look[o] = 0;
        if (!movable_[o] || !improve(o, untouched)) continue;
        changed = true;
        for_each_adjacent(o, [&](ir::OpId m) { look[m] = 1; });
      }
      any = any || changed;
      if (!changed) break;
    }
    return any;
  }

  // Operators sharing a tensor with n (holders and uses), n included;
  // tensors with more than kMaxUses uses are skipped.
  template <class F>
  void for_each_adjacent(ir::OpId n, F&& f) const {
    for (ir::TensorId t : touched(n)) {
      if (uses(t) > kMaxUses) continue;
      if (flat_.holder_op[t] != ir::kNone) f(flat_.holder_op[t]);
      for (std::size_t u = flat_.use_off[t]; u < flat_.use_off[t + 1]; ++u) f(flat_.uses[u]);
    }
  }

  // Region moves: a chain that only pays when changed as a whole (a cut
  // moved from one end of a residual block to the other) is out of reach of
  // single moves. Each operator, heaviest own cost first, tries each
  // neighbouring strategy; the operators around it (breadth first, up to
  // kRegionDepth hops and kRegionOps changes) take their best responses
  // within the budget; the region stays if the step time fell, else it is
  // undone. At most kRegionAttempts tries.
  bool regions(double untouched) {
    std::vector<ir::OpId> order;
    for (ir::OpId o = 0; o < cur_.size(); ++o)
      if (movable_[o]) order.push_back(o);
    std::stable_sort(order.begin(), order.end(),
                     [&](ir::OpId x, ir::OpId y) { return cur_[x]->s.own > cur_[y]->s.own; });
    const double gain = kMinGain * step_time();
    // A try costs about (axes)^2: candidates of each responder, each over
    // every axis.
    const std::size_t axes = std::max<std::size_t>(ctx_.mesh.size(), 1);
    std::size_t attempts =
        std::min(kRegionAttempts, std::max(order.size() / 2, kRegionWork / (axes * axes)));
    bool any = false;
    // Whether a region from o's strategy `alt` stays (and counts the try).
    const auto tried = [&](ir::OpId o, const Held* alt) {
      --attempts;
      return region_move(o, alt, untouched, gain, false) ||
             (small_ && region_move(o, alt, untouched, gain, true));
    };
    for (ir::OpId o : order) {
      if (attempts == 0) break;
      // The lists stay valid when a region changes o: they are its old
      // strategy's, and the walk stops there.
      const Held& now = neighbours_of(o);
      bool stayed = false;
      for (const auto* list : {&now.moves, &now.swaps})
        for (std::size_t i = 0; i < list->size() && attempts > 0 && !stayed; ++i)
          stayed = tried(o, (*list)[i]);
      any = any || stayed;
    }
    return any;
  }

  // propagate: the responders take the strategy that moves the fewest
  // seconds of redistribution (their own cost breaks ties), whatever its
  // own cost and memory, the way a sharding propagates through a chain;
  // the region stays if the plan then fits and is faster, or fits where it
  // did not before. Under collective latencies a chain changed one
  // operator at a time pays the same collective at every step, so only
  // the chain as a whole shows its gain.
  bool region_move(ir::OpId o, const Held* alt, double untouched, double gain, bool propagate) {
    undo_.clear();
    const bool was_over = !fits(untouched);
    region_.clear();
    double delta = apply(o, alt);
    region_.emplace_back(o, 0);
    enqueue(o, 0);
    for (std::size_t head = 1; head < region_.size() && undo_.size() < region_ops_; ++head) {
      const auto [n, depth] = region_[head];
      if (!movable_[n]) continue;
      const Held* r = nullptr;
      if (!(propagate ? propagated(n, r) : best_response(n, untouched, gain, r))) continue;
      delta += apply(n, r);
      enqueue(n, depth);
    }
    if (delta < -gain || (propagate && was_over)) {
      if (fits(untouched)) {
        if (ctx_.opts.mode == Mode::Infer) rebuild_peak();
        note_state(untouched);
        return true;
      }
      binding_ = true;
    }
    for (std::size_t x = undo_.size(); x-- > 0;) {
      const ir::OpId op = undo_[x].first;
      held_ += undo_[x].second->s.mem - cur_[op]->s.mem;
      move_to(op, undo_[x].second);
    }
    return false;
  }

  // Operators sharing a tensor with n, one hop further than `depth`.
  void enqueue(ir::OpId n, int depth) {
    if (depth >= region_depth_) return;
    for_each_adjacent(n, [&](ir::OpId m) {
      for (const auto& [r, d] : region_)
        if (r == m) return;
      region_.emplace_back(m, depth + 1);
    });
  }

  // Sets o to strategy s for good (logged for undo); the step time's change.
  double apply(ir::OpId o, const Held* s) {
    const auto ts = touched(o);
    double before = cur_[o]->s.own + hidden_now(), after = s->s.own;
    for (ir::TensorId t : ts) before += edge_[t];
    held_ += s->s.mem - cur_[o]->s.mem;
    undo_.emplace_back(o, cur_[o]);
    move_to(o, s);
    after += hidden_now();
    for (ir::TensorId t : ts) after += edge_[t];
    return after - before;
  }

  // Sets o's strategy to s, and its tensors' seconds (edge_, prefix_) to
  // the new strategies': each summed from the first axis on which it
  // changes (first_change), the sums before it kept.
  void move_to(ir::OpId o, const Held* s) {
    const auto ts = touched(o);
    std::vector<std::size_t>& from = froms_;
    from.clear();
    for (ir::TensorId t : ts) from.push_back(first_change(t, o, s->s));
    set_strategy(o, s);
    for (std::size_t i = 0; i < ts.size(); ++i) edge_[ts[i]] = current_edge(ts[i], from[i]);
  }

  // The largest working set with the region's changes (inference): the
  // changed operators' own, and the largest of the rest from the sorted
  // list taken before the region, less the changed operators' old values.
  [[nodiscard]] double region_peak() const {
    double top = 0;
    std::vector<double>& removed = removed_;
    removed.clear();
    for (const auto& [op, old] : undo_) {
      top = std::max(top, cur_[op]->s.work);
      bool first = true;
      for (const auto& [p, o2] : undo_) {
        if (&o2 == &old) break;
        if (p == op) first = false;
      }
      if (first) removed.push_back(old->s.work);
    }
    for (std::size_t i = works_.size(); i-- > 0;) {
      const auto it = std::find(removed.begin(), removed.end(), works_[i]);
      if (it == removed.end()) return std::max(top, works_[i]);
      removed.erase(it);
    }
    return top;
  }

  [[nodiscard]] bool fits(double untouched) const {
    const double peak = ctx_.opts.mode == Mode::Infer ? region_peak() : 0.0;
    return held_ + peak + untouched <= ctx_.budget;
  }

  // n's fastest neighbouring strategy that saves time and keeps the plan
  // within budget (inference: conservatively, with n's old working set
  // still counted).
  bool best_response(ir::OpId n, double untouched, double gain, const Held*& out) const {
    const auto ts = touched(n);
    const OpStrategy& now = cur_[n]->s;
    double edges_now = 0;
    for (ir::TensorId t : ts) edges_now += edge_[t];
    const double peak = ctx_.opts.mode == Mode::Infer ? region_peak() : 0.0;
    double best = -gain;
    double best_mem = 0;
    bool found = false;
    for (const Held* alt : neighbours_of(n).moves) {
      const double mem = held_ - now.mem + alt->s.mem + std::max(peak, alt->s.work) + untouched;
      if (mem > ctx_.budget) {
        binding_ = true;
        continue;
      }
      const double hc = hidden_change(now, alt->s);
      const auto dt_of = [&](double edges) {
        return alt->s.own + edges - now.own - edges_now + hc;
      };
      const double edges_alt = edges_unless(ts, n, alt, [&](double e) { return dt_of(e) >= best; });
      const double dt = dt_of(edges_alt);
      if (dt >= best) continue;
      best = dt;
      best_mem = mem;
      out = alt;
      found = true;
    }
    // The response chosen is the fastest that fits; under a smaller budget
    // it fits too (and so stays the choice) down to its memory, whether or
    // not its region is kept.
    if (found) path_mem_ = std::max(path_mem_, best_mem);
    return found;
  }

  // n's strategy with the least redistribution seconds on its tensors, own
  // cost breaking ties; false when that is its current one.
  bool propagated(ir::OpId n, const Held*& out) const {
    // Only the tensors n shares with the region's changed operators count:
    // the sharding comes from there; the edges further on are the next
    // responders' to answer.
    std::vector<ir::TensorId>& ts = shared_;
    ts.clear();
    for (ir::TensorId t : touched(n)) {
      bool shared = false;
      for (const auto& [op, old] : undo_)
        for (ir::TensorId u : touched(op)) shared = shared || u == t;
      if (shared) ts.push_back(t);
    }
    double best_edges = 0;
    for (ir::TensorId t : ts) best_edges += edge_[t];
    if (best_edges <= 0) return false;  // the region asks nothing of n
    double best_own = cur_[n]->s.own;
    bool found = false;
    for (const Held* alt : neighbours_of(n).moves) {
      const double edges_alt =
          edges_unless(ts, n, alt, [&](double e) { return e > best_edges * (1 + 1e-12); });
      if (edges_alt > best_edges * (1 - 1e-12) &&
          !(edges_alt <= best_edges * (1 + 1e-12) && alt->s.own < best_own * (1 - 1e-12)))
        continue;
      best_edges = edges_alt;
      best_own = alt->s.own;
      out = alt;
      found = true;
    }
    return found;
  }

  // Σ tensor_edge(t, n, alt) over ts in order, or +infinity as soon as
  // `rejects` holds of a partial sum. The terms are never negative and the
  // callers' measures (dt_of, a comparison) are monotone in the sum,
  // floating-point rounding included (each operation rounds monotonically),
  // so the whole sum would be rejected too: the result of every comparison
  // is the same, and the rest of a rejected candidate's tensors go unpriced.
  template <class Rejects>
  double edges_unless(std::span<const ir::TensorId> ts, ir::OpId n, const Held* alt,
                      Rejects&& rejects) const {
    double sum = 0;
    for (ir::TensorId t : ts) {
      sum += tensor_edge(t, n, alt);
      if (rejects(sum)) return std::numeric_limits<double>::infinity();
    }
    return sum;
  }

  // Made once (FlatGraph): every move and every neighbour walk asks for it.
  [[nodiscard]] std::span<const ir::TensorId> touched(ir::OpId o) const {
    return flat_.touched_of(o);
  }

  [[nodiscard]] std::size_t uses(ir::TensorId t) const {
    return flat_.use_off[t + 1] - flat_.use_off[t];
  }

  // The strategy operator `o` has, or `alt` when o == `swapped`.
  const Held& strategy(ir::OpId o, ir::OpId swapped, const Held* alt) const {
    return o == swapped ? *alt : *cur_[o];
  }

  // Redistribution seconds of tensor t, with `swapped` taking `alt`
  // (kNone: the current strategies', edge_); memoized by edge_key where it
  // has one. A candidate's sum starts where it first differs for t
  // (first_change), from the current sum before that axis (prefix_,
  // current_edge): the same additions in the same order as from axis 0,
  // so the same value, over a fraction of the axes (a neighbouring
  // strategy changes one axis, and the divisors after it).
  double tensor_edge(ir::TensorId t, ir::OpId swapped, const Held* alt) const {
    const ir::OpId hop = flat_.holder_op[t];
    if (hop == ir::kNone) return 0.0;
    if (request_index_[t] >= 0) return counted_edge(t, swapped, alt);
    if (swapped == ir::kNone) return edge_[t];
    const auto of = [&](ir::OpId u) { return &strategy(u, swapped, alt).s; };
    const double* const prefix = prefix_.data() + std::size_t{t} * ctx_.mesh.size();
    const auto compute = [&] {
      const std::size_t from = first_change(t, swapped, alt->s);
      if (from == ctx_.mesh.size()) return edge_[t];
      return tensor_redistribution(ctx_, flat_, t, strategy(hop, swapped, alt).s,
                                   flat_.holder_slot[t], of, rows_, from, prefix[from]);
    };
    std::uint64_t key = 0;
    return edge_key(t, swapped, alt, key) ? memo_->edge(t, key, compute) : compute();
  }

  // Tensor t's seconds under the current strategies, summed from axis
  // `from` on (the sums before it, in prefix_, still hold), the sums before
  // each later axis kept in prefix_.
  double current_edge(ir::TensorId t, std::size_t from) {
    const ir::OpId hop = flat_.holder_op[t];
    if (hop == ir::kNone) return 0.0;
    if (request_index_[t] >= 0) return counted_edge(t, ir::kNone, nullptr);
    if (from == ctx_.mesh.size()) return edge_[t];
    double* const prefix = prefix_.data() + std::size_t{t} * ctx_.mesh.size();
    return tensor_redistribution(
        ctx_, flat_, t, cur_[hop]->s, flat_.holder_slot[t], [&](ir::OpId u) { return &cur_[u]->s; },
        rows_, from, prefix[from], prefix);
  }

  // The first mesh axis on which one of swapped's slots holding or reading
  // tensor t differs (same_on) with `now` in place of its current
  // strategy; the number of axes where none does.
  [[nodiscard]] std::size_t first_change(ir::TensorId t, ir::OpId swapped,
                                         const OpStrategy& now) const {
    const OpStrategy& was = cur_[swapped]->s;
    std::size_t first = ctx_.mesh.size();
    const auto scan = [&](std::size_t k) {
      for (std::size_t a = 0; a < first; ++a)
        if (!same_on(was, now, k, a)) first = a;
    };
    if (flat_.holder_op[t] == swapped) scan(flat_.holder_slot[t]);
    for (const FlatGraph::UseSlot& use : flat_.use_slots_of(t))
      if (use.op == swapped) scan(use.slot);
    return first;
  }

  // A distinct request of a tensor's uses on one axis (kIncrementalUses).
  struct Request {
    AxisLayout layout;
    std::int64_t divisor;
    std::uint32_t count;  // uses making it
    // Its seconds turned from the holder's layout `from`, once asked
    // (priced is false until then): the holder changes far less often than
    // its users' candidates are priced.
    mutable bool priced = false;
    mutable AxisLayout from;
    mutable double seconds = 0;
  };

  // The requests of every tensor priced from them, from the current strategies.
  void count_requests() {
    const std::size_t axes = ctx_.mesh.size();
    slot_op_.assign(ctx_.g.num_tensors(), ir::kNone);
    slot_at_.assign(ctx_.g.num_tensors(), 0);
    request_index_.assign(ctx_.g.num_tensors(), -1);
    for (ir::TensorId t = 0; t < ctx_.g.num_tensors(); ++t) {
      if (uses(t) <= kIncrementalUses || flat_.holder_op[t] == ir::kNone) continue;
      request_index_[t] =
          static_cast<std::int32_t>(requests_.size() / std::max<std::size_t>(axes, 1));
      requests_.resize(requests_.size() + axes);
      axis_edge_.resize(requests_.size());
      for (const FlatGraph::UseSlot& use : flat_.use_slots_of(t))
        count(t, cur_[use.op]->s, use.slot, +1);
    }
  }

  // Adds (+1) or withdraws (-1) the requests slot `slot` of strategy s makes of t.
  void count(ir::TensorId t, const OpStrategy& s, std::size_t slot, int delta) {
    const std::size_t axes = ctx_.mesh.size();
    for (std::size_t a = 0; a < axes; ++a) {
      std::vector<Request>& v = requests_[static_cast<std::size_t>(request_index_[t]) * axes + a];
      const AxisLayout l = s.layout[slot][a];
      const std::int64_t d = s.divisor[slot][a];
      const auto it = std::find_if(
          v.begin(), v.end(), [&](const Request& r) { return r.layout == l && r.divisor == d; });
      if (delta > 0) {
        if (it == v.end()) {
          v.push_back(Request{l, d, 1, false, {}, 0.0});
        } else {
          ++it->count;
        }
      } else if (it != v.end() && --it->count == 0) {
        v.erase(it);  // keeps the order of first requests
      }
    }
  }

  // Sets o's strategy, keeping the counted requests of its tensors.
  void set_strategy(ir::OpId o, const Held* s) {
    const std::size_t in0 = flat_.in_off[o], nin = flat_.in_off[o + 1] - in0;
    for (std::size_t j = 0; j < nin; ++j) {
      const ir::TensorId t = flat_.in_tensor[in0 + j];
      if (request_index_[t] < 0) continue;
      count(t, cur_[o]->s, j, -1);
      count(t, s->s, j, +1);
    }
    compute_ += s->s.compute - cur_[o]->s.compute;
    once_ += s->s.sync_once - cur_[o]->s.sync_once;
    repeated_ += s->s.sync_repeated - cur_[o]->s.sync_repeated;
    cur_[o] = s;
  }

  // What overlap (plan::exposed_communication) takes off the sum of own
  // costs, per microbatch as own is, from the totals of compute and of the
  // parameter collectives once a step and repeated; 0 without overlap
  // (and in inference, which has no gradients).
  [[nodiscard]] double hidden(double compute, double once, double repeated) const {
    if (!overlap_) return 0.0;
    const auto m = ctx_.training.microbatches;
    return plan::exposed_communication(0.0, once * micro_, repeated, compute, m) / micro_ - once -
           repeated;
  }
  [[nodiscard]] double hidden_now() const { return hidden(compute_, once_, repeated_); }
  // hidden's change if an operator's strategy `now` became `alt`.
  [[nodiscard]] double hidden_change(const OpStrategy& now, const OpStrategy& alt) const {
    if (!overlap_) return 0.0;
    return hidden(compute_ + alt.compute - now.compute, once_ + alt.sync_once - now.sync_once,
                  repeated_ + alt.sync_repeated - now.sync_repeated) -
           hidden_now();
  }

  // Notes, for each input tensor of o, that o first reads it in that slot.
  void index_inputs(ir::OpId o) const {
    const std::size_t in0 = flat_.in_off[o], nin = flat_.in_off[o + 1] - in0;
    for (std::size_t j = nin; j-- > 0;) {
      const ir::TensorId t = flat_.in_tensor[in0 + j];
      slot_op_[t] = o;
      slot_at_[t] = static_cast<std::uint32_t>(j);
    }
  }

  // tensor_edge of a tensor priced from its counted requests: each axis's
  // distinct requests turned from the holder's layout, with `swapped`'s
  // requests (if it uses t) those of `alt`: the counted ones less what
  // swapped asks now, then what alt would ask that nobody else does.
  double counted_edge(ir::TensorId t, ir::OpId swapped, const Held* alt) const {
    const std::size_t axes = ctx_.mesh.size();
    const OpStrategy& holder = strategy(flat_.holder_op[t], swapped, alt).s;
    const std::size_t hslot = flat_.holder_slot[t];
    std::vector<std::uint32_t>& slots = slots_;
    slots.clear();
    if (swapped != ir::kNone) {
      // Where swapped reads t: its inputs are indexed once per operator
      // priced, not searched per tensor (a Concat reads dozens).
      if (slot_op_[t] != swapped) index_inputs(swapped);
      if (slot_op_[t] == swapped) {
        const std::size_t in0 = flat_.in_off[swapped], nin = flat_.in_off[swapped + 1] - in0;
        const std::uint32_t first = slot_at_[t];
        slots.push_back(first);
        if ((flat_.in_repeat[in0 + first] & FlatGraph::kLaterSlot) != 0)
          for (std::size_t j = first + 1; j < nin; ++j)
            if (flat_.in_tensor[in0 + j] == t) slots.push_back(static_cast<std::uint32_t>(j));
      }
    }
    const double bytes = flat_.bytes[t];
    const auto seconds = [&](AxisLayout h, AxisLayout to, std::int64_t divisor, std::size_t a) {
      return redistribution_seconds(h, to, bytes / static_cast<double>(divisor), ctx_.mesh[a],
                                    ctx_.opts.cost, ctx_.opts.mode);
    };
    const bool holder_swapped = swapped != ir::kNone && flat_.holder_op[t] == swapped;
    double total = 0;
    for (std::size_t a = 0; a < axes; ++a) {
      const AxisLayout h = holder.layout[hslot][a];
      const std::size_t at = static_cast<std::size_t>(request_index_[t]) * axes + a;
      const std::vector<Request>& base = requests_[at];
      const auto priced = [&](const Request& r) {
        if (!r.priced || !(r.from == h)) {
          r.seconds = seconds(h, r.layout, r.divisor, a);
          r.from = h;
          r.priced = true;
        }
        return r.seconds;
      };
      // An axis on which swapped asks and holds what it does now costs
      // what it costs now (axis_edge_, kept by the last pricing of the
      // current strategies): a neighbouring strategy changes one or two
      // axes, and the slice divisors of the axes after them.
      if (swapped != ir::kNone &&
          unchanged_on(a, slots, holder_swapped ? hslot : kNoSlot, cur_[swapped]->s, alt->s)) {
        total += axis_edge_[at];
        continue;
      }
      if (slots.empty()) {
        double here = 0;
        for (const Request& r : base) here += priced(r);
        if (swapped == ir::kNone) axis_edge_[at] = here;
        total += here;
        continue;
      }
      const OpStrategy& was = cur_[swapped]->s;
      const OpStrategy& now = alt->s;
      double here = 0;
      for (const Request& r : base) {
        std::int64_t n = r.count;
        for (const std::uint32_t k : slots) {
          if (was.layout[k][a] == r.layout && was.divisor[k][a] == r.divisor) --n;
          if (now.layout[k][a] == r.layout && now.divisor[k][a] == r.divisor) ++n;
        }
        if (n > 0) here += priced(r);
      }
      for (std::size_t x = 0; x < slots.size(); ++x) {
        const AxisLayout l = now.layout[slots[x]][a];
        const std::int64_t d = now.divisor[slots[x]][a];
        bool counted = false;
        for (const Request& r : base) counted = counted || (r.layout == l && r.divisor == d);
        for (std::size_t y = 0; y < x && !counted; ++y)
          counted = now.layout[slots[y]][a] == l && now.divisor[slots[y]][a] == d;
        if (!counted) here += seconds(h, l, d, a);
      }
      total += here;
    }
    return total;
  }

  static constexpr std::size_t kNoSlot = ~std::size_t{0};

  // Whether strategies `was` and `now` agree on axis a in the given slots
  // and in `held` (kNoSlot: none): layout and slice divisor.
  static bool unchanged_on(std::size_t a, const std::vector<std::uint32_t>& slots, std::size_t held,
                           const OpStrategy& was, const OpStrategy& now) {
    if (held != kNoSlot && !same_on(was, now, held, a)) return false;
    for (const std::uint32_t k : slots)
      if (!same_on(was, now, k, a)) return false;
    return true;
  }

  // Whether slot k of strategies `was` and `now` has the same layout and
  // slice divisor on axis a: all a tensor's redistribution reads of it there.
  static bool same_on(const OpStrategy& was, const OpStrategy& now, std::size_t k, std::size_t a) {
    return was.layout[k][a] == now.layout[k][a] && was.divisor[k][a] == now.divisor[k][a];
  }

  // The strategy ids of t's holder and of its uses, in use order, packed
  // into one word of 64 / (1 + uses) bits each (at most 32): a tensor's
  // redistribution seconds are a function of them alone. False where an id
  // does not fit its bits, or the word is Memo::kNoKey.
  bool edge_key(ir::TensorId t, ir::OpId swapped, const Held* alt, std::uint64_t& key) const {
    const std::size_t n = 1 + uses(t);
    if (n > 64) return false;
    const auto bits = static_cast<unsigned>(std::min<std::size_t>(32, 64 / n));
    const auto add = [&](ir::OpId o) {
      const std::uint64_t id = strategy(o, swapped, alt).id;
      if ((id >> bits) != 0) return false;
      key = (key << bits) | id;
      return true;
    };
    key = 0;
    if (!add(flat_.holder_op[t])) return false;
    for (std::size_t x = flat_.use_off[t]; x < flat_.use_off[t + 1]; ++x)
      if (!add(flat_.uses[x])) return false;
    return key != Memo::kNoKey;
  }

  // Inference: the largest working set and the runner-up's owner, so that
  // one operator's change is answered in O(1).
  void rebuild_peak() {
    works_.resize(cur_.size());
    for (std::size_t o = 0; o < cur_.size(); ++o) works_[o] = cur_[o]->s.work;
    std::sort(works_.begin(), works_.end());
    suffix_.assign(works_.size() + 1, 0.0);
    for (std::size_t i = works_.size(); i-- > 0;) suffix_[i] = suffix_[i + 1] + works_[i];
    peak_ = 0;
    second_ = 0;
    peak_op_ = ir::kNone;
    for (std::size_t o = 0; o < cur_.size(); ++o) {
      const double w = cur_[o]->s.work;
      if (w > peak_) {
        second_ = peak_;
        peak_ = w;
        peak_op_ = static_cast<ir::OpId>(o);
      } else {
        second_ = std::max(second_, w);
      }
    }
  }

  // How far over the budget the plan is with `held` bytes held and
  // operator o's working set `work` (o == kNone: as they are). Training:
  // the excess of the total. Inference: the excess of every operator's
  // working set over what the held bytes leave, summed, so that operators
  // tied at the peak each count (a move of one alone lowers no maximum).
  [[nodiscard]] double overflow(double held, ir::OpId o, double work) const {
    if (ctx_.opts.mode != Mode::Infer) return std::max(0.0, held - ctx_.budget);
    const double room = ctx_.budget - held;
    // Works above `room`, from the sorted list and its suffix sums.
    const auto it = std::upper_bound(works_.begin(), works_.end(), room);
    const auto i = static_cast<std::size_t>(it - works_.begin());
    double total = suffix_[i] - static_cast<double>(works_.size() - i) * room;
    if (o != ir::kNone) {
      total -= std::max(0.0, cur_[o]->s.work - room);
      total += std::max(0.0, work - room);
    }
    return std::max(0.0, total);
  }

  [[nodiscard]] double peak_with(ir::OpId o, double work) const {
    if (ctx_.opts.mode != Mode::Infer) return 0.0;
    const double others = o == peak_op_ ? second_ : peak_;
    return std::max(others, work);
  }

  // o's current strategy, with its neighbouring strategies listed on the
  // first ask (Held::moves, then Held::swaps): those that differ from it on
  // one axis (legal for the loops' splits on every axis), then those with
  // two axes of one size swapped.
  const Held& neighbours_of(ir::OpId o) const {
    const Held& held = *cur_[o];
    if (held.listed) return held;
    const auto& now = held.s.cuts;
    std::vector<std::int16_t>& cuts = cuts_;
    cuts = now;
    for (std::size_t a = 0; a < ctx_.mesh.size(); ++a) {
      // Splits of the other axes; the choice on `a` must divide what they leave.
      splits_.assign(ctx_.spaces[o].loops.size(), 1);
      for (std::size_t b = 0; b < ctx_.mesh.size(); ++b)
        if (b != a && now[b] != plan::kReplicated)
          splits_[static_cast<std::size_t>(now[b])] *= ctx_.mesh[b].size;
      legal_choices(ctx_.g, o, ctx_.spaces[o], splits_, ctx_.mesh[a].size, choices_);
      for (std::int16_t c : choices_) {
        if (c == now[a]) continue;
        cuts[a] = c;
        held.moves.push_back(&memo_->strategy(ctx_, o, cuts));
      }
      cuts[a] = now[a];
    }
    // Two axes trading their choices: the same loops cut as often, on other
    // links (a reduction's all-reduce from the slow level to the fast one;
    // within a level, a collective at another depth of the schedule).
    for (std::size_t a = 0; a < ctx_.mesh.size(); ++a)
      for (std::size_t b = a + 1; b < ctx_.mesh.size(); ++b) {
        if (now[a] == now[b] || ctx_.mesh[a].size != ctx_.mesh[b].size) continue;
        std::swap(cuts[a], cuts[b]);
        held.swaps.push_back(&memo_->strategy(ctx_, o, cuts));
        std::swap(cuts[a], cuts[b]);
      }
    held.listed = true;
    return held;
  }

  // The best move of o, taken if it helps: see the file comment.
  bool improve(ir::OpId o, double untouched) {
    const auto ts = touched(o);
    const OpStrategy& now = cur_[o]->s;
    double edges_now = 0;
    for (ir::TensorId t : ts) edges_now += edge_[t];
    const double mem_now = held_ + peak_ + untouched;
    const bool over = mem_now > ctx_.budget;
    const double overflow_now = over ? overflow(held_ + untouched, ir::kNone, 0.0) : 0.0;
    // Over budget: moves that free memory, those that also save time first
    // (by memory freed), then by memory freed per second added. Within
    // budget: moves that fit, by time saved.
    if (over) sensitive_ = true;
    std::pair<int, double> best_score{0, 0.0};
    const Held* best = nullptr;
    double best_mem = 0;
    const auto consider = [&](const Held& alt) {
      const double hc = hidden_change(now, alt.s);
      const auto dt_of = [&](double edges) { return alt.s.own + edges - now.own - edges_now + hc; };
      // Within budget a move must save kMinGain before anything else is
      // asked of it; over budget every move is scored.
      const double min_gain = -kMinGain * (now.own + edges_now);
      const double edges_alt =
          edges_unless(ts, o, &alt, [&](double e) { return !over && dt_of(e) >= min_gain; });
      const double dt = dt_of(edges_alt);
      const double mem_alt = held_ - now.mem + alt.s.mem + peak_with(o, alt.s.work) + untouched;
      std::pair<int, double> score;
      if (over) {
        const double freed =
            overflow_now - overflow(held_ - now.mem + alt.s.mem + untouched, o, alt.s.work);
        if (freed <= 0) return;
        score = dt <= 0 ? std::pair{1, freed} : std::pair{0, freed / dt};
      } else {
        if (dt >= min_gain) return;
        if (mem_alt > ctx_.budget) {
          binding_ = true;
          return;
        }
        score = {0, -dt};
      }
      if (best != nullptr && score <= best_score) return;
      best_score = score;
      best = &alt;
      best_mem = mem_alt;
    };
    const Held& listed = neighbours_of(o);
    for (const auto* list : {&listed.moves, &listed.swaps})
      for (const Held* alt : *list) consider(*alt);
    if (best == nullptr) return false;
    if (!over) path_mem_ = std::max(path_mem_, best_mem);
    held_ += best->s.mem - cur_[o]->s.mem;
    move_to(o, best);
    if (ctx_.opts.mode == Mode::Infer) rebuild_peak();
    return true;
  }

  const Context ctx_;
  // Overlap of parameter-gradient collectives (CostParams::overlap) and
  // the microbatches of a step (hidden()); the totals over the current
  // strategies of compute and of those collectives, once and repeated.
  const bool overlap_ = ctx_.opts.cost.overlap && ctx_.opts.mode == Mode::Train;
  const double micro_ = static_cast<double>(std::max<std::int64_t>(ctx_.training.microbatches, 1));
  double compute_ = 0, once_ = 0, repeated_ = 0;
  // Small graphs (kSmallGraphWork): propagated regions as well, over the
  // budget too, spanning up to kSmallRegionDepth hops and kSmallRegionOps
  // operators (a sharding that pays only from one end of an attention
  // block to the other).
  const bool small_ = small_graph(ctx_.g, ctx_.mesh.size());
  const int region_depth_ = small_ ? kSmallRegionDepth : kRegionDepth;
  const std::size_t region_ops_ = small_ ? kSmallRegionOps : kRegionOps;
  FlatGraph flat_;                // holders, uses and touched tensors
  std::shared_ptr<Memo> memo_;    // shared with copies (kick())
  std::vector<const Held*> cur_;  // in memo_
  std::vector<std::uint8_t> movable_;
  std::vector<double> edge_;  // redistribution seconds of each tensor
  // Per tensor and mesh axis: edge_'s sum before that axis (tensor_edge).
  std::vector<double> prefix_;
  // Counted requests (kIncrementalUses): per tensor its index among those
  // counted (-1: priced by recount), per counted tensor and axis its requests.
  std::vector<std::int32_t> request_index_;
  std::vector<std::vector<Request>> requests_;
  // Per entry of requests_: that axis's seconds under the current
  // strategies, as counted_edge last priced them.
  mutable std::vector<double> axis_edge_;
  double held_ = 0;                                     // parameter state and saved activations
  std::vector<std::pair<ir::OpId, const Held*>> undo_;  // a region's changes, in order
  std::vector<std::pair<ir::OpId, int>> region_;        // breadth-first: operator, hops
  double peak_ = 0, second_ = 0;                        // inference working sets
  std::vector<double> works_, suffix_;  // inference: sorted working sets, suffix sums
  ir::OpId peak_op_ = ir::kNone;
  // Scratch, reused so that the hot loops allocate nothing.
  mutable std::vector<UseRows> rows_;
  mutable std::vector<std::int16_t> cuts_, choices_;
  mutable std::vector<std::int64_t> splits_;
  mutable std::vector<double> removed_;
  mutable std::vector<ir::TensorId> shared_;
  mutable std::vector<std::uint32_t> slots_;
  std::vector<std::size_t> froms_;  // move_to's first changed axis per tensor
  // index_inputs: per tensor, the operator last indexed that reads it, and
  // its first slot there.
  mutable std::vector<ir::OpId> slot_op_;
  mutable std::vector<std::uint32_t> slot_at_;
  // PolishResult::path_memory and budget_sensitive (best_response, const, notes its choice).
  mutable double path_mem_ = 0;
  bool sensitive_ = false;
  mutable bool binding_ = false;  // PolishResult::budget_binding
};

}  // namespace

PolishResult kick(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                  const Cluster& cluster, const SearchOptions& opts, double budget,
                  plan::Plan& plan, double evaluated_memory) {
  const std::size_t axes = cluster.cuts().size();
  if (!polish_applies(g, axes) || g.num_operators() > kKickOps ||
      polish_work(g, axes) > kKickWork || evaluated_memory < kKickBinding * budget)
    return {};
  const Context ctx(g, spaces, cluster, opts, budget);
  const double untouched = std::max(0.0, evaluated_memory - Polish(ctx, plan).memory());
  PolishResult r;
  r.budget_sensitive = r.budget_binding = true;  // kicks hold operators whatever that costs
  // Plans reached on letting a kicked operator go: polish from the same
  // plan gives the same result (its state is a function of the cuts), so a
  // kick that lands on one already seen, or on the plan kicked from (the
  // fastest plan, already polished), is not polished again.
  std::set<std::vector<std::vector<std::int16_t>>> seen;
  for (int round = 0; round < kKickRounds; ++round) {
    const Polish base(ctx, plan);
    double best =
        base.fits_now(untouched) ? base.step_time() : std::numeric_limits<double>::infinity();
    plan::Plan trial = plan;
    seen.insert(plan.cuts);
    std::vector<std::vector<std::int16_t>> best_cuts;
    for (ir::OpId o = 0; o < g.num_operators(); ++o)
      for (const auto& cuts : base.kicks(o)) {
        Polish q(base);
        q.force(o, cuts);
        (void)q.run(trial, untouched);
        q.release(o);
        if (!seen.insert(trial.cuts).second) continue;
        (void)q.run(trial, untouched);
        if (!q.fits_now(untouched) || q.step_time() >= best * (1 - kKickGain)) continue;
        best = q.step_time();
        best_cuts = trial.cuts;
      }
    if (best_cuts.empty()) break;
    plan.cuts = std::move(best_cuts);
    r.changed = true;
    r.step_time_s = best;
  }
  return r;
}

PolishResult polish(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                    const Cluster& cluster, const SearchOptions& opts, double budget,
                    plan::Plan& plan, double evaluated_memory) {
  if (!polish_applies(g, cluster.cuts().size())) return {};
  const Context ctx(g, spaces, cluster, opts, budget);
  Polish p(ctx, plan);
  // What no operator accounts for (tensors nobody touches, held whole).
  const double untouched = std::max(0.0, evaluated_memory - p.memory());
  PolishResult r;
  r.changed = p.run(plan, untouched);
  r.step_time_s = p.step_time();
  r.path_memory = p.path_memory();
  r.budget_sensitive = p.budget_sensitive();
  r.budget_binding = p.budget_binding();
  return r;
}

}  // namespace recsearch::search::detail
