// SPDX-License-Identifier: Apache-2.0
// Graphs the tests share, built through the C++ API with fixed shapes so
// every test sees the same inputs (KaMinPar-style factories).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "recsearch/cluster.hpp"
#include "recsearch/ir/graph.hpp"

namespace recsearch::testing {

using ir::DType;
using ir::Graph;
using ir::TensorKind;

// Adds an operator by tensor names; the tensors must exist.
inline ir::OpId add_op(Graph& g, std::string name, std::string type,
                       const std::vector<std::string>& ins, const std::vector<std::string>& outs,
                       ir::Attrs attrs = {}) {
  ir::Operator op;
  op.name = std::move(name);
  op.type = std::move(type);
  for (const auto& n : ins) op.inputs.push_back(*g.find_tensor(n));
  for (const auto& n : outs) op.outputs.push_back(*g.find_tensor(n));
  op.attrs = std::move(attrs);
  return g.add_operator(std::move(op));
}

// Adds an operator by tensor ids (Operator's other fields keep their defaults).
inline ir::OpId add_op_ids(Graph& g, std::string name, std::string type,
                           std::vector<ir::TensorId> ins, std::vector<ir::TensorId> outs,
                           ir::Attrs attrs = {}) {
  ir::Operator op;
  op.name = std::move(name);
  op.type = std::move(type);
  op.inputs = std::move(ins);
  op.outputs = std::move(outs);
  op.attrs = std::move(attrs);
  return g.add_operator(std::move(op));
}

// x[b,d0] -> MatMul(w1[d0,d1]) -> ReLU -> MatMul(w2[d1,d2]) -> y.
inline Graph mlp2(std::int64_t b, std::int64_t d0, std::int64_t d1, std::int64_t d2,
                  DType dt = DType::F32) {
  Graph g("mlp2");
  g.add_tensor("x", {b, d0}, dt, TensorKind::Input);
  g.add_tensor("w1", {d0, d1}, dt, TensorKind::Parameter);
  g.add_tensor("h", {b, d1}, dt);
  g.add_tensor("a", {b, d1}, dt);
  g.add_tensor("w2", {d1, d2}, dt, TensorKind::Parameter);
  g.add_tensor("y", {b, d2}, dt);
  add_op(g, "mm1", "MatMul", {"x", "w1"}, {"h"});
  add_op(g, "relu", "ReLU", {"h"}, {"a"});
  add_op(g, "mm2", "MatMul", {"a", "w2"}, {"y"});
  g.finalize();
  return g;
}

// MindSpore's sharding-propagation FFN: 784-512-256-128-64-10, batch 32,
// MatMul + BiasAdd (+ ReLU) per layer, softmax cross-entropy loss.
inline Graph ffn(std::int64_t batch = 32) {
  Graph g("ffn");
  const std::vector<std::int64_t> widths = {784, 512, 256, 128, 64, 10};
  g.add_tensor("x", {batch, widths[0]}, DType::F32, TensorKind::Input);
  std::string cur = "x";
  for (std::size_t i = 0; i + 1 < widths.size(); ++i) {
    const std::string s = std::to_string(i + 1);
    g.add_tensor("w" + s, {widths[i], widths[i + 1]}, DType::F32, TensorKind::Parameter);
    g.add_tensor("b" + s, {widths[i + 1]}, DType::F32, TensorKind::Parameter);
    g.add_tensor("m" + s, {batch, widths[i + 1]}, DType::F32);
    g.add_tensor("z" + s, {batch, widths[i + 1]}, DType::F32);
    add_op(g, "dense" + s, "MatMul", {cur, "w" + s}, {"m" + s});
    add_op(g, "bias" + s, "BiasAdd", {"m" + s, "b" + s}, {"z" + s});
    cur = "z" + s;
    if (i + 2 < widths.size()) {
      g.add_tensor("r" + s, {batch, widths[i + 1]}, DType::F32);
      add_op(g, "relu" + s, "ReLU", {cur}, {"r" + s});
      cur = "r" + s;
    }
  }
  g.add_tensor("labels", {batch}, DType::I32, TensorKind::Input);
  g.add_tensor("loss", {}, DType::F32);
  add_op(g, "loss", "SoftmaxCrossEntropy", {cur, "labels"}, {"loss"});
  g.finalize();
  return g;
}

// Conv -> BatchNorm -> ReLU, twice, then pool and a classifier: large batch,
// small weights (the data-parallel textbook case).
inline Graph conv_net(std::int64_t batch = 512) {
  Graph g("convnet");
  g.add_tensor("x", {batch, 3, 32, 32}, DType::F16, TensorKind::Input);
  g.add_tensor("k1", {32, 3, 3, 3}, DType::F16, TensorKind::Parameter);
  g.add_tensor("c1", {batch, 32, 32, 32}, DType::F16);
  g.add_tensor("s1", {32}, DType::F16, TensorKind::Parameter);
  g.add_tensor("o1", {32}, DType::F16, TensorKind::Parameter);
  g.add_tensor("n1", {batch, 32, 32, 32}, DType::F16);
  g.add_tensor("r1", {batch, 32, 32, 32}, DType::F16);
  g.add_tensor("k2", {64, 32, 3, 3}, DType::F16, TensorKind::Parameter);
  g.add_tensor("c2", {batch, 64, 16, 16}, DType::F16);
  g.add_tensor("r2", {batch, 64, 16, 16}, DType::F16);
  g.add_tensor("p", {batch, 64, 1, 1}, DType::F16);
  g.add_tensor("f", {batch, 64}, DType::F16);
  g.add_tensor("wf", {64, 10}, DType::F16, TensorKind::Parameter);
  g.add_tensor("logits", {batch, 10}, DType::F16);
  g.add_tensor("labels", {batch}, DType::I32, TensorKind::Input);
  g.add_tensor("loss", {}, DType::F32);
  const ir::Attrs same{{"pads", std::vector<std::int64_t>{1, 1, 1, 1}}};
  add_op(g, "conv1", "Conv2D", {"x", "k1"}, {"c1"}, same);
  add_op(g, "bn1", "BatchNorm", {"c1", "s1", "o1"}, {"n1"});
  add_op(g, "relu1", "ReLU", {"n1"}, {"r1"});
  add_op(g, "conv2", "Conv2D", {"r1", "k2"}, {"c2"},
         {{"pads", std::vector<std::int64_t>{1, 1, 1, 1}},
          {"strides", std::vector<std::int64_t>{2, 2}}});
  add_op(g, "relu2", "ReLU", {"c2"}, {"r2"});
  add_op(g, "pool", "GlobalAvgPool", {"r2"}, {"p"});
  add_op(g, "flat", "Flatten", {"p"}, {"f"});
  add_op(g, "fc", "MatMul", {"f", "wf"}, {"logits"});
  add_op(g, "loss", "SoftmaxCrossEntropy", {"logits", "labels"}, {"loss"});
  g.finalize();
  return g;
}

// One MatMul whose weight is very wide: x[b,h] * w[h,n] with n >> b.
inline Graph wide_matmul(std::int64_t b = 16, std::int64_t h = 1024, std::int64_t n = 262144) {
  Graph g("wide");
  g.add_tensor("x", {b, h}, DType::F32, TensorKind::Input);
  g.add_tensor("w", {h, n}, DType::F32, TensorKind::Parameter);
  g.add_tensor("y", {b, n}, DType::F32);
  g.add_tensor("r", {b, n}, DType::F32);
  add_op(g, "mm", "MatMul", {"x", "w"}, {"y"});
  add_op(g, "act", "ReLU", {"y"}, {"r"});
  g.finalize();
  return g;
}

// Embedding lookup into a large table followed by a projection.
inline Graph embedding(std::int64_t vocab = 1 << 20, std::int64_t hidden = 4096,
                       std::int64_t batch = 8, std::int64_t seq = 128) {
  Graph g("embedding");
  g.add_tensor("table", {vocab, hidden}, DType::F32, TensorKind::Parameter);
  g.add_tensor("ids", {batch, seq}, DType::I32, TensorKind::Input);
  g.add_tensor("e", {batch, seq, hidden}, DType::F32);
  g.add_tensor("wp", {hidden, 256}, DType::F32, TensorKind::Parameter);
  g.add_tensor("y", {batch, seq, 256}, DType::F32);
  add_op(g, "lookup", "Gather", {"table", "ids"}, {"e"});
  add_op(g, "proj", "MatMul", {"e", "wp"}, {"y"});
  g.finalize();
  return g;
}

// `layers` pre-LN transformer blocks in explicit operators (LayerNorm,
// projections, attention through BatchMatMul/Softmax, MLP with GeLU,
// residuals: 23 operators each), chained. Names are prefixed "l<i>." when
// there is more than one layer.
inline Graph transformer_stack(int layers, std::int64_t b = 8, std::int64_t s = 1024,
                               std::int64_t h = 2048, std::int64_t heads = 16,
                               DType dt = DType::BF16) {
  Graph g(layers == 1 ? "block" : "gpt" + std::to_string(layers));
  const std::int64_t d = h / heads;
  g.add_tensor("x", {b, s, h}, dt, TensorKind::Input);
  std::string in = "x";
  using V = std::vector<std::int64_t>;
  for (int l = 0; l < layers; ++l) {
    const std::string p = layers == 1 ? "" : "l" + std::to_string(l) + ".";
    auto T = [&](const std::string& n, ir::Shape shp, bool param = false) {
      g.add_tensor(p + n, std::move(shp), dt, param ? TensorKind::Parameter : TensorKind::Input);
    };
    auto O = [&](const std::string& n, const char* type, std::vector<std::string> ins,
                 std::vector<std::string> outs, ir::Attrs a = {}) {
      for (auto& i : ins)
        if (i != in) i = p + i;
      for (auto& o : outs) o = p + o;
      add_op(g, p + n, type, ins, outs, std::move(a));
    };
    T("ln1_s", {h}, true);
    T("ln1_b", {h}, true);
    T("ln1", {b, s, h});
    for (const char* n : {"wq", "wk", "wv", "wo"}) T(n, {h, h}, true);
    for (const char* n : {"q", "k", "v", "ctx2", "o", "res1"}) T(n, {b, s, h});
    for (const char* n : {"q4", "k4", "v4"}) T(n, {b, s, heads, d});
    T("qt", {b, heads, s, d});
    T("kt", {b, heads, d, s});
    T("vt", {b, heads, s, d});
    T("sc", {b, heads, s, s});
    T("pr", {b, heads, s, s});
    T("ctx", {b, heads, s, d});
    T("ctxt", {b, s, heads, d});
    T("ln2_s", {h}, true);
    T("ln2_b", {h}, true);
    T("ln2", {b, s, h});
    T("w1", {h, 4 * h}, true);
    T("f1", {b, s, 4 * h});
    T("g1", {b, s, 4 * h});
    T("w2", {4 * h, h}, true);
    T("f2", {b, s, h});
    T("out", {b, s, h});
    O("ln1", "LayerNorm", {in, "ln1_s", "ln1_b"}, {"ln1"});
    O("q_proj", "MatMul", {"ln1", "wq"}, {"q"});
    O("k_proj", "MatMul", {"ln1", "wk"}, {"k"});
    O("v_proj", "MatMul", {"ln1", "wv"}, {"v"});
    O("q_split", "Reshape", {"q"}, {"q4"});
    O("k_split", "Reshape", {"k"}, {"k4"});
    O("v_split", "Reshape", {"v"}, {"v4"});
    O("q_t", "Transpose", {"q4"}, {"qt"}, {{"perm", V{0, 2, 1, 3}}});
    O("k_t", "Transpose", {"k4"}, {"kt"}, {{"perm", V{0, 2, 3, 1}}});
    O("v_t", "Transpose", {"v4"}, {"vt"}, {{"perm", V{0, 2, 1, 3}}});
    O("scores", "BatchMatMul", {"qt", "kt"}, {"sc"});
    O("softmax", "Softmax", {"sc"}, {"pr"});
    O("context", "BatchMatMul", {"pr", "vt"}, {"ctx"});
    O("ctx_t", "Transpose", {"ctx"}, {"ctxt"}, {{"perm", V{0, 2, 1, 3}}});
    O("ctx_merge", "Reshape", {"ctxt"}, {"ctx2"});
    O("o_proj", "MatMul", {"ctx2", "wo"}, {"o"});
    O("res1", "Add", {in, "o"}, {"res1"});
    O("ln2", "LayerNorm", {"res1", "ln2_s", "ln2_b"}, {"ln2"});
    O("fc1", "MatMul", {"ln2", "w1"}, {"f1"});
    O("gelu", "GeLU", {"f1"}, {"g1"});
    O("fc2", "MatMul", {"g1", "w2"}, {"f2"});
    O("res2", "Add", {"res1", "f2"}, {"out"});
    in = p + "out";
  }
  g.finalize();
  return g;
}

// One pre-LN transformer block (see transformer_stack).
inline Graph transformer_block(std::int64_t b = 8, std::int64_t s = 512, std::int64_t h = 1024,
                               std::int64_t heads = 16, DType dt = DType::F16) {
  return transformer_stack(1, b, s, h, heads, dt);
}

// Seeded random chain-with-skips of MatMul/elementwise operators, for
// property tests (deterministic for a given seed).
inline Graph random_dag(std::uint32_t seed, int ops, std::int64_t batch = 64) {
  std::uint64_t state = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  auto next = [&](std::uint64_t n) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (state >> 33) % n;
  };
  const std::vector<std::int64_t> widths = {128, 256, 512, 1024, 4096};
  Graph g("random" + std::to_string(seed));
  std::vector<std::pair<std::string, std::int64_t>> avail;  // activations [batch, w]
  g.add_tensor("x", {batch, 256}, DType::F32, TensorKind::Input);
  avail.emplace_back("x", 256);
  for (int i = 0; i < ops; ++i) {
    const std::string n = "t" + std::to_string(i);
    const auto [src, w] = avail[avail.size() - 1 - next(std::min<std::uint64_t>(avail.size(), 3))];
    switch (next(3)) {
      case 0: {  // MatMul to a new width
        const std::int64_t w2 = widths[next(widths.size())];
        g.add_tensor("w" + n, {w, w2}, DType::F32, TensorKind::Parameter);
        g.add_tensor(n, {batch, w2}, DType::F32);
        add_op(g, "op" + std::to_string(i), "MatMul", {src, "w" + n}, {n});
        avail.emplace_back(n, w2);
        break;
      }
      case 1: {  // unary
        g.add_tensor(n, {batch, w}, DType::F32);
        add_op(g, "op" + std::to_string(i), "GeLU", {src}, {n});
        avail.emplace_back(n, w);
        break;
      }
      default: {  // residual add with an earlier tensor of the same width
        std::string other = src;
        for (auto it = avail.rbegin(); it != avail.rend(); ++it)
          if (it->second == w && it->first != src) {
            other = it->first;
            break;
          }
        g.add_tensor(n, {batch, w}, DType::F32);
        add_op(g, "op" + std::to_string(i), "Add", {src, other}, {n});
        avail.emplace_back(n, w);
        break;
      }
    }
  }
  g.finalize();
  return g;
}

// A graph and the cluster it is searched on.
struct GraphCase {
  Graph g;
  Cluster c;
};

// The hand-made graphs small enough for the exhaustive search to prove its
// optimum, each on a cluster that gives it a real choice.
inline std::vector<GraphCase> small_exact_cases() {
  std::vector<GraphCase> cases;
  cases.push_back({mlp2(8, 4096, 16384, 4096), Cluster::flat(4)});
  cases.push_back({mlp2(1024, 1024, 1024, 1024), Cluster::mesh({2, 2})});
  cases.push_back({ffn(), Cluster::flat(4)});
  cases.push_back({wide_matmul(), Cluster::flat(8)});
  cases.push_back({embedding(1 << 16), Cluster::flat(4)});
  cases.push_back({conv_net(), Cluster::flat(4)});
  cases.push_back({random_dag(7, 10), Cluster::flat(6)});
  cases.push_back({random_dag(8, 12), Cluster::mesh({2, 2})});
  return cases;
}

}  // namespace recsearch::testing
