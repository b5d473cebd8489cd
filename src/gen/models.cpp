// SPDX-License-Identifier: Apache-2.0
// The model families of `recsearch gen`, written at the granularity that
// frameworks hand to a parallelizer: a transformer layer is its projections,
// bias adds, head reshapes and transposes, attention matmuls, scaling, mask,
// softmax, dropouts, residual adds, norms and MLP (33 forward operators; the
// Megatron layout fuses scale, mask and softmax, the flash layout the whole
// core into one Attention operator), a ResNet block its convolutions, batch norms, ReLUs and
// residual add.
//
// Every generator emits a tensor before the first operator that names it and
// draws nothing from outside its spec, so two runs emit the same sequence:
// write_graph_json relies on that to stream in two passes.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gen/builder.hpp"
#include "recsearch/error.hpp"
#include "recsearch/gen/generate.hpp"

namespace recsearch::gen {

namespace {

using ir::TensorKind;
using V = std::vector<std::int64_t>;

// ---- MLP -------------------------------------------------------------------
void gen_mlp(const ModelSpec& m, Builder& b) {
  const auto in = b.tensor("x", {m.batch, m.hidden}, TensorKind::Input);
  std::string cur = in;
  for (std::int64_t l = 0; l < m.layers; ++l) {
    b.set_prefix("fc" + std::to_string(l) + ".");
    const auto w = b.param("w", {m.hidden, m.hidden});
    const auto bias = b.param("b", {m.hidden});
    const auto mm = b.act("mm", {m.batch, m.hidden});
    const auto ba = b.act("ba", {m.batch, m.hidden});
    const auto r = b.act("relu", {m.batch, m.hidden});
    b.op("matmul", "MatMul", {cur, w}, {mm});
    b.op("bias", "BiasAdd", {mm, bias}, {ba});
    b.op("relu", "ReLU", {ba}, {r});
    cur = r;
  }
  b.set_prefix("head.");
  const auto w = b.param("w", {m.hidden, m.classes});
  const auto logits = b.act("logits", {m.batch, m.classes});
  b.op("matmul", "MatMul", {cur, w}, {logits});
  if (m.training_loss) {
    const auto labels = b.tensor("labels", {m.batch}, TensorKind::Input, ir::DType::I32);
    const auto loss = b.tensor("loss", {}, TensorKind::Input, ir::DType::F32);
    b.op("loss", "SoftmaxCrossEntropy", {logits, labels}, {loss});
  }
}

// ---- transformer layers (GPT: pre-LN, causal; BERT: post-LN) ------------------
struct Dims {
  std::int64_t b, s, h, heads, d;
};

std::string attention_output(Builder& b, const Dims& t, const std::string& ctx);

// FlashAttention: one Attention operator on q, k, v [b,heads,s,d] (k not
// transposed), then the output projection.
std::string fused_core(Builder& b, const Dims& t, const std::array<std::string, 3>& heads,
                       bool causal) {
  const auto ctx = b.act("context", {t.b, t.heads, t.s, t.d});
  b.op("attention", "Attention", {heads[0], heads[1], heads[2]}, {ctx}, {{"causal", causal}});
  return attention_output(b, t, ctx);
}

// The scores of q [b,heads,s,d] and k [b,heads,d,s]: [b,heads,s,s].
std::string scores_product(Builder& b, const Dims& t, const std::array<std::string, 3>& heads) {
  const auto scores = b.act("scores", {t.b, t.heads, t.s, t.s});
  b.op("scores", "BatchMatMul", {heads[0], heads[1]}, {scores});
  return scores;
}

// Dropout over the probabilities, the context product with v, the output
// projection: the tail both s^2 layouts share.
std::string probs_to_output(Builder& b, const Dims& t, const std::array<std::string, 3>& heads,
                            const std::string& probs) {
  const auto probs_d = b.act("probs_drop", {t.b, t.heads, t.s, t.s});
  b.op("attn_dropout", "Dropout", {probs}, {probs_d}, {{"ratio", 0.1}});
  const auto ctx = b.act("context", {t.b, t.heads, t.s, t.d});
  b.op("context", "BatchMatMul", {probs_d, heads[2]}, {ctx});
  return attention_output(b, t, ctx);
}

// Explicit: scale, causal mask and softmax as separate operators, each a
// pass over the s^2 scores.
std::string explicit_core(Builder& b, const Dims& t, const std::array<std::string, 3>& heads,
                          bool causal) {
  const V bhss{t.b, t.heads, t.s, t.s};
  const auto scores = scores_product(b, t, heads);
  const auto scaled = b.act("scaled", bhss);
  const auto scale = b.constant("scale", {1});
  b.op("scale", "Mul", {scores, scale}, {scaled});
  std::string logits = scaled;
  if (causal) {
    const auto mask = b.constant("causal_mask", {t.s, t.s});
    const auto masked = b.act("masked", bhss);
    b.op("mask", "Add", {scaled, mask}, {masked});
    logits = masked;
  }
  const auto probs = b.act("probs", bhss);
  b.op("softmax", "Softmax", {logits}, {probs});
  return probs_to_output(b, t, heads, probs);
}

// Megatron-LM (SC'21): FusedScaleMaskSoftmax is one kernel, so scale and
// causal mask are attributes of the Softmax; like that kernel it keeps only
// its output for the backward pass (docs/cost-model.md, saved tensors).
std::string megatron_core(Builder& b, const Dims& t, const std::array<std::string, 3>& heads,
                          bool causal) {
  const auto scores = scores_product(b, t, heads);
  const auto probs = b.act("probs", {t.b, t.heads, t.s, t.s});
  const double scale = 1.0 / std::sqrt(static_cast<double>(t.d));
  b.op("softmax", "Softmax", {scores}, {probs}, {{"scale", scale}, {"causal", causal}});
  return probs_to_output(b, t, heads, probs);
}

// Multi-head self-attention on x [b,s,h]; returns the projected output
// [b,s,h] (before dropout and residual).
std::string attention(Builder& b, const Dims& t, const std::string& x, bool causal,
                      AttentionLayout layout) {
  const bool flash = layout == AttentionLayout::Flash;
  const V bsh{t.b, t.s, t.h};
  std::array<std::string, 3> heads;
  const std::array<const char*, 3> names = {"q", "k", "v"};
  for (std::size_t i = 0; i < 3; ++i) {
    const std::string n = names[i];
    const auto w = b.param("w" + n, {t.h, t.h});
    const auto bias = b.param("b" + n, {t.h});
    const auto p = b.act(n + "_mm", bsh);
    const auto pb = b.act(n, bsh);
    const auto r = b.act(n + "_heads", {t.b, t.s, t.heads, t.d});
    // k goes straight to [b,heads,d,s] so that scores is a plain batched matmul.
    const bool k_t = i == 1 && !flash;
    const auto tr =
        k_t ? b.act(n + "_t", {t.b, t.heads, t.d, t.s}) : b.act(n + "_t", {t.b, t.heads, t.s, t.d});
    b.op(n + "_proj", "MatMul", {x, w}, {p});
    b.op(n + "_bias", "BiasAdd", {p, bias}, {pb});
    b.op(n + "_split_heads", "Reshape", {pb}, {r});
    b.op(n + "_transpose", "Transpose", {r}, {tr}, {{"perm", k_t ? V{0, 2, 3, 1} : V{0, 2, 1, 3}}});
    heads[i] = tr;
  }
  switch (layout) {
    case AttentionLayout::Flash: return fused_core(b, t, heads, causal);
    case AttentionLayout::Megatron: return megatron_core(b, t, heads, causal);
    case AttentionLayout::Explicit: break;
  }
  return explicit_core(b, t, heads, causal);
}

// Heads merged back and projected: [b,heads,s,d] -> [b,s,h].
std::string attention_output(Builder& b, const Dims& t, const std::string& ctx) {
  const V bsh{t.b, t.s, t.h};
  const auto ctx_t = b.act("context_t", {t.b, t.s, t.heads, t.d});
  const auto merged = b.act("merged", bsh);
  b.op("context_transpose", "Transpose", {ctx}, {ctx_t}, {{"perm", V{0, 2, 1, 3}}});
  b.op("merge_heads", "Reshape", {ctx_t}, {merged});
  const auto wo = b.param("wo", {t.h, t.h});
  const auto bo = b.param("bo", {t.h});
  const auto o = b.act("o_mm", bsh);
  const auto ob = b.act("o", bsh);
  b.op("o_proj", "MatMul", {merged, wo}, {o});
  b.op("o_bias", "BiasAdd", {o, bo}, {ob});
  return ob;
}

std::string layer_norm(Builder& b, const std::string& name, const std::string& x, const V& shape) {
  const auto s = b.param(name + "_scale", {shape.back()});
  const auto bias = b.param(name + "_bias", {shape.back()});
  const auto y = b.act(name, shape);
  b.op(name, "LayerNorm", {x, s, bias}, {y});
  return y;
}

// fc1, bias, GeLU, fc2, bias on x [b,s,h]; returns [b,s,h].
std::string mlp_block(Builder& b, const Dims& t, const std::string& x, std::int64_t ffn) {
  const auto w1 = b.param("w1", {t.h, ffn});
  const auto b1 = b.param("b1", {ffn});
  const auto w2 = b.param("w2", {ffn, t.h});
  const auto b2 = b.param("b2", {t.h});
  const V wide{t.b, t.s, ffn};
  const V bsh{t.b, t.s, t.h};
  const auto f1 = b.act("fc1_mm", wide);
  const auto f1b = b.act("fc1", wide);
  const auto g = b.act("gelu", wide);
  const auto f2 = b.act("fc2_mm", bsh);
  const auto f2b = b.act("fc2", bsh);
  b.op("fc1", "MatMul", {x, w1}, {f1});
  b.op("fc1_bias", "BiasAdd", {f1, b1}, {f1b});
  b.op("gelu", "GeLU", {f1b}, {g});
  b.op("fc2", "MatMul", {g, w2}, {f2});
  b.op("fc2_bias", "BiasAdd", {f2, b2}, {f2b});
  return f2b;
}

// GShard MoE feed-forward on x [b,s,h] with E experts, top-2 capacity; the
// gating's top-k selection is a dispatch Einsum against a constant position
// one-hot, which has the shape and the loops of the real thing.
std::string moe_block(Builder& b, const Dims& t, const std::string& x, std::int64_t experts,
                      std::int64_t ffn) {
  const std::int64_t e = experts;
  const std::int64_t cap = std::max<std::int64_t>(1, 2 * t.s / e);  // per group (= sequence)
  const auto wg = b.param("gate_w", {t.h, e});
  const auto logits = b.act("gate_logits", {t.b, t.s, e});
  const auto probs = b.act("gate_probs", {t.b, t.s, e});
  const auto slots = b.constant("gate_slots", {t.b, t.s, cap});
  const auto combine = b.act("combine", {t.b, t.s, e, cap});
  b.op("gate", "MatMul", {x, wg}, {logits});
  b.op("gate_softmax", "Softmax", {logits}, {probs});
  b.op("top2", "Einsum", {probs, slots}, {combine}, {{"equation", std::string("gse,gsc->gsec")}});
  const auto disp = b.act("dispatched", {e, t.b, cap, t.h});
  b.op("dispatch", "Einsum", {combine, x}, {disp}, {{"equation", std::string("gsec,gsm->egcm")}});
  const auto w1 = b.param("expert_w1", {e, t.h, ffn});
  const auto w2 = b.param("expert_w2", {e, ffn, t.h});
  const auto h1 = b.act("expert_fc1", {e, t.b, cap, ffn});
  const auto g = b.act("expert_gelu", {e, t.b, cap, ffn});
  const auto h2 = b.act("expert_fc2", {e, t.b, cap, t.h});
  b.op("expert_fc1", "Einsum", {disp, w1}, {h1}, {{"equation", std::string("egcm,emh->egch")}});
  b.op("expert_gelu", "GeLU", {h1}, {g});
  b.op("expert_fc2", "Einsum", {g, w2}, {h2}, {{"equation", std::string("egch,ehm->egcm")}});
  const auto out = b.act("moe_out", {t.b, t.s, t.h});
  b.op("combine", "Einsum", {combine, h2}, {out}, {{"equation", std::string("gsec,egcm->gsm")}});
  return out;
}

std::string residual(Builder& b, const std::string& name, const std::string& x,
                     const std::string& y, const V& shape) {
  const auto d = b.act(name + "_dropout", shape);
  const auto r = b.act(name, shape);
  b.op(name + "_dropout", "Dropout", {y}, {d}, {{"ratio", 0.1}});
  b.op(name, "Add", {x, d}, {r});
  return r;
}

// Token + position embedding: Gather from the table, Add the positions.
std::string embedding(Builder& b, const ModelSpec& m, std::string* table) {
  b.set_prefix("");
  const auto ids = b.tensor("tokens", {m.batch, m.seq}, TensorKind::Input, ir::DType::I32);
  *table = b.param("wte", {m.vocab, m.hidden});
  const auto wpe = b.param("wpe", {m.seq, m.hidden});
  const V bsh{m.batch, m.seq, m.hidden};
  const auto tok = b.act("tok_emb", bsh);
  const auto x = b.act("emb", bsh);
  b.op("tok_emb", "Gather", {*table, ids}, {tok});
  b.op("pos_emb", "Add", {tok, wpe}, {x});
  return x;
}

// Tied LM head and loss on x [b,s,h].
void lm_head(Builder& b, const ModelSpec& m, const std::string& x, const std::string& table) {
  b.set_prefix("");
  const auto logits = b.act("logits", {m.batch, m.seq, m.vocab});
  b.op("lm_head", "MatMul", {x, table}, {logits}, {{"transpose_b", true}});
  if (m.training_loss) {
    const auto labels = b.tensor("labels", {m.batch, m.seq}, TensorKind::Input, ir::DType::I32);
    const auto loss = b.tensor("loss", {}, TensorKind::Input, ir::DType::F32);
    b.op("loss", "SoftmaxCrossEntropy", {logits, labels}, {loss});
  }
}

void gen_gpt(const ModelSpec& m, Builder& b, bool moe) {
  const Dims t{m.batch, m.seq, m.hidden, m.heads, m.hidden / m.heads};
  const V bsh{t.b, t.s, t.h};
  std::string table;
  std::string x = embedding(b, m, &table);
  for (std::int64_t l = 0; l < m.layers; ++l) {
    b.set_prefix("h" + std::to_string(l) + ".");
    const auto ln1 = layer_norm(b, "ln1", x, bsh);
    const auto a = attention(b, t, ln1, /*causal=*/true, m.attention);
    const auto r1 = residual(b, "res1", x, a, bsh);
    const auto ln2 = layer_norm(b, "ln2", r1, bsh);
    // GShard: every other layer's feed-forward is a mixture of experts.
    const auto f = moe && l % 2 == 1 ? moe_block(b, t, ln2, m.experts, 4 * t.h)
                                     : mlp_block(b, t, ln2, 4 * t.h);
    x = residual(b, "res2", r1, f, bsh);
  }
  b.set_prefix("");
  const auto lnf = layer_norm(b, "ln_f", x, bsh);
  lm_head(b, m, lnf, table);
}

void gen_bert(const ModelSpec& m, Builder& b) {
  const Dims t{m.batch, m.seq, m.hidden, m.heads, m.hidden / m.heads};
  const V bsh{t.b, t.s, t.h};
  std::string table;
  std::string x = embedding(b, m, &table);
  x = layer_norm(b, "emb_ln", x, bsh);
  for (std::int64_t l = 0; l < m.layers; ++l) {
    b.set_prefix("layer" + std::to_string(l) + ".");
    const auto a = attention(b, t, x, /*causal=*/false, m.attention);
    const auto r1 = residual(b, "res1", x, a, bsh);
    const auto n1 = layer_norm(b, "ln1", r1, bsh);
    const auto f = mlp_block(b, t, n1, 4 * t.h);
    const auto r2 = residual(b, "res2", n1, f, bsh);
    x = layer_norm(b, "ln2", r2, bsh);
  }
  // Masked-LM head: transform, norm, tied decoder.
  b.set_prefix("mlm.");
  const auto w = b.param("w", {t.h, t.h});
  const auto bias = b.param("b", {t.h});
  const auto mm = b.act("dense_mm", bsh);
  const auto d = b.act("dense", bsh);
  const auto g = b.act("gelu", bsh);
  b.op("dense", "MatMul", {x, w}, {mm});
  b.op("dense_bias", "BiasAdd", {mm, bias}, {d});
  b.op("gelu", "GeLU", {d}, {g});
  const auto n = layer_norm(b, "ln", g, bsh);
  lm_head(b, m, n, table);
}

// ---- ResNet / Wide-ResNet ------------------------------------------------------
struct Image {
  std::string t;
  std::int64_t c, h, w;
};

class ResNetGen {
 public:
  ResNetGen(const ModelSpec& m, Builder& b) : m_(m), b_(b) {}

