// SPDX-License-Identifier: Apache-2.0
// Private to the GPU module: the CUDA events that time calibrate's device
// work (cuda/gpu.cpp, nccl/nccl_device.cpp), created checked and destroyed
// on scope exit.
#pragma once

#include <cuda_runtime_api.h>  // CUDA runtime: events

#include "exec/cuda/cuda_error.hpp"

namespace recsearch::exec::gpu {

// A start and a stop event; seconds() between them once stop is recorded.
class TimingEvents {
 public:
  TimingEvents() {
    RS_CUDA_CHECK(cudaEventCreate(&start_));
    const cudaError_t rc = cudaEventCreate(&stop_);
    if (rc != cudaSuccess) {
      (void)cudaEventDestroy(start_);
      RS_CUDA_CHECK(rc);
    }
  }
  ~TimingEvents() {
    (void)cudaEventDestroy(stop_);
    (void)cudaEventDestroy(start_);
  }
  TimingEvents(const TimingEvents&) = delete;
  TimingEvents& operator=(const TimingEvents&) = delete;

  [[nodiscard]] cudaEvent_t start() const noexcept { return start_; }
  [[nodiscard]] cudaEvent_t stop() const noexcept { return stop_; }
  // Seconds from start to stop, divided by `calls`; stop must have completed.
  [[nodiscard]] double seconds_per(int calls) const {
    float ms = 0;
    RS_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return static_cast<double>(ms) * 1e-3 / (calls > 0 ? calls : 1);
  }

 private:
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

}  // namespace recsearch::exec::gpu
