// SPDX-License-Identifier: Apache-2.0
// Plan reports: the HTML page's data block carries exactly the evaluator's
// numbers, the communication breakdown adds up, names cannot break out of
// the page, nothing is fetched from the network, the DOT graph has one
// node per operator and a red edge per layout redistribution, and the text
// table shows cuts, summary and each parameter's ZeRO axes.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <string>

#include <nlohmann/json.hpp>  // reads the page's data block back

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/gen/generate.hpp"
#include "recsearch/io/json_io.hpp"
#include "recsearch/io/mesh_names.hpp"
#include "recsearch/report/report.hpp"
#include "recsearch/search/search.hpp"
#include "support/gen_specs.hpp"
#include "support/sample_graphs.hpp"

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
  // Each node is filled with its layout class's colour, as on the HTML page.
  const report::ColourClasses classes = report::layout_classes(f.input());
  for (std::size_t o = 0; o < f.g.num_operators(); ++o) {
    const std::size_t at = dot.find("\n  op" + std::to_string(o) + " [label=");
    const std::size_t fill = dot.find("fillcolor=\"", at);
    REQUIRE(fill != std::string::npos);
    CHECK(dot.substr(fill + 11, 7) == classes.colours[classes.of_op[o]]);
  }
  CHECK(dot.find("output layout on the named mesh") != std::string::npos);
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

namespace {

// A plan header on the cut schedule of `cluster` (no operators).
plan::Plan mesh_plan(const Cluster& cluster) {
  plan::Plan p;
  p.mesh = cluster.cuts();
  return p;
}

}  // namespace

TEST_CASE("mesh names: plan axes on the cluster's named levels") {
  // 16 x 8: c0-c3 cut `node` (16), c4-c6 cut `gpu` (8), each a factor 2.
  const Cluster c("2 levels", {{"node", 16, 50, 5}, {"gpu", 8, 450, 2}});
  const plan::Plan p = mesh_plan(c);
  using V = std::vector<std::string>;
  CHECK(io::mesh_dim_names(c, p, {0, 1, 2, 3}) == V{"node"});
  CHECK(io::mesh_dim_names(c, p, {4, 5, 6}) == V{"gpu"});
  CHECK(io::mesh_dim_names(c, p, {0, 1, 2, 3, 4, 5, 6}) == V{"node", "gpu"});
  CHECK(io::mesh_dim_names(c, p, {4}) == V{"gpu/4"});     // the outer 2 of 8
  CHECK(io::mesh_dim_names(c, p, {5, 6}) == V{"gpu%4"});  // the inner 4
  CHECK(io::mesh_dim_names(c, p, {5}) == V{"gpu/2%2"});   // a middle digit
  CHECK(io::mesh_dim_names(c, p, {0, 1}) == V{"node/4"});
  // Order is kept; a run breaks where the next axis is not the next cut.
  CHECK(io::mesh_dim_names(c, p, {3, 4}) == V{"node%2", "gpu/4"});
  CHECK(io::mesh_dim_names(c, p, {6, 4}) == V{"gpu%2", "gpu/4"});
  CHECK(io::mesh_dims_text(c, p, {0, 1, 2, 3, 4}) == "node,gpu/4");
  CHECK(io::mesh_dims_text(c, p, {}).empty());
  CHECK(io::axis_levels_text(c, p) == "c0-c3 node (16), c4-c6 gpu (8)");
  // A level of 12 is cut 2, 2, 3: the 3 is the innermost digit.
  const Cluster flat = Cluster::flat(12);
  const plan::Plan q = mesh_plan(flat);
  CHECK(io::mesh_dim_names(flat, q, {2}) == V{"device%3"});
  CHECK(io::mesh_dim_names(flat, q, {0}) == V{"device/6"});
  CHECK(io::axis_levels_text(flat, q) == "c0-c2 device (12)");
}