  Image conv_bn(const std::string& name, const Image& x, std::int64_t out_c, std::int64_t k,
                std::int64_t stride, bool relu) {
    const std::int64_t pad = k / 2;
    const std::int64_t oh = (x.h + 2 * pad - k) / stride + 1;
    const std::int64_t ow = (x.w + 2 * pad - k) / stride + 1;
    const auto w = b_.param(name + "_w", {out_c, x.c, k, k});
    const auto c = b_.act(name, {m_.batch, out_c, oh, ow});
    b_.op(name, "Conv2D", {x.t, w}, {c},
          {{"kernel_shape", V{k, k}},
           {"strides", V{stride, stride}},
           {"pads", V{pad, pad, pad, pad}}});
    const auto s = b_.param(name + "_bn_scale", {out_c});
    const auto bias = b_.param(name + "_bn_bias", {out_c});
    const auto bn = b_.act(name + "_bn", {m_.batch, out_c, oh, ow});
    b_.op(name + "_bn", "BatchNorm", {c, s, bias}, {bn}, {{"epsilon", 1e-5}});
    Image out{bn, out_c, oh, ow};
    if (relu) out.t = relu_of(name + "_relu", out);
    return out;
  }

  std::string relu_of(const std::string& name, const Image& x) {
    const auto r = b_.act(name, {m_.batch, x.c, x.h, x.w});
    b_.op(name, "ReLU", {x.t}, {r});
    return r;
  }

