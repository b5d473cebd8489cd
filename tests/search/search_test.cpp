// SPDX-License-Identifier: Apache-2.0
// Properties of the searches: valid plans, bookkeeping equal to the
// independent evaluator, rec never worse than data parallelism, rec close to
// the exact optimum, textbook strategies, determinism, memory budgets,
// pinned strategies and allowed dims.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

#include "recsearch/error.hpp"
#include "recsearch/search/search.hpp"
#include "support/graph_factories.hpp"
#include "support/reduced.hpp"
#include "support/search_options.hpp"

using namespace recsearch;
namespace t = recsearch::testing;

namespace {

search::SearchResult run(const ir::Graph& g, const Cluster& c, search::Algorithm algo,
                         Mode mode = Mode::Train, int threads = 0) {
  const auto spaces = algebra::build_op_spaces(g);
  search::SearchOptions o = testing::operator_level_options();
  o.algorithm = algo;
  o.mode = mode;
  o.threads = threads;
  return search::run(g, spaces, c, o);
}

int loop_of(const ir::Graph& g, const search::SearchResult& r, const char* op, std::size_t axis) {
  return r.plan.cuts.at(*g.find_operator(op)).at(axis);
}

std::string loop_name(const ir::Graph& g, const search::SearchResult& r, const char* op,
                      std::size_t axis) {
  const int l = loop_of(g, r, op, axis);
  if (l < 0) return "-";
  return algebra::build_op_space(g, *g.find_operator(op))
      .loops[static_cast<std::size_t>(l)]
      .name.str();
}

// Independent validity check of a plan: every split count divides its dim,
// and no operator uses more devices than the mesh has.
void check_valid(const ir::Graph& g, const search::SearchResult& r) {
  REQUIRE(r.eval.strategies.size() == g.num_operators());
  for (std::size_t o = 0; o < g.num_operators(); ++o) {
    const ir::Operator& op = g.op(static_cast<ir::OpId>(o));
    const auto& st = r.eval.strategies[o];
    REQUIRE(st.size() == op.inputs.size());
    for (std::size_t j = 0; j < st.size(); ++j) {
      const auto& shape = g.tensor(op.inputs[j]).shape;
      REQUIRE(st[j].size() == shape.size());
      std::int64_t prod = 1;
      for (std::size_t d = 0; d < shape.size(); ++d) {
        CHECK(shape[d] % st[j][d] == 0);
        prod *= st[j][d];
      }
      CHECK(r.plan.num_devices() % prod == 0);
    }
    CHECK(r.plan.cuts[o].size() == r.plan.mesh.size());
  }
}

std::vector<ir::Graph> factory_graphs() {
  std::vector<ir::Graph> gs;
  gs.push_back(t::mlp2(8, 4096, 16384, 4096));
  gs.push_back(t::ffn());
  gs.push_back(t::conv_net());
  gs.push_back(t::wide_matmul());
  gs.push_back(t::embedding(1 << 16));
  gs.push_back(t::transformer_block());
  for (std::uint32_t seed = 1; seed <= 4; ++seed) gs.push_back(t::random_dag(seed, 40));
  return gs;
}

std::vector<Cluster> clusters() {
  return {Cluster::flat(2),      Cluster::flat(6),      Cluster::flat(8), Cluster::flat(7),
          Cluster::mesh({2, 4}), Cluster::mesh({4, 8}), Cluster::flat(1), Cluster::mesh({3, 2, 2})};
}

}  // namespace

TEST_CASE("rec's bookkeeping equals the independent evaluator, and plans are valid") {
  const auto gs = factory_graphs();
  const auto cs = clusters();
  for (std::size_t gi = 0; gi < gs.size(); ++gi)
    for (std::size_t ci = 0; ci < cs.size(); ++ci)
      for (Mode mode : {Mode::Train, Mode::Infer}) {
        if (!testing::keep_pair(gi, ci)) continue;
        const ir::Graph& g = gs[gi];
        const Cluster& c = cs[ci];
        CAPTURE(g.name());
        CAPTURE(c.name());
        const auto r = run(g, c, search::Algorithm::Rec, mode);
        check_valid(g, r);
        const double ev = r.eval.summary.step_time_s;
        // The passes' account, or polish's when it changed the plan.
        CHECK(r.bookkept_step_time_s == doctest::Approx(ev).epsilon(1e-9));
        CHECK(r.eval.summary.compute_s + r.eval.summary.communication_s ==
              doctest::Approx(ev).epsilon(1e-12));
        // The passes' own account alone (no polish, no expert splits, whose
        // step time is the evaluator's).
        const auto spaces = algebra::build_op_spaces(g);
        search::SearchOptions o = testing::operator_level_options();
        o.mode = mode;
        o.effort = search::Effort::Fast;
        o.expert_candidates = false;
        const auto passes = search::run(g, spaces, c, o);
        CHECK_FALSE(passes.polished);
        CHECK_FALSE(passes.expert_plan);
        CHECK(passes.bookkept_step_time_s ==
              doctest::Approx(passes.eval.summary.step_time_s).epsilon(1e-9));
        CHECK(ev <= passes.eval.summary.step_time_s * (1 + 1e-9));
      }
}

