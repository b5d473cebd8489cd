// SPDX-License-Identifier: Apache-2.0
// Pointwise and row-wise kinds: elementwise unary and binary operators (numpy
// broadcasting), BiasAdd, BatchNorm, LayerNorm / RMSNorm and Softmax /
// LogSoftmax. Loops are the output dims (d0, d1, ...); only the normalized
// or softmax axes are Whole.
#include <string>
#include <vector>

#include "algebra/space_builder.hpp"

namespace recsearch::algebra::detail {

namespace {

// One Parallel loop per dim of `shape`, named d0, d1, ...; identity mapping
// onto the given input and every output.
std::vector<int> identity_loops(SpaceBuilder& b, const ir::Shape& shape, std::size_t input) {
  std::vector<int> loops;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    loops.push_back(b.add_loop(indexed("d", d), shape[d], DimRole::Parallel));
    b.map_in(input, d, loops.back());
    for (std::size_t j = 0; j < b.num_outputs(); ++j) b.map_out(j, d, loops.back());
  }
  return loops;
}

// Elementwise cost in flops per element; rough but ranks transcendental
// activations above copies.
double unary_flops_per_element(ir::OpKind k) noexcept {
  switch (k) {
    case ir::OpKind::GeLU: return 8.0;
    case ir::OpKind::SiLU:
    case ir::OpKind::Sigmoid:
    case ir::OpKind::Tanh: return 4.0;
    case ir::OpKind::Exp:
    case ir::OpKind::Log:
    case ir::OpKind::Sqrt: return 2.0;
    default: return 1.0;
  }
}

}  // namespace

// ---- binary elementwise ----------------------------------------------------
void build_binary(SpaceBuilder& b) {
  b.expect_inputs(2, 2);
  b.expect_outputs(1, 1);
  const ir::Shape& x = b.in(0);
  const ir::Shape& y = b.in(1);
  std::size_t bad_x = 0;
  std::size_t bad_y = 0;
  const auto out = broadcast(x, y, &bad_x, &bad_y);
  if (!out) {
    b.fail_shape(b.in_path(1), "operands do not broadcast: x " + b.describe_in(0) + " dim " +
                                   std::to_string(bad_x) + " is " + std::to_string(x[bad_x]) +
                                   ", y " + b.describe_in(1) + " dim " + std::to_string(bad_y) +
                                   " is " + std::to_string(y[bad_y]));
  }
  b.set_inferred(0, *out);
  if (b.outputs_checked()) return;

  for (std::size_t d = 0; d < out->size(); ++d) {
    const int l = b.add_loop(indexed("d", d), (*out)[d], DimRole::Parallel);
    b.map_out(0, d, l);
    for (std::size_t j = 0; j < 2; ++j) {
      const ir::Shape& s = b.in(j);
      if (d + s.size() < out->size()) continue;  // operand lacks this leading dim
      const std::size_t sd = d + s.size() - out->size();
      if (s[sd] == 1 && (*out)[d] != 1) continue;  // broadcast: replicated along the loop
      b.map_in(j, sd, l);
    }
  }
  b.set_flops(product_d(*out));
}

// ---- BiasAdd ---------------------------------------------------------------
void build_bias_add(SpaceBuilder& b) {
  b.expect_inputs(2, 2);
  b.expect_outputs(1, 1);
  const ir::Shape& x = b.in(0);
  const std::int64_t axis = b.axis_attr("axis", -1, b.in_rank(0));
  if (b.in(1).size() != 1 || b.in(1)[0] != x[static_cast<std::size_t>(axis)]) {
    b.fail_shape(b.in_path(1), "bias " + b.describe_in(1) + " must be [" +
                                   std::to_string(x[static_cast<std::size_t>(axis)]) +
                                   "], the size of dim " + std::to_string(axis) + " of x " +
                                   b.describe_in(0));
  }
  b.set_inferred(0, x);
  if (b.outputs_checked()) return;
  const auto loops = identity_loops(b, x, 0);
  b.map_in(1, 0, loops[static_cast<std::size_t>(axis)]);
  b.set_flops(product_d(x));
}

// ---- unary elementwise -----------------------------------------------------
void build_unary(SpaceBuilder& b) {
  const bool dropout = b.kind() == ir::OpKind::Dropout;
  // ONNX Dropout takes optional ratio / training_mode scalars and may emit
  // a mask shaped like its output.
  b.expect_inputs(1, dropout ? 3 : 1);
  b.expect_outputs(1, dropout ? 2 : 1);
  const ir::Shape& x = b.in(0);
  for (std::size_t j = 0; j < b.num_outputs(); ++j) b.set_inferred(j, x);
  if (b.outputs_checked()) return;
  (void)identity_loops(b, x, 0);
  b.set_flops(unary_flops_per_element(b.kind()) * product_d(x));
}

