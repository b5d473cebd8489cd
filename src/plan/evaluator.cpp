// SPDX-License-Identifier: Apache-2.0
// The reference evaluator: step time, communication and memory of a plan,
// recomputed from its cuts alone (plan/evaluator.hpp states the model).
//
// The search keeps its own incremental bookkeeping; this file deliberately
// shares none of it, so that tests can check that what the search reports
// equals what its plan costs. It walks the mesh axes in order and, per axis,
// every operand once: the layout each operator wants for each operand on
// that axis, the holder's layout of each tensor, and the collectives the
// differences imply. Per operand it carries only an integer divisor (product
// of the sizes of earlier axes on which that operand is sharded), so time
// and memory are O(axes * (V + E)) even for graphs of millions of operators.
#include "recsearch/plan/evaluator.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "recsearch/error.hpp"
#include "recsearch/ir/gradients.hpp"
#include "recsearch/plan/precision.hpp"

namespace recsearch::plan {
namespace {

using cost::AxisLayout;
using cost::Collective;
using cost::LayoutKind;
using cost::Phase;

constexpr std::uint32_t kNoSlot = 0xFFFFFFFFu;

// Every operand of every operator as one flat array of "slots": operator o
// owns slots begin[o] .. begin[o+1], its inputs first, then its outputs.
// Per-axis state (layouts, divisors) is indexed by slot.
struct Slots {
  std::vector<std::uint32_t> begin;     // per operator, plus one end entry
  std::vector<std::uint32_t> n_inputs;  // per operator
  std::vector<ir::TensorId> tensor;     // per slot
  std::vector<ir::OpId> op;             // per slot
  // Uses of each tensor as input slots, in (operator id, input index)
  // order: uses[use_begin[t] .. use_begin[t+1]].
  std::vector<std::uint32_t> use_begin;
  std::vector<std::uint32_t> uses;
  // The slot whose layout holds each tensor (kNoSlot: nobody touches it).
  std::vector<std::uint32_t> holder;
};

Slots build_slots(const ir::Graph& g) {
  const std::size_t n_ops = g.num_operators();
  const std::size_t n_tensors = g.num_tensors();
  Slots s;
  s.begin.resize(n_ops + 1);
  s.n_inputs.resize(n_ops);
  std::size_t total = 0;
  for (ir::OpId o = 0; o < n_ops; ++o) {
    const auto& op = g.op(o);
    s.begin[o] = static_cast<std::uint32_t>(total);
    s.n_inputs[o] = static_cast<std::uint32_t>(op.inputs.size());
    total += op.inputs.size() + op.outputs.size();
  }
  s.begin[n_ops] = static_cast<std::uint32_t>(total);
  s.tensor.resize(total);
  s.op.resize(total);
  s.use_begin.assign(n_tensors + 1, 0);
  for (ir::OpId o = 0; o < n_ops; ++o) {
    const auto& op = g.op(o);
    std::uint32_t slot = s.begin[o];
    for (const ir::TensorId t : op.inputs) {
      s.tensor[slot] = t;
      s.op[slot++] = o;
      ++s.use_begin[t + 1];
    }
    for (const ir::TensorId t : op.outputs) {
      s.tensor[slot] = t;
      s.op[slot++] = o;
    }
  }
  for (std::size_t t = 0; t < n_tensors; ++t) s.use_begin[t + 1] += s.use_begin[t];
  s.uses.resize(s.use_begin[n_tensors]);
  std::vector<std::uint32_t> fill(s.use_begin.begin(), s.use_begin.end() - 1);
  s.holder.assign(n_tensors, kNoSlot);
  for (ir::OpId o = 0; o < n_ops; ++o) {
    const std::uint32_t first = s.begin[o];
    for (std::uint32_t j = 0; j < s.n_inputs[o]; ++j)
      s.uses[fill[s.tensor[first + j]]++] = first + j;
    for (std::uint32_t slot = first + s.n_inputs[o]; slot < s.begin[o + 1]; ++slot) {
      s.holder[s.tensor[slot]] = slot;  // the producer's output
    }
  }
  for (std::size_t t = 0; t < n_tensors; ++t) {
    // Not produced: held the way its first use (lowest op, lowest slot) wants it.
    if (s.holder[t] == kNoSlot && s.use_begin[t] != s.use_begin[t + 1]) {
      s.holder[t] = s.uses[s.use_begin[t]];
    }
  }
  return s;
}

// Throws kPlan for plans whose shape would make the evaluation read out of
// bounds; the full legality check is check_plan's.
void check_shape(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces, const Plan& p) {
  if (p.cuts.size() != g.num_operators()) {
    throw Error(Errc::kPlan,
                "plan has " + std::to_string(p.cuts.size()) + " operators but the graph has " +
                    std::to_string(g.num_operators()),
                "/operators");
  }
  if (spaces.size() != g.num_operators()) {
    throw Error(Errc::kInternal, "operator spaces do not match the graph");
  }
  for (std::size_t o = 0; o < p.cuts.size(); ++o) {
    const std::string path = "/operators/" + std::to_string(o) + "/cuts";
    if (p.cuts[o].size() != p.mesh.size()) {
      throw Error(Errc::kPlan,
                  "cuts do not match the mesh's " + std::to_string(p.mesh.size()) + " axes", path);
    }
    for (std::size_t a = 0; a < p.cuts[o].size(); ++a) {
      const int c = p.cuts[o][a];
      if (c != kReplicated && (c < 0 || static_cast<std::size_t>(c) >= spaces[o].loops.size())) {
        throw Error(Errc::kPlan, "loop index " + std::to_string(c) + " out of range",
                    path + "/" + std::to_string(a));
      }
    }
  }
}

// Dims of operand slot `j` of an operator (inputs first, then outputs) in
// its space; empty when the space lists fewer operands.
std::span<const int> operand_dims(const algebra::OpSpace& s, std::uint32_t j,
                                  std::uint32_t n_inputs) {
  if (j < n_inputs) return j < s.inputs.size() ? s.inputs[j] : std::span<const int>{};
  j -= n_inputs;
  return j < s.outputs.size() ? s.outputs[j] : std::span<const int>{};
}

// Where the events go, by EvalDetail: listed (Full), summed into the
// redistribution summary (Shardings) or dropped (Summary). Every detail
// keeps the totals the Summary needs, added in event order, so that the
// three give the same doubles.
struct EventSink {
  std::vector<CommEvent>* list = nullptr;
  RedistributionSummary* summary = nullptr;
  double communication_s = 0;  // every event's seconds
  // Of the current axis: parameter-gradient collectives once per step, and
  // those each microbatch repeats (what overlap may hide).
  double parameter_once_s = 0;
  double parameter_repeated_s = 0;
};

// Collects the events of one axis and charges them to operators.
class AxisEvents {
 public:
  AxisEvents(const ir::Graph& g, std::uint32_t axis, const Cut& cut, const CostParams& params,
             EventSink& out, std::vector<OpCost>& op_costs)
      : g_(g), axis_(axis), cut_(cut), params_(params), out_(out), op_costs_(op_costs) {}

