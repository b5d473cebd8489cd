// SPDX-License-Identifier: Apache-2.0
// The gradient dataflow (ir/gradients.hpp): which tensors take a gradient
// and how much of each operator's backward runs, on a graph where data,
// indices, parameters and a received activation meet.
#include <doctest/doctest.h>

#include "recsearch/ir/gradients.hpp"
#include "support/graph_factories.hpp"

using namespace recsearch;
using ir::DType;
using ir::TensorKind;
using recsearch::testing::add_op;

namespace {

// x -> ReLU -> r; r·w1 -> h; table[ids] -> e; h + e -> a; a·w2 -> y;
// x·m (m a constant) -> c; c + y -> z; z with labels -> loss.
ir::Graph mixed() {
  ir::Graph g("mixed");
  g.add_tensor("x", {8, 16}, DType::F32, TensorKind::Input);
  g.add_tensor("ids", {8}, DType::I64, TensorKind::Input);
  g.add_tensor("labels", {8}, DType::I64, TensorKind::Input);
  g.add_tensor("w1", {16, 16}, DType::F32, TensorKind::Parameter);
  g.add_tensor("w2", {16, 16}, DType::F32, TensorKind::Parameter);
  g.add_tensor("m", {16, 16}, DType::F32, TensorKind::Constant);
  g.add_tensor("table", {32, 16}, DType::F32, TensorKind::Parameter);
  for (const char* t : {"r", "h", "e", "a", "y", "c", "z"}) g.add_tensor(t, {8, 16}, DType::F32);
  g.add_tensor("loss", {}, DType::F32);
  add_op(g, "relu", "ReLU", {"x"}, {"r"});
  add_op(g, "mm1", "MatMul", {"r", "w1"}, {"h"});
  add_op(g, "lookup", "Gather", {"table", "ids"}, {"e"});
  add_op(g, "add", "Add", {"h", "e"}, {"a"});
  add_op(g, "mm2", "MatMul", {"a", "w2"}, {"y"});
  add_op(g, "fixed", "MatMul", {"x", "m"}, {"c"});
  add_op(g, "join", "Add", {"c", "y"}, {"z"});
  add_op(g, "loss", "SoftmaxCrossEntropy", {"z", "labels"}, {"loss"});
  g.finalize();
  return g;
}

bool takes(const ir::Graph& g, const std::vector<std::uint8_t>& grads, const char* name) {
  return grads[*g.find_tensor(name)] != 0;
}

float share(const ir::Graph& g, const std::vector<float>& s, const char* op) {
  return s[*g.find_operator(op)];
}

}  // namespace

TEST_CASE("gradients: data and what is computed from it alone take none") {
  const ir::Graph g = mixed();
  const std::vector<std::uint8_t> grads = ir::gradient_tensors(g);
  for (const char* t : {"x", "ids", "labels", "m", "r", "c"}) {
    CAPTURE(t);
    CHECK_FALSE(takes(g, grads, t));
  }
  for (const char* t : {"w1", "w2", "table", "h", "e", "a", "y", "z", "loss"}) {
    CAPTURE(t);
    CHECK(takes(g, grads, t));
  }
  // A gather's indices and a loss's labels are never differentiated.
  const ir::Operator& lookup = g.op(*g.find_operator("lookup"));
  CHECK(ir::input_takes_gradient(g, grads, lookup, 0));
  CHECK_FALSE(ir::input_takes_gradient(g, grads, lookup, 1));

  const std::vector<float> s = ir::backward_shares(g, grads);
  CHECK(share(g, s, "relu") == 0.0F);   // on the data alone: no backward
  CHECK(share(g, s, "fixed") == 0.0F);  // data times a constant
  CHECK(share(g, s, "mm1") == 0.5F);    // the weight's gradient, not r's
  CHECK(share(g, s, "lookup") == 1.0F);
  CHECK(share(g, s, "add") == 1.0F);
  CHECK(share(g, s, "mm2") == 1.0F);
  CHECK(share(g, s, "join") == 0.5F);  // c takes none
  CHECK(share(g, s, "loss") == 1.0F);  // the labels are not priced
}

TEST_CASE("gradients: a graph's gradient inputs are roots, as parameters are") {
  ir::Graph g = mixed();
  g.set_gradient_inputs({*g.find_tensor("x"), *g.find_tensor("ids")});
  const std::vector<std::uint8_t> grads = ir::gradient_tensors(g);
  CHECK(takes(g, grads, "x"));
  CHECK(takes(g, grads, "r"));
  CHECK(takes(g, grads, "c"));
  CHECK_FALSE(takes(g, grads, "ids"));  // integers take none, whatever they are named
  const std::vector<float> s = ir::backward_shares(g, grads);
  CHECK(share(g, s, "relu") == 1.0F);
  CHECK(share(g, s, "mm1") == 1.0F);
  CHECK(share(g, s, "fixed") == 0.5F);  // the constant's gradient is not wanted
  // The same roots given by the caller.
  CHECK(ir::gradient_tensors(mixed(), {*g.find_tensor("x")}) == grads);
}

TEST_CASE("gradients: a convolution's bias is left out of its share") {
  ir::Graph g("conv");
  g.add_tensor("x", {2, 3, 8, 8}, DType::F32, TensorKind::Input);
  g.add_tensor("k", {4, 3, 3, 3}, DType::F32, TensorKind::Parameter);
  g.add_tensor("b", {4}, DType::F32, TensorKind::Parameter);
  g.add_tensor("y", {2, 4, 6, 6}, DType::F32);
  add_op(g, "conv", "Conv2D", {"x", "k", "b"}, {"y"});
  g.finalize();
  const std::vector<float> s = ir::backward_shares(g, ir::gradient_tensors(g));
  CHECK(s[0] == 0.5F);
}
