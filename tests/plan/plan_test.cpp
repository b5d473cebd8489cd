// SPDX-License-Identifier: Apache-2.0
// Tests of plan.cpp: strategies derived from cuts, pinned strategies laid
// out on a mesh (MindSpore's convention), and the legality check of plans,
// with the JSON path of every error.
#include "recsearch/plan/plan.hpp"

#include <doctest/doctest.h>

#include "fixtures.hpp"

using namespace plan_test;
using plan::kReplicated;

namespace {

constexpr std::int16_t R = kReplicated;
using Cuts = std::vector<std::int16_t>;

// mm: x[32,64] * w[64,j] -> y; bias: y + b[1,j] -> z; softmax over z's last dim.
struct Net {
  ir::Graph g{"net"};
  std::vector<OpSpace> spaces;

  explicit Net(std::int64_t j = 128) {
    const auto x = tensor(g, "x", {32, 64}, ir::TensorKind::Input);
    const auto w = tensor(g, "w", {64, j}, ir::TensorKind::Parameter);
    const auto y = tensor(g, "y", {32, j});
    const auto b = tensor(g, "b", {1, j}, ir::TensorKind::Parameter);
    const auto z = tensor(g, "z", {32, j});
    const auto s = tensor(g, "s", {32, j});
    op(g, "mm", "MatMul", {x, w}, {y});
    op(g, "bias", "Add", {y, b}, {z});
    op(g, "softmax", "Softmax", {z}, {s});
    g.finalize();
    spaces = {matmul_space(32, 64, j), broadcast_add_space(32, j), unary_space(32, j, true)};
  }
};

const std::vector<Cut> kMesh222 = {axis("c0", 2), axis("c1", 2), axis("c2", 2)};

}  // namespace

TEST_CASE("loop_splits and strategy_of") {
  const std::vector<Cut> mesh = {axis("c0", 2), axis("c1", 3), axis("c2", 2)};
  const OpSpace mm = matmul_space(12, 12, 12);
  CHECK(plan::loop_splits(mm, mesh, {0, 2, 0}) == std::vector<std::int64_t>{4, 1, 3});
  CHECK(plan::strategy_of(mm, mesh, {0, 2, 0}) == ir::Strategy{{4, 1}, {1, 3}});
  CHECK(plan::strategy_of(mm, mesh, {1, R, R}) == ir::Strategy{{1, 2}, {2, 1}});
  CHECK(plan::strategy_of(mm, mesh, {R, R, R}) == ir::Strategy{{1, 1}, {1, 1}});
  // Broadcast (unmapped) dims always report 1.
  CHECK(plan::strategy_of(broadcast_add_space(12, 12), mesh, {1, 1, 0}) ==
        ir::Strategy{{2, 6}, {1, 6}});
}

TEST_CASE("assign_cuts lays strategies out outermost first") {
  Net n;
  const auto& g = n.g;
  const auto& mm = n.spaces[0];
  // MindSpore's example: i split 2, j split 4 on 8 devices = c0 x c1 x c2.
  CHECK(plan::assign_cuts(g, 0, mm, {{2, 1}, {1, 4}}, kMesh222) == Cuts{0, 2, 2});
  CHECK(plan::assign_cuts(g, 0, mm, {{1, 2}, {2, 1}}, kMesh222) == Cuts{1, R, R});
  CHECK(plan::assign_cuts(g, 0, mm, {{8, 1}, {1, 1}}, kMesh222) == Cuts{0, 0, 0});
  CHECK(plan::assign_cuts(g, 0, mm, {{2, 2}, {2, 2}}, kMesh222) == Cuts{0, 1, 2});
  CHECK(plan::assign_cuts(g, 0, mm, {{1, 1}, {1, 1}}, kMesh222) == Cuts{R, R, R});
  CHECK(plan::assign_cuts(g, 1, n.spaces[1], {{2, 4}, {1, 4}}, kMesh222) == Cuts{0, 1, 1});
  // Round trip: the strategy of the assigned cuts is the strategy.
  CHECK(plan::strategy_of(mm, kMesh222, plan::assign_cuts(g, 0, mm, {{2, 1}, {1, 4}}, kMesh222)) ==
        ir::Strategy{{2, 1}, {1, 4}});

  SUBCASE("any device count: each axis to the first loop it divides") {
    Net n96(96);
    const std::vector<Cut> mesh = {axis("c0", 3), axis("c1", 2)};
    CHECK(plan::assign_cuts(n96.g, 0, n96.spaces[0], {{2, 1}, {1, 3}}, mesh) == Cuts{2, 0});
  }
}

