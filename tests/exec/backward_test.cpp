// SPDX-License-Identifier: Apache-2.0
// The backward kernels of the execution layer against finite differences:
// for every kind the executor runs, with L = Σ r·y for a fixed random r, the
// gradient run_backward_kernel gives each floating input must equal the
// central difference of L computed with the forward kernel. This is what
// `exec --train --check` cannot see (the sharded and the one-device run
// share the kernels): that the kernels differentiate what the forward
// computes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "exec/kernels.hpp"
#include "recsearch/ir/graph.hpp"

using namespace recsearch;
using exec::detail::Buf;

namespace {

struct Operand {
  std::string name;
  ir::Shape shape;
  ir::DType dtype = ir::DType::F32;
};

// One operator on whole tensors (one rank, nothing cut) and its operands' values.
struct Case {
  std::string type;
  std::vector<Operand> inputs;
  std::vector<ir::Shape> outputs;
  ir::Attrs attrs;
  // Value of input j's element i (defaults: uniform in [-1, 1]; integers
  // below `index_bound`). Lets a case keep away from kinks.
  std::function<float(std::size_t j, std::size_t i, std::mt19937&)> value = nullptr;
  std::int64_t index_bound = 3;
  // BatchNorm with running statistics (fixed, not inputs) rather than the batch's.
  bool bn_running = false;
};

std::int64_t count(const ir::Shape& s) {
  std::int64_t n = 1;
  for (const auto d : s) n *= d;
  return n;
}

bool integer(ir::DType d) { return d != ir::DType::F32; }

// BatchNorm's statistics on one device: the batch's (from the kernel's
// sums, as the executor makes them) or fixed running ones.
void batch_norm_stats(const Case& c, exec::detail::KernelArgs& a, Buf& mean, Buf& var) {
  if (a.op->kind != ir::OpKind::BatchNorm) return;
  const ir::Shape& xs = c.inputs[0].shape;
  if (c.bn_running) {
    mean.assign(static_cast<std::size_t>(xs[1]), 0.1f);
    var.assign(static_cast<std::size_t>(xs[1]), 0.5f);
  } else {
    exec::detail::batch_norm_moments(exec::detail::batch_norm_sums(a),
                                     static_cast<double>(count(xs) / xs[1]), mean, var);
  }
  a.bn_mean = &mean;
  a.bn_var = &var;
}

// L = Σ r·y over every output, with the forward kernel.
double loss(const ir::Operator& op, const Case& c, const std::vector<Buf>& in,
            const std::vector<Buf>& r) {
  exec::detail::KernelArgs a;
  a.op = &op;
  for (std::size_t j = 0; j < in.size(); ++j) {
    a.in.push_back(&in[j]);
    a.in_shapes.push_back(c.inputs[j].shape);
    a.full_in_shapes.push_back(c.inputs[j].shape);
  }
  std::vector<Buf> out;
  for (const auto& s : c.outputs) out.emplace_back(static_cast<std::size_t>(count(s)), 0.0f);
  for (std::size_t j = 0; j < out.size(); ++j) {
    a.out.push_back(&out[j]);
    a.out_shapes.push_back(c.outputs[j]);
  }
  Buf mean, var;
  batch_norm_stats(c, a, mean, var);
  exec::detail::run_kernel(a);
  double l = 0;
  for (std::size_t j = 0; j < out.size(); ++j)
    for (std::size_t i = 0; i < out[j].size(); ++i) l += static_cast<double>(r[j][i]) * out[j][i];
  return l;
}

void check_gradients(const Case& c) {
  CAPTURE(c.type);
  ir::Graph g("fd");
  std::vector<ir::TensorId> ins, outs;
  for (const auto& o : c.inputs)
    ins.push_back(g.add_tensor(o.name, o.shape, o.dtype, ir::TensorKind::Parameter));
  for (std::size_t j = 0; j < c.outputs.size(); ++j)
    outs.push_back(g.add_tensor("y" + std::to_string(j), c.outputs[j], ir::DType::F32,
                                ir::TensorKind::Activation));
  ir::Operator op;
  op.name = "op";
  op.type = c.type;
  op.inputs = ins;
  op.outputs = outs;
  op.attrs = c.attrs;
  g.add_operator(std::move(op));
  g.finalize();
  const ir::Operator& o = g.op(0);

  std::mt19937 rng(12345);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<Buf> in;
  for (std::size_t j = 0; j < c.inputs.size(); ++j) {
    Buf b(static_cast<std::size_t>(count(c.inputs[j].shape)));
    for (std::size_t i = 0; i < b.size(); ++i) {
      if (integer(c.inputs[j].dtype)) {
        b[i] = static_cast<float>(rng() % static_cast<std::uint32_t>(c.index_bound));
      } else {
        b[i] = c.value ? c.value(j, i, rng) : u(rng);
      }
    }
    in.push_back(std::move(b));
  }
  std::vector<Buf> r;
  for (const auto& s : c.outputs) {
    Buf b(static_cast<std::size_t>(count(s)));
    for (auto& x : b) x = u(rng);
    r.push_back(std::move(b));
  }

  exec::detail::KernelArgs a;
  a.op = &o;
  for (std::size_t j = 0; j < in.size(); ++j) {
    a.in.push_back(&in[j]);
    a.in_shapes.push_back(c.inputs[j].shape);
    a.full_in_shapes.push_back(c.inputs[j].shape);
  }
  for (const auto& s : c.outputs) a.out_shapes.push_back(s);
  if (c.type == "Attention") a.bool_mask = false;  // the cases below use an additive mask
  std::vector<Buf> dx(in.size());
  std::vector<Buf*> dx_ptr(in.size(), nullptr);
  for (std::size_t j = 0; j < in.size(); ++j) {
    if (integer(c.inputs[j].dtype)) continue;
    dx[j].assign(in[j].size(), 0.0f);
    dx_ptr[j] = &dx[j];
  }
  std::vector<const Buf*> dy;
  for (const auto& b : r) dy.push_back(&b);
  Buf mean, var, bn_sums;
  batch_norm_stats(c, a, mean, var);
  if (o.kind == ir::OpKind::BatchNorm && !c.bn_running) {
    bn_sums = exec::detail::batch_norm_grad_sums(a, r[0]);
    a.bn_grad_sums = &bn_sums;
  }
  exec::detail::run_backward_kernel(a, dy, dx_ptr);

  const double h = 1e-2;
  for (std::size_t j = 0; j < in.size(); ++j) {
    if (dx_ptr[j] == nullptr) continue;
    for (std::size_t i = 0; i < in[j].size(); ++i) {
      CAPTURE(j);
      CAPTURE(i);
      std::vector<Buf> plus = in, minus = in;
      plus[j][i] += static_cast<float>(h);
      minus[j][i] -= static_cast<float>(h);
      const double numeric = (loss(o, c, plus, r) - loss(o, c, minus, r)) / (2 * h);
      CHECK(dx[j][i] == doctest::Approx(numeric).epsilon(1e-3).scale(0.1));
    }
  }
}

// Uniform in ±[lo, 1]: away from the kink of ReLU and the poles of Log, Div.
float away_from_zero(std::mt19937& rng, float lo, bool positive) {
  std::uniform_real_distribution<float> u(lo, 1.0f);
  const float v = u(rng);
  return positive || rng() % 2 == 0 ? v : -v;
}

}  // namespace

