// SPDX-License-Identifier: Apache-2.0
// MatMul / BatchMatMul, Einsum (and Custom ops with an `einsum` attribute)
// and Attention: loops, roles, operand mappings, flops and shape errors.
#include <doctest/doctest.h>

#include "helpers.hpp"

using namespace algebra_test;

TEST_CASE("MatMul: ik,kj->ij with k a reduction") {
  G g;
  auto x = g.t("x", {32, 784});
  auto w = g.t("w", {784, 512});
  auto h = g.t("h", {32, 512});
  const auto s = g.space(g.op("MatMul", {x, w}, {h}));
  CHECK(loops(s) == "i/P/32 k/R/784 j/P/512");
  CHECK(in(s, 0) == "i,k");
  CHECK(in(s, 1) == "k,j");
  CHECK(out(s, 0) == "i,j");
  CHECK(s.flops == doctest::Approx(2.0 * 32 * 784 * 512));
  CHECK_FALSE(s.opaque);
  CHECK(s.find_loop("k") == 1);
  CHECK(s.find_loop("zz") == algebra::kUnmapped);
}

TEST_CASE("MatMul: transpose_a and transpose_b swap the last two dims") {
  G g;
  auto x = g.t("x", {784, 32});
  auto w = g.t("w", {512, 784});
  auto h = g.t("h", {32, 512});
  const auto s =
      g.space(g.op("MatMul", {x, w}, {h}, {{"transpose_a", true}, {"transpose_b", true}}));
  CHECK(loops(s) == "i/P/32 k/R/784 j/P/512");
  CHECK(in(s, 0) == "k,i");
  CHECK(in(s, 1) == "j,k");
  CHECK(out(s, 0) == "i,j");
}

TEST_CASE("MatMul: inner dims must agree") {
  G g;
  auto x = g.t("x", {32, 784});
  auto w = g.t("w", {512, 512});
  auto h = g.t("h", {32, 512});
  g.op("MatMul", {x, w}, {h});
  const Error e = error_of([&] { (void)g.space(0); });
  CHECK(e.code() == Errc::kShape);
  CHECK(e.json_path() == "/operators/0/inputs/1");
  CHECK(contains(e.detail(), "inner dims differ"));
  CHECK(contains(e.detail(), "'x' [32, 784] has k=784"));
  CHECK(contains(e.detail(), "'w' [512, 512] has k=512"));
}

TEST_CASE("MatMul: the produced output shape is checked") {
  G g;
  auto x = g.t("x", {32, 784});
  auto w = g.t("w", {784, 512});
  auto h = g.t("h", {32, 256});
  g.op("MatMul", {x, w}, {h});
  const Error e = error_of([&] { (void)g.space(0); });
  CHECK(e.code() == Errc::kShape);
  CHECK(e.json_path() == "/operators/0/outputs/0");
  CHECK(contains(e.detail(), "[32, 512]"));
  CHECK(contains(e.detail(), "'h' [32, 256]"));
}

TEST_CASE("MatMul: wrong operand counts are schema errors") {
  G g;
  auto x = g.t("x", {2, 2});
  auto y = g.t("y", {2, 2});
  auto z = g.t("z", {2, 2});
  auto o = g.t("o", {2, 2});
  auto o2 = g.t("o2", {2, 2});
  g.op("MatMul", {x, y, z}, {o});
  g.op("MatMul", {x, y}, {o2, z});
  Error e = error_of([&] { (void)g.space(0); });
  CHECK(e.code() == Errc::kSchema);
  CHECK(e.json_path() == "/operators/0/inputs");
  e = error_of([&] { (void)g.space(1); });
  CHECK(e.code() == Errc::kSchema);
  CHECK(e.json_path() == "/operators/1/outputs");
}

TEST_CASE("BatchMatMul: leading dims broadcast numpy-style") {
  G g;
  auto a = g.t("a", {4, 1, 8, 16});
  auto b = g.t("b", {3, 16, 32});
  auto c = g.t("c", {4, 3, 8, 32});
  const auto s = g.space(g.op("BatchMatMul", {a, b}, {c}));
  CHECK(loops(s) == "b0/P/4 b1/P/3 i/P/8 k/R/16 j/P/32");
  CHECK(in(s, 0) == "b0,-,i,k");  // the size-1 batch dim is broadcast: unmapped
  CHECK(in(s, 1) == "b1,k,j");
  CHECK(out(s, 0) == "b0,b1,i,j");
  CHECK(s.flops == doctest::Approx(2.0 * 4 * 3 * 8 * 16 * 32));
}

