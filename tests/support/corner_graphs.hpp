// SPDX-License-Identifier: Apache-2.0
// Graphs for the quality suite's corners (tests/search/quality_corners_test.cpp,
// issue 19): model-like blocks small enough for the exact references
// (attention, MLP, conv stem, embedding + head) and seeded random DAGs whose
// batch and feature sizes the device count need not divide. Every factory is
// deterministic for its arguments; sizes are free so that one block can be
// latency-bound (microseconds) or compute-bound (seconds).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "support/graph_factories.hpp"

namespace recsearch::testing {

// The attention half of a pre-LN transformer block (16 operators): LayerNorm,
// Q/K/V projections, heads split and transposed, scores, softmax, context,
// heads merged, output projection, residual.
inline Graph attention_block(std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t heads,
                             DType dt = DType::F16) {
  Graph g("attention");
  const std::int64_t d = h / heads;
  using V = std::vector<std::int64_t>;
  g.add_tensor("x", {b, s, h}, dt, TensorKind::Input);
  g.add_tensor("ln_s", {h}, dt, TensorKind::Parameter);
  g.add_tensor("ln_b", {h}, dt, TensorKind::Parameter);
  g.add_tensor("ln", {b, s, h}, dt);
  for (const char* n : {"wq", "wk", "wv", "wo"}) g.add_tensor(n, {h, h}, dt, TensorKind::Parameter);
  for (const char* n : {"q", "k", "v", "ctx2", "o", "out"}) g.add_tensor(n, {b, s, h}, dt);
  for (const char* n : {"q4", "k4", "v4"}) g.add_tensor(n, {b, s, heads, d}, dt);
  g.add_tensor("qt", {b, heads, s, d}, dt);
  g.add_tensor("kt", {b, heads, d, s}, dt);
  g.add_tensor("vt", {b, heads, s, d}, dt);
  g.add_tensor("sc", {b, heads, s, s}, dt);
  g.add_tensor("pr", {b, heads, s, s}, dt);
  g.add_tensor("ctx", {b, heads, s, d}, dt);
  g.add_tensor("ctxt", {b, s, heads, d}, dt);
  add_op(g, "ln", "LayerNorm", {"x", "ln_s", "ln_b"}, {"ln"});
  add_op(g, "q_proj", "MatMul", {"ln", "wq"}, {"q"});
  add_op(g, "k_proj", "MatMul", {"ln", "wk"}, {"k"});
  add_op(g, "v_proj", "MatMul", {"ln", "wv"}, {"v"});
  add_op(g, "q_split", "Reshape", {"q"}, {"q4"});
  add_op(g, "k_split", "Reshape", {"k"}, {"k4"});
  add_op(g, "v_split", "Reshape", {"v"}, {"v4"});
  add_op(g, "q_t", "Transpose", {"q4"}, {"qt"}, {{"perm", V{0, 2, 1, 3}}});
  add_op(g, "k_t", "Transpose", {"k4"}, {"kt"}, {{"perm", V{0, 2, 3, 1}}});
  add_op(g, "v_t", "Transpose", {"v4"}, {"vt"}, {{"perm", V{0, 2, 1, 3}}});
  add_op(g, "scores", "BatchMatMul", {"qt", "kt"}, {"sc"});
  add_op(g, "softmax", "Softmax", {"sc"}, {"pr"});
  add_op(g, "context", "BatchMatMul", {"pr", "vt"}, {"ctx"});
  add_op(g, "ctx_t", "Transpose", {"ctx"}, {"ctxt"}, {{"perm", V{0, 2, 1, 3}}});
  add_op(g, "ctx_merge", "Reshape", {"ctxt"}, {"ctx2"});
  add_op(g, "o_proj", "MatMul", {"ctx2", "wo"}, {"o"});
  add_op(g, "res", "Add", {"x", "o"}, {"out"});
  g.finalize();
  return g;
}

// The MLP half of a pre-LN transformer block (5 operators): LayerNorm,
// MatMul to f, GeLU, MatMul back to h, residual.
inline Graph mlp_block(std::int64_t b, std::int64_t s, std::int64_t h, std::int64_t f,
                       DType dt = DType::F16) {
  Graph g("mlp");
  g.add_tensor("x", {b, s, h}, dt, TensorKind::Input);
  g.add_tensor("ln_s", {h}, dt, TensorKind::Parameter);
  g.add_tensor("ln_b", {h}, dt, TensorKind::Parameter);
  g.add_tensor("w1", {h, f}, dt, TensorKind::Parameter);
  g.add_tensor("w2", {f, h}, dt, TensorKind::Parameter);
  for (const char* n : {"ln", "f2", "out"}) g.add_tensor(n, {b, s, h}, dt);
  for (const char* n : {"f1", "g1"}) g.add_tensor(n, {b, s, f}, dt);
  add_op(g, "ln", "LayerNorm", {"x", "ln_s", "ln_b"}, {"ln"});
  add_op(g, "fc1", "MatMul", {"ln", "w1"}, {"f1"});
  add_op(g, "gelu", "GeLU", {"f1"}, {"g1"});
  add_op(g, "fc2", "MatMul", {"g1", "w2"}, {"f2"});
  add_op(g, "res", "Add", {"x", "f2"}, {"out"});
  g.finalize();
  return g;
}

// A convolutional stem and classifier (9 operators): conv 3x3, BatchNorm,
// ReLU, strided conv, ReLU, global pool, flatten, fully connected, loss.
inline Graph conv_stem(std::int64_t b, std::int64_t c, std::int64_t hw, std::int64_t classes,
                       DType dt = DType::F16) {
  Graph g("convstem");
  const std::int64_t half = hw / 2;
  g.add_tensor("x", {b, 3, hw, hw}, dt, TensorKind::Input);
  g.add_tensor("k1", {c, 3, 3, 3}, dt, TensorKind::Parameter);
  g.add_tensor("c1", {b, c, hw, hw}, dt);
  g.add_tensor("s1", {c}, dt, TensorKind::Parameter);
  g.add_tensor("o1", {c}, dt, TensorKind::Parameter);
  g.add_tensor("n1", {b, c, hw, hw}, dt);
  g.add_tensor("r1", {b, c, hw, hw}, dt);
  g.add_tensor("k2", {2 * c, c, 3, 3}, dt, TensorKind::Parameter);
  g.add_tensor("c2", {b, 2 * c, half, half}, dt);
  g.add_tensor("r2", {b, 2 * c, half, half}, dt);
  g.add_tensor("p", {b, 2 * c, 1, 1}, dt);
  g.add_tensor("f", {b, 2 * c}, dt);
  g.add_tensor("wf", {2 * c, classes}, dt, TensorKind::Parameter);
  g.add_tensor("logits", {b, classes}, dt);
  g.add_tensor("labels", {b}, DType::I32, TensorKind::Input);
  g.add_tensor("loss", {}, DType::F32);
  add_op(g, "conv1", "Conv2D", {"x", "k1"}, {"c1"},
         {{"pads", std::vector<std::int64_t>{1, 1, 1, 1}}});
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

// Token embedding and a language-model head (5 operators): Gather from the
// table, LayerNorm, projection to the vocabulary, Softmax, and a MatMul back
// (the head's logits feeding a small readout).
inline Graph embedding_head(std::int64_t b, std::int64_t s, std::int64_t vocab, std::int64_t h,
                            DType dt = DType::F16) {
  Graph g("embedhead");
  g.add_tensor("table", {vocab, h}, dt, TensorKind::Parameter);
  g.add_tensor("ids", {b, s}, DType::I32, TensorKind::Input);
  g.add_tensor("e", {b, s, h}, dt);
  g.add_tensor("ln_s", {h}, dt, TensorKind::Parameter);
  g.add_tensor("ln_b", {h}, dt, TensorKind::Parameter);
  g.add_tensor("ln", {b, s, h}, dt);
  g.add_tensor("head", {h, vocab}, dt, TensorKind::Parameter);
  g.add_tensor("logits", {b, s, vocab}, dt);
  g.add_tensor("probs", {b, s, vocab}, dt);
  add_op(g, "lookup", "Gather", {"table", "ids"}, {"e"});
  add_op(g, "ln", "LayerNorm", {"e", "ln_s", "ln_b"}, {"ln"});
  add_op(g, "head", "MatMul", {"ln", "head"}, {"logits"});
  add_op(g, "softmax", "Softmax", {"logits"}, {"probs"});
  g.finalize();
  return g;
}

// Seeded random DAG of `ops` operators over activations [batch, seq, w]
// (seq 1: [batch, w]), w drawn from `widths`: MatMul to a new width, GeLU,
// LayerNorm-free residual Add, Softmax; each operator reads one of the last
// three tensors, so the graph is a chain with skips and forks.
inline Graph odd_random_dag(std::uint32_t seed, int ops, std::int64_t batch, std::int64_t seq,
                            const std::vector<std::int64_t>& widths, DType dt = DType::F32) {
  std::uint64_t state = seed * 6364136223846793005ULL + 1442695040888963407ULL;
  auto next = [&](std::uint64_t n) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (state >> 33) % n;
  };
  auto shape = [&](std::int64_t w) {
    return seq == 1 ? ir::Shape{batch, w} : ir::Shape{batch, seq, w};
  };
  Graph g("odd" + std::to_string(seed));
  std::vector<std::pair<std::string, std::int64_t>> avail;  // activations and their widths
  const std::int64_t w0 = widths[next(widths.size())];
  g.add_tensor("x", shape(w0), dt, TensorKind::Input);
  avail.emplace_back("x", w0);
  for (int i = 0; i < ops; ++i) {
    const std::string n = "t" + std::to_string(i), op = "op" + std::to_string(i);
    const auto [src, w] = avail[avail.size() - 1 - next(std::min<std::uint64_t>(avail.size(), 3))];
    std::int64_t out_w = w;
    switch (next(5)) {
      case 0:
      case 1: {  // MatMul to a new width
        out_w = widths[next(widths.size())];
        g.add_tensor("w" + n, {w, out_w}, dt, TensorKind::Parameter);
        g.add_tensor(n, shape(out_w), dt);
        add_op(g, op, "MatMul", {src, "w" + n}, {n});
        break;
      }
      case 2:
        g.add_tensor(n, shape(w), dt);
        add_op(g, op, "GeLU", {src}, {n});
        break;
      case 3:
        g.add_tensor(n, shape(w), dt);
        add_op(g, op, "Softmax", {src}, {n});
        break;
      default: {  // residual add with an earlier tensor of the same width
        std::string other = src;
        for (auto it = avail.rbegin(); it != avail.rend(); ++it)
          if (it->second == w && it->first != src) {
            other = it->first;
            break;
          }
        g.add_tensor(n, shape(w), dt);
        add_op(g, op, "Add", {src, other}, {n});
        break;
      }
    }
    avail.emplace_back(n, out_w);
  }
  g.finalize();
  return g;
}

}  // namespace recsearch::testing
