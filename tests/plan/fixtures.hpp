// SPDX-License-Identifier: Apache-2.0
// Shared fixtures of the plan tests: tiny graphs with hand-written operator
// spaces, mesh axes with round bandwidths, and a device with round peaks.
//
// The spaces are written out here instead of coming from algebra::
// build_op_space so that the expected costs in the tests follow from the
// numbers on the page alone (loops, roles, flops), whatever conventions
// the algebra module picks.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/cluster.hpp"
#include "recsearch/error.hpp"
#include "recsearch/ir/graph.hpp"
#include "recsearch/plan/plan.hpp"
#include "support/errors.hpp"

namespace plan_test {

using namespace recsearch;
using algebra::DimRole;
using algebra::kUnmapped;
using algebra::OpSpace;

// 100 GB/s and 5 us per step: time = bytes / 1e11 + steps * 5e-6.
inline constexpr double kBw = 1e11;
inline constexpr double kLat = 5e-6;

inline Cut axis(std::string name, std::int64_t size, double bw = kBw, double lat = kLat) {
  Cut c;
  c.axis = std::move(name);
  c.size = size;
  c.bandwidth_Bps = bw;
  c.latency_s = lat;
  return c;
}

// Peak 100 TFLOP/s (50 at the default efficiency 0.5) and 1000 GB/s HBM.
inline Cluster test_cluster() {
  return Cluster("test", {Level{"device", 8, 100.0, 5.0}}, DeviceSpec{100.0, 80.0, 1000.0});
}

// MatMul `ik,kj->ij`: loops i, k (reduction), j.
inline OpSpace matmul_space(std::int64_t i, std::int64_t k, std::int64_t j) {
  OpSpace s;
  s.loops = {{"i", i, DimRole::Parallel, 0},
             {"k", k, DimRole::Reduction, 0},
             {"j", j, DimRole::Parallel, 0}};
  s.inputs = {{0, 1}, {1, 2}};
  s.outputs = {{0, 2}};
  s.flops = 2.0 * static_cast<double>(i * k * j);
  return s;
}

// Rank-2 unary elementwise: loops d0, d1; `whole1` makes d1 Whole (softmax).
inline OpSpace unary_space(std::int64_t d0, std::int64_t d1, bool whole1 = false) {
  OpSpace s;
  s.loops = {{"d0", d0, DimRole::Parallel, 0},
             {"d1", d1, whole1 ? DimRole::Whole : DimRole::Parallel, 0}};
  s.inputs = {{0, 1}};
  s.outputs = {{0, 1}};
  s.flops = static_cast<double>(d0 * d1);
  return s;
}

// Rank-2 binary elementwise where the second input is [1, d1] (dim 0 broadcast).
inline OpSpace broadcast_add_space(std::int64_t d0, std::int64_t d1) {
  OpSpace s = unary_space(d0, d1);
  s.inputs = {{0, 1}, {kUnmapped, 1}};
  return s;
}

inline ir::TensorId tensor(ir::Graph& g, const std::string& name, ir::Shape shape,
                           ir::TensorKind kind = ir::TensorKind::Activation) {
  return g.add_tensor(name, std::move(shape), ir::DType::F32, kind);
}

inline ir::OpId op(ir::Graph& g, const std::string& name, const std::string& type,
                   std::vector<ir::TensorId> in, std::vector<ir::TensorId> out) {
  ir::Operator o;
  o.name = name;
  o.type = type;
  o.inputs = std::move(in);
  o.outputs = std::move(out);
  return g.add_operator(std::move(o));
}

inline plan::Plan make_plan(std::vector<Cut> mesh, std::vector<std::vector<std::int16_t>> cuts,
                            Mode mode = Mode::Train) {
  plan::Plan p;
  p.graph_name = "test";
  p.algorithm = "file";
  p.mode = mode;
  p.mesh = std::move(mesh);
  p.cuts = std::move(cuts);
  return p;
}

// Two-layer MLP x[b,16] -> w1[16,32] -> h[b,32] -> w2[32,16] -> y[b,16];
// ops 0 (mm1) and 1 (mm2); y has no consumer.
struct Mlp {
  ir::Graph g{"mlp"};
  std::vector<OpSpace> spaces;
  ir::TensorId x, w1, h, w2, y;

  explicit Mlp(std::int64_t b) {
    x = tensor(g, "x", {b, 16}, ir::TensorKind::Input);
    w1 = tensor(g, "w1", {16, 32}, ir::TensorKind::Parameter);
    h = tensor(g, "h", {b, 32});
    w2 = tensor(g, "w2", {32, 16}, ir::TensorKind::Parameter);
    y = tensor(g, "y", {b, 16});
    op(g, "mm1", "MatMul", {x, w1}, {h});
    op(g, "mm2", "MatMul", {h, w2}, {y});
    g.finalize();
    spaces = {matmul_space(b, 16, 32), matmul_space(b, 32, 16)};
  }
};

// check_error: tests/support/errors.hpp.
using recsearch::testing::check_error;

}  // namespace plan_test
