// SPDX-License-Identifier: Apache-2.0
// Operator kinds of version 1 of the graph format (docs/formats.md, Operator
// kinds; their iteration spaces: docs/design.md, Operator kinds).
#pragma once

#include <cstdint>
#include <string_view>

namespace recsearch::ir {

enum class OpKind : std::uint8_t {
  MatMul,
  BatchMatMul,
  Einsum,
  Conv2D,
  MaxPool,
  AvgPool,
  GlobalAvgPool,
  BatchNorm,
  LayerNorm,
  RMSNorm,
  Softmax,
  LogSoftmax,
  Add,
  Sub,
  Mul,
  Div,
  Pow,
  Maximum,
  Minimum,
  BiasAdd,
  ReLU,
  GeLU,
  SiLU,
  Sigmoid,
  Tanh,
  Exp,
  Log,
  Sqrt,
  Neg,
  Cast,
  Dropout,
  Identity,
  Reshape,
  Transpose,
  Flatten,
  Squeeze,
  Unsqueeze,
  Concat,
  Split,
  Slice,
  ReduceSum,
  ReduceMean,
  ReduceMax,
  Gather,
  OneHot,
  SoftmaxCrossEntropy,
  Attention,
  Custom,  // any other type name: replicated unless it has an `einsum` attribute
};

inline constexpr std::size_t kNumOpKinds = static_cast<std::size_t>(OpKind::Custom) + 1;

// File spelling, e.g. "MatMul"; "Custom" for Custom.
[[nodiscard]] std::string_view op_kind_name(OpKind k) noexcept;
// Kind for a file's `"type"`; OpKind::Custom for names it does not know.
[[nodiscard]] OpKind parse_op_kind(std::string_view type) noexcept;
// Binary elementwise kinds with broadcasting (Add ... Minimum).
[[nodiscard]] bool is_binary_elementwise(OpKind k) noexcept;
// Unary elementwise kinds (ReLU ... Identity, Cast, Dropout).
[[nodiscard]] bool is_unary_elementwise(OpKind k) noexcept;

}  // namespace recsearch::ir
