// SPDX-License-Identifier: Apache-2.0
// recsearch::Problem (problem.hpp): the one place where a graph becomes
// something the search can work on. Reading (graph JSON or ONNX), finishing
// a graph built in code, building the operator spaces and attributing their
// errors to the file all happen here, so that the CLI, the C API, the exec
// driver and the fuzz targets read graphs exactly alike.
#include "recsearch/problem.hpp"

#include <optional>
#include <string_view>
#include <utility>

#include "io/suggest.hpp"
#include "recsearch/error.hpp"
#include "recsearch/io/json_io.hpp"
#include "recsearch/io/onnx.hpp"

namespace recsearch {

struct Problem::Data {
  ir::Graph graph;
  std::vector<algebra::OpSpace> spaces;
  std::string source;
  std::vector<std::string> warnings;
};

namespace {

std::string display_name(const std::string& path) { return path == "-" ? "<stdin>" : path; }

// Errors that carry no file concern the problem's own file.
[[noreturn]] void rethrow_in(const Error& e, const std::string& source) {
  if (source.empty() || !e.file().empty()) throw e;
  throw e.in_file(source);
}

// Operators of a type recsearch does not know (and without an `einsum`
// attribute) run replicated: one warning naming the first few.
void warn_unknown_kinds(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                        std::vector<std::string>& warnings) {
  constexpr std::size_t kNamed = 5;
  std::size_t count = 0;
  std::string names;
  for (std::size_t o = 0; o < spaces.size(); ++o) {
    if (!spaces[o].opaque) continue;
    const ir::Operator& op = g.op(static_cast<ir::OpId>(o));
    if (count++ < kNamed) names += (names.empty() ? "" : ", ") + op.name + " (" + op.type + ")";
  }
  if (count == 0) return;
  if (count > kNamed) names += " and " + std::to_string(count - kNamed) + " more";
  warnings.push_back(std::to_string(count) + " operator(s) of unknown type run replicated: " +
                     names + " (give them an \"einsum\" attribute to let them be cut)");
}

// The kind a type is a misspelling of: the same name up to case, or one
// letter away for names of six characters and more. Shorter real names sit
// one letter from a kind (ONNX's Tan, Elu, Selu, And), so they must match
// up to case to count as typos.
std::optional<std::string_view> misspelt_kind(std::string_view type) {
  constexpr std::size_t kOneLetterFrom = 6;
  // The last kind, Custom, is no name a file can use.
  for (std::size_t k = 0; k + 1 < ir::kNumOpKinds; ++k) {
    const std::string_view name = ir::op_kind_name(static_cast<ir::OpKind>(k));
    const std::size_t d = io::detail::edit_distance(type, name);
    if (d == 0 || (d == 1 && type.size() >= kOneLetterFrom)) return name;
  }
  return std::nullopt;
}

// A misspelt kind would run replicated with a mere warning, and the plan
// lose that operator's parallelism: refuse it, pointing at the kind meant.
// An "einsum" attribute (the operator is not opaque then) says the type is
// meant as it is.
void check_kind_spelling(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces) {
  for (std::size_t o = 0; o < spaces.size(); ++o) {
    if (!spaces[o].opaque) continue;
    const ir::Operator& op = g.op(static_cast<ir::OpId>(o));
    if (const auto kind = misspelt_kind(op.type)) {
      throw Error(Errc::kSchema,
                  "unknown operator type '" + op.type + "' of '" + op.name + "'; did you mean `" +
                      std::string(*kind) +
                      "`? (a type of its own needs an \"einsum\" attribute, or --allow-custom)",
                  "/operators/" + std::to_string(o) + "/type");
    }
  }
}

std::shared_ptr<Problem::Data> prepare(ir::Graph graph, std::string source,
                                       std::vector<std::string> warnings,
                                       bool check_spelling = false) {
  auto d = std::make_shared<Problem::Data>();
  d->graph = std::move(graph);
  d->source = std::move(source);
  d->warnings = std::move(warnings);
  try {
    if (!d->graph.finalized()) d->graph.finalize();
    d->spaces = algebra::build_op_spaces(d->graph);
    if (check_spelling) check_kind_spelling(d->graph, d->spaces);
  } catch (const Error& e) {
    rethrow_in(e, d->source);
  }
  warn_unknown_kinds(d->graph, d->spaces, d->warnings);
  return d;
}

}  // namespace

Problem::Problem(std::shared_ptr<const Data> data, CostParams cost) noexcept
    : data_(std::move(data)), cost_(std::move(cost)) {}

Problem::Problem(ir::Graph graph, CostParams cost, std::string source)
    : data_(prepare(std::move(graph), std::move(source), {})), cost_(std::move(cost)) {}

Problem Problem::read(const std::string& path, const ReadOptions& options) {
  const std::string source = display_name(path);
  if (!io::is_onnx_path(path)) {
    // Read straight from the file (no copy of its text); unknown keys are
    // warnings, or errors with `strict`.
    std::vector<std::string> warnings;
    io::GraphReadOptions read;
    read.strict = options.strict;
    read.warnings = &warnings;
    read.source = source;
    CostParams cost;
    ir::Graph g = io::read_graph_file(path, &cost, read);
    // Only files are checked for misspelt kinds: an ONNX model's types come
    // from its exporter, and a graph built in code names its types on purpose.
    return Problem(prepare(std::move(g), source, std::move(warnings), !options.allow_custom),
                   std::move(cost));
  }
  io::OnnxImportOptions onnx;
  onnx.dims = options.dims;
  onnx.name = options.name;
  io::OnnxImport r = io::read_onnx_file(path, onnx);
  return Problem(prepare(std::move(r.graph), source, std::move(r.warnings)), CostParams{});
}

Problem Problem::from_json(std::string_view text, const std::string& source_name,
                           const ReadOptions& options) {
  std::vector<std::string> warnings;
  io::GraphReadOptions read;
  read.strict = options.strict;
  read.warnings = &warnings;
  CostParams cost;
  ir::Graph g = io::parse_graph(text, source_name, &cost, read);
  return Problem(prepare(std::move(g), source_name, std::move(warnings), !options.allow_custom),
                 std::move(cost));
}

const ir::Graph& Problem::graph() const noexcept { return data_->graph; }
const std::vector<algebra::OpSpace>& Problem::spaces() const noexcept { return data_->spaces; }
const CostParams& Problem::cost() const noexcept { return cost_; }
const std::string& Problem::source() const noexcept { return data_->source; }
const std::vector<std::string>& Problem::warnings() const noexcept { return data_->warnings; }

search::SearchOptions Problem::options() const {
  search::SearchOptions o;
  o.cost = cost_;
  return o;
}

Problem Problem::with_cost(CostParams cost) const { return Problem(data_, std::move(cost)); }

plan::Plan Problem::parse_plan(std::string_view text, const std::string& source,
                               const Cluster& cluster) const {
  return parse_padded(text, 0, source, cluster);
}

plan::Plan Problem::parse_padded(std::string_view text, std::size_t capacity,
                                 const std::string& source, const Cluster& cluster) const {
  plan::Plan p =
      io::detail::parse_plan_padded(text, capacity, source, graph(), spaces(), cluster.cuts());
  try {
    plan::check_plan(graph(), spaces(), p);
  } catch (const Error& e) {
    rethrow_in(e, source);
  }
  return p;
}

std::optional<Cluster> plan_file_cluster(std::string_view text, const std::string& source) {
  if (auto saved = io::plan_cluster(text, source)) return saved;
  const std::vector<std::int64_t> sizes = io::plan_mesh_sizes(text, source);
  if (sizes.empty()) return std::nullopt;
  std::int64_t product = 1;
  for (const std::int64_t s : sizes) {
    if (s < 1 || product > kMaxDevices / s)
      throw Error(Errc::kPlan, "mesh axis sizes must be >= 1 with a product of at most 2^31",
                  "/mesh", source);
    product *= s;
  }
  // Every axis of a plan is a prime cut, so Cluster::mesh(sizes) always
  // reproduces its schedule; sizes that are exactly the flat schedule of
  // their product most likely came from `--devices N`, whose single-level
  // cluster (and its bandwidth) is the better guess.
  if (sizes == prime_factors(product)) return Cluster::flat(product);
  return Cluster::mesh(sizes);
}

}  // namespace recsearch
