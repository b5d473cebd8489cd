// SPDX-License-Identifier: Apache-2.0
// Unit tests of the execution layer that need no MPI: the step sequence of
// redistributions, local blocks, the byte prediction against the cost
// model's evaluator, and the kernels of a one-rank run against values
// computed here by plain loops.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/cluster.hpp"
#include "recsearch/error.hpp"
#include "recsearch/exec/executor.hpp"
#include "recsearch/exec/layout.hpp"
#include "recsearch/exec/recompute.hpp"
#include "recsearch/ir/gradients.hpp"
#include "recsearch/plan/evaluator.hpp"
#include "recsearch/plan/pipeline.hpp"
#include "recsearch/plan/training.hpp"
#include "support/graph_factories.hpp"

using namespace recsearch;
using cost::AxisLayout;
using exec::Layout;
using exec::StepKind;

namespace {

using testing::add_op_ids;

const AxisLayout R = AxisLayout::replicate();
const AxisLayout P = AxisLayout::partial();
AxisLayout S(int d) { return AxisLayout::shard(d); }

std::vector<StepKind> kinds(const Layout& from, const Layout& to, std::size_t rank = 2) {
  std::vector<StepKind> out;
  for (const auto& s : exec::redistribution_plan(from, to, rank)) out.push_back(s.kind);
  return out;
}

// x[m,k] @ w1[k,n] -> GeLU -> @ w2[n,k] -> Softmax -> Transpose -> ReduceSum(dim 0).
ir::Graph chain(std::int64_t m, std::int64_t k, std::int64_t n) {
  ir::Graph g("chain");
  const auto f = ir::DType::F32;
  auto x = g.add_tensor("x", {m, k}, f, ir::TensorKind::Input);
  auto w1 = g.add_tensor("w1", {k, n}, f, ir::TensorKind::Parameter);
  auto w2 = g.add_tensor("w2", {n, k}, f, ir::TensorKind::Parameter);
  auto h1 = g.add_tensor("h1", {m, n}, f, ir::TensorKind::Activation);
  auto h2 = g.add_tensor("h2", {m, n}, f, ir::TensorKind::Activation);
  auto h3 = g.add_tensor("h3", {m, k}, f, ir::TensorKind::Activation);
  auto h4 = g.add_tensor("h4", {m, k}, f, ir::TensorKind::Activation);
  auto h5 = g.add_tensor("h5", {k, m}, f, ir::TensorKind::Activation);
  auto y = g.add_tensor("y", {m}, f, ir::TensorKind::Activation);
  add_op_ids(g, "mm1", "MatMul", {x, w1}, {h1});
  add_op_ids(g, "act", "GeLU", {h1}, {h2});
  add_op_ids(g, "mm2", "MatMul", {h2, w2}, {h3});
  add_op_ids(g, "sm", "Softmax", {h3}, {h4});
  add_op_ids(g, "tr", "Transpose", {h4}, {h5});
  add_op_ids(g, "red", "ReduceSum", {h5}, {y},
             ir::Attrs{{"axes", std::vector<std::int64_t>{0}}, {"keepdims", false}});
  g.finalize();
  return g;
}

double model_forward_bytes(const plan::Evaluation& ev) {
  double sum = 0;
  for (const auto& e : ev.events) {
    if (e.phase == cost::Phase::Forward &&
        (e.reason == plan::CommReason::Layout || e.reason == plan::CommReason::Output)) {
      sum += e.bytes;
    }
  }
  return sum;
}

}  // namespace

TEST_CASE("exec: one step per axis for each redistribution kind") {
  CHECK(kinds({S(0)}, {R}) == std::vector{StepKind::AllGather});
  CHECK(kinds({R}, {S(1)}) == std::vector{StepKind::Slice});
  CHECK(kinds({S(0)}, {S(1)}) == std::vector{StepKind::AllToAll});
  CHECK(kinds({P}, {R}) == std::vector{StepKind::AllReduce});
  CHECK(kinds({P}, {S(1)}) == std::vector{StepKind::ReduceScatter});
  CHECK(kinds({S(0), R}, {S(0), R}).empty());
  // Nested: [c0, c1] on dim 0 -> [c0] keeps c0 and gathers c1 only.
  CHECK(kinds({S(0), S(0)}, {S(0), R}) == std::vector{StepKind::AllGather});
  // [c0, c1] -> [c1]: c1 must leave and come back after c0 leaves.
  CHECK(kinds({S(0), S(0)}, {R, S(0)}) ==
        std::vector{StepKind::AllGather, StepKind::AllGather, StepKind::Slice});
  // c1 moves from dim 0 to dim 1 behind c0, which stays.
  CHECK(kinds({S(0), S(0)}, {S(0), S(1)}) == std::vector{StepKind::AllToAll});
  // Partial on both axes, then split on dim 1 by both: c1 cannot join dim 1
  // before c0 does, so it is all-reduced, c0 reduce-scattered, c1 sliced.
  const auto steps = exec::redistribution_plan({P, P}, {S(1), S(1)}, 2);
  REQUIRE(steps.size() == 3);
  CHECK((steps[0].kind == StepKind::AllReduce && steps[0].axis == 1));
  CHECK((steps[1].kind == StepKind::ReduceScatter && steps[1].axis == 0 && steps[1].to_dim == 1));
  CHECK((steps[2].kind == StepKind::Slice && steps[2].axis == 1 && steps[2].to_dim == 1));
}

