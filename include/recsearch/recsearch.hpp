// The umbrella header of the recsearch C++ API: graph IR, dimension algebra,
// cluster, cost model, search, plans and their evaluation, and file I/O.
//
//   #include <recsearch/recsearch.hpp>
//
//   recsearch::CostParams cost;
//   auto graph = recsearch::io::read_graph_file("model.json", &cost);
//   auto spaces = recsearch::algebra::build_op_spaces(graph);
//   auto cluster = recsearch::Cluster::mesh({64, 8});
//   recsearch::search::SearchOptions opts;
//   opts.cost = cost;
//   auto result = recsearch::search::run(graph, spaces, cluster, opts);
//   std::string plan = recsearch::io::plan_to_json(graph, spaces, cluster, result.plan,
//                                                  result.eval);
//
// Every header includes only the standard library: nlohmann_json, oneTBB and
// Boost stay inside the compiled library.
#pragma once

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/cluster.hpp"
#include "recsearch/cost/cost_params.hpp"
#include "recsearch/cost/model.hpp"
#include "recsearch/error.hpp"
#include "recsearch/io/json_io.hpp"
#include "recsearch/ir/attrs.hpp"
#include "recsearch/ir/graph.hpp"
#include "recsearch/ir/op_kind.hpp"
#include "recsearch/ir/tensor.hpp"
#include "recsearch/plan/evaluator.hpp"
#include "recsearch/plan/plan.hpp"
#include "recsearch/search/options.hpp"
#include "recsearch/search/search.hpp"
#include "recsearch/version.h"

namespace recsearch {

// Library version, "major.minor.patch".
inline constexpr const char* kVersion = RS_VERSION_STRING;

}  // namespace recsearch
