// SPDX-License-Identifier: Apache-2.0
// Private: the report `recsearch calibrate --backend nccl` prints on rank 0
// (calibrate_gpu.cpp); the measurements are public (calibrate.hpp).
#pragma once

#include "recsearch/exec/calibrate.hpp"

namespace recsearch::exec::detail {

void print_gpu_report(const GpuCalibration& c);

}  // namespace recsearch::exec::detail
