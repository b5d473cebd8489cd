// SPDX-License-Identifier: Apache-2.0
// Folding of repeated blocks. Deep networks repeat one block (a transformer
// layer, a ResNet stage's bottleneck) many times: prefix, B_0 .. B_{R-1},
// suffix, each B_k wired to B_{k-1} exactly as B_1 is to B_0. The search
// then runs on a folded graph of three copies — B_0, a middle copy that
// stands for B_1 .. B_{R-2} with weight R-2, and B_{R-1}. Its weighted
// objective is the full graph's for a plan whose middle blocks decide alike,
// except that the edges between two middle blocks are modeled by the middle
// copy's edges to the last copy (a chain has no self-edge). The plan is
// unfolded by copying the middle copy's decisions; step time and memory of
// the full graph follow exactly from the 3- and 4-copy folds, since both are
// sums over blocks.
// Search time then depends on the block, not on the depth.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "recsearch/algebra/op_space.hpp"
#include "recsearch/ir/graph.hpp"
#include "recsearch/plan/plan.hpp"

namespace recsearch::search::detail {

// Where a graph repeats: ops [start, start + period * repeats) in id order
// are `repeats` blocks of `period` operators.
struct Repetition {
  std::size_t start = 0;
  std::size_t period = 0;
  std::size_t repeats = 0;
};

// The longest verified repetition covering the most operators, if it has at
// least min_repeats blocks. O(V + E) per candidate period, a few candidates.
[[nodiscard]] std::optional<Repetition> find_repetition(const ir::Graph& g,
                                                        std::size_t min_repeats);

// A folded graph: the prefix, `copies` blocks and the suffix.
struct Folded {
  ir::Graph graph;
  std::vector<algebra::OpSpace> spaces;
  std::vector<double> weight;  // per folded operator: how many full operators it stands for
};

// Folds g into prefix + `copies` blocks + suffix (copies >= 3): block 0 and
// the last copy stand for B_0 and B_{R-1}; the copies between stand for the
// middle blocks, the first of them with weight R - copies + 1.
[[nodiscard]] Folded fold(const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces,
                          const Repetition& rep, std::size_t copies);

// The operator of a `copies`-fold that full operator o maps to.
[[nodiscard]] std::size_t folded_op(const Repetition& rep, std::size_t copies, std::size_t o);

// The plan of the full graph from the plan of its 3-copy fold (cuts only;
// header fields are copied).
[[nodiscard]] plan::Plan unfold(const plan::Plan& folded, const Repetition& rep,
                                std::size_t num_ops);

// The plan of a `copies`-fold from the plan of the 3-copy fold (the middle
// copy repeated).
[[nodiscard]] plan::Plan refold(const plan::Plan& folded3, const Repetition& rep,
                                std::size_t copies, std::size_t full_ops);

}  // namespace recsearch::search::detail
