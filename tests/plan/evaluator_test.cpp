// SPDX-License-Identifier: Apache-2.0
// Tests of plan::evaluate against costs worked out by hand.
//
// Every expected number is written as the formula of plan/evaluator.hpp and
// cost/model.hpp with the literal sizes of the tiny graph under test (f32,
// so bytes = 4 * elements; links of 100 GB/s and 5 us per step; a device
// of 100 TFLOP/s at efficiency 0.5 and 1000 GB/s), never by calling the
// cost functions the evaluator itself uses.
#include "recsearch/plan/evaluator.hpp"

#include <doctest/doctest.h>

#include <algorithm>

#include "fixtures.hpp"

using namespace plan_test;
using cost::Collective;
using cost::Phase;
using plan::CommReason;
using plan::kReplicated;

namespace {

constexpr std::int16_t R = kReplicated;
constexpr ir::OpId kNoOp = ir::kNone;

// Seconds of a collective moving `bytes` per device in `steps` latency steps.
double secs(double bytes, int steps) { return bytes / kBw + steps * kLat; }

void check_event(const plan::CommEvent& e, CommReason reason, Collective c, Phase ph,
                 ir::TensorId tensor, ir::OpId from, ir::OpId to, std::uint32_t axis, double bytes,
                 double seconds) {
  CHECK(e.reason == reason);
  CHECK(e.collective == c);
  CHECK(e.phase == ph);
  CHECK(e.tensor == tensor);
  CHECK(e.from == from);
  CHECK(e.to == to);
  CHECK(e.axis == axis);
  CHECK(e.bytes == doctest::Approx(bytes).epsilon(1e-12));
  CHECK(e.seconds == doctest::Approx(seconds).epsilon(1e-12));
}

double sum_seconds(const plan::Evaluation& ev) {
  double s = 0;
  for (const auto& e : ev.events) s += e.seconds;
  return s;
}

// Relative closeness: doctest's Approx adds 1 to the scale, which makes it
// absolute for the nanoseconds these graphs take.
doctest::Approx rel(double x) { return doctest::Approx(x).epsilon(1e-12).scale(0); }

using Dims = std::vector<std::vector<std::uint32_t>>;
using Axes = std::vector<std::uint32_t>;

}  // namespace

