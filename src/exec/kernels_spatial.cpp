// SPDX-License-Identifier: Apache-2.0
// The CPU kernels of the sliding-window kinds (Conv2D, MaxPool, AvgPool,
// GlobalAvgPool) and of BatchNorm, on one rank's blocks in NCHW. A window
// kernel reads its input block in global coordinates (KernelArgs'
// window_in_begin / window_out_begin), so that a block whose H or W is cut
// (and extended by the halo rows its windows read) computes exactly the
// rows of the whole output it holds; padding is decided against the whole
// input. BatchNorm's statistics are summed by the executor across ranks.
// Their backward kernels follow (a window kernel's input gradient covers
// the halo rows it read; the executor sends those back).
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

// A pooling operator's window on this rank's block, shared by the forward
// (k_pool) and backward (b_pool) kernels: the window axes, the kernel, and
// what AvgPool divides by.
struct PoolWindow {
  std::array<Axis, 2> ax;
  std::vector<std::int64_t> kernel;
  bool max = false;
  bool include_pad = false;
  std::int64_t width = 0;  // the input block's row length

  explicit PoolWindow(const KernelArgs& a)
      : ax(window_axes(a)),
        kernel(a.op->attrs.get_ints("kernel_shape").value_or(std::vector<std::int64_t>{1, 1})),
        max(a.op->kind == OpKind::MaxPool),
        include_pad(a.op->attrs.get_int("count_include_pad", 0) != 0),
        width(a.in_shapes[0][3]) {}

  // Calls f(at) for each element of output (oh, ow)'s window that lies in
  // the block, row by row (at: its offset in the input plane); returns how
  // many there were.
  template <class F>
  std::int64_t visit(std::int64_t oh, std::int64_t ow, F&& f) const {
    std::int64_t count = 0;
    for (std::int64_t r = 0; r < kernel.at(0); ++r) {
      const std::int64_t ih = ax[0].local(oh, r);
      if (ih < 0) continue;
      for (std::int64_t s = 0; s < kernel.at(1); ++s) {
        const std::int64_t iw = ax[1].local(ow, s);
        if (iw < 0) continue;
        f(ih * width + iw);
        ++count;
      }
    }
    return count;
  }

  // AvgPool's divisor for a window of `count` elements in the block.
  [[nodiscard]] std::int64_t divisor(std::int64_t count) const {
    return include_pad ? kernel.at(0) * kernel.at(1) : count;
  }
};

