// SPDX-License-Identifier: Apache-2.0
// A stand-in for the GPU module (librecsearch_gpu.so) for machines without
// a GPU (gpu_module_test.py, case `fake`): it shows RECSEARCH_FAKE_GPUS
// devices (default 1), computes GEMMs on the CPU (so that --check can pass),
// has no unary kernels (the CPU ones run) and no collectives. nccl_open
// prints the ranks it is given, so that the test sees the node-local rank
// and size the execution layer derives and passes through the interface,
// and that a refused run never reaches it.
// Its device timings (calibrate --backend nccl, case `calibrate`) report a
// device of known figures instead of timing one: a GEMM takes its FLOPs
// over the dtype's rate, a copy its bytes read and written over the
// memory's, a collective the cost model's latency steps plus its ring
// bytes over the link's (RECSEARCH_FAKE_LINK="LATENCY_S,BANDWIDTH_BPS"),
// so that the test can hold the cluster file calibrate writes to them.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "exec/gpu_api.h"

struct RecsearchGpuNccl {
  int rank;
};

namespace {

int fail(const char* what, char* err, size_t err_len) {
  std::snprintf(err, err_len, "%s", what);
  return 1;
}

int devices() {
  const char* v = std::getenv("RECSEARCH_FAKE_GPUS");
  return v != nullptr ? std::atoi(v) : 1;
}

int device_count(int* n, char*, size_t) {
  *n = devices();
  return 0;
}

int gemm(const RecsearchGpuGemm* g, const float* a, size_t, const float* b, size_t, float* c,
         size_t, char*, size_t) {
  for (size_t i = 0; i < g->batch; ++i) {
    for (int64_t r = 0; r < g->m; ++r) {
      for (int64_t col = 0; col < g->n; ++col) {
        double sum = 0;
        for (int64_t t = 0; t < g->k; ++t) {
          const float x =
              g->trans_a != 0 ? a[g->a_off[i] + t * g->m + r] : a[g->a_off[i] + r * g->k + t];
          const float y =
              g->trans_b != 0 ? b[g->b_off[i] + col * g->k + t] : b[g->b_off[i] + t * g->n + col];
          sum += static_cast<double>(x) * y;
        }
        c[g->c_off[i] + r * g->n + col] = static_cast<float>(sum);
      }
    }
  }
  return 0;
}

int unary(int, int, const float*, float*, size_t, int* done, char*, size_t) {
  *done = 0;
  return 0;
}

int unique_id(void* id, char*, size_t) {
  std::memset(id, 7, 16);
  return 0;
}

int open(const void*, int size, int rank, int local_rank, int local_size, size_t, const int*,
         const int*, RecsearchGpuNccl** out, char* err, size_t err_len) {
  std::fprintf(stderr, "fake nccl_open: rank %d of %d, local rank %d of %d, %d device(s)\n", rank,
               size, local_rank, local_size, devices());
  if (local_rank < 0 || local_rank >= devices()) return fail("fake: no such device", err, err_len);
  *out = new RecsearchGpuNccl{rank};
  return 0;
}

int collective(RecsearchGpuNccl*, RecsearchGpuCollective, size_t, int, const float*, float*, size_t,
               double, char* err, size_t err_len) {
  return fail("the fake GPU module has no collectives", err, err_len);
}

void abort_nccl(RecsearchGpuNccl*) {}
void close_nccl(RecsearchGpuNccl* c) { delete c; }

// The fake device's figures: GEMM FLOP/s by dtype, memory bytes per second.
constexpr double kRates[] = {19.5e12, 156e12, 312e12};  // f32, tf32, bf16
constexpr double kCopyBps = 2.0e12;
constexpr double kMemoryBytes = 80.0 * 1024 * 1024 * 1024;

int info(RecsearchGpuNccl*, char* name, size_t name_len, size_t* memory, char*, size_t) {
  std::snprintf(name, name_len, "Fake GPU");
  *memory = static_cast<size_t>(kMemoryBytes);
  return 0;
}

int time_gemm(RecsearchGpuNccl*, RecsearchGpuDtype dtype, int64_t m, int64_t n, int64_t k, int, int,
              int, double* seconds, char* err, size_t err_len) {
  if (dtype < 0 || dtype > 2) return fail("fake: no such dtype", err, err_len);
  *seconds = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) /
             kRates[dtype];
  return 0;
}

int time_copy(RecsearchGpuNccl*, size_t bytes, int, double* seconds, char*, size_t) {
  *seconds = 2.0 * static_cast<double>(bytes) / kCopyBps;
  return 0;
}

int time_collective(RecsearchGpuNccl*, RecsearchGpuCollective kind, size_t, int group_size,
                    size_t n, int, double, double* seconds, char* err, size_t err_len) {
  double latency = 0, bandwidth = 0;
  const char* v = std::getenv("RECSEARCH_FAKE_LINK");
  if (v == nullptr || std::sscanf(v, "%lf,%lf", &latency, &bandwidth) != 2 || !(bandwidth > 0))
    return fail("fake: RECSEARCH_FAKE_LINK=LATENCY_S,BANDWIDTH_BPS is not set", err, err_len);
  const double k = group_size;
  const double block = static_cast<double>(n) * sizeof(float);
  const double steps = std::ceil(std::log2(k));
  const bool all_reduce = kind == kRecsearchGpuAllReduce;
  const double bytes = all_reduce ? 2 * (k - 1) / k * block : (k - 1) * block;
  *seconds = latency * (all_reduce ? 2 * steps : steps) + bytes / bandwidth;
  return 0;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) const RecsearchGpuApi* recsearch_gpu_api(
    int abi_version) {
  static const RecsearchGpuApi api{kRecsearchGpuAbiVersion,
                                   1,
                                   &device_count,
                                   &gemm,
                                   &unary,
                                   16,
                                   &unique_id,
                                   &open,
                                   &collective,
                                   &abort_nccl,
                                   &close_nccl,
                                   &info,
                                   &time_gemm,
                                   &time_copy,
                                   &time_collective};
  return abi_version == kRecsearchGpuAbiVersion ? &api : nullptr;
}
