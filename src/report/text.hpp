// SPDX-License-Identifier: Apache-2.0
// Text shared by the report writers (private to src/report): written once so
// that the DOT labels, the HTML tables and the text table spell a strategy
// and a number the same way.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "recsearch/ir/graph.hpp"
#include "recsearch/report/report.hpp"

namespace recsearch::report {

// A MindSpore-style strategy as text: "[[2, 1], [1, 4]]".
[[nodiscard]] std::string strategy_text(const ir::Strategy& s);

// v to `digits` significant digits in fixed notation (never an exponent, so
// that a column reads as one format): 1234, 12.34, 0.001234; "0" for 0.
[[nodiscard]] std::string sig(double v, int digits = 4);
// Seconds as milliseconds and bytes as GiB, each with its unit: "12.34 ms",
// "1.5 GiB".
[[nodiscard]] std::string ms_text(double seconds);
[[nodiscard]] std::string gib_text(double bytes);

// A parameter's ZeRO stage and the axes it shards over (plan::zero_axes)
// on the user's mesh dims (io::mesh_dims_text): "2 over node,gpu/4"; the
// stage alone at stage 0 or without axes. Shared by the text table's
// summary and the HTML report's operator table.
[[nodiscard]] std::string zero_over_text(const ReportInput& in, int stage,
                                         std::span<const std::uint32_t> axes);

}  // namespace recsearch::report