TEST_CASE("report: shardings and splits on the named mesh, effective parallelism") {
  // Megatron on 2 x 4: the batch on m0, the hidden dim on the whole of m1.
  const Cluster c = Cluster::mesh({2, 4});
  ir::Graph g = io::read_graph_file(data_path("graphs/ffn.json"));
  const auto spaces = algebra::build_op_spaces(g);
  search::SearchOptions o;
  o.algorithm = search::Algorithm::Megatron;
  const search::SearchResult r = search::run(g, spaces, c, o);
  const report::ReportInput in{g, spaces, c, r.plan, r.eval};
  const ir::OpId dense1 = *g.find_operator("dense1.matmul");
  CHECK(report::op_split_text(in, dense1) == "i=m0 j=m1");
  CHECK(report::tensor_sharding_text(in, *g.find_tensor("dense1.weight")) == "[-, m1]");
  CHECK(report::tensor_sharding_text(in, *g.find_tensor("x")) == "[m0, -]");
  const report::Parallelism par = report::parallelism(in);
  CHECK(par.devices == 8);
  CHECK(par.effective > 1.0);
  CHECK(par.effective <= 8.0);
  CHECK(par.idle_axes.empty());

  // Seven devices cannot split a batch of 32 or any ffn dim: data
  // parallelism replicates everything, and the line says so.
  const Cluster seven = Cluster::flat(7);
  o.algorithm = search::Algorithm::DataParallel;
  const search::SearchResult r7 = search::run(g, spaces, seven, o);
  const report::ReportInput in7{g, spaces, seven, r7.plan, r7.eval};
  CHECK(report::parallelism(in7).effective == doctest::Approx(1.0));
  CHECK(report::parallelism_text(in7) ==
        "fully replicated: no operator is cut, all 7 devices compute the same thing");

  // An axis that cuts one small operator only is flagged as partly used,
  // with its share of the compute (issue 18, item 6).
  plan::Plan partial = r.plan;
  std::size_t keep = g.num_operators();
  for (std::size_t op = 0; op < g.num_operators(); ++op)
    if (partial.cuts[op][0] != plan::kReplicated && r.eval.op_costs[op].compute_s > 0 &&
        (keep == g.num_operators() ||
         r.eval.op_costs[op].compute_s < r.eval.op_costs[keep].compute_s))
      keep = op;
  REQUIRE(keep < g.num_operators());
  for (std::size_t op = 0; op < g.num_operators(); ++op)
    if (op != keep) partial.cuts[op][0] = plan::kReplicated;
  const plan::Evaluation pe = plan::evaluate(g, spaces, c, partial, CostParams{});
  const report::ReportInput inp{g, spaces, c, partial, pe};
  const report::Parallelism pp = report::parallelism(inp);
  CHECK(pp.axis_share[0] > 0);
  CHECK(pp.axis_share[0] < report::kPartlyUsedShare);
  const std::string line = report::parallelism_text(inp);
  CHECK(line.find("partly used: c0 (m0) ") != std::string::npos);
  CHECK(line.find("c1 (") == std::string::npos);  // m1 cuts most of the compute
  CHECK(report::parallelism_text(in).find("partly used") == std::string::npos);
}