  void run() {
    const bool bottleneck = m_.depth >= 50;
    std::array<int, 4> blocks{};
    switch (m_.depth) {
      case 18: blocks = {2, 2, 2, 2}; break;
      case 34: blocks = {3, 4, 6, 3}; break;
      case 50: blocks = {3, 4, 6, 3}; break;
      case 101: blocks = {3, 4, 23, 3}; break;
      default: blocks = {3, 8, 36, 3}; break;  // 152
    }
    b_.set_prefix("");
    Image x{b_.tensor("images", {m_.batch, 3, m_.image, m_.image}, TensorKind::Input), 3, m_.image,
            m_.image};
    b_.set_prefix("stem.");
    x = conv_bn("conv", x, m_.channels, 7, 2, true);
    {
      const std::int64_t oh = (x.h + 2 - 3) / 2 + 1;
      const std::int64_t ow = (x.w + 2 - 3) / 2 + 1;
      const auto p = b_.act("pool", {m_.batch, x.c, oh, ow});
      b_.op("pool", "MaxPool", {x.t}, {p},
            {{"kernel_shape", V{3, 3}}, {"strides", V{2, 2}}, {"pads", V{1, 1, 1, 1}}});
      x = {p, x.c, oh, ow};
    }
    std::int64_t planes = m_.channels;
    for (int stage = 0; stage < 4; ++stage) {
      for (int blk = 0; blk < blocks[stage]; ++blk) {
        b_.set_prefix("layer" + std::to_string(stage + 1) + "." + std::to_string(blk) + ".");
        const std::int64_t stride = stage > 0 && blk == 0 ? 2 : 1;
        const std::int64_t out_c = bottleneck ? planes * 4 : planes;
        // Wide-ResNet widens the inner 3x3 of the bottleneck (and the basic block).
        const std::int64_t inner = planes * m_.width;
        Image y;
        if (bottleneck) {
          y = conv_bn("conv1", x, inner, 1, 1, true);
          y = conv_bn("conv2", y, inner, 3, stride, true);
          y = conv_bn("conv3", y, out_c, 1, 1, false);
        } else {
          y = conv_bn("conv1", x, inner, 3, stride, true);
          y = conv_bn("conv2", y, out_c, 3, 1, false);
        }
        Image shortcut = x;
        if (stride != 1 || x.c != out_c)
          shortcut = conv_bn("downsample", x, out_c, 1, stride, false);
        const auto sum = b_.act("add", {m_.batch, out_c, y.h, y.w});
        b_.op("add", "Add", {y.t, shortcut.t}, {sum});
        x = {relu_of("relu", {sum, out_c, y.h, y.w}), out_c, y.h, y.w};
      }
      planes *= 2;
    }
    b_.set_prefix("head.");
    const auto pooled = b_.act("avgpool", {m_.batch, x.c, 1, 1});
    b_.op("avgpool", "GlobalAvgPool", {x.t}, {pooled});
    const auto flat = b_.act("flatten", {m_.batch, x.c});
    b_.op("flatten", "Flatten", {pooled}, {flat});
    const auto w = b_.param("fc_w", {x.c, m_.classes});
    const auto bias = b_.param("fc_b", {m_.classes});
    const auto mm = b_.act("fc_mm", {m_.batch, m_.classes});
    const auto logits = b_.act("logits", {m_.batch, m_.classes});
    b_.op("fc", "MatMul", {flat, w}, {mm});
    b_.op("fc_bias", "BiasAdd", {mm, bias}, {logits});
    if (m_.training_loss) {
      const auto labels = b_.tensor("labels", {m_.batch}, TensorKind::Input, ir::DType::I32);
      const auto loss = b_.tensor("loss", {}, TensorKind::Input, ir::DType::F32);
      b_.op("loss", "SoftmaxCrossEntropy", {logits, labels}, {loss});
    }
  }

