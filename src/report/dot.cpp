// SPDX-License-Identifier: Apache-2.0
// The plan as a Graphviz graph: operators coloured by output layout class
// (layout_classes, as the HTML page) and labelled with their split, graph
// inputs as ellipses, and every producer -> consumer edge; an edge that
// carries a layout redistribution is drawn red and names its collectives.
// A repeated block is drawn as a cluster per copy, or, past
// kFoldDotOperators operators, once for all copies (DotOptions::whole_graph
// draws them all): BERT-large's whole graph is too large for Graphviz.
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

// How the DOT graph shows a repeated block: not at all (no fold, or a
// small graph), every block in a cluster of its own, or block 0 only,
// standing for all of them, with the later blocks' edges mapped onto it.
struct DotFold {
  Fold fold{};  // repeats 0: none
  bool folded = false;

  [[nodiscard]] bool active() const { return fold.repeats > 0; }
  [[nodiscard]] bool in_block(std::size_t o) const {
    return active() && o >= fold.start && o < fold.start + fold.period * fold.repeats;
  }
  [[nodiscard]] std::size_t block(std::size_t o) const { return (o - fold.start) / fold.period; }
  // The node that stands for operator o.
  [[nodiscard]] std::size_t node(std::size_t o) const {
    return folded && in_block(o) ? fold.start + (o - fold.start) % fold.period : o;
  }
  [[nodiscard]] bool drawn(std::size_t o) const { return !folded || !in_block(o) || block(o) == 0; }
};

DotFold dot_fold(const ReportInput& in, const DotOptions& opts) {
  DotFold f;
  if (const auto fold = find_fold(in, kFoldTableOperators)) f.fold = *fold;
  f.folded = f.active() && !opts.whole_graph && in.graph.num_operators() > kFoldDotOperators;
  return f;
}

std::string op_node(const ReportInput& in, const ColourClasses& classes, const DotFold& f,
                    std::size_t o, const std::string& indent) {
  const ir::Operator& op = in.graph.op(static_cast<ir::OpId>(o));
  const std::size_t cls = classes.of_op[o];
  const std::string tag =
      f.folded && f.in_block(o) ? "[x" + std::to_string(f.fold.repeats) + "] " : "";
  return indent + "op" + std::to_string(o) + " [label=" +
         quoted(tag + op.name + "\n" + op.type + "\n" + strategy_text(in.eval.strategies.at(o)) +
                "\n" + op_split_text(in, static_cast<ir::OpId>(o))) +
         ", fillcolor=" + quoted(classes.colours[cls]) + ", tooltip=" +
         quoted("compute " + seconds_text(in.eval.op_costs.at(o).compute_s) + ", communication " +
                seconds_text(in.eval.op_costs.at(o).communication_s)) +
         "];\n";
}

// The operator nodes: outside blocks plain, each block (or block 0 alone
// when folded) in a cluster.
std::string op_nodes(const ReportInput& in, const ColourClasses& classes, const DotFold& f) {
  std::string out;
  const std::size_t n = in.graph.num_operators();
  for (std::size_t o = 0; o < n; ++o) {
    if (f.in_block(o)) continue;
    out += op_node(in, classes, f, o, "  ");
  }
  if (!f.active()) return out;
  const std::size_t blocks = f.folded ? 1 : f.fold.repeats;
  for (std::size_t b = 0; b < blocks; ++b) {
    const std::string label =
        f.folded
            ? "repeated block, drawn once for its " + std::to_string(f.fold.repeats) + " copies (" +
                  (f.fold.differing_blocks == 0
                       ? std::string("all with the same cuts")
                       : std::to_string(f.fold.differing_blocks) + " with other cuts") +
                  "; --whole-graph draws every one)"
            : "block " + std::to_string(b + 1) + " of " + std::to_string(f.fold.repeats);
    out += "  subgraph cluster_block" + std::to_string(b) + " {\n    label=" + quoted(label) +
           "; style=dashed; color=\"#999999\";\n";
    for (std::size_t k = 0; k < f.fold.period; ++k)
      out += op_node(in, classes, f, f.fold.start + b * f.fold.period + k, "    ");
    out += "  }\n";
  }
  return out;
}

}  // namespace

std::string plan_to_dot(const ReportInput& in, const DotOptions& opts) {
  const ir::Graph& g = in.graph;
  // Coloured as the HTML page is: by the output's layout on the named mesh.
  const ColourClasses classes = layout_classes(in);
  const DotFold fold = dot_fold(in, opts);
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

  out += op_nodes(in, classes, fold);
  for (std::size_t t = 0; t < g.num_tensors(); ++t) {
    const ir::Tensor& ts = g.tensor(static_cast<ir::TensorId>(t));
    if (ts.producer != ir::kNone || ts.kind != ir::TensorKind::Input || ts.consumers.empty())
      continue;
    out += "  t" + std::to_string(t) + " [shape=ellipse, style=\"\", label=" +
           quoted(ts.name + "\n" + ir::shape_to_string(ts.shape)) + "];\n";
  }
  // Edges between the nodes that stand for their ends; folded, a later
  // block's edge lands on block 0's, drawn once (the first, in tensor order,
  // names it), and an edge into the next block loops back, dashed.
  std::set<std::pair<std::string, std::size_t>> drawn;
  for (std::size_t t = 0; t < g.num_tensors(); ++t) {
    const auto tid = static_cast<ir::TensorId>(t);
    const ir::Tensor& ts = g.tensor(tid);
    std::string from;
    bool from_block = false;
    std::size_t from_b = 0;
    if (ts.producer != ir::kNone) {
      from = "op" + std::to_string(fold.node(ts.producer));
      from_block = fold.folded && fold.in_block(ts.producer);
      if (from_block) from_b = fold.block(ts.producer);
    } else if (ts.kind == ir::TensorKind::Input) {
      from = "t" + std::to_string(t);
    } else {
      continue;  // parameters and constants are not drawn
    }
    std::set<ir::OpId> seen;
    for (const ir::OpId c : ts.consumers) {
      if (!seen.insert(c).second) continue;
      const bool next_block = from_block && fold.in_block(c) && fold.block(c) != from_b;
      if (!drawn.insert({from, fold.node(c)}).second) continue;
      std::string label = ts.name;
      std::string attrs;
      if (const auto it = moved.find({tid, c}); it != moved.end()) {
        for (const auto& m : it->second) label += "\n" + m;
        attrs = ", color=\"#d62728\", penwidth=2, fontcolor=\"#d62728\"";
      }
      if (next_block) {
        label += "\n(into the next block)";
        attrs += ", style=dashed, constraint=false";
      }
      out += "  " + from + " -> op" + std::to_string(fold.node(c)) + " [label=" + quoted(label) +
             attrs + "];\n";
    }
  }
  // Legend: one box per colour class.
  out +=
      "  subgraph cluster_legend {\n    label=\"output layout on the named mesh (DP blues, TP "
      "oranges, DP + TP greens, replicated grey)\";\n";
  for (std::size_t i = 0; i < classes.names.size(); ++i) {
    out += "    legend" + std::to_string(i) + " [label=" + quoted(classes.names[i]) +
           ", fillcolor=" + quoted(classes.colours[i]) + "];\n";
  }
  out += "  }\n}\n";
  return out;
}

}  // namespace recsearch::report