TEST_CASE("exec: partial sums over two axes are reduced hierarchically when the shape allows") {
  const auto steps = exec::redistribution_plan({P, P}, {R, R}, ir::Shape{6, 4}, {3, 2});
  REQUIRE(steps.size() == 3);
  CHECK((steps[0].kind == StepKind::ReduceScatter && steps[0].axis == 1 && steps[0].to_dim == 0));
  CHECK((steps[1].kind == StepKind::AllReduce && steps[1].axis == 0));
  CHECK((steps[2].kind == StepKind::AllGather && steps[2].axis == 1 && steps[2].dim == 0));
  // A scalar has no dim to scatter: two plain all-reduces.
  CHECK(exec::redistribution_plan({P, P}, {R, R}, ir::Shape{}, {3, 2}).size() == 2);
  // Cost model and prediction agree per axis: MatMul k cut on both axes, used replicated.
  ir::Graph g("mm");
  auto x = g.add_tensor("x", {6, 12}, ir::DType::F32, ir::TensorKind::Input);
  auto w = g.add_tensor("w", {12, 6}, ir::DType::F32, ir::TensorKind::Parameter);
  auto h = g.add_tensor("h", {6, 6}, ir::DType::F32, ir::TensorKind::Activation);
  auto y = g.add_tensor("y", {6, 6}, ir::DType::F32, ir::TensorKind::Activation);
  add_op_ids(g, "mm", "MatMul", {x, w}, {h});
  add_op_ids(g, "act", "ReLU", {h}, {y});
  g.finalize();
  const auto spaces = algebra::build_op_spaces(g);
  const Cluster cluster = Cluster::mesh({2, 3});
  plan::Plan p;
  p.mode = Mode::Infer;
  p.mesh = cluster.cuts();
  const auto k = static_cast<std::int16_t>(spaces[0].find_loop("k"));
  p.cuts = {{k, k}, {plan::kReplicated, plan::kReplicated}};
  const auto ev = plan::evaluate(g, spaces, cluster, p, CostParams{});
  const auto pred = exec::predict_exec_bytes(g, exec::plan_layouts(g, spaces, p));
  std::vector<double> model_axis(2, 0.0);
  for (const auto& e : ev.events) model_axis[e.axis] += e.bytes;
  CHECK(pred.per_axis[0] == doctest::Approx(model_axis[0]));
  CHECK(pred.per_axis[1] == doctest::Approx(model_axis[1]));
  CHECK(pred.total == doctest::Approx(2.0 * 5.0 / 6.0 * 6 * 6 * 4));  // a flat all-reduce over 6
}

TEST_CASE("exec: local blocks follow the mixed-radix digits of the axes splitting a dim") {
  const std::vector<std::int64_t> mesh{2, 3};
  const Layout l{S(0), S(0)};
  CHECK(exec::local_shape({12, 5}, l, mesh) == ir::Shape{2, 5});
  // rank 4 = coordinates (1, 1): block 1*3 + 1 = 4 of 6 along dim 0.
  CHECK(exec::local_offsets({12, 5}, l, mesh, exec::rank_coords(4, mesh)) ==
        std::vector<std::int64_t>{8, 0});
  const Layout l2{S(1), S(0)};
  CHECK(exec::local_offsets({12, 10}, l2, mesh, {1, 2}) == std::vector<std::int64_t>{8, 5});
}

TEST_CASE("exec: predicted bytes equal the cost model's on one axis, for every legal plan") {
  // Every combination of cuts on one axis of size 2 and of size 3: the
  // executor's forward bytes, from its own step sequence, equal the
  // evaluator's forward layout and output collectives.
  const ir::Graph g = chain(12, 18, 24);
  const auto spaces = algebra::build_op_spaces(g);
  for (const std::int64_t k : {2, 3}) {
    const Cluster cluster = Cluster::flat(k);
    std::vector<std::vector<std::int16_t>> choices(g.num_operators());
    for (ir::OpId o = 0; o < g.num_operators(); ++o) {
      choices[o].push_back(plan::kReplicated);
      const std::vector<std::int64_t> splits(spaces[o].loops.size(), 1);
      for (int l = 0; l < static_cast<int>(spaces[o].loops.size()); ++l) {
        if (algebra::can_cut(g, g.op(o), spaces[o], splits, l, k)) {
          choices[o].push_back(static_cast<std::int16_t>(l));
        }
      }
    }
    std::size_t combos = 1;
    for (const auto& c : choices) combos *= c.size();
    std::size_t checked = 0, moving = 0;
    for (std::size_t code = 0; code < combos; ++code) {
      plan::Plan p;
      p.mode = Mode::Infer;
      p.mesh = cluster.cuts();
      std::size_t rest = code;
      for (ir::OpId o = 0; o < g.num_operators(); ++o) {
        p.cuts.push_back({choices[o][rest % choices[o].size()]});
        rest /= choices[o].size();
      }
      const auto ev = plan::evaluate(g, spaces, cluster, p, CostParams{});
      const auto pl = exec::plan_layouts(g, spaces, p);
      const double predicted = exec::predict_exec_bytes(g, pl).total;
      CHECK(predicted == doctest::Approx(model_forward_bytes(ev)));
      ++checked;
      if (predicted > 0) ++moving;
    }
    CHECK(checked == combos);
    CHECK(moving > combos / 2);
  }
}

