// SPDX-License-Identifier: Apache-2.0
// Pipeline parallelism as a layer around the operator-level plan
// (docs/pipeline.md). The graph is cut, in operator id order (a topological
// order), into contiguous stages; the cluster's devices are split into p
// contiguous device groups (whole members of the outer levels and an equal
// part of the next: on 384 nodes of 8, p may be a divisor of 384, or 768,
// 1536 or 3072 groups inside the nodes), and each stage runs on one group
// with its own operator-level Plan on the group's sub-mesh. With the interleaved schedule
// there are v stages per group (v·p in all, stage j on group j mod p).
//
// Evaluation (evaluate_pipeline), with m microbatches and, per group g, t_g
// its busy time per microbatch (its stages' Summary::microbatch_s plus the
// point-to-point sends of their boundary tensors):
//   1F1B         step = Σ_g t_g + (m − 1)·max_g t_g + max_g per_step_g
//   interleaved  step = m·max_g t_g + (Σ_g t_g − max_g t_g)/v + max_g per_step_g
// so that with balanced stages the bubble is (p − 1)/m (1F1B) or
// (p − 1)/(v·m) of the pipelined part. per_step_g is what a group pays once
// per step (its stages' step time beyond m microbatches: the exposed
// gradient reduction, ZeRO gathers, and the all-reduce of the gradients of
// parameters tied across groups, TiedSync); the groups pay it at the same
// time.
// A boundary tensor is sent forward and its gradient backward once per
// microbatch (training; forward only in inference), each device sending its
// share (bytes / devices of the group) over the link of the outermost level
// the groups split (pipeline_link_level; the slowest link between two
// neighbouring groups): share / bandwidth + latency.
// Memory of group g: its stages' parameter state plus the saved activations
// of k_g microbatches, k_g = min(p − g, m) for 1F1B and
// min(m, (2(p − g − 1) + (v − 1)·p + 1)/v) interleaved (Megatron-LM's
// warm-up depth).
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/cluster.hpp"
#include "recsearch/cost/cost_params.hpp"
#include "recsearch/ir/graph.hpp"
#include "recsearch/plan/evaluator.hpp"
#include "recsearch/plan/plan.hpp"

namespace recsearch::plan {

enum class Schedule : std::uint8_t { OneFOneB, Interleaved };

// "1f1b", "interleaved".
[[nodiscard]] std::string_view schedule_name(Schedule s) noexcept;
[[nodiscard]] std::optional<Schedule> parse_schedule(std::string_view s) noexcept;

// One stage: operators [first, last) of the graph on device group `group`.
struct Stage {
  ir::OpId first = 0;
  ir::OpId last = 0;
  std::size_t group = 0;
  // On the stage graph (stage_graph) and the group's cluster (stage_cluster);
  // training.microbatches is the pipeline's.
  Plan plan;
};

struct PipelinePlan {
  std::size_t groups = 1;  // p device groups (stage_cluster)
  Schedule schedule = Schedule::OneFOneB;
  std::size_t virtual_stages = 1;  // v: stages per group (1 for 1F1B)
  std::int64_t microbatches = 1;   // m
  std::vector<Stage> stages;       // p·v, in operator order

