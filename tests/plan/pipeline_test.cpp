// SPDX-License-Identifier: Apache-2.0
// Pipeline plans: stage graphs, the group cluster, the shape checks, and
// the schedule's step time and per-group memory recomputed here from
// independent per-stage evaluations (plan::evaluate on each stage graph)
// and hand-priced point-to-point sends.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/plan/evaluator.hpp"
#include "recsearch/plan/pipeline.hpp"
#include "support/errors.hpp"
#include "support/graph_factories.hpp"

using namespace recsearch;
namespace t = recsearch::testing;

namespace {

constexpr std::int64_t kBatch = 64;
constexpr std::int64_t kWidth = 256;

// x -> (MatMul w_i) x `layers` -> y: a chain whose every boundary tensor is
// [kBatch, kWidth].
ir::Graph chain(int layers) {
  ir::Graph g("chain");
  g.add_tensor("h0", {kBatch, kWidth}, ir::DType::F32, ir::TensorKind::Input);
  for (int i = 0; i < layers; ++i) {
    const std::string n = std::to_string(i);
    g.add_tensor("w" + n, {kWidth, kWidth}, ir::DType::F32, ir::TensorKind::Parameter);
    g.add_tensor("h" + std::to_string(i + 1), {kBatch, kWidth}, ir::DType::F32);
    t::add_op(g, "mm" + n, "MatMul", {"h" + n, "w" + n}, {"h" + std::to_string(i + 1)});
  }
  g.finalize();
  return g;
}

// chain(layers) whose last MatMul reads w0 again (tied, as a GPT's LM head
// reads its embedding table), or, untied, a copy of it of the same shape.
ir::Graph tied_chain(int layers, bool tied) {
  ir::Graph g(tied ? "tied" : "untied");
  g.add_tensor("h0", {kBatch, kWidth}, ir::DType::F32, ir::TensorKind::Input);
  if (!tied) g.add_tensor("w0_copy", {kWidth, kWidth}, ir::DType::F32, ir::TensorKind::Parameter);
  for (int i = 0; i < layers; ++i) {
    const std::string n = std::to_string(i);
    const bool last = i + 1 == layers;
    if (!last) g.add_tensor("w" + n, {kWidth, kWidth}, ir::DType::F32, ir::TensorKind::Parameter);
    g.add_tensor("h" + std::to_string(i + 1), {kBatch, kWidth}, ir::DType::F32);
    const std::string w = !last ? "w" + n : tied ? "w0" : "w0_copy";
    t::add_op(g, "mm" + n, "MatMul", {"h" + n, w}, {"h" + std::to_string(i + 1)});
  }
  g.finalize();
  return g;
}

// 4 nodes of 2 devices: the outermost level (12.5 GB/s, 10 us) carries the sends.
Cluster nodes() {
  return Cluster("nodes", {Level{"node", 4, 12.5, 10.0}, Level{"gpu", 2, 300.0, 2.0}},
                 DeviceSpec{100.0, 80.0, 1000.0});
}

// Stage j of `parts` equal stages over `layers` operators, on `group` with
// the batch loop cut on every axis (data parallel inside the group).
plan::PipelinePlan even_pipeline(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                                 const Cluster& cluster, std::size_t p, std::size_t v,
                                 std::int64_t m) {
  const Cluster group = plan::stage_cluster(cluster, p);
  plan::PipelinePlan pp;
  pp.groups = p;
  pp.virtual_stages = v;
  pp.schedule = v > 1 ? plan::Schedule::Interleaved : plan::Schedule::OneFOneB;
  pp.microbatches = m;
  const std::size_t n = p * v, ops = g.num_operators();
  for (std::size_t j = 0; j < n; ++j) {
    plan::Stage s;
    s.first = static_cast<ir::OpId>(j * ops / n);
    s.last = static_cast<ir::OpId>((j + 1) * ops / n);
    s.group = j % p;
    s.plan.mesh = group.cuts();
    s.plan.training.microbatches = m;
    for (ir::OpId o = s.first; o < s.last; ++o)
      s.plan.cuts.push_back(std::vector<std::int16_t>(group.cuts().size(), 0));  // loop i
    (void)spaces;
    pp.stages.push_back(std::move(s));
  }
  return pp;
}

// What a stage contributes, by the rule pipeline.hpp states: one
// microbatch's time and activations, and what it pays once per step.
struct Figures {
  double mb = 0, per_step = 0, act = 0;
};
Figures figures(const plan::Summary& s, std::int64_t m) {
  const double md = static_cast<double>(m);
  if (s.microbatch_s > 0)
    return {s.microbatch_s, std::max(0.0, s.step_time_s - md * s.microbatch_s), s.activation_bytes};
  return {s.step_time_s / md, 0.0, s.activation_bytes / md};
}

}  // namespace