TEST_CASE("exec: one-rank kernels match plain loops") {
  // y = softmax(x @ w) row-wise, then transpose, then column sums: checked
  // element by element against loops written here.
  const std::int64_t m = 3, k = 4, n = 5;
  ir::Graph g("k");
  const auto f = ir::DType::F32;
  auto x = g.add_tensor("x", {m, k}, f, ir::TensorKind::Input);
  auto w = g.add_tensor("w", {k, n}, f, ir::TensorKind::Parameter);
  auto h = g.add_tensor("h", {m, n}, f, ir::TensorKind::Activation);
  auto s = g.add_tensor("s", {m, n}, f, ir::TensorKind::Activation);
  auto t = g.add_tensor("t", {n, m}, f, ir::TensorKind::Activation);
  auto y = g.add_tensor("y", {n}, f, ir::TensorKind::Activation);
  add_op_ids(g, "mm", "MatMul", {x, w}, {h});
  add_op_ids(g, "sm", "Softmax", {h}, {s});
  add_op_ids(g, "tr", "Transpose", {s}, {t});
  add_op_ids(g, "red", "ReduceMean", {t}, {y},
             ir::Attrs{{"axes", std::vector<std::int64_t>{1}}, {"keepdims", false}});
  g.finalize();
  const auto spaces = algebra::build_op_spaces(g);
  plan::Plan p;
  p.cuts.assign(g.num_operators(), {});
  auto comm = exec::make_local_communicator();
  exec::Executor ex(g, spaces, p, *comm, exec::ExecOptions{7, false, {}});
  ex.run();
  std::vector<double> xv(m * k), wv(k * n), hv(m * n, 0.0), sv(m * n);
  for (std::int64_t i = 0; i < m * k; ++i) xv[i] = exec::input_value(g, x, i, 7);
  for (std::int64_t i = 0; i < k * n; ++i) wv[i] = exec::input_value(g, w, i, 7);
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j)
      for (std::int64_t q = 0; q < k; ++q) hv[i * n + j] += xv[i * k + q] * wv[q * n + j];
  for (std::int64_t i = 0; i < m; ++i) {
    double mx = -1e300, sum = 0;
    for (std::int64_t j = 0; j < n; ++j) mx = std::max(mx, hv[i * n + j]);
    for (std::int64_t j = 0; j < n; ++j) sum += std::exp(hv[i * n + j] - mx);
    for (std::int64_t j = 0; j < n; ++j) sv[i * n + j] = std::exp(hv[i * n + j] - mx) / sum;
  }
  const auto& got_h = ex.block(h).data;
  const auto& got_t = ex.block(t).data;
  const auto& got_y = ex.block(y).data;
  for (std::int64_t i = 0; i < m * n; ++i) CHECK(got_h[i] == doctest::Approx(hv[i]).epsilon(1e-5));
  for (std::int64_t i = 0; i < m; ++i)
    for (std::int64_t j = 0; j < n; ++j)
      CHECK(got_t[j * m + i] == doctest::Approx(sv[i * n + j]).epsilon(1e-5));
  for (std::int64_t j = 0; j < n; ++j) {
    double mean = 0;
    for (std::int64_t i = 0; i < m; ++i) mean += sv[i * n + j] / m;
    CHECK(got_y[j] == doctest::Approx(mean).epsilon(1e-5));
  }
}

TEST_CASE("exec: causal attention and gather on one rank") {
  const std::int64_t b = 1, hh = 1, sq = 3, d = 2, v = 5;
  ir::Graph g("att");
  const auto f = ir::DType::F32;
  auto q = g.add_tensor("q", {b, hh, sq, d}, f, ir::TensorKind::Input);
  auto kk = g.add_tensor("k", {b, hh, sq, d}, f, ir::TensorKind::Input);
  auto vv = g.add_tensor("v", {b, hh, sq, d}, f, ir::TensorKind::Input);
  auto o = g.add_tensor("o", {b, hh, sq, d}, f, ir::TensorKind::Activation);
  auto table = g.add_tensor("table", {v, d}, f, ir::TensorKind::Parameter);
  auto ids = g.add_tensor("ids", {4}, ir::DType::I32, ir::TensorKind::Input);
  auto e = g.add_tensor("e", {4, d}, f, ir::TensorKind::Activation);
  add_op_ids(g, "attn", "Attention", {q, kk, vv}, {o}, ir::Attrs{{"causal", true}});
  add_op_ids(g, "embed", "Gather", {table, ids}, {e});
  g.finalize();
  const auto spaces = algebra::build_op_spaces(g);
  plan::Plan p;
  p.cuts.assign(g.num_operators(), {});
  auto comm = exec::make_local_communicator();
  exec::Executor ex(g, spaces, p, *comm, exec::ExecOptions{3, false, {}});
  ex.run();
  const auto val = [&](ir::TensorId t, std::int64_t i) {
    return static_cast<double>(exec::input_value(g, t, i, 3));
  };
  for (std::int64_t s = 0; s < sq; ++s) {
    std::vector<double> w;
    double mx = -1e300;
    for (std::int64_t t = 0; t <= s; ++t) {  // causal: keys up to the query
      double dot = 0;
      for (std::int64_t c = 0; c < d; ++c) dot += val(q, s * d + c) * val(kk, t * d + c);
      w.push_back(dot / std::sqrt(static_cast<double>(d)));
      mx = std::max(mx, w.back());
    }
    double sum = 0;
    for (auto& x : w) sum += (x = std::exp(x - mx));
    for (std::int64_t c = 0; c < d; ++c) {
      double acc = 0;
      for (std::int64_t t = 0; t <= s; ++t) acc += w[t] * val(vv, t * d + c);
      CHECK(ex.block(o).data[s * d + c] == doctest::Approx(acc / sum).epsilon(1e-5));
    }
  }
  for (std::int64_t i = 0; i < 4; ++i) {
    const auto row = static_cast<std::int64_t>(exec::input_value(g, ids, i, 3));
    REQUIRE(row >= 0);
    REQUIRE(row < v);
    for (std::int64_t c = 0; c < d; ++c)
      CHECK(ex.block(e).data[i * d + c] == doctest::Approx(val(table, row * d + c)));
  }
}

