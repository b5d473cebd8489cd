// SPDX-License-Identifier: Apache-2.0
// The CPU kernels of the sliding-window kinds (Conv2D, MaxPool, AvgPool,
// GlobalAvgPool) and of BatchNorm, on one rank's blocks in NCHW. A window
// kernel reads its input block in global coordinates (KernelArgs'
// window_in_begin / window_out_begin), so that a block whose H or W is cut
// (and extended by the halo rows its windows read) computes exactly the
// rows of the whole output it holds; padding is decided against the whole
// input. BatchNorm's statistics are summed by the executor across ranks.
#include <algorithm>
#include <cmath>
#include <limits>

#include "exec/halo.hpp"
#include "exec/kernels.hpp"
#include "recsearch/error.hpp"

namespace recsearch::exec::detail {

namespace {

using ir::OpKind;
using ir::Shape;

// One spatial dim of a window kernel: global output index o reads input
// rows o·stride − pad + t·dilation; `local` is the block's index of a row
// inside the whole input, or −1 for padding.
struct Axis {
  WindowDim w;
  std::int64_t in_begin = 0, out_begin = 0, in_full = 0;
  [[nodiscard]] std::int64_t local(std::int64_t o, std::int64_t tap) const {
    const std::int64_t i = (out_begin + o) * w.stride - w.pad_begin + tap * w.dilation;
    return i < 0 || i >= in_full ? -1 : i - in_begin;
  }
};

std::array<Axis, 2> window_axes(const KernelArgs& a) {
  const auto wd = window_dims(*a.op, a.op->kind == OpKind::Conv2D ? a.in_shapes.at(1) : Shape{});
  if (!wd) throw Error(Errc::kInternal, a.op->name + " has no window");
  std::array<Axis, 2> out;
  for (std::size_t d = 0; d < 2; ++d) {
    out[d].w = (*wd)[d];
    out[d].in_begin = a.window_in_begin[d];
    out[d].out_begin = a.window_out_begin[d];
    out[d].in_full = a.full_in_shapes.at(0).at(d + 2);
    // Every row the block's windows read must be in the block (the halo
    // exchange's job): checked once here rather than at every tap.
    const std::int64_t n_out = a.out_shapes.at(0).at(d + 2);
    const std::int64_t held = a.in_shapes.at(0).at(d + 2);
    const WindowDim& w = out[d].w;
    const std::int64_t first = std::max<std::int64_t>(0, out[d].out_begin * w.stride - w.pad_begin);
    const std::int64_t last = std::min(
        out[d].in_full - 1, (out[d].out_begin + n_out - 1) * w.stride - w.pad_begin + w.extent - 1);
    if (n_out > 0 && (first < out[d].in_begin || last >= out[d].in_begin + held))
      throw Error(Errc::kInternal, a.op->name + ": its windows read rows " + std::to_string(first) +
                                       ".." + std::to_string(last) + " but the block holds " +
                                       std::to_string(out[d].in_begin) + ".." +
                                       std::to_string(out[d].in_begin + held - 1));
  }
  return out;
}

}  // namespace

void k_conv2d(const KernelArgs& a) {
  const Shape& xs = a.in_shapes[0];
  const Shape& ws = a.in_shapes[1];
  const Shape& ys = a.out_shapes[0];
  const std::array<Axis, 2> ax = window_axes(a);
  const std::int64_t group = a.op->attrs.get_int("group", 1);
  // Output channels per group, from the whole weight (a cut group loop
  // leaves whole groups on each rank; a cut output-channel loop, group 1).
  const std::int64_t per_group = a.full_in_shapes.at(1).at(0) / group;
  const std::int64_t cg = ws[1], kr = ws[2], ks = ws[3];
  const std::int64_t n_out = ys[0] * ys[1];
  const Buf& x = *a.in[0];
  const Buf& w = *a.in[1];
  const Buf* bias = a.in.size() > 2 && a.add_bias ? a.in[2] : nullptr;
  Buf& y = *a.out[0];
  const std::int64_t plane_in = xs[2] * xs[3], plane_out = ys[2] * ys[3];
  parallel_rows(n_out, [&](std::int64_t nc) {
    const std::int64_t n = nc / ys[1], oc = nc % ys[1];
    const std::int64_t c0 = (oc / per_group) * cg;  // first channel of x its group reads
    for (std::int64_t oh = 0; oh < ys[2]; ++oh) {
      for (std::int64_t ow = 0; ow < ys[3]; ++ow) {
        double acc = bias != nullptr ? (*bias)[static_cast<std::size_t>(oc)] : 0.0;
        for (std::int64_t ci = 0; ci < cg; ++ci) {
          const std::int64_t xbase = (n * xs[1] + c0 + ci) * plane_in;
          const std::int64_t wbase = ((oc * cg) + ci) * kr * ks;
          for (std::int64_t r = 0; r < kr; ++r) {
            const std::int64_t ih = ax[0].local(oh, r);
            if (ih < 0) continue;
            for (std::int64_t s = 0; s < ks; ++s) {
              const std::int64_t iw = ax[1].local(ow, s);
              if (iw < 0) continue;
              acc += static_cast<double>(x[static_cast<std::size_t>(xbase + ih * xs[3] + iw)]) *
                     w[static_cast<std::size_t>(wbase + r * ks + s)];
            }
          }
        }
        y[static_cast<std::size_t>(nc * plane_out + oh * ys[3] + ow)] = static_cast<float>(acc);
      }
    }
  });
}

void k_pool(const KernelArgs& a) {
  const Shape& xs = a.in_shapes[0];
  const Shape& ys = a.out_shapes[0];
  const std::array<Axis, 2> ax = window_axes(a);
  const bool max = a.op->kind == OpKind::MaxPool;
  const bool include_pad = a.op->attrs.get_int("count_include_pad", 0) != 0;
  const auto kernel =
      a.op->attrs.get_ints("kernel_shape").value_or(std::vector<std::int64_t>{1, 1});
  const Buf& x = *a.in[0];
  Buf& y = *a.out[0];
  const std::int64_t plane_in = xs[2] * xs[3], plane_out = ys[2] * ys[3];
  parallel_rows(ys[0] * ys[1], [&](std::int64_t nc) {
    const std::int64_t xbase = nc * plane_in;
    for (std::int64_t oh = 0; oh < ys[2]; ++oh) {
      for (std::int64_t ow = 0; ow < ys[3]; ++ow) {
        double acc = max ? -std::numeric_limits<double>::infinity() : 0.0;
        std::int64_t count = 0;
        for (std::int64_t r = 0; r < kernel.at(0); ++r) {
          const std::int64_t ih = ax[0].local(oh, r);
          if (ih < 0) continue;
          for (std::int64_t s = 0; s < kernel.at(1); ++s) {
            const std::int64_t iw = ax[1].local(ow, s);
            if (iw < 0) continue;
            const double v = x[static_cast<std::size_t>(xbase + ih * xs[3] + iw)];
            acc = max ? std::max(acc, v) : acc + v;
            ++count;
          }
        }
        if (!max) {
          const std::int64_t div = include_pad ? kernel.at(0) * kernel.at(1) : count;
          acc = div > 0 ? acc / static_cast<double>(div) : 0.0;
        }
        y[static_cast<std::size_t>(nc * plane_out + oh * ys[3] + ow)] = static_cast<float>(acc);
      }
    }
  });
}

// The mean over the whole spatial extent: a block of cut spatial dims
// divides its sum by the whole count, so the blocks add up to the mean
// (the cut loops are reductions: the output is a partial sum).
void k_global_avg_pool(const KernelArgs& a) {
  const Shape& xs = a.in_shapes[0];
  const Shape& full = a.full_in_shapes[0];
  std::int64_t plane = 1, whole = 1;
  for (std::size_t d = 2; d < xs.size(); ++d) {
    plane *= xs[d];
    whole *= full[d];
  }
  const Buf& x = *a.in[0];
  Buf& y = *a.out[0];
  parallel_rows(xs[0] * xs[1], [&](std::int64_t nc) {
    double sum = 0;
    for (std::int64_t i = 0; i < plane; ++i) sum += x[static_cast<std::size_t>(nc * plane + i)];
    y[static_cast<std::size_t>(nc)] = static_cast<float>(sum / static_cast<double>(whole));
  });
}

std::vector<float> batch_norm_sums(const KernelArgs& a) {
  const Shape& xs = a.in_shapes[0];
  const std::int64_t c = xs[1];
  std::int64_t plane = 1;
  for (std::size_t d = 2; d < xs.size(); ++d) plane *= xs[d];
  const Buf& x = *a.in[0];
  std::vector<float> sums(static_cast<std::size_t>(2 * c));
  parallel_rows(c, [&](std::int64_t ch) {
    double s = 0, sq = 0;
    for (std::int64_t n = 0; n < xs[0]; ++n) {
      const std::int64_t base = (n * c + ch) * plane;
      for (std::int64_t i = 0; i < plane; ++i) {
        const double v = x[static_cast<std::size_t>(base + i)];
        s += v;
        sq += v * v;
      }
    }
    sums[static_cast<std::size_t>(ch)] = static_cast<float>(s);
    sums[static_cast<std::size_t>(c + ch)] = static_cast<float>(sq);
  });
  return sums;
}

void k_batch_norm(const KernelArgs& a) {
  if (a.bn_mean == nullptr || a.bn_var == nullptr)
    throw Error(Errc::kInternal, a.op->name + ": BatchNorm without statistics");
  const Shape& xs = a.in_shapes[0];
  const std::int64_t c = xs[1];
  std::int64_t plane = 1;
  for (std::size_t d = 2; d < xs.size(); ++d) plane *= xs[d];
  const double eps = a.op->attrs.get_float("epsilon", 1e-5);
  const Buf& x = *a.in[0];
  const Buf& scale = *a.in[1];
  const Buf& bias = *a.in[2];
  Buf& y = *a.out[0];
  parallel_rows(xs[0] * c, [&](std::int64_t nc) {
    const auto ch = static_cast<std::size_t>(nc % c);
    const double inv = 1.0 / std::sqrt(static_cast<double>((*a.bn_var)[ch]) + eps);
    const double mul = inv * scale[ch];
    const double add = bias[ch] - (*a.bn_mean)[ch] * mul;
    for (std::int64_t i = 0; i < plane; ++i) {
      const auto at = static_cast<std::size_t>(nc * plane + i);
      y[at] = static_cast<float>(x[at] * mul + add);
    }
  });
}

}  // namespace recsearch::exec::detail