TEST_CASE("exec backward: elementwise kinds against finite differences") {
  for (const char* type :
       {"ReLU", "GeLU", "SiLU", "Sigmoid", "Tanh", "Exp", "Neg", "Identity", "Dropout"}) {
    Case c{type, {{"x", {3, 4}}}, {{3, 4}}, {}, {}, 3};
    c.value = [](std::size_t, std::size_t, std::mt19937& rng) {
      return away_from_zero(rng, 0.1f, false);
    };
    check_gradients(c);
  }
  Case tanh_gelu{"GeLU", {{"x", {5}}}, {{5}}, ir::Attrs{{"approximate", std::string("tanh")}}};
  check_gradients(tanh_gelu);
  for (const char* type : {"Log", "Sqrt"}) {
    Case c{type, {{"x", {6}}}, {{6}}, {}, {}, 3};
    c.value = [](std::size_t, std::size_t, std::mt19937& rng) {
      return away_from_zero(rng, 0.3f, true);
    };
    check_gradients(c);
  }
  // Broadcasting: [3,4] with [4] and [3,1].
  for (const char* type : {"Add", "Sub", "Mul", "Div", "Pow", "Maximum", "Minimum"}) {
    for (const ir::Shape& ys : {ir::Shape{4}, ir::Shape{3, 1}}) {
      Case c{type, {{"x", {3, 4}}, {"y", ys}}, {{3, 4}}, {}, {}, 3};
      const std::string t = type;
      c.value = [t](std::size_t j, std::size_t i, std::mt19937& rng) {
        if (t == "Pow")
          return j == 0 ? away_from_zero(rng, 0.3f, true) : away_from_zero(rng, 0.1f, false);
        if (t == "Div" && j == 1) return away_from_zero(rng, 0.5f, false);
        // Maximum, Minimum: x and y far apart, so no tie moves under the step.
        if (t == "Maximum" || t == "Minimum")
          return (j == 0 ? 1.0f : -1.0f) * ((i % 2 == 0) ? 0.5f : -0.5f) +
                 0.1f * away_from_zero(rng, 0.0f, false);
        return away_from_zero(rng, 0.0f, false);
      };
      check_gradients(c);
    }
  }
  check_gradients({"BiasAdd", {{"x", {2, 3, 4}}, {"b", {3}}}, {{2, 3, 4}}, ir::Attrs{{"axis", 1}}});
  check_gradients({"Cast", {{"x", {4}}}, {{4}}, ir::Attrs{{"to", std::string("f32")}}});
}

