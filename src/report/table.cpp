// SPDX-License-Identifier: Apache-2.0
// The text table of `--format table` (report::plan_to_table): what matters
// first. A summary (step time and its split, memory against the budget, the
// mesh on the cluster's levels, effective parallelism), then where the
// communication time goes, the costliest operators and tensors, and last
// the operators, a repeated block once (folded) unless every operator is
// asked for. Every time is in ms and every memory figure in GiB, with four
// significant digits, so that a column reads as one format.
#include <algorithm>
#include <array>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "recsearch/cost/model.hpp"
#include "recsearch/io/mesh_names.hpp"
#include "recsearch/report/report.hpp"
#include "report/text.hpp"

namespace recsearch::report {
namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr double kMiB = 1024.0 * 1024.0;

// Display width of UTF-8 text: one column per code point.
std::size_t width_of(const std::string& s) {
  return static_cast<std::size_t>(std::count_if(
      s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

// A cell no wider than cap code points (control characters made visible,
// so that a name cannot break a row), "…" marking a cut.
std::string cell(std::string s, std::size_t cap) {
  for (char& c : s)
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7F) c = '?';
  if (width_of(s) <= cap) return s;
  std::size_t points = 0, i = 0;
  for (; i < s.size(); ++i) {
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80 && ++points == cap) break;
  }
  return s.substr(0, i) + "\u2026";
}

// A column-aligned block: a header, a rule, rows. Columns flagged numeric
// are right-aligned so that their decimal points line up.
struct Grid {
  std::vector<std::string> header;
  std::vector<bool> numeric;
  std::vector<std::size_t> caps;
  std::vector<std::vector<std::string>> rows;

  void add(std::vector<std::string> row) {
    for (std::size_t c = 0; c < row.size() && c < caps.size(); ++c)
      row[c] = cell(std::move(row[c]), caps[c]);
    rows.push_back(std::move(row));
  }

  [[nodiscard]] std::string text() const {
    std::vector<std::size_t> w(header.size());
    for (std::size_t c = 0; c < header.size(); ++c) {
      w[c] = width_of(header[c]);
      for (const auto& r : rows) w[c] = std::max(w[c], width_of(r[c]));
    }
    std::string out;
    const auto emit = [&](const std::vector<std::string>& cells) {
      std::string line;
      for (std::size_t c = 0; c < cells.size(); ++c) {
        const std::string pad(w[c] - width_of(cells[c]), ' ');
        line += (c > 0 ? "  " : "") + (numeric[c] ? pad + cells[c] : cells[c] + pad);
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + '\n';
    };
    emit(header);
    std::size_t total = 0;
    for (std::size_t c = 0; c < w.size(); ++c) total += w[c] + (c > 0 ? 2 : 0);
    out += std::string(total, '-') + '\n';
    for (const auto& r : rows) emit(r);
    return out;
  }
};

std::string percent(double part, double whole) {
  return whole > 0 ? sig(100.0 * part / whole, 3) + "%" : "-";
}

std::string level_name(const ReportInput& in, std::uint32_t axis) {
  if (axis >= in.plan.mesh.size()) return "?";
  const std::size_t l = in.plan.mesh[axis].level;
  return l < in.cluster.levels().size() ? in.cluster.levels()[l].name : in.plan.mesh[axis].axis;
}

// The parameters with a ZeRO stage grouped by how they shard ("ZeRO 2 over
// node,gpu on 96 parameters, ZeRO 3 over node on 2"), the most common
// first; "" when no parameter shards over any axis.
std::string zero_axes_text(const ReportInput& in) {
  const std::vector<int> zero = plan::parameter_zero(in.graph, in.plan.training);
  const plan::ZeroAxes axes = plan::zero_axes(in.graph, in.spaces, in.plan);
  std::map<std::string, std::size_t> count;
  for (ir::TensorId t = 0; t < in.graph.num_tensors(); ++t)
    if (zero[t] > 0 && !axes.of(t).empty()) ++count[zero_over_text(in, zero[t], axes.of(t))];
  std::vector<std::pair<std::string, std::size_t>> groups(count.begin(), count.end());
  std::stable_sort(groups.begin(), groups.end(),
                   [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string out;
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const auto& [text, n] = groups[i];
    out += std::string(i > 0 ? ", " : "") + "ZeRO " + text + " on " + std::to_string(n);
    if (i == 0) out += n == 1 ? " parameter" : " parameters";
  }
  return out;
}

// The summary lines: label, value.
std::string summary_text(const ReportInput& in, const TableOptions& opts) {
  const plan::Summary& s = in.eval.summary;
  const plan::Plan& p = in.plan;
  std::string out = "plan of " + (p.graph_name.empty() ? in.graph.name() : p.graph_name) + " (" +
                    std::string(p.mode == Mode::Infer ? "inference" : "training") + ", " +
                    p.algorithm + ") on " + std::to_string(p.num_devices()) + " devices";
  // A generated cluster's name ("8 devices") would only repeat the count.
  const std::string& name = in.cluster.name();
  if (!name.empty() && name != std::to_string(p.num_devices()) + " devices") out += " of " + name;
  out += "\n\n";
  const auto line = [&](const std::string& label, const std::string& value) {
    out += label + std::string(label.size() < 16 ? 16 - label.size() : 1, ' ') + value + '\n';
  };
  std::string compute = "compute " + ms_text(s.compute_s) + " (" +
                        percent(s.compute_s, s.compute_s + s.exposed_communication_s) + ")";
  if (s.recompute_s > 0) compute += ", of it recomputation " + ms_text(s.recompute_s);
  std::string comm = "communication " + ms_text(s.communication_s);
  if (s.exposed_communication_s < s.communication_s)
    comm += ", exposed " + ms_text(s.exposed_communication_s);
  line("step time", ms_text(s.step_time_s) + " = " + compute + " + " + comm);
  const double budget = opts.memory_budget_bytes > 0 ? opts.memory_budget_bytes
                                                     : in.cluster.device().memory_GiB * kGiB;
  line("memory", gib_text(s.memory_per_device_bytes) + " per device of a " + gib_text(budget) +
                     " budget (" + percent(s.memory_per_device_bytes, budget) + ")");
  line("", "parameters " + gib_text(s.parameter_bytes - s.gradient_bytes - s.optimizer_bytes) +
               ", gradients " + gib_text(s.gradient_bytes) + ", optimizer " +
               gib_text(s.optimizer_bytes) + ", activations " + gib_text(s.activation_bytes));
  if (p.mode == Mode::Train) {
    line("training", "recompute " + recompute_text(in.graph, p.training) + ", ZeRO stage " +
                         zero_text(in.graph, p.training) + ", " +
                         std::to_string(p.training.microbatches) + " microbatch" +
                         (p.training.microbatches == 1 ? "" : "es"));
    if (const std::string zero = zero_axes_text(in); !zero.empty()) line("ZeRO axes", zero);
  }
  if (!p.mesh.empty()) line("mesh axes", io::axis_levels_text(in.cluster, p));
  // One clause a line: the effective figure, the partly used axes, the
  // idle ones ("; " between them) would make one line of 200 characters.
  const std::string par = parallelism_text(in);
  std::size_t from = 0;
  for (std::size_t at = par.find("; "); from < par.size(); at = par.find("; ", from)) {
    line(from == 0 ? "parallelism" : "",
         par.substr(from, at == std::string::npos ? at : at - from));
    from = at == std::string::npos ? par.size() : at + 2;
  }
  // Only a search has a search time; an evaluated plan would say "0 s".
  if (s.search_time_s > 0) line("search time", sig(s.search_time_s) + " s");
  return out;
}

// Communication by reason x collective x level: time, volume and count.
std::string communication_text(const ReportInput& in) {
  struct Total {
    std::size_t events = 0;
    double bytes = 0, seconds = 0;
  };
  std::map<std::tuple<plan::CommReason, cost::Collective, std::string>, Total> totals;
  double all = 0;
  for (const plan::CommEvent& e : in.eval.events) {
    Total& t = totals[{e.reason, e.collective, level_name(in, e.axis)}];
    ++t.events;
    t.bytes += e.bytes * e.repeats;
    t.seconds += e.seconds;
    all += e.seconds;
  }
  std::string out = "\ncommunication by reason, collective and level\n";
  if (totals.empty()) {
    return out + (in.eval.summary.communication_s > 0
                      ? "  (not itemised in this evaluation)\n"
                      : "  none: no operator's layout needs a collective\n");
  }
  std::vector<std::pair<decltype(totals)::key_type, Total>> rows(totals.begin(), totals.end());
  std::stable_sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) {
    return a.second.seconds > b.second.seconds;
  });
  Grid g{{"reason", "collective", "level", "events", "MiB/device", "ms", "share"},
         {false, false, false, true, true, true, true},
         {12, 16, 24, 10, 14, 14, 8},
         {}};
  for (const auto& [key, t] : rows) {
    g.add({std::string(plan::comm_reason_name(std::get<0>(key))),
           std::string(cost::collective_name(std::get<1>(key))), std::get<2>(key),
           std::to_string(t.events), sig(t.bytes / kMiB), sig(t.seconds * 1e3),
           percent(t.seconds, all)});
  }
  return out + g.text();
}

// Where a folded table files an operator: block ops under block 0's
// counterpart (with the block count as their tag), the rest as themselves.
struct Canon {
  const Fold* fold = nullptr;

  [[nodiscard]] bool in_block(std::size_t o) const {
    return fold != nullptr && o >= fold->start && o < fold->start + fold->period * fold->repeats;
  }
  [[nodiscard]] std::size_t op(std::size_t o) const {
    return in_block(o) ? fold->start + (o - fold->start) % fold->period : o;
  }
  [[nodiscard]] std::string tag(std::size_t o) const {
    return in_block(o) ? "[x" + std::to_string(fold->repeats) + "] " : "";
  }
  // Tensor t as seen from operator o (its holder or user): the tensor in
  // the same input or output slot of block 0's counterpart.
  [[nodiscard]] ir::TensorId tensor(const ir::Graph& g, ir::TensorId t, ir::OpId o) const {
    if (o == ir::kNone || o >= g.num_operators() || !in_block(o)) return t;
    const ir::Operator& from = g.op(o);
    const ir::Operator& to = g.op(static_cast<ir::OpId>(op(o)));
    for (std::size_t i = 0; i < from.inputs.size() && i < to.inputs.size(); ++i)
      if (from.inputs[i] == t) return to.inputs[i];
    for (std::size_t i = 0; i < from.outputs.size() && i < to.outputs.size(); ++i)
      if (from.outputs[i] == t) return to.outputs[i];
    return t;
  }
};

// Sorted by the first figure, largest first, at most `top` entries.
template <class Key, class Value>
std::vector<std::pair<Key, Value>> largest(const std::map<Key, Value>& m, std::size_t top) {
  std::vector<std::pair<Key, Value>> v(m.begin(), m.end());
  std::stable_sort(v.begin(), v.end(),
                   [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  v.resize(std::min(top, v.size()));
  return v;
}

// The top operators by time (compute + the communication attributed to
// them) and the top tensors by the communication that moves them; in a
// folded table a block's operator or tensor is one entry for all blocks.
std::string top_text(const ReportInput& in, std::size_t top, const Canon& canon) {
  const std::size_t n = std::min(in.graph.num_operators(), in.eval.op_costs.size());
  std::map<std::size_t, std::pair<double, std::pair<double, double>>> ops;  // time, (comp, comm)
  for (std::size_t o = 0; o < n; ++o) {
    auto& e = ops[canon.op(o)];
    e.first += in.eval.op_costs[o].compute_s + in.eval.op_costs[o].communication_s;
    e.second.first += in.eval.op_costs[o].compute_s;
    e.second.second += in.eval.op_costs[o].communication_s;
  }
  const auto top_ops = largest(ops, top);
  std::string out = "\ntop " + std::to_string(top_ops.size()) + " operators by time\n";
  Grid g{{"operator", "type", "mesh split", "compute ms", "comm ms"},
         {false, false, false, true, true},
         {60, 20, 48, 12, 12},
         {}};
  for (const auto& [o, e] : top_ops) {
    const auto id = static_cast<ir::OpId>(o);
    g.add({canon.tag(o) + in.graph.op(id).name, in.graph.op(id).type, op_split_text(in, id),
           sig(e.second.first * 1e3), sig(e.second.second * 1e3)});
  }
  out += g.text();

  std::map<ir::TensorId, std::pair<double, std::pair<double, std::size_t>>> moved;
  for (const plan::CommEvent& e : in.eval.events) {
    if (e.tensor == ir::kNone || e.tensor >= in.graph.num_tensors()) continue;
    const ir::OpId by = e.reason == plan::CommReason::Layout ? e.to : e.from;
    auto& m = moved[canon.tensor(in.graph, e.tensor, by)];
    m.first += e.seconds;
    m.second.first += e.bytes * e.repeats;
    if (by != ir::kNone) m.second.second = std::max(m.second.second, static_cast<std::size_t>(by));
  }
  if (moved.empty()) return out;
  const auto top_tensors = largest(moved, top);
  out += "\ntop " + std::to_string(top_tensors.size()) + " tensors by communication\n";
  Grid t{{"tensor", "shape", "sharding", "MiB/device", "comm ms"},
         {false, false, false, true, true},
         {60, 24, 48, 12, 12},
         {}};
  for (const auto& [id, m] : top_tensors) {
    t.add({canon.tag(m.second.second) + in.graph.tensor(id).name,
           ir::shape_to_string(in.graph.tensor(id).shape), tensor_sharding_text(in, id),
           sig(m.second.first / kMiB), sig(m.first * 1e3)});
  }
  return out + t.text();
}

// One operator's row, its times summed over `copies` (the blocks it stands
// for when folded).
std::vector<std::string> operator_row(const ReportInput& in, ir::OpId id, const std::string& tag,
                                      double compute_s, double comm_s) {
  const ir::Operator& op = in.graph.op(id);
  std::string strategy;
  if (id < in.eval.strategies.size()) strategy = strategy_text(in.eval.strategies[id]);
  return {tag + op.name,
          op.type,
          strategy,
          cut_signature(in, id),
          op_split_text(in, id),
          sig(compute_s * 1e3),
          sig(comm_s * 1e3)};
}

std::string operators_text(const ReportInput& in, const Fold* fold) {
  const std::size_t n = in.graph.num_operators();
  const auto cost = [&](std::size_t o) {
    return o < in.eval.op_costs.size() ? in.eval.op_costs[o] : plan::OpCost{};
  };
  Grid g{{"operator", "type", "strategy", "cuts", "mesh split", "compute ms", "comm ms"},
         {false, false, false, false, false, true, true},
         {60, 24, 40, 40, 40, 12, 12},
         {}};
  std::string out = "\noperators";
  if (fold) {
    const std::string repeats = std::to_string(fold->repeats);
    out += " (the repeated block of " + std::to_string(fold->period) +
           " operators is listed once, " + "marked [x" + repeats + "], its times summed over the " +
           repeats + " blocks; ";
    out += fold->differing_blocks == 0
               ? std::string("every block has the same cuts")
               : std::to_string(fold->differing_blocks) + " blocks have other cuts";
    out += "; --all-operators lists every operator)";
  }
  out += "\n";
  const std::string tag = fold ? "[x" + std::to_string(fold->repeats) + "] " : "";
  for (std::size_t o = 0; o < n;) {
    if (fold && o == fold->start) {
      for (std::size_t k = 0; k < fold->period; ++k) {
        double compute = 0, comm = 0;
        for (std::size_t b = 0; b < fold->repeats; ++b) {
          compute += cost(fold->start + b * fold->period + k).compute_s;
          comm += cost(fold->start + b * fold->period + k).communication_s;
        }
        g.add(operator_row(in, static_cast<ir::OpId>(fold->start + k), tag, compute, comm));
      }
      o = fold->start + fold->period * fold->repeats;
      continue;
    }
    g.add(
        operator_row(in, static_cast<ir::OpId>(o), "", cost(o).compute_s, cost(o).communication_s));
    ++o;
  }
  return out + g.text();
}

}  // namespace

std::string tensor_sharding_text(const ReportInput& in, ir::TensorId t) {
  if (t >= in.eval.tensors.size()) return "-";
  const plan::TensorSharding& ts = in.eval.tensors[t];
  std::string out = "[";
  for (std::size_t d = 0; d < ts.dims.size(); ++d) {
    const std::string dims = io::mesh_dims_text(in.cluster, in.plan, ts.dims[d]);
    out += (d > 0 ? ", " : "") + (dims.empty() ? std::string("-") : dims);
  }
  out += "]";
  if (!ts.partial.empty()) out += " partial " + io::mesh_dims_text(in.cluster, in.plan, ts.partial);
  return out;
}

std::string zero_over_text(const ReportInput& in, int stage, std::span<const std::uint32_t> axes) {
  if (stage <= 0 || axes.empty()) return std::to_string(stage);
  return std::to_string(stage) + " over " +
         io::mesh_dims_text(in.cluster, in.plan,
                            std::vector<std::uint32_t>(axes.begin(), axes.end()));
}

std::string op_split_text(const ReportInput& in, ir::OpId op) {
  if (op >= in.spaces.size()) return "-";
  const auto& loops = in.spaces[op].loops;
  const auto axes = io::loop_axes(in.plan, loops.size(), op);
  std::string out;
  for (std::size_t l = 0; l < loops.size(); ++l) {
    if (axes[l].empty()) continue;
    out += (out.empty() ? "" : " ") + loops[l].name + "=" +
           io::mesh_dims_text(in.cluster, in.plan, axes[l]);
  }
  return out.empty() ? "replicated" : out;
}

std::string plan_to_table(const ReportInput& in, const TableOptions& opts) {
  // A plain Fold (repeats 0: none) rather than the optional: GCC's
  // uninitialised-use analysis loses track of the optional's engaged flag.
  Fold f{};
  if (!opts.every_operator) f = find_fold(in, kFoldTableOperators).value_or(Fold{});
  const Fold* fold = f.repeats > 0 ? &f : nullptr;
  return summary_text(in, opts) + communication_text(in) + top_text(in, opts.top, Canon{fold}) +
         operators_text(in, fold);
}

std::string pipeline_to_table(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                              const Cluster& cluster, const plan::PipelinePlan& pp,
                              const plan::PipelineEvaluation& pe, const TableOptions& opts) {
  const Cluster group = plan::stage_cluster(cluster, pp.groups);
  const std::int64_t per = group.num_devices();
  const plan::Summary& s = pe.summary;
  std::string out = "pipelined plan of " + g.name() + " on " +
                    std::to_string(cluster.num_devices()) +
                    " devices: " + std::to_string(pp.groups) + " device groups of " +
                    std::to_string(per) + ", " + std::to_string(pp.stages.size()) + " stages (" +
                    std::string(plan::schedule_name(pp.schedule)) +
                    (pp.virtual_stages > 1 ? ", v " + std::to_string(pp.virtual_stages) : "") +
                    "), " + std::to_string(pp.microbatches) + " microbatches\n\n";
  const auto line = [&](const std::string& label, const std::string& value) {
    out += label + std::string(label.size() < 16 ? 16 - label.size() : 1, ' ') + value + '\n';
  };
  line("step time", ms_text(s.step_time_s) + " = pipelined " + ms_text(pe.pipelined_s) +
                        " (bubble " + percent(pe.bubble_fraction, 1.0) + " of it) + " +
                        ms_text(std::max(0.0, s.step_time_s - pe.pipelined_s)) +
                        " paid once per step");
  line("", "busiest group: compute " + ms_text(s.compute_s) + ", communication " +
               ms_text(s.communication_s) + ", exposed " + ms_text(s.exposed_communication_s));
  const double budget =
      opts.memory_budget_bytes > 0 ? opts.memory_budget_bytes : group.device().memory_GiB * kGiB;
  line("memory", gib_text(s.memory_per_device_bytes) + " per device (largest group) of a " +
                     gib_text(budget) + " budget (" + percent(s.memory_per_device_bytes, budget) +
                     ")");
  line("point to point", gib_text(pe.p2p_bytes_per_step) + " per device per step");
  std::string tied_groups;
  double tied_s = 0;
  for (std::size_t gi = 0; gi < pe.groups.size(); ++gi) {
    if (pe.groups[gi].tied_s <= 0) continue;
    tied_groups += (tied_groups.empty() ? "" : ", ") + std::to_string(gi);
    tied_s = std::max(tied_s, pe.groups[gi].tied_s);
  }
  if (!tied_groups.empty())
    line("tied weights",
         ms_text(tied_s) + " per step to all-reduce their gradients (groups " + tied_groups + ")");
  if (s.search_time_s > 0) line("search time", sig(s.search_time_s) + " s");
  out += "\n";
  Grid t{{"group", "stages", "operators", "devices", "compute ms", "memory GiB", "bubble ms",
          "bubble", "in flight"},
         {false, false, false, false, true, true, true, true, true},
         {6, 16, 32, 16, 12, 12, 12, 8, 9},
         {}};
  for (std::size_t gi = 0; gi < pe.groups.size(); ++gi) {
    const plan::GroupReport& gr = pe.groups[gi];
    std::string stages, ops;
    for (std::size_t j = gi; j < pp.stages.size(); j += pp.groups) {
      stages += (stages.empty() ? "" : ",") + std::to_string(j);
      ops += (ops.empty() ? "" : ",") + std::to_string(pp.stages[j].first) + "-" +
             std::to_string(pp.stages[j].last - 1);
    }
    const auto gi64 = static_cast<std::int64_t>(gi);
    t.add({std::to_string(gi), stages, ops,
           std::to_string(gi64 * per) + "-" + std::to_string((gi64 + 1) * per - 1),
           sig(gr.compute_s * 1e3), sig(gr.memory_bytes / kGiB), sig(gr.bubble_s * 1e3),
           percent(gr.bubble_s, s.step_time_s), sig(gr.in_flight, 3)});
  }
  out += t.text();
  // Each stage as a plan of its own, in the same layout as a plain plan's.
  for (std::size_t j = 0; j < pp.stages.size(); ++j) {
    const plan::Stage& st = pp.stages[j];
    const plan::StageGraph sg = plan::stage_graph(g, spaces, st.first, st.last);
    out += "\n== stage " + std::to_string(j) + ": operators " + std::to_string(st.first) + "-" +
           std::to_string(st.last - 1) + " on group " + std::to_string(st.group) + " ==\n";
    out += plan_to_table({sg.graph, sg.spaces, group, st.plan, pe.stages[j]}, opts);
  }
  return out;
}

}  // namespace recsearch::report
