// SPDX-License-Identifier: Apache-2.0
// The halo geometry of cut window dims (halo.hpp) and the bytes each rank
// sends for it (predict_halo_bytes): the rows of its block of x that the
// other blocks' windows read; in the backward pass (predict_halo_backward_bytes)
// the gradients of the rows it received, sent back; and in the recomputed
// forward (predict_recompute_halo_bytes) the exchanges run again.
#include "exec/halo.hpp"

#include <algorithm>

#include "recsearch/error.hpp"
#include "recsearch/exec/recompute.hpp"

namespace recsearch::exec {
namespace detail {

namespace {

std::vector<std::int64_t> ints_or(const ir::Operator& op, const char* name,
                                  std::vector<std::int64_t> fallback) {
  const auto v = op.attrs.get_ints(name);
  return v ? *v : fallback;
}

}  // namespace

std::optional<std::array<WindowDim, 2>> window_dims(const ir::Operator& op,
                                                    const ir::Shape& conv_weight) {
  std::vector<std::int64_t> kernel;
  std::vector<std::int64_t> strides;
  if (op.kind == ir::OpKind::Conv2D) {
    kernel = {conv_weight.at(2), conv_weight.at(3)};
    strides = ints_or(op, "strides", {1, 1});
  } else if (op.kind == ir::OpKind::MaxPool || op.kind == ir::OpKind::AvgPool) {
    kernel = ints_or(op, "kernel_shape", {1, 1});
    strides = ints_or(op, "strides", kernel);  // the algebra's default (kinds_spatial.cpp)
  } else {
    return std::nullopt;
  }
  const auto pads = ints_or(op, "pads", {0, 0, 0, 0});
  const auto dil = ints_or(op, "dilations", {1, 1});
  std::array<WindowDim, 2> out;
  for (std::size_t d = 0; d < 2; ++d) {
    out[d].stride = strides.at(d);
    out[d].pad_begin = pads.at(d);
    out[d].dilation = dil.at(d);
    out[d].extent = (kernel.at(d) - 1) * dil.at(d) + 1;
  }
  return out;
}

Range intersect(Range a, Range b) noexcept {
  return {std::max(a.begin, b.begin), std::min(a.end, b.end)};
}

Range HaloDim::own(std::int64_t block) const noexcept {
  const std::int64_t len = in_full / parts;
  return {block * len, (block + 1) * len};
}

std::int64_t HaloDim::out_begin(std::int64_t block) const noexcept {
  return block * (out_full / parts);
}

Range HaloDim::needed(std::int64_t block) const noexcept {
  const std::int64_t o0 = out_begin(block), o1 = o0 + out_full / parts;
  if (o1 <= o0) return {0, 0};
  const Range read{o0 * window.stride - window.pad_begin,
                   (o1 - 1) * window.stride - window.pad_begin + window.extent};
  return intersect(read, {0, in_full});
}

std::int64_t HaloDim::block_of(const std::vector<std::int64_t>& coords) const {
  std::int64_t b = 0;
  for (std::size_t i = 0; i < axes.size(); ++i) b = b * sizes[i] + coords.at(axes[i]);
  return b;
}

std::int64_t HaloDim::rank_of(std::int64_t block, std::vector<std::int64_t> coords,
                              const std::vector<std::int64_t>& mesh) const {
  for (std::size_t i = axes.size(); i-- > 0;) {
    coords.at(axes[i]) = block % sizes[i];
    block /= sizes[i];
  }
  std::int64_t r = 0;
  for (std::size_t a = 0; a < mesh.size(); ++a) r = r * mesh[a] + coords[a];
  return r;
}

std::int64_t HaloDim::row_elements(const ir::Shape& shape) const {
  std::int64_t n = 1;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (static_cast<int>(d) != dim) n *= shape[d];
  }
  return n;
}

std::vector<HaloDim> halo_dims(const ir::Graph& g, const ir::Operator& op, const Layout& x_layout,
                               const std::vector<std::int64_t>& mesh) {
  std::vector<HaloDim> out;
  const auto windows = window_dims(
      op, op.kind == ir::OpKind::Conv2D ? g.tensor(op.inputs.at(1)).shape : ir::Shape{});
  if (!windows) return out;
  const ir::Shape& x = g.tensor(op.inputs.at(0)).shape;
  const ir::Shape& y = g.tensor(op.outputs.at(0)).shape;
  for (int d = 2; d < 4; ++d) {
    HaloDim h;
    h.dim = d;
    for (std::size_t a = 0; a < x_layout.size(); ++a) {
      if (x_layout[a].kind != cost::LayoutKind::Shard || x_layout[a].dim != d) continue;
      h.axes.push_back(static_cast<std::uint32_t>(a));
      h.sizes.push_back(mesh.at(a));
      h.parts *= mesh.at(a);
    }
    if (h.parts == 1) continue;
    h.window = (*windows)[static_cast<std::size_t>(d - 2)];
    h.in_full = x.at(static_cast<std::size_t>(d));
    h.out_full = y.at(static_cast<std::size_t>(d));
    if (h.in_full % h.parts != 0 || h.out_full % h.parts != 0)
      throw Error(Errc::kInternal, op.name + ": a window dim split unevenly");
    out.push_back(std::move(h));
  }
  return out;
}

double halo_send_elements(const ir::Graph& g, const ir::Operator& op, const Layout& x_layout,
                          const std::vector<std::int64_t>& mesh,
                          const std::vector<std::int64_t>& coords) {
  ir::Shape shape = local_shape(g.tensor(op.inputs.at(0)).shape, x_layout, mesh);
  double sent = 0;
  for (const HaloDim& h : halo_dims(g, op, x_layout, mesh)) {
    const std::int64_t mine = h.block_of(coords);
    const std::int64_t row = h.row_elements(shape);
    for (std::int64_t b = 0; b < h.parts; ++b) {
      if (b != mine) sent += static_cast<double>(intersect(h.needed(b), h.own(mine)).size() * row);
    }
    shape[static_cast<std::size_t>(h.dim)] = h.needed(mine).size();
  }
  return sent;
}

double halo_return_elements(const ir::Graph& g, const ir::Operator& op, const Layout& x_layout,
                            const std::vector<std::int64_t>& mesh,
                            const std::vector<std::int64_t>& coords) {
  ir::Shape shape = local_shape(g.tensor(op.inputs.at(0)).shape, x_layout, mesh);
  double sent = 0;
  // Dim i's reverse runs on the block extended by dims 0..i.
  for (const HaloDim& h : halo_dims(g, op, x_layout, mesh)) {
    const std::int64_t mine = h.block_of(coords);
    shape[static_cast<std::size_t>(h.dim)] = h.needed(mine).size();
    const std::int64_t row = h.row_elements(shape);
    for (std::int64_t b = 0; b < h.parts; ++b) {
      if (b != mine) sent += static_cast<double>(intersect(h.needed(mine), h.own(b)).size() * row);
    }
  }
  return sent;
}

bool batch_norm_batch_stats(const ir::Operator& op, bool train) noexcept {
  return train || op.inputs.size() < 5;
}

std::vector<std::uint32_t> batch_norm_stat_axes(const Layout& x_layout) {
  std::vector<std::uint32_t> axes;
  for (std::size_t a = 0; a < x_layout.size(); ++a) {
    if (x_layout[a].kind == cost::LayoutKind::Shard && x_layout[a].dim != 1)
      axes.push_back(static_cast<std::uint32_t>(a));
  }
  return axes;
}

}  // namespace detail

