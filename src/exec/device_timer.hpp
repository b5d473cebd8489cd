// SPDX-License-Identifier: Apache-2.0
// Private: the timings `recsearch calibrate --backend nccl` takes on the GPU
// an NCCL communicator's rank has bound, on device-resident buffers only
// (exec/gpu_api.h, time_*): cuBLAS GEMMs per dtype, a device-to-device
// copy, and the four NCCL collectives of a mesh axis. The communicator
// itself stages host blocks through the device on every call, which is
// what exec runs but not what a GPU training step pays.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "exec/backends.hpp"
#include "exec/gpu_api.h"
#include "recsearch/exec/communicator.hpp"

namespace recsearch::exec::detail {

struct GpuDeviceInfo {
  std::string name;
  double memory_bytes = 0;
};

class DeviceTimer {
 public:
  virtual ~DeviceTimer() = default;
  [[nodiscard]] virtual GpuDeviceInfo info() = 0;
  // Seconds per call over `iters` calls back to back, after one untimed call.
  [[nodiscard]] virtual double gemm(RecsearchGpuDtype dtype, std::int64_t m, std::int64_t n,
                                    std::int64_t k, bool trans_a, bool trans_b, int iters) = 0;
  [[nodiscard]] virtual double copy(std::size_t bytes, int iters) = 0;
  // n elements per member block on mesh axis `axis` (as Communicator's
  // collectives), bounded by the communicator's timeout.
  [[nodiscard]] virtual double collective(Collective kind, std::uint32_t axis, std::size_t n,
                                          int iters) = 0;
};

// The timer of an NCCL communicator's device: Error(kUsage) for a
// communicator of another backend or a build without NCCL.
[[nodiscard]] std::unique_ptr<DeviceTimer> device_timer(Communicator& comm);

}  // namespace recsearch::exec::detail