TEST_CASE("column-then-row MLP: one output all-reduce, compute and memory") {
  // 2 devices: mm1 cuts j (column parallel), mm2 cuts k (row parallel);
  // y = [8,16] is never consumed, so its partial sum is reduced at the end.
  Mlp m(8);
  const auto cl = test_cluster();

  SUBCASE("training") {
    const auto p = make_plan({axis("c0", 2)}, {{2}, {1}});
    const auto ev = plan::evaluate(m.g, m.spaces, cl, p, {});
    REQUIRE(ev.events.size() == 1);
    // y: 8*16*4 = 512 bytes; all-reduce 2(k-1)/k*B = 512, 2*ceil(log2 2) steps.
    check_event(ev.events[0], CommReason::Output, Collective::AllReduce, Phase::Forward, m.y, 1,
                kNoOp, 0, 512, secs(512, 2));

    // mm1: 2*8*16*32/2 = 4096 flops; touches x 512 + w1 2048/2 + h 1024/2 = 2048 bytes.
    // mm2: 4096 flops; h 1024/2 + w2 2048/2 + y 512 (partial, whole) = 2048 bytes.
    // Training runs each forward and backward_flops_factor 2 times it, but
    // mm1 reads the data x, whose gradient nobody wants: it computes dW1
    // alone, half its backward (ir::backward_shares).
    const double forward = std::max(4096 / (100e12 * 0.5), 2048 / 1000e9);
    CHECK(ev.op_costs[0].compute_s == rel((1 + 2 * 0.5) * forward));
    CHECK(ev.op_costs[1].compute_s == rel((1 + 2) * forward));
    CHECK(ev.op_costs[0].communication_s == 0);
    CHECK(ev.op_costs[1].communication_s == doctest::Approx(secs(512, 2)));
    CHECK(ev.summary.compute_s == rel(5 * forward));
    CHECK(ev.summary.backward_compute_s == rel(3 * forward));
    CHECK(ev.summary.recompute_s == 0);
    CHECK(ev.summary.communication_s == doctest::Approx(secs(512, 2)));
    CHECK(ev.summary.step_time_s == rel(5 * forward + secs(512, 2)));

    // Parameters: halves of w1 and w2 (1024 bytes each) times 1 + 1 + 2
    // (f32: Adam state in f32); activations the backward keeps: x 512
    // (replicated, kept by mm1 for dW1), h 1024/2 (kept by mm2); y is kept
    // by nobody.
    CHECK(ev.summary.parameter_bytes == doctest::Approx(4 * 2048));
    CHECK(ev.summary.gradient_bytes == doctest::Approx(2048));
    CHECK(ev.summary.optimizer_bytes == doctest::Approx(2 * 2048));
    CHECK(ev.summary.activation_bytes == doctest::Approx(1024));
    CHECK(ev.summary.memory_per_device_bytes == doctest::Approx(4 * 2048 + 1024));
    CHECK(ev.summary.search_time_s == 0);

    CHECK(ev.tensors[m.x].dims == Dims{{}, {}});
    CHECK(ev.tensors[m.w1].dims == Dims{{}, {0}});
    CHECK(ev.tensors[m.h].dims == Dims{{}, {0}});
    CHECK(ev.tensors[m.h].partial.empty());
    CHECK(ev.tensors[m.w2].dims == Dims{{0}, {}});
    CHECK(ev.tensors[m.y].dims == Dims{{}, {}});
    CHECK(ev.tensors[m.y].partial == Axes{0});

    CHECK(ev.strategies[0] == ir::Strategy{{1, 1}, {1, 2}});
    CHECK(ev.strategies[1] == ir::Strategy{{1, 2}, {2, 1}});
  }

  SUBCASE("inference: no backward, parameters once, peak working set") {
    const auto p = make_plan({axis("c0", 2)}, {{2}, {1}}, Mode::Infer);
    const auto ev = plan::evaluate(m.g, m.spaces, cl, p, {});
    REQUIRE(ev.events.size() == 1);
    check_event(ev.events[0], CommReason::Output, Collective::AllReduce, Phase::Forward, m.y, 1,
                kNoOp, 0, 512, secs(512, 2));
    const double op_compute = std::max(4096 / (100e12 * 0.5), 2048 / 1000e9);
    CHECK(ev.summary.compute_s == rel(2 * op_compute));
    CHECK(ev.summary.backward_compute_s == 0);
    CHECK(ev.summary.parameter_bytes == doctest::Approx(2048));
    // mm1: x 512 + h 512; mm2: h 512 + y 512.
    CHECK(ev.summary.activation_bytes == doctest::Approx(1024));
    CHECK(ev.summary.memory_per_device_bytes == doctest::Approx(3072));
  }

  SUBCASE("a consumed partial output is not reduced at the end") {
    ir::Graph g("mlp+relu");
    const auto x = tensor(g, "x", {8, 16}, ir::TensorKind::Input);
    const auto w = tensor(g, "w", {16, 16}, ir::TensorKind::Parameter);
    const auto y = tensor(g, "y", {8, 16});
    const auto r = tensor(g, "r", {8, 16});
    op(g, "mm", "MatMul", {x, w}, {y});
    op(g, "relu", "ReLU", {y}, {r});
    g.finalize();
    const std::vector<OpSpace> spaces = {matmul_space(8, 16, 16), unary_space(8, 16)};
    const auto ev = plan::evaluate(g, spaces, cl, make_plan({axis("c0", 2)}, {{1}, {R}}), {});
    // Only the P->R all-reduce for relu, forward (its dual is free).
    REQUIRE(ev.events.size() == 1);
    check_event(ev.events[0], CommReason::Layout, Collective::AllReduce, Phase::Forward, y, 0, 1, 0,
                512, secs(512, 2));
    CHECK(ev.op_costs[1].communication_s == doctest::Approx(secs(512, 2)));
  }
}

