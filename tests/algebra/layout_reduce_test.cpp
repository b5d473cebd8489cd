// SPDX-License-Identifier: Apache-2.0
// Reshape family, Transpose, Concat, Split, Slice, reductions, Gather,
// OneHot and SoftmaxCrossEntropy.
#include <doctest/doctest.h>

#include <limits>

#include "helpers.hpp"

using namespace algebra_test;

namespace {
using Ints = std::vector<std::int64_t>;
}  // namespace

TEST_CASE("Reshape: merge keeps a cut on the outer factor only") {
  G g;
  auto x = g.t("x", {6, 4});
  auto y = g.t("y", {24});
  const auto id = g.op("Reshape", {x}, {y});
  const auto s = g.space(id);
  CHECK(loops(s) == "d0/P/6 in1/X/4");
  CHECK(in(s, 0) == "d0,in1");
  CHECK(out(s, 0) == "d0");
  CHECK(s.flops == 0.0);
  const std::vector<std::int64_t> none{1, 1};
  const auto& op = g.g.op(id);
  CHECK(algebra::can_cut(g.g, op, s, none, 0, 2));
  CHECK(algebra::can_cut(g.g, op, s, none, 0, 3));
  CHECK(algebra::can_cut(g.g, op, s, none, 0, 6));
  CHECK_FALSE(algebra::can_cut(g.g, op, s, none, 0, 4));  // does not divide 6
  CHECK_FALSE(algebra::can_cut(g.g, op, s, none, 1, 2));  // inner factor: whole
  CHECK(algebra::can_cut(g.g, op, s, {2, 1}, 0, 3));
  CHECK_FALSE(algebra::can_cut(g.g, op, s, {2, 1}, 0, 2));  // 6/2 = 3 left
}

TEST_CASE("Reshape: split group [8, 512] -> [8, 8, 64]") {
  G g;
  auto x = g.t("x", {8, 512});
  auto y = g.t("y", {8, 8, 64});
  const auto id = g.op("Reshape", {x}, {y});
  const auto s = g.space(id);
  CHECK(loops(s) == "d0/P/8 d1/P/8 d2/X/64");
  CHECK(in(s, 0) == "d0,d1");
  CHECK(out(s, 0) == "d0,d1,d2");
  const std::vector<std::int64_t> none{1, 1, 1};
  CHECK(algebra::can_cut(g.g, g.g.op(id), s, none, 1, 8));
  CHECK_FALSE(algebra::can_cut(g.g, g.g.op(id), s, none, 1, 16));
}

TEST_CASE("Reshape: interleaved group uses the gcd of the outer dims") {
  G g;
  auto x = g.t("x", {4, 6});
  auto y = g.t("y", {6, 4});
  const auto id = g.op("Reshape", {x}, {y});
  const auto s = g.space(id);
  CHECK(loops(s) == "d0/P/2 in1/X/6 d1/X/4");
  CHECK(in(s, 0) == "d0,in1");
  CHECK(out(s, 0) == "d0,d1");
  const std::vector<std::int64_t> none{1, 1, 1};
  CHECK(algebra::can_cut(g.g, g.g.op(id), s, none, 0, 2));
  CHECK_FALSE(algebra::can_cut(g.g, g.g.op(id), s, none, 0, 3));
  CHECK_FALSE(algebra::can_cut(g.g, g.g.op(id), s, none, 0, 4));
}

TEST_CASE("Reshape: size-1 dims are unmapped; zero-size tensors get whole loops") {
  G g;
  auto x = g.t("x", {1, 6});
  auto y = g.t("y", {6, 1});
  const auto s = g.space(g.op("Reshape", {x}, {y}));
  CHECK(loops(s) == "d0/P/6");
  CHECK(in(s, 0) == "-,d0");
  CHECK(out(s, 0) == "d0,-");

  auto z = g.t("z", {0, 4});
  auto zz = g.t("zz", {4, 0});
  const auto s0 = g.space(g.op("Reshape", {z}, {zz}));
  for (const auto& l : s0.loops) CHECK(l.role == algebra::DimRole::Whole);
  CHECK(in(s0, 0) == "in0,in1");
}