TEST_CASE("BatchMatMul: incompatible batch dims") {
  G g;
  auto a = g.t("a", {2, 8, 16});
  auto b = g.t("b", {3, 16, 32});
  auto c = g.t("c", {2, 8, 32});
  g.op("BatchMatMul", {a, b}, {c});
  const Error e = error_of([&] { (void)g.space(0); });
  CHECK(e.code() == Errc::kShape);
  CHECK(e.json_path() == "/operators/0/inputs/1");
  CHECK(contains(e.detail(), "batch dims do not broadcast"));
}

TEST_CASE("MatMul: 1-D operands as in numpy") {
  SUBCASE("vector times matrix") {
    G g;
    auto a = g.t("a", {16});
    auto b = g.t("b", {16, 32});
    auto c = g.t("c", {32});
    const auto s = g.space(g.op("MatMul", {a, b}, {c}, {{"transpose_a", true}}));
    CHECK(loops(s) == "k/R/16 j/P/32");
    CHECK(in(s, 0) == "k");
    CHECK(out(s, 0) == "j");
  }
  SUBCASE("batched matrix times vector") {
    G g;
    auto a = g.t("a", {2, 8, 16});
    auto b = g.t("b", {16});
    auto c = g.t("c", {2, 8});
    const auto s = g.space(g.op("MatMul", {a, b}, {c}));
    CHECK(loops(s) == "b0/P/2 i/P/8 k/R/16");
    CHECK(in(s, 1) == "k");
    CHECK(out(s, 0) == "b0,i");
  }
  SUBCASE("dot product gives a scalar") {
    G g;
    auto a = g.t("a", {16});
    auto b = g.t("b", {16});
    auto c = g.t("c", {});
    const auto s = g.space(g.op("MatMul", {a, b}, {c}));
    CHECK(loops(s) == "k/R/16");
    CHECK(out(s, 0).empty());
    CHECK(s.flops == doctest::Approx(32.0));
  }
  SUBCASE("a scalar operand is rejected") {
    G g;
    auto a = g.t("a", {});
    auto b = g.t("b", {16});
    auto c = g.t("c", {16});
    g.op("MatMul", {a, b}, {c});
    const Error e = error_of([&] { (void)g.space(0); });
    CHECK(e.code() == Errc::kShape);
    CHECK(e.json_path() == "/operators/0/inputs/0");
  }
}

TEST_CASE("MatMul: huge dims give finite double flops, no overflow") {
  G g;
  const std::int64_t big = std::int64_t{1} << 40;
  auto a = g.t("a", {big, big});
  auto b = g.t("b", {big, big});
  auto c = g.t("c", {big, big});
  const auto s = g.space(g.op("MatMul", {a, b}, {c}));
  CHECK(s.flops == doctest::Approx(2.0 * 1099511627776.0 * 1099511627776.0 * 1099511627776.0));
}

TEST_CASE("Einsum: letters become loops, output letters parallel") {
  G g;
  auto x = g.t("x", {2, 4, 8});
  auto w = g.t("w", {8, 16});
  auto y = g.t("y", {2, 4, 16});
  const auto s = g.space(g.op("Einsum", {x, w}, {y}, {{"equation", std::string("bsh,hd->bsd")}}));
  CHECK(loops(s) == "b/P/2 s/P/4 h/R/8 d/P/16");
  CHECK(in(s, 0) == "b,s,h");
  CHECK(in(s, 1) == "h,d");
  CHECK(out(s, 0) == "b,s,d");
  CHECK(s.flops == doctest::Approx(2.0 * 2 * 4 * 8 * 16));
}

TEST_CASE("Einsum: ellipsis broadcasting") {
  G g;
  auto a = g.t("a", {5, 1, 2, 3});
  auto b = g.t("b", {4, 3, 6});
  auto c = g.t("c", {5, 4, 2, 6});
  const auto s =
      g.space(g.op("Einsum", {a, b}, {c}, {{"equation", std::string("...ij, ...jk -> ...ik")}}));
  CHECK(loops(s) == "e0/P/5 e1/P/4 i/P/2 j/R/3 k/P/6");
  CHECK(in(s, 0) == "e0,-,i,j");
  CHECK(in(s, 1) == "e1,j,k");
  CHECK(out(s, 0) == "e0,e1,i,k");
}

