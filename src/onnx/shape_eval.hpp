// SPDX-License-Identifier: Apache-2.0
// Private to the onnx module: evaluates the small integer computations that
// exporters emit to work out shapes (Shape, Gather, Concat, Slice, the
// `expand(n, -1, -1)` pattern's Equal / Where, `F.pad`'s ConstantOfShape /
// Mod / reversed Slice / Transpose, ...), so that the importer can fold them
// into constants before it maps the graph. Everything here works on values
// known before the model runs; a node it cannot evaluate yields nullopt and
// stays for ONNX's shape inference.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <onnx/onnx_pb.h>  // NodeProto, TensorProto (Debian libonnx-dev)

#include "recsearch/ir/tensor.hpp"

namespace recsearch::onnx_import {

// A small integer (or boolean) tensor known before the model runs: a shape,
// axes, an index, a mask over a shape.
struct IntTensor {
  ir::Shape dims;
  std::vector<std::int64_t> data;
  std::int32_t elem = onnx::TensorProto::INT64;  // INT64, INT32 or BOOL
};

// Elements of a shape (1 for a scalar).
[[nodiscard]] std::int64_t count_of(const ir::Shape& dims);

// Integer (or boolean) values of a tensor whose payload was kept; nullopt
// otherwise.
[[nodiscard]] std::optional<std::vector<std::int64_t>> int_values(const onnx::TensorProto& t);

// The TensorProto holding r (the value of a folded Constant node).
[[nodiscard]] onnx::TensorProto to_tensor_proto(const IntTensor& r);

// Evaluates one node over known integer inputs `in` (the node's non-empty
// inputs, in order) and its inputs' shapes (for Shape and Size, which need
// nothing else); nullopt when the node is not one of the kinds exporters
// use for shapes or its inputs are not what that use looks like.
[[nodiscard]] std::optional<IntTensor> eval_int_node(
    const onnx::NodeProto& n, const std::vector<IntTensor>& in,
    const std::vector<std::optional<ir::Shape>>& in_shapes);

}  // namespace recsearch::onnx_import
