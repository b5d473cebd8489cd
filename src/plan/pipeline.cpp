// SPDX-License-Identifier: Apache-2.0
// Pipeline plans (recsearch/plan/pipeline.hpp): stage graphs, group
// clusters, the shape checks, and the step time and memory of the 1F1B and
// interleaved schedules from per-stage evaluations. The per-stage costs come
// from plan::evaluate alone, so a pipeline is priced by the same model as
// an operator-level plan; this file adds only what lies between stages
// (point-to-point sends, the bubble, the microbatches kept in flight).
#include "recsearch/plan/pipeline.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <unordered_map>
#include <variant>

#include "recsearch/cost/model.hpp"
#include "recsearch/error.hpp"
#include "recsearch/ir/gradients.hpp"
#include "recsearch/plan/training.hpp"

namespace recsearch::plan {

std::string_view schedule_name(Schedule s) noexcept {
  return s == Schedule::Interleaved ? "interleaved" : "1f1b";
}

std::optional<Schedule> parse_schedule(std::string_view s) noexcept {
  if (s == "1f1b") return Schedule::OneFOneB;
  if (s == "interleaved") return Schedule::Interleaved;
  return std::nullopt;
}

namespace {

// Adds full-graph tensor t to the stage graph once; `kind` overrides its kind.
class TensorMap {
 public:
  TensorMap(const ir::Graph& g, ir::Graph& out) : g_(g), out_(out) {}

  ir::TensorId get(ir::TensorId t, ir::TensorKind kind) {
    const auto it = ids_.find(t);
    if (it != ids_.end()) return it->second;
    const ir::Tensor& x = g_.tensor(t);
    const ir::TensorId id = out_.add_tensor(x.name, x.shape, x.dtype, kind);
    ids_.emplace(t, id);
    return id;
  }

