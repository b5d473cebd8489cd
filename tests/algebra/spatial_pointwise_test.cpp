// SPDX-License-Identifier: Apache-2.0
// Conv2D, pooling, normalization, softmax and elementwise kinds.
#include <doctest/doctest.h>

#include <limits>
#include <optional>

#include "helpers.hpp"

using namespace algebra_test;

namespace {
ir::Attrs conv_attrs(std::vector<std::int64_t> pads, std::vector<std::int64_t> strides = {1, 1},
                     std::int64_t group = 1, std::vector<std::int64_t> dil = {1, 1}) {
  return {{"pads", pads}, {"strides", strides}, {"group", group}, {"dilations", dil}};
}
}  // namespace

TEST_CASE("Conv2D: n, o parallel; c reduction; h, w window; r, s whole") {
  G g;
  auto x = g.t("x", {8, 3, 32, 32});
  auto w = g.t("w", {16, 3, 3, 3});
  auto bias = g.t("bias", {16});
  auto y = g.t("y", {8, 16, 32, 32});
  const auto s = g.space(g.op("Conv2D", {x, w, bias}, {y}, conv_attrs({1, 1, 1, 1})));
  CHECK(loops(s) == "n/P/8 o/P/16 c/R/3 h/W/32+2 w/W/32+2 r/X/3 s/X/3");
  CHECK(in(s, 0) == "n,c,h,w");
  CHECK(in(s, 1) == "o,c,r,s");
  CHECK(in(s, 2) == "o");
  CHECK(out(s, 0) == "n,o,h,w");
  CHECK(s.flops == doctest::Approx(2.0 * 8 * 16 * 32 * 32 * 3 * 3 * 3));
}

TEST_CASE("Conv2D: strides and dilations change extent and halo") {
  G g;
  auto x = g.t("x", {1, 3, 32, 32});
  auto w = g.t("w", {4, 3, 3, 3});
  auto y1 = g.t("y1", {1, 4, 15, 15});
  auto y2 = g.t("y2", {1, 4, 28, 30});
  const auto s1 = g.space(g.op("Conv2D", {x, w}, {y1}, conv_attrs({0, 0, 0, 0}, {2, 2})));
  CHECK(loops(s1) == "n/P/1 o/P/4 c/R/3 h/W/15+1 w/W/15+1 r/X/3 s/X/3");
  // Dilation 2 on H only: extent 5, halo 4; W keeps extent 3, halo 2.
  const auto s2 =
      g.space(g.op("Conv2D", {x, w}, {y2}, conv_attrs({0, 0, 0, 0}, {1, 1}, 1, {2, 1})));
  CHECK(s2.loops[3].size == 28);
  CHECK(s2.loops[3].halo == 4);
  CHECK(s2.loops[4].size == 30);
  CHECK(s2.loops[4].halo == 2);
}

TEST_CASE("Conv2D: asymmetric pads follow ONNX order [t, l, b, r]") {
  G g;
  auto x = g.t("x", {1, 1, 10, 10});
  auto w = g.t("w", {1, 1, 3, 3});
  auto y = g.t("y", {1, 1, 11, 9});  // H: 10+2+1-3+1 = 11, W: 10+0+1-3+1 = 9
  const auto s = g.space(g.op("Conv2D", {x, w}, {y}, conv_attrs({2, 0, 1, 1})));
  CHECK(s.loops[3].size == 11);
  CHECK(s.loops[4].size == 9);
}

TEST_CASE("Conv2D: groups give a parallel g loop over channels") {
  G g;
  auto x = g.t("x", {2, 8, 16, 16});
  auto w = g.t("w", {8, 2, 3, 3});
  auto b = g.t("b", {8});
  auto y = g.t("y", {2, 8, 16, 16});
  const auto id = g.op("Conv2D", {x, w, b}, {y}, conv_attrs({1, 1, 1, 1}, {1, 1}, 4));
  const auto s = g.space(id);
  CHECK(loops(s) == "n/P/2 g/P/4 og/X/2 cg/X/2 h/W/16+2 w/W/16+2 r/X/3 s/X/3");
  CHECK(in(s, 0) == "n,g,h,w");
  CHECK(in(s, 1) == "g,cg,r,s");
  CHECK(in(s, 2) == "g");
  CHECK(out(s, 0) == "n,g,h,w");
  CHECK(s.flops == doctest::Approx(2.0 * 2 * 8 * 16 * 16 * 2 * 9));
  const std::vector<std::int64_t> none(s.loops.size(), 1);
  const int lg = s.find_loop("g");
  CHECK(algebra::can_cut(g.g, g.g.op(id), s, none, lg, 2));
  CHECK(algebra::can_cut(g.g, g.g.op(id), s, none, lg, 4));
  CHECK_FALSE(algebra::can_cut(g.g, g.g.op(id), s, none, lg, 8));  // only 4 groups
  CHECK_FALSE(algebra::can_cut(g.g, g.g.op(id), s, none, s.find_loop("cg"), 2));
  CHECK(algebra::can_cut(g.g, g.g.op(id), s, none, s.find_loop("h"), 2));
}