TEST_CASE("exec: a strided shard (a merge region's batch cut) is refused with a usage error") {
  // [t, b*h, hd] -> [t*b, d] -> MatMul -> [t, b, d]: the batch is the inner
  // factor of the rows, whose cut no local block here describes.
  ir::Graph g("heads");
  const auto f = ir::DType::F32;
  auto x = g.add_tensor("x", {4, 8, 3}, f, ir::TensorKind::Input);
  auto rows = g.add_tensor("rows", {8, 12}, f, ir::TensorKind::Activation);
  auto w = g.add_tensor("w", {12, 12}, f, ir::TensorKind::Parameter);
  auto proj = g.add_tensor("proj", {8, 12}, f, ir::TensorKind::Activation);
  auto y = g.add_tensor("y", {4, 2, 12}, f, ir::TensorKind::Activation);
  add_op_ids(g, "merge", "Reshape", {x}, {rows});
  add_op_ids(g, "out_proj", "MatMul", {rows, w}, {proj});
  add_op_ids(g, "split", "Reshape", {proj}, {y});
  g.finalize();
  const auto spaces = algebra::build_op_spaces(g);
  REQUIRE(spaces[1].cuts_inner_factor(spaces[1].find_loop("i")));
  plan::Plan p;
  p.mode = Mode::Infer;
  p.mesh = Cluster::flat(2).cuts();
  p.cuts = {{plan::kReplicated},
            {static_cast<std::int16_t>(spaces[1].find_loop("i"))},
            {plan::kReplicated}};
  try {
    (void)exec::plan_layouts(g, spaces, p);
    FAIL("a strided cut was laid out");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::kUsage);
    CHECK(std::string(e.what()).find("'out_proj'") != std::string::npos);
  }
  // Replicated, the same graph lays out.
  p.cuts[1] = {plan::kReplicated};
  CHECK_NOTHROW((void)exec::plan_layouts(g, spaces, p));
}

TEST_CASE("exec: unsupported operators are named before anything runs") {
  // MaxPool's ONNX indices output has no kernel (the pool itself has).
  ir::Graph g("pool");
  const auto f = ir::DType::F32;
  auto x = g.add_tensor("x", {1, 2, 4, 4}, f, ir::TensorKind::Input);
  auto y = g.add_tensor("y", {1, 2, 2, 2}, f, ir::TensorKind::Activation);
  auto idx = g.add_tensor("idx", {1, 2, 2, 2}, ir::DType::I64, ir::TensorKind::Activation);
  add_op_ids(g, "c", "MaxPool", {x}, {y, idx},
             ir::Attrs{{"kernel_shape", std::vector<std::int64_t>{2, 2}}});
  g.finalize();
  const auto spaces = algebra::build_op_spaces(g);
  plan::Plan p;
  p.cuts.assign(1, {});
  const auto bad = exec::unsupported_operators(g, spaces, p);
  REQUIRE(bad.size() == 1);
  CHECK(bad[0].find("c (MaxPool)") == 0);
  auto comm = exec::make_local_communicator();
  CHECK_THROWS_AS(exec::Executor(g, spaces, p, *comm, exec::ExecOptions{}), recsearch::Error);
}

TEST_CASE("exec: a softmax with a fused scale or causal mask is named, a plain one runs") {
  // gen --attention megatron puts the scores' scale and causal mask on the
  // Softmax; the kernel runs a plain softmax, so exec must not run it.
  for (const bool fused : {false, true}) {
    CAPTURE(fused);
    ir::Graph g("softmax");
    const auto f = ir::DType::F32;
    auto x = g.add_tensor("x", {2, 4, 4}, f, ir::TensorKind::Input);
    auto y = g.add_tensor("y", {2, 4, 4}, f, ir::TensorKind::Activation);
    ir::Attrs attrs;
    if (fused) attrs = ir::Attrs{{"scale", 0.5}, {"causal", true}};
    add_op_ids(g, "probs", "Softmax", {x}, {y}, attrs);
    g.finalize();
    const auto spaces = algebra::build_op_spaces(g);
    plan::Plan p;
    p.cuts.assign(1, {});
    const auto bad = exec::unsupported_operators(g, spaces, p);
    if (!fused) {
      CHECK(bad.empty());
      continue;
    }
    REQUIRE(bad.size() == 1);
    CHECK(bad[0].find("probs (Softmax)") == 0);
    CHECK(bad[0].find("fused scale or causal mask") != std::string::npos);
  }
}

TEST_CASE("exec: Conv2D on one device equals a plain loop (padding, stride, bias)") {
  ir::Graph g("conv");
  const auto f = ir::DType::F32;
  auto x = g.add_tensor("x", {1, 2, 5, 5}, f, ir::TensorKind::Input);
  auto w = g.add_tensor("w", {3, 2, 3, 3}, f, ir::TensorKind::Parameter);
  auto b = g.add_tensor("b", {3}, f, ir::TensorKind::Parameter);
  auto y = g.add_tensor("y", {1, 3, 3, 3}, f, ir::TensorKind::Activation);
  add_op_ids(g, "c", "Conv2D", {x, w, b}, {y},
             ir::Attrs{{"pads", std::vector<std::int64_t>{1, 1, 1, 1}},
                       {"strides", std::vector<std::int64_t>{2, 2}}});
  g.finalize();
  const auto spaces = algebra::build_op_spaces(g);
  plan::Plan p;
  p.cuts.assign(1, {});
  CHECK(exec::unsupported_operators(g, spaces, p).empty());
  auto comm = exec::make_local_communicator();
  exec::Executor ex(g, spaces, p, *comm, exec::ExecOptions{});
  ex.run();
  const auto& xv = ex.block(x).data;
  const auto& wv = ex.block(w).data;
  const auto& bv = ex.block(b).data;
  for (int o = 0; o < 3; ++o) {
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 3; ++j) {
        double want = bv[static_cast<std::size_t>(o)];
        for (int c = 0; c < 2; ++c) {
          for (int r = 0; r < 3; ++r) {
            for (int s = 0; s < 3; ++s) {
              const int ih = i * 2 - 1 + r, iw = j * 2 - 1 + s;
              if (ih < 0 || ih >= 5 || iw < 0 || iw >= 5) continue;
              want += static_cast<double>(xv[static_cast<std::size_t>((c * 5 + ih) * 5 + iw)]) *
                      wv[static_cast<std::size_t>(((o * 2 + c) * 3 + r) * 3 + s)];
            }
          }
        }
        CHECK(ex.block(y).data[static_cast<std::size_t>((o * 3 + i) * 3 + j)] ==
              doctest::Approx(want).epsilon(1e-5));
      }
    }
  }
}