TEST_CASE("Reshape: element count must match, and must not overflow") {
  G g;
  auto x = g.t("x", {6, 4});
  auto y = g.t("y", {25});
  g.op("Reshape", {x}, {y});
  Error e = error_of([&] { (void)g.space(0); });
  CHECK(e.code() == Errc::kShape);
  CHECK(e.json_path() == "/operators/0/outputs/0");
  CHECK(contains(e.detail(), "24 elements"));
  CHECK(contains(e.detail(), "25"));

  const std::int64_t big = std::int64_t{1} << 62;
  auto hx = g.t("hx", {big, 4});
  auto hy = g.t("hy", {4, big});
  g.op("Reshape", {hx}, {hy});
  e = error_of([&] { (void)g.space(1); });
  CHECK(e.code() == Errc::kShape);
  CHECK(e.json_path() == "/operators/1/inputs/0");
}

TEST_CASE("Flatten, Squeeze, Unsqueeze infer and check their outputs") {
  G g;
  auto x = g.t("x", {2, 3, 4});
  auto f = g.t("f", {2, 12});
  auto f0 = g.t("f0", {1, 24});
  auto fbad = g.t("fbad", {6, 4});
  const auto s = g.space(g.op("Flatten", {x}, {f}));
  CHECK(loops(s) == "d0/P/2 d1/P/3 in2/X/4");
  CHECK(in(s, 0) == "d0,d1,in2");
  (void)g.space(g.op("Flatten", {x}, {f0}, {{"axis", std::int64_t{0}}}));
  g.op("Flatten", {x}, {fbad});
  CHECK(error_of([&] { (void)g.space(2); }).json_path() == "/operators/2/outputs/0");

  auto q = g.t("q", {1, 3, 1, 4});
  auto q1 = g.t("q1", {3, 1, 4});
  auto q2 = g.t("q2", {3, 4});
  auto q3 = g.t("q3", {1, 1, 4});
  (void)g.space(g.op("Squeeze", {q}, {q1}, {{"axes", Ints{0}}}));
  const auto sq = g.space(g.op("Squeeze", {q}, {q2}));
  CHECK(in(sq, 0) == "-,d0,-,d1");
  g.op("Squeeze", {q}, {q3}, {{"axes", Ints{1}}});
  Error e = error_of([&] { (void)g.space(5); });
  CHECK(e.code() == Errc::kShape);
  CHECK(e.json_path() == "/operators/5/attrs/axes");

  auto u = g.t("u", {1, 3, 4, 1});
  auto u2 = g.t("u2", {1, 3, 4, 1});
  const auto su = g.space(g.op("Unsqueeze", {q2}, {u}, {{"axes", Ints{0, -1}}}));
  CHECK(out(su, 0) == "-,d1,d2,-");
  g.op("Unsqueeze", {q2}, {u2});
  e = error_of([&] { (void)g.space(7); });
  CHECK(e.code() == Errc::kSchema);
  CHECK(e.json_path() == "/operators/7/attrs/axes");
}

TEST_CASE("Transpose: loops are output dims; input dim perm[i] maps to loop i") {
  G g;
  auto x = g.t("x", {2, 3, 4});
  auto y = g.t("y", {4, 2, 3});
  auto r = g.t("r", {4, 3, 2});
  const auto s = g.space(g.op("Transpose", {x}, {y}, {{"perm", Ints{2, 0, 1}}}));
  CHECK(loops(s) == "d0/P/4 d1/P/2 d2/P/3");
  CHECK(in(s, 0) == "d1,d2,d0");
  CHECK(out(s, 0) == "d0,d1,d2");
  const auto sr = g.space(g.op("Transpose", {x}, {r}));
  CHECK(in(sr, 0) == "d2,d1,d0");
}

