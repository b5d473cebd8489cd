// SPDX-License-Identifier: Apache-2.0
// `recsearch sweep` (sweep_cmd.cpp): registered by main.cpp like the other
// subcommands of subcommand.hpp.
#pragma once

#include "subcommand.hpp"

namespace recsearch::cli {

// sweep (sweep_cmd.cpp).
void add_sweep_command(CLI::App& app, Registry& reg);

}  // namespace recsearch::cli