TEST_CASE("report: the table puts the summary first and folds repeated blocks") {
  Fixture f(io::read_graph_file(data_path("graphs/bert_large.json")), Cluster::mesh({4, 8}));
  const std::string t = report::plan_to_table(f.input());
  // Summary first, in this order, before any operator row.
  const std::size_t step = t.find("\nstep time "), memory = t.find("\nmemory "),
                    axes = t.find("\nmesh axes       c0-c1 m0 (4), c2-c4 m1 (8)\n"),
                    par = t.find("\nparallelism "), comm = t.find("\ncommunication by reason"),
                    top = t.find("\ntop 10 operators by time\n"),
                    tensors = t.find("\ntop 10 tensors by communication\n"),
                    ops = t.find("\noperators");
  REQUIRE(step != std::string::npos);
  CHECK(step < memory);
  CHECK(memory < axes);
  CHECK(axes < par);
  CHECK(par < comm);
  CHECK(comm < top);
  CHECK(top < tensors);
  CHECK(tensors < ops);
  CHECK(ops != std::string::npos);
  CHECK(t.find(" of a 80.00 GiB budget (") != std::string::npos);
  // No exponent anywhere: one number format per column.
  CHECK_FALSE(std::regex_search(t, std::regex("[0-9]e[-+][0-9]")));
  // Folded: the block's operators once, tagged with the block count; the
  // layers past the first block are not listed, and the rows are fewer.
  const auto rep = report::find_fold(f.input(), report::kFoldTableOperators);
  REQUIRE(rep.has_value());
  CHECK(rep->repeats >= 3);
  const std::string tag = "[x" + std::to_string(rep->repeats) + "] ";
  const std::string last_block_op =
      f.g.op(static_cast<ir::OpId>(rep->start + rep->period * (rep->repeats - 1))).name;
  const std::size_t rows_folded = static_cast<std::size_t>(std::count(t.begin(), t.end(), '\n'));
  CHECK(t.find(tag + f.g.op(static_cast<ir::OpId>(rep->start)).name) != std::string::npos);
  CHECK(t.find(last_block_op + " ") == std::string::npos);
  report::TableOptions all;
  all.every_operator = true;
  const std::string every = report::plan_to_table(f.input(), all);
  CHECK(every.find(last_block_op + " ") != std::string::npos);
  const std::size_t rows_every =
      static_cast<std::size_t>(std::count(every.begin(), every.end(), '\n'));
  CHECK(rows_every >= rows_folded + rep->period * (rep->repeats - 1) - 20);
  // A searched plan says its search time; the same plan evaluated does not
  // print "search time: 0 s".
  CHECK(t.find("\nsearch time ") != std::string::npos);
  plan::Evaluation evaluated = f.res.eval;
  evaluated.summary.search_time_s = 0;
  const report::ReportInput ein{f.g, f.spaces, f.cluster, f.res.plan, evaluated};
  CHECK(report::plan_to_table(ein).find("search time") == std::string::npos);
}