TEST_CASE("assign_cuts errors name the strategy entry") {
  Net n;
  const auto& g = n.g;
  auto assign = [&](ir::OpId o, ir::Strategy s, std::vector<Cut> mesh = kMesh222) {
    return [&g, &n, o, s = std::move(s), mesh = std::move(mesh)] {
      (void)plan::assign_cuts(g, o, n.spaces[o], s, mesh);
    };
  };
  check_error(assign(0, {{2, 1}}), Errc::kStrategy, "/operators/0/strategy", "1 inputs");
  check_error(assign(0, {{2, 1, 1}, {1, 4}}), Errc::kStrategy, "/operators/0/strategy/0", "rank");
  check_error(assign(0, {{1, 1}, {1}}), Errc::kStrategy, "/operators/0/strategy/1", "rank");
  check_error(assign(0, {{0, 1}, {1, 1}}), Errc::kStrategy, "/operators/0/strategy/0/0",
              "at least 1");
  check_error(assign(0, {{1, 2}, {4, 1}}), Errc::kStrategy, "/operators/0/strategy/1/0",
              "disagrees");
  check_error(assign(0, {{3, 1}, {1, 1}}), Errc::kStrategy, "/operators/0/strategy/0/0",
              "does not divide");
  check_error(assign(0, {{2, 1}, {1, 8}}), Errc::kStrategy, "/operators/0/strategy/1/1",
              "strategy needs 16 devices but the mesh");
  check_error(assign(0, {{4, 1}, {1, 1}}, {axis("c0", 3), axis("c1", 2)}), Errc::kStrategy,
              "/operators/0/strategy/0/0", "strategy needs 4 devices but the mesh");
  // Dim 0 of b is a broadcast dim (unmapped); softmax's last dim is Whole.
  check_error(assign(1, {{1, 1}, {2, 1}}), Errc::kStrategy, "/operators/1/strategy/1/0",
              "cannot be split");
  check_error(assign(2, {{1, 2}}), Errc::kStrategy, "/operators/2/strategy/0/1",
              "must not be split");
}

TEST_CASE("check_plan accepts legal plans") {
  Net n;
  auto p = make_plan(kMesh222, {{0, 2, 2}, {0, 1, 1}, {0, R, R}});
  CHECK_NOTHROW(plan::check_plan(n.g, n.spaces, p));
  p.mesh.clear();
  p.cuts = {{}, {}, {}};
  CHECK_NOTHROW(plan::check_plan(n.g, n.spaces, p));
}

TEST_CASE("check_plan errors name the operator and axis") {
  Net n;
  auto check = [&](std::vector<std::vector<std::int16_t>> cuts, Errc code, const std::string& path,
                   const std::string& text, std::vector<Cut> mesh = kMesh222) {
    const auto p = make_plan(std::move(mesh), std::move(cuts));
    check_error([&] { plan::check_plan(n.g, n.spaces, p); }, code, path, text);
  };

  check({{R, R, R}, {R, R, R}}, Errc::kPlan, "/operators", "operators");
  check({{R, R, R}, {R, R}, {R, R, R}}, Errc::kPlan, "/operators/1/cuts", "axes");
  check({{3, R, R}, {R, R, R}, {R, R, R}}, Errc::kPlan, "/operators/0/cuts/0", "out of range");
  check({{R, -2, R}, {R, R, R}, {R, R, R}}, Errc::kPlan, "/operators/0/cuts/1", "out of range");
  check({{R, R, R}, {R, R, R}, {R, 1, R}}, Errc::kPlan, "/operators/2/cuts/1", "must not be cut");
  check({{R}, {R}, {R}}, Errc::kPlan, "/mesh/axes/0/size", "size 0", {axis("c0", 0)});

  SUBCASE("cuts must divide the remaining slices, in axis order") {
    // relu on [2, 6]: d0 takes one cut of 2, not two; d1 takes 2 and 3.
    ir::Graph g("tiny");
    const auto x = tensor(g, "x", {2, 6}, ir::TensorKind::Input);
    const auto y = tensor(g, "y", {2, 6});
    op(g, "relu", "ReLU", {x}, {y});
    g.finalize();
    const std::vector<OpSpace> spaces = {unary_space(2, 6)};
    CHECK_NOTHROW(plan::check_plan(g, spaces, make_plan({axis("c0", 2), axis("c1", 3)}, {{0, 1}})));
    check_error(
        [&] {
          plan::check_plan(g, spaces, make_plan({axis("c0", 2), axis("c1", 2)}, {{0, 0}}));
        },
        Errc::kPlan, "/operators/0/cuts/1", "cannot cut");
    check_error(
        [&] {
          plan::check_plan(g, spaces, make_plan({axis("c0", 3), axis("c1", 2)}, {{0, R}}));
        },
        Errc::kPlan, "/operators/0/cuts/0", "cannot cut");
  }

  SUBCASE("opaque operators stay replicated") {
    n.spaces[2].opaque = true;
    check({{R, R, R}, {R, R, R}, {R, 0, R}}, Errc::kPlan, "/operators/2/cuts/1", "cannot be cut");
  }

  SUBCASE("allowed dims") {
    n.g.mutable_op(0).allowed = std::vector<std::string>{"i"};
    CHECK_NOTHROW(
        plan::check_plan(n.g, n.spaces, make_plan(kMesh222, {{0, R, 0}, {R, R, R}, {R, R, R}})));
    check({{0, 2, R}, {R, R, R}, {R, R, R}}, Errc::kPlan, "/operators/0/cuts/1", "allowed");
  }

  SUBCASE("pinned strategies are kept exactly") {
    n.g.mutable_op(0).strategy = ir::Strategy{{2, 1}, {1, 4}};
    CHECK_NOTHROW(
        plan::check_plan(n.g, n.spaces, make_plan(kMesh222, {{0, 2, 2}, {R, R, R}, {R, R, R}})));
    // Same strategy, different axes: still not what was pinned.
    check({{2, 0, 2}, {R, R, R}, {R, R, R}}, Errc::kPlan, "/operators/0/cuts/0", "pinned");
    check({{0, 2, R}, {R, R, R}, {R, R, R}}, Errc::kPlan, "/operators/0/cuts/2", "pinned");
    // A pinned strategy the mesh cannot hold is reported as the strategy's error.
    n.g.mutable_op(0).strategy = ir::Strategy{{2, 1}, {1, 8}};
    check({{0, 2, 2}, {R, R, R}, {R, R, R}}, Errc::kStrategy, "/operators/0/strategy/1/1",
          "strategy needs 16 devices");
  }
}