TEST_CASE("data parallel: gradient all-reduce of replicated parameters") {
  // Batch 6 cut 3 ways: each weight (16*32*4 = 2048 bytes) is replicated, so
  // its gradient is all-reduced: 2(k-1)/k * 2048 bytes; parameter gradients
  // are bucketed, so no latency steps are charged.
  Mlp m(6);
  const auto cl = test_cluster();
  const double grad_bytes = 2.0 * 2 / 3 * 2048;

  SUBCASE("training") {
    const auto ev = plan::evaluate(m.g, m.spaces, cl, make_plan({axis("c0", 3)}, {{0}, {0}}), {});
    REQUIRE(ev.events.size() == 2);
    check_event(ev.events[0], CommReason::Gradient, Collective::AllReduce, Phase::Backward, m.w1, 0,
                kNoOp, 0, grad_bytes, secs(grad_bytes, 0));
    check_event(ev.events[1], CommReason::Gradient, Collective::AllReduce, Phase::Backward, m.w2, 1,
                kNoOp, 0, grad_bytes, secs(grad_bytes, 0));
    CHECK(ev.op_costs[0].communication_s == doctest::Approx(secs(grad_bytes, 0)));
    CHECK(ev.op_costs[1].communication_s == doctest::Approx(secs(grad_bytes, 0)));
    CHECK(ev.summary.communication_s == doctest::Approx(2 * secs(grad_bytes, 0)));
    // Whole weights with gradients and Adam state; x and h (kept by the
    // products) in thirds; y is kept by nobody.
    CHECK(ev.summary.parameter_bytes == doctest::Approx(4 * (2048 + 2048)));
    CHECK(ev.summary.activation_bytes == doctest::Approx(384 / 3 + 768 / 3));
    CHECK(ev.tensors[m.x].dims == Dims{{0}, {}});
    CHECK(ev.tensors[m.y].dims == Dims{{0}, {}});
  }

  SUBCASE("inference has no gradients") {
    const auto ev =
        plan::evaluate(m.g, m.spaces, cl, make_plan({axis("c0", 3)}, {{0}, {0}}, Mode::Infer), {});
    CHECK(ev.events.empty());
    CHECK(ev.summary.communication_s == 0);
    CHECK(ev.summary.parameter_bytes == doctest::Approx(4096));
  }

  SUBCASE("latency can be left out") {
    CostParams params;
    params.count_latency = false;
    const auto ev =
        plan::evaluate(m.g, m.spaces, cl, make_plan({axis("c0", 3)}, {{0}, {0}}), params);
    REQUIRE(ev.events.size() == 2);
    CHECK(ev.events[0].seconds == doctest::Approx(grad_bytes / kBw));
  }

  SUBCASE("an activation replicated by a cut gets its gradient reduced too") {
    // mm2 alone cuts j: its input h is replicated, so dh is partial.
    const auto ev = plan::evaluate(m.g, m.spaces, cl, make_plan({axis("c0", 2)}, {{R}, {2}}), {});
    // h: 6*32*4 = 768 bytes.
    REQUIRE(ev.events.size() == 1);
    check_event(ev.events[0], CommReason::Gradient, Collective::AllReduce, Phase::Backward, m.h, 1,
                kNoOp, 0, 768, secs(768, 2));
  }
}

