// SPDX-License-Identifier: Apache-2.0
// Spellings of the operator kinds and their elementwise classes.
#include "recsearch/ir/op_kind.hpp"

#include <array>

namespace recsearch::ir {
namespace {

constexpr std::array<std::string_view, kNumOpKinds> kNames = {
    "MatMul",        "BatchMatMul",
    "Einsum",        "Conv2D",
    "MaxPool",       "AvgPool",
    "GlobalAvgPool", "BatchNorm",
    "LayerNorm",     "RMSNorm",
    "Softmax",       "LogSoftmax",
    "Add",           "Sub",
    "Mul",           "Div",
    "Pow",           "Maximum",
    "Minimum",       "BiasAdd",
    "ReLU",          "GeLU",
    "SiLU",          "Sigmoid",
    "Tanh",          "Exp",
    "Log",           "Sqrt",
    "Neg",           "Cast",
    "Dropout",       "Identity",
    "Reshape",       "Transpose",
    "Flatten",       "Squeeze",
    "Unsqueeze",     "Concat",
    "Split",         "Slice",
    "ReduceSum",     "ReduceMean",
    "ReduceMax",     "Gather",
    "OneHot",        "SoftmaxCrossEntropy",
    "Attention",     "Custom",
};

}  // namespace

std::string_view op_kind_name(OpKind k) noexcept { return kNames[static_cast<std::size_t>(k)]; }

OpKind parse_op_kind(std::string_view type) noexcept {
  // "Custom" itself is not a kind a file can name: it stays an unknown type.
  for (std::size_t i = 0; i + 1 < kNames.size(); ++i)
    if (kNames[i] == type) return static_cast<OpKind>(i);
  return OpKind::Custom;
}

bool is_binary_elementwise(OpKind k) noexcept { return k >= OpKind::Add && k <= OpKind::Minimum; }

bool is_unary_elementwise(OpKind k) noexcept { return k >= OpKind::ReLU && k <= OpKind::Identity; }

}  // namespace recsearch::ir