TEST_CASE("report: per-block recomputation and per-parameter ZeRO in the table and the page") {
  const ir::Graph g = io::read_graph_file(data_path("graphs/bert_large.json"));
  const auto spaces = algebra::build_op_spaces(g);
  const Cluster cluster = Cluster::flat(2);
  plan::Plan p;
  p.mode = Mode::Train;
  p.mesh = cluster.cuts();
  p.cuts.assign(g.num_operators(), std::vector<std::int16_t>(p.mesh.size(), plan::kReplicated));
  p.training.recompute = plan::Recompute::Selective;
  p.training.zero_stage = 2;
  const plan::Plan plain = p;  // plan-wide settings only
  const report::ReportInput plain_in{g, spaces, cluster, plain,
                                     plan::evaluate(g, spaces, cluster, plain, {})};
  const auto rep = report::find_fold(plain_in, report::kFoldTableOperators);
  REQUIRE(rep.has_value());
  // Full recomputation on the last 5 blocks, stage 3 on the largest parameter.
  p.training.per_op.assign(g.num_operators(), plan::Recompute::Selective);
  const std::size_t end = rep->start + rep->period * rep->repeats;
  for (std::size_t o = end - 5 * rep->period; o < end; ++o)
    p.training.per_op[o] = plan::Recompute::Full;
  ir::TensorId largest = 0;
  std::size_t params = 0;
  for (ir::TensorId t = 0; t < g.num_tensors(); ++t) {
    if (g.tensor(t).kind != ir::TensorKind::Parameter) continue;
    ++params;
    if (g.tensor(largest).kind != ir::TensorKind::Parameter ||
        g.tensor(t).bytes() > g.tensor(largest).bytes())
      largest = t;
  }
  p.training.zero_per_param.assign(g.num_tensors(), 2);
  p.training.zero_per_param[largest] = 3;
  const std::string blocks = "full on 5 of " + std::to_string(rep->repeats) +
                             " blocks, selective on " + std::to_string(rep->repeats - 5);
  CHECK(report::recompute_text(g, p.training) == blocks);
  const std::string zero = report::zero_text(g, p.training);
  CHECK(zero.rfind("3 on 1 of " + std::to_string(params) + " parameters (", 0) == 0);
  CHECK(zero.find("% of the parameter bytes), 2 on " + std::to_string(params - 1)) !=
        std::string::npos);
  // Plan-wide settings say their value alone.
  CHECK(report::recompute_text(g, plain_in.plan.training) == "selective");
  CHECK(report::zero_text(g, plain_in.plan.training) == "2");

  const plan::Evaluation ev = plan::evaluate(g, spaces, cluster, p, {});
  const report::ReportInput in{g, spaces, cluster, p, ev};
  CHECK(report::plan_to_table(in).find("recompute " + blocks + ", ZeRO stage " + zero) !=
        std::string::npos);
  const nlohmann::json d = data_block(report::plan_to_html(in));
  CHECK(d["training"]["recompute"] == "selective");
  CHECK(d["training"]["zero_stage"] == 2);
  CHECK(d["training"]["recompute_text"] == blocks);
  CHECK(d["training"]["zero_text"] == zero);
  CHECK(d["training"]["recompute_ops"].size() == 5 * rep->period);
  CHECK(d["training"]["zero_params"] == nlohmann::json{{g.tensor(largest).name, 3}});
  // Every operator listed carries its own recomputation.
  const std::vector<plan::Recompute> rc = plan::operator_recompute(g, p.training);
  REQUIRE(d["operators"].size() > 0);
  for (const auto& op : d["operators"]) {
    const auto o = op["id"].get<std::size_t>();
    CHECK(op["recompute"] == std::string(plan::recompute_name(rc[o])));
  }
  // ... and the ZeRO stages of the parameters it reads: the stage alone
  // where they share one, else each parameter's name and stage.
  bool named_largest = false;
  for (const auto& op : d["operators"]) {
    const ir::Operator& o = g.op(op["id"].get<ir::OpId>());
    std::set<int> stages;
    for (const ir::TensorId t : o.inputs)
      if (g.tensor(t).kind == ir::TensorKind::Parameter) stages.insert(t == largest ? 3 : 2);
    const std::string text = op["zero"].get<std::string>();
    if (stages.empty()) {
      CHECK(text.empty());
    } else if (stages.size() == 1) {
      CHECK(text == std::to_string(*stages.begin()));
    } else {
      CHECK(text.find(g.tensor(largest).name + " 3") != std::string::npos);
      named_largest = true;
    }
  }
  // The largest parameter's stage 3 shows on some operator that reads it.
  CHECK((named_largest || std::any_of(d["operators"].begin(), d["operators"].end(),
                                      [](const auto& op) { return op["zero"] == "3"; })));

  SUBCASE("without a repeated block, counted per operator") {
    const ir::Graph small = io::read_graph_file(data_path("graphs/gpt2_block.json"));
    plan::Training t;
    t.per_op.assign(small.num_operators(), plan::Recompute::None);
    t.per_op[0] = plan::Recompute::Full;
    CHECK(report::recompute_text(small, t) ==
          "full on 1 of " + std::to_string(small.num_operators()) + " operators, none on " +
              std::to_string(small.num_operators() - 1));
  }
}

TEST_CASE("report: DOT of a large graph draws a repeated block once, or every copy clustered") {
  Fixture f(io::read_graph_file(data_path("graphs/bert_large.json")), Cluster::mesh({4, 8}));
  REQUIRE(f.g.num_operators() > report::kFoldDotOperators);
  const auto fold = report::find_fold(f.input(), report::kFoldTableOperators);
  REQUIRE(fold.has_value());
  const std::regex node_re("\n +op[0-9]+ \\[label=");
  const auto node_count = [&](const std::string& dot) {
    return std::distance(std::sregex_iterator(dot.begin(), dot.end(), node_re),
                         std::sregex_iterator());
  };
  const auto has_node = [](const std::string& dot, std::size_t o) {
    return std::regex_search(dot, std::regex("\n +op" + std::to_string(o) + " \\[label="));
  };
  // Folded (the default past kFoldDotOperators): the first copy only, in one
  // cluster, each node tagged with the copy count.
  const std::string folded = report::plan_to_dot(f.input());
  const std::size_t shown = f.g.num_operators() - fold->period * (fold->repeats - 1);
  CHECK(static_cast<std::size_t>(node_count(folded)) == shown);
  CHECK(has_node(folded, fold->start));
  CHECK_FALSE(has_node(folded, fold->start + fold->period));  // the second copy
  CHECK(folded.find("subgraph cluster_block0 {") != std::string::npos);
  CHECK(folded.find("subgraph cluster_block1 {") == std::string::npos);
  CHECK(folded.find("[x" + std::to_string(fold->repeats) + "] ") != std::string::npos);
  CHECK(folded.find("(into the next block)") != std::string::npos);
  // No edge points at an operator that is not drawn.
  const std::regex edge_re("-> op([0-9]+) ");
  for (std::sregex_iterator it(folded.begin(), folded.end(), edge_re), end; it != end; ++it)
    CHECK(has_node(folded, std::stoul((*it)[1].str())));
  // Whole: a node per operator, a cluster per copy.
  const std::string whole = report::plan_to_dot(f.input(), {.whole_graph = true});
  CHECK(static_cast<std::size_t>(node_count(whole)) == f.g.num_operators());
  for (std::size_t b = 0; b < fold->repeats; ++b)
    CHECK(whole.find("subgraph cluster_block" + std::to_string(b) + " {") != std::string::npos);
  CHECK(whole.find("(into the next block)") == std::string::npos);
}