TEST_CASE("layout redistributions: S->R all-gather on the consumer's slice") {
  // x[8,16] -> relu -> a -> softmax (d1 whole) -> b, on a 2x2 mesh. Axis c0:
  // both cut d0. Axis c1: relu cuts d1, softmax stays whole and wants a
  // replicated; its slice of a is already halved by c0: 512/2 = 256 bytes.
  ir::Graph g("chain");
  const auto x = tensor(g, "x", {8, 16}, ir::TensorKind::Input);
  const auto a = tensor(g, "a", {8, 16});
  const auto b = tensor(g, "b", {8, 16});
  op(g, "relu", "ReLU", {x}, {a});
  op(g, "softmax", "Softmax", {a}, {b});
  // x takes a gradient, as a pipeline stage's received activation does;
  // else the chain, on the data alone, would run no backward at all.
  g.set_gradient_inputs({x});
  g.finalize();
  const std::vector<OpSpace> spaces = {unary_space(8, 16), unary_space(8, 16, true)};
  const auto cl = test_cluster();
  const std::vector<Cut> mesh = {axis("c0", 2), axis("c1", 2)};

  SUBCASE("training: all-gather forward, reduce-scatter backward") {
    const auto ev = plan::evaluate(g, spaces, cl, make_plan(mesh, {{0, 1}, {0, R}}), {});
    REQUIRE(ev.events.size() == 2);
    // (k-1)/k * 256 = 128 bytes, one step each.
    check_event(ev.events[0], CommReason::Layout, Collective::AllGather, Phase::Forward, a, 0, 1, 1,
                128, secs(128, 1));
    check_event(ev.events[1], CommReason::Layout, Collective::ReduceScatter, Phase::Backward, a, 0,
                1, 1, 128, secs(128, 1));
    CHECK(ev.op_costs[0].communication_s == 0);
    CHECK(ev.op_costs[1].communication_s == doctest::Approx(2 * secs(128, 1)));
    CHECK(ev.tensors[x].dims == Dims{{0}, {1}});
    CHECK(ev.tensors[a].dims == Dims{{0}, {1}});
    CHECK(ev.tensors[b].dims == Dims{{0}, {}});
    // ReLU keeps a 1-byte mask of a (a quarter of its f32 slice 512/4),
    // Softmax its output b (512/2); x is kept by nobody.
    CHECK(ev.summary.activation_bytes == doctest::Approx(128 / 4 + 256));
    CHECK(ev.summary.parameter_bytes == 0);
  }

  SUBCASE("inference: forward only") {
    const auto ev =
        plan::evaluate(g, spaces, cl, make_plan(mesh, {{0, 1}, {0, R}}, Mode::Infer), {});
    REQUIRE(ev.events.size() == 1);
    check_event(ev.events[0], CommReason::Layout, Collective::AllGather, Phase::Forward, a, 0, 1, 1,
                128, secs(128, 1));
    // relu: x 128 + a 128; softmax: a 256 + b 256.
    CHECK(ev.summary.activation_bytes == doctest::Approx(512));
  }
}

TEST_CASE("layout redistributions: all-to-all between different shard dims") {
  ir::Graph g("transpose-ish");
  const auto x = tensor(g, "x", {8, 16}, ir::TensorKind::Input);
  const auto a = tensor(g, "a", {8, 16});
  const auto b = tensor(g, "b", {8, 16});
  op(g, "rows", "ReLU", {x}, {a});
  op(g, "cols", "ReLU", {a}, {b});
  g.finalize();
  const std::vector<OpSpace> spaces = {unary_space(8, 16), unary_space(8, 16)};
  const auto cl = test_cluster();
  // a: 512 bytes; all-to-all (k-1)/k^2 * 512 = 128 bytes, one step.
  const auto train = plan::evaluate(g, spaces, cl, make_plan({axis("c0", 2)}, {{0}, {1}}), {});
  REQUIRE(train.events.size() == 2);
  check_event(train.events[0], CommReason::Layout, Collective::AllToAll, Phase::Forward, a, 0, 1, 0,
              128, secs(128, 1));
  check_event(train.events[1], CommReason::Layout, Collective::AllToAll, Phase::Backward, a, 0, 1,
              0, 128, secs(128, 1));
  const auto infer =
      plan::evaluate(g, spaces, cl, make_plan({axis("c0", 2)}, {{0}, {1}}, Mode::Infer), {});
  REQUIRE(infer.events.size() == 1);
  CHECK(infer.events[0].collective == Collective::AllToAll);
  CHECK(infer.events[0].phase == Phase::Forward);
}