TEST_CASE("Einsum: implicit output follows numpy (letters used once, sorted)") {
  SUBCASE("matrix product") {
    G g;
    auto a = g.t("a", {2, 3});
    auto b = g.t("b", {3, 4});
    auto c = g.t("c", {2, 4});
    const auto s = g.space(g.op("Einsum", {a, b}, {c}, {{"equation", std::string("ij,jk")}}));
    CHECK(loops(s) == "i/P/2 j/R/3 k/P/4");
    CHECK(out(s, 0) == "i,k");
  }
  SUBCASE("'ba' transposes") {
    G g;
    auto a = g.t("a", {2, 3});
    auto c = g.t("c", {3, 2});
    const auto s = g.space(g.op("Einsum", {a}, {c}, {{"equation", std::string("ba")}}));
    CHECK(in(s, 0) == "b,a");
    CHECK(out(s, 0) == "a,b");
    CHECK(s.flops == doctest::Approx(6.0));  // no reduction: one op per element
  }
  SUBCASE("a wrong output shape is caught") {
    G g;
    auto a = g.t("a", {2, 3});
    auto c = g.t("c", {2, 3});
    g.op("Einsum", {a}, {c}, {{"equation", std::string("ba")}});
    const Error e = error_of([&] { (void)g.space(0); });
    CHECK(e.json_path() == "/operators/0/outputs/0");
  }
}

TEST_CASE("Einsum: outer product, trace and ellipsis summed away") {
  G g;
  auto a = g.t("a", {2});
  auto b = g.t("b", {3});
  auto c = g.t("c", {2, 3});
  auto m = g.t("m", {3, 3});
  auto tr = g.t("tr", {});
  auto e = g.t("e", {4, 5, 6});
  auto f = g.t("f", {6});
  const auto outer = g.space(g.op("Einsum", {a, b}, {c}, {{"equation", std::string("i,j->ij")}}));
  CHECK(outer.flops == doctest::Approx(6.0));
  const auto trace = g.space(g.op("Einsum", {m}, {tr}, {{"equation", std::string("ii->")}}));
  CHECK(loops(trace) == "i/R/3");
  CHECK(in(trace, 0) == "i,i");
  const auto sum = g.space(g.op("Einsum", {e}, {f}, {{"equation", std::string("...i->i")}}));
  CHECK(loops(sum) == "e0/R/4 e1/R/5 i/P/6");
}

TEST_CASE("Einsum: errors") {
  const auto run = [](const std::vector<ir::Shape>& ins, const ir::Shape& o,
                      const std::string& eq) {
    G g;
    std::vector<ir::TensorId> ids;
    for (std::size_t i = 0; i < ins.size(); ++i)
      ids.push_back(g.t("x" + std::to_string(i), ins[i]));
    auto y = g.t("y", o);
    g.op("Einsum", ids, {y}, {{"equation", eq}});
    return error_of([&] { (void)g.space(0); });
  };
  Error e = run({{2, 3}, {4, 5}}, {2, 5}, "ij,jk->ik");
  CHECK(e.code() == Errc::kShape);
  CHECK(e.json_path() == "/operators/0/inputs/1");
  CHECK(contains(e.detail(), "letter 'j' is 3"));

  e = run({{2, 3, 4}}, {2}, "ij->i");
  CHECK(e.code() == Errc::kShape);
  CHECK(e.json_path() == "/operators/0/inputs/0");
  CHECK(contains(e.detail(), "rank 3"));

  e = run({{2, 3}, {3}}, {2}, "i1,j->ij");
  CHECK(e.code() == Errc::kSchema);
  CHECK(e.json_path() == "/operators/0/attrs/equation");

  e = run({{2, 3}}, {2, 3}, "ij,jk->ik");
  CHECK(e.code() == Errc::kSchema);
  CHECK(e.json_path() == "/operators/0/inputs");

  e = run({{2, 3}}, {2}, "ij->k");
  CHECK(e.code() == Errc::kSchema);
  CHECK(e.json_path() == "/operators/0/attrs/equation");

  e = run({{2, 3}}, {2, 2}, "ij->ii");
  CHECK(e.json_path() == "/operators/0/attrs/equation");

  e = run({{2, 3}}, {2}, "i..j.->i");
  CHECK(e.json_path() == "/operators/0/attrs/equation");

  e = run({{5, 2, 3}, {4, 3, 6}}, {5, 2, 6}, "...ij,...jk->...ik");
  CHECK(e.json_path() == "/operators/0/inputs/1");
  CHECK(contains(e.detail(), "'...'"));

  G g;
  auto x = g.t("x", {2});
  auto y = g.t("y", {2});
  g.op("Einsum", {x}, {y});
  e = error_of([&] { (void)g.space(0); });
  CHECK(e.code() == Errc::kSchema);
  CHECK(e.json_path() == "/operators/0/attrs/equation");
}

