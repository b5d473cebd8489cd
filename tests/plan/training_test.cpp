// SPDX-License-Identifier: Apache-2.0
// The training settings in the evaluator: saved activations against
// Korthikanti et al.'s measured formulas, recomputation, ZeRO stages,
// microbatches and overlap, each recomputed by hand from the cost model's
// formulas.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "fixtures.hpp"
#include "recsearch/algebra/op_space.hpp"
#include "recsearch/gen/generate.hpp"
#include "recsearch/io/json_io.hpp"
#include "recsearch/plan/evaluator.hpp"
#include "recsearch/plan/training.hpp"

using namespace recsearch;
using namespace plan_test;
using cost::Collective;
using cost::Phase;
using plan::CommReason;

namespace {

double secs(double bytes, int steps) { return bytes / kBw + steps * kLat; }

// A GPT of `layers` layers, small enough to evaluate in milliseconds.
struct Gpt {
  std::int64_t b = 2, s = 256, h = 512, a = 8;
  ir::Graph g;
  std::vector<algebra::OpSpace> spaces;

  Gpt(std::int64_t layers, bool fused, std::int64_t vocab = 1024, bool loss = true)
      : Gpt(layers, fused ? gen::AttentionLayout::Flash : gen::AttentionLayout::Explicit, vocab,
            loss) {}
  Gpt(std::int64_t layers, gen::AttentionLayout layout, std::int64_t vocab = 1024,
      bool loss = true) {
    gen::ModelSpec m = gen::preset("gpt-350m");
    m.layers = layers;
    m.hidden = h;
    m.heads = a;
    m.seq = s;
    m.batch = b;
    m.vocab = vocab;
    m.training_loss = loss;
    m.attention = layout;
    g = gen::build_graph(m);
    spaces = algebra::build_op_spaces(g);
  }

  // Megatron-LM's tensor parallelism with sequence parallelism over t
  // devices: column-parallel projections and MLP input, attention on
  // heads, row-parallel output projections, and everything between them
  // (norms, dropouts, residuals) on the sequence; the rest replicated.
  [[nodiscard]] plan::Plan tensor_sequence_parallel(std::int64_t t) const {
    plan::Plan p;
    p.mode = Mode::Train;
    p.mesh = {axis("c0", t)};
    const std::vector<std::string> column = {"q_proj", "k_proj",     "v_proj", "q_bias",
                                             "k_bias", "v_bias",     "fc1",    "fc1_bias",
                                             "gelu",   "merge_heads"};
    const std::vector<std::string> row = {"o_proj", "fc2"};
    const std::vector<std::string> sequence = {"ln1", "o_bias",   "res1_dropout", "res1",
                                               "ln2", "fc2_bias", "res2_dropout", "res2"};
    const auto is = [](const std::string& n, const std::vector<std::string>& names) {
      return std::find(names.begin(), names.end(), n) != names.end();
    };
    for (ir::OpId o = 0; o < g.num_operators(); ++o) {
      const std::string& name = g.op(o).name;
      const algebra::OpSpace& space = spaces[o];
      const auto dot = name.find('.');
      int loop = plan::kReplicated;
      if (name[0] == 'h' && dot != std::string::npos) {
        const std::string op = name.substr(dot + 1);
        const ir::Shape& out = g.tensor(g.op(o).outputs[0]).shape;
        if (is(op, column)) {
          loop = space.outputs[0].back();
        } else if (is(op, row)) {
          for (std::size_t l = 0; l < space.loops.size() && loop == plan::kReplicated; ++l)
            if (space.loops[l].role == algebra::DimRole::Reduction) loop = static_cast<int>(l);
        } else if (is(op, sequence)) {
          loop = space.outputs[0][1];
        } else {  // attention: the heads
          for (std::size_t d = 0; d < out.size() && loop == plan::kReplicated; ++d)
            if (out[d] == a) loop = space.outputs[0][d];
        }
        REQUIRE(loop != plan::kReplicated);
      }
      p.cuts.push_back({static_cast<std::int16_t>(loop)});
    }
    plan::check_plan(g, spaces, p);
    return p;
  }

  // Saved activations of the whole graph under a replicated plan.
  [[nodiscard]] plan::Summary replicated(plan::Recompute rc) const {
    plan::Plan p;
    p.mode = Mode::Train;
    p.training.recompute = rc;
    p.cuts.assign(g.num_operators(), {});
    return plan::evaluate(g, spaces, test_cluster(), p, {}).summary;
  }