TEST_CASE("Transpose: perm must be a permutation of the right length") {
  for (const Ints& perm : {Ints{0, 0, 1}, Ints{0, 1}, Ints{0, 1, 3}}) {
    G g;
    auto x = g.t("x", {2, 3, 4});
    auto y = g.t("y", {2, 3, 4});
    g.op("Transpose", {x}, {y}, {{"perm", perm}});
    const Error e = error_of([&] { (void)g.space(0); });
    CHECK(e.code() == Errc::kSchema);
    CHECK(e.json_path() == "/operators/0/attrs/perm");
  }
  G g;
  auto x = g.t("x", {2, 3});
  auto y = g.t("y", {2, 3});
  g.op("Transpose", {x}, {y}, {{"perm", Ints{1, 0}}});
  CHECK(error_of([&] { (void)g.space(0); }).json_path() == "/operators/0/outputs/0");
}

TEST_CASE("Concat: the axis is whole and unmapped in inputs") {
  G g;
  auto a = g.t("a", {2, 3});
  auto b = g.t("b", {2, 5});
  auto c = g.t("c", {2, 8});
  auto c2 = g.t("c2", {2, 8});
  const auto s = g.space(g.op("Concat", {a, b}, {c}, {{"axis", std::int64_t{1}}}));
  CHECK(loops(s) == "d0/P/2 d1/X/8");
  CHECK(in(s, 0) == "d0,-");
  CHECK(in(s, 1) == "d0,-");
  CHECK(out(s, 0) == "d0,d1");
  (void)g.space(g.op("Concat", {a, b}, {c2}, {{"axis", std::int64_t{-1}}}));
}

TEST_CASE("Concat: errors") {
  G g;
  auto a = g.t("a", {2, 3});
  auto b = g.t("b", {4, 5});
  auto c = g.t("c", {2, 8});
  auto d = g.t("d", {2, 8});
  g.op("Concat", {a, b}, {c}, {{"axis", std::int64_t{1}}});
  g.op("Concat", {a, a}, {d}, {{"axis", std::int64_t{2}}});
  Error e = error_of([&] { (void)g.space(0); });
  CHECK(e.code() == Errc::kShape);
  CHECK(e.json_path() == "/operators/0/inputs/1");
  CHECK(contains(e.detail(), "only the concat axis"));
  e = error_of([&] { (void)g.space(1); });
  CHECK(e.code() == Errc::kSchema);
  CHECK(e.json_path() == "/operators/1/attrs/axis");
  CHECK(contains(e.detail(), "out of range"));
}

TEST_CASE("Split: equal parts or explicit sizes; axis whole") {
  G g;
  auto x = g.t("x", {6, 4});
  auto o0 = g.t("o0", {2, 4});
  auto o1 = g.t("o1", {2, 4});
  auto o2 = g.t("o2", {2, 4});
  auto p0 = g.t("p0", {1, 4});
  auto p1 = g.t("p1", {5, 4});
  const auto s = g.space(g.op("Split", {x}, {o0, o1, o2}));
  CHECK(loops(s) == "d0/X/6 d1/P/4");
  CHECK(in(s, 0) == "d0,d1");
  CHECK(out(s, 2) == "-,d1");
  (void)g.space(g.op("Split", {x}, {p0, p1}, {{"split", Ints{1, 5}}}));

  auto q0 = g.t("q0", {1, 4});
  auto q1 = g.t("q1", {4, 4});
  g.op("Split", {x}, {q0, q1}, {{"split", Ints{1, 4}}});
  Error e = error_of([&] { (void)g.space(2); });
  CHECK(e.code() == Errc::kShape);
  CHECK(e.json_path() == "/operators/2/attrs/split");

  auto r0 = g.t("r0", {3, 4});
  auto r1 = g.t("r1", {3, 5});
  g.op("Split", {x}, {r0, r1});
  e = error_of([&] { (void)g.space(3); });
  CHECK(e.json_path() == "/operators/3/outputs/1");
}

