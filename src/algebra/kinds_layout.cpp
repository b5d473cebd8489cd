// SPDX-License-Identifier: Apache-2.0
// Data-movement kinds: Reshape / Flatten / Squeeze / Unsqueeze, Transpose,
// Concat, Split and Slice. They do no arithmetic (flops 0); what matters is
// which cuts survive them, which the loop mapping encodes: a reshape keeps a
// cut only on the outermost factor of each merged or split group, a
// transpose permutes dims, and concatenated / split / sliced axes are Whole.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "algebra/space_builder.hpp"

namespace recsearch::algebra::detail {

namespace {

// Pairs the non-1 dims of x and y into minimal groups with equal products.
// Each group yields one Parallel loop on its outermost dims (sized by their
// gcd, so a cut divides both) and a Whole loop for every other dim.
void map_reshape(SpaceBuilder& b, const ir::Shape& x, const ir::Shape& y, bool empty) {
  std::vector<std::size_t> xi;
  std::vector<std::size_t> yi;
  for (std::size_t d = 0; d < x.size(); ++d) {
    if (x[d] != 1) xi.push_back(d);
  }
  for (std::size_t d = 0; d < y.size(); ++d) {
    if (y[d] != 1) yi.push_back(d);
  }
  const auto whole_x = [&](std::size_t d) {
    b.map_in(0, d, b.add_loop(indexed("in", d), x[d], DimRole::Whole));
  };
  const auto whole_y = [&](std::size_t d) {
    b.map_out(0, d, b.add_loop(indexed("d", d), y[d], DimRole::Whole));
  };
  std::size_t a = 0;
  std::size_t c = 0;
  // With a zero dim products say nothing about which dims correspond.
  while (!empty && a < xi.size() && c < yi.size()) {
    const std::size_t x0 = xi[a++];
    const std::size_t y0 = yi[c++];
    std::vector<std::size_t> gx;
    std::vector<std::size_t> gy;
    std::int64_t px = x[x0];
    std::int64_t py = y[y0];
    bool ok = true;
    while (ok && px != py) {
      if (px < py) {
        if (a == xi.size()) {
          ok = false;
          break;
        }
        const auto next = checked_mul(px, x[xi[a]]);
        ok = next.has_value();
        px = next.value_or(px);
        gx.push_back(xi[a++]);
      } else {
        if (c == yi.size()) {
          ok = false;
          break;
        }
        const auto next = checked_mul(py, y[yi[c]]);
        ok = next.has_value();
        py = next.value_or(py);
        gy.push_back(yi[c++]);
      }
    }
    const int l = b.add_loop(indexed("d", y0), std::gcd(x[x0], y[y0]), DimRole::Parallel);
    b.map_in(0, x0, l);
    b.map_out(0, y0, l);
    for (const std::size_t d : gx) whole_x(d);
    for (const std::size_t d : gy) whole_y(d);
  }
  for (; a < xi.size(); ++a) whole_x(xi[a]);
  for (; c < yi.size(); ++c) whole_y(yi[c]);
}

// A merge region's reshape (merge_region.cpp) cuts the inner factor of the
// merged dim instead of its outer one: the merge's input dim 1, whose outer
// factor is that inner factor, and the merged dim 0 share a loop of the
// inner factor's size, as do the split's merged dim 0 and its output dim 1;
// the outer factor's loop is Whole. The rows' other loops are as
// map_reshape laid them out, which put dims 0 and 1 in one group.
void stride_region_reshape(SpaceBuilder& b, const MergeRegion& r) {
  OpSpace& s = b.space();
  const bool merge = b.id() == r.merge;
  OperandLoops& merged = merge ? s.outputs : s.inputs;
  const OperandLoops& unmerged = merge ? s.inputs : s.outputs;
  const int outer = merged[0][0];
  const int inner = unmerged[0][1];
  if (outer == kUnmapped || inner == kUnmapped) return;  // not one group: nothing to revise
  LoopDim& in = s.loops[static_cast<std::size_t>(inner)];
  in.name = indexed("d", merge ? 0 : 1);
  in.size = r.inner;
  in.role = DimRole::Parallel;
  LoopDim& out = s.loops[static_cast<std::size_t>(outer)];
  out.name = merge ? "in0" : "d0";
  out.role = DimRole::Whole;
  merged.set(0, 0, inner);
  s.strided.push_back({merge, 0, 0, r.outer});
}

}  // namespace

// ---- Reshape, Flatten, Squeeze, Unsqueeze ----------------------------------
namespace {

// Flatten's output: x folded to 2-D at 'axis'.
void infer_flatten(SpaceBuilder& b) {
  const ir::Shape& x = b.in(0);
  const auto r = static_cast<std::int64_t>(x.size());
  std::int64_t axis = b.attr_int("axis", 1);
  if (axis < -r || axis > r) {
    b.fail_attr("axis", "axis " + std::to_string(axis) + " in 'axis' is out of range for rank " +
                            std::to_string(r) + " (valid: " + std::to_string(-r) + " to " +
                            std::to_string(r) + ")");
  }
  if (axis < 0) axis += r;
  const std::span<const std::int64_t> xs(x);
  const auto ax = static_cast<std::size_t>(axis);
  b.set_inferred(0, {b.product_or_fail(xs.first(ax), b.in_path(0), "x"),
                     b.product_or_fail(xs.subspan(ax), b.in_path(0), "x")});
}

// Squeeze's output when its axes are known (an attribute, or every size-1
// dim when there is no second input).
void infer_squeeze(SpaceBuilder& b) {
  const ir::Shape& x = b.in(0);
  const auto r = static_cast<std::int64_t>(x.size());
  if (const auto axes = b.attr_ints("axes")) {
    const auto norm = b.normalize_axes(*axes, r, "axes");
    ir::Shape out;
    for (std::size_t d = 0; d < x.size(); ++d) {
      const bool squeezed =
          std::find(norm.begin(), norm.end(), static_cast<std::int64_t>(d)) != norm.end();
      if (squeezed && x[d] != 1) {
        b.fail_shape(b.attr_path("axes"), "dim " + std::to_string(d) + " of x " + b.describe_in(0) +
                                              " has size " + std::to_string(x[d]) +
                                              "; only size-1 dims can be squeezed");
      }
      if (!squeezed) out.push_back(x[d]);
    }
    b.set_inferred(0, out);
  } else if (b.num_inputs() == 1) {
    ir::Shape out;
    for (const std::int64_t d : x) {
      if (d != 1) out.push_back(d);
    }
    b.set_inferred(0, out);
  }
}

// Unsqueeze's output when its axes are an attribute.
void infer_unsqueeze(SpaceBuilder& b) {
  const ir::Shape& x = b.in(0);
  if (const auto axes = b.attr_ints("axes")) {
    const auto out_rank = static_cast<std::int64_t>(x.size() + axes->size());
    const auto norm = b.normalize_axes(*axes, out_rank, "axes");
    ir::Shape out(static_cast<std::size_t>(out_rank), 1);
    std::size_t src = 0;
    for (std::size_t d = 0; d < out.size(); ++d) {
      if (std::find(norm.begin(), norm.end(), static_cast<std::int64_t>(d)) == norm.end()) {
        out[d] = x[src++];
      }
    }
    b.set_inferred(0, out);
  } else if (b.num_inputs() == 1) {
    b.fail_attr("axes", "'axes' is required");
  }
}

}  // namespace

void build_reshape(SpaceBuilder& b) {
  const ir::OpKind k = b.kind();
  // Reshape's target shape and (opset 13) Squeeze/Unsqueeze axes may come
  // as a second, constant input; the output tensor then tells the shape.
  b.expect_inputs(1, k == ir::OpKind::Flatten ? 1 : 2);
  b.expect_outputs(1, 1);
  const ir::Shape& x = b.in(0);
  if (k == ir::OpKind::Flatten) {
    infer_flatten(b);
  } else if (k == ir::OpKind::Squeeze) {
    infer_squeeze(b);
  } else if (k == ir::OpKind::Unsqueeze) {
    infer_unsqueeze(b);
  }
  if (b.outputs_checked()) return;

  const ir::Shape& y = b.out(0);
  const std::int64_t nx = b.product_or_fail(x, b.in_path(0), "x");
  const std::int64_t ny = b.product_or_fail(y, b.out_path(0), "output");
  if (nx != ny) {
    b.fail_shape(b.out_path(0), "element count changes: x " + b.describe_in(0) + " has " +
                                    std::to_string(nx) + " elements, output " + b.describe_out(0) +
                                    " has " + std::to_string(ny));
  }
  map_reshape(b, x, y, nx == 0);
  if (b.id() && (k == ir::OpKind::Reshape || k == ir::OpKind::Flatten)) {
    if (const auto r = merge_region(b.graph(), *b.id())) stride_region_reshape(b, *r);
  }
  b.set_flops(0.0);
}

// ---- Transpose -------------------------------------------------------------
void build_transpose(SpaceBuilder& b) {
  b.expect_inputs(1, 1);
  b.expect_outputs(1, 1);
  const ir::Shape& x = b.in(0);
  const auto r = static_cast<std::int64_t>(x.size());
  std::vector<std::int64_t> perm;
  if (const auto p = b.attr_ints("perm")) {
    if (static_cast<std::int64_t>(p->size()) != r) {
      b.fail_attr("perm", "'perm' " + fmt_shape(*p) + " has " + std::to_string(p->size()) +
                              " entries but x " + b.describe_in(0) + " has rank " +
                              std::to_string(r));
    }
    std::vector<bool> seen(x.size(), false);
    for (const std::int64_t v : *p) {
      if (v < -r || v >= r || seen[static_cast<std::size_t>(v < 0 ? v + r : v)]) {
        b.fail_attr("perm", "'perm' " + fmt_shape(*p) + " is not a permutation of 0.." +
                                std::to_string(r - 1));
      }
      perm.push_back(v < 0 ? v + r : v);
      seen[static_cast<std::size_t>(perm.back())] = true;
    }
  } else {
    for (std::int64_t d = r - 1; d >= 0; --d) perm.push_back(d);
  }
  ir::Shape out;
  for (const std::int64_t p : perm) out.push_back(x[static_cast<std::size_t>(p)]);
  b.set_inferred(0, out);
  if (b.outputs_checked()) return;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const int l = b.add_loop(indexed("d", i), out[i], DimRole::Parallel);
    b.map_out(0, i, l);
    b.map_in(0, static_cast<std::size_t>(perm[i]), l);
  }
  b.set_flops(0.0);
}