  // The same with one recomputation per operator.
  [[nodiscard]] plan::Summary replicated(const std::vector<plan::Recompute>& per_op) const {
    plan::Plan p;
    p.mode = Mode::Train;
    p.training.per_op = per_op;
    p.cuts.assign(g.num_operators(), {});
    return plan::evaluate(g, spaces, test_cluster(), p, {}).summary;
  }

  // The forward time of each operator in the replicated plan: an inference
  // evaluation, which knows nothing of the training rules.
  [[nodiscard]] std::vector<double> forward_s() const {
    plan::Plan p;
    p.mode = Mode::Infer;
    p.cuts.assign(g.num_operators(), {});
    const auto ev = plan::evaluate(g, spaces, test_cluster(), p, {});
    std::vector<double> out;
    for (const plan::OpCost& c : ev.op_costs) out.push_back(c.compute_s);
    return out;
  }

  // `inside` for the operators of the last `k` layers (named "h<i>."),
  // `outside` for the rest.
  [[nodiscard]] std::vector<plan::Recompute> last_layers(std::int64_t layers, std::int64_t k,
                                                         plan::Recompute inside,
                                                         plan::Recompute outside) const {
    std::vector<plan::Recompute> rc(g.num_operators(), outside);
    for (ir::OpId o = 0; o < g.num_operators(); ++o) {
      const std::string& name = g.op(o).name;
      const auto dot = name.find('.');
      if (name[0] != 'h' || dot == std::string::npos) continue;
      if (std::stoll(name.substr(1, dot - 1)) >= layers - k) rc[o] = inside;
    }
    return rc;
  }
};

// The operators after the last layer: final norm, LM head, loss.
bool is_head(const std::string& name) {
  return name == "ln_f" || name == "lm_head" || name == "loss";
}

// Activation bytes of one layer: the difference between two depths.
double per_layer(gen::AttentionLayout layout, plan::Recompute rc) {
  return Gpt(3, layout).replicated(rc).activation_bytes -
         Gpt(2, layout).replicated(rc).activation_bytes;
}
double per_layer(bool fused, plan::Recompute rc) {
  return per_layer(fused ? gen::AttentionLayout::Flash : gen::AttentionLayout::Explicit, rc);
}

}  // namespace

TEST_CASE("saved activations of a GPT layer match Korthikanti et al. (2022)") {
  const Gpt g(1, false);
  const double sbh = static_cast<double>(g.s * g.b * g.h);
  const double five_as_h = 5.0 * static_cast<double>(g.a * g.s) / static_cast<double>(g.h);
  SUBCASE("explicit attention keeps s·b·h·(34 + 5·a·s/h) bytes") {
    const double want = sbh * (34 + five_as_h);
    const double got = per_layer(false, plan::Recompute::None);
    MESSAGE("explicit: " << got / sbh << " s·b·h against " << want / sbh);
    CHECK(std::abs(got / want - 1) <= 0.10);
  }
  SUBCASE("selective recomputation drops the attention core: 34·s·b·h") {
    const double got = per_layer(false, plan::Recompute::Selective);
    MESSAGE("selective: " << got / sbh << " s·b·h");
    CHECK(std::abs(got / (34 * sbh) - 1) <= 0.10);
  }
  SUBCASE("fused attention keeps statistics, not scores: 34·s·b·h") {
    const double got = per_layer(true, plan::Recompute::None);
    MESSAGE("fused: " << got / sbh << " s·b·h");
    CHECK(std::abs(got / (34 * sbh) - 1) <= 0.10);
    // Selective recomputation has no core to drop in a fused graph.
    CHECK(per_layer(true, plan::Recompute::Selective) == doctest::Approx(got));
  }
  SUBCASE("Megatron's fused scale-mask-softmax keeps s·b·h·(34 + 5·a·s/h) too") {
    // Korthikanti et al. measured this layout: the softmax output, the
    // dropout mask and the dropout output over the s^2 scores.
    const double want = sbh * (34 + five_as_h);
    const double got = per_layer(gen::AttentionLayout::Megatron, plan::Recompute::None);
    MESSAGE("megatron: " << got / sbh << " s·b·h against " << want / sbh);
    CHECK(std::abs(got / want - 1) <= 0.10);
    const double selective = per_layer(gen::AttentionLayout::Megatron, plan::Recompute::Selective);
    CHECK(std::abs(selective / (34 * sbh) - 1) <= 0.10);
  }
  SUBCASE("tensor and sequence parallelism divide both by t") {
    for (const std::int64_t t : {2, 8}) {
      CAPTURE(t);
      const auto layer = [&](auto fused) {
        const Gpt g3(3, fused), g2(2, fused);
        const auto eval = [&](const Gpt& x) {
          return plan::evaluate(x.g, x.spaces, test_cluster(), x.tensor_sequence_parallel(t), {})
              .summary.activation_bytes;
        };
        return eval(g3) - eval(g2);
      };
      const double tt = static_cast<double>(t);
      CHECK(std::abs(layer(false) / (sbh * (34 + five_as_h) / tt) - 1) <= 0.10);
      CHECK(std::abs(layer(true) / (34 * sbh / tt) - 1) <= 0.10);
      CHECK(std::abs(layer(gen::AttentionLayout::Megatron) / (sbh * (34 + five_as_h) / tt) - 1) <=
            0.10);
    }
  }
  SUBCASE("full recomputation keeps the layer input and one layer at a time") {
    // Checkpoints at the layer input (2·s·b·h) and, where the attention
    // segment alone keeps more than 8x that, after the attention block.
    const double layer = per_layer(true, plan::Recompute::Full);
    CHECK(layer == doctest::Approx(2 * sbh));
    const auto full = Gpt(4, true).replicated(plan::Recompute::Full);
    const auto none = Gpt(4, true).replicated(plan::Recompute::None);
    CHECK(full.activation_bytes < none.activation_bytes / 2);
    // Every operator's forward up to the last checkpoint runs again: with
    // backward 2x forward, the recomputation is a quarter of the compute
    // of everything but the LM head and the loss.
    const Gpt four(4, true);
    const std::vector<double> fwd = four.forward_s();
    double head = 0;
    for (ir::OpId o = 0; o < four.g.num_operators(); ++o)
      if (is_head(four.g.op(o).name)) head += fwd[o];
    CHECK(full.recompute_s == doctest::Approx((none.compute_s - 3 * head) / 3));
    CHECK(full.compute_s - full.recompute_s == doctest::Approx(none.compute_s));
  }
}