TEST_CASE("exec: BatchNorm, MaxPool and AvgPool on one device equal plain loops") {
  // x[2,2,4,4] -> BatchNorm (batch statistics: no running ones given) -> y;
  // x -> MaxPool 3x3/2 pad 1 -> mp; x -> AvgPool 3x3/2 pad 1 (padding not
  // counted) -> ap.
  ir::Graph g("norm_pool");
  const auto f = ir::DType::F32;
  auto x = g.add_tensor("x", {2, 2, 4, 4}, f, ir::TensorKind::Input);
  auto sc = g.add_tensor("scale", {2}, f, ir::TensorKind::Parameter);
  auto bi = g.add_tensor("bias", {2}, f, ir::TensorKind::Parameter);
  auto y = g.add_tensor("y", {2, 2, 4, 4}, f, ir::TensorKind::Activation);
  auto mp = g.add_tensor("mp", {2, 2, 2, 2}, f, ir::TensorKind::Activation);
  auto ap = g.add_tensor("ap", {2, 2, 2, 2}, f, ir::TensorKind::Activation);
  add_op_ids(g, "bn", "BatchNorm", {x, sc, bi}, {y});
  const ir::Attrs pool{{"kernel_shape", std::vector<std::int64_t>{3, 3}},
                       {"strides", std::vector<std::int64_t>{2, 2}},
                       {"pads", std::vector<std::int64_t>{1, 1, 1, 1}}};
  add_op_ids(g, "mp", "MaxPool", {x}, {mp}, pool);
  add_op_ids(g, "ap", "AvgPool", {x}, {ap}, pool);
  g.finalize();
  const auto spaces = algebra::build_op_spaces(g);
  plan::Plan p;
  p.cuts.assign(3, {});
  auto comm = exec::make_local_communicator();
  exec::Executor ex(g, spaces, p, *comm, exec::ExecOptions{});
  ex.run();
  const auto& xv = ex.block(x).data;
  const auto at = [&](int n, int c, int h, int w) {
    return static_cast<double>(xv[static_cast<std::size_t>(((n * 2 + c) * 4 + h) * 4 + w)]);
  };
  for (int c = 0; c < 2; ++c) {
    double sum = 0, sq = 0;
    for (int n = 0; n < 2; ++n)
      for (int h = 0; h < 4; ++h)
        for (int w = 0; w < 4; ++w) sum += at(n, c, h, w);
    const double mean = sum / 32;
    for (int n = 0; n < 2; ++n)
      for (int h = 0; h < 4; ++h)
        for (int w = 0; w < 4; ++w) sq += (at(n, c, h, w) - mean) * (at(n, c, h, w) - mean);
    const double inv = 1 / std::sqrt(sq / 32 + 1e-5);
    for (int n = 0; n < 2; ++n) {
      for (int h = 0; h < 4; ++h) {
        for (int w = 0; w < 4; ++w) {
          const double want =
              (at(n, c, h, w) - mean) * inv * ex.block(sc).data[static_cast<std::size_t>(c)] +
              ex.block(bi).data[static_cast<std::size_t>(c)];
          CHECK(ex.block(y).data[static_cast<std::size_t>(((n * 2 + c) * 4 + h) * 4 + w)] ==
                doctest::Approx(want).epsilon(1e-4));
        }
      }
      for (int i = 0; i < 2; ++i) {
        for (int j = 0; j < 2; ++j) {
          double mx = -1e30, total = 0;
          int count = 0;
          for (int r = 0; r < 3; ++r) {
            for (int s2 = 0; s2 < 3; ++s2) {
              const int h = i * 2 - 1 + r, w = j * 2 - 1 + s2;
              if (h < 0 || h >= 4 || w < 0 || w >= 4) continue;
              mx = std::max(mx, at(n, c, h, w));
              total += at(n, c, h, w);
              ++count;
            }
          }
          const auto k = static_cast<std::size_t>(((n * 2 + c) * 2 + i) * 2 + j);
          CHECK(ex.block(mp).data[k] == doctest::Approx(mx));
          CHECK(ex.block(ap).data[k] == doctest::Approx(total / count));
        }
      }
    }
  }
}