TEST_CASE("rec is never worse than data parallelism") {
  const auto gs = factory_graphs();
  const auto cs = clusters();
  for (std::size_t gi = 0; gi < gs.size(); ++gi)
    for (std::size_t ci = 0; ci < cs.size(); ++ci) {
      if (!testing::keep_pair(gi, ci)) continue;
      const ir::Graph& g = gs[gi];
      const Cluster& c = cs[ci];
      CAPTURE(g.name());
      CAPTURE(c.name());
      const double rec = run(g, c, search::Algorithm::Rec).eval.summary.step_time_s;
      const double dp = run(g, c, search::Algorithm::DataParallel).eval.summary.step_time_s;
      CHECK(rec <= dp * (1 + 1e-9));
    }
}

TEST_CASE("exhaustive is optimal; rec stays within a few percent of it") {
  auto cases = t::small_exact_cases();
  double worst = 0;
  for (auto& [g, c] : cases) {
    CAPTURE(g.name());
    const auto ex = run(g, c, search::Algorithm::Exhaustive);
    const auto rec = run(g, c, search::Algorithm::Rec);
    const auto dp = run(g, c, search::Algorithm::DataParallel);
    CHECK(ex.proven_optimal);
    const double e = ex.eval.summary.step_time_s, r = rec.eval.summary.step_time_s;
    // The branch and bound's own account of its optimum agrees with the
    // evaluator: a third, separate reading of the cost model.
    CHECK(ex.bookkept_step_time_s == doctest::Approx(e).epsilon(1e-9));
    CHECK(e <= r * (1 + 1e-9));
    CHECK(e <= dp.eval.summary.step_time_s * (1 + 1e-9));
    const double gap = r / e - 1;
    worst = std::max(worst, gap);
    MESSAGE(g.name() << " on " << c.name() << ": rec/exhaustive = " << r / e);
    CHECK(gap <= 0.05);
  }
  MESSAGE("worst rec/exhaustive gap: " << worst * 100 << "%");
}

// The heads of nn.MultiheadAttention (batch_first, so the input is
// transposed to [t, b, d]) as torch.onnx.export writes them around the
// output projection: [t, b*h, hd] merged into [t*b, d] (the batch the inner
// factor), projected, and split back into [t, b, d]; a merge region
// (docs/design.md) whose batch cut is a strided shard.
ir::Graph merged_heads(std::int64_t t, std::int64_t b, std::int64_t heads, std::int64_t hd) {
  using ir::TensorKind;
  const std::int64_t d = heads * hd;
  ir::Graph g("merged_heads");
  const auto f = ir::DType::F32;
  g.add_tensor("x", {b, t, d}, f, TensorKind::Input);
  g.add_tensor("xt", {t, b, d}, f);
  g.add_tensor("wv", {d, d}, f, TensorKind::Parameter);
  g.add_tensor("v", {t, b, d}, f);
  g.add_tensor("heads", {t, b * heads, hd}, f);
  g.add_tensor("rows", {t * b, d}, f);
  g.add_tensor("wo", {d, d}, f, TensorKind::Parameter);
  g.add_tensor("proj", {t * b, d}, f);
  g.add_tensor("bo", {d}, f, TensorKind::Parameter);
  g.add_tensor("biased", {t * b, d}, f);
  g.add_tensor("back", {t, b, d}, f);
  g.add_tensor("y", {t, b, d}, f);
  t::add_op(g, "to_seq_first", "Transpose", {"x"}, {"xt"},
            {{"perm", std::vector<std::int64_t>{1, 0, 2}}});
  t::add_op(g, "v_proj", "MatMul", {"xt", "wv"}, {"v"});
  t::add_op(g, "view_heads", "Reshape", {"v"}, {"heads"});
  t::add_op(g, "merge", "Reshape", {"heads"}, {"rows"});
  t::add_op(g, "out_proj", "MatMul", {"rows", "wo"}, {"proj"});
  t::add_op(g, "out_bias", "Add", {"bo", "proj"}, {"biased"});
  t::add_op(g, "split", "Reshape", {"biased"}, {"back"});
  t::add_op(g, "residual", "Add", {"xt", "back"}, {"y"});
  g.finalize();
  return g;
}