  [[nodiscard]] std::size_t num_stages() const noexcept { return stages.size(); }
};

// The graph of operators [first, last): the operators in id order, each
// tensor they use; a tensor produced before `first` enters as a graph input
// (received from an earlier stage), one produced here and used after `last`
// stays as an activation nobody here consumes (sent to a later stage).
// Operator spaces are copied (they do not depend on tensor ids). Ranges of
// the same shape (repeated blocks) give identical graphs up to names.
struct StageGraph {
  ir::Graph graph;
  std::vector<algebra::OpSpace> spaces;
  std::vector<ir::TensorId> received;  // full-graph ids, in first-use order
  std::vector<ir::TensorId> sent;      // full-graph ids, in producer order
};
// The received tensors that take a gradient in g (ir::gradient_tensors)
// are the stage graph's gradient inputs; `grads` is gradient_tensors(g)
// when the caller has it (else it is computed).
[[nodiscard]] StageGraph stage_graph(const ir::Graph& g,
                                     const std::vector<algebra::OpSpace>& spaces, ir::OpId first,
                                     ir::OpId last,
                                     const std::vector<std::uint8_t>* grads = nullptr);

// The cluster of one of p device groups: the levels split from the
// outermost, whole levels first, then the next divided by what is left of
// p (a level of size 1 is kept; it has no cuts). Error(kPlan) at
// "/pipeline/device_groups" when p does not split them so (3 groups of 4
// nodes, or 16 of 4 nodes of 8 devices, but not 3 of 4 x 8).
[[nodiscard]] Cluster stage_cluster(const Cluster& cluster, std::size_t p);

// The level whose link the sends between p device groups cross: the
// outermost level of size > 1 that the groups split (0 when p does not
// split the levels, or is 1).
[[nodiscard]] std::size_t pipeline_link_level(const Cluster& cluster, std::size_t p);

// Every p that splits the cluster's levels (stage_cluster), ascending, 1
// first.
[[nodiscard]] std::vector<std::size_t> device_group_counts(const Cluster& cluster);

// The stage an operator is pinned to by its integer attribute "stage" in
// the graph (0 = the first stage), or -1. Error(kSchema) at
// "/operators/<id>/attrs/stage" for a value that is not a non-negative integer.
inline constexpr std::string_view kStageAttr = "stage";
[[nodiscard]] std::int64_t pinned_stage(const ir::Graph& g, ir::OpId op);

// Checks the shape of a pipeline plan: p splits the levels, p·v
// stages (v = 1 for 1F1B) covering the operators in order without gaps,
// stage j on group j mod p, each stage non-empty, m >= 1 (and a multiple of
// p when interleaved), every tensor a stage receives produced by an earlier
// stage, each stage's mesh the group's cuts, every pinned operator in its
// stage. Error(kPlan) naming the path
// under "/pipeline" ("/pipeline/stages/3/range").
void check_pipeline(const ir::Graph& g, const Cluster& cluster, const PipelinePlan& pp);

// What one device group does per step.
struct GroupReport {
  double microbatch_s = 0;      // its stages' forward + backward of one microbatch
  double send_s = 0;            // its point-to-point sends per microbatch
  double busy_s = 0;            // m · (microbatch_s + send_s)
  double per_step_s = 0;        // paid once per step
  double bubble_s = 0;          // idle in the pipelined part: pipelined − busy
  double compute_s = 0;         // per step, every microbatch
  double memory_bytes = 0;      // per device
  double parameter_bytes = 0;   // of memory_bytes
  double activation_bytes = 0;  // saved activations of one microbatch
  double in_flight = 0;         // microbatches whose activations are kept (k_g)
  double sent_bytes = 0;        // per device per step, point to point
  double tied_s = 0;            // of per_step_s: its tied parameters' gradient all-reduces
  double tied_bytes = 0;        // per device per step, sent by those all-reduces
};

struct PipelineEvaluation {
  std::vector<Evaluation> stages;  // per stage, on its stage graph
  std::vector<GroupReport> groups;
  // step_time_s; per device of the busiest group: compute_s,
  // communication_s (collectives and sends), exposed_communication_s;
  // memory_per_device_bytes (the largest group's) with that group's
  // parameter and activation parts (activation_bytes: all k_g microbatches);
  // microbatch_s: the slowest group's t_g.
  Summary summary;
  double pipelined_s = 0;         // the pipelined part of the step
  double bubble_fraction = 0;     // of the pipelined part, the slowest group idle
  double p2p_bytes_per_step = 0;  // per device of the busiest sender
};

// Evaluates every stage with plan::evaluate on its stage graph and group
// cluster, then the schedule (formulas above). check_pipeline first.
[[nodiscard]] PipelineEvaluation evaluate_pipeline(const ir::Graph& g,
                                                   const std::vector<algebra::OpSpace>& spaces,
                                                   const Cluster& cluster, const PipelinePlan& pp,
                                                   const CostParams& params,
                                                   EvalDetail detail = EvalDetail::Full);

// A parameter read by stages of two or more device groups: a tied weight,
// such as a GPT's embedding table that its LM head reads again. Each of
// those groups holds a copy (each stage graph counts its state), and in
// training their gradients are all-reduced across the groups once per
// step, after the last microbatch's backward pass, as Megatron-LM's
// embedding group does: nothing overlaps it. The all-reduce crosses the
// groups' link (pipeline_link_level), k = groups.size() ways, and each group's devices share
// the gradient's traffic (the collective convention of cost/model.hpp,
// devices_below = the group's devices).
struct TiedSync {
  ir::TensorId tensor = 0;          // full-graph id
  std::vector<std::size_t> groups;  // ascending, at least two
  double bytes = 0;                 // sent per device per step
  double seconds = 0;               // per step
};
// The tied parameters of pp, in tensor id order; empty in inference and
// without pipelining.
[[nodiscard]] std::vector<TiedSync> tied_syncs(const ir::Graph& g, const Cluster& cluster,
                                               const PipelinePlan& pp, Mode mode,
                                               const CostParams& params);

// The schedule alone, from per-stage figures (what evaluate_pipeline does
// after evaluating the stages; the search uses it on cached evaluations).
// stage_summaries[j] and send_s[j] (stage j's sends per microbatch,
// forward and backward), sent_bytes[j] per microbatch per device; `tied`
// from tied_syncs, paid once per step by each of its groups.
[[nodiscard]] PipelineEvaluation schedule_pipeline(const PipelinePlan& pp, Mode mode,
                                                   std::vector<Evaluation> stages,
                                                   const std::vector<double>& send_s,
                                                   const std::vector<double>& sent_bytes,
                                                   const std::vector<TiedSync>& tied);

// What stage j of pp, evaluated as s, adds to its group's memory per
// device: its parameter state and the saved activations of the group's
// microbatches in flight (GroupReport::memory_bytes is the sum over the
// group's stages).
[[nodiscard]] double stage_memory_bytes(const PipelinePlan& pp, std::size_t j, Mode mode,
                                        const Summary& s);

// Seconds and per-device bytes of a stage's point-to-point sends per
// microbatch: its boundary tensors forward (to later stages) and, in
// training, the gradients of what it received backward.
struct StageSends {
  double seconds = 0;
  double bytes = 0;
};
[[nodiscard]] StageSends stage_sends(const ir::Graph& g, const StageGraph& sg,
                                     const Cluster& cluster, const PipelinePlan& pp, Mode mode);

}  // namespace recsearch::plan