TEST_CASE("layout redistributions: partial to shard and to replicate") {
  // Row-parallel mm leaves y partial; r1 wants it cut on d0 (reduce-scatter),
  // r2 wants it whole (all-reduce, whose backward dual is free).
  ir::Graph g("partial");
  const auto x = tensor(g, "x", {8, 16}, ir::TensorKind::Input);
  const auto w = tensor(g, "w", {16, 16}, ir::TensorKind::Parameter);
  const auto y = tensor(g, "y", {8, 16});
  const auto r1 = tensor(g, "r1", {8, 16});
  const auto r2 = tensor(g, "r2", {8, 16});
  op(g, "mm", "MatMul", {x, w}, {y});
  op(g, "r1", "ReLU", {y}, {r1});
  op(g, "r2", "ReLU", {y}, {r2});
  g.finalize();
  const std::vector<OpSpace> spaces = {matmul_space(8, 16, 16), unary_space(8, 16),
                                       unary_space(8, 16)};
  const auto ev =
      plan::evaluate(g, spaces, test_cluster(), make_plan({axis("c0", 2)}, {{1}, {0}, {R}}), {});
  REQUIRE(ev.events.size() == 3);
  check_event(ev.events[0], CommReason::Layout, Collective::ReduceScatter, Phase::Forward, y, 0, 1,
              0, 256, secs(256, 1));
  check_event(ev.events[1], CommReason::Layout, Collective::AllGather, Phase::Backward, y, 0, 1, 0,
              256, secs(256, 1));
  check_event(ev.events[2], CommReason::Layout, Collective::AllReduce, Phase::Forward, y, 0, 2, 0,
              512, secs(512, 2));
  CHECK(ev.tensors[y].partial == Axes{0});
  CHECK(ev.tensors[y].dims == Dims{{}, {}});
  CHECK(ev.op_costs[1].communication_s == doctest::Approx(2 * secs(256, 1)));
  CHECK(ev.op_costs[2].communication_s == doctest::Approx(secs(512, 2)));
  // w held halved (512 bytes) with its state; mm keeps x halved on d1
  // (256); the ReLUs keep 1-byte masks of r1 halved (256/4) and r2 whole
  // (512/4); y is kept by nobody.
  CHECK(ev.summary.parameter_bytes == doctest::Approx(4 * 512));
  CHECK(ev.summary.activation_bytes == doctest::Approx(256 + 256 / 4 + 512 / 4));
}

TEST_CASE("layout redistributions: holders of unproduced tensors, R->S backward") {
  // w is a parameter used by mm0 (which cuts j: w held S(1)) and by mm1
  // (replicated: wants w whole). x is held replicated by mm0 and wanted
  // cut on d0 by r.
  ir::Graph g("shared weight");
  const auto x = tensor(g, "x", {8, 16}, ir::TensorKind::Input);
  const auto w = tensor(g, "w", {16, 16}, ir::TensorKind::Parameter);
  const auto a = tensor(g, "a", {8, 16});
  const auto b = tensor(g, "b", {8, 16});
  const auto c = tensor(g, "c", {8, 16});
  op(g, "mm0", "MatMul", {x, w}, {a});
  op(g, "mm1", "MatMul", {a, w}, {b});
  op(g, "r", "ReLU", {x}, {c});
  g.finalize();
  const std::vector<OpSpace> spaces = {matmul_space(8, 16, 16), matmul_space(8, 16, 16),
                                       unary_space(8, 16)};
  const auto cl = test_cluster();
  const auto p = make_plan({axis("c0", 2)}, {{2}, {R}, {0}});

  SUBCASE("training") {
    const auto ev = plan::evaluate(g, spaces, cl, p, {});
    // By tensor id: x (R->S: backward all-gather of 512 bytes), w (S->R on
    // 1024 bytes), a (S->R on 512 bytes); mm1 cuts nothing, so no gradients.
    REQUIRE(ev.events.size() == 5);
    check_event(ev.events[0], CommReason::Layout, Collective::AllGather, Phase::Backward, x, 0, 2,
                0, 256, secs(256, 1));
    check_event(ev.events[1], CommReason::Layout, Collective::AllGather, Phase::Forward, w, 0, 1, 0,
                512, secs(512, 1));
    check_event(ev.events[2], CommReason::Layout, Collective::ReduceScatter, Phase::Backward, w, 0,
                1, 0, 512, secs(512, 1));
    check_event(ev.events[3], CommReason::Layout, Collective::AllGather, Phase::Forward, a, 0, 1, 0,
                256, secs(256, 1));
    check_event(ev.events[4], CommReason::Layout, Collective::ReduceScatter, Phase::Backward, a, 0,
                1, 0, 256, secs(256, 1));
    CHECK(ev.tensors[w].dims == Dims{{}, {0}});
    CHECK(ev.tensors[x].dims == Dims{{}, {}});
    // w held halved: 512 * 4; mm0 keeps x (512), mm1 keeps a (256); r, on
    // the data alone, runs no backward and keeps nothing; b is kept by
    // nobody.
    CHECK(ev.summary.parameter_bytes == doctest::Approx(2048));
    CHECK(ev.summary.activation_bytes == doctest::Approx(512 + 256));
    CHECK(ev.summary.communication_s == doctest::Approx(sum_seconds(ev)));
    CHECK(ev.op_costs[1].communication_s == doctest::Approx(2 * secs(512, 1) + 2 * secs(256, 1)));
    CHECK(ev.op_costs[2].communication_s == doctest::Approx(secs(256, 1)));
  }

  SUBCASE("inference: R->S is a free local slice") {
    auto pi = p;
    pi.mode = Mode::Infer;
    const auto ev = plan::evaluate(g, spaces, cl, pi, {});
    REQUIRE(ev.events.size() == 2);
    CHECK(ev.events[0].tensor == w);
    CHECK(ev.events[1].tensor == a);
    CHECK(ev.summary.parameter_bytes == doctest::Approx(512));
  }
}

