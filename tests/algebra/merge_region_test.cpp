// SPDX-License-Identifier: Apache-2.0
// Merge regions: torch's attention views its heads as [t*b, d] (the batch b
// the inner factor) around the output projection and back as [t, b, d];
// the region's spaces cut b through it as a strided shard, and anything
// that is not exactly such a region keeps the ordinary reshape rule.
#include <doctest/doctest.h>

#include "helpers.hpp"

using namespace algebra_test;

namespace {

using Ints = std::vector<std::int64_t>;

// [t, b*h, hd] -> [t*b, h*hd] -> MatMul -> + bias -> [t, b, h*hd], as the
// exporter writes nn.MultiheadAttention's output projection (t 4, b 2,
// h 4, hd 3). `extra_use` gives the merged tensor a second consumer.
struct Heads {
  G g;
  ir::OpId merge = 0, matmul = 0, bias = 0, split = 0;
  explicit Heads(Ints x_shape = {4, 8, 3}, Ints merged = {8, 12}, Ints back = {4, 2, 12},
                 bool extra_use = false) {
    const auto x = g.t("x", x_shape);
    const auto y = g.t("y", merged);
    const auto w = g.t("w", {merged[1], merged[1]});
    const auto z = g.t("z", merged);
    const auto bv = g.t("b", {merged[1]});
    const auto u = g.t("u", merged);
    const auto v = g.t("v", back);
    merge = g.op("Reshape", {x}, {y});
    matmul = g.op("MatMul", {y, w}, {z});
    bias = g.op("Add", {bv, z}, {u});
    split = g.op("Reshape", {u}, {v});
    if (extra_use) g.op("ReLU", {y}, {g.t("r", merged)});
  }
};

bool cut(const G& g, ir::OpId id, int loop, std::int64_t k) {
  const auto s = g.space(id);
  const std::vector<std::int64_t> none(s.loops.size(), 1);
  return algebra::can_cut(g.g, g.g.op(id), s, none, loop, k);
}

}  // namespace

TEST_CASE("merge region: the merge cuts the batch, the inner factor of the merged dim") {
  Heads h;
  const auto s = h.g.space(h.merge);
  // The merged dim's loop is the batch (the outer factor of x's dim 1); the
  // sequence, its outer factor, is whole here.
  CHECK(loops(s) == "in0/X/4 d0/P/2 in2/X/3 d1/X/12");
  CHECK(in(s, 0) == "in0,d0,in2");
  CHECK(out(s, 0) == "d0,d1");
  REQUIRE(s.strided.size() == 1);
  CHECK(s.outer_of(true, 0, 0) == 4);
  CHECK(s.outer_of(false, 0, 1) == 1);
  CHECK(s.cuts_inner_factor(s.find_loop("d0")));
  CHECK_FALSE(s.cuts_inner_factor(s.find_loop("in0")));
  CHECK(cut(h.g, h.merge, s.find_loop("d0"), 2));
  CHECK_FALSE(cut(h.g, h.merge, s.find_loop("d0"), 4));  // the batch is 2
  CHECK_FALSE(cut(h.g, h.merge, s.find_loop("in0"), 2));
}

TEST_CASE("merge region: the row operators cut their rows strided, within the batch") {
  Heads h;
  const auto mm = h.g.space(h.matmul);
  CHECK(loops(mm) == "i/P/2 k/R/12 j/P/12");
  CHECK(mm.outer_of(false, 0, 0) == 4);
  CHECK(mm.outer_of(true, 0, 0) == 4);
  CHECK(mm.outer_of(false, 1, 0) == 1);  // the weight is no row operand
  CHECK(cut(h.g, h.matmul, mm.find_loop("i"), 2));
  CHECK_FALSE(cut(h.g, h.matmul, mm.find_loop("i"), 4));  // 8 rows, but a batch of 2
  const auto add = h.g.space(h.bias);
  CHECK(add.outer_of(false, 1, 0) == 4);  // the rows are the Add's second input
  CHECK(add.outer_of(true, 0, 0) == 4);
  CHECK(add.loops[static_cast<std::size_t>(add.outputs[0][0])].size == 2);
}

TEST_CASE("merge region: the split back maps the batch to its dim 1") {
  Heads h;
  const auto s = h.g.space(h.split);
  CHECK(loops(s) == "d0/X/4 d1/P/2 d2/P/12");
  CHECK(in(s, 0) == "d1,d2");  // the row width is a group of its own
  CHECK(out(s, 0) == "d0,d1,d2");
  CHECK(s.outer_of(false, 0, 0) == 4);
  CHECK(s.outer_of(true, 0, 1) == 1);
  CHECK(s.cuts_inner_factor(s.find_loop("d1")));
  CHECK_FALSE(s.cuts_inner_factor(s.find_loop("d2")));
  CHECK(cut(h.g, h.split, s.find_loop("d1"), 2));
  CHECK_FALSE(cut(h.g, h.split, s.find_loop("d0"), 2));
}

TEST_CASE("merge region: no region without the exact merge, split and single uses") {
  SUBCASE("batch not dividing the merge's dim 1: the ordinary rule") {
    // [4, 6, 2] -> [16, 3]: the merged dim's inner factor 4 does not divide 6.
    Heads h({4, 6, 2}, {16, 3}, {4, 4, 3});
    const auto s = h.g.space(h.merge);
    CHECK(s.strided.empty());
    CHECK(loops(s) == "d0/P/4 in1/X/6 in2/X/2 d1/X/3");
    CHECK(h.g.space(h.matmul).strided.empty());
    CHECK(loops(h.g.space(h.matmul)) == "i/P/16 k/R/3 j/P/3");
    CHECK(h.g.space(h.split).strided.empty());
  }
  SUBCASE("a split that does not give the merge's outer factor back") {
    Heads h({4, 8, 3}, {8, 12}, {2, 4, 12});
    CHECK(h.g.space(h.merge).strided.empty());
    CHECK(h.g.space(h.matmul).strided.empty());
    CHECK(h.g.space(h.split).strided.empty());
  }
  SUBCASE("a row operator with a second computed input") {
    // The projection's weight is itself computed (a transpose): walking up
    // from the projection would not single out the rows, so no member
    // takes the region (each member must find the same one).
    G g;
    const auto x = g.t("x", {4, 8, 3});
    const auto y = g.t("y", {8, 12});
    const auto w0 = g.t("w0", {12, 12});
    const auto w = g.t("w", {12, 12});
    const auto z = g.t("z", {8, 12});
    const auto v = g.t("v", {4, 2, 12});
    const auto merge = g.op("Reshape", {x}, {y});
    g.op("Transpose", {w0}, {w}, {{"perm", Ints{1, 0}}});
    const auto mm = g.op("MatMul", {y, w}, {z});
    const auto split = g.op("Reshape", {z}, {v});
    CHECK(g.space(merge).strided.empty());
    CHECK(g.space(mm).strided.empty());
    CHECK(g.space(split).strided.empty());
  }
  SUBCASE("the merged tensor used twice") {
    Heads h({4, 8, 3}, {8, 12}, {4, 2, 12}, /*extra_use=*/true);
    CHECK(h.g.space(h.merge).strided.empty());
    CHECK(h.g.space(h.bias).strided.empty());
    CHECK(loops(h.g.space(h.merge)) == "d0/P/4 in1/X/8 in2/X/3 d1/X/12");
  }
}