TEST_CASE("exec backward: normalisations and softmax against finite differences") {
  for (const char* type : {"Softmax", "LogSoftmax"}) {
    check_gradients({type, {{"x", {3, 5}}}, {{3, 5}}, ir::Attrs{{"axis", -1}}});
    check_gradients({type, {{"x", {3, 5}}}, {{3, 5}}, ir::Attrs{{"axis", 0}}});
  }
  check_gradients({"LayerNorm",
                   {{"x", {3, 6}}, {"scale", {6}}, {"bias", {6}}},
                   {{3, 6}},
                   ir::Attrs{{"axis", -1}}});
  check_gradients(
      {"RMSNorm", {{"x", {2, 2, 4}}, {"scale", {8}}}, {{2, 2, 4}}, ir::Attrs{{"axis", 1}}});
}

TEST_CASE("exec backward: contractions and data movement against finite differences") {
  check_gradients({"MatMul", {{"a", {3, 4}}, {"b", {4, 5}}}, {{3, 5}}, {}});
  check_gradients({"MatMul",
                   {{"a", {4, 3}}, {"b", {5, 4}}},
                   {{3, 5}},
                   ir::Attrs{{"transpose_a", true}, {"transpose_b", true}}});
  check_gradients({"MatMul", {{"a", {2, 3, 4}}, {"b", {4, 5}}}, {{2, 3, 5}}, {}});  // broadcast B
  // The backward's GEMMs in every arrangement: a shared weight transposed,
  // a transposed batched input, a broadcast A, and batch dims that
  // broadcast against each other (entries share blocks of both operands).
  check_gradients(
      {"MatMul", {{"a", {2, 3, 4}}, {"b", {5, 4}}}, {{2, 3, 5}}, ir::Attrs{{"transpose_b", true}}});
  check_gradients(
      {"MatMul", {{"a", {2, 4, 3}}, {"b", {4, 5}}}, {{2, 3, 5}}, ir::Attrs{{"transpose_a", true}}});
  check_gradients({"MatMul", {{"a", {3, 4}}, {"b", {2, 4, 5}}}, {{2, 3, 5}}, {}});  // broadcast A
  check_gradients({"MatMul", {{"a", {2, 1, 3, 4}}, {"b", {1, 2, 4, 5}}}, {{2, 2, 3, 5}}, {}});
  check_gradients({"MatMul",
                   {{"a", {2, 1, 4, 3}}, {"b", {1, 2, 5, 4}}},
                   {{2, 2, 3, 5}},
                   ir::Attrs{{"transpose_a", true}, {"transpose_b", true}}});
  check_gradients({"MatMul", {{"a", {2, 3, 4}}, {"b", {4}}}, {{2, 3}}, {}});  // vector B
  check_gradients({"MatMul", {{"a", {4}}, {"b", {4, 5}}}, {{5}}, {}});
  check_gradients({"BatchMatMul", {{"a", {2, 3, 4}}, {"b", {2, 4, 2}}}, {{2, 3, 2}}, {}});
  check_gradients({"Einsum",
                   {{"a", {2, 3}}, {"b", {3, 4}}},
                   {{2, 4}},
                   ir::Attrs{{"equation", std::string("ij,jk->ik")}}});
  check_gradients(
      {"Einsum", {{"a", {3, 3}}}, {{3}}, ir::Attrs{{"equation", std::string("ii->i")}}});
  check_gradients({"Transpose",
                   {{"x", {2, 3, 4}}},
                   {{4, 2, 3}},
                   ir::Attrs{{"perm", std::vector<std::int64_t>{2, 0, 1}}}});
  check_gradients({"Reshape", {{"x", {2, 6}}}, {{3, 4}}, {}});
  check_gradients({"Split", {{"x", {2, 5}}}, {{2, 2}, {2, 3}}, ir::Attrs{{"axis", 1}}});
  check_gradients({"Concat", {{"a", {2, 2}}, {"b", {2, 3}}}, {{2, 5}}, ir::Attrs{{"axis", 1}}});
  check_gradients({"Slice",
                   {{"x", {3, 6}}},
                   {{3, 2}},
                   ir::Attrs{{"starts", std::vector<std::int64_t>{1}},
                             {"ends", std::vector<std::int64_t>{5}},
                             {"axes", std::vector<std::int64_t>{1}},
                             {"steps", std::vector<std::int64_t>{2}}}});
  check_gradients({"Slice",
                   {{"x", {4, 3}}},
                   {{2, 3}},
                   ir::Attrs{{"starts", std::vector<std::int64_t>{-1}},
                             {"ends", std::vector<std::int64_t>{-5}},
                             {"axes", std::vector<std::int64_t>{0}},
                             {"steps", std::vector<std::int64_t>{-2}}}});
  for (const char* type : {"ReduceSum", "ReduceMean", "ReduceMax"}) {
    Case c{type,
           {{"x", {3, 4}}},
           {{4}},
           ir::Attrs{{"axes", std::vector<std::int64_t>{0}}, {"keepdims", false}}};
    c.value = [](std::size_t, std::size_t i, std::mt19937&) {
      return static_cast<float>((i * 7) % 12) * 0.1f - 0.6f;  // distinct: one maximum
    };
    check_gradients(c);
  }
  Case gather{"Gather", {{"table", {5, 3}}, {"ids", {4}, ir::DType::I32}}, {{4, 3}}, {}};
  gather.index_bound = 5;
  check_gradients(gather);
}