TEST_CASE("a stage graph receives what earlier stages produce and sends what later ones use") {
  const ir::Graph g = chain(6);
  const auto spaces = algebra::build_op_spaces(g);
  const plan::StageGraph sg = plan::stage_graph(g, spaces, 2, 4);
  CHECK(sg.graph.num_operators() == 2);
  REQUIRE(sg.received.size() == 1);
  CHECK(g.tensor(sg.received[0]).name == "h2");
  REQUIRE(sg.sent.size() == 1);
  CHECK(g.tensor(sg.sent[0]).name == "h4");
  CHECK(sg.graph.tensor(*sg.graph.find_tensor("h2")).kind == ir::TensorKind::Input);
  CHECK(sg.graph.tensor(*sg.graph.find_tensor("w2")).kind == ir::TensorKind::Parameter);
  // The same shape of range gives the same graph up to names.
  const plan::StageGraph other = plan::stage_graph(g, spaces, 3, 5);
  CHECK(other.graph.num_tensors() == sg.graph.num_tensors());
}

TEST_CASE("the group cluster splits the levels from the outermost") {
  const Cluster c = nodes();
  const Cluster half = plan::stage_cluster(c, 2);
  CHECK(half.num_devices() == 4);
  CHECK(half.levels()[0].size == 2);
  CHECK(half.levels()[1].size == 2);
  CHECK(plan::stage_cluster(c, 4).num_devices() == 2);
  // Past the nodes, the groups split the devices of a node.
  const Cluster single = plan::stage_cluster(c, 8);
  CHECK(single.num_devices() == 1);
  CHECK(single.levels()[0].size == 1);
  CHECK(single.levels()[1].size == 1);
  t::check_error([&] { (void)plan::stage_cluster(c, 3); }, Errc::kPlan, "/pipeline/device_groups",
                 "node 4 x gpu 2");
  t::check_error([&] { (void)plan::stage_cluster(c, 16); }, Errc::kPlan, "/pipeline/device_groups");
  CHECK(plan::device_group_counts(c) == std::vector<std::size_t>{1, 2, 4, 8});
  CHECK(plan::pipeline_link_level(c, 2) == 0);
  CHECK(plan::pipeline_link_level(c, 8) == 0);
  // 6 nodes of 4: divisors of 6, then 12 and 24 groups inside the nodes;
  // not 4 (a group of one and a half nodes) nor 8.
  const Cluster six("six", {Level{"node", 6, 25.0, 5.0}, Level{"gpu", 4, 300.0, 2.0}},
                    DeviceSpec{100.0, 80.0, 1000.0});
  CHECK(plan::device_group_counts(six) == std::vector<std::size_t>{1, 2, 3, 6, 12, 24});
  t::check_error([&] { (void)plan::stage_cluster(six, 4); }, Errc::kPlan,
                 "/pipeline/device_groups");
  const Cluster twelve = plan::stage_cluster(six, 12);
  CHECK(twelve.levels()[0].size == 1);
  CHECK(twelve.levels()[1].size == 2);
  // One node: its level of size 1 is not what the groups cross.
  const Cluster one("one node", {Level{"node", 1, 12.5, 10.0}, Level{"gpu", 8, 300.0, 2.0}},
                    DeviceSpec{100.0, 80.0, 1000.0});
  CHECK(plan::device_group_counts(one) == std::vector<std::size_t>{1, 2, 4, 8});
  CHECK(plan::pipeline_link_level(one, 4) == 1);
  CHECK(plan::stage_cluster(one, 4).levels()[1].size == 2);
}