// ---- Concat ----------------------------------------------------------------
void build_concat(SpaceBuilder& b) {
  b.expect_inputs(1, std::numeric_limits<std::size_t>::max());
  b.expect_outputs(1, 1);
  const ir::Shape& x0 = b.in(0);
  const auto axis = static_cast<std::size_t>(b.axis_attr("axis", 0, b.in_rank(0)));
  std::int64_t total = 0;
  for (std::size_t j = 0; j < b.num_inputs(); ++j) {
    const ir::Shape& s = b.in(j);
    if (s.size() != x0.size()) {
      b.fail_shape(b.in_path(j), "input " + std::to_string(j) + " " + b.describe_in(j) +
                                     " has rank " + std::to_string(s.size()) + " but input 0 " +
                                     b.describe_in(0) + " has rank " + std::to_string(x0.size()));
    }
    for (std::size_t d = 0; d < s.size(); ++d) {
      if (d != axis && s[d] != x0[d]) {
        b.fail_shape(b.in_path(j), "dim " + std::to_string(d) + " of input " + std::to_string(j) +
                                       " " + b.describe_in(j) + " is " + std::to_string(s[d]) +
                                       " but input 0 " + b.describe_in(0) + " has " +
                                       std::to_string(x0[d]) + "; only the concat axis " +
                                       std::to_string(axis) + " may differ");
      }
    }
    const auto sum = checked_add(total, s[axis]);
    if (!sum) b.fail_shape(b.in_path(j), "concatenated axis length overflows");
    total = *sum;
  }
  ir::Shape out = x0;
  out[axis] = total;
  b.set_inferred(0, out);
  if (b.outputs_checked()) return;
  for (std::size_t d = 0; d < out.size(); ++d) {
    // Each input covers its own range of the concat axis: no common loop.
    const bool cat = d == axis;
    const int l = b.add_loop(indexed("d", d), out[d], cat ? DimRole::Whole : DimRole::Parallel);
    b.map_out(0, d, l);
    if (cat) continue;
    for (std::size_t j = 0; j < b.num_inputs(); ++j) b.map_in(j, d, l);
  }
  b.set_flops(0.0);
}

