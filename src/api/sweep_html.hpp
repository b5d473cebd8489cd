// SPDX-License-Identifier: Apache-2.0
// The HTML page of a sweep (recsearch::sweep_to_html): kept apart from the
// sweep itself because drawing charts is its own craft.
#pragma once

#include <string>

#include "recsearch/sweep.hpp"

namespace recsearch::detail {

// A self-contained page: the curves as inline SVG drawn here, a table of
// every point; no script, no stylesheet or font from the network.
[[nodiscard]] std::string sweep_html(const Sweep& sweep);

}  // namespace recsearch::detail