namespace {

// The 1F1B step and each group's memory of an even pipeline of p groups and
// m microbatches on c, priced by hand from the stages' own evaluations,
// with the sends over a link of link_Bps bytes/s and link_s latency.
void check_one_f_one_b(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                       const Cluster& c, std::size_t p, std::int64_t m, double link_Bps,
                       double link_s) {
  CAPTURE(m);
  CAPTURE(p);
  CostParams cost;
  const plan::PipelinePlan pp = even_pipeline(g, spaces, c, p, 1, m);
  const plan::PipelineEvaluation pe = plan::evaluate_pipeline(g, spaces, c, pp, cost);
  const Cluster group = plan::stage_cluster(c, p);
  const double devices = static_cast<double>(c.num_devices()) / static_cast<double>(p);
  // One boundary tensor of kBatch x kWidth f32 per cut, split over the
  // group's devices, once forward and once backward per microbatch.
  const double share = kBatch * kWidth * 4.0 / static_cast<double>(m) / devices;
  const double send = share / link_Bps + link_s;
  std::vector<double> t(p);
  double sum = 0, slowest = 0, per_step = 0;
  for (std::size_t j = 0; j < p; ++j) {
    const plan::Stage& s = pp.stages[j];
    const plan::StageGraph sg = plan::stage_graph(g, spaces, s.first, s.last);
    const plan::Summary own = plan::evaluate(sg.graph, sg.spaces, group, s.plan, cost).summary;
    const Figures f = figures(own, m);
    t[j] = f.mb + (j + 1 < p ? send : 0.0) + (j > 0 ? send : 0.0);
    sum += t[j];
    slowest = std::max(slowest, t[j]);
    per_step = std::max(per_step, f.per_step);
    const double kept =
        static_cast<double>(std::min<std::int64_t>(static_cast<std::int64_t>(p - j), m));
    CHECK(pe.groups[j].memory_bytes ==
          doctest::Approx(own.parameter_bytes + kept * f.act).epsilon(1e-12));
    CHECK(pe.groups[j].in_flight == kept);
    CHECK(pe.groups[j].bubble_s ==
          doctest::Approx(pe.pipelined_s - static_cast<double>(m) * t[j]).epsilon(1e-12));
  }
  const double step = sum + static_cast<double>(m - 1) * slowest + per_step;
  CHECK(pe.summary.step_time_s == doctest::Approx(step).epsilon(1e-12));
  // Stages of equal operators, the sends alike on the two ends: the first
  // stage's product reads the data and computes no input gradient
  // (ir::backward_shares), the second's reads a received activation that
  // takes one, so the second is slower in training and sets the pace: the
  // bubble is the first's one microbatch.
  if (p == 2) {
    CHECK(t[1] > t[0]);
    CHECK(pe.pipelined_s == doctest::Approx(t[0] + static_cast<double>(m) * t[1]).epsilon(1e-12));
  }
}

}  // namespace

TEST_CASE("1F1B step time and per-group memory follow from the stages' own evaluations") {
  const ir::Graph g = chain(8);
  const auto spaces = algebra::build_op_spaces(g);
  for (const std::int64_t m : {1, 2, 4, 8})
    for (const std::size_t p : {std::size_t{2}, std::size_t{4}})
      check_one_f_one_b(g, spaces, nodes(), p, m, 12.5e9, 10e-6);
}

TEST_CASE("groups inside the nodes send over the link of the level they split") {
  // One node of 8: 2 and 4 groups split the devices of the node, and the
  // sends cross its NVLink-like link. 4 nodes of 2 in 8 groups: every group
  // is one device, and neighbours on different nodes set the price (the
  // node link, as for 4 groups).
  const ir::Graph g = chain(8);
  const auto spaces = algebra::build_op_spaces(g);
  const Cluster one("one node", {Level{"node", 1, 12.5, 10.0}, Level{"gpu", 8, 300.0, 2.0}},
                    DeviceSpec{100.0, 80.0, 1000.0});
  for (const std::int64_t m : {1, 4})
    for (const std::size_t p : {std::size_t{2}, std::size_t{4}})
      check_one_f_one_b(g, spaces, one, p, m, 300e9, 2e-6);
  check_one_f_one_b(g, spaces, nodes(), 8, 8, 12.5e9, 10e-6);
}

TEST_CASE("the interleaved schedule divides the bubble by v and sends more") {
  const ir::Graph g = chain(8);
  const auto spaces = algebra::build_op_spaces(g);
  const Cluster c = nodes();
  const plan::PipelinePlan plain = even_pipeline(g, spaces, c, 2, 1, 4);
  const plan::PipelinePlan inter = even_pipeline(g, spaces, c, 2, 2, 4);
  const auto a = plan::evaluate_pipeline(g, spaces, c, plain, {});
  const auto b = plan::evaluate_pipeline(g, spaces, c, inter, {});
  // Each group's busy time per microbatch, then m·max + (Σ − max)/v.
  double sum = 0, slowest = 0;
  for (const auto& gr : b.groups) {
    sum += gr.microbatch_s + gr.send_s;
    slowest = std::max(slowest, gr.microbatch_s + gr.send_s);
  }
  CHECK(b.pipelined_s == doctest::Approx(4 * slowest + (sum - slowest) / 2).epsilon(1e-12));
  CHECK(b.groups[0].send_s > a.groups[0].send_s);
  CHECK(b.groups[0].sent_bytes > a.groups[0].sent_bytes);
  // Warm-up depth of Megatron-LM's interleaved schedule, in microbatches.
  CHECK(b.groups[0].in_flight == doctest::Approx(std::min(4.0, (2.0 * 1 + 2 + 1) / 2)));
}