// ---- BatchNorm -------------------------------------------------------------
//
// Statistics are per device (as data-parallel frameworks do), so every loop
// is Parallel, the batch included.
void build_batch_norm(SpaceBuilder& b) {
  b.expect_inputs(3, 5);
  b.expect_outputs(1, 3);  // ONNX training mode adds running mean and var
  b.expect_in_min_rank(0, 2, "x (N, C, ...)");
  const ir::Shape& x = b.in(0);
  const std::int64_t c = x[1];
  static constexpr const char* kRoles[] = {"x", "scale", "bias", "mean", "var"};
  for (std::size_t j = 1; j < b.num_inputs(); ++j) {
    if (b.in(j).size() != 1 || b.in(j)[0] != c) {
      b.fail_shape(b.in_path(j), std::string(kRoles[j]) + " " + b.describe_in(j) + " must be [" +
                                     std::to_string(c) + "], the channels of x " +
                                     b.describe_in(0));
    }
  }
  b.set_inferred(0, x);
  for (std::size_t j = 1; j < b.num_outputs(); ++j) b.set_inferred(j, {c});
  if (b.outputs_checked()) return;

  int lc = kUnmapped;
  for (std::size_t d = 0; d < x.size(); ++d) {
    const int l = b.add_loop(nchw_name(x.size(), d), x[d], DimRole::Parallel);
    if (d == 1) lc = l;
    b.map_in(0, d, l);
    b.map_out(0, d, l);
  }
  for (std::size_t j = 1; j < b.num_inputs(); ++j) b.map_in(j, 0, lc);
  for (std::size_t j = 1; j < b.num_outputs(); ++j) b.map_out(j, 0, lc);
  b.set_flops(5.0 * product_d(x));
}

// ---- LayerNorm / RMSNorm ---------------------------------------------------
//
// Dims from `axis` on are normalized together (Whole). scale and bias may be
// shaped like any suffix of the normalized dims, broadcasting size-1 dims.
// Optional extra outputs (ONNX Mean, InvStdDev) keep the leading dims and
// have size 1 in the normalized ones.
void build_layer_norm(SpaceBuilder& b) {
  b.expect_inputs(2, 3);
  b.expect_outputs(1, 3);
  const ir::Shape& x = b.in(0);
  const std::int64_t rank = b.in_rank(0);
  const auto axis = static_cast<std::size_t>(b.axis_attr("axis", -1, rank));
  const std::size_t nnorm = x.size() - axis;
  for (std::size_t j = 1; j < b.num_inputs(); ++j) {
    const ir::Shape& p = b.in(j);
    bool ok = p.size() <= nnorm;
    for (std::size_t i = 0; ok && i < p.size(); ++i) {
      const std::int64_t want = x[x.size() - p.size() + i];
      ok = p[i] == want || p[i] == 1;
    }
    if (!ok) {
      b.fail_shape(b.in_path(j), std::string(j == 1 ? "scale " : "bias ") + b.describe_in(j) +
                                     " does not match the normalized dims " +
                                     fmt_shape(std::span<const std::int64_t>(x).subspan(axis)) +
                                     " of x " + b.describe_in(0));
    }
  }
  b.set_inferred(0, x);
  ir::Shape stats = x;
  for (std::size_t d = axis; d < stats.size(); ++d) stats[d] = 1;
  for (std::size_t j = 1; j < b.num_outputs(); ++j) b.set_inferred(j, stats);
  if (b.outputs_checked()) return;

  std::vector<int> loops;
  for (std::size_t d = 0; d < x.size(); ++d) {
    loops.push_back(
        b.add_loop(indexed("d", d), x[d], d < axis ? DimRole::Parallel : DimRole::Whole));
    b.map_in(0, d, loops.back());
    b.map_out(0, d, loops.back());
    if (d < axis) {
      for (std::size_t j = 1; j < b.num_outputs(); ++j) b.map_out(j, d, loops.back());
    }
  }
  for (std::size_t j = 1; j < b.num_inputs(); ++j) {
    const ir::Shape& p = b.in(j);
    for (std::size_t i = 0; i < p.size(); ++i) {
      const std::size_t d = x.size() - p.size() + i;
      if (p[i] == 1 && x[d] != 1) continue;
      b.map_in(j, i, loops[d]);
    }
  }
  b.set_flops(5.0 * product_d(x));
}

// ---- Softmax / LogSoftmax --------------------------------------------------
void build_softmax(SpaceBuilder& b) {
  b.expect_inputs(1, 1);
  b.expect_outputs(1, 1);
  const ir::Shape& x = b.in(0);
  const auto axis = static_cast<std::size_t>(b.axis_attr("axis", -1, b.in_rank(0)));
  b.set_inferred(0, x);
  if (b.outputs_checked()) return;
  for (std::size_t d = 0; d < x.size(); ++d) {
    const int l = b.add_loop(indexed("d", d), x[d], d == axis ? DimRole::Whole : DimRole::Parallel);
    b.map_in(0, d, l);
    b.map_out(0, d, l);
  }
  b.set_flops(5.0 * product_d(x));
}

}  // namespace recsearch::algebra::detail