  // An event whose one occurrence takes `seconds`, `repeats` times a step.
  void add(CommReason reason, ir::TensorId t, ir::OpId from, ir::OpId to, Collective c, Phase ph,
           double group_bytes, double seconds, std::int64_t repeats) {
    CommEvent e;
    e.tensor = t;
    e.from = from;
    e.to = to;
    e.axis = axis_;
    e.collective = c;
    e.phase = ph;
    e.reason = reason;
    e.bytes = cost::collective_bytes(c, group_bytes, cut_);
    e.repeats = static_cast<std::uint32_t>(repeats);
    e.seconds = seconds * static_cast<double>(repeats);
    op_costs_[reason == CommReason::Layout ? to : from].communication_s += e.seconds;
    out_.communication_s += e.seconds;
    if (reason == CommReason::Gradient && g_.tensor(t).kind == ir::TensorKind::Parameter)
      (e.repeats == 1 ? out_.parameter_once_s : out_.parameter_repeated_s) += e.seconds;
    if (out_.list != nullptr) out_.list->push_back(e);
    if (out_.summary != nullptr) out_.summary->add(e);
  }

  // A collective priced by the cost model, repeated in every microbatch.
  void add(CommReason reason, ir::TensorId t, ir::OpId from, ir::OpId to, Collective c, Phase ph,
           double group_bytes, std::int64_t repeats) {
    add(reason, t, from, to, c, ph, group_bytes,
        cost::collective_seconds(c, group_bytes, cut_, params_), repeats);
  }

  [[nodiscard]] const Cut& cut() const noexcept { return cut_; }

 private:
  const ir::Graph& g_;
  std::uint32_t axis_;
  const Cut& cut_;
  const CostParams& params_;
  EventSink& out_;
  std::vector<OpCost>& op_costs_;
};

// One wanted (layout, divisor) of a tensor on an axis, and where it first
// occurs among the tensor's uses.
struct Want {
  AxisLayout layout;
  std::int64_t divisor;
  std::uint32_t first;  // position in the tensor's use list

