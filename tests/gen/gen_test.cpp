// SPDX-License-Identifier: Apache-2.0
// The generators: every family yields a graph the algebra accepts, at the
// granularity promised; the streamed JSON reads back as the in-memory graph;
// published presets have their published parameter counts.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <sstream>
#include <string>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/error.hpp"
#include "recsearch/gen/generate.hpp"
#include "recsearch/io/json_io.hpp"

using namespace recsearch;

namespace {

double parameter_count(const ir::Graph& g) {
  double n = 0;
  for (const auto& t : g.tensors()) {
    if (t.kind == ir::TensorKind::Parameter) n += ir::num_elements(t.shape);
  }
  return n;
}

// Same names, shapes, dtypes, kinds, operator types, wiring and attributes.
void require_same(const ir::Graph& a, const ir::Graph& b) {
  REQUIRE(a.name() == b.name());
  REQUIRE(a.num_tensors() == b.num_tensors());
  REQUIRE(a.num_operators() == b.num_operators());
  for (std::size_t i = 0; i < a.num_tensors(); ++i) {
    const auto& x = a.tensor(static_cast<ir::TensorId>(i));
    const auto& y = b.tensor(static_cast<ir::TensorId>(i));
    REQUIRE(x.name == y.name);
    REQUIRE(x.shape == y.shape);
    REQUIRE(x.dtype == y.dtype);
    REQUIRE(x.kind == y.kind);
  }
  for (std::size_t i = 0; i < a.num_operators(); ++i) {
    const auto& x = a.op(static_cast<ir::OpId>(i));
    const auto& y = b.op(static_cast<ir::OpId>(i));
    REQUIRE(x.name == y.name);
    REQUIRE(x.type == y.type);
    REQUIRE(x.inputs == y.inputs);
    REQUIRE(x.outputs == y.outputs);
    REQUIRE(x.attrs.items() == y.attrs.items());
  }
}

gen::ModelSpec small(gen::Family f) {
  gen::ModelSpec s;
  s.family = f;
  s.batch = 4;
  switch (f) {
    case gen::Family::Gpt:
    case gen::Family::Bert:
    case gen::Family::Moe:
      s.layers = 3;
      s.hidden = 64;
      s.heads = 4;
      s.seq = 32;
      s.vocab = 100;
      s.experts = 4;
      break;
    case gen::Family::ResNet:
      s.depth = 18;
      s.image = 64;
      s.channels = 8;
      break;
    case gen::Family::Mlp:
      s.layers = 3;
      s.hidden = 32;
      s.classes = 10;
      break;
    case gen::Family::Random:
      s.ops = 500;
      s.seed = 7;
      break;
  }
  return s;
}

}  // namespace

TEST_CASE("every family builds a graph whose shapes the algebra accepts") {
  for (const auto f : {gen::Family::Mlp, gen::Family::Gpt, gen::Family::Bert, gen::Family::ResNet,
                       gen::Family::Moe, gen::Family::Random}) {
    CAPTURE(gen::family_name(f));
    const auto spec = small(f);
    const ir::Graph g = gen::build_graph(spec);
    CHECK(g.finalized());
    CHECK(g.num_operators() == gen::count_operators(spec));
    const auto spaces = algebra::build_op_spaces(g);     // throws on any shape mismatch
    for (const auto& s : spaces) CHECK_FALSE(s.opaque);  // no operator left to the fallback
  }
}

TEST_CASE("a transformer layer has 20 to 40 forward operators") {
  auto spec = small(gen::Family::Gpt);
  spec.layers = 1;
  const auto one = gen::count_operators(spec);
  spec.layers = 11;
  const auto eleven = gen::count_operators(spec);
  const auto per_layer = (eleven - one) / 10;
  CHECK((eleven - one) % 10 == 0);
  CHECK(per_layer >= 20);
  CHECK(per_layer <= 40);
  CHECK(per_layer == 33);
}