// ---- Split -----------------------------------------------------------------
namespace {

// The part sizes along `axis`: the 'split' attribute (checked to sum to the
// dim), equal parts when there is no second input, else unknown.
std::optional<std::vector<std::int64_t>> split_sizes(const SpaceBuilder& b, std::size_t axis) {
  const std::size_t n = b.num_outputs();
  const std::int64_t dim = b.in(0)[axis];
  std::optional<std::vector<std::int64_t>> sizes = b.attr_ints("split");
  if (sizes) {
    if (sizes->size() != n) {
      b.fail_attr("split", "'split' " + fmt_shape(*sizes) + " has " +
                               std::to_string(sizes->size()) + " entries for " + std::to_string(n) +
                               " outputs");
    }
    std::int64_t sum = 0;
    for (const std::int64_t s : *sizes) {
      const auto next = s >= 0 ? checked_add(sum, s) : std::nullopt;
      if (!next)
        b.fail_attr("split",
                    "'split' " + fmt_shape(*sizes) + " has a negative or overflowing entry");
      sum = *next;
    }
    if (sum != dim) {
      b.fail_shape(b.attr_path("split"), "'split' " + fmt_shape(*sizes) + " sums to " +
                                             std::to_string(sum) + " but dim " +
                                             std::to_string(axis) + " of x " + b.describe_in(0) +
                                             " is " + std::to_string(dim));
    }
  } else if (b.num_inputs() == 1) {
    // Equal parts; as in ONNX 18, a remainder makes the last part smaller.
    const auto nn = static_cast<std::int64_t>(n);
    const std::int64_t chunk = dim / nn + (dim % nn != 0 ? 1 : 0);
    const std::int64_t last = dim - chunk * (nn - 1);
    if (last < 0) {
      b.fail_shape(b.in_path(0), "dim " + std::to_string(axis) + " of x " + b.describe_in(0) +
                                     " cannot be split into " + std::to_string(n) + " parts");
    }
    sizes = std::vector<std::int64_t>(n, chunk);
    sizes->back() = last;
  }
  return sizes;
}

// With sizes known only at run time, the outputs must be parts of x along
// `axis` that add up to it.
void check_split_outputs(const SpaceBuilder& b, std::size_t axis) {
  const ir::Shape& x = b.in(0);
  std::int64_t sum = 0;
  for (std::size_t j = 0; j < b.num_outputs(); ++j) {
    const ir::Shape& s = b.out(j);
    bool ok = s.size() == x.size();
    for (std::size_t d = 0; ok && d < s.size(); ++d) ok = d == axis || s[d] == x[d];
    const auto next = ok ? checked_add(sum, s[axis]) : std::nullopt;
    if (!next) {
      b.fail_shape(b.out_path(j), "output " + std::to_string(j) + " " + b.describe_out(j) +
                                      " is not a part of x " + b.describe_in(0) + " along axis " +
                                      std::to_string(axis));
    }
    sum = *next;
  }
  if (sum != x[axis]) {
    b.fail_shape(b.path() + "/outputs", "outputs add up to " + std::to_string(sum) +
                                            " along axis " + std::to_string(axis) + " but x " +
                                            b.describe_in(0) + " has " + std::to_string(x[axis]));
  }
}

}  // namespace