  [[nodiscard]] auto key() const { return std::tuple(layout.kind, layout.dim, divisor); }
};

// One evaluation: the graph's slots and the per-slot, per-loop state carried
// from axis to axis. evaluate() runs, per mesh axis, the operand layouts and
// the numbered steps of evaluator.hpp, then compute and memory once.
class Evaluator {
 public:
  Evaluator(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces, const Plan& p,
            const CostParams& params, Evaluation& ev)
      : g_(g),
        spaces_(spaces),
        p_(p),
        params_(params),
        ev_(ev),
        n_ops_(g.num_operators()),
        n_tensors_(g.num_tensors()),
        train_(p.mode == Mode::Train),
        zero_(train_ ? parameter_zero(g, p.training) : std::vector<int>(g.num_tensors(), 0)),
        m_(train_ ? p.training.microbatches : 1),
        slots_(build_slots(g)),
        divisor_(slots_.tensor.size(), 1),
        full_bytes_(n_tensors_),
        loop_begin_(n_ops_ + 1, 0),
        layout_(slots_.tensor.size()) {
    for (ir::TensorId t = 0; t < n_tensors_; ++t) full_bytes_[t] = g.tensor(t).bytes();
    for (ir::OpId o = 0; o < n_ops_; ++o)
      loop_begin_[o + 1] = loop_begin_[o] + spaces[o].loops.size();
    loop_split_.assign(loop_begin_[n_ops_], 1);
    build_layout_codes();
    zero_ways_.assign(n_tensors_, 1);
    if (train_) {
      rules_ = memory_rules(g, spaces, operator_recompute(g, p.training));
      // Asked per mesh axis of every replicated input (gradient_events):
      // worked out once per slot, not from the graph each time.
      slot_grad_.assign(slots_.tensor.size(), 0);
      for (ir::OpId o = 0; o < n_ops_; ++o)
        for (std::uint32_t j = 0; j < slots_.n_inputs[o]; ++j)
          slot_grad_[slots_.begin[o] + j] =
              ir::input_takes_gradient(g, rules_.grads, g.op(o), j) ? 1 : 0;
      const ZeroAxes zero = zero_axes(g, spaces, p);
      for (ir::TensorId t = 0; t < n_tensors_; ++t)
        for (const std::uint32_t a : zero.of(t))
          zero_ways_[t] *= static_cast<std::uint32_t>(p.mesh[a].size);
    }
  }

  // The empty shardings a Full or Shardings evaluation fills.
  void init_shardings() {
    std::vector<std::uint32_t> ranks(n_tensors_);
    for (std::size_t t = 0; t < n_tensors_; ++t)
      ranks[t] = static_cast<std::uint32_t>(g_.tensor(static_cast<ir::TensorId>(t)).rank());
    ev_.tensors = TensorShardings(std::move(ranks), p_.mesh.size());
  }

  // The strategies a Full evaluation reports.
  void init_strategies() {
    ev_.strategies.reserve(n_ops_);
    for (ir::OpId o = 0; o < n_ops_; ++o)
      ev_.strategies.push_back(strategy_of(spaces_[o], p_.mesh, p_.cuts[o]));
  }

  // Every operand's layout on axis a.
  void set_layouts(std::uint32_t a) {
    for (ir::OpId o = 0; o < n_ops_; ++o) {
      const int c = p_.cuts[o][a];
      const std::uint32_t n_in = slots_.n_inputs[o];
      const std::size_t loops = loop_begin_[o + 1] - loop_begin_[o];
      const bool coded = c >= 0 && static_cast<std::size_t>(c) < loops && codes_exact_;
      for (std::uint32_t slot = slots_.begin[o]; slot < slots_.begin[o + 1]; ++slot) {
        const std::uint32_t j = slot - slots_.begin[o];
        if (c == kReplicated) {
          layout_[slot] = AxisLayout::replicate();
        } else if (coded) {
          layout_[slot] = decode(codes_[code_begin_[o] + j * loops + static_cast<std::size_t>(c)]);
        } else {
          layout_[slot] =
              wanted_layout(spaces_[o], c, operand_dims(spaces_[o], j, n_in), j >= n_in);
        }
      }
    }
  }

  // The events of axis a, steps 1 to 4 in order, into `sink`; then the
  // axis's parameter collectives, which overlap may hide (an axis of size 1
  // moves nothing: no events, nothing hidden).
  void add_events(std::uint32_t a, EventSink& sink) {
    sink.parameter_once_s = 0;
    sink.parameter_repeated_s = 0;
    if (p_.mesh[a].size > 1) {
      AxisEvents events(g_, a, p_.mesh[a], params_, sink, ev_.op_costs);
      layout_events(events);
      if (train_) gradient_events(a, events);
      halo_events(a, events);
      output_events(events);
    }
    hidden_once_.push_back(sink.parameter_once_s);
    hidden_repeated_.push_back(sink.parameter_repeated_s);
  }

  // Advances the per-slot divisors, per-loop splits and, where the
  // evaluation reports them (`shardings`), the holders' shardings past axis a.
  void advance(std::uint32_t a, bool shardings) {
    // Axis sizes multiply to at most kMaxDevices (2^31): 32 bits hold
    // every divisor and split.
    const auto k = static_cast<std::uint32_t>(p_.mesh[a].size);
    for (std::size_t slot = 0; slot < layout_.size(); ++slot) {
      if (layout_[slot].kind == LayoutKind::Shard) divisor_[slot] *= k;
    }
    for (ir::OpId o = 0; o < n_ops_; ++o) {
      const int c = p_.cuts[o][a];
      if (c != kReplicated) loop_split_[loop_begin_[o] + static_cast<std::size_t>(c)] *= k;
    }
    if (shardings) record_shardings(a);
  }

