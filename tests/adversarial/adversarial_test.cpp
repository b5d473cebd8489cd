// SPDX-License-Identifier: Apache-2.0
// Adversarial inputs across the modules: sizes and shapes at the edges of
// what the types hold, degenerate clusters, names a careless reader would
// trip over. Each case ends in a valid, finite result or a recsearch::Error
// with a stable id that names where the problem is -- never a crash, a hang
// or a silent wrong answer.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "recsearch/recsearch.hpp"
#include "support/errors.hpp"

namespace {

using namespace recsearch;

constexpr const char* kFile = "adv.json";

using recsearch::testing::error_of;

// An operator without attributes, strategy or allowed dims.
ir::Operator make_op(std::string name, std::string type, std::vector<ir::TensorId> inputs,
                     std::vector<ir::TensorId> outputs) {
  ir::Operator op;
  op.name = std::move(name);
  op.type = std::move(type);
  op.inputs = std::move(inputs);
  op.outputs = std::move(outputs);
  return op;
}

std::string graph_json(const std::string& tensors, const std::string& operators) {
  return R"({"format": "recsearch.graph", "version": 1, "name": "adv", "tensors": [)" + tensors +
         R"(], "operators": [)" + operators + "]}";
}

// The whole pipeline the CLI runs for `search`: spaces, search, check and
// independent evaluation; returns the evaluation's summary.
plan::Summary search_and_check(const ir::Graph& g, const Cluster& c, int threads = 1) {
  const auto spaces = algebra::build_op_spaces(g);
  search::SearchOptions opts;
  opts.threads = threads;
  opts.cost.memory_budget_bytes = 1e30;  // these cases are about sizes, not fitting
  const search::SearchResult r = search::run(g, spaces, c, opts);
  plan::check_plan(g, spaces, r.plan);
  const plan::Evaluation ev = plan::evaluate(g, spaces, c, r.plan, opts.cost);
  CHECK(std::isfinite(ev.summary.step_time_s));
  CHECK(ev.summary.step_time_s >= 0);
  CHECK(std::isfinite(ev.summary.memory_per_device_bytes));
  CHECK(ev.summary.step_time_s == doctest::Approx(r.eval.summary.step_time_s).epsilon(1e-9));
  return ev.summary;
}

// x -> ReLU -> ReLU -> ... (n operators), every tensor [64, 32] f32.
ir::Graph chain(std::size_t n) {
  ir::Graph g("chain");
  ir::TensorId prev = g.add_tensor("t0", {64, 32}, ir::DType::F32, ir::TensorKind::Input);
  for (std::size_t i = 1; i <= n; ++i) {
    const ir::TensorId next =
        g.add_tensor("t" + std::to_string(i), {64, 32}, ir::DType::F32, ir::TensorKind::Activation);
    g.add_operator(make_op("r" + std::to_string(i), "ReLU", {prev}, {next}));
    prev = next;
  }
  g.finalize();
  return g;
}

}  // namespace

// RECSEARCH_ADV_DEPTH shortens the chain (tools/sanitize.sh: 10^5, as the
// sanitizers make the 10^6 case take minutes).
std::size_t chain_depth() {
  const char* env = std::getenv("RECSEARCH_ADV_DEPTH");
  return env != nullptr ? std::strtoull(env, nullptr, 10) : 1'000'000;
}

TEST_CASE("a chain 10^6 operators deep is read, searched and evaluated without deep recursion") {
  const std::size_t kDepth = chain_depth();
  MESSAGE("chain depth " << kDepth);
  const ir::Graph g = chain(kDepth);
  REQUIRE(g.num_operators() == kDepth);
  const plan::Summary s = search_and_check(g, Cluster::flat(4));
  // Elementwise chain on 4 devices: every operator does the same work.
  CHECK(s.compute_s > 0);

  // Through the JSON writer and reader (a ~100 MB document).
  const std::string text = io::graph_to_json(g, -1);
  const ir::Graph back = io::parse_graph(text, kFile);
  CHECK(back.num_operators() == kDepth);
  CHECK(back.op(static_cast<ir::OpId>(kDepth - 1)).name == "r" + std::to_string(kDepth));
}

