// SPDX-License-Identifier: Apache-2.0
// Entry points of the algebra: role names, can_cut edge cases, output-shape
// inference, the parallel build_op_spaces (deterministic errors), and a
// randomized robustness sweep over every kind: only recsearch::Error may
// escape, and every space that builds satisfies the structural invariants.
#include <doctest/doctest.h>
#include <tbb/global_control.h>

#include <cmath>
#include <limits>
#include <random>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "helpers.hpp"

using namespace algebra_test;

TEST_CASE("dim_role_name spells every role") {
  CHECK(algebra::dim_role_name(algebra::DimRole::Parallel) == "parallel");
  CHECK(algebra::dim_role_name(algebra::DimRole::Reduction) == "reduction");
  CHECK(algebra::dim_role_name(algebra::DimRole::Window) == "window");
  CHECK(algebra::dim_role_name(algebra::DimRole::Whole) == "whole");
}

TEST_CASE("can_cut: roles, divisibility, earlier splits and bad arguments") {
  G g;
  auto x = g.t("x", {12, 10});
  auto w = g.t("w", {10, 7});
  auto y = g.t("y", {12, 7});
  const auto id = g.op("MatMul", {x, w}, {y});
  const auto s = g.space(id);
  const auto& op = g.g.op(id);
  const std::vector<std::int64_t> none{1, 1, 1};
  CHECK(algebra::can_cut(g.g, op, s, none, 0, 2));
  CHECK(algebra::can_cut(g.g, op, s, none, 0, 3));
  CHECK_FALSE(algebra::can_cut(g.g, op, s, none, 0, 5));
  CHECK(algebra::can_cut(g.g, op, s, none, 1, 5));        // reduction k = 10
  CHECK_FALSE(algebra::can_cut(g.g, op, s, none, 2, 2));  // j = 7
  CHECK(algebra::can_cut(g.g, op, s, none, 2, 7));
  CHECK(algebra::can_cut(g.g, op, s, {6, 1, 1}, 0, 2));
  CHECK_FALSE(algebra::can_cut(g.g, op, s, {6, 1, 1}, 0, 3));
  CHECK_FALSE(algebra::can_cut(g.g, op, s, {12, 1, 1}, 0, 2));
  CHECK(algebra::can_cut(g.g, op, s, none, 0, 1));
  CHECK_FALSE(algebra::can_cut(g.g, op, s, none, 0, 0));
  CHECK_FALSE(algebra::can_cut(g.g, op, s, none, 0, -2));
  CHECK_FALSE(algebra::can_cut(g.g, op, s, none, 3, 2));
  CHECK_FALSE(algebra::can_cut(g.g, op, s, none, -1, 2));
  CHECK_FALSE(algebra::can_cut(g.g, op, s, {1, 1}, 0, 2));     // wrong splits size
  CHECK_FALSE(algebra::can_cut(g.g, op, s, {0, 1, 1}, 0, 2));  // nonsense split
  CHECK_FALSE(algebra::can_cut(g.g, op, s, {std::int64_t{1} << 62, 1, 1}, 0, 8));  // overflow
}

TEST_CASE("can_cut: operand dims are checked too, and empty loops are never cut") {
  G g;
  // Conv with group: loop g has size 2 while x's channel dim is 6.
  auto x = g.t("x", {1, 6, 4, 4});
  auto w = g.t("w", {4, 3, 1, 1});
  auto y = g.t("y", {1, 4, 4, 4});
  const auto id = g.op("Conv2D", {x, w}, {y}, {{"group", std::int64_t{2}}});
  const auto s = g.space(id);
  const std::vector<std::int64_t> none(s.loops.size(), 1);
  CHECK(algebra::can_cut(g.g, g.g.op(id), s, none, s.find_loop("g"), 2));
  CHECK_FALSE(algebra::can_cut(g.g, g.g.op(id), s, none, s.find_loop("r"), 1));  // whole

  auto e = g.t("e", {0, 4});
  auto f = g.t("f", {0, 4});
  const auto id2 = g.op("ReLU", {e}, {f});
  const auto s2 = g.space(id2);
  CHECK_FALSE(algebra::can_cut(g.g, g.g.op(id2), s2, {1, 1}, 0, 2));
  CHECK(algebra::can_cut(g.g, g.g.op(id2), s2, {1, 1}, 1, 2));
}

