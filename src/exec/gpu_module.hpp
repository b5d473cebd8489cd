// SPDX-License-Identifier: Apache-2.0
// Private: finds and loads the GPU module (librecsearch_gpu.so, see
// gpu_api.h) on first use, so that processes that never ask for a GPU never
// map CUDA, cuBLAS or NCCL.
#pragma once

#include <string>

#include "exec/gpu_api.h"

namespace recsearch::exec::detail {

// The module's interface, loaded once per process; nullptr (with the reason
// in *why: no CUDA in this build, module not found or not loadable, ABI
// mismatch) when there is none. Looked for in order: $RECSEARCH_GPU_MODULE
// (only there when set), <exe dir>/../<libdir>/recsearch/, the installed
// <prefix>/<libdir>/recsearch/, and the build tree.
[[nodiscard]] const RecsearchGpuApi* gpu_api(std::string* why);

}  // namespace recsearch::exec::detail
