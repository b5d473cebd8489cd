// SPDX-License-Identifier: Apache-2.0
// Pipelined plans in `recsearch search --stages N|auto` and `recsearch eval`
// (docs/pipeline.md): the search and evaluation of stages on device groups,
// and the plan file with its "pipeline" section. commands.cpp hands over to
// these once the graph, cluster and cost settings are read.
#pragma once

#include <string>
#include <string_view>

#include "commands.hpp"
#include "recsearch/problem.hpp"
#include "recsearch/search/options.hpp"

namespace recsearch::cli {

// `--stages`: "auto" -> 0 (searched, v searched too), N >= 1 -> N. Throws
// Error(kUsage) naming the text otherwise.
void apply_stages(const std::string& text, search::SearchOptions& opts);

// Whether the search must go through the pipeline search (--stages given
// and not 1).
[[nodiscard]] bool pipeline_requested(const search::SearchOptions& opts) noexcept;

// Runs search::run_pipeline and writes the plan (a plain plan file when one
// device group wins).
int run_pipeline_search(const Problem& problem, const Cluster& cluster,
                        const search::SearchOptions& opts, const SearchArgs& a);

// Whether a plan file text has a "pipeline" section.
[[nodiscard]] bool is_pipeline_plan(std::string_view plan_text, const std::string& source);

// Reads the pipeline plan, evaluates it and writes it as `eval` does.
int run_pipeline_eval(const Problem& problem, const Cluster& cluster, const CostParams& cost,
                      std::string_view plan_text, const std::string& plan_source,
                      const EvalArgs& a);

}  // namespace recsearch::cli
