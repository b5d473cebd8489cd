// SPDX-License-Identifier: Apache-2.0
// The searches with training settings: under a budget the default setting
// cannot meet, rec chooses recomputation, ZeRO and microbatches that fit;
// pinned settings are kept; every plan re-evaluates to what was reported;
// the searches' own accounts agree with the evaluator at every setting.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/error.hpp"
#include "recsearch/gen/generate.hpp"
#include "recsearch/plan/evaluator.hpp"
#include "recsearch/plan/training.hpp"
#include "recsearch/search/search.hpp"
#include "support/graph_factories.hpp"
#include "support/search_options.hpp"

using namespace recsearch;

namespace {

struct SmallGpt {
  ir::Graph g;
  std::vector<algebra::OpSpace> spaces;
  SmallGpt() {
    gen::ModelSpec m = gen::preset("gpt-350m");
    m.layers = 4;
    m.hidden = 256;
    m.heads = 4;
    m.seq = 128;
    m.batch = 16;
    m.vocab = 512;
    g = gen::build_graph(m);
    spaces = algebra::build_op_spaces(g);
  }
};

// The plan, evaluated again from scratch, costs what the search reported.
void check_reevaluates(const SmallGpt& s, const Cluster& c, const search::SearchOptions& o,
                       const search::SearchResult& r) {
  const auto ev = plan::evaluate(s.g, s.spaces, c, r.plan, o.cost, plan::EvalDetail::Summary);
  CHECK(ev.summary.step_time_s == doctest::Approx(r.eval.summary.step_time_s).epsilon(1e-12));
  CHECK(ev.summary.memory_per_device_bytes ==
        doctest::Approx(r.eval.summary.memory_per_device_bytes).epsilon(1e-12));
}

}  // namespace

TEST_CASE("under a tight budget rec trades time for memory with the training settings") {
  const SmallGpt s;
  const Cluster c = Cluster::flat(4);
  search::SearchOptions o;
  const auto free = search::run(s.g, s.spaces, c, o);
  check_reevaluates(s, c, o, free);
  // The plain setting under a budget it cannot meet.
  search::SearchOptions plain = testing::operator_level_options();
  plain.cost.overlap = true;
  const double plain_mem =
      search::run(s.g, s.spaces, c, plain).eval.summary.memory_per_device_bytes;
  o.cost.memory_budget_bytes = plain_mem * 0.3;
  plain.cost.memory_budget_bytes = o.cost.memory_budget_bytes;
  CHECK_THROWS_AS((void)search::run(s.g, s.spaces, c, plain), Error);
  const auto tight = search::run(s.g, s.spaces, c, o);
  MESSAGE("recompute " << plan::recompute_name(tight.plan.training.recompute) << ", ZeRO "
                       << tight.plan.training.zero_stage << ", " << tight.plan.training.microbatches
                       << " microbatches");
  CHECK(tight.eval.summary.memory_per_device_bytes <= o.cost.memory_budget_bytes);
  CHECK(tight.eval.summary.step_time_s >= free.eval.summary.step_time_s * (1 - 1e-9));
  const plan::Training& t = tight.plan.training;
  CHECK((t.recompute != plan::Recompute::None || t.zero_stage == 3 || t.microbatches > 1));
  check_reevaluates(s, c, o, tight);
}

TEST_CASE("pinned training settings are kept, and the accounts agree at each") {
  const SmallGpt s;
  const Cluster c = Cluster::mesh({2, 2});
  for (const auto rc : {plan::Recompute::None, plan::Recompute::Selective, plan::Recompute::Full})
    for (const int z : {0, 1, 3})
      for (const std::int64_t m : {1, 4}) {
        CAPTURE(plan::recompute_name(rc));
        CAPTURE(z);
        CAPTURE(m);
        search::SearchOptions o;
        o.training = {rc, z, m};
        const auto r = search::run(s.g, s.spaces, c, o);
        CHECK(r.plan.training == plan::Training{rc, z, m, {}});
        check_reevaluates(s, c, o, r);
        CHECK(r.bookkept_step_time_s ==
              doctest::Approx(testing::serial_step(r.eval.summary)).epsilon(1e-9));
      }
}