 private:
  const ModelSpec& m_;
  Builder& b_;
};

// ---- Random DAG ----------------------------------------------------------------
// Activations are [batch, width]; each operator picks inputs among the last
// few live tensors (short skips, like real networks) and a kind among
// MatMul, BiasAdd, unary activations, residual Add, LayerNorm, Softmax and
// a Reshape/Transpose pair, so the search sees every layout change.
class RandomGen {
 public:
  RandomGen(const ModelSpec& m, Builder& b)
      : m_(m), b_(b), state_(m.seed * 6364136223846793005ULL + 1442695040888963407ULL) {}

  void run() {
    b_.set_prefix("");
    live_.push_back({b_.tensor("x", {m_.batch, 1024}, TensorKind::Input), 1024});
    std::int64_t i = 0;
    while (emitted_ < m_.ops) {
      const std::string n = "t" + std::to_string(i);
      const std::string on = "op" + std::to_string(i);
      ++i;
      const Live src = live_[live_.size() - 1 - next(std::min<std::uint64_t>(live_.size(), 3))];
      const std::uint64_t pick = next(10);
      if (pick <= 2) {
        matmul(src, n, on);
      } else if (pick == 3) {
        with_param(src, n, on, "b", "BiasAdd");
      } else if (pick <= 5) {
        elementwise(src, n, on, kUnary[next(kUnary.size())]);
      } else if (pick == 6) {
        residual(src, n, on);
      } else if (pick == 7) {
        with_param(src, n, on, "s", "LayerNorm");
      } else if (pick == 8) {
        elementwise(src, n, on, "Softmax");
      } else if (m_.ops - emitted_ >= 3) {
        heads(src, n, on);
      }
    }
  }

