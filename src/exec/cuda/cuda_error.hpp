// SPDX-License-Identifier: Apache-2.0
// Private: checks every CUDA, cuBLAS and NCCL call and turns a failure into
// Error(kRuntime) naming the call, the library's message, file and line.
#pragma once

#include <cublas_v2.h>         // cuBLAS: GEMMs of the GPU kernels
#include <cuda_runtime_api.h>  // CUDA runtime: devices, memory, streams

#include <string>

#include "recsearch/error.hpp"

namespace recsearch::exec::detail {

[[noreturn]] inline void throw_gpu(const std::string& what, const char* call, const char* file,
                                   int line) {
  throw Error(Errc::kRuntime, std::string(call) + " failed: " + what + " (" + file + ":" +
                                  std::to_string(line) + ")");
}

}  // namespace recsearch::exec::detail

#define RS_CUDA_CHECK(call)                                                                  \
  do {                                                                                       \
    const cudaError_t rs_cuda_rc_ = (call);                                                  \
    if (rs_cuda_rc_ != cudaSuccess)                                                          \
      ::recsearch::exec::detail::throw_gpu(cudaGetErrorString(rs_cuda_rc_), #call, __FILE__, \
                                           __LINE__);                                        \
  } while (0)

#define RS_CUBLAS_CHECK(call)                                                                     \
  do {                                                                                            \
    const cublasStatus_t rs_cublas_rc_ = (call);                                                  \
    if (rs_cublas_rc_ != CUBLAS_STATUS_SUCCESS)                                                   \
      ::recsearch::exec::detail::throw_gpu(cublasGetStatusString(rs_cublas_rc_), #call, __FILE__, \
                                           __LINE__);                                             \
  } while (0)