TEST_CASE("Custom op with an einsum attribute is described by it") {
  G g;
  auto a = g.t("a", {2, 3});
  auto b = g.t("b", {3, 4});
  auto c = g.t("c", {2, 4});
  auto d = g.t("d", {2, 4});
  const auto s = g.space(g.op("FancyMatMul", {a, b}, {c}, {{"einsum", std::string("ij,jk->ik")}}));
  CHECK_FALSE(s.opaque);
  CHECK(loops(s) == "i/P/2 j/R/3 k/P/4");
  g.op("FancyMatMul", {a, b}, {d}, {{"einsum", std::string("ij,jk->i?")}});
  const Error e = error_of([&] { (void)g.space(1); });
  CHECK(e.json_path() == "/operators/1/attrs/einsum");
}

TEST_CASE("Custom op without einsum is opaque") {
  G g;
  auto x = g.t("x", {2, 3});
  auto y = g.t("y", {5});
  const auto id = g.op("MyKernel", {x}, {y});
  const auto s = g.space(id);
  CHECK(s.opaque);
  CHECK(s.loops.empty());
  CHECK(in(s, 0) == "-,-");
  CHECK(out(s, 0) == "-");
  CHECK(s.flops == 0.0);
  CHECK_FALSE(algebra::can_cut(g.g, g.g.op(id), s, {}, 0, 2));
}

TEST_CASE("Attention: b, h, s, e parallel; t and d whole") {
  G g;
  auto q = g.t("q", {2, 4, 8, 16});
  auto k = g.t("k", {2, 4, 10, 16});
  auto v = g.t("v", {2, 4, 10, 32});
  auto m = g.t("m", {1, 1, 8, 10});
  auto m2 = g.t("m2", {8, 10});
  auto o = g.t("o", {2, 4, 8, 32});
  auto o2 = g.t("o2", {2, 4, 8, 32});
  const auto s = g.space(g.op("Attention", {q, k, v, m}, {o}, {{"causal", true}}));
  CHECK(loops(s) == "b/P/2 h/P/4 s/P/8 t/X/10 d/X/16 e/P/32");
  CHECK(in(s, 0) == "b,h,s,d");
  CHECK(in(s, 1) == "b,h,t,d");
  CHECK(in(s, 2) == "b,h,t,e");
  CHECK(in(s, 3) == "-,-,s,t");
  CHECK(out(s, 0) == "b,h,s,e");
  CHECK(s.flops == doctest::Approx(4.0 * 2 * 4 * 8 * 10 * 16));
  const auto s2 = g.space(g.op("Attention", {q, k, v, m2}, {o2}));
  CHECK(in(s2, 3) == "s,t");
}

TEST_CASE("Attention: shape errors") {
  G g;
  auto q = g.t("q", {2, 4, 8, 16});
  auto k = g.t("k", {2, 4, 10, 8});
  auto k_ok = g.t("k_ok", {2, 4, 10, 16});
  auto v = g.t("v", {2, 4, 10, 32});
  auto v_bad = g.t("v_bad", {2, 4, 12, 32});
  auto mask = g.t("mask", {3, 10});
  auto o1 = g.t("o1", {2, 4, 8, 32});
  auto o2 = g.t("o2", {2, 4, 8, 32});
  auto o3 = g.t("o3", {2, 4, 8, 32});
  g.op("Attention", {q, k, v}, {o1});
  g.op("Attention", {q, k_ok, v_bad}, {o2});
  g.op("Attention", {q, k_ok, v, mask}, {o3});
  Error e = error_of([&] { (void)g.space(0); });
  CHECK(e.json_path() == "/operators/0/inputs/1");
  CHECK(contains(e.detail(), "head dim 8"));
  e = error_of([&] { (void)g.space(1); });
  CHECK(e.json_path() == "/operators/1/inputs/2");
  e = error_of([&] { (void)g.space(2); });
  CHECK(e.json_path() == "/operators/2/inputs/3");
  CHECK(e.code() == Errc::kShape);
}