TEST_CASE("JSON nested 10^6 levels deep is a parse error at a byte offset, not a stack overflow") {
  const std::string deep = std::string(1'000'000, '[') + std::string(1'000'000, ']');
  const Error e = error_of([&] { (void)io::parse_graph(deep, kFile); });
  CHECK(e.code() == Errc::kParse);
  CHECK(e.detail().find("at byte") != std::string::npos);
  const Error c = error_of([&] { (void)io::parse_cluster(deep, kFile); });
  CHECK(c.code() == Errc::kParse);
}

TEST_CASE("an operator with 10^4 inputs") {
  constexpr int kInputs = 10'000;
  ir::Graph g("wide");
  std::vector<ir::TensorId> ins;
  for (int i = 0; i < kInputs; ++i)
    ins.push_back(g.add_tensor("x" + std::to_string(i), {8, 16}, ir::DType::F32));
  const ir::TensorId out =
      g.add_tensor("y", {8, 16 * kInputs}, ir::DType::F32, ir::TensorKind::Activation);
  g.add_operator(make_op("cat", "Concat", ins, {out}));
  ir::Graph bad = g;
  // Axis 0 (the default) does not match an output that grew along axis 1.
  bad.finalize();
  const Error e = error_of([&] { (void)algebra::build_op_spaces(bad); });
  CHECK(e.code() == Errc::kShape);
  CHECK(e.json_path().rfind("/operators/0", 0) == 0);

  // The same operator, read from a file with axis 1: searched and evaluated.
  std::string tensors, inputs;
  for (int i = 0; i < kInputs; ++i) {
    tensors += R"({"name": "x)" + std::to_string(i) + R"(", "shape": [8, 16]},)";
    inputs += std::string(i ? "," : "") + "\"x" + std::to_string(i) + "\"";
  }
  tensors += R"({"name": "y", "shape": [8, )" + std::to_string(16 * kInputs) + "]}";
  const std::string text =
      graph_json(tensors, R"({"name": "cat", "type": "Concat", "attrs": {"axis": 1}, "inputs": [)" +
                              inputs + R"(], "outputs": ["y"]})");
  const ir::Graph read = io::parse_graph(text, kFile);
  CHECK(read.op(0).inputs.size() == static_cast<std::size_t>(kInputs));
  search_and_check(read, Cluster::flat(8));

  // 10^4 inputs to an elementwise Add (two at most) is a clear error.
  const std::string add = graph_json(tensors, R"({"name": "add", "type": "Add", "inputs": [)" +
                                                  inputs + R"(], "outputs": ["y"]})");
  const ir::Graph wrong = io::parse_graph(add, kFile);
  const Error a = error_of([&] { (void)algebra::build_op_spaces(wrong); });
  CHECK(exit_code(a.code()) == 1);
  CHECK(a.json_path().rfind("/operators/0", 0) == 0);
}

TEST_CASE("shapes whose element count overflows 64 bits are rejected with their path") {
  // 2^32 * 2^32 * 16 = 2^68 elements.
  const std::string text = graph_json(
      R"({"name": "x", "shape": [4294967296, 4294967296, 16]}, {"name": "y", "shape": [4]})",
      R"({"name": "r", "type": "ReLU", "inputs": ["y"], "outputs": ["y2"]})");
  const Error e = error_of([&] { (void)io::parse_graph(text, kFile); });
  CHECK(e.code() == Errc::kShape);
  CHECK(e.json_path() == "/tensors/0/shape");
  CHECK(e.file() == kFile);

  // Each dim fits, the product does not: 2^62 * 4.
  const std::string text2 = graph_json(R"({"name": "x", "shape": [4611686018427387904, 4]})", "");
  CHECK(error_of([&] { (void)io::parse_graph(text2, kFile); }).json_path() == "/tensors/0/shape");

  // A dim beyond int64 at all is not silently wrapped.
  const std::string text3 = graph_json(R"({"name": "x", "shape": [18446744073709551616]})", "");
  const Error e3 = error_of([&] { (void)io::parse_graph(text3, kFile); });
  CHECK(exit_code(e3.code()) == 1);

  // The largest shape that fits: search and evaluation stay finite (doubles).
  ir::Graph g("huge");
  const auto x = g.add_tensor("x", {std::int64_t{1} << 31, std::int64_t{1} << 31}, ir::DType::F64);
  const auto w =
      g.add_tensor("w", {std::int64_t{1} << 31, 2}, ir::DType::F64, ir::TensorKind::Parameter);
  const auto y =
      g.add_tensor("y", {std::int64_t{1} << 31, 2}, ir::DType::F64, ir::TensorKind::Activation);
  g.add_operator(make_op("mm", "MatMul", {x, w}, {y}));
  g.finalize();
  search_and_check(g, Cluster::flat(1024));
}

