// SPDX-License-Identifier: Apache-2.0
// Peaks per dtype (docs/cost-model.md, Peaks per dtype): an operator's
// compute time is its flops over the peak of its precision, in the
// evaluator and in the searches' own accounts alike; a device given one
// peak prices every precision at it, as before there were several.
//
// Expected times are written out from the numbers on the page (flops of a
// square MatMul, the H100 figures of data/clusters), never by calling the
// cost functions under test.
#include <doctest/doctest.h>

#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/cluster.hpp"
#include "recsearch/io/json_io.hpp"
#include "recsearch/ir/graph.hpp"
#include "recsearch/plan/evaluator.hpp"
#include "recsearch/plan/precision.hpp"
#include "recsearch/search/search.hpp"
#include "support/graph_factories.hpp"
#include "support/search_options.hpp"

using namespace recsearch;

namespace {

using testing::add_op_ids;

constexpr std::int64_t kN = 8192;  // flops-bound at every peak below
constexpr double kFlops = 2.0 * kN * kN * kN;

// x[N, N] @ w[N, N] -> y in `dtype`.
ir::Graph square_matmul(ir::DType dtype) {
  ir::Graph g("mm");
  const auto x = g.add_tensor("x", {kN, kN}, dtype, ir::TensorKind::Input);
  const auto w = g.add_tensor("w", {kN, kN}, dtype, ir::TensorKind::Parameter);
  const auto y = g.add_tensor("y", {kN, kN}, dtype);
  add_op_ids(g, "mm", "MatMul", {x, w}, {y});
  g.finalize();
  return g;
}

// One H100 as data/clusters/dgx_h100_8.json describes its device.
Cluster one_h100() {
  DeviceSpec d;
  d.peak_TFLOPs = 989;
  d.memory_bandwidth_GBps = 3350;
  d.peak_f64_TFLOPs = 67;
  d.peak_f32_TFLOPs = 67;
  d.peak_tf32_TFLOPs = 494.7;
  d.peak_f8_TFLOPs = 1978.9;
  return Cluster("h100", {Level{"gpu", 1, 450, 2}}, d);
}

// The evaluator's compute time of the replicated plan on one device.
double evaluated_compute(const ir::Graph& g, const Cluster& c, const CostParams& p) {
  const auto spaces = algebra::build_op_spaces(g);
  plan::Plan plan;
  plan.mode = Mode::Infer;
  plan.mesh = c.cuts();
  plan.cuts.assign(g.num_operators(),
                   std::vector<std::int16_t>(c.cuts().size(), plan::kReplicated));
  return plan::evaluate(g, spaces, c, plan, p).summary.compute_s;
}

std::string data_dir() {
  const char* d = std::getenv("RECSEARCH_DATA");
  return d ? d : "data";
}

}  // namespace

TEST_CASE("an f32 MatMul runs at the f32 peak, a bf16 one at the 16-bit peak") {
  const Cluster c = one_h100();
  const CostParams p;  // efficiency 0.5, no TF32
  CHECK(evaluated_compute(square_matmul(ir::DType::F32), c, p) ==
        doctest::Approx(kFlops / (67e12 * 0.5)).epsilon(1e-12));
  CHECK(evaluated_compute(square_matmul(ir::DType::BF16), c, p) ==
        doctest::Approx(kFlops / (989e12 * 0.5)).epsilon(1e-12));
  CHECK(evaluated_compute(square_matmul(ir::DType::F16), c, p) ==
        doctest::Approx(kFlops / (989e12 * 0.5)).epsilon(1e-12));
  CHECK(evaluated_compute(square_matmul(ir::DType::F64), c, p) ==
        doctest::Approx(kFlops / (67e12 * 0.5)).epsilon(1e-12));
  CHECK(evaluated_compute(square_matmul(ir::DType::F8), c, p) ==
        doctest::Approx(kFlops / (1978.9e12 * 0.5)).epsilon(1e-12));

  SUBCASE("tf32 only where the cost settings allow it, and only for contractions") {
    CostParams tf32 = p;
    tf32.tf32 = true;
    CHECK(evaluated_compute(square_matmul(ir::DType::F32), c, tf32) ==
          doctest::Approx(kFlops / (494.7e12 * 0.5)).epsilon(1e-12));
    CHECK(evaluated_compute(square_matmul(ir::DType::BF16), c, tf32) ==
          doctest::Approx(kFlops / (989e12 * 0.5)).epsilon(1e-12));
    ir::Graph g("relu");
    const auto x = g.add_tensor("x", {kN, kN}, ir::DType::F32, ir::TensorKind::Input);
    const auto y = g.add_tensor("y", {kN, kN}, ir::DType::F32);
    add_op_ids(g, "r", "ReLU", {x}, {y});
    g.finalize();
    CHECK(plan::operator_precision(g, 0, tf32) == Precision::F32);
    CHECK(plan::operator_precision(square_matmul(ir::DType::F32), 0, tf32) == Precision::TF32);
  }

  SUBCASE("a device given one peak runs every dtype at it") {
    const Cluster flat("one", {Level{"gpu", 1, 450, 2}}, DeviceSpec{100, 80, 3350});
    CHECK(evaluated_compute(square_matmul(ir::DType::F32), flat, p) ==
          doctest::Approx(kFlops / (100e12 * 0.5)).epsilon(1e-12));
    CHECK(evaluated_compute(square_matmul(ir::DType::F8), flat, p) ==
          doctest::Approx(kFlops / (100e12 * 0.5)).epsilon(1e-12));
  }
}

TEST_CASE("operator precision: the widest floating operand") {
  ir::Graph g("mixed");
  const auto a = g.add_tensor("a", {4, 4}, ir::DType::BF16, ir::TensorKind::Input);
  const auto b = g.add_tensor("b", {4, 4}, ir::DType::F32, ir::TensorKind::Parameter);
  const auto i = g.add_tensor("i", {4}, ir::DType::I64, ir::TensorKind::Input);
  const auto ab = g.add_tensor("ab", {4, 4}, ir::DType::F32);
  const auto oh = g.add_tensor("oh", {4, 8}, ir::DType::F16);
  add_op_ids(g, "mm", "MatMul", {a, b}, {ab});
  add_op_ids(g, "oh", "OneHot", {i}, {oh}, {{"depth", std::int64_t{8}}});
  g.finalize();
  const CostParams p;
  CHECK(plan::operator_precision(g, 0, p) == Precision::F32);   // bf16 x f32 promotes
  CHECK(plan::operator_precision(g, 1, p) == Precision::BF16);  // integer in, f16 out
}

TEST_CASE("search and evaluator agree at each precision on the bundled H100 cluster") {
  const Cluster c = io::read_cluster_file(data_dir() + "/clusters/dgx_h100_8.json");
  CHECK(c.device().peak_TFLOPs_of(Precision::F32) == 67);
  CHECK(c.device().peak_TFLOPs_of(Precision::BF16) == 989);
  for (const ir::DType dt : {ir::DType::F32, ir::DType::BF16}) {
    const ir::Graph g = square_matmul(dt);
    const auto spaces = algebra::build_op_spaces(g);
    for (const Mode mode : {Mode::Train, Mode::Infer}) {
      search::SearchOptions o = testing::operator_level_options();
      o.mode = mode;
      const auto rec = search::run(g, spaces, c, o);
      CHECK(rec.bookkept_step_time_s ==
            doctest::Approx(rec.eval.summary.step_time_s).epsilon(1e-9));
    }
  }
}