namespace {

// x[4,16] @ w[16,32] -> h[4,32] -> ReLU -> y, the plan file tests' graph;
// `act` names the second operator.
ir::Graph two_op_graph(const std::string& act = "act") {
  return io::parse_graph(R"({"format": "recsearch.graph", "version": 1, "name": "g",
  "tensors": [{"name": "x", "shape": [4, 16]}, {"name": "w", "shape": [16, 32], "kind": "parameter"},
              {"name": "h", "shape": [4, 32]}, {"name": "y", "shape": [4, 32]}],
  "operators": [{"name": "mm", "type": "MatMul", "inputs": ["x", "w"], "outputs": ["h"]},
                {"name": ")" +
                             act + R"(", "type": "ReLU", "inputs": ["h"], "outputs": ["y"]}]})",
                         "g.json");
}

// node 2 (c0) then gpu 4 (c1, c2).
Cluster node_gpu_cluster() {
  return Cluster("test", {Level{"node", 2, 50.0, 5.0}, Level{"gpu", 4, 450.0, 2.0}});
}

// mm cut on i over c0 and on j over c2; act replicated.
plan::Plan two_op_plan(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                       const Cluster& c) {
  return io::parse_plan(
      R"({"format": "recsearch.plan", "version": 1, "graph": "g", "operators":
         [{"name": "mm", "cuts": [{"axis": "c0", "dim": "i"}, {"axis": "c2", "dim": "j"}]}]})",
      "plan.json", g, spaces, c.cuts());
}

}  // namespace

TEST_CASE("report: the table of a hand-written plan: rows, cuts and summary") {
  const ir::Graph g = two_op_graph();
  const auto spaces = algebra::build_op_spaces(g);
  const Cluster c = node_gpu_cluster();
  const plan::Plan p = two_op_plan(g, spaces, c);
  plan::Evaluation ev = plan::evaluate(g, spaces, c, p, CostParams{});
  const std::string table = report::plan_to_table({g, spaces, c, p, ev});
  INFO(table);
  CHECK(table.find("operator") != std::string::npos);
  CHECK(table.find("MatMul") != std::string::npos);
  CHECK(table.find("[[2, 1], [1, 2]]") != std::string::npos);
  // Cuts list only the axes that cut something; "replicated" when none does.
  CHECK(table.find("c0:i c2:j ") != std::string::npos);
  CHECK(table.find("c1:") == std::string::npos);
  CHECK(std::regex_search(table, std::regex("\nact +ReLU +\\[\\[1, 1\\]\\] +replicated ")));
  CHECK(table.find("\nstep time ") != std::string::npos);
  CHECK(table.find(" per device of a ") != std::string::npos);
  CHECK(table.find("GiB") != std::string::npos);
  CHECK(table.find(" on 8 devices of test\n") != std::string::npos);
  // An evaluated plan has no search time; a searched one says it.
  CHECK(table.find("search time") == std::string::npos);
  ev.summary.search_time_s = 0.25;
  CHECK(report::plan_to_table({g, spaces, c, p, ev}).find("\nsearch time     0.2500 s\n") !=
        std::string::npos);

  // A very long name is cut with an ellipsis and does not widen the table.
  const std::string long_name(500, 'n');
  const ir::Graph g2 = two_op_graph(long_name);
  const auto spaces2 = algebra::build_op_spaces(g2);
  const plan::Plan p2 = two_op_plan(g2, spaces2, c);
  const plan::Evaluation ev2 = plan::evaluate(g2, spaces2, c, p2, CostParams{});
  const std::string t2 = report::plan_to_table({g2, spaces2, c, p2, ev2}, {.every_operator = true});
  INFO(t2);
  CHECK(t2.find(long_name) == std::string::npos);
  CHECK(t2.find("\xE2\x80\xA6") != std::string::npos);
  std::size_t start = 0;
  while (start < t2.size()) {
    const std::size_t end = t2.find('\n', start);
    CHECK(end - start < 200);
    start = end + 1;
  }
}