double predict_halo_bytes(const ir::Graph& g, const PlanLayouts& pl,
                          const std::vector<std::int64_t>& coords, double element_bytes) {
  double sent = 0;
  for (ir::OpId o = 0; o < g.num_operators(); ++o) {
    const ir::Operator& op = g.op(o);
    if (pl.ops[o].inputs.empty()) continue;
    sent += detail::halo_send_elements(g, op, pl.ops[o].inputs[0], pl.mesh, coords);
  }
  return sent * element_bytes;
}

double predict_halo_backward_bytes(const ir::Graph& g, const PlanLayouts& pl,
                                   const GradientLayouts& gl,
                                   const std::vector<std::int64_t>& coords, double element_bytes) {
  double sent = 0;
  for (ir::OpId o = 0; o < g.num_operators(); ++o) {
    if (pl.ops[o].inputs.empty() || gl.input[o].empty() || !gl.input[o][0]) continue;
    sent += detail::halo_return_elements(g, g.op(o), pl.ops[o].inputs[0], pl.mesh, coords);
  }
  return sent * element_bytes;
}

double predict_recompute_halo_bytes(const ir::Graph& g, const PlanLayouts& pl,
                                    const RecomputePlan& rp,
                                    const std::vector<std::int64_t>& coords, double element_bytes) {
  double sent = 0;
  for (ir::OpId o = 0; o < g.num_operators() && !rp.empty(); ++o) {
    if (!rp.op[o] || pl.ops[o].inputs.empty()) continue;
    sent += detail::halo_send_elements(g, g.op(o), pl.ops[o].inputs[0], pl.mesh, coords);
  }
  return sent * element_bytes;
}

}  // namespace recsearch::exec