TEST_CASE("Megatron's attention layout steps between flash and explicit") {
  // The fused scale-mask-softmax saves the scale and mask passes over the
  // s^2 scores that the explicit layout makes; flash makes none at all.
  const auto step = [](gen::AttentionLayout a) {
    return Gpt(2, a).replicated(plan::Recompute::None).step_time_s;
  };
  const double ex = step(gen::AttentionLayout::Explicit);
  const double mg = step(gen::AttentionLayout::Megatron);
  const double fl = step(gen::AttentionLayout::Flash);
  MESSAGE("step: explicit " << ex << " s, megatron " << mg << " s, flash " << fl << " s");
  CHECK(fl < mg);
  CHECK(mg < ex);
}

TEST_CASE("full recomputation runs the segment after the last checkpoint once") {
  // As Megatron-LM and torch's checkpoint_sequential: the final norm, LM
  // head and loss follow the last layer's checkpoint, and the backward pass
  // starts there right after the forward, so they are not recomputed and
  // keep what their backward needs.
  for (const bool fused : {true, false}) {
    CAPTURE(fused);
    const Gpt g(2, fused);
    const auto full = g.replicated(plan::Recompute::Full);
    const std::vector<double> fwd = g.forward_s();
    double layers = 0, head = 0;
    for (ir::OpId o = 0; o < g.g.num_operators(); ++o)
      (is_head(g.g.op(o).name) ? head : layers) += fwd[o];
    REQUIRE(head > 1e-3 * layers);  // recomputing the head would show
    CHECK(full.recompute_s == doctest::Approx(layers).epsilon(1e-9));
    // Memory: the head's saved tensors are kept with the checkpoints. A
    // larger vocabulary adds exactly its logits, which the loss keeps
    // (b·s·ΔV elements); the layers' largest segment, which is larger than
    // the head's, no longer hides them.
    const Gpt wide(2, fused, 2048);
    const auto full_wide = wide.replicated(plan::Recompute::Full);
    const double logits_elem =
        static_cast<double>(ir::dtype_size(g.g.tensor(*g.g.find_tensor("logits")).dtype));
    CHECK(full_wide.activation_bytes - full.activation_bytes ==
          doctest::Approx(static_cast<double>(g.b * g.s * 1024) * logits_elem));
    // By hand: against the same graph without its loss, the head keeps the
    // final norm's 8 bytes of statistics per row, its output (the LM head's
    // input), the logits and the int32 labels (the final norm's input is
    // the last layer's checkpoint in both).
    const Gpt no_loss(2, fused, 1024, false);
    const auto full_no_loss = no_loss.replicated(plan::Recompute::Full);
    const double sbh = static_cast<double>(g.s * g.b * g.h);
    const double sb = static_cast<double>(g.s * g.b);
    const double head_bytes = 8 * sb + sbh * logits_elem + sb * 1024 * logits_elem + 4 * sb;
    CHECK(full.activation_bytes - full_no_loss.activation_bytes == doctest::Approx(head_bytes));
    // A graph without its loss (a pipeline stage that sends its last
    // activations on) waits for their gradient: every segment is
    // recomputed, the last one too.
    double all = 0;
    for (const double x : no_loss.forward_s()) all += x;
    CHECK(full_no_loss.recompute_s == doctest::Approx(all).epsilon(1e-9));
    // The per-operator rule with the head not recomputed agrees.
    std::vector<plan::Recompute> rc(g.g.num_operators(), plan::Recompute::Full);
    for (ir::OpId o = 0; o < g.g.num_operators(); ++o)
      if (is_head(g.g.op(o).name)) rc[o] = plan::Recompute::None;
    const auto kept_head = g.replicated(rc);
    CHECK(full.activation_bytes == doctest::Approx(kept_head.activation_bytes));
    CHECK(full.recompute_s == doctest::Approx(kept_head.recompute_s));
  }
}