TEST_CASE("infer_output_shapes: graph operators and operators being assembled") {
  G g;
  auto x = g.t("x", {32, 784});
  auto w = g.t("w", {784, 512});
  auto h = g.t("h", {32, 512});
  auto r = g.t("r", {512, 32});
  auto a = g.t("a", {6, 4});
  auto p0 = g.t("p0", {3, 4});
  auto p1 = g.t("p1", {3, 4});
  const auto mm = g.op("MatMul", {x, w}, {h});
  const auto rs = g.op("Reshape", {h}, {r});
  const auto sp = g.op("Split", {a}, {p0, p1});

  auto shapes = algebra::infer_output_shapes(g.g, g.g.op(mm));
  REQUIRE(shapes.size() == 1);
  REQUIRE(shapes[0].has_value());
  CHECK(*shapes[0] == ir::Shape{32, 512});

  shapes = algebra::infer_output_shapes(g.g, g.g.op(rs));
  REQUIRE(shapes.size() == 1);
  CHECK_FALSE(shapes[0].has_value());

  shapes = algebra::infer_output_shapes(g.g, g.g.op(sp));
  REQUIRE(shapes.size() == 2);
  CHECK(shapes[1] == std::optional<ir::Shape>(ir::Shape{3, 4}));

  // Not (yet) in the graph: the kind comes from the type, outputs may be
  // placeholders, and error paths are relative to the operator.
  ir::Operator fresh;
  fresh.name = "fresh";
  fresh.type = "Transpose";
  fresh.inputs = {x};
  fresh.outputs = {999};
  shapes = algebra::infer_output_shapes(g.g, fresh);
  REQUIRE(shapes.size() == 1);
  CHECK(shapes[0] == std::optional<ir::Shape>(ir::Shape{784, 32}));

  fresh.type = "MatMul";
  fresh.inputs = {x, x};
  const Error e = error_of([&] { (void)algebra::infer_output_shapes(g.g, fresh); });
  CHECK(e.code() == Errc::kShape);
  CHECK(e.json_path() == "/inputs/1");

  fresh.type = "SomethingElse";
  shapes = algebra::infer_output_shapes(g.g, fresh);
  REQUIRE(shapes.size() == 1);
  CHECK_FALSE(shapes[0].has_value());

  fresh.type = "ReLU";
  fresh.inputs = {12345};
  CHECK(error_of([&] { (void)algebra::infer_output_shapes(g.g, fresh); }).code() ==
        Errc::kUnknownName);
}

TEST_CASE("build_op_space: operator id out of range is a usage error") {
  G g;
  CHECK(error_of([&] { (void)algebra::build_op_space(g.g, 3); }).code() == Errc::kUsage);
}

TEST_CASE("build_op_spaces: results in id order; the lowest failing id wins at any thread count") {
  G g;
  constexpr int kOps = 3000;
  auto prev = g.t("t0", {8, 16});
  for (int i = 0; i < kOps; ++i) {
    // Ops 1100 and 2500 produce a wrongly shaped output.
    const bool bad = i == 1100 || i == 2500;
    auto next = g.t("t" + std::to_string(i + 1), bad ? ir::Shape{16, 8} : ir::Shape{8, 16});
    g.op(i % 2 == 0 ? "ReLU" : "Tanh", {prev}, {next});
    prev = next;
  }
  for (const int threads : {1, 2, 8}) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism,
                              static_cast<std::size_t>(threads));
    const Error e = error_of([&] { (void)algebra::build_op_spaces(g.g); });
    CHECK(e.json_path() == "/operators/1100/outputs/0");
  }

  G ok;
  auto a = ok.t("a", {4, 6});
  auto b = ok.t("b", {6, 2});
  auto c = ok.t("c", {4, 2});
  auto d = ok.t("d", {4, 2});
  ok.op("MatMul", {a, b}, {c});
  ok.op("Softmax", {c}, {d});
  const auto spaces = algebra::build_op_spaces(ok.g);
  REQUIRE(spaces.size() == 2);
  CHECK(loops(spaces[0]) == "i/P/4 k/R/6 j/P/2");
  CHECK(loops(spaces[1]) == "d0/P/4 d1/X/2");
}

