// SPDX-License-Identifier: Apache-2.0
// Graph construction and structural checks. The operator DAG is handed to
// Boost.Graph for the depth-first search that both finds cycles (a back
// edge names an operator on the cycle) and yields the topological order.
#include "recsearch/ir/graph.hpp"

#include <algorithm>
#include <boost/graph/compressed_sparse_row_graph.hpp>  // operator DAG for the DFS below
#include <boost/graph/depth_first_search.hpp>

#include "recsearch/error.hpp"

namespace recsearch::ir {
namespace {

std::string op_path(std::size_t id) { return "/operators/" + std::to_string(id); }

using Dag = boost::compressed_sparse_row_graph<boost::directedS>;

struct CycleFinder : boost::default_dfs_visitor {
  std::vector<OpId>* finish_order;
  std::optional<std::pair<OpId, OpId>>* first_back_edge;

  template <class Edge, class G>
  void back_edge(Edge e, const G& g) const {
    if (!*first_back_edge)
      *first_back_edge = std::make_pair(static_cast<OpId>(boost::source(e, g)),
                                        static_cast<OpId>(boost::target(e, g)));
  }
  template <class Vertex, class G>
  void finish_vertex(Vertex v, const G&) const {
    finish_order->push_back(static_cast<OpId>(v));
  }
};

}  // namespace

Graph::Graph(std::string name) : name_(std::move(name)) {}

void Graph::reserve(std::size_t tensors, std::size_t ops) {
  tensors_.reserve(tensors);
  ops_.reserve(ops);
  tensor_index_.reserve(tensors);
  op_index_.reserve(ops);
}

TensorId Graph::add_tensor(std::string name, Shape shape, DType dtype, TensorKind kind) {
  const auto id = static_cast<TensorId>(tensors_.size());
  if (tensors_.size() >= kNone - 1)
    throw Error(Errc::kSchema, "too many tensors", "/tensors/" + std::to_string(id));
  if (name.empty())
    throw Error(Errc::kSchema, "tensor name must not be empty", "/tensors/" + std::to_string(id));
  const std::uint32_t h = detail::NameIndex::hash(name);
  if (const auto prev = tensor_index_.find(name, h, tensor_name()))
    throw Error(
        Errc::kDuplicate,
        "tensor '" + name + "' is already defined (as /tensors/" + std::to_string(*prev) + ")",
        "/tensors/" + std::to_string(id) + "/name");
  tensors_.push_back(Tensor{std::move(name), std::move(shape), dtype, kind, kNone, {}});
  tensor_index_.add(h, id);
  finalized_ = false;
  return id;
}

OpId Graph::add_operator(Operator op) {
  const auto id = static_cast<OpId>(ops_.size());
  // Paths are built only for an error: a million operators read in a row
  // should not allocate one each.
  const auto path = [id](std::string_view rest, std::size_t j) {
    return op_path(id) + std::string(rest) + std::to_string(j);
  };
  if (ops_.size() >= kNone - 1) throw Error(Errc::kSchema, "too many operators", op_path(id));
  if (op.name.empty())
    throw Error(Errc::kSchema, "operator name must not be empty", op_path(id) + "/name");
  const std::uint32_t h = detail::NameIndex::hash(op.name);
  if (const auto prev = op_index_.find(op.name, h, op_name()))
    throw Error(Errc::kDuplicate,
                "operator '" + op.name + "' is already defined (as " + op_path(*prev) + ")",
                op_path(id) + "/name");
  for (std::size_t j = 0; j < op.inputs.size(); ++j)
    if (op.inputs[j] >= tensors_.size())
      throw Error(Errc::kUnknownName, "unknown tensor id " + std::to_string(op.inputs[j]),
                  path("/inputs/", j));
  for (std::size_t j = 0; j < op.outputs.size(); ++j) {
    const TensorId t = op.outputs[j];
    if (t >= tensors_.size())
      throw Error(Errc::kUnknownName, "unknown tensor id " + std::to_string(t),
                  path("/outputs/", j));
    const Tensor& tensor = tensors_[t];
    if (tensor.producer != kNone)
      throw Error(Errc::kDuplicate,
                  "tensor '" + tensor.name + "' is already produced by operator '" +
                      ops_[tensor.producer].name + "'",
                  path("/outputs/", j));
    if (tensor.kind == TensorKind::Parameter || tensor.kind == TensorKind::Constant)
      throw Error(Errc::kSchema,
                  "tensor '" + tensor.name + "' is declared " +
                      std::string(tensor_kind_name(tensor.kind)) +
                      " but is produced by an operator",
                  path("/outputs/", j));
    for (std::size_t i = 0; i < j; ++i)
      if (op.outputs[i] == t)
        throw Error(Errc::kDuplicate, "tensor '" + tensor.name + "' is listed twice as an output",
                    path("/outputs/", j));
    for (std::size_t i = 0; i < op.inputs.size(); ++i)
      if (op.inputs[i] == t)
        throw Error(Errc::kCycle,
                    "operator '" + op.name + "' consumes its own output '" + tensor.name + "'",
                    path("/outputs/", j));
  }
  op.kind = parse_op_kind(op.type);
  for (TensorId t : op.outputs) {
    tensors_[t].producer = id;
    tensors_[t].kind = TensorKind::Activation;
  }
  for (TensorId t : op.inputs) tensors_[t].consumers.push_back(id);
  ops_.push_back(std::move(op));
  op_index_.add(h, id);
  finalized_ = false;
  return id;
}

std::optional<TensorId> Graph::find_tensor(std::string_view name) const {
  return tensor_index_.find(name, detail::NameIndex::hash(name), tensor_name());
}

std::optional<OpId> Graph::find_operator(std::string_view name) const {
  return op_index_.find(name, detail::NameIndex::hash(name), op_name());
}

void Graph::finalize() {
  // Edges producer -> consumer, sorted by source as the CSR graph wants.
  std::vector<std::pair<std::size_t, std::size_t>> edges;
  for (const Tensor& t : tensors_) {
    if (t.producer == kNone) continue;
    for (OpId c : t.consumers) edges.emplace_back(t.producer, c);
  }
  std::sort(edges.begin(), edges.end());
  edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
  Dag dag(boost::edges_are_sorted, edges.begin(), edges.end(), ops_.size());

  std::vector<OpId> finish;
  finish.reserve(ops_.size());
  std::optional<std::pair<OpId, OpId>> back;
  CycleFinder vis;
  vis.finish_order = &finish;
  vis.first_back_edge = &back;
  std::vector<boost::default_color_type> colors(ops_.size());
  boost::depth_first_search(dag, boost::visitor(vis).color_map(boost::make_iterator_property_map(
                                     colors.begin(), boost::get(boost::vertex_index, dag))));
  if (back) {
    const auto [from, to] = *back;
    throw Error(Errc::kCycle,
                "operator '" + ops_[to].name + "' is on a cycle (it depends on '" +
                    ops_[from].name + "', which depends on it)",
                op_path(to));
  }
  topo_.assign(finish.rbegin(), finish.rend());
  finalized_ = true;
}

const std::vector<OpId>& Graph::topological_order() const {
  if (!finalized_)
    throw Error(Errc::kInternal, "Graph::topological_order() called before finalize()");
  return topo_;
}

}  // namespace recsearch::ir
