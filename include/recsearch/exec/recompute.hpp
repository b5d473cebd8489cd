// SPDX-License-Identifier: Apache-2.0
// Activation recomputation in exec --train (docs/exec.md, Recomputation):
// which operators' forward runs again in the backward pass, which tensors
// and redistributed copies the forward pass does not keep for the backward,
// and the bytes that second forward sends.
//
// The operators are the cost model's (plan::MemoryRules::recomputed:
// `selective` the attention cores, `full` every operator of a segment
// between two checkpoints). An activation is dropped after the forward pass
// when its producer is recomputed, the model keeps none of it
// (MemoryRules::saved is 0), every reader is recomputed too and it is not a
// graph output; so are its redistributed copies, and a kept tensor's copy
// in a layout that only recomputed operators read (the recomputation makes
// it again, as the forward did). Recomputed operators joined by dropped
// tensors form a group (a selective attention core, a full segment); the
// backward pass reruns a group, in topological order, when it first reaches
// one of its operators, and frees its dropped tensors once their readers'
// backward has run.
#pragma once

#include <cstdint>
#include <vector>

#include "recsearch/exec/layout.hpp"
#include "recsearch/ir/graph.hpp"

namespace recsearch::exec {

struct RecomputePlan {
  std::vector<std::uint8_t> op;                     // per operator: rerun in the backward
  std::vector<std::int32_t> group;                  // per operator: its group, -1 if not rerun
  std::int32_t groups = 0;                          // groups 0 .. groups-1, in topological order
  std::vector<std::uint8_t> dropped;                // per tensor: not kept after the forward
  std::vector<std::vector<Layout>> dropped_copies;  // per tensor: copies not kept
  [[nodiscard]] bool empty() const noexcept { return groups == 0; }
};

// The plan of graph g laid out as `pl`, from the cost model's per-operator
// `recomputed` and per-tensor `saved` (plan::MemoryRules).
[[nodiscard]] RecomputePlan recompute_plan(const ir::Graph& g, const PlanLayouts& pl,
                                           const std::vector<std::uint8_t>& recomputed,
                                           const std::vector<float>& saved);

// Collective bytes one rank sends in the recomputed forward of one backward
// pass: every dropped copy made again from its holder (once: it is kept
// until its readers' backward has run), and the exchanges the recomputed
// operators run themselves (a vocabulary-parallel loss, SyncBatchNorm's
// statistics), as predict_exec_bytes counts them.
[[nodiscard]] BytePrediction predict_recompute_bytes(const ir::Graph& g, const PlanLayouts& pl,
                                                     const RecomputePlan& rp,
                                                     double element_bytes = 4.0);
// Point-to-point bytes the rank at `coords` sends there: the halo exchanges
// of recomputed convolutions and pools.
[[nodiscard]] double predict_recompute_halo_bytes(const ir::Graph& g, const PlanLayouts& pl,
                                                  const RecomputePlan& rp,
                                                  const std::vector<std::int64_t>& coords,
                                                  double element_bytes = 4.0);

}  // namespace recsearch::exec