TEST_CASE("exec backward: losses and attention against finite differences") {
  for (const char* reduction : {"mean", "sum", "none"}) {
    const bool none = std::string(reduction) == "none";
    Case c{"SoftmaxCrossEntropy",
           {{"logits", {4, 5}}, {"labels", {4}, ir::DType::I64}},
           {none ? ir::Shape{4} : ir::Shape{}},
           ir::Attrs{{"reduction", std::string(reduction)}}};
    c.index_bound = 5;
    check_gradients(c);
  }
  check_gradients({"Attention",
                   {{"q", {1, 2, 3, 2}}, {"k", {1, 2, 3, 2}}, {"v", {1, 2, 3, 2}}},
                   {{1, 2, 3, 2}},
                   ir::Attrs{{"causal", true}}});
  check_gradients(
      {"Attention",
       {{"q", {1, 1, 2, 2}}, {"k", {1, 1, 3, 2}}, {"v", {1, 1, 3, 3}}, {"mask", {2, 3}}},
       {{1, 1, 2, 3}},
       {}});
}

TEST_CASE("exec backward: convolutions, pools and BatchNorm against finite differences") {
  using V = std::vector<std::int64_t>;
  // 3x3, pad 1, with bias; stride 2 with uneven pads; dilation 2; 2 groups.
  check_gradients({"Conv2D",
                   {{"x", {2, 3, 5, 5}}, {"w", {4, 3, 3, 3}}, {"b", {4}}},
                   {{2, 4, 5, 5}},
                   ir::Attrs{{"pads", V{1, 1, 1, 1}}}});
  check_gradients({"Conv2D",
                   {{"x", {1, 2, 6, 5}}, {"w", {3, 2, 3, 2}}},
                   {{1, 3, 3, 3}},
                   ir::Attrs{{"pads", V{1, 0, 0, 1}}, {"strides", V{2, 2}}}});
  check_gradients({"Conv2D",
                   {{"x", {1, 2, 7, 7}}, {"w", {2, 2, 3, 3}}},
                   {{1, 2, 5, 5}},
                   ir::Attrs{{"pads", V{1, 1, 1, 1}}, {"dilations", V{2, 2}}}});
  check_gradients({"Conv2D",
                   {{"x", {2, 4, 4, 4}}, {"w", {6, 2, 3, 3}}},
                   {{2, 6, 4, 4}},
                   ir::Attrs{{"pads", V{1, 1, 1, 1}}, {"group", std::int64_t{2}}}});
  // Pools: overlapping windows with padding; distinct values keep the
  // maximum of every window unique under the step.
  const auto distinct = [](std::size_t, std::size_t i, std::mt19937&) {
    return static_cast<float>((i * 37) % 101) * 0.02f - 1.0f;
  };
  Case max_pool{
      "MaxPool",
      {{"x", {2, 2, 5, 5}}},
      {{2, 2, 3, 3}},
      ir::Attrs{{"kernel_shape", V{3, 3}}, {"strides", V{2, 2}}, {"pads", V{1, 1, 1, 1}}}};
  max_pool.value = distinct;
  check_gradients(max_pool);
  for (const std::int64_t include_pad : {0, 1}) {
    check_gradients({"AvgPool",
                     {{"x", {1, 2, 5, 5}}},
                     {{1, 2, 5, 5}},
                     ir::Attrs{{"kernel_shape", V{3, 3}},
                               {"strides", V{1, 1}},
                               {"pads", V{1, 1, 1, 1}},
                               {"count_include_pad", include_pad}}});
  }
  check_gradients({"GlobalAvgPool", {{"x", {2, 3, 4, 3}}}, {{2, 3, 1, 1}}, {}});
  // BatchNorm with the batch's statistics (x's gradient through the mean
  // and variance) and with running ones.
  check_gradients({"BatchNorm",
                   {{"x", {3, 2, 3, 2}}, {"scale", {2}}, {"bias", {2}}},
                   {{3, 2, 3, 2}},
                   ir::Attrs{{"epsilon", 1e-5}}});
  Case running{
      "BatchNorm", {{"x", {2, 3, 2, 2}}, {"scale", {3}}, {"bias", {3}}}, {{2, 3, 2, 2}}, {}};
  running.bn_running = true;
  check_gradients(running);
}