TEST_CASE("zero-size dims are rejected where they enter, with their path") {
  const std::string text = graph_json(
      R"({"name": "x", "shape": [0, 16]}, {"name": "w", "shape": [16, 8], "kind": "parameter"},
         {"name": "y", "shape": [0, 8]})",
      R"({"name": "mm", "type": "MatMul", "inputs": ["x", "w"], "outputs": ["y"]})");
  const Error e = error_of([&] { (void)io::parse_graph(text, kFile); });
  CHECK(e.code() == Errc::kShape);
  CHECK(e.json_path() == "/tensors/0/shape/0");

  // Built through the API (as the C API and importers do), the operator
  // space check rejects it the same way instead of dividing by zero later.
  ir::Graph g("zero");
  const auto x = g.add_tensor("x", {0, 16}, ir::DType::F32);
  const auto w = g.add_tensor("w", {16, 8}, ir::DType::F32, ir::TensorKind::Parameter);
  const auto y = g.add_tensor("y", {0, 8}, ir::DType::F32, ir::TensorKind::Activation);
  g.add_operator(make_op("mm", "MatMul", {x, w}, {y}));
  g.finalize();
  std::vector<algebra::OpSpace> spaces;
  try {
    spaces = algebra::build_op_spaces(g);
  } catch (const Error& z) {
    CHECK(exit_code(z.code()) == 1);
    CHECK(!z.json_path().empty());
    return;
  }
  // Accepted: then every figure must still be finite for every device count.
  for (const std::int64_t n : {1, 2, 6, 7}) {
    CAPTURE(n);
    search_and_check(g, Cluster::flat(n));
  }
}