 private:
  const ir::Graph& g_;
  ir::Graph& out_;
  std::unordered_map<ir::TensorId, ir::TensorId> ids_;
};

[[noreturn]] void bad(const std::string& path, const std::string& what) {
  throw Error(Errc::kPlan, what, path);
}

std::string stage_path(std::size_t j) { return "/pipeline/stages/" + std::to_string(j); }

}  // namespace

StageGraph stage_graph(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                       ir::OpId first, ir::OpId last, const std::vector<std::uint8_t>* grads) {
  if (first >= last || last > g.num_operators())
    throw Error(Errc::kUsage, "stage_graph: operators [" + std::to_string(first) + ", " +
                                  std::to_string(last) + ") out of range");
  StageGraph sg;
  sg.graph = ir::Graph(g.name() + "/ops" + std::to_string(first) + "-" + std::to_string(last));
  TensorMap map(g, sg.graph);
  sg.graph.reserve(0, last - first);
  for (ir::OpId o = first; o < last; ++o) {
    const ir::Operator& op = g.op(o);
    ir::Operator copy = op;
    for (auto& t : copy.inputs) {
      const ir::Tensor& x = g.tensor(t);
      const bool outside = x.producer != ir::kNone && (x.producer < first || x.producer >= last);
      if (outside && std::find(sg.received.begin(), sg.received.end(), t) == sg.received.end())
        sg.received.push_back(t);
      t = map.get(t, outside ? ir::TensorKind::Input : x.kind);
    }
    for (auto& t : copy.outputs) {
      const ir::Tensor& x = g.tensor(t);
      if (std::any_of(x.consumers.begin(), x.consumers.end(),
                      [&](ir::OpId c) { return c >= last; }))
        sg.sent.push_back(t);
      t = map.get(t, ir::TensorKind::Activation);
    }
    sg.graph.add_operator(std::move(copy));
    sg.spaces.push_back(spaces[o]);
  }
  std::optional<std::vector<std::uint8_t>> own;
  if (grads == nullptr && !sg.received.empty()) grads = &own.emplace(ir::gradient_tensors(g));
  std::vector<ir::TensorId> gradient_inputs;
  for (const ir::TensorId t : sg.received)
    if ((*grads)[t] != 0) gradient_inputs.push_back(map.get(t, ir::TensorKind::Input));
  sg.graph.set_gradient_inputs(std::move(gradient_inputs));
  sg.graph.finalize();
  return sg;
}

namespace {

// How p contiguous device groups split the levels, outermost first: each
// level's size within a group, and the outermost level the split divides
// (of size > 1), whose link the groups' sends cross. nullopt when p does
// not split a prefix of the levels (whole outer levels, then a divisor of
// the next).
struct GroupSplit {
  std::vector<Level> levels;
  std::size_t link = 0;
};
std::optional<GroupSplit> split_levels(const Cluster& cluster, std::size_t p) {
  GroupSplit s{cluster.levels(), 0};
  if (p == 0 || s.levels.empty()) return std::nullopt;
  auto rest = static_cast<std::int64_t>(p);
  bool linked = false;
  for (std::size_t i = 0; i < s.levels.size() && rest > 1; ++i) {
    Level& l = s.levels[i];
    if (l.size > 1 && !linked) {
      s.link = i;
      linked = true;
    }
    if (l.size % rest == 0) {
      l.size /= rest;
      rest = 1;
    } else if (rest % l.size == 0) {
      rest /= l.size;
      l.size = 1;
    } else {
      return std::nullopt;
    }
  }
  if (rest != 1) return std::nullopt;
  return s;
}

}  // namespace

Cluster stage_cluster(const Cluster& cluster, std::size_t p) {
  std::optional<GroupSplit> s = split_levels(cluster, p);
  if (!s)
    bad("/pipeline/device_groups",
        std::to_string(p) +
            " device groups do not split the cluster's levels from the outermost (" +
            cluster.levels_text() +
            "): a group is whole members of the outer levels and an equal part of the next");
  return Cluster(cluster.name(), std::move(s->levels), cluster.device());
}

std::size_t pipeline_link_level(const Cluster& cluster, std::size_t p) {
  const std::optional<GroupSplit> s = split_levels(cluster, p);
  return s ? s->link : 0;
}

std::vector<std::size_t> device_group_counts(const Cluster& cluster) {
  std::vector<std::size_t> out;
  std::int64_t outer = 1;  // devices in a member of the levels walked so far
  for (const Level& l : cluster.levels()) {
    for (std::int64_t d = 1; d <= l.size; ++d)
      if (l.size % d == 0) out.push_back(static_cast<std::size_t>(outer * d));
    outer *= l.size;
  }
  if (out.empty()) out.push_back(1);
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::int64_t pinned_stage(const ir::Graph& g, ir::OpId op) {
  const ir::AttrValue* v = g.op(op).attrs.find(kStageAttr);
  if (v == nullptr) return -1;
  const auto* i = std::get_if<std::int64_t>(v);
  if (i == nullptr || *i < 0)
    throw Error(Errc::kSchema, "a pinned stage is a non-negative integer",
                "/operators/" + std::to_string(op) + "/attrs/stage");
  return *i;
}

void check_pipeline(const ir::Graph& g, const Cluster& cluster, const PipelinePlan& pp) {
  const Cluster group = stage_cluster(cluster, pp.groups);
  const std::size_t v = pp.schedule == Schedule::Interleaved ? pp.virtual_stages : 1;
  if (pp.schedule == Schedule::OneFOneB && pp.virtual_stages != 1)
    bad("/pipeline/virtual_stages",
        "1f1b has one stage per device group, not " + std::to_string(pp.virtual_stages));
  if (v < 1) bad("/pipeline/virtual_stages", "must be at least 1");
  if (pp.microbatches < 1) bad("/pipeline/microbatches", "must be at least 1");
  if (pp.schedule == Schedule::Interleaved &&
      pp.microbatches % static_cast<std::int64_t>(pp.groups) != 0)
    bad("/pipeline/microbatches", "the interleaved schedule needs a multiple of the " +
                                      std::to_string(pp.groups) + " device groups, not " +
                                      std::to_string(pp.microbatches));
  if (pp.stages.size() != pp.groups * v)
    bad("/pipeline/stages", std::to_string(pp.groups) + " groups x " + std::to_string(v) +
                                " stages per group need " + std::to_string(pp.groups * v) +
                                " stages, not " + std::to_string(pp.stages.size()));
  ir::OpId next = 0;
  for (std::size_t j = 0; j < pp.stages.size(); ++j) {
    const Stage& s = pp.stages[j];
    if (s.first != next)
      bad(stage_path(j) + "/range", "starts at operator " + std::to_string(s.first) + ", not " +
                                        std::to_string(next) + " where the previous stage ends");
    if (s.last <= s.first || s.last > g.num_operators())
      bad(stage_path(j) + "/range", "operators [" + std::to_string(s.first) + ", " +
                                        std::to_string(s.last) + ") is empty or past the " +
                                        std::to_string(g.num_operators()) + " operators");
    if (s.group != j % pp.groups)
      bad(stage_path(j) + "/group",
          "stage " + std::to_string(j) + " belongs to group " + std::to_string(j % pp.groups));
    if (s.plan.mesh.size() != group.cuts().size())
      bad(stage_path(j) + "/mesh", "has " + std::to_string(s.plan.mesh.size()) +
                                       " axes; the group's cluster has " +
                                       std::to_string(group.cuts().size()));
    for (std::size_t a = 0; a < s.plan.mesh.size(); ++a)
      if (s.plan.mesh[a].size != group.cuts()[a].size)
        bad(stage_path(j) + "/mesh/axes/" + std::to_string(a),
            "size " + std::to_string(s.plan.mesh[a].size) + " differs from the group's " +
                std::to_string(group.cuts()[a].size));
    for (ir::OpId o = s.first; o < s.last; ++o) {
      const std::int64_t pin = pinned_stage(g, o);
      if (pin >= 0 && static_cast<std::size_t>(pin) != j)
        bad(stage_path(j) + "/range", "operator '" + g.op(o).name + "' is pinned to stage " +
                                          std::to_string(pin) + " by the graph");
    }
    for (ir::OpId o = s.first; o < s.last; ++o)
      for (ir::TensorId t : g.op(o).inputs)
        if (g.tensor(t).producer != ir::kNone && g.tensor(t).producer >= s.last)
          bad(stage_path(j) + "/range",
              "operator '" + g.op(o).name + "' uses '" + g.tensor(t).name +
                  "', produced by a later stage (stages follow operator id order)");
    next = s.last;
  }
  if (next != g.num_operators())
    bad("/pipeline/stages", "the stages end at operator " + std::to_string(next) + " of " +
                                std::to_string(g.num_operators()));
}

StageSends stage_sends(const ir::Graph& g, const StageGraph& sg, const Cluster& cluster,
                       const PipelinePlan& pp, Mode mode) {
  StageSends out;
  if (pp.groups <= 1 || cluster.levels().empty()) return out;
  const Level& link = cluster.levels()[pipeline_link_level(cluster, pp.groups)];
  const double devices =
      static_cast<double>(cluster.num_devices()) / static_cast<double>(pp.groups);
  const double m = static_cast<double>(pp.microbatches);
  // Each device sends its share of the microbatch's slice of the tensor
  // (Megatron-LM's scatter/gather of boundary tensors over the group).
  const auto send = [&](ir::TensorId t) {
    const double share = g.tensor(t).bytes() / m / devices;
    out.bytes += share;
    out.seconds += share / (link.bandwidth_GBps * 1e9) + link.latency_us * 1e-6;
  };
  for (ir::TensorId t : sg.sent) send(t);
  if (mode == Mode::Train)
    for (ir::TensorId t : sg.received) send(t);
  return out;
}

std::vector<TiedSync> tied_syncs(const ir::Graph& g, const Cluster& cluster, const PipelinePlan& pp,
                                 Mode mode, const CostParams& params) {
  std::vector<TiedSync> out;
  if (mode != Mode::Train || pp.groups <= 1 || cluster.levels().empty()) return out;
  std::vector<std::size_t> group_of(g.num_operators(), 0);
  for (const Stage& s : pp.stages)
    for (ir::OpId o = s.first; o < s.last && o < g.num_operators(); ++o) group_of[o] = s.group;
  const std::size_t level = pipeline_link_level(cluster, pp.groups);
  const Level& link = cluster.levels()[level];
  Cut cut;
  cut.axis = "pipeline";
  cut.level = level;
  cut.bandwidth_Bps = link.bandwidth_GBps * 1e9;
  cut.latency_s = link.latency_us * 1e-6;
  cut.devices_below = cluster.num_devices() / static_cast<std::int64_t>(pp.groups);
  for (ir::TensorId t = 0; t < g.num_tensors(); ++t) {
    const ir::Tensor& x = g.tensor(t);
    if (x.kind != ir::TensorKind::Parameter || x.consumers.size() < 2) continue;
    std::vector<std::size_t> groups;
    for (const ir::OpId c : x.consumers) groups.push_back(group_of[c]);
    std::sort(groups.begin(), groups.end());
    groups.erase(std::unique(groups.begin(), groups.end()), groups.end());
    if (groups.size() < 2) continue;
    cut.size = static_cast<std::int64_t>(groups.size());
    const double gradient =
        x.bytes() *
        parameter_state(params, mode, static_cast<int>(ir::dtype_size(x.dtype))).gradient;
    TiedSync ts;
    ts.tensor = t;
    ts.groups = std::move(groups);
    ts.bytes = cost::collective_bytes(cost::Collective::AllReduce, gradient, cut);
    ts.seconds = cost::collective_seconds(cost::Collective::AllReduce, gradient, cut, params);
    out.push_back(std::move(ts));
  }
  return out;
}

namespace {

// Microbatches whose activations group g keeps (pipeline.hpp).
double in_flight(const PipelinePlan& pp, std::size_t g) {
  const double p = static_cast<double>(pp.groups);
  const double m = static_cast<double>(pp.microbatches);
  const double gi = static_cast<double>(g);
  if (pp.schedule == Schedule::OneFOneB || pp.virtual_stages <= 1) return std::min(p - gi, m);
  const double v = static_cast<double>(pp.virtual_stages);
  return std::min(m, (2 * (p - gi - 1) + (v - 1) * p + 1) / v);
}

// One stage's per-microbatch time, per-step remainder and one microbatch's
// activations. Until the evaluator fills microbatch_s (it does for every
// training plan with compute), a stage's evaluation is of the whole batch:
// then a microbatch is 1/m of it and nothing is paid once per step.
struct StageFigures {
  double microbatch_s = 0;
  double per_step_s = 0;
  double activation_bytes = 0;
};
StageFigures stage_figures(const Summary& s, std::int64_t microbatches) {
  const double m = static_cast<double>(microbatches);
  if (s.microbatch_s > 0)
    return {s.microbatch_s, std::max(0.0, s.step_time_s - m * s.microbatch_s), s.activation_bytes};
  return {s.step_time_s / m, 0.0, s.activation_bytes / m};
}

}  // namespace

double stage_memory_bytes(const PipelinePlan& pp, std::size_t j, Mode mode, const Summary& s) {
  const double k = mode == Mode::Train ? in_flight(pp, pp.stages.at(j).group) : 1.0;
  return s.parameter_bytes + k * stage_figures(s, pp.microbatches).activation_bytes;
}

PipelineEvaluation schedule_pipeline(const PipelinePlan& pp, Mode mode,
                                     std::vector<Evaluation> stages,
                                     const std::vector<double>& send_s,
                                     const std::vector<double>& sent_bytes,
                                     const std::vector<TiedSync>& tied) {
  PipelineEvaluation pe;
  pe.stages = std::move(stages);
  pe.groups.assign(pp.groups, GroupReport{});
  for (const TiedSync& ts : tied)
    for (const std::size_t gi : ts.groups) {
      GroupReport& gr = pe.groups.at(gi);
      gr.tied_s += ts.seconds;
      gr.tied_bytes += ts.bytes;
      gr.per_step_s += ts.seconds;
    }
  const double m = static_cast<double>(pp.microbatches);
  for (std::size_t j = 0; j < pe.stages.size(); ++j) {
    const Summary& s = pe.stages[j].summary;
    const StageFigures f = stage_figures(s, pp.microbatches);
    GroupReport& gr = pe.groups[pp.stages[j].group];
    gr.microbatch_s += f.microbatch_s;
    gr.send_s += send_s[j];
    gr.per_step_s += f.per_step_s;
    gr.compute_s += s.compute_s;
    gr.parameter_bytes += s.parameter_bytes;
    gr.activation_bytes += f.activation_bytes;
    gr.sent_bytes += sent_bytes[j] * m;
  }
  double sum_t = 0, max_t = 0, max_step = 0;
  for (const GroupReport& gr : pe.groups) {
    const double t = gr.microbatch_s + gr.send_s;
    sum_t += t;
    max_t = std::max(max_t, t);
    max_step = std::max(max_step, gr.per_step_s);
  }
  const double v = pp.schedule == Schedule::Interleaved
                       ? static_cast<double>(std::max<std::size_t>(pp.virtual_stages, 1))
                       : 1.0;
  pe.pipelined_s = m * max_t + (sum_t - max_t) / v;
  pe.summary.step_time_s = pe.pipelined_s + max_step;
  pe.bubble_fraction = pe.pipelined_s > 0 ? 1.0 - m * max_t / pe.pipelined_s : 0.0;
  std::size_t largest = 0;
  for (std::size_t gi = 0; gi < pe.groups.size(); ++gi) {
    GroupReport& gr = pe.groups[gi];
    gr.busy_s = m * (gr.microbatch_s + gr.send_s);
    gr.bubble_s = pe.pipelined_s - gr.busy_s;
    gr.in_flight = mode == Mode::Train ? in_flight(pp, gi) : 1.0;
    gr.memory_bytes = gr.parameter_bytes + gr.in_flight * gr.activation_bytes;
    if (gr.memory_bytes > pe.groups[largest].memory_bytes) largest = gi;
    pe.p2p_bytes_per_step = std::max(pe.p2p_bytes_per_step, gr.sent_bytes);
  }
  Summary& sum = pe.summary;
  // Per device of the busiest group (the one setting the pace).
  std::size_t busiest = 0;
  for (std::size_t gi = 0; gi < pe.groups.size(); ++gi)
    if (pe.groups[gi].busy_s > pe.groups[busiest].busy_s) busiest = gi;
  for (std::size_t j = 0; j < pe.stages.size(); ++j) {
    if (pp.stages[j].group != busiest) continue;
    const Summary& s = pe.stages[j].summary;
    sum.compute_s += s.compute_s;
    sum.recompute_s += s.recompute_s;
    sum.backward_compute_s += s.backward_compute_s;
    sum.communication_s += s.communication_s;
    sum.exposed_communication_s += s.exposed_communication_s;
  }
  sum.communication_s += m * pe.groups[busiest].send_s + pe.groups[busiest].tied_s;
  sum.exposed_communication_s += m * pe.groups[busiest].send_s + pe.groups[busiest].tied_s;
  sum.microbatch_s = max_t;
  const GroupReport& big = pe.groups[largest];
  sum.memory_per_device_bytes = big.memory_bytes;
  sum.parameter_bytes = big.parameter_bytes;
  sum.activation_bytes = big.in_flight * big.activation_bytes;
  for (std::size_t j = 0; j < pe.stages.size(); ++j) {
    if (pp.stages[j].group != largest) continue;
    sum.gradient_bytes += pe.stages[j].summary.gradient_bytes;
    sum.optimizer_bytes += pe.stages[j].summary.optimizer_bytes;
  }
  return pe;
}

PipelineEvaluation evaluate_pipeline(const ir::Graph& g,
                                     const std::vector<algebra::OpSpace>& spaces,
                                     const Cluster& cluster, const PipelinePlan& pp,
                                     const CostParams& params, EvalDetail detail) {
  check_pipeline(g, cluster, pp);
  const Cluster group = stage_cluster(cluster, pp.groups);
  std::vector<Evaluation> evals;
  std::vector<double> send_s, sent_bytes;
  for (std::size_t j = 0; j < pp.stages.size(); ++j) {
    const Stage& s = pp.stages[j];
    const StageGraph sg = stage_graph(g, spaces, s.first, s.last);
    try {
      check_plan(sg.graph, sg.spaces, s.plan);
    } catch (const Error& e) {
      throw Error(e.code(), e.detail(), stage_path(j) + e.json_path());
    }
    evals.push_back(evaluate(sg.graph, sg.spaces, group, s.plan, params, detail));
    const StageSends sends = stage_sends(g, sg, cluster, pp, s.plan.mode);
    send_s.push_back(sends.seconds);
    sent_bytes.push_back(sends.bytes);
  }
  const Mode mode = pp.stages.empty() ? Mode::Train : pp.stages[0].plan.mode;
  return schedule_pipeline(pp, mode, std::move(evals), send_s, sent_bytes,
                           tied_syncs(g, cluster, pp, mode, params));
}

}  // namespace recsearch::plan
