// SPDX-License-Identifier: Apache-2.0
// Training settings a graph file may pin (docs/formats.md, Graph file):
// the graph-wide "training" object (recomputation, ZeRO stage,
// microbatches) and an operator's "recompute". They live in the graph, not
// the plan, because they are constraints on the search like a pinned
// strategy; plan/training.hpp defines what the settings mean.
#pragma once

#include <cstdint>
#include <optional>

namespace recsearch::ir {

// Activation recomputation (plan/training.hpp describes the three rules).
enum class Recompute : std::uint8_t { None, Selective, Full };

// The graph-wide pins; unset fields are the search's to choose.
struct TrainingPins {
  std::optional<Recompute> recompute;
  std::optional<int> zero_stage;
  std::optional<std::int64_t> microbatches;

  [[nodiscard]] bool empty() const noexcept { return !recompute && !zero_stage && !microbatches; }
  friend bool operator==(const TrainingPins&, const TrainingPins&) = default;
};

}  // namespace recsearch::ir
