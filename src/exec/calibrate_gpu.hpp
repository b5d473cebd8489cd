// SPDX-License-Identifier: Apache-2.0
// Private: the report `recsearch calibrate --backend nccl` prints on rank 0
// (calibrate_gpu.cpp), and the samples' collective fits as both backends
// write them (calibrate.cpp); the measurements are public (calibrate.hpp).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "recsearch/exec/calibrate.hpp"

namespace recsearch::exec::detail {

void print_gpu_report(const GpuCalibration& c);

// j["link"], j["kind_fits"] and j["collectives"] of a --samples file.
void put_collective_fits(nlohmann::ordered_json& j, const LinkFit& link,
                         const std::vector<std::pair<std::string, LinkFit>>& kind_fits,
                         const std::vector<CollectiveSample>& collectives);

}  // namespace recsearch::exec::detail
