// SPDX-License-Identifier: Apache-2.0
// The gradient dataflow of a graph (ir/gradients.hpp): one pass in
// topological order from the parameters and gradient inputs.
#include "recsearch/ir/gradients.hpp"

#include <algorithm>

namespace recsearch::ir {
namespace {

bool floating(DType d) { return !is_integer(d); }

// The operands a backward kernel prices one forward each for.
std::size_t priced_operands(const Operator& op) {
  return op.kind == OpKind::Conv2D ? std::min<std::size_t>(2, op.inputs.size()) : op.inputs.size();
}

}  // namespace

bool differentiable_input(const Graph& g, const Operator& op, std::size_t j) {
  if (!floating(g.tensor(op.inputs[j]).dtype)) return false;
  return !((op.kind == OpKind::Gather || op.kind == OpKind::SoftmaxCrossEntropy) && j > 0);
}

bool input_takes_gradient(const Graph& g, const std::vector<std::uint8_t>& grads,
                          const Operator& op, std::size_t j) {
  return grads[op.inputs[j]] != 0 && differentiable_input(g, op, j);
}

std::vector<std::uint8_t> gradient_tensors(const Graph& g,
                                           const std::vector<TensorId>& more_roots) {
  std::vector<std::uint8_t> grads(g.num_tensors(), 0);
  for (TensorId t = 0; t < g.num_tensors(); ++t) {
    const Tensor& x = g.tensor(t);
    grads[t] = static_cast<std::uint8_t>(floating(x.dtype) && x.kind == TensorKind::Parameter);
  }
  const auto root = [&](TensorId t) {
    if (t < grads.size() && g.tensor(t).producer == kNone && floating(g.tensor(t).dtype))
      grads[t] = 1;
  };
  for (const TensorId t : g.gradient_inputs()) root(t);
  for (const TensorId t : more_roots) root(t);
  for (const OpId o : g.topological_order()) {
    const Operator& op = g.op(o);
    bool any = false;
    for (std::size_t j = 0; j < op.inputs.size() && !any; ++j)
      any = grads[op.inputs[j]] != 0 && differentiable_input(g, op, j);
    for (const TensorId out : op.outputs)
      grads[out] = static_cast<std::uint8_t>(any && floating(g.tensor(out).dtype));
  }
  return grads;
}

std::vector<float> backward_shares(const Graph& g, const std::vector<std::uint8_t>& grads) {
  std::vector<float> share(g.num_operators(), 0.0F);
  for (OpId o = 0; o < g.num_operators(); ++o) {
    const Operator& op = g.op(o);
    const bool out_grad = std::any_of(op.outputs.begin(), op.outputs.end(),
                                      [&](TensorId t) { return grads[t] != 0; });
    if (!out_grad) continue;
    std::size_t operands = 0, taking = 0;
    for (std::size_t j = 0; j < priced_operands(op); ++j) {
      if (!differentiable_input(g, op, j)) continue;
      ++operands;
      taking += grads[op.inputs[j]] != 0 ? 1 : 0;
    }
    share[o] =
        operands == 0
            ? 0.0F
            : static_cast<float>(static_cast<double>(taking) / static_cast<double>(operands));
  }
  return share;
}

}  // namespace recsearch::ir