TEST_CASE("the three attention layouts of GPT and BERT") {
  // Megatron-LM's FusedScaleMaskSoftmax replaces the scale Mul and the mask
  // Add (GPT; BERT has no mask); flash replaces the whole core.
  for (const auto f : {gen::Family::Gpt, gen::Family::Bert}) {
    CAPTURE(gen::family_name(f));
    auto spec = small(f);
    spec.layers = 1;
    const auto ops = [&](gen::AttentionLayout a) {
      auto s = spec;
      s.attention = a;
      const ir::Graph g = gen::build_graph(s);
      const auto spaces = algebra::build_op_spaces(g);
      for (const auto& x : spaces) CHECK_FALSE(x.opaque);
      CHECK(g.num_operators() == gen::count_operators(s));
      return g;
    };
    const ir::Graph ex = ops(gen::AttentionLayout::Explicit);
    const ir::Graph mg = ops(gen::AttentionLayout::Megatron);
    const ir::Graph fl = ops(gen::AttentionLayout::Flash);
    const std::size_t fused_away = f == gen::Family::Gpt ? 2 : 1;
    CHECK(mg.num_operators() + fused_away == ex.num_operators());
    CHECK(fl.num_operators() < mg.num_operators());
    // The s^2 scores and probabilities stay; scale and mask are attributes.
    const std::string pre = f == gen::Family::Gpt ? "h0." : "layer0.";
    REQUIRE(mg.find_tensor(pre + "scores").has_value());
    REQUIRE(mg.find_tensor(pre + "probs_drop").has_value());
    CHECK_FALSE(mg.find_tensor(pre + "scaled").has_value());
    const ir::Operator* softmax = nullptr;
    for (const auto& op : mg.operators())
      if (op.name == pre + "softmax") softmax = &op;
    REQUIRE(softmax != nullptr);
    CHECK(softmax->kind == ir::OpKind::Softmax);
    CHECK(softmax->inputs.size() == 1);
    CHECK(softmax->attrs.get_bool("causal", false) == (f == gen::Family::Gpt));
    CHECK(softmax->attrs.get_float("scale", 0) ==
          doctest::Approx(1.0 / std::sqrt(static_cast<double>(spec.hidden / spec.heads))));
  }
  // Names, and fused_attention as the older spelling of flash.
  for (const auto a : {gen::AttentionLayout::Explicit, gen::AttentionLayout::Megatron,
                       gen::AttentionLayout::Flash})
    CHECK(gen::parse_attention(gen::attention_name(a)) == a);
  CHECK_THROWS_AS((void)gen::parse_attention("sparse"), Error);
  auto spec = small(gen::Family::Gpt);
  spec.fused_attention = true;
  CHECK(gen::resolved(spec).attention == gen::AttentionLayout::Flash);
  spec.fused_attention = false;
  spec.attention = gen::AttentionLayout::Flash;
  CHECK(gen::resolved(spec).fused_attention);
  spec.fused_attention = true;
  spec.attention = gen::AttentionLayout::Megatron;
  CHECK_THROWS_AS((void)gen::resolved(spec), Error);
}

TEST_CASE("random graphs have exactly --ops operators and depend only on the seed") {
  for (const std::int64_t n : {1, 2, 3, 4, 5, 17, 1000}) {
    gen::ModelSpec s = small(gen::Family::Random);
    s.ops = n;
    CHECK(gen::build_graph(s).num_operators() == static_cast<std::size_t>(n));
  }
  auto a = small(gen::Family::Random);
  auto b = a;
  require_same(gen::build_graph(a), gen::build_graph(b));
  b.seed = 8;
  b.name = a.name = "same";
  std::ostringstream ja;
  std::ostringstream jb;
  gen::write_graph_json(a, ja);
  gen::write_graph_json(b, jb);
  CHECK(ja.str() != jb.str());
}