TEST_CASE("Conv2D: channel and group errors name the operand") {
  const auto run = [](ir::Shape xs, ir::Shape ws, ir::Shape ys, std::int64_t group,
                      std::optional<ir::Shape> bs = std::nullopt) {
    G g;
    std::vector<ir::TensorId> ins{g.t("x", xs), g.t("w", ws)};
    if (bs) ins.push_back(g.t("b", *bs));
    auto y = g.t("y", ys);
    g.op("Conv2D", ins, {y}, conv_attrs({0, 0, 0, 0}, {1, 1}, group));
    return error_of([&] { (void)g.space(0); });
  };
  Error e = run({1, 6, 8, 8}, {8, 1, 3, 3}, {1, 8, 6, 6}, 4);
  CHECK(e.code() == Errc::kShape);
  CHECK(e.json_path() == "/operators/0/attrs/group");
  CHECK(contains(e.detail(), "C=6"));

  e = run({1, 8, 8, 8}, {8, 3, 3, 3}, {1, 8, 6, 6}, 4);
  CHECK(e.json_path() == "/operators/0/inputs/1");
  CHECK(contains(e.detail(), "needs 2"));

  e = run({1, 8, 8, 8}, {6, 2, 3, 3}, {1, 6, 6, 6}, 4);
  CHECK(e.json_path() == "/operators/0/inputs/1");
  CHECK(contains(e.detail(), "O=6"));

  e = run({1, 3, 8, 8}, {4, 3, 3, 3}, {1, 4, 6, 6}, 1, ir::Shape{5});
  CHECK(e.json_path() == "/operators/0/inputs/2");

  e = run({1, 3, 2, 2}, {4, 3, 3, 3}, {1, 4, 1, 1}, 1);
  CHECK(e.json_path() == "/operators/0/inputs/0");
  CHECK(contains(e.detail(), "exceeds"));

  e = run({1, 3, 8}, {4, 3, 3, 3}, {1, 4, 6, 6}, 1);
  CHECK(e.json_path() == "/operators/0/inputs/0");

  e = run({1, 3, 8, 8}, {4, 3, 3, 3}, {1, 4, 5, 6}, 1);
  CHECK(e.json_path() == "/operators/0/outputs/0");

  e = run({1, 3, 8, 8}, {4, 3, 3, 3}, {1, 4, 6, 6}, 0);
  CHECK(e.code() == Errc::kSchema);
  CHECK(e.json_path() == "/operators/0/attrs/group");

  G g;
  auto x = g.t("x", {1, 3, 8, 8});
  auto w = g.t("w", {4, 3, 3, 3});
  auto y = g.t("y", {1, 4, 6, 6});
  g.op("Conv2D", {x, w}, {y}, {{"strides", std::vector<std::int64_t>{1}}});
  e = error_of([&] { (void)g.space(0); });
  CHECK(e.code() == Errc::kSchema);
  CHECK(e.json_path() == "/operators/0/attrs/strides");
}

TEST_CASE("Conv2D: huge spatial dims and pads do not overflow") {
  G g;
  const std::int64_t big = std::numeric_limits<std::int64_t>::max() - 1;
  auto x = g.t("x", {1, 1, big, 4});
  auto w = g.t("w", {1, 1, 3, 3});
  auto y = g.t("y", {1, 1, 1, 1});
  g.op("Conv2D", {x, w}, {y}, conv_attrs({5, 0, 5, 0}));
  const Error e = error_of([&] { (void)g.space(0); });
  CHECK(e.code() == Errc::kShape);
  CHECK(e.json_path() == "/operators/0/inputs/0");
}

