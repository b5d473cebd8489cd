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
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/cluster.hpp"
#include "recsearch/ir/graph.hpp"
#include "recsearch/plan/evaluator.hpp"
#include "recsearch/plan/pipeline.hpp"
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

// The layout class the HTML report colours an operator by, from its first
// output's sharding on the named mesh: "DP m0,m1" (only the leading, batch,
// dim is split), "TP m1" (only other dims are split, or the output is
// partial), "DP m0 + TP m1" (both), "replicated". layout_classes groups
// them like colour_classes, in colour families: DP blues, TP oranges, mixed
// greens, replicated grey; shades within a family by decreasing count.
[[nodiscard]] std::string layout_class(const ReportInput& in, ir::OpId op);
[[nodiscard]] ColourClasses layout_classes(const ReportInput& in);

// Graphs with more operators than this are listed in the HTML tables but
// not drawn (a browser would struggle with the SVG).
inline constexpr std::size_t kMaxDrawnOperators = 5000;

// On the user's named mesh dims (io/mesh_names.hpp): a tensor's sharding
// per dim ("[node,gpu/4, -, gpu%4]", "partial gpu" appended when partial)
// and an operator's split per cut loop ("i=node j=gpu"; "replicated").
[[nodiscard]] std::string tensor_sharding_text(const ReportInput& in, ir::TensorId t);
[[nodiscard]] std::string op_split_text(const ReportInput& in, ir::OpId op);

// How much of the mesh a plan puts to work. Each operator runs on
// `degree` = the product of the sizes of the axes that cut it, the other
// devices computing copies; weighted by each operator's compute time per
// device, effective = sum(compute * degree) / sum(compute): the speed-up over
// one device the compute sees (num_devices when every operator is cut on
// every axis, 1 when all of them are replicated).
struct Parallelism {
  double effective = 1;
  std::int64_t devices = 1;
  // Per mesh axis: the share of compute time on operators the axis cuts.
  std::vector<double> axis_share;
  // Axes that cut no operator: their devices only duplicate work.
  std::vector<std::uint32_t> idle_axes;
};
[[nodiscard]] Parallelism parallelism(const ReportInput& in);
// One line: "5.2 of 8 devices (compute-weighted); c2 (m1%2) cuts no operator:
// its devices duplicate all work", or "fully replicated: ..." when nothing
// is cut. Axes that cut less than kPartlyUsedShare of the compute are
// flagged as partly used, with their share.
inline constexpr double kPartlyUsedShare = 0.5;
[[nodiscard]] std::string parallelism_text(const ReportInput& in);

// A plan's activation recomputation in words: the plan-wide value
// ("selective") where every operator has it; where it differs per operator,
// counted per repeated block when the graph repeats one ("full on 11 of 24
// blocks, selective on 13", operators outside the blocks added where they
// differ from the plan-wide value), else per operator ("full on 69 of 1101
// operators, none on 1032"). The table, the HTML report and the sweep say it
// alike.
[[nodiscard]] std::string recompute_text(const ir::Graph& g, const plan::Training& t);
// The ZeRO stage likewise: "2", or per parameter "3 on 5 of 98 parameters
// (61% of the parameter bytes), 2 on 93".
[[nodiscard]] std::string zero_text(const ir::Graph& g, const plan::Training& t);

// A repeated block of the graph (search::detail::find_repetition): ops
// [start, start + period * repeats) are `repeats` blocks of `period`.
struct Fold {
  std::size_t start = 0;
  std::size_t period = 0;
  std::size_t repeats = 0;
  // Blocks whose cuts differ from block 0's (listed only as block 0 when
  // folded, so the table says how many differ).
  std::size_t differing_blocks = 0;
};
// The fold of a graph of more than min_operators operators with at least
// three repeated blocks; nullopt otherwise.
[[nodiscard]] std::optional<Fold> find_fold(const ReportInput& in, std::size_t min_operators);
// Graphs above this many operators are folded in the table and the DOT graph.
inline constexpr std::size_t kFoldTableOperators = 100;
inline constexpr std::size_t kFoldDotOperators = 300;

// The text table of `--format table`: a summary first (step time with its
// compute and communication split, memory against the budget, mesh axes on
// their levels, effective parallelism), then where communication goes (by
// reason x collective x level), the top operators and tensors, and the
// operators, one row per operator of a repeated block (folded) unless
// every_operator. Times in ms, memory in GiB, 4 significant digits.
struct TableOptions {
  bool every_operator = false;
  std::size_t top = 10;
  // The per-device budget the plan was made under (0: the device's memory).
  double memory_budget_bytes = 0;
};
[[nodiscard]] std::string plan_to_table(const ReportInput& in, const TableOptions& opts = {});

// The text table of a pipelined plan: the step (pipelined part, bubble,
// the busiest group's split), memory against the budget, point-to-point
// volume, a row per device group, then each stage as plan_to_table lays out
// a plan, on its stage graph and its group's devices.
[[nodiscard]] std::string pipeline_to_table(const ir::Graph& g,
                                            const std::vector<algebra::OpSpace>& spaces,
                                            const Cluster& cluster, const plan::PipelinePlan& pp,
                                            const plan::PipelineEvaluation& pe,
                                            const TableOptions& opts = {});

// A pipelined plan's stages, for the HTML page's stage strip: per stage its
// operator range, device group, compute, and its group's memory and bubble.
struct PipelineStrip {
  struct Stage {
    std::string first_op, last_op;  // names of its first and last operator
    std::size_t operators = 0;
    std::size_t group = 0;
    double compute_s = 0;     // the stage's, per step
    double memory_bytes = 0;  // per device of its group
    double busy_s = 0;        // its group's, per step
    double bubble_s = 0;      // its group's idle time in the pipelined part
  };
  std::vector<Stage> stages;
  std::string schedule;  // "1f1b", "interleaved"
  std::int64_t microbatches = 1;
  double step_time_s = 0;
  double bubble_fraction = 0;
  std::size_t shown = 0;  // the stage whose operators the page draws
};
[[nodiscard]] PipelineStrip pipeline_strip(const ir::Graph& g, const plan::PipelinePlan& pp,
                                           const plan::PipelineEvaluation& pe, std::size_t shown);

// The HTML report (UTF-8, one file, no external resources). With a
// pipeline strip, the page opens with the stages (compute, memory, bubble
// per stage) and its graph and tables are those of stage strip->shown.
[[nodiscard]] std::string plan_to_html(const ReportInput& in, const PipelineStrip* strip = nullptr);
// The Graphviz DOT graph. A repeated block (find_fold) is drawn in a
// cluster per copy; past kFoldDotOperators operators only its first copy is
// drawn, standing for all of them (edges of later copies mapped onto it, an
// edge into the next copy dashed), unless whole_graph.
struct DotOptions {
  bool whole_graph = false;
};
[[nodiscard]] std::string plan_to_dot(const ReportInput& in, const DotOptions& opts = {});

// Text escaped for HTML element content and double-quoted attributes (&, <,
// >, "): what every page the project writes (plan reports, sweep charts)
// uses for names that come from user files.
[[nodiscard]] std::string html_escape(const std::string& s);

}  // namespace recsearch::report