TEST_CASE("the streamed JSON reads back as the in-memory graph") {
  for (const auto f : {gen::Family::Mlp, gen::Family::Gpt, gen::Family::Bert, gen::Family::ResNet,
                       gen::Family::Moe, gen::Family::Random}) {
    CAPTURE(gen::family_name(f));
    const auto spec = small(f);
    std::ostringstream out;
    std::uint64_t last = 0;
    gen::write_graph_json(
        spec, out,
        [](std::uint64_t done, std::uint64_t total, void* ctx) {
          REQUIRE(done <= total);
          *static_cast<std::uint64_t*>(ctx) = done;
        },
        &last);
    const ir::Graph parsed = io::parse_graph(out.str(), "gen");
    const ir::Graph built = gen::build_graph(spec);
    require_same(parsed, built);
    CHECK(last == built.num_operators() + built.num_tensors());
  }
}

TEST_CASE("names with quotes are escaped in the stream") {
  auto spec = small(gen::Family::Mlp);
  spec.name = "a \"quoted\" \\ name\n";
  std::ostringstream out;
  gen::write_graph_json(spec, out);
  CHECK(io::parse_graph(out.str(), "gen").name() == spec.name);
}

TEST_CASE("presets have their published parameter counts") {
  struct Want {
    const char* preset;
    double params;
  };
  // GPT-3 / Megatron sizes, BERT-large, torchvision ResNets.
  for (const auto& w :
       {Want{"gpt-350m", 350e6}, Want{"gpt-760m", 760e6}, Want{"gpt-1.3b", 1.3e9},
        Want{"gpt-2.6b", 2.6e9}, Want{"gpt-6.7b", 6.7e9}, Want{"gpt-15b", 15e9},
        Want{"gpt-39b", 39e9}, Want{"gpt-175b", 175e9}, Want{"gpt-1t", 1.0e12},
        Want{"bert-large", 340e6}, Want{"bert-base", 110e6}, Want{"resnet18", 11.7e6},
        Want{"resnet50", 25.6e6}, Want{"resnet152", 60.2e6}, Want{"wide-resnet50-2", 68.9e6}}) {
    CAPTURE(w.preset);
    auto spec = gen::preset(w.preset);
    if (spec.family == gen::Family::Gpt && spec.layers > 2) {
      // Count two layers and extrapolate: the 1T graph is too big for a unit test.
      const auto layers = spec.layers;
      spec.layers = 1;
      const double one = parameter_count(gen::build_graph(spec));
      spec.layers = 2;
      const double two = parameter_count(gen::build_graph(spec));
      const double total = one + (two - one) * static_cast<double>(layers - 1);
      CHECK(std::abs(total / w.params - 1) < 0.06);
    } else {
      CHECK(std::abs(parameter_count(gen::build_graph(spec)) / w.params - 1) < 0.06);
    }
  }
  for (const auto& n : gen::preset_names()) CHECK_NOTHROW((void)gen::resolved(gen::preset(n)));
}

TEST_CASE("bad specs are usage errors naming the option") {
  auto spec = small(gen::Family::Gpt);
  spec.heads = 5;
  try {
    (void)gen::resolved(spec);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::kUsage);
    CHECK(std::string(e.what()).find("--heads") != std::string::npos);
  }
  auto r = small(gen::Family::ResNet);
  r.depth = 20;
  CHECK_THROWS_AS((void)gen::resolved(r), Error);
  auto huge = small(gen::Family::Gpt);
  huge.vocab = std::int64_t{1} << 42;  // logits: 4 * 2^20 * 2^42 = 2^64
  huge.seq = std::int64_t{1} << 20;
  CHECK_THROWS_AS((void)gen::resolved(huge), Error);
  CHECK_THROWS_AS((void)gen::preset("gpt-7"), Error);
  CHECK_THROWS_AS((void)gen::parse_family("lstm"), Error);
}