TEST_CASE("MaxPool / AvgPool: window loops, strides default to the kernel") {
  G g;
  auto x = g.t("x", {2, 3, 32, 32});
  auto y = g.t("y", {2, 3, 16, 16});
  auto y2 = g.t("y2", {2, 3, 16, 16});
  auto x5 = g.t("x5", {1, 1, 5, 5});
  auto yf = g.t("yf", {1, 1, 2, 2});
  auto yc = g.t("yc", {1, 1, 3, 3});
  const auto s =
      g.space(g.op("MaxPool", {x}, {y}, {{"kernel_shape", std::vector<std::int64_t>{2, 2}}}));
  CHECK(loops(s) == "n/P/2 c/P/3 h/W/16 w/W/16");
  CHECK(in(s, 0) == "n,c,h,w");
  CHECK(out(s, 0) == "n,c,h,w");
  CHECK(s.flops == doctest::Approx(2.0 * 3 * 16 * 16 * 4));
  const auto s2 = g.space(g.op("AvgPool", {x}, {y2},
                               {{"kernel_shape", std::vector<std::int64_t>{3, 3}},
                                {"strides", std::vector<std::int64_t>{2, 2}},
                                {"pads", std::vector<std::int64_t>{1, 1, 1, 1}}}));
  CHECK(loops(s2) == "n/P/2 c/P/3 h/W/16+1 w/W/16+1");
  // ceil_mode: 5 with kernel 2 stride 2 gives 2 (floor) or 3 (ceil).
  (void)g.space(g.op("MaxPool", {x5}, {yf}, {{"kernel_shape", std::vector<std::int64_t>{2, 2}}}));
  (void)g.space(
      g.op("MaxPool", {x5}, {yc},
           {{"kernel_shape", std::vector<std::int64_t>{2, 2}}, {"ceil_mode", std::int64_t{1}}}));
}

TEST_CASE("MaxPool: a halo past 2^31 - 1 rows is refused, one just under it kept") {
  // Kernel k, stride 1 along H: halo k - 1 rows, output H - k + 1.
  constexpr std::int64_t kMax = std::numeric_limits<std::int32_t>::max();
  for (const std::int64_t kernel : {kMax + 1, kMax + 2}) {
    G g;
    const std::int64_t h = kernel + 3;
    auto x = g.t("x", {1, 1, h, 1});
    auto y = g.t("y", {1, 1, h - kernel + 1, 1});
    g.op("MaxPool", {x}, {y},
         {{"kernel_shape", std::vector<std::int64_t>{kernel, 1}},
          {"strides", std::vector<std::int64_t>{1, 1}}});
    if (kernel - 1 <= kMax) {
      const auto s = g.space(0);
      CHECK(s.loops[2].halo == kMax);
      CHECK(s.loops[2].size == 4);
    } else {
      const Error e = error_of([&] { (void)g.space(0); });
      CHECK(e.code() == Errc::kShape);
      CHECK(e.json_path() == "/operators/0/inputs/0");
      CHECK(std::string(e.what()).find("2147483648 rows per cut") != std::string::npos);
    }
  }
}

TEST_CASE("MaxPool: kernel_shape is required") {
  G g;
  auto x = g.t("x", {2, 3, 32, 32});
  auto y = g.t("y", {2, 3, 16, 16});
  g.op("MaxPool", {x}, {y});
  const Error e = error_of([&] { (void)g.space(0); });
  CHECK(e.code() == Errc::kSchema);
  CHECK(e.json_path() == "/operators/0/attrs/kernel_shape");
}

TEST_CASE("GlobalAvgPool: spatial dims are reductions, size-1 outputs unmapped") {
  G g;
  auto x = g.t("x", {2, 8, 7, 7});
  auto y = g.t("y", {2, 8, 1, 1});
  auto bad = g.t("bad", {2, 8});
  const auto s = g.space(g.op("GlobalAvgPool", {x}, {y}));
  CHECK(loops(s) == "n/P/2 c/P/8 h/R/7 w/R/7");
  CHECK(out(s, 0) == "n,c,-,-");
  CHECK(s.flops == doctest::Approx(2.0 * 8 * 49));
  g.op("GlobalAvgPool", {x}, {bad});
  CHECK(error_of([&] { (void)g.space(1); }).json_path() == "/operators/1/outputs/0");
}