TEST_CASE("NaN, infinite, zero and negative bandwidths are cluster errors with their path") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  for (const double bw : {nan, inf, -inf, 0.0, -1.0}) {
    CAPTURE(bw);
    const Error e = error_of([&] {
      Level gpu;
      gpu.name = "gpu";
      gpu.size = 8;
      gpu.bandwidth_GBps = bw;
      (void)Cluster("c", {gpu});
    });
    CHECK(e.code() == Errc::kCluster);
    CHECK(e.json_path() == "/levels/0/bandwidth_GBps");
  }
  for (const double peak : {nan, inf, 0.0}) {
    CAPTURE(peak);
    DeviceSpec d;
    d.peak_TFLOPs = peak;
    CHECK(error_of([&] { (void)Cluster::flat(8, d); }).code() == Errc::kCluster);
  }
  // JSON has no NaN; 1e999 overflows the reader's double: a parse error.
  const Error e = error_of([&] {
    (void)io::parse_cluster(R"({"format": "recsearch.cluster", "version": 1,
      "levels": [{"name": "gpu", "size": 8, "bandwidth_GBps": 1e999}]})",
                            kFile);
  });
  CHECK(exit_code(e.code()) == 1);
  CHECK(e.file() == kFile);
  for (const char* bad : {"0", "-5", "NaN", "\"fast\"", "null"}) {
    CAPTURE(bad);
    const Error b = error_of([&] {
      (void)io::parse_cluster(std::string(R"({"format": "recsearch.cluster", "version": 1,
        "levels": [{"name": "gpu", "size": 8, "bandwidth_GBps": )") +
                                  bad + "}]}",
                              kFile);
    });
    CHECK(exit_code(b.code()) == 1);
    if (b.code() != Errc::kParse) CHECK(b.json_path() == "/levels/0/bandwidth_GBps");
  }
}

TEST_CASE("device counts 0, 1, 2^31-1 (prime), 2^31 and 2^31+1") {
  CHECK(error_of([] { (void)Cluster::flat(0); }).code() == Errc::kCluster);
  CHECK(error_of([] { (void)Cluster::flat(-3); }).code() == Errc::kCluster);
  CHECK(error_of([] { (void)Cluster::flat(kMaxDevices + 1); }).code() == Errc::kCluster);
  CHECK(error_of([] { (void)Cluster::mesh({65536, 65537}); }).code() == Errc::kCluster);

  const ir::Graph g = chain(8);
  const plan::Summary one = search_and_check(g, Cluster::flat(1));
  CHECK(one.communication_s == 0);

  const Cluster prime = Cluster::flat(2147483647);
  REQUIRE(prime.cuts().size() == 1);
  CHECK(prime.cuts()[0].size == 2147483647);
  search_and_check(g, prime);

  const Cluster max = Cluster::flat(kMaxDevices);
  CHECK(max.cuts().size() == 31);
  search_and_check(g, max);
  // A plan written for 2^31 - 1 devices reads back and evaluates the same.
  const auto spaces = algebra::build_op_spaces(g);
  search::SearchOptions opts;
  opts.threads = 2;
  const auto r = search::run(g, spaces, prime, opts);
  const std::string text = io::plan_to_json(g, spaces, prime, r.plan, r.eval);
  const plan::Plan p = io::parse_plan(text, kFile, g, spaces, prime.cuts());
  CHECK(plan::evaluate(g, spaces, prime, p, opts.cost).summary.step_time_s ==
        doctest::Approx(r.eval.summary.step_time_s));
}

TEST_CASE("duplicate names and self-loops are errors with their path") {
  const Error dt = error_of([] {
    (void)io::parse_graph(
        graph_json(R"({"name": "x", "shape": [2]}, {"name": "x", "shape": [2]})", ""), kFile);
  });
  CHECK(dt.code() == Errc::kDuplicate);
  CHECK(dt.json_path() == "/tensors/1/name");

  const Error dop = error_of([] {
    (void)io::parse_graph(
        graph_json(
            R"({"name": "x", "shape": [2]}, {"name": "y", "shape": [2]}, {"name": "z", "shape": [2]})",
            R"({"name": "a", "type": "ReLU", "inputs": ["x"], "outputs": ["y"]},
                      {"name": "a", "type": "ReLU", "inputs": ["y"], "outputs": ["z"]})"),
        kFile);
  });
  CHECK(dop.code() == Errc::kDuplicate);
  CHECK(dop.json_path().rfind("/operators/1", 0) == 0);

  // One operator reading its own output.
  const Error self = error_of([] {
    (void)io::parse_graph(
        graph_json(R"({"name": "x", "shape": [2]})",
                   R"({"name": "a", "type": "ReLU", "inputs": ["x"], "outputs": ["x"]})"),
        kFile);
  });
  CHECK(exit_code(self.code()) == 1);
  CHECK(self.json_path().rfind("/operators/0", 0) == 0);

  // Two operators feeding each other.
  const Error loop = error_of([] {
    (void)io::parse_graph(
        graph_json(R"({"name": "x", "shape": [2]}, {"name": "y", "shape": [2]})",
                   R"({"name": "a", "type": "ReLU", "inputs": ["y"], "outputs": ["x"]},
                      {"name": "b", "type": "ReLU", "inputs": ["x"], "outputs": ["y"]})"),
        kFile);
  });
  CHECK(loop.code() == Errc::kCycle);
  CHECK(loop.json_path().rfind("/operators/", 0) == 0);

  // The same tensor twice among one operator's outputs.
  const Error twice = error_of([] {
    (void)io::parse_graph(
        graph_json(R"({"name": "x", "shape": [2]}, {"name": "y", "shape": [2]})",
                   R"({"name": "a", "type": "Split", "inputs": ["x"], "outputs": ["y", "y"]})"),
        kFile);
  });
  CHECK(exit_code(twice.code()) == 1);
  CHECK(twice.json_path().rfind("/operators/0", 0) == 0);
}

TEST_CASE("unicode names survive the graph and plan round trip; invalid UTF-8 is a parse error") {
  // Escaped and raw UTF-8, a name with a JSON-pointer '/' and '~', an emoji
  // (a surrogate pair when escaped).
  const std::string text = graph_json(
      R"({"name": "\u5f20\u91cf/x~1", "shape": [64, 32]},
         {"name": "w\u00e9ight", "shape": [32, 32], "kind": "parameter"},
         {"name": "ausgabe-ü-😀", "shape": [64, 32]})",
      R"({"name": "\ud83d\ude00 matmul", "type": "MatMul", "inputs": ["张量/x~1", "wéight"],
          "outputs": ["ausgabe-ü-😀"]})");
  const ir::Graph g = io::parse_graph(text, kFile);
  CHECK(g.tensors()[0].name == "张量/x~1");
  CHECK(g.op(0).name == "😀 matmul");
  const std::string again = io::graph_to_json(g);
  CHECK(io::graph_to_json(io::parse_graph(again, kFile)) == again);

  const Cluster c = Cluster::flat(4);
  const auto spaces = algebra::build_op_spaces(g);
  search::SearchOptions opts;
  const auto r = search::run(g, spaces, c, opts);
  const std::string plan_text = io::plan_to_json(g, spaces, c, r.plan, r.eval);
  const plan::Plan p = io::parse_plan(plan_text, kFile, g, spaces, c.cuts());
  CHECK(p.cuts == r.plan.cuts);

  // Raw bytes that are not UTF-8 (a lone continuation byte, a truncated
  // sequence) in a name.
  for (const std::string& bad :
       {std::string("\x80"), std::string("\xe5\xbc"), std::string("\xff")}) {
    const std::string t = graph_json(R"({"name": "x)" + bad + R"(", "shape": [2]})", "");
    const Error e = error_of([&] { (void)io::parse_graph(t, kFile); });
    CHECK(e.code() == Errc::kParse);
    CHECK(e.detail().find("at byte") != std::string::npos);
  }
  // An escaped lone surrogate.
  const Error s = error_of(
      [] { (void)io::parse_graph(graph_json(R"({"name": "\ud800", "shape": [2]})", ""), kFile); });
  CHECK(s.code() == Errc::kParse);
  // An empty name and an embedded NUL.
  const Error empty = error_of(
      [] { (void)io::parse_graph(graph_json(R"({"name": "", "shape": [2]})", ""), kFile); });
  CHECK(empty.json_path() == "/tensors/0/name");
}