TEST_CASE("recomputation per operator: uniform values are the plan-wide rule, blocks mix") {
  const Gpt g(4, true);
  const auto n = g.g.num_operators();
  for (const auto rc : {plan::Recompute::None, plan::Recompute::Selective, plan::Recompute::Full}) {
    CAPTURE(plan::recompute_name(rc));
    const auto wide = g.replicated(rc);
    const auto each = g.replicated(std::vector<plan::Recompute>(n, rc));
    CHECK(each.activation_bytes == wide.activation_bytes);
    CHECK(each.recompute_s == wide.recompute_s);
    CHECK(each.step_time_s == wide.step_time_s);
  }
  const auto none = g.replicated(plan::Recompute::None);
  const auto full = g.replicated(plan::Recompute::Full);
  const auto last = g.replicated(g.last_layers(4, 1, plan::Recompute::Full, plan::Recompute::None));
  const auto first3 =
      g.replicated(g.last_layers(4, 3, plan::Recompute::Full, plan::Recompute::None));
  // Recomputed layers add their forward again and, past the first, save
  // memory: one segment's saved bytes are live while its backward runs, so
  // one layer alone recomputed among kept ones saves nothing at the peak.
  CHECK(full.activation_bytes < first3.activation_bytes);
  CHECK(first3.activation_bytes < last.activation_bytes);
  CHECK(last.activation_bytes == doctest::Approx(none.activation_bytes));
  CHECK(0 < last.recompute_s);
  CHECK(last.recompute_s < first3.recompute_s);
  CHECK(first3.recompute_s < full.recompute_s);
  // Three layers recomputed: two layers' 34·s·b·h saved, less what each
  // keeps (its input, the checkpoint it restarts from).
  const double sbh = static_cast<double>(g.s * g.b * g.h);
  CHECK(none.activation_bytes - first3.activation_bytes > 40 * sbh);
  // A graph that pins the operators prices the same as the plan's values.
  Gpt pinned(4, true);
  const auto rc = g.last_layers(4, 3, plan::Recompute::Full, plan::Recompute::None);
  for (ir::OpId o = 0; o < n; ++o)
    if (rc[o] == plan::Recompute::Full) pinned.g.mutable_op(o).recompute = plan::Recompute::Full;
  const auto by_pin = pinned.replicated(plan::Recompute::None);
  CHECK(by_pin.activation_bytes == first3.activation_bytes);
  CHECK(by_pin.recompute_s == first3.recompute_s);
  CHECK(plan::mixed_recompute(pinned.g, plan::Training{}));
  CHECK(plan::operator_recompute(pinned.g, plan::Training{}) == rc);
}

