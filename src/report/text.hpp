// SPDX-License-Identifier: Apache-2.0
// Text shared by the report writers (private to src/report): written once so
// that the DOT labels and the HTML tables spell a strategy the same way.
#pragma once

#include <string>

#include "recsearch/ir/graph.hpp"

namespace recsearch::report {

// A MindSpore-style strategy as text: "[[2, 1], [1, 4]]".
[[nodiscard]] std::string strategy_text(const ir::Strategy& s);

}  // namespace recsearch::report
