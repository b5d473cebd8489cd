// SPDX-License-Identifier: Apache-2.0
// Which tensors take a gradient in training, and how much of each
// operator's backward runs: the one rule the cost model (plan::MemoryRules)
// and the executor (exec::gradient_layouts) share.
//
// A tensor takes a gradient when it is floating and downstream of a
// parameter, or of one of the graph's gradient inputs (a pipeline stage's
// received activations, Graph::gradient_inputs), through inputs that the
// operators differentiate. The data and whatever is computed from the data
// alone take none, as autograd skips them: the first matrix product of a
// network computes its weight's gradient but not its input's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "recsearch/ir/graph.hpp"

namespace recsearch::ir {

// Whether input j of op receives a gradient from the operator's backward
// kernel: floating operands other than indices and labels.
[[nodiscard]] bool differentiable_input(const Graph& g, const Operator& op, std::size_t j);

// Whether op's backward sends a gradient to its input j: the input takes
// one (`grads`, gradient_tensors(g)) and the operator differentiates it.
[[nodiscard]] bool input_takes_gradient(const Graph& g, const std::vector<std::uint8_t>& grads,
                                        const Operator& op, std::size_t j);

// Per tensor, 1 when it takes a gradient (see the file comment); the roots
// are the parameters, g.gradient_inputs() and `more_roots`.
[[nodiscard]] std::vector<std::uint8_t> gradient_tensors(
    const Graph& g, const std::vector<TensorId>& more_roots = {});

// Per operator, the share of its backward work that runs, in [0, 1]: of the
// operands whose gradients its backward can compute (the differentiable
// inputs; a convolution's bias is left out, its gradient is a reduction),
// the fraction that take one; 0 when no output takes a gradient. Each
// operand of a contraction costs one forward's work (dA = dC·Bᵀ, dB =
// Aᵀ·dC), so a product whose left operand is data runs half its backward.
// `grads` is gradient_tensors(g).
[[nodiscard]] std::vector<float> backward_shares(const Graph& g,
                                                 const std::vector<std::uint8_t>& grads);

}  // namespace recsearch::ir