TEST_CASE("where plan-wide ZeRO 3 wins, the search keeps stage 3 on the largest parameters only") {
  const SmallGpt s;
  const Cluster c = Cluster::flat(4);
  // Data parallel (fixed cuts), nothing overlapped, so that each stage-3
  // gather is paid; no recomputation and one microbatch.
  search::SearchOptions o;
  o.algorithm = search::Algorithm::DataParallel;
  o.cost.overlap = false;
  o.training.recompute = plan::Recompute::None;
  o.training.microbatches = 1;
  search::SearchOptions at2 = o, at3 = o;
  at2.training.zero_stage = 2;
  at3.training.zero_stage = 3;
  const auto two = search::run(s.g, s.spaces, c, at2);
  const auto three = search::run(s.g, s.spaces, c, at3);
  REQUIRE(three.eval.summary.memory_per_device_bytes < two.eval.summary.memory_per_device_bytes);
  REQUIRE(three.eval.summary.step_time_s > two.eval.summary.step_time_s);
  // A budget between the two: stage 2 everywhere does not fit, stage 3
  // everywhere does with room to spare.
  o.cost.memory_budget_bytes =
      0.5 * (two.eval.summary.memory_per_device_bytes + three.eval.summary.memory_per_device_bytes);
  const auto r = search::run(s.g, s.spaces, c, o);
  const plan::Training& t = r.plan.training;
  CHECK(t.zero_stage == 3);
  REQUIRE(plan::mixed_zero(s.g, t));
  CHECK(r.eval.summary.memory_per_device_bytes <= o.cost.memory_budget_bytes);
  CHECK(r.eval.summary.step_time_s < three.eval.summary.step_time_s);
  check_reevaluates(s, c, o, r);
  CHECK(r.bookkept_step_time_s ==
        doctest::Approx(testing::serial_step(r.eval.summary)).epsilon(1e-9));
  // Stage 3 on the largest parameters, 2 on the rest.
  const std::vector<int> z = plan::parameter_zero(s.g, t);
  double smallest3 = INFINITY, largest2 = 0;
  for (ir::TensorId i = 0; i < s.g.num_tensors(); ++i) {
    if (s.g.tensor(i).kind != ir::TensorKind::Parameter) continue;
    CHECK((z[i] == 2 || z[i] == 3));
    if (z[i] == 3) smallest3 = std::min(smallest3, s.g.tensor(i).bytes());
    else largest2 = std::max(largest2, s.g.tensor(i).bytes());
  }
  CHECK(smallest3 >= largest2);
  // Pinned stages are kept whole.
  o.training.zero_stage = 3;
  CHECK_FALSE(plan::mixed_zero(s.g, search::run(s.g, s.spaces, c, o).plan.training));
}

TEST_CASE("exhaustive and ilp at each training setting: their accounts equal the evaluator") {
  // The exact searches optimise the strategies at one setting (the one
  // pinned here); at every ZeRO stage, microbatch count and recomputation
  // they express, their own account of the optimum is the evaluator's
  // serial step, ilp proves what exhaustive proves, and rec at the same
  // setting is no faster.
  auto cases = testing::small_exact_cases();
  cases.erase(cases.begin() + 3, cases.end());  // two MLPs and the FFN: batches 8, 1024, 32
  for (auto& [g, c] : cases) {
    const auto spaces = algebra::build_op_spaces(g);
    for (const auto rc : {plan::Recompute::None, plan::Recompute::Selective})
      for (const int z : {0, 1, 2, 3})
        for (const std::int64_t m : {1, 2}) {
          CAPTURE(g.name());
          CAPTURE(plan::recompute_name(rc));
          CAPTURE(z);
          CAPTURE(m);
          search::SearchOptions o = testing::operator_level_options();
          o.training = {rc, z, m};
          o.algorithm = search::Algorithm::Exhaustive;
          const auto ex = search::run(g, spaces, c, o);
          CHECK(ex.plan.training == plan::Training{rc, z, m, {}});
          REQUIRE(ex.proven_optimal);
          const auto ev = plan::evaluate(g, spaces, c, ex.plan, o.cost, plan::EvalDetail::Summary);
          CHECK(ex.bookkept_step_time_s ==
                doctest::Approx(testing::serial_step(ev.summary)).epsilon(1e-9));
          o.algorithm = search::Algorithm::Rec;
          const auto rec = search::run(g, spaces, c, o);
          CHECK(ex.eval.summary.step_time_s <= rec.eval.summary.step_time_s * (1 + 1e-9));
          if (!search::ilp_available()) continue;
          o.algorithm = search::Algorithm::Ilp;
          const auto ilp = search::run(g, spaces, c, o);
          CHECK(ilp.plan.training == plan::Training{rc, z, m, {}});
          CHECK(ilp.proven_optimal);
          const auto iev =
              plan::evaluate(g, spaces, c, ilp.plan, o.cost, plan::EvalDetail::Summary);
          CHECK(ilp.bookkept_step_time_s ==
                doctest::Approx(testing::serial_step(iev.summary)).epsilon(1e-9));
          CHECK(ilp.eval.summary.step_time_s ==
                doctest::Approx(ex.eval.summary.step_time_s).epsilon(1e-6));
        }
  }
}

TEST_CASE("exhaustive and ilp refuse full recomputation, whose memory they cannot express") {
  const SmallGpt s;
  search::SearchOptions o;
  o.algorithm = search::Algorithm::Exhaustive;
  o.training.recompute = plan::Recompute::Full;
  try {
    (void)search::run(s.g, s.spaces, Cluster::flat(2), o);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::kUsage);
    CHECK(std::string(e.what()).find("full recomputation") != std::string::npos);
  }
}