  // Compute: each operator's share of the work on its final slices, in
  // every microbatch, and once more forward where it is recomputed.
  void compute(const DeviceSpec& dev) {
    Summary& sum = ev_.summary;
    const double m = static_cast<double>(m_);
    for (ir::OpId o = 0; o < n_ops_; ++o) {
      double ways = 1;
      for (std::size_t a = 0; a < p_.mesh.size(); ++a) {
        if (p_.cuts[o][a] != kReplicated) ways *= static_cast<double>(p_.mesh[a].size);
      }
      double touched = 0;
      for (std::uint32_t slot = slots_.begin[o]; slot < slots_.begin[o + 1]; ++slot) {
        touched += slice_bytes(slot);
      }
      const double flops = spaces_[o].flops / ways;
      const Precision prec = operator_precision(g_, o, params_);
      const bool again = train_ && rules_.recomputed[o] != 0;
      const cost::StepCompute c =
          cost::step_compute(flops, touched, dev, prec, params_, p_.mode,
                             train_ ? rules_.backward_share[o] : 1.0, again);
      double t = m * c.passes;
      if (train_) sum.backward_compute_s += m * (c.passes - c.forward);
      if (again) {
        sum.recompute_s += m * c.recompute;
        t += m * c.recompute;
      }
      ev_.op_costs[o].compute_s = t;
      sum.compute_s += t;
    }
  }

  // Step time: compute plus the communication it does not hide.
  void step_time() {
    Summary& sum = ev_.summary;
    for (const double x : hidden_once_) sum.parameter_comm_s += x;
    for (const double x : hidden_repeated_) sum.parameter_comm_repeated_s += x;
    finish_step_time(sum, m_, params_.overlap);
  }

  // Memory: parameter state (ZeRO-sharded over each parameter's
  // data-parallel axes) and the saved activations of one microbatch in the
  // holders' layouts, plus, under full recomputation, the largest
  // segment's while its backward runs; a tensor nobody touches is held whole.
  void memory() {
    Summary& sum = ev_.summary;
    std::vector<double> segment(static_cast<std::size_t>(std::max(rules_.segments, 0)), 0.0);
    for (ir::TensorId t = 0; t < n_tensors_; ++t) {
      const ir::Tensor& tensor = g_.tensor(t);
      const std::uint32_t h = slots_.holder[t];
      const double slice = h == kNoSlot ? full_bytes_[t] : slice_bytes(h);
      if (tensor.kind == ir::TensorKind::Parameter) {
        const ParameterState st =
            parameter_state(params_, p_.mode, static_cast<int>(ir::dtype_size(tensor.dtype)));
        const auto ways = static_cast<double>(zero_ways_[t]);
        const int zero = zero_[t];
        const double one_way = zero >= 1 ? ways : 1.0;
        sum.parameter_bytes += slice * st.sharded(zero, ways);
        sum.gradient_bytes += slice * st.gradient / (zero >= 2 ? ways : 1.0);
        sum.optimizer_bytes += slice * st.optimizer / one_way;
      } else if (train_) {
        sum.activation_bytes += slice * rules_.saved[t];
        if (rules_.segment[t] >= 0)
          segment[static_cast<std::size_t>(rules_.segment[t])] += slice * rules_.saved_if_kept[t];
      }
    }
    if (!segment.empty()) sum.activation_bytes += *std::max_element(segment.begin(), segment.end());
    if (!train_) sum.activation_bytes = std::max(sum.activation_bytes, largest_working_set());
    sum.memory_per_device_bytes = sum.parameter_bytes + sum.activation_bytes;
  }

 private:
  // The slot's slice: the tensor's bytes / the slot's divisor so far.
  [[nodiscard]] double slice_bytes(std::uint32_t slot) const {
    return full_bytes_[slots_.tensor[slot]] / static_cast<double>(divisor_[slot]);
  }

  // 1. Layout: every distinct (layout, divisor) a use wants that the holder lacks.
  void layout_events(AxisEvents& events) {
    for (ir::TensorId t = 0; t < n_tensors_; ++t) {
      const std::uint32_t h = slots_.holder[t];
      if (h == kNoSlot) continue;
      collect_wants(t, h);
      const double bytes = full_bytes_[t];
      for (const Want& w : wants_) {
        cost::RedistStep steps[2];
        const int n = cost::redistribution_steps(layout_[h], w.layout, p_.mode, steps);
        const ir::OpId to = slots_.op[slots_.uses[w.first]];
        for (int i = 0; i < n; ++i) {
          events.add(CommReason::Layout, t, slots_.op[h], to, steps[i].collective, steps[i].phase,
                     bytes / static_cast<double>(w.divisor), m_);
        }
      }
    }
  }