void build_split(SpaceBuilder& b) {
  b.expect_inputs(1, 2);  // opset 13 passes `split` as a second input
  b.expect_outputs(1, std::numeric_limits<std::size_t>::max());
  const ir::Shape& x = b.in(0);
  const auto axis = static_cast<std::size_t>(b.axis_attr("axis", 0, b.in_rank(0)));
  const std::size_t n = b.num_outputs();
  const std::optional<std::vector<std::int64_t>> sizes = split_sizes(b, axis);
  if (sizes) {
    for (std::size_t j = 0; j < n; ++j) {
      ir::Shape s = x;
      s[axis] = (*sizes)[j];
      b.set_inferred(j, s);
    }
  }
  if (b.outputs_checked()) return;
  if (!sizes) check_split_outputs(b, axis);
  for (std::size_t d = 0; d < x.size(); ++d) {
    const bool cut = d == axis;
    const int l = b.add_loop(indexed("d", d), x[d], cut ? DimRole::Whole : DimRole::Parallel);
    b.map_in(0, d, l);
    if (cut) continue;
    for (std::size_t j = 0; j < n; ++j) b.map_out(j, d, l);
  }
  b.set_flops(0.0);
}

// ---- Slice -----------------------------------------------------------------
namespace {

std::int64_t clamp64(std::int64_t v, std::int64_t lo, std::int64_t hi) noexcept {
  return v < lo ? lo : (v > hi ? hi : v);
}

// ONNX Slice on one axis: returns the output length and whether the
// selection differs from the whole axis.
std::pair<std::int64_t, bool> slice_axis(std::int64_t dim, std::int64_t start, std::int64_t end,
                                         std::int64_t step) noexcept {
  if (dim == 0) return {0, false};
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  std::int64_t len = 0;
  if (step > 0) {
    start = clamp64(start, 0, dim);
    end = clamp64(end, 0, dim);
    if (end > start) {
      len = static_cast<std::int64_t>(static_cast<std::uint64_t>(end - start - 1) /
                                      static_cast<std::uint64_t>(step)) +
            1;
    }
  } else {
    start = clamp64(start, 0, dim - 1);
    end = clamp64(end, -1, dim - 1);
    if (start > end) {
      // |step| computed unsigned so that INT64_MIN is fine.
      const std::uint64_t mag = std::uint64_t{0} - static_cast<std::uint64_t>(step);
      len = static_cast<std::int64_t>(static_cast<std::uint64_t>(start - end - 1) / mag) + 1;
    }
  }
  const bool whole_axis = step == 1 && start == 0 && len == dim;
  return {len, !whole_axis};
}

}  // namespace

