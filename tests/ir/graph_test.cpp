// SPDX-License-Identifier: Apache-2.0
// Graph construction, structural errors with their JSON paths, topological
// order, attributes and dtype spellings.
#include <doctest/doctest.h>

#include <algorithm>

#include "recsearch/error.hpp"
#include "support/graph_factories.hpp"

using namespace recsearch;
using recsearch::testing::add_op;

namespace {

template <class F>
Error catch_error(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  FAIL("expected recsearch::Error");
  return Error(Errc::kInternal, "unreachable");
}

}  // namespace

TEST_CASE("dtype and tensor-kind spellings round-trip") {
  for (auto t : {ir::DType::F64, ir::DType::F32, ir::DType::F16, ir::DType::BF16, ir::DType::F8,
                 ir::DType::I64, ir::DType::I32, ir::DType::I16, ir::DType::I8, ir::DType::U8,
                 ir::DType::Bool})
    CHECK(ir::parse_dtype(ir::dtype_name(t)) == t);
  CHECK(ir::dtype_size(ir::DType::BF16) == 2);
  CHECK(ir::dtype_size(ir::DType::F64) == 8);
  CHECK_FALSE(ir::parse_dtype("float32").has_value());
  CHECK(ir::parse_tensor_kind("parameter") == ir::TensorKind::Parameter);
  CHECK_FALSE(ir::parse_tensor_kind("weight").has_value());
}

TEST_CASE("element counts detect overflow") {
  CHECK(ir::checked_num_elements({}) == 1);
  CHECK(ir::checked_num_elements({32, 784}) == 32 * 784);
  CHECK_FALSE(ir::checked_num_elements({1LL << 40, 1LL << 40}).has_value());
  CHECK_FALSE(ir::checked_num_elements({-1, 2}).has_value());
  CHECK(ir::num_elements({1LL << 40, 1LL << 40}) == doctest::Approx(1.2089258196146292e24));
  CHECK(ir::shape_to_string({32, 784}) == "[32, 784]");
}

TEST_CASE("operator kinds parse and unknown types are Custom") {
  CHECK(ir::parse_op_kind("MatMul") == ir::OpKind::MatMul);
  CHECK(ir::parse_op_kind("Attention") == ir::OpKind::Attention);
  CHECK(ir::parse_op_kind("Custom") == ir::OpKind::Custom);
  CHECK(ir::parse_op_kind("FlashMoE") == ir::OpKind::Custom);
  CHECK(ir::op_kind_name(ir::OpKind::SoftmaxCrossEntropy) == "SoftmaxCrossEntropy");
  CHECK(ir::is_binary_elementwise(ir::OpKind::Maximum));
  CHECK_FALSE(ir::is_binary_elementwise(ir::OpKind::BiasAdd));
  CHECK(ir::is_unary_elementwise(ir::OpKind::Dropout));
}

TEST_CASE("graph links producers and consumers") {
  ir::Graph g = recsearch::testing::mlp2(8, 16, 32, 4);
  CHECK(g.num_operators() == 3);
  CHECK(g.num_tensors() == 6);
  const auto h = *g.find_tensor("h");
  CHECK(g.tensor(h).producer == *g.find_operator("mm1"));
  CHECK(g.tensor(h).consumers == std::vector<ir::OpId>{*g.find_operator("relu")});
  CHECK(g.tensor(h).kind == ir::TensorKind::Activation);
  CHECK(g.tensor(*g.find_tensor("w1")).kind == ir::TensorKind::Parameter);
  CHECK(g.op(0).kind == ir::OpKind::MatMul);
  CHECK(g.tensor(*g.find_tensor("x")).bytes() == 8 * 16 * 4);
  CHECK_FALSE(g.find_tensor("nope").has_value());
}

TEST_CASE("topological order respects every edge") {
  for (std::uint32_t seed = 1; seed <= 5; ++seed) {
    ir::Graph g = recsearch::testing::random_dag(seed, 60);
    const auto& order = g.topological_order();
    REQUIRE(order.size() == g.num_operators());
    std::vector<std::size_t> pos(order.size());
    for (std::size_t i = 0; i < order.size(); ++i) pos[order[i]] = i;
    for (const auto& t : g.tensors())
      if (t.producer != ir::kNone)
        for (auto c : t.consumers) CHECK(pos[t.producer] < pos[c]);
  }
}