TEST_CASE("negative dims in a tensor are reported, not trusted") {
  G g;
  ir::TensorId x = 0;
  try {
    x = g.t("x", {-3, 4});
  } catch (const Error&) {
    return;  // the graph itself refuses negative dims: nothing left to check
  }
  auto y = g.t("y", {-3, 4});
  g.op("ReLU", {x}, {y});
  const Error e = error_of([&] { (void)g.space(0); });
  CHECK(e.code() == Errc::kShape);
  CHECK(e.json_path() == "/operators/0/inputs/0");
}

// ---- randomized robustness ---------------------------------------------------

namespace {

const char* const kTypes[] = {"MatMul",        "BatchMatMul",
                              "Einsum",        "Conv2D",
                              "MaxPool",       "AvgPool",
                              "GlobalAvgPool", "BatchNorm",
                              "LayerNorm",     "RMSNorm",
                              "Softmax",       "LogSoftmax",
                              "Add",           "Sub",
                              "Mul",           "Div",
                              "Pow",           "Maximum",
                              "Minimum",       "BiasAdd",
                              "ReLU",          "GeLU",
                              "SiLU",          "Sigmoid",
                              "Tanh",          "Exp",
                              "Log",           "Sqrt",
                              "Neg",           "Cast",
                              "Dropout",       "Identity",
                              "Reshape",       "Transpose",
                              "Flatten",       "Squeeze",
                              "Unsqueeze",     "Concat",
                              "Split",         "Slice",
                              "ReduceSum",     "ReduceMean",
                              "ReduceMax",     "Gather",
                              "OneHot",        "SoftmaxCrossEntropy",
                              "Attention",     "MyCustom"};

const char* const kEquations[] = {"ij,jk->ik",
                                  "...i,...i->...",
                                  "ii",
                                  "a",
                                  "->",
                                  ",",
                                  "",
                                  "...",
                                  "ab...,b->a...",
                                  "i->ii",
                                  "bsh,hd->bsd",
                                  "ij,jk",
                                  "...ij,...jk->...ik",
                                  "Aa,aB->AB",
                                  "i,j,k->ijk",
                                  "é"};

struct Fuzzer {
  std::mt19937_64 rng{20240611};