 private:
  static constexpr std::array<std::int64_t, 5> kWidths = {256, 512, 1024, 2048, 4096};
  static constexpr std::array<const char*, 4> kUnary = {"GeLU", "ReLU", "Tanh", "SiLU"};
  static constexpr std::size_t kWindow = 8;
  struct Live {
    std::string name;
    std::int64_t width;
  };

  std::uint64_t next(std::uint64_t n) {
    state_ = state_ * 6364136223846793005ULL + 1442695040888963407ULL;
    return (state_ >> 33) % n;
  }

  void push(std::string name, std::int64_t w) {
    if (live_.size() == kWindow) live_.erase(live_.begin());
    live_.push_back({std::move(name), w});
  }

  // MatMul to a new width.
  void matmul(const Live& src, const std::string& n, const std::string& on) {
    const std::int64_t w2 = kWidths[next(kWidths.size())];
    const auto w = b_.param("w" + n, {src.width, w2});
    const auto y = b_.act(n, {m_.batch, w2});
    b_.op(on, "MatMul", {src.name, w}, {y});
    push(y, w2);
    ++emitted_;
  }

  // An operator of `type` with a [width] parameter named prefix + n.
  void with_param(const Live& src, const std::string& n, const std::string& on, const char* prefix,
                  const char* type) {
    const auto p = b_.param(prefix + n, {src.width});
    const auto y = b_.act(n, {m_.batch, src.width});
    b_.op(on, type, {src.name, p}, {y});
    push(y, src.width);
    ++emitted_;
  }

