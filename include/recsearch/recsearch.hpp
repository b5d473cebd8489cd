// SPDX-License-Identifier: Apache-2.0
// The umbrella header of the recsearch C++ API: graph IR, dimension algebra,
// cluster, cost model, search, plans and their evaluation, and file I/O.
//
//   #include <recsearch/recsearch.hpp>
//
//   auto problem = recsearch::Problem::read("model.json");   // or an .onnx model
//   auto solution = recsearch::solve(problem, recsearch::Cluster::mesh({64, 8}));
//   solution.write("plan.json");
//   std::puts(solution.summary().c_str());
//
// Problem and Solution (problem.hpp, solution.hpp) are the front door; the
// modules below them (graph IR, operator spaces, the search, plans and their
// evaluation, file I/O) stay available for tools that need the parts.
//
// Every header includes only the standard library: nlohmann_json, oneTBB and
// Boost stay inside the compiled library.
#pragma once

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/cluster.hpp"
#include "recsearch/cost/cost_model.hpp"
#include "recsearch/cost/cost_params.hpp"
#include "recsearch/cost/model.hpp"
#include "recsearch/error.hpp"
#include "recsearch/io/json_io.hpp"
#include "recsearch/io/pipeline_io.hpp"
#include "recsearch/ir/attrs.hpp"
#include "recsearch/ir/graph.hpp"
#include "recsearch/ir/op_kind.hpp"
#include "recsearch/ir/tensor.hpp"
#include "recsearch/plan/evaluator.hpp"
#include "recsearch/plan/pipeline.hpp"
#include "recsearch/plan/plan.hpp"
#include "recsearch/problem.hpp"
#include "recsearch/search/options.hpp"
#include "recsearch/search/pipeline.hpp"
#include "recsearch/search/search.hpp"
#include "recsearch/solution.hpp"
#include "recsearch/sweep.hpp"
#include "recsearch/version.h"

namespace recsearch {

// Library version, "major.minor.patch".
inline constexpr const char* kVersion = RS_VERSION_STRING;

}  // namespace recsearch