TEST_CASE("exec: predicted halo bytes per rank of a Conv2D cut in H") {
  // x[2,2,8,6], 3x3 pad 1 stride 1, H cut in 2: each rank sends the one
  // row (2 images x 2 channels x 6) the other's windows read; the batch cut: none.
  ir::Graph g("halo");
  const auto f = ir::DType::F32;
  auto x = g.add_tensor("x", {2, 2, 8, 6}, f, ir::TensorKind::Input);
  auto w = g.add_tensor("w", {3, 2, 3, 3}, f, ir::TensorKind::Parameter);
  auto y = g.add_tensor("y", {2, 3, 8, 6}, f, ir::TensorKind::Activation);
  add_op_ids(g, "c", "Conv2D", {x, w}, {y},
             ir::Attrs{{"pads", std::vector<std::int64_t>{1, 1, 1, 1}}});
  g.finalize();
  const auto spaces = algebra::build_op_spaces(g);
  const Cluster cluster = Cluster::mesh({2});
  plan::Plan p;
  p.mesh = cluster.cuts();
  const auto loop = [&](const char* name) {
    return static_cast<std::int16_t>(spaces[0].find_loop(name));
  };
  p.cuts = {{loop("h")}};
  const exec::PlanLayouts pl = exec::plan_layouts(g, spaces, p);
  CHECK(exec::predict_halo_bytes(g, pl, {0}) == 2 * 2 * 6 * 4);
  CHECK(exec::predict_halo_bytes(g, pl, {1}) == 2 * 2 * 6 * 4);
  p.cuts = {{loop("n")}};
  CHECK(exec::predict_halo_bytes(g, exec::plan_layouts(g, spaces, p), {0}) == 0);
}

TEST_CASE("exec: predicted backward halo bytes: each rank returns the rows it received") {
  // x[1,1,8,2], 3x3 pad 1 stride 2 (W: 1), H cut in 2: rank 1's outputs (rows 2, 3)
  // read x rows 3..7, so rank 0 sends it row 3 (2 elements) and receives
  // nothing; the backward reverses that. An input without a gradient
  // (a graph input) returns nothing.
  for (const auto kind : {ir::TensorKind::Parameter, ir::TensorKind::Input}) {
    ir::Graph g("halo_back");
    const auto f = ir::DType::F32;
    auto x = g.add_tensor("x", {1, 1, 8, 2}, f, kind);
    auto w = g.add_tensor("w", {1, 1, 3, 3}, f, ir::TensorKind::Parameter);
    auto y = g.add_tensor("y", {1, 1, 4, 2}, f, ir::TensorKind::Activation);
    add_op_ids(g, "c", "Conv2D", {x, w}, {y},
               ir::Attrs{{"pads", std::vector<std::int64_t>{1, 1, 1, 1}},
                         {"strides", std::vector<std::int64_t>{2, 1}}});
    g.finalize();
    const auto spaces = algebra::build_op_spaces(g);
    const Cluster cluster = Cluster::mesh({2});
    plan::Plan p;
    p.mesh = cluster.cuts();
    p.cuts = {{static_cast<std::int16_t>(spaces[0].find_loop("h"))}};
    const exec::PlanLayouts pl = exec::plan_layouts(g, spaces, p);
    const exec::GradientLayouts gl = exec::gradient_layouts(g, pl);
    const bool grad = kind == ir::TensorKind::Parameter;
    CAPTURE(grad);
    CHECK(exec::predict_halo_bytes(g, pl, {0}) == 2 * 4);
    CHECK(exec::predict_halo_bytes(g, pl, {1}) == 0);
    CHECK(exec::predict_halo_backward_bytes(g, pl, gl, {0}) == 0);
    CHECK(exec::predict_halo_backward_bytes(g, pl, gl, {1}) == (grad ? 2 * 4 : 0));
  }
}

TEST_CASE(
    "exec: predicted gradient sync equals the cost model's on one axis, for every legal plan") {
  // Training: on one axis of size 2 and of size 3, every parameter
  // gradient's synchronisation (its contributions moved to the parameter's
  // holder layout) sends what the evaluator's parameter-gradient events
  // count, under ZeRO stages 0, 1 and 2; under ZeRO 3 its reduce-scatter
  // and the forward pass's all-gather of the parameter are the model's.
  const ir::Graph g = chain(12, 18, 24);
  const auto spaces = algebra::build_op_spaces(g);
  for (const std::int64_t k : {2, 3}) {
    const Cluster cluster = Cluster::flat(k);
    std::vector<std::vector<std::int16_t>> choices(g.num_operators());
    for (ir::OpId o = 0; o < g.num_operators(); ++o) {
      choices[o].push_back(plan::kReplicated);
      const std::vector<std::int64_t> splits(spaces[o].loops.size(), 1);
      for (int l = 0; l < static_cast<int>(spaces[o].loops.size()); ++l) {
        if (algebra::can_cut(g, g.op(o), spaces[o], splits, l, k)) {
          choices[o].push_back(static_cast<std::int16_t>(l));
        }
      }
    }
    std::size_t combos = 1;
    for (const auto& c : choices) combos *= c.size();
    std::size_t syncing = 0, sharded = 0;
    for (std::size_t code = 0; code < combos; ++code) {
      plan::Plan p;
      p.mode = Mode::Train;
      p.mesh = cluster.cuts();
      std::size_t rest = code;
      for (ir::OpId o = 0; o < g.num_operators(); ++o) {
        p.cuts.push_back({choices[o][rest % choices[o].size()]});
        rest /= choices[o].size();
      }
      const auto ev = plan::evaluate(g, spaces, cluster, p, CostParams{});
      double model_sync = 0;
      for (const auto& e : ev.events) {
        if (e.phase == cost::Phase::Backward && e.reason == plan::CommReason::Gradient &&
            g.tensor(e.tensor).kind == ir::TensorKind::Parameter) {
          model_sync += e.bytes;
        }
      }
      const auto pl = exec::plan_layouts(g, spaces, p);
      CAPTURE(code);
      // ZeRO 1 and 2 (a reduce-scatter and the all-gather of the updated
      // shard, the latter a forward-phase event) send the all-reduce's bytes.
      for (const int zero : {0, 1, 2}) {
        CAPTURE(zero);
        const double predicted = exec::predict_train_bytes(g, pl, zero).gradient_sync.total;
        CHECK(predicted == doctest::Approx(model_sync));
        if (predicted > 0) ++syncing;
      }
      p.training.zero_stage = 1;
      const auto ev1 = plan::evaluate(g, spaces, cluster, p, CostParams{});
      double model_zero = 0;
      for (const auto& e : ev1.events) {
        if (e.reason == plan::CommReason::Gradient &&
            g.tensor(e.tensor).kind == ir::TensorKind::Parameter) {
          model_zero += e.bytes;
        }
      }
      CHECK(exec::predict_train_bytes(g, pl, 1).gradient_sync.total == doctest::Approx(model_zero));
      // ZeRO 3: the gradient's reduce-scatter (sync) and the parameter's
      // all-gather in each pass are the model's events of those phases.
      p.training.zero_stage = 3;
      const auto ev3 = plan::evaluate(g, spaces, cluster, p, CostParams{});
      double model_rs = 0, model_fwd = 0;
      for (const auto& e : ev3.events) {
        if (e.reason != plan::CommReason::Gradient ||
            g.tensor(e.tensor).kind != ir::TensorKind::Parameter)
          continue;
        if (e.collective == cost::Collective::ReduceScatter) model_rs += e.bytes;
        if (e.collective == cost::Collective::AllGather && e.phase == cost::Phase::Forward)
          model_fwd += e.bytes;
      }
      const std::vector<int> zero3 = plan::parameter_zero(g, p.training);
      const exec::GradientLayouts gl3 = exec::gradient_layouts(g, pl, zero3);
      const exec::RecomputePlan none;
      CHECK(exec::predict_train_bytes(g, pl, zero3).gradient_sync.total ==
            doctest::Approx(model_rs));
      CHECK(exec::predict_zero3_gather_bytes(g, pl, gl3, zero3, none).forward.total ==
            doctest::Approx(model_fwd));
      if (model_rs > 0 && model_fwd > 0) ++sharded;
    }
    CHECK(syncing > 0);
    CHECK(sharded > 0);
  }
}

