// SPDX-License-Identifier: Apache-2.0
// Visual reports of a plan: a self-contained HTML page and a Graphviz graph.
//
// Both draw what plan::evaluate computed; nothing here prices anything. The
// HTML page embeds its data, style and scripts (no network at view time):
// a summary, the operator graph coloured by strategy, a per-operator cost
// table with its communication split by reason, the redistributions and the
// memory of a device against its capacity. The DOT graph has one node per
// operator (same colours) and marks the edges that carry a redistribution.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/cluster.hpp"
#include "recsearch/ir/graph.hpp"
#include "recsearch/plan/evaluator.hpp"
#include "recsearch/plan/plan.hpp"

namespace recsearch::report {

// Everything a report shows, gathered from a plan and its evaluation.
struct ReportInput {
  const ir::Graph& graph;
  const std::vector<algebra::OpSpace>& spaces;
  const Cluster& cluster;
  const plan::Plan& plan;
  const plan::Evaluation& eval;
};

// Communication of one operator split by reason (sums of the evaluator's
// events attributed to it: layout to the consumer, the others to the
// operator itself); the parts add up to OpCost::communication_s.
struct CommBreakdown {
  double layout_s = 0;
  double gradient_s = 0;
  double halo_s = 0;
  double output_s = 0;
};

// Per operator, in operator id order.
[[nodiscard]] std::vector<CommBreakdown> comm_breakdown(const ReportInput& in);

// The strategy class an operator is coloured by: its cuts as
// "c0:i c1:j" (axes that cut, with the loop each cuts), "replicated" when
// no axis cuts it.
[[nodiscard]] std::string cut_signature(const ReportInput& in, ir::OpId op);

// Colour classes: distinct signatures by decreasing operator count (ties by
// first appearance); at most kMaxColourClasses, the rest share "other".
inline constexpr std::size_t kMaxColourClasses = 12;
struct ColourClasses {
  std::vector<std::string> names;    // class names; "other" last when used
  std::vector<std::string> colours;  // "#rrggbb" per class
  std::vector<std::size_t> of_op;    // class index per operator
};
[[nodiscard]] ColourClasses colour_classes(const ReportInput& in);

// Graphs with more operators than this are listed in the HTML tables but
// not drawn (a browser would struggle with the SVG).
inline constexpr std::size_t kMaxDrawnOperators = 5000;

// The HTML report (UTF-8, one file, no external resources).
[[nodiscard]] std::string plan_to_html(const ReportInput& in);
// The Graphviz DOT graph.
[[nodiscard]] std::string plan_to_dot(const ReportInput& in);

// Text escaped for HTML element content and double-quoted attributes (&, <,
// >, "): what every page the project writes (plan reports, sweep charts)
// uses for names that come from user files.
[[nodiscard]] std::string html_escape(const std::string& s);

}  // namespace recsearch::report