TEST_CASE("exec: one-hot, slice and concat kernels on one rank") {
  ir::Graph g("oh");
  auto ids = g.add_tensor("ids", {3}, ir::DType::I64, ir::TensorKind::Input);
  auto y = g.add_tensor("y", {3, 4}, ir::DType::F32, ir::TensorKind::Activation);
  ir::Operator op;
  op.name = "oh";
  op.type = "OneHot";
  op.inputs = {ids};
  op.outputs = {y};
  op.attrs = ir::Attrs{{"depth", 4}};
  g.add_operator(std::move(op));
  g.finalize();
  const Buf idx = {2, -1, 7};  // -1: the last class; 7: out of range, all off
  Buf out(12, -1.0f);
  exec::detail::KernelArgs a;
  a.op = &g.op(0);
  a.in = {&idx};
  a.in_shapes = {{3}};
  a.full_in_shapes = {{3}};
  a.out = {&out};
  a.out_shapes = {{3, 4}};
  exec::detail::run_kernel(a);
  CHECK(out == Buf{0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0});
  // The depth dim cut in two: the second half of the classes.
  Buf half(6, -1.0f);
  a.out = {&half};
  a.out_shapes = {{3, 2}};
  a.depth_offset = 2;
  exec::detail::run_kernel(a);
  CHECK(half == Buf{1, 0, 0, 1, 0, 0});
}