TEST_CASE("ZeRO stages shard parameter state and change the gradient collectives") {
  // Batch 6 cut 3 ways: w1, w2 (2048 bytes each, f32: 1 + 1 + 2 per byte)
  // are replicated, so their state is sharded over the 3 devices as far as
  // the stage goes.
  Mlp m(6);
  const double w = 2048, k = 3;
  const double rs = (k - 1) / k * w;  // reduce-scatter / all-gather bytes
  for (int stage = 0; stage <= 3; ++stage) {
    CAPTURE(stage);
    auto p = make_plan({axis("c0", 3)}, {{0}, {0}});
    p.training.zero_stage = stage;
    const auto ev = plan::evaluate(m.g, m.spaces, test_cluster(), p, {});
    const double weights = stage >= 3 ? w / k : w;
    const double grads = stage >= 2 ? w / k : w;
    const double opt = stage >= 1 ? 2 * w / k : 2 * w;
    CHECK(ev.summary.parameter_bytes == doctest::Approx(2 * (weights + grads + opt)));
    CHECK(ev.summary.gradient_bytes == doctest::Approx(2 * grads));
    CHECK(ev.summary.optimizer_bytes == doctest::Approx(2 * opt));
    // Bucketed parameter collectives: bandwidth only.
    const std::size_t per_param = stage == 0 ? 1 : stage <= 2 ? 2 : 3;
    REQUIRE(ev.events.size() == 2 * per_param);
    double comm = 0;
    for (const auto& e : ev.events) {
      CHECK(e.reason == CommReason::Gradient);
      comm += e.seconds;
    }
    if (stage == 0) {
      CHECK(ev.events[0].collective == Collective::AllReduce);
      CHECK(comm == doctest::Approx(2 * secs(2 * rs, 0)));
    } else if (stage <= 2) {
      CHECK(ev.events[0].collective == Collective::ReduceScatter);
      CHECK(ev.events[0].phase == Phase::Backward);
      CHECK(ev.events[1].collective == Collective::AllGather);
      // A reduce-scatter and an all-gather move what one all-reduce does.
      CHECK(comm == doctest::Approx(2 * secs(2 * rs, 0)));
    } else {
      CHECK(ev.events[0].collective == Collective::AllGather);
      CHECK(ev.events[0].phase == Phase::Forward);
      CHECK(ev.events[1].collective == Collective::AllGather);
      CHECK(ev.events[1].phase == Phase::Backward);
      CHECK(ev.events[2].collective == Collective::ReduceScatter);
      CHECK(comm == doctest::Approx(2 * secs(3 * rs, 0)));
    }
  }
}

TEST_CASE("ZeRO axes: where the holder is cut and the parameter whole, on axes of 2+ devices") {
  // mm1 cuts i on c0 (w1 whole there), j on c1 (w1 split) and i on the
  // one-device c2; mm2 cuts only i, on c1 (w2 whole there).
  Mlp m(6);
  const std::int16_t r = plan::kReplicated;
  auto p = make_plan({axis("c0", 3), axis("c1", 2), axis("c2", 1)}, {{0, 2, 0}, {r, 0, r}});
  const plan::ZeroAxes z = plan::zero_axes(m.g, m.spaces, p);
  const auto list = [&](ir::TensorId t) {
    return std::vector<std::uint32_t>(z.of(t).begin(), z.of(t).end());
  };
  CHECK(list(m.w1) == std::vector<std::uint32_t>{0});
  CHECK(list(m.w2) == std::vector<std::uint32_t>{1});
  CHECK(list(m.x).empty());
  CHECK(list(m.h).empty());
  CHECK(list(m.y).empty());
  // The evaluator shards each parameter's state over exactly those axes:
  // at stage 1 the optimizer state (2 bytes per byte, f32) of w1's slice
  // (2048 / 2 bytes) over 3 devices, of w2 (2048 bytes) over 2.
  p.training.zero_stage = 1;
  const auto ev = plan::evaluate(m.g, m.spaces, test_cluster(), p, {});
  CHECK(ev.summary.optimizer_bytes == doctest::Approx(2 * 1024.0 / 3 + 2 * 2048.0 / 2));
}

