// SPDX-License-Identifier: Apache-2.0
// Operator precision (recsearch/plan/precision.hpp): from the dtypes of its
// operands and, for contractions, the TF32 setting.
#include "recsearch/plan/precision.hpp"

#include <optional>

namespace recsearch::plan {
namespace {

// Rank of a floating dtype, widest highest; nullopt for integers and bool.
std::optional<Precision> float_precision(ir::DType t) noexcept {
  switch (t) {
    case ir::DType::F64: return Precision::F64;
    case ir::DType::F32: return Precision::F32;
    case ir::DType::F16:
    case ir::DType::BF16: return Precision::BF16;
    case ir::DType::F8: return Precision::F8;
    default: return std::nullopt;
  }
}

// Widths in the order "wider": f8 < 16-bit < f32 < f64 (TF32 is never a
// dtype, only how an f32 contraction runs).
int width(Precision p) noexcept {
  switch (p) {
    case Precision::F8: return 0;
    case Precision::BF16: return 1;
    case Precision::TF32:
    case Precision::F32: return 2;
    case Precision::F64: return 3;
  }
  return 2;
}

// The widest floating precision among `tensors`, nullopt where none is
// floating.
std::optional<Precision> widest(const ir::Graph& g, const std::vector<ir::TensorId>& tensors) {
  std::optional<Precision> best;
  for (const ir::TensorId t : tensors) {
    const auto p = float_precision(g.tensor(t).dtype);
    if (p && (!best || width(*p) > width(*best))) best = p;
  }
  return best;
}

bool contraction(ir::OpKind k) noexcept {
  return k == ir::OpKind::MatMul || k == ir::OpKind::BatchMatMul || k == ir::OpKind::Einsum ||
         k == ir::OpKind::Conv2D || k == ir::OpKind::Attention;
}

}  // namespace

Precision operator_precision(const ir::Graph& g, ir::OpId o, const CostParams& p) {
  const ir::Operator& op = g.op(o);
  std::optional<Precision> prec = widest(g, op.inputs);
  if (!prec) prec = widest(g, op.outputs);
  const Precision result = prec.value_or(Precision::F32);
  if (result == Precision::F32 && p.tf32 && contraction(op.kind)) return Precision::TF32;
  return result;
}

std::vector<Precision> operator_precisions(const ir::Graph& g, const CostParams& p) {
  std::vector<Precision> out(g.num_operators());
  for (ir::OpId o = 0; o < g.num_operators(); ++o) out[o] = operator_precision(g, o, p);
  return out;
}

}  // namespace recsearch::plan