TEST_CASE("Slice: sliced axes whole, others parallel; ONNX clamping") {
  G g;
  auto x = g.t("x", {10, 20});
  auto y = g.t("y", {10, 6});
  auto y2 = g.t("y2", {3, 20});
  auto y3 = g.t("y3", {10, 20});
  auto y4 = g.t("y4", {10, 20});
  auto y5 = g.t("y5", {1, 20});
  const std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  const std::int64_t kMin = std::numeric_limits<std::int64_t>::min();
  const auto s =
      g.space(g.op("Slice", {x}, {y}, {{"starts", Ints{2}}, {"ends", Ints{8}}, {"axes", Ints{1}}}));
  CHECK(loops(s) == "d0/P/10 d1/X/6");
  CHECK(in(s, 0) == "d0,-");
  CHECK(out(s, 0) == "d0,d1");
  (void)g.space(g.op("Slice", {x}, {y2}, {{"starts", Ints{-3}}, {"ends", Ints{kMax}}}));
  // Reversal keeps the size but is still a sliced (whole) axis.
  const auto rev = g.space(
      g.op("Slice", {x}, {y3},
           {{"starts", Ints{-1}}, {"ends", Ints{kMin}}, {"axes", Ints{0}}, {"steps", Ints{-1}}}));
  CHECK(loops(rev) == "d0/X/10 d1/P/20");
  const auto full = g.space(g.op("Slice", {x}, {y4}, {{"starts", Ints{0}}, {"ends", Ints{kMax}}}));
  CHECK(loops(full) == "d0/P/10 d1/P/20");
  const auto step = g.space(g.op(
      "Slice", {x}, {y5}, {{"starts", Ints{0}}, {"ends", Ints{10}}, {"steps", Ints{kMax / 4}}}));
  CHECK(loops(step) == "d0/X/1 d1/P/20");
}

TEST_CASE("Slice: errors") {
  G g;
  auto x = g.t("x", {10, 20});
  auto y0 = g.t("y0", {10, 20});
  auto y1 = g.t("y1", {10, 20});
  auto y2 = g.t("y2", {10, 20});
  g.op("Slice", {x}, {y0}, {{"starts", Ints{0}}, {"ends", Ints{5}}, {"steps", Ints{0}}});
  g.op("Slice", {x}, {y1});
  g.op("Slice", {x}, {y2}, {{"starts", Ints{0}}, {"ends", Ints{5}}, {"axes", Ints{2}}});
  Error e = error_of([&] { (void)g.space(0); });
  CHECK(e.code() == Errc::kSchema);
  CHECK(e.json_path() == "/operators/0/attrs/steps");
  e = error_of([&] { (void)g.space(1); });
  CHECK(e.json_path() == "/operators/1/attrs/starts");
  e = error_of([&] { (void)g.space(2); });
  CHECK(e.json_path() == "/operators/2/attrs/axes");
}

TEST_CASE("Reduce: reduced axes are reductions; kept size-1 dims unmapped") {
  G g;
  auto x = g.t("x", {2, 3, 4});
  auto k = g.t("k", {2, 1, 4});
  auto n = g.t("n", {2, 4});
  auto all = g.t("all", {});
  const auto s = g.space(g.op("ReduceSum", {x}, {k}, {{"axes", Ints{1}}}));
  CHECK(loops(s) == "d0/P/2 d1/R/3 d2/P/4");
  CHECK(out(s, 0) == "d0,-,d2");
  CHECK(s.flops == doctest::Approx(24.0));
  const auto s2 = g.space(g.op("ReduceMax", {x}, {n}, {{"axes", Ints{-2}}, {"keepdims", false}}));
  CHECK(out(s2, 0) == "d0,d2");
  const auto s3 = g.space(g.op("ReduceMean", {x}, {all}, {{"keepdims", std::int64_t{0}}}));
  CHECK(loops(s3) == "d0/R/2 d1/R/3 d2/R/4");
}

TEST_CASE("Reduce: axes out of range or repeated") {
  G g;
  auto x = g.t("x", {2, 3, 4});
  auto y0 = g.t("y0", {2, 3, 4});
  auto y1 = g.t("y1", {2, 3, 4});
  g.op("ReduceSum", {x}, {y0}, {{"axes", Ints{3}}});
  g.op("ReduceSum", {x}, {y1}, {{"axes", Ints{1, -2}}});
  Error e = error_of([&] { (void)g.space(0); });
  CHECK(e.code() == Errc::kSchema);
  CHECK(e.json_path() == "/operators/0/attrs/axes");
  e = error_of([&] { (void)g.space(1); });
  CHECK(e.code() == Errc::kSchema);
  CHECK(contains(e.detail(), "twice"));
}

