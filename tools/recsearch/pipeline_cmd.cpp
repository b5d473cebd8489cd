// SPDX-License-Identifier: Apache-2.0
// The pipelined side of `search` and `eval` (pipeline_cmd.hpp): every
// figure comes from the library (search::run_pipeline,
// plan::evaluate_pipeline), every file from io/pipeline_io.hpp.
#include "pipeline_cmd.hpp"

#include <charconv>
#include <iostream>
#include <utility>

#include "recsearch/error.hpp"
#include "recsearch/io/pipeline_io.hpp"
#include "recsearch/plan/pipeline.hpp"
#include "recsearch/report/report.hpp"
#include "recsearch/search/pipeline.hpp"
#include "recsearch/solution.hpp"

namespace recsearch::cli {

void apply_stages(const std::string& text, search::SearchOptions& opts) {
  if (text == "auto") {
    opts.pipeline_stages = 0;
    opts.pipeline_virtual_stages = 0;
    return;
  }
  // N, or NxV: N device groups with V interleaved stages each (Megatron-LM's
  // virtual pipeline stages), both pinned.
  const auto bad = [&] {
    return Error(Errc::kUsage,
                 "--stages '" + text + "': expected a positive integer, NxV or 'auto'");
  };
  const std::size_t x = text.find('x');
  const auto number = [&](std::string_view s) {
    std::int64_t n = 0;
    const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
    if (ec != std::errc{} || end != s.data() + s.size() || n < 1) throw bad();
    return n;
  };
  const std::string_view all(text);
  opts.pipeline_stages = number(all.substr(0, x));
  if (x != std::string::npos) opts.pipeline_virtual_stages = number(all.substr(x + 1));
}

bool pipeline_requested(const search::SearchOptions& opts) noexcept {
  return opts.pipeline_stages != 1;
}

int run_pipeline_search(const Problem& problem, const Cluster& cluster,
                        const search::SearchOptions& opts, const SearchArgs& a) {
  search::PipelineResult r = search::run_pipeline(problem.graph(), problem.spaces(), cluster, opts);
  if (!a.quiet)
    std::cerr << "recsearch: pipeline search: " << r.candidates << " candidates, "
              << r.stage_searches << " stage searches, " << r.search_time_s << " s; "
              << r.plan.groups << " device groups x " << r.plan.virtual_stages << ", "
              << r.plan.microbatches << " microbatches, step " << r.eval.summary.step_time_s
              << " s\n";
  if (r.plan.groups == 1) {
    const Solution solution(problem, cluster, std::move(r.single));
    solution.write(a.output, a.format == "table" ? PlanFormat::Table : PlanFormat::Json);
    return 0;
  }
  const ir::Graph& g = problem.graph();
  write_output(a.output,
               a.format == "table"
                   ? report::pipeline_to_table(g, problem.spaces(), cluster, r.plan, r.eval)
                   : io::pipeline_to_json(g, problem.spaces(), cluster, r.plan, r.eval));
  return 0;
}

bool is_pipeline_plan(std::string_view plan_text, const std::string& source) {
  // The full parse only for files that can have the section at all.
  return plan_text.find("\"pipeline\"") != std::string_view::npos &&
         io::plan_has_pipeline(plan_text, source);
}

int run_pipeline_eval(const Problem& problem, const Cluster& cluster, const CostParams& cost,
                      std::string_view plan_text, const std::string& plan_source,
                      const EvalArgs& a) {
  plan::PipelinePlan pp =
      io::parse_pipeline(plan_text, plan_source, problem.graph(), problem.spaces(), cluster);
  if (a.mode) {
    const Mode mode = *a.mode == "infer" ? Mode::Infer : Mode::Train;
    for (plan::Stage& s : pp.stages) s.plan.mode = mode;
  }
  const plan::PipelineEvaluation pe =
      plan::evaluate_pipeline(problem.graph(), problem.spaces(), cluster, pp, cost);
  const ir::Graph& g = problem.graph();
  write_output(a.output, a.format == "table"
                             ? report::pipeline_to_table(g, problem.spaces(), cluster, pp, pe)
                             : io::pipeline_to_json(g, problem.spaces(), cluster, pp, pe));
  return 0;
}

}  // namespace recsearch::cli