TEST_CASE("merge region: the batch cut survives [t*b, d], and every account agrees") {
  const ir::Graph g = merged_heads(16, 8, 4, 64);
  const auto spaces = algebra::build_op_spaces(g);
  REQUIRE_FALSE(spaces[*g.find_operator("out_proj")].strided.empty());
  for (const Cluster& c : {Cluster::flat(4), Cluster::mesh({2, 4})}) {
    CAPTURE(c.name());
    for (Mode mode : {Mode::Train, Mode::Infer}) {
      const auto dp = run(g, c, search::Algorithm::DataParallel, mode);
      const auto rec = run(g, c, search::Algorithm::Rec, mode);
      const auto ex = run(g, c, search::Algorithm::Exhaustive, mode);
      check_valid(g, dp);
      check_valid(g, rec);
      // Data parallelism follows the batch through the region: its rows
      // are cut strided on every axis, and no activation moves.
      for (std::size_t a = 0; a < dp.plan.mesh.size(); ++a) {
        CHECK(loop_name(g, dp, "merge", a) == "d0");
        CHECK(loop_name(g, dp, "out_proj", a) == "i");
        CHECK(loop_name(g, dp, "split", a) == "d1");
      }
      for (const auto& e : dp.eval.events) CHECK(e.reason != plan::CommReason::Layout);
      // The search's, the branch and bound's and the evaluator's accounts.
      CHECK(rec.bookkept_step_time_s ==
            doctest::Approx(rec.eval.summary.step_time_s).epsilon(1e-9));
      CHECK(ex.bookkept_step_time_s == doctest::Approx(ex.eval.summary.step_time_s).epsilon(1e-9));
      CHECK(ex.eval.summary.step_time_s <= rec.eval.summary.step_time_s * (1 + 1e-9));
      CHECK(rec.eval.summary.step_time_s <= dp.eval.summary.step_time_s * (1 + 1e-9));
    }
  }
}

TEST_CASE("memory-bound: rec against the exact optimum under budgets") {
  // Budgets below what the unconstrained optimum needs, down to where
  // little fits: the exact optimum then trades communication for memory.
  // rec must fit whenever it does; on the model-like graphs within 5% of
  // it. The random DAGs (microsecond steps, where every collective's
  // latency counts) need several operators changed together to reach the
  // optimum under a tight budget, which neither the passes nor polish's
  // single-operator moves do: bounded at 2x and reported.
  double worst = 0, worst_random = 0;
  int cases = 0, unproven = 0;
  std::size_t row = 0;  // (graph, mode) pairs, for the reduced run's diagonal
  for (auto& [g, c] : t::small_exact_cases())
    for (Mode mode : {Mode::Train, Mode::Infer}) {
      const std::size_t r = row++;
      const auto spaces = algebra::build_op_spaces(g);
      search::SearchOptions o = testing::operator_level_options();
      o.mode = mode;
      o.algorithm = search::Algorithm::Exhaustive;
      o.exhaustive_max_nodes = 2'000'000;
      const double free_mem = search::run(g, spaces, c, o).eval.summary.memory_per_device_bytes;
      const std::array<double, 4> fractions{0.9, 0.75, 0.6, 0.45};
      for (std::size_t fi = 0; fi < fractions.size(); ++fi) {
        if (!testing::keep_pair(r, fi)) continue;
        const double f = fractions[fi];
        CAPTURE(g.name());
        CAPTURE(c.name());
        CAPTURE(mode == Mode::Train);
        CAPTURE(f);
        o.cost.memory_budget_bytes = free_mem * f;
        o.algorithm = search::Algorithm::Exhaustive;
        search::SearchResult ex;
        try {
          ex = search::run(g, spaces, c, o);
        } catch (const Error& e) {
          REQUIRE(e.code() == Errc::kNoFit);
          continue;  // nothing fits: nothing to compare
        }
        // A budget that prunes little can leave the proof unfinished within
        // the node limit: such a case says nothing about the gap.
        if (!ex.proven_optimal) {
          ++unproven;
          continue;
        }
        o.algorithm = search::Algorithm::Rec;
        search::SearchResult rec;
        try {
          rec = search::run(g, spaces, c, o);
        } catch (const Error& e) {
          FAIL("rec found no plan where the exact search fits: " << std::string(e.what()));
          continue;
        }
        ++cases;
        CHECK(rec.eval.summary.memory_per_device_bytes <= o.cost.memory_budget_bytes);
        if (rec.polished)
          CHECK(rec.bookkept_step_time_s ==
                doctest::Approx(rec.eval.summary.step_time_s).epsilon(1e-9));
        const double gap = rec.eval.summary.step_time_s / ex.eval.summary.step_time_s - 1;
        CHECK(gap >= -1e-9);
        if (gap > 0.01) MESSAGE("rec/exhaustive - 1 = " << 100 * gap << "%");
        if (g.name().rfind("random", 0) == 0) {
          worst_random = std::max(worst_random, gap);
          CHECK(gap <= 1.0);
        } else {
          worst = std::max(worst, gap);
          CHECK(gap <= 0.05);
        }
      }
    }
  MESSAGE("memory-bound rec/exhaustive over " << cases << " cases: worst " << 100 * worst
                                              << "% on the model graphs, " << 100 * worst_random
                                              << "% on the random DAGs; " << unproven
                                              << " budgets left unproven");
  CHECK(cases >= (testing::reduced_run() ? 6 : 20));
}