TEST_CASE("ZeRO per parameter: each parameter priced by its own stage") {
  // The Mlp of the plan-wide test, batch cut 3 ways: w1 and w2 (2048 bytes
  // each, f32 state 1 + 1 + 2 per byte) are replicated, so each one's state
  // shards over the 3 devices as far as its own stage goes.
  Mlp m(6);
  const double w = 2048, k = 3;
  const double rs = (k - 1) / k * w;
  // One parameter at `stage`, recomputed from the formulas: its state bytes
  // per device, its collectives and their bandwidth-only seconds (bucketed).
  struct Expect {
    double state, gradient, optimizer, comm;
    std::size_t events;
  };
  const auto expect = [&](int stage) {
    const double weights = stage >= 3 ? w / k : w;
    const double grads = stage >= 2 ? w / k : w;
    const double opt = stage >= 1 ? 2 * w / k : 2 * w;
    const std::size_t n = stage == 0 ? 1 : stage <= 2 ? 2 : 3;
    const double comm = stage <= 2 ? secs(2 * rs, 0) : secs(3 * rs, 0);
    return Expect{weights + grads + opt, grads, opt, comm, n};
  };
  const auto base = make_plan({axis("c0", 3)}, {{0}, {0}});
  for (int s1 = 0; s1 <= 3; ++s1) {
    for (int s2 = 0; s2 <= 3; ++s2) {
      CAPTURE(s1);
      CAPTURE(s2);
      auto p = base;
      p.training.zero_stage = 1;  // the plan-wide value every parameter overrides
      p.training.zero_per_param.assign(m.g.num_tensors(), 0);
      p.training.zero_per_param[m.w1] = static_cast<std::int8_t>(s1);
      p.training.zero_per_param[m.w2] = static_cast<std::int8_t>(s2);
      CHECK(plan::parameter_zero(m.g, p.training)[m.w1] == s1);
      CHECK(plan::mixed_zero(m.g, p.training) == (s1 != 1 || s2 != 1));
      const auto ev = plan::evaluate(m.g, m.spaces, test_cluster(), p, {});
      const Expect a = expect(s1), b = expect(s2);
      CHECK(ev.summary.parameter_bytes == doctest::Approx(a.state + b.state));
      CHECK(ev.summary.gradient_bytes == doctest::Approx(a.gradient + b.gradient));
      CHECK(ev.summary.optimizer_bytes == doctest::Approx(a.optimizer + b.optimizer));
      REQUIRE(ev.events.size() == a.events + b.events);
      double comm = 0;
      for (const auto& e : ev.events) comm += e.seconds;
      CHECK(comm == doctest::Approx(a.comm + b.comm));
      // Each parameter's own collectives: their count and seconds, and the
      // backward gather of the weights only at its stage 3.
      for (const auto& [t, stage] : {std::pair{m.w1, s1}, std::pair{m.w2, s2}}) {
        CAPTURE(t);
        std::size_t n = 0, backward_gathers = 0;
        double seconds = 0;
        for (const auto& e : ev.events) {
          if (e.tensor != t) continue;
          ++n;
          seconds += e.seconds;
          if (e.phase == Phase::Backward && e.collective == Collective::AllGather)
            ++backward_gathers;
        }
        CHECK(n == expect(stage).events);
        CHECK(seconds == doctest::Approx(expect(stage).comm));
        CHECK(backward_gathers == (stage == 3 ? 1u : 0u));
      }
    }
  }

  SUBCASE("one stage for every parameter is the plan-wide stage") {
    for (int stage = 0; stage <= 3; ++stage) {
      CAPTURE(stage);
      auto wide = base;
      wide.training.zero_stage = stage;
      auto each = base;
      each.training.zero_per_param.assign(m.g.num_tensors(), static_cast<std::int8_t>(stage));
      CHECK_FALSE(plan::mixed_zero(m.g, wide.training));
      const auto a = plan::evaluate(m.g, m.spaces, test_cluster(), wide, {});
      const auto b = plan::evaluate(m.g, m.spaces, test_cluster(), each, {});
      CHECK(b.summary.parameter_bytes == a.summary.parameter_bytes);
      CHECK(b.summary.gradient_bytes == a.summary.gradient_bytes);
      CHECK(b.summary.optimizer_bytes == a.summary.optimizer_bytes);
      CHECK(b.summary.communication_s == a.summary.communication_s);
      CHECK(b.summary.step_time_s == a.summary.step_time_s);
      REQUIRE(b.events.size() == a.events.size());
      for (std::size_t e = 0; e < a.events.size(); ++e) {
        CHECK(b.events[e].collective == a.events[e].collective);
        CHECK(b.events[e].seconds == a.events[e].seconds);
      }
    }
  }

  SUBCASE("the plan file writes the exceptions and reads them back") {
    auto p = base;
    p.training.zero_stage = 2;
    p.training.zero_per_param.assign(m.g.num_tensors(), 2);
    p.training.zero_per_param[m.w2] = 3;
    const auto ev = plan::evaluate(m.g, m.spaces, test_cluster(), p, {});
    const std::string text = io::plan_to_json(m.g, m.spaces, test_cluster(), p, ev);
    CHECK(text.find("\"zero_params\"") != std::string::npos);
    CHECK(text.find("\"w2\": 3") != std::string::npos);
    const plan::Plan back = io::parse_plan(text, "back.json", m.g, m.spaces, p.mesh);
    CHECK(back.training == p.training);
    const auto again = plan::evaluate(m.g, m.spaces, test_cluster(), back, {});
    CHECK(again.summary.parameter_bytes == ev.summary.parameter_bytes);
    CHECK(again.summary.step_time_s == ev.summary.step_time_s);
    // Stages equal to the plan-wide one are not exceptions.
    auto uniform = base;
    uniform.training.zero_per_param.assign(m.g.num_tensors(), 0);
    CHECK(io::plan_to_json(m.g, m.spaces, test_cluster(), uniform,
                           plan::evaluate(m.g, m.spaces, test_cluster(), uniform, {}))
              .find("zero_params") == std::string::npos);
    // Bad entries are errors at their JSON path.
    const auto parse = [&](const std::string& training) {
      const std::string bad = R"({"format": "recsearch.plan", "version": 1, "training": )" +
                              training + R"(, "operators": []})";
      (void)io::parse_plan(bad, "bad.json", m.g, m.spaces, p.mesh);
    };
    check_error([&] { parse(R"({"zero_params": {"w1": 4}})"); }, Errc::kSchema,
                "/training/zero_params/w1");
    check_error([&] { parse(R"({"zero_params": {"w1": "three"}})"); }, Errc::kSchema,
                "/training/zero_params/w1");
    check_error([&] { parse(R"({"zero_params": {"nope": 3}})"); }, Errc::kUnknownName,
                "/training/zero_params/nope");
    check_error([&] { parse(R"({"zero_params": {"h": 3}})"); }, Errc::kSchema,
                "/training/zero_params/h", "not a parameter");
    check_error([&] { parse(R"({"zero_params": [3]})"); }, Errc::kSchema, "/training/zero_params");
  }

  SUBCASE("the evaluator refuses a stage out of range at the parameter's path") {
    auto p = base;
    p.training.zero_per_param.assign(m.g.num_tensors(), 0);
    p.training.zero_per_param[m.w1] = 4;
    check_error([&] { (void)plan::evaluate(m.g, m.spaces, test_cluster(), p, {}); }, Errc::kPlan,
                "/training/zero_params/w1");
    p.training.zero_per_param.assign(1, 0);
    check_error([&] { (void)plan::evaluate(m.g, m.spaces, test_cluster(), p, {}); }, Errc::kPlan,
                "/training/zero_params");
  }
}