TEST_CASE("every prefix of a graph, cluster and plan file fails at a byte offset within it") {
  const std::string graph = graph_json(
      R"({"name": "x", "shape": [64, 32], "dtype": "f16"}, {"name": "w", "shape": [32, 8], "kind": "parameter", "dtype": "f16"},
         {"name": "y", "shape": [64, 8], "dtype": "f16"})",
      R"({"name": "mm", "type": "MatMul", "inputs": ["x", "w"], "outputs": ["y"], "attrs": {"transpose_b": false}})");
  const ir::Graph g = io::parse_graph(graph, kFile);
  const auto spaces = algebra::build_op_spaces(g);
  const Cluster c = Cluster::mesh({2, 3});
  search::SearchOptions opts;
  const auto r = search::run(g, spaces, c, opts);
  const std::string plan = io::plan_to_json(g, spaces, c, r.plan, r.eval);
  const std::string cluster = io::cluster_to_json(c);

  // Prefixes ending inside the closing "}\n" are the only valid ones.
  const auto check_prefixes = [](const std::string& text, const auto& read) {
    const std::size_t end = text.find_last_of('}');
    for (std::size_t n = 0; n < end; ++n) {
      CAPTURE(n);
      const Error e = error_of([&] { read(std::string_view(text).substr(0, n)); });
      CHECK(e.code() == Errc::kParse);
      CHECK(e.file() == kFile);
      const std::size_t at = e.detail().find("at byte ");
      REQUIRE(at != std::string::npos);
      CHECK(std::stoull(e.detail().substr(at + 8)) <= n);
    }
  };
  check_prefixes(graph, [](std::string_view t) { (void)io::parse_graph(t, kFile); });
  check_prefixes(cluster, [](std::string_view t) { (void)io::parse_cluster(t, kFile); });
  check_prefixes(plan,
                 [&](std::string_view t) { (void)io::parse_plan(t, kFile, g, spaces, c.cuts()); });
  // A prefix cut at the end of its text fails at exactly that offset.
  const Error e = error_of([&] { (void)io::parse_graph(graph.substr(0, 100), kFile); });
  CHECK(e.detail().find("at byte 100:") != std::string::npos);
}