TEST_CASE("rec against the exact optimum on seeded random graphs") {
  double worst = 0, sum = 0;
  int n = 0;
  for (std::uint32_t seed = 100; seed < 120; ++seed)
    for (const Cluster& c : {Cluster::flat(4), Cluster::mesh({2, 3})}) {
      const ir::Graph g = t::random_dag(seed, 9, 8 << (seed % 6));
      CAPTURE(seed);
      CAPTURE(c.name());
      const auto ex = run(g, c, search::Algorithm::Exhaustive);
      const auto rec = run(g, c, search::Algorithm::Rec);
      REQUIRE(ex.proven_optimal);
      CHECK(ex.bookkept_step_time_s == doctest::Approx(ex.eval.summary.step_time_s).epsilon(1e-9));
      CHECK(rec.bookkept_step_time_s ==
            doctest::Approx(rec.eval.summary.step_time_s).epsilon(1e-9));
      const double gap = rec.eval.summary.step_time_s / ex.eval.summary.step_time_s - 1;
      CHECK(gap >= -1e-9);
      worst = std::max(worst, gap);
      sum += gap;
      if (gap > 0.01)
        MESSAGE("seed " << seed << " on " << c.name() << ": gap " << 100 * gap << "%");
      ++n;
    }
  MESSAGE("rec/exhaustive over " << n << " random graphs: mean gap " << 100 * sum / n << "%, worst "
                                 << 100 * worst << "%");
  CHECK(worst <= 0.05);
}

TEST_CASE("textbook: large batch and small weights come out data-parallel") {
  const ir::Graph g = t::conv_net(512);
  const auto r = run(g, Cluster::flat(8), search::Algorithm::Rec);
  for (const char* op : {"conv1", "conv2", "fc"})
    for (std::size_t a = 0; a < 3; ++a) {
      CAPTURE(op);
      const std::string l = loop_name(g, r, op, a);
      CHECK((l == "n" || l == "i"));
    }
}

TEST_CASE("textbook: weights that dwarf activations give Megatron column-then-row") {
  const ir::Graph g = t::mlp2(8, 4096, 16384, 4096);
  const auto r = run(g, Cluster::flat(2), search::Algorithm::Rec);
  CHECK(loop_name(g, r, "mm1", 0) == "j");
  CHECK(loop_name(g, r, "mm2", 0) == "k");
  // One all-reduce of the second output, forward; nothing between the MatMuls.
  const auto y = *g.find_tensor("y");
  int reduces = 0;
  for (const auto& e : r.eval.events) {
    if (e.reason == plan::CommReason::Layout) {
      CHECK(e.tensor != *g.find_tensor("h"));
      CHECK(e.tensor != *g.find_tensor("a"));
    }
    if (e.tensor == y && e.collective == cost::Collective::AllReduce &&
        e.phase == cost::Phase::Forward)
      ++reduces;
  }
  CHECK(reduces == 1);
}

