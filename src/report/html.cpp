// SPDX-License-Identifier: Apache-2.0
// The plan as one self-contained HTML page. The numbers are gathered here
// from the evaluation into a JSON block inside the page; the page's own
// script draws the graph (SVG), fills the tables and lets the reader sort
// them and pick an operator. Layout positions (layer = longest path from
// the inputs, row = order within the layer) are computed here so that the
// page stays a viewer.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include <nlohmann/json.hpp>  // the page's data block

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

json mesh_data(const ReportInput& in) {
  json mesh = json::array();
  for (const Cut& c : in.plan.mesh) {
    mesh.push_back(
        {{"axis", c.axis},
         {"size", c.size},
         {"level", c.level < in.cluster.levels().size() ? in.cluster.levels()[c.level].name
                                                        : std::string()}});
  }
  return mesh;
}

json summary_data(const plan::Summary& s) {
  return {{"step_time_s", num(s.step_time_s)},
          {"compute_s", num(s.compute_s)},
          {"recompute_s", num(s.recompute_s)},
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

// Per operator: its strategy, class, costs and place in the drawing
// (layer, and row within the layer in topological order).
json operators_data(const ReportInput& in, const ColourClasses& classes) {
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
  for (std::size_t o = 0; o < g.num_operators(); ++o) {
    const ir::Operator& op = g.op(static_cast<ir::OpId>(o));
    ops.push_back({{"id", o},
                   {"name", op.name},
                   {"type", op.type},
                   {"strategy", strategy_text(ev.strategies.at(o))},
                   {"cuts", cut_signature(in, static_cast<ir::OpId>(o))},
                   {"split", op_split_text(in, static_cast<ir::OpId>(o))},
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
json edges_data(const ReportInput& in) {
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
      const auto it = moved.find({static_cast<ir::TensorId>(t), c});
      edges.push_back({ts.producer, c, ts.name, it != moved.end(),
                       it != moved.end() ? it->second : std::string()});
    }
  }
  return edges;
}

// Every collective, in the evaluator's order (the page lists them by time).
json redistributions_data(const ReportInput& in) {
  const ir::Graph& g = in.graph;
  json red = json::array();
  const auto op_name = [&](ir::OpId o) { return o == ir::kNone ? std::string() : g.op(o).name; };
  for (const plan::CommEvent& e : in.eval.events) {
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

json page_data(const ReportInput& in) {
  const ir::Graph& g = in.graph;
  const ColourClasses classes = layout_classes(in);
  const bool drawn = g.num_operators() <= kMaxDrawnOperators;

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
    d["training"] = {{"recompute", std::string(plan::recompute_name(in.plan.training.recompute))},
                     {"zero_stage", in.plan.training.zero_stage},
                     {"microbatches", in.plan.training.microbatches}};
  }
  d["memory"] = {{"capacity_bytes", num(in.cluster.device().memory_GiB * kBytesPerGiB)}};
  d["classes"] = classes_data(classes);
  d["operators"] = operators_data(in, classes);
  d["edges"] = drawn ? edges_data(in) : json::array();
  d["redistributions"] = redistributions_data(in);
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
#pipeline .idle { height: 0.6em; background: #e15759; display: inline-block; }
</style>
</head>
<body>
<h1 id="title">@TITLE@</h1>
<p class="sub" id="subtitle"></p>
<div id="summary"></div>
<p class="sub" id="mesh-line"></p>
<div id="pipeline"></div>
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
<p class="note">Seconds per training or inference step; communication split by reason. Click a heading to sort.</p>
<div class="scroll"><table id="operators"><thead><tr>
<th data-col="name">operator</th><th data-col="type">type</th><th data-col="strategy">strategy</th><th data-col="cuts">cuts</th>
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
    (D.training ? "; recompute " + D.training.recompute + ", ZeRO stage " + D.training.zero_stage +
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
  var opsCard = el("div", {"class": "card", "data-key": "operators", "data-value": String(D.operators.length)});
  opsCard.appendChild(el("div", {"class": "k"}, "operators"));
  opsCard.appendChild(el("div", {"class": "v"}, String(D.operators.length)));
  summary.appendChild(opsCard);

  // Legend.
  var legend = document.getElementById("legend");
  D.classes.forEach(function (c, i) {
    var item = el("span", {"class": "legend-item", "data-class": String(i)});
    item.appendChild(el("span", {"class": "swatch", "style": "background:" + c.colour}));
    item.appendChild(document.createTextNode(c.name + " (" + c.count + ")"));
    legend.appendChild(item);
  });

  // Operator table.
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
  document.getElementById("redistribution-note").textContent = D.redistributions.length +
    " collectives (forward and backward), per device bytes; total communication " + fmtS(S.communication_s) + ".";

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

  // Graph: layered drawing, left to right.
  var wrap = document.getElementById("graph-wrap");
  if (!D.drawn) {
    wrap.appendChild(el("p", {"class": "note", "id": "graph-skipped"},
      D.operators.length + " operators: too many to draw; see the tables below."));
  } else {
    var W = 130, H = 30, GX = 60, GY = 12;
    var maxLayer = 0, maxRow = 0;
    D.operators.forEach(function (o) { maxLayer = Math.max(maxLayer, o.layer); maxRow = Math.max(maxRow, o.row); });
    var svg = sv("svg", {"id": "graph-svg", "width": (maxLayer + 1) * (W + GX) + GX,
                         "height": (maxRow + 1) * (H + GY) + GY});
    function px(o) { return GX / 2 + o.layer * (W + GX); }
    function py(o) { return GY + o.row * (H + GY); }
    D.edges.forEach(function (e) {
      var a = D.operators[e[0]], b = D.operators[e[1]];
      var x1 = px(a) + W, y1 = py(a) + H / 2, x2 = px(b), y2 = py(b) + H / 2;
      var path = sv("path", {"class": "edge" + (e[3] ? " moved" : ""), "data-tensor": e[2],
                             "d": "M" + x1 + "," + y1 + " C" + (x1 + GX / 2) + "," + y1 + " " + (x2 - GX / 2) + "," + y2 + " " + x2 + "," + y2});
      var t = sv("title"); t.textContent = e[2] + (e[3] ? " (redistributed: " + e[4] + ")" : ""); path.appendChild(t);
      svg.appendChild(path);
    });
    var selected = null;
    D.operators.forEach(function (o) {
      var g = sv("g", {"class": "op", "id": "node-" + o.id, "data-op": o.name, "data-class": String(o["class"]),
                       "transform": "translate(" + px(o) + "," + py(o) + ")"});
      g.appendChild(sv("rect", {"width": W, "height": H, "fill": D.classes[o["class"]].colour}));
      var t1 = sv("text", {"x": 4, "y": 12}); t1.textContent = o.name.length > 22 ? o.name.slice(0, 21) + "\u2026" : o.name;
      var t2 = sv("text", {"x": 4, "y": 24}); t2.textContent = o.type + " " + o.split;
      g.appendChild(t1); g.appendChild(t2);
      var tip = sv("title");
      tip.textContent = o.name + " (" + o.type + ")\nlayout " + o.layout + "\nsplit " + o.split +
        "\nstrategy " + o.strategy + "\ncuts " + o.cuts +
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
    wrap.appendChild(svg);
  }
  var status = document.getElementById("status");
  status.setAttribute("data-state", "ready");
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
