// SPDX-License-Identifier: Apache-2.0
// Search options shared by the tests that compare searches with each other
// and with the exact optimum.
//
// Exhaustive search and ilp optimise the operators' strategies under the
// additive model (compute plus every collective) at one training setting.
// Comparisons with them therefore pin the setting (no recomputation, ZeRO 0,
// one microbatch) and turn overlap off; the training settings and overlap
// have their own tests (tests/search/training_test.cpp).
#pragma once

#include <optional>

#include "recsearch/error.hpp"
#include "recsearch/plan/evaluator.hpp"
#include "recsearch/search/options.hpp"
#include "recsearch/search/search.hpp"

namespace recsearch::testing {

inline search::SearchOptions operator_level_options() {
  search::SearchOptions o;
  o.cost.overlap = false;
  o.training.recompute = plan::Recompute::None;
  o.training.zero_stage = 0;
  o.training.microbatches = 1;
  return o;
}

// The step time without overlap: what the searches' own accounts add up.
inline double serial_step(const plan::Summary& s) { return s.compute_s + s.communication_s; }

// The search's result, or none where it ends in "no plan fits" (any other
// error propagates): for tests that compare two searches at one budget.
inline std::optional<search::SearchResult> search_or_no_fit(
    const ir::Graph& g, const std::vector<algebra::OpSpace>& spaces, const Cluster& c,
    const search::SearchOptions& o) {
  try {
    return search::run(g, spaces, c, o);
  } catch (const Error& e) {
    if (e.code() != Errc::kNoFit) throw;
    return std::nullopt;
  }
}

}  // namespace recsearch::testing
