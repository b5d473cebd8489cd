// SPDX-License-Identifier: Apache-2.0
// Readers and writers of the three file formats (docs/design.md, Formats;
// the fields: docs/formats.md): graph, cluster and plan JSON (the plan's text
// table is report::plan_to_table). nlohmann_json stays inside src/io.
//
// Readers throw recsearch::Error naming the file (`source`), the JSON path
// and the problem; they never crash on any input. `source` "-" reads stdin.
#pragma once

#include <concepts>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "recsearch/cluster.hpp"
#include "recsearch/cost/cost_params.hpp"
#include "recsearch/ir/graph.hpp"
#include "recsearch/plan/evaluator.hpp"
#include "recsearch/plan/plan.hpp"

namespace recsearch::io {

// Whole file (or stdin for "-") as text; Error(kIo) naming the file. Its
// capacity leaves room past the end that the fast readers read into, so
// that parse_plan of the string needs no padded copy.
[[nodiscard]] std::string read_text_file(const std::string& path);

// Writes text, ending it with a newline, to path ("-": stdout); Error(kIo)
// naming the file and the OS reason when it cannot.
void write_text_file(const std::string& path, std::string text);

// How a graph file is read.
struct GraphReadOptions {
  // Unknown keys (in the graph, a tensor or an operator) are Error(kSchema)
  // at their path instead of warnings.
  bool strict = false;
  // Where the warnings go, one line each ("unknown key \"attr\" in an
  // operator ignored, at /operators/3/attr (did you mean \"attrs\"?)");
  // nullptr: dropped.
  std::vector<std::string>* warnings = nullptr;
  // read_graph_file: the file's name in errors (default: the path).
  std::string source;
};

// Graph JSON -> finalized Graph (structure checked; shapes are checked by
// algebra::build_op_spaces, whose errors the caller attributes with
// Error::in_file). An optional top-level "cost" object is read into *cost.
[[nodiscard]] ir::Graph parse_graph(std::string_view text, const std::string& source,
                                    CostParams* cost = nullptr);
[[nodiscard]] ir::Graph parse_graph(std::string_view text, const std::string& source,
                                    CostParams* cost, const GraphReadOptions& options);
[[nodiscard]] ir::Graph read_graph_file(const std::string& path, CostParams* cost = nullptr);
// Reads the file without a copy of its text (parse_graph makes one).
[[nodiscard]] ir::Graph read_graph_file(const std::string& path, CostParams* cost,
                                        const GraphReadOptions& options);
// Graph -> graph JSON (round-trips through parse_graph).
[[nodiscard]] std::string graph_to_json(const ir::Graph& g, int indent = 1);

// What a reader does with a key it does not know (a misspelt
// "bandwidth_GBs"): a warning, "FILE: /levels/0/bandwidth_GBs: unknown key
// 'bandwidth_GBs', ignored; did you mean `bandwidth_GBps`?", appended to
// *warnings when that is not null; with strict, Error(kSchema) at that path
// instead.
struct UnknownKeys {
  bool strict = false;
  std::vector<std::string>* warnings = nullptr;
};

// Cluster JSON. An optional "cost" object is read into *cost; unknown keys
// are handled as `unknown` says (default: ignored without a word).
[[nodiscard]] Cluster parse_cluster(std::string_view text, const std::string& source,
                                    CostParams* cost = nullptr, const UnknownKeys& unknown = {});
[[nodiscard]] Cluster read_cluster_file(const std::string& path, CostParams* cost = nullptr);
[[nodiscard]] std::string cluster_to_json(const Cluster& c);

// Cost coefficients as a JSON object {"backward_flops_factor": 2, ...};
// unknown keys are an error (a misspelt coefficient must not pass silently).
void parse_cost_params(std::string_view text, const std::string& source, CostParams& out);

// Plan JSON against a graph and the cut schedule to evaluate it on. Each
// operator is matched by name; `cuts` are used when present, else
// `strategy` is laid out with plan::assign_cuts; operators the file leaves
// out keep their pinned strategy or are replicated. The file's mesh, when
// present, must match `mesh` axis by axis (sizes). Errors name the file and
// path (kPlan, kUnknownName, kStrategy).
[[nodiscard]] plan::Plan parse_plan(std::string_view text, const std::string& source,
                                    const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                                    const std::vector<Cut>& mesh);
namespace detail {
// parse_plan of text followed by readable bytes up to `capacity` from
// text.data(), which the fast reader may read into instead of copying.
[[nodiscard]] plan::Plan parse_plan_padded(std::string_view text, std::size_t capacity,
                                           const std::string& source, const ir::Graph& g,
                                           const std::vector<algebra::OpSpace>& spaces,
                                           const std::vector<Cut>& mesh);
}  // namespace detail
// The same of a string: its capacity past its end (read_text_file leaves
// some) spares the fast reader a copy of a big file. (A template, so that
// a string literal still means the string_view overload.)
template <class String>
requires std::same_as<String, std::string>
[[nodiscard]] plan::Plan parse_plan(const String& text, const std::string& source,
                                    const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                                    const std::vector<Cut>& mesh) {
  // The buffer holds capacity() + 1 bytes, its terminating null included.
  return detail::parse_plan_padded(text, text.capacity() + 1, source, g, spaces, mesh);
}
[[nodiscard]] plan::Plan read_plan_file(const std::string& path, const ir::Graph& g,
                                        const std::vector<algebra::OpSpace>& spaces,
                                        const std::vector<Cut>& mesh);
// Device count and axis sizes a plan file declares (its "mesh"), without a
// graph: lets `eval` default its cluster to the plan's own mesh. Empty when
// the file has no mesh. This and plan_cluster read the file's head: once
// it is read they may stop, leaving the rest of the file to parse_plan to
// read and check.
[[nodiscard]] std::vector<std::int64_t> plan_mesh_sizes(std::string_view text,
                                                        const std::string& source);

// The cluster a plan file was made for (its "cluster" object, which
// plan_to_json writes), or nullopt when the file has none. Errors name the
// path under "/cluster".
[[nodiscard]] std::optional<Cluster> plan_cluster(std::string_view text, const std::string& source);

// How much of its evaluation a plan file carries (docs/formats.md, Plan
// detail). Only the cuts are the plan: the rest is derived, and `eval`
// derives it again, so no form loses anything a reader needs.
enum class PlanDetail {
  Auto,     // Full for graphs of up to kFullDetailMaxOperators operators, else Summary
  Full,     // every redistribution; every mesh axis in every operator's "cuts"
  Summary,  // redistributions totalled per kind and axis, plus the heaviest; no null cuts
};
inline constexpr std::size_t kFullDetailMaxOperators = 10000;
// Whether a plan file of this detail on a graph of `operators` operators
// lists every redistribution (Full, or Auto on a small graph), and so needs
// an evaluation that lists them (plan::EvalDetail::Full; otherwise
// EvalDetail::Shardings is enough).
[[nodiscard]] bool lists_redistributions(PlanDetail detail, std::size_t operators);
// "auto", "full", "summary"; nullopt for anything else.
[[nodiscard]] std::optional<PlanDetail> parse_plan_detail(std::string_view text);

// Plan JSON (docs/design.md, Plan file).
[[nodiscard]] std::string plan_to_json(const ir::Graph& g,
                                       const std::vector<algebra::OpSpace>& spaces,
                                       const Cluster& cluster, const plan::Plan& p,
                                       const plan::Evaluation& ev, int indent = 2,
                                       PlanDetail detail = PlanDetail::Full);
// The same text written to `path` ("-": stdout) as it is produced, in
// blocks, never held whole; Error(kIo) naming the file when it cannot.
void write_plan_file(const std::string& path, const ir::Graph& g,
                     const std::vector<algebra::OpSpace>& spaces, const Cluster& cluster,
                     const plan::Plan& p, const plan::Evaluation& ev,
                     PlanDetail detail = PlanDetail::Auto, int indent = 2);

}  // namespace recsearch::io