void build_slice(SpaceBuilder& b) {
  // Opset 10+ passes starts/ends/axes/steps as inputs; they are unmapped.
  b.expect_inputs(1, 5);
  b.expect_outputs(1, 1);
  const ir::Shape& x = b.in(0);
  const auto r = static_cast<std::int64_t>(x.size());
  std::vector<bool> sliced(x.size(), false);
  const auto starts = b.attr_ints("starts");
  if (starts) {
    const auto ends = b.attr_ints("ends");
    if (!ends) b.fail_attr("ends", "'ends' is required with 'starts'");
    const std::size_t n = starts->size();
    if (ends->size() != n) {
      b.fail_attr("ends", "'ends' has " + std::to_string(ends->size()) + " entries, 'starts' has " +
                              std::to_string(n));
    }
    std::vector<std::int64_t> axes(n);
    std::iota(axes.begin(), axes.end(), 0);
    if (const auto a = b.attr_ints("axes")) {
      if (a->size() != n) {
        b.fail_attr("axes", "'axes' has " + std::to_string(a->size()) + " entries, 'starts' has " +
                                std::to_string(n));
      }
      axes = *a;
    }
    axes = b.normalize_axes(axes, r, "axes");
    std::vector<std::int64_t> steps(n, 1);
    if (const auto s = b.attr_ints("steps")) {
      if (s->size() != n) {
        b.fail_attr("steps", "'steps' has " + std::to_string(s->size()) +
                                 " entries, 'starts' has " + std::to_string(n));
      }
      steps = *s;
    }
    ir::Shape out = x;
    for (std::size_t i = 0; i < n; ++i) {
      if (steps[i] == 0) b.fail_attr("steps", "'steps' must not contain 0");
      const auto a = static_cast<std::size_t>(axes[i]);
      const auto [len, partial] = slice_axis(x[a], (*starts)[i], (*ends)[i], steps[i]);
      out[a] = len;
      sliced[a] = partial;
    }
    b.set_inferred(0, out);
  } else if (b.num_inputs() == 1) {
    b.fail_attr("starts", "'starts' is required");
  }
  if (b.outputs_checked()) return;
  const ir::Shape& y = b.out(0);
  if (!starts) {
    // Bounds are runtime inputs: every dim the output shortens is sliced.
    if (y.size() != x.size()) {
      b.fail_shape(b.out_path(0),
                   "output " + b.describe_out(0) + " must have the rank of x " + b.describe_in(0));
    }
    for (std::size_t d = 0; d < x.size(); ++d) {
      if (y[d] > x[d]) {
        b.fail_shape(b.out_path(0), "dim " + std::to_string(d) + " of output " + b.describe_out(0) +
                                        " is larger than in x " + b.describe_in(0));
      }
      sliced[d] = y[d] != x[d];
    }
  }
  for (std::size_t d = 0; d < x.size(); ++d) {
    const int l = b.add_loop(indexed("d", d), y[d], sliced[d] ? DimRole::Whole : DimRole::Parallel);
    b.map_out(0, d, l);
    if (!sliced[d]) b.map_in(0, d, l);
  }
  b.set_flops(0.0);
}

}  // namespace recsearch::algebra::detail
