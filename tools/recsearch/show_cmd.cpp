// `recsearch show PLAN --graph GRAPH (--html OUT | --dot OUT)`: draws a
// saved plan. The plan is read back and evaluated exactly as `eval` does
// (on the cluster the plan records, or the one given), and the report
// library renders that evaluation; nothing here computes a number.
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/cluster.hpp"
#include "recsearch/cost/cost_params.hpp"
#include "recsearch/error.hpp"
#include "recsearch/io/json_io.hpp"
#include "recsearch/io/onnx.hpp"
#include "recsearch/plan/evaluator.hpp"
#include "recsearch/plan/plan.hpp"
#include "recsearch/report/report.hpp"
#include "subcommand.hpp"

namespace recsearch::cli {
namespace {

struct ShowArgs {
  std::string plan;
  std::string graph;
  std::optional<std::string> html;
  std::optional<std::string> dot;
  ClusterArgs cluster;
  std::optional<std::string> cost_file;
};

int run_show(const ShowArgs& a) {
  if (!a.html && !a.dot) throw Error(Errc::kUsage, "give --html OUT.html and/or --dot OUT.dot");
  if (a.cluster.count() > 1) throw Error(Errc::kUsage, "give only one of --devices, --mesh and --cluster");
  if (a.graph == "-" && a.plan == "-")
    throw Error(Errc::kUsage, "GRAPH and PLAN cannot both be read from stdin");
  if (a.html && a.dot && *a.html == "-" && *a.dot == "-")
    throw Error(Errc::kUsage, "--html and --dot cannot both write to stdout");

  const std::string graph_source = source_name(a.graph);
  const std::string plan_source = source_name(a.plan);
  CostParams cost;
  ir::Graph graph = io::is_onnx_path(a.graph)
                        ? io::read_onnx_file(a.graph).graph
                        : io::parse_graph(io::read_text_file(a.graph), graph_source, &cost);
  std::vector<algebra::OpSpace> spaces;
  try {
    spaces = algebra::build_op_spaces(graph);
  } catch (const Error& e) {
    if (!e.file().empty()) throw;
    throw e.in_file(graph_source);
  }

  const std::string plan_text = io::read_text_file(a.plan);
  std::optional<Cluster> cluster;
  if (a.cluster.devices) cluster = Cluster::flat(*a.cluster.devices);
  if (a.cluster.mesh) cluster = Cluster::mesh(parse_mesh(*a.cluster.mesh));
  if (a.cluster.cluster_file) {
    cluster = io::parse_cluster(io::read_text_file(*a.cluster.cluster_file),
                                source_name(*a.cluster.cluster_file), &cost);
  }
  if (!cluster) cluster = io::plan_cluster(plan_text, plan_source);
  if (!cluster) {
    const std::vector<std::int64_t> sizes = io::plan_mesh_sizes(plan_text, plan_source);
    if (sizes.empty())
      throw Error(Errc::kUsage, plan_source + " records no cluster: give --devices, --mesh or --cluster");
    cluster = Cluster::mesh(sizes);
  }
  if (a.cost_file) io::parse_cost_params(io::read_text_file(*a.cost_file), source_name(*a.cost_file), cost);

  const plan::Plan p = io::parse_plan(plan_text, plan_source, graph, spaces, cluster->cuts());
  try {
    plan::check_plan(graph, spaces, p);
  } catch (const Error& e) {
    if (!e.file().empty()) throw;
    throw e.in_file(plan_source);
  }
  const plan::Evaluation ev = plan::evaluate(graph, spaces, *cluster, p, cost);
  const report::ReportInput in{graph, spaces, *cluster, p, ev};
  if (a.html) write_output(*a.html, report::plan_to_html(in));
  if (a.dot) write_output(*a.dot, report::plan_to_dot(in));
  return 0;
}

}  // namespace

void add_show_command(CLI::App& app, Registry& reg) {
  auto a = std::make_shared<ShowArgs>();
  auto c = std::make_shared<ClusterOptions>();
  auto html = std::make_shared<std::string>();
  auto dot = std::make_shared<std::string>();
  auto cost = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "show", "draw PLAN as a self-contained HTML report and/or a Graphviz DOT graph");
  cmd->add_option("PLAN", a->plan, "plan JSON file ('-' for stdin)")->required();
  cmd->add_option("-g,--graph", a->graph, "the graph the plan is for (JSON or .onnx)")
      ->required()
      ->type_name("GRAPH");
  CLI::Option* html_opt =
      cmd->add_option("--html", *html, "write the HTML report here ('-' for stdout)")->type_name("OUT.html");
  CLI::Option* dot_opt =
      cmd->add_option("--dot", *dot, "write the DOT graph here ('-' for stdout)")->type_name("OUT.dot");
  add_cluster_options(cmd, *c);
  CLI::Option* cost_opt =
      cmd->add_option("--cost", *cost, "cost coefficients JSON file")->type_name("FILE");
  reg.push_back({cmd, [=] {
                   a->cluster = c->args();
                   if (html_opt->count() > 0) a->html = *html;
                   if (dot_opt->count() > 0) a->dot = *dot;
                   if (cost_opt->count() > 0) a->cost_file = *cost;
                   return run_show(*a);
                 }});
}

}  // namespace recsearch::cli