  // The distinct wants of tensor t's uses that differ from its holder h's
  // layout, each at its first use, in use order (into wants_).
  void collect_wants(ir::TensorId t, std::uint32_t h) {
    const AxisLayout held = layout_[h];
    wants_.clear();
    for (std::uint32_t u = slots_.use_begin[t]; u < slots_.use_begin[t + 1]; ++u) {
      const std::uint32_t slot = slots_.uses[u];
      if (slot == h || layout_[slot] == held) continue;
      wants_.push_back({layout_[slot], divisor_[slot], u});
    }
    if (wants_.size() <= 1) return;
    // Keep the first use of each distinct want, then restore use order.
    std::stable_sort(wants_.begin(), wants_.end(),
                     [](const Want& x, const Want& y) { return x.key() < y.key(); });
    wants_.erase(std::unique(wants_.begin(), wants_.end(),
                             [](const Want& x, const Want& y) { return x.key() == y.key(); }),
                 wants_.end());
    std::sort(wants_.begin(), wants_.end(),
              [](const Want& x, const Want& y) { return x.first < y.first; });
  }

  // 2. Gradient: inputs the cut replicates get partial gradients, synchronised
  // as cost::gradient_sync_steps says (ZeRO for parameters, whose state is
  // sharded over zero_axes: the axes where this happens at their holder).
  void gradient_events(std::uint32_t a, AxisEvents& events) {
    for (ir::OpId o = 0; o < n_ops_; ++o) {
      if (p_.cuts[o][a] == kReplicated) continue;
      for (std::uint32_t slot = slots_.begin[o]; slot < slots_.begin[o] + slots_.n_inputs[o];
           ++slot) {
        if (layout_[slot].kind != LayoutKind::Replicate || slot_grad_[slot] == 0) continue;
        const ir::TensorId t = slots_.tensor[slot];
        const bool parameter = g_.tensor(t).kind == ir::TensorKind::Parameter;
        cost::SyncStep steps[3];
        const int n = cost::gradient_sync_steps(parameter, zero_[t], steps);
        for (int i = 0; i < n; ++i) {
          const double one = cost::sync_step_seconds(steps[i], slice_bytes(slot), parameter,
                                                     events.cut(), params_);
          events.add(CommReason::Gradient, t, o, ir::kNone, steps[i].collective, steps[i].phase,
                     slice_bytes(slot), one, steps[i].per_microbatch ? m_ : 1);
        }
      }
    }
  }

  // 3. Halo: a cut window loop exchanges boundary rows of the first input it splits.
  void halo_events(std::uint32_t a, AxisEvents& events) {
    for (ir::OpId o = 0; o < n_ops_; ++o) {
      const int c = p_.cuts[o][a];
      if (c == kReplicated) continue;
      const algebra::LoopDim& loop = spaces_[o].loops[static_cast<std::size_t>(c)];
      // Non-overlapping windows (kernel == stride) exchange nothing.
      if (loop.role != algebra::DimRole::Window || loop.halo == 0) continue;
      for (std::uint32_t j = 0; j < slots_.n_inputs[o]; ++j) {
        const std::uint32_t slot = slots_.begin[o] + j;
        if (layout_[slot].kind != LayoutKind::Shard) continue;
        halo_exchange(o, c, loop.halo, slot, events);
        break;
      }
    }
  }

  // The halo exchange of operator o's input `slot`, sharded by loop c.
  void halo_exchange(ir::OpId o, int c, std::int64_t halo, std::uint32_t slot, AxisEvents& events) {
    const ir::Tensor& tensor = g_.tensor(slots_.tensor[slot]);
    const auto d = static_cast<std::size_t>(layout_[slot].dim);
    // The dim maps to loop c only, so its extent so far was split
    // exactly by the earlier cuts of c.
    const double extent =
        static_cast<double>(tensor.shape[d]) /
        static_cast<double>(loop_split_[loop_begin_[o] + static_cast<std::size_t>(c)]);
    const double slice = slice_bytes(slot);
    const double group_bytes = static_cast<double>(halo) * slice / extent;
    events.add(CommReason::Halo, slots_.tensor[slot], o, ir::kNone, Collective::Halo,
               Phase::Forward, group_bytes, m_);
    if (train_) {
      events.add(CommReason::Halo, slots_.tensor[slot], o, ir::kNone, Collective::Halo,
                 Phase::Backward, group_bytes, m_);
    }
  }

