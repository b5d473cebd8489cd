// SPDX-License-Identifier: Apache-2.0
// Private to the GPU module (librecsearch_gpu.so): its CUDA/cuBLAS kernels
// (cuda/gpu.cpp) and NCCL groups (nccl/nccl_device.cpp) as C++ functions
// that throw Error(kRuntime); cuda/module.cpp wraps them into the C
// interface of exec/gpu_api.h.
#pragma once

#include <cuda_runtime_api.h>  // CUDA runtime: the streams the timings run on

#include <cstddef>
#include <cstdint>
#include <string>

#include "exec/gpu_api.h"

namespace recsearch::exec::gpu {

[[nodiscard]] int device_count();
void gemm(const RecsearchGpuGemm& g, const float* a, std::size_t a_n, const float* b,
          std::size_t b_n, float* c, std::size_t c_n);
[[nodiscard]] bool unary(int kind, int first_unary, const float* x, float* y, std::size_t n);

// calibrate's timings on `device` (gpu_api.h): the device's name and
// memory, and the seconds per call of a GEMM in `dtype` and of a
// device-to-device copy, on device-resident buffers, timed on `stream`.
void device_info(int device, std::string* name, std::size_t* memory_bytes);
[[nodiscard]] double time_gemm(int device, cudaStream_t stream, RecsearchGpuDtype dtype,
                               std::int64_t m, std::int64_t n, std::int64_t k, bool trans_a,
                               bool trans_b, int iters);
[[nodiscard]] double time_copy(int device, cudaStream_t stream, std::size_t bytes, int iters);

#ifdef RECSEARCH_HAVE_NCCL
inline constexpr bool kHaveNccl = true;
[[nodiscard]] std::size_t nccl_id_bytes();
void nccl_unique_id(void* id);
[[nodiscard]] RecsearchGpuNccl* nccl_open(const void* id, int size, int rank, int local_rank,
                                          int local_size, std::size_t axes, const int* colors,
                                          const int* keys);
void nccl_collective(RecsearchGpuNccl* c, RecsearchGpuCollective kind, std::size_t axis,
                     int group_size, const float* send, float* recv, std::size_t n,
                     double timeout_s);
[[nodiscard]] double nccl_time_collective(RecsearchGpuNccl* c, RecsearchGpuCollective kind,
                                          std::size_t axis, int group_size, std::size_t n,
                                          int iters, double timeout_s);
// The device and stream nccl_open bound, for the device timings.
[[nodiscard]] int nccl_device(const RecsearchGpuNccl* c) noexcept;
[[nodiscard]] cudaStream_t nccl_stream(const RecsearchGpuNccl* c) noexcept;
void nccl_abort(RecsearchGpuNccl* c) noexcept;
void nccl_close(RecsearchGpuNccl* c) noexcept;
#else
inline constexpr bool kHaveNccl = false;
#endif

}  // namespace recsearch::exec::gpu