TEST_CASE("a plan of another graph that shares its names is rejected, not evaluated") {
  const auto mlp = [](std::int64_t batch, const char* act) {
    return graph_json(R"({"name": "x", "shape": [)" + std::to_string(batch) + R"(, 64]},
           {"name": "w", "shape": [64, 64], "kind": "parameter"},
           {"name": "h", "shape": [)" +
                          std::to_string(batch) + R"(, 64]},
           {"name": "y", "shape": [)" +
                          std::to_string(batch) + R"(, 64]})",
                      R"({"name": "mm", "type": "MatMul", "inputs": ["x", "w"], "outputs": ["h"]},
           {"name": "act", "type": ")" +
                          std::string(act) + R"(", "inputs": ["h"], "outputs": ["y"]})");
  };
  const Cluster c = Cluster::flat(4);
  const ir::Graph g = io::parse_graph(mlp(32, "ReLU"), kFile);
  const auto spaces = algebra::build_op_spaces(g);
  search::SearchOptions opts;
  const auto r = search::run(g, spaces, c, opts);
  const std::string plan = io::plan_to_json(g, spaces, c, r.plan, r.eval);
  // Its own graph reads it back.
  CHECK(io::parse_plan(plan, kFile, g, spaces, c.cuts()).cuts == r.plan.cuts);

  // Same names, another operator type.
  const ir::Graph gelu = io::parse_graph(mlp(32, "GeLU"), kFile);
  const auto gelu_spaces = algebra::build_op_spaces(gelu);
  const Error t = error_of([&] { (void)io::parse_plan(plan, kFile, gelu, gelu_spaces, c.cuts()); });
  CHECK(t.code() == Errc::kPlan);
  CHECK(t.json_path() == "/operators/1/type");

  // Same names and types, other shapes.
  const ir::Graph wider = io::parse_graph(mlp(48, "ReLU"), kFile);
  const auto wider_spaces = algebra::build_op_spaces(wider);
  const Error s =
      error_of([&] { (void)io::parse_plan(plan, kFile, wider, wider_spaces, c.cuts()); });
  CHECK(s.code() == Errc::kPlan);
  CHECK(s.json_path() == "/tensors/0/shape");
  CHECK(s.detail().find("[32, 64]") != std::string::npos);

  // A tensor the graph does not have.
  std::string renamed = plan;
  const std::size_t at = renamed.find(R"("name": "y")", renamed.find(R"("tensors")"));
  REQUIRE(at != std::string::npos);
  renamed.replace(at, 11, R"("name": "z")");
  const Error u = error_of([&] { (void)io::parse_plan(renamed, kFile, g, spaces, c.cuts()); });
  CHECK(u.code() == Errc::kUnknownName);
  CHECK(u.json_path().rfind("/tensors/", 0) == 0);
}
