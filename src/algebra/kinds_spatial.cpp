// SPDX-License-Identifier: Apache-2.0
// Sliding-window kinds: Conv2D, MaxPool / AvgPool and GlobalAvgPool. Their
// spatial loops are Window dims: a cut there needs neighbouring rows (the
// halo), so the cost model can weigh spatial against batch/channel cuts.
#include <string>
#include <vector>

#include "algebra/space_builder.hpp"

namespace recsearch::algebra::detail {

namespace {

struct Window {
  std::int64_t out = 0;   // output extent
  std::int64_t halo = 0;  // rows exchanged per split boundary
};

// Output extent of one spatial dim (ONNX formula), overflow-checked.
Window window_extent(const SpaceBuilder& b, std::string_view axis, std::int64_t in,
                     std::int64_t pad_begin, std::int64_t pad_end, std::int64_t kernel,
                     std::int64_t dilation, std::int64_t stride, bool ceil_mode) {
  const auto km1 = checked_mul(kernel - 1, dilation);
  const auto eff = km1 ? checked_add(*km1, 1) : std::nullopt;
  const auto padded0 = checked_add(in, pad_begin);
  const auto padded = padded0 ? checked_add(*padded0, pad_end) : std::nullopt;
  if (!eff || !padded) {
    b.fail_shape(b.in_path(0), "window arithmetic along " + std::string(axis) +
                                   " overflows (input " + std::to_string(in) + ", kernel " +
                                   std::to_string(kernel) + ", dilation " +
                                   std::to_string(dilation) + ")");
  }
  if (*padded < *eff) {
    b.fail_shape(b.in_path(0), "kernel extent " + std::to_string(*eff) + " along " +
                                   std::string(axis) + " exceeds the padded input size " +
                                   std::to_string(*padded) + " of " + b.describe_in(0));
  }
  const std::int64_t span = *padded - *eff;
  std::int64_t out = span / stride + 1;
  if (ceil_mode && span % stride != 0) {
    ++out;
    // The last window must start inside the input or the begin padding.
    if ((out - 1) > (in + pad_begin - 1) / stride) --out;
  }
  return {out, *eff > stride ? *eff - stride : 0};
}

// Conv2D's weight (and bias) against x and the group count: channels per
// group, a non-empty kernel, one bias value per output channel.
void check_conv_weights(SpaceBuilder& b, std::int64_t group) {
  const std::int64_t C = b.in(0)[1];
  const std::int64_t O = b.in(1)[0], I = b.in(1)[1], R = b.in(1)[2], S = b.in(1)[3];
  if (C % group != 0) {
    b.fail_shape(b.attr_path("group"), "input channels C=" + std::to_string(C) + " of x " +
                                           b.describe_in(0) + " are not divisible by group " +
                                           std::to_string(group));
  }
  if (O % group != 0) {
    b.fail_shape(b.in_path(1), "output channels O=" + std::to_string(O) + " of w " +
                                   b.describe_in(1) + " are not divisible by group " +
                                   std::to_string(group));
  }
  if (I != C / group) {
    b.fail_shape(b.in_path(1), "w " + b.describe_in(1) + " has " + std::to_string(I) +
                                   " input channels per group, but x " + b.describe_in(0) +
                                   " with C=" + std::to_string(C) + " and group " +
                                   std::to_string(group) + " needs " + std::to_string(C / group));
  }
  if (R < 1 || S < 1) {
    b.fail_shape(b.in_path(1), "w " + b.describe_in(1) + " has an empty kernel");
  }
  if (b.num_inputs() == 3 && (b.in(2).size() != 1 || b.in(2)[0] != O)) {
    b.fail_shape(b.in_path(2), "bias " + b.describe_in(2) + " must be [" + std::to_string(O) +
                                   "] (one value per output channel)");
  }
}

}  // namespace

// ---- Conv2D ----------------------------------------------------------------
void build_conv2d(SpaceBuilder& b) {
  b.expect_inputs(2, 3);
  b.expect_outputs(1, 1);
  b.expect_in_rank(0, 4, "x (NCHW)");
  b.expect_in_rank(1, 4, "w (OIHW)");
  const auto strides = b.attr_ints_n("strides", 2, {1, 1}, 1);
  const auto pads = b.attr_ints_n("pads", 4, {0, 0, 0, 0}, 0);
  const auto dil = b.attr_ints_n("dilations", 2, {1, 1}, 1);
  const std::int64_t group = b.attr_int("group", 1);
  if (group < 1) b.fail_attr("group", "'group' must be >= 1, got " + std::to_string(group));
  const ir::Shape& x = b.in(0);
  const ir::Shape& w = b.in(1);
  const std::int64_t N = x[0], C = x[1], H = x[2], W = x[3];
  const std::int64_t O = w[0], R = w[2], S = w[3];
  if (const auto ks = b.attr_ints("kernel_shape");
      ks && (ks->size() != 2 || (*ks)[0] != R || (*ks)[1] != S)) {
    b.fail(Errc::kShape, b.attr_path("kernel_shape"),
           "'kernel_shape' " + fmt_shape(*ks) + " contradicts the weight " + b.describe_in(1));
  }
  check_conv_weights(b, group);
  const Window wh = window_extent(b, "H", H, pads[0], pads[2], R, dil[0], strides[0], false);
  const Window ww = window_extent(b, "W", W, pads[1], pads[3], S, dil[1], strides[1], false);
  b.set_inferred(0, {N, O, wh.out, ww.out});
  if (b.outputs_checked()) return;

  const bool bias = b.num_inputs() == 3;
  const int ln = b.add_loop("n", N, DimRole::Parallel);
  int lo = kUnmapped;   // loop of the output-channel dims of w, out and bias
  int lc = kUnmapped;   // loop of x's channel dim
  int lci = kUnmapped;  // loop of w's input-channel dim
  if (group == 1) {
    lo = b.add_loop("o", O, DimRole::Parallel);
    lc = b.add_loop("c", C, DimRole::Reduction);
    lci = lc;
  } else {
    // Cutting g splits channels group-wise: x's C, w's O and out's O alike.
    lo = b.add_loop("g", group, DimRole::Parallel);
    b.add_loop("og", O / group, DimRole::Whole);
    lci = b.add_loop("cg", C / group, DimRole::Whole);
    lc = lo;
  }
  const int lh = b.add_loop("h", wh.out, DimRole::Window, wh.halo);
  const int lw = b.add_loop("w", ww.out, DimRole::Window, ww.halo);
  const int lr = b.add_loop("r", R, DimRole::Whole);
  const int ls = b.add_loop("s", S, DimRole::Whole);
  b.map_in(0, 0, ln);
  b.map_in(0, 1, lc);
  b.map_in(0, 2, lh);
  b.map_in(0, 3, lw);
  b.map_in(1, 0, lo);
  b.map_in(1, 1, lci);
  b.map_in(1, 2, lr);
  b.map_in(1, 3, ls);
  if (bias) b.map_in(2, 0, lo);
  b.map_out(0, 0, ln);
  b.map_out(0, 1, lo);
  b.map_out(0, 2, lh);
  b.map_out(0, 3, lw);
  b.set_flops(2.0 * product_d(std::vector<std::int64_t>{N, O, wh.out, ww.out, C / group, R, S}));
}

// ---- MaxPool / AvgPool -----------------------------------------------------
void build_pool(SpaceBuilder& b) {
  b.expect_inputs(1, 1);
  // MaxPool may also produce ONNX's Indices output, shaped like the result.
  b.expect_outputs(1, b.kind() == ir::OpKind::MaxPool ? 2 : 1);
  b.expect_in_rank(0, 4, "x (NCHW)");
  if (!b.has_attr("kernel_shape")) b.fail_attr("kernel_shape", "'kernel_shape' is required");
  const auto kernel = b.attr_ints_n("kernel_shape", 2, {}, 1);
  const auto strides = b.attr_ints_n("strides", 2, kernel, 1);
  const auto pads = b.attr_ints_n("pads", 4, {0, 0, 0, 0}, 0);
  const auto dil = b.attr_ints_n("dilations", 2, {1, 1}, 1);
  const bool ceil_mode = b.attr_int("ceil_mode", 0) != 0;
  const ir::Shape& x = b.in(0);
  const Window wh =
      window_extent(b, "H", x[2], pads[0], pads[2], kernel[0], dil[0], strides[0], ceil_mode);
  const Window ww =
      window_extent(b, "W", x[3], pads[1], pads[3], kernel[1], dil[1], strides[1], ceil_mode);
  const ir::Shape out{x[0], x[1], wh.out, ww.out};
  for (std::size_t j = 0; j < b.num_outputs(); ++j) b.set_inferred(j, out);
  if (b.outputs_checked()) return;

  const int ln = b.add_loop("n", x[0], DimRole::Parallel);
  const int lc = b.add_loop("c", x[1], DimRole::Parallel);
  const int lh = b.add_loop("h", wh.out, DimRole::Window, wh.halo);
  const int lw = b.add_loop("w", ww.out, DimRole::Window, ww.halo);
  const int loops[4] = {ln, lc, lh, lw};
  for (std::size_t d = 0; d < 4; ++d) {
    b.map_in(0, d, loops[d]);
    for (std::size_t j = 0; j < b.num_outputs(); ++j) b.map_out(j, d, loops[d]);
  }
  b.set_flops(product_d(out) * static_cast<double>(kernel[0]) * static_cast<double>(kernel[1]));
}

// ---- GlobalAvgPool ---------------------------------------------------------
void build_global_avg_pool(SpaceBuilder& b) {
  b.expect_inputs(1, 1);
  b.expect_outputs(1, 1);
  b.expect_in_min_rank(0, 3, "x (N, C, spatial...)");
  const ir::Shape& x = b.in(0);
  ir::Shape out(x.size(), 1);
  out[0] = x[0];
  out[1] = x[1];
  b.set_inferred(0, out);
  if (b.outputs_checked()) return;

  for (std::size_t d = 0; d < x.size(); ++d) {
    const bool spatial = d >= 2;
    const int l =
        b.add_loop(nchw_name(x.size(), d), x[d], spatial ? DimRole::Reduction : DimRole::Parallel);
    b.map_in(0, d, l);
    if (!spatial) b.map_out(0, d, l);  // spatial output dims are the size-1 results
  }
  b.set_flops(product_d(x));
}

}  // namespace recsearch::algebra::detail
