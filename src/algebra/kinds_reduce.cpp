// SPDX-License-Identifier: Apache-2.0
// Reducing and indexing kinds: ReduceSum / ReduceMean / ReduceMax, Gather,
// OneHot and SoftmaxCrossEntropy, plus the opaque fallback for unknown
// operator types. Gather's vocabulary loop and the cross-entropy class loop
// are Reduction dims: a sharded table or vocabulary leaves a partial result
// that an all-reduce completes (vocab-parallel embedding and loss).
#include <algorithm>
#include <string>
#include <vector>

#include "algebra/space_builder.hpp"

namespace recsearch::algebra::detail {

// ---- ReduceSum / ReduceMean / ReduceMax ------------------------------------
//
// `axes` default to all dims; ONNX-18 axes given as a second input are not
// readable here, so they count as "all" too (importers should fold them
// into the attribute).
void build_reduce(SpaceBuilder& b) {
  b.expect_inputs(1, 2);
  b.expect_outputs(1, 1);
  const ir::Shape& x = b.in(0);
  const auto r = static_cast<std::int64_t>(x.size());
  std::vector<bool> reduced(x.size(), true);
  if (const auto axes = b.attr_ints("axes")) {
    std::fill(reduced.begin(), reduced.end(), false);
    for (const std::int64_t a : b.normalize_axes(*axes, r, "axes")) {
      reduced[static_cast<std::size_t>(a)] = true;
    }
  }
  const bool keep = b.attr_int("keepdims", 1) != 0;
  ir::Shape out;
  for (std::size_t d = 0; d < x.size(); ++d) {
    if (!reduced[d]) {
      out.push_back(x[d]);
    } else if (keep) {
      out.push_back(1);
    }
  }
  b.set_inferred(0, out);
  if (b.outputs_checked()) return;
  std::size_t od = 0;
  for (std::size_t d = 0; d < x.size(); ++d) {
    const int l =
        b.add_loop(indexed("d", d), x[d], reduced[d] ? DimRole::Reduction : DimRole::Parallel);
    b.map_in(0, d, l);
    if (!reduced[d]) {
      b.map_out(0, od++, l);
    } else if (keep) {
      ++od;  // the kept size-1 dim holds the reduced value: no loop
    }
  }
  b.set_flops(product_d(x));
}

// ---- Gather ----------------------------------------------------------------
//
// table [pre..., V, post...] and indices [b...] give [pre..., b..., post...].
// Loops: v (Reduction), b0.. for the index dims, h0.. for the table's other
// dims in table order.
void build_gather(SpaceBuilder& b) {
  b.expect_inputs(2, 2);
  b.expect_outputs(1, 1);
  const ir::Shape& t = b.in(0);
  const ir::Shape& idx = b.in(1);
  const auto axis = static_cast<std::size_t>(b.axis_attr("axis", 0, b.in_rank(0)));
  ir::Shape out(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(axis));
  out.insert(out.end(), idx.begin(), idx.end());
  out.insert(out.end(), t.begin() + static_cast<std::ptrdiff_t>(axis) + 1, t.end());
  b.set_inferred(0, out);
  if (b.outputs_checked()) return;

  const int lv = b.add_loop("v", t[axis], DimRole::Reduction);
  std::vector<int> lb;
  for (std::size_t i = 0; i < idx.size(); ++i) {
    lb.push_back(b.add_loop(indexed("b", i), idx[i], DimRole::Parallel));
  }
  std::vector<int> lh;
  for (std::size_t d = 0; d < t.size(); ++d) {
    if (d == axis) continue;
    lh.push_back(b.add_loop(indexed("h", lh.size()), t[d], DimRole::Parallel));
  }
  std::size_t h = 0;
  for (std::size_t d = 0; d < t.size(); ++d) {
    b.map_in(0, d, d == axis ? lv : lh[h++]);
  }
  for (std::size_t i = 0; i < idx.size(); ++i) b.map_in(1, i, lb[i]);
  std::size_t od = 0;
  for (std::size_t k = 0; k < axis; ++k) b.map_out(0, od++, lh[k]);
  for (std::size_t i = 0; i < idx.size(); ++i) b.map_out(0, od++, lb[i]);
  for (std::size_t k = axis; k < lh.size(); ++k) b.map_out(0, od++, lh[k]);
  b.set_flops(product_d(out));
}

// ---- OneHot ----------------------------------------------------------------
void build_one_hot(SpaceBuilder& b) {
  b.expect_inputs(1, 3);  // ONNX passes depth and values as inputs
  b.expect_outputs(1, 1);
  const ir::Shape& ind = b.in(0);
  const auto r = static_cast<std::int64_t>(ind.size());
  const auto axis = static_cast<std::size_t>(b.axis_attr("axis", -1, r + 1));
  std::optional<std::int64_t> depth;
  if (b.has_attr("depth")) {
    depth = b.attr_int("depth", 0);
    if (*depth < 0) b.fail_attr("depth", "'depth' must be >= 0, got " + std::to_string(*depth));
  } else if (b.num_inputs() == 1) {
    b.fail_attr("depth", "'depth' is required");
  }
  if (depth) {
    ir::Shape out = ind;
    out.insert(out.begin() + static_cast<std::ptrdiff_t>(axis), *depth);
    b.set_inferred(0, out);
  }
  if (b.outputs_checked()) return;
  const ir::Shape& y = b.out(0);
  if (!depth) {
    bool ok = y.size() == ind.size() + 1;
    for (std::size_t d = 0, i = 0; ok && d < y.size(); ++d) {
      if (d != axis) ok = y[d] == ind[i++];
    }
    if (!ok) {
      b.fail_shape(b.out_path(0), "output " + b.describe_out(0) + " must be indices " +
                                      b.describe_in(0) + " with the depth inserted at axis " +
                                      std::to_string(axis));
    }
  }
  std::size_t i = 0;
  for (std::size_t d = 0; d < y.size(); ++d) {
    const int l = b.add_loop(indexed("d", d), y[d], DimRole::Parallel);
    b.map_out(0, d, l);
    if (d != axis) b.map_in(0, i++, l);
  }
  b.set_flops(product_d(y));
}

// ---- SoftmaxCrossEntropy ---------------------------------------------------
//
// logits [..., C]; labels are class indices [...] (integer dtype) or soft
// labels shaped like the logits; optional class weights [C]. With a "mean"
// or "sum" reduction the batch loops are reductions too (scalar output).
void build_softmax_cross_entropy(SpaceBuilder& b) {
  b.expect_inputs(2, 3);
  b.expect_outputs(1, 1);
  b.expect_in_min_rank(0, 1, "logits");
  const ir::Shape& logits = b.in(0);
  const ir::Shape& labels = b.in(1);
  const std::int64_t classes = logits.back();
  const ir::Shape batch(logits.begin(), logits.end() - 1);
  const bool soft = labels == logits;
  if (!soft) {
    if (labels != batch) {
      b.fail_shape(b.in_path(1), "labels " + b.describe_in(1) + " must be " + fmt_shape(batch) +
                                     " (class indices) or " + fmt_shape(logits) +
                                     " (soft labels) for logits " + b.describe_in(0));
    }
    switch (b.in_tensor(1).dtype) {
      case ir::DType::I64:
      case ir::DType::I32:
      case ir::DType::I16:
      case ir::DType::I8:
      case ir::DType::U8: break;
      default:
        b.fail_shape(b.in_path(1), "labels " + b.describe_in(1) +
                                       " hold class indices and need an integer dtype, not " +
                                       std::string(ir::dtype_name(b.in_tensor(1).dtype)));
    }
  }
  if (b.num_inputs() == 3 && (b.in(2).size() != 1 || b.in(2)[0] != classes)) {
    b.fail_shape(b.in_path(2), "class weights " + b.describe_in(2) + " must be [" +
                                   std::to_string(classes) + "]");
  }
  const std::string reduction = b.attr_string("reduction", "mean");
  if (reduction != "mean" && reduction != "sum" && reduction != "none") {
    b.fail_attr("reduction",
                "'reduction' must be \"mean\", \"sum\" or \"none\", got \"" + reduction + "\"");
  }
  const bool none = reduction == "none";
  b.set_inferred(0, none ? batch : ir::Shape{});
  if (b.outputs_checked()) return;

  std::vector<int> lb;
  for (std::size_t d = 0; d < batch.size(); ++d) {
    lb.push_back(
        b.add_loop(indexed("b", d), batch[d], none ? DimRole::Parallel : DimRole::Reduction));
  }
  const int lc = b.add_loop("c", classes, DimRole::Reduction);
  for (std::size_t d = 0; d < batch.size(); ++d) {
    b.map_in(0, d, lb[d]);
    b.map_in(1, d, lb[d]);
    if (none) b.map_out(0, d, lb[d]);
  }
  b.map_in(0, batch.size(), lc);
  if (soft) b.map_in(1, batch.size(), lc);
  if (b.num_inputs() == 3) b.map_in(2, 0, lc);
  b.set_flops(5.0 * product_d(logits));
}

// ---- unknown kinds ---------------------------------------------------------
//
// Nothing is known about an unknown type: it runs replicated, every operand
// unmapped, and no shapes are checked or inferred.
void build_opaque(SpaceBuilder& b) {
  b.set_opaque();
  b.set_flops(0.0);
}

}  // namespace recsearch::algebra::detail