TEST_CASE("report: sample graphs: the table of a replicated plan") {
  const Cluster cluster = Cluster::mesh({2, 4});
  for (const std::string& file : testing::sample_graph_files(data_path(""))) {
    CAPTURE(file);
    const ir::Graph g = io::read_graph_file(file);
    const auto spaces = algebra::build_op_spaces(g);
    const std::string empty = R"({"format": "recsearch.plan", "version": 1, "operators": []})";
    const plan::Plan p = io::parse_plan(empty, "empty.json", g, spaces, cluster.cuts());
    const plan::Evaluation ev = plan::evaluate(g, spaces, cluster, p, CostParams{});
    CHECK_FALSE(report::plan_to_table({g, spaces, cluster, p, ev}).empty());
  }
}

TEST_CASE("report: each parameter's ZeRO axes in the table and the page") {
  const ir::Graph g = gen::build_graph(testing::small_gpt(2));
  const auto spaces = algebra::build_op_spaces(g);
  const Cluster c = Cluster::mesh({2, 4});
  for (const int stage : {2, 3}) {
    CAPTURE(stage);
    search::SearchOptions o;
    o.training.zero_stage = stage;
    const search::SearchResult res = search::run(g, spaces, c, o);
    const report::ReportInput in{g, spaces, c, res.plan, res.eval};
    const std::vector<int> zero = plan::parameter_zero(g, res.plan.training);
    const plan::ZeroAxes axes = plan::zero_axes(g, spaces, res.plan);
    // Every parameter's "N over dims" counted, as the summary line groups them.
    std::map<std::string, std::size_t> groups;
    for (ir::TensorId t = 0; t < g.num_tensors(); ++t) {
      if (zero[t] <= 0 || axes.of(t).empty()) continue;
      ++groups[std::to_string(zero[t]) + " over " +
               io::mesh_dims_text(
                   c, res.plan, std::vector<std::uint32_t>(axes.of(t).begin(), axes.of(t).end()))];
    }
    REQUIRE_FALSE(groups.empty());
    const std::string table = report::plan_to_table(in);
    INFO(table);
    const std::size_t line = table.find("\nZeRO axes       ZeRO ");
    REQUIRE(line != std::string::npos);
    const std::string text = table.substr(line, table.find('\n', line + 1) - line);
    for (const auto& [over, n] : groups) {
      CHECK(text.find("ZeRO " + over + " on " + std::to_string(n)) != std::string::npos);
    }
    // The page: each operator gives the stage and axes of the parameters it
    // reads; an operator reading one parameter gives exactly its text.
    const nlohmann::json d = data_block(report::plan_to_html(in));
    std::size_t checked = 0;
    for (const auto& op : d["operators"]) {
      const ir::Operator& reader = g.op(op["id"].get<ir::OpId>());
      std::vector<ir::TensorId> params;
      for (const ir::TensorId t : reader.inputs)
        if (g.tensor(t).kind == ir::TensorKind::Parameter) params.push_back(t);
      if (params.size() != 1) continue;
      const ir::TensorId t = params[0];
      std::string want = std::to_string(zero[t]);
      if (!axes.of(t).empty())
        want += " over " +
                io::mesh_dims_text(
                    c, res.plan, std::vector<std::uint32_t>(axes.of(t).begin(), axes.of(t).end()));
      CHECK(op["zero"] == want);
      ++checked;
    }
    CHECK(checked > 0);
  }
}
