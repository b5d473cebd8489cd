// SPDX-License-Identifier: Apache-2.0
// The front door of the C++ API, first half: a Problem is what the search
// works on, a finalized graph with its operator spaces and the cost
// settings its file carried. Read one, solve it on a cluster
// (recsearch/solution.hpp), write the plan:
//
//   auto problem = recsearch::Problem::read("model.json");      // or .onnx
//   auto solution = recsearch::solve(problem, recsearch::Cluster::mesh({2, 4}));
//   solution.write("plan.json");
//
// A Problem is immutable and cheap to copy (copies share one graph), so
// several searches, threads or results may hold it at once.
#pragma once

#include <concepts>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/cluster.hpp"
#include "recsearch/cost/cost_params.hpp"
#include "recsearch/ir/graph.hpp"
#include "recsearch/plan/plan.hpp"
#include "recsearch/search/options.hpp"

namespace recsearch {

struct ReadOptions {
  // Values of an ONNX model's symbolic input dims ("batch" -> 8).
  std::map<std::string, std::int64_t, std::less<>> dims;
  // The graph's name when imported from ONNX (default: the file's stem).
  std::string name;
  // Graph JSON: an operator type that is a kind's name up to case, or (6
  // characters and more) one letter away from one ("Matmul", "Softmx"), is
  // an Error(kSchema) at "/operators/N/type" with "did you mean" unless it
  // has an "einsum" attribute; true keeps such a type as a custom operator
  // (replicated, with a warning) like any other unknown type.
  bool allow_custom = false;
  // Graph JSON: unknown keys are Error(kSchema) at their JSON path instead
  // of warnings (Problem::warnings()).
  bool strict = false;
};

class Problem {
 public:
  // Graph, spaces, source and warnings, shared by every copy (opaque:
  // defined in the library).
  struct Data;

  // A graph built in code: finalized here when it is not yet (a graph that
  // does not finalize throws its Error), then its operator spaces built.
  // `source` names it in error messages (empty: none).
  explicit Problem(ir::Graph graph, CostParams cost = {}, std::string source = {});

  // A graph JSON file, or an ONNX model (by its extension, .onnx), imported
  // on the fly; "-" reads graph JSON from standard input. Errors name the
  // file and the JSON path.
  [[nodiscard]] static Problem read(const std::string& path, const ReadOptions& options = {});

  // Graph JSON text; `source_name` names it in error messages. Of
  // `options`, allow_custom and strict apply.
  [[nodiscard]] static Problem from_json(std::string_view text, const std::string& source_name,
                                         const ReadOptions& options = {});

  [[nodiscard]] const ir::Graph& graph() const noexcept;
  [[nodiscard]] const std::vector<algebra::OpSpace>& spaces() const noexcept;
  // The file's "cost" object over the defaults (defaults for built graphs).
  [[nodiscard]] const CostParams& cost() const noexcept;
  // File name as given ("<stdin>" for "-"), the source name, or empty.
  [[nodiscard]] const std::string& source() const noexcept;
  // Warnings found while reading: unknown keys in graph JSON (with a "did
  // you mean"), ONNX nodes imported as replicated, and operators of unknown
  // type that run replicated. One line each.
  [[nodiscard]] const std::vector<std::string>& warnings() const noexcept;

  // Search options with this problem's cost settings: the starting point
  // for solve() with options of one's own.
  [[nodiscard]] search::SearchOptions options() const;

  // The same graph (shared, not copied) with other cost settings.
  [[nodiscard]] Problem with_cost(CostParams cost) const;

  // A plan in the plan file format, laid on `cluster`'s cuts and checked
  // against this graph; errors name `source` and the JSON path.
  [[nodiscard]] plan::Plan parse_plan(std::string_view text, const std::string& source,
                                      const Cluster& cluster) const;
  // The same of a string, without copying a big file (io::parse_plan of a
  // string); a template so that a string literal means the overload above.
  template <class String>
  requires std::same_as<String, std::string>
  [[nodiscard]] plan::Plan parse_plan(const String& text, const std::string& source,
                                      const Cluster& cluster) const {
    return parse_padded(text, text.capacity() + 1, source, cluster);
  }

 private:
  Problem(std::shared_ptr<const Data> data, CostParams cost) noexcept;
  [[nodiscard]] plan::Plan parse_padded(std::string_view text, std::size_t capacity,
                                        const std::string& source, const Cluster& cluster) const;
  std::shared_ptr<const Data> data_;
  CostParams cost_;
};

// The cluster a plan file was made for: the one it saved, else one rebuilt
// from its mesh sizes (flat when they are exactly the flat schedule of their
// product, which is what `--devices N` gives), else nullopt when the file
// has no mesh at all. Bad sizes throw Error(kPlan) naming "/mesh".
[[nodiscard]] std::optional<Cluster> plan_file_cluster(std::string_view text,
                                                       const std::string& source);

}  // namespace recsearch
