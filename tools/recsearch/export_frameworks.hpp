// SPDX-License-Identifier: Apache-2.0
// `recsearch export --to mindspore|megatron` (export_cmd.cpp reads the plan,
// these write it): a plan, plain or pipelined, as one or more stages, each
// an operator-level plan with its evaluation on its graph and device group.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/cluster.hpp"
#include "recsearch/ir/graph.hpp"
#include "recsearch/plan/evaluator.hpp"
#include "recsearch/plan/pipeline.hpp"
#include "recsearch/plan/plan.hpp"

namespace recsearch::cli {

// One stage of what is exported: for a plain plan the whole graph on the
// whole cluster; for a pipelined plan a stage graph on its group's cluster.
struct ExportStage {
  const ir::Graph* graph = nullptr;
  const std::vector<algebra::OpSpace>* spaces = nullptr;
  const Cluster* cluster = nullptr;
  const plan::Plan* plan = nullptr;
  const plan::Evaluation* eval = nullptr;
  std::size_t group = 0;
};

struct ExportInput {
  const ir::Graph* graph = nullptr;  // the whole graph
  const Cluster* cluster = nullptr;  // the whole cluster
  std::vector<ExportStage> stages;
  const plan::PipelinePlan* pipeline = nullptr;  // null for a plain plan
  std::string command;                           // how the file was made, for its head
  std::string summary;                           // "step ... s, ... GiB per device"
  // What made the plan ("rec", "megatron", ...; "+pipeline" dropped): the
  // plan file's, as reading a plan back calls it "file".
  std::string algorithm;
};

// A Python file: MindSpore's shard() strategy per operator (per input, the
// split count of each dim), the mindspore.ops primitive each operator type
// maps to, and a helper that applies them.
[[nodiscard]] std::string export_mindspore(const ExportInput& in);

// A bash file: the arguments of Megatron-LM's pretrain_gpt.py (tensor,
// pipeline, context parallel sizes, sequence parallel, micro and global
// batch, recomputation, distributed optimizer) in an array. Error(kPlan)
// when the plan cannot be said in those terms (an axis both splits weights
// and the batch, an axis that splits nothing, stages that differ, an
// inference plan); what it can say only approximately is written as
// "# APPROXIMATION:" lines, each also appended to `approximations`.
[[nodiscard]] std::string export_megatron(const ExportInput& in,
                                          std::vector<std::string>& approximations);

}  // namespace recsearch::cli