TEST_CASE("microbatches: one microbatch's activations, collectives repeated, gradients once") {
  Mlp m(8);
  m.spaces = algebra::build_op_spaces(m.g);  // the microbatch graph's spaces are the algebra's
  const auto i = static_cast<std::int16_t>(m.spaces[0].find_loop("i"));
  REQUIRE(i >= 0);
  REQUIRE(m.spaces[1].find_loop("i") == i);
  const auto cl = test_cluster();
  // Data parallel on 2 devices; the batch of 8 as 1 or 4 microbatches.
  auto p1 = make_plan({axis("c0", 2)}, {{i}, {i}});
  auto p4 = p1;
  p4.training.microbatches = 4;
  CostParams serial;
  serial.overlap = false;
  const auto one = plan::evaluate(m.g, m.spaces, cl, p1, serial);
  const auto four = plan::evaluate(m.g, m.spaces, cl, p4, serial);
  // x and h, halved by the cut and quartered by the microbatches.
  CHECK(one.summary.activation_bytes == doctest::Approx((8 * 16 + 8 * 32) * 4 / 2.0));
  CHECK(four.summary.activation_bytes == doctest::Approx(one.summary.activation_bytes / 4));
  CHECK(four.summary.parameter_bytes == doctest::Approx(one.summary.parameter_bytes));
  // Parameter gradients are reduced once per step, whole.
  REQUIRE(four.events.size() == 2);
  for (std::size_t e = 0; e < 2; ++e) {
    CHECK(four.events[e].repeats == 1);
    CHECK(four.events[e].seconds == doctest::Approx(one.events[e].seconds));
  }
  // Four microbatches of a quarter of the flops; the weights are read by
  // each (memory-bound here: touched bytes / HBM bandwidth).
  double want = 0;
  for (std::size_t o = 0; o < 2; ++o) {
    const double flops = m.spaces[o].flops / 2 / 4;
    const double in = o == 0 ? 8 * 16 * 4 / 8.0 : 8 * 32 * 4 / 8.0;
    const double out = o == 0 ? 8 * 32 * 4 / 8.0 : 8 * 16 * 4 / 8.0;
    want += 4 * 3 * std::max(flops / 50e12, (in + 2048 + out) / 1000e9);
  }
  CHECK(four.summary.compute_s == doctest::Approx(want));
  CHECK(four.summary.microbatch_s == doctest::Approx(four.summary.compute_s / 4));

  SUBCASE("a count that does not divide the batch is an error with its path") {
    auto bad = p1;
    bad.training.microbatches = 3;
    check_error([&] { (void)plan::evaluate(m.g, m.spaces, cl, bad, {}); }, Errc::kPlan,
                "/training/microbatches");
    bad.training.microbatches = 8;  // microbatches of 1: the cut of 2 no longer divides
    CHECK_THROWS_AS((void)plan::evaluate(m.g, m.spaces, cl, bad, {}), Error);
    bad.training.microbatches = 1;
    bad.training.zero_stage = 4;
    check_error([&] { (void)plan::evaluate(m.g, m.spaces, cl, bad, {}); }, Errc::kPlan,
                "/training/zero_stage");
  }
}