  std::int64_t pick(std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
  }
  std::int64_t dim() {
    switch (pick(0, 12)) {
      case 0: return 0;
      case 1: return std::numeric_limits<std::int64_t>::max();
      case 2: return std::int64_t{1} << 40;
      case 3:
      case 4: return 1;
      default: return pick(2, 8);
    }
  }
  ir::Shape shape() {
    ir::Shape s(static_cast<std::size_t>(pick(0, 4)));
    for (auto& d : s) d = dim();
    return s;
  }
  // Mostly small shapes that often agree, so that kinds get past validation.
  ir::Shape shape_like(const ir::Shape& base) {
    if (pick(0, 3) == 0) return shape();
    ir::Shape s = base;
    if (!s.empty() && pick(0, 2) == 0)
      s[static_cast<std::size_t>(pick(0, static_cast<std::int64_t>(s.size()) - 1))] = dim();
    if (pick(0, 5) == 0 && !s.empty()) s.erase(s.begin());
    return s;
  }
  std::vector<std::int64_t> ints(std::int64_t lo, std::int64_t hi) {
    std::vector<std::int64_t> v(static_cast<std::size_t>(pick(0, 4)));
    for (auto& x : v)
      x = pick(0, 9) == 0 ? (pick(0, 1) ? std::numeric_limits<std::int64_t>::max()
                                        : std::numeric_limits<std::int64_t>::min())
                          : pick(lo, hi);
    return v;
  }
  ir::Attrs attrs() {
    ir::Attrs a;
    const auto maybe = [&] { return pick(0, 2) == 0; };
    if (maybe()) a.set("axis", pick(-5, 5));
    if (maybe()) a.set("axes", ints(-5, 5));
    if (maybe()) a.set("perm", ints(-4, 4));
    if (maybe()) a.set("equation", std::string(kEquations[pick(0, std::size(kEquations) - 1)]));
    if (maybe()) a.set("einsum", std::string(kEquations[pick(0, std::size(kEquations) - 1)]));
    if (maybe()) a.set("kernel_shape", ints(-1, 4));
    if (maybe()) a.set("strides", ints(-1, 3));
    if (maybe()) a.set("pads", ints(-1, 3));
    if (maybe()) a.set("dilations", ints(-1, 3));
    if (maybe()) a.set("group", pick(-1, 4));
    if (maybe()) a.set("starts", ints(-12, 12));
    if (maybe()) a.set("ends", ints(-12, 12));
    if (maybe()) a.set("steps", ints(-3, 3));
    if (maybe()) a.set("split", ints(-1, 6));
    if (maybe()) a.set("depth", pick(-2, 6));
    if (maybe()) a.set("keepdims", pick(0, 1));
    if (maybe()) a.set("ceil_mode", pick(0, 1));
    if (maybe()) a.set("transpose_a", pick(0, 1) == 1);
    if (maybe()) a.set("transpose_b", pick(0, 1) == 1);
    if (maybe()) a.set("reduction", std::string(pick(0, 1) ? "none" : "mean"));
    if (pick(0, 20) == 0) a.set("axis", std::string("wrong type"));
    return a;
  }
};

// Structural invariants every built space must satisfy.
void check_invariants(const ir::Graph& g, const ir::Operator& op, const algebra::OpSpace& s) {
  std::set<std::string> names;
  for (const auto& l : s.loops) {
    CHECK(names.insert(l.name.str()).second);
    CHECK(l.size >= 0);
    CHECK(l.halo >= 0);
  }
  CHECK(std::isfinite(s.flops));
  CHECK(s.flops >= 0.0);
  const auto check_operands = [&](const std::vector<ir::TensorId>& ts,
                                  const algebra::OperandLoops& maps) {
    REQUIRE(maps.size() == ts.size());
    for (std::size_t j = 0; j < ts.size(); ++j) {
      const ir::Shape& shape = g.tensor(ts[j]).shape;
      REQUIRE(maps[j].size() == shape.size());
      for (std::size_t d = 0; d < shape.size(); ++d) {
        const int l = maps[j][d];
        if (l == algebra::kUnmapped) continue;
        REQUIRE(l >= 0);
        REQUIRE(static_cast<std::size_t>(l) < s.loops.size());
        const auto& loop = s.loops[static_cast<std::size_t>(l)];
        // Window loops run over output positions; every other loop's size
        // divides each operand dim mapped to it (equal, or a gcd / group).
        if (loop.role == algebra::DimRole::Window) continue;
        if (loop.size == 0) {
          CHECK(shape[d] == 0);
        } else {
          CHECK(shape[d] % loop.size == 0);
        }
      }
    }
  };
  check_operands(op.inputs, s.inputs);
  check_operands(op.outputs, s.outputs);
}

}  // namespace

