// SPDX-License-Identifier: Apache-2.0
// Private to the C API: what its opaque handles hold, and the one guard every
// entry point runs its body in.
//
// The guard is what keeps the promise of recsearch.h that no exception
// leaves the library: it turns recsearch::Error into the status of its
// Errc group, std::bad_alloc into RS_RUNTIME ("out of memory"), and any
// other exception into RS_INTERNAL, recording the message per thread.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/cluster.hpp"
#include "recsearch/cost/cost_model.hpp"
#include "recsearch/cost/cost_params.hpp"
#include "recsearch/error.hpp"
#include "recsearch/ir/graph.hpp"
#include "recsearch/plan/evaluator.hpp"
#include "recsearch/plan/plan.hpp"
#include "recsearch/problem.hpp"
#include "recsearch/recsearch.h"
#include "recsearch/search/options.hpp"
#include "recsearch/solution.hpp"

struct rs_graph {
  recsearch::ir::Graph draft;  // what the calls built so far
  recsearch::CostParams cost;  // the graph file's "cost" object
  std::string source;          // file or source name; empty for built graphs
  mutable std::mutex mu;       // guards `ready`
  // The finalized graph with its spaces (a recsearch::Problem), made on first
  // use and shared with every result made from it; null after a change.
  mutable std::shared_ptr<const recsearch::Problem> ready;
};

struct rs_cluster {
  std::string name;
  std::vector<recsearch::Level> levels;
  recsearch::DeviceSpec device;
  // The cluster JSON it was read from, if any: its "cost" object applies
  // over the graph's coefficients.
  std::optional<std::string> file_text;
  std::string file_source;
  // The validated cluster of the fields above; empty while there are no levels.
  std::optional<recsearch::Cluster> cluster;
};

struct rs_options {
  recsearch::search::SearchOptions search;
  bool mode_set = false;               // rs_evaluate: else the plan's mode
  std::vector<std::string> cost_json;  // applied in order over graph and cluster costs
  std::shared_ptr<const recsearch::cost::CostModel> model;  // rs_options_set_cost_callbacks
};

struct rs_result {
  recsearch::Solution solution;
  // Loop name chosen per operator and axis ("" when replicated), and the
  // level name of each axis: what the getters hand out as const char*.
  std::vector<std::vector<std::string>> cut_names;
  std::vector<std::string> axis_levels;
  // Training plans: each operator's recomputation (plan::operator_recompute),
  // each tensor's ZeRO stage (plan::parameter_zero) and ZeRO axes
  // (plan::zero_axes); empty in inference.
  std::vector<recsearch::plan::Recompute> recompute;
  std::vector<int> zero;
  recsearch::plan::ZeroAxes zero_axes;
  // Each tensor's sharding as lists (the evaluation keeps them coded): what
  // rs_result_tensor_sharding and rs_result_tensor_partial point into.
  std::vector<recsearch::plan::TensorSharding> shardings;

  [[nodiscard]] const recsearch::ir::Graph& graph() const noexcept {
    return solution.problem().graph();
  }
  [[nodiscard]] const recsearch::plan::Plan& plan() const noexcept { return solution.plan(); }
  [[nodiscard]] const recsearch::plan::Evaluation& eval() const noexcept {
    return solution.evaluation();
  }
};

namespace recsearch::capi {

// Records a failure for rs_last_error(); never throws.
void set_error(int code, std::string_view message) noexcept;

// Records e, rendered as Error::what() renders it but from its parts:
// what() is a C string and would end at a NUL quoted from the input.
void set_error(const Error& e) noexcept;

// Records an exception that recsearch does not throw on purpose: a bug.
void set_internal_error(const char* what) noexcept;

// Runs `body` (returns void), mapping every exception to a status.
template <class F>
[[nodiscard]] rs_status guard(F&& body) noexcept {
  try {
    body();
    return RS_OK;
  } catch (const Error& e) {
    const int code = static_cast<int>(e.code());
    set_error(e);
    const int group = code / 100;
    return group >= 1 && group <= 5 ? static_cast<rs_status>(group) : RS_INTERNAL;
  } catch (const std::bad_alloc&) {
    set_error(static_cast<int>(Errc::kRuntime), "out of memory [E401]");
    return RS_RUNTIME;
  } catch (const std::exception& e) {
    set_internal_error(e.what());
    return RS_INTERNAL;
  } catch (...) {
    set_internal_error("unknown exception");
    return RS_INTERNAL;
  }
}

// Error(kUsage) unless p is non-null; `what` names the argument.
template <class T>
void need(const T* p, const char* what) {
  if (p == nullptr) throw Error(Errc::kUsage, std::string(what) + " must not be NULL");
}

// A C string argument that must be present (any content).
std::string need_string(const char* s, const char* what);

// The finalized graph with its spaces, made on first use after a change.
std::shared_ptr<const Problem> prepare(const rs_graph& g);

// A heap copy for the caller, released with rs_free.
void give_string(const std::string& s, char** out, std::size_t* len);

// The cluster a handle describes; Error(kCluster) while it has no levels.
const Cluster& cluster_of(const rs_cluster& c);

// Cost coefficients of graph, then cluster, then options.
CostParams merged_cost(const rs_graph& g, const rs_cluster* c, const rs_options* o);

}  // namespace recsearch::capi