  // 4. Output: a partial result nobody consumes is reduced for the user.
  void output_events(AxisEvents& events) {
    for (ir::OpId o = 0; o < n_ops_; ++o) {
      for (std::uint32_t slot = slots_.begin[o] + slots_.n_inputs[o]; slot < slots_.begin[o + 1];
           ++slot) {
        const ir::TensorId t = slots_.tensor[slot];
        if (layout_[slot].kind != LayoutKind::Partial || !g_.tensor(t).consumers.empty()) continue;
        events.add(CommReason::Output, t, o, ir::kNone, Collective::AllReduce, Phase::Forward,
                   slice_bytes(slot), m_);
      }
    }
  }

  // wanted_layout of every slot for every loop of its operator, once: on
  // each axis set_layouts then reads these bytes in slot order instead of
  // every operand's dim map (a cache miss each: 4*10^7 of them at 10^6
  // operators on 12 axes). A byte is kCodeReplicate, kCodePartial or the
  // sharded dim; a dim beyond a byte leaves set_layouts on wanted_layout.
  static constexpr std::int8_t kCodeReplicate = -1;
  static constexpr std::int8_t kCodePartial = -2;

  static AxisLayout decode(std::int8_t code) noexcept {
    if (code == kCodeReplicate) return AxisLayout::replicate();
    if (code == kCodePartial) return AxisLayout::partial();
    return AxisLayout::shard(code);
  }

  void build_layout_codes() {
    code_begin_.resize(n_ops_ + 1);
    std::size_t total = 0;
    for (ir::OpId o = 0; o < n_ops_; ++o) {
      code_begin_[o] = total;
      total += (slots_.begin[o + 1] - slots_.begin[o]) * (loop_begin_[o + 1] - loop_begin_[o]);
    }
    code_begin_[n_ops_] = total;
    codes_.resize(total);
    for (ir::OpId o = 0; o < n_ops_ && codes_exact_; ++o) {
      const std::uint32_t n_in = slots_.n_inputs[o];
      const std::size_t loops = loop_begin_[o + 1] - loop_begin_[o];
      for (std::uint32_t j = 0; j < slots_.begin[o + 1] - slots_.begin[o]; ++j) {
        const std::span<const int> dims = operand_dims(spaces_[o], j, n_in);
        for (std::size_t c = 0; c < loops; ++c) {
          const AxisLayout l = wanted_layout(spaces_[o], static_cast<int>(c), dims, j >= n_in);
          std::int8_t& code = codes_[code_begin_[o] + j * loops + c];
          if (l.kind == LayoutKind::Replicate) {
            code = kCodeReplicate;
          } else if (l.kind == LayoutKind::Partial) {
            code = kCodePartial;
          } else if (l.dim >= 0 && l.dim <= std::numeric_limits<std::int8_t>::max()) {
            code = static_cast<std::int8_t>(l.dim);
          } else {
            codes_exact_ = false;
          }
        }
      }
    }
  }

  // The holders' shardings on axis a, into the evaluation's tensors.
  void record_shardings(std::uint32_t a) {
    for (ir::TensorId t = 0; t < n_tensors_; ++t) {
      const std::uint32_t h = slots_.holder[t];
      if (h == kNoSlot) continue;
      if (layout_[h].kind == LayoutKind::Shard) {
        ev_.tensors.set_split(t, a, static_cast<std::size_t>(layout_[h].dim));
      } else if (layout_[h].kind == LayoutKind::Partial) {
        ev_.tensors.set_partial(t, a);
      }
    }
  }

  // Inference frees activations as it goes: only the largest working set
  // of one operator is live at once.
  [[nodiscard]] double largest_working_set() const {
    double largest = 0;
    for (ir::OpId o = 0; o < n_ops_; ++o) {
      double live = 0;
      for (std::uint32_t slot = slots_.begin[o]; slot < slots_.begin[o + 1]; ++slot) {
        if (g_.tensor(slots_.tensor[slot]).kind != ir::TensorKind::Parameter)
          live += slice_bytes(slot);
      }
      largest = std::max(largest, live);
    }
    return largest;
  }