void k_pool(const KernelArgs& a) {
  const Shape& xs = a.in_shapes[0];
  const Shape& ys = a.out_shapes[0];
  const PoolWindow win(a);
  const Buf& x = *a.in[0];
  Buf& y = *a.out[0];
  const std::int64_t plane_in = xs[2] * xs[3], plane_out = ys[2] * ys[3];
  parallel_rows(ys[0] * ys[1], [&](std::int64_t nc) {
    const std::int64_t xbase = nc * plane_in;
    for (std::int64_t oh = 0; oh < ys[2]; ++oh) {
      for (std::int64_t ow = 0; ow < ys[3]; ++ow) {
        double acc = win.max ? -std::numeric_limits<double>::infinity() : 0.0;
        const std::int64_t count = win.visit(oh, ow, [&](std::int64_t at) {
          const double v = x[static_cast<std::size_t>(xbase + at)];
          acc = win.max ? std::max(acc, v) : acc + v;
        });
        if (!win.max) {
          const std::int64_t div = win.divisor(count);
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

namespace recsearch::exec::detail {

// ---- backward ----

// Conv2D: dx[n, c, i] = Σ dy[n, o, j]·w[o, c, tap] over the outputs j whose
// window reads row i with that tap, dw[o, c, tap] = Σ dy[n, o, j]·x[n, c, i],
// db[o] = Σ dy[n, o, ·] (on the rank that added the bias: its vector-Jacobian
// product; the others' outputs did not depend on it). dx is accumulated per
// image in one task (the windows of neighbouring outputs overlap), dw and db
// per output channel.
void b_conv2d(const KernelArgs& a, const Buf& dy, const std::vector<Buf*>& dx) {
  const Shape& xs = a.in_shapes[0];
  const Shape& ws = a.in_shapes[1];
  const Shape& ys = a.out_shapes[0];
  const std::array<Axis, 2> ax = window_axes(a);
  const std::int64_t group = a.op->attrs.get_int("group", 1);
  const std::int64_t per_group = a.full_in_shapes.at(1).at(0) / group;
  const std::int64_t cg = ws[1], kr = ws[2], ks = ws[3];
  const Buf& x = *a.in[0];
  const Buf& w = *a.in[1];
  Buf* gx = !dx.empty() ? dx[0] : nullptr;
  Buf* gw = dx.size() > 1 ? dx[1] : nullptr;
  Buf* gb = dx.size() > 2 && a.add_bias ? dx[2] : nullptr;
  const std::int64_t plane_in = xs[2] * xs[3], plane_out = ys[2] * ys[3];
  const auto dy_at = [&](std::int64_t n, std::int64_t oc, std::int64_t oh, std::int64_t ow) {
    return static_cast<double>(
        dy[static_cast<std::size_t>((n * ys[1] + oc) * plane_out + oh * ys[3] + ow)]);
  };
  if (gx != nullptr) {
    parallel_rows(ys[0], [&](std::int64_t n) {
      std::vector<double> acc(static_cast<std::size_t>(xs[1] * plane_in), 0.0);
      for (std::int64_t oc = 0; oc < ys[1]; ++oc) {
        const std::int64_t c0 = (oc / per_group) * cg;
        for (std::int64_t oh = 0; oh < ys[2]; ++oh) {
          for (std::int64_t ow = 0; ow < ys[3]; ++ow) {
            const double d = dy_at(n, oc, oh, ow);
            if (d == 0) continue;
            for (std::int64_t ci = 0; ci < cg; ++ci) {
              const std::int64_t wbase = ((oc * cg) + ci) * kr * ks;
              for (std::int64_t r = 0; r < kr; ++r) {
                const std::int64_t ih = ax[0].local(oh, r);
                if (ih < 0) continue;
                for (std::int64_t s = 0; s < ks; ++s) {
                  const std::int64_t iw = ax[1].local(ow, s);
                  if (iw < 0) continue;
                  acc[static_cast<std::size_t>((c0 + ci) * plane_in + ih * xs[3] + iw)] +=
                      d * w[static_cast<std::size_t>(wbase + r * ks + s)];
                }
              }
            }
          }
        }
      }
      const std::int64_t base = n * xs[1] * plane_in;
      for (std::size_t i = 0; i < acc.size(); ++i)
        (*gx)[static_cast<std::size_t>(base) + i] += static_cast<float>(acc[i]);
    });
  }
  if (gw == nullptr && gb == nullptr) return;
  parallel_rows(ys[1], [&](std::int64_t oc) {
    const std::int64_t c0 = (oc / per_group) * cg;
    for (std::int64_t ci = 0; gw != nullptr && ci < cg; ++ci) {
      for (std::int64_t r = 0; r < kr; ++r) {
        for (std::int64_t s = 0; s < ks; ++s) {
          double acc = 0;
          for (std::int64_t n = 0; n < ys[0]; ++n) {
            const std::int64_t xbase = (n * xs[1] + c0 + ci) * plane_in;
            for (std::int64_t oh = 0; oh < ys[2]; ++oh) {
              const std::int64_t ih = ax[0].local(oh, r);
              if (ih < 0) continue;
              for (std::int64_t ow = 0; ow < ys[3]; ++ow) {
                const std::int64_t iw = ax[1].local(ow, s);
                if (iw < 0) continue;
                acc += dy_at(n, oc, oh, ow) * x[static_cast<std::size_t>(xbase + ih * xs[3] + iw)];
              }
            }
          }
          (*gw)[static_cast<std::size_t>(((oc * cg) + ci) * kr * ks + r * ks + s)] +=
              static_cast<float>(acc);
        }
      }
    }
    if (gb == nullptr) return;
    double acc = 0;
    for (std::int64_t n = 0; n < ys[0]; ++n) {
      for (std::int64_t i = 0; i < plane_out; ++i)
        acc += dy[static_cast<std::size_t>((n * ys[1] + oc) * plane_out + i)];
    }
    (*gb)[static_cast<std::size_t>(oc)] += static_cast<float>(acc);
  });
}

// MaxPool sends each output's gradient to the first element of its window
// that holds the maximum (the one the forward kernel's max kept); AvgPool
// spreads it over the window's elements, divided as the forward divided.
void b_pool(const KernelArgs& a, const Buf& dy, Buf* dx) {
  if (dx == nullptr) return;
  const Shape& xs = a.in_shapes[0];
  const Shape& ys = a.out_shapes[0];
  const PoolWindow win(a);
  const Buf& x = *a.in[0];
  const std::int64_t plane_in = xs[2] * xs[3], plane_out = ys[2] * ys[3];
  parallel_rows(ys[0] * ys[1], [&](std::int64_t nc) {
    const std::int64_t xbase = nc * plane_in;
    std::vector<double> acc(static_cast<std::size_t>(plane_in), 0.0);
    for (std::int64_t oh = 0; oh < ys[2]; ++oh) {
      for (std::int64_t ow = 0; ow < ys[3]; ++ow) {
        const double d = dy[static_cast<std::size_t>(nc * plane_out + oh * ys[3] + ow)];
        std::int64_t best_at = -1;
        double best = -std::numeric_limits<double>::infinity();
        const std::int64_t count = win.visit(oh, ow, [&](std::int64_t at) {
          const double v = x[static_cast<std::size_t>(xbase + at)];
          if (best_at < 0 || v > best) {
            best = v;
            best_at = at;
          }
        });
        if (win.max) {
          if (best_at >= 0) acc[static_cast<std::size_t>(best_at)] += d;
          continue;
        }
        const std::int64_t div = win.divisor(count);
        if (div == 0) continue;
        (void)win.visit(oh, ow, [&](std::int64_t at) {
          acc[static_cast<std::size_t>(at)] += d / static_cast<double>(div);
        });
      }
    }
    for (std::size_t i = 0; i < acc.size(); ++i)
      (*dx)[static_cast<std::size_t>(xbase) + i] += static_cast<float>(acc[i]);
  });
}

// Every element of the block gets its channel's gradient over the whole
// spatial count (the forward divided by it).
void b_global_avg_pool(const KernelArgs& a, const Buf& dy, Buf* dx) {
  if (dx == nullptr) return;
  const Shape& xs = a.in_shapes[0];
  const Shape& full = a.full_in_shapes[0];
  std::int64_t plane = 1, whole = 1;
  for (std::size_t d = 2; d < xs.size(); ++d) {
    plane *= xs[d];
    whole *= full[d];
  }
  parallel_rows(xs[0] * xs[1], [&](std::int64_t nc) {
    const float g =
        static_cast<float>(dy[static_cast<std::size_t>(nc)] / static_cast<double>(whole));
    for (std::int64_t i = 0; i < plane; ++i) (*dx)[static_cast<std::size_t>(nc * plane + i)] += g;
  });
}

void batch_norm_moments(const std::vector<float>& sums, double count, Buf& mean, Buf& var) {
  const std::size_t c = sums.size() / 2;
  mean.resize(c);
  var.resize(c);
  for (std::size_t i = 0; i < c; ++i) {
    const double m = sums[i] / count;
    mean[i] = static_cast<float>(m);
    // The biased variance, as BatchNorm normalises in training.
    var[i] = static_cast<float>(std::max(0.0, sums[c + i] / count - m * m));
  }
}

namespace {

// Per channel ch of a BatchNorm block: 1/sqrt(var + eps).
std::vector<double> batch_norm_inv(const KernelArgs& a) {
  if (a.bn_mean == nullptr || a.bn_var == nullptr)
    throw Error(Errc::kInternal, a.op->name + ": BatchNorm without statistics");
  const double eps = a.op->attrs.get_float("epsilon", 1e-5);
  std::vector<double> inv(a.bn_var->size());
  for (std::size_t i = 0; i < inv.size(); ++i)
    inv[i] = 1.0 / std::sqrt(static_cast<double>((*a.bn_var)[i]) + eps);
  return inv;
}

}  // namespace

std::vector<float> batch_norm_grad_sums(const KernelArgs& a, const Buf& dy) {
  const Shape& xs = a.in_shapes[0];
  const std::int64_t c = xs[1];
  std::int64_t plane = 1;
  for (std::size_t d = 2; d < xs.size(); ++d) plane *= xs[d];
  const std::vector<double> inv = batch_norm_inv(a);
  const Buf& x = *a.in[0];
  std::vector<float> sums(static_cast<std::size_t>(2 * c));
  parallel_rows(c, [&](std::int64_t ch) {
    const auto k = static_cast<std::size_t>(ch);
    const double mean = (*a.bn_mean)[k];
    double s = 0, sx = 0;
    for (std::int64_t n = 0; n < xs[0]; ++n) {
      const std::int64_t base = (n * c + ch) * plane;
      for (std::int64_t i = 0; i < plane; ++i) {
        const auto at = static_cast<std::size_t>(base + i);
        s += dy[at];
        sx += dy[at] * (x[at] - mean) * inv[k];
      }
    }
    sums[k] = static_cast<float>(s);
    sums[static_cast<std::size_t>(c) + k] = static_cast<float>(sx);
  });
  return sums;
}

// With x̂ = (x − mean)·inv: dbias = Σ dy and dscale = Σ dy·x̂ over this
// block (contributions the gradient sync sums); with batch statistics
// dx = scale·inv·(dy − S1/N − x̂·S2/N), S1 = Σ dy and S2 = Σ dy·x̂ over the
// whole batch (bn_grad_sums) and N its count per channel; with running
// statistics dx = scale·inv·dy.
void b_batch_norm(const KernelArgs& a, const Buf& dy, const std::vector<Buf*>& dx) {
  const Shape& xs = a.in_shapes[0];
  const std::int64_t c = xs[1];
  std::int64_t plane = 1;
  for (std::size_t d = 2; d < xs.size(); ++d) plane *= xs[d];
  const Shape& full = a.full_in_shapes[0];
  const double count =
      static_cast<double>(ir::num_elements(full)) / static_cast<double>(full.at(1));
  const std::vector<double> inv = batch_norm_inv(a);
  const Buf& x = *a.in[0];
  const Buf& scale = *a.in[1];
  Buf* gx = !dx.empty() ? dx[0] : nullptr;
  Buf* gs = dx.size() > 1 ? dx[1] : nullptr;
  Buf* gb = dx.size() > 2 ? dx[2] : nullptr;
  const Buf* whole = a.bn_grad_sums;
  if (gx != nullptr) {
    parallel_rows(xs[0] * c, [&](std::int64_t nc) {
      const auto k = static_cast<std::size_t>(nc % c);
      const double mean = (*a.bn_mean)[k];
      const double mul = scale[k] * inv[k];
      const double s1 = whole != nullptr ? (*whole)[k] / count : 0.0;
      const double s2 = whole != nullptr ? (*whole)[static_cast<std::size_t>(c) + k] / count : 0.0;
      for (std::int64_t i = 0; i < plane; ++i) {
        const auto at = static_cast<std::size_t>(nc * plane + i);
        const double xhat = (x[at] - mean) * inv[k];
        (*gx)[at] += static_cast<float>(mul * (dy[at] - s1 - xhat * s2));
      }
    });
  }
  if (gs == nullptr && gb == nullptr) return;
  const std::vector<float> local = batch_norm_grad_sums(a, dy);
  for (std::size_t k = 0; k < static_cast<std::size_t>(c); ++k) {
    if (gb != nullptr) (*gb)[k] += local[k];
    if (gs != nullptr) (*gs)[k] += local[static_cast<std::size_t>(c) + k];
  }
}

}  // namespace recsearch::exec::detail