TEST_CASE("textbook: a very wide weight is split along its columns") {
  const ir::Graph g = t::wide_matmul();
  const auto r = run(g, Cluster::flat(8), search::Algorithm::Rec);
  for (std::size_t a = 0; a < 3; ++a) CHECK(loop_name(g, r, "mm", a) == "j");
  const auto w = *g.find_tensor("w");
  CHECK(r.eval.tensors[w].dims[1].size() == 3);
}

TEST_CASE("textbook: an embedding table too big for one device gets sharded") {
  // 2^22 x 4096 f32 = 64 GiB of weights, 256 GiB with gradients and Adam.
  const ir::Graph g = t::embedding(1 << 22, 4096);
  const auto r = run(g, Cluster::flat(8), search::Algorithm::Rec);
  const auto table = *g.find_tensor("table");
  std::size_t shards = 0;
  for (const auto& d : r.eval.tensors[table].dims) shards += d.size();
  CHECK(shards == 3);
  CHECK(r.eval.summary.memory_per_device_bytes <= 80.0 * (1 << 30));
  CHECK_THROWS_AS(run(g, Cluster::flat(1), search::Algorithm::Rec), Error);
}

TEST_CASE("textbook: on a 2-level cluster the slow level carries the cheapest cuts") {
  // Moving the slow link's cuts onto a fast link (and back) must not help,
  // and the slow cut moves no more bytes per device than either fast one.
  for (const auto& g : {t::transformer_block(16, 1024, 4096, 32), t::mlp2(256, 8192, 8192, 8192)}) {
    CAPTURE(g.name());
    const Cluster c("2 nodes x 4", {Level{"node", 2, 25, 10}, Level{"gpu", 4, 450, 2}});
    const auto r = run(g, c, search::Algorithm::Rec);
    const auto spaces = algebra::build_op_spaces(g);
    std::vector<double> bytes(c.cuts().size());
    for (const auto& e : r.eval.events) bytes[e.axis] += e.bytes;
    MESSAGE(g.name() << ": bytes per axis " << bytes[0] << " " << bytes[1] << " " << bytes[2]);
    for (std::size_t fast = 1; fast < 3; ++fast) {
      plan::Plan swapped = r.plan;
      for (auto& cuts : swapped.cuts) std::swap(cuts[0], cuts[fast]);
      plan::check_plan(g, spaces, swapped);
      const auto ev = plan::evaluate(g, spaces, c, swapped, testing::operator_level_options().cost);
      CHECK(r.eval.summary.step_time_s <= ev.summary.step_time_s * (1 + 1e-9));
      CHECK(bytes[0] <= bytes[fast] * (1 + 1e-9));
    }
  }
}

TEST_CASE("the plan is identical for every thread count") {
  const ir::Graph g = t::random_dag(11, 3000);
  const Cluster c = Cluster::mesh({4, 6});
  const auto one = run(g, c, search::Algorithm::Rec, Mode::Train, 1);
  const auto two = run(g, c, search::Algorithm::Rec, Mode::Train, 2);
  const auto many = run(g, c, search::Algorithm::Rec, Mode::Train, 7);
  CHECK(one.plan.cuts == two.plan.cuts);
  CHECK(one.plan.cuts == many.plan.cuts);
  CHECK(one.eval.summary.step_time_s == two.eval.summary.step_time_s);
}