namespace {

// A two-layer transformer on one device, in training, recomputing `rc`.
plan::Plan one_device_training(const ir::Graph& g, plan::Recompute rc) {
  plan::Plan p;
  p.mode = Mode::Train;
  p.cuts.assign(g.num_operators(), {});
  p.training.recompute = rc;
  return p;
}

std::size_t count(const std::vector<std::uint8_t>& v) {
  return static_cast<std::size_t>(std::count(v.begin(), v.end(), std::uint8_t{1}));
}

}  // namespace

TEST_CASE("exec: recompute_plan drops the attention cores' tensors and the full segments'") {
  const ir::Graph g = testing::transformer_stack(2, 2, 16, 16, 2, ir::DType::F32);
  const auto spaces = algebra::build_op_spaces(g);
  const auto pl = exec::plan_layouts(g, spaces, one_device_training(g, plan::Recompute::None));
  const auto rp_of = [&](plan::Recompute rc) {
    const plan::MemoryRules r = plan::memory_rules(g, spaces, rc);
    return exec::recompute_plan(g, pl, r.recomputed, r.saved);
  };
  CHECK(rp_of(plan::Recompute::None).empty());
  // Selective: scores, softmax and context product rerun per layer; the
  // scores and the softmax output go, the context stays (read by ctx_t).
  const exec::RecomputePlan sel = rp_of(plan::Recompute::Selective);
  CHECK(sel.groups == 2);
  CHECK(count(sel.op) == 6);
  CHECK(count(sel.dropped) == 4);
  for (const char* name : {"l0.sc", "l0.pr", "l1.sc", "l1.pr"})
    CHECK(sel.dropped[*g.find_tensor(name)] == 1);
  CHECK(sel.dropped[*g.find_tensor("l0.ctx")] == 0);
  CHECK(sel.group[*g.find_operator("l0.scores")] == sel.group[*g.find_operator("l0.context")]);
  CHECK(sel.group[*g.find_operator("l0.scores")] != sel.group[*g.find_operator("l1.scores")]);
  // Full: every dropped tensor is made and read by recomputed operators
  // only, and no graph output is dropped; a checkpoint separates groups.
  const exec::RecomputePlan full = rp_of(plan::Recompute::Full);
  CHECK(full.groups >= 2);
  CHECK(count(full.dropped) > count(sel.dropped));
  for (ir::TensorId t = 0; t < g.num_tensors(); ++t) {
    if (!full.dropped[t]) continue;
    const ir::Tensor& x = g.tensor(t);
    CHECK(!x.consumers.empty());
    CHECK(full.op[x.producer] == 1);
    for (const ir::OpId c : x.consumers) CHECK(full.group[c] == full.group[x.producer]);
  }
  // One device: nothing to send again.
  CHECK(exec::predict_recompute_bytes(g, pl, full).total == 0);
}

TEST_CASE("exec: a one-device training step with recomputation gives the same gradients") {
  const ir::Graph g = testing::transformer_stack(2, 2, 16, 16, 2, ir::DType::F32);
  const auto spaces = algebra::build_op_spaces(g);
  struct Step {
    std::vector<std::vector<float>> grads;
    exec::ActivationBytes held;
  };
  const auto step = [&](plan::Recompute rc) {
    auto comm = exec::make_local_communicator();
    exec::ExecOptions opts;
    opts.recompute = true;
    exec::Executor ex(g, spaces, one_device_training(g, rc), *comm, opts);
    ex.run();
    ex.backward();
    ex.sync_gradients();
    Step s;
    for (const ir::TensorId t : ex.trained()) s.grads.push_back(ex.gradient(t).data);
    s.held = ex.activation_bytes();
    return s;
  };
  const Step none = step(plan::Recompute::None);
  CHECK(!none.grads.empty());
  CHECK(none.held.peak == none.held.after_forward);
  double previous = none.held.after_forward;
  for (const plan::Recompute rc : {plan::Recompute::Selective, plan::Recompute::Full}) {
    CAPTURE(plan::recompute_name(rc));
    const Step s = step(rc);
    CHECK(s.grads == none.grads);  // the recomputed forward gives the forward's values
    CHECK(s.held.after_forward < previous);
    CHECK(s.held.peak > s.held.after_forward);
    CHECK(s.held.peak < none.held.peak);
    previous = s.held.after_forward;
  }
}