TEST_CASE("layout redistributions: one per distinct (layout, consumer slice)") {
  // a = relu0(x) feeds relu1, relu2, relu3. Axis c0: relu0 and relu1 cut
  // d0; relu2 and relu3 want a whole with the same slice: one all-gather,
  // charged to relu2. Axis c1: relu0 cuts d1; relu1's slice is halved by
  // c0 (256 bytes), relu2's and relu3's are not (512): two all-gathers.
  ir::Graph g("fan-out");
  const auto x = tensor(g, "x", {8, 16}, ir::TensorKind::Input);
  const auto a = tensor(g, "a", {8, 16});
  std::vector<ir::TensorId> outs;
  op(g, "relu0", "ReLU", {x}, {a});
  for (int i = 1; i <= 3; ++i) {
    outs.push_back(tensor(g, "o" + std::to_string(i), {8, 16}));
    op(g, "relu" + std::to_string(i), "ReLU", {a}, {outs.back()});
  }
  g.finalize();
  const std::vector<OpSpace> spaces(4, unary_space(8, 16));
  const auto ev = plan::evaluate(
      g, spaces, test_cluster(),
      make_plan({axis("c0", 2), axis("c1", 2)}, {{0, 1}, {0, R}, {R, R}, {R, R}}), {});
  REQUIRE(ev.events.size() == 6);
  check_event(ev.events[0], CommReason::Layout, Collective::AllGather, Phase::Forward, a, 0, 2, 0,
              256, secs(256, 1));
  check_event(ev.events[1], CommReason::Layout, Collective::ReduceScatter, Phase::Backward, a, 0, 2,
              0, 256, secs(256, 1));
  check_event(ev.events[2], CommReason::Layout, Collective::AllGather, Phase::Forward, a, 0, 1, 1,
              128, secs(128, 1));
  check_event(ev.events[3], CommReason::Layout, Collective::ReduceScatter, Phase::Backward, a, 0, 1,
              1, 128, secs(128, 1));
  check_event(ev.events[4], CommReason::Layout, Collective::AllGather, Phase::Forward, a, 0, 2, 1,
              256, secs(256, 1));
  check_event(ev.events[5], CommReason::Layout, Collective::ReduceScatter, Phase::Backward, a, 0, 2,
              1, 256, secs(256, 1));
  CHECK(ev.op_costs[1].communication_s == doctest::Approx(2 * secs(128, 1)));
  CHECK(ev.op_costs[2].communication_s == doctest::Approx(4 * secs(256, 1)));
  CHECK(ev.op_costs[3].communication_s == 0);
  CHECK(ev.tensors[a].dims == Dims{{0}, {1}});
}