TEST_CASE("BatchNorm: every loop parallel; parameters on c") {
  G g;
  auto x = g.t("x", {4, 8, 5, 5});
  auto sc = g.t("scale", {8});
  auto bi = g.t("bias", {8});
  auto mean = g.t("mean", {8});
  auto var = g.t("var", {8});
  auto y = g.t("y", {4, 8, 5, 5});
  auto bad = g.t("bad", {4});
  auto y2 = g.t("y2", {4, 8, 5, 5});
  const auto s = g.space(g.op("BatchNorm", {x, sc, bi, mean, var}, {y}));
  CHECK(loops(s) == "n/P/4 c/P/8 h/P/5 w/P/5");
  CHECK(in(s, 1) == "c");
  CHECK(in(s, 4) == "c");
  CHECK(s.flops == doctest::Approx(5.0 * 4 * 8 * 25));
  g.op("BatchNorm", {x, bad, bi}, {y2});
  const Error e = error_of([&] { (void)g.space(1); });
  CHECK(e.json_path() == "/operators/1/inputs/1");
  CHECK(e.code() == Errc::kShape);
}

TEST_CASE("LayerNorm / RMSNorm: dims from axis on are whole") {
  G g;
  auto x = g.t("x", {2, 4, 8});
  auto s8 = g.t("s8", {8});
  auto b8 = g.t("b8", {8});
  auto s48 = g.t("s48", {4, 8});
  auto s4 = g.t("s4", {4});
  auto y1 = g.t("y1", {2, 4, 8});
  auto y2 = g.t("y2", {2, 4, 8});
  auto y3 = g.t("y3", {2, 4, 8});
  auto y4 = g.t("y4", {2, 4, 8});
  auto y5 = g.t("y5", {2, 4, 8});
  const auto s = g.space(g.op("LayerNorm", {x, s8, b8}, {y1}));
  CHECK(loops(s) == "d0/P/2 d1/P/4 d2/X/8");
  CHECK(in(s, 1) == "d2");
  CHECK(in(s, 2) == "d2");
  CHECK(s.flops == doctest::Approx(5.0 * 64));
  const auto s1 = g.space(g.op("RMSNorm", {x, s48}, {y2}, {{"axis", std::int64_t{1}}}));
  CHECK(loops(s1) == "d0/P/2 d1/X/4 d2/X/8");
  CHECK(in(s1, 1) == "d1,d2");
  g.op("LayerNorm", {x, s4}, {y3});
  Error e = error_of([&] { (void)g.space(2); });
  CHECK(e.code() == Errc::kShape);
  CHECK(e.json_path() == "/operators/2/inputs/1");
  g.op("LayerNorm", {x, s8}, {y4}, {{"axis", std::int64_t{3}}});
  e = error_of([&] { (void)g.space(3); });
  CHECK(e.code() == Errc::kSchema);
  CHECK(e.json_path() == "/operators/3/attrs/axis");
  g.op("LayerNorm", {x, s8}, {y5}, {{"axis", std::string("last")}});
  e = error_of([&] { (void)g.space(4); });
  CHECK(e.code() == Errc::kSchema);
  CHECK(e.json_path() == "/operators/4/attrs/axis");
}

TEST_CASE("Softmax: the axis is whole and cannot be cut") {
  G g;
  auto x = g.t("x", {2, 10});
  auto y = g.t("y", {2, 10});
  auto z = g.t("z", {2, 10});
  const auto id = g.op("Softmax", {x}, {y});
  const auto s = g.space(id);
  CHECK(loops(s) == "d0/P/2 d1/X/10");
  const std::vector<std::int64_t> none{1, 1};
  CHECK_FALSE(algebra::can_cut(g.g, g.g.op(id), s, none, 1, 2));
  CHECK(algebra::can_cut(g.g, g.g.op(id), s, none, 0, 2));
  const auto s0 = g.space(g.op("LogSoftmax", {x}, {z}, {{"axis", std::int64_t{-2}}}));
  CHECK(loops(s0) == "d0/X/2 d1/P/10");
}

TEST_CASE("Elementwise binary: numpy broadcasting") {
  G g;
  auto a = g.t("a", {4, 1, 8});
  auto b = g.t("b", {3, 1});
  auto c = g.t("c", {4, 3, 8});
  const auto s = g.space(g.op("Add", {a, b}, {c}));
  CHECK(loops(s) == "d0/P/4 d1/P/3 d2/P/8");
  CHECK(in(s, 0) == "d0,-,d2");
  CHECK(in(s, 1) == "d1,-");
  CHECK(out(s, 0) == "d0,d1,d2");
  CHECK(s.flops == doctest::Approx(96.0));

  auto p = g.t("p", {3});
  auto q = g.t("q", {});
  auto r = g.t("r", {3});
  const auto s2 = g.space(g.op("Mul", {p, q}, {r}));
  CHECK(loops(s2) == "d0/P/3");
  CHECK(in(s2, 1).empty());
}

