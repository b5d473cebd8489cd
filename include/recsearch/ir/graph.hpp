// SPDX-License-Identifier: Apache-2.0
// The computation graph: tensors connected by operators, dataflow by name.
//
// A Graph is built incrementally (add_tensor, add_operator) by the JSON
// reader, the C API or a generator, then finalize()d: finalize checks the
// structure (cycles, dangling references) and computes a topological order
// with Boost.Graph. Semantic checks of shapes against operator kinds live in
// algebra/ (build_op_spaces), so that validation and search share one
// description of every operator.
//
//   ir::Graph g("ffn");
//   auto x = g.add_tensor("x", {32, 784}, ir::DType::F32, ir::TensorKind::Input);
//   auto w = g.add_tensor("w", {784, 512}, ir::DType::F32, ir::TensorKind::Parameter);
//   auto h = g.add_tensor("h", {32, 512}, ir::DType::F32, ir::TensorKind::Activation);
//   g.add_operator({.name = "dense", .type = "MatMul", .inputs = {x, w}, .outputs = {h}});
//   g.finalize();
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "recsearch/ir/attrs.hpp"
#include "recsearch/ir/boxed_optional.hpp"
#include "recsearch/ir/detail/name_index.hpp"
#include "recsearch/ir/op_kind.hpp"
#include "recsearch/ir/tensor.hpp"
#include "recsearch/ir/training_pins.hpp"

namespace recsearch::ir {

// MindSpore-style strategy: per input, the split count of each dimension,
// e.g. {{2, 1}, {1, 4}} for MatMul.
using Strategy = std::vector<std::vector<std::int64_t>>;

struct Operator {
  std::string name;
  std::string type;  // as written in the file, e.g. "MatMul" or "MyCustomOp"
  std::vector<TensorId> inputs;
  std::vector<TensorId> outputs;
  Attrs attrs;
  BoxedOptional<Strategy> strategy;                 // pinned by the user
  BoxedOptional<std::vector<std::string>> allowed;  // loop dims the search may cut
  std::optional<Recompute> recompute;               // training: pinned recomputation
  OpKind kind = OpKind::Custom;                     // derived from type by add_operator
};

class Graph {
 public:
  explicit Graph(std::string name = {});

  [[nodiscard]] const std::string& name() const noexcept { return name_; }
  void set_name(std::string n) { name_ = std::move(n); }

  // Adds a tensor; throws Error(kDuplicate) if the name exists. A tensor
  // later produced by an operator becomes an Activation.
  TensorId add_tensor(std::string name, Shape shape, DType dtype,
                      TensorKind kind = TensorKind::Input);
  // Adds an operator whose inputs/outputs are already-added tensor ids.
  // Sets kind from type; links producer/consumers. Throws Error with the
  // path "/operators/<id>/..." on a duplicate name, an unknown tensor id, a
  // tensor produced twice, or a produced tensor declared as a parameter or
  // constant.
  OpId add_operator(Operator op);

  // Room for this many tensors and operators: readers of big files call it
  // with an estimate, which spares the name indexes their rehashes.
  void reserve(std::size_t tensors, std::size_t ops);

  [[nodiscard]] std::size_t num_tensors() const noexcept { return tensors_.size(); }
  [[nodiscard]] std::size_t num_operators() const noexcept { return ops_.size(); }
  [[nodiscard]] const Tensor& tensor(TensorId id) const { return tensors_.at(id); }
  [[nodiscard]] const Operator& op(OpId id) const { return ops_.at(id); }
  [[nodiscard]] Operator& mutable_op(OpId id) { return ops_.at(id); }
  [[nodiscard]] std::span<const Tensor> tensors() const noexcept { return tensors_; }
  [[nodiscard]] std::span<const Operator> operators() const noexcept { return ops_; }

  // Training settings the graph pins for the whole plan (its operators'
  // own pins are Operator::recompute).
  [[nodiscard]] const TrainingPins& training_pins() const noexcept { return training_pins_; }
  void set_training_pins(TrainingPins pins) { training_pins_ = pins; }

  // Graph inputs whose gradient is wanted outside the graph, as a
  // parameter's is: a pipeline stage's received activations, whose
  // gradients go back to the stage that produced them (ir/gradients.hpp).
  // Not part of the graph file; empty for a whole graph.
  [[nodiscard]] const std::vector<TensorId>& gradient_inputs() const noexcept {
    return gradient_inputs_;
  }
  void set_gradient_inputs(std::vector<TensorId> ids) { gradient_inputs_ = std::move(ids); }

  [[nodiscard]] std::optional<TensorId> find_tensor(std::string_view name) const;
  [[nodiscard]] std::optional<OpId> find_operator(std::string_view name) const;

  // Checks the structure and computes the topological order. Throws
  // Error(kCycle) naming one operator on a cycle (path "/operators/<id>").
  // Must be called after the last add_*; adding afterwards un-finalizes.
  void finalize();
  [[nodiscard]] bool finalized() const noexcept { return finalized_; }
  // Operators in a topological order (deterministic for a given graph): valid
  // after finalize().
  [[nodiscard]] const std::vector<OpId>& topological_order() const;

 private:
  // The names the indexes compare against.
  [[nodiscard]] auto tensor_name() const {
    return [this](std::uint32_t id) -> std::string_view { return tensors_[id].name; };
  }
  [[nodiscard]] auto op_name() const {
    return [this](std::uint32_t id) -> std::string_view { return ops_[id].name; };
  }

  std::string name_;
  std::vector<Tensor> tensors_;
  std::vector<Operator> ops_;
  detail::NameIndex tensor_index_;
  detail::NameIndex op_index_;
  std::vector<OpId> topo_;
  TrainingPins training_pins_;
  std::vector<TensorId> gradient_inputs_;
  bool finalized_ = false;
};

}  // namespace recsearch::ir