TEST_CASE("halo exchange of a convolution cut on h") {
  // x[2,4,16,16] * w[8,4,3,3] -> y[2,8,16,16] (pads 1): h and w are window
  // loops with a halo of 2 rows. Mesh 2x2x2: c0 cuts n, c1 and c2 cut h.
  ir::Graph g("conv");
  const auto x = tensor(g, "x", {2, 4, 16, 16}, ir::TensorKind::Input);
  const auto wt = tensor(g, "wt", {8, 4, 3, 3}, ir::TensorKind::Parameter);
  const auto y = tensor(g, "y", {2, 8, 16, 16});
  op(g, "conv", "Conv2D", {x, wt}, {y});
  g.finalize();
  OpSpace s;
  s.loops = {{"n", 2, DimRole::Parallel, 0},  {"o", 8, DimRole::Parallel, 0},
             {"h", 16, DimRole::Window, 2},   {"w", 16, DimRole::Window, 2},
             {"c", 4, DimRole::Reduction, 0}, {"r", 3, DimRole::Whole, 0},
             {"s", 3, DimRole::Whole, 0}};
  s.inputs = {{0, 4, 2, 3}, {1, 4, 5, 6}};
  s.outputs = {{0, 1, 2, 3}};
  s.flops = 2.0 * 2 * 8 * 16 * 16 * 4 * 9;
  const auto cl = test_cluster();
  const std::vector<Cut> mesh = {axis("c0", 2), axis("c1", 2), axis("c2", 2)};
  // wt: 8*4*3*3*4 = 1152 bytes, replicated on every axis: all-reduced on each (bucketed: no
  // latency).
  const double grad = 1152;
  // x: 8192 bytes, halved by n: slice 4096 over an extent 16 of h -> a row
  // is 256 bytes, 2 rows = 512. On c2 the slice (2048) and extent (8) halve.
  const double halo = 512;

  SUBCASE("training") {
    const auto ev = plan::evaluate(g, {s}, cl, make_plan(mesh, {{0, 2, 2}}), {});
    REQUIRE(ev.events.size() == 7);
    check_event(ev.events[0], CommReason::Gradient, Collective::AllReduce, Phase::Backward, wt, 0,
                kNoOp, 0, grad, secs(grad, 0));
    for (std::uint32_t a = 1; a <= 2; ++a) {
      const std::size_t i = 1 + 3 * (a - 1);
      check_event(ev.events[i], CommReason::Gradient, Collective::AllReduce, Phase::Backward, wt, 0,
                  kNoOp, a, grad, secs(grad, 0));
      check_event(ev.events[i + 1], CommReason::Halo, Collective::Halo, Phase::Forward, x, 0, kNoOp,
                  a, halo, secs(halo, 1));
      check_event(ev.events[i + 2], CommReason::Halo, Collective::Halo, Phase::Backward, x, 0,
                  kNoOp, a, halo, secs(halo, 1));
    }
    CHECK(ev.tensors[y].dims == Dims{{0}, {}, {1, 2}, {}});
    CHECK(ev.tensors[x].dims == Dims{{0}, {}, {1, 2}, {}});
    CHECK(ev.strategies[0] == ir::Strategy{{2, 1, 4, 1}, {1, 1, 1, 1}});
    // flops / 8 devices; touched x 8192/8 + wt 1152 + y 16384/8.
    const double compute = 3 * std::max(s.flops / 8 / 50e12, (1024.0 + 1152 + 2048) / 1000e9);
    CHECK(ev.summary.compute_s == doctest::Approx(compute));
    CHECK(ev.summary.communication_s == doctest::Approx(3 * secs(grad, 0) + 4 * secs(halo, 1)));
  }

  SUBCASE("inference: forward halos only") {
    const auto ev = plan::evaluate(g, {s}, cl, make_plan(mesh, {{0, 2, 2}}, Mode::Infer), {});
    REQUIRE(ev.events.size() == 2);
    CHECK(ev.events[0].reason == CommReason::Halo);
    CHECK(ev.events[0].axis == 1);
    CHECK(ev.events[1].axis == 2);
    CHECK(ev.events[1].bytes == doctest::Approx(halo));
  }

  SUBCASE("a window loop with a halo of 0 rows exchanges nothing") {
    OpSpace s1 = s;
    s1.loops[3].halo = 0;
    const auto ev = plan::evaluate(g, {s1}, cl, make_plan(mesh, {{3, R, R}}, Mode::Infer), {});
    CHECK(ev.events.empty());
  }
}