TEST_CASE("robustness: random operators of every kind only ever throw recsearch::Error") {
  Fuzzer f;
  int built = 0;
  int rejected = 0;
  for (int iter = 0; iter < 30000; ++iter) {
    ir::Graph g("fuzz");
    const std::string type = kTypes[iter % std::size(kTypes)];
    ir::Operator op;
    op.name = "op";
    op.type = type;
    op.attrs = f.attrs();
    const ir::Shape base = f.shape();
    const auto n_in = f.pick(0, 9) == 0 ? f.pick(0, 4) : f.pick(1, 3);
    const auto n_out = f.pick(0, 9) == 0 ? f.pick(0, 3) : 1;
    try {
      for (std::int64_t j = 0; j < n_in; ++j) {
        op.inputs.push_back(g.add_tensor("i" + std::to_string(j),
                                         j == 0 ? base : f.shape_like(base),
                                         f.pick(0, 1) ? ir::DType::F32 : ir::DType::I64));
      }
      for (std::int64_t j = 0; j < n_out; ++j) {
        op.outputs.push_back(
            g.add_tensor("o" + std::to_string(j), f.shape_like(base), ir::DType::F32));
      }
      // Give the output the inferred shape half of the time, so that many
      // operators get all the way through.
      if (f.pick(0, 1) == 0) {
        try {
          const auto inferred = algebra::infer_output_shapes(g, op);
          ir::Graph g2("fuzz2");
          for (const auto t : op.inputs)
            g2.add_tensor(g.tensor(t).name, g.tensor(t).shape, g.tensor(t).dtype);
          std::vector<ir::TensorId> outs;
          for (std::size_t j = 0; j < op.outputs.size(); ++j) {
            outs.push_back(g2.add_tensor(g.tensor(op.outputs[j]).name,
                                         inferred[j] ? *inferred[j] : g.tensor(op.outputs[j]).shape,
                                         ir::DType::F32));
          }
          op.outputs = outs;
          g = std::move(g2);
        } catch (const Error&) {
        }
      }
      const auto id = g.add_operator(op);
      const auto s = algebra::build_op_space(g, id);
      ++built;
      check_invariants(g, g.op(id), s);
      // A space that builds implies inference agrees with the outputs.
      const auto inferred = algebra::infer_output_shapes(g, g.op(id));
      REQUIRE(inferred.size() == g.op(id).outputs.size());
      for (std::size_t j = 0; j < inferred.size(); ++j) {
        if (inferred[j]) CHECK(*inferred[j] == g.tensor(g.op(id).outputs[j]).shape);
      }
      std::vector<std::int64_t> splits(s.loops.size(), 1);
      for (int l = -1; l <= static_cast<int>(s.loops.size()); ++l) {
        for (const std::int64_t k : {std::int64_t{1}, std::int64_t{2}, std::int64_t{3},
                                     std::numeric_limits<std::int64_t>::max()}) {
          (void)algebra::can_cut(g, g.op(id), s, splits, l, k);
        }
      }
    } catch (const Error& e) {
      ++rejected;
      CHECK(e.code() != Errc::kInternal);
    } catch (const std::exception& e) {
      FAIL_CHECK("type " << type << " threw a non-recsearch exception: " << e.what());
    }
  }
  MESSAGE("built " << built << ", rejected " << rejected);
  CHECK(built > 1000);  // the sweep must exercise real spaces, not only errors
}

TEST_CASE("op space: operand loops are one block, read per operand and revised in place") {
  using recsearch::algebra::kUnmapped;
  using recsearch::algebra::OperandLoops;
  const OperandLoops m = {{0, 1, 2}, {}, {kUnmapped, 3}};
  REQUIRE(m.size() == 3);
  CHECK(std::vector<int>(m[0].begin(), m[0].end()) == std::vector<int>{0, 1, 2});
  CHECK(m[1].empty());
  CHECK(std::vector<int>(m[2].begin(), m[2].end()) == std::vector<int>{kUnmapped, 3});
  // The same lists from vectors, and from ranks (every dim unmapped), then set.
  CHECK(OperandLoops(std::vector<std::vector<int>>{{0, 1, 2}, {}, {kUnmapped, 3}}) == m);
  const std::vector<std::size_t> ranks{3, 0, 2};
  OperandLoops r{std::span<const std::size_t>(ranks)};
  CHECK(r != m);
  r.set(0, 0, 0);
  r.set(0, 1, 1);
  r.set(0, 2, 2);
  r.set(2, 1, 3);
  CHECK(r == m);
  std::size_t operands = 0, dims = 0;
  for (const std::span<const int> dims_of : m) {
    ++operands;
    dims += dims_of.size();
  }
  CHECK(operands == 3);
  CHECK(dims == 5);
  CHECK_THROWS_AS((void)m.at(3), std::out_of_range);
  CHECK_THROWS_AS(r.set(1, 0, 0), std::out_of_range);
  CHECK(OperandLoops().empty());
}

TEST_CASE("op space: loop names are kept inline up to 7 characters") {
  using recsearch::algebra::LoopName;
  const LoopName d("in254");
  CHECK(d == "in254");
  CHECK(d.size() == 5);
  CHECK(std::string("loop ") + d == "loop in254");
  CHECK(LoopName("abcdefg").str() == "abcdefg");
  CHECK_THROWS_AS(LoopName("abcdefgh"), recsearch::Error);
}
