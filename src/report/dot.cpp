// SPDX-License-Identifier: Apache-2.0
// The plan as a Graphviz graph: operators coloured by strategy class, graph
// inputs as ellipses, and every producer -> consumer edge; an edge that
// carries a layout redistribution is drawn red and names its collectives.
#include <cstdio>
#include <map>
#include <set>
#include <string>

#include "recsearch/cost/model.hpp"
#include "recsearch/report/report.hpp"
#include "report/text.hpp"

namespace recsearch::report {
namespace {

// A DOT double-quoted string.
std::string quoted(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.3g s", s);
  return buf;
}

}  // namespace

std::string plan_to_dot(const ReportInput& in) {
  const ir::Graph& g = in.graph;
  const ColourClasses classes = colour_classes(in);
  std::string out = "// recsearch plan of graph " + g.name() + " on " +
                    std::to_string(in.plan.num_devices()) + " devices (" + in.plan.algorithm +
                    "); render with: dot -Tsvg\n";
  out += "digraph " + quoted(g.name().empty() ? "plan" : g.name()) + " {\n";
  out +=
      "  rankdir=TB;\n  node [shape=box, style=\"filled,rounded\", fontname=\"Helvetica\", "
      "fontsize=10];\n";
  out += "  edge [fontname=\"Helvetica\", fontsize=8, color=\"#777777\"];\n";
  out += "  label=" +
         quoted(g.name() + ": step " + seconds_text(in.eval.summary.step_time_s) + " on " +
                std::to_string(in.plan.num_devices()) + " devices") +
         "; labelloc=t;\n";

  // Layout redistributions per (tensor, consumer), with their collectives.
  std::map<std::pair<ir::TensorId, ir::OpId>, std::set<std::string>> moved;
  for (const plan::CommEvent& e : in.eval.events) {
    if (e.reason != plan::CommReason::Layout || e.phase != cost::Phase::Forward) continue;
    moved[{e.tensor, e.to}].insert(std::string(cost::collective_name(e.collective)) + "@" +
                                   in.plan.mesh.at(e.axis).axis);
  }
  for (const plan::CommEvent& e : in.eval.events) {
    if (e.reason != plan::CommReason::Layout) continue;
    moved.try_emplace({e.tensor, e.to});  // backward-only moves still mark the edge
  }

  for (std::size_t o = 0; o < g.num_operators(); ++o) {
    const ir::Operator& op = g.op(static_cast<ir::OpId>(o));
    const std::size_t cls = classes.of_op[o];
    out += "  op" + std::to_string(o) + " [label=" +
           quoted(op.name + "\n" + op.type + "\n" + strategy_text(in.eval.strategies.at(o)) + "\n" +
                  cut_signature(in, static_cast<ir::OpId>(o))) +
           ", fillcolor=" + quoted(classes.colours[cls]) + ", tooltip=" +
           quoted("compute " + seconds_text(in.eval.op_costs.at(o).compute_s) + ", communication " +
                  seconds_text(in.eval.op_costs.at(o).communication_s)) +
           "];\n";
  }
  for (std::size_t t = 0; t < g.num_tensors(); ++t) {
    const ir::Tensor& ts = g.tensor(static_cast<ir::TensorId>(t));
    if (ts.producer != ir::kNone || ts.kind != ir::TensorKind::Input || ts.consumers.empty())
      continue;
    out += "  t" + std::to_string(t) + " [shape=ellipse, style=\"\", label=" +
           quoted(ts.name + "\n" + ir::shape_to_string(ts.shape)) + "];\n";
  }
  for (std::size_t t = 0; t < g.num_tensors(); ++t) {
    const auto tid = static_cast<ir::TensorId>(t);
    const ir::Tensor& ts = g.tensor(tid);
    std::string from;
    if (ts.producer != ir::kNone) {
      from = "op" + std::to_string(ts.producer);
    } else if (ts.kind == ir::TensorKind::Input) {
      from = "t" + std::to_string(t);
    } else {
      continue;  // parameters and constants are not drawn
    }
    std::set<ir::OpId> seen;
    for (const ir::OpId c : ts.consumers) {
      if (!seen.insert(c).second) continue;
      std::string label = ts.name;
      std::string attrs;
      if (const auto it = moved.find({tid, c}); it != moved.end()) {
        for (const auto& m : it->second) label += "\n" + m;
        attrs = ", color=\"#d62728\", penwidth=2, fontcolor=\"#d62728\"";
      }
      out +=
          "  " + from + " -> op" + std::to_string(c) + " [label=" + quoted(label) + attrs + "];\n";
    }
  }
  // Legend: one box per colour class.
  out += "  subgraph cluster_legend {\n    label=\"strategy classes (mesh axis:loop)\";\n";
  for (std::size_t i = 0; i < classes.names.size(); ++i) {
    out += "    legend" + std::to_string(i) + " [label=" + quoted(classes.names[i]) +
           ", fillcolor=" + quoted(classes.colours[i]) + "];\n";
  }
  out += "  }\n}\n";
  return out;
}

}  // namespace recsearch::report