TEST_CASE("nested axes on one dim and an untouched parameter") {
  // mm on c0,c1,c2 (2 each) with cuts i, j, j: MindSpore's [[2,1],[1,4]].
  ir::Graph g("mm");
  const auto x = tensor(g, "x", {32, 64}, ir::TensorKind::Input);
  const auto w = tensor(g, "w", {64, 128}, ir::TensorKind::Parameter);
  const auto y = tensor(g, "y", {32, 128});
  const auto unused = tensor(g, "unused", {10, 10}, ir::TensorKind::Parameter);
  const auto stray = tensor(g, "stray", {5}, ir::TensorKind::Input);
  op(g, "mm", "MatMul", {x, w}, {y});
  g.finalize();
  const std::vector<Cut> mesh = {axis("c0", 2), axis("c1", 2), axis("c2", 2)};
  const auto ev = plan::evaluate(g, {matmul_space(32, 64, 128)}, test_cluster(),
                                 make_plan(mesh, {{0, 2, 2}}), {});
  CHECK(ev.tensors[y].dims == Dims{{0}, {1, 2}});
  CHECK(ev.tensors[w].dims == Dims{{}, {1, 2}});
  CHECK(ev.tensors[x].dims == Dims{{0}, {}});
  CHECK(ev.tensors[unused].dims == Dims{{}, {}});
  CHECK(ev.tensors[unused].partial.empty());
  CHECK(ev.tensors[stray].dims == Dims{{}});
  CHECK(ev.strategies[0] == ir::Strategy{{2, 1}, {1, 4}});
  // x is an input: no gradient on c1/c2 where it is replicated; w is cut on
  // every axis... but not on c0, where it is replicated: one all-reduce of w
  // (32768 bytes), bucketed: bandwidth only.
  REQUIRE(ev.events.size() == 1);
  check_event(ev.events[0], CommReason::Gradient, Collective::AllReduce, Phase::Backward, w, 0,
              kNoOp, 0, 32768, secs(32768, 0));
  // w 32768/4 and the untouched 400-byte parameter, with gradient and Adam
  // state; mm keeps x (8192/2); y and the untouched input are kept by nobody.
  CHECK(ev.summary.parameter_bytes == doctest::Approx(4 * (8192 + 400)));
  CHECK(ev.summary.activation_bytes == doctest::Approx(4096));
}

TEST_CASE("a fully replicated plan costs compute only") {
  Mlp m(8);
  const auto ev = plan::evaluate(m.g, m.spaces, test_cluster(),
                                 make_plan({axis("c0", 2), axis("c1", 3)}, {{R, R}, {R, R}}), {});
  CHECK(ev.events.empty());
  CHECK(ev.summary.communication_s == 0);
  CHECK(ev.summary.step_time_s == doctest::Approx(ev.summary.compute_s));
  // Each op touches 512 + 2048 + 1024 bytes whole and does 8192 flops.
  CHECK(ev.op_costs[0].compute_s ==
        doctest::Approx(3 * std::max(8192 / 50e12, (512.0 + 2048 + 1024) / 1000e9)));
  CHECK(ev.strategies[0] == ir::Strategy{{1, 1}, {1, 1}});
}

TEST_CASE("evaluate rejects plans of the wrong shape") {
  Mlp m(8);
  const auto cl = test_cluster();
  check_error(
      [&] { (void)plan::evaluate(m.g, m.spaces, cl, make_plan({axis("c0", 2)}, {{0}}), {}); },
      Errc::kPlan, "/operators");
  check_error(
      [&] {
        (void)plan::evaluate(m.g, m.spaces, cl, make_plan({axis("c0", 2)}, {{0}, {0, 0}}), {});
      },
      Errc::kPlan, "/operators/1/cuts");
  check_error(
      [&] {
        (void)plan::evaluate(m.g, m.spaces, cl, make_plan({axis("c0", 2)}, {{0}, {3}}), {});
      },
      Errc::kPlan, "/operators/1/cuts/0");
}

TEST_CASE("comm reason names") {
  CHECK(plan::comm_reason_name(CommReason::Layout) == "layout");
  CHECK(plan::comm_reason_name(CommReason::Gradient) == "gradient");
  CHECK(plan::comm_reason_name(CommReason::Halo) == "halo");
  CHECK(plan::comm_reason_name(CommReason::Output) == "output");
}