  const ir::Graph& g_;
  const std::vector<algebra::OpSpace>& spaces_;
  const Plan& p_;
  const CostParams& params_;
  Evaluation& ev_;
  std::size_t n_ops_;
  std::size_t n_tensors_;
  bool train_;
  std::vector<int> zero_;  // per tensor: its ZeRO stage (parameter_zero)
  std::int64_t m_;         // microbatches
  Slots slots_;
  MemoryRules rules_;                     // training only
  std::vector<std::uint8_t> slot_grad_;   // training: per slot, 1 where an input takes a gradient
  std::vector<std::uint32_t> zero_ways_;  // per tensor: product of its ZeRO axes' sizes
  // Per axis (classify): parameter collectives once per step, and those each
  // microbatch repeats.
  std::vector<double> hidden_once_, hidden_repeated_;
  // Per slot: the product of the sizes of the axes so far on which the slot
  // is sharded (its slice is the tensor's bytes / divisor).
  std::vector<std::uint32_t> divisor_;
  std::vector<double> full_bytes_;
  // Per operator and loop: the product of the sizes of the axes so far that
  // cut the loop (flattened, loop_begin_[o] + loop).
  std::vector<std::size_t> loop_begin_;
  std::vector<std::uint32_t> loop_split_;
  std::vector<AxisLayout> layout_;  // per slot, on the current axis
  // build_layout_codes: per operator, its slots' codes (slot-major, then
  // loop) from code_begin_[o].
  std::vector<std::size_t> code_begin_;
  std::vector<std::int8_t> codes_;
  bool codes_exact_ = true;
  std::vector<Want> wants_;  // scratch of layout_events
};

}  // namespace

AxisLayout wanted_layout(const algebra::OpSpace& s, int c, std::span<const int> dims,
                         bool is_output) {
  if (c == kReplicated) return AxisLayout::replicate();
  for (std::size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] == c) return AxisLayout::shard(static_cast<int>(d));
  }
  if (is_output && s.loops[static_cast<std::size_t>(c)].role == algebra::DimRole::Reduction) {
    return AxisLayout::partial();
  }
  return AxisLayout::replicate();
}

std::string_view comm_reason_name(CommReason r) noexcept {
  switch (r) {
    case CommReason::Layout: return "layout";
    case CommReason::Gradient: return "gradient";
    case CommReason::Halo: return "halo";
    case CommReason::Output: return "output";
  }
  return "?";
}

namespace {

// The dense table of RedistributionSummary: every reason, phase and
// collective there is, times the plan's axes. Summing there, not through a
// map lookup per event, is what makes 9.4 M events cheap.
constexpr std::size_t kReasons = 4;      // CommReason
constexpr std::size_t kPhases = 2;       // cost::Phase
constexpr std::size_t kCollectives = 5;  // cost::Collective

auto total_key(const RedistributionSummary::Total& t) {
  return std::tuple(t.reason, t.phase, t.collective, t.axis);
}

}  // namespace

RedistributionSummary::RedistributionSummary(std::size_t axes)
    : axes_(axes), dense_(kReasons * kPhases * kCollectives * axes) {
  for (std::size_t i = 0; i < dense_.size(); ++i) {
    Total& t = dense_[i];
    t.axis = static_cast<std::uint32_t>(i % axes);
    t.collective = static_cast<cost::Collective>(i / axes % kCollectives);
    t.phase = static_cast<cost::Phase>(i / axes / kCollectives % kPhases);
    t.reason = static_cast<CommReason>(i / axes / kCollectives / kPhases);
  }
  heaviest_.reserve(kHeaviest + 1);
}

RedistributionSummary::Total& RedistributionSummary::slot(const CommEvent& e) {
  const auto r = static_cast<std::size_t>(e.reason);
  const auto ph = static_cast<std::size_t>(e.phase);
  const auto col = static_cast<std::size_t>(e.collective);
  if (r < kReasons && ph < kPhases && col < kCollectives && e.axis < axes_)
    return dense_[((r * kPhases + ph) * kCollectives + col) * axes_ + e.axis];
  const auto key = std::tuple(e.reason, e.phase, e.collective, e.axis);
  for (Total& t : other_)
    if (total_key(t) == key) return t;
  Total& t = other_.emplace_back();
  t.reason = e.reason;
  t.phase = e.phase;
  t.collective = e.collective;
  t.axis = e.axis;
  return t;
}

void RedistributionSummary::add(const CommEvent& e) {
  Total& t = slot(e);
  ++t.events;
  t.bytes += e.bytes;
  t.seconds += e.seconds;
  ++events_;
  // Most seconds first; an event ties after the earlier ones it equals, so
  // it enters a full list only when strictly costlier than the last.
  if (heaviest_.size() == kHeaviest && !(e.seconds > heaviest_.back().seconds)) return;
  const auto at = std::find_if(heaviest_.begin(), heaviest_.end(),
                               [&](const CommEvent& h) { return h.seconds < e.seconds; });
  heaviest_.insert(at, e);
  if (heaviest_.size() > kHeaviest) heaviest_.pop_back();
}

std::vector<RedistributionSummary::Total> RedistributionSummary::totals() const {
  std::vector<Total> out;
  for (const Total& t : dense_)
    if (t.events > 0) out.push_back(t);
  out.insert(out.end(), other_.begin(), other_.end());
  std::sort(out.begin(), out.end(),
            [](const Total& x, const Total& y) { return total_key(x) < total_key(y); });
  return out;
}

