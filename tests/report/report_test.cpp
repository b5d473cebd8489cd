// SPDX-License-Identifier: Apache-2.0
// Plan reports: the HTML page's data block carries exactly the evaluator's
// numbers, the communication breakdown adds up, names cannot break out of
// the page, nothing is fetched from the network, and the DOT graph has one
// node per operator and a red edge per layout redistribution.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdlib>
#include <regex>
#include <set>
#include <string>

#include <nlohmann/json.hpp>  // reads the page's data block back

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/io/json_io.hpp"
#include "recsearch/report/report.hpp"
#include "recsearch/search/search.hpp"

using namespace recsearch;

namespace {

std::string data_path(const std::string& rel) {
  const char* d = std::getenv("RECSEARCH_DATA");
  return std::string(d ? d : "data") + "/" + rel;
}

struct Fixture {
  ir::Graph g;
  std::vector<algebra::OpSpace> spaces;
  Cluster cluster;
  search::SearchResult res;

  Fixture(ir::Graph graph, Cluster c)
      : g(std::move(graph)),
        spaces(algebra::build_op_spaces(g)),
        cluster(std::move(c)),
        res(search::run(g, spaces, cluster, {})) {}
  [[nodiscard]] report::ReportInput input() const {
    return {g, spaces, cluster, res.plan, res.eval};
  }
};

nlohmann::json data_block(const std::string& html) {
  const std::string open = "<script type=\"application/json\" id=\"plan-data\">";
  const std::size_t a = html.find(open);
  REQUIRE(a != std::string::npos);
  const std::size_t b = html.find("</script>", a);
  REQUIRE(b != std::string::npos);
  return nlohmann::json::parse(html.substr(a + open.size(), b - a - open.size()));
}

bool close(double a, double b) {
  return std::abs(a - b) <= 1e-12 * std::max(std::abs(a), std::abs(b));
}

}  // namespace

TEST_CASE("report: HTML data block holds the evaluator's numbers") {
  Fixture f(io::read_graph_file(data_path("graphs/gpt2_block.json")), Cluster::flat(64));
  const report::ReportInput in = f.input();
  const std::string html = report::plan_to_html(in);
  const nlohmann::json d = data_block(html);
  const plan::Summary& s = f.res.eval.summary;
  CHECK(d["summary"]["step_time_s"].get<double>() == s.step_time_s);
  CHECK(d["summary"]["compute_s"].get<double>() == s.compute_s);
  CHECK(d["summary"]["communication_s"].get<double>() == s.communication_s);
  CHECK(d["summary"]["memory_per_device_bytes"].get<double>() == s.memory_per_device_bytes);
  CHECK(d["devices"].get<std::int64_t>() == 64);
  REQUIRE(d["operators"].size() == f.g.num_operators());
  REQUIRE(d["redistributions"].size() == f.res.eval.events.size());
  const std::vector<report::CommBreakdown> br = report::comm_breakdown(in);
  double comm_total = 0;
  for (std::size_t o = 0; o < f.g.num_operators(); ++o) {
    const auto& j = d["operators"][o];
    CHECK(j["name"] == f.g.op(static_cast<ir::OpId>(o)).name);
    CHECK(j["compute_s"].get<double>() == f.res.eval.op_costs[o].compute_s);
    CHECK(j["communication_s"].get<double>() == f.res.eval.op_costs[o].communication_s);
    // The split by reason adds up to the evaluator's per-operator total.
    const double parts = br[o].layout_s + br[o].gradient_s + br[o].halo_s + br[o].output_s;
    CHECK(close(parts, f.res.eval.op_costs[o].communication_s));
    comm_total += parts;
  }
  CHECK(close(comm_total, s.communication_s));
  for (std::size_t i = 0; i < f.res.eval.events.size(); ++i) {
    CHECK(d["redistributions"][i]["bytes"].get<double>() == f.res.eval.events[i].bytes);
    CHECK(d["redistributions"][i]["seconds"].get<double>() == f.res.eval.events[i].seconds);
  }
  // Self-contained: no external scripts, styles, images or fonts.
  CHECK(html.find("<link") == std::string::npos);
  CHECK(html.find(" src=") == std::string::npos);
  CHECK(html.find("@import") == std::string::npos);
  CHECK(html.find("url(") == std::string::npos);
  std::regex http("https?://[^\"]*");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), http); it != std::sregex_iterator();
       ++it) {
    CHECK(it->str() == "http://www.w3.org/2000/svg");  // a namespace name, never fetched
  }
}