TEST_CASE("Elementwise binary: errors") {
  G g;
  auto a = g.t("a", {4, 3});
  auto b = g.t("b", {5});
  auto c = g.t("c", {4, 3});
  auto d = g.t("d", {3});
  auto e1 = g.t("e1", {4, 4});
  g.op("Sub", {a, b}, {c});
  g.op("Maximum", {a, d}, {e1});
  Error e = error_of([&] { (void)g.space(0); });
  CHECK(e.code() == Errc::kShape);
  CHECK(e.json_path() == "/operators/0/inputs/1");
  CHECK(contains(e.detail(), "do not broadcast"));
  e = error_of([&] { (void)g.space(1); });
  CHECK(e.json_path() == "/operators/1/outputs/0");
}

TEST_CASE("BiasAdd: b along axis (default last)") {
  G g;
  auto x = g.t("x", {2, 3, 4});
  auto b4 = g.t("b4", {4});
  auto b3 = g.t("b3", {3});
  auto y1 = g.t("y1", {2, 3, 4});
  auto y2 = g.t("y2", {2, 3, 4});
  auto y3 = g.t("y3", {2, 3, 4});
  CHECK(in(g.space(g.op("BiasAdd", {x, b4}, {y1})), 1) == "d2");
  CHECK(in(g.space(g.op("BiasAdd", {x, b3}, {y2}, {{"axis", std::int64_t{1}}})), 1) == "d1");
  g.op("BiasAdd", {x, b3}, {y3});
  CHECK(error_of([&] { (void)g.space(2); }).json_path() == "/operators/2/inputs/1");
}

TEST_CASE("Unary kinds: identity mapping; Dropout mask; Cast changes dtype") {
  G g;
  auto x = g.t("x", {2, 3});
  auto y = g.t("y", {2, 3});
  auto yg = g.t("yg", {2, 3});
  auto yd = g.t("yd", {2, 3});
  auto mask = g.t("mask", {2, 3}, ir::DType::Bool);
  auto yc = g.t("yc", {2, 3}, ir::DType::I32);
  auto bad = g.t("bad", {3, 2});
  const auto s = g.space(g.op("ReLU", {x}, {y}));
  CHECK(loops(s) == "d0/P/2 d1/P/3");
  CHECK(in(s, 0) == "d0,d1");
  CHECK(s.flops == doctest::Approx(6.0));
  CHECK(g.space(g.op("GeLU", {x}, {yg})).flops > 6.0);
  const auto sd = g.space(g.op("Dropout", {x}, {yd, mask}, {{"ratio", 0.1}}));
  CHECK(out(sd, 1) == "d0,d1");
  CHECK(loops(g.space(g.op("Cast", {x}, {yc}, {{"to", std::string("i32")}}))) == "d0/P/2 d1/P/3");
  g.op("Tanh", {x}, {bad});
  CHECK(error_of([&] { (void)g.space(4); }).json_path() == "/operators/4/outputs/0");
}

TEST_CASE("every elementwise kind: parallel identity loops, broadcasting for binary kinds") {
  for (const char* type : {"Add", "Sub", "Mul", "Div", "Pow", "Maximum", "Minimum"}) {
    CAPTURE(type);
    G g;
    auto a = g.t("a", {5, 1});
    auto b = g.t("b", {7});
    auto c = g.t("c", {5, 7});
    const auto s = g.space(g.op(type, {a, b}, {c}));
    CHECK(loops(s) == "d0/P/5 d1/P/7");
    CHECK(in(s, 0) == "d0,-");
    CHECK(in(s, 1) == "d1");
    CHECK(s.flops == doctest::Approx(35.0));
  }
  for (const char* type : {"ReLU", "GeLU", "SiLU", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg",
                           "Cast", "Dropout", "Identity"}) {
    CAPTURE(type);
    G g;
    auto x = g.t("x", {4, 1, 3});
    auto y = g.t("y", {4, 1, 3});
    auto z = g.t("z", {4, 3});
    const auto s = g.space(g.op(type, {x}, {y}));
    CHECK(loops(s) == "d0/P/4 d1/P/1 d2/P/3");
    CHECK(out(s, 0) == "d0,d1,d2");
    CHECK(s.flops >= 12.0);
    g.op(type, {x}, {z});
    CHECK(error_of([&] { (void)g.space(1); }).json_path() == "/operators/1/outputs/0");
  }
}