TEST_CASE("exec: two pipeline stages in 1F1B order accumulate the whole graph's gradients") {
  // Two layers split inside layer 0's attention: stage 0 sends q, k and v
  // (its outputs, loss weight 0), stage 1 reads them and the graph input x.
  const ir::Graph g = testing::transformer_stack(2, 2, 8, 16, 2, ir::DType::F32);
  const auto spaces = algebra::build_op_spaces(g);
  const ir::OpId cut = *g.find_operator("l0.scores");
  const plan::StageGraph s0 = plan::stage_graph(g, spaces, 0, cut);
  const plan::StageGraph s1 = plan::stage_graph(g, spaces, cut, g.num_operators());
  REQUIRE(s1.received.size() == 3);
  const std::vector<std::uint8_t> needs = ir::gradient_tensors(g);
  const auto id_in = [&](const ir::Graph& sg, ir::TensorId full) {
    return *sg.find_tensor(g.tensor(full).name);
  };
  // Microbatch k: the graph's inputs seeded with 7 + k, parameters with 7.
  const auto value = [&](const ir::Graph& sg, std::uint64_t seed) {
    return [&g, &sg, seed](ir::TensorId t, std::int64_t i) {
      return exec::input_value(g, *g.find_tensor(sg.tensor(t).name), i, seed);
    };
  };
  const plan::Plan none = one_device_training(g, plan::Recompute::None);
  // The whole graph: two passes, their gradients accumulated.
  auto solo = exec::make_local_communicator();
  exec::ExecOptions ro;
  ro.seed = 7;
  exec::Executor ref(g, spaces, none, *solo, ro);
  for (std::uint64_t k = 0; k < 2; ++k) {
    ref.reseed_inputs(value(g, 7 + k));
    ref.run();
    ref.backward();
  }
  ref.sync_gradients();
  // The stages, each on its own one-device communicator.
  auto c0 = exec::make_local_communicator();
  auto c1 = exec::make_local_communicator();
  plan::Plan p0 = one_device_training(s0.graph, plan::Recompute::None);
  plan::Plan p1 = one_device_training(s1.graph, plan::Recompute::None);
  exec::ExecOptions o0, o1;
  o0.seed = o1.seed = 7;
  o0.value = value(s0.graph, 7);
  o1.value = value(s1.graph, 7);
  for (const ir::TensorId full : s1.received) {
    CHECK(needs[full]);
    o1.grad_inputs.push_back(id_in(s1.graph, full));
  }
  exec::Executor e0(s0.graph, s0.spaces, p0, *c0, o0);
  exec::Executor e1(s1.graph, s1.spaces, p1, *c1, o1);
  e0.set_loss_scale(std::vector<double>(e0.outputs().size(), 0.0));
  CHECK(e0.outputs().size() == 3);
  std::vector<std::vector<std::vector<float>>> sent(2);  // per microbatch, per boundary tensor
  std::deque<exec::Executor::PassState> kept0;
  const auto forward0 = [&](std::uint64_t k) {
    e0.reseed_inputs(value(s0.graph, 7 + k));
    e0.run();
    for (const ir::TensorId full : s1.received)
      sent[k].push_back(e0.block(id_in(s0.graph, full)).data);
    kept0.push_back(e0.take_pass());
  };
  std::vector<std::pair<ir::TensorId, exec::LocalTensor>> back;  // stage 1 -> stage 0
  const auto step1 = [&](std::uint64_t k) {  // stage 1: forward, then backward at once
    e1.reseed_inputs(value(s1.graph, 7 + k));
    for (std::size_t i = 0; i < s1.received.size(); ++i)
      e1.set_input(id_in(s1.graph, s1.received[i]), sent[k][i]);
    e1.run();
    e1.backward();
    back.clear();
    for (const ir::TensorId full : s1.received)
      back.emplace_back(id_in(s0.graph, full), e1.input_gradient(id_in(s1.graph, full)));
  };
  const auto backward0 = [&] {
    e0.restore_pass(std::move(kept0.front()));
    kept0.pop_front();
    e0.backward(back);
  };
  // 1F1B on 2 stages: stage 0 runs both forwards before its first backward.
  forward0(0);
  forward0(1);
  CHECK(kept0.size() == 2);
  step1(0);
  backward0();
  step1(1);
  backward0();
  e0.sync_gradients();
  e1.sync_gradients();
  std::size_t compared = 0;
  for (exec::Executor* e : {&e0, &e1}) {
    const ir::Graph& sg = e == &e0 ? s0.graph : s1.graph;
    for (const ir::TensorId t : e->trained()) {
      const std::vector<float>& want = ref.gradient(*g.find_tensor(sg.tensor(t).name)).data;
      const std::vector<float>& got = e->gradient(t).data;
      REQUIRE(got.size() == want.size());
      double err = 0, scale = 0;
      for (std::size_t i = 0; i < got.size(); ++i) {
        err = std::max(err, std::abs(double{got[i]} - want[i]));
        scale = std::max(scale, std::abs(double{want[i]}));
      }
      CAPTURE(sg.tensor(t).name);
      CHECK(scale > 0);
      CHECK(err <= 1e-5 * scale);
      ++compared;
    }
  }
  CHECK(compared == ref.trained().size());
}
