// SPDX-License-Identifier: Apache-2.0
// The precision an operator's flops run at, which picks the device peak its
// compute time is priced at (DeviceSpec::peak_TFLOPs_of; docs/cost-model.md,
// Peaks per dtype). One definition for the evaluator and every search.
#pragma once

#include <vector>

#include "recsearch/cluster.hpp"
#include "recsearch/cost/cost_params.hpp"
#include "recsearch/ir/graph.hpp"

namespace recsearch::plan {

// The widest floating-point dtype among the operator's inputs (f64, f32,
// 16-bit, f8; a kernel promotes mixed operands to the widest), else among
// its outputs (OneHot), else f32 (integer arithmetic runs on the f32 units).
// An f32 contraction (MatMul, BatchMatMul, Einsum, Conv2D, Attention) is
// TF32 where CostParams::tf32 says so.
[[nodiscard]] Precision operator_precision(const ir::Graph& g, ir::OpId o, const CostParams& p);

// operator_precision of every operator, by OpId.
[[nodiscard]] std::vector<Precision> operator_precisions(const ir::Graph& g, const CostParams& p);

}  // namespace recsearch::plan
