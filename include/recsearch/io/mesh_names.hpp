// SPDX-License-Identifier: Apache-2.0
// Plan axes on the user's own mesh. A plan's axes are the cluster's prime
// cuts (c0, c1, ...); users think in the cluster's levels (`node`, `gpu`).
// These functions name a list of axes by level: a whole level by its name,
// part of one by the digits of the level's index it takes, written
// `gpu/4` (index / 4: the outer part), `gpu%4` (index mod 4: the inner part)
// or `gpu/2%2` (a middle part). The plan file, the table and the reports
// show shardings and splits this way next to the axis names.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "recsearch/cluster.hpp"
#include "recsearch/plan/plan.hpp"

namespace recsearch::io {

// The named mesh dims for axes (indices into p.mesh) in their order:
// consecutive cuts of one level merge into one piece, so that {c4, c5, c6}
// of an 8-device `gpu` level is {"gpu"} and {c4} is {"gpu/4"}. An axis
// whose level the cluster does not list keeps its axis name.
[[nodiscard]] std::vector<std::string> mesh_dim_names(const Cluster& cluster, const plan::Plan& p,
                                                      const std::vector<std::uint32_t>& axes);

// The same, joined with ',' ("node,gpu/4"); "" for no axes.
[[nodiscard]] std::string mesh_dims_text(const Cluster& cluster, const plan::Plan& p,
                                         const std::vector<std::uint32_t>& axes);

// The axes that cut each loop of operator `op`, loop by loop (empty for a
// loop no axis cuts); sized to the operator's loop count.
[[nodiscard]] std::vector<std::vector<std::uint32_t>> loop_axes(const plan::Plan& p,
                                                                std::size_t loops, ir::OpId op);

// Which axes belong to which level: "c0-c3 node (16), c4-c6 gpu (8)".
[[nodiscard]] std::string axis_levels_text(const Cluster& cluster, const plan::Plan& p);

}  // namespace recsearch::io
