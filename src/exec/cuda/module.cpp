// SPDX-License-Identifier: Apache-2.0
// The GPU module's entry point: recsearch_gpu_api() hands out the C
// interface of exec/gpu_api.h, each member a wrapper that turns any
// exception of the C++ side into a return code and a message, so that no
// exception crosses the dlopen boundary. This is the module's only exported
// symbol (the rest is hidden by a linker version script).
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>

#include "exec/cuda/module.hpp"
#include "recsearch/error.hpp"

namespace recsearch::exec::gpu {
namespace {

void put(const std::string& what, char* err, std::size_t err_len) noexcept {
  if (err == nullptr || err_len == 0) return;
  const std::size_t n = std::min(what.size(), err_len - 1);
  std::memcpy(err, what.data(), n);
  err[n] = '\0';
}

// Runs f; on an exception writes its message and returns 1.
template <class F>
int guarded(char* err, std::size_t err_len, F&& f) noexcept {
  try {
    f();
    return 0;
  } catch (const Error& e) {
    put(e.detail(), err, err_len);
  } catch (const std::exception& e) {
    put(e.what(), err, err_len);
  } catch (...) {
    put("unknown failure in the GPU module", err, err_len);
  }
  return 1;
}

int c_device_count(int* n, char* err, std::size_t err_len) {
  return guarded(err, err_len, [&] { *n = device_count(); });
}

int c_gemm(const RecsearchGpuGemm* g, const float* a, std::size_t a_n, const float* b,
           std::size_t b_n, float* c, std::size_t c_n, char* err, std::size_t err_len) {
  return guarded(err, err_len, [&] { gemm(*g, a, a_n, b, b_n, c, c_n); });
}

int c_unary(int kind, int first_unary, const float* x, float* y, std::size_t n, int* done,
            char* err, std::size_t err_len) {
  return guarded(err, err_len, [&] { *done = unary(kind, first_unary, x, y, n) ? 1 : 0; });
}

#ifdef RECSEARCH_HAVE_NCCL
int c_nccl_unique_id(void* id, char* err, std::size_t err_len) {
  return guarded(err, err_len, [&] { nccl_unique_id(id); });
}

int c_nccl_open(const void* id, int size, int rank, int local_rank, int local_size,
                std::size_t axes, const int* colors, const int* keys, RecsearchGpuNccl** out,
                char* err, std::size_t err_len) {
  return guarded(err, err_len, [&] {
    *out = nccl_open(id, size, rank, local_rank, local_size, axes, colors, keys);
  });
}

int c_nccl_collective(RecsearchGpuNccl* c, RecsearchGpuCollective kind, std::size_t axis,
                      int group_size, const float* send, float* recv, std::size_t n,
                      double timeout_s, char* err, std::size_t err_len) {
  return guarded(err, err_len,
                 [&] { nccl_collective(c, kind, axis, group_size, send, recv, n, timeout_s); });
}

int c_device_info(RecsearchGpuNccl* c, char* name, std::size_t name_len, std::size_t* memory_bytes,
                  char* err, std::size_t err_len) {
  return guarded(err, err_len, [&] {
    std::string n;
    device_info(nccl_device(c), &n, memory_bytes);
    put(n, name, name_len);
  });
}

int c_time_gemm(RecsearchGpuNccl* c, RecsearchGpuDtype dtype, std::int64_t m, std::int64_t n,
                std::int64_t k, int trans_a, int trans_b, int iters, double* seconds, char* err,
                std::size_t err_len) {
  return guarded(err, err_len, [&] {
    *seconds = time_gemm(nccl_device(c), nccl_stream(c), dtype, m, n, k, trans_a != 0, trans_b != 0,
                         iters);
  });
}

int c_time_copy(RecsearchGpuNccl* c, std::size_t bytes, int iters, double* seconds, char* err,
                std::size_t err_len) {
  return guarded(err, err_len,
                 [&] { *seconds = time_copy(nccl_device(c), nccl_stream(c), bytes, iters); });
}

int c_time_collective(RecsearchGpuNccl* c, RecsearchGpuCollective kind, std::size_t axis,
                      int group_size, std::size_t n, int iters, double timeout_s, double* seconds,
                      char* err, std::size_t err_len) {
  return guarded(err, err_len, [&] {
    *seconds = nccl_time_collective(c, kind, axis, group_size, n, iters, timeout_s);
  });
}
#endif

RecsearchGpuApi make_api() {
  RecsearchGpuApi api{};
  api.abi_version = kRecsearchGpuAbiVersion;
  api.device_count = &c_device_count;
  api.gemm = &c_gemm;
  api.unary = &c_unary;
#ifdef RECSEARCH_HAVE_NCCL
  api.has_nccl = 1;
  api.nccl_id_bytes = nccl_id_bytes();
  api.nccl_unique_id = &c_nccl_unique_id;
  api.nccl_open = &c_nccl_open;
  api.nccl_collective = &c_nccl_collective;
  api.nccl_abort = &nccl_abort;
  api.nccl_close = &nccl_close;
  api.device_info = &c_device_info;
  api.time_gemm = &c_time_gemm;
  api.time_copy = &c_time_copy;
  api.time_collective = &c_time_collective;
#endif
  return api;
}

}  // namespace
}  // namespace recsearch::exec::gpu

extern "C" __attribute__((visibility("default"))) const RecsearchGpuApi* recsearch_gpu_api(
    int abi_version) {
  static const RecsearchGpuApi api = recsearch::exec::gpu::make_api();
  return abi_version == kRecsearchGpuAbiVersion ? &api : nullptr;
}
