// SPDX-License-Identifier: Apache-2.0
// Trade-off curves: one Problem searched at many memory budgets on one
// cluster, or on many clusters at one budget, with every point's plan,
// its step time and memory split and its predicted throughput. `recsearch
// sweep` is a thin front end over this; docs/sweep.md explains the figures.
//
//   auto problem = recsearch::Problem::read("bert_large.json");
//   auto budgets = recsearch::parse_sweep_reals("10:80:5", "--memory");  // GiB
//   for (double& b : budgets) b *= 1024.0 * 1024.0 * 1024.0;
//   auto curve = recsearch::sweep_memory(problem, recsearch::Cluster::mesh({2, 8}),
//                                        problem.options(), budgets);
//   std::cout << recsearch::sweep_to_csv(curve);
//
// A budget sweep is monotone by construction, not by luck of the search:
// every plan found at any budget is kept, and each budget reports the
// fastest kept plan that fits it (re-evaluated there), so a larger budget
// can never report a slower step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "recsearch/cluster.hpp"
#include "recsearch/plan/evaluator.hpp"
#include "recsearch/plan/pipeline.hpp"
#include "recsearch/plan/plan.hpp"
#include "recsearch/problem.hpp"
#include "recsearch/search/options.hpp"

namespace recsearch {

enum class SweepKind { Memory, Devices };

struct SweepPoint {
  // Where the point lies: its budget in bytes (the device's capacity when
  // the options set none) and its cluster.
  double budget_bytes = 0;
  std::int64_t devices = 0;
  std::string mesh;  // level sizes outermost first, "2x8" ("16" when flat)

  // Whether a plan fits. When none does: the search's own message, and the
  // smallest per-device memory any search of the sweep reached (NaN when
  // no search said).
  bool fits = false;
  std::string no_fit;
  double smallest_bytes = 0;

  // The reported plan (empty cuts when none fits), its evaluation on this
  // point (summary detail: no per-event lists), and the index of the point
  // whose search found it (itself on device sweeps; on budget sweeps
  // possibly another budget's, see above).
  plan::Plan plan;
  plan::Summary summary;
  std::size_t found_at = 0;
  // With options.pipeline_stages != 1 (search::run_pipeline): the pipeline
  // plan when the search cut the graph into stages (pipeline.groups > 1;
  // `plan` is then its first stage's plan, for the training settings), and
  // the idle time of the slowest group in the pipelined part of the step.
  // groups == 1 and no stages otherwise.
  plan::PipelinePlan pipeline;
  double bubble_s = 0;
  // Training plans: the plan's "training" object as the plan file writes it
  // (JSON text, with its per-operator recomputation and per-parameter ZeRO
  // stages), and those two in words (report::recompute_text, zero_text:
  // "full on 11 of 24 blocks, selective on 13"), made where the graph is
  // known. A pipeline's stages are described by their plan-wide settings.
  std::string training_json;
  std::string recompute_text;
  std::string zero_text;
  // Wall time of this point's own search (its plan may come from another).
  double search_time_s = 0;

  // Predicted throughput from the graph (0 when the graph does not say):
  // samples per second (batch = dim 0 of the first input), tokens per
  // second (first input integer ids of rank 2: batch x sequence), and the
  // graph's operator flops (with backward in training) per second per
  // device, in TFLOP/s.
  double samples_per_s = 0;
  double tokens_per_s = 0;
  double model_tflops_per_device = 0;
  // Device sweeps: throughput per device relative to the first fitting
  // point (1 there, 0 when none fits or on budget sweeps).
  double scaling_efficiency = 0;
};

struct Sweep {
  SweepKind kind = SweepKind::Memory;
  std::string graph;  // the graph's name
  Mode mode = Mode::Train;
  std::string algorithm;
  // What the graph says about one step: dim 0 of its first input (0 when
  // it has none), the tokens of integer ids of rank 2 (0 when not such),
  // and its forward operator flops times the training factor.
  std::int64_t batch = 0;
  std::int64_t tokens = 0;
  double step_flops = 0;
  std::vector<SweepPoint> points;  // budgets ascending; clusters as given
  // Budget sweeps: the index of the knee, the smallest budget whose step
  // time is within knee_tolerance of the sweep's best; points.size() when
  // nothing fits. Device sweeps: the fastest point.
  std::size_t knee = 0;
  double knee_tolerance = 0.05;
};

// Searches `problem` on `cluster` at every budget (bytes, > 0, finite; sorted
// ascending, duplicates removed). options.cost's own budget is ignored.
// options.pipeline_stages other than 1 searches stages too (run_pipeline).
// Error(kUsage) for an empty list or a bad budget; any search error other
// than kNoFit propagates.
[[nodiscard]] Sweep sweep_memory(const Problem& problem, const Cluster& cluster,
                                 const search::SearchOptions& options,
                                 std::vector<double> budgets_bytes);

// Searches `problem` on every cluster, each point its own search, with the
// options' budget. Error(kUsage) for an empty list.
[[nodiscard]] Sweep sweep_clusters(const Problem& problem, const std::vector<Cluster>& clusters,
                                   const search::SearchOptions& options);

// Sweep points as written on a command line; `what` names the option in
// Error(kUsage) messages. A comma list ("8,16,64"), a range "A:B" that
// doubles from A up to B (B included: "1:384" -> 1, 2, 4, ..., 256, 384) or
// "A:B:S" stepping by S from A while <= B (plus B when the step overshoots
// it). Values must be > 0 and A <= B; at most 10^4 points.
[[nodiscard]] std::vector<double> parse_sweep_reals(std::string_view text, std::string_view what);
// The same for integers (device and node counts: >= 1, <= kMaxDevices).
[[nodiscard]] std::vector<std::int64_t> parse_sweep_counts(std::string_view text,
                                                           std::string_view what);

// `cluster` with its outermost level's size replaced by `size` (node sweeps
// on a cluster file); Error(kUsage) for size < 1.
[[nodiscard]] Cluster with_outer_size(const Cluster& cluster, std::int64_t size);

// Writers. CSV: a header line and one row per point. JSON: an object
// {"format": "recsearch.sweep", "version": 1, ..., "points": [...]}. HTML: a
// self-contained page (no scripts, no network) with the curves as SVG.
[[nodiscard]] std::string sweep_to_csv(const Sweep& sweep);
[[nodiscard]] std::string sweep_to_json(const Sweep& sweep);
[[nodiscard]] std::string sweep_to_html(const Sweep& sweep);

}  // namespace recsearch