  void elementwise(const Live& src, const std::string& n, const std::string& on, const char* type) {
    const auto y = b_.act(n, {m_.batch, src.width});
    b_.op(on, type, {src.name}, {y});
    push(y, src.width);
    ++emitted_;
  }

  // Residual with the most recent other tensor of the same width.
  void residual(const Live& src, const std::string& n, const std::string& on) {
    std::string other = src.name;
    for (auto it = live_.rbegin(); it != live_.rend(); ++it) {
      if (it->width == src.width && it->name != src.name) {
        other = it->name;
        break;
      }
    }
    const auto y = b_.act(n, {m_.batch, src.width});
    b_.op(on, "Add", {src.name, other}, {y});
    push(y, src.width);
    ++emitted_;
  }

  // Split into heads, transpose, merge back.
  void heads(const Live& src, const std::string& n, const std::string& on) {
    const std::int64_t heads = 16;
    const std::int64_t d = src.width / heads;
    const auto r = b_.act(n + "_r", {m_.batch, heads, d});
    const auto t = b_.act(n + "_t", {heads, m_.batch, d});
    const auto back = b_.act(n + "_tb", {m_.batch, heads, d});
    b_.op(on + "_split", "Reshape", {src.name}, {r});
    b_.op(on + "_transpose", "Transpose", {r}, {t}, {{"perm", V{1, 0, 2}}});
    b_.op(on + "_back", "Transpose", {t}, {back}, {{"perm", V{1, 0, 2}}});
    emitted_ += 3;
    if (m_.ops - emitted_ >= 1) {
      const auto y = b_.act(n, {m_.batch, src.width});
      b_.op(on + "_merge", "Reshape", {back}, {y});
      push(y, src.width);
      ++emitted_;
    }
  }

  const ModelSpec& m_;
  Builder& b_;
  std::uint64_t state_;
  std::vector<Live> live_;  // a ring of recent tensors: O(1) memory per operator
  std::int64_t emitted_ = 0;
};

}  // namespace

void generate(const ModelSpec& spec, GraphSink& sink) {
  const ModelSpec m = resolved(spec);
  Builder b(sink, m.dtype);
  switch (m.family) {
    case Family::Mlp: gen_mlp(m, b); break;
    case Family::Gpt: gen_gpt(m, b, /*moe=*/false); break;
    case Family::Moe: gen_gpt(m, b, /*moe=*/true); break;
    case Family::Bert: gen_bert(m, b); break;
    case Family::ResNet: ResNetGen(m, b).run(); break;
    case Family::Random: RandomGen(m, b).run(); break;
  }
}

}  // namespace recsearch::gen