TEST_CASE("memory budget: the ladder finds a plan that fits, or says none does") {
  // Data parallel is fastest here, but replicates 2 GiB of weight state.
  const ir::Graph g = t::mlp2(8192, 8192, 8192, 8192, ir::DType::F16);
  const auto spaces = algebra::build_op_spaces(g);
  search::SearchOptions o = testing::operator_level_options();
  const Cluster c = Cluster::flat(8);
  const auto free_run = search::run(g, spaces, c, o);
  const double need = free_run.eval.summary.memory_per_device_bytes;
  MESSAGE("unconstrained: " << need / (1 << 20) << " MiB, step "
                            << free_run.eval.summary.step_time_s);
  // A budget below what the unconstrained plan needs but above the fully
  // sharded minimum.
  o.cost.memory_budget_bytes = need * 0.8;
  try {
    const auto tight = search::run(g, spaces, c, o);
    CHECK(tight.eval.summary.memory_per_device_bytes <= o.cost.memory_budget_bytes);
    CHECK(tight.eval.summary.step_time_s >= free_run.eval.summary.step_time_s * (1 - 1e-9));
    CHECK(tight.memory_rungs > 0);
    MESSAGE("with 80%: " << tight.eval.summary.memory_per_device_bytes / (1 << 20) << " MiB, step "
                         << tight.eval.summary.step_time_s << " after " << tight.memory_rungs
                         << " rungs");
  } catch (const Error& e) {
    FAIL("a plan within 80% of the unconstrained memory should exist: " << std::string(e.what()));
  }
  o.cost.memory_budget_bytes = 1024;
  try {
    (void)search::run(g, spaces, c, o);
    FAIL("expected kNoFit");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::kNoFit);
    CHECK(exit_code(e.code()) == 3);
    CHECK(std::string(e.what()).find("smallest found needs") != std::string::npos);
  }
}

TEST_CASE("pinned strategies are kept and allowed dims respected") {
  ir::Graph g = t::mlp2(64, 1024, 4096, 1024);
  g.mutable_op(*g.find_operator("mm1")).strategy = ir::Strategy{{2, 1}, {1, 4}};
  g.mutable_op(*g.find_operator("mm2")).allowed = std::vector<std::string>{"i"};
  for (auto algo :
       {search::Algorithm::Rec, search::Algorithm::DataParallel, search::Algorithm::Exhaustive}) {
    const auto r = run(g, Cluster::flat(8), algo);
    CHECK(r.eval.strategies[*g.find_operator("mm1")] == ir::Strategy{{2, 1}, {1, 4}});
    for (std::size_t a = 0; a < 3; ++a) {
      const std::string l = loop_name(g, r, "mm2", a);
      CHECK((l == "i" || l == "-"));
    }
  }
}

TEST_CASE("exhaustive refuses graphs past its limit") {
  const ir::Graph g = t::random_dag(3, 40);
  try {
    (void)run(g, Cluster::flat(2), search::Algorithm::Exhaustive);
    FAIL("expected an error");
  } catch (const Error& e) {
    CHECK(e.code() == Errc::kUsage);
  }
}

TEST_CASE("an empty graph and a single device give empty and replicated plans") {
  ir::Graph empty("empty");
  empty.finalize();
  for (auto algo :
       {search::Algorithm::Rec, search::Algorithm::DataParallel, search::Algorithm::Exhaustive}) {
    const auto r = run(empty, Cluster::flat(8), algo);
    CHECK(r.plan.cuts.empty());
    CHECK(r.eval.summary.step_time_s == 0);
    // One device: no cut at all, compute only.
    const ir::Graph g = t::mlp2(8, 64, 64, 64);
    const auto one = run(g, Cluster::flat(1), algo);
    for (const auto& cuts : one.plan.cuts) CHECK(cuts.empty());
    CHECK(one.eval.summary.communication_s == 0);
    CHECK(one.eval.summary.compute_s > 0);
  }
}

TEST_CASE("effort: the names, and Fast is rec without polish") {
  for (const search::Effort e : {search::Effort::Fast, search::Effort::Default})
    CHECK(search::parse_effort(search::effort_name(e)) == e);
  CHECK(search::effort_name(search::Effort::Fast) == "fast");
  CHECK_FALSE(search::parse_effort("Fast").has_value());
  CHECK_FALSE(search::parse_effort("").has_value());

  // A transformer block over 64 devices in one level: six interchangeable
  // axes, where rec's passes decide one at a time and polish, working on
  // whole strategies, finds a faster plan.
  const ir::Graph g = t::transformer_block();
  const Cluster c = Cluster::flat(64);
  const auto spaces = algebra::build_op_spaces(g);
  search::SearchOptions o;
  o.effort = search::Effort::Fast;
  const search::SearchResult fast = search::run(g, spaces, c, o);
  o.effort = search::Effort::Default;
  const search::SearchResult full = search::run(g, spaces, c, o);
  check_valid(g, fast);
  CHECK_FALSE(fast.polished);
  CHECK(full.polished);
  CHECK(full.eval.summary.step_time_s < fast.eval.summary.step_time_s);
}