TEST_CASE("a parameter tied across groups adds the all-reduce of its gradient once per step") {
  const ir::Graph tied = tied_chain(8, true);
  const ir::Graph untied = tied_chain(8, false);
  const auto tied_spaces = algebra::build_op_spaces(tied);
  const auto untied_spaces = algebra::build_op_spaces(untied);
  const Cluster c = nodes();
  const CostParams cost;
  for (const std::size_t p : {std::size_t{2}, std::size_t{4}}) {
    CAPTURE(p);
    const plan::PipelinePlan pp = even_pipeline(tied, tied_spaces, c, p, 1, 4);
    const auto a = plan::evaluate_pipeline(tied, tied_spaces, c, pp, cost);
    const auto b = plan::evaluate_pipeline(untied, untied_spaces, c, pp, cost);
    // The stages are the same graphs up to a name: the same pipelined part.
    CHECK(a.pipelined_s == doctest::Approx(b.pipelined_s).epsilon(1e-12));
    // By hand: the first and the last group all-reduce w0's gradient over
    // the outermost link (2 ways: 2·(1/2) of the group's share, 2 latency
    // steps), each group's devices sharing the traffic.
    const double devices = static_cast<double>(c.num_devices()) / static_cast<double>(p);
    const double gradient =
        kWidth * kWidth * 4.0 * plan::parameter_state(cost, Mode::Train, 4).gradient;
    const double bytes = gradient / devices;
    const double seconds = bytes / 12.5e9 + 2 * 10e-6;
    double step = 0;
    for (std::size_t gi = 0; gi < p; ++gi) {
      CAPTURE(gi);
      const bool end = gi == 0 || gi + 1 == p;
      CHECK(a.groups[gi].tied_s == doctest::Approx(end ? seconds : 0.0).epsilon(1e-12));
      CHECK(a.groups[gi].tied_bytes == doctest::Approx(end ? bytes : 0.0).epsilon(1e-12));
      CHECK(a.groups[gi].per_step_s ==
            doctest::Approx(b.groups[gi].per_step_s + (end ? seconds : 0.0)).epsilon(1e-12));
      CHECK(b.groups[gi].tied_s == 0.0);
      step = std::max(step, b.groups[gi].per_step_s + (end ? seconds : 0.0));
    }
    CHECK(a.summary.step_time_s == doctest::Approx(b.pipelined_s + step).epsilon(1e-12));
    // Each end holds its own copy: the same memory as the untied graph.
    CHECK(a.summary.memory_per_device_bytes ==
          doctest::Approx(b.summary.memory_per_device_bytes).epsilon(1e-12));
  }
  // Nothing to synchronise in inference; interleaved, stages 0 and 3 lie on
  // groups 0 and 1.
  CHECK(plan::tied_syncs(tied, c, even_pipeline(tied, tied_spaces, c, 2, 1, 4), Mode::Infer, cost)
            .empty());
  const auto inter =
      plan::tied_syncs(tied, c, even_pipeline(tied, tied_spaces, c, 2, 2, 4), Mode::Train, cost);
  REQUIRE(inter.size() == 1);
  CHECK(tied.tensor(inter[0].tensor).name == "w0");
  CHECK(inter[0].groups == std::vector<std::size_t>{0, 1});
}

TEST_CASE("stages that do not fit the graph or the cluster are refused with their path") {
  const ir::Graph g = chain(8);
  const auto spaces = algebra::build_op_spaces(g);
  const Cluster c = nodes();
  plan::PipelinePlan pp = even_pipeline(g, spaces, c, 2, 1, 4);
  {
    plan::PipelinePlan bad = pp;
    bad.stages[1].first = 5;
    t::check_error([&] { plan::check_pipeline(g, c, bad); }, Errc::kPlan,
                   "/pipeline/stages/1/range", "previous stage ends");
  }
  {
    plan::PipelinePlan bad = pp;
    bad.stages[1].group = 0;
    t::check_error([&] { plan::check_pipeline(g, c, bad); }, Errc::kPlan,
                   "/pipeline/stages/1/group");
  }
  {
    plan::PipelinePlan bad = pp;
    bad.stages.pop_back();
    t::check_error([&] { plan::check_pipeline(g, c, bad); }, Errc::kPlan, "/pipeline/stages");
  }
  {
    plan::PipelinePlan bad = pp;
    bad.stages[0].plan.mesh.pop_back();
    t::check_error([&] { plan::check_pipeline(g, c, bad); }, Errc::kPlan,
                   "/pipeline/stages/0/mesh");
  }
  {
    plan::PipelinePlan bad = even_pipeline(g, spaces, c, 2, 2, 3);
    t::check_error([&] { plan::check_pipeline(g, c, bad); }, Errc::kPlan, "/pipeline/microbatches");
  }
  {
    plan::PipelinePlan bad = pp;
    bad.stages[0].plan.cuts[0][0] = 7;  // no loop 7
    t::check_error([&] { (void)plan::evaluate_pipeline(g, spaces, c, bad, {}); }, Errc::kPlan,
                   "/pipeline/stages/0/operators/0/cuts/0");
  }
}