namespace {

Evaluation evaluate_graph(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                          const Cluster& cluster, const Plan& p, const CostParams& params,
                          EvalDetail detail) {
  check_shape(g, spaces, p);
  const bool shardings = detail != EvalDetail::Summary;
  Evaluation ev;
  ev.op_costs.assign(g.num_operators(), {});
  Evaluator e(g, spaces, p, params, ev);
  if (shardings) e.init_shardings();
  if (detail == EvalDetail::Full) e.init_strategies();

  EventSink sink;
  if (detail == EvalDetail::Full) sink.list = &ev.events;
  if (detail == EvalDetail::Shardings)
    sink.summary = &ev.redistribution_summary.emplace(p.mesh.size());
  for (std::uint32_t a = 0; a < p.mesh.size(); ++a) {
    e.set_layouts(a);
    e.add_events(a, sink);
    // An axis of size 1 has no events; its layouts still name it in shardings.
    e.advance(a, shardings);
  }

  e.compute(cluster.device());
  ev.summary.communication_s = sink.communication_s;
  e.step_time();
  e.memory();
  return ev;
}

}  // namespace

Evaluation evaluate(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                    const Cluster& cluster, const Plan& p, const CostParams& params,
                    EvalDetail detail) {
  check_training(g, p);
  if (p.mode == Mode::Train && p.training.microbatches > 1) {
    const auto view = microbatch_view(g, spaces, p.training.microbatches);
    if (!view)
      throw Error(Errc::kPlan, microbatch_error(g, p.training.microbatches),
                  "/training/microbatches");
    check_plan(view->graph, view->spaces, p);  // the cuts must divide the microbatch
    return evaluate_graph(view->graph, view->spaces, cluster, p, params, detail);
  }
  return evaluate_graph(g, spaces, cluster, p, params, detail);
}

// Parameter collectives overlap compute (DDP buckets, FSDP prefetch): those
// of each microbatch its own forward and backward, those once per step one
// microbatch's compute (the last backward, the next forward). The rest are
// on the critical path.
double exposed_communication(double rest, double once, double repeated_per_micro,
                             double micro_compute, std::int64_t m) noexcept {
  const double left = std::max(0.0, micro_compute - repeated_per_micro);
  return rest + std::max(0.0, once - left) +
         static_cast<double>(std::max<std::int64_t>(m, 1)) *
             std::max(0.0, repeated_per_micro - micro_compute);
}

void finish_step_time(Summary& s, std::int64_t microbatches, bool overlap) {
  const double m = static_cast<double>(std::max<std::int64_t>(microbatches, 1));
  const double micro_compute = s.compute_s / m;
  const double once = s.parameter_comm_s, repeated = s.parameter_comm_repeated_s;
  const double rest = s.communication_s - once - repeated;
  s.microbatch_s = micro_compute + (rest + repeated) / m;
  s.exposed_communication_s =
      overlap ? exposed_communication(rest, once, repeated / m, micro_compute, microbatches)
              : s.communication_s;
  s.step_time_s = s.compute_s + s.exposed_communication_s;
}

void check_training(const ir::Graph& g, const Plan& p) {
  const Training& t = p.training;
  if (t.zero_stage < 0 || t.zero_stage > kMaxZeroStage)
    throw Error(Errc::kPlan, "ZeRO stage " + std::to_string(t.zero_stage) + " is not 0, 1, 2 or 3",
                "/training/zero_stage");
  if (!t.zero_per_param.empty() && t.zero_per_param.size() != g.num_tensors())
    throw Error(Errc::kPlan,
                "plan has a ZeRO stage for " + std::to_string(t.zero_per_param.size()) +
                    " tensors but the graph has " + std::to_string(g.num_tensors()),
                "/training/zero_params");
  for (ir::TensorId i = 0; i < t.zero_per_param.size(); ++i) {
    // A stage, not a character: a negative one from a file is refused here.
    // NOLINTNEXTLINE(bugprone-signed-char-misuse)
    const int z = t.zero_per_param[i];
    if (g.tensor(i).kind == ir::TensorKind::Parameter && (z < 0 || z > kMaxZeroStage))
      throw Error(Errc::kPlan,
                  "ZeRO stage " + std::to_string(z) + " of parameter '" + g.tensor(i).name +
                      "' is not 0, 1, 2 or 3",
                  "/training/zero_params/" + g.tensor(i).name);
  }
  if (t.microbatches < 1)
    throw Error(Errc::kPlan,
                "microbatches must be at least 1, got " + std::to_string(t.microbatches),
                "/training/microbatches");
  if (t.microbatches > 1 && batch_size(g) % t.microbatches != 0)
    throw Error(Errc::kPlan, microbatch_error(g, t.microbatches), "/training/microbatches");
}

std::string microbatch_error(const ir::Graph& g, std::int64_t m) {
  const std::int64_t b = batch_size(g);
  if (b <= 0)
    return "the graph has no batch dimension to split into " + std::to_string(m) + " microbatches";
  return "the batch of " + std::to_string(b) + " does not split into " + std::to_string(m) +
         " microbatches (every tensor's batch dimension must divide)";
}

}  // namespace recsearch::plan