TEST_CASE("structural errors name the JSON path") {
  ir::Graph g("bad");
  g.add_tensor("a", {2}, ir::DType::F32);
  g.add_tensor("b", {2}, ir::DType::F32);
  g.add_tensor("p", {2}, ir::DType::F32, ir::TensorKind::Parameter);

  Error dup = catch_error([&] { g.add_tensor("a", {3}, ir::DType::F32); });
  CHECK(dup.code() == Errc::kDuplicate);
  CHECK(dup.json_path() == "/tensors/3/name");

  add_op(g, "op0", "ReLU", {"a"}, {"b"});
  Error twice = catch_error([&] { add_op(g, "op1", "ReLU", {"a"}, {"b"}); });
  CHECK(twice.code() == Errc::kDuplicate);
  CHECK(twice.json_path() == "/operators/1/outputs/0");
  CHECK(std::string(twice.what()).find("op0") != std::string::npos);

  Error param = catch_error([&] { add_op(g, "op1", "ReLU", {"a"}, {"p"}); });
  CHECK(param.code() == Errc::kSchema);
  CHECK(param.json_path() == "/operators/1/outputs/0");

  Error dupop = catch_error([&] { add_op(g, "op0", "ReLU", {"b"}, {}); });
  CHECK(dupop.code() == Errc::kDuplicate);
  CHECK(dupop.json_path() == "/operators/1/name");

  ir::Operator bad;
  bad.name = "op9";
  bad.type = "ReLU";
  bad.inputs = {42};
  Error unknown = catch_error([&] { g.add_operator(bad); });
  CHECK(unknown.code() == Errc::kUnknownName);
  CHECK(unknown.json_path() == "/operators/1/inputs/0");

  g.add_tensor("s", {2}, ir::DType::F32);
  Error self = catch_error([&] { add_op(g, "selfloop", "Add", {"s", "a"}, {"s"}); });
  CHECK(self.code() == Errc::kCycle);
}

TEST_CASE("cycles are found and name an operator on them") {
  ir::Graph g("cyc");
  for (const char* n : {"a", "b", "c"}) g.add_tensor(n, {4}, ir::DType::F32);
  g.add_tensor("x", {4}, ir::DType::F32);
  add_op(g, "first", "Add", {"x", "c"}, {"a"});
  add_op(g, "second", "ReLU", {"a"}, {"b"});
  add_op(g, "third", "ReLU", {"b"}, {"c"});
  Error e = catch_error([&] { g.finalize(); });
  CHECK(e.code() == Errc::kCycle);
  CHECK(e.json_path().rfind("/operators/", 0) == 0);
  CHECK(std::string(e.what()).find("cycle") != std::string::npos);
  CHECK_FALSE(g.finalized());
}

TEST_CASE("a million-operator chain finalizes without deep recursion") {
  ir::Graph g("chain");
  const int n = 1'000'000;
  g.add_tensor("t0", {4}, ir::DType::F32);
  for (int i = 0; i < n; ++i) {
    g.add_tensor("t" + std::to_string(i + 1), {4}, ir::DType::F32);
    ir::Operator op;
    op.name = "r" + std::to_string(i);
    op.type = "ReLU";
    op.inputs = {static_cast<ir::TensorId>(i)};
    op.outputs = {static_cast<ir::TensorId>(i + 1)};
    g.add_operator(std::move(op));
  }
  g.finalize();
  CHECK(g.topological_order().front() == 0);
  CHECK(g.topological_order().back() == n - 1);
}

TEST_CASE("attribute getters check types") {
  ir::Attrs a{{"perm", std::vector<std::int64_t>{1, 0}},
              {"axis", std::int64_t{-1}},
              {"eps", 1e-5},
              {"flag", true},
              {"mode", std::string("mean")}};
  CHECK(a.get_ints("perm") == std::vector<std::int64_t>{1, 0});
  CHECK(a.get_ints("axis") == std::vector<std::int64_t>{-1});
  CHECK(a.get_int("axis", 0) == -1);
  CHECK(a.get_int("missing", 7) == 7);
  CHECK(a.get_float("axis", 0) == -1.0);
  CHECK(a.get_float("eps", 0) == doctest::Approx(1e-5));
  CHECK(a.get_bool("flag", false));
  CHECK(a.get_string("mode", "") == "mean");
  Error e = catch_error([&] { (void)a.get_int("mode", 0); });
  CHECK(e.code() == Errc::kSchema);
  CHECK(e.json_path() == "/attrs/mode");
  CHECK_THROWS_AS((void)a.get_ints("eps"), Error);
  // Sorted by name for deterministic output.
  CHECK(a.items().front().first == "axis");
  a.set("axis", std::int64_t{2});
  CHECK(a.get_int("axis", 0) == 2);
  CHECK(a.items().size() == 5);
}