TEST_CASE("Gather: v reduction, index dims and table dims parallel") {
  G g;
  auto t = g.t("table", {100, 16});
  auto i = g.t("ids", {4, 8}, ir::DType::I64);
  auto o = g.t("o", {4, 8, 16});
  auto t3 = g.t("t3", {3, 100, 16});
  auto i1 = g.t("i1", {5}, ir::DType::I32);
  auto o3 = g.t("o3", {3, 5, 16});
  auto bad = g.t("bad", {4, 16});
  const auto s = g.space(g.op("Gather", {t, i}, {o}));
  CHECK(loops(s) == "v/R/100 b0/P/4 b1/P/8 h0/P/16");
  CHECK(in(s, 0) == "v,h0");
  CHECK(in(s, 1) == "b0,b1");
  CHECK(out(s, 0) == "b0,b1,h0");
  CHECK(s.flops == doctest::Approx(512.0));
  const auto s1 = g.space(g.op("Gather", {t3, i1}, {o3}, {{"axis", std::int64_t{1}}}));
  CHECK(in(s1, 0) == "h0,v,h1");
  CHECK(out(s1, 0) == "h0,b0,h1");
  g.op("Gather", {t, i}, {bad});
  CHECK(error_of([&] { (void)g.space(2); }).json_path() == "/operators/2/outputs/0");
}

TEST_CASE("OneHot: depth inserted at axis") {
  G g;
  auto i = g.t("i", {4, 8}, ir::DType::I64);
  auto o = g.t("o", {4, 8, 10});
  auto o0 = g.t("o0", {10, 4, 8});
  auto o2 = g.t("o2", {4, 8, 10});
  const auto s = g.space(g.op("OneHot", {i}, {o}, {{"depth", std::int64_t{10}}}));
  CHECK(loops(s) == "d0/P/4 d1/P/8 d2/P/10");
  CHECK(in(s, 0) == "d0,d1");
  const auto s0 =
      g.space(g.op("OneHot", {i}, {o0}, {{"depth", std::int64_t{10}}, {"axis", std::int64_t{0}}}));
  CHECK(in(s0, 0) == "d1,d2");
  g.op("OneHot", {i}, {o2});
  CHECK(error_of([&] { (void)g.space(2); }).json_path() == "/operators/2/attrs/depth");
}

TEST_CASE("SoftmaxCrossEntropy: class loop reduction; batch loops by reduction mode") {
  G g;
  auto logits = g.t("logits", {4, 10});
  auto labels = g.t("labels", {4}, ir::DType::I64);
  auto soft = g.t("soft", {4, 10});
  auto fl = g.t("fl", {4});
  auto loss = g.t("loss", {});
  auto per = g.t("per", {4});
  auto loss2 = g.t("loss2", {});
  auto loss3 = g.t("loss3", {});
  auto loss4 = g.t("loss4", {});
  const auto s = g.space(g.op("SoftmaxCrossEntropy", {logits, labels}, {loss}));
  CHECK(loops(s) == "b0/R/4 c/R/10");
  CHECK(in(s, 0) == "b0,c");
  CHECK(in(s, 1) == "b0");
  CHECK(out(s, 0).empty());
  const auto sn = g.space(
      g.op("SoftmaxCrossEntropy", {logits, labels}, {per}, {{"reduction", std::string("none")}}));
  CHECK(loops(sn) == "b0/P/4 c/R/10");
  CHECK(out(sn, 0) == "b0");
  const auto ss = g.space(g.op("SoftmaxCrossEntropy", {logits, soft}, {loss2}));
  CHECK(in(ss, 1) == "b0,c");
  g.op("SoftmaxCrossEntropy", {logits, fl}, {loss3});
  Error e = error_of([&] { (void)g.space(3); });
  CHECK(e.code() == Errc::kShape);
  CHECK(e.json_path() == "/operators/3/inputs/1");
  CHECK(contains(e.detail(), "integer"));
  g.op("SoftmaxCrossEntropy", {logits, labels}, {loss4}, {{"reduction", std::string("avg")}});
  e = error_of([&] { (void)g.space(4); });
  CHECK(e.code() == Errc::kSchema);
  CHECK(e.json_path() == "/operators/4/attrs/reduction");
}