TEST_CASE("microbatches of one sequence keep the full graph's loops, which plans index") {
  // A Reshape's loops group dims by their products: built from the
  // microbatch graph, a batch of 1 would join no group and every later
  // loop would move down by one.
  const Gpt gpt(2, false);
  const auto view = plan::microbatch_view(gpt.g, gpt.spaces, gpt.b);
  REQUIRE(view.has_value());
  const auto rebuilt = algebra::build_op_spaces(view->graph);
  std::size_t moved = 0;
  for (std::size_t o = 0; o < gpt.g.num_operators(); ++o) {
    CAPTURE(gpt.g.op(static_cast<ir::OpId>(o)).name);
    const algebra::OpSpace& full = gpt.spaces[o];
    const algebra::OpSpace& micro = view->spaces[o];
    REQUIRE(micro.loops.size() == full.loops.size());
    CHECK(micro.inputs == full.inputs);
    CHECK(micro.outputs == full.outputs);
    double ratio = 1;
    for (std::size_t l = 0; l < full.loops.size(); ++l) {
      CHECK(micro.loops[l].role == full.loops[l].role);
      ratio *= static_cast<double>(full.loops[l].size) / static_cast<double>(micro.loops[l].size);
    }
    // The batch loop, if any, is b times shorter; nothing else changes.
    CHECK((ratio == 1.0 || ratio == static_cast<double>(gpt.b)));
    if (rebuilt[o].loops.size() != full.loops.size()) ++moved;
  }
  CHECK(moved > 0);  // the case this guards: some Reshape lost its batch loop
}

TEST_CASE("overlap hides parameter collectives behind one microbatch's compute") {
  Mlp m(6);
  const auto cl = test_cluster();
  const auto p = make_plan({axis("c0", 3)}, {{0}, {0}});
  CostParams serial;
  serial.overlap = false;
  const auto off = plan::evaluate(m.g, m.spaces, cl, p, serial).summary;
  const auto on = plan::evaluate(m.g, m.spaces, cl, p, {}).summary;
  CHECK(off.step_time_s == doctest::Approx(off.compute_s + off.communication_s));
  CHECK(on.communication_s == doctest::Approx(off.communication_s));
  CHECK(on.parameter_comm_s == doctest::Approx(on.communication_s));
  // Exposed: what the compute cannot cover.
  const double exposed = std::max(0.0, on.parameter_comm_s - on.compute_s);
  CHECK(on.exposed_communication_s == doctest::Approx(exposed));
  CHECK(on.step_time_s == doctest::Approx(on.compute_s + exposed));
}

TEST_CASE("optimizer presets: bytes of state per parameter element") {
  CostParams p;
  const auto mixed = plan::parameter_state(p, Mode::Train, 2);  // f16: 2 + 2 + 12
  CHECK(mixed.total() * 2 == doctest::Approx(16));
  const auto f32 = plan::parameter_state(p, Mode::Train, 4);  // 4 + 4 + 8
  CHECK(f32.total() * 4 == doctest::Approx(16));
  p.optimizer = Optimizer::Sgd;
  CHECK(plan::parameter_state(p, Mode::Train, 2).total() == doctest::Approx(2));
  p.optimizer = Optimizer::SgdMomentum;
  CHECK(plan::parameter_state(p, Mode::Train, 4).total() == doctest::Approx(3));
  CHECK(plan::parameter_state(p, Mode::Infer, 2).total() == doctest::Approx(1));
  const auto z = mixed.sharded(3, 8);
  CHECK(z == doctest::Approx(mixed.total() / 8));
}