TEST_CASE("a graph's training pins are honoured, and the options override them") {
  SmallGpt s;
  const Cluster c = Cluster::mesh({2, 2});
  s.g.set_training_pins({plan::Recompute::Selective, 3, 4});
  search::SearchOptions o;
  const auto r = search::run(s.g, s.spaces, c, o);
  CHECK(r.plan.training == plan::Training{plan::Recompute::Selective, 3, 4, {}});
  check_reevaluates(s, c, o, r);
  o.training.zero_stage = 1;
  const auto over = search::run(s.g, s.spaces, c, o);
  CHECK(over.plan.training == plan::Training{plan::Recompute::Selective, 1, 4, {}});
}

TEST_CASE("operators pinned to a recomputation keep it in the plan, and the accounts agree") {
  SmallGpt s;
  // The last layer (operators "h3.*") recomputed fully, the rest as chosen.
  for (ir::OpId o = 0; o < s.g.num_operators(); ++o)
    if (s.g.op(o).name.rfind("h3.", 0) == 0) s.g.mutable_op(o).recompute = plan::Recompute::Full;
  const Cluster c = Cluster::mesh({2, 2});
  for (const auto rc : {plan::Recompute::None, plan::Recompute::Selective}) {
    CAPTURE(plan::recompute_name(rc));
    search::SearchOptions o;
    o.training = {rc, 2, 1};
    const auto r = search::run(s.g, s.spaces, c, o);
    const plan::Training& t = r.plan.training;
    CHECK(t.recompute == rc);
    REQUIRE(t.per_op.size() == s.g.num_operators());
    for (ir::OpId op = 0; op < s.g.num_operators(); ++op) {
      CAPTURE(s.g.op(op).name);
      CHECK(t.per_op[op] == s.g.op(op).recompute.value_or(rc));
    }
    check_reevaluates(s, c, o, r);
    CHECK(r.eval.summary.recompute_s > 0);
    CHECK(r.bookkept_step_time_s ==
          doctest::Approx(testing::serial_step(r.eval.summary)).epsilon(1e-9));
  }
  // The exact searches refuse a pinned full recomputation like the option.
  search::SearchOptions o;
  o.algorithm = search::Algorithm::Exhaustive;
  o.training = {plan::Recompute::None, 2, 1};
  CHECK_THROWS_AS((void)search::run(s.g, s.spaces, Cluster::flat(2), o), Error);
}

TEST_CASE("where full recomputation wins, rec recomputes only the last blocks that it must") {
  const SmallGpt s;
  const Cluster c = Cluster::mesh({2, 2});
  search::SearchOptions o;
  o.training = {plan::Recompute::Full, 2, 1};
  const auto full = search::run(s.g, s.spaces, c, o);
  o.training = {plan::Recompute::Selective, 2, 1};
  const auto sel = search::run(s.g, s.spaces, c, o);
  const double full_mem = full.eval.summary.memory_per_device_bytes;
  const double sel_mem = sel.eval.summary.memory_per_device_bytes;
  REQUIRE(full_mem < sel_mem);
  // A budget that full recomputation meets and selective does not: the
  // plan-wide ladders choose full, the blocks' search fewer recomputed layers.
  o.training = {std::nullopt, 2, 1};
  o.cost.memory_budget_bytes = sel_mem - 0.4 * (sel_mem - full_mem);
  const auto r = search::run(s.g, s.spaces, c, o);
  const plan::Training& t = r.plan.training;
  MESSAGE("recompute " << plan::recompute_name(t.recompute) << ", per operator "
                       << t.per_op.size());
  CHECK(r.eval.summary.memory_per_device_bytes <= o.cost.memory_budget_bytes);
  CHECK(r.eval.summary.step_time_s <= full.eval.summary.step_time_s * (1 + 1e-9));
  REQUIRE(t.per_op.size() == s.g.num_operators());
  CHECK(t.recompute == plan::Recompute::Selective);
  // Full on a suffix of the layers, fewer than all of them.
  const auto layer_of = [&](ir::OpId op) {
    const std::string& n = s.g.op(op).name;
    return n[0] == 'h' && n.find('.') != std::string::npos ? std::stoi(n.substr(1)) : -1;
  };
  int first_full = 99;
  for (ir::OpId op = 0; op < s.g.num_operators(); ++op)
    if (t.per_op[op] == plan::Recompute::Full) first_full = std::min(first_full, layer_of(op));
  CHECK(first_full >= 1);
  CHECK(first_full <= 2);
  for (ir::OpId op = 0; op < s.g.num_operators(); ++op) {
    const int l = layer_of(op);
    if (l >= 0) CHECK((t.per_op[op] == plan::Recompute::Full) == (l >= first_full));
  }
  CHECK(r.eval.summary.recompute_s < full.eval.summary.recompute_s);
  check_reevaluates(s, c, o, r);
}