TEST_CASE("report: strategy classes colour every operator; the replicated class is grey") {
  Fixture f(io::read_graph_file(data_path("graphs/ffn.json")), Cluster::flat(1));
  const report::ColourClasses c = report::colour_classes(f.input());
  REQUIRE(c.names.size() == 1);
  CHECK(c.names[0] == "replicated");
  CHECK(c.colours[0] == "#d9d9d9");
  Fixture g(io::read_graph_file(data_path("graphs/bert_large.json")), Cluster::mesh({4, 8}));
  const report::ColourClasses cb = report::colour_classes(g.input());
  CHECK(cb.names.size() <= report::kMaxColourClasses);
  CHECK(cb.of_op.size() == g.g.num_operators());
  std::set<std::string> distinct(cb.colours.begin(), cb.colours.end());
  CHECK(distinct.size() == cb.colours.size());
  for (std::size_t o = 0; o < g.g.num_operators(); ++o) {
    const std::string sig = report::cut_signature(g.input(), static_cast<ir::OpId>(o));
    if (cb.names[cb.of_op[o]] != "other") CHECK(cb.names[cb.of_op[o]] == sig);
  }
}

TEST_CASE("report: names cannot break out of the page or the DOT string") {
  ir::Graph g("evil </script><script>alert(1)</script>");
  const auto x = g.add_tensor("x\"<b>", {8, 16}, ir::DType::F32, ir::TensorKind::Input);
  const auto w = g.add_tensor("w", {16, 4}, ir::DType::F32, ir::TensorKind::Parameter);
  const auto y = g.add_tensor("y", {8, 4}, ir::DType::F32, ir::TensorKind::Activation);
  ir::Operator op;
  op.name = "</script><img onerror=x>\\\"";
  op.type = "MatMul";
  op.inputs = {x, w};
  op.outputs = {y};
  g.add_operator(std::move(op));
  g.finalize();
  Fixture f(std::move(g), Cluster::flat(2));
  const std::string html = report::plan_to_html(f.input());
  CHECK(html.find("</script><script>alert") == std::string::npos);
  CHECK(html.find("<img onerror") == std::string::npos);
  const nlohmann::json d = data_block(html);
  CHECK(d["graph"] == "evil </script><script>alert(1)</script>");
  CHECK(d["operators"][0]["name"] == "</script><img onerror=x>\\\"");
  const std::string dot = report::plan_to_dot(f.input());
  CHECK(dot.find("\\\\\\\"") != std::string::npos);  // backslash and quote both escaped
}

TEST_CASE("report: DOT has a node per operator and marks redistributed edges") {
  // 64 devices: tensor parallelism inside the block, so layouts change.
  Fixture f(io::read_graph_file(data_path("graphs/gpt2_block.json")), Cluster::flat(64));
  const std::string dot = report::plan_to_dot(f.input());
  std::size_t nodes = 0;
  for (std::size_t o = 0; o < f.g.num_operators(); ++o) {
    if (dot.find("\n  op" + std::to_string(o) + " [label=") != std::string::npos) ++nodes;
  }
  CHECK(nodes == f.g.num_operators());
  std::set<std::pair<ir::TensorId, ir::OpId>> moved;
  for (const auto& e : f.res.eval.events) {
    if (e.reason == plan::CommReason::Layout) moved.insert({e.tensor, e.to});
  }
  std::size_t red = 0;
  for (std::size_t at = dot.find(", color=\"#d62728\""); at != std::string::npos;
       at = dot.find(", color=\"#d62728\"", at + 1)) {
    ++red;
  }
  REQUIRE(!moved.empty());
  CHECK(red == moved.size());
  CHECK(dot.rfind("}\n") == dot.size() - 2);
}
