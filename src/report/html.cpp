// SPDX-License-Identifier: Apache-2.0
// The plan as one self-contained HTML page. The numbers are gathered here
// from the evaluation into a JSON block inside the page; the page's own
// script draws the graph (SVG), fills the tables and lets the reader sort
// them and pick an operator. Layout positions (layer = longest path from
// the inputs, row = order within the layer) are computed here so that the
// page stays a viewer.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>

#include <nlohmann/json.hpp>  // the page's data block

#include "io/training_json.hpp"
#include "recsearch/cost/cost_params.hpp"
#include "recsearch/cost/model.hpp"
#include "recsearch/io/mesh_names.hpp"
#include "recsearch/report/report.hpp"
#include "report/text.hpp"

namespace recsearch::report {
namespace {

using nlohmann::json;

constexpr double kBytesPerGiB = 1024.0 * 1024.0 * 1024.0;

// JSON numbers must be finite; the evaluator never gives NaN, but be safe.
json num(double v) { return std::isfinite(v) ? json(v) : json(nullptr); }

// Layer of each operator: 1 + the deepest producer of its inputs.
std::vector<std::size_t> layers(const ir::Graph& g) {
  std::vector<std::size_t> layer(g.num_operators(), 0);
  for (const ir::OpId o : g.topological_order()) {
    std::size_t l = 0;
    for (const ir::TensorId t : g.op(o).inputs) {
      const ir::OpId p = g.tensor(t).producer;
      if (p != ir::kNone) l = std::max(l, layer[p] + 1);
    }
    layer[o] = l;
  }
  return layer;
}

json cluster_data(const ReportInput& in) {
  json levels = json::array();
  for (const Level& l : in.cluster.levels()) {
    levels.push_back({{"name", l.name},
                      {"size", l.size},
                      {"bandwidth_GBps", num(l.bandwidth_GBps)},
                      {"latency_us", num(l.latency_us)}});
  }
  return {{"name", in.cluster.name()},
          {"levels", levels},
          {"peak_TFLOPs", num(in.cluster.device().peak_TFLOPs)},
          {"memory_GiB", num(in.cluster.device().memory_GiB)}};
}

// Per mesh axis: its size and level, its part of the level on the named
// mesh ("gpu/4") and the share of compute time on operators it cuts (the
// mesh picture shades the axes by it).
json mesh_data(const ReportInput& in) {
  const Parallelism par = parallelism(in);
  json mesh = json::array();
  for (std::size_t a = 0; a < in.plan.mesh.size(); ++a) {
    const Cut& c = in.plan.mesh[a];
    mesh.push_back(
        {{"axis", c.axis},
         {"size", c.size},
         {"level",
          c.level < in.cluster.levels().size() ? in.cluster.levels()[c.level].name : std::string()},
         {"dims", io::mesh_dims_text(in.cluster, in.plan, {static_cast<std::uint32_t>(a)})},
         {"share", num(a < par.axis_share.size() ? par.axis_share[a] : 0)}});
  }
  return mesh;
}

json summary_data(const plan::Summary& s) {
  return {{"step_time_s", num(s.step_time_s)},
          {"compute_s", num(s.compute_s)},
          {"recompute_s", num(s.recompute_s)},
          {"backward_compute_s", num(s.backward_compute_s)},
          {"communication_s", num(s.communication_s)},
          {"exposed_communication_s", num(s.exposed_communication_s)},
          {"memory_per_device_bytes", num(s.memory_per_device_bytes)},
          {"parameter_bytes", num(s.parameter_bytes)},
          {"gradient_bytes", num(s.gradient_bytes)},
          {"optimizer_bytes", num(s.optimizer_bytes)},
          {"activation_bytes", num(s.activation_bytes)},
          {"search_time_s", num(s.search_time_s)}};
}

json classes_data(const ColourClasses& classes) {
  json cls = json::array();
  std::vector<std::size_t> count(classes.names.size(), 0);
  for (const std::size_t c : classes.of_op) ++count[c];
  for (std::size_t i = 0; i < classes.names.size(); ++i) {
    cls.push_back(
        {{"name", classes.names[i]}, {"colour", classes.colours[i]}, {"count", count[i]}});
  }
  return cls;
}

// The ZeRO stages and axes of the parameters an operator reads ("" if
// none; zero_over_text: "2 over node,gpu"): the text alone when they share
// one, else "name text" for each, in input order. `zero`:
// plan::parameter_zero, `axes`: plan::zero_axes.
std::string operator_zero_text(const ReportInput& in, const ir::Operator& op,
                               const std::vector<int>& zero, const plan::ZeroAxes& axes) {
  const ir::Graph& g = in.graph;
  std::vector<ir::TensorId> params;
  for (const ir::TensorId t : op.inputs)
    if (g.tensor(t).kind == ir::TensorKind::Parameter &&
        std::find(params.begin(), params.end(), t) == params.end())
      params.push_back(t);
  if (params.empty()) return {};
  std::vector<std::string> texts;
  for (const ir::TensorId t : params) texts.push_back(zero_over_text(in, zero[t], axes.of(t)));
  const bool shared =
      std::all_of(texts.begin(), texts.end(), [&](const std::string& x) { return x == texts[0]; });
  if (shared) return texts[0];
  std::string text;
  for (std::size_t i = 0; i < params.size(); ++i)
    text += (text.empty() ? "" : ", ") + g.tensor(params[i]).name + " " + texts[i];
  return text;
}

// Per operator of `kept` (every operator when empty): its strategy, class,
// costs and place in the drawing (layer, and row within the layer in
// topological order; a folded page lays out its operators itself).
json operators_data(const ReportInput& in, const ColourClasses& classes,
                    const std::vector<ir::OpId>& kept) {
  const ir::Graph& g = in.graph;
  const plan::Evaluation& ev = in.eval;
  const std::vector<CommBreakdown> comm = comm_breakdown(in);
  const std::vector<std::size_t> layer = layers(g);
  std::vector<std::size_t> row(g.num_operators(), 0);
  std::vector<std::size_t> fill;
  for (const ir::OpId o : g.topological_order()) {
    if (fill.size() <= layer[o]) fill.resize(layer[o] + 1, 0);
    row[o] = fill[layer[o]]++;
  }
  json ops = json::array();
  // Each operator's own recomputation (plan::operator_recompute), in training.
  const std::vector<plan::Recompute> recompute = in.plan.mode == Mode::Train
                                                     ? plan::operator_recompute(g, in.plan.training)
                                                     : std::vector<plan::Recompute>{};
  // The ZeRO stage and axes of each parameter (plan::parameter_zero,
  // plan::zero_axes), in training.
  const bool train = in.plan.mode == Mode::Train;
  const std::vector<int> zero =
      train ? plan::parameter_zero(g, in.plan.training) : std::vector<int>{};
  const plan::ZeroAxes zero_axes =
      train ? plan::zero_axes(g, in.spaces, in.plan) : plan::ZeroAxes{};
  std::vector<ir::OpId> all;
  if (kept.empty())
    for (std::size_t o = 0; o < g.num_operators(); ++o) all.push_back(static_cast<ir::OpId>(o));
  for (const ir::OpId o : kept.empty() ? all : kept) {
    const ir::Operator& op = g.op(o);
    ops.push_back({{"id", o},
                   {"name", op.name},
                   {"type", op.type},
                   {"strategy", strategy_text(ev.strategies.at(o))},
                   {"cuts", cut_signature(in, o)},
                   {"split", op_split_text(in, o)},
                   {"layout", classes.names[classes.of_op[o]]},
                   {"class", classes.of_op[o]},
                   {"flops", num(in.spaces.at(o).flops)},
                   {"compute_s", num(ev.op_costs.at(o).compute_s)},
                   {"communication_s", num(ev.op_costs.at(o).communication_s)},
                   {"layout_s", num(comm[o].layout_s)},
                   {"gradient_s", num(comm[o].gradient_s)},
                   {"halo_s", num(comm[o].halo_s)},
                   {"output_s", num(comm[o].output_s)},
                   {"layer", layer[o]},
                   {"row", row[o]}});
    if (!recompute.empty()) ops.back()["recompute"] = plan::recompute_name(recompute[o]);
    if (train) ops.back()["zero"] = operator_zero_text(in, op, zero, zero_axes);
  }
  return ops;
}

std::string level_of(const ReportInput& in, std::uint32_t axis) {
  const std::size_t l = in.plan.mesh.at(axis).level;
  return l < in.cluster.levels().size() ? in.cluster.levels()[l].name : in.plan.mesh[axis].axis;
}

std::string e_axis_name(const ReportInput& in, std::uint32_t axis) {
  return in.plan.mesh.at(axis).axis;
}

// Producer -> consumer edges, each marked when the tensor is redistributed
// on its way, with its collectives for the tooltip (phase, collective,
// level, MiB).
json edges_data(const ReportInput& in, const std::vector<bool>* kept = nullptr) {
  const ir::Graph& g = in.graph;
  // Per (tensor, consumer): its collectives, "all_gather@m1 1.5 MiB, ...".
  std::map<std::pair<ir::TensorId, ir::OpId>, std::string> moved;
  for (const plan::CommEvent& e : in.eval.events) {
    if (e.reason != plan::CommReason::Layout) continue;
    std::string& text = moved[{e.tensor, e.to}];
    text += (text.empty() ? "" : ", ") + std::string(cost::phase_name(e.phase)) + " " +
            std::string(cost::collective_name(e.collective)) + " on " + level_of(in, e.axis) +
            " (" + e_axis_name(in, e.axis) + ") " + sig(e.bytes / (1024.0 * 1024.0)) + " MiB";
  }
  json edges = json::array();
  for (std::size_t t = 0; t < g.num_tensors(); ++t) {
    const ir::Tensor& ts = g.tensor(static_cast<ir::TensorId>(t));
    if (ts.producer == ir::kNone) continue;
    std::set<ir::OpId> seen;
    for (const ir::OpId c : ts.consumers) {
      if (!seen.insert(c).second) continue;
      if (kept != nullptr && !(*kept)[c] && !(*kept)[ts.producer]) continue;
      const auto it = moved.find({static_cast<ir::TensorId>(t), c});
      edges.push_back({ts.producer, c, ts.name, it != moved.end(),
                       it != moved.end() ? it->second : std::string()});
    }
  }
  return edges;
}

// The collectives, in the evaluator's order (the page lists them by time):
// all of them, or past `limit` the `limit` costliest.
json redistributions_data(const ReportInput& in, std::size_t limit) {
  const ir::Graph& g = in.graph;
  json red = json::array();
  const auto op_name = [&](ir::OpId o) { return o == ir::kNone ? std::string() : g.op(o).name; };
  std::vector<const plan::CommEvent*> listed;
  for (const plan::CommEvent& e : in.eval.events) listed.push_back(&e);
  if (listed.size() > limit) {
    std::stable_sort(listed.begin(), listed.end(),
                     [](const auto* a, const auto* b) { return a->seconds > b->seconds; });
    listed.resize(limit);
  }
  for (const plan::CommEvent* ep : listed) {
    const plan::CommEvent& e = *ep;
    red.push_back({{"tensor", e.tensor == ir::kNone ? std::string() : g.tensor(e.tensor).name},
                   {"from", op_name(e.from)},
                   {"to", op_name(e.to)},
                   {"axis", in.plan.mesh.at(e.axis).axis},
                   {"level", level_of(in, e.axis)},
                   {"collective", cost::collective_name(e.collective)},
                   {"phase", cost::phase_name(e.phase)},
                   {"reason", plan::comm_reason_name(e.reason)},
                   {"bytes", num(e.bytes)},
                   {"seconds", num(e.seconds)}});
  }
  return red;
}

// Communication totals by reason x collective x level, the costliest first:
// the page's breakdown chart.
json comm_groups_data(const ReportInput& in) {
  std::map<std::tuple<std::string, std::string, std::string>, std::pair<double, double>> totals;
  for (const plan::CommEvent& e : in.eval.events) {
    auto& t = totals[{std::string(plan::comm_reason_name(e.reason)),
                      std::string(cost::collective_name(e.collective)), level_of(in, e.axis)}];
    t.first += e.seconds;
    t.second += e.bytes * e.repeats;
  }
  std::vector<
      std::pair<std::tuple<std::string, std::string, std::string>, std::pair<double, double>>>
      rows(totals.begin(), totals.end());
  std::stable_sort(rows.begin(), rows.end(),
                   [](const auto& a, const auto& b) { return a.second.first > b.second.first; });
  json out = json::array();
  for (const auto& [k, t] : rows) {
    out.push_back({{"reason", std::get<0>(k)},
                   {"collective", std::get<1>(k)},
                   {"level", std::get<2>(k)},
                   {"seconds", num(t.first)},
                   {"bytes", num(t.second)}});
  }
  return out;
}

json strip_data(const PipelineStrip& strip) {
  json stages = json::array();
  for (const PipelineStrip::Stage& st : strip.stages) {
    stages.push_back({{"first", st.first_op},
                      {"last", st.last_op},
                      {"operators", st.operators},
                      {"group", st.group},
                      {"compute_s", num(st.compute_s)},
                      {"memory_bytes", num(st.memory_bytes)},
                      {"busy_s", num(st.busy_s)},
                      {"bubble_s", num(st.bubble_s)}});
  }
  return {{"stages", stages},
          {"schedule", strip.schedule},
          {"microbatches", strip.microbatches},
          {"step_time_s", num(strip.step_time_s)},
          {"bubble_fraction", num(strip.bubble_fraction)},
          {"shown", strip.shown}};
}

// The operators a folded page carries: those before and after the repeated
// block, and its first `copies` copies (as many as the drawing limit holds,
// for the expanded view; the folded view draws copy 0 alone).
std::vector<ir::OpId> folded_operators(const ir::Graph& g, const Fold& f, std::size_t copies) {
  std::vector<ir::OpId> out;
  const std::size_t end = f.start + f.period * f.repeats;
  for (std::size_t o = 0; o < g.num_operators(); ++o)
    if (o < f.start + f.period * copies || o >= end) out.push_back(static_cast<ir::OpId>(o));
  return out;
}

// A folded graph's block, for the page: where it is, how many copies there
// are and are carried, and its totals over every copy.
json fold_data(const ReportInput& in, const Fold& f, std::size_t copies) {
  double compute = 0, comm = 0;
  const std::size_t end = f.start + f.period * f.repeats;
  for (std::size_t o = f.start; o < end && o < in.eval.op_costs.size(); ++o) {
    compute += in.eval.op_costs[o].compute_s;
    comm += in.eval.op_costs[o].communication_s;
  }
  return {{"start", f.start},
          {"period", f.period},
          {"repeats", f.repeats},
          {"copies", copies},
          {"differing", f.differing_blocks},
          {"compute_s", num(compute)},
          {"communication_s", num(comm)}};
}

// Redistributions a page of a graph too big to draw lists (the chart above
// the list sums all of them).
inline constexpr std::size_t kListedRedistributions = 2000;

json page_data(const ReportInput& in) {
  const ir::Graph& g = in.graph;
  const ColourClasses classes = layout_classes(in);
  bool drawn = g.num_operators() <= kMaxDrawnOperators;
  // Too big to draw whole: a repeated block is drawn once (x N), with the
  // copies that fit the limit kept for the expanded view.
  std::optional<Fold> fold;
  std::size_t copies = 0;
  std::vector<ir::OpId> kept;
  std::vector<bool> kept_mask;
  if (!drawn) fold = find_fold(in, kMaxDrawnOperators);
  if (fold) {
    const std::size_t outside = g.num_operators() - fold->period * fold->repeats;
    if (outside + fold->period <= kMaxDrawnOperators) {
      copies = std::min(fold->repeats, (kMaxDrawnOperators - outside) / fold->period);
      kept = folded_operators(g, *fold, copies);
      kept_mask.assign(g.num_operators(), false);
      for (const ir::OpId o : kept) kept_mask[o] = true;
      drawn = true;
    } else {
      fold.reset();
    }
  }

  json d;
  d["graph"] = g.name();
  d["algorithm"] = in.plan.algorithm;
  d["mode"] = in.plan.mode == Mode::Train ? "train" : "infer";
  d["devices"] = in.plan.num_devices();
  d["drawn"] = drawn;
  d["cluster"] = cluster_data(in);
  d["mesh"] = mesh_data(in);
  d["summary"] = summary_data(in.eval.summary);
  if (in.plan.mode == Mode::Train) {
    // The plan file's training object less its per-parameter ZeRO axes
    // (each operator's ZeRO column gives them), and its settings in words.
    d["training"] = io::detail::training_json(g, in.plan.training);
    d["training"]["recompute_text"] = recompute_text(g, in.plan.training);
    d["training"]["zero_text"] = zero_text(g, in.plan.training);
  }
  d["memory"] = {{"capacity_bytes", num(in.cluster.device().memory_GiB * kBytesPerGiB)}};
  d["classes"] = classes_data(classes);
  d["operators"] = operators_data(in, classes, kept);
  d["operator_count"] = g.num_operators();
  if (fold) d["fold"] = fold_data(in, *fold, copies);
  d["edges"] = drawn ? edges_data(in, fold ? &kept_mask : nullptr) : json::array();
  const bool big = g.num_operators() > kMaxDrawnOperators;
  d["redistributions"] = redistributions_data(
      in, big ? kListedRedistributions : std::numeric_limits<std::size_t>::max());
  d["redistribution_count"] = in.eval.events.size();
  d["comm_groups"] = comm_groups_data(in);
  d["axis_levels"] = io::axis_levels_text(in.cluster, in.plan);
  d["parallelism"] = parallelism_text(in);
  return d;
}

// The page; @TITLE@ and @DATA@ are replaced. Everything it needs is inline.
constexpr const char* kPage = R"PAGE(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>@TITLE@</title>
<style>
body { font-family: system-ui, -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; margin: 0 1.5em 2em; color: #222; }
h1 { font-size: 1.4em; margin: 0.8em 0 0.2em; }
h2 { font-size: 1.1em; margin: 1.4em 0 0.4em; border-bottom: 1px solid #ddd; }
.sub { color: #666; margin: 0; }
#summary { display: flex; flex-wrap: wrap; gap: 0.8em; margin-top: 1em; }
.card { border: 1px solid #ddd; border-radius: 6px; padding: 0.5em 0.9em; min-width: 9em; }
.card .k { font-size: 0.8em; color: #666; }
.card .v { font-size: 1.25em; font-variant-numeric: tabular-nums; }
#graph-wrap { overflow: auto; border: 1px solid #ddd; max-height: 70vh; background: #fcfcfc; }
#graph-svg .op rect { stroke: #555; stroke-width: 0.6; rx: 3; }
#graph-svg .op.sel rect { stroke: #000; stroke-width: 2.5; }
#graph-svg .op text { font-size: 9px; pointer-events: none; }
#graph-svg .edge { fill: none; stroke: #aaa; stroke-width: 0.8; }
#graph-svg .edge.moved { stroke: #d62728; stroke-width: 1.6; }
#graph-svg .edge.next { stroke-dasharray: 4 3; }
#legend { display: flex; flex-wrap: wrap; gap: 0.4em 1em; margin: 0.5em 0; font-size: 0.85em; }
.swatch { display: inline-block; width: 0.9em; height: 0.9em; border: 1px solid #555; vertical-align: -0.1em; margin-right: 0.3em; }
table { border-collapse: collapse; font-size: 0.82em; }
th, td { padding: 0.15em 0.6em; border-bottom: 1px solid #eee; text-align: left; }
th { cursor: pointer; background: #f5f5f5; position: sticky; top: 0; }
td.n { text-align: right; font-variant-numeric: tabular-nums; }
tr.sel td { background: #fff3bf; }
.bar { height: 1.2em; display: flex; border: 1px solid #999; width: 40em; max-width: 100%; }
.bar div { height: 100%; }
.scroll { max-height: 60vh; overflow: auto; }
.note { color: #666; font-size: 0.85em; }
.legend-row { display: flex; flex-wrap: wrap; gap: 0.4em 1em; margin: 0.4em 0; font-size: 0.85em; }
.crow { display: flex; align-items: center; gap: 0.6em; font-size: 0.82em; margin: 0.1em 0; }
.crow .lab { width: 22em; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; }
.crow .cbar { height: 0.9em; background: #e15759; }
.crow .val { font-variant-numeric: tabular-nums; color: #444; }
#pipeline .strip { display: flex; gap: 0.4em; margin: 0.4em 0; }
#pipeline .stage { border: 1px solid #999; border-radius: 4px; padding: 0.3em 0.5em; font-size: 0.8em; min-width: 8em; }
#pipeline .stage.shown { border: 2px solid #000; }
#pipeline .busy { height: 0.6em; background: #4e79a7; display: inline-block; }
#mesh-pic { display: flex; flex-wrap: wrap; gap: 1.2em; align-items: flex-start; }
#mesh-pic svg text { font-size: 10px; }
#mesh-pic .lvl { fill: none; stroke: #777; }
#mesh-pic .dev { fill: #4e79a7; stroke: #fff; stroke-width: 0.5; }
#pipeline .idle { height: 0.6em; background: #e15759; display: inline-block; }
</style>
</head>
<body>
<h1 id="title">@TITLE@</h1>
<p class="sub" id="subtitle"></p>
<div id="summary"></div>
<p class="sub" id="mesh-line"></p>
<div id="pipeline"></div>
<h2>Device mesh</h2>
<p class="note">The cluster's levels, outermost first, as nested boxes (at most 8 of a level are drawn, then &hellip; and the count left), with their links and the plan's mesh axes on each: how much of the compute each axis splits.</p>
<div id="mesh-pic"></div>
<h2>Graph, coloured by output layout</h2>
<p class="note">Each operator's colour is its output's layout on the cluster's levels: DP (blues) splits only the leading, batch, dimension; TP (oranges) splits other dimensions or leaves partial sums; DP + TP (greens) both; grey is replicated.</p>
<div id="legend"></div>
<div id="graph-wrap"></div>
<p class="note">Red edges carry a redistribution. Click an operator to find it in the table.</p>
<h2>Memory per device</h2>
<div id="memory"></div>
<div id="memory-legend" class="legend-row"></div>
<h2>Communication by reason, collective and level</h2>
<div id="comm-chart"></div>
<h2>Operators</h2>
<p class="note" id="operators-note"></p>
<p class="note">Seconds per training or inference step; communication split by reason. Click a heading to sort.</p>
<div class="scroll"><table id="operators"><thead><tr>
<th data-col="name">operator</th><th data-col="type">type</th><th data-col="strategy">strategy</th><th data-col="cuts">cuts</th>
<th data-col="recompute" id="recompute-head">recompute</th><th data-col="zero" id="zero-head">ZeRO</th>
<th data-col="compute_s">compute (s)</th><th data-col="communication_s">communication (s)</th>
<th data-col="layout_s">layout (s)</th><th data-col="gradient_s">gradient (s)</th><th data-col="halo_s">halo (s)</th><th data-col="output_s">output (s)</th>
<th data-col="share">share of work</th>
</tr></thead><tbody></tbody></table></div>
<h2>Redistributions</h2>
<p class="note" id="redistribution-note"></p>
<p class="note">Sorted by time, the costliest first; click a heading to sort otherwise.</p>
<div class="scroll"><table id="redistributions"><thead><tr>
<th data-col="tensor">tensor</th><th data-col="from">from</th><th data-col="to">to</th><th data-col="axis">axis</th><th data-col="level">level</th>
<th data-col="collective">collective</th><th data-col="phase">phase</th><th data-col="reason">reason</th>
<th data-col="bytes">bytes per device</th><th data-col="seconds">seconds</th>
</tr></thead><tbody></tbody></table></div>
<p id="status" data-state="loading" class="note">(this report needs JavaScript)</p>
<script type="application/json" id="plan-data">@DATA@</script>
<script>
(function () {
  "use strict";
  var t0 = performance.now();  // the script's own time, on the status line's data-render-ms
  var D = JSON.parse(document.getElementById("plan-data").textContent);
  var SVGNS = "http://www.w3.org/2000/svg";
  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function sv(tag, attrs) {
    var e = document.createElementNS(SVGNS, tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    return e;
  }
  function fmtS(s) {
    if (s === null) return "n/a";
    if (s === 0) return "0";
    var a = Math.abs(s);
    if (a >= 1) return s.toPrecision(4) + " s";
    if (a >= 1e-3) return (s * 1e3).toPrecision(4) + " ms";
    if (a >= 1e-6) return (s * 1e6).toPrecision(4) + " \u00b5s";
    return (s * 1e9).toPrecision(4) + " ns";
  }
  function fmtB(b) {
    if (b === null) return "n/a";
    var u = ["B", "KiB", "MiB", "GiB", "TiB"], i = 0;
    while (Math.abs(b) >= 1024 && i < u.length - 1) { b /= 1024; i++; }
    return (i === 0 ? b.toFixed(0) : b.toPrecision(4)) + " " + u[i];
  }
  function numCell(v, fmt) {
    var td = el("td", {"class": "n", "data-value": String(v)}, fmt(v));
    return td;
  }

  // Summary cards.
  var S = D.summary;
  document.getElementById("subtitle").textContent =
    (D.algorithm === "file" ? "saved plan" : D.algorithm + " plan") + ", " + D.mode + ", " + D.devices + " devices (" +
    D.mesh.map(function (m) { return m.axis + "=" + m.size + (m.level ? " " + m.level : ""); }).join(", ") +
    "), cluster " + D.cluster.name +
    (D.training ? "; recompute " + D.training.recompute_text + ", ZeRO stage " + D.training.zero_text +
                  ", " + D.training.microbatches + " microbatch" + (D.training.microbatches == 1 ? "" : "es")
                : "");
  var cards = [["step_time_s", "step time", fmtS], ["compute_s", "compute", fmtS],
               ["communication_s", "communication", fmtS],
               ["exposed_communication_s", "of which exposed", fmtS],
               ["memory_per_device_bytes", "memory per device", fmtB],
               ["parameter_bytes", "of which parameters", fmtB],
               ["activation_bytes", "of which activations", fmtB]];
  document.getElementById("mesh-line").textContent = "Mesh axes: " + D.axis_levels +
    ". Parallelism: " + D.parallelism + ".";
  var summary = document.getElementById("summary");
  cards.forEach(function (c) {
    var card = el("div", {"class": "card", "data-key": c[0], "data-value": String(S[c[0]])});
    card.appendChild(el("div", {"class": "k"}, c[1]));
    card.appendChild(el("div", {"class": "v"}, c[2](S[c[0]])));
    summary.appendChild(card);
  });
  var opsCard = el("div", {"class": "card", "data-key": "operators", "data-value": String(D.operator_count)});
  opsCard.appendChild(el("div", {"class": "k"}, "operators"));
  opsCard.appendChild(el("div", {"class": "v"}, String(D.operator_count)));
  summary.appendChild(opsCard);

  // Legend.
  var legend = document.getElementById("legend");
  D.classes.forEach(function (c, i) {
    var item = el("span", {"class": "legend-item", "data-class": String(i)});
    item.appendChild(el("span", {"class": "swatch", "style": "background:" + c.colour}));
    item.appendChild(document.createTextNode(c.name + " (" + c.count + ")"));
    legend.appendChild(item);
  });

  // Operator table (its recompute column in training only).
  if (!D.training) document.getElementById("recompute-head").remove();
  if (!D.training) document.getElementById("zero-head").remove();
  var opRows = [];
  var tbody = document.querySelector("#operators tbody");
  D.operators.forEach(function (o) {
    var tr = el("tr", {"id": "op-" + o.id, "data-op": o.name});
    var name = el("td");
    name.appendChild(el("span", {"class": "swatch", "style": "background:" + D.classes[o["class"]].colour}));
    name.appendChild(document.createTextNode(o.name));
    tr.appendChild(name);
    tr.appendChild(el("td", {}, o.type));
    tr.appendChild(el("td", {}, o.strategy));
    tr.appendChild(el("td", {}, o.cuts));
    if (D.training) tr.appendChild(el("td", {"data-col": "recompute"}, o.recompute));
    if (D.training) tr.appendChild(el("td", {"data-col": "zero"}, o.zero));
    ["compute_s", "communication_s", "layout_s", "gradient_s", "halo_s", "output_s"].forEach(function (k) {
      var td = numCell(o[k], fmtS);
      td.setAttribute("data-col", k);
      tr.appendChild(td);
    });
    // Of all compute and communication (overlap hides part of the latter
    // from the step time, not from the work).
    var work = S.compute_s + S.communication_s;
    var share = work > 0 ? (o.compute_s + o.communication_s) / work : 0;
    var st = el("td", {"class": "n", "data-value": String(share), "data-col": "share"}, (100 * share).toFixed(2) + " %");
    tr.appendChild(st);
    tbody.appendChild(tr);
    opRows.push({tr: tr, o: o, share: share});
  });

  // Redistribution table.
  var rbody = document.querySelector("#redistributions tbody");
  var rRows = [];
  // The costliest first; ties keep the evaluator's order.
  var byTime = D.redistributions.map(function (r, i) { return i; });
  byTime.sort(function (a, b) {
    var x = D.redistributions[a].seconds, y = D.redistributions[b].seconds;
    return x > y ? -1 : x < y ? 1 : a - b;
  });
  byTime.forEach(function (i) {
    var r = D.redistributions[i];
    var tr = el("tr", {"id": "redist-" + i});
    ["tensor", "from", "to", "axis", "level", "collective", "phase", "reason"].forEach(function (k) {
      tr.appendChild(el("td", {"data-col": k}, r[k]));
    });
    var b = numCell(r.bytes, fmtB); b.setAttribute("data-col", "bytes"); tr.appendChild(b);
    var s = numCell(r.seconds, fmtS); s.setAttribute("data-col", "seconds"); tr.appendChild(s);
    rbody.appendChild(tr);
    rRows.push({tr: tr, o: r});
  });
  document.getElementById("redistribution-note").textContent = D.redistribution_count +
    " collectives (forward and backward)" + (D.redistributions.length < D.redistribution_count
      ? ", the " + D.redistributions.length + " costliest listed (the chart above sums all)" : "") +
    ", per device bytes; total communication " + fmtS(S.communication_s) + ".";
  if (D.fold)
    document.getElementById("operators-note").textContent = "Listed: the operators outside the repeated block and its first " +
      D.fold.copies + " of " + D.fold.repeats + " copies.";

  // Sortable tables.
  function sortable(table, rows, value) {
    var dir = {};
    table.querySelectorAll("th").forEach(function (th) {
      th.addEventListener("click", function () {
        var col = th.getAttribute("data-col");
        dir[col] = -(dir[col] || 1);
        rows.sort(function (a, b) {
          var x = value(a, col), y = value(b, col);
          return (x < y ? -1 : x > y ? 1 : 0) * dir[col];
        });
        var body = table.querySelector("tbody");
        rows.forEach(function (r) { body.appendChild(r.tr); });
      });
    });
  }
  sortable(document.getElementById("operators"), opRows, function (r, c) { return c === "share" ? r.share : r.o[c]; });
  sortable(document.getElementById("redistributions"), rRows, function (r, c) { return r.o[c]; });

  // Memory bar of one device (every device holds the same share).
  var mem = document.getElementById("memory");
  var cap = D.memory.capacity_bytes, used = S.memory_per_device_bytes;
  var scale = Math.max(cap, used);
  var bar = el("div", {"class": "bar", "id": "memory-bar"});
  var weights = S.parameter_bytes - S.gradient_bytes - S.optimizer_bytes;
  var memLegend = document.getElementById("memory-legend");
  [["weights", "parameters", weights, "#4e79a7"], ["gradient_bytes", "gradients", S.gradient_bytes, "#76b7b2"],
   ["optimizer_bytes", "optimizer state", S.optimizer_bytes, "#b07aa1"],
   ["activation_bytes", "activations", S.activation_bytes, "#f28e2b"]].forEach(function (p) {
    bar.appendChild(el("div", {"data-key": p[0], "style": "width:" + (100 * p[2] / scale) + "%;background:" + p[3],
                              "title": p[1] + " " + fmtB(p[2])}));
    var item = el("span", {"class": "memory-legend-item", "data-key": p[0], "data-value": String(p[2])});
    item.appendChild(el("span", {"class": "swatch", "style": "background:" + p[3]}));
    item.appendChild(document.createTextNode(p[1] + " " + fmtB(p[2])));
    memLegend.appendChild(item);
  });
  mem.appendChild(bar);
  mem.appendChild(el("p", {"id": "memory-text", "data-used": String(used), "data-capacity": String(cap)},
    "Each of the " + D.devices + " devices holds " + fmtB(used) + " (parameters and their state " +
    fmtB(S.parameter_bytes) + ", activations " + fmtB(S.activation_bytes) + ") of " + fmtB(cap) +
    " (" + (100 * used / cap).toFixed(1) + " %)."));

  // Pipeline stage strip: per stage its operators, group, compute, memory
  // and its group's busy and bubble time (one bar, bubble in red).
  if (D.pipeline) {
    var P = D.pipeline, pw = document.getElementById("pipeline");
    pw.appendChild(el("h2", {}, "Pipeline stages"));
    pw.appendChild(el("p", {"class": "note", "id": "pipeline-note"}, P.stages.length + " stages, " + P.schedule + ", " +
      P.microbatches + " microbatches; step " + fmtS(P.step_time_s) + ", bubble " + (100 * P.bubble_fraction).toFixed(1) +
      " % of the pipelined part. The graph and tables below are stage " + P.shown + "'s."));
    var strip = el("div", {"class": "strip"});
    var tmax = 0;
    P.stages.forEach(function (st) { tmax = Math.max(tmax, st.busy_s + st.bubble_s); });
    P.stages.forEach(function (st, j) {
      var box = el("div", {"class": "stage" + (j === P.shown ? " shown" : ""), "id": "stage-" + j,
                           "data-compute": String(st.compute_s), "data-memory": String(st.memory_bytes),
                           "data-bubble": String(st.bubble_s)});
      box.appendChild(el("div", {}, "stage " + j + " \u00b7 group " + st.group));
      box.appendChild(el("div", {"class": "note"}, st.operators + " ops: " + st.first + " \u2026 " + st.last));
      box.appendChild(el("div", {}, "compute " + fmtS(st.compute_s)));
      box.appendChild(el("div", {}, "memory " + fmtB(st.memory_bytes)));
      box.appendChild(el("div", {}, "bubble " + fmtS(st.bubble_s)));
      var b = el("div", {});
      b.appendChild(el("span", {"class": "busy", "style": "width:" + (tmax > 0 ? 7 * st.busy_s / tmax : 0) + "em"}));
      b.appendChild(el("span", {"class": "idle", "style": "width:" + (tmax > 0 ? 7 * st.bubble_s / tmax : 0) + "em"}));
      box.appendChild(b);
      strip.appendChild(box);
    });
    pw.appendChild(strip);
  }

  // Device mesh: the levels as nested boxes, outermost first, alternating
  // rows and columns; a level of more than 8 shows 7 and an ellipsis box.
  (function () {
    var pic = document.getElementById("mesh-pic"), L = D.cluster.levels;
    var SHOW = 8, CELL = 12, PAD = 5, LAB = 13;
    function shown(n) { return n > SHOW ? SHOW : n; }
    // Size of a box of level i (its children laid out along i's direction).
    function size(i) {
      if (i >= L.length) return [CELL, CELL];
      var c = size(i + 1), n = shown(L[i].size), across = i % 2 === 0;
      return across ? [n * c[0] + (n + 1) * PAD, c[1] + 2 * PAD + LAB]
                    : [c[0] + 2 * PAD, n * (c[1] + PAD) + PAD + LAB];
    }
    var total = size(0);
    var svg = sv("svg", {"id": "mesh-svg", "width": total[0] + 2, "height": total[1] + 2});
    function draw(i, x, y, index) {
      if (i >= L.length) { svg.appendChild(sv("rect", {"class": "dev", "x": x, "y": y, "width": CELL, "height": CELL})); return; }
      var s = size(i), c = size(i + 1), n = shown(L[i].size), across = i % 2 === 0;
      var box = sv("rect", {"class": "lvl", "data-level": L[i].name, "x": x, "y": y, "width": s[0], "height": s[1], "rx": 3});
      var tip = sv("title"); tip.textContent = L[i].name + " " + index + " of " + L[i].size; box.appendChild(tip);
      svg.appendChild(box);
      // The outermost box names its level; inner ones, narrow, only their index.
      var lab = sv("text", {"x": x + 3, "y": y + 10}); lab.textContent = index === "" ? L[i].name + " \u00d7" + L[i].size : String(index);
      svg.appendChild(lab);
      for (var k = 0; k < n; k++) {
        var cx = across ? x + PAD + k * (c[0] + PAD) : x + PAD, cy = across ? y + LAB + PAD : y + LAB + PAD + k * (c[1] + PAD);
        if (L[i].size > SHOW && k === n - 1) {
          var more = sv("text", {"x": cx + 2, "y": cy + Math.min(c[1], 24) / 2 + 4, "class": "more"});
          more.textContent = "\u2026" + (L[i].size - n + 1);
          svg.appendChild(more);
        } else {
          draw(i + 1, cx, cy, k);
        }
      }
    }
    draw(0, 1, 1, "");
    var fig = el("div", {});
    fig.appendChild(svg);
    fig.appendChild(el("div", {"class": "note", "id": "mesh-nesting"}, L.map(function (l) { return l.name + " \u00d7" + l.size; }).join(" \u2283 ") +
      " \u2283 device; " + D.devices + " devices"));
    pic.appendChild(fig);
    var t = el("table", {"id": "mesh-levels"});
    var hr = el("tr");
    ["level", "size", "bandwidth", "latency", "mesh axes (named dim: share of compute cut)"].forEach(function (h) { hr.appendChild(el("th", {}, h)); });
    t.appendChild(hr);
    L.forEach(function (l) {
      var tr = el("tr", {"data-level": l.name});
      tr.appendChild(el("td", {}, l.name));
      tr.appendChild(el("td", {"class": "n"}, String(l.size)));
      tr.appendChild(el("td", {"class": "n"}, l.bandwidth_GBps + " GB/s"));
      tr.appendChild(el("td", {"class": "n"}, l.latency_us + " \u00b5s"));
      var axes = D.mesh.filter(function (m) { return m.level === l.name; }).map(function (m) {
        return m.axis + "=" + m.size + " " + m.dims + ": " + (100 * (m.share || 0)).toFixed(0) + " %";
      });
      tr.appendChild(el("td", {"class": "axes"}, axes.length ? axes.join(", ") : "no cut (size 1)"));
      t.appendChild(tr);
    });
    pic.appendChild(t);
  })();

  // Communication breakdown: one bar per reason x collective x level.
  var chart = document.getElementById("comm-chart");
  var cmax = D.comm_groups.length ? D.comm_groups[0].seconds : 0;
  if (!D.comm_groups.length) chart.appendChild(el("p", {"class": "note"}, "No collectives."));
  D.comm_groups.forEach(function (c, i) {
    var row = el("div", {"class": "crow", "id": "comm-" + i, "data-seconds": String(c.seconds)});
    row.appendChild(el("span", {"class": "lab"}, c.reason + " \u00b7 " + c.collective + " \u00b7 " + c.level));
    row.appendChild(el("span", {"class": "cbar", "style": "width:" + (cmax > 0 ? 30 * c.seconds / cmax : 0) + "em"}));
    row.appendChild(el("span", {"class": "val"}, fmtS(c.seconds) + ", " + fmtB(c.bytes) + " per device (" +
      (S.communication_s > 0 ? (100 * c.seconds / S.communication_s).toFixed(1) : "0") + " %)"));
    chart.appendChild(row);
  });

  // Graph: layered drawing, left to right, wrapped into bands of as many
  // layers as the pane is wide, so the page never scrolls sideways and the
  // names keep their size. A folded graph (D.fold) draws its repeated block
  // once, "x N", and can expand to the copies the page carries; ids of
  // copies it does not carry map onto the last one carried.
  var wrap = document.getElementById("graph-wrap");
  var byId = {};
  D.operators.forEach(function (o) { byId[o.id] = o; });
  var selected = null;
  function drawGraph(nodes, edges) {
    var W = 130, H = 30, GX = 60, GY = 12, BAND_GAP = 3 * GY;
    var pane = wrap.clientWidth || 1200;
    var K = Math.max(4, Math.floor((pane - GX) / (W + GX)));  // layers per band
    var maxLayer = 0, bandRows = [];
    nodes.forEach(function (o) {
      maxLayer = Math.max(maxLayer, o.layer);
      var b = Math.floor(o.layer / K);
      bandRows[b] = Math.max(bandRows[b] || 0, o.row);
    });
    var bandTop = [], top = GY;
    for (var b = 0; b <= Math.floor(maxLayer / K); b++) {
      bandTop[b] = top;
      top += ((bandRows[b] || 0) + 1) * (H + GY) + BAND_GAP;
    }
    var svg = sv("svg", {"id": "graph-svg", "width": Math.min(maxLayer + 1, K) * (W + GX) + GX,
                         "height": top - BAND_GAP + GY, "data-pane": String(pane),
                         "data-layers-per-band": String(K)});
    function px(o) { return GX / 2 + (o.layer % K) * (W + GX); }
    function py(o) { return bandTop[Math.floor(o.layer / K)] + o.row * (H + GY); }
    edges.forEach(function (e) {
      var a = e.from, b = e.to;
      var x1 = px(a) + W, y1 = py(a) + H / 2, x2 = px(b), y2 = py(b) + H / 2;
      var path = sv("path", {"class": "edge" + (e.moved ? " moved" : "") + (e.next ? " next" : ""), "data-tensor": e.tensor,
                             "d": "M" + x1 + "," + y1 + " C" + (x1 + GX / 2) + "," + y1 + " " + (x2 - GX / 2) + "," + y2 + " " + x2 + "," + y2});
      var t = sv("title"); t.textContent = e.tensor + (e.next ? " (into the next copy of the block)" : "") +
        (e.moved ? " (redistributed: " + e.tip + ")" : ""); path.appendChild(t);
      svg.appendChild(path);
    });
    nodes.forEach(function (o) {
      var g = sv("g", {"class": "op", "id": "node-" + o.id, "data-op": o.name, "data-class": String(o["class"]),
                       "transform": "translate(" + px(o) + "," + py(o) + ")"});
      g.appendChild(sv("rect", {"width": W, "height": H, "fill": D.classes[o["class"]].colour}));
      var t1 = sv("text", {"x": 4, "y": 12}); t1.textContent = o.name.length > 22 ? o.name.slice(0, 21) + "\u2026" : o.name;
      var t2 = sv("text", {"x": 4, "y": 24}); t2.textContent = o.type + " " + o.split;
      g.appendChild(t1); g.appendChild(t2);
      var tip = sv("title");
      tip.textContent = o.name + " (" + o.type + ")\nlayout " + o.layout + "\nsplit " + o.split +
        "\nstrategy " + o.strategy + "\ncuts " + o.cuts + (o.recompute ? "\nrecompute " + o.recompute : "") +
        (o.zero ? "\nZeRO stage " + o.zero : "") +
        "\ncompute " + fmtS(o.compute_s) + ", communication " + fmtS(o.communication_s);
      g.appendChild(tip);
      g.addEventListener("click", function () {
        if (selected) { selected.g.classList.remove("sel"); selected.tr.classList.remove("sel"); }
        var tr = document.getElementById("op-" + o.id);
        g.classList.add("sel"); tr.classList.add("sel");
        selected = {g: g, tr: tr};
        tr.scrollIntoView({block: "center"});
      });
      svg.appendChild(g);
    });
    return svg;
  }
  function plainEdges() {
    return D.edges.map(function (e) {
      return {from: byId[e[0]], to: byId[e[1]], tensor: e[2], moved: e[3], tip: e[4], next: false};
    });
  }
  // The folded drawing with `copies` copies of the block: nodes laid out
  // here (longest path over the edges that do not wrap into a next copy).
  function foldedGraph(copies) {
    var F = D.fold, end = F.start + F.period * F.repeats;
    function copyOf(id) { return id >= F.start && id < end ? Math.floor((id - F.start) / F.period) : -1; }
    function canon(id) { var c = copyOf(id); return c >= copies ? id - (c - copies + 1) * F.period : id; }
    var nodes = D.operators.filter(function (o) { var c = copyOf(o.id); return c < copies; });
    var edges = [];
    D.edges.forEach(function (e) {
      var u = canon(e[0]), v = canon(e[1]);
      if (!byId[u] || !byId[v] || copyOf(u) >= copies || copyOf(v) >= copies) return;
      var next = copyOf(e[0]) >= 0 && copyOf(e[1]) >= 0 && copyOf(e[1]) - copyOf(e[0]) !== copyOf(v) - copyOf(u);
      edges.push({from: byId[u], to: byId[v], tensor: e[2], moved: e[3], tip: e[4], next: next});
    });
    var layer = {}, indeg = {}, out = {};
    nodes.forEach(function (o) { layer[o.id] = 0; indeg[o.id] = 0; out[o.id] = []; });
    edges.forEach(function (e) { if (!e.next) { indeg[e.to.id]++; out[e.from.id].push(e.to.id); } });
    var queue = nodes.filter(function (o) { return indeg[o.id] === 0; }).map(function (o) { return o.id; });
    var fill = [], row = {};
    for (var q = 0; q < queue.length; q++) {
      var id = queue[q];
      fill[layer[id]] = (fill[layer[id]] || 0);
      row[id] = fill[layer[id]]++;
      out[id].forEach(function (v) {
        layer[v] = Math.max(layer[v], layer[id] + 1);
        if (--indeg[v] === 0) queue.push(v);
      });
    }
    var laid = nodes.map(function (o) {
      var c = {}; for (var k in o) c[k] = o[k];
      c.layer = layer[o.id]; c.row = row[o.id] || 0; return c;
    });
    var byLaid = {}; laid.forEach(function (o) { byLaid[o.id] = o; });
    edges.forEach(function (e) { e.from = byLaid[e.from.id]; e.to = byLaid[e.to.id]; });
    return drawGraph(laid, edges);
  }
  if (!D.drawn) {
    wrap.appendChild(el("p", {"class": "note", "id": "graph-skipped"},
      D.operator_count + " operators and no repeated block to fold: too many to draw; see the tables below."));
  } else if (D.fold) {
    var F = D.fold, expanded = false;
    var bar = el("p", {"class": "note", "id": "fold-note"});
    var button = el("button", {"id": "fold-toggle", "type": "button"});
    function show() {
      var old = document.getElementById("graph-svg");
      if (old) old.parentNode.removeChild(old);
      wrap.appendChild(foldedGraph(expanded ? F.copies : 1));
      button.textContent = expanded ? "fold the block" : "expand: draw " + F.copies + " copies";
      bar.firstChild.textContent = D.operator_count + " operators, folded: operators " + F.start + "\u2013" +
        (F.start + F.period - 1) + " are a block of " + F.period + " repeated \u00d7" + F.repeats +
        (F.differing ? " (" + F.differing + " copies cut otherwise than the first)" : " (every copy cut alike)") +
        "; drawn " + (expanded ? "the first " + F.copies + " copies" : "once") +
        ". The block's totals over all copies: compute " + fmtS(F.compute_s) + ", communication " +
        fmtS(F.communication_s) + ". Dashed edges run into the next copy. ";
    }
    bar.appendChild(document.createTextNode(""));
    bar.appendChild(button);
    button.addEventListener("click", function () { expanded = !expanded; show(); });
    wrap.parentNode.insertBefore(bar, wrap);
    show();
  } else {
    wrap.appendChild(drawGraph(D.operators, plainEdges()));
  }
  var status = document.getElementById("status");
  status.setAttribute("data-state", "ready");
  status.setAttribute("data-render-ms", String(Math.round(performance.now() - t0)));
  status.textContent = "Report of graph " + D.graph + " generated by recsearch.";
})();
</script>
</body>
</html>
)PAGE";

void replace_all(std::string& s, const std::string& from, const std::string& to) {
  for (std::size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) {
    s.replace(at, from.size(), to);
  }
}

}  // namespace

PipelineStrip pipeline_strip(const ir::Graph& g, const plan::PipelinePlan& pp,
                             const plan::PipelineEvaluation& pe, std::size_t shown) {
  PipelineStrip strip;
  strip.schedule = std::string(plan::schedule_name(pp.schedule));
  strip.microbatches = pp.microbatches;
  strip.step_time_s = pe.summary.step_time_s;
  strip.bubble_fraction = pe.bubble_fraction;
  strip.shown = shown;
  for (std::size_t j = 0; j < pp.stages.size(); ++j) {
    const plan::Stage& st = pp.stages[j];
    PipelineStrip::Stage row;
    if (st.first < st.last && st.last <= g.num_operators()) {
      row.first_op = g.op(st.first).name;
      row.last_op = g.op(st.last - 1).name;
      row.operators = st.last - st.first;
    }
    row.group = st.group;
    if (j < pe.stages.size()) row.compute_s = pe.stages[j].summary.compute_s;
    if (st.group < pe.groups.size()) {
      const plan::GroupReport& gr = pe.groups[st.group];
      row.memory_bytes = gr.memory_bytes;
      row.busy_s = gr.busy_s;
      row.bubble_s = gr.bubble_s;
    }
    strip.stages.push_back(std::move(row));
  }
  return strip;
}

std::string plan_to_html(const ReportInput& in, const PipelineStrip* strip) {
  json d = page_data(in);
  if (strip != nullptr) d["pipeline"] = strip_data(*strip);
  std::string data = d.dump(-1, ' ', false, json::error_handler_t::replace);
  // Inside <script>, "</script>" or "<!--" in a name must not end the block:
  // '<' only occurs inside JSON strings, where \u003c means the same.
  replace_all(data, "<", "\\u003c");
  std::string page = kPage;
  const std::string title = "recsearch plan: " + in.graph.name();
  // The data block last: names inside it must not be taken for placeholders.
  replace_all(page, "@TITLE@", html_escape(title));
  const std::size_t at = page.find("@DATA@");
  page.replace(at, 6, data);
  return page;
}

std::string html_escape(const std::string& s) {
  std::string out;
  for (const char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace recsearch::report
