// SPDX-License-Identifier: Apache-2.0
// `recsearch show PLAN --graph GRAPH (--html OUT | --dot OUT)`: draws a
// saved plan. The plan is read back and evaluated exactly as `eval` does
// (on the cluster the plan records, or the one given), and the report
// library renders that evaluation; nothing here computes a number.
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "pipeline_cmd.hpp"
#include "recsearch/algebra/op_space.hpp"
#include "recsearch/cluster.hpp"
#include "recsearch/cost/cost_params.hpp"
#include "recsearch/error.hpp"
#include "recsearch/io/json_io.hpp"
#include "recsearch/io/onnx.hpp"
#include "recsearch/io/pipeline_io.hpp"
#include "recsearch/plan/evaluator.hpp"
#include "recsearch/plan/pipeline.hpp"
#include "recsearch/plan/plan.hpp"
#include "recsearch/report/report.hpp"
#include "recsearch/solution.hpp"
#include "subcommand.hpp"

namespace recsearch::cli {
namespace {

struct ShowArgs {
  std::string plan;
  std::string graph;
  ReadOptions read;
  std::optional<std::string> html;
  std::optional<std::string> dot;
  ClusterArgs cluster;
  std::optional<std::string> cost_file;
  bool whole_graph = false;  // DOT: every copy of a repeated block
  std::size_t stage = 0;     // a pipelined plan: the stage drawn
};

// A pipelined plan: the page opens with the stage strip and draws stage
// a.stage's operators on its device group; the DOT graph is that stage's.
int show_pipeline(const ShowArgs& a, const Problem& problem, const Cluster& cluster,
                  const CostParams& cost, std::string_view plan_text,
                  const std::string& plan_source) {
  const plan::PipelinePlan pp =
      io::parse_pipeline(plan_text, plan_source, problem.graph(), problem.spaces(), cluster);
  if (a.stage >= pp.stages.size())
    throw Error(Errc::kUsage, "--stage " + std::to_string(a.stage) + ": the plan has " +
                                  std::to_string(pp.stages.size()) + " stages");
  const plan::PipelineEvaluation pe =
      plan::evaluate_pipeline(problem.graph(), problem.spaces(), cluster, pp, cost);
  const plan::Stage& st = pp.stages[a.stage];
  const plan::StageGraph sg =
      plan::stage_graph(problem.graph(), problem.spaces(), st.first, st.last);
  const Cluster group = plan::stage_cluster(cluster, pp.groups);
  const report::ReportInput in{sg.graph, sg.spaces, group, st.plan, pe.stages.at(a.stage)};
  const report::PipelineStrip strip = report::pipeline_strip(problem.graph(), pp, pe, a.stage);
  if (a.html) write_output(*a.html, report::plan_to_html(in, &strip));
  if (a.dot) write_output(*a.dot, report::plan_to_dot(in, {.whole_graph = a.whole_graph}));
  return 0;
}

int run_show(const ShowArgs& a) {
  if (!a.html && !a.dot) throw Error(Errc::kUsage, "give --html OUT.html and/or --dot OUT.dot");
  if (a.cluster.count() > 1)
    throw Error(Errc::kUsage, "give only one of --devices, --mesh and --cluster");
  if (a.html) check_output_writable(*a.html);
  if (a.dot) check_output_writable(*a.dot);
  if (a.graph == "-" && a.plan == "-")
    throw Error(Errc::kUsage, "GRAPH and PLAN cannot both be read from stdin");
  if (a.html && a.dot && *a.html == "-" && *a.dot == "-")
    throw Error(Errc::kUsage, "--html and --dot cannot both write to stdout");

  const std::string plan_source = source_name(a.plan);
  const Problem problem = load_problem(a.graph, /*quiet=*/true, a.read);
  CostParams cost = problem.cost();
  const std::string plan_text = io::read_text_file(a.plan);
  const Cluster cluster = cluster_for_plan(a.cluster, plan_text, plan_source, cost);
  apply_cost_file(a.cost_file, cost);
  if (is_pipeline_plan(plan_text, plan_source))
    return show_pipeline(a, problem, cluster, cost, plan_text, plan_source);
  const Solution solution =
      evaluate(problem, problem.parse_plan(plan_text, plan_source, cluster), cluster, cost);
  const report::ReportInput in{problem.graph(), problem.spaces(), cluster, solution.plan(),
                               solution.evaluation()};
  if (a.html) write_output(*a.html, report::plan_to_html(in));
  if (a.dot) write_output(*a.dot, report::plan_to_dot(in, {.whole_graph = a.whole_graph}));
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
      cmd->add_option("--html", *html, "write the HTML report here ('-' for stdout)")
          ->type_name("OUT.html");
  CLI::Option* dot_opt = cmd->add_option("--dot", *dot, "write the DOT graph here ('-' for stdout)")
                             ->type_name("OUT.dot");
  cmd->add_flag("--whole-graph", a->whole_graph,
                "DOT: draw every copy of a repeated block (by default a graph of more than " +
                    std::to_string(report::kFoldDotOperators) + " operators draws one)");
  cmd->add_option("--stage", a->stage,
                  "a pipelined plan: the stage whose operators are drawn (default 0)")
      ->type_name("N");
  auto g = std::make_shared<GraphOptions>();
  add_graph_options(cmd, *g);
  add_cluster_options(cmd, *c);
  CLI::Option* cost_opt =
      cmd->add_option("--cost", *cost, "cost coefficients JSON file")->type_name("FILE");
  reg.push_back({cmd, [=] {
                   a->cluster = c->args();
                   a->read = g->read_options();
                   if (html_opt->count() > 0) a->html = *html;
                   if (dot_opt->count() > 0) a->dot = *dot;
                   if (cost_opt->count() > 0) a->cost_file = *cost;
                   return run_show(*a);
                 }});
}

}  // namespace recsearch::cli
